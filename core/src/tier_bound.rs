//! The tier invariant, written once. A GPU Pod of a namespace whose tier restricts GPU classes, created by a
//! non-admin, is admitted only in one of two ways: denied, or stored with a **positive** required class
//! constraint whose classes are all the tier's (its grant's included):
//!
//! - every way of scheduling it (the `nodeSelector`, ANDed with each ORed required node-affinity term) names
//!   a catalog class label key (`gpu.nvidia.com/class`) with values that are all classes of the tier: a
//!   `nodeSelector` entry or an `In` expression. Negative operators, other labels (GPU Feature Discovery,
//!   cloud, Karpenter), annotations (HAMi), labels and gates (Kueue) may narrow it and never count for it;
//! - `spec.nodeName`, which bypasses the scheduler, names a Node the frontend knows to be of a tier class.
//!
//! Mutation asks [`class_bound`] whether it must add the constraint; validation asks [`check`] what to deny;
//! the tests and the fuzz targets check the stored Pod with both and with an independent placement oracle.

use std::collections::{BTreeMap, BTreeSet};

use gpu_admission_policy::GpuClass;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PodSpec};

use crate::policy::TierRules;

/// What the frontend knows of a Node, by name (from its Node cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeClass {
    /// No such Node in the cache (or no cache: `--no-kube`).
    Unknown,
    /// A Node without a catalog class label value.
    Unclassed,
    /// A Node of this catalog class.
    Class(String),
}

/// The Nodes the frontend can see.
pub trait Nodes {
    fn class_of(&self, node: &str) -> NodeClass;
}

/// Knows no Node (`--no-kube`, or a decision made offline): every `spec.nodeName` is unknown.
pub struct NoNodes;

impl Nodes for NoNodes {
    fn class_of(&self, _: &str) -> NodeClass {
        NodeClass::Unknown
    }
}

impl<F: Fn(&str) -> NodeClass> Nodes for F {
    fn class_of(&self, node: &str) -> NodeClass {
        self(node)
    }
}

/// The class of a Node from its labels: the catalog class whose class label (`gpu.nvidia.com/class=L4-24GB`)
/// it carries. Only the class label counts, as for Pods.
pub fn node_class(labels: Option<&BTreeMap<String, String>>, catalog: &[GpuClass]) -> NodeClass {
    let Some(labels) = labels else {
        return NodeClass::Unclassed;
    };
    catalog
        .iter()
        .find(|c| labels.get(&c.node_label_key) == Some(&c.node_label_value))
        .map_or(NodeClass::Unclassed, |c| NodeClass::Class(c.name.clone()))
}

/// Why the invariant does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Breach {
    /// A way of scheduling the Pod has no positive constraint to the tier's classes: the `nodeSelector`
    /// alone (`term: None`), or required node-affinity term `term`.
    Unbounded { term: Option<usize> },
    /// `spec.nodeName` names a Node the frontend does not know.
    UnknownNode(String),
    /// `spec.nodeName` names a Node of no catalog class, or of a class outside the tier.
    NodeOutside { node: String, class: Option<String> },
}

impl Breach {
    /// The clause of the user's message: `… is outside tier bronze: {clause}`.
    pub fn describe(&self) -> String {
        match self {
            Breach::Unbounded { term: None } => {
                "is not constrained to the tier's GPU classes (no nodeSelector or required node affinity on the GPU class label)".into()
            }
            Breach::Unbounded { term: Some(i) } => format!(
                "required node-affinity term {i} is not constrained to the tier's GPU classes"
            ),
            Breach::UnknownNode(n) => format!("names node {n}, which is not a known GPU node"),
            Breach::NodeOutside { node, class: None } => {
                format!("names node {node}, which has no GPU class of the catalog")
            }
            Breach::NodeOutside {
                node,
                class: Some(c),
            } => format!("names node {node} of GPU class {c}"),
        }
    }
}

/// Does the tier hold its Pods to part of the catalog? A tier (with its grant) that allows every class has no
/// class bound to keep.
pub fn restricts(rules: &TierRules<'_>, catalog: &[GpuClass]) -> bool {
    catalog.iter().any(|c| !rules.allows(&c.name))
}

/// The class a node label `key=value` identifies, by the catalog's class labels.
fn class_by_label<'c>(catalog: &'c [GpuClass], key: &str, value: &str) -> Option<&'c GpuClass> {
    catalog
        .iter()
        .find(|c| c.node_label_key == key && c.node_label_value == value)
}

/// Is one way of scheduling (the `nodeSelector` ANDed with `term`) held to the tier's classes? It is when, on
/// some class label key, the values a node may carry (the selector's value and every `In` list on that key,
/// intersected) are all label values of tier classes. An empty intersection, or an empty term, matches no
/// node at all, which holds too.
fn branch_bound(
    spec: &PodSpec,
    term: Option<&NodeSelectorTerm>,
    rules: &TierRules<'_>,
    catalog: &[GpuClass],
) -> bool {
    if let Some(t) = term
        && t.match_expressions.as_deref().unwrap_or(&[]).is_empty()
        && t.match_fields.as_deref().unwrap_or(&[]).is_empty()
    {
        return true;
    }
    let mut keys: Vec<&str> = Vec::new();
    for c in catalog {
        if !keys.contains(&c.node_label_key.as_str()) {
            keys.push(&c.node_label_key);
        }
    }
    let expressions = term
        .and_then(|t| t.match_expressions.as_deref())
        .unwrap_or(&[]);
    keys.into_iter().any(|key| {
        let mut values: Option<BTreeSet<&str>> = spec
            .node_selector
            .as_ref()
            .and_then(|s| s.get(key))
            .map(|v| BTreeSet::from([v.as_str()]));
        for e in expressions
            .iter()
            .filter(|e| e.key == key && e.operator == "In")
        {
            let these: BTreeSet<&str> = e.values.iter().flatten().map(String::as_str).collect();
            values = Some(match values {
                None => these,
                Some(v) => v.intersection(&these).copied().collect(),
            });
        }
        values.is_some_and(|values| {
            values.iter().all(|v| {
                class_by_label(catalog, key, v).is_some_and(|class| rules.allows(&class.name))
            })
        })
    })
}

/// The class half of the invariant: is every way of scheduling the Pod positively held to the tier's classes?
/// `Err` names the first way that is not.
pub fn class_bound(
    spec: &PodSpec,
    rules: &TierRules<'_>,
    catalog: &[GpuClass],
) -> Result<(), Breach> {
    let terms: &[NodeSelectorTerm] = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    if terms.is_empty() {
        return if branch_bound(spec, None, rules, catalog) {
            Ok(())
        } else {
            Err(Breach::Unbounded { term: None })
        };
    }
    match terms
        .iter()
        .position(|t| !branch_bound(spec, Some(t), rules, catalog))
    {
        None => Ok(()),
        Some(i) => Err(Breach::Unbounded { term: Some(i) }),
    }
}

/// The node half: `spec.nodeName`, when set, names a known Node of a tier class.
pub fn node_bound(spec: &PodSpec, rules: &TierRules<'_>, nodes: &dyn Nodes) -> Result<(), Breach> {
    let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    match nodes.class_of(node) {
        NodeClass::Class(c) if rules.allows(&c) => Ok(()),
        NodeClass::Class(c) => Err(Breach::NodeOutside {
            node: node.to_string(),
            class: Some(c),
        }),
        NodeClass::Unclassed => Err(Breach::NodeOutside {
            node: node.to_string(),
            class: None,
        }),
        NodeClass::Unknown => Err(Breach::UnknownNode(node.to_string())),
    }
}

/// The whole invariant for a Pod held to `rules` (a GPU Pod of a restricting tier, from a non-admin: the
/// caller decides that): the node named, then every way of scheduling.
pub fn check(
    spec: &PodSpec,
    rules: &TierRules<'_>,
    catalog: &[GpuClass],
    nodes: &dyn Nodes,
) -> Result<(), Breach> {
    node_bound(spec, rules, nodes)?;
    class_bound(spec, rules, catalog)
}

#[cfg(test)]
mod tests;
