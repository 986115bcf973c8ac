//! Namespace-restricted mode (`--restrict-to-namespaces`): this instance scores the Pods of its
//! namespaces only, and holds the `coordination.k8s.io/v1` Lease `gpu-admission-ns-lock` in each of them
//! (kube-lease-manager, as the observer's leader election) **while it can decide them**, so that the
//! cluster-wide instance leaves scoring of those namespaces to it. Whether it can is core's
//! [`gpu_admission_core::ns_lock::hold::hold`], asked every [`CHECK_EVERY`] of each namespace over this
//! instance's Score calls ([`Holding::observe`]) and what it last read of the namespace's tier label: a
//! scorer that keeps falling back, or a tier it cannot read or does not know, gives the namespace back at
//! once (the Lease released); the first answer (and a fresh label) takes it again. The Lease is renewed
//! [`RENEW_BEFORE`] before it expires, and released as soon as the shutdown signal comes. Losing the
//! instance (crash, `SIGKILL`) gives the namespaces back to the cluster-wide scorer within
//! [`LEASE_DURATION`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpu_admission_core::admission::mutate_pod::ScorerResult;
use gpu_admission_core::ns_lock::LEASE_NAME;
use gpu_admission_core::ns_lock::hold::{self, Hold, HoldRule, ScorerRecord, TierRead};
use gpu_admission_core::policy::TierScope;
use kube_lease_manager::LeaseManagerBuilder;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::ClusterFacts;
use crate::metrics::{Metrics, ReasonLabels};
use crate::policy::PolicyCache;
use crate::readiness::Readiness;

/// How long a Lease holds after its last renewal: the longest the cluster-wide instance leaves a namespace
/// to an instance that is gone.
pub(crate) const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Renewed this long before it expires.
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(5);
/// How often each namespace's hold is decided again.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(500);

/// What the Leases are held by: the instance's Score calls, the tiers it reads, its policy.
pub(crate) struct Holding {
    rule: HoldRule,
    scorer: Mutex<ScorerRecord>,
    cluster: Arc<ClusterFacts>,
    policy: Arc<PolicyCache>,
}

impl Holding {
    pub(crate) fn new(
        rule: HoldRule,
        cluster: Arc<ClusterFacts>,
        policy: Arc<PolicyCache>,
    ) -> Self {
        Self {
            rule,
            scorer: Mutex::default(),
            cluster,
            policy,
        }
    }

    /// One Score call's result (a kept answer is no call, and not counted).
    pub(crate) fn observe(&self, result: ScorerResult) {
        self.scorer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(result, OffsetDateTime::now_utc());
    }

    /// What this instance last read of `namespace`'s tier label, and whether its policy holds that tier.
    fn tier_read(&self, namespace: &str, now: OffsetDateTime) -> TierRead {
        let policy = self.policy.snapshot();
        let tier_label = policy.tier_label();
        let (at, label) = match &*self.cluster {
            ClusterFacts::Read(tiers) => match tiers.last_read(namespace, tier_label) {
                Some(read) => read,
                None => return TierRead::Unread,
            },
            // A watch cache (kept fresh by its watch) or a stated tier: as of now.
            facts if facts.is_synced() => (now, facts.namespace_tier(namespace, tier_label)),
            _ => return TierRead::Unread,
        };
        let in_policy = matches!(policy.tier_for(label.as_deref()), TierScope::Tier(_));
        TierRead::Read {
            at,
            label,
            in_policy,
        }
    }

    /// Core's rule for `namespace` now.
    fn hold(&self, namespace: &str) -> Hold {
        let now = OffsetDateTime::now_utc();
        let scorer = *self.scorer.lock().unwrap_or_else(|e| e.into_inner());
        hold::hold(&self.rule, &scorer, &self.tier_read(namespace, now), now)
    }
}

/// This replica's identity in the Leases: the host name (the Pod name) and the process id.
fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "webhook-frontend".into());
    format!("{host}-{}", std::process::id())
}

/// Everything the Lease tasks share.
#[derive(Clone)]
pub(crate) struct Leases {
    pub(crate) client: kube::Client,
    pub(crate) readiness: Arc<Readiness>,
    pub(crate) holding: Arc<Holding>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Holds each namespace's Lease while the frontend is ready and can decide it, from the first moment it is
/// until `stop` (the shutdown signal), then releases them at once, while the server still drains: the
/// cluster-wide scorer takes the namespaces back without waiting for the drain or the Lease's expiry.
pub(crate) async fn hold_until(
    leases: Leases,
    namespaces: Vec<String>,
    stop: impl std::future::Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let identity = identity();
    let tasks: Vec<JoinHandle<()>> = namespaces
        .into_iter()
        .map(|ns| {
            tokio::spawn(hold_namespace(
                leases.clone(),
                ns,
                identity.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();
    stop.await;
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
}

/// One namespace: take the Lease when the instance can decide it, give it back when it cannot, until stop.
async fn hold_namespace(
    leases: Leases,
    ns: String,
    identity: String,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // Wait until ready and able to decide (or stopped).
        loop {
            if *stop.borrow() {
                return;
            }
            if leases.readiness.is_ready() && leases.holding.hold(&ns) == Hold::Hold {
                break;
            }
            let _ = tokio::time::timeout(CHECK_EVERY, stop.changed()).await;
        }
        let Some(held) = take(&leases.client, &ns, &identity, &mut stop).await else {
            return;
        };
        tracing::info!(namespace = %ns, %identity, lease = LEASE_NAME, "holding the namespace's Lease");
        // Hold until the instance cannot decide the namespace, or stop.
        let stopping = loop {
            if *stop.borrow() {
                break true;
            }
            if let Hold::Release(why) = leases.holding.hold(&ns) {
                tracing::warn!(namespace = %ns, reason = why.as_str(), why = ?why, "giving the namespace back to the cluster-wide instance");
                leases
                    .metrics
                    .restricted_releases
                    .get_or_create(&ReasonLabels {
                        reason: why.as_str(),
                    })
                    .inc();
                break false;
            }
            let _ = tokio::time::timeout(CHECK_EVERY, stop.changed()).await;
        };
        release(&ns, held).await;
        if stopping {
            return;
        }
    }
}

type Held = (
    watch::Receiver<bool>,
    JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
);

/// Takes the namespace's Lease (retrying until it can); `None` when stopped first.
async fn take(
    client: &kube::Client,
    ns: &str,
    identity: &str,
    stop: &mut watch::Receiver<bool>,
) -> Option<Held> {
    loop {
        if *stop.borrow() {
            return None;
        }
        let built = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(ns)
            .with_identity(identity)
            .with_duration(LEASE_DURATION.as_secs())
            .with_grace(RENEW_BEFORE.as_secs())
            .build()
            .await;
        match built {
            Ok(manager) => return Some(manager.watch().await),
            Err(err) => {
                tracing::warn!(namespace = %ns, %err, "cannot take the namespace's Lease yet; retrying");
                let _ = tokio::time::timeout(Duration::from_secs(1), stop.changed()).await;
            }
        }
    }
}

/// Releases one Lease (at most 5 s), so that the cluster-wide scorer takes the namespace back at once.
async fn release(ns: &str, (rx, task): Held) {
    drop(rx);
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(_))) => tracing::info!(namespace = %ns, "Lease released"),
        Ok(Ok(Err(err))) => tracing::warn!(namespace = %ns, %err, "releasing the Lease failed"),
        Ok(Err(err)) => tracing::warn!(namespace = %ns, %err, "Lease task failed"),
        Err(_) => tracing::warn!(namespace = %ns, "releasing the Lease timed out"),
    }
}
