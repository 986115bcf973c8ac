//! Where a Pod can land, as far as GPU classes go: read from its `nodeSelector` and required node affinity.
//! Shared by the mutating webhook (is the Pod already placed inside its tier?) and the validating webhook
//! (does the Pod pin a class outside its tier?). Every term and every value is looked at: required node
//! affinity terms are ORed, the expressions of a term ANDed, and `In` lists several values.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec};

/// The class label values a Pod names on `keys` (catalog class label keys): its `nodeSelector` entries and
/// every value of every required node-affinity `In` expression, in order of appearance, without repeats.
/// These are the classes the Pod asks for itself.
pub fn named_classes<'p>(spec: &'p PodSpec, keys: &[&str]) -> Vec<(&'p str, &'p str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut push = |k: &'p str, v: &'p str| {
        if !out.contains(&(k, v)) {
            out.push((k, v));
        }
    };
    for (k, v) in spec.node_selector.iter().flatten() {
        if keys.contains(&k.as_str()) {
            push(k, v);
        }
    }
    for e in required_terms(spec).flat_map(|t| t.iter()) {
        if e.operator == "In" && keys.contains(&e.key.as_str()) {
            for v in e.values.iter().flatten() {
                push(&e.key, v);
            }
        }
    }
    out
}

fn required_terms(spec: &PodSpec) -> impl Iterator<Item = &[NodeSelectorRequirement]> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|t| t.match_expressions.as_deref().unwrap_or(&[]))
}

/// The class label values (on `keys`) a Pod can be scheduled onto, or `None` when some way of scheduling
/// it leaves the class open (no class constraint at all, or one ORed affinity term without one).
///
/// A term's `In` expressions on class keys are intersected; terms are united; a `nodeSelector` class entry
/// intersects the result. `NotIn`/`Exists` are not treated as constraints (they never narrow the set to
/// known values), so they leave a term open.
pub fn reachable_classes<'p>(
    spec: &'p PodSpec,
    keys: &[&str],
) -> Option<BTreeSet<(&'p str, &'p str)>> {
    let selector: Option<BTreeSet<(&str, &str)>> = {
        let s: BTreeSet<(&str, &str)> = spec
            .node_selector
            .iter()
            .flatten()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        (!s.is_empty()).then_some(s)
    };
    let mut terms = required_terms(spec).peekable();
    let from_affinity: Option<BTreeSet<(&str, &str)>> = if terms.peek().is_none() {
        None
    } else {
        let mut union = BTreeSet::new();
        let mut open = false;
        for term in terms {
            let mut term_set: Option<BTreeSet<(&str, &str)>> = None;
            for e in term
                .iter()
                .filter(|e| e.operator == "In" && keys.contains(&e.key.as_str()))
            {
                let values: BTreeSet<(&str, &str)> = e
                    .values
                    .iter()
                    .flatten()
                    .map(|v| (e.key.as_str(), v.as_str()))
                    .collect();
                term_set = Some(match term_set {
                    None => values,
                    // Two expressions on the same key intersect; on different keys a node would need both
                    // labels, which no catalog class has: nothing of either is reachable.
                    Some(prev) => prev.intersection(&values).copied().collect(),
                });
            }
            match term_set {
                Some(s) => union.extend(s),
                None => open = true,
            }
        }
        (!open).then_some(union)
    };
    match (selector, from_affinity) {
        (None, None) => None,
        (Some(s), None) | (None, Some(s)) => Some(s),
        (Some(s), Some(a)) => Some(s.intersection(&a).copied().collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "gpu.nvidia.com/class";

    fn spec(v: serde_json::Value) -> PodSpec {
        let mut v = v;
        v["containers"] = json!([{"name": "c"}]);
        serde_json::from_value(v).unwrap()
    }

    fn affinity(terms: serde_json::Value) -> serde_json::Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
    }

    fn set<'a>(values: &[&'a str]) -> Option<BTreeSet<(&'a str, &'a str)>> {
        Some(values.iter().map(|v| (KEY, *v)).collect())
    }

    #[test]
    fn node_selector_pin() {
        let s = spec(json!({"nodeSelector": {KEY: "H100-80GB", "zone": "a"}}));
        assert_eq!(named_classes(&s, &[KEY]), [(KEY, "H100-80GB")]);
        assert_eq!(reachable_classes(&s, &[KEY]), set(&["H100-80GB"]));
        assert_eq!(reachable_classes(&s, &["other/key"]), None);
    }

    #[test]
    fn every_value_of_a_multi_value_in_is_seen() {
        let s = spec(affinity(json!([{"matchExpressions": [
            {"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]}]}])));
        assert_eq!(
            named_classes(&s, &[KEY]),
            [(KEY, "L4-24GB"), (KEY, "H100-80GB")]
        );
        assert_eq!(
            reachable_classes(&s, &[KEY]),
            set(&["H100-80GB", "L4-24GB"])
        );
    }

    #[test]
    fn a_catch_all_term_ored_with_a_class_term_leaves_the_class_open() {
        let s = spec(affinity(json!([
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
        ])));
        assert_eq!(named_classes(&s, &[KEY]), [(KEY, "L4-24GB")]);
        assert_eq!(reachable_classes(&s, &[KEY]), None);
    }

    #[test]
    fn terms_unite_expressions_intersect_and_the_selector_narrows() {
        let s = spec(affinity(json!([
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]},
                                  {"key": KEY, "operator": "In", "values": ["L4-24GB", "A100-80GB"]}]},
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]}
        ])));
        assert_eq!(
            reachable_classes(&s, &[KEY]),
            set(&["A100-80GB", "L4-24GB"])
        );
        let mut s2 = s.clone();
        s2.node_selector = Some([(KEY.to_string(), "H100-80GB".to_string())].into());
        assert_eq!(reachable_classes(&s2, &[KEY]), set(&[]));
        // NotIn is no constraint.
        let s = spec(affinity(json!([{"matchExpressions": [
            {"key": KEY, "operator": "NotIn", "values": ["H100-80GB"]}]}])));
        assert_eq!(reachable_classes(&s, &[KEY]), None);
        assert!(named_classes(&s, &[KEY]).is_empty());
    }
}
