//! `/mutate-pod` end to end, as one function over ports: [`admit`] plans, asks for the Pod's workload,
//! reuses a kept answer or calls the scorer, decides and keeps the answer. What the function needs from the
//! world — the cluster facts, the owner lookup, the scorer, the answer cache, the clock — comes through
//! [`MutatePorts`], so the frontend (watch caches, gRPC, one bounded GET), the CLI (files, the scorer in
//! process) and the property tests (a given outcome) all run the same steps; core stays free of I/O and of
//! any async runtime.

use std::collections::BTreeSet;
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
use crate::exception::Rule;
use crate::facts::Facts;
use crate::ns_lock::{self, Instance, NsLock, WhoScores};
use crate::policy::PolicySnapshot;
use crate::quota::{self, Usage};
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

    /// Which instance this is: cluster-wide by default, or restricted to some namespaces.
    fn instance(&self) -> &Instance {
        &Instance::ClusterWide
    }

    /// The namespace-lock Lease of `namespace` the port watches, if any (none by default).
    fn ns_lock(&self, _namespace: &str) -> Option<NsLock> {
        None
    }

    /// Whether this instance holds GPU quotas at all (it counts the cluster's usage); none by default.
    fn holds_quotas(&self) -> bool {
        false
    }

    /// The GPU quota usage as last counted (what the cluster holds plus the admissions in flight), for a
    /// quota'd Pod's record and borrowing class; `None` where no usage is counted (no cluster, or its Pods
    /// not listed yet), as a Pod of `namespace` in `tier` is decided against it (it may hold only that
    /// namespace and tier). `/validate-pod` decides the quota again and holds the `max`.
    fn quota_usage(&self, _tier: &str, _namespace: &str) -> Option<Usage> {
        None
    }

    /// The `GpuPolicyException`s of `namespace` (live or not: expiry is the decision's); none by default.
    fn exceptions(&self, _namespace: &str) -> Vec<crate::exception::Exception> {
        Vec::new()
    }

    /// The Pod's owner chain ([`crate::exception::chain`]), its owner's controller read where the port can
    /// ([`crate::exception::chain_query`]); by default only what the Pod says.
    fn owner_chain(
        &self,
        pod: &Pod,
        name: &str,
    ) -> impl Future<Output = Vec<crate::exception::Owner>> {
        std::future::ready(crate::exception::chain(
            "v1",
            "Pod",
            name,
            &pod.metadata,
            None,
        ))
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

    /// Takes the patch and the warnings of the decision (the rest stays, for the edge's logs).
    fn take_answer(&mut self) -> Answer {
        self.answer_slot().map(std::mem::take).unwrap_or_default()
    }

    /// Where the decision keeps its answer (none when it answers nothing).
    fn answer_slot(&mut self) -> Option<&mut Answer> {
        match self {
            Admitted::Skipped(_) => None,
            Admitted::Capped(c) => Some(&mut c.answer),
            Admitted::Decided(d) => Some(&mut d.decision.answer),
            Admitted::Elsewhere(e) => match &mut e.held {
                Held::Bound(d) => Some(&mut d.answer),
                Held::Capped(c) => Some(&mut c.answer),
                Held::AsItCame => None,
            },
        }
    }
}

/// What `/mutate-pod` answered one Pod request: how it was decided, the quota decision when the Pod is
/// counted against a quota, and the whole answer.
#[derive(Debug)]
pub struct Mutated<'a> {
    pub admitted: Admitted<'a>,
    /// The Pod's quota decision against the usage as last counted (`None`: no quota applies, or no usage
    /// is counted here).
    pub quota: Option<quota::Decision>,
    /// The patch and the warnings: the decision's, then the instance's signature and the quota's record.
    pub answer: Answer,
}

impl<'a> Mutated<'a> {
    pub fn outcome(&self) -> Outcome {
        self.admitted.outcome()
    }

    /// How it was decided, with the whole answer back in the decision's place (for callers that look at a
    /// decision as one value: the properties, the tests). A Pod answered with nothing stays as it was.
    pub fn into_admitted(self) -> Admitted<'a> {
        let Mutated {
            mut admitted,
            answer,
            ..
        } = self;
        if let Some(slot) = admitted.answer_slot() {
            *slot = answer;
        }
        admitted
    }
}

/// `/mutate-pod` for one Pod request: nothing outside a restricted instance's namespaces; [`plan`]; a Pod
/// that is not scored is still held to its tier's priority cap ([`cap_priority`]); a Pod of a namespace
/// another instance scores only to its tier ([`bound_only`], else the cap); else the workload, a kept answer
/// or the scorer's, [`decide`], and the answer kept when it passed the checks under the policy the Pod was
/// planned with; then
/// the signature of the instance that decided ([`ns_lock::signature`]) and the quota step
/// ([`quota_step`]) on the Pod as the patch leaves it.
pub async fn admit<'a, P: MutatePorts>(
    uid: &str,
    req: &'a AdmissionRequest<Pod>,
    policy: &'a PolicySnapshot,
    ports: &P,
) -> Mutated<'a> {
    let mut admitted = admitted(uid, req, policy, ports).await;
    let recorded = matches!(&admitted, Admitted::Decided(d) if d.decision.used.is_some());
    let mut answer = admitted.take_answer();
    if let Some(op) = recorded
        .then(|| ns_lock::signature(ports.instance(), req.object.as_ref()))
        .flatten()
    {
        answer.patch.push(&op);
    }
    let quota = quota_step(req, policy, ports, &mut answer);
    Mutated {
        admitted,
        quota,
        answer,
    }
}

/// The quota step: a GPU Pod CREATE of a quota'd tier, decided on the Pod as the rest of the patch leaves it
/// against the usage as last counted, gets its record and, when it borrows, the borrowers' PriorityClass
/// ([`quota::mutation_ops`]). Never a denial: `/validate-pod` holds the `max`.
fn quota_step<P: MutatePorts>(
    req: &AdmissionRequest<Pod>,
    policy: &PolicySnapshot,
    ports: &P,
    answer: &mut Answer,
) -> Option<quota::Decision> {
    let p = policy.policy.as_deref()?;
    // A policy without quotas, or an instance that counts none, pays nothing here.
    if req.operation != kube_core::admission::Operation::Create
        || !p.quotas.any()
        || !ports.holds_quotas()
    {
        return None;
    }
    let (pod, namespace) = (req.object.as_ref()?, req.namespace.as_deref()?);
    let mut patched = serde_json::to_value(pod).ok()?;
    json_patch::patch(&mut patched, &answer.patch.operations()).ok()?;
    let patched_pod = serde_json::from_value::<Pod>(patched.clone()).ok()?;
    let (ask, class) = ports.with_facts(|facts| {
        let ask = quota::of_pod_in(&patched_pod, namespace, policy, facts);
        (ask, policy.borrowing_class(facts.priority_classes))
    });
    let (tier, namespace, counted) = ask?;
    let decision = quota::decide(
        p,
        &tier,
        &namespace,
        &counted,
        &ports.quota_usage(&tier, &namespace)?,
    )?;
    for op in quota::mutation_ops(&patched, &decision, class.as_ref()) {
        answer.patch.push(&op);
    }
    Some(decision)
}

/// The rules (classes, priority cap) the live exceptions covering a Pod CREATE relax, when any does.
async fn excepted<P: MutatePorts>(
    req: &AdmissionRequest<Pod>,
    ports: &P,
) -> Option<BTreeSet<Rule>> {
    let (pod, namespace) = (req.object.as_ref()?, req.namespace.as_deref()?);
    if req.operation != kube_core::admission::Operation::Create {
        return None;
    }
    let all = ports.exceptions(namespace);
    let now = ports.now();
    if !all.iter().any(|e| e.live(now)) {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or(&req.name);
    let chain = crate::exception::as_created_by(
        ports.owner_chain(pod, name).await,
        &pod.metadata,
        req.user_info.username.as_deref(),
    );
    let relaxed = [Rule::Classes, Rule::PriorityCap];
    let rules: BTreeSet<Rule> = crate::exception::covering(&chain, &all, namespace, now, &relaxed)
        .iter()
        .flat_map(|e| e.spec.rules.iter().copied())
        .filter(|r| relaxed.contains(r))
        .collect();
    (!rules.is_empty()).then_some(rules)
}

/// The steps up to the decision (see [`admit`]).
async fn admitted<'a, P: MutatePorts>(
    uid: &str,
    req: &'a AdmissionRequest<Pod>,
    policy: &'a PolicySnapshot,
    ports: &P,
) -> Admitted<'a> {
    let who = match req.namespace.as_deref() {
        Some(ns) => {
            let lock = ports.ns_lock(ns);
            ns_lock::who_scores(ports.instance(), ns, lock.as_ref(), ports.now())
        }
        None => WhoScores::Here,
    };
    if who == WhoScores::NotOurs {
        return Admitted::Skipped(Skip::NotOurNamespace);
    }
    let excepted = excepted(req, ports).await;
    if excepted
        .as_ref()
        .is_some_and(|rules| rules.contains(&Rule::PriorityCap))
    {
        // Its own PriorityClass stands; and its class constraints, which mutation adds to.
        return Admitted::Skipped(Skip::Excepted);
    }
    let mut scoring = match ports.with_facts(|facts| plan(uid, req, facts, policy)) {
        Ok(_) if excepted.is_some() => return Admitted::Skipped(Skip::Excepted),
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
