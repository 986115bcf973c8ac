//! kwok as the kubelet of fake GPU Nodes, in a [`crate::cluster::LocalCluster`] started with
//! [`crate::cluster::Components::ALL`].
//!
//! A Node annotated `kwok.x-k8s.io/node=fake` is kept Ready by kwok (conditions, heartbeats; the node
//! lifecycle controller then lifts its `not-ready` taint); a Pod the scheduler binds there goes through its
//! init containers to Running, and to Succeeded after its [`POD_COMPLETE_DELAY`] annotation (e.g. `"3s"`); a
//! deleted Pod (a preemption victim, say) is removed as a kubelet confirms it. kwok does not pick up Pods
//! bound before it started: start the cluster before creating the Pods it should run.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpu_admission_policy::GpuClass;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// The annotation kwok manages Nodes by (`--manage-nodes-with-annotation-selector` in `start.sh`).
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// How long a Pod runs before kwok marks it Succeeded (a Go duration, e.g. `"3s"`).
pub const POD_COMPLETE_DELAY: &str = "pod-complete.stage.kwok.x-k8s.io/delay";
/// The upper bound of that delay's jitter (default 5 s): a [`POD_COMPLETE_DELAY`] above it is cut to it, as
/// observed with kwok 0.8.0, so a Pod meant to run longer than 5 s states both.
pub const POD_COMPLETE_JITTER: &str = "pod-complete.stage.kwok.x-k8s.io/jitter-delay";

/// A fake Node of catalog class `class` holding `gpus` devices of extended resource `resource`: the class's
/// node label, its taint (`NoSchedule`, as GPU operators taint GPU Nodes) when the catalog names one, and
/// CPU, memory and Pod room enough never to be the limit.
pub fn gpu_node(name: &str, class: &GpuClass, resource: &str, gpus: u32) -> Value {
    let mut labels =
        json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"});
    if !class.node_label_key.is_empty() {
        labels[&class.node_label_key] = json!(class.node_label_value);
    }
    let taints = match class.taint_key.as_deref() {
        None | Some("") => json!([]),
        Some(key) => json!([{"key": key, "value": "present", "effect": "NoSchedule"}]),
    };
    let room = json!({"cpu": "96", "memory": "1024Gi", "pods": "110", resource: gpus.to_string()});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {FAKE_NODE_ANNOTATION: "fake"}},
        "spec": {"taints": taints},
        "status": {"capacity": room, "allocatable": room}
    })
}

/// Creates the Nodes and waits until kwok has made each Ready and the node lifecycle controller has lifted
/// its `node.kubernetes.io/not-ready` taint (until then the scheduler places nothing there).
pub async fn create_ready_nodes(
    client: &kube::Client,
    nodes: &[Value],
) -> anyhow::Result<Duration> {
    let api = Api::<Node>::all(client.clone());
    let started = Instant::now();
    for n in nodes {
        let node: Node = serde_json::from_value(n.clone())?;
        api.create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating Node {}", n["metadata"]["name"]))?;
    }
    for n in nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        wait_for(
            &format!("Node {name} Ready and schedulable"),
            Duration::from_secs(60),
            || async {
                let node = api.get(name).await?;
                Ok(is_ready(&node) && !tainted_not_ready(&node))
            },
        )
        .await?;
    }
    Ok(started.elapsed())
}

/// The Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn tainted_not_ready(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")))
}

/// The Pod's phase (`Pending`, `Running`, `Succeeded`, …), empty when it has none yet.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Polls `check` every 200 ms until it says `true`; fails after `timeout` with the last error.
pub async fn wait_for<F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    let mut last = String::new();
    loop {
        match check().await {
            Ok(true) => return Ok(started.elapsed()),
            Ok(false) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`create_ready_nodes`] for many Nodes: created by `clients` concurrent requests, then waited for by listing
/// them all (one request per round, not one per Node) until every one is Ready and untainted.
pub async fn create_ready_nodes_bulk(
    client: &kube::Client,
    nodes: &[Value],
    clients: usize,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    create_nodes_bulk(client, nodes, clients).await?;
    let api = Api::<Node>::all(client.clone());
    let want = nodes.len();
    wait_for(
        &format!("{want} Nodes Ready and schedulable"),
        Duration::from_secs(60 + want as u64 / 10),
        || async {
            // One list of every Node a second, not five (wait_for's pace) of a list this size.
            tokio::time::sleep(Duration::from_millis(800)).await;
            let listed = api.list(&ListParams::default()).await?;
            let ready = listed
                .items
                .iter()
                .filter(|n| is_ready(n) && !tainted_not_ready(n))
                .count();
            Ok(ready >= want)
        },
    )
    .await?;
    Ok(started.elapsed())
}

/// Creates the Nodes by `clients` concurrent requests (without kwok nothing makes them Ready).
pub async fn create_nodes_bulk(
    client: &kube::Client,
    nodes: &[Value],
    clients: usize,
) -> anyhow::Result<()> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let nodes = std::sync::Arc::new(nodes.to_vec());
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (api, next, nodes) = (
            Api::<Node>::all(client.clone()),
            next.clone(),
            nodes.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(n) = nodes.get(i) else {
                    return anyhow::Ok(());
                };
                let node: Node = serde_json::from_value(n.clone())?;
                api.create(&PostParams::default(), &node)
                    .await
                    .with_context(|| format!("creating Node {}", n["metadata"]["name"]))?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
