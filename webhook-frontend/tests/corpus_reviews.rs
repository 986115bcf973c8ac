//! Every real AdmissionReview of the shared corpus (`../shared/corpus/admissionreviews`, bare requests
//! wrapped) goes through decode → triage → patch → encode without a panic, with the uid echoed; Pod objects
//! are patched as if every namespace were gold, the patch applies and the result is still a Pod.

use std::path::PathBuf;

use base64::Engine;
use gpu_admission_proto::scorer::v1::{GpuClass, PriorityAssignment, ScoreResponse};
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use webhook_frontend::admission::patch::{PatchInput, PriorityClassFacts, build_patch};
use webhook_frontend::admission::review::{self, Answer, Content};
use webhook_frontend::admission::{decide, features};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus/admissionreviews")
}

fn answer() -> ScoreResponse {
    ScoreResponse {
        accepted_classes: vec![GpuClass {
            name: "A100-80GB".into(),
            node_label_key: "gpu.nvidia.com/class".into(),
            node_label_value: "A100-80GB".into(),
            taint_key: "nvidia.com/gpu".into(),
            ..Default::default()
        }],
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
    let dir = corpus_dir();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus folder {} missing: {e}", dir.display()));
    let classes = std::collections::HashMap::from([(
        "gpu-high".to_string(),
        PriorityClassFacts {
            name: "gpu-high".into(),
            value: 7000,
            preemption_policy: None,
            global_default: false,
        },
    )]);
    let (mut files, mut answered, mut pods) = (0, 0, 0);
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        files += 1;
        let raw: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let body = if raw.get("request").is_none() && raw.get("uid").is_some() {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": raw})
        } else {
            raw
        };
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
            let a = answer();
            let input = PatchInput::new(
                pod,
                f.job_type.as_deref(),
                &a,
                &[],
                time::OffsetDateTime::now_utc(),
            );
            ops = build_patch(&input, &classes);
            let mut doc = body["request"]["object"].clone();
            json_patch::patch(&mut doc, &ops).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let patched: Pod =
                serde_json::from_value(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let again = PatchInput {
                pod: &patched,
                ..input
            };
            assert!(
                build_patch(&again, &classes).is_empty(),
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
                patch: ops,
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
            base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        }
    }
    println!(
        "corpus admissionreviews: {files} files, {answered} answered with a review, {pods} Pod objects patched"
    );
    assert!(files >= 10, "expected the corpus reviews, found {files}");
    assert!(answered >= files - 1, "only {answered} of {files} answered");
    assert!(pods >= 3);
}
