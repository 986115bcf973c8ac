//! GPU quota usage, counted from the cluster: a Pod watch (not finished: `status.phase` neither
//! `Succeeded` nor `Failed`) that keeps, per Pod UID, only what counting needs (tier, namespace and its
//! count by [`gpu_admission_core::quota::demand`]), never the Pod; a Pod being deleted no longer counts.
//!
//! Admissions in flight: `/validate-pod` decides against the watch plus the **quota ledger**
//! ([`gpu_admission_core::quota::ledger`]: what any replica admitted that this watch has not seen) and admits
//! only once it has written its Pod's entry on top of the ledger version it decided on (one ConfigMap write
//! per admitted quota'd Pod, [`super::quota_ledger`]); one admission at a time per replica. So replicas and
//! concurrent admissions do not overshoot a `max`, as long as every watch sees a new Pod within
//! [`ledger::SEEN_GRACE_MS`] of another replica's watch.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use gpu_admission_core::admission::validate_pod::{QuotaUnavailable, Reservation};
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::TierScope;
use gpu_admission_core::quota::demand::{self, Counted};
use gpu_admission_core::quota::ledger::{self, Entry, Seen};
use gpu_admission_core::quota::{self, Decision, Usage};
use gpu_admission_policy::Policy;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::ClusterFacts;
use super::quota_ledger::{LedgerError, LedgerStore, LedgerVersion};
use crate::metrics::{LedgerWrite, Metrics, QuotaLabels};
use crate::policy::PolicyCache;

/// How often the quota metrics are rewritten from the watch.
const METRICS_REFRESH: Duration = Duration::from_secs(5);

/// What the watch keeps of one counted Pod.
#[derive(Debug, Clone)]
struct Held {
    tier: String,
    namespace: String,
    counted: Counted,
}

#[derive(Debug, Default)]
struct State {
    /// Counted Pods by UID.
    pods: HashMap<String, Held>,
    /// A relist in progress (`Init` .. `InitDone`).
    relist: Option<HashMap<String, Held>>,
    /// What `pods` sums to.
    usage: Usage,
    /// Every UID the watch brought (counted or not, present or gone): when it first did, in ms since the
    /// epoch, and whether it is gone (deleted, being deleted or finished). A ledger entry of such a Pod is the
    /// watch's to count, or done ([`ledger::Seen`]).
    seen: HashMap<String, (u64, bool)>,
    /// Events since `seen` was last pruned.
    events: u32,
}

impl State {
    fn set(&mut self, uid: String, held: Option<Held>, gone: bool) {
        self.mark_seen(&uid, gone);
        let old = match held {
            Some(h) => {
                self.usage.add(&h.tier, &h.namespace, &h.counted, 1);
                self.pods.insert(uid, h)
            }
            None => self.pods.remove(&uid),
        };
        if let Some(o) = old {
            self.usage.add(&o.tier, &o.namespace, &o.counted, -1);
        }
    }

    fn mark_seen(&mut self, uid: &str, gone: bool) {
        let now = now_ms();
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
    store: LedgerStore,
    /// The ledger as this replica last read or wrote it.
    ledger: Mutex<LedgerVersion>,
    /// One ledger write at a time per replica (its own admissions never conflict with each other).
    writing: tokio::sync::Mutex<()>,
    metrics: Arc<Metrics>,
}

impl QuotaUsage {
    /// Starts the Pod watch, and the refresh of the quota metrics every [`METRICS_REFRESH`].
    pub(crate) fn start(
        client: kube::Client,
        cluster: Arc<ClusterFacts>,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let me = Arc::new(Self {
            state: Mutex::default(),
            synced: AtomicBool::new(false),
            store: LedgerStore::new(client.clone()),
            ledger: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            metrics: metrics.clone(),
        });
        let pods = Api::<Pod>::all(client);
        let config =
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
        let stream = watcher(pods, config).default_backoff();
        let (usage, p) = (me.clone(), policy.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(METRICS_REFRESH);
            loop {
                tick.tick().await;
                if let Some(policy) = p.snapshot().policy.as_deref() {
                    usage.publish(policy, &metrics);
                }
            }
        });
        let usage = me.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(e) => usage.event(e, &cluster, &policy),
                    Err(err) => {
                        tracing::warn!(%err, resource = "pods", "watch error (retrying with backoff)")
                    }
                }
            }
        });
        me
    }

    fn event(&self, e: watcher::Event<Pod>, cluster: &ClusterFacts, policy: &PolicyCache) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match e {
            watcher::Event::Init => s.relist = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(uid) = uid(&pod) {
                    s.mark_seen(&uid, !demand::holds_quota(&pod));
                    if let Some(held) = count(&pod, cluster, policy) {
                        s.relist.get_or_insert_with(HashMap::new).insert(uid, held);
                    }
                }
            }
            watcher::Event::InitDone => {
                let pods = s.relist.take().unwrap_or_default();
                let mut usage = Usage::default();
                for h in pods.values() {
                    usage.add(&h.tier, &h.namespace, &h.counted, 1);
                }
                s.pods = pods;
                s.usage = usage;
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(pod) => {
                if let Some(uid) = uid(&pod) {
                    let held = count(&pod, cluster, policy);
                    s.set(uid, held, !demand::holds_quota(&pod));
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some(uid) = uid(&pod) {
                    s.set(uid, None, true);
                }
            }
        }
    }

    /// Whether the first listing is complete.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The usage as last counted: the watch's plus the ledger as last read (`None` until the first listing
    /// is complete). `/mutate-pod` decides the borrowers' PriorityClass and the record against it; nothing
    /// is written.
    pub(crate) fn usage(&self) -> Option<Usage> {
        if !self.is_synced() {
            return None;
        }
        // Ledger, then state: the order `reserve` never holds both in, so no deadlock; no copy of the ledger.
        let ledger = self.lock_ledger();
        let s = self.lock_state();
        Some(ledger::effective_usage(
            &s.usage,
            &ledger.entries,
            |u| s.seen(u),
            now_ms(),
        ))
    }

    /// Offers the usage and the ledger to `decide` (core's quota step); when it reserves and `keep` is true
    /// (not a dry run), admits the Pod `uid` only once its entry is written on top of the ledger version it
    /// was decided on (a conflict: read, offer again). An error: the Pod is undecidable.
    pub(crate) async fn reserve(
        &self,
        ask: &quota::Ask,
        uid: &str,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> Result<Option<Decision>, QuotaUnavailable> {
        if !keep {
            let usage = self.usage().ok_or(QuotaUnavailable::NotCountedYet)?;
            return Ok(match decide(&usage) {
                Reservation::NoQuota => None,
                Reservation::Refused(d) | Reservation::Reserve(d) => Some(d),
            });
        }
        if !self.is_synced() {
            return Err(QuotaUnavailable::NotCountedYet);
        }
        let (tier, namespace, counted) = ask;
        let _turn = self.writing.lock().await;
        for _ in 0..LEDGER_ATTEMPTS {
            let on = self.lock_ledger().clone();
            let now = now_ms();
            let (decision, mut entries) = {
                let s = self.lock_state();
                let seen = |u: &str| s.seen(u);
                let usage = ledger::effective_usage(&s.usage, &on.entries, seen, now);
                let d = match decide(&usage) {
                    Reservation::NoQuota => return Ok(None),
                    Reservation::Refused(d) => return Ok(Some(d)),
                    Reservation::Reserve(d) => d,
                };
                let mut entries = on.entries.clone();
                ledger::prune(&mut entries, seen, now);
                (d, entries)
            };
            if let Err(full) = ledger::room_for(&entries, namespace) {
                self.metrics.record_ledger_write(LedgerWrite::failed);
                return Err(not_reserved(LedgerError::Full(full)));
            }
            entries.push(Entry::new(uid, tier, namespace, counted, now));
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
}

impl QuotaUsage {
    /// Rewrites `gpu_admission_quota_gpus`: what each quota'd tier and namespace holds and its limits.
    fn publish(&self, policy: &Policy, metrics: &Metrics) {
        let usage = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .usage
            .clone();
        let family = &metrics.quota_gpus;
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

/// What a watched Pod counts, or `None` when it counts nothing (finished, being deleted, no GPU, no tier
/// with a quota).
fn count(pod: &Pod, cluster: &ClusterFacts, policy: &PolicyCache) -> Option<Held> {
    if !demand::holds_quota(pod) {
        return None;
    }
    let namespace = pod.metadata.namespace.as_deref()?;
    let snapshot = policy.snapshot();
    let tier = match snapshot.tier_for(cluster.namespace_tier(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        TierScope::Ignored(_) | TierScope::Denied(_) => return None,
    };
    quota::tier_quota(snapshot.policy.as_deref()?, &tier)?;
    let counted = cluster.with_facts(&snapshot, &Grants::none(), |facts: &Facts<'_>| {
        demand::of_pod(
            pod,
            namespace,
            &tier,
            &snapshot,
            facts.nodes,
            facts.claim_templates,
        )
    })?;
    Some(Held {
        tier,
        namespace: namespace.to_string(),
        counted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ns: &str, gpus: u64) -> Held {
        Held {
            tier: "bronze".into(),
            namespace: ns.into(),
            counted: Counted {
                classes: [("L4-24GB".to_string(), gpus * 1000)].into(),
                total: gpus * 1000,
            },
        }
    }

    #[test]
    fn the_watch_counts_a_pod_once_an_update_replaces_it_and_a_delete_frees_it_but_stays_seen() {
        let mut s = State::default();
        assert_eq!(s.seen("uid-1"), Seen::No);
        s.set("uid-1".into(), Some(held("a", 1)), false);
        s.set("uid-1".into(), Some(held("a", 2)), false);
        assert_eq!(s.usage.namespaces["a"].total, 2000);
        assert!(matches!(s.seen("uid-1"), Seen::Since { .. }));
        s.set("uid-1".into(), None, true);
        assert_eq!(s.usage, Usage::default());
        // Gone: its ledger entry is done.
        assert_eq!(s.seen("uid-1"), Seen::Gone);
    }
}
