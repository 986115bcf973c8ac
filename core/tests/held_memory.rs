//! What [`HeldPods`] keeps per GPU Pod, as the resident memory this process (the one test of its binary)
//! gains while it takes them in: the corpus's captured
//! GKE Pod as the apiserver stores it, given one `nvidia.com/gpu` limit, a Node, and every fourth one a class
//! `nodeSelector`, spread over 1,000 namespaces of a quota'd tier, taken in through the watch's projection
//! and counted. The numbers are in docs/measurements/2026-11-30-frontend-envelope.md.
//!
//! `cargo test -p gpu-admission-core --test held_memory -- --nocapture` prints them.

use std::sync::Arc;

use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::held::{FactsCounter, HeldPods};
use gpu_admission_core::quota::watched::WatchedPod;
use gpu_admission_core::tier_bound::NoNodes;
use serde_json::{Value, json};

/// `VmRSS` of this process, in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .unwrap_or(0)
        * 1024
}

const PODS: usize = 20_000;

/// The corpus's GKE Pod as stored: a GPU limit, a Node, name and uid and namespace per `i`.
fn stored_pod(template: &Value, i: usize) -> String {
    let mut p = template.clone();
    p["metadata"]["name"] = json!(format!("train-{i}-7c9f8d6b5-x2k4q"));
    p["metadata"]["uid"] = json!(format!("6f1c2d3e-0000-4000-8000-{i:012}"));
    p["metadata"]["namespace"] = json!(format!("team-{:04}", i % 1000));
    p["metadata"]["resourceVersion"] = json!(format!("{}", 1000 + i));
    p["spec"]["nodeName"] = json!(format!("kwok-node-{}", i % 5000));
    p["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m", "memory": "1Gi"}});
    if i.is_multiple_of(4) {
        p["spec"]["nodeSelector"] = json!({"gpu.nvidia.com/class": "L4-24GB"});
    }
    p.to_string()
}

#[test]
fn a_held_gpu_pod_costs_what_counting_needs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/corpus/admissionreviews/kube-rs-kube__admission.rs_WEBHOOK_BODY.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("skipped: no corpus at {path}");
        return;
    };
    let review: Value = serde_json::from_str(&text).unwrap();
    let template = review["request"]["object"].clone();
    let quotas =
        "\nquotas:\n  tiers:\n    - tier: bronze\n      classes: { L4-24GB: { max: 100000 } }\n";
    let text = format!("{}{quotas}", gpu_admission_policy::DEFAULT_POLICY_YAML);
    let policy = gpu_admission_policy::parse(&text, "p.yaml").unwrap();
    let snapshot = Arc::new(PolicySnapshot::from_policy(Arc::new(policy)));
    let tier_of = |_: &str| Some("bronze".to_string());
    let grants = gpu_admission_core::authority::Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let cx = FactsCounter {
        snapshot: &snapshot,
        facts: &facts,
    };
    let mut held = HeldPods::default();
    held.refresh(&cx, 0);
    let before = resident();
    for i in 0..PODS {
        let json = stored_pod(&template, i);
        let watched: WatchedPod = serde_json::from_str(&json).unwrap();
        let uid = watched.metadata.uid.clone().unwrap();
        assert!(held.set(&uid, Some(watched), &cx, 0));
    }
    let per_pod = resident().saturating_sub(before) / PODS;
    let mib_at_50k = per_pod as f64 * 50_000.0 / (1024.0 * 1024.0);
    println!("held GPU Pod: {per_pod} B resident; {mib_at_50k:.1} MiB at 50,000");
    let namespaces = &held.usage().namespaces;
    assert_eq!(namespaces.len(), 1000);
    assert_eq!(
        namespaces.values().map(|n| n.total).sum::<u64>(),
        1000 * PODS as u64
    );
    // 8,312 B when a slimmed typed Pod was kept; 1,411 B when this was written.
    assert!(per_pod < 4_000, "{per_pod} B per held Pod");
}
