//! `/mutate-pod` as two pure steps around the one scorer call:
//!
//! 1. [`plan`]: is the Pod ours (a CREATE of a GPU Pod in a tier namespace, not settled yet), and what is the
//!    scorer asked ([`Scoring`]); the frontend adds the workload it resolved ([`Scoring::set_workload`]);
//! 2. [`decide`]: the scorer's outcome as data ([`ScorerOutcome`]: answered, timed out, unavailable, invalid,
//!    overloaded) → the patch and the warnings. An answer that fails [`triage::validate_answer`] counts as
//!    invalid; a failed call gives the tier's default placement (fallback `TierDefault`, and always for a
//!    non-admin's Pod of a tier that restricts classes: see [`crate::tier_bound`]) or passes the Pod through
//!    unchanged. Mutation never rejects.
//!
//! [`admit`] runs both around the ports of the world (facts, owner lookup, scorer, answer cache); the
//! handler, the CLI, the fuzz targets and the tests call exactly these.

mod admit;
mod cap;
pub mod patch;
pub mod triage;

pub use admit::{Admitted, AnswerKey, Decided, Elsewhere, Held, MutatePorts, Mutated, admit};
pub use cap::{Capped, cap_priority};

use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use kube_core::admission::AdmissionRequest;
use time::OffsetDateTime;

use crate::facts::Facts;
use crate::policy::{PolicySnapshot, TierRules};
use crate::priority_class::{AnswerPriorityClass, NoPriorityClasses};
use crate::review::Answer;
use crate::tier_bound;
use patch::PatchInput;
use triage::{Candidate, Skip};

/// How the scorer call ended, as data.
#[derive(Debug, Clone)]
pub enum ScorerOutcome {
    Answered(Box<ScoreResponse>),
    /// No answer within the budget (locally, or as the server reported); the budget in milliseconds.
    TimedOut {
        budget_ms: u64,
    },
    Unavailable(String),
    /// The scorer refused the request, or answered something we cannot use.
    Invalid(String),
    /// Not sent: this many calls were already in flight.
    Overloaded {
        in_flight: usize,
    },
}

/// How a scorer call ended, once its answer was checked (the metric's `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScorerResult {
    Ok,
    Timeout,
    Unavailable,
    Invalid,
    Overloaded,
}

impl ScorerResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ScorerResult::Ok => "ok",
            ScorerResult::Timeout => "timeout",
            ScorerResult::Unavailable => "unavailable",
            ScorerResult::Invalid => "invalid",
            ScorerResult::Overloaded => "overloaded",
        }
    }
}

/// gRPC status codes (the wire's numbers, as every gRPC library spells them).
mod grpc_code {
    pub(super) const CANCELLED: i32 = 1;
    pub(super) const UNKNOWN: i32 = 2;
    pub(super) const DEADLINE_EXCEEDED: i32 = 4;
    pub(super) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(super) const ABORTED: i32 = 10;
    pub(super) const UNAVAILABLE: i32 = 14;
}

impl ScorerOutcome {
    /// The one reading of a failed Score call's gRPC status (code number and `detail`, the code's name and
    /// message): a deadline or cancellation is a timeout of `budget_ms`, a scorer that cannot answer now is
    /// unavailable, anything else a refusal.
    pub fn of_failed_call(code: i32, detail: String, budget_ms: u64) -> Self {
        use grpc_code::*;
        match code {
            DEADLINE_EXCEEDED | CANCELLED => ScorerOutcome::TimedOut { budget_ms },
            UNAVAILABLE | UNKNOWN | RESOURCE_EXHAUSTED | ABORTED => {
                ScorerOutcome::Unavailable(detail)
            }
            _ => ScorerOutcome::Invalid(detail),
        }
    }

    /// The metric label of the call's result.
    pub fn result(&self) -> ScorerResult {
        match self {
            ScorerOutcome::Answered(_) => ScorerResult::Ok,
            ScorerOutcome::TimedOut { .. } => ScorerResult::Timeout,
            ScorerOutcome::Unavailable(_) => ScorerResult::Unavailable,
            ScorerOutcome::Invalid(_) => ScorerResult::Invalid,
            ScorerOutcome::Overloaded { .. } => ScorerResult::Overloaded,
        }
    }

    /// What went wrong, in words (`None` for an answer): the kind (`timed out`) and the detail.
    fn failure(&self) -> Option<(&'static str, String)> {
        Some(match self {
            ScorerOutcome::Answered(_) => return None,
            ScorerOutcome::TimedOut { budget_ms } => {
                ("timed out", format!("no answer within {budget_ms} ms"))
            }
            ScorerOutcome::Unavailable(d) => ("unavailable", d.clone()),
            ScorerOutcome::Invalid(d) => ("answered invalidly", d.clone()),
            ScorerOutcome::Overloaded { in_flight } => (
                "overloaded",
                format!("{in_flight} scorer calls already in flight"),
            ),
        })
    }
}

/// How a `/mutate-pod` request ended (the metric's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Answered with a patch from the scorer's answer.
    Mutated,
    /// The scorer failed: allowed unchanged.
    PassedThrough,
    /// The scorer failed and the tier's fallback is `TierDefault`: placed on the tier's classes.
    TierDefault,
    /// Not ours to score: allowed unchanged.
    Skipped,
    /// Scored by the restricted instance holding the namespace's Lease: only held to the tier here.
    ScoredElsewhere,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Mutated => "mutated",
            Outcome::PassedThrough => "passed_through",
            Outcome::TierDefault => "tier_default",
            Outcome::Skipped => "skipped",
            Outcome::ScoredElsewhere => "scored_elsewhere",
        }
    }
}

/// A Pod the scorer is asked about.
pub struct Scoring<'a> {
    pub candidate: Candidate<'a>,
    /// What the scorer is asked.
    pub request: ScoreRequest,
    /// The admission warnings so far (the Pod's features, the request fitted to the scorer's limits).
    pub warnings: Vec<String>,
    /// What had to change in the request to fit the scorer's limits (also among the warnings).
    pub fitted: Vec<String>,
    /// RBAC exempts the requester from its namespace's tier (`exempt tiers/<tier>`).
    pub admin: bool,
    /// The policy the Pod was planned with, and its namespace's tier rules (`None` before the policy is
    /// known): [`decide`] decides with the same ones.
    policy: &'a PolicySnapshot,
    rules: Option<TierRules<'a>>,
}

/// The policy by its version only (the whole snapshot would fill a log line).
impl std::fmt::Debug for Scoring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoring")
            .field("candidate", &self.candidate)
            .field("request", &self.request)
            .field("warnings", &self.warnings)
            .field("fitted", &self.fitted)
            .field("admin", &self.admin)
            .field("policy_version", &self.policy.version)
            .field("rules", &self.rules)
            .finish()
    }
}

impl Scoring<'_> {
    /// The workload the frontend resolved: one decision per workload key.
    pub fn set_workload(&mut self, key: String, group_size: Option<u32>) {
        self.request.workload_key = key;
        self.request.group_size = group_size;
        let fitted = triage::fit_to_limits(&mut self.request);
        self.warnings.extend(fitted.iter().cloned());
        self.fitted.extend(fitted);
    }
}

/// Step 1: the Pod to score and its request, or why it is allowed unchanged without asking. A Pod that
/// already carries our decision inside its tier needs no score (a second pass, a re-sent request); our
/// annotations alone are not enough (see [`patch::is_settled`]).
pub fn plan<'a>(
    uid: &str,
    req: &'a AdmissionRequest<Pod>,
    facts: &Facts<'_>,
    policy: &'a PolicySnapshot,
) -> Result<Scoring<'a>, Skip> {
    let candidate = triage::triage_with(req, facts.tier_of, policy, facts.claim_templates)?;
    let rules = policy.tier_rules(&candidate.tier, candidate.namespace);
    let admin = rules.as_ref().is_some_and(|r| {
        facts
            .grants
            .allows(&crate::authority::Permission::Exempt(r.tier.to_string()))
    });
    if let Some(rules) = &rules {
        let nothing = ScoreResponse::default();
        let input = patch_input(
            &candidate,
            policy,
            Some(rules),
            admin,
            &nothing,
            true,
            now_unused(),
        );
        let pcs = policy
            .known_priority_classes(facts.priority_classes)
            .unwrap_or(&NoPriorityClasses);
        if patch::is_settled(&input, pcs) {
            return Err(Skip::AlreadyDecided);
        }
    }
    let mut warnings: Vec<String> = candidate
        .features
        .warnings
        .iter()
        .map(|w| format!("gpu-admission: {w}"))
        .collect();
    let (mut request, fitted) = triage::request_for(uid, &candidate, policy, rules.as_ref());
    // `sideEffects: None`: a dry run must change no learned or exploration state of the scorer.
    request.dry_run = req.dry_run;
    warnings.extend(fitted.iter().cloned());
    Ok(Scoring {
        candidate,
        request,
        warnings,
        fitted,
        admin,
        policy,
        rules,
    })
}

/// The decision for a scored Pod.
#[derive(Debug)]
pub struct Decision {
    pub outcome: Outcome,
    /// The patch and every warning.
    pub answer: Answer,
    /// The scorer call's result once the answer is checked (`Invalid` for an answer that fails the checks).
    pub scorer_result: ScorerResult,
    /// Why the scorer's answer was not used (`scorer timed out`) and the detail, when it was not.
    pub failure: Option<(String, String)>,
    /// The answer the patch was built from (the scorer's, or the tier's default placement), for logs.
    pub used: Option<ScoreResponse>,
}

/// Step 2: the scorer's outcome → the patch (see the module documentation), with the policy the Pod was
/// planned with. `now` stamps `decided-at`.
pub fn decide(
    scoring: &Scoring<'_>,
    outcome: ScorerOutcome,
    facts: &Facts<'_>,
    now: OffsetDateTime,
) -> Decision {
    let policy = scoring.policy;
    let outcome = match outcome {
        ScorerOutcome::Answered(answer) => match triage::validate_answer(&answer, policy) {
            Ok(()) => ScorerOutcome::Answered(answer),
            Err(why) => ScorerOutcome::Invalid(why),
        },
        other => other,
    };
    let scorer_result = outcome.result();
    let c = &scoring.candidate;
    let rules = &scoring.rules;
    let mut warnings = scoring.warnings.clone();
    let failure = outcome
        .failure()
        .map(|(kind, detail)| (format!("scorer {kind}"), detail));
    // A non-admin's Pod of a tier that restricts classes is never admitted without the tier bound, whatever
    // the fallback says (validation would deny it: mutation must not be the reason).
    let needs_bound =
        |r: &TierRules<'_>| !scoring.admin && tier_bound::restricts(r, policy.catalog());
    let (mut answer, fallback) = match (outcome, rules) {
        (ScorerOutcome::Answered(answer), _) => (*answer, false),
        (failed, Some(r))
            if r.fallback == crate::policy::Fallback::TierDefault || needs_bound(r) =>
        {
            let (kind, detail) = failed.failure().unwrap_or_default();
            warnings.push(format!(
                "gpu-admission: scorer {kind} ({detail}); placed on the default classes of tier {}",
                r.tier
            ));
            (
                patch::tier_default_answer(r, policy.catalog(), &policy.version),
                true,
            )
        }
        (failed, _) => {
            let (kind, detail) = failed.failure().unwrap_or_default();
            warnings.push(format!(
                "gpu-admission: scorer {kind} ({detail}); Pod admitted unchanged"
            ));
            return Decision {
                outcome: Outcome::PassedThrough,
                answer: Answer {
                    patch: Default::default(),
                    warnings,
                },
                scorer_result,
                failure,
                used: None,
            };
        }
    };
    triage::restrict_answer(&mut answer, c.own.as_ref());
    let input = patch_input(
        c,
        policy,
        rules.as_ref(),
        scoring.admin,
        &answer,
        fallback,
        now,
    );
    let mutation = match policy.known_priority_classes(facts.priority_classes) {
        Some(lookup) => patch::decide_pod(&input, lookup),
        // --no-kube before the first GetPolicy answer: the buckets are not known yet, but the answer's own
        // assignment comes from those very buckets.
        None => match answer.priority_class.as_ref() {
            Some(pc) => patch::decide_pod(&input, &AnswerPriorityClass(pc)),
            None => patch::decide_pod(&input, &NoPriorityClasses),
        },
    };
    warnings.extend(mutation.warnings);
    Decision {
        outcome: if fallback {
            Outcome::TierDefault
        } else {
            Outcome::Mutated
        },
        answer: Answer {
            patch: mutation.ops,
            warnings,
        },
        scorer_result,
        failure,
        used: Some(answer),
    }
}

/// A Pod whose namespace another instance scores (the restricted instance `holder` holds its Lease,
/// [`crate::ns_lock`]): no Score call. `Some`: the Pod came without its tier bound (a non-admin's Pod of a
/// tier that restricts classes, some way of scheduling it not held to the tier's classes), so it gets the
/// tier's default placement as after a failed call; `None`: it is held to its tier already.
pub fn bound_only(
    scoring: &Scoring<'_>,
    holder: &str,
    facts: &Facts<'_>,
    now: OffsetDateTime,
) -> Option<Decision> {
    let rules = scoring.rules.as_ref()?;
    let policy = scoring.policy;
    if scoring.admin || !tier_bound::restricts(rules, policy.catalog()) {
        return None;
    }
    let spec = scoring.candidate.pod.spec.as_ref();
    if spec.is_some_and(|s| tier_bound::check(s, rules, policy.catalog(), facts.nodes).is_ok()) {
        return None;
    }
    let why = format!(
        "namespace {} is scored by the restricted instance {holder}, which left this Pod without its tier bound",
        scoring.candidate.namespace
    );
    Some(decide(scoring, ScorerOutcome::Unavailable(why), facts, now))
}

/// `decided-at` is not read when only asking whether a Pod is settled.
fn now_unused() -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH
}

fn patch_input<'a>(
    candidate: &'a Candidate<'a>,
    policy: &'a PolicySnapshot,
    rules: Option<&'a TierRules<'a>>,
    admin: bool,
    answer: &'a ScoreResponse,
    fallback: bool,
    now: OffsetDateTime,
) -> PatchInput<'a> {
    PatchInput {
        pod: candidate.pod,
        job_type: candidate.features.job_type.as_deref(),
        answer,
        class_label_keys: &policy.class_label_keys,
        class_labels: &policy.class_labels,
        now,
        catalog: policy.catalog(),
        tier: rules,
        admin,
        fallback,
    }
}
