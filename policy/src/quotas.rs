//! Elastic GPU quotas: per tier, optionally per namespace within it, per GPU class and a total
//! across classes, a guaranteed `min` and a ceiling `max` in whole-GPU equivalents. The file's shape
//! ([`QuotasSpec`]) and the validated model ([`Quotas`]); the checks are in `validate/quotas.rs`.
//!
//! Amounts are kept in milli-GPUs ([`MilliGpus`]) so that sums and comparisons are exact: a MIG slice or a
//! share (HAMi memory) counts as its fraction of the class's device where the class enforces shares
//! (`sharesEnforced`), rounded up to 1/1000.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Thousandths of a whole GPU.
pub type MilliGpus = u64;

/// The `quotas` section of the policy file.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotasSpec {
    /// GPUs of each class the cluster holds, where the operator states it: the tiers' `min`s of a class must
    /// fit in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, f64>,
    /// The PriorityClass a Pod admitted beyond its tier's `min` gets (preemptible, below every bucket).
    #[serde(default)]
    pub borrowing_priority_class: BorrowingClassSpec,
    /// The GPU classes whose nodes enforce a share's limits inside the container (HAMi's memory and core
    /// limits): only there a share counts as its fraction of a device; anywhere else a share is a whole
    /// device, since nothing stops its container from using all of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares_enforced: Vec<String>,
    pub tiers: Vec<TierQuotaSpec>,
}

/// The PriorityClass of borrowers.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BorrowingClassSpec {
    pub name: String,
    pub value: i32,
}

impl Default for BorrowingClassSpec {
    fn default() -> Self {
        Self {
            name: "gpu-borrowed".to_string(),
            value: 100,
        }
    }
}

/// One tier's quota.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierQuotaSpec {
    pub tier: String,
    /// Per GPU class of the tier.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, LimitSpec>,
    /// Across the tier's classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<LimitSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceQuotaSpec>,
}

/// One namespace's share of its tier's quota.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceQuotaSpec {
    pub namespace: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, LimitSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<LimitSpec>,
}

/// A guaranteed minimum and a ceiling, in GPUs (fractions to 1/1000).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// A validated limit: `min <= max`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// Guaranteed (0 when not stated).
    pub min: MilliGpus,
    /// Ceiling; `None` = no ceiling.
    pub max: Option<MilliGpus>,
}

/// Limits per catalog class (indexed like [`crate::Policy::classes`]) and across them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub classes: Vec<Option<Limit>>,
    pub total: Option<Limit>,
}

impl Limits {
    /// The limit of one class, if any.
    pub fn class(&self, class: usize) -> Option<Limit> {
        self.classes.get(class).copied().flatten()
    }
}

/// A validated namespace quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceQuota {
    pub namespace: String,
    pub limits: Limits,
}

/// A validated tier quota.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierQuota {
    pub limits: Limits,
    pub namespaces: Vec<NamespaceQuota>,
}

impl TierQuota {
    pub fn namespace(&self, name: &str) -> Option<&NamespaceQuota> {
        self.namespaces.iter().find(|n| n.namespace == name)
    }
}

/// The PriorityClass borrowers get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BorrowingClass {
    pub name: String,
    pub value: i32,
}

/// The validated `quotas` section; empty (`tiers` all `None`) when the policy has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    /// Indexed like [`crate::Policy::tiers`].
    pub tiers: Vec<Option<TierQuota>>,
    /// Indexed like the catalog.
    pub capacity: Vec<Option<MilliGpus>>,
    /// Indexed like the catalog: whether the class's nodes enforce shares (`sharesEnforced`).
    pub shares_enforced: Vec<bool>,
    /// `None` when the policy has no quotas.
    pub borrowing: Option<BorrowingClass>,
}

impl Quotas {
    /// Whether any tier has a quota.
    pub fn any(&self) -> bool {
        self.tiers.iter().any(Option::is_some)
    }

    pub fn tier(&self, tier: usize) -> Option<&TierQuota> {
        self.tiers.get(tier).and_then(Option::as_ref)
    }

    /// Whether the nodes of catalog class `class` enforce shares.
    pub fn enforces_shares(&self, class: usize) -> bool {
        self.shares_enforced.get(class).copied().unwrap_or(false)
    }
}

/// GPUs as milli-GPUs, `None` when negative, not finite or finer than 1/1000.
pub fn to_milli(gpus: f64) -> Option<MilliGpus> {
    let m = gpus * 1000.0;
    (gpus.is_finite() && gpus >= 0.0 && m <= 1e15 && (m - m.round()).abs() < 1e-6)
        .then(|| m.round() as MilliGpus)
}

/// Milli-GPUs as GPUs for messages: `30`, `0.5`, `2.125`.
pub fn format_gpus(milli: MilliGpus) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        let s = format!("{}.{:03}", milli / 1000, milli % 1000);
        s.trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_gpus_are_exact_and_refuse_what_they_cannot_hold() {
        assert_eq!(to_milli(32.0), Some(32_000));
        assert_eq!(to_milli(0.125), Some(125));
        assert_eq!(to_milli(0.1), Some(100));
        assert_eq!(to_milli(0.0005), None);
        assert_eq!(to_milli(-1.0), None);
        assert_eq!(to_milli(f64::NAN), None);
        assert_eq!(format_gpus(30_000), "30");
        assert_eq!(format_gpus(500), "0.5");
        assert_eq!(format_gpus(2_125), "2.125");
    }
}
