//! The Kubernetes shapes the patch adds, as plain structs that write themselves as JSON ([`WriteJson`]: their
//! keys are fixed text, only the values are escaped when they need it). Members are written in sorted order:
//! the patch is byte for byte the one the `serde_json::Value` maps (which sort their keys) wrote before (the
//! golden test keeps it so).

use super::{ANTI_AFFINITY_WEIGHT, BEST_CLASS_WEIGHT};
use crate::names::decision::{HOSTNAME_TOPOLOGY, LABEL_JOB_TYPE};
use crate::review::{JsonOut, WriteJson};

/// An empty object, `{}` (a missing `metadata` or `spec`).
pub(super) struct Empty {}

/// A node or label selector requirement, `key In values`.
#[derive(Clone)]
pub(super) struct In<'a> {
    pub(super) key: &'a str,
    pub(super) operator: &'static str,
    pub(super) values: Vec<&'a str>,
}

impl<'a> In<'a> {
    pub(super) fn new(key: &'a str, values: Vec<&'a str>) -> Self {
        Self {
            key,
            operator: "In",
            values,
        }
    }
}

/// A node selector term.
#[derive(Clone)]
pub(super) struct SelectorTerm<'a> {
    pub(super) match_expressions: Vec<In<'a>>,
}

/// A required node affinity.
pub(super) struct NodeSelector<'a> {
    pub(super) node_selector_terms: Vec<SelectorTerm<'a>>,
}

/// A preferred node affinity term.
#[derive(Clone)]
pub(super) struct PreferredClass<'a> {
    pub(super) preference: SelectorTerm<'a>,
    pub(super) weight: i32,
}

impl<'a> PreferredClass<'a> {
    /// The best class first: `key In [value]`, weight [`BEST_CLASS_WEIGHT`].
    pub(super) fn best(key: &'a str, value: &'a str) -> Self {
        Self {
            preference: SelectorTerm {
                match_expressions: vec![In::new(key, vec![value])],
            },
            weight: BEST_CLASS_WEIGHT,
        }
    }
}

/// `spec.affinity.nodeAffinity` of a Pod that had none.
pub(super) struct NodeAffinity<'a> {
    pub(super) preferred: Vec<PreferredClass<'a>>,
    pub(super) required: NodeSelector<'a>,
}

/// A GPU class's taint, tolerated.
pub(super) struct Toleration<'a> {
    pub(super) effect: &'static str,
    pub(super) key: &'a str,
    pub(super) operator: &'static str,
}

impl<'a> Toleration<'a> {
    /// `key Exists`, effect `NoSchedule`.
    pub(super) fn no_schedule(key: &'a str) -> Self {
        Self {
            effect: "NoSchedule",
            key,
            operator: "Exists",
        }
    }
}

/// A preferred pod anti-affinity term against one job type on the same node.
pub(super) struct AvoidTerm<'a> {
    pub(super) term: PodAffinityTerm<'a>,
    pub(super) weight: i32,
}

impl<'a> AvoidTerm<'a> {
    /// Keeps Pods labelled with job type `job_type` off this Pod's node, weight [`ANTI_AFFINITY_WEIGHT`].
    pub(super) fn job_type(job_type: &'a str) -> Self {
        Self {
            term: PodAffinityTerm {
                label_selector: LabelSelector {
                    match_expressions: [In::new(LABEL_JOB_TYPE, vec![job_type])],
                },
                topology_key: HOSTNAME_TOPOLOGY,
            },
            weight: ANTI_AFFINITY_WEIGHT,
        }
    }

    /// The job type it avoids.
    pub(super) fn avoided(&self) -> &'a str {
        self.term.label_selector.match_expressions[0].values[0]
    }
}

pub(super) struct PodAffinityTerm<'a> {
    label_selector: LabelSelector<'a>,
    topology_key: &'static str,
}

struct LabelSelector<'a> {
    match_expressions: [In<'a>; 1],
}

/// `spec.affinity.podAntiAffinity` of a Pod that had none.
pub(super) struct PodAntiAffinity<'a> {
    pub(super) preferred: Vec<AvoidTerm<'a>>,
}

/// The affinity parts of a Pod that had no affinity at all, added as one object.
#[derive(Default)]
pub(super) struct NewAffinity<'a> {
    pub(super) node_affinity: Option<NodeAffinity<'a>>,
    pub(super) pod_anti_affinity: Option<PodAntiAffinity<'a>>,
}

impl NewAffinity<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.node_affinity.is_none() && self.pod_anti_affinity.is_none()
    }
}

impl WriteJson for Empty {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw("{}");
    }
}

impl WriteJson for In<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"key":"#);
        out.str(self.key);
        out.raw(r#","operator":"#);
        out.str(self.operator);
        out.raw(r#","values":"#);
        out.list(&self.values);
        out.raw("}");
    }
}

impl WriteJson for SelectorTerm<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"matchExpressions":"#);
        out.list(&self.match_expressions);
        out.raw("}");
    }
}

impl WriteJson for NodeSelector<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"nodeSelectorTerms":"#);
        out.list(&self.node_selector_terms);
        out.raw("}");
    }
}

impl WriteJson for PreferredClass<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"preference":"#);
        self.preference.write_json(out);
        out.raw(r#","weight":"#);
        self.weight.write_json(out);
        out.raw("}");
    }
}

impl WriteJson for NodeAffinity<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"preferredDuringSchedulingIgnoredDuringExecution":"#);
        out.list(&self.preferred);
        out.raw(r#","requiredDuringSchedulingIgnoredDuringExecution":"#);
        self.required.write_json(out);
        out.raw("}");
    }
}

impl WriteJson for Toleration<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"effect":"#);
        out.str(self.effect);
        out.raw(r#","key":"#);
        out.str(self.key);
        out.raw(r#","operator":"#);
        out.str(self.operator);
        out.raw("}");
    }
}

impl WriteJson for AvoidTerm<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"podAffinityTerm":{"labelSelector":{"matchExpressions":"#);
        out.list(&self.term.label_selector.match_expressions);
        out.raw(r#"},"topologyKey":"#);
        out.str(self.term.topology_key);
        out.raw(r#"},"weight":"#);
        self.weight.write_json(out);
        out.raw("}");
    }
}

impl WriteJson for PodAntiAffinity<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw(r#"{"preferredDuringSchedulingIgnoredDuringExecution":"#);
        out.list(&self.preferred);
        out.raw("}");
    }
}

impl WriteJson for NewAffinity<'_> {
    fn write_json(&self, out: &mut JsonOut<'_>) {
        out.raw("{");
        if let Some(node) = &self.node_affinity {
            out.raw(r#""nodeAffinity":"#);
            node.write_json(out);
        }
        if let Some(anti) = &self.pod_anti_affinity {
            if self.node_affinity.is_some() {
                out.raw(",");
            }
            out.raw(r#""podAntiAffinity":"#);
            anti.write_json(out);
        }
        out.raw("}");
    }
}

#[cfg(test)]
mod tests {
    //! Each shape writes the bytes its former `serde_json::Value` (keys sorted) wrote.

    use serde_json::json;

    use super::*;
    use crate::review::to_json as text;

    fn same_bytes(shape: &impl WriteJson, value: serde_json::Value) {
        assert_eq!(text(shape), serde_json::to_string(&value).unwrap());
    }

    #[test]
    fn shapes_serialise_as_the_sorted_maps_did() {
        let key = "gpu.nvidia.com/class";
        let expr = json!({"key": key, "operator": "In", "values": ["A100", "H100"]});
        let preferred = json!({"weight": BEST_CLASS_WEIGHT, "preference": {"matchExpressions": [
            {"key": key, "operator": "In", "values": ["A100"]}]}});
        let required = json!({"nodeSelectorTerms": [{"matchExpressions": [expr]}]});
        let avoid = json!({"weight": ANTI_AFFINITY_WEIGHT, "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [{"key": LABEL_JOB_TYPE, "operator": "In", "values": ["serve"]}]},
            "topologyKey": HOSTNAME_TOPOLOGY}});
        let node_affinity = || NodeAffinity {
            preferred: vec![PreferredClass::best(key, "A100")],
            required: NodeSelector {
                node_selector_terms: vec![SelectorTerm {
                    match_expressions: vec![In::new(key, vec!["A100", "H100"])],
                }],
            },
        };
        same_bytes(&In::new(key, vec!["A100", "H100"]), expr.clone());
        same_bytes(&PreferredClass::best(key, "A100"), preferred.clone());
        same_bytes(
            &Toleration::no_schedule("nvidia.com/gpu"),
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        );
        same_bytes(&AvoidTerm::job_type("serve"), avoid.clone());
        same_bytes(&Empty {}, json!({}));
        same_bytes(
            &NewAffinity {
                node_affinity: Some(node_affinity()),
                pod_anti_affinity: Some(PodAntiAffinity {
                    preferred: vec![AvoidTerm::job_type("serve")],
                }),
            },
            json!({
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [avoid]},
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": required,
                    "preferredDuringSchedulingIgnoredDuringExecution": [preferred]
                }
            }),
        );
        let only_node = NewAffinity {
            node_affinity: Some(node_affinity()),
            ..Default::default()
        };
        assert!(text(&only_node).starts_with(r#"{"nodeAffinity":{"#));
        same_bytes(
            &NewAffinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    preferred: vec![AvoidTerm::job_type("serve"), AvoidTerm::job_type("a\"b")],
                }),
                ..Default::default()
            },
            json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                avoid, {"weight": ANTI_AFFINITY_WEIGHT, "podAffinityTerm": {
                    "labelSelector": {"matchExpressions": [{"key": LABEL_JOB_TYPE, "operator": "In", "values": ["a\"b"]}]},
                    "topologyKey": HOSTNAME_TOPOLOGY}}]}}),
        );
        same_bytes(&NewAffinity::default(), json!({}));
        assert!(NewAffinity::default().is_empty() && !only_node.is_empty());
    }
}
