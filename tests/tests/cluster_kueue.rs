//! Kueue for real: `gpu-admission kueue export` of a policy with quotas, applied
//! server-side to a real control plane (apiserver, kube-scheduler, controller-manager, kwok as the kubelet of
//! an L4-24GB Node of 4 GPUs and an A100-80GB Node of 2) where Kueue v0.17.0, built from its Go module, runs
//! with its CRDs and webhooks, beside the real scorer and frontend (the shipped Pod and workload
//! registrations, the policy in Enforce). One control plane for the file.
//!
//! - every exported ClusterQueue becomes Active;
//! - a bronze Job with Kueue's queue-name label is admitted by Kueue on a flavor of bronze's classes only
//!   (`l4-24gb`), and our decision for its Pods (`gpu-admission.io/gpu-class`, the class `nodeSelector`)
//!   names the same class; the scheduler binds them to the L4 Node;
//! - a bronze Job over bronze's quota (`max` 4, held by the first Job) is created (not denied by us) and waits
//!   in Kueue, suspended, until the first Job is deleted, then runs;
//! - meanwhile a bare Pod with the queue-name label (Kueue does not manage bare Pods here) is denied by our
//!   frontend: a label does not move a Pod past its tier's `max`;
//! - a gold Job asking for A100-80GB borrows silver's unused quota through the cohort; a silver Job within silver's `min`
//!   takes it back through Kueue's preemption (`reclaimWithinCohort: Any`): gold's Job is suspended again
//!   and silver's runs on the A100 Node.
//!
//! Prints the table of which system decided what (README: "When Kueue and gpu-admission both run").

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{
    CaseTable, Components, LocalCluster, kubectl, shipped_registration,
};
use gpu_admission_tests::kueue::{Kueue, QUEUE_LABEL};
use gpu_admission_tests::kwok::{self, POD_COMPLETE_DELAY, POD_COMPLETE_JITTER};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy,
};
use serde_json::{Value, json};

const CLASS: &str = "gpu.nvidia.com/class";
const BRONZE: &str = "kueue-bronze";
const SILVER: &str = "kueue-silver";
const GOLD: &str = "kueue-gold";
/// The LocalQueue `gpu-admission kueue export` creates in each namespace of a quota.
const LOCAL_QUEUE: &str = "gpu-admission";
const REGISTRATION: &str = "gpu-admission-kueue-e2e";

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The default policy in Enforce with quotas: bronze L4 `min` 2 `max` 4 (the Cohort lends the other 2 of the
/// 4 L4 GPUs), silver guaranteed both A100-80GB GPUs, gold may borrow up to 2 of them.
fn policy() -> String {
    let text = repo_file("deploy/kustomize/base/policy/default-policy.yaml");
    assert!(text.contains("  mode: Warn"));
    text.replace("  mode: Warn", "  mode: Enforce")
        + &format!(
            "
quotas:
  capacity: {{ L4-24GB: 4, A100-80GB: 2 }}
  tiers:
    - tier: bronze
      classes: {{ L4-24GB: {{ min: 2, max: 4 }} }}
      namespaces: [ {{ namespace: {BRONZE}, classes: {{ L4-24GB: {{ max: 4 }} }} }} ]
    - tier: silver
      classes: {{ A100-80GB: {{ min: 2 }} }}
      namespaces: [ {{ namespace: {SILVER}, classes: {{ A100-80GB: {{ max: 2 }} }} }} ]
    - tier: gold
      classes: {{ A100-80GB: {{ max: 2 }} }}
      namespaces: [ {{ namespace: {GOLD}, classes: {{ A100-80GB: {{ max: 2 }} }} }} ]
"
        )
}

/// A Job of `parallelism` one-GPU Pods (with the CPU and memory a real one asks for) in Kueue's queue,
/// suspended as Kueue wants it created; its Pods run for longer than the test under kwok and stop within 2 s
/// when deleted or preempted.
fn job(name: &str, parallelism: u32, class: Option<&str>) -> Job {
    let mut spec = json!({"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "main",
        "image": "registry.example/train:1",
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]});
    if let Some(c) = class {
        spec["nodeSelector"] = json!({CLASS: c});
    }
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {"suspend": true, "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
            "template": {"metadata": {"annotations": {POD_COMPLETE_DELAY: "10m", POD_COMPLETE_JITTER: "10m",
                    "app.kubernetes.io/job-type": "train-bert"}},
                "spec": spec}}}))
    .unwrap()
}

fn workloads(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "kueue.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "kueue.x-k8s.io/v1beta2".into(),
        kind: "Workload".into(),
        plural: "workloads".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The Workload Kueue made for Job `job` (its owner), as JSON.
async fn workload_of(client: &kube::Client, ns: &str, job: &str) -> anyhow::Result<Value> {
    let list = workloads(client, ns).list(&ListParams::default()).await?;
    list.items
        .into_iter()
        .find(|w| {
            w.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Job" && o.name == job)
        })
        .map(|w| serde_json::to_value(w).unwrap())
        .ok_or_else(|| anyhow::anyhow!("no Workload for Job {ns}/{job} yet"))
}

/// The status of condition `kind` of a Kueue object (`""` when absent) and its message.
fn condition(object: &Value, kind: &str) -> (String, String) {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or(""),
                    c["message"].as_str().unwrap_or("")
                ),
            )
        })
        .unwrap_or_default()
}

/// The flavors Kueue assigned to a Workload's Pod sets (`resource=flavor`, sorted).
fn flavors(workload: &Value) -> Vec<String> {
    let mut out: Vec<String> = workload["status"]["admission"]["podSetAssignments"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["flavors"].as_object().cloned().unwrap_or_default())
        .map(|(r, f)| format!("{r}={}", f.as_str().unwrap_or("")))
        .collect();
    out.sort();
    out
}

async fn suspended(client: &kube::Client, ns: &str, job: &str) -> bool {
    let j = Api::<Job>::namespaced(client.clone(), ns)
        .get(job)
        .await
        .unwrap();
    j.spec.and_then(|s| s.suspend).unwrap_or(false)
}

/// The Job's Pods, not being deleted.
async fn job_pods(client: &kube::Client, ns: &str, job: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Waits until `n` Pods of the Job run, and returns what placed them: (our gpu-class annotation, the class
/// nodeSelector, the Node) per Pod.
async fn running(
    client: &kube::Client,
    ns: &str,
    job: &str,
    n: usize,
) -> Vec<(String, String, String)> {
    let waited = kwok::wait_for(
        &format!("{n} Pods of {ns}/{job} running"),
        Duration::from_secs(90),
        || async {
            let pods = job_pods(client, ns, job).await;
            Ok(pods.len() == n && pods.iter().all(|p| kwok::phase(p) == "Running"))
        },
    )
    .await;
    let pods = job_pods(client, ns, job).await;
    if let Err(e) = waited {
        let seen: Vec<String> = pods
            .iter()
            .map(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                format!("{:?} {} on {node:?}", p.metadata.name, kwok::phase(p))
            })
            .collect();
        panic!("{e}: {seen:?}");
    }
    pods.into_iter()
        .map(|p| {
            let ann = p.metadata.annotations.unwrap_or_default();
            let spec = p.spec.unwrap_or_default();
            (
                ann.get("gpu-admission.io/gpu-class")
                    .cloned()
                    .unwrap_or_default(),
                spec.node_selector
                    .unwrap_or_default()
                    .get(CLASS)
                    .cloned()
                    .unwrap_or_default(),
                spec.node_name.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until Kueue has admitted the Job's Workload; fails with Kueue's reason when it does not.
async fn admitted_workload(client: &kube::Client, ns: &str, job: &str) -> Value {
    let waited = kwok::wait_for(
        &format!("Kueue admitting {ns}/{job}"),
        Duration::from_secs(60),
        || async { Ok(condition(&workload_of(client, ns, job).await?, "Admitted").0 == "True") },
    )
    .await;
    let workload = workload_of(client, ns, job).await;
    if let Err(e) = waited {
        let why = workload.map(|w| condition(&w, "QuotaReserved").1);
        panic!("{e}; QuotaReserved: {why:?}");
    }
    workload.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_queues_and_gpu_admission_places_and_caps_on_one_control_plane() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let policy_text = policy();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, &policy_text).unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer starts");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    for (ns, tier) in [(BRONZE, "bronze"), (SILVER, "silver"), (GOLD, "gold")] {
        cluster.create_namespace(ns, Some(tier)).await.unwrap();
    }
    let class = |name: &str| {
        scorer
            .policy()
            .catalog()
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .clone()
    };
    kwok::create_ready_nodes(
        &client,
        &[
            kwok::gpu_node("l4-0", &class("L4-24GB"), "nvidia.com/gpu", 4),
            kwok::gpu_node("a100-0", &class("A100-80GB"), "nvidia.com/gpu", 2),
        ],
    )
    .await
    .unwrap();
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .policy_file(&policy_file)
        .deadline_ms(3000)
        .start()
        .await
        .expect("webhook starts");
    let mutating = shipped_registration(
        "mutatingwebhookconfiguration.yaml",
        &webhook,
        &["pods.gpu-admission.io"],
        REGISTRATION,
    )
    .unwrap();
    let validating = shipped_registration(
        "validatingwebhookconfiguration.yaml",
        &webhook,
        &[
            "pods.validate.gpu-admission.io",
            "workloads.validate.gpu-admission.io",
        ],
        REGISTRATION,
    )
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(mutating).unwrap(),
        )
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(validating).unwrap(),
        )
        .await
        .unwrap();
    let Some(kueue) = Kueue::start(&cluster).await.expect("Kueue starts") else {
        return;
    };

    // The export, applied server-side as an operator would (`gpu-admission kueue export | kubectl apply
    // --server-side -f -`).
    let parsed = gpu_admission_policy::parse(&policy_text, "policy.yaml").unwrap();
    let yaml = gpu_admission_core::render::kueue::export_yaml(&parsed).unwrap();
    let applied = kubectl(
        cluster.kubeconfig(),
        None,
        &[],
        &["apply", "--server-side", "-f", "-"],
        &yaml,
    );
    assert!(applied.ok, "the export applies: {}\n{yaml}", applied.stderr);
    let queues: Vec<String> = gpu_admission_core::render::kueue::export(&parsed)
        .iter()
        .filter(|o| o["kind"] == "ClusterQueue")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(queues.len(), 3, "{queues:?}");
    let mut table = CaseTable::start();
    let cq_api = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource {
            group: "kueue.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "kueue.x-k8s.io/v1beta2".into(),
            kind: "ClusterQueue".into(),
            plural: "clusterqueues".into(),
        },
    );
    let active = kwok::wait_for(
        "every exported ClusterQueue Active",
        Duration::from_secs(30),
        || async {
            let mut all = true;
            for q in &queues {
                let cq = serde_json::to_value(cq_api.get(q).await?)?;
                all &= condition(&cq, "Active").0 == "True";
            }
            Ok(all)
        },
    )
    .await;
    for q in &queues {
        let cq = serde_json::to_value(cq_api.get(q).await.unwrap()).unwrap();
        let (status, why) = condition(&cq, "Active");
        table.check(
            &format!("ClusterQueue {q} (export)"),
            format!("Active={status} ({why})"),
            status == "True",
        );
    }
    assert!(active.is_ok(), "{active:?}\n{}", kueue.log_tail(30));

    // 1. A bronze Job in Kueue's queue: Kueue admits it on bronze's flavor, our decision names the same class.
    let bronze_jobs = Api::<Job>::namespaced(client.clone(), BRONZE);
    bronze_jobs
        .create(&PostParams::default(), &job("first", 4, None))
        .await
        .unwrap();
    let first = admitted_workload(&client, BRONZE, "first").await;
    let assigned = flavors(&first);
    table.check(
        "bronze Job of 4 GPUs in the queue: Kueue's flavor",
        assigned.join(","),
        assigned == ["nvidia.com/gpu=l4-24gb"],
    );
    let placed = running(&client, BRONZE, "first", 4).await;
    let agree = placed
        .iter()
        .all(|(ours, selector, node)| ours == "L4-24GB" && selector == "L4-24GB" && node == "l4-0");
    table.check(
        "its Pods: our gpu-class / class nodeSelector / Node",
        format!("{placed:?}"),
        agree,
    );

    // 2. Over bronze's max (4, all held): a Job of 1 is created (we do not deny it) and waits in Kueue, suspended.
    let created = bronze_jobs
        .create(&PostParams::default(), &job("waits", 1, None))
        .await;
    table.check(
        "bronze Job over the tier's max: our webhooks",
        created
            .as_ref()
            .map(|_| "created".to_string())
            .unwrap_or_else(|e| e.to_string()),
        created.is_ok(),
    );
    let pending = kwok::wait_for(
        "the waiting Job's Workload pending",
        Duration::from_secs(20),
        || async {
            let w = workload_of(&client, BRONZE, "waits").await?;
            let (reserved, why) = condition(&w, "QuotaReserved");
            Ok(reserved == "False" && !why.trim_start_matches(':').trim().is_empty())
        },
    )
    .await;
    let w = workload_of(&client, BRONZE, "waits").await.unwrap();
    let (reserved, why) = condition(&w, "QuotaReserved");
    let is_suspended = suspended(&client, BRONZE, "waits").await;
    table.check(
        "  Kueue: the Job's Workload",
        format!("QuotaReserved={reserved} ({why}); Job suspended: {is_suspended}"),
        pending.is_ok() && is_suspended && job_pods(&client, BRONZE, "waits").await.is_empty(),
    );

    // 3. A bare Pod with the queue-name label while bronze holds its max: our frontend denies it.
    let bare: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bare", "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
    .unwrap();
    let bare = Api::<Pod>::namespaced(client.clone(), BRONZE)
        .create(&PostParams::default(), &bare)
        .await;
    let answer = match &bare {
        Ok(_) => "admitted".to_string(),
        Err(e) => e.to_string(),
    };
    table.check(
        "bare bronze Pod with the queue-name label at the tier's max",
        answer.clone(),
        bare.is_err() && answer.contains("L4-24GB") && answer.contains("max"),
    );

    // 4. The first Job deleted (its Pods with it): Kueue admits the waiting one, which runs on L4.
    bronze_jobs
        .delete(
            "first",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let waited = Instant::now();
    let second = admitted_workload(&client, BRONZE, "waits").await;
    let placed = running(&client, BRONZE, "waits", 1).await;
    table.check(
        "  the first Job deleted: the waiting Job",
        format!(
            "admitted {:.1}s after the delete, on {}; Pods {placed:?}",
            waited.elapsed().as_secs_f64(),
            flavors(&second).join(",")
        ),
        flavors(&second) == ["nvidia.com/gpu=l4-24gb"]
            && placed
                .iter()
                .all(|(o, s, _)| o == "L4-24GB" && s == "L4-24GB"),
    );

    // 5. Gold borrows silver's unused A100-80GB quota; silver takes it back by Kueue's preemption.
    Api::<Job>::namespaced(client.clone(), GOLD)
        .create(
            &PostParams::default(),
            &job("borrows", 2, Some("A100-80GB")),
        )
        .await
        .unwrap();
    let borrowed = admitted_workload(&client, GOLD, "borrows").await;
    let placed = running(&client, GOLD, "borrows", 2).await;
    table.check(
        "gold Job of 2 (gold's A100 min 0, max 2): Kueue's flavor / its Pods",
        format!("{}; {placed:?}", flavors(&borrowed).join(",")),
        flavors(&borrowed) == ["nvidia.com/gpu=a100-80gb"]
            && placed
                .iter()
                .all(|(o, s, n)| o == "A100-80GB" && s == "A100-80GB" && n == "a100-0"),
    );
    Api::<Job>::namespaced(client.clone(), SILVER)
        .create(
            &PostParams::default(),
            &job("reclaims", 2, Some("A100-80GB")),
        )
        .await
        .unwrap();
    let reclaim_started = Instant::now();
    let reclaimed = admitted_workload(&client, SILVER, "reclaims").await;
    let placed = running(&client, SILVER, "reclaims", 2).await;
    let took = reclaim_started.elapsed();
    let gold_w = workload_of(&client, GOLD, "borrows").await.unwrap();
    let (preempted, why) = condition(&gold_w, "Preempted");
    let gold_suspended = suspended(&client, GOLD, "borrows").await;
    table.check(
        "silver Job of 2 within silver's min: Kueue preempts gold's borrowing",
        format!("gold Preempted={preempted} ({why}), gold Job suspended: {gold_suspended}"),
        preempted == "True" && why.starts_with("InCohortReclamation") && gold_suspended,
    );
    table.check(
        "  silver's Job",
        format!(
            "admitted on {} in {:.0}s; Pods {placed:?}",
            flavors(&reclaimed).join(","),
            took.as_secs_f64()
        ),
        flavors(&reclaimed) == ["nvidia.com/gpu=a100-80gb"]
            && placed
                .iter()
                .all(|(o, s, n)| o == "A100-80GB" && s == "A100-80GB" && n == "a100-0"),
    );
    println!(
        "cluster_kueue: {:.0}s after the control plane started",
        started.elapsed().as_secs_f64()
    );
    table.finish(&format!(
        "{}\n{}",
        kueue.log_tail(30),
        webhook.process.log_tail(20)
    ));
}
