//! Leader election with a `coordination.k8s.io/v1` Lease (kube-lease-manager): only the holder reports
//! observations and converges the scorers' states. The Lease is a safeguard against doing the work twice,
//! not the guarantee of exactly-once: an old leader that has not yet noticed its loss may still report, and
//! the scorer de-duplicates by observation id.

use std::time::Duration;

use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// Lease timing.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Unique per replica (the Pod name).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal: the longest a dead leader blocks the other replica.
    pub duration: Duration,
    /// Renewal this long before expiry (also the clock skew tolerated between nodes).
    pub grace: Duration,
}

/// Starts competing for the Lease; the receiver says whether this replica holds it now. The task releases the
/// Lease when every receiver is dropped.
pub async fn elect(
    client: kube::Client,
    config: &LeaseConfig,
) -> anyhow::Result<(
    watch::Receiver<bool>,
    tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
)> {
    let manager = LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration.as_secs().max(1))
        .with_grace(config.grace.as_secs().max(1))
        .build()
        .await?;
    Ok(manager.watch().await)
}

/// Runs `round` every `interval` while this replica leads (the first at once when it starts leading), until
/// the election stops; the rounds the observer's leader keeps objects in step with (the floor's parameters,
/// the checkpoint-restore condition, the GPU ResourceQuotas).
pub async fn every_interval_while_leading<F, Fut>(
    mut leader: watch::Receiver<bool>,
    interval: Duration,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !*leader.borrow_and_update() {
            if leader.changed().await.is_err() {
                return;
            }
            continue;
        }
        tokio::select! {
            _ = tick.tick() => round().await,
            changed = leader.changed() => if changed.is_err() { return },
        }
    }
}
