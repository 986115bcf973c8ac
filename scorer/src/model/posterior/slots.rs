//! The posterior's slots: the policy's job types, then the unlisted ones learned, each with its prior and
//! its observed cells brought to one GPU.
use std::collections::HashMap;

use super::shared::Families;
use super::{Slot, tenancy};
use crate::model::estimate::{RuntimeTable, Stat};
use crate::model::scaling;
use crate::model::tenants;
use crate::model::unlisted::UnlistedJobTypes;
use crate::policy::Policy;

/// The policy's job types, then the unlisted ones learned (name order), with their observed cells.
pub(super) fn slots(
    policy: &Policy,
    runtimes: &RuntimeTable,
    unlisted: &UnlistedJobTypes,
    owners: &tenants::Owners,
) -> (Vec<Slot>, HashMap<String, usize>) {
    let cells = |name: &str| -> (Vec<(usize, u64, f64)>, scaling::Exponent) {
        let Some(by_class) = runtimes.by_job.get(name) else {
            return (Vec::new(), scaling::Exponent::prior(&policy.learning));
        };
        let exponent = scaling::exponent(by_class, runtimes.sizes(name), &policy.learning);
        // Stored with s₀; at one GPU with the job type's own s.
        let one_gpu = |st: &Stat| {
            st.mean() - exponent.stored_excess(&policy.learning, st.log_gpus() / st.count as f64)
        };
        let mut cells: Vec<(usize, u64, f64)> = by_class
            .iter()
            .filter(|(_, st)| st.count > 0)
            .filter_map(|(c, st)| Some((policy.class_index(c)?, st.count, one_gpu(st))))
            .collect();
        cells.sort_by_key(|c| c.0);
        (cells, exponent)
    };
    let families = Families::of(policy);
    let mut slots: Vec<Slot> = policy
        .job_types
        .iter()
        .map(|j| {
            let (cells, scaling) = cells(&j.name);
            Slot {
                profile: j.profile,
                workload: j.workload_class.index(),
                family: families.declared(j.family.as_deref()),
                cells,
                scaling,
                shared_weight: 1.0,
                bounded: false,
            }
        })
        .collect();
    let members = tenancy::Members::of(policy, &families, owners, unlisted.seen.keys());
    let mut names = HashMap::new();
    for (name, seen) in &unlisted.seen {
        if policy.job_index(name).is_some() {
            continue;
        }
        // A tenant's own name for a listed job type has that job type's prior.
        let listed = policy
            .job_index(tenants::base(name))
            .map(|j| &policy.job_types[j]);
        let w = listed.map_or_else(|| seen.workload_class(), |j| j.workload_class);
        names.insert(name.clone(), slots.len());
        let family = listed.map_or_else(
            || families.of_name(name).filter(|&f| members.admit(f, name)),
            |j| families.declared(j.family.as_deref()),
        );
        let (cells, scaling) = cells(name);
        slots.push(Slot {
            profile: listed.map_or_else(|| policy.workload_profile(w), |j| j.profile),
            workload: w.index(),
            family,
            cells,
            scaling,
            shared_weight: shared_weight(policy, name),
            bounded: tenants::is_tenant_name(name),
        });
    }
    tenancy::invented_weights(policy, &mut slots, &names, owners);
    (slots, names)
}

/// How much an unlisted slot's runs weigh in the shared parameters before [`tenancy::invented_weights`]: a
/// tenant's own name for a listed job type without a declared owner ([`tenants::Ownership::PerTenant`])
/// weighs as one job type (every tenant's runs of it are under such names: what it teaches every job
/// type is learned from them, at most one job type's worth per tenant however many runs it reports); a
/// tenant's own name for a job type another tenant owns weighs nothing (its runs teach its own cells
/// only); any other learned job type weighs one.
fn shared_weight(policy: &Policy, name: &str) -> f64 {
    if !tenants::is_tenant_name(name) {
        return 1.0;
    }
    match tenants::ownership(policy, tenants::base(name)) {
        tenants::Ownership::PerTenant => 1.0,
        tenants::Ownership::Declared(_) | tenants::Ownership::FirstReporter => 0.0,
    }
}
