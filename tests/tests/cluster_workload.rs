//! One decision per workload against a real kube-apiserver.
//!
//! Two webhook-frontend replicas, each with its own scorer replica (so neither the frontends nor the scorers
//! share a cache: agreement must come from the workload key, its seeding and the pinned learned state). One
//! MutatingWebhookConfiguration holds two webhooks, each sending half of the Pods (by the label
//! `gang-shard`) to one replica. The policy explores on every decision it may (`explorationCap: 1.0`), and
//! both scorers learned the same observations, which leave a close, uncertain alternative class: exploring
//! it pays, so exploration is on.
//!
//! Six Jobs (parallelism 32, completions 32) are created; for each, 32 Pods are created concurrently as the
//! job controller of an Indexed Job would (controller owner reference to the Job, `controller-uid` and
//! `job-name` labels, the `batch.kubernetes.io/job-completion-index` annotation; no controller-manager runs, so no
//! job controller competes). Asserted:
//! - every Pod of a Job is pinned to the same single GPU class (`nodeSelector`: a group of 32 gets its
//!   chosen class only) and gets the same PriorityClass, and each replica decided half of them;
//! - the decision keys the frontends logged are the Jobs (`batch/Job/<ns>/<name>`, group size 32), one
//!   per Job, all different;
//! - each scorer replica decided each Job once (`scorer_workload_answers_total{answer="decided"}` = 6) and
//!   answered the Job's other 15 Pods it saw from its cache;
//! - over the six Jobs at least two classes occur: different workloads are sampled independently. This is
//!   deterministic for this policy, state and these names (the seeds depend on nothing else), so it does not
//!   flake; it would fail if the key did not reach the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use gpu_admission_proto::scorer::v1::ObserveRequest;
use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NS: &str = "gang-gold";
const CLASS: &str = "gpu.nvidia.com/class";
const SHARD: &str = "gang-shard";
const JOBS: usize = 6;
const PODS: usize = 32;
/// Short learned-state epochs, so the observation fed below is pinned a moment later (the product's default
/// is 600 s).
const EPOCH_SECS: u64 = 2;

fn exploring_policy() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/kustomize/base/policy/default-policy.yaml"),
    )
    .expect("the default policy");
    assert!(
        text.contains("  explorationCap: 0.2"),
        "policy layout changed"
    );
    text.replace("  explorationCap: 0.2", "  explorationCap: 1.0")
}

fn job(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": PODS, "completions": PODS, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
}

/// Pod `index` of Job `job` (uid `uid`), as the job controller creates it for an Indexed Job.
fn job_pod(job: &str, uid: &str, index: usize) -> Pod {
    let shard = if index.is_multiple_of(2) { "a" } else { "b" };
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job}-{index}"),
            "labels": {"controller-uid": uid, "job-name": job, SHARD: shard},
            "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string(),
                "app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "20"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid,
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
    .unwrap()
}

/// The GPU class a stored Pod is pinned to (`nodeSelector`); `None` when it is not pinned to one class.
fn class_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .get(CLASS)
        .cloned()
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

fn configuration(a: &Webhook, b: &Webhook) -> MutatingWebhookConfiguration {
    let hook = |name: &str, w: &Webhook, shard: &str| {
        let ca = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            w.ca_pem().unwrap(),
        );
        json!({"name": name, "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": w.mutate_url(), "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{"key": "tenant.kubenexus.io/tier", "operator": "Exists"}]},
            "objectSelector": {"matchLabels": {SHARD: shard}},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 10,
            "reinvocationPolicy": "Never"})
    };
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpu-admission-gang"},
        "webhooks": [hook("a.pods.gpu-admission.io", a, "a"), hook("b.pods.gpu-admission.io", b, "b")]
    }))
    .unwrap()
}

/// Per workload key a frontend logged for its mutated Pods: (Pods, Pods whose group size was read as 32).
fn logged_workloads(w: &Webhook) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for line in w
        .process
        .log()
        .lines()
        .filter(|l| l.contains("Pod mutated"))
    {
        let Some((_, rest)) = line.split_once(" workload=\"") else {
            continue;
        };
        let key = rest.split('"').next().unwrap_or("").to_string();
        let e = out.entry(key).or_default();
        e.0 += 1;
        e.1 += usize::from(line.contains(" group_size=32 "));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_one_job_get_one_decision_through_two_replicas() {
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let policy_dir = tempfile::tempdir().unwrap();
    let policy_file = policy_dir.path().join("policy.yaml");
    std::fs::write(&policy_file, exploring_policy()).unwrap();
    let mut scorers = Vec::new();
    for name in ["scorer-a", "scorer-b"] {
        let s = Scorer::builder()
            .policy(&policy_file)
            .name(name)
            .env("SCORER_DECISION_EPOCH_SECS", EPOCH_SECS.to_string())
            .start()
            .await
            .expect("scorer starts");
        // The same observations on both replicas (as the observer reports to every replica): train-llama ran 20
        // times on H100 and twice on A100-80GB, about as fast, so A100-80GB is a close, uncertain alternative
        // that is worth exploring (the scorer explores only when the expected saving pays for the run).
        let mut client = s.client().await.unwrap();
        for i in 0..22 {
            let r = client
                .observe(ObserveRequest {
                    job_type: "train-llama".into(),
                    gpu_class: if i < 20 { "H100-80GB" } else { "A100-80GB" }.into(),
                    runtime_seconds: if i < 20 { 36_000.0 } else { 36_700.0 },
                    observation_id: format!("earlier-pod-{i}"),
                    gpu_count: 1,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            // Counted per job type and class.
            assert_eq!(r.observations, if i < 20 { i + 1 } else { i - 19 });
        }
        scorers.push(s);
    }
    // Keyed decisions read the state pinned when an epoch begins: wait for the next one.
    tokio::time::sleep(Duration::from_secs(EPOCH_SECS + 1)).await;

    cluster
        .create_namespace(NS, Some("gold"))
        .await
        .expect("namespace");
    cluster
        .create_priority_classes(scorers[0].policy())
        .await
        .expect("priority classes");
    let mut webhooks = Vec::new();
    for (name, s) in [("webhook-a", &scorers[0]), ("webhook-b", &scorers[1])] {
        webhooks.push(
            Webhook::builder(&s.url())
                .name(name)
                .kubeconfig(cluster.kubeconfig())
                .env("RUST_LOG", "info,webhook_frontend=debug")
                .deadline_ms(3000)
                .start()
                .await
                .expect("webhook starts"),
        );
    }
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &configuration(&webhooks[0], &webhooks[1]),
        )
        .await
        .expect("webhook configuration");

    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let jobs = Api::<Job>::namespaced(client.clone(), NS);
    // The configuration takes effect within moments: probe both shards with Pods of no workload.
    for shard in ["a", "b"] {
        let mut mutated = false;
        for i in 0..60 {
            let mut p = job_pod("probe", "none", 0);
            p.metadata.name = Some(format!("probe-{shard}-{i}"));
            p.metadata.owner_references = None;
            p.metadata.labels = Some([(SHARD.to_string(), shard.to_string())].into());
            let stored = pods.create(&PostParams::default(), &p).await.unwrap();
            if annotation(&stored, "gpu-admission.io/decided-at").is_some() {
                mutated = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(
            mutated,
            "shard {shard} never mutated\n{}",
            webhooks[usize::from(shard == "b")].process.log_tail(30)
        );
    }

    let mut classes_by_job: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
    let mut priorities_by_job: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
    let mut undecided = Vec::new();
    for j in 0..JOBS {
        let name = format!("gang-{j}");
        let created = jobs
            .create(
                &PostParams::default(),
                &serde_json::from_value(job(&name)).unwrap(),
            )
            .await
            .expect("job");
        let uid = created.metadata.uid.clone().unwrap();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..PODS {
            let (pods, pod) = (pods.clone(), job_pod(&name, &uid, i));
            set.spawn(async move { pods.create(&PostParams::default(), &pod).await });
        }
        while let Some(done) = set.join_next().await {
            let stored = done.unwrap().expect("Pod created");
            if annotation(&stored, "gpu-admission.io/decided-at").is_none() {
                undecided.push(stored.metadata.name.clone().unwrap_or_default());
            }
            classes_by_job
                .entry(name.clone())
                .or_default()
                .insert(class_of(&stored));
            priorities_by_job
                .entry(name.clone())
                .or_default()
                .insert(stored.spec.as_ref().unwrap().priority_class_name.clone());
        }
    }
    for (j, classes) in &classes_by_job {
        println!(
            "{j}: classes {classes:?}, PriorityClasses {:?}",
            priorities_by_job[j]
        );
    }
    let logged: Vec<BTreeMap<String, (usize, usize)>> =
        webhooks.iter().map(logged_workloads).collect();
    for (w, l) in webhooks.iter().zip(&logged) {
        println!("{} decided: {l:?}", w.process.name());
    }
    assert!(
        undecided.is_empty(),
        "Pods admitted without a decision: {undecided:?}\n{}\n{}",
        webhooks[0].process.log_tail(20),
        webhooks[1].process.log_tail(20)
    );
    for j in 0..JOBS {
        let name = format!("gang-{j}");
        assert_eq!(
            classes_by_job[&name].len(),
            1,
            "{name}: {:?}",
            classes_by_job[&name]
        );
        assert!(classes_by_job[&name].iter().all(Option::is_some));
        assert_eq!(
            priorities_by_job[&name].len(),
            1,
            "{name}: {:?}",
            priorities_by_job[&name]
        );
        assert!(priorities_by_job[&name].iter().all(Option::is_some));
        // Each replica decided its half under the Job's key, and read the Job's parallelism (from its cache
        // or one GET; a GET slower than its 50 ms bound leaves the size unknown, which changes nothing
        // here: the scorer treats an unknown size as a group).
        let key = format!("batch/Job/{NS}/{name}");
        for l in &logged {
            let (pods, sized) = l.get(&key).copied().unwrap_or_default();
            assert_eq!(pods, PODS / 2, "{key}: {l:?}");
            assert!(sized > 0, "{key}: no Pod read the Job's parallelism: {l:?}");
        }
    }
    // Each scorer replica decided each Job once; the other Pods of the Job got that answer from the frontend's
    // copy of it (no Score call) or, for a Pod sent before the first answer came back, from the scorer's cache.
    for (s, w) in scorers.iter().zip(&webhooks) {
        let addr = s.admin_addr().expect("scorer admin address");
        let text = gpu_admission_tests::https::http_get_text(addr, "/metrics")
            .await
            .unwrap();
        let counter = |text: &str, name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        let decided = counter(&text, "scorer_workload_answers_total{answer=\"decided\"}");
        let cached = counter(&text, "scorer_workload_answers_total{answer=\"cached\"}");
        let frontend = w.metrics().await.unwrap();
        let reused = counter(&frontend, "gpu_admission_workload_answers_reused_total");
        assert_eq!(
            (decided, cached + reused),
            (JOBS as u64, (JOBS * (PODS / 2 - 1)) as u64),
            "{}: decided {decided}, cached by the scorer {cached}, reused by the frontend {reused}:\n{}",
            s.process.name(),
            text.lines()
                .filter(|l| l.contains("workload"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            reused > 0,
            "{}: the frontend never reused an answer",
            w.process.name()
        );
    }
    let distinct: BTreeSet<&Option<String>> = classes_by_job.values().flatten().collect();
    assert!(
        distinct.len() >= 2,
        "six Jobs, one class: workloads are not sampled independently ({distinct:?})"
    );
}
