//! PriorityClass facts: what a PriorityClass is worth and how decisions look one up. Shared by the admission
//! webhooks, the cluster caches (which answer lookups from a watch) and the policy snapshot (whose priority
//! buckets answer them with `--no-kube`).

use gpu_admission_proto::scorer::v1::PriorityAssignment;

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

impl PriorityClassFacts {
    /// A cluster's `scheduling.k8s.io/v1` PriorityClass as decisions see it; `None` without a value (the
    /// apiserver requires one, so only a malformed object lacks it).
    pub fn of_cluster(pc: &k8s_openapi::api::scheduling::v1::PriorityClass) -> Option<Self> {
        Some(Self {
            name: pc.metadata.name.clone()?,
            value: pc.value?,
            preemption_policy: pc.preemption_policy.clone(),
            global_default: pc.global_default.unwrap_or(false),
        })
    }
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

/// A PriorityClass lookup that never finds anything (before the policy is known).
pub struct NoPriorityClasses;

impl PriorityClassLookup for NoPriorityClasses {
    fn priority_class(&self, _name: &str) -> Option<PriorityClassFacts> {
        None
    }
}

/// `--no-kube` only: the PriorityClass named by the scorer's answer, as the answer describes it (used until the
/// policy's buckets are fetched; both come from the same policy).
pub struct AnswerPriorityClass<'a>(pub &'a PriorityAssignment);

impl PriorityClassLookup for AnswerPriorityClass<'_> {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        let pc = self.0;
        (pc.name == name && !pc.name.is_empty()).then(|| PriorityClassFacts {
            name: pc.name.clone(),
            value: pc.value,
            preemption_policy: (!pc.preemption_policy.is_empty())
                .then(|| pc.preemption_policy.clone()),
            global_default: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_priority_class_only_answers_its_own_name() {
        let pc = PriorityAssignment {
            name: "gpu-high".into(),
            value: 7,
            preemption_policy: "Never".into(),
        };
        let lookup = AnswerPriorityClass(&pc);
        assert_eq!(
            lookup.priority_class("gpu-high"),
            Some(PriorityClassFacts {
                name: "gpu-high".into(),
                value: 7,
                preemption_policy: Some("Never".into()),
                global_default: false,
            })
        );
        assert_eq!(lookup.priority_class("gpu-low"), None);
    }

    #[test]
    fn a_cluster_priority_class_reads_as_its_facts() {
        let pc: k8s_openapi::api::scheduling::v1::PriorityClass = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "gpu-high"}, "value": 1000, "globalDefault": true}),
        )
        .unwrap();
        assert_eq!(
            PriorityClassFacts::of_cluster(&pc),
            Some(PriorityClassFacts {
                name: "gpu-high".into(),
                value: 1000,
                preemption_policy: None,
                global_default: true,
            })
        );
        let nameless: k8s_openapi::api::scheduling::v1::PriorityClass =
            serde_json::from_value(serde_json::json!({"metadata": {}, "value": 1})).unwrap();
        assert_eq!(PriorityClassFacts::of_cluster(&nameless), None);
    }
}
