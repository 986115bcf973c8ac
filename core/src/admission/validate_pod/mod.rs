//! The validating decision as pure functions: an object (a Pod, or a workload holding pod templates) +
//! requester + namespace tier + policy snapshot + PriorityClass facts → violations → verdict. No scorer: the
//! check is local, so it holds when the scorer is down.

mod admit;

pub use admit::{QuotaStep, QuotaUnavailable, Reservation, ValidatePorts, Validated, admit};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

pub use super::violation::{Reason, Violation, Where};
use crate::admission::validate_claim;
use crate::exception::{Exception, ExceptionRef};
use crate::facts::Facts;
use crate::placement;
use crate::pod::features;
use crate::pod::templates::{DescribedPod, described_pods};
use crate::policy::{PolicySnapshot, TierRules, TierScope, Untiered};
use crate::priority_class::{NoPriorityClasses, PriorityClassLookup};
use crate::review::Verdict;
use crate::tier_bound::{self, Breach};
use gpu_admission_policy::EnforcementMode;
use gpu_admission_policy::GpuClass;

/// The result of checking one request.
#[derive(Debug, PartialEq)]
pub enum Check {
    /// Not held to a tier (another operation, no GPU, no tier…): allowed without a word.
    NotOurs(&'static str),
    /// Nothing wrong, or the requester may run outside the tier: allowed.
    Allowed(Allowance),
    /// Violations to answer according to the enforcement mode.
    Violations {
        tier: String,
        /// `Job batch/train`.
        object: String,
        violations: Vec<Violation>,
        /// What the tier allows, for the message.
        allowed: String,
    },
}

/// Why an object held to a tier is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowance {
    /// Within the tier's classes and priority cap.
    WithinTier,
    /// Outside the tier, by a requester RBAC allows `exempt tiers/<tier>`.
    Exempt,
    /// An UPDATE that adds no violation to those the object already had.
    PredatesUpdate,
    /// Outside the tier, within it as this live `GpuPolicyException` of its namespace relaxes it.
    Excepted(ExceptionRef),
}

impl Allowance {
    pub fn as_str(&self) -> &'static str {
        match self {
            Allowance::WithinTier => "within the tier",
            Allowance::Exempt => "exempt from the tier (RBAC: exempt tiers/<tier>)",
            Allowance::PredatesUpdate => "violations predate the update",
            Allowance::Excepted(_) => "allowed by a GpuPolicyException",
        }
    }

    /// [`Self::as_str`], naming the exception when one allowed it.
    pub fn describe(&self) -> String {
        match self {
            Allowance::Excepted(e) => format!("allowed by {e}"),
            other => other.as_str().to_string(),
        }
    }
}

fn is_pod(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.kind.group.is_empty()
        && req.kind.kind == "Pod"
        && req.sub_resource.as_deref().unwrap_or("").is_empty()
}

/// Checks a CREATE or UPDATE of a Pod or of any object holding pod templates. On UPDATE only violations the
/// old object did not have count, so objects admitted earlier (in Warn, or before a policy change) can still
/// be scaled, labelled or deleted.
pub fn check(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    pcs: &dyn PriorityClassLookup,
) -> Check {
    check_with(req, policy, facts, pcs, None)
}

/// [`check`] against the tier as `exception` relaxes it ([`Exception::widen`]); what it then allows is
/// [`Allowance::Excepted`]. The exception must cover the object: the caller's [`crate::exception::covering`].
pub fn check_excepted(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    exception: &Exception,
) -> Check {
    let pcs = policy
        .known_priority_classes(facts.priority_classes)
        .unwrap_or(&NoPriorityClasses);
    match check_with(req, policy, facts, pcs, Some(exception)) {
        Check::Allowed(Allowance::WithinTier | Allowance::PredatesUpdate) => {
            Check::Allowed(Allowance::Excepted(exception.id.clone()))
        }
        other => other,
    }
}

/// The first of `covering` (live exceptions that cover the object: [`crate::exception::covering`]) under
/// which [`check_excepted`] allows it: what `/validate-pod` answers, and what the audit reports, for an object
/// outside its tier that an exception lets through.
pub fn excepted_by(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    covering: &[Exception],
) -> Option<Check> {
    covering
        .iter()
        .map(|e| check_excepted(req, policy, facts, e))
        .find(|c| matches!(c, Check::Allowed(Allowance::Excepted(_))))
}

fn check_with(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    pcs: &dyn PriorityClassLookup,
    exception: Option<&Exception>,
) -> Check {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Check::NotOurs("not a CREATE or UPDATE");
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Check::NotOurs("a sub-resource");
    }
    let Some(object) = &req.object else {
        return Check::NotOurs("no object in the request");
    };
    let Some(namespace) = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Check::NotOurs("not namespaced");
    };
    let tier = match policy.tier_for((facts.tier_of)(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        TierScope::Ignored(_) => return Check::NotOurs("namespace has no tier label"),
        TierScope::Denied(why) => return untiered(req, object, namespace, why, (policy, facts)),
    };
    let Some(mut rules) = policy.tier_rules(&tier, namespace) else {
        return Check::NotOurs("the policy is not known yet");
    };
    if let Some(e) = exception {
        e.widen(&mut rules, policy);
    }
    let pod = is_pod(req);
    let claim = validate_claim::claim_kind(req);
    let at = Where {
        namespace,
        rules: &rules,
        policy,
        facts,
        pcs,
    };
    let mut violations = object_violations(object, pod, claim, &at);
    if violations.is_empty() {
        return Check::Allowed(Allowance::WithinTier);
    }
    if facts.grants.allows(&crate::authority::Permission::Exempt(
        rules.tier.to_string(),
    )) {
        return Check::Allowed(Allowance::Exempt);
    }
    if req.operation == Operation::Update
        && let Some(old) = &req.old_object
    {
        let before = object_violations(old, pod, claim, &at);
        violations.retain(|v| !before.contains(v));
        if violations.is_empty() {
            return Check::Allowed(Allowance::PredatesUpdate);
        }
    }
    let mut allowed = allowed_text(&rules, policy);
    let names_device_classes = violations
        .iter()
        .any(|v| v.reason == Reason::DeviceClassOutsideTier);
    if claim.is_some() || names_device_classes {
        allowed = format!(
            "{allowed}; DeviceClasses {}",
            validate_claim::allowed_device_classes(&rules, policy)
        );
    }
    Check::Violations {
        tier: rules.tier.to_string(),
        object: format!("{} {namespace}/{}", req.kind.kind, object_name(object)),
        violations,
        allowed,
    }
}

/// `untieredNamespaces: Deny`: every GPU Pod and every Pod naming a PriorityClass of the namespace is a
/// violation (requesters RBAC lets run outside the default tier excepted, and on UPDATE only what is new).
fn untiered(
    req: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
    namespace: &str,
    why: Untiered,
    (policy, facts): (&PolicySnapshot, &Facts<'_>),
) -> Check {
    let pod = is_pod(req);
    let claim = validate_claim::claim_kind(req);
    let held = |o: &DynamicObject| -> Vec<Violation> {
        if let Some(kind) = claim {
            if !validate_claim::asks_for_gpus(o, kind, policy, facts.claim_templates) {
                return Vec::new();
            }
            return vec![Violation {
                reason: Reason::UntieredNamespace,
                path: "spec".into(),
                what: format!(
                    "asks for GPUs in namespace {namespace}, which {} (untieredNamespaces: Deny)",
                    why.describe()
                ),
            }];
        }
        described_pods(o, pod)
            .iter()
            .filter(|d| {
                let named = d.pod.spec.as_ref().is_some_and(|s| {
                    s.priority_class_name
                        .as_deref()
                        .is_some_and(|c| !c.is_empty())
                });
                named
                    || features::extract_with(
                        &d.pod,
                        namespace,
                        &policy.gpu_resources,
                        facts.claim_templates,
                    )
                    .gpu_count
                        > 0
            })
            .map(|d| Violation {
                reason: Reason::UntieredNamespace,
                path: d.path.clone(),
                what: format!(
                    "runs in namespace {namespace}, which {} (untieredNamespaces: Deny)",
                    why.describe()
                ),
            })
            .collect()
    };
    let mut violations = held(object);
    if violations.is_empty() {
        return Check::NotOurs("untiered namespace: no GPU and no PriorityClass");
    }
    // Outside every tier: exempt as from the default tier.
    let exempt =
        crate::authority::Permission::Exempt(policy.default_tier().unwrap_or_default().to_string());
    if facts.grants.allows(&exempt) {
        return Check::Allowed(Allowance::Exempt);
    }
    if req.operation == Operation::Update
        && let Some(old) = &req.old_object
    {
        let before = held(old);
        violations.retain(|v| !before.contains(v));
        if violations.is_empty() {
            return Check::Allowed(Allowance::PredatesUpdate);
        }
    }
    Check::Violations {
        tier: "none".to_string(),
        object: format!("{} {namespace}/{}", req.kind.kind, object_name(object)),
        violations,
        allowed: "no GPU and no PriorityClass without a tier label on the namespace".to_string(),
    }
}

fn object_name(object: &DynamicObject) -> &str {
    object
        .metadata
        .name
        .as_deref()
        .or(object.metadata.generate_name.as_deref())
        .unwrap_or("")
}

fn allowed_text(rules: &TierRules<'_>, policy: &PolicySnapshot) -> String {
    let mut s = format!("GPU classes {}", rules.describe_allowed(policy));
    if let Some(cap) = rules.max_priority_class {
        s.push_str(&format!("; PriorityClass at most {}", cap.name));
    }
    if rules.granted {
        s.push_str(" (with this namespace's grant)");
    }
    s
}

fn object_violations(
    object: &DynamicObject,
    is_pod: bool,
    claim: Option<validate_claim::ClaimKind>,
    at: &Where<'_>,
) -> Vec<Violation> {
    if let Some(kind) = claim {
        return validate_claim::violations(object, kind, at);
    }
    let described = described_pods(object, is_pod);
    if is_pod && described.is_empty() {
        // A Pod that does not read as a Pod cannot be decided: never silently allowed.
        return vec![Violation {
            reason: Reason::Undecidable,
            path: "Pod".into(),
            what: "cannot be read as a Pod".into(),
        }];
    }
    described
        .iter()
        .flat_map(|d| pod_violations(d, at))
        .collect()
}

/// The violations of one Pod: for a Pod without GPUs only its priority (and DRA claims that cannot be read).
/// The Pod itself is held to the whole tier
/// invariant (it has been through `/mutate-pod`); a pod template to what it names itself (its Pods are
/// mutated and checked when they are created).
pub fn pod_violations(described: &DescribedPod, at: &Where<'_>) -> Vec<Violation> {
    let (pod, path, itself) = (&described.pod, described.path.as_str(), described.itself);
    let f = features::extract_with(
        pod,
        at.namespace,
        &at.policy.gpu_resources,
        at.facts.claim_templates,
    );
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut found: Vec<(Reason, String)> = Vec::new();
    found.extend(unreadable_quantities(&f.unreadable_gpu_quantities));
    if f.gpu_count == 0 {
        found.extend(undecidable_claims(spec, &f.unresolved_claims, itself, at));
        found.extend(priority_violation(spec, at));
    } else {
        found.extend(class_violation(pod, spec, at));
        if found.is_empty() {
            found.extend(bound_violation(spec, itself, at));
        }
        found.extend(priority_violation(spec, at));
        found.extend(fit_violation(&f, at));
        found.extend(validate_claim::implicit_class_violations(
            &f.implicit_device_classes,
            at,
        ));
    }
    found
        .into_iter()
        .map(|(reason, what)| Violation {
            reason,
            path: path.to_string(),
            what,
        })
        .collect()
}

/// A class the Pod names itself outside the tier (or a constraint on other identifying labels that allows no
/// class of the tier).
fn class_violation(pod: &Pod, spec: &PodSpec, at: &Where<'_>) -> Option<(Reason, String)> {
    let (rules, policy) = (at.rules, at.policy);
    let keys: Vec<&str> = policy.class_label_keys.iter().map(String::as_str).collect();
    let outside: Vec<String> = placement::named_classes(spec, &keys)
        .into_iter()
        .filter(|(k, val)| {
            !policy
                .class_by_label(k, val)
                .is_some_and(|c| rules.allows(&c.name))
        })
        .map(|(k, val)| match policy.class_by_label(k, val) {
            Some(c) => c.name.clone(),
            None => format!("{k}={val} (not a catalog class)"),
        })
        .collect();
    if !outside.is_empty() {
        return Some((
            Reason::ClassOutsideTier,
            format!("selects GPU class {}", outside.join(", ")),
        ));
    }
    let own = placement::own_constraint(pod, &policy.class_labels)?;
    if own.allowed.iter().any(|c| rules.allows(c)) {
        return None;
    }
    // Constrained by other identifying labels (GPU Feature Discovery, cloud, HAMi) to no class of the tier.
    let allows = if own.allowed.is_empty() {
        "no GPU class of the catalog".to_string()
    } else {
        own.allowed.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    Some((
        Reason::ClassOutsideTier,
        format!("is constrained by {} to {allows}", own.sources.join(", ")),
    ))
}

/// The tier invariant ([`tier_bound`]) on a tier that restricts classes: the whole of it for the Pod itself,
/// the node it names for a pod template.
fn bound_violation(spec: &PodSpec, itself: bool, at: &Where<'_>) -> Option<(Reason, String)> {
    if !tier_bound::restricts(at.rules, at.policy.catalog()) {
        return None;
    }
    let held = if itself {
        tier_bound::check(spec, at.rules, at.policy.catalog(), at.facts.nodes)
    } else {
        tier_bound::node_bound(spec, at.rules, at.facts.nodes)
    };
    let breach = held.err()?;
    let reason = match breach {
        Breach::Unbounded { .. } => Reason::NotBoundToTier,
        Breach::UnknownNode(_) | Breach::NodeOutside { .. } => Reason::NodeOutsideTier,
    };
    Some((reason, breach.describe()))
}

/// A Pod of a restricting tier with no GPU counted but DRA claims that could not be read: whether it asks for
/// GPUs cannot be told, so it must carry the tier bound itself (or wait until its claims can be read).
fn undecidable_claims(
    spec: &PodSpec,
    unresolved: &[String],
    itself: bool,
    at: &Where<'_>,
) -> Option<(Reason, String)> {
    if unresolved.is_empty()
        || !itself
        || !tier_bound::restricts(at.rules, at.policy.catalog())
        || tier_bound::class_bound(spec, at.rules, at.policy.catalog()).is_ok()
    {
        return None;
    }
    Some((
        Reason::Undecidable,
        format!(
            "has DRA resource claims gpu-admission cannot read ({}): create their ResourceClaimTemplate or ResourceClaim first, so that it can tell whether they ask for GPUs",
            unresolved.join(", ")
        ),
    ))
}

/// GPU resources whose quantity is no Kubernetes quantity: how many GPUs the Pod asks for cannot be told, so
/// it cannot be held to its tier (the apiserver refuses such a Pod itself; a review or a template may still
/// carry one).
fn unreadable_quantities(unreadable: &[String]) -> Option<(Reason, String)> {
    if unreadable.is_empty() {
        return None;
    }
    Some((
        Reason::Undecidable,
        format!(
            "asks for GPUs with a quantity that is no Kubernetes quantity ({}): how many GPUs it asks for cannot be told",
            unreadable.join(", ")
        ),
    ))
}

/// A PriorityClass of the Pod's own beyond the tier's cap (its value, or its preemption): every Pod, GPU or
/// not; the `globalDefault` class is no exemption.
fn priority_violation(spec: &PodSpec, at: &Where<'_>) -> Option<(Reason, String)> {
    let beyond = at.rules.priority_beyond_cap(spec, at.pcs)?;
    Some((Reason::PriorityAboveCap, beyond.describe()))
}

/// A GPU need (memory per GPU, vendor) that no class of the tier meets; the message names the need no class
/// meets (memory, vendor, or the two together) and what the tier's classes offer.
fn fit_violation(f: &features::JobFeatures, at: &Where<'_>) -> Option<(Reason, String)> {
    let (rules, policy) = (at.rules, at.policy);
    let memory = f.gpu_memory_gib.or_else(|| {
        f.job_type
            .as_deref()
            .and_then(|jt| policy.job_type_default_memory_gib.get(jt).copied())
    });
    let vendor = f.gpu_vendor;
    let tier: Vec<_> = policy
        .catalog()
        .iter()
        .filter(|c| rules.allows(&c.name))
        .collect();
    let memory_fits = |c: &&GpuClass| memory.is_none_or(|m| c.memory_gib >= m);
    let vendor_fits = |c: &&GpuClass| vendor.is_none_or(|v| c.vendor == v);
    if tier.is_empty() || tier.iter().any(|c| memory_fits(c) && vendor_fits(c)) {
        return None;
    }
    let vendor = vendor.map_or("unknown", |v| v.as_str());
    // Which need some class of the tier meets on its own.
    let memory_met = tier.iter().any(memory_fits);
    let vendor_met = tier.iter().any(vendor_fits);
    let what = match memory {
        // Memory alone: some class is of the vendor (or it is unknown), none that large.
        Some(m) if vendor_met && !memory_met => {
            let largest = tier.iter().map(|c| c.memory_gib).fold(0.0_f64, f64::max);
            format!(
                "needs {m} GiB of GPU memory per GPU, more than any GPU class of the tier has (at most {largest} GiB)"
            )
        }
        Some(m) if vendor_met => format!(
            "needs {vendor} GPUs with {m} GiB of memory per GPU, which no one GPU class of the tier offers together"
        ),
        Some(m) if !memory_met => format!(
            "needs {vendor} GPUs with {m} GiB of memory per GPU: the tier has no {vendor} GPU class, none with that much memory"
        ),
        _ => format!("needs {vendor} GPUs; the tier has no {vendor} GPU class"),
    };
    Some((Reason::NoClassFits, what))
}

/// The `/validate-pod` decision: [`check`] with the PriorityClasses every webhook decides with (the cluster's,
/// else the policy's buckets), and its [`verdict`] under the policy's mode.
pub fn decide(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
) -> (Check, Verdict) {
    let pcs = policy
        .known_priority_classes(facts.priority_classes)
        .unwrap_or(&NoPriorityClasses);
    let check = check(req, policy, facts, pcs);
    let verdict = verdict(&check, policy.mode);
    (check, verdict)
}

/// The answer for a check under an enforcement mode: Enforce denies, Warn admits with a warning, Audit (and a
/// scorer too old to say) admits silently.
pub fn verdict(check: &Check, mode: EnforcementMode) -> Verdict {
    let Check::Violations {
        tier,
        object,
        violations,
        allowed,
    } = check
    else {
        return Verdict::default();
    };
    let what: Vec<String> = violations
        .iter()
        .map(|v| {
            if v.path == "Pod" {
                v.what.clone()
            } else {
                format!("{}: {}", v.path, v.what)
            }
        })
        .collect();
    let message = format!(
        "gpu-admission: {object} is outside tier {tier}: {}. Tier {tier} allows {allowed}",
        what.join("; ")
    );
    Verdict::for_mode(mode, message)
}

#[cfg(test)]
mod tests;
