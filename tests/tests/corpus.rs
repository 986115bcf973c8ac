//! Corpus tier (no cluster): the real scorer and the real webhook frontend as processes on loopback, the
//! test acting as the kube-apiserver over HTTPS verified against the webhook's CA.
//!
//! - every Pod and pod template of `../shared/corpus/manifests` in a gold namespace, the GPU ones also in
//!   silver, bronze and an unlabelled namespace;
//! - every AdmissionReview of `../shared/corpus/admissionreviews` (bare requests wrapped), as is, and for the
//!   Pod CREATEs also as a GPU variant in the gold namespace;
//! - the expectations of `decision::admit_and_verify` for each (envelope, patch applies, result parses as a
//!   Pod, nothing lost, GPU Pods decided coherently, others untouched, second pass yields no patch).

use gpu_admission_tests::corpus::{admission_reviews, extract_pods, manifest_files};
use gpu_admission_tests::decision::{admit_and_verify, check_preserved};
use gpu_admission_tests::gpu::{add_nvidia_gpu, annotation, gpu_ask};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use gpu_admission_tests::review::{check_response, new_uid};
use gpu_admission_tests::{Scorer, Webhook};
use serde_json::{Value, json};

const GOLD: &str = "team-gold";
const SILVER: &str = "team-silver";
const BRONZE: &str = "team-bronze";
const NO_TIER: &str = "no-tier";

async fn start() -> (Scorer, Webhook) {
    gpu_admission_tests::services::scorer_and_webhook(&[
        (GOLD, "gold"),
        (SILVER, "silver"),
        (BRONZE, "bronze"),
    ])
    .await
    .expect("scorer and webhook start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_manifests_and_admission_reviews() {
    let started = std::time::Instant::now();
    let (scorer, webhook) = start().await;
    let policy = scorer.policy().clone();
    let mut failures: Vec<String> = Vec::new();
    let mut fail = |source: &str, ns: &str, errs: Vec<String>| {
        for e in errs {
            failures.push(format!("{source} in {ns}: {e}"));
        }
    };

    // Manifests.
    let files = manifest_files().expect("the corpus manifests parse");
    let (mut pods, mut gpu_pods, mut mutated, mut classes) =
        (0, 0, 0, std::collections::BTreeMap::new());
    // Pods by GPU-request shape (vendor and kinds of resources, as the test oracle reads them).
    let mut shapes: std::collections::BTreeMap<String, usize> = Default::default();
    for file in &files {
        for p in extract_pods(file) {
            pods += 1;
            let ask = gpu_ask(&p.pod);
            *shapes
                .entry(ask.as_ref().map_or("no GPU".to_string(), |a| {
                    format!("{} {}", a.vendor, a.shape)
                }))
                .or_insert(0) += 1;
            let is_gpu = ask.is_some();
            let mut targets = vec![(GOLD, Some("gold"))];
            if is_gpu {
                gpu_pods += 1;
                targets.extend([
                    (SILVER, Some("silver")),
                    (BRONZE, Some("bronze")),
                    // No tier label: held to the policy's default tier (bronze).
                    (NO_TIER, Some("bronze")),
                ]);
            }
            for (ns, tier) in targets {
                match admit_and_verify(&webhook, &p.pod, ns, tier, &policy).await {
                    Ok(v) => {
                        if let Some(d) = &v.decision {
                            mutated += 1;
                            *classes
                                .entry(format!("{ns}:{}", d.class.as_deref().unwrap_or("-")))
                                .or_insert(0) += 1;
                        }
                        fail(&p.source, ns, v.errors);
                    }
                    Err(e) => fail(&p.source, ns, vec![format!("{e:#}")]),
                }
            }
            // The Pod exactly as written in the file (numbers as quantities, unknown fields): any answer
            // must still obey the apiserver's rules and allow the Pod.
            if p.raw != p.pod {
                match webhook.admit_pod(&p.raw, GOLD).await {
                    Ok(o) if !o.allowed => fail(&p.source, GOLD, vec!["raw form denied".into()]),
                    Ok(_) => {}
                    Err(e) => fail(&p.source, GOLD, vec![format!("raw form: {e:#}")]),
                }
            }
        }
    }

    // AdmissionReviews.
    let reviews = admission_reviews().expect("the corpus reviews parse");
    let mut gpu_variants = 0;
    for r in &reviews {
        match webhook.review(&r.review).await {
            Ok(o) => {
                if !o.allowed {
                    fail(&r.file, "as is", vec![format!("denied: {}", o.raw)]);
                }
                // The reviews' namespaces have no tier label: held to the default tier, so only a Pod
                // CREATE (one asking for GPUs, or naming a PriorityClass beyond the cap) may be patched.
                let req = &r.review["request"];
                let pod_create = req["operation"] == "CREATE"
                    && req
                        .pointer("/kind/kind")
                        .and_then(Value::as_str)
                        .is_some_and(|k| k.eq_ignore_ascii_case("pod"));
                if o.patch.is_some() && !pod_create {
                    fail(
                        &r.file,
                        "as is",
                        vec![format!(
                            "not a Pod CREATE, but patched: {}",
                            o.patch_string()
                        )],
                    );
                }
            }
            Err(e) => fail(&r.file, "as is", vec![format!("{e:#}")]),
        }
        // The same envelope (userInfo, managedFields, options...) for a GPU Pod CREATE in the gold namespace.
        let req = &r.review["request"];
        let is_pod = req
            .pointer("/kind/kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.eq_ignore_ascii_case("pod"));
        if is_pod && req["operation"] == "CREATE" && req["object"].is_object() {
            gpu_variants += 1;
            let mut review = r.review.clone();
            review["request"]["uid"] = json!(new_uid());
            review["request"]["namespace"] = json!(GOLD);
            let obj = &mut review["request"]["object"];
            obj["metadata"]["namespace"] = json!(GOLD);
            add_nvidia_gpu(obj, 1);
            let before = obj.clone();
            // Must be mutated when the envelope is what an apiserver sends (kind exactly core/v1 Pod) and the
            // object is a valid Pod; otherwise (fixtures SOURCES.md lists as not admissible) any allowed
            // answer will do.
            let strict = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(before.clone())
                .is_ok()
                && req["kind"] == json!({"group": "", "version": "v1", "kind": "Pod"});
            match webhook
                .https()
                .post_json("/mutate-pod", &review)
                .await
                .and_then(|resp| {
                    anyhow::ensure!(
                        resp.status == 200,
                        "status {}: {}",
                        resp.status,
                        String::from_utf8_lossy(&resp.body)
                    );
                    check_response(&review, &resp.json()?)
                }) {
                Ok(o) => {
                    let mut errs = Vec::new();
                    if !o.allowed {
                        errs.push("denied".into());
                    }
                    match o.apply(&before) {
                        Ok(after) => {
                            errs.extend(check_preserved(&before, &after));
                            if strict {
                                if o.patch.is_none() || annotation(&after, ANN_DECIDED_AT).is_none()
                                {
                                    errs.push(format!(
                                        "GPU variant not mutated; warnings {:?}",
                                        o.warnings
                                    ));
                                }
                                if let Err(e) =
                                    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(after)
                                {
                                    errs.push(format!("patched object is no Pod: {e}"));
                                }
                            }
                        }
                        Err(e) => errs.push(format!("{e:#}")),
                    }
                    fail(&r.file, "gpu variant", errs);
                }
                Err(e) => fail(&r.file, "gpu variant", vec![format!("{e:#}")]),
            }
        }
    }

    println!(
        "corpus: checked {} manifests files, {pods} pods/templates ({gpu_pods} asking for GPUs, {mutated} \
         mutations checked), {} admission reviews (+{gpu_variants} GPU variants) in {:.1}s",
        files.len(),
        reviews.len(),
        started.elapsed().as_secs_f64()
    );
    println!("corpus: decisions by namespace:class {classes:?}");
    println!("corpus: pods/templates by GPU-request shape");
    println!("  {:<28} {:>5}", "shape", "pods");
    for (shape, n) in &shapes {
        println!("  {shape:<28} {n:>5}");
    }
    assert!(
        !files.is_empty() && pods > 0 && !reviews.is_empty(),
        "empty corpus"
    );
    assert!(gpu_pods > 0 && mutated > 0, "no GPU Pod was mutated");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
