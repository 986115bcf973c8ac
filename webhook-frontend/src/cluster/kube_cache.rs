//! Watch caches of Namespaces (their labels: the tier label), Nodes (their labels: the class label a
//! `spec.nodeName` is checked against) and PriorityClasses (scheduling.k8s.io/v1). Namespaces and Nodes are
//! watched through the metadata API (`Api<PartialObjectMeta>`: a Node's status never crosses the wire) and
//! kept as name and labels only: their `managedFields` and annotations were most of the frontend's memory on a cluster of
//! thousands of Nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use kube::core::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use gpu_admission_core::priority_class::{PriorityClassFacts, PriorityClassLookup};

use super::dra::DraCaches;

pub struct KubeCaches {
    namespaces: Store<PartialObjectMeta<Namespace>>,
    nodes: Store<PartialObjectMeta<Node>>,
    priority_classes: Store<PriorityClass>,
    dra: DraCaches,
    synced: Arc<AtomicBool>,
}

/// Builds a client from the usual configuration (KUBECONFIG, ~/.kube/config, in-cluster). A missing or
/// broken configuration is an error: there is no silent fallback to `--no-kube`.
pub(crate) async fn client() -> anyhow::Result<kube::Client> {
    let config = kube::Config::infer().await.map_err(|e| {
        anyhow::anyhow!(
            "no usable Kubernetes configuration ({e}); set KUBECONFIG or run in a cluster, or pass --no-kube \
             (with --namespace-tier NS=TIER) to run without the Kubernetes API"
        )
    })?;
    kube::Client::try_from(config)
        .map_err(|e| anyhow::anyhow!("building the Kubernetes client: {e}"))
}

impl KubeCaches {
    /// Starts the watches in background tasks; [`Self::is_synced`] turns true once all listed completely.
    pub(crate) fn start(client: kube::Client) -> Self {
        let (namespaces, ns_writer) = reflector::store();
        let (nodes, node_writer) = reflector::store();
        let (priority_classes, pc_writer) = reflector::store();
        let ns_stream = watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(keep_name_and_labels)
        .reflect(ns_writer);
        let node_stream = watcher(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(keep_name_and_labels)
        .reflect(node_writer);
        let pc_stream = watcher(
            Api::<PriorityClass>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(pc_writer);
        tokio::spawn(drive(ns_stream, "namespaces"));
        tokio::spawn(drive(node_stream, "nodes"));
        tokio::spawn(drive(pc_stream, "priorityclasses"));

        let synced = Arc::new(AtomicBool::new(false));
        let (ns, no, pc, flag) = (
            namespaces.clone(),
            nodes.clone(),
            priority_classes.clone(),
            synced.clone(),
        );
        tokio::spawn(async move {
            if ns.wait_until_ready().await.is_ok()
                && no.wait_until_ready().await.is_ok()
                && pc.wait_until_ready().await.is_ok()
            {
                flag.store(true, Ordering::Release);
                tracing::info!(
                    namespaces = ns.len(),
                    nodes = no.len(),
                    priority_classes = pc.len(),
                    "kube caches synced"
                );
            }
        });
        Self {
            dra: DraCaches::start(client),
            namespaces,
            nodes,
            priority_classes,
            synced,
        }
    }

    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) && self.dra.is_ready()
    }

    /// The DRA claims and claim templates (empty on a cluster without DRA).
    pub(crate) fn dra(&self) -> &DraCaches {
        &self.dra
    }

    /// The value of the policy's tier label (`tier_label`) on `namespace`.
    pub(crate) fn namespace_tier(&self, namespace: &str, tier_label: &str) -> Option<String> {
        let ns = self.namespaces.get(&ObjectRef::new(namespace))?;
        ns.metadata.labels.as_ref()?.get(tier_label).cloned()
    }
}

impl KubeCaches {
    /// The labels of a Node, `None` for a Node the cache does not hold.
    pub(crate) fn node_labels(&self, name: &str) -> Option<Option<BTreeMap<String, String>>> {
        let node = self.nodes.get(&ObjectRef::new(name))?;
        Some(node.metadata.labels.clone())
    }
}

impl PriorityClassLookup for KubeCaches {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        PriorityClassFacts::of_cluster(&*self.priority_classes.get(&ObjectRef::new(name))?)
    }
}

/// What the Namespace and Node caches read: the name (the store's key) and the labels.
fn keep_name_and_labels<K>(object: &mut PartialObjectMeta<K>) {
    let meta = std::mem::take(&mut object.metadata);
    object.metadata = ObjectMeta {
        name: meta.name,
        labels: meta.labels,
        ..ObjectMeta::default()
    };
}

/// Polls a reflector stream forever, logging watch errors (the backoff retries them).
pub(crate) async fn drive<S, T>(stream: S, what: &'static str)
where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        if let Err(err) = event {
            tracing::warn!(%err, resource = what, "watch error (retrying with backoff)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_node_keeps_its_name_and_labels_only() {
        let mut node: PartialObjectMeta<Node> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "n1", "uid": "u", "resourceVersion": "7",
                "labels": {"gpu-admission.io/class": "l4"},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "managedFields": [{"manager": "kwok", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}}}}]}
        }))
        .unwrap();
        keep_name_and_labels(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(
            node.metadata.labels.unwrap()["gpu-admission.io/class"],
            "l4"
        );
        assert!(node.metadata.managed_fields.is_none());
        assert!(node.metadata.annotations.is_none());
        assert!(node.metadata.uid.is_none());
    }
}
