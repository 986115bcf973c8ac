//! Real Pod lifecycles on a real control plane: kube-apiserver, kube-scheduler, kube-controller-manager and
//! kwok as the kubelet of fake GPU Nodes (one per catalog class, 8 GPUs, the class label and taint), the real
//! scorer, webhook frontend and observer. Nothing writes Node or Pod status but kwok.
//!
//! A gold Job (2 Pods of `train-bert`, one GPU each, told by kwok's `pod-complete.stage.kwok.x-k8s.io/delay`
//! to run 4 s) goes the whole way: the job controller creates its Pods, `/mutate-pod` decides them (one class
//! for the Job, its toleration for the class's taint), the scheduler binds them to a Node of that class, kwok
//! runs them to Succeeded, the Job completes, and the observer reports each run once, with the class of the
//! Node it ran on and a runtime of about 4 s, which the scorer then counts (Explain's observations).
//!
//! And a preemption: the scheduler evicts a running low-priority GPU Pod for a high-priority one on a full
//! Node; kwok confirms the deletion as a kubelet would, the preemptor runs there, and the observer counts the
//! victim's run as preempted, never learned.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpu_admission_policy::{GpuClass, Vendor};
use gpu_admission_proto::scorer::v1::{GpuVendor, ScoreRequest};
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok::{self, POD_COMPLETE_DELAY, phase, wait_for};
use gpu_admission_tests::names::{ANN_DECIDED_AT, ANN_GPU_CLASS, CLASS_LABEL, JOB_TYPE_LABEL};
use gpu_admission_tests::observer::{Observer, metric_value};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-kwok";
const SYSTEM_NS: &str = "gpu-admission";
const JOB_TYPE: &str = "train-bert";
const RUN_SECONDS: f64 = 4.0;

/// The class a Pod's own placement allows: its nodeSelector, else the values of its required affinity `In`.
fn allowed_classes(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().expect("spec");
    if let Some(c) = spec.node_selector.as_ref().and_then(|s| s.get(CLASS_LABEL)) {
        return vec![c.clone()];
    }
    let v = serde_json::to_value(&spec.affinity).unwrap_or_default();
    let terms =
        &v["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    terms
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| {
            t["matchExpressions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|e| e["key"] == CLASS_LABEL && e["operator"] == "In")
        .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn gpu_job(name: &str, pods: u32) -> Value {
    let delay = format!("{RUN_SECONDS}s");
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"app.kubernetes.io/job-type": JOB_TYPE,
                    POD_COMPLETE_DELAY: delay, "pod-complete.stage.kwok.x-k8s.io/jitter-delay": delay}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example/bert:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}}]}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_job_runs_on_kwok_nodes_and_the_observer_learns_each_run_once() {
    let t0 = Instant::now();
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("control plane with scheduler, controllers and kwok")
    else {
        return;
    };
    println!(
        "control plane + kwok ready in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let client = cluster.client();
    let scorer = Scorer::builder().start().await.expect("scorer");
    let policy = scorer.policy().clone();
    cluster.create_namespace(NS, Some("gold")).await.unwrap();
    cluster.create_namespace(SYSTEM_NS, None).await.unwrap();
    cluster.create_priority_classes(&policy).await.unwrap();

    let node_class = nodes_per_class(&client, &policy).await;

    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .start()
        .await
        .expect("webhook ready");
    cluster
        .register_webhook(
            "gpu-admission-kwok",
            &webhook.mutate_url(),
            &webhook.ca_pem().unwrap(),
        )
        .await
        .unwrap();
    let observer = Observer::builder(cluster.kubeconfig(), &[scorer.url()], "observer-kwok")
        .env("LOG_FORMAT", "json")
        .arg("--lease-duration-secs=3")
        .arg("--lease-grace-secs=1")
        .start()
        .await
        .expect("observer");

    let jobs = Api::<Job>::namespaced(client.clone(), NS);
    let job: Job = serde_json::from_value(gpu_job("bert-1", 2)).unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let t = Instant::now();
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let done = wait_for("Job bert-1 complete", Duration::from_secs(90), || async {
        let j = jobs.get("bert-1").await?;
        Ok(j.status.and_then(|s| s.succeeded) == Some(2))
    })
    .await;
    let took = match done {
        Ok(took) => took,
        Err(e) => panic!(
            "{e}\nPods: {}\nscheduler:\n{}\nkwok:\n{}",
            describe(&pods).await,
            cluster.log_tail("scheduler", 20),
            cluster.log_tail("kwok", 20)
        ),
    };
    println!(
        "Job bert-1: 2 Pods decided, scheduled, run by kwok and Succeeded in {:.1}s",
        took.as_secs_f64()
    );
    assert!(
        t.elapsed() >= Duration::from_secs_f64(RUN_SECONDS),
        "ran for less than its delay"
    );

    let class = class_of_the_runs(&pods, &node_class).await;

    assert_learned_once(&observer, &scorer, &class).await;
    println!(
        "observer: 2 runs of {JOB_TYPE} on {class} learned; total {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// One fake Node per catalog class (8 devices of the vendor's resource, the class label and taint), kept
/// Ready by kwok; returns Node name → class.
async fn nodes_per_class(
    client: &kube::Client,
    policy: &gpu_admission_core::policy::PolicySnapshot,
) -> BTreeMap<String, String> {
    let nodes: Vec<Value> = policy
        .catalog()
        .iter()
        .map(|c| {
            let resource = if c.vendor == Vendor::Amd {
                "amd.com/gpu"
            } else {
                "nvidia.com/gpu"
            };
            kwok::gpu_node(
                &format!("kwok-{}", c.name.to_ascii_lowercase()),
                c,
                resource,
                8,
            )
        })
        .collect();
    let took = kwok::create_ready_nodes(client, &nodes)
        .await
        .expect("kwok keeps the Nodes Ready");
    println!(
        "{} fake GPU Nodes Ready and untainted in {:.1}s",
        nodes.len(),
        took.as_secs_f64()
    );
    let node_class: BTreeMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| {
            let class = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(CLASS_LABEL).cloned());
            (n.metadata.name.unwrap(), class.unwrap_or_default())
        })
        .collect();

    node_class
}

/// Both Pods of the Job were decided, succeeded, and ran on a Node of the class decided for them, one class
/// for the Job; returns it.
async fn class_of_the_runs(pods: &Api<Pod>, node_class: &BTreeMap<String, String>) -> String {
    let list = pods
        .list(&ListParams::default().labels("job-name=bert-1"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 2, "exactly the Job's two Pods");
    let mut classes = Vec::new();
    for p in &list.items {
        let name = p.metadata.name.clone().unwrap();
        let ann = p.metadata.annotations.clone().unwrap_or_default();
        assert!(
            ann.contains_key(ANN_DECIDED_AT),
            "{name} was not decided: {ann:?}"
        );
        assert_eq!(phase(p), "Succeeded", "{name}");
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        let class = node_class[&node].clone();
        let allowed = allowed_classes(p);
        assert!(
            allowed.contains(&class),
            "{name} ran on {node} ({class}) outside its placement {allowed:?}"
        );
        assert_eq!(
            ann.get(ANN_GPU_CLASS),
            Some(&class),
            "{name}: the decided class is where it ran"
        );
        classes.push(class);
    }
    classes.dedup();
    assert_eq!(classes.len(), 1, "one class for the Job: {classes:?}");
    classes.remove(0)
}

/// The observer reported each of the two runs once, with the Node's class and the runtime kwok gave it, and the
/// scorer counts both.
async fn assert_learned_once(observer: &Observer, scorer: &Scorer, class: &str) {
    // The observer reports each run once, with the Node's class and the runtime kwok gave it.
    wait_for(
        "the observer reports both runs",
        Duration::from_secs(30),
        || async {
            let m = observer.metrics().await?;
            Ok(metric_value(&m, "observer_reported_total{result=\"learned\"}") >= 2.0)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nobserver log:\n{}", observer.process.log_tail(30)));
    let reports = observer.reports();
    assert_eq!(reports.len(), 2, "each run reported once: {reports:?}");
    for r in &reports {
        assert_eq!(
            r["gpu_class"]
                .as_str()
                .unwrap_or_default()
                .trim_matches('"'),
            class,
            "{r}"
        );
        assert_eq!(
            r["job_type"].as_str().unwrap_or_default().trim_matches('"'),
            JOB_TYPE,
            "{r}"
        );
        let secs = r["runtime_seconds"].as_f64().unwrap_or(-1.0);
        assert!(
            (RUN_SECONDS - 0.5..RUN_SECONDS + 6.0).contains(&secs),
            "runtime {secs}s: {r}"
        );
    }
    let mut c = scorer.client().await.unwrap();
    let explained = c
        .explain(ScoreRequest {
            request_id: "cluster-kwok".into(),
            namespace: NS.into(),
            tier: "gold".into(),
            job_type: JOB_TYPE.into(),
            gpu_count: 1,
            gpu_vendor: GpuVendor::Nvidia as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let cand = explained
        .candidates
        .iter()
        .find(|c| c.gpu_class == class)
        .expect("candidate");
    assert_eq!(
        cand.observations, 2,
        "the scorer learned both runs on {class}"
    );
}

/// The Pods of the namespace with their phase and node, for a failure message.
async fn describe(pods: &Api<Pod>) -> String {
    match pods.list(&ListParams::default()).await {
        Ok(l) => l
            .items
            .iter()
            .map(|p| {
                format!(
                    "{} {} on {:?}",
                    p.metadata.name.clone().unwrap_or_default(),
                    phase(p),
                    p.spec.as_ref().and_then(|s| s.node_name.clone())
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("unavailable: {e}"),
    }
}

/// A Node with one GPU of `class`, no taint.
fn one_gpu_node(name: &str, class: &GpuClass) -> Value {
    let untainted = GpuClass {
        taint_key: None,
        ..class.clone()
    };
    kwok::gpu_node(name, &untainted, "nvidia.com/gpu", 1)
}

/// The scheduler preempts a running low-priority GPU Pod for a high-priority one; kwok confirms the
/// victim's deletion as a kubelet would (it is gone, not left terminating), the preemptor is bound to the
/// freed GPU and runs, and the observer counts the victim's run as `preempted`, never learns from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_run_is_removed_by_kwok_and_never_learned() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("control plane with scheduler, controllers and kwok")
    else {
        return;
    };
    let client = cluster.client();
    let scorer = Scorer::builder().start().await.expect("scorer");
    let policy = scorer.policy().clone();
    // No tier label: no webhook is involved; the Pods carry their priorities themselves.
    cluster.create_namespace(NS, None).await.unwrap();
    cluster.create_namespace(SYSTEM_NS, None).await.unwrap();
    cluster.create_priority_classes(&policy).await.unwrap();
    let class = policy
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .expect("L4 in the catalog");
    kwok::create_ready_nodes(&client, &[one_gpu_node("kwok-l4-1", class)])
        .await
        .unwrap();
    let observer = Observer::builder(cluster.kubeconfig(), &[scorer.url()], "observer-kwok")
        .arg("--lease-duration-secs=3")
        .arg("--lease-grace-secs=1")
        .start()
        .await
        .expect("observer");

    // The victim: a decided Job Pod (as /mutate-pod leaves it) of the lowest bucket, told to run 10 min.
    let mut victim = gpu_job("victim", 1);
    let template = &mut victim["spec"]["template"];
    template["metadata"]["labels"] = json!({JOB_TYPE_LABEL: JOB_TYPE});
    template["metadata"]["annotations"][ANN_DECIDED_AT] = json!("2026-11-26T10:00:00Z");
    template["metadata"]["annotations"][POD_COMPLETE_DELAY] = json!("600s");
    template["metadata"]["annotations"]["pod-complete.stage.kwok.x-k8s.io/jitter-delay"] =
        json!("600s");
    template["spec"]["priorityClassName"] = json!("gpu-default");
    // kwok honours the grace period before it confirms a deletion, like a kubelet (default 30 s).
    template["spec"]["terminationGracePeriodSeconds"] = json!(2);
    let jobs = Api::<Job>::namespaced(client.clone(), NS);
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(victim).unwrap(),
    )
    .await
    .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let victim_pod = || async {
        let l = pods
            .list(&ListParams::default().labels("job-name=victim"))
            .await?;
        Ok::<_, anyhow::Error>(l.items.into_iter().next())
    };
    wait_for("the victim runs", Duration::from_secs(60), || async {
        Ok(victim_pod().await?.is_some_and(|p| phase(&p) == "Running"))
    })
    .await
    .unwrap();
    let victim_name = victim_pod().await.unwrap().unwrap().metadata.name.unwrap();

    let preemptor = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent"},
        "spec": {"priorityClassName": "gpu-high", "containers": [{"name": "main", "image": "registry.example/llm:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(preemptor).unwrap(),
    )
    .await
    .unwrap();
    let t = Instant::now();
    wait_for(
        "the preemptor runs on the freed GPU",
        Duration::from_secs(60),
        || async {
            let p = pods.get("urgent").await?;
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            Ok(phase(&p) == "Running" && node.as_deref() == Some("kwok-l4-1"))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nscheduler:\n{}", cluster.log_tail("scheduler", 20)));
    println!(
        "preemption: victim removed, preemptor running after {:.1}s",
        t.elapsed().as_secs_f64()
    );
    assert!(
        pods.get_opt(&victim_name).await.unwrap().is_none(),
        "kwok removed the victim"
    );

    wait_for(
        "the observer counts the preempted run",
        Duration::from_secs(30),
        || async {
            let m = observer.metrics().await?;
            Ok(metric_value(&m, "observer_skipped_total{reason=\"preempted\"}") >= 1.0)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nobserver log:\n{}", observer.process.log_tail(30)));
    let m = observer.metrics().await.unwrap();
    assert_eq!(
        metric_value(&m, "observer_skipped_total{reason=\"preempted\"}"),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric_value(&m, "observer_reported_total{result=\"learned\"}"),
        0.0,
        "{m}"
    );
}
