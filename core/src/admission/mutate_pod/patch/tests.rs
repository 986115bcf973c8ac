//! The patch rules, one test each (see the module documentation).

use super::*;
use crate::names::decision::*;
use crate::priority_class::PriorityClassFacts;
use gpu_admission_proto::scorer::v1::PriorityAssignment;
use jsonptr::PointerBuf;
use record::score_text;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

const KEY: &str = "gpu.nvidia.com/class";

fn class(name: &str, taint: &str) -> GpuClass {
    crate::policy::test_class(name, KEY, Some(taint).filter(|t| !t.is_empty()))
}

/// The catalog every answer here names its classes from.
fn catalog() -> &'static [GpuClass] {
    static CATALOG: std::sync::LazyLock<Vec<GpuClass>> = std::sync::LazyLock::new(|| {
        ["H100-80GB", "A100-80GB", "L4-24GB"]
            .iter()
            .map(|c| class(c, "nvidia.com/gpu"))
            .collect()
    });
    &CATALOG
}

fn answer(classes: &[&str]) -> ScoreResponse {
    ScoreResponse {
        request_id: "uid".into(),
        accepted_classes: classes
            .iter()
            .map(|c| (&class(c, "nvidia.com/gpu")).into())
            .collect(),
        priority_score: 73.456,
        priority_class: Some(PriorityAssignment {
            name: "gpu-high".into(),
            value: 700,
            preemption_policy: "".into(),
        }),
        avoid_job_types: vec!["serve-llm".into()],
        policy_version: "v7".into(),
        ..Default::default()
    }
}

fn classes_in_cluster() -> HashMap<String, PriorityClassFacts> {
    HashMap::from([(
        "gpu-high".to_string(),
        PriorityClassFacts {
            name: "gpu-high".into(),
            value: 7000,
            preemption_policy: Some("Never".into()),
            global_default: false,
        },
    )])
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

fn gpu_pod(extra_spec: Value, metadata: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    for (k, v) in extra_spec.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// Builds the patch, applies it with json-patch, parses the result as a Pod, and checks that a second pass
/// yields nothing.
fn run(
    pod_json: Value,
    answer: &ScoreResponse,
    job_type: Option<&str>,
) -> (Vec<PatchOperation>, Pod) {
    run_on(pod_json, answer, job_type, catalog())
}

/// [`run`] against another catalog.
fn run_on(
    pod_json: Value,
    answer: &ScoreResponse,
    job_type: Option<&str>,
    catalog: &[GpuClass],
) -> (Vec<PatchOperation>, Pod) {
    let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
    let input = PatchInput {
        pod: &pod,
        job_type,
        answer,
        class_label_keys: &[],
        class_labels: &[],
        now: now(),
        catalog,
        tier: None,
        admin: false,
        fallback: false,
    };
    let ops = build_patch(&input, &classes_in_cluster());
    let mut doc = pod_json;
    json_patch::patch(&mut doc, &ops)
        .unwrap_or_else(|e| panic!("patch {ops:#?} does not apply: {e}"));
    let patched: Pod = serde_json::from_value(doc).unwrap();
    let again = PatchInput {
        pod: &patched,
        job_type,
        answer,
        class_label_keys: &[],
        class_labels: &[],
        now: now(),
        catalog,
        tier: None,
        admin: false,
        fallback: false,
    };
    assert!(
        build_patch(&again, &classes_in_cluster()).is_empty(),
        "second pass must be a no-op"
    );
    (ops, patched)
}

fn annotations(p: &Pod) -> &BTreeMap<String, String> {
    p.metadata.annotations.as_ref().unwrap()
}

#[test]
fn the_record_names_the_learned_state_the_scorer_decided_with() {
    let mut with_digest = answer(&["A100-80GB"]);
    with_digest.state_digest = "0123456789abcdef0123456789abcdef".into();
    let (_, p) = run(
        gpu_pod(json!({}), json!({"name": "p"})),
        &with_digest,
        Some("train-llama"),
    );
    assert_eq!(
        annotations(&p)[ANN_STATE_DIGEST],
        "0123456789abcdef0123456789abcdef"
    );
}

#[test]
fn bare_pod_gets_everything() {
    let (ops, p) = run(
        gpu_pod(json!({}), json!({"name": "p"})),
        &answer(&["A100-80GB"]),
        Some("train-llama"),
    );
    let a = annotations(&p);
    assert_eq!(a[ANN_PRIORITY_SCORE], "73.46");
    assert_eq!(a[ANN_GPU_CLASS], "A100-80GB");
    assert_eq!(a[ANN_DECIDED_AT], "2026-09-21T14:13:20Z");
    assert_eq!(a[ANN_POLICY_VERSION], "v7");
    assert!(!a.contains_key(ANN_INFEASIBLE_REASON));
    assert!(
        !a.contains_key(ANN_STATE_DIGEST),
        "an answer without a digest records none"
    );
    assert_eq!(
        p.metadata.labels.as_ref().unwrap()[LABEL_JOB_TYPE],
        "train-llama"
    );
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
    assert_eq!(
        spec.priority,
        Some(7000),
        "the class's value, not the scorer's"
    );
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
    assert_eq!(spec.node_selector.as_ref().unwrap()[KEY], "A100-80GB");
    let tol = spec.tolerations.as_ref().unwrap();
    assert_eq!(tol.len(), 1);
    assert_eq!(
        (
            tol[0].key.as_deref(),
            tol[0].operator.as_deref(),
            tol[0].effect.as_deref()
        ),
        (Some("nvidia.com/gpu"), Some("Exists"), Some("NoSchedule"))
    );
    let anti = spec
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    let terms = anti
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(terms.len(), 1);
    assert_eq!(terms[0].pod_affinity_term.topology_key, HOSTNAME_TOPOLOGY);
    let expr = &terms[0]
        .pod_affinity_term
        .label_selector
        .as_ref()
        .unwrap()
        .match_expressions
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (expr.key.as_str(), expr.values.as_deref()),
        (LABEL_JOB_TYPE, Some(&["serve-llm".to_string()][..]))
    );
    // parents first: the whole annotations map in one op, no op below a path that does not exist yet
    assert!(
        matches!(&ops[0], PatchOperation::Add(a) if a.path.as_str() == "/metadata/annotations")
    );
}

#[test]
fn pointers_escape_slash_and_tilde() {
    let pod = gpu_pod(
        json!({"nodeSelector": {"zone": "a"}}),
        json!({"name": "p", "annotations": {"x~y/z": "keep"}, "labels": {}}),
    );
    let (ops, p) = run(pod, &answer(&["A100-80GB"]), Some("train"));
    let paths: Vec<String> = ops.iter().map(|o| o.path().to_string()).collect();
    assert!(
        paths.contains(&"/metadata/annotations/gpu-admission.io~1decided-at".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/metadata/labels/gpu-admission.io~1job-type".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/spec/nodeSelector/gpu.nvidia.com~1class".to_string()),
        "{paths:?}"
    );
    assert_eq!(annotations(&p)["x~y/z"], "keep");
    assert_eq!(p.spec.unwrap().node_selector.unwrap()["zone"], "a");
    let tilde = PointerBuf::from_tokens(["a~b/c"]);
    assert_eq!(tilde.as_str(), "/a~0b~1c");
}

/// The bronze tier of the default policy: L4 only, capped at gpu-default.
struct Bronze {
    catalog: Vec<GpuClass>,
    classes: HashMap<String, PriorityClassFacts>,
}

impl Bronze {
    fn new() -> Self {
        let mut classes = classes_in_cluster();
        for (name, value) in [("gpu-default", 1000), ("gpu-ultra", 1_000_000)] {
            classes.insert(
                name.into(),
                PriorityClassFacts {
                    name: name.into(),
                    value,
                    preemption_policy: None,
                    global_default: false,
                },
            );
        }
        Self {
            catalog: ["H100-80GB", "A100-80GB", "L4-24GB"]
                .iter()
                .map(|c| class(c, "nvidia.com/gpu"))
                .collect(),
            classes,
        }
    }

    fn rules(&self) -> TierRules<'_> {
        TierRules {
            tier: "bronze",
            allowed: Cow::Owned(["L4-24GB".to_string()].into()),
            preferred: Some("L4-24GB"),
            max_priority_class: self.classes.get("gpu-default"),
            fallback: crate::policy::Fallback::PassThrough,
            granted: false,
        }
    }

    /// Decides, applies, and checks that a second pass over the result changes nothing.
    fn run(
        &self,
        pod_json: Value,
        a: &ScoreResponse,
        admin: bool,
        fallback: bool,
    ) -> (Mutation, Pod) {
        let rules = self.rules();
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let input = PatchInput {
            catalog: &self.catalog,
            tier: Some(&rules),
            admin,
            fallback,
            ..PatchInput::new(&pod, None, a, catalog(), now())
        };
        let m = decide_pod(&input, &self.classes);
        let mut doc = pod_json;
        json_patch::patch(&mut doc, &m.ops.operations())
            .unwrap_or_else(|e| panic!("{:#?}: {e}", m.ops));
        let patched: Pod = serde_json::from_value(doc).unwrap();
        let again = PatchInput {
            pod: &patched,
            ..input
        };
        assert!(is_settled(&again, &self.classes), "settled after one pass");
        assert!(
            build_patch(&again, &self.classes).is_empty(),
            "second pass must be a no-op"
        );
        (m, patched)
    }
}

fn required_terms(p: &Pod) -> Vec<Value> {
    let na = p
        .spec
        .as_ref()
        .unwrap()
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap();
    serde_json::to_value(
        &na.required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms,
    )
    .unwrap()
    .as_array()
    .unwrap()
    .clone()
}

#[test]
fn a_forged_decided_at_without_placement_is_decided_like_any_pod() {
    let b = Bronze::new();
    let pod = gpu_pod(
        json!({}),
        json!({"annotations": {ANN_DECIDED_AT: "2020-01-01T00:00:00Z"}}),
    );
    let (_, p) = b.run(pod, &answer(&["L4-24GB"]), false, false);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "L4-24GB"
    );
    assert_ne!(annotations(&p)[ANN_DECIDED_AT], "2020-01-01T00:00:00Z");
}

#[test]
fn a_decided_pod_inside_its_tier_is_left_alone() {
    let b = Bronze::new();
    let pod: Pod = serde_json::from_value(gpu_pod(
        json!({"nodeSelector": {KEY: "L4-24GB"}, "priorityClassName": "gpu-default", "priority": 1000}),
        json!({"annotations": {ANN_DECIDED_AT: "2020-01-01T00:00:00Z"}}),
    ))
    .unwrap();
    let a = answer(&["L4-24GB"]);
    let rules = b.rules();
    let input = PatchInput {
        catalog: &b.catalog,
        tier: Some(&rules),
        ..PatchInput::new(&pod, Some("x"), &a, catalog(), now())
    };
    assert!(build_patch(&input, &b.classes).is_empty());
    // Without our record the same Pod is decided (priority kept: it is within the cap).
    let mut undecided = pod.clone();
    undecided.metadata.annotations = None;
    let input = PatchInput {
        pod: &undecided,
        ..input
    };
    let ops = build_patch(&input, &b.classes);
    assert!(!ops.is_empty());
    assert!(
        ops.iter()
            .all(|o| !o.path().as_str().starts_with("/spec/priority")
                && !o.path().as_str().starts_with("/spec/nodeSelector")),
        "{ops:?}"
    );
}

#[test]
fn a_pin_outside_the_tier_is_constrained_not_rewritten() {
    let b = Bronze::new();
    let mut a = answer(&[]);
    a.infeasible_reason = "not allowed for tier bronze".into();
    let pod = gpu_pod(json!({"nodeSelector": {KEY: "H100-80GB"}}), json!({}));
    let (m, p) = b.run(pod, &a, false, false);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "H100-80GB"
    );
    let terms = required_terms(&p);
    assert_eq!(
        terms[0]["matchExpressions"][0]["values"],
        json!(["L4-24GB"])
    );
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("H100-80GB is outside tier bronze")),
        "{:?}",
        m.warnings
    );
    assert_eq!(
        annotations(&p)[ANN_INFEASIBLE_REASON],
        "not allowed for tier bronze"
    );
}

#[test]
fn an_admins_own_pin_is_kept() {
    let b = Bronze::new();
    let pod = gpu_pod(json!({"nodeSelector": {KEY: "H100-80GB"}}), json!({}));
    let (m, p) = b.run(pod, &answer(&[]), true, false);
    let spec = p.spec.unwrap();
    assert_eq!(spec.node_selector.unwrap()[KEY], "H100-80GB");
    assert!(spec.affinity.is_none_or(|a| a.node_affinity.is_none()));
    assert!(
        m.warnings.iter().all(|w| !w.contains("outside")),
        "{:?}",
        m.warnings
    );
}

#[test]
fn every_value_and_every_term_is_looked_at() {
    let b = Bronze::new();
    // Multi-value In naming an H100 beside the L4.
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]}]}]}}}}),
        json!({}),
    );
    let (m, p) = b.run(pod, &answer(&["L4-24GB"]), false, false);
    // One class: a nodeSelector, ANDed with every term.
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "L4-24GB"
    );
    assert!(m.warnings.iter().any(|w| w.contains("H100-80GB")));
    // An L4 term ORed with a catch-all term: the catch-all term is constrained too.
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}}),
        json!({}),
    );
    let (_, p) = b.run(pod.clone(), &answer(&["L4-24GB"]), false, false);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "L4-24GB"
    );
    // The answer's classes outside the tier are never used.
    let (_, p) = b.run(pod, &answer(&["A100-80GB", "L4-24GB"]), false, false);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "L4-24GB"
    );
    assert_eq!(required_terms(&p).len(), 2);
}

#[test]
fn an_infeasible_pod_is_still_placed_on_its_tier_with_a_warning() {
    let b = Bronze::new();
    let mut a = answer(&[]);
    a.infeasible_reason = "needs 70 GiB per GPU".into();
    let (m, p) = b.run(gpu_pod(json!({}), json!({})), &a, false, false);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "L4-24GB"
    );
    assert_eq!(
        annotations(&p)[ANN_INFEASIBLE_REASON],
        "needs 70 GiB per GPU"
    );
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("may never schedule") && w.contains("L4-24GB")),
        "{:?}",
        m.warnings
    );
}

/// The no-fit warning is whole within the apiserver's warning length (the scorer's usual reason fits as it
/// is); a reason too long to fit is cut inside the warning, which still ends with its consequence.
#[test]
fn the_no_fit_warning_fits_the_warning_length() {
    let usual = "no feasible GPU class for tier bronze: L4-24GB: needs 70 GiB of GPU memory per GPU, class has 24 GiB; 6 other classes are not allowed for tier bronze";
    let w = no_fit_warning(usual, "bronze", "L4-24GB");
    assert_eq!(
        w,
        format!(
            "gpu-admission: {usual}; held to tier bronze's classes (L4-24GB), the Pod may never schedule"
        )
    );
    assert!(w.chars().count() <= crate::review::MAX_WARNING_CHARS);
    let long = format!(
        "{usual}; {}",
        "X-1GB: needs 70 GiB, class has 1 GiB; ".repeat(8)
    );
    let w = no_fit_warning(&long, "bronze", "L4-24GB");
    assert_eq!(w.chars().count(), crate::review::MAX_WARNING_CHARS, "{w}");
    assert!(
        w.starts_with("gpu-admission: no feasible GPU class for tier bronze: L4-24GB: needs 70 GiB")
            && w.ends_with("… (whole in annotation gpu-admission.io/infeasible-reason); held to tier bronze's classes (L4-24GB), the Pod may never schedule"),
        "{w}"
    );
    assert_eq!(
        no_fit_warning("", "gold", "H100-80GB"),
        "gpu-admission: no feasible GPU class for tier gold; held to tier gold's classes (H100-80GB), the Pod may never schedule"
    );
}

#[test]
fn priority_is_capped_at_the_tier() {
    let b = Bronze::new();
    // The answer's gpu-high is above bronze's gpu-default.
    let (_, p) = b.run(
        gpu_pod(json!({}), json!({})),
        &answer(&["L4-24GB"]),
        false,
        false,
    );
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority_class_name.as_deref(), spec.priority),
        (Some("gpu-default"), Some(1000))
    );
    // The Pod's own gpu-ultra is lowered to the cap, with a warning; an admin's is kept.
    let own = gpu_pod(
        json!({"priorityClassName": "gpu-ultra", "priority": 1_000_000}),
        json!({}),
    );
    let (m, p) = b.run(own.clone(), &answer(&["L4-24GB"]), false, false);
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority_class_name.as_deref(), spec.priority),
        (Some("gpu-default"), Some(1000))
    );
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("gpu-ultra is above the cap")),
        "{:?}",
        m.warnings
    );
    let (_, p) = b.run(own, &answer(&["L4-24GB"]), true, false);
    assert_eq!(
        p.spec.unwrap().priority_class_name.as_deref(),
        Some("gpu-ultra")
    );
}

#[test]
fn a_cap_missing_from_the_cluster_assigns_nothing_above_it() {
    let mut b = Bronze::new();
    let cap = b.classes["gpu-default"].clone();
    b.classes.remove("gpu-default");
    let rules = TierRules {
        max_priority_class: Some(&cap),
        ..b.rules()
    };
    let pod: Pod = serde_json::from_value(gpu_pod(json!({}), json!({}))).unwrap();
    let a = answer(&["L4-24GB"]);
    let input = PatchInput {
        catalog: &b.catalog,
        tier: Some(&rules),
        ..PatchInput::new(&pod, None, &a, catalog(), now())
    };
    let ops = build_patch(&input, &b.classes);
    assert!(
        !ops.iter()
            .any(|o| o.path().as_str().starts_with("/spec/priority")),
        "{ops:?}"
    );
}

#[test]
fn tier_default_fallback_places_without_priority() {
    let b = Bronze::new();
    let rules = b.rules();
    let a = tier_default_answer(&rules, &b.catalog, "v9");
    let (m, p) = b.run(gpu_pod(json!({}), json!({})), &a, false, true);
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.node_selector.as_ref().unwrap()[KEY], "L4-24GB");
    assert_eq!(spec.priority_class_name, None);
    let ann = annotations(&p);
    assert_eq!(ann[ANN_FALLBACK], "tier-default");
    assert_eq!(ann[ANN_GPU_CLASS], "L4-24GB");
    assert!(!ann.contains_key(ANN_PRIORITY_SCORE));
    assert!(m.warnings.is_empty());
}

#[test]
fn priority_only_when_the_class_exists_and_the_pod_has_none() {
    let mut a = answer(&["A100-80GB"]);
    a.priority_class.as_mut().unwrap().name = "gpu-unknown".into();
    let (_, p) = run(gpu_pod(json!({}), json!({})), &a, None);
    let spec = p.spec.unwrap();
    assert_eq!(
        (
            spec.priority_class_name,
            spec.priority,
            spec.preemption_policy
        ),
        (None, None, None)
    );

    let (_, p) = run(
        gpu_pod(
            json!({"priorityClassName": "mine", "priority": 5}),
            json!({}),
        ),
        &answer(&["A100-80GB"]),
        None,
    );
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority_class_name.as_deref(), spec.priority),
        (Some("mine"), Some(5))
    );
}

#[test]
fn a_globally_defaulted_class_counts_as_no_class() {
    let mut classes = classes_in_cluster();
    classes.insert(
        "standard".into(),
        PriorityClassFacts {
            name: "standard".into(),
            value: 100,
            preemption_policy: None,
            global_default: true,
        },
    );
    let pod: Pod = serde_json::from_value(gpu_pod(
        json!({"priorityClassName": "standard", "priority": 100}),
        json!({}),
    ))
    .unwrap();
    let a = answer(&["A100-80GB"]);
    let input = PatchInput {
        pod: &pod,
        job_type: None,
        answer: &a,
        class_label_keys: &[],
        class_labels: &[],
        now: now(),
        catalog: catalog(),
        tier: None,
        admin: false,
        fallback: false,
    };
    let mut doc = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut doc, &build_patch(&input, &classes)).unwrap();
    assert_eq!(doc["spec"]["priorityClassName"], "gpu-high");
    assert_eq!(doc["spec"]["priority"], 7000);

    // A class the user chose (not the global default) is kept.
    let pod: Pod = serde_json::from_value(gpu_pod(
        json!({"priorityClassName": "gpu-high", "priority": 7000}),
        json!({}),
    ))
    .unwrap();
    let input = PatchInput {
        pod: &pod,
        job_type: None,
        answer: &a,
        class_label_keys: &[],
        class_labels: &[],
        now: now(),
        catalog: catalog(),
        tier: None,
        admin: false,
        fallback: false,
    };
    assert!(
        !build_patch(&input, &classes)
            .iter()
            .any(|o| o.path().as_str().starts_with("/spec/priority"))
    );
}

#[test]
fn priority_replaces_an_apiserver_defaulted_priority() {
    // The Priority admission plugin runs first and sets priority 0 / PreemptLowerPriority.
    let pod = gpu_pod(
        json!({"priority": 0, "preemptionPolicy": "PreemptLowerPriority"}),
        json!({}),
    );
    let (_, p) = run(pod, &answer(&["A100-80GB"]), None);
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority, spec.preemption_policy.as_deref()),
        (Some(7000), Some("Never"))
    );
}

#[test]
fn several_classes_become_required_affinity_on_every_term() {
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]}}}}),
        json!({}),
    );
    let (_, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
    let spec = p.spec.unwrap();
    assert!(spec.node_selector.is_none());
    let aff = spec.affinity.unwrap();
    let na = aff.node_affinity.unwrap();
    let preferred = na
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(preferred.len(), 1);
    assert_eq!(preferred[0].weight, BEST_CLASS_WEIGHT);
    assert_eq!(
        preferred[0].preference.match_expressions.as_ref().unwrap()[0]
            .values
            .as_deref()
            .unwrap(),
        ["H100-80GB"],
        "the best class is preferred"
    );
    let terms = na
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 2, "no new ORed term");
    let t0 = terms[0].match_expressions.as_ref().unwrap();
    assert_eq!(t0.len(), 2);
    assert_eq!(t0[0].key, "zone");
    assert_eq!(t0[1].key, KEY);
    assert_eq!(t0[1].values.as_deref().unwrap(), ["H100-80GB", "A100-80GB"]);
    assert_eq!(terms[1].match_expressions.as_ref().unwrap()[0].key, KEY);
    assert_eq!(terms[1].match_fields.as_ref().unwrap().len(), 1);
    assert!(aff.pod_anti_affinity.is_some());
}

#[test]
fn several_classes_without_affinity_create_the_first_term() {
    let (_, p) = run(
        gpu_pod(json!({}), json!({})),
        &answer(&["H100-80GB", "A100-80GB"]),
        None,
    );
    let aff = p.spec.unwrap().affinity.unwrap();
    let na = aff.node_affinity.unwrap();
    assert_eq!(
        na.preferred_during_scheduling_ignored_during_execution
            .unwrap()
            .len(),
        1
    );
    let terms = na
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    assert_eq!(
        terms[0].match_expressions.as_ref().unwrap()[0].operator,
        "In"
    );
    assert_eq!(
        aff.pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap()
            .len(),
        1
    );

    // Existing node affinity with only preferred terms: required is added beside them.
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}}),
        json!({}),
    );
    let (_, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
    let na = p.spec.unwrap().affinity.unwrap().node_affinity.unwrap();
    let preferred = na
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(
        preferred.len(),
        2,
        "existing preferred term kept, best class appended"
    );
    assert_eq!(preferred[0].weight, 1);
    assert_eq!(
        na.required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms
            .len(),
        1
    );
}

#[test]
fn pinned_class_is_kept() {
    let pod = gpu_pod(json!({"nodeSelector": {KEY: "T4-16GB"}}), json!({}));
    let (_, p) = run(pod, &answer(&["A100-80GB"]), None);
    assert_eq!(
        p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
        "T4-16GB"
    );
    assert!(p.spec.unwrap().affinity.unwrap().node_affinity.is_none());

    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["T4-16GB"]}]}]}}}}),
        json!({}),
    );
    let (ops, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
    assert!(p.spec.as_ref().unwrap().node_selector.is_none());
    assert!(
        !ops.iter()
            .any(|o| o.path().as_str().contains("nodeAffinity")),
        "{ops:?}"
    );
}

#[test]
fn pinned_class_found_through_catalog_keys() {
    let pod: Pod = serde_json::from_value(gpu_pod(
        json!({"nodeSelector": {"amd.com/class": "MI300X"}}),
        json!({}),
    ))
    .unwrap();
    let a = answer(&["A100-80GB"]);
    let keys = vec!["amd.com/class".to_string()];
    let input = PatchInput {
        pod: &pod,
        job_type: None,
        answer: &a,
        class_label_keys: &keys,
        class_labels: &[],
        now: now(),
        catalog: catalog(),
        tier: None,
        admin: false,
        fallback: false,
    };
    let ops = build_patch(&input, &classes_in_cluster());
    assert!(
        !ops.iter()
            .any(|o| o.path().as_str().starts_with("/spec/nodeSelector")),
        "{ops:?}"
    );
    assert_eq!(
        pinned_class(&pod, &["amd.com/class"]),
        Some(("amd.com/class", "MI300X"))
    );
}

#[test]
fn existing_tolerations_and_affinity_survive() {
    let pod = gpu_pod(
        json!({
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}}]}}
        }),
        json!({}),
    );
    let (ops, p) = run(pod, &answer(&["A100-80GB"]), None);
    let spec = p.spec.unwrap();
    let tol = spec.tolerations.unwrap();
    assert_eq!(tol.len(), 2);
    assert_eq!(tol[0].key.as_deref(), Some("dedicated"));
    assert_eq!(tol[1].key.as_deref(), Some("nvidia.com/gpu"));
    let terms = spec
        .affinity
        .unwrap()
        .pod_anti_affinity
        .unwrap()
        .preferred_during_scheduling_ignored_during_execution
        .unwrap();
    assert_eq!(terms.len(), 2);
    assert_eq!(terms[0].weight, 5);
    assert!(
        ops.iter()
            .any(|o| o.path().as_str() == "/spec/tolerations/-")
    );
}

#[test]
fn covering_toleration_is_not_duplicated() {
    for existing in [
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "nvidia.com/gpu", "operator": "Exists"}),
        json!({"operator": "Exists"}),
    ] {
        let (_, p) = run(
            gpu_pod(json!({"tolerations": [existing.clone()]}), json!({})),
            &answer(&["A100-80GB"]),
            None,
        );
        assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 1, "{existing}");
    }
    // An Equal toleration for one value does not cover every value of the taint.
    let equal = json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"});
    let (_, p) = run(
        gpu_pod(json!({"tolerations": [equal]}), json!({})),
        &answer(&["A100-80GB"]),
        None,
    );
    assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 2);
}

#[test]
fn infeasible_gets_priority_and_reason_but_no_class() {
    let mut a = answer(&[]);
    a.infeasible_reason = "needs 200 GiB per GPU; largest class has 80".into();
    let (_, p) = run(gpu_pod(json!({}), json!({})), &a, None);
    let ann = annotations(&p);
    assert!(!ann.contains_key(ANN_GPU_CLASS));
    assert_eq!(
        ann[ANN_INFEASIBLE_REASON],
        "needs 200 GiB per GPU; largest class has 80"
    );
    let spec = p.spec.unwrap();
    assert_eq!(spec.priority, Some(7000));
    assert!(spec.node_selector.is_none() && spec.tolerations.is_none());
}

#[test]
fn no_taint_key_means_no_toleration_and_bad_job_types_are_skipped() {
    let mut a = answer(&["A100-80GB"]);
    a.avoid_job_types = vec!["bad/value".into(), "".into()];
    // The catalog's taint is the one tolerated (the answer's copy of it is not read).
    let untainted = [class("A100-80GB", "")];
    let (ops, p) = run_on(
        gpu_pod(json!({}), json!({})),
        &a,
        Some("not a label"),
        &untainted,
    );
    let spec = p.spec.unwrap();
    assert!(
        spec.tolerations.is_none() && spec.affinity.is_none(),
        "{ops:?}"
    );
    assert!(p.metadata.labels.is_none());
}

#[test]
fn null_parents_are_replaced_not_descended_into() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": null, "labels": null},
        "spec": {"containers": [{"name": "c"}], "nodeSelector": null, "tolerations": null, "affinity": null}});
    let (_, p) = run(pod, &answer(&["A100-80GB"]), Some("t"));
    assert_eq!(annotations(&p).len(), 6);
    assert_eq!(p.spec.unwrap().node_selector.unwrap().len(), 1);
}

#[test]
fn score_text_is_short() {
    assert_eq!(score_text(73.0), "73");
    assert_eq!(score_text(73.5), "73.5");
    assert_eq!(score_text(0.0), "0");
    assert_eq!(score_text(100.0), "100");
}

#[test]
fn score_text_is_the_trimmed_two_decimal_formatting_for_every_value() {
    let formatted = |x: f64| {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    let mut values: Vec<f64> = Vec::new();
    // Ties and near-ties in binary (k/8, k/1000 and their neighbours), and a pseudo-random spread.
    for k in 0..20_000u32 {
        for x in [
            f64::from(k) / 8.0,
            f64::from(k) / 1000.0,
            f64::from(k) / 200.0,
        ] {
            values.extend([
                x,
                f64::from_bits(x.to_bits() + 1),
                f64::from_bits(x.to_bits().saturating_sub(1)),
            ]);
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..200_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
        values.push(unit * [1.0, 100.0, 1e6, 1e12][(state & 3) as usize]);
    }
    values.extend([
        0.0,
        -0.0,
        5e-324,
        1e-300,
        0.005,
        0.015,
        0.025,
        2.675,
        99.995,
        1e15,
        -1.5,
        f64::NAN,
        f64::INFINITY,
    ]);
    for x in values {
        assert_eq!(score_text(x), formatted(x), "{x:e}");
    }
}

/// A gold tier over H100-80GB, A100-80GB and L4-24GB, whose classes GPU Feature Discovery labels too.
struct Gold {
    catalog: Vec<GpuClass>,
    labels: Vec<(String, Vec<(String, String)>)>,
    classes: HashMap<String, PriorityClassFacts>,
}

impl Gold {
    fn new() -> Self {
        let names = ["H100-80GB", "A100-80GB", "L4-24GB"];
        let products = [
            "NVIDIA-H100-80GB-HBM3",
            "NVIDIA-A100-SXM4-80GB",
            "NVIDIA-L4",
        ];
        Self {
            catalog: names.iter().map(|c| class(c, "nvidia.com/gpu")).collect(),
            labels: names
                .iter()
                .zip(products)
                .map(|(n, p)| {
                    (
                        n.to_string(),
                        vec![
                            (KEY.to_string(), n.to_string()),
                            ("nvidia.com/gpu.product".to_string(), p.to_string()),
                        ],
                    )
                })
                .collect(),
            classes: classes_in_cluster(),
        }
    }

    fn run(&self, pod_json: Value, a: &ScoreResponse) -> (Mutation, Pod) {
        let rules = TierRules {
            tier: "gold",
            allowed: Cow::Owned(
                ["H100-80GB", "A100-80GB", "L4-24GB"]
                    .map(String::from)
                    .into(),
            ),
            preferred: Some("H100-80GB"),
            max_priority_class: None,
            fallback: crate::policy::Fallback::PassThrough,
            granted: false,
        };
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let input = PatchInput {
            catalog: &self.catalog,
            class_labels: &self.labels,
            tier: Some(&rules),
            ..PatchInput::new(&pod, None, a, catalog(), now())
        };
        let m = decide_pod(&input, &self.classes);
        let mut doc = pod_json;
        json_patch::patch(&mut doc, &m.ops.operations())
            .unwrap_or_else(|e| panic!("{:#?}: {e}", m.ops));
        let patched: Pod = serde_json::from_value(doc).unwrap();
        let again = PatchInput {
            pod: &patched,
            ..input
        };
        assert!(
            build_patch(&again, &self.classes).is_empty(),
            "second pass must be a no-op"
        );
        (m, patched)
    }
}

fn with_costs(mut a: ScoreResponse, costs: &[(&str, f64)], explored: bool) -> ScoreResponse {
    a.candidates = costs
        .iter()
        .map(|(n, c)| gpu_admission_proto::scorer::v1::CandidateScore {
            gpu_class: n.to_string(),
            feasible: true,
            cost: *c,
            ..Default::default()
        })
        .collect();
    a.explored = explored;
    a
}

#[test]
fn a_gfd_product_selector_keeps_the_pod_on_a100_nodes() {
    let g = Gold::new();
    let pod = gpu_pod(
        json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}),
        json!({}),
    );
    let a = with_costs(answer(&["A100-80GB"]), &[("A100-80GB", 2.0)], false);
    let (m, p) = g.run(pod, &a);
    let spec = p.spec.as_ref().unwrap();
    // Still only A100-80GB nodes: the GFD selector is kept and nothing widens or contradicts it.
    assert_eq!(spec.node_selector.as_ref().unwrap().len(), 1);
    assert_eq!(
        spec.node_selector.as_ref().unwrap()["nvidia.com/gpu.product"],
        "NVIDIA-A100-SXM4-80GB"
    );
    assert!(
        spec.affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .is_none(),
        "{:?}",
        m.ops
    );
    let ann = annotations(&p);
    assert_eq!(ann[ANN_GPU_CLASS], "A100-80GB");
    assert_eq!(
        ann[ANN_PLACEMENT],
        "pod: nodeSelector nvidia.com/gpu.product"
    );
    assert!(m.warnings.is_empty(), "{:?}", m.warnings);
}

#[test]
fn a_multi_value_in_stays_a_choice_between_its_classes() {
    let g = Gold::new();
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]}]}]}}}}),
        json!({}),
    );
    let a = with_costs(
        answer(&["H100-80GB", "A100-80GB"]),
        &[("H100-80GB", 1.0), ("A100-80GB", 1.3)],
        true,
    );
    let (_, p) = g.run(pod, &a);
    let terms = required_terms(&p);
    assert_eq!(terms.len(), 1);
    assert_eq!(
        terms[0]["matchExpressions"],
        json!([{"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]}])
    );
    let ann = annotations(&p);
    assert_eq!(ann[ANN_GPU_CLASS], "H100-80GB");
    assert_eq!(ann[ANN_ALTERNATIVES], "H100-80GB=1,A100-80GB=0.77");
    assert_eq!(ann[ANN_EXPLORED], "true");
}

#[test]
fn node_name_pods_get_no_placement_and_name_no_class() {
    let g = Gold::new();
    let pod = gpu_pod(json!({"nodeName": "gpu-node-7"}), json!({}));
    let (m, p) = g.run(pod, &answer(&["H100-80GB"]));
    assert!(
        !m.ops.operations().iter().any(|o| {
            let path = o.path().as_str();
            path.starts_with("/spec/nodeSelector")
                || path.starts_with("/spec/affinity/nodeAffinity")
                || (path == "/spec/affinity" && o.to_string().contains("nodeAffinity"))
        }),
        "{:?}",
        m.ops
    );
    let spec = p.spec.as_ref().unwrap();
    assert!(spec.node_selector.is_none());
    assert!(
        spec.affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .is_none()
    );
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
    let ann = annotations(&p);
    assert_eq!(ann[ANN_PLACEMENT], "node-name");
    assert!(!ann.contains_key(ANN_GPU_CLASS), "{ann:?}");
}

#[test]
fn kueue_pods_keep_kueues_placement_and_get_a_recommendation() {
    let g = Gold::new();
    for (spec, meta) in [
        (
            json!({}),
            json!({"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}),
        ),
        (
            json!({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}),
            json!({}),
        ),
    ] {
        let (_, p) = g.run(gpu_pod(spec, meta), &answer(&["H100-80GB"]));
        let s = p.spec.as_ref().unwrap();
        assert!(s.node_selector.is_none());
        assert!(
            s.affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_none()
        );
        assert_eq!(s.priority_class_name.as_deref(), Some("gpu-high"));
        let ann = annotations(&p);
        assert_eq!(ann[ANN_PLACEMENT], "kueue");
        assert_eq!(ann[ANN_RECOMMENDED_CLASS], "H100-80GB");
        assert!(!ann.contains_key(ANN_GPU_CLASS));
    }
}

#[test]
fn an_unknown_or_empty_class_selector_names_no_class() {
    let b = Bronze::new();
    for value in ["", "B200"] {
        let mut a = answer(&[]);
        a.infeasible_reason = "the Pod's own constraints allow no GPU class of the catalog".into();
        let pod = gpu_pod(json!({"nodeSelector": {KEY: value}}), json!({}));
        let (m, p) = b.run(pod, &a, false, false);
        let ann = annotations(&p);
        assert!(!ann.contains_key(ANN_GPU_CLASS), "{value:?}: {ann:?}");
        assert!(ann[ANN_INFEASIBLE_REASON].contains("no GPU class"));
        // The tier is ANDed in: the Pod's own selector is kept, and it can only go to the tier's class.
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            value
        );
        assert_eq!(
            required_terms(&p)[0]["matchExpressions"][0]["values"],
            json!(["L4-24GB"])
        );
        assert!(!m.warnings.is_empty());
    }
}

/// Annotations of `bytes` in total (keys and values), in one big value.
fn annotations_of(bytes: usize) -> Value {
    let key = "example.com/notes";
    json!({"name": "p", "annotations": {key: "x".repeat(bytes - key.len())}})
}

fn annotation_bytes(p: &Pod) -> usize {
    annotations(p).iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[test]
fn decision_annotations_never_push_a_pod_over_the_annotation_limit() {
    let limit = record::ANNOTATIONS_LIMIT_BYTES;
    let a = answer(&["A100-80GB", "H100-80GB"]);
    let pod =
        |bytes| serde_json::from_value::<Pod>(gpu_pod(json!({}), annotations_of(bytes))).unwrap();
    let decide = |p: &Pod| {
        let input = PatchInput::new(p, None, &a, catalog(), now());
        decide_pod(&input, &classes_in_cluster())
    };
    let patched = |bytes: usize| {
        let mut doc = gpu_pod(json!({}), annotations_of(bytes));
        let m = decide(&pod(bytes));
        json_patch::patch(&mut doc, &m.ops.operations()).unwrap();
        (serde_json::from_value::<Pod>(doc).unwrap(), m.warnings)
    };
    // Room to spare: the whole record, no warning.
    let (p, warnings) = patched(limit / 2);
    assert!(annotations(&p).contains_key(ANN_DECIDED_AT));
    assert!(annotations(&p).contains_key(ANN_PLACEMENT));
    assert!(
        warnings.iter().all(|w| !w.contains("annotations")),
        "{warnings:?}"
    );
    // Just under the limit: the optional ones give way first, the record stays inside the limit.
    for room in [150, 60, 20, 0] {
        let (p, warnings) = patched(limit - room);
        assert!(
            annotation_bytes(&p) <= limit,
            "room {room}: {}",
            annotation_bytes(&p)
        );
        assert!(
            warnings.iter().any(|w| w.contains("not recorded")),
            "room {room}: {warnings:?}"
        );
        // The placement is never given up: it is in the spec, not in the annotations.
        assert!(!required_terms(&p).is_empty(), "room {room}");
    }
    // With a little room the record (when the Pod was decided) is what stays.
    let (p, _) = patched(limit - 60);
    assert!(!annotations(&p).contains_key(ANN_PLACEMENT));
    assert!(
        annotations(&p).contains_key(ANN_DECIDED_AT),
        "{:?}",
        annotations(&p).keys()
    );
}

#[test]
fn every_way_of_placing_a_pod_elsewhere_still_gets_the_tier_bound() {
    let b = Bronze::new();
    let not_l4 = json!([{"matchExpressions": [{"key": KEY, "operator": "NotIn", "values": ["H100-80GB", "A100-80GB"]}]}]);
    for (what, spec, meta) in [
        ("nodeName", json!({"nodeName": "h100-node-1"}), json!({})),
        (
            "Kueue label",
            json!({}),
            json!({"labels": {"kueue.x-k8s.io/queue-name": "q"}}),
        ),
        (
            "Kueue gate",
            json!({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}),
            json!({}),
        ),
        (
            "HAMi use-gputype",
            json!({}),
            json!({"annotations": {"nvidia.com/use-gputype": "L4"}}),
        ),
        (
            "NotIn every other class",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": not_l4}}}}),
            json!({}),
        ),
    ] {
        let (_, p) = b.run(gpu_pod(spec, meta), &answer(&["H100-80GB"]), false, false);
        let rules = b.rules();
        assert_eq!(
            crate::tier_bound::class_bound(p.spec.as_ref().unwrap(), &rules, &b.catalog),
            Ok(()),
            "{what}: {:?}",
            p.spec
        );
    }
    // An admin's nodeName Pod is left where the admin put it.
    let (_, p) = b.run(
        gpu_pod(json!({"nodeName": "h100-node-1"}), json!({})),
        &answer(&["H100-80GB"]),
        true,
        false,
    );
    assert!(p.spec.as_ref().unwrap().node_selector.is_none());
}

#[test]
fn the_placing_floors_constraint_is_narrowed_to_the_answer_not_kept() {
    let b = Bronze::new();
    let rules = TierRules {
        tier: "gold",
        allowed: Cow::Owned(["H100-80GB".to_string(), "A100-80GB".to_string()].into()),
        preferred: None,
        ..b.rules()
    };
    // What the placing floor writes: the tier's classes on every term, and its mark.
    let floor_terms = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["H100-80GB", "A100-80GB"]}]}]}}});
    let a = answer(&["A100-80GB"]);
    let decide = |metadata: Value| {
        let pod: Pod =
            serde_json::from_value(gpu_pod(json!({"affinity": floor_terms}), metadata)).unwrap();
        let input = PatchInput {
            catalog: &b.catalog,
            tier: Some(&rules),
            ..PatchInput::new(&pod, None, &a, catalog(), now())
        };
        let ops = build_patch(&input, &b.classes);
        let mut doc = serde_json::to_value(&pod).unwrap();
        json_patch::patch(&mut doc, &ops).unwrap();
        let decided = serde_json::from_value::<Pod>(doc).unwrap();
        // Decided once: a second pass changes nothing.
        let again = PatchInput {
            pod: &decided,
            ..input
        };
        assert!(build_patch(&again, &b.classes).is_empty(), "second pass");
        decided
    };
    // The Pod's own constraint inside the tier is kept: our answer is not applied.
    let own = decide(json!({}));
    assert!(own.spec.as_ref().unwrap().node_selector.is_none());
    // The floor's is narrowed: our one class as a nodeSelector, ANDed with the floor's term.
    let placed = decide(json!({"annotations": {ANN_FLOOR_PLACED: "gold"}}));
    assert_eq!(
        placed
            .spec
            .as_ref()
            .unwrap()
            .node_selector
            .as_ref()
            .unwrap()[KEY],
        "A100-80GB"
    );
    assert_eq!(required_terms(&placed), required_terms(&own));
    assert_eq!(annotations(&placed)[ANN_GPU_CLASS], "A100-80GB");
}
