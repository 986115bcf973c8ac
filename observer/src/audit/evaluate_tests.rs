use super::*;
use std::collections::HashMap;

use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::priority_class::PriorityClassFacts;
use gpu_admission_core::tier_bound::NodeClass;
use serde_json::{Value, json};

const KEY: &str = "gpu.nvidia.com/class";

/// H100-80GB and L4-24GB; bronze: L4-24GB, capped at gpu-default; untiered namespaces outside the rules.
pub(crate) fn policy(mode: EnforcementMode) -> PolicySnapshot {
    let profile =
        "{ priorityWeight: 0.5, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }";
    let text = format!(
        r#"
version: v7
defaultTier: bronze
untieredNamespaces: Ignore
catalog:
  - {{ name: H100-80GB, vendor: nvidia, memoryGiB: 80, relativeThroughput: 1.0, pricePerHour: 1.0 }}
  - {{ name: L4-24GB, vendor: nvidia, memoryGiB: 24, relativeThroughput: 1.0, pricePerHour: 1.0 }}
tiers:
  - {{ name: bronze, allowedClasses: [L4-24GB], preferredClass: L4-24GB, objective: cheapest,
       priorityWeight: 1.0, maxPriorityClass: gpu-default }}
workloadClasses:
  training: {profile}
  inference: {profile}
  batch: {profile}
  interactive: {profile}
  unknown: {profile}
priority:
  tierPoints: 50
  workloadPoints: 30
  sizePoints: 20
  sizeReference: {{ gpuCount: 8, memoryGiB: 80, modelSizeBillionParams: 70 }}
  buckets:
    - {{ minScore: 70, name: gpu-high, value: 100000, preemptionPolicy: PreemptLowerPriority }}
    - {{ minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: PreemptLowerPriority }}
enforcement: {{ mode: {} }}
"#,
        mode.as_str()
    );
    let policy =
        gpu_admission_policy::parse(&text, "test-policy.yaml").expect("the test policy is valid");
    PolicySnapshot::from_policy(std::sync::Arc::new(policy))
}

fn tier_of(ns: &str) -> Option<String> {
    (ns == "team").then(|| "bronze".to_string())
}

fn nodes(name: &str) -> NodeClass {
    match name {
        "l4-1" => NodeClass::Class("L4-24GB".into()),
        _ => NodeClass::Unknown,
    }
}

fn run(object: Value, kind: &Kind, policy: &PolicySnapshot) -> Vec<Finding> {
    run_with(object, kind, policy, &[], None)
}

/// [`run`] with the cluster's exceptions and the owner the audit listed for ReplicaSet `rs-uid` (the object's
/// controller), read at 2026-06-01.
fn run_with(
    object: Value,
    kind: &Kind,
    policy: &PolicySnapshot,
    exceptions: &[Exception],
    rs_controller: Option<Value>,
) -> Vec<Finding> {
    let pcs: HashMap<String, PriorityClassFacts> = HashMap::from([(
        "gpu-high".to_string(),
        PriorityClassFacts {
            name: "gpu-high".into(),
            value: 100_000,
            preemption_policy: None,
            global_default: false,
        },
    )]);
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: Some(&pcs),
        claim_templates: &NoClaimTemplates,
        nodes: &nodes,
        grants: &gpu_admission_core::authority::Grants::none(),
    };
    let owner = |q: &OwnerQuery| {
        (q.uid == "rs-uid").then(|| OwnerFacts::Known {
            controller: rs_controller
                .clone()
                .map(|c| serde_json::from_value(c).unwrap()),
            group_size: None,
        })
    };
    let ex = ExceptionFacts {
        exceptions,
        owner: &owner,
        now: OffsetDateTime::parse("2026-06-01T00:00:00Z", &Rfc3339).unwrap(),
    };
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    evaluate(&object, kind, policy, (&facts, &ex))
}

fn spec(extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

fn pod(ns: &str, name: &str, extra: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": spec(extra)})
}

fn deployment() -> Kind {
    Kind {
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
        plural: "deployments".into(),
    }
}

#[test]
fn a_violating_pod_gets_validate_pods_message_under_every_mode() {
    let h100 = pod("team", "p", json!({"nodeSelector": {KEY: "H100-80GB"}}));
    for (mode, outcome) in [
        (EnforcementMode::Warn, Outcome::Warn),
        (EnforcementMode::Enforce, Outcome::Fail),
        (EnforcementMode::Audit, Outcome::Fail),
    ] {
        let p = policy(mode);
        let found = run(h100.clone(), &Kind::pods(), &p);
        assert_eq!(found.len(), 1, "{mode:?}: {found:?}");
        let f = &found[0];
        assert_eq!(f.outcome, outcome);
        assert_eq!(f.rule, "class_outside_tier");
        // Exactly what /validate-pod answers (its warning in Warn, its denial in Enforce).
        let review: AdmissionRequest<DynamicObject> = serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "team",
            "operation": "CREATE", "userInfo": {"username": "alice"}, "object": h100}))
        .unwrap();
        let facts = Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &nodes,
            grants: &gpu_admission_core::authority::Grants::none(),
        };
        let (_, verdict) = validate_pod::decide(&review, &policy(EnforcementMode::Enforce), &facts);
        assert_eq!(Some(&f.message), verdict.denied.as_ref());
        assert!(
            f.message
                .contains("Pod team/p is outside tier bronze: selects GPU class H100-80GB")
        );
        assert_eq!(f.resource.uid, "uid-p");
        assert_eq!(f.properties["tier"], "bronze");
        assert_eq!(f.properties["policyVersion"], "v7");
        assert_eq!(f.properties["requester"], REQUESTER_NOT_VISIBLE);
    }
}

#[test]
fn one_result_per_violated_rule_each_with_the_whole_message() {
    let p = policy(EnforcementMode::Enforce);
    let found = run(
        pod(
            "team",
            "p",
            json!({"nodeSelector": {KEY: "H100-80GB"}, "priorityClassName": "gpu-high"}),
        ),
        &Kind::pods(),
        &p,
    );
    let rules: Vec<&str> = found.iter().map(|f| f.rule).collect();
    assert_eq!(rules, ["class_outside_tier", "priority_above_cap"]);
    assert_eq!(found[0].message, found[1].message);
    assert!(found[1].message.contains("asks for PriorityClass gpu-high"));
    assert_eq!(
        found[1].properties["violation"],
        "Pod: asks for PriorityClass gpu-high (100000)"
    );
}

#[test]
fn a_workloads_template_is_checked_and_a_compliant_gpu_object_passes() {
    let p = policy(EnforcementMode::Warn);
    let deploy = |class: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "team", "uid": "uid-d"},
            "spec": {"template": {"spec": spec(json!({"nodeSelector": {KEY: class}}))}}})
    };
    let found = run(deploy("H100-80GB"), &deployment(), &p);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].outcome, Outcome::Warn);
    assert!(found[0].message.contains(
        "Deployment team/d is outside tier bronze: spec.template: selects GPU class H100-80GB"
    ));
    assert_eq!(found[0].resource.api_version, "apps/v1");

    let found = run(deploy("L4-24GB"), &deployment(), &p);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].outcome, found[0].rule),
        (Outcome::Pass, RULE_WITHIN_TIER)
    );
    // A Pod bound to its tier (as /mutate-pod leaves it) passes too.
    let bound = run(
        pod("team", "ok", json!({"nodeSelector": {KEY: "L4-24GB"}})),
        &Kind::pods(),
        &p,
    );
    assert_eq!(bound[0].outcome, Outcome::Pass);
}

#[test]
fn objects_not_held_to_a_tier_have_no_results() {
    let p = policy(EnforcementMode::Enforce);
    // No tier label on the namespace.
    assert!(
        run(
            pod(
                "elsewhere",
                "p",
                json!({"nodeSelector": {KEY: "H100-80GB"}})
            ),
            &Kind::pods(),
            &p
        )
        .is_empty()
    );
    // No GPU.
    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": "team"},
        "spec": {"containers": [{"name": "c", "image": "x"}]}});
    assert!(run(cpu, &Kind::pods(), &p).is_empty());
    // The policy not known yet.
    assert!(
        run(
            pod("team", "p", json!({})),
            &Kind::pods(),
            &PolicySnapshot::default()
        )
        .is_empty()
    );
}

#[test]
fn an_unbound_gpu_pod_and_a_node_outside_the_tier_are_violations() {
    let p = policy(EnforcementMode::Enforce);
    let unbound = run(pod("team", "free", json!({})), &Kind::pods(), &p);
    assert_eq!(unbound[0].rule, "not_bound_to_tier");
    let elsewhere = run(
        pod("team", "n", json!({"nodeName": "somewhere"})),
        &Kind::pods(),
        &p,
    );
    assert_eq!(elsewhere[0].rule, "node_outside_tier");
}

/// An exception of `team` letting Deployment `train` use H100, expiring at `expires`.
fn h100_for_train(expires: &str) -> Exception {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
        "metadata": {"name": "train-h100", "namespace": "team"},
        "spec": {"rules": ["Classes"], "classes": ["H100-80GB"],
                 "workloads": [{"kind": "Deployment", "name": "train"}], "expiresAt": expires}}))
    .unwrap();
    Exception::from_object(&object).unwrap()
}

#[test]
fn an_object_a_live_exception_allows_is_skipped_naming_it_and_fails_once_expired() {
    let p = policy(EnforcementMode::Enforce);
    let train = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team", "uid": "uid-d"},
            "spec": {"template": {"spec": spec(json!({"nodeSelector": {KEY: "H100-80GB"}}))}}})
    };
    let live = [h100_for_train("2026-07-01T00:00:00Z")];
    let found = run_with(train("train"), &deployment(), &p, &live, None);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].outcome, found[0].rule),
        (Outcome::Skip, RULE_EXCEPTED)
    );
    assert_eq!(found[0].properties["exception"], "team/train-h100");
    assert_eq!(found[0].properties["expiresAt"], "2026-07-01T00:00:00Z");
    assert!(
        found[0]
            .message
            .contains("allowed by GpuPolicyException team/train-h100")
    );

    // Another Deployment of the namespace is not covered; an expired exception covers nothing.
    let other = run_with(train("serve"), &deployment(), &p, &live, None);
    assert_eq!(other[0].outcome, Outcome::Fail);
    let expired = [h100_for_train("2026-05-01T00:00:00Z")];
    let found = run_with(train("train"), &deployment(), &p, &expired, None);
    assert_eq!(found[0].outcome, Outcome::Fail);
}

#[test]
fn a_pod_is_covered_through_its_replica_sets_deployment_as_the_audit_listed_it() {
    let p = policy(EnforcementMode::Enforce);
    let mut h100 = pod(
        "team",
        "train-abc-1",
        json!({"nodeSelector": {KEY: "H100-80GB"}}),
    );
    h100["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "train-abc", "uid": "rs-uid", "controller": true}]);
    let live = [h100_for_train("2026-07-01T00:00:00Z")];
    let train = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "train",
        "uid": "d-uid", "controller": true});
    let found = run_with(h100.clone(), &Kind::pods(), &p, &live, Some(train));
    assert_eq!(
        (found[0].outcome, found[0].rule),
        (Outcome::Skip, RULE_EXCEPTED)
    );
    // The ReplicaSet's controller unknown (not listed, or another Deployment): reported as failing.
    let found = run_with(h100.clone(), &Kind::pods(), &p, &live, None);
    assert_eq!(found[0].outcome, Outcome::Fail);
    let serve = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve",
        "uid": "d2", "controller": true});
    let found = run_with(h100, &Kind::pods(), &p, &live, Some(serve));
    assert_eq!(found[0].outcome, Outcome::Fail);
}
