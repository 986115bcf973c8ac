//! The frontend holds the policy itself, against a real kube-apiserver: it reads the scorer's own
//! policy file, so it enforces the tier with the scorer down, refusing its file, or both restarted.
//!
//! One policy file in Enforce (bronze falls back to TierDefault); a plain user ("alice", bound to
//! every verb of the built-in API groups, none of gpu-admission.io) creates in a bronze namespace:
//! - an H100 pin at `gpu-ultra`: denied by `/validate-pod` in every phase below;
//! - a plain GPU Pod: placed on bronze's classes (a scorer decision, or the tier default without a scorer).
//!
//! Phases: (1) scorer up; (2) scorer killed, frontend restarted: ready, denies, places on the tier default;
//! (3) scorer back on the same address: decisions resume without a frontend restart; (4) the file edited into
//! one both refuse and the scorer restarted on it: the frontend keeps the policy it holds; (5) the frontend
//! restarted on that refused file: it enforces its last good copy.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const BRONZE: &str = "holder-bronze";
const CLASS: &str = "gpu.nvidia.com/class";
const USER: &str = "alice";
const VALIDATING: &str = "gpu-admission-holder-e2e";

/// The shipped policy in Enforce, bronze falling back to TierDefault.
fn enforcing_policy() -> String {
    gpu_admission_policy::DEFAULT_POLICY_YAML
        .replace("  mode: Warn", "  mode: Enforce")
        .replace(
            "    maxPriorityClass: gpu-default\n    fallback: PassThrough",
            "    maxPriorityClass: gpu-default\n    fallback: TierDefault",
        )
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `kubectl create` as alice: `Ok(stored object)` or `Err(stderr)`.
fn create_as_alice(kubeconfig: &Path, object: &Value) -> Result<Value, String> {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            &format!("--as={USER}"),
            "-n",
            BRONZE,
            "create",
            "-o",
            "json",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("kubectl prints the stored object"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into())
    }
}

fn gpu_pod(name: &str, spec: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    for (k, v) in spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// `/validate-pod` for Pods of tier namespaces, as shipped (failurePolicy Ignore: a frontend that does not
/// answer would admit, so a denial proves the frontend decided).
async fn register_validating(cluster: &LocalCluster, webhook: &Webhook) {
    let api = Api::<ValidatingWebhookConfiguration>::all(cluster.client());
    let _ = api.delete(VALIDATING, &DeleteParams::default()).await;
    let base = webhook.mutate_url().replace("/mutate-pod", "");
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        webhook.ca_pem().unwrap(),
    );
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING},
        "webhooks": [{"name": "pods.validate.gpu-admission.io", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("{base}/validate-pod"), "caBundle": ca},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "tenant.kubenexus.io/tier", "operator": "Exists"}]},
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5}]
    }))
    .unwrap();
    for _ in 0..50 {
        match api.create(&PostParams::default(), &config).await {
            Ok(_) => break,
            // The deletion above may still be in progress.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn register(cluster: &LocalCluster, webhook: &Webhook) {
    cluster
        .register_webhook(
            "gpu-admission-holder-e2e",
            &webhook.mutate_url(),
            &webhook.ca_pem().unwrap(),
        )
        .await
        .expect("mutating webhook");
    register_validating(cluster, webhook).await;
}

/// Creates H100 pins at `gpu-ultra` until one is denied naming bronze (the apiserver picks a new webhook
/// configuration up within seconds); panics with the last answer otherwise.
fn assert_pin_denied(kubeconfig: &Path, phase: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let pin = gpu_pod(
            &format!("pin-{phase}-{attempt}"),
            json!({"nodeSelector": {CLASS: "H100-80GB"}, "priorityClassName": "gpu-ultra"}),
        );
        let last = match create_as_alice(kubeconfig, &pin) {
            Err(e) if e.contains("bronze") => return e,
            Err(e) => format!("denied for another reason: {e}"),
            Ok(_) => "ADMITTED".to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "{phase}: the bronze H100 pin at gpu-ultra was not denied: {last}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A plain bronze GPU Pod, as stored: its class constraint and whether the scorer decided it.
fn plain_pod(kubeconfig: &Path, name: &str) -> (String, bool) {
    let pod = create_as_alice(kubeconfig, &gpu_pod(name, json!({}))).expect("a plain GPU Pod");
    let ann = &pod["metadata"]["annotations"];
    let scored = ann.get("gpu-admission.io/priority-score").is_some()
        && ann.get("gpu-admission.io/fallback").is_none();
    let selector = pod.pointer("/spec/nodeSelector").and_then(|s| s.get(CLASS));
    let terms = pod.pointer(
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
    );
    (format!("{selector:?} {terms:?}"), scored)
}

/// Waits until a plain Pod is (`scored`) or is not a scorer decision, and returns its placement.
fn plain_pod_until(kubeconfig: &Path, phase: &str, scored: bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (placement, was_scored) = plain_pod(kubeconfig, &format!("plain-{phase}-{attempt}"));
        if was_scored == scored {
            return placement;
        }
        assert!(
            Instant::now() < deadline,
            "{phase}: plain Pods never became scored={scored}: {placement}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn assert_bronze_only(placement: &str, phase: &str) {
    assert!(placement.contains("L4-24GB"), "{phase}: {placement}");
    for outside in ["H100-80GB", "A100-80GB", "A100-40GB", "MI300X-192GB"] {
        assert!(!placement.contains(outside), "{phase}: {placement}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frontend_enforces_the_policy_without_the_scorer() {
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let kubeconfig = cluster.kubeconfig().to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    let last_good = dir.path().join("last-good.yaml");
    std::fs::write(&file, enforcing_policy()).unwrap();
    let scorer_addr = free_addr();
    let scorer_url = format!("http://{scorer_addr}");
    let start_scorer = |wait: bool| {
        let b = Scorer::builder().policy(&file).listen(scorer_addr);
        (if wait { b } else { b.no_policy_wait() }).start()
    };
    let start_webhook = || {
        Webhook::builder(&scorer_url)
            .kubeconfig(&kubeconfig)
            .policy_file(&file)
            .arg("--policy-last-good")
            .arg(last_good.display().to_string())
            .env("WEBHOOK_POLICY_REFRESH_SECS", "1")
            .start()
    };
    let scorer = start_scorer(true).await.expect("scorer starts");
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .expect("priority classes");
    cluster.bind_tenant(USER).await.expect("the tenant binding");

    // (1) Scorer up.
    let webhook = start_webhook().await.expect("webhook starts");
    register(&cluster, &webhook).await;
    println!(
        "1 scorer up: {}",
        assert_pin_denied(&kubeconfig, "up").trim()
    );
    assert_bronze_only(&plain_pod_until(&kubeconfig, "up", true), "scorer up");

    // (2) Scorer killed, frontend restarted: ready with the file's policy, denies, places on the tier.
    drop(scorer);
    drop(webhook);
    let mut webhook = start_webhook()
        .await
        .expect("a frontend becomes ready without a scorer");
    register(&cluster, &webhook).await;
    println!(
        "2 scorer down: {}",
        assert_pin_denied(&kubeconfig, "down").trim()
    );
    let placement = plain_pod_until(&kubeconfig, "down", false);
    assert_bronze_only(&placement, "scorer down, tier default");

    // (3) Scorer back where it was: decisions resume, no frontend restart.
    let scorer = start_scorer(true).await.expect("scorer restarts");
    assert_bronze_only(&plain_pod_until(&kubeconfig, "back", true), "scorer back");

    // (4) An edit both refuse; the scorer restarted on it holds no policy, the frontend keeps its own.
    std::fs::write(&file, "catalog: [ {name: broken").unwrap();
    drop(scorer);
    let _refusing = start_scorer(false).await.expect("scorer restarts");
    webhook
        .process
        .wait_for_log("policy file refused", Duration::from_secs(10))
        .await
        .expect("the frontend notices the refused edit");
    println!(
        "4 refused file: {}",
        assert_pin_denied(&kubeconfig, "refused").trim()
    );

    // (5) The frontend restarted on the refused file: its last good copy.
    drop(webhook);
    let mut webhook = start_webhook()
        .await
        .expect("a frontend restarted on a refused file becomes ready");
    webhook
        .process
        .wait_for_log("enforcing the last good policy", Duration::from_secs(5))
        .await
        .expect("the last good copy is enforced");
    register(&cluster, &webhook).await;
    println!(
        "5 restarted on the refused file: {}",
        assert_pin_denied(&kubeconfig, "last-good").trim()
    );
}
