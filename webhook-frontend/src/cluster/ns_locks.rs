//! The cluster-wide instance's view of namespace-restricted instances: one watch of the
//! `coordination.k8s.io/v1` Leases named `gpu-admission-ns-lock` (field selector on the name, every
//! namespace) and one of the `MutatingWebhookConfiguration`s, kept as reflector stores. A namespace's Lease
//! counts only where a registration calls a restricted instance for that namespace (core's
//! [`registered_namespaces`]: only a cluster admin creates one; a tenant's own Lease counts for nothing).
//! `/mutate-pod` reads a namespace's Lease from it and asks core's
//! [`gpu_admission_core::ns_lock::who_scores`] who scores the Pod. RBAC: `list`/`watch` on `leases` and on
//! `mutatingwebhookconfigurations`.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use gpu_admission_core::ns_lock::registration::registered_namespaces;
use gpu_admission_core::ns_lock::{LEASE_NAME, NsLock};

use super::kube_cache::drive;

/// The `gpu-admission-ns-lock` Leases of every namespace, and the registrations.
pub(crate) struct NsLocks {
    leases: Store<Lease>,
    registrations: Store<MutatingWebhookConfiguration>,
}

impl NsLocks {
    /// Starts the watches in background tasks. Until they have listed, no namespace is locked: the
    /// cluster-wide scorer decides (and decides again what a restricted instance recorded).
    pub(crate) fn start(client: kube::Client) -> Self {
        let (leases, writer) = reflector::store();
        let stream = watcher(
            Api::<Lease>::all(client.clone()),
            watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}")),
        )
        .default_backoff()
        .reflect(writer);
        tokio::spawn(drive(stream, "leases"));
        let (registrations, writer) = reflector::store();
        let stream = watcher(
            Api::<MutatingWebhookConfiguration>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer);
        tokio::spawn(drive(stream, "mutatingwebhookconfigurations"));
        Self {
            leases,
            registrations,
        }
    }

    /// The Lease of `namespace`, as core reads it; `None` when there is none, or no registration calls a
    /// restricted instance for the namespace.
    pub(crate) fn lock(&self, namespace: &str) -> Option<NsLock> {
        let registered = self
            .registrations
            .state()
            .iter()
            .any(|mwc| registered_namespaces(mwc).contains(namespace));
        if !registered {
            return None;
        }
        let lease = self
            .leases
            .get(&ObjectRef::new(LEASE_NAME).within(namespace))?;
        Some(NsLock::of_lease(&lease))
    }
}
