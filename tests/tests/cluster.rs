//! Real-cluster tier: a real kube-apiserver + etcd on loopback calls the real webhook frontend
//! (registered by URL with its CA bundle), which calls the real scorer. Pods are created through the API
//! and the STORED Pods are read back. Then the scorer is hung (SIGSTOP), killed, and replaced by one
//! answering nonsense or garbage bytes: every Pod is still created, unchanged.
//!
//! Builds the control plane with `tests/cluster/build.sh` (cached; cold ≈ 17 min). Without the
//! means to build it: a SKIP, or a failure when env `CI` is set. The Pods of the fixtures and of the external
//! corpus (when present) are created too.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::corpus::{extract_pods, manifest_files};
use gpu_admission_tests::decision::{check_decision, check_preserved};
use gpu_admission_tests::faults::{FaultProxy, Nonsense, NonsenseScorer, ProxyMode};
use gpu_admission_tests::gpu::{annotation, gpu_ask, label, pinned_classes, tolerations};
use gpu_admission_tests::names::*;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const GOLD: &str = "e2e-gold";
const SILVER: &str = "e2e-silver";
const BRONZE: &str = "e2e-bronze";
const PLAIN: &str = "e2e-plain";
const MWC: &str = "gpu-admission-e2e";

fn gpu_pod(name: &str, annotations: Value, gpus: u32, spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string(), "memory": "32Gi"}}}]}
    });
    if let Some(extra) = spec.as_object() {
        for (k, v) in extra {
            pod["spec"][k] = v.clone();
        }
    }
    pod
}

/// Creates `pod` in `ns` through the API and returns the STORED Pod (GET after create) and the time the
/// create call took.
async fn create(client: &kube::Client, ns: &str, pod: &Value) -> anyhow::Result<(Value, Duration)> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let typed: Pod = serde_json::from_value(pod.clone())?;
    let started = Instant::now();
    let created = api.create(&PostParams::default(), &typed).await?;
    let took = started.elapsed();
    let name = created.metadata.name.clone().unwrap_or_default();
    let stored = api.get(&name).await?;
    Ok((serde_json::to_value(stored)?, took))
}

/// The stored Pod carries no trace of the webhook: no annotation or label of ours, no PriorityClass, no
/// class pin or GPU toleration beyond what was submitted.
fn unchanged_errors(submitted: &Value, stored: &Value) -> Vec<String> {
    let mut errs = check_preserved(submitted, stored);
    for (what, ptr) in [
        ("annotation", "/metadata/annotations"),
        ("label", "/metadata/labels"),
    ] {
        if let Some(m) = stored.pointer(ptr).and_then(Value::as_object) {
            for k in m.keys().filter(|k| k.starts_with("gpu-admission.io/")) {
                if submitted.pointer(ptr).and_then(|s| s.get(k)).is_none() {
                    errs.push(format!("{what} {k} added"));
                }
            }
        }
    }
    if submitted.pointer("/spec/priorityClassName").is_none()
        && stored.pointer("/spec/priorityClassName").is_some()
    {
        errs.push(format!(
            "priorityClassName {} added",
            stored["spec"]["priorityClassName"]
        ));
    }
    if pinned_classes(stored, CLASS_LABEL) != pinned_classes(submitted, CLASS_LABEL) {
        errs.push(format!(
            "class pinned: {:?}",
            pinned_classes(stored, CLASS_LABEL)
        ));
    }
    let gpu_tols = |p: &Value| {
        tolerations(p)
            .into_iter()
            .filter(|t| {
                t.get("key")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.contains("gpu"))
            })
            .count()
    };
    if gpu_tols(stored) != gpu_tols(submitted) {
        errs.push("a GPU toleration was added".into());
    }
    if submitted.pointer("/spec/affinity") != stored.pointer("/spec/affinity") {
        errs.push(format!(
            "affinity changed: {:?}",
            stored.pointer("/spec/affinity")
        ));
    }
    errs
}

/// What the scorer's failure leaves on a gold Pod: the user's fields kept, the tier's default placement (a
/// required constraint to exactly the gold classes, the fallback annotation), and nothing the scorer would
/// have decided (no PriorityClass, no score).
fn fallback_errors(submitted: &Value, stored: &Value) -> Vec<String> {
    let mut errs = check_preserved(submitted, stored);
    if annotation(stored, "gpu-admission.io/fallback") != Some("tier-default") {
        errs.push("no fallback annotation".into());
    }
    if annotation(stored, "gpu-admission.io/priority-score").is_some() {
        errs.push("a priority score without a scorer".into());
    }
    if submitted.pointer("/spec/priorityClassName").is_none()
        && stored.pointer("/spec/priorityClassName").is_some()
    {
        errs.push(format!(
            "priorityClassName {} added",
            stored["spec"]["priorityClassName"]
        ));
    }
    let gold = [
        "H100-80GB",
        "MI300X-192GB",
        "A100-80GB",
        "A100-40GB",
        "L40S-48GB",
        "L4-24GB",
    ];
    if pinned_classes(stored, CLASS_LABEL) != gold {
        errs.push(format!(
            "not bound to the gold classes: {:?}",
            pinned_classes(stored, CLASS_LABEL)
        ));
    }
    errs
}

/// Creates GPU probe Pods in the gold namespace until one is stored with our decision (the apiserver picks a
/// new MutatingWebhookConfiguration up asynchronously) or `timeout` passes.
async fn wait_until_mutating(client: &kube::Client, tag: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut i = 0;
    while Instant::now() < deadline {
        i += 1;
        let pod = gpu_pod(&format!("probe-{tag}-{i}"), json!({}), 1, json!({}));
        if let Ok((stored, _)) = create(client, GOLD, &pod).await
            && annotation(&stored, ANN_DECIDED_AT).is_some()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    false
}

/// Creates `n` GPU Pods (with an existing toleration and anti-affinity) in gold and requires each to be
/// stored with the tier's fallback placement (see [`fallback_errors`]), in time.
async fn assert_created_with_fallback(
    client: &kube::Client,
    fault: &str,
    n: usize,
    failures: &mut Vec<String>,
) {
    for i in 0..n {
        let pod = gpu_pod(
            &format!(
                "{}-{i}",
                fault
                    .replace([' ', '(', ')'], "-")
                    .trim_matches('-')
                    .to_lowercase()
            ),
            json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "70"}),
            8,
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                   "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50,
                       "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}}]}}}),
        );
        match create(client, GOLD, &pod).await {
            Ok((stored, took)) => {
                println!("cluster: {fault}: Pod {i} created in {took:?}");
                for e in fallback_errors(&pod, &stored) {
                    failures.push(format!("{fault}: Pod {i}: {e}"));
                }
                if took > Duration::from_secs(4) {
                    failures.push(format!(
                        "{fault}: Pod {i} took {took:?} to create (timeoutSeconds is 5)"
                    ));
                }
            }
            Err(e) => failures.push(format!("{fault}: Pod {i} NOT created: {e:#}")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_apiserver_admission_and_faults() {
    // The manifests first: a missing external corpus fails (CI) or is reported before an apiserver starts.
    let manifests = manifest_files().expect("the fixtures and the corpus parse");
    let t0 = Instant::now();
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return; // SKIP printed (not in CI)
    };
    println!(
        "cluster: apiserver ready in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let client = cluster.client();
    let mut scorer = Scorer::builder().start().await.expect("scorer starts");
    let policy = scorer.policy().clone();

    for (ns, tier) in [
        (GOLD, Some("gold")),
        (SILVER, Some("silver")),
        (BRONZE, Some("bronze")),
        (PLAIN, None),
    ] {
        cluster.create_namespace(ns, tier).await.expect("namespace");
    }
    let pcs = cluster
        .create_priority_classes(&policy)
        .await
        .expect("priority classes");
    assert!(!pcs.is_empty(), "the policy has no priority buckets");

    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .start() // waits for /readyz: namespace and PriorityClass caches synced
        .await
        .expect("webhook starts with kube and becomes ready");
    cluster
        .register_webhook(MWC, &webhook.mutate_url(), &webhook.ca_pem().unwrap())
        .await
        .expect("register the webhook");
    assert!(
        wait_until_mutating(&client, "initial", Duration::from_secs(30)).await,
        "the apiserver never stored a mutated Pod\nwebhook log:\n{}\napiserver log:\n{}",
        webhook.process.log_tail(30),
        cluster.apiserver_log_tail(30)
    );
    println!(
        "cluster: webhook registered and mutating after {:.1}s",
        t0.elapsed().as_secs_f64()
    );

    let mut failures: Vec<String> = Vec::new();

    // 1. Decisions, as stored by the apiserver.
    let llama = gpu_pod(
        "train-llama-70b",
        json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "70", "ml.batch_size": "16"}),
        8,
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}),
    );
    let (stored, took) = create(&client, GOLD, &llama)
        .await
        .expect("gold train-llama created");
    let (d, errs) = check_decision(&llama, &stored, "gold", &policy);
    failures.extend(errs.into_iter().map(|e| format!("gold train-llama: {e}")));
    failures.extend(
        check_preserved(&llama, &stored)
            .into_iter()
            .map(|e| format!("gold train-llama: {e}")),
    );
    // Pinned by nodeSelector, or first among the required node affinity's `In` values.
    if pinned_classes(&stored, CLASS_LABEL)
        .first()
        .map(String::as_str)
        != Some("H100-80GB")
        || d.class.as_deref() != Some("H100-80GB")
    {
        failures.push(format!(
            "gold train-llama: stored nodeSelector {:?} / node affinity {:?}, want {CLASS_LABEL}=H100-80GB",
            stored.pointer("/spec/nodeSelector"),
            stored.pointer("/spec/affinity/nodeAffinity")
        ));
    }
    let buckets = &policy.policy.as_ref().expect("a policy").priority.buckets;
    let pc_value = |name: &str| {
        (buckets.iter())
            .find(|b| b.name == name)
            .map(|b| b.value as i64)
    };
    match d.priority_class.as_deref() {
        Some(name) if stored["spec"]["priority"].as_i64() == pc_value(name) => {}
        other => failures.push(format!(
            "gold train-llama: stored priorityClassName {other:?} / priority {}",
            stored["spec"]["priority"]
        )),
    }
    if !tolerations(&stored).iter().any(|t| t["key"] == "dedicated")
        || !tolerations(&stored)
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu")
    {
        failures.push(format!(
            "gold train-llama: stored tolerations {:?}",
            tolerations(&stored)
        ));
    }
    if label(&stored, JOB_TYPE_LABEL) != Some("train-llama") {
        failures.push(format!(
            "gold train-llama: label {JOB_TYPE_LABEL} = {:?}",
            label(&stored, JOB_TYPE_LABEL)
        ));
    }
    println!(
        "cluster: gold train-llama stored: class {:?}, {:?} (priority {}), score {:?}, created in {took:?}",
        d.class, d.priority_class, stored["spec"]["priority"], d.priority_score
    );

    let inference = gpu_pod(
        "inference-16g",
        json!({"app.kubernetes.io/job-type": "inference-llm", "gpu.mem.gi": "16"}),
        1,
        json!({}),
    );
    let (stored, _) = create(&client, BRONZE, &inference)
        .await
        .expect("bronze inference created");
    let (d, errs) = check_decision(&inference, &stored, "bronze", &policy);
    failures.extend(errs.into_iter().map(|e| format!("bronze inference: {e}")));
    if d.class.as_deref() != Some("L4-24GB") {
        failures.push(format!(
            "bronze inference 16 GiB: class {:?}, want L4-24GB",
            d.class
        ));
    }

    let (stored, _) = create(&client, BRONZE, &{
        let mut p = llama.clone();
        p["metadata"]["name"] = json!("bronze-llama");
        p
    })
    .await
    .expect("bronze train-llama created");
    let (d, errs) = check_decision(&llama, &stored, "bronze", &policy);
    failures.extend(errs.into_iter().map(|e| format!("bronze train-llama: {e}")));
    if d.infeasible_reason.is_none() || d.class.is_some() {
        failures.push(format!(
            "bronze train-llama 70 GiB: want infeasible, got {d:?}"
        ));
    }

    let pinned = gpu_pod(
        "pinned",
        json!({}),
        1,
        json!({"nodeSelector": {CLASS_LABEL: "A100-40GB"}}),
    );
    let (stored, _) = create(&client, SILVER, &pinned)
        .await
        .expect("pinned created");
    let (_, errs) = check_decision(&pinned, &stored, "silver", &policy);
    failures.extend(errs.into_iter().map(|e| format!("silver pinned: {e}")));
    failures.extend(
        check_preserved(&pinned, &stored)
            .into_iter()
            .map(|e| format!("silver pinned: {e}")),
    );

    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-only"},
                     "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}});
    let (stored, _) = create(&client, GOLD, &cpu).await.expect("cpu pod created");
    failures.extend(
        unchanged_errors(&cpu, &stored)
            .into_iter()
            .map(|e| format!("gold CPU Pod: {e}")),
    );
    if annotation(&stored, ANN_DECIDED_AT).is_some() {
        failures.push("gold CPU Pod was decided".into());
    }
    let plain = gpu_pod("plain-gpu", json!({}), 1, json!({}));
    let (stored, _) = create(&client, PLAIN, &plain)
        .await
        .expect("plain gpu pod created");
    failures.extend(
        unchanged_errors(&plain, &stored)
            .into_iter()
            .map(|e| format!("unlabelled namespace: {e}")),
    );

    // 1b. The caches are watches: a tier namespace created now is known without a restart, and a
    //     PriorityClass deleted now is no longer assigned (a priorityClassName naming a missing class
    //     would make the apiserver reject the Pod).
    cluster
        .create_namespace("e2e-late-silver", Some("silver"))
        .await
        .expect("late namespace");
    let late = gpu_pod(
        "late",
        json!({"app.kubernetes.io/job-type": "train-bert"}),
        1,
        json!({}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut late_decided = None;
    for i in 0.. {
        let mut p = late.clone();
        p["metadata"]["name"] = json!(format!("late-{i}"));
        let (stored, _) = create(&client, "e2e-late-silver", &p)
            .await
            .expect("late pod created");
        if annotation(&stored, ANN_DECIDED_AT).is_some() || Instant::now() > deadline {
            late_decided = Some((p, stored));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match late_decided {
        Some((p, stored)) if annotation(&stored, ANN_DECIDED_AT).is_some() => {
            let (_, errs) = check_decision(&p, &stored, "silver", &policy);
            failures.extend(errs.into_iter().map(|e| format!("late namespace: {e}")));
        }
        _ => failures
            .push("a tier namespace created after start was never decided for (10 s)".into()),
    }

    // bronze train-llama scores into a bucket (gpu-medium with the default policy); delete that class.
    let bronze_pc = {
        let (stored, _) = create(&client, BRONZE, &{
            let mut p = llama.clone();
            p["metadata"]["name"] = json!("bronze-llama-2");
            p
        })
        .await
        .expect("bronze train-llama created");
        stored["spec"]["priorityClassName"]
            .as_str()
            .map(str::to_string)
    };
    if let Some(pc) = bronze_pc {
        let api = Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone());
        api.delete(&pc, &Default::default())
            .await
            .expect("delete a PriorityClass");
        tokio::time::sleep(Duration::from_secs(2)).await; // the watch delivers the deletion
        let mut p = llama.clone();
        p["metadata"]["name"] = json!("bronze-llama-no-pc");
        match create(&client, BRONZE, &p).await {
            Ok((stored, _)) => {
                if annotation(&stored, ANN_DECIDED_AT).is_none() {
                    failures.push(format!(
                        "PriorityClass {pc} deleted: the Pod was not decided"
                    ));
                }
                if stored.pointer("/spec/priorityClassName").is_some() {
                    failures.push(format!(
                        "PriorityClass {pc} deleted: still assigned {}",
                        stored["spec"]["priorityClassName"]
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "PriorityClass {pc} deleted: the Pod was REJECTED: {e:#}"
            )),
        }
        // Put it back for what follows.
        cluster
            .create_buckets(
                &(buckets.iter())
                    .filter(|b| b.name == pc)
                    .cloned()
                    .collect::<Vec<_>>(),
            )
            .await
            .expect("re-create the PriorityClass");
    } else {
        failures.push("bronze train-llama got no priorityClassName".into());
    }

    // 2. Every corpus GPU Pod/template that the apiserver accepts, in gold.
    let (mut corpus_ok, mut corpus_rejected) = (0, BTreeMap::new());
    for file in &manifests {
        for p in extract_pods(file)
            .into_iter()
            .filter(|p| p.parses && gpu_ask(&p.pod).is_some())
        {
            let mut pod = p.pod.clone();
            if let Some(m) = pod["metadata"].as_object_mut() {
                m.insert(
                    "name".into(),
                    json!(format!("corpus-{}", corpus_ok + corpus_rejected.len())),
                );
                m.remove("generateName");
                m.remove("namespace");
                m.remove("ownerReferences"); // owners that do not exist here
                m.remove("resourceVersion");
                m.remove("uid");
            }
            // First in the unlabelled namespace (the webhook is not called there): what the apiserver itself
            // accepts and stores (it drops fields it does not know and adds defaults). The gold copy must be
            // accepted too and differ only by the webhook's decision.
            let baseline = match create(&client, PLAIN, &pod).await {
                Ok((stored, _)) => stored,
                Err(e) => {
                    let msg = match e.downcast_ref::<kube::Error>() {
                        Some(kube::Error::Api(s)) => s.message.clone(),
                        _ => format!("{e:#}"),
                    };
                    corpus_rejected.insert(p.source.clone(), msg);
                    continue;
                }
            };
            match create(&client, GOLD, &pod).await {
                Ok((stored, _)) => {
                    corpus_ok += 1;
                    let (_, errs) = check_decision(&baseline, &stored, "gold", &policy);
                    let errs: Vec<_> = errs
                        .into_iter()
                        .chain(check_preserved(&baseline, &stored))
                        .collect();
                    failures.extend(
                        errs.into_iter()
                            .map(|e| format!("corpus {}: {e}", p.source)),
                    );
                    if annotation(&stored, ANN_DECIDED_AT).is_none() {
                        failures.push(format!("corpus {}: stored without a decision", p.source));
                    }
                }
                Err(e) => failures.push(format!(
                    "corpus {}: rejected only with the webhook: {e:#}",
                    p.source
                )),
            }
        }
    }
    println!(
        "cluster: {corpus_ok} corpus GPU Pods stored with a decision; rejected by the apiserver itself: {corpus_rejected:?}"
    );
    assert!(corpus_ok > 0, "no corpus GPU Pod could be created");

    // 3. Faults: hung, killed. The webhook stays registered; its scorer is gone.
    scorer.process.pause().unwrap();
    assert_created_with_fallback(&client, "scorer hung (SIGSTOP)", 3, &mut failures).await;
    scorer.process.resume().unwrap();
    if !wait_until_mutating(&client, "resumed", Duration::from_secs(20)).await {
        failures.push("decisions did not resume after SIGCONT".into());
    }
    scorer.process.kill();
    assert_created_with_fallback(&client, "scorer killed", 3, &mut failures).await;

    // 4. Nonsense and garbage: a second webhook talks through a fault proxy to a gRPC server answering
    //    nonsense; the registration is replaced to point at it.
    let fake = NonsenseScorer::start(Nonsense::UnknownClass, scorer.policy_response().clone())
        .await
        .unwrap();
    let proxy = FaultProxy::start(fake.addr()).await.unwrap();
    let webhook2 = Webhook::builder(&proxy.url())
        .kubeconfig(cluster.kubeconfig())
        .name("webhook-frontend-2")
        .start()
        .await
        .expect("second webhook");
    // `start` waited for the policy: steady state (corpus_faults tests the start-up window).
    cluster
        .register_webhook(MWC, &webhook2.mutate_url(), &webhook2.ca_pem().unwrap())
        .await
        .expect("re-register");
    // Wait until the apiserver calls the new webhook (it then calls the nonsense scorer).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    while fake.score_calls() == 0 && Instant::now() < deadline {
        i += 1;
        let _ = create(
            &client,
            GOLD,
            &gpu_pod(&format!("probe-switch-{i}"), json!({}), 1, json!({})),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        fake.score_calls() > 0,
        "the apiserver never called the second webhook\n{}",
        webhook2.process.log_tail(30)
    );
    assert_created_with_fallback(&client, "scorer answers nonsense", 3, &mut failures).await;
    proxy.set_mode(ProxyMode::Garbage);
    assert_created_with_fallback(&client, "scorer answers garbage bytes", 3, &mut failures).await;
    proxy.set_mode(ProxyMode::Hang);
    assert_created_with_fallback(&client, "scorer connection hangs", 2, &mut failures).await;

    println!("cluster: whole tier in {:.1}s", t0.elapsed().as_secs_f64());
    if !failures.is_empty() {
        eprintln!("{}", webhook.process.log_tail(20));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
