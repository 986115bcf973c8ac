//! What a Pod counts against quotas: its GPUs ([`crate::pod::gpu_resources::gpu_ask`], the one reading of a
//! Pod's GPU resources) in whole-GPU equivalents, per class it may be counted against.
//!
//! Counted on what the Pod may be allocated, resource by resource ([`Holding`]), never on an aggregate: a
//! whole device counts 1000 milli-GPUs; a MIG slice its own memory over the memory of the class it is counted
//! against (capped at one device), rounded up to a milli-GPU; a HAMi share likewise, but only on a class whose
//! nodes enforce shares (`quotas.sharesEnforced`), else a whole device; a time-sliced replica a whole device
//! (its split is node configuration the policy does not know); a DRA request its largest `firstAvailable`
//! alternative, allocation mode `All` every device of one Node of the class (`gpusPerNode`). Containers add
//! up as Kubernetes' effective requests do (running containers together, a plain init container alone), and
//! claims on top.
use std::collections::{BTreeMap, BTreeSet};

use gpu_admission_policy::quotas::MilliGpus;
use gpu_admission_policy::{GpuClass, Policy};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::placement;
use crate::pod::gpu_resources::{ClaimTemplates, Holding, Holdings, MAX_GPUS_PER_POD, gpu_ask};
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

/// Whether a stored Pod holds its quota at `now_ms` (ms since the Unix epoch), as Kubernetes' ResourceQuota
/// counts Pods: until its containers have stopped (phase `Succeeded` or `Failed`), or, once deleted, until
/// its deletion time plus its grace period has passed (a Pod being deleted still runs and holds its devices).
pub fn holds_quota(pod: &Pod, now_ms: u64) -> bool {
    Lifetime::of(pod).holds_at(now_ms)
}

/// When a Pod being deleted stops holding its quota: its deletion time plus its grace period (ms since the
/// Unix epoch); `None` for a Pod not being deleted.
pub fn holds_until_ms(pod: &Pod) -> Option<u64> {
    Lifetime::of(pod).holds_until_ms
}

/// How long a Pod holds its quota ([`holds_quota`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifetime {
    /// Its containers have stopped (phase `Succeeded` or `Failed`).
    pub finished: bool,
    /// Being deleted: its deletion time plus its grace period, in ms since the Unix epoch.
    pub holds_until_ms: Option<u64>,
}

impl Lifetime {
    fn of(pod: &Pod) -> Self {
        let m = &pod.metadata;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Self::new(
            phase,
            m.deletion_timestamp.as_ref(),
            m.deletion_grace_period_seconds,
        )
    }

    /// From a Pod's phase, deletion time and grace period.
    pub fn new(phase: Option<&str>, deleted_at: Option<&Time>, grace_seconds: Option<i64>) -> Self {
        let holds_until_ms = deleted_at.map(|at| {
            let grace = grace_seconds.unwrap_or(0).max(0) as u64;
            let at_ms = u64::try_from(at.0.as_millisecond()).unwrap_or(0);
            at_ms.saturating_add(grace.saturating_mul(1000))
        });
        Lifetime {
            finished: matches!(phase, Some("Succeeded" | "Failed")),
            holds_until_ms,
        }
    }

    /// Whether the Pod holds its quota at `now_ms`.
    pub fn holds_at(&self, now_ms: u64) -> bool {
        !self.finished && self.holds_until_ms.is_none_or(|t| now_ms <= t)
    }
}

/// Milli-GPUs of one [`Holding`] on a device of catalog class `class` (`None`: no class known).
fn milli_of(holding: &Holding, class: Option<&GpuClass>, shares_enforced: bool) -> MilliGpus {
    let fraction = |count: u32, memory: Option<f64>| -> MilliGpus {
        let class_memory = class.map_or(0.0, |c| c.memory_gib);
        let per_device = match memory {
            Some(m) if class_memory > 0.0 && m.is_finite() && m > 0.0 => {
                ((m / class_memory).min(1.0) * 1000.0 - 1e-9)
                    .ceil()
                    .max(1.0) as MilliGpus
            }
            _ => 1000,
        };
        per_device.saturating_mul(MilliGpus::from(count))
    };
    match *holding {
        Holding::Devices(n) => 1000 * MilliGpus::from(n),
        Holding::Slices { count, memory_gib } => fraction(count, memory_gib),
        Holding::Shares { count, memory_gib } if shares_enforced => fraction(count, memory_gib),
        Holding::Shares { count, .. } => 1000 * MilliGpus::from(count),
        Holding::AllOfNode => {
            1000 * MilliGpus::from(class.map_or(MAX_GPUS_PER_POD, |c| c.gpus_per_node))
        }
    }
}

/// Milli-GPUs of a Pod's holdings on a device of `class`: its running containers together or its largest
/// plain init container, whichever is more, plus its claims.
fn milli_on(policy: &Policy, holdings: &Holdings, class: Option<&str>) -> MilliGpus {
    let k = class.and_then(|c| policy.class_index(c));
    let gpu_class = k.map(|k| &policy.classes[k]);
    let enforced = k.is_some_and(|k| policy.quotas.enforces_shares(k));
    let sum = |hs: &[Holding]| -> MilliGpus {
        hs.iter()
            .map(|h| milli_of(h, gpu_class, enforced))
            .fold(0, MilliGpus::saturating_add)
    };
    let init = holdings.init.iter().map(|i| sum(i)).max().unwrap_or(0);
    sum(&holdings.running)
        .max(init)
        .saturating_add(sum(&holdings.claims))
        .min(1000 * MilliGpus::from(MAX_GPUS_PER_POD))
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

/// What `holdings` count as against each of `classes`.
pub fn counted(policy: &Policy, holdings: &Holdings, classes: &BTreeSet<String>) -> Counted {
    let mut out = Counted::default();
    for c in classes {
        let m = milli_on(policy, holdings, Some(c));
        out.total = out.total.max(m);
        out.classes.insert(c.clone(), m);
    }
    if classes.is_empty() {
        out.total = milli_on(policy, holdings, None);
    }
    out
}

/// A stored Pod as what it holds: each template entry whose claim the ResourceClaim controller has made
/// (`status.resourceClaimStatuses`) and the cluster holds names that claim, for it is what the scheduler
/// allocates, whatever the template says now (changed, or deleted). `None` when nothing changes.
fn as_held(pod: &Pod, namespace: &str, templates: &dyn ClaimTemplates) -> Option<Pod> {
    let made: Vec<(&str, &str)> = pod
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
        .filter(|(_, claim)| templates.claim(namespace, claim).is_some())
        .collect();
    if made.is_empty() {
        return None;
    }
    let mut pod = pod.clone();
    for (entry, claim) in made {
        name_claim(&mut pod, entry, claim);
    }
    Some(pod)
}

/// Makes `pod`'s template entry `entry` name the ResourceClaim `claim` instead.
pub(crate) fn name_claim(pod: &mut Pod, entry: &str, claim: &str) {
    let entries = pod
        .spec
        .iter_mut()
        .flat_map(|s| s.resource_claims.iter_mut().flatten());
    for e in entries.filter(|e| e.name == entry && e.resource_claim_template_name.is_some()) {
        e.resource_claim_template_name = None;
        e.resource_claim_name = Some(claim.to_string());
    }
}

/// A Pod's count in its tier: the holdings of [`gpu_ask`] of its spec against [`classes_of`] it. `None` for
/// a Pod without GPUs (or without a spec).
pub fn of_pod(
    pod: &Pod,
    namespace: &str,
    tier: &str,
    snapshot: &PolicySnapshot,
    nodes: &dyn Nodes,
    templates: &dyn ClaimTemplates,
) -> Option<Counted> {
    let policy = snapshot.policy.as_deref()?;
    let held = as_held(pod, namespace, templates);
    let spec = held.as_ref().unwrap_or(pod).spec.as_ref()?;
    let ask = gpu_ask(spec, namespace, &snapshot.gpu_resources, templates);
    let h = &ask.holdings;
    if h.running.is_empty() && h.init.is_empty() && h.claims.is_empty() {
        return None;
    }
    let rules = snapshot.tier_rules(tier, namespace)?;
    let classes = classes_of(pod, snapshot, &rules.allowed, nodes);
    Some(counted(policy, h, &classes)).filter(|c| c.total > 0)
}
