//! What a tenant's job types may teach the parameters other tenants' job types read: which unlisted job
//! types join a family ([`Members`]), and how much a tenant's invented job types weigh in the shared
//! parameters ([`invented_weights`]). See [`crate::model::tenants`].
use std::collections::HashMap;

use super::Slot;
use super::shared::Families;
use crate::model::tenants;
use crate::policy::Policy;

/// Which unlisted job types join the family their name matches: only those of a tenant that owns one of
/// the family's listed job types (or reported without a namespace). So a tenant cannot join another
/// tenant's family by naming its own job type to match the pattern, and its runs teach no family offset
/// but its own family's: the bound on what one tenant's runs move through a family is zero.
pub(super) struct Members<'a> {
    owners: &'a tenants::Owners,
    /// Per family: the owners of its listed job types (those that have reported runs).
    listed_owners: Vec<Vec<&'a str>>,
}

impl<'a> Members<'a> {
    /// `learned`: the names of the unlisted job types learned (a tenant that runs a listed job type of a
    /// family under its own name is of the family's owners).
    pub(super) fn of(
        policy: &Policy,
        families: &Families,
        owners: &'a tenants::Owners,
        learned: impl Iterator<Item = &'a String>,
    ) -> Self {
        let mut listed_owners: Vec<Vec<&'a str>> = vec![Vec::new(); families.len()];
        let mut add = |f: usize, owner: &'a str| {
            if !listed_owners[f].contains(&owner) {
                listed_owners[f].push(owner);
            }
        };
        for j in &policy.job_types {
            if let (Some(f), Some(owner)) = (
                families.declared(j.family.as_deref()),
                owners.0.get(&j.name),
            ) {
                add(f, owner.as_str());
            }
        }
        for name in learned {
            if let Some((base, tenant)) = name.split_once(tenants::SEPARATOR)
                && let Some(j) = policy.job_index(base)
                && let Some(f) = families.declared(policy.job_types[j].family.as_deref())
            {
                add(f, tenant);
            }
        }
        Self {
            owners,
            listed_owners,
        }
    }

    /// Whether the unlisted job type `name`, whose name matches family `f`'s pattern, is of the family.
    pub(super) fn admit(&self, f: usize, name: &str) -> bool {
        match self.owners.0.get(name) {
            None => true,
            Some(owner) => self.listed_owners[f].contains(&owner.as_str()),
        }
    }
}

/// Bounds what a tenant's invented job types (not listed, of no family) teach the shared parameters:
/// together they weigh as many job types as the listed ones the tenant owns (with runs), at least one. So
/// inventing job types adds nothing to a tenant's say in what every job type shares, while a tenant's
/// few own job types in a cluster of one tenant count fully.
pub(super) fn invented_weights(
    policy: &Policy,
    slots: &mut [Slot],
    names: &HashMap<String, usize>,
    owners: &tenants::Owners,
) {
    let mut listed: HashMap<&str, f64> = HashMap::new();
    for (j, slot) in policy.job_types.iter().zip(slots.iter()) {
        if let Some(owner) = owners.0.get(&j.name)
            && !slot.cells.is_empty()
        {
            *listed.entry(owner.as_str()).or_default() += 1.0;
        }
    }
    // A listed job type a tenant runs under its own name (none declares an owner) counts as one it owns.
    for (name, &k) in names {
        if let Some((base, tenant)) = name.split_once(tenants::SEPARATOR)
            && policy.job_index(base).is_some()
            && slots[k].shared_weight > 0.0
            && !slots[k].cells.is_empty()
        {
            *listed.entry(tenant).or_default() += 1.0;
        }
    }
    let invented = |name: &str, slot: &Slot| {
        (slot.family.is_none() && slot.shared_weight > 0.0 && !slot.cells.is_empty())
            .then(|| owners.0.get(name))
            .flatten()
    };
    let mut count: HashMap<&str, f64> = HashMap::new();
    for (name, &k) in names {
        if let Some(owner) = invented(name, &slots[k]) {
            *count.entry(owner.as_str()).or_default() += 1.0;
        }
    }
    for (name, &k) in names {
        if let Some(owner) = invented(name, &slots[k]) {
            let allowed = listed.get(owner.as_str()).copied().unwrap_or(0.0).max(1.0);
            slots[k].shared_weight = (allowed / count[owner.as_str()]).min(1.0);
        }
    }
}
