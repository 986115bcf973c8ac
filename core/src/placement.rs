//! Where a Pod can land, as far as GPU classes go: read from its `nodeSelector`, required node affinity (on
//! every node label that identifies a class: ours, GPU Feature Discovery, cloud, Karpenter) and HAMi's GPU-type
//! annotations; and who else places it (`spec.nodeName`, Kueue).
//! Shared by the mutating webhook (is the Pod already placed inside its tier?) and the validating webhook
//! (does the Pod pin a class outside its tier?). Every term and every value is looked at: required node
//! affinity terms are ORed, the expressions of a term ANDed, and `In` lists several values.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, PodSpec};

use crate::names::placement::{
    HAMI_NOUSE_GPU_TYPE, HAMI_USE_GPU_TYPE, KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL,
};

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

/// The match expressions of each required node-affinity term.
pub(crate) fn required_terms(spec: &PodSpec) -> impl Iterator<Item = &[NodeSelectorRequirement]> {
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

/// Each catalog class with every node label that identifies it (its class label first, then GPU Feature
/// Discovery, cloud and Karpenter labels from the policy); a class may list several values of one key (nodes
/// of the class carry one of them).
pub type ClassLabels = [(String, Vec<(String, String)>)];

/// What the Pod itself says about its GPU class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnConstraint {
    /// Catalog classes the Pod's own constraints allow (possibly none).
    pub allowed: BTreeSet<String>,
    /// What constrains it, for annotations and messages, e.g. `nodeSelector nvidia.com/gpu.product`.
    pub sources: Vec<String>,
}

fn values_of<'c>(labels: &'c [(String, String)], key: &str) -> Vec<&'c str> {
    labels
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Can a node of a class with `labels` satisfy `e`? (`Gt`/`Lt` compare integers, e.g. `nvidia.com/gpu.memory`.)
fn class_matches(labels: &[(String, String)], e: &NodeSelectorRequirement) -> bool {
    let have = values_of(labels, &e.key);
    let want: Vec<&str> = e.values.iter().flatten().map(String::as_str).collect();
    let num = |v: &str| v.parse::<i64>().ok();
    match e.operator.as_str() {
        "In" => have.iter().any(|v| want.contains(v)),
        "NotIn" => have.is_empty() || !have.iter().all(|v| want.contains(v)),
        "Exists" => !have.is_empty(),
        "DoesNotExist" => have.is_empty(),
        "Gt" | "Lt" => {
            let Some(bound) = want.first().and_then(|v| num(v)) else {
                return false;
            };
            have.iter().filter_map(|v| num(v)).any(|v| {
                if e.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            })
        }
        _ => false,
    }
}

fn hami_types(pod: &Pod, key: &str) -> Option<Vec<String>> {
    let v = pod.metadata.annotations.as_ref()?.get(key)?;
    Some(
        v.split(',')
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect(),
    )
}

/// Does a class (by name or any of its label values) match one of HAMi's GPU-type substrings?
fn hami_matches(name: &str, labels: &[(String, String)], types: &[String]) -> bool {
    types.iter().any(|t| {
        name.to_ascii_lowercase().contains(t.as_str())
            || labels
                .iter()
                .any(|(_, v)| v.to_ascii_lowercase().contains(t.as_str()))
    })
}

/// The catalog classes a Pod's own constraints allow: `nodeSelector` and required node affinity on any
/// identifying label (terms ORed, expressions ANDed, every value of an `In`), and HAMi's GPU-type
/// annotations. `None` when nothing the Pod says narrows its GPU class.
pub fn own_constraint(pod: &Pod, classes: &ClassLabels) -> Option<OwnConstraint> {
    // A key the Pod uses identifies a class when some class has a label with it (looked up per key: most
    // Pods use none, and a list of every key would be built for each of them).
    let identifies = |key: &str| classes.iter().any(|(_, l)| l.iter().any(|(k, _)| k == key));
    // Every class until something the Pod says narrows it; built at the first narrowing only (most Pods
    // say nothing, and this runs for each of them).
    let every_class = || -> BTreeSet<String> { classes.iter().map(|(n, _)| n.clone()).collect() };
    let mut allowed: Option<BTreeSet<String>> = None;
    let mut sources: Vec<String> = Vec::new();
    let mut note = |s: String| {
        if !sources.contains(&s) {
            sources.push(s);
        }
    };
    if let Some(spec) = &pod.spec {
        for (k, v) in spec.node_selector.iter().flatten() {
            if identifies(k) {
                allowed.get_or_insert_with(every_class).retain(|c| {
                    classes
                        .iter()
                        .any(|(n, l)| n == c && values_of(l, k).contains(&v.as_str()))
                });
                note(format!("nodeSelector {k}"));
            }
        }
        let mut terms = required_terms(spec).peekable();
        if terms.peek().is_some() {
            let mut union: BTreeSet<String> = BTreeSet::new();
            let mut open = false;
            let mut term_sources = Vec::new();
            for term in terms {
                let exprs: Vec<&NodeSelectorRequirement> =
                    term.iter().filter(|e| identifies(&e.key)).collect();
                if exprs.is_empty() {
                    open = true;
                    continue;
                }
                for e in &exprs {
                    term_sources.push(format!("nodeAffinity {} {}", e.key, e.operator));
                }
                union.extend(
                    classes
                        .iter()
                        .filter(|(_, l)| exprs.iter().all(|e| class_matches(l, e)))
                        .map(|(n, _)| n.clone()),
                );
            }
            if !open {
                allowed
                    .get_or_insert_with(every_class)
                    .retain(|c| union.contains(c));
                for s in term_sources {
                    note(s);
                }
            }
        }
    }
    if let Some(types) = hami_types(pod, HAMI_USE_GPU_TYPE) {
        allowed.get_or_insert_with(every_class).retain(|c| {
            classes
                .iter()
                .any(|(n, l)| n == c && hami_matches(n, l, &types))
        });
        note(format!("annotation {HAMI_USE_GPU_TYPE}"));
    }
    if let Some(types) = hami_types(pod, HAMI_NOUSE_GPU_TYPE) {
        allowed.get_or_insert_with(every_class).retain(|c| {
            !classes
                .iter()
                .any(|(n, l)| n == c && hami_matches(n, l, &types))
        });
        note(format!("annotation {HAMI_NOUSE_GPU_TYPE}"));
    }
    (!sources.is_empty()).then(|| OwnConstraint {
        allowed: allowed.unwrap_or_else(every_class),
        sources,
    })
}

/// The catalog classes a Pod's DRA claims allow: a catalog DeviceClass (`h100-80gb.gpu-admission.io`)
/// takes devices of one class only, so the Pod can run only on that class's nodes (all of them, for
/// several: a node is of one class). `None` when no claim names one, or when a claim also takes devices of
/// another GPU DeviceClass (a vendor's, whose selectors `/validate-pod` and the claim webhook judge).
pub fn claim_constraint(
    device_classes: &[String],
    rules: &crate::pod::gpu_resources::GpuResources,
) -> Option<OwnConstraint> {
    let mut allowed: Option<BTreeSet<String>> = None;
    let mut sources = Vec::new();
    for dc in device_classes {
        let class = rules.catalog_class_of(dc)?;
        let only: BTreeSet<String> = [class.to_string()].into();
        allowed = Some(match allowed {
            None => only,
            Some(a) => a.intersection(&only).cloned().collect(),
        });
        sources.push(format!("DRA DeviceClass {dc}"));
    }
    Some(OwnConstraint {
        allowed: allowed?,
        sources,
    })
}

impl OwnConstraint {
    /// Both constraints at once: the classes both allow.
    pub fn and(self, other: Option<OwnConstraint>) -> OwnConstraint {
        match other {
            None => self,
            Some(o) => OwnConstraint {
                allowed: self.allowed.intersection(&o.allowed).cloned().collect(),
                sources: self.sources.into_iter().chain(o.sources).collect(),
            },
        }
    }
}

/// Who else decides where the Pod runs, so that we add priority and annotations but no placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacedBy {
    /// `spec.nodeName` is set: the scheduler is bypassed.
    NodeName,
    /// Kueue admits the Pod and sets its flavor's node selector then (queue-name label or Kueue's
    /// scheduling gate).
    Kueue,
}

impl PlacedBy {
    pub fn of(pod: &Pod) -> Option<Self> {
        let spec = pod.spec.as_ref();
        if spec
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            return Some(Self::NodeName);
        }
        let queued = pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(KUEUE_QUEUE_LABEL));
        let gated = spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.name == KUEUE_ADMISSION_GATE));
        (queued || gated).then_some(Self::Kueue)
    }

    /// The value of the `placement` annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeName => "node-name",
            Self::Kueue => "kueue",
        }
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

    fn catalog() -> Vec<(String, Vec<(String, String)>)> {
        let c = |name: &str, product: &str, mem: &str, gke: &str| {
            (
                name.to_string(),
                vec![
                    (KEY.to_string(), name.to_string()),
                    ("nvidia.com/gpu.product".to_string(), product.to_string()),
                    ("nvidia.com/gpu.memory".to_string(), mem.to_string()),
                    (
                        "cloud.google.com/gke-accelerator".to_string(),
                        gke.to_string(),
                    ),
                ],
            )
        };
        vec![
            c(
                "H100-80GB",
                "NVIDIA-H100-80GB-HBM3",
                "81559",
                "nvidia-h100-80gb",
            ),
            c(
                "A100-80GB",
                "NVIDIA-A100-SXM4-80GB",
                "81920",
                "nvidia-a100-80gb",
            ),
            c(
                "A100-40GB",
                "NVIDIA-A100-SXM4-40GB",
                "40960",
                "nvidia-tesla-a100",
            ),
            c("L4-24GB", "NVIDIA-L4", "23034", "nvidia-l4"),
        ]
    }

    fn own(pod: serde_json::Value) -> Option<Vec<String>> {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        own_constraint(&pod, &catalog()).map(|o| o.allowed.into_iter().collect())
    }

    fn names(n: &[&str]) -> Option<Vec<String>> {
        let mut v: Vec<String> = n.iter().map(|s| s.to_string()).collect();
        v.sort();
        Some(v)
    }

    #[test]
    fn every_identifying_label_constrains() {
        let pod = |spec: serde_json::Value| {
            let mut spec = spec;
            spec["containers"] = json!([{"name": "c"}]);
            json!({"metadata": {}, "spec": spec})
        };
        assert_eq!(own(pod(json!({}))), None);
        assert_eq!(own(pod(json!({"nodeSelector": {"zone": "a"}}))), None);
        assert_eq!(
            own(pod(
                json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}})
            )),
            names(&["A100-80GB"])
        );
        assert_eq!(
            own(pod(
                json!({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})
            )),
            names(&["L4-24GB"])
        );
        // A multi-value In is a choice among all its values.
        assert_eq!(
            own(pod(affinity(json!([{"matchExpressions": [
                {"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]}]}])))),
            names(&["A100-80GB", "H100-80GB"])
        );
        // Gt on GFD's memory label (MiB).
        assert_eq!(
            own(pod(affinity(json!([{"matchExpressions": [
                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["80000"]}]}])))),
            names(&["A100-80GB", "H100-80GB"])
        );
        // NotIn on a product leaves the others; an unknown value allows nothing.
        assert_eq!(
            own(pod(affinity(json!([{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-L4"]}]}])))),
            names(&["A100-40GB", "A100-80GB", "H100-80GB"])
        );
        assert_eq!(own(pod(json!({"nodeSelector": {KEY: ""}}))), names(&[]));
        assert_eq!(own(pod(json!({"nodeSelector": {KEY: "B200"}}))), names(&[]));
        // One open term leaves the class open.
        assert_eq!(
            own(pod(affinity(json!([
                {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}])))),
            None
        );
    }

    #[test]
    fn hami_gpu_type_annotations() {
        let pod = |ann: serde_json::Value| json!({"metadata": {"annotations": ann}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(
            own(pod(json!({HAMI_USE_GPU_TYPE: "A100"}))),
            names(&["A100-40GB", "A100-80GB"])
        );
        assert_eq!(
            own(pod(json!({HAMI_NOUSE_GPU_TYPE: "a100, L4"}))),
            names(&["H100-80GB"])
        );
    }

    #[test]
    fn node_name_and_kueue_place_the_pod_themselves() {
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        assert_eq!(
            PlacedBy::of(&pod(
                json!({"metadata": {}, "spec": {"nodeName": "n1", "containers": []}})
            )),
            Some(PlacedBy::NodeName)
        );
        assert_eq!(
            PlacedBy::of(&pod(
                json!({"metadata": {"labels": {KUEUE_QUEUE_LABEL: "q"}}, "spec": {"containers": []}})
            )),
            Some(PlacedBy::Kueue)
        );
        assert_eq!(
            PlacedBy::of(&pod(json!({"metadata": {}, "spec": {"containers": [],
                "schedulingGates": [{"name": KUEUE_ADMISSION_GATE}]}}))),
            Some(PlacedBy::Kueue)
        );
        assert_eq!(
            PlacedBy::of(&pod(
                json!({"metadata": {}, "spec": {"nodeName": "", "containers": []}})
            )),
            None
        );
    }
}
