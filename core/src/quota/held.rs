//! What the cluster holds, kept from a Pod watch: THE counting the frontend's usage and the quota oracle
//! (`properties::quota_oracle`) share. It keeps each Pod that may hold GPUs slimmed to what counting reads
//! ([`slim`]) and counts it ([`super::demand::of_pod`]) against the tier its namespace's label says **now**:
//! [`HeldPods::refresh`] moves a relabelled namespace's Pods to their new tier (both ways), counts every Pod
//! again under a new policy, and lets go of a Pod being deleted once its deletion time plus grace period
//! has passed ([`super::demand::holds_quota`], as ResourceQuota counts).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Usage;
use super::demand::{self, Counted};
use crate::facts::Facts;
use crate::policy::{PolicySnapshot, TierScope};

/// What counting reads besides the Pod.
pub trait Counter {
    /// The policy the counts are taken under (a different one: count every Pod again).
    fn snapshot(&self) -> &Arc<PolicySnapshot>;
    /// The quota'd tier a namespace is held to now (`None`: a tier without quota, or outside the policy).
    fn tier_of(&self, namespace: &str) -> Option<String>;
    /// What a Pod of `namespace` counts in `tier`.
    fn count(&self, tier: &str, namespace: &str, pod: &Pod) -> Option<Counted>;
}

/// The [`Counter`] over a policy snapshot and cluster facts (namespaces' tiers, Nodes, claims).
pub struct FactsCounter<'a> {
    pub snapshot: &'a Arc<PolicySnapshot>,
    pub facts: &'a Facts<'a>,
}

impl Counter for FactsCounter<'_> {
    fn snapshot(&self) -> &Arc<PolicySnapshot> {
        self.snapshot
    }

    fn tier_of(&self, namespace: &str) -> Option<String> {
        let tier = match self
            .snapshot
            .tier_for((self.facts.tier_of)(namespace).as_deref())
        {
            TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
            TierScope::Ignored(_) | TierScope::Denied(_) => return None,
        };
        super::tier_quota(self.snapshot.policy.as_deref()?, &tier)?;
        Some(tier)
    }

    fn count(&self, tier: &str, namespace: &str, pod: &Pod) -> Option<Counted> {
        demand::of_pod(
            pod,
            namespace,
            tier,
            self.snapshot,
            self.facts.nodes,
            self.facts.claim_templates,
        )
    }
}

/// What one stored Pod counts, under the tier its namespace had when it was counted.
#[derive(Debug, Clone)]
struct Counting {
    tier: String,
    namespace: String,
    counted: Counted,
}

/// The Pods that hold quota and what they count.
#[derive(Debug, Default)]
pub struct HeldPods {
    /// Pods that may hold GPUs, slimmed, by UID.
    stored: HashMap<String, Pod>,
    /// What each stored Pod counts (none where its namespace's tier has no quota).
    counted: HashMap<String, Counting>,
    /// What `counted` sums to.
    usage: Usage,
    /// The quota'd tier each namespace of a stored Pod was counted under.
    tiers: HashMap<String, Option<String>>,
    /// The policy the counts were taken under (`None`: count again).
    basis: Option<Arc<PolicySnapshot>>,
    /// GpuPolicyException Pods being deleted: when each stops holding, in ms since the epoch.
    terminating: HashMap<String, u64>,
}

impl HeldPods {
    /// What the stored Pods hold, as last counted.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// Whether a Pod of this UID is stored (it may hold GPUs and holds its quota).
    pub fn holds(&self, uid: &str) -> bool {
        self.stored.contains_key(uid)
    }

    /// The stored Pods of `namespace` that `claim` serves (they name it, or it was made for one of them).
    pub fn served_by(&self, namespace: &str, claim: &super::ClaimRef) -> Vec<Pod> {
        self.stored
            .values()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| claim.serves(p))
            .cloned()
            .collect()
    }

    /// Takes a watched Pod in (`None`: deleted) and counts it; whether it holds its quota at `now_ms`.
    pub fn set(&mut self, uid: &str, pod: Option<&Pod>, cx: &dyn Counter, now_ms: u64) -> bool {
        let holds = pod.filter(|p| demand::holds_quota(p, now_ms));
        match holds.and_then(|p| Some((p, slim(p)?))) {
            Some((p, slimmed)) => {
                match demand::holds_until_ms(p) {
                    Some(t) => self.terminating.insert(uid.to_string(), t),
                    None => self.terminating.remove(uid),
                };
                self.stored.insert(uid.to_string(), slimmed);
            }
            None => {
                self.stored.remove(uid);
                self.terminating.remove(uid);
            }
        }
        self.recount(uid, cx);
        holds.is_some()
    }

    /// Replaces every stored Pod (a relist), counted at the next [`HeldPods::refresh`].
    pub fn replace_all(&mut self, pods: impl IntoIterator<Item = (String, Pod)>, now_ms: u64) {
        *self = HeldPods::default();
        for (uid, pod) in pods {
            if demand::holds_quota(&pod, now_ms)
                && let Some(slimmed) = slim(&pod)
            {
                if let Some(t) = demand::holds_until_ms(&pod) {
                    self.terminating.insert(uid.clone(), t);
                }
                self.stored.insert(uid, slimmed);
            }
        }
    }

    /// Counts every Pod again at the next [`HeldPods::refresh`] (claims, templates or Nodes a count reads
    /// may have changed without a Pod event).
    pub fn invalidate(&mut self) {
        self.basis = None;
    }

    /// Brings the counts in step with `now_ms`: every Pod again under a new policy, a relabelled namespace's
    /// Pods under its new tier, a terminating Pod whose grace period has passed let go. The UIDs let go.
    pub fn refresh(&mut self, cx: &dyn Counter, now_ms: u64) -> Vec<String> {
        let expired: Vec<String> = self
            .terminating
            .iter()
            .filter(|(_, until)| now_ms > **until)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &expired {
            self.terminating.remove(uid);
            self.stored.remove(uid);
            self.recount(uid, cx);
        }
        if !self
            .basis
            .as_ref()
            .is_some_and(|b| Arc::ptr_eq(b, cx.snapshot()))
        {
            self.recount_all(cx);
            return expired;
        }
        let moved: HashSet<String> = self
            .tiers
            .iter()
            .filter(|(ns, counted_under)| cx.tier_of(ns) != **counted_under)
            .map(|(ns, _)| ns.clone())
            .collect();
        if !moved.is_empty() {
            self.tiers.retain(|ns, _| !moved.contains(ns));
            let uids: Vec<String> = self
                .stored
                .iter()
                .filter(|(_, p)| {
                    p.metadata
                        .namespace
                        .as_ref()
                        .is_some_and(|n| moved.contains(n))
                })
                .map(|(uid, _)| uid.clone())
                .collect();
            for uid in uids {
                self.recount(&uid, cx);
            }
        }
        expired
    }

    fn recount_all(&mut self, cx: &dyn Counter) {
        self.counted.clear();
        self.usage = Usage::default();
        self.tiers.clear();
        let uids: Vec<String> = self.stored.keys().cloned().collect();
        for uid in uids {
            self.recount(&uid, cx);
        }
        self.basis = Some(cx.snapshot().clone());
    }

    /// Counts the stored Pods of `namespace` again: a claim or claim template there changed (what a Pod
    /// counts reads them), which no Pod event tells.
    pub fn recount_namespace(&mut self, namespace: &str, cx: &dyn Counter) {
        let uids: Vec<String> = self
            .stored
            .iter()
            .filter(|(_, p)| p.metadata.namespace.as_deref() == Some(namespace))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.recount(&uid, cx);
        }
    }

    /// Counts one stored Pod again (or takes back what a Pod no longer stored counted).
    fn recount(&mut self, uid: &str, cx: &dyn Counter) {
        if let Some(old) = self.counted.remove(uid) {
            self.usage.add(&old.tier, &old.namespace, &old.counted, -1);
        }
        let Some(pod) = self.stored.get(uid) else {
            return;
        };
        let Some(namespace) = pod.metadata.namespace.clone() else {
            return;
        };
        let tier = self
            .tiers
            .entry(namespace.clone())
            .or_insert_with(|| cx.tier_of(&namespace))
            .clone();
        let Some(tier) = tier else { return };
        if let Some(counted) = cx.count(&tier, &namespace, pod) {
            self.usage.add(&tier, &namespace, &counted, 1);
            self.counted.insert(
                uid.to_string(),
                Counting {
                    tier,
                    namespace,
                    counted,
                },
            );
        }
    }
}

/// A Pod slimmed to what counting reads, `None` for a Pod that cannot hold GPUs whatever the policy says (no
/// extended resource, no DRA claim) or has no namespace.
pub fn slim(pod: &Pod) -> Option<Pod> {
    let spec = pod.spec.as_ref()?;
    let native = |k: &str| {
        matches!(k, "cpu" | "memory" | "ephemeral-storage" | "storage")
            || k.starts_with("hugepages-")
    };
    let extended = |c: &Container| {
        c.resources.iter().any(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
                .any(|k| !native(k))
        })
    };
    let claims = spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty());
    let mut containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    if !claims && !containers.any(extended) {
        return None;
    }
    let keep = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        restart_policy: c.restart_policy.clone(),
        ..Default::default()
    };
    let m = &pod.metadata;
    m.namespace.as_ref()?;
    Some(Pod {
        metadata: ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: spec.containers.iter().map(keep).collect(),
            init_containers: spec
                .init_containers
                .as_ref()
                .map(|cs| cs.iter().map(keep).collect()),
            resource_claims: spec.resource_claims.clone(),
            node_name: spec.node_name.clone(),
            node_selector: spec.node_selector.clone(),
            affinity: spec.affinity.clone(),
            ..Default::default()
        }),
        status: pod.status.as_ref().map(|s| PodStatus {
            phase: s.phase.clone(),
            resource_claim_statuses: s.resource_claim_statuses.clone(),
            ..Default::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pod::gpu_resources::NoClaimTemplates;
    use crate::tier_bound::NoNodes;

    const QUOTAS: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { max: 4 } }
    - tier: silver
      classes: { L4-24GB: { max: 4 } }
";

    fn snapshot(quotas: &str) -> Arc<PolicySnapshot> {
        let text = format!("{}{quotas}", gpu_admission_policy::DEFAULT_POLICY_YAML);
        let policy = gpu_admission_policy::parse(&text, "p.yaml").unwrap();
        Arc::new(PolicySnapshot::from_policy(Arc::new(policy)))
    }

    /// Runs `f` with a counter whose namespaces have `tiers`.
    fn counting<R>(
        snapshot: &Arc<PolicySnapshot>,
        tiers: &[(&str, &str)],
        f: impl FnOnce(&dyn Counter) -> R,
    ) -> R {
        let tiers: BTreeMap<String, String> = tiers
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        let tier_of = |ns: &str| tiers.get(ns).cloned();
        let grants = crate::authority::Grants::none();
        let facts = Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &NoNodes,
            grants: &grants,
        };
        f(&FactsCounter {
            snapshot,
            facts: &facts,
        })
    }

    /// A Pod of `ns` pinned to L4 asking for `gpus`, being deleted with a grace period when given.
    fn pod(ns: &str, name: &str, gpus: u32, deleted: Option<(&str, i64)>) -> Pod {
        let mut p = serde_json::json!({"metadata": {"namespace": ns, "name": name, "uid": name},
            "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}});
        if let Some((at, grace)) = deleted {
            p["metadata"]["deletionTimestamp"] = at.into();
            p["metadata"]["deletionGracePeriodSeconds"] = grace.into();
        }
        serde_json::from_value(p).unwrap()
    }

    fn tier_total(h: &HeldPods, tier: &str) -> u64 {
        h.usage()
            .namespaces
            .values()
            .filter(|n| n.tier == tier)
            .map(|n| n.total)
            .sum()
    }

    #[test]
    fn a_pod_counts_once_an_update_replaces_it_and_a_delete_frees_it() {
        let snap = snapshot(QUOTAS);
        counting(&snap, &[("a", "bronze")], |cx| {
            let mut h = HeldPods::default();
            h.refresh(cx, 0);
            assert!(h.set("p", Some(&pod("a", "p", 1, None)), cx, 0));
            h.set("p", Some(&pod("a", "p", 2, None)), cx, 0);
            assert_eq!(h.usage().namespaces["a"].total, 2000);
            assert!(!h.set("p", None, cx, 0));
            assert_eq!(h.usage(), &Usage::default());
            // A CPU-only Pod is not stored at all.
            let cpu: Pod =
                serde_json::from_value(serde_json::json!({"metadata": {"namespace": "a",
                "name": "cpu", "uid": "cpu"}, "spec": {"containers": [{"name": "c"}]}}))
                .unwrap();
            h.set("cpu", Some(&cpu), cx, 0);
            assert!(!h.holds("cpu"));
        });
    }

    /// A namespace's Pods belong to the tier its label says at the decision: relabelled, they move at the
    /// next refresh, in both directions; a tier without quota holds nothing, and a policy change counts
    /// every Pod again.
    #[test]
    fn a_relabelled_namespace_moves_its_pods_to_its_new_tier_at_once() {
        let snap = snapshot(QUOTAS);
        let mut h = HeldPods::default();
        counting(&snap, &[("a", "bronze")], |cx| {
            h.refresh(cx, 0);
            h.set("p", Some(&pod("a", "p", 3, None)), cx, 0);
        });
        let totals = |h: &HeldPods| (tier_total(h, "bronze"), tier_total(h, "silver"));
        assert_eq!(totals(&h), (3000, 0));
        counting(&snap, &[("a", "silver")], |cx| h.refresh(cx, 0));
        assert_eq!(totals(&h), (0, 3000));
        counting(&snap, &[("a", "bronze")], |cx| h.refresh(cx, 0));
        assert_eq!(totals(&h), (3000, 0));
        // Gold has no quota: nothing counted; back in bronze, counted again.
        counting(&snap, &[("a", "gold")], |cx| h.refresh(cx, 0));
        assert_eq!(h.usage(), &Usage::default());
        counting(&snap, &[("a", "bronze")], |cx| h.refresh(cx, 0));
        assert_eq!(totals(&h), (3000, 0));
        // The policy drops bronze's quota: counted again without it.
        let without = snapshot(
            "\nquotas:\n  tiers:\n    - tier: silver\n      classes: { L4-24GB: { max: 4 } }\n",
        );
        counting(&without, &[("a", "bronze")], |cx| h.refresh(cx, 0));
        assert_eq!(h.usage(), &Usage::default());
    }

    /// A Pod being deleted counts until its deletion time plus its grace period, then not at all; a relist
    /// keeps that.
    #[test]
    fn a_terminating_pod_counts_until_its_grace_period_has_passed() {
        let snap = snapshot(QUOTAS);
        let at = 1_795_946_400_000u64; // 2026-11-29T10:00:00Z
        let deleting = pod("a", "p", 2, Some(("2026-11-29T10:00:00Z", 600)));
        counting(&snap, &[("a", "bronze")], |cx| {
            let mut h = HeldPods::default();
            h.refresh(cx, at);
            h.set("p", Some(&deleting), cx, at);
            assert!(h.refresh(cx, at + 599_000).is_empty());
            assert_eq!(tier_total(&h, "bronze"), 2000);
            assert_eq!(h.refresh(cx, at + 600_001), ["p"]);
            assert_eq!(tier_total(&h, "bronze"), 0);
            h.replace_all([("p".to_string(), slim(&deleting).unwrap())], at);
            h.refresh(cx, at);
            assert_eq!(tier_total(&h, "bronze"), 2000);
            h.refresh(cx, at + 600_001);
            assert_eq!(tier_total(&h, "bronze"), 0);
        });
    }
}
