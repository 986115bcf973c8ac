//! A placement oracle for the tests: which Nodes a stored Pod can run on, by the predicates kube-scheduler and
//! the kubelet apply. Written from the Kubernetes documentation and `k8s.io/component-helpers` (node
//! affinity) and `k8s.io/api` (`Toleration.ToleratesTaint`), on k8s-openapi types only: it shares no code with
//! core's placement, so a mistake there is not repeated here.
//!
//! - `spec.nodeName` bypasses the scheduler; the kubelet still admits the Pod only if its `nodeSelector` and
//!   required node affinity match the Node and it tolerates the Node's `NoExecute` taints;
//! - otherwise kube-scheduler (`schedulerName` unset or `default-scheduler`) needs the `nodeSelector`, the
//!   required node affinity and every `NoSchedule`/`NoExecute` taint tolerated (and a cordoned Node's
//!   `node.kubernetes.io/unschedulable` taint);
//! - any other scheduler (HAMi's, Volcano, a user's own) is trusted with nothing: it may bind the Pod to any
//!   Node the kubelet admits.
//!
//! Scheduling gates only delay scheduling (a gated Pod's placement can only be narrowed), so they change
//! nothing here. [`default_policy_nodes`] is a cluster with a Node of every class of the shipped policy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Taint, Toleration,
};
use serde::Deserialize;
use serde_json::json;

/// The names of the Nodes of `nodes` the Pod can run on (see the module documentation), in `nodes`' order.
pub fn reachable_nodes(pod: &Pod, nodes: &[Node]) -> Vec<String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let pinned = spec.node_name.as_deref().filter(|n| !n.is_empty());
    let default_scheduler = matches!(
        spec.scheduler_name.as_deref(),
        None | Some("") | Some("default-scheduler")
    );
    nodes
        .iter()
        .filter(|node| match pinned {
            Some(name) => node_name(node) == name && kubelet_admits(&spec, node),
            None if default_scheduler => scheduler_fits(&spec, node),
            None => kubelet_admits(&spec, node),
        })
        .map(|node| node_name(node).to_string())
        .collect()
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

/// The kubelet's admission of a Pod bound to `node`: its node selector and required affinity match, and it
/// tolerates every `NoExecute` taint (the kubelet ignores `NoSchedule`).
pub fn kubelet_admits(spec: &PodSpec, node: &Node) -> bool {
    selects(spec, node) && tolerates_all(spec, node, |effect| effect == "NoExecute")
}

/// kube-scheduler's filters: node selector, required affinity, `NoSchedule` and `NoExecute` taints, and a
/// cordoned Node.
pub fn scheduler_fits(spec: &PodSpec, node: &Node) -> bool {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let cordon = Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    selects(spec, node)
        && tolerates_all(spec, node, |effect| {
            effect == "NoSchedule" || effect == "NoExecute"
        })
        && (!cordoned || tolerations.iter().any(|t| tolerates(t, &cordon)))
}

/// The `nodeSelector` and the required node affinity both match the Node.
pub fn selects(spec: &PodSpec, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector_matches = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    selector_matches && required.is_none_or(|r| node_selector_matches(r, node))
}

/// A required node selector: its terms are ORed; a term with no expression and no field selects nothing,
/// so a selector without a non-empty term selects no Node.
pub fn node_selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    selector
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, node))
}

/// One term: every label expression and every field expression match (ANDed). An empty term matches
/// nothing; a term with an expression Kubernetes cannot parse (unknown operator, wrong number of values, a
/// `Gt` bound that is not an integer, an unsupported field) matches nothing either. Label keys and values
/// are not checked for syntax (the apiserver refuses such a Pod): read as written, they can only make more
/// Nodes reachable, never fewer.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    expressions
        .iter()
        .all(|r| label_requirement_matches(r, &labels) == Some(true))
        && fields
            .iter()
            .all(|r| field_requirement_matches(r, node) == Some(true))
}

/// A label expression against a Node's labels: `None` when Kubernetes would refuse to parse it (the whole
/// term then selects nothing).
pub fn label_requirement_matches(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let values = r.values.as_deref().unwrap_or(&[]);
    let label = labels.get(&r.key);
    match r.operator.as_str() {
        "In" if !values.is_empty() => Some(label.is_some_and(|l| values.contains(l))),
        "NotIn" if !values.is_empty() => Some(label.is_none_or(|l| !values.contains(l))),
        "Exists" if values.is_empty() => Some(label.is_some()),
        "DoesNotExist" if values.is_empty() => Some(label.is_none()),
        op @ ("Gt" | "Lt") if values.len() == 1 => {
            let bound: i64 = values[0].parse().ok()?;
            let Some(value) = label.and_then(|l| l.parse::<i64>().ok()) else {
                return Some(false);
            };
            Some(if op == "Gt" {
                value > bound
            } else {
                value < bound
            })
        }
        _ => None,
    }
}

/// A field expression: `In` / `NotIn` with exactly one value; the only field a Node has is `metadata.name`
/// (any other key reads as empty). `None` when Kubernetes would refuse to parse it.
pub fn field_requirement_matches(r: &NodeSelectorRequirement, node: &Node) -> Option<bool> {
    let [value] = r.values.as_deref().unwrap_or(&[]) else {
        return None;
    };
    let field = if r.key == "metadata.name" {
        node_name(node)
    } else {
        ""
    };
    match r.operator.as_str() {
        "In" => Some(field == value),
        "NotIn" => Some(field != value),
        _ => None,
    }
}

/// Every taint of the Node whose effect `counts` is tolerated by one of the Pod's tolerations.
fn tolerates_all(spec: &PodSpec, node: &Node, counts: impl Fn(&str) -> bool) -> bool {
    let tolerations = spec.tolerations.as_deref().unwrap_or(&[]);
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|taint| counts(&taint.effect))
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// `Toleration.ToleratesTaint`: an empty effect matches every effect, an empty key every key; operator
/// `Exists` matches any value, `Equal` (or none) the same value; any other operator tolerates nothing.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    let key = t.key.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// The shipped default policy (`deploy/kustomize/base/policy/default-policy.yaml`).
pub const DEFAULT_POLICY: &str =
    include_str!("../../deploy/kustomize/base/policy/default-policy.yaml");

/// Name of the CPU-only Node of [`default_policy_nodes`].
pub const CPU_NODE: &str = "cpu-1";
/// Name of the H100 Node that lacks the catalog's class label (GPU Feature Discovery's, GKE's and
/// Karpenter's labels and the GPU taint, but no `gpu.nvidia.com/class`).
pub const UNCLASSED_H100_NODE: &str = "h100-unclassed-1";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyNodes {
    node_label_key: String,
    catalog: Vec<CatalogClass>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CatalogClass {
    name: String,
    node_label_key: Option<String>,
    taint_key: Option<String>,
    #[serde(default)]
    node_labels: BTreeMap<String, Vec<String>>,
}

/// A cluster with one Node of every class of the shipped policy (named after the class, lowercased, `-1`):
/// its class label, every other label the catalog lists for it (the first value of each), hostname and OS
/// labels, and its vendor taint `KEY=present:NoSchedule`; plus [`CPU_NODE`] (no GPU label, no taint) and
/// [`UNCLASSED_H100_NODE`].
pub fn default_policy_nodes() -> Vec<Node> {
    let policy: PolicyNodes =
        serde_yaml::from_str(DEFAULT_POLICY).expect("the shipped policy parses");
    let mut nodes = Vec::new();
    for class in &policy.catalog {
        let key = class
            .node_label_key
            .as_deref()
            .unwrap_or(&policy.node_label_key);
        let mut labels: BTreeMap<String, String> = class
            .node_labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.first()?.clone())))
            .collect();
        labels.insert(key.to_string(), class.name.clone());
        let name = format!("{}-1", class.name.to_lowercase());
        nodes.push(node(&name, labels, class.taint_key.as_deref()));
        if class.name == "H100-80GB" {
            let mut unclassed = nodes.last().cloned().expect("just pushed");
            unclassed.metadata.name = Some(UNCLASSED_H100_NODE.into());
            let labels = unclassed.metadata.labels.get_or_insert_default();
            labels.remove(key);
            labels.insert("kubernetes.io/hostname".into(), UNCLASSED_H100_NODE.into());
            nodes.push(unclassed);
        }
    }
    nodes.push(node(CPU_NODE, BTreeMap::new(), None));
    nodes
}

/// A Node named `name` with `labels` (plus hostname and OS) and, when given, the taint `KEY=present:NoSchedule`.
pub fn node(name: &str, mut labels: BTreeMap<String, String>, taint_key: Option<&str>) -> Node {
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    let taints: Vec<_> = taint_key
        .into_iter()
        .map(|k| json!({"key": k, "value": "present", "effect": "NoSchedule"}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints}
    }))
    .expect("a Node")
}

/// The catalog class of a Node by the shipped class label (`gpu.nvidia.com/class`), if it has one.
pub fn class_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()?
        .get("gpu.nvidia.com/class")
        .map(String::as_str)
}

#[cfg(test)]
mod tests;
