//! The benchmark's objects: tier namespaces, the two Pod shapes, their creation by concurrent clients and
//! their deletion between rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::kwok::wait_for;
use gpu_admission_tests::names::JOB_TYPE_LABEL;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// The label every benchmark Pod carries: which run made it.
pub const RUN_LABEL: &str = "bench.gpu-admission.io/run";
/// Job types of the shipped policy that fit every tier's classes (16 GiB), cycled over the GPU Pods.
const JOB_TYPES: [&str; 3] = ["train-bert", "inference-llm", "batch-embedding"];

/// What a Pod asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// One `nvidia.com/gpu`, no class, no PriorityClass: the scorer decides.
    Gpu,
    /// CPU and memory only, `priorityClassName: gpu-default` (within every tier's cap): what now reaches the
    /// webhooks for the priority cap (a CPU-only Pod without a PriorityClass is still skipped by the
    /// registrations' matchConditions).
    Cpu,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Gpu => "GPU",
            Shape::Cpu => "CPU-only",
        }
    }
}

/// A Pod of `shape` named `name`, labelled with its run.
pub fn pod(name: &str, run: &str, shape: Shape, i: usize) -> Pod {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example/job:1",
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]}
    });
    match shape {
        Shape::Gpu => {
            p["metadata"]["labels"][JOB_TYPE_LABEL] = json!(JOB_TYPES[i % JOB_TYPES.len()]);
            p["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
        }
        Shape::Cpu => p["spec"]["priorityClassName"] = json!("gpu-default"),
    }
    serde_json::from_value(p).expect("a Pod")
}

/// `count` namespaces `{prefix}-NNN`, tier labels cycling over `tiers`; returns (name, tier).
pub async fn create_namespaces(
    cluster: &LocalCluster,
    prefix: &str,
    count: usize,
    tiers: &[String],
) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("{prefix}-{i:03}");
        let tier = tiers[i % tiers.len()].clone();
        cluster
            .create_namespace(&name, Some(&tier))
            .await
            .with_context(|| format!("namespace {name}"))?;
        out.push((name, tier));
    }
    Ok(out)
}

/// What creating the Pods of one run took.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Created {
    pub pods: usize,
    pub failed: usize,
    pub seconds: f64,
    pub per_second: f64,
    /// The first few failures' messages.
    pub errors: Vec<String>,
}

/// Creates `pods` Pods of `shape`, spread round-robin over `namespaces`, with `clients` (one task each, a
/// closed loop: each client sends its next Pod when the previous one is answered). Pod `i` is `{run}-{i}`.
pub async fn create_pods(
    clients: &[kube::Client],
    namespaces: &[(String, String)],
    pods: usize,
    run: &str,
    shape: Shape,
) -> Created {
    let run = run.to_string();
    let make = move |i: usize, _: &(String, String)| pod(&format!("{run}-{i}"), &run, shape, i);
    create_pods_with(clients, namespaces, pods, Arc::new(make)).await
}

/// Makes Pod `i` for its (namespace, tier).
pub type MakePod = Arc<dyn Fn(usize, &(String, String)) -> Pod + Send + Sync>;

/// Creates `pods` Pods made by `make`, Pod `i` in namespace `i % namespaces.len()`, with `clients` (one task
/// each, a closed loop).
pub async fn create_pods_with(
    clients: &[kube::Client],
    namespaces: &[(String, String)],
    pods: usize,
    make: MakePod,
) -> Created {
    let next = Arc::new(AtomicUsize::new(0));
    let namespaces: Arc<[(String, String)]> = namespaces.into();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let (client, next, namespaces, make) = (
            client.clone(),
            next.clone(),
            namespaces.clone(),
            make.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut failed, mut errors) = (0usize, Vec::new());
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    break;
                }
                let namespace = &namespaces[i % namespaces.len()];
                let p = make(i, namespace);
                let api = Api::<Pod>::namespaced(client.clone(), &namespace.0);
                if let Err(e) = api.create(&PostParams::default(), &p).await {
                    failed += 1;
                    if errors.len() < 3 {
                        let name = p.metadata.name.unwrap_or_default();
                        errors.push(format!("{}/{name}: {e}", namespace.0));
                    }
                }
            }
            (failed, errors)
        }));
    }
    let (mut failed, mut errors) = (0, Vec::new());
    for t in tasks {
        let (f, e) = t.await.expect("a creating client panicked");
        failed += f;
        errors.extend(e);
    }
    let seconds = started.elapsed().as_secs_f64();
    errors.truncate(5);
    Created {
        pods,
        failed,
        seconds,
        per_second: (pods - failed) as f64 / seconds,
        errors,
    }
}

/// Every benchmark Pod of run `run`, across namespaces, read in pages of 1,000.
pub async fn list_run(client: &kube::Client, run: &str) -> anyhow::Result<Vec<Pod>> {
    let api = Api::<Pod>::all(client.clone());
    let mut out = Vec::new();
    let mut lp = ListParams::default()
        .labels(&format!("{RUN_LABEL}={run}"))
        .limit(1000);
    loop {
        let page = api.list(&lp).await?;
        out.extend(page.items);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok(out),
        }
    }
}

/// Deletes every benchmark Pod in `namespaces` (at once: they were never bound, or their kubelet is kwok) and
/// waits until none is left.
pub async fn delete_all(
    client: &kube::Client,
    namespaces: &[(String, String)],
) -> anyhow::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let lp = ListParams::default().labels(RUN_LABEL);
    for (ns, _) in namespaces {
        Api::<Pod>::namespaced(client.clone(), ns)
            .delete_collection(&dp, &lp)
            .await
            .with_context(|| format!("deleting the Pods of {ns}"))?;
    }
    let all = Api::<Pod>::all(client.clone());
    wait_for(
        "every benchmark Pod gone",
        Duration::from_secs(300),
        || async {
            let left = all.list_metadata(&lp.clone().limit(1)).await?;
            Ok(left.items.is_empty())
        },
    )
    .await?;
    Ok(())
}

/// The decision annotation's value on a stored Pod, if any (`None`: admitted without a decision).
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}
