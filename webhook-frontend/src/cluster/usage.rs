//! GPU quota usage (issue 37), counted from the cluster: a Pod watch (not finished: `status.phase` neither
//! `Succeeded` nor `Failed`) that keeps, per Pod UID, only what counting needs (tier, namespace and its
//! count by [`gpu_admission_core::quota::demand`]), never the Pod; a Pod being deleted no longer counts.
//!
//! Admissions in flight: `/validate-pod` decides and **reserves** under one lock ([`QuotaUsage::admit`]), so
//! concurrent admissions of one replica never overshoot a `max`; a reservation is released when the watch
//! brings a new Pod of its namespace with its count (the Pod it stands for, or one just like it), or after
//! [`RESERVATION_TTL`] (an admitted Pod another admission step then refused). Another replica's admissions
//! are seen one watch round trip later: the overshoot is bounded by what the other replicas admit within
//! one watch delay (measured in `tests/tests/cluster_quota.rs`, documented in the README).
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpu_admission_core::admission::Facts;
use gpu_admission_core::authority::Grants;
use gpu_admission_core::policy::TierScope;
use gpu_admission_core::quota::demand::{self, Counted};
use gpu_admission_core::quota::{self, Decision, Usage};
use gpu_admission_policy::Policy;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::ClusterFacts;
use crate::metrics::{Metrics, QuotaLabels};
use crate::policy::PolicyCache;
use gpu_admission_policy::quotas as quota_model;

/// How often the quota metrics are rewritten from the watch.
const METRICS_REFRESH: Duration = Duration::from_secs(5);

/// How long a reservation holds when the watch never brings its Pod.
pub(crate) const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// What the watch keeps of one counted Pod.
#[derive(Debug, Clone)]
struct Held {
    tier: String,
    namespace: String,
    counted: Counted,
}

#[derive(Debug)]
struct Reservation {
    held: Held,
    /// The Pod's name, or its `generateName` prefix (a Job's Pods), to know it when the watch brings it.
    name: PodName,
    at: Instant,
}

/// How an admitted Pod is known before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodName {
    Name(String),
    GenerateName(String),
}

impl PodName {
    fn matches(&self, name: &str) -> bool {
        match self {
            PodName::Name(n) => n == name,
            PodName::GenerateName(prefix) => name.starts_with(prefix.as_str()),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Counted Pods by UID.
    pods: HashMap<String, Held>,
    /// A relist in progress (`Init` .. `InitDone`).
    relist: Option<HashMap<String, Held>>,
    /// What `pods` sums to.
    usage: Usage,
    reservations: Vec<Reservation>,
}

impl State {
    fn set(&mut self, uid: String, name: &str, held: Option<Held>) {
        let old = match held {
            Some(h) => {
                let is_new = !self.pods.contains_key(&uid);
                if is_new {
                    self.release_one(name, &h);
                }
                self.usage.add(&h.tier, &h.namespace, &h.counted, 1);
                self.pods.insert(uid, h)
            }
            None => self.pods.remove(&uid),
        };
        if let Some(o) = old {
            self.usage.add(&o.tier, &o.namespace, &o.counted, -1);
        }
    }

    /// A new Pod arrived: the oldest reservation of its namespace, name (or `generateName`) and count is done.
    fn release_one(&mut self, name: &str, h: &Held) {
        if let Some(i) = self.reservations.iter().position(|r| {
            r.held.namespace == h.namespace
                && r.held.counted.total == h.counted.total
                && r.name.matches(name)
        }) {
            self.reservations.remove(i);
        }
    }

    /// The watched usage plus the reservations still held.
    fn with_reservations(&mut self, now: Instant) -> Usage {
        self.reservations
            .retain(|r| now.duration_since(r.at) < RESERVATION_TTL);
        let mut u = self.usage.clone();
        for r in &self.reservations {
            u.add(&r.held.tier, &r.held.namespace, &r.held.counted, 1);
        }
        u
    }
}

/// The quota usage of the cluster's tier namespaces.
#[derive(Debug, Default)]
pub(crate) struct QuotaUsage {
    state: Mutex<State>,
    synced: AtomicBool,
}

impl QuotaUsage {
    /// Starts the Pod watch, and the refresh of the quota metrics every [`METRICS_REFRESH`].
    pub(crate) fn start(
        client: kube::Client,
        cluster: Arc<ClusterFacts>,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let me = Arc::new(Self::default());
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
                if let (Some(uid), Some(held)) = (uid(&pod), count(&pod, cluster, policy)) {
                    s.relist.get_or_insert_with(HashMap::new).insert(uid, held);
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
                    s.set(uid, name(&pod), held);
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some(uid) = uid(&pod) {
                    s.set(uid, name(&pod), None);
                }
            }
        }
    }

    /// Whether the first listing is complete.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Decides a Pod against the usage and the reservations in flight, reserving nothing (`/mutate-pod`: the
    /// borrowers' PriorityClass and the record; `/validate-pod` decides again and reserves).
    pub(crate) fn decide(
        &self,
        policy: &Policy,
        (tier, namespace, counted): &(String, String, Counted),
    ) -> Option<Decision> {
        if !self.is_synced() {
            return None;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let usage = s.with_reservations(Instant::now());
        quota::decide(policy, tier, namespace, counted, &usage)
    }

    /// Decides a Pod against the usage and the reservations in flight; reserves its count unless it is over
    /// a `max` that `enforce` denies, or `reserve` is false (a dry run).
    pub(crate) fn admit(
        &self,
        policy: &Policy,
        (tier, namespace, counted): &(String, String, Counted),
        name: PodName,
        enforce: bool,
        reserve: bool,
    ) -> Option<Decision> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let usage = s.with_reservations(now);
        let decision = quota::decide(policy, tier, namespace, counted, &usage)?;
        let denied = enforce && decision.standing == quota::Standing::OverMax;
        if reserve && !denied {
            s.reservations.push(Reservation {
                held: Held {
                    tier: tier.clone(),
                    namespace: namespace.clone(),
                    counted: counted.clone(),
                },
                name,
                at: now,
            });
        }
        Some(decision)
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
        let set = |tier: &str, ns: &str, class: &str, kind: &'static str, milli: u64| {
            family
                .get_or_create(&QuotaLabels {
                    tier: tier.to_string(),
                    tenant_namespace: ns.to_string(),
                    class: class.to_string(),
                    kind,
                })
                .set(milli as f64 / 1000.0);
        };
        let limits = |tier: &str, ns: &str, l: &quota_model::Limits| {
            let classes = l
                .classes
                .iter()
                .enumerate()
                .filter_map(|(k, c)| Some((policy.classes.get(k)?.name.as_str(), (*c)?)));
            for (class, limit) in classes.chain(l.total.map(|t| ("", t))) {
                set(tier, ns, class, "min", limit.min);
                if let Some(max) = limit.max {
                    set(tier, ns, class, "max", max);
                }
            }
        };
        for (t, tq) in policy.quotas.tiers.iter().enumerate() {
            let (Some(tq), Some(tier)) = (tq, policy.tiers.get(t)) else {
                continue;
            };
            let tier = tier.name.as_str();
            limits(tier, "", &tq.limits);
            for n in &tq.namespaces {
                limits(tier, &n.namespace, &n.limits);
            }
            let mut tier_total = 0;
            let mut tier_classes: std::collections::BTreeMap<&str, u64> = Default::default();
            for (ns, u) in usage.namespaces.iter().filter(|(_, u)| u.tier == tier) {
                set(tier, ns, "", "used", u.total);
                tier_total += u.total;
                for (class, milli) in &u.classes {
                    set(tier, ns, class, "used", *milli);
                    *tier_classes.entry(class.as_str()).or_default() += milli;
                }
            }
            set(tier, "", "", "used", tier_total);
            for (class, milli) in tier_classes {
                set(tier, "", class, "used", milli);
            }
        }
    }
}

fn uid(pod: &Pod) -> Option<String> {
    pod.metadata.uid.clone()
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// What a watched Pod counts, or `None` when it counts nothing (finished, being deleted, no GPU, no tier
/// with a quota).
fn count(pod: &Pod, cluster: &ClusterFacts, policy: &PolicyCache) -> Option<Held> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
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
    fn a_new_pod_releases_the_reservation_it_stands_for_and_a_delete_frees_its_count() {
        let mut s = State::default();
        let now = Instant::now();
        s.reservations.push(Reservation {
            held: held("a", 1),
            name: PodName::GenerateName("train-".into()),
            at: now,
        });
        assert_eq!(s.with_reservations(now).namespaces["a"].total, 1000);
        // Another Pod of the namespace is not the one the reservation stands for.
        s.set("uid-0".into(), "other", Some(held("a", 1)));
        assert_eq!(s.with_reservations(now).namespaces["a"].total, 2000);
        s.set("uid-0".into(), "other", None);
        s.set("uid-1".into(), "train-x7k2p", Some(held("a", 1)));
        // Counted once: by the watch, the reservation released.
        assert_eq!(s.with_reservations(now).namespaces["a"].total, 1000);
        assert!(s.reservations.is_empty());
        // An update of the same Pod replaces its count.
        s.set("uid-1".into(), "train-x7k2p", Some(held("a", 1)));
        assert_eq!(s.usage.namespaces["a"].total, 1000);
        s.set("uid-1".into(), "train-x7k2p", None);
        assert_eq!(s.usage, Usage::default());
    }

    #[test]
    fn a_reservation_expires_when_its_pod_never_comes() {
        let mut s = State::default();
        let then = Instant::now();
        s.reservations.push(Reservation {
            held: held("a", 2),
            name: PodName::Name("p".into()),
            at: then,
        });
        assert_eq!(
            s.with_reservations(then + RESERVATION_TTL).namespaces.len(),
            0
        );
    }
}
