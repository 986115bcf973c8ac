//! Watch caches of Namespaces (metadata only: the tier label), Nodes (metadata only: the class label a
//! `spec.nodeName` is checked against) and PriorityClasses (scheduling.k8s.io/v1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::Api;
use kube::core::PartialObjectMeta;
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
        .reflect(ns_writer);
        let node_stream = watcher(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
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
