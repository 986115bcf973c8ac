//! `/mutate-pod` end to end, as one function over ports: [`admit`] plans, asks for the Pod's workload,
//! reuses a kept answer or calls the scorer, decides and keeps the answer. What the function needs from the
//! world — the cluster facts, the owner lookup, the scorer, the answer cache, the clock — comes through
//! [`MutatePorts`], so the frontend (watch caches, gRPC, one bounded GET), the CLI (files, the scorer in
//! process) and the property tests (a given outcome) all run the same steps; core stays free of I/O and of
//! any async runtime.

use std::future::Future;

use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use kube_core::admission::AdmissionRequest;
use time::OffsetDateTime;

use super::triage::Skip;
use super::{
    Capped, Decision, Outcome, ScorerOutcome, ScorerResult, Scoring, bound_only, cap_priority,
    decide, plan,
};
use crate::admission::Facts;
use crate::ns_lock::WhoScores;
use crate::policy::PolicySnapshot;
use crate::review::Answer;
use crate::workload::WorkloadRef;

/// What a later Pod of the same workload may reuse the scorer's answer under: the same workload, asking the
/// same, under the same policy version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnswerKey {
    policy_version: String,
    asked: Vec<u8>,
    group_size: Option<u32>,
}

impl AnswerKey {
    /// `None` for a Pod of no workload: its answer is its own.
    pub fn of(request: &mut ScoreRequest, policy_version: &str) -> Option<Self> {
        (!request.workload_key.is_empty()).then(|| Self {
            policy_version: policy_version.to_string(),
            asked: gpu_admission_proto::workload::asked_bytes(request),
            group_size: request.group_size,
        })
    }
}

/// What `/mutate-pod` asks the world for.
pub trait MutatePorts {
    /// Runs `f` with the cluster facts (the caches behind them are read only inside).
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R;

    /// The workload the Pod belongs to, when the port can tell (its labels, its owners).
    fn workload(&self, pod: &Pod, namespace: &str) -> impl Future<Output = Option<WorkloadRef>>;

    /// The one Score call.
    fn score(&self, request: ScoreRequest) -> impl Future<Output = ScorerOutcome>;

    /// The answer kept for an earlier Pod of the workload, readdressed to `request_id`; none by default.
    fn kept_answer(&self, _key: &AnswerKey, _request_id: &str) -> Option<ScoreResponse> {
        None
    }

    /// Keeps an answer that passed the checks of [`decide`], for later Pods of the workload.
    fn keep_answer(&self, _key: AnswerKey, _answer: ScoreResponse) {}

    /// `decided-at` of the decision record.
    fn now(&self) -> OffsetDateTime;

    /// Who scores the Pods of `namespace` ([`crate::ns_lock::who_scores`] over the Leases the port watches);
    /// this instance by default.
    fn who_scores(&self, _namespace: &str) -> WhoScores {
        WhoScores::Here
    }

    /// Runs the last step, the patch built from the outcome (the frontend times it as a span of its own).
    fn building_patch<R>(&self, step: impl FnOnce() -> R) -> R {
        step()
    }
}

/// How `/mutate-pod` answered one Pod request.
#[derive(Debug)]
pub enum Admitted<'a> {
    /// Not scored (no GPU, no tier, already decided…): allowed unchanged.
    Skipped(Skip),
    /// Not scored, but its priority lowered to its tier's cap.
    Capped(Capped),
    /// Scored: the decision and how it came about.
    Decided(Box<Decided<'a>>),
    /// A Pod to score in a namespace another instance scores: not scored, only held to its tier.
    Elsewhere(Box<Elsewhere>),
}

/// A Pod left to the restricted instance holding its namespace's Lease.
#[derive(Debug)]
pub struct Elsewhere {
    /// The Lease's holder.
    pub holder: String,
    pub held: Held,
}

/// What this instance still did to a Pod another instance scores.
#[derive(Debug)]
pub enum Held {
    /// It came without its tier bound: the tier's default placement ([`bound_only`]).
    Bound(Box<Decision>),
    /// Bound, but its own PriorityClass beyond the tier's cap: lowered ([`cap_priority`]).
    Capped(Capped),
    /// Nothing to add.
    AsItCame,
}

/// A scored Pod's decision, with what the logs and metrics of the edge report.
#[derive(Debug)]
pub struct Decided<'a> {
    pub scoring: Scoring<'a>,
    pub decision: Decision,
    pub workload: Option<WorkloadRef>,
    /// The answer came from the cache, not from a call.
    pub reused: bool,
    /// The scorer answered under another policy version than the one the Pod was planned with: the edge
    /// should read the policy again.
    pub stale_policy: bool,
}

impl Admitted<'_> {
    pub fn outcome(&self) -> Outcome {
        match self {
            Admitted::Skipped(_) => Outcome::Skipped,
            Admitted::Capped(_) => Outcome::Mutated,
            Admitted::Decided(d) => d.decision.outcome,
            Admitted::Elsewhere(_) => Outcome::ScoredElsewhere,
        }
    }

    /// The patch and the warnings.
    pub fn into_answer(self) -> Answer {
        match self {
            Admitted::Skipped(_) => Answer::default(),
            Admitted::Capped(c) => c.answer,
            Admitted::Decided(d) => d.decision.answer,
            Admitted::Elsewhere(e) => match e.held {
                Held::Bound(d) => d.answer,
                Held::Capped(c) => c.answer,
                Held::AsItCame => Answer::default(),
            },
        }
    }
}

/// `/mutate-pod` for one Pod request: nothing outside a restricted instance's namespaces; [`plan`]; a Pod
/// that is not scored is still held to its tier's priority cap ([`cap_priority`]); a Pod of a namespace
/// another instance scores only to its tier ([`bound_only`], else the cap); else the workload, a kept answer
/// or the scorer's, [`decide`], and the answer kept when it passed the checks under the policy the Pod was
/// planned with.
pub async fn admit<'a, P: MutatePorts>(
    uid: &str,
    req: &'a AdmissionRequest<Pod>,
    policy: &'a PolicySnapshot,
    ports: &P,
) -> Admitted<'a> {
    let who = match req.namespace.as_deref() {
        Some(ns) => ports.who_scores(ns),
        None => WhoScores::Here,
    };
    if who == WhoScores::NotOurs {
        return Admitted::Skipped(Skip("outside this restricted instance's namespaces"));
    }
    let mut scoring = match ports.with_facts(|facts| plan(uid, req, facts, policy)) {
        Ok(scoring) => scoring,
        Err(skip) => {
            return match ports.with_facts(|facts| cap_priority(req, facts, policy)) {
                Some(capped) => Admitted::Capped(capped),
                None => Admitted::Skipped(skip),
            };
        }
    };
    if let WhoScores::Restricted { holder, .. } = who {
        let now = ports.now();
        let held = match ports.with_facts(|facts| bound_only(&scoring, &holder, facts, now)) {
            Some(decision) => Held::Bound(Box::new(decision)),
            None => match ports.with_facts(|facts| cap_priority(req, facts, policy)) {
                Some(capped) => Held::Capped(capped),
                None => Held::AsItCame,
            },
        };
        return Admitted::Elsewhere(Box::new(Elsewhere { holder, held }));
    }
    let c = &scoring.candidate;
    let workload = ports.workload(c.pod, c.namespace).await;
    if let Some(w) = &workload {
        scoring.set_workload(w.key(), w.group_size);
    }
    let key = AnswerKey::of(&mut scoring.request, &policy.version);
    let kept = key
        .as_ref()
        .and_then(|k| ports.kept_answer(k, &scoring.request.request_id));
    let reused = kept.is_some();
    let outcome = match kept {
        Some(answer) => ScorerOutcome::Answered(Box::new(answer)),
        None => ports.score(std::mem::take(&mut scoring.request)).await,
    };
    let stale_policy =
        matches!(&outcome, ScorerOutcome::Answered(a) if a.policy_version != policy.version);
    // The answer as it came (before this Pod's own constraints narrowed it), kept once it passes the checks.
    let to_keep = match (&key, &outcome) {
        (Some(_), ScorerOutcome::Answered(a)) if !reused && !stale_policy && !req.dry_run => {
            Some(a.as_ref().clone())
        }
        _ => None,
    };
    let now = ports.now();
    let decision =
        ports.building_patch(|| ports.with_facts(|facts| decide(&scoring, outcome, facts, now)));
    if let (Some(key), Some(answer), ScorerResult::Ok) = (key, to_keep, decision.scorer_result) {
        ports.keep_answer(key, answer);
    }
    Admitted::Decided(Box::new(Decided {
        scoring,
        decision,
        workload,
        reused,
        stale_policy,
    }))
}
