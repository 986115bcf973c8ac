//! Cluster facts the decision needs: the namespace's tier and the PriorityClasses. Read from watch caches
//! (kube::runtime reflectors, never a per-request GET), or, with `--no-kube`, from flags and the policy.

pub(crate) mod checkpoints;
pub(crate) mod kube_cache;
pub(crate) mod workloads;

use std::collections::HashMap;

use gpu_admission_core::priority_class::PriorityClassLookup;

/// Where namespace tiers and PriorityClasses come from.
pub enum ClusterFacts {
    /// Watch caches of a real cluster.
    Kube(kube_cache::KubeCaches),
    /// `--no-kube`: tiers from `--namespace-tier NS=TIER`; PriorityClasses from the policy's buckets (looked up
    /// by the caller in the policy snapshot).
    Static { tiers: HashMap<String, String> },
}

impl ClusterFacts {
    pub(crate) fn namespace_tier(&self, namespace: &str) -> Option<String> {
        match self {
            ClusterFacts::Kube(k) => k.namespace_tier(namespace),
            ClusterFacts::Static { tiers } => tiers.get(namespace).cloned(),
        }
    }

    /// `true` once the caches hold a complete first listing (always true without Kubernetes).
    pub(crate) fn is_synced(&self) -> bool {
        match self {
            ClusterFacts::Kube(k) => k.is_synced(),
            ClusterFacts::Static { .. } => true,
        }
    }

    /// The cluster's PriorityClasses, or `None` in `--no-kube` mode (then the policy's buckets are used).
    pub(crate) fn priority_classes(&self) -> Option<&dyn PriorityClassLookup> {
        match self {
            ClusterFacts::Kube(k) => Some(k),
            ClusterFacts::Static { .. } => None,
        }
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
        assert_eq!(facts.namespace_tier("ml").as_deref(), Some("gold"));
        assert_eq!(facts.namespace_tier("web"), None);
        assert!(facts.is_synced());
    }
}
