//! The ledger as stored: one `QuotaLedger` (`gpu-admission.io/v1alpha1`, namespaced, in the frontend's
//! namespace) **per quota'd tier**, named by [`object_name`], holding that tier's reservations. Every replica
//! writes a tier's reservations to that tier's object only, so the writes of one tier's burst are never in
//! another tier's way: each object has its own writer per replica and its own versions to conflict on.
//!
//! `entries` is the JSON list of the tier's [`Entry`]s as a string: the apiserver stores a write without
//! walking each entry through a schema (a burst rewrites thousands of entries several times a second).
//!
//! A custom resource rather than a ConfigMap per tier: the frontend's RBAC grants `quotaledgers` in its own
//! namespace, with no object names to render from the policy when a tier is added.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::Entry;

/// The API group, version, kind and plural of a tier's ledger.
pub const GROUP: &str = "gpu-admission.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "QuotaLedger";
pub const PLURAL: &str = "quotaledgers";

/// One tier's ledger as stored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct QuotaLedger {
    pub metadata: ObjectMeta,
    /// The tier whose reservations it holds (its name may differ: [`object_name`]).
    #[serde(default)]
    pub tier: String,
    /// The JSON list of the tier's [`Entry`]s; empty for none.
    #[serde(default)]
    pub entries: String,
}

crate::resource::namespaced_resource!(QuotaLedger, group: GROUP, version: VERSION, kind: KIND, plural: PLURAL,
    serialized: [tier, entries]);

impl QuotaLedger {
    /// `tier`'s ledger holding `entries`, to be written on top of `resource_version` (`None`: created).
    pub fn new(
        tier: &str,
        entries: &[Entry],
        resource_version: Option<String>,
    ) -> Result<Self, serde_json::Error> {
        let labels = [
            ("app.kubernetes.io/name", "gpu-admission-webhook"),
            ("app.kubernetes.io/component", "quota-ledger"),
            ("app.kubernetes.io/part-of", "gpu-admission"),
        ];
        Ok(Self {
            metadata: ObjectMeta {
                name: Some(object_name(tier)),
                resource_version,
                labels: Some(
                    (labels.iter())
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            tier: tier.to_string(),
            entries: serde_json::to_string(entries)?,
        })
    }

    /// Its entries: only `tier`'s (another tier's in this object would be written by that tier's writers
    /// too, and counted twice).
    pub fn entries_of(&self, tier: &str) -> Result<Vec<Entry>, serde_json::Error> {
        if self.entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut entries: Vec<Entry> = serde_json::from_str(&self.entries)?;
        entries.retain(|e| e.tier == tier);
        Ok(entries)
    }
}

/// The name of `tier`'s ledger: the tier itself when it is a DNS label (what `kubectl get quotaledgers`
/// then shows), else `tier-` and the SHA-256 of the tier in hex. That name is 69 characters, longer than
/// any label value, so no tier's own name is ever another tier's ledger.
pub fn object_name(tier: &str) -> String {
    if gpu_admission_policy::names::is_namespace_name(tier) {
        tier.to_string()
    } else {
        format!("tier-{}", hex::encode(Sha256::digest(tier.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::demand::Counted;

    #[test]
    fn a_tier_s_name_is_its_ledger_s_unless_no_object_may_bear_it() {
        assert_eq!(object_name("silver"), "silver");
        let odd = object_name("Gold_Tier");
        assert_eq!(odd.len(), 69);
        assert!(odd.starts_with("tier-"));
        assert!(!gpu_admission_policy::names::is_label_value(&odd));
        assert_ne!(odd, object_name("gold_tier"));
    }

    #[test]
    fn a_ledger_reads_back_its_own_tier_s_entries_only() {
        let counted = Counted {
            classes: [("L4-24GB".to_string(), 1000)].into(),
            total: 1000,
        };
        let mine = Entry::new("u1", "silver", "team-a", &counted, 5);
        let other = Entry::new("u2", "gold", "team-b", &counted, 6);
        let ledger =
            QuotaLedger::new("silver", &[mine.clone(), other], Some("7".into())).expect("encodes");
        let json = serde_json::to_value(&ledger).expect("serializes");
        assert_eq!(json["kind"], KIND);
        assert_eq!(json["apiVersion"], "gpu-admission.io/v1alpha1");
        assert_eq!(json["metadata"]["resourceVersion"], "7");
        let back: QuotaLedger = serde_json::from_value(json).expect("reads");
        assert_eq!(back.entries_of("silver").expect("entries"), vec![mine]);
        assert_eq!(
            QuotaLedger::default().entries_of("silver").expect("empty"),
            []
        );
    }
}
