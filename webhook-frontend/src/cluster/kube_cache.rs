//! Watch caches of Namespaces (their labels: the tier label), Nodes (their labels: the class label a
//! `spec.nodeName` is checked against) and PriorityClasses (scheduling.k8s.io/v1). Namespaces and Nodes are
//! watched through the metadata API (a `PartialObjectMeta` watch: a Node's status never crosses the wire)
//! and kept as name and labels only: their `managedFields` and annotations were most of the frontend's
//! memory on a cluster of thousands of Nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt, TryStreamExt};
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
    /// Whether a Node's labels changed (or a Node came or went) since [`Self::take_node_changes`] last ran.
    node_changes: Arc<AtomicBool>,
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
        let node_changes = Arc::new(AtomicBool::new(false));
        let (seen, changed) = (nodes.clone(), node_changes.clone());
        let node_stream = watcher(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(keep_name_and_labels)
        .map_ok(move |event| {
            if relabels(&seen, &event) {
                changed.store(true, Ordering::Release);
            }
            event
        })
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
            node_changes,
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
    /// Whether a Node's labels changed, or a Node came or went, since last asked (the one reader: the quota
    /// usage, whose counts read the class of a Pod's Node).
    pub(crate) fn take_node_changes(&self) -> bool {
        self.node_changes.swap(false, Ordering::AcqRel)
    }

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

/// Whether a Node `event` changes what the Node cache answers: a Node new to it, one whose labels differ
/// from the cached ones, a deleted one, or a relist done.
fn relabels(
    cached: &Store<PartialObjectMeta<Node>>,
    event: &watcher::Event<PartialObjectMeta<Node>>,
) -> bool {
    match event {
        watcher::Event::Apply(node) => cached
            .get(&ObjectRef::from_obj(node))
            .is_none_or(|old| old.metadata.labels != node.metadata.labels),
        watcher::Event::Delete(_) | watcher::Event::InitDone => true,
        watcher::Event::Init | watcher::Event::InitApply(_) => false,
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

    fn node(labels: serde_json::Value) -> PartialObjectMeta<Node> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "n1", "labels": labels}
        }))
        .unwrap()
    }

    /// A Node's status update (the same labels) recounts nothing; a relabel, a new Node or a deleted one does.
    #[test]
    fn only_a_node_whose_labels_changed_marks_the_counts_stale() {
        let (cached, mut writer) = reflector::store();
        let l4 = node(serde_json::json!({"gpu-admission.io/class": "l4"}));
        assert!(relabels(&cached, &watcher::Event::Apply(l4.clone())));
        writer.apply_watcher_event(&watcher::Event::Apply(l4.clone()));
        assert!(!relabels(&cached, &watcher::Event::Apply(l4.clone())));
        let a100 = node(serde_json::json!({"gpu-admission.io/class": "a100"}));
        assert!(relabels(&cached, &watcher::Event::Apply(a100)));
        assert!(relabels(&cached, &watcher::Event::Delete(l4)));
    }
}
