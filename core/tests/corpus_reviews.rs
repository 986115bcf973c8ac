//! Every AdmissionReview of the project's fixtures (`tests/fixtures/admissionreviews`) and, when present, of
//! the external corpus (`GPU_ADMISSION_CORPUS` or `../shared/corpus`; bare requests wrapped) goes through
//! decode → triage → patch → encode without a panic, with the uid echoed; Pod objects are patched as if
//! every namespace were gold, the patch applies and the result is still a Pod.

use gpu_admission_core::admission::mutate_pod::patch::{PatchInput, build_patch};
use gpu_admission_core::admission::mutate_pod::triage as decide;
use gpu_admission_core::pod::features;
use gpu_admission_core::priority_class::PriorityClassFacts;
use gpu_admission_core::review::{self, Answer, Content};
use gpu_admission_proto::scorer::v1::{GpuClass, PriorityAssignment, ScoreResponse};
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// The shipped policy: its catalog is what the answer's classes are read from.
fn shipped() -> gpu_admission_policy::Policy {
    gpu_admission_policy::parse(
        gpu_admission_policy::DEFAULT_POLICY_YAML,
        "default-policy.yaml",
    )
    .unwrap()
}

fn answer(policy: &gpu_admission_policy::Policy) -> ScoreResponse {
    let a100 = policy
        .classes
        .iter()
        .find(|c| c.name == "A100-80GB")
        .unwrap();
    ScoreResponse {
        accepted_classes: vec![GpuClass::from(a100)],
        priority_score: 80.0,
        priority_class: Some(PriorityAssignment {
            name: "gpu-high".into(),
            value: 7000,
            preemption_policy: String::new(),
        }),
        avoid_job_types: vec!["serve".into()],
        policy_version: "corpus".into(),
        ..Default::default()
    }
}

#[test]
fn every_corpus_review_is_answered_without_panic() {
    let classes = std::collections::HashMap::from([(
        "gpu-high".to_string(),
        PriorityClassFacts {
            name: "gpu-high".into(),
            value: 7000,
            preemption_policy: None,
            global_default: false,
        },
    )]);
    for tier in gpu_admission_testkit::corpus::tiers() {
        let reviews = tier.admission_reviews().expect("the reviews parse");
        let (files, answered, pods) = check_reviews(&reviews, &classes);
        println!(
            "{} admissionreviews: {files} files, {answered} answered with a review, {pods} Pod objects patched",
            tier.name
        );
        assert!(
            files >= 10,
            "expected the {} reviews, found {files}",
            tier.name
        );
        assert!(answered >= files - 1, "only {answered} of {files} answered");
        assert!(pods >= 3);
    }
}

/// Decodes, patches and encodes every review; returns (files, answered, Pod objects patched).
fn check_reviews(
    reviews: &[gpu_admission_testkit::corpus::CorpusReview],
    classes: &std::collections::HashMap<String, PriorityClassFacts>,
) -> (usize, usize, usize) {
    let policy = shipped();
    let (mut files, mut answered, mut pods) = (0, 0, 0);
    for r in reviews {
        files += 1;
        let path = std::path::Path::new(&r.file);
        let body = r.review.clone();
        let bytes = serde_json::to_vec(&body).unwrap();
        let Ok(incoming) = review::decode(&bytes) else {
            continue;
        };
        answered += 1;
        let mut ops: Vec<PatchOperation> = Vec::new();
        if let Content::Pod(req) = &incoming.content
            && let Some(pod) = &req.object
        {
            pods += 1;
            // Force scoring regardless of operation / GPU: every Pod object must take a patch cleanly.
            let f = features::extract(pod);
            let a = answer(&policy);
            let input = PatchInput::new(
                pod,
                f.job_type.as_deref(),
                &a,
                &policy.classes,
                time::OffsetDateTime::now_utc(),
            );
            ops = build_patch(&input, classes);
            let mut doc = body["request"]["object"].clone();
            json_patch::patch(&mut doc, &ops).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let patched: Pod =
                serde_json::from_value(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let again = PatchInput {
                pod: &patched,
                ..input
            };
            assert!(
                build_patch(&again, classes).is_empty(),
                "{}",
                path.display()
            );
            // And the real triage never panics either.
            let _ = decide::triage(req, |_| Some("gold".to_string()));
        }
        let out: Value = serde_json::from_slice(&review::encode(
            incoming.api_version,
            &incoming.uid,
            &Answer {
                patch: review::Patch::from_operations(&ops),
                warnings: vec![],
            },
        ))
        .unwrap();
        assert_eq!(
            out["response"]["uid"].as_str(),
            Some(incoming.uid.as_str()),
            "{}",
            path.display()
        );
        assert_eq!(out["response"]["allowed"], true);
        if let Some(p) = out["response"]["patch"].as_str() {
            base64_simd::STANDARD.decode_to_vec(p).unwrap();
        }
    }
    (files, answered, pods)
}
