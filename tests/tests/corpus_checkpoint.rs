//! Corpus tier for `/mutate-pod-checkpoint` (no cluster): the real frontend with `--no-kube`, the test acting as
//! the kube-apiserver over HTTPS.
//!
//! - every corpus Pod and pod template, made a Job's Pod (controller owner reference, `job-name` label), goes
//!   through `/mutate-pod` and `/mutate-pod-checkpoint` in both orders, each webhook seeing the Pod as the
//!   previous one left it: every answer follows the apiserver's rules, every result is a valid Pod that lost
//!   nothing, and without Kubernetes (no CheckpointBackups to read) the checkpoint webhook never patches;
//! - every AdmissionReview of the corpus (other kinds, v1beta1, odd shapes) is answered by
//!   `/mutate-pod-checkpoint` by the same rules, allowed.
//!
//! Restores themselves, over the same corpus and through both webhooks, are shown against a real apiserver
//! with real CheckpointBackups in `cluster_checkpoint.rs`.

use gpu_admission_tests::corpus::{admission_reviews, extract_pods, manifest_files};
use gpu_admission_tests::decision::check_preserved;
use gpu_admission_tests::review::{AdmissionOutcome, check_response, pod_review};
use gpu_admission_tests::{Operation, Scorer, Webhook};
use serde_json::{Value, json};

const GOLD: &str = "team-gold";
const ROUTE: &str = "/mutate-pod-checkpoint";

async fn checkpoint_review(webhook: &Webhook, review: &Value) -> anyhow::Result<AdmissionOutcome> {
    let resp = webhook.https().post_json(ROUTE, review).await?;
    anyhow::ensure!(
        resp.status == http::StatusCode::OK,
        "{ROUTE} answered {}: {}",
        resp.status,
        String::from_utf8_lossy(&resp.body)
    );
    check_response(review, &resp.json()?)
}

/// The corpus Pod as the job controller would create it for Job `corpus`.
fn as_job_pod(pod: &Value) -> Value {
    let mut pod = pod.clone();
    let m = pod["metadata"].as_object_mut().unwrap();
    m.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "corpus",
                "uid": "5c4e2f9e-0000-4000-8000-000000000001", "controller": true}]),
    );
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels["job-name"] = json!("corpus");
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_both_webhooks_in_either_order() {
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier(GOLD, "gold")
        .start()
        .await
        .expect("webhook starts");
    let mut failures: Vec<String> = Vec::new();

    let (mut pods, mut mutated) = (0, 0);
    for file in manifest_files().expect("corpus") {
        for p in extract_pods(&file).into_iter().filter(|p| p.parses) {
            pods += 1;
            let pod = as_job_pod(&p.pod);
            let mut finals = Vec::new();
            for order in [["mutate-pod", "checkpoint"], ["checkpoint", "mutate-pod"]] {
                let mut current = pod.clone();
                for step in order {
                    let review = pod_review(&current, GOLD, Operation::Create);
                    let outcome = if step == "checkpoint" {
                        checkpoint_review(&webhook, &review).await
                    } else {
                        webhook.review(&review).await
                    };
                    let result = outcome.and_then(|o| {
                        anyhow::ensure!(o.allowed, "not allowed");
                        if step == "checkpoint" {
                            anyhow::ensure!(
                                o.patch.is_none(),
                                "patched without Kubernetes: {}",
                                o.patch_string()
                            );
                        }
                        o.apply_pod(&current).map(|(doc, _)| doc)
                    });
                    match result {
                        Ok(doc) => current = doc,
                        Err(e) => failures.push(format!("{} ({order:?}, {step}): {e:#}", p.source)),
                    }
                }
                finals.push(current);
            }
            for f in &finals {
                failures.extend(
                    check_preserved(&pod, f)
                        .into_iter()
                        .map(|e| format!("{}: {e}", p.source)),
                );
            }
            if finals[0] != pod {
                mutated += 1;
            }
        }
    }
    println!(
        "corpus: {pods} Pods as Jobs' Pods through both webhooks in both orders ({mutated} decided by /mutate-pod)"
    );
    assert!(pods > 0);

    let reviews = admission_reviews().expect("corpus reviews");
    for r in &reviews {
        match checkpoint_review(&webhook, &r.review).await {
            Ok(o) if o.allowed && o.patch.is_none() => {}
            Ok(o) => failures.push(format!(
                "{}: allowed {} patch {}",
                r.file,
                o.allowed,
                o.patch_string()
            )),
            Err(e) => failures.push(format!("{}: {e:#}", r.file)),
        }
    }
    println!(
        "corpus: {} AdmissionReviews answered by {ROUTE}",
        reviews.len()
    );
    let metrics = webhook.metrics().await.unwrap();
    assert!(
        metrics.lines().any(|l| l
            .starts_with("gpu_admission_admissions_total{webhook=\"mutate-pod-checkpoint\",")
            && l.contains("outcome=\"skipped\"}")),
        "{metrics}"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
