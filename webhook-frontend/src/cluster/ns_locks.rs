//! The cluster-wide instance's view of namespace-restricted instances (issue 38): one watch of the
//! `coordination.k8s.io/v1` Leases named `gpu-admission-ns-lock` (field selector on the name, every
//! namespace), kept as a reflector store. `/mutate-pod` reads a namespace's Lease from it and asks core's
//! [`gpu_admission_core::ns_lock::who_scores`] who scores the Pod. RBAC: `list`/`watch` on `leases`.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use time::OffsetDateTime;

use gpu_admission_core::ns_lock::{LEASE_NAME, NsLock};

use super::kube_cache::drive;

/// The `gpu-admission-ns-lock` Leases of every namespace.
pub(crate) struct NsLocks {
    leases: Store<Lease>,
}

impl NsLocks {
    /// Starts the watch in a background task. Until it has listed, no namespace is locked: the cluster-wide
    /// scorer decides, which a restricted instance's settled Pods never reach (they are skipped as decided).
    pub(crate) fn start(client: kube::Client) -> Self {
        let (leases, writer) = reflector::store();
        let stream = watcher(
            Api::<Lease>::all(client),
            watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}")),
        )
        .default_backoff()
        .reflect(writer);
        tokio::spawn(drive(stream, "leases"));
        Self { leases }
    }

    /// The Lease of `namespace`, as core reads it; `None` when there is none.
    pub(crate) fn lock(&self, namespace: &str) -> Option<NsLock> {
        let lease = self
            .leases
            .get(&ObjectRef::new(LEASE_NAME).within(namespace))?;
        Some(of_lease(&lease))
    }
}

/// A Lease's spec as core's [`NsLock`].
pub(crate) fn of_lease(lease: &Lease) -> NsLock {
    let spec = lease.spec.as_ref();
    NsLock {
        holder: spec.and_then(|s| s.holder_identity.clone()),
        renewed: spec
            .and_then(|s| s.renew_time.as_ref())
            .and_then(|t| OffsetDateTime::from_unix_timestamp_nanos(t.0.as_nanosecond()).ok()),
        duration_secs: spec.and_then(|s| s.lease_duration_seconds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_as_core_reads_it() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": LEASE_NAME, "namespace": "team-a"},
            "spec": {"holderIdentity": "team-a-frontend-1", "leaseDurationSeconds": 15,
                     "renewTime": "2026-11-26T18:00:00.250000Z"}
        }))
        .unwrap();
        let lock = of_lease(&lease);
        assert_eq!(lock.holder.as_deref(), Some("team-a-frontend-1"));
        assert_eq!(lock.duration_secs, Some(15));
        assert_eq!(
            lock.expires(),
            Some(time::macros::datetime!(2026-11-26 18:00:15.25 UTC))
        );
        let released: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": LEASE_NAME, "namespace": "team-a"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(of_lease(&released).expires(), None);
    }
}
