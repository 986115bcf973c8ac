//! GpuPolicyExceptions on a real control plane (apiserver, scheduler, controllers, kwok with one H100 Node):
//! the CRD, the floor and the observer as shipped, the default policy in Enforce, the shipped Pod webhooks and
//! the exceptions webhook pointed at a test frontend. A Deployment of the bronze namespace pinned to H100
//! (outside bronze):
//!
//! 1. without an exception, its ReplicaSet is refused (by the floor's workload policy: its template names
//!    H100), so no Pod exists;
//! 2. an exception created by the cluster's admin naming the Deployment, expiring in 45 s: its Pod is
//!    admitted (the frontend through the owner chain Pod → ReplicaSet → Deployment, the floor through the
//!    observer's `except.<namespace>` parameters) and runs on the H100 Node;
//! 3. an exception expiring beyond 90 days is refused by `/validate-exception`;
//! 4. once it has expired, with nobody acting, the Pod deleted is not created again (the ReplicaSet's
//!    creations are refused) and the floor's parameters no longer carry it.

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{
    Components, KubectlAnswer, LocalCluster, eventually, floor_parameter,
    service_account_kubeconfig,
};
use gpu_admission_tests::kwok;
use gpu_admission_tests::observer::Observer;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const CLASS: &str = "gpu.nvidia.com/class";
const BRONZE: &str = "except-bronze";
const REGISTRATION: &str = "gpu-admission-exceptions-e2e";

fn repo_path(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
        .display()
        .to_string()
}

fn kubectl(kc: &Path, args: &[&str], stdin: &str) -> KubectlAnswer {
    gpu_admission_tests::cluster::kubectl(kc, None, &[], args, stdin)
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "train", "namespace": BRONZE},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "train"}},
            "template": {"metadata": {"labels": {"app": "train"}}, "spec": {
                "nodeSelector": {CLASS: "H100-80GB"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "gpu", "image": "registry.example/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
}

fn exception(expires: OffsetDateTime) -> Value {
    json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
        "metadata": {"name": "train-h100", "namespace": BRONZE},
        "spec": {"rules": ["Classes"], "classes": ["H100-80GB"],
            "workloads": [{"kind": "Deployment", "name": "train"}],
            "expiresAt": expires.format(&Rfc3339).unwrap(), "reason": "e2e"}})
}

/// The Deployment's Pods (names).
fn pods(kc: &Path) -> Vec<String> {
    let a = kubectl(
        kc,
        &["-n", BRONZE, "get", "pods", "-l", "app=train", "-o", "name"],
        "",
    );
    a.stdout.lines().map(str::to_string).collect()
}

/// The shipped Pod webhooks and the exceptions webhook, for `webhook`.
async fn register(client: &kube::Client, webhook: &Webhook) {
    let reg = |file, keep: &[&str]| {
        gpu_admission_tests::cluster::shipped_registration(file, webhook, keep, REGISTRATION)
            .unwrap()
    };
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(reg(
        "mutatingwebhookconfiguration.yaml",
        &["pods.gpu-admission.io"],
    ))
    .unwrap();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(reg(
        "validatingwebhookconfiguration.yaml",
        &[
            "pods.validate.gpu-admission.io",
            "exceptions.validate.gpu-admission.io",
        ],
    ))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exempt_deployments_pods_run_outside_the_tier_while_the_exception_lasts() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo_path(
        "deploy/kustomize/base/policy/default-policy.yaml",
    ))
    .unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(
        &policy_file,
        text.replace("  mode: Warn", "  mode: Enforce"),
    )
    .unwrap();

    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    for file in [
        "deploy/kustomize/base/exceptions.yaml",
        "deploy/kustomize/base/floor.yaml",
        "deploy/kustomize/base/observer/serviceaccount.yaml",
        "deploy/kustomize/base/observer/rbac.yaml",
        "deploy/kustomize/base/observer/lease.yaml",
    ] {
        let a = kubectl(
            kc,
            &["-n", "gpu-admission", "apply", "-f", &repo_path(file)],
            "",
        );
        assert!(a.ok, "{file}: {}", a.stderr);
    }
    let from = format!("--from-file=default-policy.yaml={}", policy_file.display());
    let a = kubectl(
        kc,
        &[
            "-n",
            "gpu-admission",
            "create",
            "configmap",
            "gpu-admission-policy",
            &from,
        ],
        "",
    );
    assert!(a.ok, "policy ConfigMap: {}", a.stderr);

    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    let h100 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "H100-80GB")
        .expect("H100 in the catalog")
        .clone();
    kwok::create_ready_nodes(
        &client,
        &[kwok::gpu_node("except-h100", &h100, "nvidia.com/gpu", 8)],
    )
    .await
    .expect("the H100 Node");
    let sa = service_account_kubeconfig(kc, dir.path(), "gpu-admission", "gpu-admission-observer")
        .unwrap();
    let mut observer = Observer::builder(&sa, &[scorer.url()], "except-observer")
        .arg("--floor-params=gpu-admission-floor")
        .start()
        .await
        .expect("observer");
    assert!(
        eventually(Duration::from_secs(30), |_| floor_parameter(kc, "mode")
            == "Enforce"),
        "the observer never put the floor in Enforce\n{}",
        observer.process.log_tail(30)
    );
    // A tier-labelled namespace once the parameters exist: until then the floor denies its label.
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    let mut webhook = Webhook::builder(&scorer.url())
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook");
    register(&client, &webhook).await;

    // 1. No exception: the ReplicaSet's Pod is refused.
    let a = kubectl(kc, &["apply", "-f", "-"], &deployment().to_string());
    assert!(a.ok, "the Deployment: {}", a.stderr);
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        pods(kc).is_empty(),
        "a Pod outside bronze was admitted: {:?}",
        pods(kc)
    );
    let events = kubectl(kc, &["-n", BRONZE, "get", "events", "-o", "json"], "").stdout;
    // The floor's workload policy refuses the ReplicaSet itself (its template names H100).
    assert!(
        events.contains("denied request"),
        "no refused creation: {events}"
    );
    println!("without an exception: the Deployment's ReplicaSet is refused by the floor");

    // 3. Too long an exception is refused by /validate-exception.
    let far = OffsetDateTime::now_utc() + time::Duration::days(120);
    let a = kubectl(kc, &["create", "-f", "-"], &exception(far).to_string());
    assert!(
        !a.ok && a.stderr.contains("more than 90 days ahead"),
        "{a:?}"
    );

    // 2. An exception for 45 s: the Pod is admitted, by the frontend and by the floor, and runs.
    let lifetime = Duration::from_secs(45);
    let expires = OffsetDateTime::now_utc() + lifetime;
    let created = Instant::now();
    let a = kubectl(kc, &["create", "-f", "-"], &exception(expires).to_string());
    assert!(a.ok, "the exception: {}", a.stderr);
    assert!(
        eventually(Duration::from_secs(20), |_| floor_parameter(
            kc,
            &format!("except.{BRONZE}")
        )
        .contains("H100-80GB")),
        "the floor's parameters never carried the exception\n{}",
        observer.process.log_tail(30)
    );
    // The Deployment controller retries with backoff: a change of the Deployment syncs it at once.
    let a = kubectl(
        kc,
        &[
            "-n",
            BRONZE,
            "annotate",
            "deployment",
            "train",
            "e2e/sync=1",
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    assert!(
        eventually(Duration::from_secs(30), |_| pods(kc).len() == 1),
        "the Deployment's Pod was never admitted under the exception\n{}",
        webhook.process.log_tail(30)
    );
    println!(
        "exception created: Pod admitted after {:?}",
        created.elapsed()
    );
    assert!(
        webhook
            .process
            .log_tail(200)
            .contains("allowed by a GpuPolicyException"),
        "{}",
        webhook.process.log_tail(30)
    );

    // 4. Expired: the Pod deleted is not created again; the floor's parameters drop it.
    let left = lifetime.saturating_sub(created.elapsed()) + Duration::from_secs(2);
    std::thread::sleep(left);
    let a = kubectl(
        kc,
        &[
            "-n",
            BRONZE,
            "delete",
            "pods",
            "-l",
            "app=train",
            "--wait=false",
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    assert!(
        eventually(Duration::from_secs(20), |_| floor_parameter(
            kc,
            &format!("except.{BRONZE}")
        )
        .is_empty()),
        "the expired exception stayed in the floor's parameters"
    );
    std::thread::sleep(Duration::from_secs(10));
    let running: Vec<String> = pods(kc)
        .into_iter()
        .filter(|p| {
            let phase = kubectl(
                kc,
                &[
                    "-n",
                    BRONZE,
                    "get",
                    p,
                    "-o",
                    "jsonpath={.metadata.deletionTimestamp}",
                ],
                "",
            );
            phase.stdout.trim().is_empty()
        })
        .collect();
    assert!(
        running.is_empty(),
        "a Pod was admitted after the expiry: {running:?}"
    );
    println!("after expiry: no new Pod admitted, floor parameters without the exception");
    webhook.process.kill();
    observer.process.kill();
}
