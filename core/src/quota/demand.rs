//! What a Pod counts against quotas: its GPUs ([`crate::pod::gpu_resources::gpu_ask`], the one reading of a
//! Pod's GPU resources) in whole-GPU equivalents, per class it may be counted against.
//!
//! A whole device counts 1000 milli-GPUs; a MIG slice or a HAMi memory request counts its memory over the
//! memory of the class it is counted against (capped at one device), rounded up to a milli-GPU; a
//! time-sliced replica counts a whole device (its split is node configuration the policy does not know).
use std::collections::{BTreeMap, BTreeSet};

use gpu_admission_policy::Policy;
use gpu_admission_policy::quotas::MilliGpus;
use k8s_openapi::api::core::v1::Pod;

use crate::placement;
use crate::pod::gpu_resources::{
    ClaimTemplates, GpuAsk, MAX_GPUS_PER_POD, allocated_beyond_ask, gpu_ask,
};
use crate::policy::PolicySnapshot;
use crate::tier_bound::{NodeClass, Nodes};

/// A Pod's count: milli-GPUs per class it is counted against, and once across classes (the largest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    pub classes: BTreeMap<String, MilliGpus>,
    pub total: MilliGpus,
}

impl Counted {
    /// `n` Pods of this count.
    pub fn times(&self, n: u32) -> Counted {
        let n = MilliGpus::from(n);
        Counted {
            classes: self
                .classes
                .iter()
                .map(|(c, m)| (c.clone(), m.saturating_mul(n)))
                .collect(),
            total: self.total.saturating_mul(n),
        }
    }
}

/// Whether a stored Pod holds its quota now: pending or running, not being deleted.
pub fn holds_quota(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Milli-GPUs of `ask` on a device of `class_memory_gib`.
pub fn milli_gpus(ask: &GpuAsk, class_memory_gib: f64) -> MilliGpus {
    let per_device = match ask.memory_gib {
        Some(m)
            if (ask.shape.contains("mig") || ask.shape.contains("memory"))
                && class_memory_gib > 0.0
                && m.is_finite()
                && m > 0.0 =>
        {
            ((m / class_memory_gib).min(1.0) * 1000.0 - 1e-9)
                .ceil()
                .max(1.0) as MilliGpus
        }
        _ => 1000,
    };
    per_device.saturating_mul(MilliGpus::from(ask.count))
}

/// The classes a Pod is counted against: its Node's class when it is bound to a Node of a class, else the
/// classes its own constraint allows within its tier's (all of the tier's when it says nothing).
pub fn classes_of(
    pod: &Pod,
    snapshot: &PolicySnapshot,
    tier_allowed: &BTreeSet<String>,
    nodes: &dyn Nodes,
) -> BTreeSet<String> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if let Some(NodeClass::Class(c)) = node.map(|n| nodes.class_of(n)) {
        return BTreeSet::from([c]);
    }
    match placement::own_constraint(pod, &snapshot.class_labels) {
        Some(own) => {
            let within: BTreeSet<String> =
                own.allowed.intersection(tier_allowed).cloned().collect();
            if within.is_empty() {
                own.allowed
            } else {
                within
            }
        }
        None => tier_allowed.clone(),
    }
}

/// What `ask` counts as against each of `classes`.
pub fn counted(policy: &Policy, ask: &GpuAsk, classes: &BTreeSet<String>) -> Counted {
    let mut out = Counted::default();
    if ask.count == 0 {
        return out;
    }
    for c in classes {
        let memory = policy
            .class_index(c)
            .map_or(0.0, |k| policy.classes[k].memory_gib);
        let m = milli_gpus(ask, memory);
        out.total = out.total.max(m);
        out.classes.insert(c.clone(), m);
    }
    if classes.is_empty() {
        out.total = milli_gpus(ask, 0.0);
    }
    out
}

/// A Pod's count in its tier: [`gpu_ask`] of its spec, plus what the scheduler allocated its claims beyond
/// that ([`allocated_beyond_ask`]), against [`classes_of`] it. `None` for a Pod without GPUs (or without a
/// spec).
pub fn of_pod(
    pod: &Pod,
    namespace: &str,
    tier: &str,
    snapshot: &PolicySnapshot,
    nodes: &dyn Nodes,
    templates: &dyn ClaimTemplates,
) -> Option<Counted> {
    let policy = snapshot.policy.as_deref()?;
    let spec = pod.spec.as_ref()?;
    let mut ask = gpu_ask(spec, namespace, &snapshot.gpu_resources, templates);
    // What the scheduler allocated beyond the ask (a stored Pod's claims of allocation mode `All`).
    let beyond = allocated_beyond_ask(pod, namespace, &snapshot.gpu_resources, templates);
    ask.count = ask.count.saturating_add(beyond).min(MAX_GPUS_PER_POD);
    if ask.count == 0 {
        return None;
    }
    let rules = snapshot.tier_rules(tier, namespace)?;
    let classes = classes_of(pod, snapshot, &rules.allowed, nodes);
    Some(counted(policy, &ask, &classes))
}
