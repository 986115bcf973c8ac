//! Cluster facts the decision needs: the namespace's tier, the PriorityClasses and the Nodes. Read from watch caches
//! (kube::runtime reflectors, never a per-request GET), or, with `--no-kube`, from flags and the policy.

pub(crate) mod access;
pub(crate) mod checkpoints;
pub(crate) mod dra;
pub(crate) mod exceptions;
pub(crate) mod kube_cache;
pub(crate) mod namespace_tiers;
pub(crate) mod ns_locks;
pub(crate) mod optional_api;
pub(crate) mod quota_ledger;
pub(crate) mod tier_ledger;
pub(crate) mod usage;
pub(crate) mod workloads;

use std::collections::HashMap;
use std::sync::Arc;

use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::{ClaimTemplates, NoClaimTemplates};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::priority_class::PriorityClassLookup;
use gpu_admission_core::tier_bound::{self, NodeClass};

/// Where namespace tiers and PriorityClasses come from.
pub enum ClusterFacts {
    /// Watch caches of a real cluster.
    Kube(kube_cache::KubeCaches),
    /// `--no-kube`: tiers from `--namespace-tier NS=TIER`; PriorityClasses from the policy's buckets (looked up
    /// by the caller in the policy snapshot).
    Static { tiers: HashMap<String, String> },
    /// A restricted instance with `--no-kube`: the tiers of its namespaces read by name (nothing else of
    /// the cluster); PriorityClasses from the policy's buckets.
    Read(Arc<namespace_tiers::NamespaceTiers>),
}

impl ClusterFacts {
    /// The tier `namespace`'s label `tier_label` (the policy's) names (`--no-kube`: the stated tier).
    pub(crate) fn namespace_tier(&self, namespace: &str, tier_label: &str) -> Option<String> {
        match self {
            ClusterFacts::Kube(k) => k.namespace_tier(namespace, tier_label),
            ClusterFacts::Static { tiers } => tiers.get(namespace).cloned(),
            ClusterFacts::Read(tiers) => tiers.tier(namespace, tier_label),
        }
    }

    /// `true` once the caches hold a complete first listing (always true without Kubernetes).
    pub(crate) fn is_synced(&self) -> bool {
        match self {
            ClusterFacts::Kube(k) => k.is_synced(),
            ClusterFacts::Static { .. } => true,
            ClusterFacts::Read(tiers) => tiers.is_synced(),
        }
    }

    /// The cluster's PriorityClasses, or `None` in `--no-kube` mode (then the policy's buckets are used).
    pub(crate) fn priority_classes(&self) -> Option<&dyn PriorityClassLookup> {
        match self {
            ClusterFacts::Kube(k) => Some(k),
            ClusterFacts::Static { .. } | ClusterFacts::Read(_) => None,
        }
    }

    /// The class of a Node by name, as the policy's catalog labels it (unknown without Kubernetes).
    fn node_class(&self, name: &str, policy: &PolicySnapshot) -> NodeClass {
        match self {
            ClusterFacts::Kube(k) => match k.node_labels(name) {
                Some(labels) => tier_bound::node_class(labels.as_ref(), policy.catalog()),
                None => NodeClass::Unknown,
            },
            ClusterFacts::Static { .. } | ClusterFacts::Read(_) => NodeClass::Unknown,
        }
    }

    /// What a Pod's quota count reads that changed since last asked, without a Pod event: the namespaces
    /// whose DRA claims or templates changed, and whether anything cluster-wide did (a DeviceClass, a Node's
    /// labels: the class its Pods count in). Nothing without a cluster.
    pub(crate) fn take_count_changes(&self) -> (std::collections::BTreeSet<String>, bool) {
        match self {
            ClusterFacts::Kube(k) => {
                let (namespaces, cluster) = k.dra().take_changes();
                (namespaces, cluster | k.take_node_changes())
            }
            ClusterFacts::Static { .. } | ClusterFacts::Read(_) => Default::default(),
        }
    }

    /// The facts every decision reads, borrowed from the caches for the length of `decide`.
    pub(crate) fn with_facts<R>(
        &self,
        policy: &PolicySnapshot,
        grants: &Grants,
        decide: impl FnOnce(&Facts<'_>) -> R,
    ) -> R {
        let tier_label = policy.tier_label();
        let tier_of = |ns: &str| self.namespace_tier(ns, tier_label);
        let nodes = |name: &str| self.node_class(name, policy);
        let claim_templates: &dyn ClaimTemplates = match self {
            ClusterFacts::Kube(k) => k.dra(),
            ClusterFacts::Static { .. } | ClusterFacts::Read(_) => &NoClaimTemplates,
        };
        decide(&Facts {
            tier_of: &tier_of,
            priority_classes: self.priority_classes(),
            claim_templates,
            nodes: &nodes,
            grants,
        })
    }
}

/// Parses `NS=TIER` pairs (from repeated `--namespace-tier` or comma-separated `WEBHOOK_NAMESPACE_TIER`).
pub(crate) fn parse_namespace_tiers(pairs: &[String]) -> anyhow::Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    for p in pairs.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        match p.split_once('=') {
            Some((ns, tier)) if !ns.trim().is_empty() && !tier.trim().is_empty() => {
                out.insert(ns.trim().to_string(), tier.trim().to_string());
            }
            _ => anyhow::bail!("--namespace-tier {p:?}: expected NAMESPACE=TIER"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_tier_pairs() {
        let t = parse_namespace_tiers(&["ml=gold".into(), " batch = bronze ".into(), "".into()])
            .unwrap();
        assert_eq!(t["ml"], "gold");
        assert_eq!(t["batch"], "bronze");
        assert!(parse_namespace_tiers(&["ml".into()]).is_err());
        assert!(parse_namespace_tiers(&["=gold".into()]).is_err());
        let facts = ClusterFacts::Static { tiers: t };
        let label = gpu_admission_core::names::DEFAULT_TIER_LABEL;
        assert_eq!(facts.namespace_tier("ml", label).as_deref(), Some("gold"));
        assert_eq!(facts.namespace_tier("web", label), None);
        assert!(facts.is_synced());
    }
}
