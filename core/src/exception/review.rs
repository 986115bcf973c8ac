//! `/validate-exception`: who may create or change a `GpuPolicyException`, and what a valid one is. RBAC
//! `create`/`update` on `gpupolicyexceptions` in the namespace is the apiserver's own check; on top of it the
//! creator must hold `exempt tiers/<tier>` for the tier the namespace is held to ([`tier_power`]), asked as
//! every power is ([`crate::authority`]: a grant only through a `*` does not count, so neither a GitOps
//! controller's `*` nor the garbage collector's role creates one). Denied in every enforcement mode: `Warn`
//! and `Audit` relax what Pods may do, never who may relax the rules. Pure: the apiserver's answers come in as
//! [`Grants`], the time as `now`.

use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};
use time::{Duration, OffsetDateTime};

use super::{Exception, ExceptionRef, KIND, MAX_LIFETIME_DAYS, PLURAL, Rule};
use crate::authority::{Grants, Permission};
use crate::policy::{PolicySnapshot, TierScope};
use crate::review::Verdict;

/// The result of checking one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// Not a CREATE or UPDATE of an exception.
    NotOurs(&'static str),
    /// A valid exception, by a requester holding the power.
    Allowed {
        exception: ExceptionRef,
        tier: String,
    },
    /// What is wrong with the object itself.
    Invalid {
        exception: ExceptionRef,
        problems: Vec<String>,
    },
    /// A valid exception, by a requester without the power over the tier.
    Forbidden {
        exception: ExceptionRef,
        missing: Permission,
        /// Why the power is missing, when RBAC granted it only through a `*` ([`Grants::why_missing`]).
        why: String,
    },
}

/// The power over the tier `namespace` is held to: `exempt tiers/<tier>` (the default tier's for a
/// namespace without one). `None` before the policy is known.
pub fn tier_power(
    namespace: &str,
    policy: &PolicySnapshot,
    tier_of: &dyn Fn(&str) -> Option<String>,
) -> Option<Permission> {
    let tier = match policy.tier_for(tier_of(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => {
            policy.tier_rules(&t, namespace)?.tier.to_string()
        }
        TierScope::Denied(_) | TierScope::Ignored(_) => policy.default_tier()?.to_string(),
    };
    Some(Permission::Exempt(tier))
}

fn is_exception(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.kind.group == super::GROUP
        && req.kind.kind == KIND
        && req.resource.resource == PLURAL
        && req.sub_resource.as_deref().unwrap_or("").is_empty()
}

/// The power a request needs (asked of the apiserver by the edge before [`check`]); `None` when it needs
/// none (not ours) or the policy is not known yet.
pub fn needed_power(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    tier_of: &dyn Fn(&str) -> Option<String>,
) -> Option<Permission> {
    if !is_exception(req) || !matches!(req.operation, Operation::Create | Operation::Update) {
        return None;
    }
    tier_power(req.namespace.as_deref()?, policy, tier_of)
}

/// What is wrong with an exception at `now`: each problem in words (none: valid).
pub fn problems(e: &Exception, policy: &PolicySnapshot, now: OffsetDateTime) -> Vec<String> {
    let s = &e.spec;
    let mut out = Vec::new();
    if s.rules.is_empty() {
        out.push("spec.rules names no rule (Classes, PriorityCap, Quota)".to_string());
    }
    match (s.rules.contains(&Rule::Classes), s.classes.is_empty()) {
        (true, true) => out.push("spec.rules has Classes but spec.classes names none".into()),
        (false, false) => out.push("spec.classes is given but spec.rules has no Classes".into()),
        _ => {}
    }
    for c in s.classes.iter().filter(|c| policy.class(c).is_none()) {
        out.push(format!("spec.classes: {c:?} is no GPU class of the policy"));
    }
    match (
        s.rules.contains(&Rule::PriorityCap),
        s.max_priority_class.as_deref(),
    ) {
        (true, None) => {
            out.push("spec.rules has PriorityCap but spec.maxPriorityClass is not given".into())
        }
        (false, Some(_)) => {
            out.push("spec.maxPriorityClass is given but spec.rules has no PriorityCap".into())
        }
        (true, Some(c)) if !policy.priority_classes.contains_key(c) => out.push(format!(
            "spec.maxPriorityClass: {c:?} is no priority bucket of the policy"
        )),
        _ => {}
    }
    if s.workloads.is_empty() {
        out.push("spec.workloads names no workload".into());
    }
    if s.workloads.iter().any(|w| w.name.is_empty()) {
        out.push("spec.workloads: a workload without a name".into());
    }
    if !e.live(now) {
        out.push(format!(
            "spec.expiresAt {} is not in the future",
            s.expires_at
        ));
    }
    if e.expires_at > now + Duration::days(MAX_LIFETIME_DAYS) {
        out.push(format!(
            "spec.expiresAt {} is more than {MAX_LIFETIME_DAYS} days ahead",
            s.expires_at
        ));
    }
    out
}

/// Checks a CREATE or UPDATE of an exception: valid ([`problems`]) and by a requester holding
/// [`needed_power`] (in `grants`). An UPDATE is held to the same: it may extend or widen the exception.
pub fn check(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    tier_of: &dyn Fn(&str) -> Option<String>,
    grants: &Grants,
    now: OffsetDateTime,
) -> Check {
    if !is_exception(req) {
        return Check::NotOurs("not a GpuPolicyException");
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Check::NotOurs("not a CREATE or UPDATE");
    }
    let Some(object) = &req.object else {
        return Check::NotOurs("no object in the request");
    };
    let id = ExceptionRef {
        namespace: req.namespace.clone().unwrap_or_default(),
        name: object.metadata.name.clone().unwrap_or(req.name.clone()),
    };
    let problems = match Exception::from_object(object) {
        Ok(e) => problems(&e, policy, now),
        Err(why) => vec![why],
    };
    if !problems.is_empty() {
        return Check::Invalid {
            exception: id,
            problems,
        };
    }
    let Some(power) = needed_power(req, policy, tier_of) else {
        return Check::Invalid {
            exception: id,
            problems: vec!["the policy is not known yet: retry".into()],
        };
    };
    if !grants.allows(&power) {
        return Check::Forbidden {
            exception: id,
            why: grants.why_missing(&power),
            missing: power,
        };
    }
    let tier = power.name().unwrap_or_default().to_string();
    Check::Allowed {
        exception: id,
        tier,
    }
}

/// The answer: denied unless allowed, in every enforcement mode.
pub fn verdict(check: &Check, user: &str) -> Verdict {
    let denied = match check {
        Check::NotOurs(_) | Check::Allowed { .. } => None,
        Check::Invalid {
            exception,
            problems,
        } => Some(format!(
            "gpu-admission: {exception} is not valid: {}",
            problems.join("; ")
        )),
        Check::Forbidden {
            exception,
            missing,
            why,
        } => Some(format!(
            "gpu-admission: {user} may not create or change {exception}: relaxing the rules of tier {} needs \
             {}{why} in Kubernetes RBAC",
            missing.name().unwrap_or_default(),
            missing.describe()
        )),
    };
    Verdict {
        denied,
        warnings: Vec::new(),
    }
}
