//! GPU quotas with every frontend down, held by the kube-apiserver's own ResourceQuota admission. A real
//! control plane (kube-apiserver 1.37, kube-controller-manager, whose quota controller computes a
//! ResourceQuota's usage before admission counts against it), the default policy in Enforce with a bronze
//! namespace share of `max` 2 (L4 class and total), the observer as its ServiceAccount with the shipped RBAC
//! and `--resource-quotas`, the shipped Pod and claim registrations (`failurePolicy: Ignore`) pointed at a
//! frontend that is then killed:
//!
//! 1. the observer writes `gpu-admission-quota` into the share's namespace (read back: the L4 DeviceClass's
//!    devices and `requests.nvidia.com/gpu`, 2 each);
//! 2. with the frontend killed, two one-GPU Pods (`nvidia.com/gpu`) are stored and the third is refused by
//!    the apiserver's quota; two ResourceClaims of one L4 device each are stored and the third is refused;
//!    what is stored is read back;
//! 3. the namespace relabelled silver (no share there): the observer deletes its object, and leaves a
//!    ResourceQuota it does not manage alone; relabelled bronze: the object is back.
//!
//! Prints what each step answered and how long the observer took.

use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{
    Components, LocalCluster, register_shipped, service_account_kubeconfig,
};
use gpu_admission_tests::observer::Observer;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "quota-down";
const REGISTRATION: &str = "gpu-admission-quota-down";
const QUOTA: &str = "gpu-admission-quota";
const L4_DEVICES: &str = "l4-24gb.gpu-admission.io.deviceclass.resource.k8s.io/devices";

fn repo_path(rel: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../").to_string() + rel
}

fn policy() -> String {
    let text = std::fs::read_to_string(repo_path(
        "deploy/kustomize/base/policy/default-policy.yaml",
    ))
    .unwrap();
    assert!(text.contains("  mode: Warn"));
    text.replace("  mode: Warn", "  mode: Enforce")
        + &format!(
            "
quotas:
  tiers:
    - tier: bronze
      classes: {{ L4-24GB: {{ max: 4 }} }}
      total: {{ max: 4 }}
      namespaces:
        - {{ namespace: {NS}, classes: {{ L4-24GB: {{ max: 2 }} }}, total: {{ max: 2 }} }}
"
        )
}

fn kubectl(kc: &std::path::Path, args: &[&str]) -> gpu_admission_tests::cluster::KubectlAnswer {
    gpu_admission_tests::cluster::kubectl(kc, None, &[], args, "")
}

async fn create<K>(api: &Api<K>, object: Value) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn gpu_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
            "containers": [{"name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
}

fn l4_claim(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "l4-24gb.gpu-admission.io", "count": 1}}]}}})
}

/// The `spec.hard` of our object in `NS`, once its status is computed (`None`: not there).
async fn ours(quotas: &Api<ResourceQuota>) -> Option<Vec<(String, String)>> {
    let q = quotas.get_opt(QUOTA).await.unwrap()?;
    let hard = q.spec?.hard?;
    let computed = q.status.and_then(|s| s.hard).as_ref() == Some(&hard);
    computed.then(|| hard.into_iter().map(|(k, v)| (k, v.0)).collect())
}

async fn wait_ours(quotas: &Api<ResourceQuota>, present: bool, what: &str) -> Duration {
    let started = Instant::now();
    while ours(quotas).await.is_some() != present {
        assert!(started.elapsed() < Duration::from_secs(30), "{what}: never");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

async fn relabel(client: &kube::Client, tier: &str) {
    let patch = json!({"metadata": {"labels": {"tenant.kubenexus.io/tier": tier}}});
    Api::<Namespace>::all(client.clone())
        .patch(NS, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_namespace_max_holds_with_every_frontend_down() {
    let components = Components {
        controller_manager: true,
        ..Components::APISERVER
    };
    let Some(cluster) = LocalCluster::start_with(components)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy()).unwrap();

    // Our namespace, the observer's shipped objects, the policy ConfigMap; the share's namespace.
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    for file in [
        "deploy/kustomize/base/observer/serviceaccount.yaml",
        "deploy/kustomize/base/observer/rbac.yaml",
        "deploy/kustomize/base/observer/lease.yaml",
    ] {
        let a = kubectl(
            kc,
            &["-n", "gpu-admission", "apply", "-f", &repo_path(file)],
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
    );
    assert!(a.ok, "policy ConfigMap: {}", a.stderr);
    cluster.create_namespace(NS, Some("bronze")).await.unwrap();
    // A ResourceQuota of the namespace's own admin: never ours to change.
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), NS);
    create(
        &quotas,
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-pods"},
            "spec": {"hard": {"pods": "50"}}}),
    )
    .await
    .unwrap();

    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer starts");
    let mut webhook = Webhook::builder(&scorer.url())
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook starts");
    register_shipped(
        &client,
        &webhook,
        (
            &["pods.gpu-admission.io"],
            &[
                "pods.validate.gpu-admission.io",
                "claims.validate.gpu-admission.io",
            ],
        ),
        REGISTRATION,
    )
    .await
    .expect("the shipped Pod and claim webhooks registered");

    // 1. The observer writes the share's ResourceQuota.
    let sa = service_account_kubeconfig(kc, dir.path(), "gpu-admission", "gpu-admission-observer")
        .unwrap();
    let started = Instant::now();
    let observer = Observer::builder(&sa, &[scorer.url()], "quota-observer")
        .arg("--resource-quotas")
        .start()
        .await
        .expect("observer");
    wait_ours(&quotas, true, "the observer's ResourceQuota").await;
    let hard = ours(&quotas).await.unwrap();
    println!(
        "ResourceQuota written and computed {:?} after the observer started: {hard:?}",
        started.elapsed()
    );
    assert_eq!(
        hard.iter()
            .filter(|(k, _)| k == L4_DEVICES || k == "requests.nvidia.com/gpu")
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>(),
        ["2", "2"],
        "{hard:?}"
    );

    // 2. Every frontend down: the apiserver's quota holds the namespace's max of 2.
    webhook.process.kill();
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), NS);
    let mut answers = Vec::new();
    for i in 0..3 {
        answers.push(create(&pods, gpu_pod(&format!("gpu-{i}"))).await);
    }
    for i in 0..3 {
        answers.push(create(&claims, l4_claim(&format!("l4-{i}"))).await);
    }
    for (what, a) in [
        "pod gpu-0",
        "pod gpu-1",
        "pod gpu-2",
        "claim l4-0",
        "claim l4-1",
        "claim l4-2",
    ]
    .iter()
    .zip(&answers)
    {
        println!(
            "{what:<12} {}",
            a.as_ref()
                .map_or_else(|e| format!("refused: {e}"), |()| "stored".into())
        );
    }
    let refused = |a: &Result<(), String>| {
        a.as_ref()
            .is_err_and(|e| e.contains("exceeded quota: gpu-admission-quota"))
    };
    assert!(answers[0].is_ok() && answers[1].is_ok(), "{answers:?}");
    assert!(refused(&answers[2]), "{answers:?}");
    assert!(answers[3].is_ok() && answers[4].is_ok(), "{answers:?}");
    assert!(refused(&answers[5]), "{answers:?}");
    let stored_pods = pods.list(&ListParams::default()).await.unwrap().items.len();
    let stored_claims = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    println!("stored: {stored_pods} Pods, {stored_claims} claims");
    assert_eq!((stored_pods, stored_claims), (2, 2));
    let used = quotas
        .get(QUOTA)
        .await
        .unwrap()
        .status
        .unwrap()
        .used
        .unwrap();
    println!(
        "used: {} of requests.nvidia.com/gpu, {} of the L4 DeviceClass's devices",
        used["requests.nvidia.com/gpu"].0, used[L4_DEVICES].0
    );

    // 3. Relabelled silver (no share): ours deleted, the admin's kept; back to bronze: ours again.
    relabel(&client, "silver").await;
    let took = wait_ours(&quotas, false, "deleted after the relabel").await;
    println!("relabelled silver: ResourceQuota deleted after {took:?}");
    assert!(
        quotas.get_opt("team-pods").await.unwrap().is_some(),
        "the admin's ResourceQuota is left alone"
    );
    relabel(&client, "bronze").await;
    let took = wait_ours(&quotas, true, "back after the relabel").await;
    println!("relabelled bronze: ResourceQuota written again after {took:?}");
    let metrics = observer.metrics().await.unwrap();
    let count = |r: &str| {
        gpu_admission_tests::observer::metric_value(
            &metrics,
            &format!("observer_resource_quota_writes_total{{result=\"{r}\"}}"),
        )
    };
    println!(
        "writes: created {}, deleted {}, updated {}, failed {}",
        count("created"),
        count("deleted"),
        count("updated"),
        count("failed")
    );
    assert_eq!((count("created"), count("deleted")), (2.0, 1.0));
}
