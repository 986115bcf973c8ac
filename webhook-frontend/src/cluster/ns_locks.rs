//! The cluster-wide instance's view of namespace-restricted instances: one watch of the
//! `coordination.k8s.io/v1` Leases named `gpu-admission-ns-lock` (field selector on the name, every
//! namespace), kept as a reflector store. `/mutate-pod` reads a namespace's Lease from it and asks core's
//! [`gpu_admission_core::ns_lock::who_scores`] who scores the Pod. RBAC: `list`/`watch` on `leases`.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

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
        Some(NsLock::of_lease(&lease))
    }
}
