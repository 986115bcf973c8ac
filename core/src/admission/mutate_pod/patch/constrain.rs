//! What the patch constrains: the PriorityClass, the node placement on the target classes, the GPU toleration
//! and the preferred anti-affinity against job types to avoid.

use std::collections::BTreeMap;

use gpu_admission_proto::scorer::v1::{GpuClass, ScoreResponse};
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{Affinity, PodSpec, Toleration};
use serde_json::{Value, json};

use super::ops::{add, add_to_map, append_to_array, ptr};
use super::plan::Plan;
use super::{ANTI_AFFINITY_WEIGHT, BEST_CLASS_WEIGHT};
use crate::names::decision::{HOSTNAME_TOPOLOGY, LABEL_JOB_TYPE};
use crate::pod::features::is_label_value;

/// spec.priorityClassName + spec.priority + spec.preemptionPolicy, together or not at all.
pub(super) fn set_priority(ops: &mut Vec<PatchOperation>, plan: &Plan<'_>) {
    if let Some(facts) = &plan.priority {
        ops.push(add(ptr(["spec", "priorityClassName"]), json!(facts.name)));
        ops.push(add(ptr(["spec", "priority"]), json!(facts.value)));
        let policy = facts
            .preemption_policy
            .as_deref()
            .unwrap_or("PreemptLowerPriority");
        ops.push(add(ptr(["spec", "preemptionPolicy"]), json!(policy)));
    }
}

/// Node placement: `nodeSelector` for one class on a Pod without a class selector, else required node
/// affinity on every term (ANDed with whatever the term says) and a preferred term for the best class.
pub(super) fn place(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    plan: &Plan<'_>,
    new_affinity: &mut BTreeMap<&'static str, Value>,
) {
    let classes = &plan.targets;
    let selects_a_class = spec
        .node_selector
        .iter()
        .flatten()
        .any(|(k, _)| plan.label_keys.contains(&k.as_str()));
    if classes.len() == 1 && !selects_a_class {
        let c = &classes[0];
        add_to_map(
            ops,
            &["spec", "nodeSelector"],
            spec.node_selector.is_some(),
            vec![(c.node_label_key.clone(), json!(c.node_label_value))],
        );
        return;
    }
    let mut values: Vec<&str> = Vec::new();
    for c in classes {
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
                let term_path: Vec<&str> = base
                    .iter()
                    .copied()
                    .chain(["nodeSelectorTerms", idx.as_str(), "matchExpressions"])
                    .collect();
                append_to_array(
                    ops,
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
            ops,
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

/// Does an existing toleration already let the Pod onto nodes tainted `key:NoSchedule` (any value)?
pub(super) fn tolerates(existing: &Toleration, key: &str) -> bool {
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

/// spec.tolerations: one per distinct taint key of the classes, unless already tolerated.
pub(super) fn tolerate(ops: &mut Vec<PatchOperation>, spec: &PodSpec, classes: &[GpuClass]) {
    let existing = spec.tolerations.as_deref().unwrap_or(&[]);
    let mut new_tolerations: Vec<Value> = Vec::new();
    let mut seen_keys: Vec<&str> = Vec::new();
    for c in classes {
        let key = c.taint_key.as_str();
        if key.is_empty() || seen_keys.contains(&key) || existing.iter().any(|t| tolerates(t, key))
        {
            continue;
        }
        seen_keys.push(key);
        new_tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
    }
    append_to_array(
        ops,
        &["spec", "tolerations"],
        spec.tolerations.is_some(),
        new_tolerations,
    );
}

/// spec.affinity.podAntiAffinity: preferred terms keeping job types that interfere off this node.
pub(super) fn avoid_neighbours(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    answer: &ScoreResponse,
    new_affinity: &mut BTreeMap<&'static str, Value>,
) {
    let terms: Vec<Value> = avoid_terms(answer, spec.affinity.as_ref());
    if terms.is_empty() {
        return;
    }
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref());
    match anti {
        Some(a) => append_to_array(
            ops,
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

/// The affinity parts of a Pod that had no affinity at all, added as one object.
pub(super) fn add_new_affinity(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    new_affinity: BTreeMap<&str, Value>,
) {
    if new_affinity.is_empty() {
        return;
    }
    if spec.affinity.is_some() {
        for (k, v) in new_affinity {
            ops.push(add(ptr(["spec", "affinity", k]), v));
        }
    } else {
        let value = Value::Object(
            new_affinity
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        ops.push(add(ptr(["spec", "affinity"]), value));
    }
}

/// One preferred anti-affinity term per job type to avoid, skipping invalid names and terms already present.
pub(super) fn avoid_terms(answer: &ScoreResponse, affinity: Option<&Affinity>) -> Vec<Value> {
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
