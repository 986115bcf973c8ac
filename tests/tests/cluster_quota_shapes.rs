//! GPU quotas held on what a tenant holds, shape by shape, on a real control plane (kube-apiserver 1.37,
//! kube-scheduler, kube-controller-manager, kwok as the kubelet of one L4-24GB Node of 4 GPUs): one frontend
//! behind the shipped Pod, workload and claim registrations, the default policy in Enforce with quotas, every
//! request as a cluster admin (quotas exempt no one). Each shape is a way a `max` was once exceeded; each
//! is answered from what the apiserver stores:
//! - **grace**: a namespace at its `max` of 2 deletes a running Pod with a grace period of an hour: it still
//!   runs (kwok honours the grace period as a kubelet does), so a new Pod is denied;
//! - **relabel**: a bronze namespace holding 2 L4 GPUs is relabelled silver (silver's `max` is 2, a silver
//!   namespace holds 1): a new silver Pod is denied at once; relabelled back, admitted;
//! - **AlreadyExists**: one namespace creates a GPU Pod under a name a Pod of its own already has, five
//!   times (each refused by the apiserver after admission): another bronze namespace still gets all 4 of
//!   the tier's GPUs;
//! - **MIG sidecar**: 4 whole A100s and a MIG slice against silver's A100 `max` of 2: denied (4.125);
//! - **allocationMode All**: a Pod whose claim template takes every device of an L4 Node (`gpusPerNode` 8)
//!   against a namespace `max` of 2: denied;
//! - **claim re-created**: a Pod admitted with a NIC claim, the claim deleted and created again as 4 L4
//!   GPUs: the claim is denied (the Pod asking again);
//! - **max lowered** below what runs (silver's L4 `max` 2 → 1 under 2 running Pods): nothing is evicted, the
//!   frontend's `gpu_admission_quota_gpus` (the quota alert's series) says 2 used against 1, and the next
//!   Pod is denied.
//!
//! Prints the table of shapes and answers.

use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{Components, LocalCluster, register_shipped};
use gpu_admission_tests::kwok;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const GRACE: &str = "shape-grace";
const MOVE: &str = "shape-move";
const SILVER: &str = "shape-silver";
const ATTACKER: &str = "shape-attacker";
const VICTIM: &str = "shape-victim";
const CLAIMS: &str = "shape-claim";
const REGISTRATION: &str = "gpu-admission-quota-shapes";

fn policy() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kustomize/base/policy/default-policy.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("  mode: Warn"));
    text.replace("  mode: Warn", "  mode: Enforce")
        + &format!(
            "
quotas:
  tiers:
    - tier: bronze
      classes: {{ L4-24GB: {{ max: 4 }} }}
      namespaces:
        - {{ namespace: {GRACE}, classes: {{ L4-24GB: {{ max: 2 }} }} }}
        - {{ namespace: {CLAIMS}, classes: {{ L4-24GB: {{ max: 2 }} }} }}
    - tier: silver
      classes: {{ L4-24GB: {{ max: 2 }}, A100-80GB: {{ max: 2 }} }}
"
        )
}

/// A Pod asking for `gpus` L4 GPUs (pinned by its own selector), `name` in the default shard.
fn l4_pod(name: &str, gpus: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"}, "terminationGracePeriodSeconds": 3600,
            "containers": [{"name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}})
}

/// Creates `pod` in `ns`: `Ok(())`, or the apiserver's refusal message.
async fn create(client: &kube::Client, ns: &str, pod: Value) -> Result<(), String> {
    let pod: Pod = serde_json::from_value(pod).unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn running(client: &kube::Client, ns: &str, n: usize) {
    kwok::wait_for(
        &format!("{n} Pods running in {ns}"),
        Duration::from_secs(60),
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items;
            Ok(pods.iter().filter(|p| kwok::phase(p) == "Running").count() == n)
        },
    )
    .await
    .unwrap();
}

/// Deletes every Pod of `ns` at once and waits until none is left.
async fn clear(client: &kube::Client, ns: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods
        .delete_collection(&now, &ListParams::default())
        .await
        .unwrap();
    kwok::wait_for(&format!("{ns} empty"), Duration::from_secs(60), || async {
        Ok(pods.list(&ListParams::default()).await?.items.is_empty())
    })
    .await
    .unwrap();
}

async fn relabel(client: &kube::Client, ns: &str, tier: &str) {
    let patch = json!({"metadata": {"labels": {"tenant.kubenexus.io/tier": tier}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// One row of the table: the shape, what was asked, the answer, and whether it is the one expected.
struct Table(Vec<(String, String, bool)>);

impl Table {
    fn row(&mut self, shape: &str, answer: &Result<(), String>, want_denied: bool) {
        let ok = answer.is_err() == want_denied;
        let said = match answer {
            Ok(()) => "admitted".to_string(),
            Err(e) => format!("denied: {}", e.chars().take(160).collect::<String>()),
        };
        self.0.push((shape.to_string(), said, ok));
    }

    fn finish(self) {
        for (shape, said, ok) in &self.0 {
            println!("{} {shape:<46} {said}", if *ok { "ok " } else { "BAD" });
        }
        let bad: Vec<_> = self.0.iter().filter(|r| !r.2).collect();
        assert!(bad.is_empty(), "shapes answered wrongly: {bad:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_shape_is_held_on_what_is_held() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy()).unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer starts");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    for (ns, tier) in [
        (GRACE, "bronze"),
        (MOVE, "bronze"),
        (SILVER, "silver"),
        (ATTACKER, "bronze"),
        (VICTIM, "bronze"),
        (CLAIMS, "bronze"),
    ] {
        cluster.create_namespace(ns, Some(tier)).await.unwrap();
    }
    let l4 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .unwrap()
        .clone();
    kwok::create_ready_nodes(&client, &[kwok::gpu_node("l4-0", &l4, "nvidia.com/gpu", 4)])
        .await
        .unwrap();
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .policy_file(&policy_file)
        .deadline_ms(3000)
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
    // The registrations and the quota watch are live once an over-max probe is denied.
    let started = Instant::now();
    while create(&client, GRACE, l4_pod("probe", 3)).await.is_ok() {
        clear(&client, GRACE).await;
        assert!(started.elapsed() < Duration::from_secs(30), "never called");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut table = Table(Vec::new());

    // Grace: two running Pods at the namespace's max; one deleted with an hour's grace still runs.
    for i in 0..2 {
        create(&client, GRACE, l4_pod(&format!("run-{i}"), 1))
            .await
            .unwrap();
    }
    running(&client, GRACE, 2).await;
    Api::<Pod>::namespaced(client.clone(), GRACE)
        .delete("run-0", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let terminating = Api::<Pod>::namespaced(client.clone(), GRACE)
        .get("run-0")
        .await
        .unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "terminating, still there"
    );
    let answer = create(&client, GRACE, l4_pod("after-delete", 1)).await;
    table.row("grace: new Pod while one terminates (max 2)", &answer, true);
    clear(&client, GRACE).await;

    // Relabel: bronze's 2 move to silver (max 2, holding 1): silver is full at once; moved back, not.
    for i in 0..2 {
        create(&client, MOVE, l4_pod(&format!("m-{i}"), 1))
            .await
            .unwrap();
    }
    create(&client, SILVER, l4_pod("s-0", 1)).await.unwrap();
    relabel(&client, MOVE, "silver").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answer = create(&client, SILVER, l4_pod("s-1", 1)).await;
    table.row(
        "relabel: silver Pod after bronze ns moved in",
        &answer,
        true,
    );
    relabel(&client, MOVE, "bronze").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answer = create(&client, SILVER, l4_pod("s-1", 1)).await;
    table.row("relabel: silver Pod after it moved back", &answer, false);
    clear(&client, MOVE).await;
    clear(&client, SILVER).await;

    // AlreadyExists: five GPU CREATEs of a taken name; the other namespace still gets the tier's 4.
    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "taken"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/web:1"}]}});
    create(&client, ATTACKER, cpu).await.unwrap();
    for _ in 0..5 {
        let refused = create(&client, ATTACKER, l4_pod("taken", 1)).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("already exists")),
            "{refused:?}"
        );
    }
    let mut admitted = 0;
    for i in 0..4 {
        admitted += usize::from(
            create(&client, VICTIM, l4_pod(&format!("v-{i}"), 1))
                .await
                .is_ok(),
        );
    }
    let answer = if admitted == 4 {
        Ok(())
    } else {
        Err(format!("only {admitted} of 4 admitted"))
    };
    table.row(
        "AlreadyExists x5, then another ns takes 4/4",
        &answer,
        false,
    );
    clear(&client, VICTIM).await;
    clear(&client, ATTACKER).await;

    // MIG sidecar beside 4 whole A100s, against silver's A100 max of 2.
    let sidecar = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sidecar"},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"}, "containers": [
            {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            {"name": "probe", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}});
    let answer = create(&client, SILVER, sidecar).await;
    table.row("MIG sidecar: 4 A100 + 1g.10gb (max 2)", &answer, true);

    // allocationMode All on the L4 class: every device of a Node (gpusPerNode 8), max 2.
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "all-l4"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "l4-24gb.gpu-admission.io", "allocationMode": "All"}}]}}}}))
    .unwrap();
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), CLAIMS)
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let all_pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "all-l4"}]}})
    };
    // Until the frontend's claim cache holds the template, the Pod is undecidable (also denied): wait
    // for the quota's own answer.
    let mut answer = create(&client, CLAIMS, all_pod("all-0")).await;
    for i in 1..20 {
        if answer.as_ref().is_err_and(|e| e.contains("L4-24GB GPUs")) || answer.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        answer = create(&client, CLAIMS, all_pod(&format!("all-{i}"))).await;
    }
    let quota_answer = answer.clone().map_err(|e| {
        if e.contains("asks for 8") {
            e
        } else {
            format!("not the quota's answer: {e}")
        }
    });
    table.row(
        "allocationMode All on L4 (gpusPerNode 8, max 2)",
        &quota_answer,
        true,
    );
    if quota_answer
        .as_ref()
        .is_err_and(|e| e.starts_with("not the quota"))
    {
        table.0.last_mut().unwrap().2 = false;
    }

    // A claim re-created under a running Pod: admitted with a NIC claim, then 4 L4 GPUs.
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), CLAIMS);
    let claim = |class: &str, count: u32| -> ResourceClaim {
        serde_json::from_value(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "extra"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": class, "count": count}}]}}}),
        )
        .unwrap()
    };
    claims
        .create(&PostParams::default(), &claim("sriov.example.com", 1))
        .await
        .unwrap();
    let with_claim = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"}, "containers": [{"name": "main",
            "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "nic"}]}}],
            "resourceClaims": [{"name": "nic", "resourceClaimName": "extra"}]}});
    create(&client, CLAIMS, with_claim).await.unwrap();
    claims
        .delete("extra", &DeleteParams::default())
        .await
        .unwrap();
    kwok::wait_for("the claim gone", Duration::from_secs(30), || async {
        Ok(claims.get_opt("extra").await?.is_none())
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answer = claims
        .create(
            &PostParams::default(),
            &claim("l4-24gb.gpu-admission.io", 4),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    table.row(
        "claim re-created as 4 L4 under its Pod (max 2)",
        &answer,
        true,
    );

    // The max lowered below what runs: silver holds 2 L4 GPUs, its max becomes 1. Nothing is evicted; the
    // frontend's figures (the alert's series) say 2 used against a max of 1, and silver's next L4 Pod is
    // denied.
    for i in 0..2 {
        create(&client, SILVER, l4_pod(&format!("low-{i}"), 1))
            .await
            .unwrap();
    }
    running(&client, SILVER, 2).await;
    let lowered = policy().replace(
        "{ L4-24GB: { max: 2 }, A100-80GB",
        "{ L4-24GB: { max: 1 }, A100-80GB",
    );
    assert_ne!(lowered, policy(), "silver's L4 max is in the test's policy");
    std::fs::write(&policy_file, lowered).unwrap();
    let series = |kind: &str, value: u32| {
        format!(
            "gpu_admission_quota_gpus{{tier=\"silver\",tenant_namespace=\"\",class=\"L4-24GB\",kind=\"{kind}\"}} {value}"
        )
    };
    webhook
        .wait_for_metric_line(&series("max", 1), "quota_gpus", Duration::from_secs(30))
        .await
        .unwrap();
    webhook
        .wait_for_metric_line(&series("used", 2), "quota_gpus", Duration::from_secs(30))
        .await
        .unwrap();
    let answer = create(&client, SILVER, l4_pod("low-2", 1)).await;
    println!("silver after its max was lowered to 1 under 2 running: {answer:?}");
    table.row("max lowered to 1 under 2 running, a new Pod", &answer, true);
    let still = Api::<Pod>::namespaced(client.clone(), SILVER)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count();
    assert_eq!(still, 2, "nothing is evicted over a lowered max");
    table.finish();
}
