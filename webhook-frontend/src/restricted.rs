//! Namespace-restricted mode (`--restrict-to-namespaces`): this instance scores the Pods of its
//! namespaces only, and holds the `coordination.k8s.io/v1` Lease `gpu-admission-ns-lock` in each of them
//! (kube-lease-manager, as the observer's leader election) from the moment it is first ready, renewed
//! [`RENEW_BEFORE`] before it expires, and released as soon as the shutdown signal comes, so that the
//! cluster-wide instance leaves scoring of those namespaces to it (and takes them back at once on shutdown). Losing the instance (crash, `SIGKILL`) gives the namespaces
//! back to the cluster-wide scorer within [`LEASE_DURATION`].

use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::ns_lock::LEASE_NAME;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::readiness::Readiness;

/// How long a Lease holds after its last renewal: the longest the cluster-wide instance leaves a namespace
/// to an instance that is gone.
pub(crate) const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Renewed this long before it expires.
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(5);

/// The Leases held, one task per namespace; dropping the receivers releases them.
pub(crate) struct HeldLeases {
    held: Vec<(
        String,
        watch::Receiver<bool>,
        JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    )>,
}

/// This replica's identity in the Leases: the host name (the Pod name) and the process id.
fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "webhook-frontend".into());
    format!("{host}-{}", std::process::id())
}

/// Holds the Leases from the first moment the frontend is ready until `stop` (the shutdown signal), then
/// releases them at once, while the server still drains: the cluster-wide scorer takes the namespaces back
/// without waiting for the drain or the Lease's expiry.
pub(crate) async fn hold_until(
    client: kube::Client,
    namespaces: Vec<String>,
    readiness: Arc<Readiness>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    tokio::select! {
        held = hold_when_ready(client, namespaces, readiness) => {
            stop.as_mut().await;
            held.release().await;
        }
        _ = stop.as_mut() => {}
    }
}

/// Waits until the frontend is ready, then takes the Lease of every namespace (retrying until it can).
async fn hold_when_ready(
    client: kube::Client,
    namespaces: Vec<String>,
    readiness: Arc<Readiness>,
) -> HeldLeases {
    while !readiness.is_ready() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let identity = identity();
    let mut held = Vec::new();
    for ns in namespaces {
        loop {
            let built = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
                .with_namespace(&ns)
                .with_identity(&identity)
                .with_duration(LEASE_DURATION.as_secs())
                .with_grace(RENEW_BEFORE.as_secs())
                .build()
                .await;
            match built {
                Ok(manager) => {
                    let (rx, task) = manager.watch().await;
                    tracing::info!(namespace = %ns, %identity, lease = LEASE_NAME, "holding the namespace's Lease");
                    held.push((ns, rx, task));
                    break;
                }
                Err(err) => {
                    tracing::warn!(namespace = %ns, %err, "cannot take the namespace's Lease yet; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
    HeldLeases { held }
}

impl HeldLeases {
    /// Releases every Lease (at most 5 s each), so that the cluster-wide scorer takes the namespaces back at once.
    async fn release(self) {
        for (ns, rx, task) in self.held {
            drop(rx);
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(Ok(_))) => tracing::info!(namespace = %ns, "Lease released"),
                Ok(Ok(Err(err))) => {
                    tracing::warn!(namespace = %ns, %err, "releasing the Lease failed")
                }
                Ok(Err(err)) => tracing::warn!(namespace = %ns, %err, "Lease task failed"),
                Err(_) => tracing::warn!(namespace = %ns, "releasing the Lease timed out"),
            }
        }
    }
}
