//! One running object → its PolicyReport results, decided by core's `/validate-pod` decision
//! (`validate_pod::decide`) on the review the object would make if it were created now. Nothing here is a
//! rule of its own: which objects are ours, what violates the tier and the message all come from core.
//!
//! Who created a running object is not recorded anywhere the audit can read, so every object is reviewed as
//! if its creator held no exemption: an object created outside the tier by a requester RBAC exempts (`exempt
//! tiers/<tier>`, honoured at admission) is reported like anyone's, and its results say that the exemption
//! is not visible to the audit. Exceptions are objects, so the audit does see them: an object a live
//! GpuPolicyException allows is a `skip` result naming it.

use std::collections::BTreeMap;

use gpu_admission_core::admission::validate_pod::{self, Allowance, Check, Violation};
use gpu_admission_core::exception::{self, Exception, ExceptionRef, Rule};
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::features;
use gpu_admission_core::pod::templates::described_pods;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::workload::{OwnerFacts, OwnerQuery};
use gpu_admission_policy::EnforcementMode;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The `rule` of a pass result (a failing result's rule is the violation's reason).
pub const RULE_WITHIN_TIER: &str = "within_tier";
/// The `rule` of a skip result: outside the tier, allowed by a live GpuPolicyException.
pub const RULE_EXCEPTED: &str = "excepted";
/// The `requester` property of a failing result: why an admin's object is reported too.
pub const REQUESTER_NOT_VISIBLE: &str = "not recorded: evaluated as a non-admin (an admin's exemption at admission is not visible to the audit)";

/// A resource the audit lists: group, version, kind and plural (`apps`, `v1`, `Deployment`, `deployments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
}

impl Kind {
    pub fn pods() -> Self {
        Self {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
            plural: "pods".into(),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn is_pod(&self) -> bool {
        self.group.is_empty() && self.kind == "Pod"
    }
}

/// The wgpolicyk8s result of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Violates the tier under `Enforce` (it would be denied if created now) or `Audit`.
    Fail,
    /// Violates the tier under `Warn` (admitted with this warning); `scored: false`.
    Warn,
    /// Outside its tier, allowed by a live GpuPolicyException (named in the result); `scored: false`. Kept
    /// before passes when a report is capped: what an exception allows is what an admin reviews.
    Skip,
    /// A GPU object within its tier.
    Pass,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fail => "fail",
            Outcome::Warn => "warn",
            Outcome::Pass => "pass",
            Outcome::Skip => "skip",
        }
    }

    /// The result a violation gets under the policy's mode.
    pub fn of_violation(mode: EnforcementMode) -> Self {
        match mode {
            EnforcementMode::Warn => Outcome::Warn,
            EnforcementMode::Enforce | EnforcementMode::Audit => Outcome::Fail,
        }
    }
}

/// The object a result is about (an `ObjectReference`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Resource {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One result of one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub outcome: Outcome,
    /// The violation's reason (`class_outside_tier`, …), or [`RULE_WITHIN_TIER`].
    pub rule: &'static str,
    /// What `/validate-pod` tells the user (its warning or denial, whatever the mode).
    pub message: String,
    pub resource: Resource,
    pub properties: BTreeMap<String, String>,
}

/// The review `object` would make if created now by a non-admin.
fn review(object: &DynamicObject, kind: &Kind, namespace: &str) -> AdmissionRequest<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    AdmissionRequest {
        types: TypeMeta::default(),
        uid: "gpu-admission-audit".into(),
        kind: gvk,
        resource: GroupVersionResource::gvr(&kind.group, &kind.version, &kind.plural),
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: object.metadata.name.clone().unwrap_or_default(),
        namespace: Some(namespace.to_string()),
        operation: Operation::Create,
        user_info: Default::default(),
        object: Some(object.clone()),
        old_object: None,
        dry_run: true,
        options: None,
    }
}

/// Whether any Pod the object describes asks for GPUs (core's feature extraction): only GPU objects get a
/// pass result.
fn asks_for_gpus(
    object: &DynamicObject,
    kind: &Kind,
    namespace: &str,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
) -> bool {
    described_pods(object, kind.is_pod()).iter().any(|d| {
        features::extract_with(
            &d.pod,
            namespace,
            &policy.gpu_resources,
            facts.claim_templates,
        )
        .gpu_count
            > 0
    })
}

/// What the audit knows of exceptions: the cluster's GpuPolicyExceptions, the owners their chains need
/// (a ReplicaSet's or Job's own controller) and the time their expiry is read against.
pub struct ExceptionFacts<'a> {
    pub exceptions: &'a [Exception],
    pub owner: &'a dyn Fn(&OwnerQuery) -> Option<OwnerFacts>,
    pub now: OffsetDateTime,
}

/// The results of one object: none when the object is not held to a tier (no tier label, no GPU, the policy
/// unknown), one pass for a GPU object within its tier, one skip naming the exception for an object outside
/// its tier that a live GpuPolicyException allows (as `/validate-pod` would allow it), one fail/warn per
/// violated rule otherwise, each with `/validate-pod`'s whole message.
pub fn evaluate(
    object: &DynamicObject,
    kind: &Kind,
    policy: &PolicySnapshot,
    (facts, exceptions): (&Facts<'_>, &ExceptionFacts<'_>),
) -> Vec<Finding> {
    let Some(namespace) = object
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
    else {
        return Vec::new();
    };
    let req = review(object, kind, namespace);
    let (check, _) = validate_pod::decide(&req, policy, facts);
    let resource = Resource {
        api_version: kind.api_version(),
        kind: kind.kind.clone(),
        namespace: namespace.to_string(),
        name: object.metadata.name.clone().unwrap_or_default(),
        uid: object.metadata.uid.clone().unwrap_or_default(),
    };
    let mut properties = BTreeMap::from([
        ("mode".to_string(), policy.mode.as_str().to_string()),
        ("policyVersion".to_string(), policy.version.clone()),
    ]);
    match &check {
        Check::NotOurs(_) => Vec::new(),
        Check::Allowed(_) => {
            if !asks_for_gpus(object, kind, namespace, policy, facts) {
                return Vec::new();
            }
            let scope = policy.tier_for((facts.tier_of)(namespace).as_deref());
            if let Some(rules) = scope.tier().and_then(|t| policy.tier_rules(t, namespace)) {
                properties.insert("tier".into(), rules.tier.to_string());
            }
            vec![Finding {
                outcome: Outcome::Pass,
                rule: RULE_WITHIN_TIER,
                message: format!(
                    "{} {namespace}/{} is within its tier",
                    kind.kind, resource.name
                ),
                resource,
                properties,
            }]
        }
        Check::Violations { tier, .. }
            if let Some((e, expires)) = excepted(object, &req, policy, facts, exceptions) =>
        {
            properties.insert("tier".into(), tier.clone());
            properties.insert("exception".into(), format!("{}/{}", e.namespace, e.name));
            properties.insert("expiresAt".into(), expires.clone());
            vec![Finding {
                outcome: Outcome::Skip,
                rule: RULE_EXCEPTED,
                message: format!(
                    "{} {namespace}/{} is outside its tier, allowed by {e} until {expires}",
                    kind.kind, resource.name
                ),
                resource,
                properties,
            }]
        }
        Check::Violations {
            tier, violations, ..
        } => {
            // The message the user gets: Warn's wording is the denial's too (the mode only decides how it
            // is answered).
            let message = validate_pod::verdict(&check, EnforcementMode::Warn)
                .warnings
                .into_iter()
                .next()
                .unwrap_or_default();
            properties.insert("tier".into(), tier.clone());
            properties.insert("requester".into(), REQUESTER_NOT_VISIBLE.into());
            by_reason(violations)
                .into_iter()
                .map(|(reason, what)| {
                    let mut properties = properties.clone();
                    properties.insert("violation".into(), what);
                    Finding {
                        outcome: Outcome::of_violation(policy.mode),
                        rule: reason,
                        message: message.clone(),
                        resource: resource.clone(),
                        properties,
                    }
                })
                .collect()
        }
    }
}

/// The live exception, covering `object` by its owner chain as stored, under which `/validate-pod` would
/// allow it ([`validate_pod::excepted_by`]), with its expiry (RFC 3339). The chain is the stored owner
/// references: the audit cannot tell who wrote them, so an object whose forged references name a covered
/// workload reads as covered here (at admission it was not: `exception::as_created_by`).
fn excepted(
    object: &DynamicObject,
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    ex: &ExceptionFacts<'_>,
) -> Option<(ExceptionRef, String)> {
    let namespace = req.namespace.as_deref()?;
    if !ex
        .exceptions
        .iter()
        .any(|e| e.id.namespace == namespace && e.live(ex.now))
    {
        return None;
    }
    let next = exception::chain_query(&object.metadata, namespace).and_then(|q| (ex.owner)(&q));
    let chain = exception::request_chain(req, next.as_ref());
    let covering: Vec<Exception> = exception::covering(
        &chain,
        ex.exceptions,
        namespace,
        ex.now,
        &[Rule::Classes, Rule::PriorityCap],
    )
    .into_iter()
    .cloned()
    .collect();
    let Check::Allowed(Allowance::Excepted(id)) =
        validate_pod::excepted_by(req, policy, facts, &covering)?
    else {
        return None;
    };
    let e = covering.iter().find(|e| e.id == id)?;
    let expires = e.expires_at.format(&Rfc3339).ok()?;
    Some((id, expires))
}

/// Violations grouped by reason, in order of first appearance: `(reason, "path: what; …")`.
fn by_reason(violations: &[Violation]) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, Vec<String>)> = Vec::new();
    for v in violations {
        let clause = format!("{}: {}", v.path, v.what);
        match out.iter_mut().find(|(r, _)| *r == v.reason.as_str()) {
            Some((_, clauses)) => clauses.push(clause),
            None => out.push((v.reason.as_str(), vec![clause])),
        }
    }
    out.into_iter().map(|(r, c)| (r, c.join("; "))).collect()
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
