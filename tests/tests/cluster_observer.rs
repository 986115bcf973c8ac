//! The runtime observer against a real kube-apiserver, two real scorer processes and two real observer
//! processes. There is no kubelet and no scheduler: the test plays them, creating Nodes labelled with catalog
//! classes, decided GPU Pods (the frontend's label and annotations), binding them (`pods/binding`) and writing
//! their status through the status subresource (main containers terminated with `startedAt`/`finishedAt`).
//!
//! The observers run as the observer's ServiceAccount with exactly the RBAC the install ships.
//!
//! What must hold:
//! - every finished Pod is learned exactly once (the scorers' observation counts, the observers' logs), with
//!   the class of its Node and the job types that ran beside it; evicted, OOM-killed and deleted Pods are
//!   skipped and counted by reason;
//! - killing the leader: the other observer takes the Lease; what finished meanwhile is reported, nothing is
//!   learned twice (re-sent runs come back as duplicates);
//! - the answers change as the truth says: a job type that runs 5x slower than its prior on its best class
//!   stops being sent there;
//! - a job type the policy does not list is reported with the Pod's workload class, learned, and shown by
//!   Explain (its runs and estimate on the class it ran on);
//! - a scorer replica killed and replaced answers with the learned estimates within seconds, and the
//!   ConfigMap holds the learned state; losing every scorer replica and the leading observer at once, a
//!   fresh replica gets the same learned state back (same digest, the unlisted job type included) through a
//!   new observer that reads the ConfigMap;
//! - poisoning: gold's 15 real `train-llama` runs, then another tenant's 120 runs of 2 s under that
//!   job type (a third next to a job type of its own) leave gold's decision unchanged, its estimates within
//!   2x and its avoid-list as it was; before them, bronze reporting a listed job type nobody has run
//!   (`train-resnet`, 6 runs of 2-3 s) leaves gold's decision for it and its estimates within 2x (no first
//!   reporter owns a listed job type); the implausibly fast runs are counted; a run on a class its
//!   decision record does not allow is skipped (`not_where_decided`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient;
use gpu_admission_proto::scorer::v1::{
    ExportStateRequest, GpuVendor, LearnedState, ScoreRequest, ScoreResponse,
};
use gpu_admission_tests::cluster::{LocalCluster, service_account_kubeconfig};
use gpu_admission_tests::names::{ANN_DECIDED_AT, ANN_GPU_CLASS, ANN_PLACEMENT, JOB_TYPE_LABEL};
use gpu_admission_tests::observer::{Observer, metric_value};
use gpu_admission_tests::{ChildProcess, Scorer};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
const SYSTEM_NS: &str = "gpu-admission";
const LEASE: &str = "gpu-admission-observer";
const SERVICE_ACCOUNT: &str = "gpu-admission-observer";
const STATE_CM: &str = "gpu-admission-learned-state";
const TIER: &str = "gold";
const ANN_WORKLOAD_CLASS: &str = "gpu-admission.io/workload-class";
/// A job type the policy does not list (the observer reports it with the Pod's workload class).
const UNLISTED: &str = "team-embedder-v2";
/// Its runtime on the runner-up's node.
const UNLISTED_SECONDS: i64 = 2_400;
/// Runs are placed in the past, one slot apart, so that only the Pods meant to overlap do.
const SLOT_SECONDS: i64 = 400_000;

/// The test's kubelet: creates decided Pods, binds them and writes their status.
struct Kubelet {
    pods: Api<Pod>,
    base: i64,
    next_slot: i64,
    /// Each node's class: the decision record of a Pod bound there names it (our placement pinned it).
    classes: BTreeMap<String, String>,
}

fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .unwrap()
        .to_string()
}

fn container_status(state: Value) -> Value {
    json!([{"name": "main", "ready": false, "restartCount": 0, "image": "trainer:1", "imageID": "",
        "state": state}])
}

impl Kubelet {
    /// A free slot: (start, …) in the past, never overlapping another slot.
    fn slot(&mut self) -> i64 {
        self.next_slot += 1;
        self.base + self.next_slot * SLOT_SECONDS
    }

    /// Creates a decided 1-GPU Pod of `job_type` and binds it to `node`; returns its UID.
    async fn create_bound(&self, name: &str, job_type: &str, node: &str) -> anyhow::Result<String> {
        self.create_bound_as(name, job_type, None, node).await
    }

    /// [`Kubelet::create_bound`], with the Pod's `gpu-admission.io/workload-class` when given.
    async fn create_bound_as(
        &self,
        name: &str,
        job_type: &str,
        workload_class: Option<&str>,
        node: &str,
    ) -> anyhow::Result<String> {
        let class = self.classes.get(node).cloned().unwrap_or_default();
        self.create_recorded(name, job_type, workload_class, node, &class)
            .await
    }

    /// [`Kubelet::create_bound_as`] with a decision record that pinned the Pod to `class`.
    async fn create_recorded(
        &self,
        name: &str,
        job_type: &str,
        workload_class: Option<&str>,
        node: &str,
        class: &str,
    ) -> anyhow::Result<String> {
        let mut annotations = json!({ANN_DECIDED_AT: "2026-11-22T10:00:00Z",
            ANN_GPU_CLASS: class, ANN_PLACEMENT: "gpu-admission"});
        if let Some(w) = workload_class {
            annotations[ANN_WORKLOAD_CLASS] = w.into();
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.pods.namespace().unwrap_or(NS),
                "labels": {JOB_TYPE_LABEL: job_type},
                "annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        }))?;
        let created = self.pods.create(&PostParams::default(), &pod).await?;
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        self.pods
            .create_subresource::<Value, Value>("binding", name, &PostParams::default(), &binding)
            .await?;
        Ok(created.metadata.uid.unwrap())
    }

    async fn status(&self, name: &str, status: Value) -> anyhow::Result<()> {
        self.pods
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    async fn running(&self, name: &str, start: i64) -> anyhow::Result<()> {
        self.status(name, json!({"phase": "Running", "startTime": rfc3339(start),
            "containerStatuses": container_status(json!({"running": {"startedAt": rfc3339(start)}}))}))
            .await
    }

    async fn terminated(
        &self,
        name: &str,
        phase: &str,
        reason: &str,
        exit_code: i32,
        start: i64,
        end: i64,
    ) -> anyhow::Result<()> {
        self.status(
            name,
            json!({"phase": phase, "startTime": rfc3339(start),
            "containerStatuses": container_status(json!({"terminated": {"exitCode": exit_code,
                "reason": reason, "startedAt": rfc3339(start), "finishedAt": rfc3339(end)}}))}),
        )
        .await
    }

    /// A whole successful run: created, bound, running, succeeded.
    async fn finished(
        &self,
        name: &str,
        job_type: &str,
        node: &str,
        start: i64,
        seconds: i64,
    ) -> anyhow::Result<String> {
        let uid = self.create_bound(name, job_type, node).await?;
        self.running(name, start).await?;
        self.terminated(name, "Succeeded", "Completed", 0, start, start + seconds)
            .await?;
        Ok(uid)
    }
}

/// One `observation reported` log line of an observer (JSON logs).
#[derive(Debug, Clone)]
struct Reported {
    id: String,
    gpu_class: String,
    job_type: String,
    runtime_seconds: f64,
    colocated: Vec<String>,
    result: String,
}

fn reported(observer: &Observer) -> Vec<Reported> {
    observer
        .reports()
        .into_iter()
        .map(|v| {
            let s = |k: &str| {
                v[k].as_str()
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_string()
            };
            let colocated: Vec<String> =
                serde_json::from_str(v["colocated"].as_str().unwrap_or("[]")).unwrap_or_default();
            Reported {
                id: s("id"),
                gpu_class: s("gpu_class"),
                job_type: s("job_type"),
                runtime_seconds: v["runtime_seconds"].as_f64().unwrap_or(-1.0),
                colocated,
                result: s("result"),
            }
        })
        .collect()
}

async fn export(addr: &str) -> anyhow::Result<LearnedState> {
    let mut c = ScorerClient::connect(addr.to_string()).await?;
    Ok(c.export_state(ExportStateRequest {}).await?.into_inner())
}

fn request(job_type: &str) -> ScoreRequest {
    ScoreRequest {
        request_id: "cluster-observer".into(),
        namespace: NS.into(),
        tier: TIER.into(),
        job_type: job_type.into(),
        gpu_count: 1,
        gpu_vendor: GpuVendor::Nvidia as i32,
        ..Default::default()
    }
}

async fn score(addr: &str, job_type: &str) -> anyhow::Result<ScoreResponse> {
    let mut c = ScorerClient::connect(addr.to_string()).await?;
    Ok(c.score(request(job_type)).await?.into_inner())
}

/// What Explain says of `job_type` on `class`: (observations, estimated runtime in seconds).
async fn explained(addr: &str, job_type: &str, class: &str) -> anyhow::Result<(u64, f64)> {
    let mut c = ScorerClient::connect(addr.to_string()).await?;
    let e = c.explain(request(job_type)).await?.into_inner();
    let cand = e
        .candidates
        .iter()
        .find(|c| c.gpu_class == class)
        .ok_or_else(|| anyhow::anyhow!("{class} not among the candidates"))?;
    Ok((cand.observations, cand.runtime_mean_seconds))
}

/// How many of `n` Score answers put `class` first.
async fn picks(addr: &str, job_type: &str, class: &str, n: usize) -> anyhow::Result<usize> {
    let mut count = 0;
    for _ in 0..n {
        let r = score(addr, job_type).await?;
        if r.accepted_classes.first().is_some_and(|c| c.name == class) {
            count += 1;
        }
    }
    Ok(count)
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<Duration>
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
            anyhow::bail!("timed out after {timeout:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A scorer process listening on `port` (the address a replaced replica takes over), ready once it listens.
async fn scorer_at(name: &str, port: u16, logs: &std::path::Path) -> ChildProcess {
    let args = [
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
    ];
    let mut p = ChildProcess::spawn(
        name,
        gpu_admission_tests::binaries::scorer(),
        &args,
        &[],
        logs,
    )
    .unwrap();
    p.wait_listening(1, Duration::from_secs(30)).await.unwrap();
    p
}

async fn lease_holder(client: &kube::Client) -> anyhow::Result<Option<String>> {
    let lease = Api::<Lease>::namespaced(client.clone(), SYSTEM_NS)
        .get(LEASE)
        .await?;
    Ok(lease.spec.and_then(|s| s.holder_identity))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_reports_each_finished_pod_once_through_a_leader_change_and_shares_what_was_learned()
 {
    let Some(cluster) = LocalCluster::start().await.expect("control plane") else {
        return;
    };
    let client = cluster.client();
    let scorer_a = Scorer::builder().name("scorer-a").start().await.unwrap();
    let scorer_b = Scorer::builder().name("scorer-b").start().await.unwrap();
    let (url_a, url_b) = (scorer_a.url(), scorer_b.url());
    let policy = scorer_a.policy().clone();

    cluster.create_namespace(NS, None).await.unwrap();
    cluster.create_namespace(SYSTEM_NS, None).await.unwrap();
    // What the install ships for the observer, applied as shipped: its ServiceAccount, RBAC, Lease and
    // (empty) learned-state ConfigMap. The observers run as that ServiceAccount (impersonated).
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/base/observer");
    let mut kubectl = std::process::Command::new("kubectl");
    kubectl
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg("apply");
    for file in [
        "serviceaccount.yaml",
        "rbac.yaml",
        "lease.yaml",
        "learned-state.yaml",
    ] {
        kubectl.arg("-f").arg(shipped.join(file));
    }
    let out = kubectl
        .output()
        .expect("kubectl (it applies the shipped manifests)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa_dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = service_account_kubeconfig(
        cluster.kubeconfig(),
        sa_dir.path(),
        SYSTEM_NS,
        SERVICE_ACCOUNT,
    )
    .unwrap();
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NS);

    // The job type and its prior-best class for the gold tier, and the runner-up.
    let job = "train-bert";
    let before = score(&url_a, job).await.unwrap();
    // The answer names catalog classes: read them from the catalog.
    let of_catalog = |name: &str| policy.class(name).unwrap().clone();
    let best = of_catalog(&before.accepted_classes[0].name);
    let runner_up = of_catalog(&before.accepted_classes[1].name);
    let prior = |class: &str| {
        before
            .candidates
            .iter()
            .find(|c| c.gpu_class == class)
            .unwrap()
            .runtime_mean_seconds
    };
    let (prior_best, prior_runner_up) = (prior(&best.name), prior(&runner_up.name));
    println!(
        "{job} on {}: prior {prior_best:.0}s (runner-up {} {prior_runner_up:.0}s); truth: 5x slower on {}",
        best.name, runner_up.name, best.name
    );
    let n = 20;
    let prior_picks = picks(&url_a, job, &best.name, n).await.unwrap();
    println!(
        "{job}: {} first in {prior_picks}/{n} answers before anything was learned",
        best.name
    );
    assert!(prior_picks > n / 2, "{prior_picks}");
    let third = policy
        .catalog()
        .iter()
        .find(|c| c.name != best.name && c.name != runner_up.name && !c.node_label_key.is_empty())
        .unwrap()
        .clone();

    // Nodes labelled with their class (the label keys come from the catalog), plus one CPU node.
    let nodes = Api::<Node>::all(client.clone());
    let node_of = |class: &str| format!("node-{}", class.to_ascii_lowercase());
    for c in [&best, &runner_up, &third] {
        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_of(&c.name), "labels": {c.node_label_key.clone(): c.node_label_value.clone(),
                "kubernetes.io/hostname": node_of(&c.name)}}}))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let nodes_classes: BTreeMap<String, String> = [&best, &runner_up, &third]
        .iter()
        .map(|c| (node_of(&c.name), c.name.clone()))
        .collect();

    let scorers = [url_a.clone(), url_b.clone()];
    let observer = |id: &str| {
        Observer::builder(&sa_kubeconfig, &scorers, id)
            .env("LOG_FORMAT", "json")
            .arg("--lease-duration-secs=3")
            .arg("--lease-grace-secs=1")
            .arg("--sync-interval-secs=1")
            .arg("--store-interval-secs=1")
            .arg(format!("--state-configmap={STATE_CM}"))
            .start()
    };
    let mut obs1 = observer("observer-1").await.unwrap();
    wait_until(
        "observer-1 holds the Lease",
        Duration::from_secs(30),
        || async { Ok(lease_holder(&client).await?.as_deref() == Some("observer-1")) },
    )
    .await
    .unwrap();
    let mut obs2 = observer("observer-2").await.unwrap();

    let mut kubelet = Kubelet {
        pods: Api::<Pod>::namespaced(client.clone(), NS),
        base: k8s_openapi::jiff::Timestamp::now().as_second() - 400 * SLOT_SECONDS,
        next_slot: 0,
        classes: nodes_classes.clone(),
    };
    let slow = (prior_best * 5.0).round() as i64;
    let runner_up_truth = prior_runner_up.round() as i64;
    // uid -> (class, job type, co-located job types) that must be learned
    let mut expected: BTreeMap<String, (String, String, Vec<String>)> = BTreeMap::new();

    // Batch 1, observer-1 leads: the slow job on its prior-best class, and on the runner-up as the prior says.
    for i in 0..4 {
        let start = kubelet.slot();
        let uid = kubelet
            .finished(&format!("slow-{i}"), job, &node_of(&best.name), start, slow)
            .await
            .unwrap();
        expected.insert(uid, (best.name.clone(), job.into(), vec![]));
    }
    for i in 0..2 {
        let start = kubelet.slot();
        let uid = kubelet
            .finished(
                &format!("as-prior-{i}"),
                job,
                &node_of(&runner_up.name),
                start,
                runner_up_truth,
            )
            .await
            .unwrap();
        expected.insert(uid, (runner_up.name.clone(), job.into(), vec![]));
    }
    // A job type the policy does not list, with its workload class.
    for i in 0..2 {
        let start = kubelet.slot();
        let name = format!("unlisted-{i}");
        let uid = kubelet
            .create_bound_as(&name, UNLISTED, Some("Batch"), &node_of(&runner_up.name))
            .await
            .unwrap();
        kubelet.running(&name, start).await.unwrap();
        kubelet
            .terminated(
                &name,
                "Succeeded",
                "Completed",
                0,
                start,
                start + UNLISTED_SECONDS,
            )
            .await
            .unwrap();
        expected.insert(uid, (runner_up.name.clone(), UNLISTED.into(), vec![]));
    }
    // Two jobs sharing the third node for half an hour (the second starts before the first finishes, as a
    // kubelet would report them), and one on another node at the same time.
    let shared = kubelet.slot();
    let third_node = node_of(&third.name);
    let llama = kubelet
        .create_bound("pair-llama", "train-llama", &third_node)
        .await
        .unwrap();
    kubelet.running("pair-llama", shared).await.unwrap();
    let infer = kubelet
        .create_bound("pair-infer", "inference-llm", &third_node)
        .await
        .unwrap();
    kubelet.running("pair-infer", shared + 1800).await.unwrap();
    kubelet
        .terminated(
            "pair-llama",
            "Succeeded",
            "Completed",
            0,
            shared,
            shared + 3600,
        )
        .await
        .unwrap();
    kubelet
        .terminated(
            "pair-infer",
            "Succeeded",
            "Completed",
            0,
            shared + 1800,
            shared + 5400,
        )
        .await
        .unwrap();
    expected.insert(
        llama,
        (
            third.name.clone(),
            "train-llama".into(),
            vec!["inference-llm".into()],
        ),
    );
    expected.insert(
        infer,
        (
            third.name.clone(),
            "inference-llm".into(),
            vec!["train-llama".into()],
        ),
    );
    let uid = kubelet
        .finished(
            "elsewhere",
            "batch-etl",
            &node_of(&runner_up.name),
            shared + 600,
            600,
        )
        .await
        .unwrap();
    expected.insert(uid, (runner_up.name.clone(), "batch-etl".into(), vec![]));
    // Not finished runs: evicted (the kubelet killed its container), OOM-killed, deleted while running (on the
    // third node, after the pair: its run lasts until its deletion, now).
    let start = kubelet.slot();
    kubelet
        .create_bound("evicted", job, &node_of(&best.name))
        .await
        .unwrap();
    kubelet.running("evicted", start).await.unwrap();
    // One status update, as the kubelet writes it: Failed, reason Evicted, the container killed.
    kubelet
        .status("evicted", json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "containerStatuses": container_status(json!({"terminated": {"exitCode": 137, "reason": "Error",
                "startedAt": rfc3339(start), "finishedAt": rfc3339(start + 120)}}))}))
        .await
        .unwrap();
    let start = kubelet.slot();
    kubelet
        .create_bound("oom", job, &node_of(&best.name))
        .await
        .unwrap();
    kubelet
        .terminated("oom", "Failed", "OOMKilled", 137, start, start + 60)
        .await
        .unwrap();
    // Their deletion afterwards must not count them again (the watch processes events in order, so once the
    // next Pod's skip is counted, these deletions have been seen).
    for name in ["evicted", "oom"] {
        kubelet
            .pods
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let start = kubelet.slot();
    kubelet
        .create_bound("deleted", "batch-etl", &third_node)
        .await
        .unwrap();
    kubelet.running("deleted", start).await.unwrap();
    kubelet
        .pods
        .delete("deleted", &DeleteParams::default())
        .await
        .unwrap();

    let learned_everywhere = |n: usize| {
        let (a, b) = (url_a.clone(), url_b.clone());
        move || {
            let (a, b) = (a.clone(), b.clone());
            async move {
                let (sa, sb) = (export(&a).await?, export(&b).await?);
                Ok(sa.observations == n as u64
                    && sb.observations == n as u64
                    && sa.digest == sb.digest)
            }
        }
    };
    let took = wait_until(
        "batch 1 learned by both scorer replicas",
        Duration::from_secs(60),
        learned_everywhere(expected.len()),
    )
    .await
    .unwrap();
    println!(
        "batch 1: {} runs learned by both replicas in {took:.1?}",
        expected.len()
    );
    let skipped = ["evicted", "oom_killed", "deleted_before_finishing"];
    wait_until(
        "the three skips counted",
        Duration::from_secs(30),
        || async {
            let m = obs1.metrics().await?;
            Ok(skipped.iter().all(|reason| {
                metric_value(
                    &m,
                    &format!("observer_skipped_total{{reason=\"{reason}\"}}"),
                ) == 1.0
            }))
        },
    )
    .await
    .unwrap();
    let m1 = obs1.metrics().await.unwrap();
    println!(
        "skipped: {}",
        m1.lines()
            .filter(|l| l.starts_with("observer_skipped_total"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert_eq!(metric_value(&m1, "observer_leader"), 1.0);
    assert_eq!(
        metric_value(&obs2.metrics().await.unwrap(), "observer_leader"),
        0.0
    );
    assert!(reported(&obs2).is_empty(), "the follower reports nothing");

    // Batch 2: kill the leader; runs finish while nobody leads (one is deleted at once, like a Job's TTL).
    obs1.process.kill();
    let killed = Instant::now();
    for i in 4..7 {
        let start = kubelet.slot();
        let uid = kubelet
            .finished(&format!("slow-{i}"), job, &node_of(&best.name), start, slow)
            .await
            .unwrap();
        expected.insert(uid, (best.name.clone(), job.into(), vec![]));
    }
    let start = kubelet.slot();
    let uid = kubelet
        .finished(
            "short-lived",
            job,
            &node_of(&runner_up.name),
            start,
            runner_up_truth,
        )
        .await
        .unwrap();
    kubelet
        .pods
        .delete("short-lived", &DeleteParams::default())
        .await
        .unwrap();
    expected.insert(uid, (runner_up.name.clone(), job.into(), vec![]));
    wait_until(
        "observer-2 takes the Lease",
        Duration::from_secs(30),
        || async { Ok(lease_holder(&client).await?.as_deref() == Some("observer-2")) },
    )
    .await
    .unwrap();
    println!(
        "observer-2 holds the Lease {:.1?} after the leader was killed",
        killed.elapsed()
    );
    // And one more after the change.
    let start = kubelet.slot();
    let uid = kubelet
        .finished("slow-7", job, &node_of(&best.name), start, slow)
        .await
        .unwrap();
    expected.insert(uid, (best.name.clone(), job.into(), vec![]));
    wait_until(
        "batch 2 learned by both scorer replicas",
        Duration::from_secs(60),
        learned_everywhere(expected.len()),
    )
    .await
    .unwrap();

    // Exactly once: every expected UID learned once across both observers, with its node's class, its
    // co-located job types and its runtime; re-sent runs were duplicates.
    let all: Vec<Reported> = reported(&obs1).into_iter().chain(reported(&obs2)).collect();
    let learned: Vec<&Reported> = all.iter().filter(|r| r.result == "learned").collect();
    let learned_ids: BTreeSet<&str> = learned.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        learned.len(),
        learned_ids.len(),
        "an id learned twice: {learned:#?}"
    );
    for (id, what) in &expected {
        if !learned_ids.contains(id.as_str()) {
            println!(
                "not learned per the logs: {id} {what:?}: {:?}",
                all.iter().filter(|r| r.id == *id).collect::<Vec<_>>()
            );
        }
    }
    assert_eq!(
        learned_ids,
        expected.keys().map(String::as_str).collect::<BTreeSet<_>>()
    );
    for r in &learned {
        let (class, job_type, colocated) = &expected[&r.id];
        assert_eq!(
            (&r.gpu_class, &r.job_type, &r.colocated),
            (class, job_type, colocated),
            "{r:?}"
        );
        assert!(r.runtime_seconds > 0.0);
    }
    let duplicates = all.iter().filter(|r| r.result == "duplicate").count();
    let m2 = obs2.metrics().await.unwrap();
    println!(
        "{} runs learned once each ({} by observer-1, {} by observer-2); {duplicates} re-sent runs acknowledged as duplicates; nodes {nodes_classes:?}",
        learned.len(),
        reported(&obs1)
            .iter()
            .filter(|r| r.result == "learned")
            .count(),
        reported(&obs2)
            .iter()
            .filter(|r| r.result == "learned")
            .count(),
    );
    assert_eq!(
        metric_value(&m2, "observer_reported_total{result=\"duplicate\"}") as usize,
        duplicates
    );
    let slow_runtimes: Vec<f64> = learned
        .iter()
        .filter(|r| r.gpu_class == best.name)
        .map(|r| r.runtime_seconds)
        .collect();
    assert!(
        slow_runtimes.iter().all(|s| *s == slow as f64),
        "{slow_runtimes:?}"
    );

    // The answers follow the truth: the slow job is no longer sent to its prior-best class.
    let after = picks(&url_a, job, &best.name, n).await.unwrap();
    let after_b = picks(&url_b, job, &best.name, n).await.unwrap();
    println!(
        "{job}: {} first in {after}/{n} answers of replica a, {after_b}/{n} of replica b after learning",
        best.name
    );
    assert!(after <= n / 5 && after_b <= n / 5, "{after}, {after_b}");
    // The unlisted job type is learned, and Explain shows it.
    for url in [&url_a, &url_b] {
        let (runs, runtime) = explained(url, UNLISTED, &runner_up.name).await.unwrap();
        println!(
            "{UNLISTED} (not in the policy) on {}: {runs} runs, estimated {runtime:.0}s (ran {UNLISTED_SECONDS}s)",
            runner_up.name
        );
        assert_eq!(runs, 2);
        assert!(
            (runtime / UNLISTED_SECONDS as f64 - 1.0).abs() < 0.3,
            "{runtime}"
        );
    }

    // A replica dies and a new one takes its address (as a headless Service's name would): it answers with
    // what was learned within seconds.
    let learned_state = export(&url_a).await.unwrap();
    println!(
        "learned state: {} observations, snapshot {} bytes",
        learned_state.observations,
        learned_state.snapshot.len()
    );
    let port = scorer_b.addr().port();
    drop(scorer_b);
    let logs = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let replacement = scorer_at("scorer-c", port, logs.path()).await;
    let took = wait_until(
        "the new replica holds the learned state",
        Duration::from_secs(30),
        || {
            let (url, want) = (url_b.clone(), learned_state.digest.clone());
            async move { Ok(export(&url).await?.digest == want) }
        },
    )
    .await
    .unwrap();
    let since_start = started.elapsed();
    let c_picks = picks(&url_b, job, &best.name, n).await.unwrap();
    println!(
        "replacement replica: learned state ({} observations) {took:.1?} after it listened, {since_start:.1?} after \
         its process started; {} first in {c_picks}/{n}",
        learned_state.observations, best.name
    );
    assert!(since_start < Duration::from_secs(10), "{since_start:?}");
    assert!(c_picks <= n / 5);

    // The leader keeps the most complete state in the ConfigMap (stored every second: the test does not
    // assume the last store came before this point).
    let want = expected.len().to_string();
    let stored = wait_until(
        "the ConfigMap holds every observation",
        Duration::from_secs(10),
        || {
            let (configmaps, want) = (configmaps.clone(), want.clone());
            async move {
                let cm = configmaps.get(STATE_CM).await?;
                let ann = cm.metadata.annotations.unwrap_or_default();
                Ok(ann.get("gpu-admission.io/observations") == Some(&want))
            }
        },
    )
    .await;
    let cm = configmaps.get(STATE_CM).await.unwrap();
    assert!(
        stored.is_ok(),
        "{stored:?}; the ConfigMap's annotations: {:?}",
        cm.metadata.annotations
    );
    assert!(
        cm.binary_data
            .unwrap_or_default()
            .contains_key("learned-state")
    );

    // Every scorer replica and the leading observer are lost at once: a new replica gets what was learned,
    // through a new observer that reads the ConfigMap.
    let port_a = scorer_a.addr().port();
    drop(scorer_a);
    drop(replacement);
    obs2.process.kill();
    let lost = Instant::now();
    let _fresh = scorer_at("scorer-d", port_a, logs.path()).await;
    let obs3 = observer("observer-3").await.unwrap();
    wait_until(
        "a fresh replica holds everything learned",
        Duration::from_secs(30),
        || {
            let url = url_a.clone();
            let want = expected.len() as u64;
            async move { Ok(export(&url).await?.observations == want) }
        },
    )
    .await
    .unwrap();
    let d_picks = picks(&url_a, job, &best.name, n).await.unwrap();
    println!(
        "all replicas and the leader lost: a fresh replica holds the {} observations {:.1?} later (new \
         observer: Lease expiry + ConfigMap); {} first in {d_picks}/{n}",
        expected.len(),
        lost.elapsed(),
        best.name
    );
    assert!(d_picks <= n / 5);
    // Restored whole: the same learned state as before the loss, the unlisted job type included.
    assert_eq!(
        export(&url_a).await.unwrap().digest,
        learned_state.digest,
        "the fresh replica's learned state differs from what was learned"
    );
    let (runs, _) = explained(&url_a, UNLISTED, &runner_up.name).await.unwrap();
    assert_eq!(runs, 2, "{UNLISTED} forgotten");

    // Poisoning: gold's 15 real runs of train-llama, then another tenant's 120 runs of 2 s under
    // that job type on L4, a third of them next to a job type of its own, and one Pod that ran where its
    // record does not say.
    let learned_before = expected.len();
    poisoning(
        &client,
        &policy,
        &nodes,
        &mut kubelet,
        &url_a,
        &obs3,
        learned_before,
    )
    .await;
}

/// Lowest-cost class, each class's runtime estimate and the avoid-list of `job_type` for the gold tenant.
async fn gold_view(
    addr: &str,
    job_type: &str,
) -> anyhow::Result<(String, BTreeMap<String, f64>, Vec<String>)> {
    let mut c = ScorerClient::connect(addr.to_string()).await?;
    let e = c.explain(request(job_type)).await?.into_inner();
    let feasible: Vec<_> = e.candidates.iter().filter(|c| c.feasible).collect();
    let best = feasible
        .iter()
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
        .ok_or_else(|| anyhow::anyhow!("no feasible class"))?
        .gpu_class
        .clone();
    // Every class's estimate, the tier's or not (the L4, where the fake runs land, is not gold's).
    let runtimes = e
        .candidates
        .iter()
        .map(|c| (c.gpu_class.clone(), c.runtime_mean_seconds))
        .collect();
    let avoid = e.answer.map(|a| a.avoid_job_types).unwrap_or_default();
    Ok((best, runtimes, avoid))
}

#[allow(clippy::too_many_arguments)]
async fn poisoning(
    client: &kube::Client,
    policy: &gpu_admission_core::policy::PolicySnapshot,
    nodes: &Api<Node>,
    gold: &mut Kubelet,
    url: &str,
    observer: &Observer,
    learned_before: usize,
) {
    const BRONZE_NS: &str = "team-bronze";
    const LLAMA: &str = "train-llama";
    // Listed, run by nobody before bronze.
    const RESNET: &str = "train-resnet";
    const NOISE: &str = "bronze-noise";
    let node_of = |class: &str| format!("node-{}", class.to_ascii_lowercase());
    for class in ["H100-80GB", "A100-80GB", "L4-24GB"] {
        let name = node_of(class);
        if gold.classes.contains_key(&name) {
            continue;
        }
        let c = policy.catalog().iter().find(|c| c.name == class).unwrap();
        let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {c.node_label_key.clone(): c.node_label_value.clone(),
                "kubernetes.io/hostname": name}}}))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        gold.classes.insert(name, class.to_string());
    }
    let l4 = node_of("L4-24GB");
    // Gold's real runs (each inside its slot: nothing overlaps them).
    for i in 0..15 {
        let (class, t) = [
            ("H100-80GB", 30_000),
            ("A100-80GB", 60_000),
            ("L4-24GB", 380_000),
        ][i % 3];
        let t = t * (100 + (i as i64 * 7) % 5) / 100;
        let start = gold.slot();
        gold.finished(&format!("gold-llama-{i}"), LLAMA, &node_of(class), start, t)
            .await
            .unwrap();
    }
    let learned = |n: usize| {
        let url = url.to_string();
        move || {
            let url = url.clone();
            async move { Ok(export(&url).await?.observations == n as u64) }
        }
    };
    let mut total = learned_before + 15;
    wait_until(
        "gold's runs learned",
        Duration::from_secs(60),
        learned(total),
    )
    .await
    .unwrap();
    let (best, estimates, avoid) = gold_view(url, LLAMA).await.unwrap();
    println!("gold's {LLAMA}: {best}, estimates {estimates:.0?}, avoid-list {avoid:?}");
    let (resnet_best, resnet_estimates, _) = gold_view(url, RESNET).await.unwrap();

    // The bronze tenant: per slot two runs of 2 s alone and one next to a job type of its own.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": BRONZE_NS}})).unwrap(),
        )
        .await
        .unwrap();
    let mut bronze = Kubelet {
        pods: Api::<Pod>::namespaced(client.clone(), BRONZE_NS),
        base: gold.base + (gold.next_slot + 5) * SLOT_SECONDS,
        next_slot: 0,
        classes: gold.classes.clone(),
    };
    // The first reporter: bronze runs a listed job type nobody has run yet, 6 times for 2-3 s on the L4.
    for i in 0..6 {
        let s = bronze.slot();
        bronze
            .finished(&format!("first-{i}"), RESNET, &l4, s, 2 + i % 2)
            .await
            .unwrap();
    }
    total += 6;
    wait_until(
        "bronze's first runs learned",
        Duration::from_secs(60),
        learned(total),
    )
    .await
    .unwrap();
    let (resnet_after, resnet_moved, _) = gold_view(url, RESNET).await.unwrap();
    println!(
        "gold's {RESNET} before bronze reported it first: {resnet_best}, {resnet_estimates:.0?}; after: \
         {resnet_after}, {resnet_moved:.0?}"
    );
    assert_eq!(
        resnet_after, resnet_best,
        "the first reporter moved gold's decision"
    );
    for (class, was) in &resnet_estimates {
        let ratio = resnet_moved[class] / was;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "the first reporter moved gold's {RESNET} {class} estimate {ratio:.3}x"
        );
    }
    let started = Instant::now();
    for k in 0..40 {
        let s = bronze.slot();
        for (i, at) in [(0, 0), (1, 10), (2, 100)] {
            bronze
                .finished(&format!("fake-{k}-{i}"), LLAMA, &l4, s + at, 2)
                .await
                .unwrap();
        }
        bronze
            .finished(&format!("noise-{k}"), NOISE, &l4, s + 50, 350)
            .await
            .unwrap();
    }
    // One that ran where its record does not say (pinned to the H100, bound to the L4).
    bronze
        .create_recorded("elsewhere", LLAMA, None, &l4, "H100-80GB")
        .await
        .unwrap();
    let s = bronze.slot();
    bronze.running("elsewhere", s).await.unwrap();
    bronze
        .terminated("elsewhere", "Succeeded", "Completed", 0, s, s + 2)
        .await
        .unwrap();
    total += 160;
    wait_until(
        "bronze's runs learned",
        Duration::from_secs(120),
        learned(total),
    )
    .await
    .unwrap();
    wait_until(
        "the misplaced run skipped",
        Duration::from_secs(30),
        || async {
            let m = observer.metrics().await?;
            Ok(metric_value(&m, "observer_skipped_total{reason=\"not_where_decided\"}") == 1.0)
        },
    )
    .await
    .unwrap();
    println!(
        "bronze: 120 runs of 2 s under {LLAMA} + 40 of its own {NOISE} next to them learned {:.1?} after the first was created",
        started.elapsed()
    );
    let m = observer.metrics().await.unwrap();
    let implausible = metric_value(&m, "observer_implausible_runs_total");
    println!("implausibly fast runs weighed down: {implausible}");
    assert!(implausible >= 1.0, "{implausible}");

    let (after, moved, avoid_after) = gold_view(url, LLAMA).await.unwrap();
    println!("gold's {LLAMA} after: {after}, estimates {moved:.0?}, avoid-list {avoid_after:?}");
    assert_eq!(after, best, "bronze moved gold's decision");
    for (class, was) in &estimates {
        let ratio = moved[class] / was;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "gold's {class} estimate moved {ratio:.3}x"
        );
    }
    assert_eq!(
        avoid_after, avoid,
        "bronze's co-location reached gold's avoid-list"
    );
    // Bronze's own job type learned its neighbour from its own runs (its own avoid-list, its business).
    let mut c = ScorerClient::connect(url.to_string()).await.unwrap();
    let mut req = request(NOISE);
    req.namespace = BRONZE_NS.into();
    let noise_avoid = c.score(req).await.unwrap().into_inner().avoid_job_types;
    println!("{NOISE}'s avoid-list (bronze's own): {noise_avoid:?}");
}
