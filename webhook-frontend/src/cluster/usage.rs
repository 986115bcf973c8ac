//! GPU quota usage, counted from the cluster: a Pod watch (not finished: `status.phase` neither
//! `Succeeded` nor `Failed`) decoded into core's projection of what counting reads
//! ([`gpu_admission_core::quota::watched::WatchedPod`]: a whole Pod is never built), that keeps, per Pod UID,
//! what counting reads of it ([`gpu_admission_core::quota::watched::HeldPod`]; only Pods that may hold GPUs:
//! an extended resource or a DRA claim), and counts it by
//! [`gpu_admission_core::quota::demand`] against the tier its namespace's label says **now**: a relabelled
//! namespace's Pods move to the new tier at the next decision, a policy change recounts every Pod, a change
//! to what a count reads besides the Pod (claims and templates: their namespace's Pods; a DeviceClass or a
//! Node's labels: every Pod) recounts what it touches at the next decision, and every [`RECOUNT_EVERY`] the
//! counts are brought in step the same way and the metrics rewritten (nothing is recounted that did not
//! change: at tens of thousands of Pods a whole recount held the state's lock for most of a second). A
//! Pod being deleted holds its quota until its deletion time plus its grace period has passed
//! ([`demand::holds_quota`], as ResourceQuota counts).
//!
//! Admissions in flight: `/validate-pod` decides against the watch plus the **quota ledgers**
//! ([`gpu_admission_core::quota::ledger`]: what any replica admitted that this watch has not seen, one
//! ledger per tier) and admits only once its Pod's entry is written on top of the version of its tier's
//! ledger it decided on ([`super::quota_ledger`]). One writer per replica and tier writes every reservation
//! of the tier decided since its last write in one update (group commit): reservations decided while a write
//! is in flight build on its entries and go in the next one, so a burst costs one write per round trip, not
//! one per Pod; a conflict sends every reservation of the write, and those built on it, back to be decided
//! again on a fresh read. A tier's reservations wait only on that tier's writes: another tier's burst
//! shares with them the decisions' lock (in memory, no I/O under it), never a write. So replicas and
//! concurrent admissions do not overshoot a `max`, as long as every watch sees a new Pod within
//! [`ledger::OTHERS_WINDOW_MS`] of its reservation's decision. A CREATE of a namespace/name the watch
//! already holds is decided but reserves nothing: the apiserver refuses it `AlreadyExists` after admission.
//! A namespace admitting Pods in a stream reserves ahead of them in grants (`reserve.rs`).
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use gpu_admission_core::admission::validate_pod::QuotaUnavailable;
use gpu_admission_core::authority::Grants;
use gpu_admission_core::quota::held::{Counter, FactsCounter, HeldPods};
use gpu_admission_core::quota::ledger::object::{QuotaLedger, object_name};
use gpu_admission_core::quota::ledger::{self, Entry, Seen};
use gpu_admission_core::quota::watched::{HeldPod, WatchedPod};
use gpu_admission_core::quota::{self, Usage};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::ClusterFacts;
use super::quota_ledger::{LedgerError, LedgerStore, LedgerVersion};
use super::tier_ledger::{Flushed, TierLedger, Waiting, entries_for};
use crate::metrics::{LedgerWrite, Metrics, QuotaLabels};
use crate::policy::PolicyCache;

/// How often the counts are brought in step with the cluster and the quota metrics rewritten.
const RECOUNT_EVERY: Duration = Duration::from_secs(5);

mod reserve;

/// A relist in progress (`Init` .. `InitDone`): the Pods that may hold GPUs and every name.
#[derive(Debug, Default)]
struct Relist {
    pods: Vec<(String, HeldPod)>,
    names: HashSet<String>,
}

#[derive(Debug, Default)]
struct State {
    /// What the cluster holds ([`HeldPods`]: core's counting).
    held: HeldPods,
    /// `namespace/name` of every Pod the watch holds (GPUs or not, finished or not).
    names: HashSet<String>,
    relist: Option<Relist>,
    /// Every UID the watch brought (counted or not, present or gone): when it first did, in ms since the
    /// epoch, and whether it is gone (deleted or finished). A ledger entry of such a Pod is the watch's to
    /// count, or done ([`ledger::Seen`]).
    /// foldhash: every reservation looks up each ledger entry's UID here (a burst's ledger holds thousands),
    /// and SipHash was a quarter of a reservation's instructions.
    seen: foldhash::HashMap<String, (u64, bool)>,
    /// Events since `seen` was last pruned.
    events: u32,
}

impl State {
    /// Takes a watched Pod in (`None`: deleted) and counts it.
    fn set(&mut self, uid: &str, pod: Option<WatchedPod>, cx: &dyn Counter, now: u64) {
        let holds = self.held.set(uid, pod, cx, now);
        self.mark_seen(uid, !holds, now);
    }

    /// The counts in step with `now` ([`HeldPods::refresh`]); Pods let go are gone for the ledger.
    fn refresh(&mut self, cx: &dyn Counter, now: u64) {
        for uid in self.held.refresh(cx, now) {
            self.mark_seen(&uid, true, now);
        }
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

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Milliseconds since the Unix epoch (the ledger's clock: entries are compared across replicas).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The least wait before a grant is closed again (its close's write failed; the API may be down).
const CLOSE_RETRY: Duration = Duration::from_millis(250);

/// The quota usage of the cluster's tier namespaces.
/// Pods per page of the Pod watch's list: at most ~150 MiB of page for Pods at the apiserver's 1.5 MiB object
/// limit (kube's default, 500, would be ~750 MiB against the frontend's 256 MiB), ~1,500 requests for the
/// 150,000 Pods of Kubernetes' scale envelope.
const LIST_PAGE: u32 = 100;

pub(crate) struct QuotaUsage {
    /// Itself, for the writers started as tiers reserve.
    me: Weak<QuotaUsage>,
    state: Mutex<State>,
    synced: AtomicBool,
    cluster: Arc<ClusterFacts>,
    policy: Arc<PolicyCache>,
    store: LedgerStore,
    /// Each tier's ledger as this replica knows it; one write at a time per tier (a replica's own
    /// admissions never conflict with each other).
    ledgers: Mutex<BTreeMap<String, TierLedger>>,
    /// This replica's name in the grants it writes (random per process: two replicas never share one).
    replica: String,
    /// The grants this replica wrote so far (their UIDs).
    grants_made: AtomicU64,
    metrics: Arc<Metrics>,
}

/// A name no other process picks: the standard library's per-process random hashing keys.
fn replica_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

impl QuotaUsage {
    /// Starts the Pod watch, and every [`RECOUNT_EVERY`] the whole count and the quota metrics.
    pub(crate) fn start(
        client: kube::Client,
        cluster: Arc<ClusterFacts>,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let me = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            state: Mutex::default(),
            synced: AtomicBool::new(false),
            cluster,
            policy,
            store: LedgerStore::new(client.clone()),
            ledgers: Mutex::default(),
            replica: replica_name(),
            grants_made: AtomicU64::new(0),
            metrics,
        });
        // Every Pod, finished ones too: a CREATE of a name any stored Pod holds is refused after admission.
        // Listed in pages of `LIST_PAGE` Pods (the API serves no projection of spec): a page's JSON is read
        // whole, so the page bounds what a tenant's large Pods cost the start-up; it is decoded into the
        // projection only.
        let pages = watcher::Config::default().page_size(LIST_PAGE);
        let stream = watcher(Api::<WatchedPod>::all(client), pages).default_backoff();
        let usage = me.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RECOUNT_EVERY);
            loop {
                tick.tick().await;
                usage.recount_and_publish();
            }
        });
        let usage = me.clone();
        follow(me.store.watch(), "quotaledgers", move |e| {
            usage.ledger_event(e)
        });
        let usage = me.clone();
        follow(stream, "pods", move |e| usage.event(e));
        me
    }

    /// Runs `f` with core's counter over the current policy and the cluster's facts.
    fn with_counter<R>(&self, f: impl FnOnce(&dyn Counter) -> R) -> R {
        let snapshot = self.policy.snapshot();
        self.cluster
            .with_facts(&snapshot, &Grants::none(), |facts| {
                f(&FactsCounter {
                    snapshot: &snapshot,
                    facts,
                })
            })
    }

    fn event(&self, e: watcher::Event<WatchedPod>) {
        let now = now_ms();
        let names = |pod: &WatchedPod| -> Option<(String, String)> {
            let m = &pod.metadata;
            Some((
                m.uid.clone()?,
                key(m.namespace.as_deref()?, m.name.as_deref()?),
            ))
        };
        self.with_counter(|cx| {
            let mut s = self.lock_state();
            match e {
                watcher::Event::Init => s.relist = Some(Relist::default()),
                watcher::Event::InitApply(pod) => {
                    let Some((uid, name)) = names(&pod) else {
                        return;
                    };
                    let holds = pod.holds_quota(now);
                    s.mark_seen(&uid, !holds, now);
                    let relist = s.relist.get_or_insert_with(Relist::default);
                    relist.names.insert(name);
                    if let Some(held) = pod.held.filter(|_| holds) {
                        relist.pods.push((uid, held));
                    }
                }
                watcher::Event::InitDone => {
                    let relist = s.relist.take().unwrap_or_default();
                    s.names = relist.names;
                    s.held.replace_all(relist.pods, now);
                    s.refresh(cx, now);
                    self.synced.store(true, Ordering::Release);
                }
                watcher::Event::Apply(pod) => {
                    if let Some((uid, name)) = names(&pod) {
                        s.names.insert(name);
                        s.set(&uid, Some(pod), cx, now);
                    }
                }
                watcher::Event::Delete(pod) => {
                    if let Some((uid, name)) = names(&pod) {
                        s.names.remove(&name);
                        s.set(&uid, None, cx, now);
                    }
                }
            }
        });
    }

    /// Whether the first listing is complete.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The state with its counts in step with now (the tiers' labels, the policy, grace periods).
    fn fresh_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.with_counter(|cx| {
            let mut s = self.lock_state();
            // A claim or template changed: its namespace's Pods count it now, not at the next tick (a template
            // enlarged under a pending Pod counts before another Pod is decided against it).
            let (namespaces, cluster) = self.cluster.take_count_changes();
            if cluster {
                s.held.invalidate();
            }
            for ns in &namespaces {
                s.held.recount_namespace(ns, cx);
            }
            s.refresh(cx, now_ms());
            s
        })
    }

    /// The usage as last counted, as a Pod of `namespace` in `tier` is decided against it: the watch's plus
    /// the reservations this replica decided and has not written yet, else the ledger as last read (`None`
    /// until the first listing is complete), that namespace and tier only. `/mutate-pod` decides the
    /// borrowers' PriorityClass and the record against it, dry runs their answer; nothing is written. During a
    /// burst the pending reservations are what `/validate-pod` decides the same Pod against next. Other
    /// replicas' grants are left out: `/validate-pod` waits for them to close before refusing a Pod they alone
    /// would put over a `max` ([`reserve`]), so the Pod is mutated for the usage it is decided against then.
    pub(crate) fn usage(&self, tier: &str, namespace: &str) -> Option<Usage> {
        if !self.is_synced() {
            return None;
        }
        // Ledgers, then state: the order `reserve` takes them in; no copy of the entries.
        let ledgers = self.lock_ledgers();
        let s = self.fresh_state();
        Some(ledger::effective_usage(
            s.held.usage(),
            entries_for(&ledgers, s.held.usage(), (tier, namespace), &self.replica)
                .filter(|e| !e.is_grant()),
            |u| s.seen(u),
            now_ms(),
            (tier, namespace),
        ))
    }

    /// The stored Pods of `namespace` the ResourceClaim `claim` serves (a claim CREATE asks for them again).
    pub(crate) fn pods_served_by(
        &self,
        namespace: &str,
        claim: &gpu_admission_core::quota::ClaimRef,
    ) -> Vec<Pod> {
        self.lock_state().held.served_by(namespace, claim)
    }

    /// The one writer of `tier`'s ledger in this replica: writes every reservation of the tier decided since
    /// its last write in one update on top of the version they were decided on, and tells each whether it was
    /// written. Reservations decided while a write is in flight build on its entries and go in the next
    /// write, on the version it made; a conflict or a failure sends every one of them back to be decided again
    /// on the version that beat it (the ledger watch's, else a fresh read).
    async fn write_batches(self: Arc<Self>, tier: String, flush: Arc<tokio::sync::Notify>) {
        loop {
            match self.next_close(&tier) {
                Some(at) => {
                    let wait = Duration::from_millis(at.saturating_sub(now_ms()));
                    tokio::select! {
                        () = flush.notified() => {}
                        () = tokio::time::sleep(wait.max(CLOSE_RETRY)) => self.close_drawn(&tier),
                    }
                }
                None => flush.notified().await,
            }
            while let Some((base, entries, waiting)) = self.take_batch(&tier) {
                let on = LedgerVersion {
                    resource_version: base,
                    entries: Vec::new(),
                };
                let started = std::time::Instant::now();
                let result = self.store.write(&tier, &on, entries).await;
                self.metrics
                    .record_ledger_batch(waiting.len(), started.elapsed().as_secs_f64());
                let read_again = matches!(result, Err(LedgerError::Conflict))
                    && !self.knows_later_than(&tier, &on.resource_version);
                let fresh = match read_again {
                    true => Some(self.store.read(&tier).await),
                    false => None,
                };
                let (mine, later) = self.written(&tier, result, fresh, read_again);
                for w in waiting {
                    let _ = w.send(mine.clone());
                }
                send_back(later.into_iter().flatten());
            }
        }
    }

    /// When this replica's first grant in `tier`'s ledger ends its draw window, to be closed then.
    fn next_close(&self, tier: &str) -> Option<u64> {
        (self.lock_ledgers().get(tier)).and_then(|t| t.next_close(&self.replica))
    }

    /// Closes this replica's grants in `tier`'s ledger past their draw window, in a write of their own.
    fn close_drawn(&self, tier: &str) {
        if let Some(t) = self.lock_ledgers().get_mut(tier) {
            t.close_drawn(&self.replica, now_ms());
        }
    }

    /// Whether this replica knows a version of `tier`'s ledger later than `base` (the watch brought it).
    fn knows_later_than(&self, tier: &str, base: &Option<String>) -> bool {
        (self.lock_ledgers().get(tier)).is_some_and(|t| t.knows_later_than(base))
    }

    /// Takes a write's result into `tier`'s ledger ([`TierLedger::written`]) and counts it (`read_again`: a
    /// conflict the watch had not settled).
    fn written(
        &self,
        tier: &str,
        result: Result<LedgerVersion, LedgerError>,
        fresh: Option<Result<LedgerVersion, LedgerError>>,
        read_again: bool,
    ) -> (Flushed, Option<Vec<Waiting>>) {
        let outcome = match &result {
            Ok(_) => LedgerWrite::written,
            Err(LedgerError::Conflict) if read_again => LedgerWrite::conflict_read,
            Err(LedgerError::Conflict) => LedgerWrite::conflict,
            Err(_) => LedgerWrite::failed,
        };
        self.metrics.record_ledger_write(tier, outcome);
        let mut ledgers = self.lock_ledgers();
        match ledgers.get_mut(tier) {
            Some(t) => t.written(result, fresh),
            None => (Flushed::Retry, None),
        }
    }

    /// What `tier`'s next write carries ([`TierLedger::take_batch`]).
    fn take_batch(&self, tier: &str) -> Option<(Option<String>, Vec<Entry>, Vec<Waiting>)> {
        self.lock_ledgers().get_mut(tier)?.take_batch()
    }

    /// A change the ledger watch brought: the object's tier's ledger takes it if it is later than the one
    /// known, and a batch decided on an earlier version goes back to be decided again before it is written.
    /// An object not named as its tier's ledger is not one this frontend writes, and is left alone.
    fn ledger_event(&self, event: watcher::Event<QuotaLedger>) {
        let (object, deleted) = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
            watcher::Event::Delete(o) => (o, true),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let tier = object.tier.as_str();
        let (Some(at), Some(name)) = (&object.metadata.resource_version, &object.metadata.name)
        else {
            return;
        };
        if *name != object_name(tier) {
            return;
        }
        let now = if deleted {
            LedgerVersion::default()
        } else {
            match object.entries_of(tier) {
                Ok(entries) => LedgerVersion {
                    resource_version: Some(at.clone()),
                    entries,
                },
                Err(e) => {
                    tracing::warn!(%name, %e, "the QuotaLedger watched holds no list of entries");
                    return;
                }
            }
        };
        let back = {
            let mut ledgers = self.lock_ledgers();
            let known = (ledgers.entry(tier.to_string())).or_insert_with(TierLedger::new);
            known.watched(at, now)
        };
        if !back.is_empty() {
            self.metrics
                .record_ledger_write(tier, LedgerWrite::overtaken);
        }
        send_back(back);
    }

    fn lock_ledgers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TierLedger>> {
        self.ledgers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings the counts in step ([`Self::fresh_state`]) and rewrites `gpu_admission_quota_gpus`: what each
    /// quota'd tier and namespace holds and its limits.
    fn recount_and_publish(&self) {
        let snapshot = self.policy.snapshot();
        let Some(policy) = snapshot.policy.as_deref() else {
            return;
        };
        if !self.is_synced() {
            return;
        }
        let usage = self.fresh_state().held.usage().clone();
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

/// Hands every event of a watch to `on`, and logs its errors (the watcher retries them with backoff).
fn follow<K: Send + 'static>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    resource: &'static str,
    on: impl Fn(watcher::Event<K>) + Send + 'static,
) {
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(e) => on(e),
                Err(err) => tracing::warn!(%err, resource, "watch error (retrying with backoff)"),
            }
        }
    });
}

/// Sends reservations back to be decided again.
fn send_back(waiting: impl IntoIterator<Item = Waiting>) {
    for w in waiting {
        let _ = w.send(Flushed::Retry);
    }
}

fn not_reserved(e: LedgerError) -> QuotaUnavailable {
    QuotaUnavailable::NotReserved(e.to_string())
}
