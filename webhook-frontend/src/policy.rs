//! The scorer's policy as last fetched with `GetPolicy`: the GPU catalog (to validate answers and to recognise
//! a Pod that already names a class) and the priority buckets (the PriorityClasses of `--no-kube` mode).

use std::collections::HashMap;

use gpu_admission_proto::scorer::v1::{GetPolicyResponse, GpuClass};

use crate::admission::patch::{PriorityClassFacts, PriorityClassLookup};

/// An immutable view of one policy version; swapped whole when a newer one is fetched.
#[derive(Debug, Default, Clone)]
pub struct PolicySnapshot {
    pub version: String,
    pub catalog: Vec<GpuClass>,
    /// Distinct node label keys of the catalog (e.g. `gpu.nvidia.com/class`).
    pub class_label_keys: Vec<String>,
    /// PriorityClasses named by the buckets, by name.
    pub priority_classes: HashMap<String, PriorityClassFacts>,
}

impl PolicySnapshot {
    pub fn from_response(p: GetPolicyResponse) -> Self {
        let mut class_label_keys: Vec<String> = Vec::new();
        for c in &p.catalog {
            if !c.node_label_key.is_empty() && !class_label_keys.contains(&c.node_label_key) {
                class_label_keys.push(c.node_label_key.clone());
            }
        }
        let priority_classes = p
            .priority_buckets
            .iter()
            .filter_map(|b| b.priority_class.as_ref())
            .filter(|pc| !pc.name.is_empty())
            .map(|pc| {
                let policy = (!pc.preemption_policy.is_empty()).then(|| pc.preemption_policy.clone());
                (
                    pc.name.clone(),
                    PriorityClassFacts {
                        name: pc.name.clone(),
                        value: pc.value,
                        preemption_policy: policy,
                    },
                )
            })
            .collect();
        Self {
            version: p.version,
            catalog: p.catalog,
            class_label_keys,
            priority_classes,
        }
    }

    pub fn class(&self, name: &str) -> Option<&GpuClass> {
        self.catalog.iter().find(|c| c.name == name)
    }

    /// The catalog class selected by node label `key=value`.
    pub fn class_by_label(&self, key: &str, value: &str) -> Option<&GpuClass> {
        self.catalog
            .iter()
            .find(|c| c.node_label_key == key && c.node_label_value == value)
    }
}

impl PriorityClassLookup for PolicySnapshot {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        self.priority_classes.get(name).cloned()
    }
}
