//! THE admission decision as a pure function: Pod + scorer answer + PriorityClass facts + now → RFC 6902 patch.
//!
//! Rules (each one is a test below):
//! - a Pod already carrying `gpu-admission.io/decided-at` gets no patch (idempotency);
//! - `priorityClassName` only when the Pod has none and the class exists, and then also `spec.priority` and
//!   `spec.preemptionPolicy` with the class's values (the apiserver rejects a class name with another priority);
//! - the GPU class as `nodeSelector` (one class) or as a required node-affinity `In` expression appended to
//!   EVERY existing node selector term (terms are ORed, expressions ANDed) when several classes are acceptable;
//!   plus a preferred term (weight 100) for the best class, so the scheduler takes it when it can;
//!   a Pod that already names a GPU class (nodeSelector or required affinity on a class label key) keeps it;
//! - a GPU toleration (class taint key, `Exists`, `NoSchedule`) unless an equal or covering one exists;
//! - preferred pod anti-affinity terms (hostname topology) for the job types to avoid, appended;
//! - label `gpu-admission.io/job-type`, annotations `gpu-admission.io/{priority-score, gpu-class, decided-at,
//!   policy-version}` (+ `infeasible-reason` when no class is feasible).
//!
//! Paths are built from tokens by `jsonptr` (which escapes `~` → `~0`, `/` → `~1`); a missing parent is added
//! whole (with the new members inside) before anything is added under it; arrays are appended with `/-`.

use std::collections::BTreeMap;

use gpu_admission_proto::scorer::v1::{GpuClass, ScoreResponse};
use json_patch::{AddOperation, PatchOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::{Affinity, Pod, Toleration};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::features::is_label_value;

pub const ANN_PRIORITY_SCORE: &str = "gpu-admission.io/priority-score";
pub const ANN_GPU_CLASS: &str = "gpu-admission.io/gpu-class";
pub const ANN_DECIDED_AT: &str = "gpu-admission.io/decided-at";
pub const ANN_POLICY_VERSION: &str = "gpu-admission.io/policy-version";
pub const ANN_INFEASIBLE_REASON: &str = "gpu-admission.io/infeasible-reason";
pub const LABEL_JOB_TYPE: &str = "gpu-admission.io/job-type";
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
/// Weight of the preferred node-affinity term for the best class when several classes are acceptable.
pub const BEST_CLASS_WEIGHT: i32 = 100;
/// Weight of each preferred anti-affinity term (1-100).
pub const ANTI_AFFINITY_WEIGHT: i32 = 100;

/// A PriorityClass as the cluster (or, with `--no-kube`, the policy's buckets) defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClassFacts {
    pub name: String,
    pub value: i32,
    /// `PreemptLowerPriority` or `Never`; `None` means the Kubernetes default (`PreemptLowerPriority`).
    pub preemption_policy: Option<String>,
    /// The cluster's `globalDefault` class: the apiserver's Priority plugin writes its name into every Pod
    /// without a class before webhooks run, so a Pod naming it is treated as a Pod without a class.
    pub global_default: bool,
}

/// Where PriorityClasses are looked up (a watch cache; a map in tests).
pub trait PriorityClassLookup {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts>;
}

impl<S: std::hash::BuildHasher> PriorityClassLookup
    for std::collections::HashMap<String, PriorityClassFacts, S>
{
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        self.get(name).cloned()
    }
}

/// Everything the patch depends on. The answer must already be validated (see `decide`).
pub struct PatchInput<'a> {
    pub pod: &'a Pod,
    /// The job type read from the Pod (already a valid label value), labelled for anti-affinity.
    pub job_type: Option<&'a str>,
    pub answer: &'a ScoreResponse,
    /// Node label keys that name a GPU class (from the policy catalog); the answer's own keys are added.
    pub class_label_keys: &'a [String],
    pub now: OffsetDateTime,
}

fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Adds `members` to the map at `parent`: one `add` of the whole map when it is missing (or null), else one
/// `add` per member.
fn add_to_map(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    members: Vec<(String, Value)>,
) {
    if members.is_empty() {
        return;
    }
    if exists {
        for (k, v) in members {
            ops.push(add(ptr(parent.iter().copied().chain([k.as_str()])), v));
        }
    } else {
        ops.push(add(
            ptr(parent.iter().copied()),
            Value::Object(members.into_iter().collect()),
        ));
    }
}

/// Appends `items` to the array at `parent` (`/-`), or adds the whole array when it is missing.
fn append_to_array(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    items: Vec<Value>,
) {
    if items.is_empty() {
        return;
    }
    if exists {
        for v in items {
            ops.push(add(ptr(parent.iter().copied().chain(["-"])), v));
        }
    } else {
        ops.push(add(ptr(parent.iter().copied()), Value::Array(items)));
    }
}

/// The GPU class the Pod already names itself: a `nodeSelector` entry or a required node-affinity `In`
/// expression on one of `label_keys`. Returns (key, value).
pub fn pinned_class<'p>(pod: &'p Pod, label_keys: &[&str]) -> Option<(&'p str, &'p str)> {
    let spec = pod.spec.as_ref()?;
    if let Some(sel) = &spec.node_selector
        && let Some((k, v)) = sel.iter().find(|(k, _)| label_keys.contains(&k.as_str()))
    {
        return Some((k, v));
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find_map(|e| {
            (label_keys.contains(&e.key.as_str()) && e.operator == "In")
                .then(|| {
                    e.values
                        .as_deref()
                        .and_then(|v| v.first())
                        .map(|v| (e.key.as_str(), v.as_str()))
                })
                .flatten()
        })
}

/// Does an existing toleration already let the Pod onto nodes tainted `key:NoSchedule` (any value)?
fn tolerates(existing: &Toleration, key: &str) -> bool {
    let op = existing.operator.as_deref().unwrap_or("Equal");
    let key_ok = match existing.key.as_deref() {
        None | Some("") => op == "Exists",
        Some(k) => k == key,
    };
    let effect_ok = matches!(
        existing.effect.as_deref(),
        None | Some("") | Some("NoSchedule")
    );
    key_ok && op == "Exists" && effect_ok
}

fn score_text(score: f64) -> String {
    let s = format!("{score:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Builds the JSON Patch for one admitted Pod. Empty when the Pod was already decided.
pub fn build_patch(
    input: &PatchInput<'_>,
    priority_classes: &dyn PriorityClassLookup,
) -> Vec<PatchOperation> {
    let pod = input.pod;
    let answer = input.answer;
    let meta = &pod.metadata;
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_DECIDED_AT))
    {
        return Vec::new();
    }
    let mut ops = Vec::new();

    // metadata.annotations: the decision record.
    let mut annotations: Vec<(String, Value)> = vec![
        (
            ANN_PRIORITY_SCORE.into(),
            json!(score_text(answer.priority_score)),
        ),
        (
            ANN_DECIDED_AT.into(),
            json!(
                input
                    .now
                    .replace_nanosecond(0)
                    .unwrap_or(input.now)
                    .format(&Rfc3339)
                    .unwrap_or_default()
            ),
        ),
        (ANN_POLICY_VERSION.into(), json!(answer.policy_version)),
    ];
    if let Some(best) = answer.accepted_classes.first() {
        annotations.push((ANN_GPU_CLASS.into(), json!(best.name)));
    } else {
        let reason = if answer.infeasible_reason.is_empty() {
            "no feasible GPU class"
        } else {
            &answer.infeasible_reason
        };
        annotations.push((ANN_INFEASIBLE_REASON.into(), json!(reason)));
    }
    add_to_map(
        &mut ops,
        &["metadata", "annotations"],
        meta.annotations.is_some(),
        annotations,
    );

    // metadata.labels: the job type, so that other Pods' anti-affinity can find this one.
    if let Some(jt) = input.job_type.filter(|jt| is_label_value(jt))
        && meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_JOB_TYPE))
            .map(String::as_str)
            != Some(jt)
    {
        add_to_map(
            &mut ops,
            &["metadata", "labels"],
            meta.labels.is_some(),
            vec![(LABEL_JOB_TYPE.into(), json!(jt))],
        );
    }

    let default_spec = Default::default();
    let spec = match &pod.spec {
        Some(s) => s,
        None => {
            ops.push(add(ptr(["spec"]), json!({})));
            &default_spec
        }
    };

    // spec.priorityClassName + spec.priority + spec.preemptionPolicy, together or not at all.
    let own_class = spec.priority_class_name.as_deref().unwrap_or("");
    let defaulted = !own_class.is_empty()
        && priority_classes
            .priority_class(own_class)
            .is_some_and(|f| f.global_default);
    if (own_class.is_empty() || defaulted)
        && let Some(pc) = answer
            .priority_class
            .as_ref()
            .filter(|p| !p.name.is_empty())
        && let Some(facts) = priority_classes.priority_class(&pc.name)
    {
        ops.push(add(ptr(["spec", "priorityClassName"]), json!(facts.name)));
        ops.push(add(ptr(["spec", "priority"]), json!(facts.value)));
        let policy = facts
            .preemption_policy
            .as_deref()
            .unwrap_or("PreemptLowerPriority");
        ops.push(add(ptr(["spec", "preemptionPolicy"]), json!(policy)));
    }

    // The acceptable classes that share the best class's label key (one key can be expressed as one `In`).
    let classes: Vec<&GpuClass> = match answer.accepted_classes.first() {
        Some(best) => answer
            .accepted_classes
            .iter()
            .filter(|c| c.node_label_key == best.node_label_key)
            .collect(),
        None => Vec::new(),
    };
    let mut label_keys: Vec<&str> = input.class_label_keys.iter().map(String::as_str).collect();
    label_keys.extend(
        answer
            .accepted_classes
            .iter()
            .map(|c| c.node_label_key.as_str()),
    );
    let pinned = pinned_class(pod, &label_keys).is_some();

    // Node placement: nodeSelector for one class, required node affinity for several.
    let mut new_affinity: BTreeMap<&str, Value> = BTreeMap::new();
    if !pinned && classes.len() == 1 {
        let c = classes[0];
        add_to_map(
            &mut ops,
            &["spec", "nodeSelector"],
            spec.node_selector.is_some(),
            vec![(c.node_label_key.clone(), json!(c.node_label_value))],
        );
    } else if !pinned && classes.len() > 1 {
        let mut values: Vec<&str> = Vec::new();
        for c in &classes {
            if !values.contains(&c.node_label_value.as_str()) {
                values.push(&c.node_label_value);
            }
        }
        let expr = json!({"key": classes[0].node_label_key, "operator": "In", "values": values});
        let preferred = json!({
            "weight": BEST_CLASS_WEIGHT,
            "preference": {"matchExpressions": [
                {"key": classes[0].node_label_key, "operator": "In", "values": [classes[0].node_label_value]}
            ]}
        });
        let node_aff = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let required = node_aff.and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
        let base = [
            "spec",
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        ];
        match required {
            Some(req) if !req.node_selector_terms.is_empty() => {
                for (i, term) in req.node_selector_terms.iter().enumerate() {
                    let idx = i.to_string();
                    let term_path = base.iter().copied().chain([
                        "nodeSelectorTerms",
                        idx.as_str(),
                        "matchExpressions",
                    ]);
                    let term_path: Vec<&str> = term_path.collect();
                    append_to_array(
                        &mut ops,
                        &term_path,
                        term.match_expressions.is_some(),
                        vec![expr.clone()],
                    );
                }
            }
            Some(_) => {
                let path: Vec<&str> = base.iter().copied().chain(["nodeSelectorTerms"]).collect();
                ops.push(add(ptr(path), json!([{"matchExpressions": [expr]}])));
            }
            None => {
                let req = json!({"nodeSelectorTerms": [{"matchExpressions": [expr]}]});
                if node_aff.is_some() {
                    ops.push(add(ptr(base), req));
                } else {
                    new_affinity.insert(
                        "nodeAffinity",
                        json!({
                            "requiredDuringSchedulingIgnoredDuringExecution": req,
                            "preferredDuringSchedulingIgnoredDuringExecution": [preferred.clone()]
                        }),
                    );
                }
            }
        }
        // The best class first: a preferred term, so the scheduler picks it when it can.
        if let Some(n) = node_aff {
            append_to_array(
                &mut ops,
                &[
                    "spec",
                    "affinity",
                    "nodeAffinity",
                    "preferredDuringSchedulingIgnoredDuringExecution",
                ],
                n.preferred_during_scheduling_ignored_during_execution
                    .is_some(),
                vec![preferred],
            );
        }
    }

    // spec.tolerations: one per distinct taint key of the chosen classes, unless already tolerated.
    let existing_tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    let mut new_tolerations: Vec<Value> = Vec::new();
    let mut seen_keys: Vec<&str> = Vec::new();
    for c in &classes {
        let key = c.taint_key.as_str();
        if key.is_empty()
            || seen_keys.contains(&key)
            || existing_tolerations.iter().any(|t| tolerates(t, key))
        {
            continue;
        }
        seen_keys.push(key);
        new_tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
    }
    append_to_array(
        &mut ops,
        &["spec", "tolerations"],
        spec.tolerations.is_some(),
        new_tolerations,
    );

    // spec.affinity.podAntiAffinity: preferred terms keeping job types that interfere off this node.
    let terms: Vec<Value> = avoid_terms(answer, spec.affinity.as_ref());
    if !terms.is_empty() {
        let anti = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref());
        match anti {
            Some(a) => append_to_array(
                &mut ops,
                &[
                    "spec",
                    "affinity",
                    "podAntiAffinity",
                    "preferredDuringSchedulingIgnoredDuringExecution",
                ],
                a.preferred_during_scheduling_ignored_during_execution
                    .is_some(),
                terms,
            ),
            None => {
                let value = json!({"preferredDuringSchedulingIgnoredDuringExecution": terms});
                if spec.affinity.is_some() {
                    ops.push(add(ptr(["spec", "affinity", "podAntiAffinity"]), value));
                } else {
                    new_affinity.insert("podAntiAffinity", value);
                }
            }
        }
    }
    if !new_affinity.is_empty() {
        // The Pod has no affinity at all (else the parts above were added under the existing one).
        let value = Value::Object(
            new_affinity
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        if spec.affinity.is_some() {
            for (k, v) in value.as_object().into_iter().flatten() {
                ops.push(add(ptr(["spec", "affinity", k.as_str()]), v.clone()));
            }
        } else {
            ops.push(add(ptr(["spec", "affinity"]), value));
        }
    }
    ops
}

/// One preferred anti-affinity term per job type to avoid, skipping invalid names and terms already present.
fn avoid_terms(answer: &ScoreResponse, affinity: Option<&Affinity>) -> Vec<Value> {
    let existing: Vec<Value> = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| {
            terms
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for jt in &answer.avoid_job_types {
        if !is_label_value(jt) {
            continue;
        }
        let term = json!({
            "weight": ANTI_AFFINITY_WEIGHT,
            "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": LABEL_JOB_TYPE, "operator": "In", "values": [jt]}]},
                "topologyKey": HOSTNAME_TOPOLOGY
            }
        });
        if !existing.contains(&term) && !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_proto::scorer::v1::{GpuVendor, PriorityAssignment};
    use std::collections::HashMap;

    const KEY: &str = "gpu.nvidia.com/class";

    fn class(name: &str, taint: &str) -> GpuClass {
        GpuClass {
            name: name.into(),
            vendor: GpuVendor::Nvidia as i32,
            memory_gib: 80.0,
            node_label_key: KEY.into(),
            node_label_value: name.into(),
            relative_throughput: 1.0,
            price_per_hour: 2.0,
            taint_key: taint.into(),
        }
    }

    fn answer(classes: &[&str]) -> ScoreResponse {
        ScoreResponse {
            request_id: "uid".into(),
            accepted_classes: classes.iter().map(|c| class(c, "nvidia.com/gpu")).collect(),
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
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let input = PatchInput {
            pod: &pod,
            job_type,
            answer,
            class_label_keys: &[],
            now: now(),
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
            now: now(),
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

    #[test]
    fn decided_pod_is_left_alone() {
        let pod: Pod = serde_json::from_value(gpu_pod(
            json!({}),
            json!({"annotations": {ANN_DECIDED_AT: "2020-01-01T00:00:00Z"}}),
        ))
        .unwrap();
        let a = answer(&["A100-80GB"]);
        let input = PatchInput {
            pod: &pod,
            job_type: Some("x"),
            answer: &a,
            class_label_keys: &[],
            now: now(),
        };
        assert!(build_patch(&input, &classes_in_cluster()).is_empty());
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
            now: now(),
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
            now: now(),
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
            now: now(),
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
        a.accepted_classes[0].taint_key.clear();
        a.avoid_job_types = vec!["bad/value".into(), "".into()];
        let (ops, p) = run(gpu_pod(json!({}), json!({})), &a, Some("not a label"));
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
        assert_eq!(annotations(&p).len(), 4);
        assert_eq!(p.spec.unwrap().node_selector.unwrap().len(), 1);
    }

    #[test]
    fn score_text_is_short() {
        assert_eq!(score_text(73.0), "73");
        assert_eq!(score_text(73.5), "73.5");
        assert_eq!(score_text(0.0), "0");
        assert_eq!(score_text(100.0), "100");
    }
}
