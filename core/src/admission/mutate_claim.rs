//! `/mutate-claim`'s decision: a ResourceClaim or ResourceClaimTemplate CREATE in a tier namespace, in
//! Enforce, gets the tier's product selector on every request that could otherwise be allocated GPUs
//! outside the tier ([`validate_claim::place`]), as a Pod gets the tier's node selector. Mutation never
//! refuses: what cannot be held (a request pinning a class outside the tier, a selector that cannot be
//! decided) passes unchanged, and `/validate-pod`'s claim check refuses it with the tier's message. A
//! requester RBAC lets run outside the tier (`exempt tiers/<tier>`) is left as asked.

use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

use super::validate_claim::{self, place::Placed};
use super::violation::Where;
use crate::facts::Facts;
use crate::policy::{PolicySnapshot, TierScope};
use crate::priority_class::NoPriorityClasses;
use crate::review::{Answer, Patch};
use gpu_admission_policy::EnforcementMode;

/// Why a request was left as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchanged {
    /// Not the CREATE of a claim or a claim template.
    NotAClaimCreate,
    /// The namespace has no tier, or the policy is not known.
    NoTier,
    /// The policy is not in Enforce: the tier is reported, not imposed.
    NotEnforced,
    /// The requester may run outside the tier.
    Exempt,
    /// Every request is within the tier already, or none can be held to it.
    NothingToPlace,
}

impl Unchanged {
    pub fn as_str(self) -> &'static str {
        match self {
            Unchanged::NotAClaimCreate => "not a claim create",
            Unchanged::NoTier => "no tier",
            Unchanged::NotEnforced => "not enforced",
            Unchanged::Exempt => "exempt",
            Unchanged::NothingToPlace => "nothing to place",
        }
    }
}

/// What `/mutate-claim` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Unchanged(Unchanged),
    /// These requests now select only the tier's classes.
    Placed {
        tier: String,
        placed: Vec<Placed>,
    },
}

impl Outcome {
    /// The metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Unchanged(_) => "unchanged",
            Outcome::Placed { .. } => "placed",
        }
    }
}

/// The decision for one claim or claim template request, and the answer (a patch and a warning naming what
/// was held, or nothing).
pub fn admit(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
) -> (Outcome, Answer) {
    let unchanged = |why| (Outcome::Unchanged(why), Answer::default());
    let kind = validate_claim::claim_kind(req);
    let (Some(kind), Operation::Create, Some(object)) = (kind, &req.operation, &req.object) else {
        return unchanged(Unchanged::NotAClaimCreate);
    };
    let Some(namespace) = req.namespace.as_deref().filter(|n| !n.is_empty()) else {
        return unchanged(Unchanged::NoTier);
    };
    let tier = match policy.tier_for((facts.tier_of)(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        TierScope::Ignored(_) | TierScope::Denied(_) => return unchanged(Unchanged::NoTier),
    };
    let Some(rules) = policy.tier_rules(&tier, namespace) else {
        return unchanged(Unchanged::NoTier);
    };
    if policy.mode != EnforcementMode::Enforce {
        return unchanged(Unchanged::NotEnforced);
    }
    if facts
        .grants
        .allows(&crate::authority::Permission::Exempt(tier.clone()))
    {
        return unchanged(Unchanged::Exempt);
    }
    let pcs = policy
        .known_priority_classes(facts.priority_classes)
        .unwrap_or(&NoPriorityClasses);
    let at = Where {
        namespace,
        rules: &rules,
        policy,
        facts,
        pcs,
    };
    let (ops, placed) = validate_claim::place::placing_operations(object, kind, &at);
    if ops.is_empty() {
        return unchanged(Unchanged::NothingToPlace);
    }
    let warnings = placed
        .iter()
        .map(|p| {
            format!(
                "gpu-admission: {} of {} {namespace}/{} held to tier {tier}: devices of {} only",
                p.label,
                req.kind.kind,
                object.metadata.name.as_deref().unwrap_or(""),
                p.classes.join(", ")
            )
        })
        .collect();
    let answer = Answer {
        patch: Patch::from_operations(&ops),
        warnings,
    };
    (Outcome::Placed { tier, placed }, answer)
}
