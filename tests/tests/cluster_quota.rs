//! Elastic GPU quotas against a real kube-apiserver with the real kube-scheduler,
//! kube-controller-manager (its job controller creates the Jobs' Pods) and kwok as the kubelet of one
//! A100-80GB Node: the default policy in Enforce with a `quotas` section, a scorer, and two webhook-frontend
//! replicas behind the shipped registrations, each registration sending half of the Pods (label
//! `quota-shard`) to one replica, as a Service would spread them. The bronze Pods have no Node of their
//! class: they stay Pending, and a Pending Pod holds its quota.
//!
//! - two silver Pods (silver's A100 `min` 0) borrow both GPUs of the Node at `gpu-borrowed`; a gold Pod
//!   within gold's A100 `min` of 2 (at its own `gpu-high`) gets one back: kube-scheduler preempts a borrower;
//! - a bronze Job of parallelism 6 in a namespace whose L4-24GB `max` is 4 is denied when it is created (it
//!   can never run whole); two Jobs of 3 there get 4 Pods, their other Pods are denied with the quota's
//!   message (the job controller's `FailedCreate`), and no 5th Pod appears;
//! - 4 concurrent clients create 100 one-GPU Pods against a namespace `max` of 40, half through each
//!   replica: exactly 40 admitted (the replicas share each tier's quota ledger; the overshoot is printed),
//!   some of them drawn from a replica's grant (no write of their own);
//!   each tier's reservations are in its own QuotaLedger, holding no other tier's;
//! - Pods within the tier's `min` keep the tier's PriorityClass (`gpu-default`) and the record
//!   `gpu-admission.io/quota: … within-min`; Pods beyond it get the shipped borrowers' class `gpu-borrowed`
//!   (value 100) and `… borrowed`;
//! - `gpu-admission quota usage` on `kubectl get namespaces,nodes,pods -A -o json` counts what the frontend
//!   counts;
//! - deleting Pods frees quota: a new Pod is admitted within one watch round trip of the delete (printed);
//! - a tier's ledger deleted under the replicas is created again: each replica's next reservation there is
//!   admitted.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const JOB_NS: &str = "quota-job";
/// The preemption case: a silver borrower and a gold Pod within its tier's min, on one A100-80GB Node.
const SILVER_NS: &str = "quota-silver";
const GOLD_NS: &str = "quota-gold";
const LOAD_NS: &str = "quota-load";
const SHARD: &str = "quota-shard";
/// What two replicas may admit beyond a `max`: nothing, through the shared quota ledger, as long as each
/// watch sees a new Pod within the ledger's grace (see webhook-frontend/README.md#quotas).
const CROSS_REPLICA_BOUND: usize = 0;

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn policy() -> String {
    let text = repo_file("deploy/kustomize/base/policy/default-policy.yaml");
    assert!(text.contains("  mode: Warn"));
    text.replace("  mode: Warn", "  mode: Enforce")
        + &format!(
            "
quotas:
  tiers:
    - tier: bronze
      classes: {{ L4-24GB: {{ min: 8, max: 44 }} }}
      namespaces:
        - {{ namespace: {JOB_NS}, classes: {{ L4-24GB: {{ max: 4 }} }} }}
        - {{ namespace: {LOAD_NS}, classes: {{ L4-24GB: {{ max: 40 }} }} }}
    - tier: silver
      classes: {{ A100-80GB: {{ max: 2 }} }}
    - tier: gold
      classes: {{ A100-80GB: {{ min: 2 }} }}
"
        )
}

/// The shipped registrations' Pod hooks, one copy per replica, each for one shard.
fn registrations(webhooks: &[Webhook]) -> (Value, Value) {
    let mut mutating: Value = serde_yaml::from_str(&repo_file(
        "deploy/kustomize/base/webhook/mutatingwebhookconfiguration.yaml",
    ))
    .unwrap();
    let mut validating: Value = serde_yaml::from_str(&repo_file(
        "deploy/kustomize/base/webhook/validatingwebhookconfiguration.yaml",
    ))
    .unwrap();
    for (config, keep) in [
        (&mut mutating, &["pods.gpu-admission.io"][..]),
        (
            &mut validating,
            &[
                "pods.validate.gpu-admission.io",
                "workloads.validate.gpu-admission.io",
            ][..],
        ),
    ] {
        config["metadata"]["name"] = json!("gpu-admission-quota-e2e");
        let shipped: Vec<Value> = config["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| keep.contains(&h["name"].as_str().unwrap()))
            .cloned()
            .collect();
        assert_eq!(shipped.len(), keep.len());
        let hooks: Vec<Value> = shipped
            .iter()
            .flat_map(|hook| webhooks.iter().enumerate().map(move |(i, w)| (hook, i, w)))
            .map(|(hook, i, w)| {
                let mut h = hook.clone();
                let base = w.mutate_url().replace("/mutate-pod", "");
                let path = h["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let ca = base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    w.ca_pem().unwrap(),
                );
                h["name"] = json!(format!("s{i}.{}", hook["name"].as_str().unwrap()));
                h["clientConfig"] = json!({"url": format!("{base}{path}"), "caBundle": ca});
                h["timeoutSeconds"] = json!(10);
                h["objectSelector"] = json!({"matchLabels": {SHARD: i.to_string()}});
                h
            })
            .collect();
        config["webhooks"] = json!(hooks);
    }
    (mutating, validating)
}

fn job(name: &str, parallelism: u32) -> Job {
    serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {SHARD: "1"}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
            "template": {"metadata": {"labels": {SHARD: "1"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main",
                    "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}))
    .unwrap()
}

/// A one-GPU Pod pinned to A100-80GB by its own selector (kept inside silver's and gold's classes), at its
/// own PriorityClass when given.
fn a100_pod(name: &str, priority_class: Option<&str>) -> Pod {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {SHARD: "0"}},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"},
            "containers": [{"name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    if let Some(pc) = priority_class {
        pod["spec"]["priorityClassName"] = json!(pc);
    }
    serde_json::from_value(pod).unwrap()
}

fn gpu_pod(name: &str, shard: usize) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {SHARD: shard.to_string()},
            "annotations": {"app.kubernetes.io/job-type": "inference-llm"}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/infer:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
    .unwrap()
}

async fn pods_in(client: &kube::Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// On a thread of its own with a 16 MiB stack: the test's future (it holds the CLI's whole check of the
/// inputs and every step's state) outgrew the test harness's 2 MiB in the dev profile.
#[test]
fn quotas_hold_on_a_real_control_plane_through_two_replicas() {
    std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(Box::pin(quotas_hold()))
        })
        .expect("the test's thread")
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

async fn quotas_hold() {
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
    // The borrowers' class, as deploy/kustomize/base/priorityclasses.yaml ships it.
    let shipped: Vec<Value> = serde_yaml::Deserializer::from_str(&repo_file(
        "deploy/kustomize/base/priorityclasses.yaml",
    ))
    .map(|d| serde::Deserialize::deserialize(d).unwrap())
    .collect();
    let borrowed = shipped
        .into_iter()
        .find(|c: &Value| c["metadata"]["name"] == "gpu-borrowed")
        .expect("the shipped borrowers' class");
    Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(borrowed).unwrap(),
        )
        .await
        .unwrap();
    for (ns, tier) in [
        (JOB_NS, "bronze"),
        (LOAD_NS, "bronze"),
        (SILVER_NS, "silver"),
        (GOLD_NS, "gold"),
    ] {
        cluster.create_namespace(ns, Some(tier)).await.unwrap();
    }
    // One A100-80GB Node of 2 GPUs (kwok runs its Pods); no Node of any other class.
    let a100 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "A100-80GB")
        .unwrap()
        .clone();
    kwok::create_ready_nodes(
        &client,
        &[kwok::gpu_node("a100-0", &a100, "nvidia.com/gpu", 2)],
    )
    .await
    .unwrap();
    let mut webhooks = Vec::new();
    for name in ["webhook-a", "webhook-b"] {
        webhooks.push(
            Webhook::builder(&scorer.url())
                .name(name)
                .kubeconfig(cluster.kubeconfig())
                .policy_file(&policy_file)
                .deadline_ms(3000)
                .start()
                .await
                .expect("webhook starts"),
        );
    }
    let (mutating, validating) = registrations(&webhooks);
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
    // The apiserver calls new registrations within a moment: wait until a probe Pod is decided.
    let probes = Api::<Pod>::namespaced(client.clone(), JOB_NS);
    let started = Instant::now();
    loop {
        let p = probes
            .create(&PostParams::default(), &gpu_pod("probe", 0))
            .await
            .unwrap();
        let decided = p
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("gpu-admission.io/decided-at");
        probes
            .delete(
                "probe",
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        if decided {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the webhooks are never called"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while !pods_in(&client, JOB_NS).await.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 0. Reclaim by preemption: two silver Pods borrow both GPUs of the A100 Node (silver's min is 0); a gold
    // Pod within gold's min there gets the GPUs back through kube-scheduler's preemption of a borrower.
    let silver = Api::<Pod>::namespaced(client.clone(), SILVER_NS);
    for i in 0..2 {
        silver
            .create(
                &PostParams::default(),
                &a100_pod(&format!("borrower-{i}"), None),
            )
            .await
            .unwrap();
    }
    kwok::wait_for(
        "both borrowers running",
        Duration::from_secs(60),
        || async {
            let pods = pods_in(&client, SILVER_NS).await;
            Ok(pods.len() == 2 && pods.iter().all(|p| kwok::phase(p) == "Running"))
        },
    )
    .await
    .unwrap();
    for p in pods_in(&client, SILVER_NS).await {
        let spec = p.spec.unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-borrowed"));
    }
    let gold = Api::<Pod>::namespaced(client.clone(), GOLD_NS);
    gold.create(&PostParams::default(), &a100_pod("owner", Some("gpu-high")))
        .await
        .unwrap();
    let reclaimed = kwok::wait_for("the gold Pod running", Duration::from_secs(60), || async {
        Ok(kwok::phase(&gold.get("owner").await?) == "Running")
    })
    .await
    .unwrap();
    let owner = gold.get("owner").await.unwrap();
    let record = owner.metadata.annotations.unwrap_or_default();
    assert!(
        record["gpu-admission.io/quota"].ends_with(": within-min"),
        "{record:?}"
    );
    let left: Vec<Pod> = pods_in(&client, SILVER_NS)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(left.len(), 1, "one borrower preempted");
    println!(
        "gold Pod within min reclaimed an A100 from a silver borrower by preemption in {reclaimed:?}"
    );

    // 1. A Job of 6 one-GPU Pods against a max of 4 can never run whole: denied when it is created. Two Jobs
    // of 3 each fit alone: together they get 4 Pods, the others are denied (the job controller retries them).
    let jobs = Api::<Job>::namespaced(client.clone(), JOB_NS);
    let err = jobs
        .create(&PostParams::default(), &job("wide", 6))
        .await
        .expect_err("a Job that can never fit is denied");
    println!("Job of 6 against max 4: {err}");
    assert!(
        err.to_string()
            .contains("6 Pods of 1 GPUs each need 6 L4-24GB, above the namespace's max 4"),
        "{err}"
    );
    for name in ["fits-a", "fits-b"] {
        jobs.create(&PostParams::default(), &job(name, 3))
            .await
            .unwrap();
    }
    let started = Instant::now();
    let denied_logged = |w: &Webhook| {
        w.process
            .log()
            .contains("namespace quota-job holds 4 of its 4 L4-24GB GPUs")
    };
    while !(webhooks.iter().any(denied_logged) && pods_in(&client, JOB_NS).await.len() >= 4) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the Jobs' extra Pods were never denied: {} Pods",
            pods_in(&client, JOB_NS).await.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The job controller keeps retrying; no retry gets a 5th Pod in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job_pods = pods_in(&client, JOB_NS).await;
    assert_eq!(job_pods.len(), 4, "the Jobs hold more than their max");
    println!("two Jobs of 3 against max 4: 4 Pods admitted, the others denied");
    // Within the tier's min of 8: the tier's priority, and the record says so.
    for p in &job_pods {
        let ann = p.metadata.annotations.clone().unwrap_or_default();
        let record = ann
            .get("gpu-admission.io/quota")
            .cloned()
            .unwrap_or_default();
        assert!(record.ends_with(": within-min"), "{record}");
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("gpu-default"),
            "{record}"
        );
    }

    // 2. 4 clients x 25 one-GPU Pods against max 40, half through each replica.
    let admitted = Arc::new(AtomicUsize::new(0));
    let denied = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..4 {
        let (client, admitted, denied, retried) = (
            client.clone(),
            admitted.clone(),
            denied.clone(),
            retried.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let pods = Api::<Pod>::namespaced(client, LOAD_NS);
            for i in 0..25 {
                let name = format!("load-{c}-{i}");
                // A Pod mutated within the min that another admission pushed beyond it is denied with a
                // retry hint (it would run above the borrowers' class): retried, as a controller does.
                for attempt in 0.. {
                    match pods
                        .create(&PostParams::default(), &gpu_pod(&name, (c + i) % 2))
                        .await
                    {
                        Ok(_) => admitted.fetch_add(1, Ordering::Relaxed),
                        Err(kube::Error::Api(e)) if e.message.contains("L4-24GB GPUs") => {
                            denied.fetch_add(1, Ordering::Relaxed)
                        }
                        // Borrowing decided on a usage another admission raised meanwhile, or the last headroom
                        // granted to the other replica for a second: the message says retry.
                        Err(kube::Error::Api(e))
                            if (e.message.contains("borrows beyond its quota's min")
                                || e.message.contains("granted to another frontend replica"))
                                && attempt < 5 =>
                        {
                            retried.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) => panic!("{name}: {e}"),
                    };
                    break;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let admitted = admitted.load(Ordering::Relaxed);
    let stored = pods_in(&client, LOAD_NS).await.len();
    println!(
        "100 Pods, 4 clients, 2 replicas, max 40: admitted {admitted}, denied {}, overshoot {}, retried \
         (borrowing above the borrowers' class, or headroom granted to the other replica) {}, in {:?}",
        denied.load(Ordering::Relaxed),
        admitted.saturating_sub(40),
        retried.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert_eq!(stored, admitted);
    let mut drawn = 0;
    for (replica, webhook) in webhooks.iter().enumerate() {
        let mut results = Vec::new();
        for result in ["written", "conflict", "conflict_read", "overtaken", "drawn"] {
            let n = ledger_writes(webhook, "bronze", result).await;
            drawn += if result == "drawn" { n } else { 0 };
            results.push(format!("{result} {n}"));
        }
        println!(
            "replica {replica}'s bronze ledger writes: {}",
            results.join(", ")
        );
    }
    // A stream of one namespace's Pods through each replica reserves ahead in grants.
    assert!(drawn > 0, "no Pod was drawn from a grant");
    ledgers_are_per_tier(
        &cluster,
        &[
            (LOAD_NS, "bronze"),
            (SILVER_NS, "silver"),
            (GOLD_NS, "gold"),
        ],
    );
    // Beyond the tier's min (4 Job Pods + 4 here): borrowers, at the borrowers' class.
    let load_pods = pods_in(&client, LOAD_NS).await;
    let borrowers = load_pods
        .iter()
        .filter(|p| {
            let spec = p.spec.as_ref().unwrap();
            let record = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("gpu-admission.io/quota"));
            spec.priority_class_name.as_deref() == Some("gpu-borrowed")
                && spec.priority == Some(100)
                && record.is_some_and(|r| r.ends_with(": borrowed"))
        })
        .count();
    println!("borrowers at gpu-borrowed: {borrowers} of {stored}");
    // Only the 4 GPUs of the tier's min left keep the tier's priority: a Pod mutated within the min that
    // another admission pushed beyond it was denied by /validate-pod and retried.
    assert!(borrowers + 4 >= stored, "{borrowers} borrowers of {stored}");
    assert!(admitted >= 40, "fewer than max admitted: {admitted}");
    assert!(
        admitted <= 40 + CROSS_REPLICA_BOUND,
        "admitted {admitted} > 40 + {CROSS_REPLICA_BOUND}"
    );

    // The usage metric agrees with the stored Pods within a refresh (every 5 s).
    let want = format!(
        "gpu_admission_quota_gpus{{tier=\"bronze\",tenant_namespace=\"{LOAD_NS}\",class=\"\",kind=\"used\"}} {stored}"
    );
    webhooks[0]
        .wait_for_metric_line(&want, "quota_gpus", Duration::from_secs(15))
        .await
        .unwrap();

    // The CLI counts what the frontend counts: `gpu-admission quota usage` on what kubectl lists.
    let listed = gpu_admission_tests::cluster::kubectl(
        cluster.kubeconfig(),
        None,
        &[],
        &["get", "namespaces,nodes,pods", "-A", "-o", "json"],
        "",
    );
    assert!(listed.ok, "{}", listed.stderr);
    let listing = dir.path().join("cluster.json");
    std::fs::write(&listing, &listed.stdout).unwrap();
    let cli = gpu_admission_tests::binaries::webhook().with_file_name("gpu-admission");
    let out = std::process::Command::new(&cli)
        .args(["quota", "usage", "-f"])
        .arg(&listing)
        .arg("--policy")
        .arg(&policy_file)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("gpu-admission quota usage:\n{table}");
    let row = format!("bronze {LOAD_NS} L4-24GB {stored} 0 40");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row),
        "no `{row}` in\n{table}"
    );

    // The CLI answers what the webhooks answer on the same usage, the quota's record and borrowing included.
    cli_answers_as_the_webhooks(&cli, &listing, &policy_file, &webhooks[0]).await;

    // 3. Deleting Pods frees quota within one watch round trip: the last delete frees the one GPU the next
    // Pod asks for, and the time is taken from its answer.
    let pods = Api::<Pod>::namespaced(client.clone(), LOAD_NS);
    let over = admitted.saturating_sub(40);
    for p in pods_in(&client, LOAD_NS).await.iter().take(1 + over) {
        delete_now(&pods, p.metadata.name.as_deref().unwrap()).await;
    }
    let (freed_after, attempt) = admitted_within_5s(&pods, "quota not freed", |a| {
        gpu_pod(&format!("after-{a}"), a % 2)
    })
    .await;
    println!(
        "deleted {} Pods: a new Pod admitted {freed_after:?} after the last delete (attempt {attempt})",
        1 + over
    );
    assert!(freed_after < Duration::from_secs(2), "{freed_after:?}");

    // 4. A ledger deleted under the replicas (an admin's act) is created again by the next write: each
    // replica's next reservation in that tier is admitted, not left undecidable on a version that is gone.
    // Each replica's watch brings the delete and the other's create, so neither write conflicts.
    let mut conflicts_before = Vec::new();
    for webhook in &webhooks[..2] {
        conflicts_before.push(conflicts(webhook).await);
    }
    // A watch event arrives within milliseconds; a second covers a loaded machine.
    let settle = || tokio::time::sleep(Duration::from_secs(1));
    delete_ledger(&cluster, "bronze");
    for shard in 0..2 {
        settle().await;
        let victim = pods_in(&client, LOAD_NS).await.remove(0);
        delete_now(&pods, &victim.metadata.name.unwrap()).await;
        let why = format!("replica {shard} after its tier's ledger was deleted");
        let (_, attempt) = admitted_within_5s(&pods, &why, |a| {
            gpu_pod(&format!("recreated-{shard}-{a}"), shard)
        })
        .await;
        println!("replica {shard}: admitted after the ledger's delete (attempt {attempt})");
    }
    ledgers_are_per_tier(&cluster, &[(LOAD_NS, "bronze")]);
    for (replica, before) in conflicts_before.into_iter().enumerate() {
        let after = conflicts(&webhooks[replica]).await;
        assert_eq!(
            after, before,
            "replica {replica} wrote on a version it should have watched go"
        );
    }
}

/// Bronze's ledger writes that conflicted on one replica (settled by its watch or read again).
async fn conflicts(webhook: &Webhook) -> u64 {
    ledger_writes(webhook, "bronze", "conflict").await
        + ledger_writes(webhook, "bronze", "conflict_read").await
}

/// `gpu_admission_quota_ledger_writes_total` of `tier` and `result` on one replica (0 before the first).
async fn ledger_writes(webhook: &Webhook, tier: &str, result: &str) -> u64 {
    let text = webhook.metrics().await.unwrap();
    let series =
        format!("gpu_admission_quota_ledger_writes_total{{tier=\"{tier}\",result=\"{result}\"}} ");
    (text.lines())
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Deletes Pod `name` with no grace period.
async fn delete_now(pods: &Api<Pod>, name: &str) {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete(name, &now).await.unwrap();
}

/// Creates `pod(attempt)` until one is admitted, within 5 s (else fails with `why`): how long it took from
/// the call, and the attempt that was admitted.
async fn admitted_within_5s(
    pods: &Api<Pod>,
    why: &str,
    pod: impl Fn(usize) -> Pod,
) -> (Duration, usize) {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match pods.create(&PostParams::default(), &pod(attempt)).await {
            Ok(_) => return (started.elapsed(), attempt),
            Err(e) => assert!(started.elapsed() < Duration::from_secs(5), "{why}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes `tier`'s QuotaLedger, wherever the frontends keep it.
fn delete_ledger(cluster: &LocalCluster, tier: &str) {
    let run = |args: &[&str]| {
        let out = gpu_admission_tests::cluster::kubectl(cluster.kubeconfig(), None, &[], args, "");
        assert!(out.ok, "kubectl {args:?}: {}", out.stderr);
        out.stdout
    };
    let listed: Value =
        serde_json::from_str(&run(&["get", "quotaledgers", "-A", "-o", "json"])).unwrap();
    let ledger = (listed["items"].as_array().unwrap().iter())
        .find(|l| l["metadata"]["name"] == tier)
        .unwrap_or_else(|| panic!("no QuotaLedger {tier}"));
    let ns = ledger["metadata"]["namespace"].as_str().unwrap();
    run(&["delete", "quotaledger", tier, "-n", ns]);
}

/// Each tier's reservations went to its own QuotaLedger (named by the tier), which holds no other tier's:
/// a tier's burst is written, and conflicts, in its object only.
fn ledgers_are_per_tier(cluster: &LocalCluster, reserved: &[(&str, &str)]) {
    let listed = gpu_admission_tests::cluster::kubectl(
        cluster.kubeconfig(),
        None,
        &[],
        &["get", "quotaledgers", "-A", "-o", "json"],
        "",
    );
    assert!(listed.ok, "{}", listed.stderr);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let items = listed["items"].as_array().unwrap();
    for (ns, tier) in reserved {
        let ledger = (items.iter())
            .find(|l| l["metadata"]["name"] == *tier)
            .unwrap_or_else(|| panic!("no QuotaLedger {tier} in {items:?}"));
        assert_eq!(ledger["tier"], *tier);
        let entries: Vec<Value> =
            serde_json::from_str(ledger["entries"].as_str().unwrap()).unwrap();
        assert!(
            entries.iter().all(|e| e["tier"] == *tier),
            "{tier}'s ledger holds another tier's entries: {entries:?}"
        );
        assert!(
            entries.iter().any(|e| e["namespace"] == *ns),
            "{tier}'s ledger holds no reservation of {ns}: {entries:?}"
        );
    }
    println!(
        "ledgers: {}",
        (items.iter())
            .map(|l| format!(
                "{} ({} bytes)",
                l["metadata"]["name"],
                l["entries"].as_str().map_or(0, str::len)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// `gpu-admission check --usage` on the usage `quota usage -o yaml` counts from the cluster's listing, against
/// a running frontend: three Pods, one over its namespace's `max`, one borrowing (silver holds one A100 of its
/// `max` 2, `min` 0), one within gold's `min`, through both webhooks as dry runs (nothing reserved). Validation
/// answers byte for byte; the mutation's quota record, and a borrower's PriorityClass, alike.
async fn cli_answers_as_the_webhooks(
    cli: &Path,
    listing: &Path,
    policy_file: &Path,
    webhook: &Webhook,
) {
    use gpu_admission_cli::engine::WebhookPath;
    use gpu_admission_cli::load::{self, Tiers};
    use gpu_admission_cli::review::User;
    use gpu_admission_cli::{Run, RunSettings};

    let dir = listing.parent().unwrap();
    let out = std::process::Command::new(cli)
        .args(["quota", "usage", "-o", "yaml", "-f"])
        .arg(listing)
        .arg("--policy")
        .arg(policy_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = dir.join("usage.yaml");
    std::fs::write(&usage, &out.stdout).unwrap();
    let mut pods = Vec::new();
    for (ns, pod) in [
        (LOAD_NS, gpu_pod("cli-over", 0)),
        (SILVER_NS, a100_pod("cli-borrower", None)),
        (GOLD_NS, a100_pod("cli-owner", Some("gpu-high"))),
    ] {
        let mut v = serde_json::to_value(pod).unwrap();
        v["metadata"]["namespace"] = json!(ns);
        pods.push(v);
    }
    let manifests = dir.join("cli-pods.json");
    std::fs::write(
        &manifests,
        json!({"apiVersion": "v1", "kind": "List", "items": pods}).to_string(),
    )
    .unwrap();
    let tiers = [
        (JOB_NS, "bronze"),
        (LOAD_NS, "bronze"),
        (SILVER_NS, "silver"),
        (GOLD_NS, "gold"),
    ];
    let settings = RunSettings {
        policy: Some(policy_file.to_path_buf()),
        policy_key: None,
        mode: None,
        state: None,
        tiers: Tiers::parse(&tiers.map(|(ns, t)| format!("{ns}={t}"))).unwrap(),
        requester: User::default_requester(),
        no_kube: false,
        default_namespace: "default".into(),
        usage: Some(usage),
    };
    let inputs = load::inputs(&load::files(&[manifests]).unwrap()).unwrap();
    let checked = Run::new(&settings).unwrap().check_inputs(&inputs);
    let mut records = Vec::new();
    let mut denials = Vec::new();
    for ev in &checked.evaluations {
        for exchange in &ev.exchanges {
            let mut review = exchange.review.clone();
            review["request"]["dryRun"] = json!(true);
            let resp = webhook
                .https()
                .post_json(exchange.webhook.route(), &review)
                .await
                .unwrap();
            assert!(resp.status.is_success(), "HTTP {}", resp.status);
            let theirs: Value = resp.json().unwrap();
            let (cli, web) = (&exchange.response["response"], &theirs["response"]);
            match exchange.webhook {
                WebhookPath::ValidatePod => {
                    for field in ["allowed", "status", "warnings"] {
                        assert_eq!(
                            cli[field], web[field],
                            "{}: /validate-pod {field}",
                            ev.object
                        );
                    }
                    if let Some(m) = cli["status"]["message"].as_str() {
                        denials.push(m.to_string());
                    }
                }
                WebhookPath::MutatePod => {
                    let object = &review["request"]["object"];
                    let (mine, theirs) = (patched(object, cli), patched(object, web));
                    let record =
                        |p: &Value| p["metadata"]["annotations"]["gpu-admission.io/quota"].clone();
                    assert_eq!(
                        record(&mine),
                        record(&theirs),
                        "{}: the quota record",
                        ev.object
                    );
                    let r = record(&mine).as_str().unwrap_or_default().to_string();
                    if r.ends_with(": borrowed") {
                        for f in ["priorityClassName", "priority", "preemptionPolicy"] {
                            assert_eq!(mine["spec"][f], theirs["spec"][f], "{}: {f}", ev.object);
                        }
                        assert_eq!(mine["spec"]["priorityClassName"], "gpu-borrowed");
                    }
                    records.push(r);
                }
                // The inputs hold no claim: nothing here is a quota question.
                WebhookPath::MutateClaim => {
                    assert_eq!(cli["patch"], web["patch"], "{}: /mutate-claim", ev.object);
                }
            }
        }
    }
    println!(
        "the CLI and the webhooks on the same usage: records {records:?}, denials {denials:?}"
    );
    assert!(
        records.iter().any(|r| r.ends_with(": borrowed")),
        "{records:?}"
    );
    assert!(
        records.iter().any(|r| r.ends_with(": within-min")),
        "{records:?}"
    );
    assert!(
        denials.iter().any(|d| d.contains("of its 40 L4-24GB GPUs")),
        "{denials:?}"
    );
}

/// `object` with a webhook answer's JSON Patch applied (unchanged without one).
fn patched(object: &Value, response: &Value) -> Value {
    use base64::Engine as _;
    let mut out = object.clone();
    if let Some(b64) = response["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut out, &ops).unwrap();
    }
    out
}
