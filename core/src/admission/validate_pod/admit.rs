//! `/validate-pod` end to end, as one function over ports: [`admit`] checks the object against its tier,
//! asks the requester's RBAC powers only for an object outside it, then holds a Pod CREATE to its GPU quota
//! (reserving what it admits). What the function needs from the world — the cluster facts, the
//! SubjectAccessReviews, the quota usage and its reservations — comes through [`ValidatePorts`], so the
//! frontend (watch caches, the apiserver, the quota ledger) and the CLI (files, a usage snapshot) answer
//! alike.

use std::future::Future;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;

use super::{Check, decide, excepted_by};
use crate::admission::ValidationOutcome;
use crate::authority::{Grants, Permission};
use crate::exception::{self, Exception, ExceptionRef, Owner, Rule};
use crate::facts::Facts;
use crate::policy::{PolicySnapshot, TierScope};
use crate::quota::{self, Decision, QuotaViolation, Usage};
use crate::review::Verdict;
use gpu_admission_policy::EnforcementMode;
use time::OffsetDateTime;

/// What a reservation attempt does with the decision taken over the usage it was offered.
#[derive(Debug)]
pub enum Reservation {
    /// No quota applies to the Pod: nothing to reserve.
    NoQuota,
    /// Answered without holding anything (denied in Enforce): nothing to reserve.
    Refused(Decision),
    /// Admitted: the Pod's count is reserved until the usage holds the Pod itself.
    Reserve(Decision),
}

impl Reservation {
    /// The decision taken, reserved or not (`None`: no quota applies).
    pub fn decision(self) -> Option<Decision> {
        match self {
            Reservation::NoQuota => None,
            Reservation::Refused(d) | Reservation::Reserve(d) => Some(d),
        }
    }
}

/// Why a Pod's quota could not be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaUnavailable {
    /// The usage is not counted yet (the frontend's Pod watch has not listed).
    NotCountedYet,
    /// The reservation could not be written (the detail says why).
    NotReserved(String),
}

/// What `/validate-pod` asks the world for.
pub trait ValidatePorts: Sync {
    /// Runs `f` with the cluster facts under `grants` (the caches behind them are read only inside).
    fn with_facts<R>(&self, grants: &Grants, f: impl FnOnce(&Facts<'_>) -> R) -> R;

    /// Which of `wanted` the requester holds (SubjectAccessReviews; none where they cannot be asked).
    fn grants(&self, user: &UserInfo, wanted: &[Permission]) -> impl Future<Output = Grants>;

    /// Whether this instance holds GPU quotas at all (it counts the cluster's usage); none by default.
    fn holds_quotas(&self) -> bool {
        false
    }

    /// The `GpuPolicyException`s of `namespace` (live or not: expiry is the decision's); none by default.
    fn exceptions(&self, _namespace: &str) -> Vec<Exception> {
        Vec::new()
    }

    /// The owner chain of the request's object ([`exception::request_chain`]), the owner's own controller
    /// read where the port can ([`exception::request_query`]); by default only what the object says.
    fn owner_chain(
        &self,
        req: &AdmissionRequest<DynamicObject>,
    ) -> impl Future<Output = Vec<Owner>> {
        std::future::ready(exception::request_chain(req, None))
    }

    /// What an exception's expiry is compared with.
    fn now(&self) -> OffsetDateTime;

    /// The stored Pods of `namespace` that the ResourceClaim `claim` serves ([`quota::held::HeldPods::served_by`]),
    /// slimmed to what counting reads; none where no usage is counted.
    fn pods_served_by(&self, _namespace: &str, _claim: &quota::ClaimRef) -> Vec<Pod> {
        Vec::new()
    }

    /// Offers the usage (what the cluster holds plus the reservations in flight) to `decide` and, when it
    /// answers [`Reservation::Reserve`] and `keep` is true, reserves `ask` for `pod` on top of exactly that
    /// usage (another admission reserving first: offered the new usage again). The decision taken, `None`
    /// for [`Reservation::NoQuota`].
    fn reserve(
        &self,
        ask: &quota::Ask,
        pod: &quota::ledger::Reserving<'_>,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> impl Future<Output = Result<Option<Decision>, QuotaUnavailable>>;
}

/// What the quota step of a request did.
#[derive(Debug)]
pub enum QuotaStep {
    /// A workload whose replicas can never fit a `max` of its tier or namespace: answered at its creation.
    NeverFits { tier: String, message: String },
    /// The usage is not counted yet: denied in Enforce.
    NotCountedYet,
    /// Not held to the quota: a live exception covering the Pod relaxes it (`Quota`).
    Excepted(ExceptionRef),
    /// The quota could not be decided (the reservation failed): denied in Enforce, a warning otherwise.
    Undecided { tier: String, message: String },
    /// Decided against the usage; `answered` when the decision is a violation the mode answers.
    Decided {
        tier: String,
        namespace: String,
        decision: Decision,
        answered: Option<(QuotaViolation, String)>,
    },
}

impl QuotaStep {
    /// The violation this step found, when it found one: the tier, the metric's reason and the message.
    pub fn violation(&self) -> Option<(&str, QuotaViolation, &str)> {
        match self {
            QuotaStep::NeverFits { tier, message } => {
                Some((tier, QuotaViolation::OverMax, message))
            }
            QuotaStep::Undecided { tier, message } => {
                Some((tier, QuotaViolation::Undecided, message))
            }
            QuotaStep::Decided {
                tier,
                answered: Some((why, message)),
                ..
            } => Some((tier, *why, message)),
            QuotaStep::NotCountedYet | QuotaStep::Excepted(_) | QuotaStep::Decided { .. } => None,
        }
    }
}

/// What `/validate-pod` answered one request, and how.
#[derive(Debug)]
pub struct Validated {
    pub check: Check,
    /// The quota step, when one ran (a request the tier check did not deny, where quotas are held).
    pub quota: Option<QuotaStep>,
    pub verdict: Verdict,
}

impl Validated {
    pub fn outcome(&self) -> ValidationOutcome {
        if self.verdict.denied.is_some() {
            return ValidationOutcome::Denied;
        }
        let quota_violation = matches!(
            &self.quota,
            Some(
                QuotaStep::NeverFits { .. }
                    | QuotaStep::Decided {
                        answered: Some(_),
                        ..
                    }
            )
        );
        match &self.check {
            Check::Violations { .. } => ValidationOutcome::ViolationAdmitted,
            _ if quota_violation => ValidationOutcome::ViolationAdmitted,
            Check::NotOurs(_) => ValidationOutcome::Skipped,
            Check::Allowed(_) => ValidationOutcome::Allowed,
        }
    }
}

/// `/validate-pod` for one request: [`decide`] with no powers; for an object outside its tier, again with
/// the requester's `exempt` power on the tier its namespace is held to; then, unless denied, the quota step
/// ([`quota_step`]).
pub async fn admit<P: ValidatePorts>(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    ports: &P,
) -> Validated {
    // DRA admin access to GPUs is a power of its own, in every mode (as the tier label is).
    if let Some(denied) = record_rewritten(req) {
        return denied;
    }
    let admin_access = ports.with_facts(&Grants::none(), |f| {
        crate::admission::validate_claim::asks_gpu_admin_access(req, policy, f.claim_templates)
    });
    if admin_access {
        let grants = ports
            .grants(&req.user_info, &[Permission::AdminAccess])
            .await;
        if !grants.allows(&Permission::AdminAccess) {
            return admin_access_denied(req, &grants);
        }
    }
    let (mut check, mut verdict) = ports.with_facts(&Grants::none(), |f| decide(req, policy, f));
    if let Check::Violations { .. } = &check {
        let covering = covering(req, ports, &[Rule::Classes, Rule::PriorityCap]).await;
        if let Some(excepted) =
            ports.with_facts(&Grants::none(), |f| excepted_by(req, policy, f, &covering))
        {
            (check, verdict) = (excepted, Verdict::default());
        }
    }
    if let Check::Violations { .. } = &check
        && let Some(exempt) = ports.with_facts(&Grants::none(), |f| exemption(req, policy, f))
    {
        let grants = ports.grants(&req.user_info, &[exempt]).await;
        (check, verdict) = ports.with_facts(&grants, |f| decide(req, policy, f));
    }
    let quota = if verdict.denied.is_none() && ports.holds_quotas() {
        match quota_excepted(req, policy, ports).await {
            Some(e) => Some(QuotaStep::Excepted(e)),
            None => quota_step(req, policy, ports, &mut verdict).await,
        }
    } else {
        None
    };
    Validated {
        check,
        quota,
        verdict,
    }
}

/// The live exceptions of the request's namespace covering its object for one of `rules`, by name; the owner
/// chain is read only when the namespace has exceptions at all.
async fn covering<P: ValidatePorts>(
    req: &AdmissionRequest<DynamicObject>,
    ports: &P,
    rules: &[Rule],
) -> Vec<Exception> {
    let Some(namespace) = req.namespace.as_deref() else {
        return Vec::new();
    };
    let all = ports.exceptions(namespace);
    let now = ports.now();
    if !all.iter().any(|e| e.live(now)) {
        return Vec::new();
    }
    let Some(object) = req.object.as_ref() else {
        return Vec::new();
    };
    let chain = exception::as_created_by(
        ports.owner_chain(req).await,
        &object.metadata,
        req.user_info.username.as_deref(),
    );
    exception::covering(&chain, &all, namespace, now, rules)
        .into_iter()
        .cloned()
        .collect()
}

/// The exception that relaxes the quota of a GPU Pod CREATE, if one covers it.
async fn quota_excepted<P: ValidatePorts>(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    ports: &P,
) -> Option<ExceptionRef> {
    let quotas = policy.policy.as_deref().is_some_and(|p| p.quotas.any());
    if !quotas || req.operation != kube_core::admission::Operation::Create {
        return None;
    }
    let e = covering(req, ports, &[Rule::Quota])
        .await
        .into_iter()
        .next()?;
    Some(e.id)
}

/// A Pod UPDATE that changes which instance decided the Pod (`decided-by`): instances write it at CREATE only,
/// and the observer routes and learns a run by it, so no UPDATE may change it, add it or remove it, in every
/// mode (as the tier label). Its forgery at CREATE is the mutation's to undo (`crate::ns_lock::take_over`).
fn record_rewritten(req: &AdmissionRequest<DynamicObject>) -> Option<Validated> {
    use crate::names::decision::ANN_DECIDED_BY;
    if req.operation != kube_core::admission::Operation::Update
        || !req.kind.group.is_empty()
        || req.kind.kind != "Pod"
    {
        return None;
    }
    let decided_by = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.metadata.annotations.as_ref())
            .and_then(|a| a.get(ANN_DECIDED_BY))
            .cloned()
    };
    let (before, after) = (
        decided_by(req.old_object.as_ref()),
        decided_by(req.object.as_ref()),
    );
    if before == after || req.object.is_none() {
        return None;
    }
    let shown = |v: &Option<String>| {
        v.as_deref()
            .map_or("none".to_string(), |v| format!("{v:?}"))
    };
    Some(Validated {
        check: Check::NotOurs("an UPDATE rewriting the decision record"),
        quota: None,
        verdict: Verdict {
            denied: Some(format!(
                "gpu-admission: Pod {}/{}: {ANN_DECIDED_BY} is written by the instance that decided the Pod, at \
                 its CREATE, and never changes (it was {}, the update makes it {}); create a new Pod instead",
                req.namespace.as_deref().unwrap_or(""),
                req.name,
                shown(&before),
                shown(&after)
            )),
            warnings: Vec::new(),
        },
    })
}

/// A GPU claim with `adminAccess: true` by a requester without `use adminaccess`: denied, whatever the mode.
fn admin_access_denied(req: &AdmissionRequest<DynamicObject>, grants: &Grants) -> Validated {
    let p = Permission::AdminAccess;
    let user = req
        .user_info
        .username
        .as_deref()
        .unwrap_or("an unnamed user");
    let object = format!(
        "{} {}/{}",
        req.kind.kind,
        req.namespace.as_deref().unwrap_or(""),
        req.name
    );
    Validated {
        check: Check::NotOurs("a GPU claim with adminAccess, without the power"),
        quota: None,
        verdict: Verdict {
            denied: Some(format!(
                "gpu-admission: {user} creates {object} asking for GPUs with adminAccess: true (devices other \
                 tenants' Pods are using): DRA admin access needs {}{} in Kubernetes RBAC (the ClusterRole \
                 gpu-admission-device-admin)",
                p.describe(),
                grants.why_missing(&p)
            )),
            warnings: Vec::new(),
        },
    }
}

/// The power that would let the requester run the object outside the tier its namespace is held to (the
/// default tier's for an untiered namespace under `untieredNamespaces: Deny`).
fn exemption(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
) -> Option<Permission> {
    let namespace = req.namespace.as_deref()?;
    let tier = match policy.tier_for((facts.tier_of)(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => {
            policy.tier_rules(&t, namespace)?.tier.to_string()
        }
        TierScope::Denied(_) => policy.default_tier()?.to_string(),
        TierScope::Ignored(_) => return None,
    };
    Some(Permission::Exempt(tier))
}

/// The quota of a CREATE the tier check admits: a workload that can never fit is answered at its creation;
/// a Pod is decided against the usage and, admitted, reserved (a dry run reserves nothing); over a `max` is
/// denied in Enforce, warned in Warn ([`quota::answer`]).
async fn quota_step<P: ValidatePorts>(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    ports: &P,
    verdict: &mut Verdict,
) -> Option<QuotaStep> {
    // A policy without quotas pays nothing here.
    let p = policy.policy.as_deref().filter(|p| p.quotas.any())?;
    let none = Grants::none();
    if let Some((tier, message)) =
        ports.with_facts(&none, |f| quota::workload_answer(req, policy, f, verdict))
    {
        return Some(QuotaStep::NeverFits { tier, message });
    }
    if let Some(step) = claim_step(req, policy, p, ports, verdict).await {
        return Some(step);
    }
    let ask = ports.with_facts(&none, |f| quota::of_request(req, policy, f))?;
    // The apiserver assigns the UID before validating admission; without one (not an apiserver) the usage
    // cannot tell this Pod from the watch's, so it is reserved under the request's UID.
    let object = req.object.as_ref();
    let pod = quota::ledger::Reserving {
        uid: object
            .and_then(|o| o.metadata.uid.as_deref())
            .unwrap_or(&req.uid),
        name: object
            .and_then(|o| o.metadata.name.as_deref())
            .unwrap_or(&req.name),
    };
    let enforce = policy.mode == EnforcementMode::Enforce;
    let decide = |usage: &Usage| {
        let Some(d) = quota::decide(p, &ask.0, &ask.1, &ask.2, usage) else {
            return Reservation::NoQuota;
        };
        // Reserved only when admitted: what `quota::answer` would deny holds no GPU.
        let denies = enforce
            && ports.with_facts(&none, |f| {
                quota::answer(&d, req, policy, f, &mut Verdict::default()).is_some()
            });
        if denies {
            Reservation::Refused(d)
        } else {
            Reservation::Reserve(d)
        }
    };
    let (tier, namespace) = (ask.0.clone(), ask.1.clone());
    let decision = match ports.reserve(&ask, &pod, !req.dry_run, &decide).await {
        Ok(d) => d?,
        Err(QuotaUnavailable::NotCountedYet) => {
            if enforce {
                verdict.denied = Some(quota::NOT_COUNTED_YET.to_string());
            }
            return Some(QuotaStep::NotCountedYet);
        }
        Err(QuotaUnavailable::NotReserved(why)) => {
            let message =
                format!("gpu-admission: the GPU quota could not be reserved ({why}); retry");
            // Undecided is answered as undecidable: denied in Enforce, a warning otherwise (Audit included:
            // the request was not checked).
            if enforce {
                verdict.denied = Some(message.clone());
            } else {
                verdict.warnings.push(message.clone());
            }
            return Some(QuotaStep::Undecided { tier, message });
        }
    };
    let answered = ports.with_facts(&none, |f| quota::answer(&decision, req, policy, f, verdict));
    Some(QuotaStep::Decided {
        tier,
        namespace,
        decision,
        answered,
    })
}

/// A ResourceClaim CREATE that stored Pods already name: each such Pod asks again with this claim (what it
/// would hold with it, against the usage without what it holds now); over a `max` the claim is answered as
/// an over-max Pod is. Nothing is reserved: the Pod is stored, and the watch counts the claim once created.
async fn claim_step<P: ValidatePorts>(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    p: &gpu_admission_policy::Policy,
    ports: &P,
    verdict: &mut Verdict,
) -> Option<QuotaStep> {
    if crate::admission::validate_claim::claim_kind(req)
        != Some(crate::admission::validate_claim::ClaimKind::Claim)
    {
        return None;
    }
    let namespace = req.namespace.as_deref()?;
    let claim = quota::ClaimRef::of(&req.object.as_ref()?.metadata)?;
    let name = claim.name.as_str();
    let pods = ports.pods_served_by(namespace, &claim);
    if pods.is_empty() {
        return None;
    }
    let none = Grants::none();
    let reasks = ports.with_facts(&none, |f| quota::claim_reasks(req, policy, f, &pods));
    let reserving = quota::ledger::Reserving {
        uid: &req.uid,
        name,
    };
    for ((tier, ns, counted), before) in reasks {
        let ask = (tier.clone(), ns.clone(), counted);
        let decide = |usage: &Usage| {
            let mut without = usage.clone();
            without.add(&ask.0, &ask.1, &before, -1);
            quota::decide(p, &ask.0, &ask.1, &ask.2, &without)
                .map_or(Reservation::NoQuota, Reservation::Refused)
        };
        let decision = match ports.reserve(&ask, &reserving, false, &decide).await {
            Ok(Some(d)) if d.standing == quota::Standing::OverMax => d,
            Ok(_) => continue,
            Err(_) => {
                if policy.mode == EnforcementMode::Enforce {
                    verdict.denied = Some(quota::NOT_COUNTED_YET.to_string());
                }
                return Some(QuotaStep::NotCountedYet);
            }
        };
        let message = format!(
            "{} (the ResourceClaim {namespace}/{name} is named by a Pod that already runs: with it, that Pod \
             would hold more than its quota)",
            decision.over_max_message().unwrap_or_default()
        );
        verdict.answer(policy.mode, message.clone());
        return Some(QuotaStep::Decided {
            tier,
            namespace: ns,
            decision,
            answered: Some((QuotaViolation::OverMax, message)),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(
        before: Option<&str>,
        after: Option<&str>,
        kind: &str,
    ) -> AdmissionRequest<DynamicObject> {
        let pod = |by: Option<&str>| {
            let mut ann = json!({"gpu-admission.io/decided-at": "2026-11-29T10:00:00Z"});
            if let Some(by) = by {
                ann["gpu-admission.io/decided-by"] = json!(by);
            }
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "p", "namespace": "team", "annotations": ann}})
        };
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "p", "namespace": "team", "operation": "UPDATE", "userInfo": {"username": "alice"},
            "object": pod(after), "oldObject": pod(before)
        }))
        .unwrap()
    }

    /// A tenant cannot add, change or remove `decided-by` on an UPDATE (her runs would go to another scorer);
    /// an UPDATE that leaves it as it was is not this rule's, nor is any other kind.
    #[test]
    fn no_update_rewrites_who_decided_a_pod() {
        for (before, after) in [
            (None, Some("restricted:team")),
            (Some("restricted:team"), None),
            (Some("restricted:team"), Some("restricted:other")),
        ] {
            let denied = record_rewritten(&update(before, after, "Pod"))
                .and_then(|v| v.verdict.denied)
                .unwrap_or_else(|| panic!("{before:?} -> {after:?} admitted"));
            assert!(
                denied.contains(
                    "gpu-admission.io/decided-by is written by the instance that decided the Pod"
                ),
                "{denied}"
            );
        }
        assert!(
            record_rewritten(&update(
                Some("restricted:team"),
                Some("restricted:team"),
                "Pod"
            ))
            .is_none()
        );
        assert!(record_rewritten(&update(None, None, "Pod")).is_none());
        assert!(record_rewritten(&update(None, Some("x"), "ConfigMap")).is_none());
    }
}
