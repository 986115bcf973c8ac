//! Corpus tier, our own realistic Pods (no cluster): the decisions the README shows, the overrides a
//! user keeps, and the requests the webhook must leave alone. Real scorer + real webhook processes.

use std::time::Duration;

use gpu_admission_tests::decision::admit_and_verify;
use gpu_admission_tests::gpu::{annotation, array_at, label, pinned_classes};
use gpu_admission_tests::names::*;
use gpu_admission_tests::review::{check_response, pod_review, wrap_request};
use gpu_admission_tests::{Operation, Scorer, Webhook};
use serde_json::{Value, json};

const GOLD: &str = "ml-gold";
const SILVER: &str = "ml-silver";
const BRONZE: &str = "ml-bronze";

async fn start() -> (Scorer, Webhook) {
    gpu_admission_tests::services::scorer_and_webhook(&[
        (GOLD, "gold"),
        (SILVER, "silver"),
        (BRONZE, "bronze"),
    ])
    .await
    .expect("scorer and webhook start")
}

/// A GPU Pod with the given annotations and `count` GPUs of `resource`; `spec` entries merged in.
fn gpu_pod(name: &str, annotations: Value, resource: &str, count: u32, spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun", "train.py"],
                "resources": {"requests": {"cpu": "8", "memory": "64Gi", resource: count.to_string()},
                              "limits": {"memory": "64Gi", resource: count.to_string()}}
            }]
        }
    });
    if let Some(extra) = spec.as_object() {
        for (k, v) in extra {
            pod["spec"][k] = v.clone();
        }
    }
    pod
}

fn assert_clean(v: &gpu_admission_tests::decision::Verified, what: &str) {
    assert!(
        v.errors.is_empty(),
        "{what}: {:#?}\npatch: {}",
        v.errors,
        v.outcome.patch_string()
    );
}

/// The README's headline decisions: gold train-llama 70 GiB → H100-80GB with a PriorityClass and spec.priority and
/// anti-affinity against what it interferes with; the same job in bronze → no feasible class, still a
/// priority; bronze inference 16 GiB → L4-24GB. Fresh scorer (no learned state, no exploration yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn must_show_decisions() {
    let (scorer, webhook) = start().await;
    let policy = scorer.policy().clone();

    let llama = gpu_pod(
        "train-llama-70b",
        json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "70", "ml.batch_size": "32",
               "scheduler.radix.ai/tenant": "research"}),
        "nvidia.com/gpu",
        8,
        json!({}),
    );
    let v = admit_and_verify(&webhook, &llama, GOLD, Some("gold"), &policy)
        .await
        .unwrap();
    assert_clean(&v, "gold train-llama 70 GiB");
    let d = v.decision.clone().expect("mutated");
    assert_eq!(
        d.class.as_deref(),
        Some("H100-80GB"),
        "gold train-llama 70 GiB; patch {}",
        v.outcome.patch_string()
    );
    assert_eq!(
        v.after["spec"]["nodeSelector"][CLASS_LABEL]
            .as_str()
            .or(pinned_classes(&v.after, CLASS_LABEL)
                .first()
                .map(String::as_str)),
        Some("H100-80GB")
    );
    let pc = d.priority_class.clone().expect("priorityClassName");
    assert!(d.priority.is_some(), "spec.priority set with {pc}");
    assert_eq!(annotation(&v.after, ANN_GPU_CLASS), Some("H100-80GB"));
    // train-llama interferes with train-llama (0.45 > 0.3 in the default policy): anti-affinity + label.
    assert_eq!(
        label(&v.after, JOB_TYPE_LABEL),
        Some("train-llama"),
        "job-type label; patch {}",
        v.outcome.patch_string()
    );
    let anti = v
        .after
        .pointer("/spec/affinity/podAntiAffinity")
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(
        anti.contains(JOB_TYPE_LABEL) && anti.contains("train-llama"),
        "pod anti-affinity on {JOB_TYPE_LABEL}: {anti}"
    );
    println!(
        "gold train-llama 70GiB: class {:?} priority {:?} ({pc}, {:?}) in {:?}",
        d.class, d.priority_score, d.priority, v.outcome.elapsed
    );

    let v = admit_and_verify(&webhook, &llama, BRONZE, Some("bronze"), &policy)
        .await
        .unwrap();
    assert_clean(&v, "bronze train-llama 70 GiB");
    let d = v.decision.clone().expect("mutated even when infeasible");
    assert_eq!(
        d.class,
        None,
        "no feasible class in bronze for 70 GiB; patch {}",
        v.outcome.patch_string()
    );
    assert!(
        d.infeasible_reason
            .as_deref()
            .is_some_and(|r| !r.is_empty()),
        "infeasible-reason; patch {}",
        v.outcome.patch_string()
    );
    assert!(
        d.priority_class.is_some() && d.priority.is_some(),
        "priority still assigned"
    );
    println!(
        "bronze train-llama 70GiB: infeasible: {:?}, priority {:?}",
        d.infeasible_reason, d.priority_class
    );

    let inference = gpu_pod(
        "inference-llm-16g",
        json!({"gpu-admission.io/job-type": "inference-llm", "gpu-admission.io/gpu-memory-gib": "16",
               "gpu-admission.io/workload-class": "inference"}),
        "nvidia.com/gpu",
        1,
        json!({}),
    );
    let v = admit_and_verify(&webhook, &inference, BRONZE, Some("bronze"), &policy)
        .await
        .unwrap();
    assert_clean(&v, "bronze inference 16 GiB");
    assert_eq!(
        v.decision.as_ref().and_then(|d| d.class.as_deref()),
        Some("L4-24GB"),
        "patch {}",
        v.outcome.patch_string()
    );

    // Priority depends on the job: the gold 70B training job outranks the bronze inference job.
    let gold_score = annotation(
        &admit_and_verify(&webhook, &llama, GOLD, Some("gold"), &policy)
            .await
            .unwrap()
            .after,
        ANN_PRIORITY_SCORE,
    )
    .and_then(|s| s.parse::<f64>().ok());
    let bronze_score = annotation(&v.after, ANN_PRIORITY_SCORE).and_then(|s| s.parse::<f64>().ok());
    assert!(
        gold_score > bronze_score,
        "gold llama {gold_score:?} vs bronze inference {bronze_score:?}"
    );

    // An AMD Pod gets an AMD class (gold allows MI300X-192GB).
    let amd = gpu_pod(
        "amd-train",
        json!({"app.kubernetes.io/job-type": "train-bert"}),
        "amd.com/gpu",
        1,
        json!({}),
    );
    let v = admit_and_verify(&webhook, &amd, GOLD, Some("gold"), &policy)
        .await
        .unwrap();
    assert_clean(&v, "gold amd");
    assert_eq!(
        v.decision.as_ref().and_then(|d| d.class.as_deref()),
        Some("MI300X-192GB")
    );
}

/// What the user wrote wins, and what the webhook adds comes on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_and_existing_fields_are_kept() {
    let (scorer, webhook) = start().await;
    let policy = scorer.policy().clone();
    let gpu_tol = json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
    let cases = [
        (
            "class pinned by nodeSelector",
            gpu_pod(
                "pinned-selector",
                json!({"gpu.mem.gi": "30"}),
                "nvidia.com/gpu",
                1,
                json!({"nodeSelector": {CLASS_LABEL: "A100-40GB", "kubernetes.io/arch": "amd64"}}),
            ),
        ),
        (
            "class pinned by required affinity",
            gpu_pod(
                "pinned-affinity",
                json!({}),
                "nvidia.com/gpu",
                1,
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": CLASS_LABEL, "operator": "In", "values": ["L4-24GB", "L40S-48GB"]}]}]}}}}),
            ),
        ),
        (
            "existing GPU toleration, anti-affinity, preferred affinity",
            gpu_pod(
                "existing-affinity",
                json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "60"}),
                "nvidia.com/gpu",
                4,
                json!({
                "tolerations": [gpu_tol.clone(), {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]},
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}],
                                     "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
                                        {"matchExpressions": [{"key": "node-pool", "operator": "Exists"}]}]}}}}),
            ),
        ),
        (
            "own priorityClassName",
            gpu_pod(
                "own-priority",
                json!({}),
                "nvidia.com/gpu",
                1,
                json!({"priorityClassName": "team-critical", "priority": 5000}),
            ),
        ),
        ("pointer-hostile keys, empty maps", {
            let mut p = gpu_pod(
                "hostile-keys",
                json!({"example.com/a~b": "x", "a/b/c": "y"}),
                "nvidia.com/gpu",
                1,
                json!({"nodeSelector": {}, "tolerations": []}),
            );
            p["metadata"]["labels"] = json!({});
            p
        }),
        (
            "no metadata maps, generateName only, GPU in an init container",
            json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "init-gpu-"},
            "spec": {"initContainers": [{"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                     "containers": [{"name": "main", "image": "x"}]}}),
        ),
        (
            "malformed annotations",
            gpu_pod(
                "malformed",
                json!({"gpu.mem.gi": "lots", "ml.batch_size": "-3", "gpu-admission.io/model-size-b": "NaN"}),
                "nvidia.com/gpu",
                1,
                json!({}),
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (what, pod) in &cases {
        let v = admit_and_verify(&webhook, pod, GOLD, Some("gold"), &policy)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        for e in &v.errors {
            failures.push(format!("{what}: {e}"));
        }
        if *what == "malformed annotations" && v.outcome.warnings.is_empty() {
            failures.push(format!(
                "{what}: a malformed annotation must give a warning; answer {}",
                v.outcome.raw
            ));
        }
        if what.starts_with("existing GPU toleration") {
            let n = array_at(&v.after, "/spec/tolerations")
                .iter()
                .filter(|t| ***t == gpu_tol)
                .count();
            if n != 1 {
                failures.push(format!(
                    "{what}: the existing GPU toleration appears {n} times"
                ));
            }
        }
        if *what == "own priorityClassName" && v.after["spec"]["priority"] != json!(5000) {
            failures.push(format!(
                "{what}: spec.priority changed to {}",
                v.after["spec"]["priority"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Requests the webhook must allow unchanged, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_left_alone() {
    let (scorer, webhook) = start().await;
    let policy = scorer.policy().clone();
    let gpu = gpu_pod(
        "gpu",
        json!({"app.kubernetes.io/job-type": "train-bert"}),
        "nvidia.com/gpu",
        1,
        json!({}),
    );
    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu"},
                     "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}});
    let zero = gpu_pod("zero-gpu", json!({}), "nvidia.com/gpu", 0, json!({}));
    let other = gpu_pod("example-gpu", json!({}), "example.com/gpu", 1, json!({}));
    let mut decided = gpu.clone();
    decided["metadata"]["annotations"][ANN_DECIDED_AT] = json!("2026-01-01T00:00:00Z");

    for (what, pod, ns, op) in [
        ("CPU Pod in gold", &cpu, GOLD, Operation::Create),
        ("zero GPUs", &zero, GOLD, Operation::Create),
        (
            "a non-GPU extended resource",
            &other,
            GOLD,
            Operation::Create,
        ),
        ("UPDATE of a GPU Pod", &gpu, GOLD, Operation::Update),
        ("DELETE of a GPU Pod", &gpu, GOLD, Operation::Delete),
    ] {
        let o = webhook
            .admit(pod, ns, op)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert!(o.allowed && o.patch.is_none(), "{what}: {}", o.raw);
    }
    // A namespace without a tier label is no reason to skip: held to the default tier, decided.
    let o = webhook
        .admit(&gpu, "default", Operation::Create)
        .await
        .unwrap();
    assert!(
        o.allowed && o.patch.is_some(),
        "GPU Pod in an unlabelled namespace: {}",
        o.raw
    );
    // A forged decided-at without a placement is no reason to skip: the Pod is decided like any other.
    let o = webhook
        .admit(&decided, GOLD, Operation::Create)
        .await
        .unwrap();
    assert!(
        o.allowed && o.patch.is_some(),
        "forged decided-at: {}",
        o.raw
    );
    // The same GPU Pod is mutated in gold (so the cases above are refusals for the right reason).
    let v = admit_and_verify(&webhook, &gpu, GOLD, Some("gold"), &policy)
        .await
        .unwrap();
    assert!(
        v.decision.is_some() && v.errors.is_empty(),
        "{:?}",
        v.errors
    );

    // A v1beta1 review is answered in kind.
    let mut review = pod_review(&gpu, GOLD, Operation::Create);
    review["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let resp = webhook
        .https()
        .post_json("/mutate-pod", &review)
        .await
        .unwrap();
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let o = check_response(&review, &resp.json().unwrap()).unwrap();
    assert!(o.allowed && o.patch.is_some(), "v1beta1 GPU Pod: {}", o.raw);

    // A bare request wrapped with a non-Pod kind.
    let cm = wrap_request(
        json!({"kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
        "namespace": GOLD, "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}),
        "admission.k8s.io/v1",
    );
    let o = webhook.review(&cm).await.unwrap();
    assert!(o.allowed && o.patch.is_none());
}

/// Transport and bad input: HTTP/2, the CA-only trust, malformed and oversized bodies never kill it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_and_bad_input() {
    let (_scorer, webhook) = start().await;
    let gpu = gpu_pod("h2", json!({}), "nvidia.com/gpu", 1, json!({}));

    // HTTP/2 (ALPN h2), as the apiserver negotiates it.
    let h2 = webhook.https().clone().http2(true);
    let review = pod_review(&gpu, GOLD, Operation::Create);
    let resp = h2
        .post_json("/mutate-pod", &review)
        .await
        .expect("HTTP/2 request");
    let o = check_response(&review, &resp.json().unwrap()).unwrap();
    assert!(o.patch.is_some(), "HTTP/2 GPU Pod: {}", o.raw);

    // The serving certificate names localhost too.
    let by_name = webhook.https().clone().server_name("localhost").unwrap();
    assert_eq!(by_name.get("/healthz").await.unwrap().status, 200);

    // A client trusting another CA must fail the handshake.
    let other =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let other_ca = gpu_admission_tests::https::HttpsClient::from_ca_pem(
        webhook.addr(),
        other.cert.pem().as_bytes(),
    )
    .unwrap();
    assert!(
        other_ca.get("/healthz").await.is_err(),
        "a client trusting another CA connected"
    );

    // Malformed bodies: a 4xx, or an allowed answer; never a crash.
    for body in [&b"not json"[..], b"{}", b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}", b"[1,2,3]",
                 b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"u\",\"object\":42}}"] {
        let r = webhook.https().post("/mutate-pod", "application/json", body.to_vec().into()).await.unwrap();
        assert!(r.status.is_client_error() || r.status == 200, "{:?} -> {}", String::from_utf8_lossy(body), r.status);
        if r.status == 200 {
            assert_eq!(r.json().unwrap().pointer("/response/allowed"), Some(&json!(true)), "{:?}", String::from_utf8_lossy(body));
        }
    }
    // Beyond the 24 MiB body limit (above anything the apiserver sends): 413.
    let mut big = pod_review(&gpu, GOLD, Operation::Create);
    big["request"]["object"]["metadata"]["annotations"] = json!({"filler": "x".repeat(25 << 20)});
    let r = webhook
        .https()
        .post_json("/mutate-pod", &big)
        .await
        .unwrap();
    assert_eq!(r.status, 413, "a 25 MiB review");

    // Still alive and serving.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(webhook.https().get("/healthz").await.unwrap().status, 200);
    let o = webhook.admit_pod(&gpu, GOLD).await.unwrap();
    assert!(o.patch.is_some());
}
