//! GPU quota usage, counted from the cluster: a Pod watch (not finished: `status.phase` neither
//! `Succeeded` nor `Failed`) that keeps, per Pod UID, the Pod slimmed to what counting reads (only Pods
//! that may hold GPUs: an extended resource or a DRA claim), and counts it by
//! [`gpu_admission_core::quota::demand`] against the tier its namespace's label says **now**: a relabelled
//! namespace's Pods move to the new tier at the next decision, a policy change recounts every Pod, and every
//! [`RECOUNT_EVERY`] the whole count is taken again (claims and templates a Pod reads may have changed). A
//! Pod being deleted holds its quota until its deletion time plus its grace period has passed
//! ([`demand::holds_quota`], as ResourceQuota counts).
//!
//! Admissions in flight: `/validate-pod` decides against the watch plus the **quota ledger**
//! ([`gpu_admission_core::quota::ledger`]: what any replica admitted that this watch has not seen) and admits
//! only once it has written its Pod's entry on top of the ledger version it decided on (one ConfigMap write
//! per admitted quota'd Pod, [`super::quota_ledger`]); one admission at a time per replica. So replicas and
//! concurrent admissions do not overshoot a `max`, as long as every watch sees a new Pod within
//! [`ledger::OTHERS_WINDOW_MS`] of another replica's write. A CREATE of a namespace/name the watch already
//! holds is decided but reserves nothing: the apiserver refuses it `AlreadyExists` after admission.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use gpu_admission_core::admission::validate_pod::{QuotaUnavailable, Reservation};
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::{PolicySnapshot, TierScope};
use gpu_admission_core::quota::demand::{self, Counted};
use gpu_admission_core::quota::ledger::{self, Entry, Reserving, Seen};
use gpu_admission_core::quota::{self, Decision, Usage};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::ClusterFacts;
use super::quota_ledger::{LedgerError, LedgerStore, LedgerVersion};
use crate::metrics::{LedgerWrite, Metrics, QuotaLabels};
use crate::policy::PolicyCache;

/// How often the quota metrics are rewritten and the whole count taken again.
const RECOUNT_EVERY: Duration = Duration::from_secs(5);

/// A Pod that may hold GPUs, slimmed to what counting reads.
#[derive(Debug, Clone)]
struct Stored {
    namespace: String,
    pod: Pod,
}

/// What one stored Pod counts, under the tier its namespace had when it was counted.
#[derive(Debug, Clone)]
struct Held {
    tier: String,
    namespace: String,
    counted: Counted,
}

/// What counting reads besides the Pod: the namespaces' tiers and the cluster's Nodes and claims, the policy.
struct Counting<'a> {
    cluster: &'a ClusterFacts,
    snapshot: &'a Arc<PolicySnapshot>,
}

impl Counting<'_> {
    /// The quota'd tier a namespace is held to now (`None`: its tier has no quota, or it is outside the
    /// policy's scope).
    fn tier_of(&self, namespace: &str) -> Option<String> {
        let tier = match self
            .snapshot
            .tier_for(self.cluster.namespace_tier(namespace).as_deref())
        {
            TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
            TierScope::Ignored(_) | TierScope::Denied(_) => return None,
        };
        quota::tier_quota(self.snapshot.policy.as_deref()?, &tier)?;
        Some(tier)
    }

    fn count(&self, stored: &Stored) -> Option<Held> {
        let tier = self.tier_of(&stored.namespace)?;
        let snapshot = self.snapshot;
        let counted = self
            .cluster
            .with_facts(snapshot, &Grants::none(), |facts: &Facts<'_>| {
                demand::of_pod(
                    &stored.pod,
                    &stored.namespace,
                    &tier,
                    snapshot,
                    facts.nodes,
                    facts.claim_templates,
                )
            })?;
        Some(Held {
            tier,
            namespace: stored.namespace.clone(),
            counted,
        })
    }
}

/// A relist in progress (`Init` .. `InitDone`).
#[derive(Debug, Default)]
struct Relist {
    stored: HashMap<String, Stored>,
    names: HashSet<String>,
}

#[derive(Debug, Default)]
struct State {
    /// Pods that may hold GPUs, by UID.
    stored: HashMap<String, Stored>,
    /// `namespace/name` of every Pod the watch holds (GPUs or not).
    names: HashSet<String>,
    relist: Option<Relist>,
    /// What each stored Pod counts (none where its namespace's tier has no quota).
    counted: HashMap<String, Held>,
    /// What `counted` sums to.
    usage: Usage,
    /// The quota'd tier each namespace of a stored Pod was counted under.
    tiers: HashMap<String, Option<String>>,
    /// The policy the counts were taken under (`None`: count again).
    basis: Option<Arc<PolicySnapshot>>,
    /// Stored Pods being deleted: when each stops holding, in ms since the epoch.
    terminating: HashMap<String, u64>,
    /// Every UID the watch brought (counted or not, present or gone): when it first did, in ms since the
    /// epoch, and whether it is gone (deleted or finished). A ledger entry of such a Pod is the watch's to
    /// count, or done ([`ledger::Seen`]).
    seen: HashMap<String, (u64, bool)>,
    /// Events since `seen` was last pruned.
    events: u32,
}

impl State {
    /// Takes a watched Pod in (`None`: deleted or finished) and counts it under the current tier.
    fn set(&mut self, uid: &str, pod: Option<&Pod>, cx: &Counting<'_>, now: u64) {
        let holds = pod.filter(|p| demand::holds_quota(p, now));
        self.mark_seen(uid, holds.is_none(), now);
        match holds.and_then(|p| Some((p, slim(p)?))) {
            Some((p, stored)) => {
                match demand::holds_until_ms(p) {
                    Some(t) => self.terminating.insert(uid.to_string(), t),
                    None => self.terminating.remove(uid),
                };
                self.stored.insert(uid.to_string(), stored);
            }
            None => {
                self.stored.remove(uid);
                self.terminating.remove(uid);
            }
        }
        self.recount(uid, cx);
    }

    /// Counts one stored Pod again (or takes back what a Pod no longer stored counted).
    fn recount(&mut self, uid: &str, cx: &Counting<'_>) {
        if let Some(old) = self.counted.remove(uid) {
            self.usage.add(&old.tier, &old.namespace, &old.counted, -1);
        }
        let Some(stored) = self.stored.get(uid) else {
            return;
        };
        if !self.tiers.contains_key(&stored.namespace) {
            let tier = cx.tier_of(&stored.namespace);
            self.tiers.insert(stored.namespace.clone(), tier);
        }
        if let Some(held) = cx.count(stored) {
            self.usage
                .add(&held.tier, &held.namespace, &held.counted, 1);
            self.counted.insert(uid.to_string(), held);
        }
    }

    /// Brings the counts in step with now: every Pod again under a new policy, a relabelled namespace's
    /// Pods under its new tier, and a terminating Pod whose grace period has passed let go.
    fn refresh(&mut self, cx: &Counting<'_>, now: u64) {
        let expired: Vec<String> = self
            .terminating
            .iter()
            .filter(|(_, until)| now > **until)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in expired {
            self.terminating.remove(&uid);
            self.stored.remove(&uid);
            self.mark_seen(&uid, true, now);
            self.recount(&uid, cx);
        }
        if !self
            .basis
            .as_ref()
            .is_some_and(|b| Arc::ptr_eq(b, cx.snapshot))
        {
            self.recount_all(cx);
            return;
        }
        let moved: HashSet<String> = self
            .tiers
            .iter()
            .filter(|(ns, counted_under)| cx.tier_of(ns) != **counted_under)
            .map(|(ns, _)| ns.clone())
            .collect();
        if moved.is_empty() {
            return;
        }
        for ns in &moved {
            self.tiers.remove(ns);
        }
        let uids: Vec<String> = self
            .stored
            .iter()
            .filter(|(_, s)| moved.contains(&s.namespace))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.recount(&uid, cx);
        }
    }

    fn recount_all(&mut self, cx: &Counting<'_>) {
        self.counted.clear();
        self.usage = Usage::default();
        self.tiers.clear();
        let uids: Vec<String> = self.stored.keys().cloned().collect();
        for uid in uids {
            self.recount(&uid, cx);
        }
        self.basis = Some(cx.snapshot.clone());
    }

    fn mark_seen(&mut self, uid: &str, gone: bool, now: u64) {
        let seen = self.seen.entry(uid.to_string()).or_insert((now, gone));
        seen.1 |= gone;
        self.events += 1;
        // No ledger entry outlives ENTRY_TTL_MS: what the watch saw before that matters no more.
        if self.events >= 1024 {
            self.events = 0;
            self.seen
                .retain(|_, (at, _)| now.saturating_sub(*at) < 2 * ledger::ENTRY_TTL_MS);
        }
    }

    fn seen(&self, uid: &str) -> Seen {
        match self.seen.get(uid) {
            None => Seen::No,
            Some((_, true)) => Seen::Gone,
            Some(&(at_ms, false)) => Seen::Since { at_ms },
        }
    }
}

/// A Pod slimmed to what counting reads, `None` for a Pod that cannot hold GPUs (no extended resource, no
/// DRA claim), whatever the policy says.
fn slim(pod: &Pod) -> Option<Stored> {
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
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    if !claims && !containers.clone().any(extended) {
        return None;
    }
    let keep = |c: &Container| Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        restart_policy: c.restart_policy.clone(),
        ..Default::default()
    };
    let m = &pod.metadata;
    Some(Stored {
        namespace: m.namespace.clone()?,
        pod: Pod {
            metadata: ObjectMeta {
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                uid: m.uid.clone(),
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
        },
    })
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Milliseconds since the Unix epoch (the ledger's clock: entries are compared across replicas).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Admissions of quota'd Pods one replica tries before it gives up on a contended ledger.
const LEDGER_ATTEMPTS: usize = 8;

/// The quota usage of the cluster's tier namespaces.
pub(crate) struct QuotaUsage {
    state: Mutex<State>,
    synced: AtomicBool,
    cluster: Arc<ClusterFacts>,
    policy: Arc<PolicyCache>,
    store: LedgerStore,
    /// The ledger as this replica last read or wrote it.
    ledger: Mutex<LedgerVersion>,
    /// One ledger write at a time per replica (its own admissions never conflict with each other).
    writing: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
}

impl QuotaUsage {
    /// Starts the Pod watch, and every [`RECOUNT_EVERY`] the whole count and the quota metrics.
    pub(crate) fn start(
        client: kube::Client,
        cluster: Arc<ClusterFacts>,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let me = Arc::new(Self {
            state: Mutex::default(),
            synced: AtomicBool::new(false),
            cluster,
            policy,
            store: LedgerStore::new(client.clone()),
            ledger: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            metrics,
        });
        // Every Pod, finished ones too: a CREATE of a name any stored Pod holds is refused after admission.
        let stream = watcher(Api::<Pod>::all(client), watcher::Config::default()).default_backoff();
        let usage = me.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RECOUNT_EVERY);
            loop {
                tick.tick().await;
                usage.recount_and_publish();
            }
        });
        let usage = me.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(e) => usage.event(e),
                    Err(err) => {
                        tracing::warn!(%err, resource = "pods", "watch error (retrying with backoff)")
                    }
                }
            }
        });
        me
    }

    fn event(&self, e: watcher::Event<Pod>) {
        let snapshot = self.policy.snapshot();
        let cx = Counting {
            cluster: &self.cluster,
            snapshot: &snapshot,
        };
        let now = now_ms();
        let mut s = self.lock_state();
        match e {
            watcher::Event::Init => s.relist = Some(Relist::default()),
            watcher::Event::InitApply(pod) => {
                let (Some(uid), Some(ns), Some(name)) = (
                    uid(&pod),
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref(),
                ) else {
                    return;
                };
                let holds = demand::holds_quota(&pod, now);
                s.mark_seen(&uid, !holds, now);
                let relist = s.relist.get_or_insert_with(Relist::default);
                relist.names.insert(key(ns, name));
                if let Some(stored) = slim(&pod).filter(|_| holds) {
                    relist.stored.insert(uid, stored);
                }
            }
            watcher::Event::InitDone => {
                let relist = s.relist.take().unwrap_or_default();
                s.names = relist.names;
                s.stored = relist.stored;
                s.terminating.clear();
                s.basis = None;
                s.refresh(&cx, now);
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(pod) => {
                if let (Some(uid), Some(ns), Some(name)) = (
                    uid(&pod),
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref(),
                ) {
                    s.names.insert(key(ns, name));
                    s.set(&uid, Some(&pod), &cx, now);
                }
            }
            watcher::Event::Delete(pod) => {
                if let (Some(uid), Some(ns), Some(name)) = (
                    uid(&pod),
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref(),
                ) {
                    s.names.remove(&key(ns, name));
                    s.set(&uid, None, &cx, now);
                }
            }
        }
    }

    /// Whether the first listing is complete.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The state with its counts in step with now (the tiers' labels, the policy, grace periods).
    fn fresh_state(&self) -> std::sync::MutexGuard<'_, State> {
        let snapshot = self.policy.snapshot();
        let cx = Counting {
            cluster: &self.cluster,
            snapshot: &snapshot,
        };
        let mut s = self.lock_state();
        s.refresh(&cx, now_ms());
        s
    }

    /// The usage as last counted, as a Pod of `namespace` is decided against it: the watch's plus the ledger
    /// as last read (`None` until the first listing is complete). `/mutate-pod` decides the borrowers'
    /// PriorityClass and the record against it; nothing is written.
    pub(crate) fn usage(&self, namespace: &str) -> Option<Usage> {
        if !self.is_synced() {
            return None;
        }
        // Ledger, then state: the order `reserve` never holds both in, so no deadlock; no copy of the ledger.
        let ledger = self.lock_ledger();
        let s = self.fresh_state();
        Some(ledger::effective_usage(
            &s.usage,
            &ledger.entries,
            |u| s.seen(u),
            now_ms(),
            namespace,
        ))
    }

    /// Offers the usage and the ledger to `decide` (core's quota step); when it reserves and `keep` is true
    /// (not a dry run), admits `pod` only once its entry is written on top of the ledger version it was
    /// decided on (a conflict: read, offer again). A Pod whose namespace/name the watch already holds is
    /// decided but reserves nothing (the apiserver refuses its CREATE after admission). An error: the Pod is
    /// undecidable.
    pub(crate) async fn reserve(
        &self,
        ask: &quota::Ask,
        pod: &Reserving<'_>,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> Result<Option<Decision>, QuotaUnavailable> {
        let (tier, namespace, counted) = ask;
        if !keep {
            let usage = self
                .usage(namespace)
                .ok_or(QuotaUnavailable::NotCountedYet)?;
            return Ok(match decide(&usage) {
                Reservation::NoQuota => None,
                Reservation::Refused(d) | Reservation::Reserve(d) => Some(d),
            });
        }
        if !self.is_synced() {
            return Err(QuotaUnavailable::NotCountedYet);
        }
        let _turn = self.writing.lock().await;
        for _ in 0..LEDGER_ATTEMPTS {
            let on = self.lock_ledger().clone();
            let now = now_ms();
            let (decision, mut entries) = {
                let s = self.fresh_state();
                let seen = |u: &str| s.seen(u);
                let usage = ledger::effective_usage(&s.usage, &on.entries, seen, now, namespace);
                let d = match decide(&usage) {
                    Reservation::NoQuota => return Ok(None),
                    Reservation::Refused(d) => return Ok(Some(d)),
                    Reservation::Reserve(d) => d,
                };
                if s.names.contains(&key(namespace, pod.name)) {
                    self.metrics.record_ledger_write(LedgerWrite::name_taken);
                    return Ok(Some(d));
                }
                let mut entries = on.entries.clone();
                ledger::prune(&mut entries, seen, now);
                (d, entries)
            };
            if let Err(full) = ledger::room_for(&entries, namespace) {
                self.metrics.record_ledger_write(LedgerWrite::failed);
                return Err(not_reserved(LedgerError::Full(full)));
            }
            entries.push(Entry::new(pod.uid, tier, namespace, counted, now));
            match self.store.write(&on, entries).await {
                Ok(written) => {
                    *self.lock_ledger() = written;
                    self.metrics.record_ledger_write(LedgerWrite::written);
                    return Ok(Some(decision));
                }
                Err(LedgerError::Conflict) => {
                    self.metrics.record_ledger_write(LedgerWrite::conflict);
                    let fresh = self.store.read().await.map_err(|e| {
                        self.metrics.record_ledger_write(LedgerWrite::failed);
                        not_reserved(e)
                    })?;
                    *self.lock_ledger() = fresh;
                }
                Err(e) => {
                    self.metrics.record_ledger_write(LedgerWrite::failed);
                    return Err(not_reserved(e));
                }
            }
        }
        self.metrics.record_ledger_write(LedgerWrite::failed);
        Err(not_reserved(LedgerError::Contended))
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_ledger(&self) -> std::sync::MutexGuard<'_, LedgerVersion> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the whole count again (claims, templates and Nodes a Pod's count reads may have changed without
    /// a Pod event) and rewrites `gpu_admission_quota_gpus`: what each quota'd tier and namespace holds and
    /// its limits.
    fn recount_and_publish(&self) {
        let snapshot = self.policy.snapshot();
        let Some(policy) = snapshot.policy.as_deref() else {
            return;
        };
        let usage = {
            let mut s = self.lock_state();
            if !self.is_synced() {
                return;
            }
            s.basis = None;
            s.refresh(
                &Counting {
                    cluster: &self.cluster,
                    snapshot: &snapshot,
                },
                now_ms(),
            );
            s.usage.clone()
        };
        let family = &self.metrics.quota_gpus;
        family.clear();
        for f in quota::figures::figures(policy, &usage) {
            let labels = |kind: &'static str| QuotaLabels {
                tier: f.tier.clone(),
                tenant_namespace: f.namespace.clone(),
                class: f.class.clone().unwrap_or_default(),
                kind,
            };
            let gpus = |milli: u64| milli as f64 / 1000.0;
            family.get_or_create(&labels("used")).set(gpus(f.used));
            if let Some(limit) = f.limit {
                family.get_or_create(&labels("min")).set(gpus(limit.min));
                if let Some(max) = limit.max {
                    family.get_or_create(&labels("max")).set(gpus(max));
                }
            }
        }
    }
}

fn not_reserved(e: LedgerError) -> QuotaUnavailable {
    QuotaUnavailable::NotReserved(e.to_string())
}

fn uid(pod: &Pod) -> Option<String> {
    pod.metadata.uid.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn cluster(tiers: &[(&str, &str)]) -> ClusterFacts {
        ClusterFacts::Static {
            tiers: tiers
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
        }
    }

    /// A Pod of `ns` pinned to L4 asking for `gpus`, being deleted with `grace` seconds when given.
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

    fn held(s: &State, tier: &str) -> u64 {
        s.usage
            .namespaces
            .values()
            .filter(|n| n.tier == tier)
            .map(|n| n.total)
            .sum()
    }

    #[test]
    fn the_watch_counts_a_pod_once_an_update_replaces_it_and_a_delete_frees_it_but_stays_seen() {
        let (snap, facts) = (snapshot(QUOTAS), cluster(&[("a", "bronze")]));
        let cx = Counting {
            cluster: &facts,
            snapshot: &snap,
        };
        let mut s = State::default();
        s.refresh(&cx, 0);
        assert_eq!(s.seen("p"), Seen::No);
        s.set("p", Some(&pod("a", "p", 1, None)), &cx, 0);
        s.set("p", Some(&pod("a", "p", 2, None)), &cx, 0);
        assert_eq!(s.usage.namespaces["a"].total, 2000);
        assert!(matches!(s.seen("p"), Seen::Since { .. }));
        s.set("p", None, &cx, 0);
        assert_eq!(s.usage, Usage::default());
        // Gone: its ledger entry is done.
        assert_eq!(s.seen("p"), Seen::Gone);
        // A CPU-only Pod is not stored at all.
        let cpu: Pod = serde_json::from_value(serde_json::json!({"metadata": {"namespace": "a",
            "name": "cpu", "uid": "cpu"}, "spec": {"containers": [{"name": "c"}]}}))
        .unwrap();
        s.set("cpu", Some(&cpu), &cx, 0);
        assert!(s.stored.is_empty());
    }

    /// A namespace's Pods belong to the tier its label says at the decision: relabelled, they move at the
    /// next refresh, in both directions; a tier without quota holds nothing, and a policy change counts
    /// every Pod again.
    #[test]
    fn a_relabelled_namespace_moves_its_pods_to_its_new_tier_at_once() {
        let snap = snapshot(QUOTAS);
        let (bronze, silver) = (cluster(&[("a", "bronze")]), cluster(&[("a", "silver")]));
        let in_bronze = Counting {
            cluster: &bronze,
            snapshot: &snap,
        };
        let in_silver = Counting {
            cluster: &silver,
            snapshot: &snap,
        };
        let mut s = State::default();
        s.refresh(&in_bronze, 0);
        s.set("p", Some(&pod("a", "p", 3, None)), &in_bronze, 0);
        assert_eq!((held(&s, "bronze"), held(&s, "silver")), (3000, 0));
        s.refresh(&in_silver, 0);
        assert_eq!((held(&s, "bronze"), held(&s, "silver")), (0, 3000));
        s.refresh(&in_bronze, 0);
        assert_eq!((held(&s, "bronze"), held(&s, "silver")), (3000, 0));
        // Gold has no quota: nothing counted; back in bronze, counted again.
        let gold = cluster(&[("a", "gold")]);
        s.refresh(
            &Counting {
                cluster: &gold,
                snapshot: &snap,
            },
            0,
        );
        assert_eq!(s.usage, Usage::default());
        s.refresh(&in_bronze, 0);
        assert_eq!(held(&s, "bronze"), 3000);
        // The policy drops bronze's quota: recounted without it.
        let without = snapshot(
            "
quotas:
  tiers:
    - tier: silver
      classes: { L4-24GB: { max: 4 } }
",
        );
        s.refresh(
            &Counting {
                cluster: &bronze,
                snapshot: &without,
            },
            0,
        );
        assert_eq!(s.usage, Usage::default());
    }

    /// A Pod being deleted counts until its deletion time plus its grace period, then not at all.
    #[test]
    fn a_terminating_pod_counts_until_its_grace_period_has_passed() {
        let (snap, facts) = (snapshot(QUOTAS), cluster(&[("a", "bronze")]));
        let cx = Counting {
            cluster: &facts,
            snapshot: &snap,
        };
        let at = 1_795_946_400_000u64; // 2026-11-29T10:00:00Z
        let mut s = State::default();
        s.refresh(&cx, at);
        let deleting = pod("a", "p", 2, Some(("2026-11-29T10:00:00Z", 600)));
        s.set("p", Some(&deleting), &cx, at);
        s.refresh(&cx, at + 599_000);
        assert_eq!(held(&s, "bronze"), 2000);
        s.refresh(&cx, at + 600_001);
        assert_eq!(held(&s, "bronze"), 0);
        assert_eq!(s.seen("p"), Seen::Gone);
    }
}
