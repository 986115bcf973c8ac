//! What the patch constrains: the PriorityClass, the node placement on the target classes, the GPU toleration
//! and the preferred anti-affinity against job types to avoid.

use gpu_admission_policy::GpuClass;
use gpu_admission_proto::scorer::v1::ScoreResponse;
use k8s_openapi::api::core::v1::{Affinity, PodSpec, Toleration};
use serde_json::Value;

use super::ops::{add_to_map, append_to_array};
use super::paths;
use super::plan::Plan;
use super::shapes::{
    AvoidTerm, In, NewAffinity, NodeAffinity, NodeSelector, PodAntiAffinity, PreferredClass,
    SelectorTerm, Toleration as Tolerate,
};
use crate::pod::features::is_label_value;
use crate::priority_class::PriorityClassFacts;
use crate::review::{Patch, to_json};

/// spec.priorityClassName + spec.priority + spec.preemptionPolicy, together or not at all.
pub(super) fn set_priority(patch: &mut Patch, plan: &Plan<'_>) {
    if let Some(facts) = &plan.priority {
        set_priority_class(patch, facts);
    }
}

/// `spec.priorityClassName` and the class's own `priority` and `preemptionPolicy` (the apiserver rejects a
/// class name whose values differ); each `add` replaces what the Pod has.
pub(crate) fn set_priority_class(patch: &mut Patch, facts: &PriorityClassFacts) {
    patch.add(paths::PRIORITY_CLASS_NAME, facts.name.as_str());
    patch.add(paths::PRIORITY, &facts.value);
    let policy = facts
        .preemption_policy
        .as_deref()
        .unwrap_or("PreemptLowerPriority");
    patch.add(paths::PREEMPTION_POLICY, policy);
}

/// Node placement: `nodeSelector` for one class on a Pod without a class selector, else required node
/// affinity on every term (ANDed with whatever the term says) and a preferred term for the best class.
pub(super) fn place<'p>(
    patch: &mut Patch,
    spec: &PodSpec,
    plan: &'p Plan<'_>,
    new_affinity: &mut NewAffinity<'p>,
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
            patch,
            paths::NODE_SELECTOR,
            spec.node_selector.is_some(),
            &[(c.node_label_key.as_str(), c.node_label_value.as_str())],
        );
        return;
    }
    let mut values: Vec<&str> = Vec::new();
    for c in classes {
        if !values.contains(&c.node_label_value.as_str()) {
            values.push(&c.node_label_value);
        }
    }
    let best = &classes[0];
    let expr = In::new(&best.node_label_key, values);
    let preferred = PreferredClass::best(&best.node_label_key, &best.node_label_value);
    let node_aff = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let required = node_aff.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    });
    match required {
        Some(req) if !req.node_selector_terms.is_empty() => {
            for (i, term) in req.node_selector_terms.iter().enumerate() {
                let mut term_path = paths::NODE_SELECTOR_TERMS.to_buf();
                term_path.push_back(i);
                term_path.push_back("matchExpressions");
                append_to_array(
                    patch,
                    &term_path,
                    term.match_expressions.is_some(),
                    std::slice::from_ref(&expr),
                );
            }
        }
        Some(_) => {
            let terms = [SelectorTerm {
                match_expressions: vec![expr],
            }];
            patch.add(paths::NODE_SELECTOR_TERMS, terms.as_slice());
        }
        None => {
            let required = NodeSelector {
                node_selector_terms: vec![SelectorTerm {
                    match_expressions: vec![expr],
                }],
            };
            if node_aff.is_some() {
                patch.add(paths::REQUIRED_NODE_AFFINITY, &required);
            } else {
                new_affinity.node_affinity = Some(NodeAffinity {
                    preferred: vec![preferred.clone()],
                    required,
                });
            }
        }
    }
    // The best class first: a preferred term, so the scheduler picks it when it can.
    if let Some(n) = node_aff {
        append_to_array(
            patch,
            paths::PREFERRED_NODE_AFFINITY,
            n.preferred_during_scheduling_ignored_during_execution
                .is_some(),
            &[preferred],
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
pub(super) fn tolerate<'c>(
    patch: &mut Patch,
    spec: &PodSpec,
    classes: impl IntoIterator<Item = &'c GpuClass>,
) {
    let existing = spec.tolerations.as_deref().unwrap_or(&[]);
    let mut new_tolerations: Vec<Tolerate<'_>> = Vec::new();
    let mut seen_keys: Vec<&str> = Vec::new();
    for c in classes {
        let Some(key) = c.taint_key.as_deref() else {
            continue;
        };
        if key.is_empty() || seen_keys.contains(&key) || existing.iter().any(|t| tolerates(t, key))
        {
            continue;
        }
        seen_keys.push(key);
        new_tolerations.push(Tolerate::no_schedule(key));
    }
    append_to_array(
        patch,
        paths::TOLERATIONS,
        spec.tolerations.is_some(),
        &new_tolerations,
    );
}

/// spec.affinity.podAntiAffinity: preferred terms keeping job types that interfere off this node.
pub(super) fn avoid_neighbours<'a>(
    patch: &mut Patch,
    spec: &PodSpec,
    answer: &'a ScoreResponse,
    new_affinity: &mut NewAffinity<'a>,
) {
    let terms = avoid_terms(answer, spec.affinity.as_ref());
    if terms.is_empty() {
        return;
    }
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref());
    match anti {
        Some(a) => append_to_array(
            patch,
            paths::PREFERRED_POD_ANTI_AFFINITY,
            a.preferred_during_scheduling_ignored_during_execution
                .is_some(),
            &terms,
        ),
        None => {
            let value = PodAntiAffinity { preferred: terms };
            if spec.affinity.is_some() {
                patch.add(paths::POD_ANTI_AFFINITY, &value);
            } else {
                new_affinity.pod_anti_affinity = Some(value);
            }
        }
    }
}

/// The affinity parts of a Pod that had no affinity at all, added as one object.
pub(super) fn add_new_affinity(patch: &mut Patch, spec: &PodSpec, new_affinity: NewAffinity<'_>) {
    if new_affinity.is_empty() {
        return;
    }
    if spec.affinity.is_some() {
        if let Some(node) = &new_affinity.node_affinity {
            patch.add(paths::NODE_AFFINITY, node);
        }
        if let Some(anti) = &new_affinity.pod_anti_affinity {
            patch.add(paths::POD_ANTI_AFFINITY, anti);
        }
    } else {
        patch.add(paths::AFFINITY, &new_affinity);
    }
}

/// One preferred anti-affinity term per job type to avoid, skipping invalid names and terms already present.
pub(super) fn avoid_terms<'a>(
    answer: &'a ScoreResponse,
    affinity: Option<&Affinity>,
) -> Vec<AvoidTerm<'a>> {
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
    let mut out: Vec<AvoidTerm<'a>> = Vec::new();
    for jt in &answer.avoid_job_types {
        if !is_label_value(jt) || out.iter().any(|t| t.avoided() == jt) {
            continue;
        }
        let term = AvoidTerm::job_type(jt);
        let present = !existing.is_empty()
            && serde_json::from_str::<Value>(&to_json(&term)).is_ok_and(|t| existing.contains(&t));
        if !present {
            out.push(term);
        }
    }
    out
}
