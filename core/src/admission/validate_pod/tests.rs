//! `/validate-pod`'s decision, case by case.
use super::*;
use serde_json::{Value, json};
use std::collections::HashMap;

use crate::authority::{Grants, Permission};

use crate::pod::gpu_resources::NoClaimTemplates;
use crate::priority_class::PriorityClassFacts;
use crate::tier_bound::NodeClass;

const KEY: &str = "gpu.nvidia.com/class";

/// The group RBAC binds to `exempt tiers/bronze` in these tests (see [`check_with`]).
const EXEMPT_GROUP: &str = "gpu-admission:admins";

fn class(name: &str, memory: u32, vendor: &str) -> String {
    format!(
        "{{ name: {name}, vendor: {vendor}, memoryGiB: {memory}, relativeThroughput: 1.0, pricePerHour: 1.0, \
         nodeLabelKey: {KEY}, nodeLabelValue: {name} }}"
    )
}

/// H100-80GB and L4-24GB; one tier, bronze: L4-24GB, capped at gpu-default; `research` granted H100-80GB;
/// untiered namespaces answered as `untiered` says; `extra_class` (an AMD MI210-64GB) in the catalog and in
/// bronze instead of L4-24GB.
fn snapshot(mode: EnforcementMode, untiered: &str, extra_class: bool) -> PolicySnapshot {
    let mut catalog = vec![
        class("H100-80GB", 80, "nvidia"),
        class("L4-24GB", 24, "nvidia"),
    ];
    let allowed = if extra_class {
        catalog.push(class("MI210-64GB", 64, "amd"));
        "[H100-80GB, MI210-64GB]"
    } else {
        "[L4-24GB]"
    };
    let catalog: Vec<&str> = catalog.iter().map(String::as_str).collect();
    let bronze = format!(
        "{{ name: bronze, allowedClasses: {allowed}, preferredClass: {}, objective: cheapest, \
         priorityWeight: 1.0, maxPriorityClass: gpu-default }}",
        if extra_class { "H100-80GB" } else { "L4-24GB" }
    );
    let extra = format!(
        "untieredNamespaces: {untiered}\nenforcement: {{ mode: {} }}\n\
         namespaceGrants:\n  - {{ namespace: research, allowedClasses: [H100-80GB] }}\n\
         jobTypes:\n  - {{ name: train-llama, workloadClass: training, baseRuntimeSeconds: 3600, \
         relativeStddev: 0.5, defaultMemoryGiB: 40 }}\n",
        mode.as_str()
    );
    crate::policy::test_policy(
        &catalog,
        &[&bronze],
        &[
            "{ minScore: 90, name: gpu-ultra, value: 1000000, preemptionPolicy: PreemptLowerPriority }",
            "{ minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: PreemptLowerPriority }",
        ],
        &extra,
    )
}

/// Untiered namespaces outside every rule.
fn policy(mode: EnforcementMode) -> PolicySnapshot {
    snapshot(mode, "Ignore", false)
}

/// [`policy`] with untiered namespaces answered as `untiered` says (`defaultTier: bronze`).
fn defaulted(mode: EnforcementMode, untiered: crate::policy::UntieredNamespaces) -> PolicySnapshot {
    snapshot(mode, &format!("{untiered:?}"), false)
}

fn tiers(ns: &str) -> Option<String> {
    matches!(ns, "batch" | "research").then(|| "bronze".to_string())
}

/// A GPU Pod as `/mutate-pod` leaves it in a bronze namespace (on L4 nodes), unless `extra` places it.
fn pod_spec(extra: Value) -> Value {
    let mut spec =
        json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if extra.get("nodeSelector").is_none() && extra.get("affinity").is_none() {
        spec["nodeSelector"] = json!({KEY: "L4-24GB"});
    }
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

fn request(
    kind: (&str, &str),
    ns: &str,
    object: Value,
    groups: &[&str],
    op: &str,
    old: Value,
) -> AdmissionRequest<DynamicObject> {
    serde_json::from_value(json!({
        "uid": "u", "kind": {"group": kind.0, "version": "v1", "kind": kind.1},
        "resource": {"group": kind.0, "version": "v1", "resource": "x"},
        "namespace": ns, "operation": op, "userInfo": {"username": "alice", "groups": groups},
        "object": object, "oldObject": old
    }))
    .unwrap()
}

fn pod(ns: &str, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns, "annotations": annotations}, "spec": spec})
}

fn nodes(name: &str) -> NodeClass {
    match name {
        "l4-1" => NodeClass::Class("L4-24GB".into()),
        "h100-1" => NodeClass::Class("H100-80GB".into()),
        _ => NodeClass::Unknown,
    }
}

/// [`check`] with `tier_of`, the test Nodes, no PriorityClass cache, no claim templates and what RBAC
/// grants the requester here: `exempt tiers/bronze` to members of [`EXEMPT_GROUP`], nothing to others.
fn check_with(
    req: &AdmissionRequest<DynamicObject>,
    p: &PolicySnapshot,
    tier_of: &dyn Fn(&str) -> Option<String>,
) -> Check {
    let groups = req.user_info.groups.as_deref().unwrap_or_default();
    let grants = if groups.iter().any(|g| g == EXEMPT_GROUP) {
        Grants::new([Permission::Exempt("bronze".into())])
    } else {
        Grants::none()
    };
    check_granted(req, p, tier_of, &grants)
}

fn check_granted(
    req: &AdmissionRequest<DynamicObject>,
    p: &PolicySnapshot,
    tier_of: &dyn Fn(&str) -> Option<String>,
    grants: &Grants,
) -> Check {
    let facts = Facts {
        tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &nodes,
        grants,
    };
    check(req, p, &facts, p)
}

fn run(req: &AdmissionRequest<DynamicObject>, mode: EnforcementMode) -> (Check, Verdict) {
    let p = policy(mode);
    let check = check_with(req, &p, &tiers);
    let verdict = verdict(&check, p.mode);
    (check, verdict)
}

fn reasons(c: &Check) -> Vec<Reason> {
    match c {
        Check::Violations { violations, .. } => violations.iter().map(|v| v.reason).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn a_pin_outside_the_tier_is_denied_warned_or_audited() {
    let req = request(
        ("", "Pod"),
        "batch",
        pod(
            "batch",
            json!({}),
            pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    let (c, v) = run(&req, EnforcementMode::Enforce);
    assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
    let msg = v.denied.unwrap();
    assert!(
        msg.contains("Pod batch/p is outside tier bronze: selects GPU class H100-80GB"),
        "{msg}"
    );
    assert!(
        msg.contains(
            "allows GPU classes L4-24GB (24 GiB, nvidia); PriorityClass at most gpu-default"
        ),
        "{msg}"
    );
    let (_, v) = run(&req, EnforcementMode::Warn);
    assert!(v.denied.is_none() && v.warnings[0].contains("outside tier bronze"));
    let (_, v) = run(&req, EnforcementMode::Audit);
    assert_eq!(v, Verdict::default());
    // Every value of a multi-value In.
    let req = request(
        ("", "Pod"),
        "batch",
        pod(
            "batch",
            json!({}),
            pod_spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]}]}]}}}}),
            ),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        reasons(&run(&req, EnforcementMode::Enforce).0),
        [Reason::ClassOutsideTier]
    );
}

#[test]
fn exempt_requesters_and_granted_namespaces_are_allowed() {
    let spec = pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}}));
    let req = request(
        ("", "Pod"),
        "batch",
        pod("batch", json!({}), spec.clone()),
        &[EXEMPT_GROUP],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::Allowed(Allowance::Exempt)
    );
    // RBAC: `exempt tiers/bronze` exempts from bronze; the same power on another tier does not.
    let plain = request(
        ("", "Pod"),
        "batch",
        pod("batch", json!({}), spec.clone()),
        &[],
        "CREATE",
        Value::Null,
    );
    let p = policy(EnforcementMode::Enforce);
    let exempt = |tier: &str| Grants::new([Permission::Exempt(tier.into())]);
    assert_eq!(
        check_granted(&plain, &p, &tiers, &exempt("bronze")),
        Check::Allowed(Allowance::Exempt)
    );
    assert!(matches!(
        check_granted(&plain, &p, &tiers, &exempt("gold")),
        Check::Violations { .. }
    ));
    let rules = Grants::new([
        Permission::ChangeRules,
        Permission::SetTier("bronze".into()),
    ]);
    assert!(
        matches!(
            check_granted(&plain, &p, &tiers, &rules),
            Check::Violations { .. }
        ),
        "changing the rules or setting tiers is no exemption"
    );
    let req = request(
        ("", "Pod"),
        "research",
        pod("research", json!({}), spec),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::Allowed(Allowance::WithinTier)
    );
}

#[test]
fn priority_above_the_cap_and_needs_no_class_meets() {
    let req = request(
        ("", "Pod"),
        "batch",
        pod(
            "batch",
            json!({"gpu.mem.gi": "70"}),
            pod_spec(json!({"priorityClassName": "gpu-ultra"})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    let (c, v) = run(&req, EnforcementMode::Enforce);
    assert_eq!(reasons(&c), [Reason::PriorityAboveCap, Reason::NoClassFits]);
    let msg = v.denied.unwrap();
    assert!(
        msg.contains("asks for PriorityClass gpu-ultra (1000000)")
            && msg.contains(
                "needs 70 GiB of GPU memory per GPU, more than any GPU class of the tier has (at most 24 GiB)"
            )
            && !msg.contains("nvidia GPUs"),
        "{msg}"
    );
    // A job type's default memory counts when the Pod does not say.
    let req = request(
        ("", "Pod"),
        "batch",
        pod(
            "batch",
            json!({"app.kubernetes.io/job-type": "train-llama"}),
            pod_spec(json!({})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        reasons(&run(&req, EnforcementMode::Enforce).0),
        [Reason::NoClassFits]
    );
    // No GPU, no tier: nothing to say.
    let req = request(
        ("", "Pod"),
        "batch",
        pod(
            "batch",
            json!({}),
            json!({"nodeSelector": {KEY: "H100-80GB"}, "containers": [{"name": "c"}]}),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::Allowed(Allowance::WithinTier)
    );
    let req = request(
        ("", "Pod"),
        "web",
        pod(
            "web",
            json!({}),
            pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::NotOurs("namespace has no tier label")
    );
}

#[test]
fn workload_templates_are_checked_on_create_and_new_violations_on_update() {
    let job = |class: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "batch"},
        "spec": {"template": {"spec": pod_spec(json!({"nodeSelector": {KEY: class}, "restartPolicy": "Never"}))}}})
    };
    let req = request(
        ("batch", "Job"),
        "batch",
        job("H100-80GB"),
        &[],
        "CREATE",
        Value::Null,
    );
    let (c, v) = run(&req, EnforcementMode::Enforce);
    assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
    assert!(v.denied.unwrap().contains(
        "Job batch/train is outside tier bronze: spec.template: selects GPU class H100-80GB"
    ));
    // An update that keeps an old violation (admitted in Warn) is allowed; one that adds it is not.
    let req = request(
        ("batch", "Job"),
        "batch",
        job("H100-80GB"),
        &[],
        "UPDATE",
        job("H100-80GB"),
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::Allowed(Allowance::PredatesUpdate)
    );
    let req = request(
        ("batch", "Job"),
        "batch",
        job("H100-80GB"),
        &[],
        "UPDATE",
        job("L4-24GB"),
    );
    assert_eq!(
        reasons(&run(&req, EnforcementMode::Enforce).0),
        [Reason::ClassOutsideTier]
    );
    let req = request(
        ("batch", "Job"),
        "batch",
        job("H100-80GB"),
        &[],
        "DELETE",
        Value::Null,
    );
    assert_eq!(
        run(&req, EnforcementMode::Enforce).0,
        Check::NotOurs("not a CREATE or UPDATE")
    );
}

#[test]
fn an_unknown_tier_label_value_is_the_default_tier_never_no_rules() {
    let p = defaulted(
        EnforcementMode::Enforce,
        crate::policy::UntieredNamespaces::DefaultTier,
    );
    let req = request(
        ("", "Pod"),
        "shady",
        pod(
            "shady",
            json!({}),
            pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    // `Bronze` (capitalised) is no tier of the policy: the default tier's rules hold.
    let check = check_with(&req, &p, &|_| Some("Bronze".to_string()));
    assert_eq!(reasons(&check), [Reason::ClassOutsideTier]);
    assert!(
        verdict(&check, p.mode)
            .denied
            .unwrap()
            .contains("outside tier bronze")
    );
    // Before the policy is known there are no rules to hold a Pod to.
    let unknown = PolicySnapshot::default();
    let check = check_fn(&req, &unknown);
    assert_eq!(check, Check::NotOurs("the policy is not known yet"));
}

#[test]
fn the_pod_itself_must_hold_the_tier_bound_and_name_a_tier_node() {
    let req = |spec: Value, kind: (&str, &str), object: fn(Value) -> Value| {
        request(kind, "batch", object(spec), &[], "CREATE", Value::Null)
    };
    let as_pod = |spec: Value| pod("batch", json!({}), spec);
    let as_job = |spec: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "batch"},
               "spec": {"template": {"spec": spec}}})
    };
    let not_in = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": KEY, "operator": "NotIn", "values": ["H100-80GB"]}]}]}}});
    let cases = [
        (
            json!({"nodeSelector": {}}),
            ("", "Pod"),
            as_pod as fn(Value) -> Value,
            vec![Reason::NotBoundToTier],
        ),
        (
            json!({"affinity": not_in.clone()}),
            ("", "Pod"),
            as_pod,
            vec![Reason::NotBoundToTier],
        ),
        (
            json!({"nodeName": "h100-1"}),
            ("", "Pod"),
            as_pod,
            vec![Reason::NodeOutsideTier],
        ),
        (
            json!({"nodeName": "unknown-1"}),
            ("", "Pod"),
            as_pod,
            vec![Reason::NodeOutsideTier],
        ),
        (json!({"nodeName": "l4-1"}), ("", "Pod"), as_pod, vec![]),
        // A template is not mutated: only what it names itself counts (its Pods are checked later).
        (
            json!({"nodeSelector": {}}),
            ("batch", "Job"),
            as_job,
            vec![],
        ),
        (
            json!({"nodeName": "h100-1"}),
            ("batch", "Job"),
            as_job,
            vec![Reason::NodeOutsideTier],
        ),
    ];
    let p = policy(EnforcementMode::Enforce);
    for (spec, kind, object, want) in cases {
        let c = check_with(&req(pod_spec(spec.clone()), kind, object), &p, &tiers);
        assert_eq!(reasons(&c), want, "{kind:?} {spec}");
    }
    let denied = verdict(
        &check_with(
            &req(pod_spec(json!({"nodeName": "h100-1"})), ("", "Pod"), as_pod),
            &p,
            &tiers,
        ),
        p.mode,
    );
    assert!(
        denied
            .denied
            .unwrap()
            .contains("names node h100-1 of GPU class H100-80GB")
    );
    // A grant widens the bound: research may use H100 nodes.
    let granted = request(
        ("", "Pod"),
        "research",
        pod(
            "research",
            json!({}),
            pod_spec(json!({"nodeName": "h100-1"})),
        ),
        &[],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        check_with(&granted, &p, &tiers),
        Check::Allowed(Allowance::WithinTier)
    );
    // A requester RBAC exempts from bronze may.
    let admin = request(
        ("", "Pod"),
        "batch",
        as_pod(pod_spec(json!({"nodeName": "h100-1", "nodeSelector": {}}))),
        &[EXEMPT_GROUP],
        "CREATE",
        Value::Null,
    );
    assert_eq!(
        check_with(&admin, &p, &tiers),
        Check::Allowed(Allowance::Exempt)
    );
}

#[test]
fn a_claim_that_cannot_be_read_is_undecidable_until_bound() {
    let spec = |extra: Value| {
        let mut s = json!({"containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
                           "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpus"}]});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let p = policy(EnforcementMode::Enforce);
    let req = |s: Value| {
        request(
            ("", "Pod"),
            "batch",
            pod("batch", json!({}), s),
            &[],
            "CREATE",
            Value::Null,
        )
    };
    assert_eq!(
        reasons(&check_with(&req(spec(json!({}))), &p, &tiers)),
        [Reason::Undecidable]
    );
    assert_eq!(
        check_with(
            &req(spec(json!({"nodeSelector": {KEY: "L4-24GB"}}))),
            &p,
            &tiers
        ),
        Check::Allowed(Allowance::WithinTier)
    );
}

#[test]
fn a_pod_that_does_not_read_as_a_pod_is_undecidable() {
    let p = policy(EnforcementMode::Enforce);
    let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "batch"},
                     "spec": {"containers": "not a list"}});
    let req = request(("", "Pod"), "batch", bad, &[], "CREATE", Value::Null);
    assert_eq!(
        reasons(&check_with(&req, &p, &tiers)),
        [Reason::Undecidable]
    );
}

fn check_fn(req: &AdmissionRequest<DynamicObject>, p: &PolicySnapshot) -> Check {
    check_with(req, p, &|_| Some("Bronze".to_string()))
}

#[test]
fn a_globally_defaulted_class_is_no_exemption() {
    let p = policy(EnforcementMode::Enforce);
    let rules = p.tier_rules("bronze", "batch").unwrap();
    let pcs = HashMap::from([(
        "standard".to_string(),
        PriorityClassFacts {
            name: "standard".into(),
            value: 5000,
            preemption_policy: None,
            global_default: true,
        },
    )]);
    let pod: Pod = serde_json::from_value(pod(
        "batch",
        json!({}),
        pod_spec(json!({"priorityClassName": "standard"})),
    ))
    .unwrap();
    let facts = Facts {
        tier_of: &tiers,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &nodes,
        grants: &Grants::none(),
    };
    let at = Where {
        namespace: "batch",
        rules: &rules,
        policy: &p,
        facts: &facts,
        pcs: &pcs,
    };
    let described = DescribedPod {
        path: "Pod".into(),
        pod,
        itself: true,
    };
    // The apiserver wrote the cluster's default class in; above the cap it is still above the cap.
    let found = pod_violations(&described, &at);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].reason, Reason::PriorityAboveCap);
    assert_eq!(found[0].what, "asks for PriorityClass standard (5000)");
}

#[test]
fn constraints_on_other_identifying_labels_that_allow_no_tier_class_are_violations() {
    let mut p = policy(EnforcementMode::Enforce);
    p.class_labels = vec![
        (
            "H100-80GB".into(),
            vec![
                (KEY.into(), "H100-80GB".into()),
                (
                    "nvidia.com/gpu.product".into(),
                    "NVIDIA-H100-80GB-HBM3".into(),
                ),
            ],
        ),
        (
            "L4-24GB".into(),
            vec![
                (KEY.into(), "L4-24GB".into()),
                ("nvidia.com/gpu.product".into(), "NVIDIA-L4".into()),
            ],
        ),
    ];
    let check_of = |spec: Value, ann: Value| {
        let req = request(
            ("", "Pod"),
            "batch",
            pod("batch", ann, pod_spec(spec)),
            &[],
            "CREATE",
            Value::Null,
        );
        check_with(&req, &p, &tiers)
    };
    let c = check_of(
        json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}),
        json!({}),
    );
    assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
    let c = check_of(json!({}), json!({"nvidia.com/use-gputype": "H100"}));
    assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
    // Inside the tier by another label is no bound by itself: once mutation ANDs the tier's class in,
    // it is allowed.
    let c = check_of(
        json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}),
        json!({}),
    );
    assert_eq!(reasons(&c), [Reason::NotBoundToTier]);
    let c = check_of(
        json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4", KEY: "L4-24GB"}}),
        json!({}),
    );
    assert_eq!(c, Check::Allowed(Allowance::WithinTier));
    let c = check_of(json!({}), json!({"nvidia.com/nouse-gputype": "H100"}));
    assert_eq!(c, Check::Allowed(Allowance::WithinTier));
}

/// A bronze policy (`defaultTier: bronze`) answering untiered namespaces as `untiered` says.
fn untiered_policy(untiered: crate::policy::UntieredNamespaces) -> PolicySnapshot {
    defaulted(EnforcementMode::Enforce, untiered)
}

#[test]
fn every_namespace_has_a_tier_no_label_empty_unknown_or_unknown_namespace() {
    use crate::policy::UntieredNamespaces;
    let pinned = |ns: &str| {
        request(
            ("", "Pod"),
            ns,
            pod(
                ns,
                json!({}),
                pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
            ),
            &[],
            "CREATE",
            Value::Null,
        )
    };
    let p = untiered_policy(UntieredNamespaces::DefaultTier);
    let labels: [(&str, Option<&str>); 3] = [
        ("fresh", None),
        ("templated", Some("")),
        ("typo", Some("Gold")),
    ];
    for (ns, label) in labels {
        let tier_of = |_: &str| label.map(str::to_string);
        let check = check_with(&pinned(ns), &p, &tier_of);
        assert_eq!(reasons(&check), [Reason::ClassOutsideTier], "{ns}");
        let denied = verdict(&check, p.mode).denied.unwrap();
        assert!(denied.contains("outside tier bronze"), "{denied}");
    }
    // Deny: a GPU Pod of an untiered namespace is a violation of its own; a Pod naming no class and
    // asking for no GPU is none of ours.
    let p = untiered_policy(UntieredNamespaces::Deny);
    let check = check_with(&pinned("fresh"), &p, &|_| None);
    assert_eq!(reasons(&check), [Reason::UntieredNamespace]);
    let denied = verdict(&check, p.mode).denied.unwrap();
    assert!(
        denied.contains("fresh, which has no tier label (untieredNamespaces: Deny)"),
        "{denied}"
    );
    let cpu = request(
        ("", "Pod"),
        "fresh",
        pod("fresh", json!({}), json!({"containers": [{"name": "c"}]})),
        &[],
        "CREATE",
        Value::Null,
    );
    assert!(matches!(check_with(&cpu, &p, &|_| None), Check::NotOurs(_)));
    // Ignore: outside every rule, as before the setting.
    let p = untiered_policy(UntieredNamespaces::Ignore);
    assert_eq!(
        check_with(&pinned("fresh"), &p, &|_| Some(String::new())),
        Check::NotOurs("namespace has no tier label")
    );
}

#[test]
fn a_cpu_only_pods_priority_is_capped_preemption_included() {
    let cpu = |class: &str| {
        request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({}),
                json!({"priorityClassName": class, "containers": [{"name": "c"}]}),
            ),
            &[],
            "CREATE",
            Value::Null,
        )
    };
    let mut p = policy(EnforcementMode::Enforce);
    let c = check_with(&cpu("gpu-ultra"), &p, &tiers);
    assert_eq!(reasons(&c), [Reason::PriorityAboveCap]);
    assert!(
        verdict(&c, p.mode)
            .denied
            .unwrap()
            .contains("asks for PriorityClass gpu-ultra (1000000)")
    );
    assert_eq!(
        check_with(&cpu("gpu-default"), &p, &tiers),
        Check::Allowed(Allowance::WithinTier)
    );
    // The cap's class never preempts: a lower class that does is beyond the cap too.
    p.priority_classes
        .get_mut("gpu-default")
        .unwrap()
        .preemption_policy = Some("Never".into());
    p.priority_classes.insert(
        "low-preempting".into(),
        PriorityClassFacts {
            name: "low-preempting".into(),
            value: 10,
            preemption_policy: Some("PreemptLowerPriority".into()),
            global_default: false,
        },
    );
    let c = check_with(&cpu("low-preempting"), &p, &tiers);
    assert_eq!(reasons(&c), [Reason::PriorityAboveCap]);
    assert!(
        verdict(&c, p.mode)
            .denied
            .unwrap()
            .contains("low-preempting (10) with preemptionPolicy PreemptLowerPriority")
    );
    assert_eq!(
        check_with(&cpu("gpu-default"), &p, &tiers),
        Check::Allowed(Allowance::WithinTier)
    );
}

/// The message names the need no class of the tier meets: the vendor alone, or memory and vendor together.
#[test]
fn a_need_no_class_meets_is_named() {
    let amd = |memory: &str| {
        let spec = json!({"nodeSelector": {KEY: "L4-24GB"},
            "containers": [{"name": "c", "resources": {"limits": {"amd.com/gpu": "1"}}}]});
        request(
            ("", "Pod"),
            "batch",
            pod("batch", json!({"gpu.mem.gi": memory}), spec),
            &[],
            "CREATE",
            Value::Null,
        )
    };
    let message = |req| run(&req, EnforcementMode::Enforce).1.denied.unwrap();
    let msg = message(amd("16"));
    assert!(
        msg.contains("needs amd GPUs; the tier has no amd GPU class") && !msg.contains("GiB of"),
        "{msg}"
    );
    let msg = message(amd("70"));
    assert!(
        msg.contains("needs amd GPUs with 70 GiB of memory per GPU: the tier has no amd GPU class, none with that much memory"),
        "{msg}"
    );
    // An NVIDIA class with the memory and a smaller AMD one: each need met, never both by one class.
    let p = snapshot(EnforcementMode::Enforce, "Ignore", true);
    let mut req = amd("70");
    req.object.as_mut().unwrap().data["spec"]["nodeSelector"] = json!({KEY: "MI210-64GB"});
    let msg = verdict(&check_with(&req, &p, &tiers), EnforcementMode::Enforce)
        .denied
        .unwrap();
    assert!(
        msg.contains("needs amd GPUs with 70 GiB of memory per GPU, which no one GPU class of the tier offers together"),
        "{msg}"
    );
    // Within what the AMD class has: no fit violation.
    let mut req = amd("64");
    req.object.as_mut().unwrap().data["spec"]["nodeSelector"] = json!({KEY: "MI210-64GB"});
    assert_eq!(
        check_with(&req, &p, &tiers),
        Check::Allowed(Allowance::WithinTier)
    );
}

/// A GPU resource whose quantity is no Kubernetes quantity: how many GPUs the Pod asks for cannot be told, so
/// it is undecidable (denied in Enforce), never "no GPU".
#[test]
fn an_unreadable_gpu_quantity_is_undecidable() {
    let spec = json!({"nodeSelector": {KEY: "L4-24GB"},
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "one", "cpu": "1"}}}]});
    let req = request(
        ("", "Pod"),
        "batch",
        pod("batch", json!({}), spec),
        &[],
        "CREATE",
        Value::Null,
    );
    let (c, v) = run(&req, EnforcementMode::Enforce);
    assert_eq!(reasons(&c), [Reason::Undecidable]);
    let msg = v.denied.unwrap();
    assert!(
        msg.contains(r#"(container "c": nvidia.com/gpu="one")"#)
            && msg.contains("how many GPUs it asks for cannot be told"),
        "{msg}"
    );
    // The same in a workload's template; and a readable GPU count beside it does not make it decidable.
    let spec = json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "x"}}}]});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "batch"},
        "spec": {"template": {"spec": spec}}});
    let req = request(("batch", "Job"), "batch", job, &[], "CREATE", Value::Null);
    assert!(
        reasons(&run(&req, EnforcementMode::Enforce).0).contains(&Reason::Undecidable),
        "{:?}",
        run(&req, EnforcementMode::Enforce).0
    );
}
