//! GpuPolicyExceptions (`gpu-admission.io/v1alpha1`) as a watch cache, and the owner chains they are matched
//! against: `/validate-pod` and `/mutate-pod` hand both to core (`gpu_admission_core::exception`), which
//! decides which exception covers what, and when one has expired.
//!
//! - The CRD may not be installed (yet): the cache is an [`OptionalCache`], "not served" meanwhile, and no
//!   exception applies.
//! - An object whose spec does not read (the apiserver's schema and `/validate-exception` keep those out) is
//!   skipped, and logged once per resourceVersion.
//! - The chain's second hop (ReplicaSet → Deployment, Job → CronJob) comes from the frontend's one
//!   ReplicaSet and Job cache ([`WorkloadOwners`]), else one GET bounded by [`OWNER_READ_BUDGET`], the owner's
//!   uid checked against the reference: the bounded cache the workload resolution already keeps.

use std::sync::Mutex;
use std::time::Duration;

use gpu_admission_core::exception::{self, Exception, GpuPolicyException, Owner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::optional_api::{OptionalApi, OptionalCache};
use super::workloads::{OWNER_READ_BUDGET, WorkloadOwners};

/// How often a cluster without the CRD is asked again.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(30);

pub(crate) struct ExceptionCache {
    stored: OptionalCache<GpuPolicyException>,
    /// The last unreadable object logged (namespace/name@resourceVersion), so it is logged once.
    logged: Mutex<Option<String>>,
}

impl ExceptionCache {
    pub(crate) fn start(client: kube::Client) -> Self {
        let api = OptionalApi {
            group_version: "gpu-admission.io/v1alpha1",
            plural: exception::PLURAL,
            kind: exception::KIND,
            provider: "CRD",
            meanwhile: "no exception applies",
        };
        Self {
            stored: OptionalCache::start(client, api, DISCOVERY_INTERVAL),
            logged: Mutex::new(None),
        }
    }

    /// The readable exceptions of `namespace` (expired ones included: expiry is core's to judge).
    pub(crate) fn of_namespace(&self, namespace: &str) -> Vec<Exception> {
        let Some(store) = self.stored.synced_store() else {
            return Vec::new();
        };
        let objects = store.state_filter(|s| s.metadata.namespace.as_deref() == Some(namespace));
        let mut out = Vec::with_capacity(objects.len());
        for s in objects {
            match Exception::from_stored(&s) {
                Ok(e) => out.push(e),
                Err(why) => self.log_unreadable(&s.metadata, &why),
            }
        }
        out
    }

    fn log_unreadable(&self, meta: &ObjectMeta, why: &str) {
        let id = format!(
            "{}/{}@{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
            meta.resource_version.as_deref().unwrap_or("")
        );
        let Ok(mut last) = self.logged.lock() else {
            return;
        };
        if last.as_deref() != Some(id.as_str()) {
            tracing::warn!(
                exception = id,
                why,
                "GpuPolicyException skipped: it does not read"
            );
            *last = Some(id);
        }
    }
}

/// The owner chain of an object (`apiVersion`, kind, name, metadata) in `namespace`: the second hop read
/// through `owners` (none with `--no-kube`: the chain stops at the first hop).
pub(crate) async fn owner_chain(
    owners: Option<&WorkloadOwners>,
    (api_version, kind, name): (&str, &str, &str),
    meta: &ObjectMeta,
    namespace: &str,
) -> Vec<Owner> {
    let next = match (owners, exception::chain_query(meta, namespace)) {
        (Some(o), Some(q)) => Some(o.facts(&q, OWNER_READ_BUDGET).await),
        _ => None,
    };
    exception::chain(api_version, kind, name, meta, next.as_ref())
}
