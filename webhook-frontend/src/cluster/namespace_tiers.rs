//! A namespace-restricted instance's view of its namespaces' tiers (`--restrict-to-namespaces` with
//! `--no-kube`): each namespace read by name (`GET /api/v1/namespaces/NAME`) every [`READ_EVERY`], the tier
//! label kept with the time it was read. Least privilege: `get` on those Namespaces by `resourceNames`
//! (`overlays/namespaced/rbac.yaml`), no list or watch of the cluster's Namespaces. What was read decides the
//! tier of its Pods ([`super::ClusterFacts::Read`]) and whether it holds the namespace's Lease
//! ([`crate::restricted`], core's [`gpu_admission_core::ns_lock::hold`]).

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use time::OffsetDateTime;

/// How often each namespace is read.
pub(crate) const READ_EVERY: Duration = Duration::from_secs(5);

/// The tier labels as last read.
pub struct NamespaceTiers {
    namespaces: Vec<String>,
    tier_label: String,
    /// Namespace → when it was last read, and its tier label then.
    read: RwLock<HashMap<String, (OffsetDateTime, Option<String>)>>,
}

impl NamespaceTiers {
    pub(crate) fn new(namespaces: Vec<String>, tier_label: String) -> Self {
        Self {
            namespaces,
            tier_label,
            read: RwLock::default(),
        }
    }

    /// The label of `namespace` as last read (`None`: no label, or never read).
    pub(crate) fn tier(&self, namespace: &str) -> Option<String> {
        self.last_read(namespace).and_then(|(_, label)| label)
    }

    /// When `namespace` was last read and its label then.
    pub(crate) fn last_read(&self, namespace: &str) -> Option<(OffsetDateTime, Option<String>)> {
        self.read
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .cloned()
    }

    /// Every namespace read at least once.
    pub(crate) fn is_synced(&self) -> bool {
        let read = self.read.read().unwrap_or_else(|e| e.into_inner());
        self.namespaces.iter().all(|ns| read.contains_key(ns))
    }

    pub(crate) fn tier_label(&self) -> &str {
        &self.tier_label
    }

    /// Reads every namespace now, then every [`READ_EVERY`], forever. A failed read keeps the last value
    /// and its time: it grows stale, and the Lease is given back (core's `hold`).
    pub(crate) async fn read_forever(self: std::sync::Arc<Self>, client: kube::Client) {
        let api = Api::<Namespace>::all(client);
        loop {
            for ns in &self.namespaces {
                match api.get(ns).await {
                    Ok(namespace) => {
                        let label = namespace
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(&self.tier_label))
                            .cloned();
                        let previous = self
                            .read
                            .write()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(ns.clone(), (OffsetDateTime::now_utc(), label.clone()));
                        if previous.as_ref().map(|(_, l)| l) != Some(&label) {
                            tracing::info!(namespace = %ns, tier = ?label, "namespace tier read");
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
