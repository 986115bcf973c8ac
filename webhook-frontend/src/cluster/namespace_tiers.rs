//! A namespace-restricted instance's view of its namespaces' tiers (`--restrict-to-namespaces` with
//! `--no-kube`): each namespace read by name (`GET /api/v1/namespaces/NAME`) every [`READ_EVERY`], the tier
//! labels kept with the time they were read (the tier label is the policy's, looked up when asked). Least privilege: `get` on those Namespaces by `resourceNames`
//! (`overlays/namespaced/rbac.yaml`), no list or watch of the cluster's Namespaces. What was read decides the
//! tier of its Pods ([`super::ClusterFacts::Read`]) and whether it holds the namespace's Lease
//! ([`crate::restricted`], core's [`gpu_admission_core::ns_lock::hold`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use time::OffsetDateTime;

/// How often each namespace is read.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(5);

/// A namespace's labels, and when they were read.
type Read = (OffsetDateTime, BTreeMap<String, String>);

/// The namespaces' labels as last read (the tier label is the policy's, looked up when asked).
pub struct NamespaceTiers {
    namespaces: Vec<String>,
    /// Namespace → when it was last read, and its labels then.
    read: RwLock<HashMap<String, Read>>,
}

impl NamespaceTiers {
    pub(crate) fn new(namespaces: Vec<String>) -> Self {
        Self {
            namespaces,
            read: RwLock::default(),
        }
    }

    /// The value of label `tier_label` of `namespace` as last read (`None`: no label, or never read).
    pub(crate) fn tier(&self, namespace: &str, tier_label: &str) -> Option<String> {
        self.last_read(namespace, tier_label)
            .and_then(|(_, label)| label)
    }

    /// When `namespace` was last read and its label `tier_label` then.
    pub(crate) fn last_read(
        &self,
        namespace: &str,
        tier_label: &str,
    ) -> Option<(OffsetDateTime, Option<String>)> {
        self.read
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .map(|(at, labels)| (*at, labels.get(tier_label).cloned()))
    }

    /// Every namespace read at least once.
    pub(crate) fn is_synced(&self) -> bool {
        let read = self.read.read().unwrap_or_else(|e| e.into_inner());
        self.namespaces.iter().all(|ns| read.contains_key(ns))
    }

    /// Reads every namespace now, then every [`READ_EVERY`], forever. A failed read keeps the last value
    /// and its time: it grows stale, and the Lease is given back (core's `hold`).
    pub(crate) async fn read_forever(self: std::sync::Arc<Self>, client: kube::Client) {
        let api = Api::<Namespace>::all(client);
        loop {
            for ns in &self.namespaces {
                match api.get(ns).await {
                    Ok(namespace) => {
                        let labels = namespace.metadata.labels.unwrap_or_default();
                        let previous = self
                            .read
                            .write()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(ns.clone(), (OffsetDateTime::now_utc(), labels.clone()));
                        if previous.as_ref().map(|(_, l)| l) != Some(&labels) {
                            tracing::info!(namespace = %ns, ?labels, "namespace labels read");
                        }
                    }
                    Err(err) => {
                        tracing::warn!(namespace = %ns, %err, "cannot read the namespace's tier label")
                    }
                }
            }
            tokio::time::sleep(READ_EVERY).await;
        }
    }
}
