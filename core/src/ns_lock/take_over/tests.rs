use super::*;
use crate::authority::Grants;
use crate::pod::gpu_resources::NoClaimTemplates;
use crate::tier_bound::NoNodes;
use serde_json::{Value, json};
use time::macros::datetime;

const CLASS: &str = "gpu.nvidia.com/class";

fn policy() -> PolicySnapshot {
    PolicySnapshot::from_policy(std::sync::Arc::new(
        gpu_admission_policy::embedded_default().unwrap(),
    ))
}

fn pod(annotations: Value, spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "gpu-team", "annotations": annotations},
           "spec": spec})
}

fn restricted_record(fallback: bool) -> Value {
    let mut a = json!({
        ANN_DECIDED_AT: "2026-11-29T10:00:00Z",
        ANN_DECIDED_BY: "restricted:gpu-team",
        ANN_GPU_CLASS: "L4-24GB",
        ANN_PLACEMENT: "gpu-admission",
        ANN_POLICY_VERSION: "v1",
        "team": "kept",
    });
    if fallback {
        a[ANN_FALLBACK] = json!("tier-default");
    }
    a
}

fn request(object: Value) -> AdmissionRequest<Pod> {
    serde_json::from_value(json!({
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "gpu-team", "operation": "CREATE",
        "userInfo": {"username": "alice"}, "object": object
    }))
    .unwrap()
}

fn held() -> WhoScores {
    WhoScores::Restricted {
        holder: "team-frontend".into(),
        until: datetime!(2026-11-29 10:00:15 UTC),
    }
}

/// What the cluster-wide instance does with `object` when the namespace is labelled `tier`.
fn decide(object: Value, who: &WhoScores, tier: &str) -> Option<TakeOver> {
    let tier = tier.to_string();
    let tier_of = move |_: &str| Some(tier.clone());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    take_over(&request(object), who, &facts, &policy())
}

#[test]
fn a_restricted_decision_stands_only_while_held_answered_and_inside_the_tier() {
    let l4 = json!({"nodeSelector": {CLASS: "L4-24GB"}});
    // Held, answered, inside bronze: left alone.
    assert_eq!(
        decide(pod(restricted_record(false), l4.clone()), &held(), "bronze"),
        None
    );
    // The Lease released (or never held: a record the Pod's author wrote).
    assert_eq!(
        decide(
            pod(restricted_record(false), l4.clone()),
            &WhoScores::Here,
            "bronze"
        ),
        Some(TakeOver::NotHeld)
    );
    // The restricted scorer did not answer.
    assert_eq!(
        decide(pod(restricted_record(true), l4.clone()), &held(), "bronze"),
        Some(TakeOver::FellBack)
    );
    // The namespace moved to platinum after the restricted instance chose L4.
    assert!(matches!(
        decide(
            pod(restricted_record(false), l4.clone()),
            &held(),
            "platinum"
        ),
        Some(TakeOver::OutsideTier(_))
    ));
    // No restricted record: nothing to take over (the cluster-wide rules as before).
    let cluster_record = json!({ANN_DECIDED_AT: "2026-11-29T10:00:00Z"});
    assert_eq!(
        decide(pod(cluster_record, l4.clone()), &WhoScores::Here, "bronze"),
        None
    );
    // `decided-by` without a decision record is no record (the signature step removes it).
    assert_eq!(
        decide(
            pod(json!({ANN_DECIDED_BY: "restricted:gpu-team"}), l4),
            &WhoScores::Here,
            "bronze"
        ),
        None
    );
}

#[test]
fn strip_removes_the_record_and_the_class_constraint_it_names_and_keeps_the_pods_own() {
    let keys = [CLASS];
    let affinity = json!({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]},
                {"key": CLASS, "operator": "In", "values": ["L4-24GB"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": CLASS, "operator": "In", "values": ["L4-24GB"]}]}}]}},
        "nodeSelector": {CLASS: "L4-24GB", "disk": "ssd"}});
    let original = pod(restricted_record(true), affinity);
    let typed: Pod = serde_json::from_value(original.clone()).unwrap();
    let (stripped, ops) = strip(&typed, &keys);
    let mut applied = original.clone();
    json_patch::patch(&mut applied, &ops).unwrap();
    // The operations do what the returned Pod says.
    assert_eq!(serde_json::to_value(&stripped).unwrap(), applied);
    assert_eq!(
        applied["metadata"]["annotations"],
        json!({"team": "kept"}),
        "{applied}"
    );
    assert_eq!(applied["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    let node = &applied["spec"]["affinity"]["nodeAffinity"];
    assert_eq!(
        node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}])
    );
    assert!(node["preferredDuringSchedulingIgnoredDuringExecution"].is_null());

    // The restricted instance built the whole affinity: none is left (an empty term would select nothing).
    let ours = json!({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": CLASS, "operator": "In", "values": ["L4-24GB"]}]}]}}}});
    let original = pod(restricted_record(false), ours);
    let (_, ops) = strip(&serde_json::from_value(original.clone()).unwrap(), &keys);
    let mut applied = original;
    json_patch::patch(&mut applied, &ops).unwrap();
    assert_eq!(applied["spec"]["affinity"]["nodeAffinity"], json!({}));

    // A record whose placement is the Pod's own: only the record goes.
    let mut own = restricted_record(false);
    own[ANN_PLACEMENT] = json!("pod: nodeSelector gpu.nvidia.com/class");
    let original = pod(own, json!({"nodeSelector": {CLASS: "L4-24GB"}}));
    let (_, ops) = strip(&serde_json::from_value(original.clone()).unwrap(), &keys);
    let mut applied = original;
    json_patch::patch(&mut applied, &ops).unwrap();
    assert_eq!(applied["spec"]["nodeSelector"], json!({CLASS: "L4-24GB"}));
    assert_eq!(applied["metadata"]["annotations"], json!({"team": "kept"}));
}
