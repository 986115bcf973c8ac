//! Elastic GPU quotas: THE quota decision, a pure function of (a Pod's GPU demand, its tier and
//! namespace, the classes it may be counted against, a usage snapshot, the policy's quotas).
//!
//! - [`demand`]: what a Pod counts as, in milli-GPUs per class, and the classes it is counted against;
//! - [`Usage`]: a usage snapshot (plain data: what the frontend's Pod watch counts, what `gpu-admission
//!   check --usage FILE` reads);
//! - [`decide`]: within `min` (keeps its tier's priority), borrowing (beyond a `min`: the borrowers'
//!   preemptible PriorityClass) or over a `max` (denied in Enforce), with the decision record
//!   (`gpu-admission.io/quota: bronze L4-24GB 30/32 (min 16): borrowed`) and a message a user can act on.
//!
//! A Pod whose class is still open (several classes allowed, not yet bound) is counted against each of them,
//! once in the totals: the count errs high for class limits until the Pod is bound, never low.

pub mod demand;
pub mod figures;
pub mod held;
pub mod ledger;
#[cfg(test)]
mod tests;
pub mod watched;

use std::collections::BTreeMap;

use gpu_admission_policy::Policy;
use gpu_admission_policy::quotas::{Limit, Limits, MilliGpus, TierQuota, format_gpus};
use serde::{Deserialize, Serialize};

/// The annotation carrying the quota decision record.
pub const QUOTA_ANNOTATION: &str = "gpu-admission.io/quota";

/// GPUs one namespace holds: per class (a Pod with an open class counts in each) and in total (once).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceUsage {
    /// The tier the namespace is held to.
    pub tier: String,
    /// Milli-GPUs per class name.
    #[serde(default)]
    pub classes: BTreeMap<String, MilliGpus>,
    /// Milli-GPUs across classes.
    #[serde(default)]
    pub total: MilliGpus,
}

/// A usage snapshot: what the Pods of each namespace hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    #[serde(default)]
    pub namespaces: BTreeMap<String, NamespaceUsage>,
}

impl Usage {
    /// Adds a Pod's count (or takes it back with `sign = -1`): `classes` it is counted against, `milli`
    /// per class, `total` across them.
    pub fn add(&mut self, tier: &str, namespace: &str, d: &demand::Counted, sign: i8) {
        self.add_parts(tier, namespace, &d.classes, d.total, sign);
    }

    /// [`Self::add`] of a count's parts; allocates only for a namespace or a class not held yet.
    pub(crate) fn add_parts(
        &mut self,
        tier: &str,
        namespace: &str,
        classes: &BTreeMap<String, MilliGpus>,
        total: MilliGpus,
        sign: i8,
    ) {
        if !self.namespaces.contains_key(namespace) {
            self.namespaces
                .insert(namespace.to_string(), NamespaceUsage::default());
        }
        let Some(ns) = self.namespaces.get_mut(namespace) else {
            return;
        };
        if ns.tier != tier {
            ns.tier = tier.to_string();
        }
        let apply = |v: &mut MilliGpus, by: MilliGpus| {
            *v = if sign >= 0 {
                v.saturating_add(by)
            } else {
                v.saturating_sub(by)
            }
        };
        for (class, milli) in classes {
            match ns.classes.get_mut(class) {
                Some(v) => apply(v, *milli),
                None => apply(ns.classes.entry(class.clone()).or_default(), *milli),
            }
        }
        apply(&mut ns.total, total);
        if ns.total == 0 && ns.classes.values().all(|v| *v == 0) {
            self.namespaces.remove(namespace);
        }
    }

    /// What `namespace` holds of `class` (`None`: across classes).
    pub fn namespace(&self, namespace: &str, class: Option<&str>) -> MilliGpus {
        self.namespaces.get(namespace).map_or(0, |n| match class {
            Some(c) => n.classes.get(c).copied().unwrap_or(0),
            None => n.total,
        })
    }

    /// What the namespaces counted in `tier` hold of `class` (`None`: across classes).
    pub fn tier(&self, tier: &str, class: Option<&str>) -> MilliGpus {
        self.namespaces
            .values()
            .filter(|n| n.tier == tier)
            .map(|n| match class {
                Some(c) => n.classes.get(c).copied().unwrap_or(0),
                None => n.total,
            })
            .sum()
    }
}

/// Where a Pod stands against its quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Standing {
    /// Within every `min` that applies: keeps its tier's priority.
    WithinMin,
    /// Beyond a `min`, within every `max`: gets the borrowers' PriorityClass, preempted first.
    Borrowing,
    /// Beyond a `max`: denied in Enforce, a warning in Warn.
    OverMax,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::WithinMin => "within-min",
            Standing::Borrowing => "borrowed",
            Standing::OverMax => "over-max",
        }
    }
}

/// Whose limit decides: the tier's or the namespace's share of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Tier(String),
    Namespace { tier: String, namespace: String },
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Tier(t) => write!(f, "tier {t}"),
            Scope::Namespace { namespace, .. } => write!(f, "namespace {namespace}"),
        }
    }
}

/// One limit applied to the Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub scope: Scope,
    /// A class name, or `None` for the total across classes.
    pub class: Option<String>,
    /// What the scope holds before this Pod.
    pub held: MilliGpus,
    /// What this Pod adds.
    pub asks: MilliGpus,
    pub limit: Limit,
    pub standing: Standing,
}

impl Applied {
    fn what(&self) -> &str {
        self.class.as_deref().unwrap_or("total")
    }

    /// The record: `bronze L4-24GB 30/32 (min 16): borrowed` (`bronze/students …` for a namespace).
    pub fn record(&self) -> String {
        let who = match &self.scope {
            Scope::Tier(t) => t.clone(),
            Scope::Namespace { tier, namespace } => format!("{tier}/{namespace}"),
        };
        let max = self.limit.max.map_or("-".to_string(), format_gpus);
        format!(
            "{who} {} {}/{max} (min {}): {}",
            self.what(),
            format_gpus(self.held),
            format_gpus(self.limit.min),
            self.standing.as_str()
        )
    }

    /// For an over-max limit: what a user can do about it.
    pub fn message(&self) -> String {
        let max = self.limit.max.unwrap_or(0);
        let gpus = match &self.class {
            Some(c) => format!("{c} GPUs"),
            None => "GPUs across classes".to_string(),
        };
        let free = max.saturating_sub(self.held);
        format!(
            "{} holds {} of its {} {gpus}; this Pod asks for {}: {}",
            self.scope,
            format_gpus(self.held),
            format_gpus(max),
            format_gpus(self.asks),
            if free == 0 {
                "none is free; wait for or delete Pods of the quota, or ask the policy's admins for a larger max"
                    .to_string()
            } else {
                format!(
                    "{} is free; ask for at most that, delete Pods of the quota, or ask the policy's admins for a \
                     larger max",
                    format_gpus(free)
                )
            }
        )
    }
}

/// The quota decision of one Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub standing: Standing,
    /// Every limit that applies, the deciding one first.
    pub applied: Vec<Applied>,
    /// The borrowers' PriorityClass (name, value) when `standing` is `Borrowing`.
    pub borrowing_class: Option<(String, i32)>,
}

impl Decision {
    /// The `gpu-admission.io/quota` value: the deciding limit.
    pub fn record(&self) -> String {
        self.applied
            .first()
            .map(Applied::record)
            .unwrap_or_default()
    }

    /// What an over-max Pod is told, with the record (`None` otherwise).
    pub fn over_max_message(&self) -> Option<String> {
        let denial = self.denial()?;
        Some(format!(
            "gpu-admission: {denial} ({QUOTA_ANNOTATION}: {})",
            self.record()
        ))
    }

    /// The message of an over-max Pod (`None` otherwise).
    pub fn denial(&self) -> Option<String> {
        (self.standing == Standing::OverMax).then(|| {
            self.applied
                .iter()
                .filter(|a| a.standing == Standing::OverMax)
                .map(Applied::message)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// Decides a Pod of `namespace` in `tier` asking `counted` against `usage` (which does not hold the Pod
/// yet). `None` when no quota applies (no quota for the tier, or the Pod asks for no GPU).
pub fn decide(
    policy: &Policy,
    tier: &str,
    namespace: &str,
    counted: &demand::Counted,
    usage: &Usage,
) -> Option<Decision> {
    let tq = policy.quotas.tier(policy.tier_index(tier)?)?;
    if counted.total == 0 {
        return None;
    }
    let mut applied = Vec::new();
    if let Some(ns) = tq.namespace(namespace) {
        let scope = Scope::Namespace {
            tier: tier.to_string(),
            namespace: namespace.to_string(),
        };
        let held = |c: Option<&str>| usage.namespace(namespace, c);
        applied.extend(apply(policy, scope, &ns.limits, &held, counted));
    }
    let held = |c: Option<&str>| usage.tier(tier, c);
    applied.extend(apply(
        policy,
        Scope::Tier(tier.to_string()),
        &tq.limits,
        &held,
        counted,
    ));
    if applied.is_empty() {
        return None;
    }
    // The deciding limit first: the worst standing, the namespace's before the tier's.
    applied.sort_by_key(|a| std::cmp::Reverse(a.standing));
    let standing = applied[0].standing;
    Some(Decision {
        standing,
        borrowing_class: (standing == Standing::Borrowing)
            .then_some(policy.quotas.borrowing.as_ref())
            .flatten()
            .map(|b| (b.name.clone(), b.value)),
        applied,
    })
}

/// The limits of one scope the Pod falls under. Whether it borrows is decided by each class's own limit
/// where the scope states one, else by the scope's total (for a namespace, only a limit with a `min`); a
/// `max` by every limit.
fn apply(
    policy: &Policy,
    scope: Scope,
    limits: &Limits,
    held: &dyn Fn(Option<&str>) -> MilliGpus,
    counted: &demand::Counted,
) -> Vec<Applied> {
    let mut out = Vec::new();
    let mut every_class_limited = !counted.classes.is_empty();
    for (class, &asks) in &counted.classes {
        let limit = policy.class_index(class).and_then(|k| limits.class(k));
        let Some(limit) = limit else {
            every_class_limited = false;
            continue;
        };
        out.push(applied(
            &scope,
            Some(class),
            held(Some(class)),
            asks,
            limit,
            true,
        ));
    }
    if let Some(limit) = limits.total {
        out.push(applied(
            &scope,
            None,
            held(None),
            counted.total,
            limit,
            !every_class_limited,
        ));
    }
    out
}

fn applied(
    scope: &Scope,
    class: Option<&str>,
    held: MilliGpus,
    asks: MilliGpus,
    limit: Limit,
    decides_min: bool,
) -> Applied {
    let after = held.saturating_add(asks);
    // A namespace's share decides borrowing only where it guarantees something: the tier's `min` covers
    // namespaces that state none.
    let guarantees = matches!(scope, Scope::Tier(_)) || limit.min > 0;
    let standing = if limit.max.is_some_and(|m| after > m) {
        Standing::OverMax
    } else if decides_min && guarantees && after > limit.min {
        Standing::Borrowing
    } else {
        Standing::WithinMin
    };
    Applied {
        scope: scope.clone(),
        class: class.map(str::to_string),
        held,
        asks,
        limit,
        standing,
    }
}

/// Whether `replicas` Pods of one template, counted as `counted` each, can ever fit the quotas of `tier`
/// and `namespace` (against an empty cluster): `Some(message)` when they never can, for a workload denied at
/// creation.
pub fn never_fits(
    policy: &Policy,
    tier: &str,
    namespace: &str,
    counted: &demand::Counted,
    replicas: u32,
) -> Option<String> {
    let all = counted.times(replicas);
    let d = decide(policy, tier, namespace, &all, &Usage::default())?;
    d.denial().map(|_| {
        let a = &d.applied[0];
        format!(
            "{replicas} Pods of {} GPUs each need {} {}, above the {} max {} of {}: the workload can never \
             run whole",
            format_gpus(counted.total),
            format_gpus(a.asks),
            a.what(),
            match &a.scope {
                Scope::Tier(_) => "tier's",
                Scope::Namespace { .. } => "namespace's",
            },
            format_gpus(a.limit.max.unwrap_or(0)),
            a.scope
        )
    })
}

/// What a Pod of a namespace counts against its tier's quota: (tier, namespace, count).
pub type Ask = (String, String, demand::Counted);

/// The annotation the ResourceClaim controller writes on a claim it makes from a Pod's template: the Pod's
/// claim entry (`spec.resourceClaims[].name`) the claim serves.
pub const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

/// A ResourceClaim as the Pods it serves see it: by its name (`resourceClaimName`), and, for a claim the
/// ResourceClaim controller made from a Pod's `resourceClaimTemplateName`, as that Pod's claim entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub name: String,
    pub made_for: Option<MadeFor>,
}

/// The Pod a template-made claim serves: its controlling owner (`ownerReferences`, `controller: true`,
/// kind Pod) and the entry [`POD_CLAIM_NAME`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadeFor {
    pub pod_uid: String,
    pub entry: String,
}

impl ClaimRef {
    /// The claim of this metadata; `None` without a name.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Self> {
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Pod" && o.api_version == "v1");
        let entry = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(POD_CLAIM_NAME));
        Some(ClaimRef {
            name: meta.name.clone()?,
            made_for: owner.zip(entry).map(|(o, e)| MadeFor {
                pod_uid: o.uid.clone(),
                entry: e.clone(),
            }),
        })
    }

    /// Whether `pod` is served by this claim: it names it, or the claim was made for it.
    pub fn serves(&self, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        let names = pod
            .spec
            .iter()
            .flat_map(|s| s.resource_claims.iter().flatten())
            .any(|c| c.resource_claim_name.as_deref() == Some(self.name.as_str()));
        names || self.made_for_pod(pod).is_some()
    }

    fn made_for_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Option<&MadeFor> {
        self.made_for
            .as_ref()
            .filter(|m| pod.metadata.uid.as_deref() == Some(m.pod_uid.as_str()))
    }

    /// `pod` as it is once this claim exists: a template entry the claim was made for names the claim
    /// instead (what the scheduler allocates is the claim, whatever the template says now).
    fn served(&self, pod: &k8s_openapi::api::core::v1::Pod) -> k8s_openapi::api::core::v1::Pod {
        let mut pod = pod.clone();
        if let Some(m) = self.made_for_pod(&pod).cloned() {
            demand::name_claim(&mut pod, &m.entry, &self.name);
        }
        pod
    }
}

/// A ResourceClaim CREATE that stored Pods of its namespace already wait for (they name it by
/// `resourceClaimName`: a claim deleted and created again, or created after its Pod; or the ResourceClaim
/// controller made it from a Pod's template, which may have changed since the Pod was counted): each such
/// Pod asking again with this claim, as (what it counts with the claim, what it counted before). Empty for
/// anything else.
pub fn claim_reasks(
    req: &kube_core::admission::AdmissionRequest<kube_core::DynamicObject>,
    snapshot: &crate::policy::PolicySnapshot,
    facts: &crate::facts::Facts<'_>,
    pods: &[k8s_openapi::api::core::v1::Pod],
) -> Vec<(Ask, demand::Counted)> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    if req.operation != kube_core::admission::Operation::Create {
        return Vec::new();
    }
    let claim: Option<ResourceClaim> = req
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
        .and_then(|v| serde_json::from_value(v).ok());
    let (Some(claim), Some(namespace)) = (claim, req.namespace.as_deref()) else {
        return Vec::new();
    };
    let Some(claim_ref) = ClaimRef::of(&claim.metadata) else {
        return Vec::new();
    };
    let name = claim_ref.name.clone();
    let with = ClaimAs {
        inner: facts.claim_templates,
        name: &name,
        claim: Some(claim),
    };
    let without = ClaimAs {
        inner: facts.claim_templates,
        name: &name,
        claim: None,
    };
    let facts_with = crate::facts::Facts {
        claim_templates: &with,
        ..*facts
    };
    let facts_without = crate::facts::Facts {
        claim_templates: &without,
        ..*facts
    };
    pods.iter()
        .filter(|pod| claim_ref.serves(pod))
        .filter_map(|pod| {
            let ask = of_pod_in(&claim_ref.served(pod), namespace, snapshot, &facts_with)?;
            let before = of_pod_in(pod, namespace, snapshot, &facts_without)
                .map(|(_, _, c)| c)
                .unwrap_or_default();
            Some((ask, before))
        })
        .collect()
}

/// The cluster's claims, but for one name: the claim being created (`Some`) or none (`None`).
struct ClaimAs<'a> {
    inner: &'a dyn crate::pod::gpu_resources::ClaimTemplates,
    name: &'a str,
    claim: Option<k8s_openapi::api::resource::v1::ResourceClaim>,
}

impl crate::pod::gpu_resources::ClaimTemplates for ClaimAs<'_> {
    fn template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaimTemplate> {
        self.inner.template(namespace, name)
    }

    fn claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaim> {
        if name == self.name {
            return self.claim.clone();
        }
        self.inner.claim(namespace, name)
    }
}

/// The tier quota of a tier, for callers that want to know whether counting matters at all.
pub fn tier_quota<'p>(policy: &'p Policy, tier: &str) -> Option<&'p TierQuota> {
    policy.quotas.tier(policy.tier_index(tier)?)
}

/// What a CREATE of a Pod counts against its tier's quota: (tier, namespace, count). `None` for anything
/// else (another kind or operation, no GPU, no tier, a tier without a quota). The frontend's
/// `/validate-pod` and the CLI ask this, then [`decide`].
pub fn of_request(
    req: &kube_core::admission::AdmissionRequest<kube_core::DynamicObject>,
    snapshot: &crate::policy::PolicySnapshot,
    facts: &crate::facts::Facts<'_>,
) -> Option<Ask> {
    if req.operation != kube_core::admission::Operation::Create
        || !req.kind.group.is_empty()
        || req.kind.kind != "Pod"
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    let object = req.object.as_ref()?;
    let namespace = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref())?;
    let pod = crate::pod::templates::described_pods(object, true)
        .into_iter()
        .next()?
        .pod;
    of_pod_in(&pod, namespace, snapshot, facts)
}

/// What a Pod of `namespace` counts against its tier's quota: (tier, namespace, count); `None` without a
/// tier with a quota or without GPUs.
pub fn of_pod_in(
    pod: &k8s_openapi::api::core::v1::Pod,
    namespace: &str,
    snapshot: &crate::policy::PolicySnapshot,
    facts: &crate::facts::Facts<'_>,
) -> Option<Ask> {
    use crate::policy::TierScope;
    let tier = match snapshot.tier_for((facts.tier_of)(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        TierScope::Ignored(_) | TierScope::Denied(_) => return None,
    };
    tier_quota(snapshot.policy.as_deref()?, &tier)?;
    let counted = demand::of_pod(
        pod,
        namespace,
        &tier,
        snapshot,
        facts.nodes,
        facts.claim_templates,
    )?;
    Some((tier, namespace.to_string(), counted))
}

/// The Pods a cluster holds beyond a `max` (the background audit's results): `pods` in the order they were
/// admitted (creation time), each decided against what the Pods before it hold — as `/validate-pod` would
/// have decided it then — and added to the usage whatever the decision (it holds its GPUs). The Pods past
/// a `max` (admitted in Warn or Audit, or before the `max` was lowered) come out with their decision.
pub fn over_max<K>(
    policy: &Policy,
    pods: impl IntoIterator<Item = (K, String, String, demand::Counted)>,
) -> Vec<(K, Decision)> {
    let mut usage = Usage::default();
    let mut over = Vec::new();
    for (key, tier, namespace, counted) in pods {
        if let Some(d) = decide(policy, &tier, &namespace, &counted, &usage)
            .filter(|d| d.standing == Standing::OverMax)
        {
            over.push((key, d));
        }
        usage.add(&tier, &namespace, &counted, 1);
    }
    over
}

/// The answer to a Pod whose usage is not known yet (the frontend's Pod watch has not listed): undecidable,
/// denied in Enforce.
pub const NOT_COUNTED_YET: &str =
    "gpu-admission: GPU quota usage is not counted yet (the Pod watch has not listed); retry";

/// Why a quota'd Pod was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaViolation {
    /// Beyond a `max`.
    OverMax,
    /// Beyond a `min` at a priority above the borrowers' PriorityClass.
    BorrowingAboveClass,
    /// The quota could not be decided (its reservation could not be written).
    Undecided,
}

impl QuotaViolation {
    /// The `reason` label of the violation metric.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaViolation::OverMax => "over_quota",
            QuotaViolation::BorrowingAboveClass => "borrowing_above_class",
            QuotaViolation::Undecided => "quota_undecided",
        }
    }
}

/// Answers a Pod CREATE's decision under `mode`, the one rule for the frontend and the CLI (`None`: nothing to
/// answer):
/// - over a `max`: denied in Enforce, a warning in Warn, nothing in Audit;
/// - beyond a `min` at a priority (`spec.priority` of `req`'s Pod) above the borrowers' PriorityClass, when
///   the cluster has it (`facts`): answered the same way. It is the invariant on the final object behind
///   [`mutation_ops`] (a borrower is preempted first): `/mutate-pod` sets the class from the usage it saw;
///   when another admission took the last GPU of the `min` in between, or the Pod did not pass
///   `/mutate-pod`, a retry is mutated against the new usage.
pub fn answer(
    decision: &Decision,
    req: &kube_core::admission::AdmissionRequest<kube_core::DynamicObject>,
    policy: &crate::policy::PolicySnapshot,
    facts: &crate::facts::Facts<'_>,
    verdict: &mut crate::review::Verdict,
) -> Option<(QuotaViolation, String)> {
    let mode = policy.mode;
    if let Some(message) = decision.over_max_message() {
        verdict.answer(mode, message.clone());
        return Some((QuotaViolation::OverMax, message));
    }
    let class = policy
        .borrowing_class(facts.priority_classes)
        .filter(|_| decision.standing == Standing::Borrowing)?;
    let priority = req
        .object
        .as_ref()
        .and_then(|o| o.data.pointer("/spec/priority"))
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    if priority <= i64::from(class.value) {
        return None;
    }
    let message = format!(
        "gpu-admission: this Pod borrows beyond its quota's min ({QUOTA_ANNOTATION}: {}) and may run at \
         most at the borrowers' PriorityClass {} ({}), not at priority {priority}; retry: the quota's usage \
         changed since the Pod was mutated",
        decision.record(),
        class.name,
        class.value
    );
    verdict.answer(mode, message.clone());
    Some((QuotaViolation::BorrowingAboveClass, message))
}

/// A CREATE of a workload (any object holding pod templates but a Pod) whose top-level template times its
/// `spec.parallelism` (else `spec.replicas`, else 1) can never fit a `max` of its tier or namespace: answered
/// under the policy's mode as an over-max Pod is. Nested templates (JobSet, LeaderWorkerSet, …) count once
/// each: their replica counts are not read, so such a workload is never denied for a count it does not have.
/// `Some((tier, message))` when it can never fit.
pub fn workload_answer(
    req: &kube_core::admission::AdmissionRequest<kube_core::DynamicObject>,
    snapshot: &crate::policy::PolicySnapshot,
    facts: &crate::facts::Facts<'_>,
    verdict: &mut crate::review::Verdict,
) -> Option<(String, String)> {
    use crate::policy::TierScope;
    if req.operation != kube_core::admission::Operation::Create
        || (req.kind.group.is_empty() && req.kind.kind == "Pod")
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    let object = req.object.as_ref()?;
    let namespace = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref())?;
    let tier = match snapshot.tier_for((facts.tier_of)(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        TierScope::Ignored(_) | TierScope::Denied(_) => return None,
    };
    let policy = snapshot.policy.as_deref()?;
    tier_quota(policy, &tier)?;
    let spec = object.data.get("spec");
    let replicas = ["parallelism", "replicas"]
        .iter()
        .find_map(|k| spec?.get(*k)?.as_u64())
        .unwrap_or(1)
        .min(u64::from(u32::MAX)) as u32;
    let message = crate::pod::templates::described_pods(object, false)
        .iter()
        .find_map(|d| {
            let counted = demand::of_pod(
                &d.pod,
                namespace,
                &tier,
                snapshot,
                facts.nodes,
                facts.claim_templates,
            )?;
            let n = if d.path == "spec.template" {
                replicas
            } else {
                1
            };
            never_fits(policy, &tier, namespace, &counted, n).map(|m| {
                format!(
                    "gpu-admission: {} {namespace}/{} ({}): {m}",
                    req.kind.kind,
                    object.metadata.name.as_deref().unwrap_or(""),
                    d.path
                )
            })
        })?;
    verdict.answer(snapshot.mode, message.clone());
    Some((tier, message))
}

/// What `/mutate-pod` adds to a GPU Pod of a quota'd tier, given the Pod as the rest of the patch leaves it
/// (`patched`) and its decision against the usage: the record annotation ([`QUOTA_ANNOTATION`]) and, for a
/// borrower, the borrowers' PriorityClass with its value and preemption policy, when the cluster has it
/// (`borrowing_class`) and it is lower than the Pod's priority (a quota never raises a priority).
pub fn mutation_ops(
    patched: &serde_json::Value,
    decision: &Decision,
    borrowing_class: Option<&crate::priority_class::PriorityClassFacts>,
) -> Vec<json_patch::PatchOperation> {
    use serde_json::json;
    let mut ops = Vec::new();
    let record = decision.record();
    let op = |path: &str, value: serde_json::Value| -> Option<json_patch::PatchOperation> {
        serde_json::from_value(json!({"op": "add", "path": path, "value": value})).ok()
    };
    if patched
        .pointer("/metadata/annotations")
        .is_some_and(|a| a.is_object())
    {
        ops.extend(op(
            "/metadata/annotations/gpu-admission.io~1quota",
            json!(record),
        ));
    } else {
        ops.extend(op(
            "/metadata/annotations",
            json!({ QUOTA_ANNOTATION: record }),
        ));
    }
    let Some(class) = borrowing_class.filter(|_| decision.standing == Standing::Borrowing) else {
        return ops;
    };
    let current = patched
        .pointer("/spec/priority")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    if i64::from(class.value) >= current {
        return ops;
    }
    ops.extend(op("/spec/priorityClassName", json!(class.name)));
    ops.extend(op("/spec/priority", json!(class.value)));
    ops.extend(op(
        "/spec/preemptionPolicy",
        json!(
            class
                .preemption_policy
                .as_deref()
                .unwrap_or("PreemptLowerPriority")
        ),
    ));
    ops
}
