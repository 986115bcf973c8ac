//! The cluster-wide instance and a restricted instance's record. The cluster-wide `/mutate-pod` is called
//! last (its registration sorts after every restricted one), so it sees what a restricted instance decided.
//! It leaves that decision alone only while the decision can stand: the namespace's Lease is held (a
//! restricted instance answers for it now), the record says the restricted scorer answered (no `fallback`),
//! and the class it chose is inside the namespace's tier as the cluster-wide instance reads the label now.
//! Otherwise it **takes the Pod over** ([`take_over`]): the restricted record and the class constraint the
//! record says the restricted instance added are removed ([`strip`]), and the Pod is decided here as if it
//! had just come, so that no Pod stays on a fallback while the cluster's scorer answers, and no Pod is
//! rejected because two instances read two tiers. The Pod's own constraints are never removed.

use std::collections::BTreeMap;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelectorTerm, Pod, PodSpec};
use kube_core::admission::AdmissionRequest;

use super::WhoScores;
use crate::admission::mutate_pod::triage;
use crate::authority::Permission;
use crate::facts::Facts;
use crate::names::decision::*;
use crate::policy::PolicySnapshot;
use crate::tier_bound::{self, Breach};

/// Why the cluster-wide instance decides a Pod a restricted instance recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOver {
    /// No restricted instance holds the namespace's Lease now: the record is not one the cluster leaves the
    /// Pod to (an instance that gave the namespace back, or a record the Pod's author wrote).
    NotHeld,
    /// The record says the restricted instance's scorer did not answer (`fallback`).
    FellBack,
    /// The Pod as the restricted instance left it is outside the namespace's current tier.
    OutsideTier(Breach),
}

impl TakeOver {
    /// The log's and the metric's label.
    pub fn as_str(&self) -> &'static str {
        match self {
            TakeOver::NotHeld => "not_held",
            TakeOver::FellBack => "fell_back",
            TakeOver::OutsideTier(_) => "outside_tier",
        }
    }
}

/// A Pod the cluster-wide instance takes over: the request as if the Pod had come without the restricted
/// decision, and the operations that remove it (applied before the decision's own).
#[derive(Debug)]
pub struct TakenOver {
    pub why: TakeOver,
    pub request: AdmissionRequest<Pod>,
    pub ops: Vec<PatchOperation>,
}

impl TakenOver {
    /// The whole answer: these operations first, then the decision's (built on the stripped Pod).
    pub fn prefix(&self, answer: &mut crate::review::Answer) {
        let decided = answer.patch.operations();
        let mut patch = crate::review::Patch::from_operations(&self.ops);
        for op in &decided {
            patch.push(op);
        }
        answer.patch = patch;
    }
}

/// The record's `decided-by` names a restricted instance, and the record is a decision (`decided-at`).
pub fn restricted_record(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(ANN_DECIDED_AT)
            && a.get(ANN_DECIDED_BY)
                .is_some_and(|by| by.starts_with(super::RESTRICTED_PREFIX))
    })
}

/// Whether the cluster-wide instance (`who`: its rule for the namespace) takes over a Pod of `req` that
/// carries a restricted record; `None` for any other Pod, or one whose restricted decision stands.
pub fn take_over(
    req: &AdmissionRequest<Pod>,
    who: &WhoScores,
    facts: &Facts<'_>,
    policy: &PolicySnapshot,
) -> Option<TakeOver> {
    let pod = req.object.as_ref()?;
    if !restricted_record(pod) || *who == WhoScores::NotOurs {
        return None;
    }
    // Only a Pod this instance would score at all (a GPU Pod CREATE of a tiered namespace).
    let candidate = triage::triage_with(req, facts.tier_of, policy, facts.claim_templates).ok()?;
    if *who == WhoScores::Here {
        return Some(TakeOver::NotHeld);
    }
    let annotations = pod.metadata.annotations.as_ref()?;
    if annotations.contains_key(ANN_FALLBACK) {
        return Some(TakeOver::FellBack);
    }
    let rules = policy.tier_rules(&candidate.tier, candidate.namespace)?;
    let admin = facts
        .grants
        .allows(&Permission::Exempt(rules.tier.to_string()));
    if admin || !tier_bound::restricts(&rules, policy.catalog()) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    tier_bound::check(spec, &rules, policy.catalog(), facts.nodes)
        .err()
        .map(TakeOver::OutsideTier)
}

/// [`take_over`], with the request to decide and the operations that clear the restricted decision.
pub fn taken_over(
    req: &AdmissionRequest<Pod>,
    who: &WhoScores,
    facts: &Facts<'_>,
    policy: &PolicySnapshot,
) -> Option<TakenOver> {
    let why = take_over(req, who, facts, policy)?;
    let (pod, ops) = strip(req.object.as_ref()?, &class_keys(policy));
    let mut request = req.clone();
    request.object = Some(pod);
    Some(TakenOver { why, request, ops })
}

/// The node label keys that name a GPU class (the policy's class labels and the catalog's).
fn class_keys(policy: &PolicySnapshot) -> Vec<&str> {
    let mut keys: Vec<&str> = policy.class_label_keys.iter().map(String::as_str).collect();
    for c in policy.catalog() {
        if !c.node_label_key.is_empty() && !keys.contains(&c.node_label_key.as_str()) {
            keys.push(&c.node_label_key);
        }
    }
    keys
}

/// Every annotation of a decision record.
const RECORD: [&str; 12] = [
    ANN_PRIORITY_SCORE,
    ANN_GPU_CLASS,
    ANN_DECIDED_AT,
    ANN_POLICY_VERSION,
    ANN_STATE_DIGEST,
    ANN_DECIDED_BY,
    ANN_INFEASIBLE_REASON,
    ANN_PLACEMENT,
    ANN_ALTERNATIVES,
    ANN_EXPLORED,
    ANN_RECOMMENDED_CLASS,
    ANN_FALLBACK,
];

/// The Pod without the restricted decision, and the operations that make it so: the record's annotations
/// removed, and when the record says the instance placed the Pod (`placement: gpu-admission`, alone or
/// bounding someone else's placement) the class constraint it added: the `nodeSelector` entries and the
/// required and preferred node-affinity expressions on the class label keys. A record whose placement is
/// the Pod's own (`pod: …`) keeps every constraint: those were the Pod's.
pub fn strip(pod: &Pod, class_keys: &[&str]) -> (Pod, Vec<PatchOperation>) {
    let mut out = pod.clone();
    let mut ops = Vec::new();
    let annotations = out.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let placed_here = annotations
        .get(ANN_PLACEMENT)
        .is_some_and(|p| p.ends_with("gpu-admission"));
    annotations.retain(|k, _| !RECORD.contains(&k.as_str()));
    ops.push(op("add", "/metadata/annotations", json(&*annotations)));
    if placed_here && let Some(spec) = out.spec.as_mut() {
        strip_class_constraint(spec, class_keys, &mut ops);
    }
    (out, ops)
}

fn strip_class_constraint(spec: &mut PodSpec, keys: &[&str], ops: &mut Vec<PatchOperation>) {
    if let Some(selector) = spec.node_selector.as_mut() {
        let before = selector.len();
        selector.retain(|k, _| !keys.contains(&k.as_str()));
        if selector.len() != before {
            ops.push(op("add", "/spec/nodeSelector", json(&*selector)));
        }
    }
    let Some(node) = spec
        .affinity
        .as_mut()
        .and_then(|a| a.node_affinity.as_mut())
    else {
        return;
    };
    let before = node.clone();
    let on_class = |key: &str| keys.contains(&key);
    if let Some(required) = node
        .required_during_scheduling_ignored_during_execution
        .as_mut()
    {
        for term in &mut required.node_selector_terms {
            strip_term(term, &on_class);
        }
        // A term left empty selects nothing: the terms were all the class constraint's.
        if required.node_selector_terms.iter().all(term_is_empty) {
            node.required_during_scheduling_ignored_during_execution = None;
        }
    }
    if let Some(preferred) = node
        .preferred_during_scheduling_ignored_during_execution
        .as_mut()
    {
        for p in preferred.iter_mut() {
            strip_term(&mut p.preference, &on_class);
        }
        preferred.retain(|p| !term_is_empty(&p.preference));
        if preferred.is_empty() {
            node.preferred_during_scheduling_ignored_during_execution = None;
        }
    }
    if *node != before {
        let value = if *node == NodeAffinity::default() {
            serde_json::json!({})
        } else {
            json(&*node)
        };
        ops.push(op("add", "/spec/affinity/nodeAffinity", value));
    }
}

fn strip_term(term: &mut NodeSelectorTerm, on_class: &impl Fn(&str) -> bool) {
    if let Some(exprs) = term.match_expressions.as_mut() {
        exprs.retain(|e| !(e.operator == "In" && on_class(&e.key)));
        if exprs.is_empty() {
            term.match_expressions = None;
        }
    }
}

fn term_is_empty(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && term.match_fields.as_ref().is_none_or(Vec::is_empty)
}

fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

fn op(kind: &str, path: &str, value: serde_json::Value) -> PatchOperation {
    serde_json::from_value(serde_json::json!({"op": kind, "path": path, "value": value}))
        .expect("a well-formed patch operation")
}

#[cfg(test)]
mod tests;
