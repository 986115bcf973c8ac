//! What the cluster holds, kept from a Pod watch: THE counting the frontend's usage and the quota oracle
//! (`properties::quota_oracle`) share. It keeps each Pod that may hold GPUs as what counting reads of it
//! ([`HeldPod`]: policy-independent, so a new policy counts it again) and counts it ([`super::demand::of_pod`]) against the tier its namespace's label says **now**:
//! [`HeldPods::refresh`] moves a relabelled namespace's Pods to their new tier (both ways), counts every Pod
//! again under a new policy, and lets go of a Pod being deleted once its deletion time plus grace period
//! has passed ([`super::demand::holds_quota`], as ResourceQuota counts).
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::Usage;
use gpu_admission_policy::quotas::MilliGpus;

use super::demand::{self, Counted};
use super::watched::{HeldPod, WatchedPod};
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

/// What one stored Pod counts, under the tier its namespace had when it was counted (the classes as a slice:
/// a fraction of a map's node, kept for every GPU Pod).
#[derive(Debug, Clone)]
struct Counting {
    tier: String,
    classes: Box<[(String, MilliGpus)]>,
    total: MilliGpus,
}

/// A stored Pod and what it counts (`None` where its namespace's tier has no quota).
#[derive(Debug, Clone)]
struct Held {
    pod: HeldPod,
    counting: Option<Counting>,
}

/// The Pods that hold quota and what they count.
#[derive(Debug, Default)]
pub struct HeldPods {
    /// Pods that may hold GPUs, as counting reads them, and what each counts, by UID.
    stored: HashMap<String, Held>,
    /// What the stored Pods' counts sum to.
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
            .iter()
            .filter(|(_, h)| h.pod.namespace == namespace)
            .map(|(uid, h)| h.pod.to_pod(uid))
            .filter(|p| claim.serves(p))
            .collect()
    }

    /// Takes a watched Pod in (`None`: deleted) and counts it; whether it holds its quota at `now_ms`.
    pub fn set(
        &mut self,
        uid: &str,
        pod: Option<WatchedPod>,
        cx: &dyn Counter,
        now_ms: u64,
    ) -> bool {
        let holds = pod.filter(|p| p.holds_quota(now_ms));
        let held = holds.is_some();
        self.forget(uid);
        if let Some(pod) = holds.and_then(|p| p.held) {
            if let Some(t) = pod.holds_until_ms {
                self.terminating.insert(uid.to_string(), t);
            }
            let counting = None;
            self.stored.insert(uid.to_string(), Held { pod, counting });
            self.recount(uid, cx);
        }
        held
    }

    /// Replaces every stored Pod (a relist: each Pod that may hold GPUs and held its quota when listed),
    /// counted at the next [`HeldPods::refresh`].
    pub fn replace_all(&mut self, pods: impl IntoIterator<Item = (String, HeldPod)>, now_ms: u64) {
        *self = HeldPods::default();
        for (uid, pod) in pods {
            if pod.holds_until_ms.is_some_and(|t| now_ms > t) {
                continue;
            }
            if let Some(t) = pod.holds_until_ms {
                self.terminating.insert(uid.clone(), t);
            }
            let counting = None;
            self.stored.insert(uid, Held { pod, counting });
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
            self.forget(uid);
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
            self.recount_where(cx, |p| moved.contains(&p.namespace));
        }
        expired
    }

    fn recount_all(&mut self, cx: &dyn Counter) {
        self.usage = Usage::default();
        self.tiers.clear();
        for held in self.stored.values_mut() {
            held.counting = None;
        }
        self.recount_where(cx, |_| true);
        self.basis = Some(cx.snapshot().clone());
    }

    /// Counts the stored Pods of `namespace` again: a claim or claim template there changed (what a Pod
    /// counts reads them), which no Pod event tells.
    pub fn recount_namespace(&mut self, namespace: &str, cx: &dyn Counter) {
        self.recount_where(cx, |p| p.namespace == namespace);
    }

    fn recount_where(&mut self, cx: &dyn Counter, which: impl Fn(&HeldPod) -> bool) {
        let uids: Vec<String> = self
            .stored
            .iter()
            .filter(|(_, h)| which(&h.pod))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.recount(&uid, cx);
        }
    }

    /// Lets a Pod go, and what it counted.
    fn forget(&mut self, uid: &str) {
        self.terminating.remove(uid);
        if let Some(held) = self.stored.remove(uid) {
            add(
                &mut self.usage,
                &held.pod.namespace,
                held.counting.as_ref(),
                -1,
            );
        }
    }

    /// Counts one stored Pod again.
    fn recount(&mut self, uid: &str, cx: &dyn Counter) {
        let Some(held) = self.stored.get_mut(uid) else {
            return;
        };
        let namespace = &held.pod.namespace;
        add(
            &mut self.usage,
            namespace,
            held.counting.take().as_ref(),
            -1,
        );
        let tier = self
            .tiers
            .entry(namespace.clone())
            .or_insert_with(|| cx.tier_of(namespace))
            .clone();
        let Some(tier) = tier else { return };
        let Some(counted) = cx.count(&tier, namespace, &held.pod.to_pod(uid)) else {
            return;
        };
        self.usage.add(&tier, namespace, &counted, 1);
        held.counting = Some(Counting {
            tier,
            classes: counted.classes.into_iter().collect(),
            total: counted.total,
        });
    }
}

/// Adds what a stored Pod counts to `usage` (or takes it back with `sign = -1`).
fn add(usage: &mut Usage, namespace: &str, counting: Option<&Counting>, sign: i8) {
    if let Some(c) = counting {
        let counted = Counted {
            classes: c.classes.iter().cloned().collect(),
            total: c.total,
        };
        usage.add(&c.tier, namespace, &counted, sign);
    }
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
            assert!(h.set("p", Some(WatchedPod::of(&pod("a", "p", 1, None))), cx, 0));
            h.set("p", Some(WatchedPod::of(&pod("a", "p", 2, None))), cx, 0);
            assert_eq!(h.usage().namespaces["a"].total, 2000);
            assert!(!h.set("p", None, cx, 0));
            assert_eq!(h.usage(), &Usage::default());
            // A CPU-only Pod is not stored at all.
            let cpu: Pod =
                serde_json::from_value(serde_json::json!({"metadata": {"namespace": "a",
                "name": "cpu", "uid": "cpu"}, "spec": {"containers": [{"name": "c"}]}}))
                .unwrap();
            h.set("cpu", Some(WatchedPod::of(&cpu)), cx, 0);
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
            h.set("p", Some(WatchedPod::of(&pod("a", "p", 3, None))), cx, 0);
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
            h.set("p", Some(WatchedPod::of(&deleting)), cx, at);
            assert!(h.refresh(cx, at + 599_000).is_empty());
            assert_eq!(tier_total(&h, "bronze"), 2000);
            assert_eq!(h.refresh(cx, at + 600_001), ["p"]);
            assert_eq!(tier_total(&h, "bronze"), 0);
            let held = WatchedPod::of(&deleting).held.unwrap();
            h.replace_all([("p".to_string(), held)], at);
            h.refresh(cx, at);
            assert_eq!(tier_total(&h, "bronze"), 2000);
            h.refresh(cx, at + 600_001);
            assert_eq!(tier_total(&h, "bronze"), 0);
        });
    }
}
