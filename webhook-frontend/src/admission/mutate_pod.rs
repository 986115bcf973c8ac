//! `POST /mutate-pod`: the I/O around the core decision — the namespace and PriorityClass caches, the policy
//! snapshot, the Pod's workload (cache, else one bounded GET), the one scorer call, logs and metrics, as the
//! ports of [`gpu_admission_core::admission::mutate_pod::admit`], which decides.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_admission_core::admission::mutate_pod::{
    self, Admitted, AnswerKey, Decided, Outcome, ScorerOutcome,
};
use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Answer, BadRequest, Content, Incoming};
use gpu_admission_core::workload::WorkloadRef;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use gpu_admission_telemetry::REQUEST_SPANS;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::AdmissionRequest;
use time::OffsetDateTime;
use tracing::Instrument;

use super::pipeline::{Body, Call, Reply, Webhook, operation_label};
use crate::cluster::ClusterFacts;
use crate::cluster::access::AccessReviews;
use crate::cluster::ns_locks::NsLocks;
use crate::cluster::usage::QuotaUsage;
use crate::cluster::workloads::{self, WorkloadOwners};
use crate::metrics::{Metrics, ReasonLabels};
use crate::policy::PolicyCache;
use crate::scorer_client::Scorer;
use crate::workload_answers::WorkloadAnswers;
use gpu_admission_core::authority::Grants;
use gpu_admission_core::ns_lock::take_over::{self, TakenOver};
use gpu_admission_core::ns_lock::{Instance, NsLock, who_scores};
use gpu_admission_core::quota::Usage;

/// What `/mutate-pod` reads.
pub(crate) struct MutatePod {
    pub(crate) scorer: Scorer,
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) access: Arc<AccessReviews>,
    /// Jobs and ReplicaSets, to resolve a Pod's workload; `None` with `--no-kube` (first hop only).
    pub(crate) workloads: Option<Arc<WorkloadOwners>>,
    /// The GpuPolicyExceptions; `None` with `--no-kube` (no exception applies).
    pub(crate) exceptions: Option<Arc<crate::cluster::exceptions::ExceptionCache>>,
    /// The scorer's answers for earlier Pods of a workload (see [`WorkloadAnswers`]).
    pub(crate) answers: WorkloadAnswers,
    pub(crate) metrics: Arc<Metrics>,
    /// GPU quota usage: the record annotation and the borrowers' PriorityClass; `None` with `--no-kube`.
    pub(crate) quota: Option<Arc<QuotaUsage>>,
    /// Cluster-wide, or restricted to its namespaces.
    pub(crate) instance: Instance,
    /// The restricted instances' Leases, which the cluster-wide instance leaves scoring to.
    pub(crate) ns_locks: Option<Arc<NsLocks>>,
    /// A restricted instance's account of its Score calls, which its Leases are held by.
    pub(crate) hold: Option<Arc<crate::restricted::Holding>>,
}

impl Webhook for MutatePod {
    const NAME: &'static str = "mutate-pod";
    type Review = Incoming;

    fn decode(body: &[u8]) -> Result<Incoming, BadRequest> {
        review::decode(body)
    }

    async fn admit(&self, incoming: &Incoming, call: &Call) -> Reply {
        let (operation, outcome, answer) = match &incoming.content {
            Content::OtherKind { kind, operation } => {
                skipped(&call.span, "not a Pod", kind);
                (
                    operation_text(operation),
                    Outcome::Skipped,
                    Answer::default(),
                )
            }
            Content::Unreadable(why) => {
                skipped(&call.span, "unreadable review", why);
                let warning = format!("gpu-admission: {why}; admitted unchanged");
                let answer = Answer {
                    patch: Default::default(),
                    warnings: vec![warning],
                };
                ("unknown", Outcome::Skipped, answer)
            }
            Content::Pod(req) => {
                let (outcome, answer) = self.admit_pod(&incoming.uid, req, call).await;
                (operation_label(&req.operation), outcome, answer)
            }
        };
        Reply {
            outcome: outcome.as_str(),
            operation,
            body: Body::Answer(answer),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl MutatePod {
    /// The decision for one Pod request: core's [`mutate_pod::admit`] over this request's ports, then the
    /// logs and metrics of how it went.
    async fn admit_pod(
        &self,
        uid: &str,
        req: &AdmissionRequest<Pod>,
        call: &Call,
    ) -> (Outcome, Answer) {
        record_pod(&call.span, req);
        let policy = self.policy.snapshot();
        let grants = match req.namespace.as_deref() {
            Some(ns) => {
                let label = self.cluster.namespace_tier(ns, policy.tier_label());
                (self.access.exemption(&req.user_info, label, ns, &policy)).await
            }
            None => Grants::none(),
        };
        let mut ports = Ports {
            hook: self,
            policy: &policy,
            grants: &grants,
            call,
            budget: self.scorer.deadline(call.apiserver_timeout),
            scorer_call: Mutex::new(None),
            taken_over: false,
        };
        // Boxed: it holds a whole request, and this future (copied as it is created) holds it across awaits.
        let taken = self.take_over(uid, req, &ports).map(Box::new);
        ports.taken_over = taken.is_some();
        let req: &AdmissionRequest<Pod> = taken.as_ref().map_or(req, |t| &t.request);
        let mut mutated = mutate_pod::admit(uid, req, &policy, &ports).await;
        if let Some(t) = &taken {
            t.prefix(&mut mutated.answer);
        }
        match &mutated.admitted {
            Admitted::Skipped(skip) => skipped(&call.span, skip.as_str(), ""),
            Admitted::Capped(c) => {
                call.span.record("admission.reason", "priority capped");
                tracing::info!(
                    uid,
                    tier = c.tier,
                    own = c.own,
                    cap = c.cap,
                    "PriorityClass lowered to the tier's cap"
                );
            }
            Admitted::Elsewhere(e) => {
                call.span.record("admission.reason", "scored elsewhere");
                tracing::debug!(uid, holder = e.holder, held = ?e.held, "namespace scored by a restricted instance; held to its tier only");
            }
            Admitted::Decided(d) => {
                if d.stale_policy {
                    self.policy.request_refresh();
                }
                if d.reused {
                    self.metrics.workload_answers_reused.inc();
                }
                let elapsed = *ports.scorer_call.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(elapsed) = elapsed {
                    self.metrics
                        .record_scorer_call(d.decision.scorer_result, elapsed.as_secs_f64());
                }
                if !d.scoring.fitted.is_empty() {
                    tracing::info!(uid, namespace = d.scoring.candidate.namespace, fitted = ?d.scoring.fitted, "scorer request fitted to its limits");
                }
                log_decision(uid, d, mutated.answer.patch.len(), &call.span);
            }
        }
        if let Some(q) = &mutated.quota {
            tracing::info!(uid, quota = %q.record(), "quota");
        }
        // A kept answer is no Score call: it says nothing of whether the scorer answers now.
        if let Admitted::Decided(d) = &mutated.admitted
            && !d.reused
            && let Some(hold) = &self.hold
        {
            hold.observe(d.decision.scorer_result);
        }
        (mutated.outcome(), mutated.answer)
    }

    /// The cluster-wide instance, before deciding: a Pod a restricted instance recorded that it decides
    /// again (core's [`take_over::taken_over`]), as the request to decide and the operations that clear
    /// the restricted decision.
    fn take_over(
        &self,
        uid: &str,
        req: &AdmissionRequest<Pod>,
        ports: &Ports<'_>,
    ) -> Option<TakenOver> {
        use mutate_pod::MutatePorts as _;
        // Most Pods carry no restricted record: nothing to read for them.
        if self.instance != Instance::ClusterWide
            || !req
                .object
                .as_ref()
                .is_some_and(take_over::restricted_record)
        {
            return None;
        }
        let ns = req.namespace.as_deref()?;
        let lock = ports.ns_lock(ns);
        let who = who_scores(&self.instance, ns, lock.as_ref(), OffsetDateTime::now_utc());
        let taken =
            ports.with_facts(|facts| take_over::taken_over(req, &who, facts, ports.policy))?;
        self.metrics
            .restricted_take_overs
            .get_or_create(&ReasonLabels {
                reason: taken.why.as_str(),
            })
            .inc();
        tracing::info!(uid, namespace = ns, reason = taken.why.as_str(), why = ?taken.why, "a restricted instance's decision is decided again here");
        Some(taken)
    }
}

/// What `/mutate-pod` reads for one request: the watch caches under this request's policy and grants, the
/// owner lookup (at most a quarter of the scorer's budget), the scorer and the kept answers.
struct Ports<'r> {
    hook: &'r MutatePod,
    policy: &'r PolicySnapshot,
    grants: &'r Grants,
    call: &'r Call,
    /// The scorer's budget for this request.
    budget: Duration,
    /// How long the Score call took, when one was made.
    scorer_call: Mutex<Option<Duration>>,
    /// A restricted instance's Pod decided again here: no Lease leaves it to another instance.
    taken_over: bool,
}

impl mutate_pod::MutatePorts for Ports<'_> {
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        self.hook.cluster.with_facts(self.policy, self.grants, f)
    }

    async fn workload(&self, pod: &Pod, namespace: &str) -> Option<WorkloadRef> {
        let budget = (self.budget / 4).min(workloads::OWNER_READ_BUDGET);
        workloads::resolve_workload(self.hook.workloads.as_deref(), pod, namespace, budget).await
    }

    /// The one Score call, in its client span.
    async fn score(&self, request: ScoreRequest) -> ScorerOutcome {
        let call_span = tracing::info_span!(
            target: REQUEST_SPANS,
            "scorer.score",
            otel.kind = "client",
            rpc.system = "grpc",
            deadline_ms = self.budget.as_millis() as u64
        );
        let start = Instant::now();
        let outcome = self
            .hook
            .scorer
            .score(request, self.call.started, self.budget, &call_span)
            .instrument(call_span.clone())
            .await;
        *self.scorer_call.lock().unwrap_or_else(|e| e.into_inner()) = Some(start.elapsed());
        outcome
    }

    fn kept_answer(&self, key: &AnswerKey, request_id: &str) -> Option<ScoreResponse> {
        self.hook.answers.get(key, request_id, Instant::now())
    }

    fn keep_answer(&self, key: AnswerKey, answer: ScoreResponse) {
        self.hook.answers.keep(key, answer, Instant::now());
    }

    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn exceptions(&self, namespace: &str) -> Vec<gpu_admission_core::exception::Exception> {
        self.hook
            .exceptions
            .as_ref()
            .map_or_else(Vec::new, |c| c.of_namespace(namespace))
    }

    async fn owner_chain(
        &self,
        pod: &Pod,
        name: &str,
    ) -> Vec<gpu_admission_core::exception::Owner> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        crate::cluster::exceptions::owner_chain(
            self.hook.workloads.as_deref(),
            ("v1", "Pod", name),
            &pod.metadata,
            namespace,
        )
        .await
    }

    fn instance(&self) -> &Instance {
        &self.hook.instance
    }

    fn ns_lock(&self, namespace: &str) -> Option<NsLock> {
        if self.taken_over {
            return None;
        }
        self.hook.ns_locks.as_ref()?.lock(namespace)
    }

    fn holds_quotas(&self) -> bool {
        self.hook.quota.is_some()
    }

    fn quota_usage(&self, tier: &str, namespace: &str) -> Option<Usage> {
        self.hook.quota.as_ref()?.usage(tier, namespace)
    }

    fn building_patch<R>(&self, step: impl FnOnce() -> R) -> R {
        tracing::info_span!(target: REQUEST_SPANS, "build_patch").in_scope(step)
    }
}

/// The decision in the span and the log.
fn log_decision(uid: &str, decided: &Decided<'_>, ops: usize, span: &tracing::Span) {
    let Decided {
        scoring,
        decision,
        workload,
        ..
    } = decided;
    let c = &scoring.candidate;
    span.record("tenant.tier", c.tier.as_str());
    // The scorer failed and the tier's fallback answered (tier default or pass-through): searchable as a tag.
    span.record("admission.fallback", decision.failure.is_some());
    if let Some((kind, detail)) = &decision.failure {
        span.record("admission.reason", kind.as_str());
        match decision.outcome {
            Outcome::TierDefault => {
                tracing::warn!(uid, namespace = c.namespace, tier = c.tier, result = decision.scorer_result.as_str(), %detail, "{kind}; tier default placement")
            }
            _ => {
                tracing::warn!(uid, namespace = c.namespace, result = decision.scorer_result.as_str(), %detail, "{kind}; Pod admitted unchanged (pass-through)")
            }
        }
    }
    let Some(answer) = &decision.used else { return };
    let class = answer
        .accepted_classes
        .first()
        .map(|c| c.name.as_str())
        .unwrap_or("");
    span.record("gpu.class", class);
    span.record("priority.score", answer.priority_score);
    tracing::debug!(
        uid,
        namespace = c.namespace,
        tier = c.tier,
        gpu_class = class,
        priority = answer.priority_score,
        avoid = ?answer.avoid_job_types,
        workload = workload.as_ref().map(|w| w.key()).unwrap_or_default(),
        group_size = workload.as_ref().and_then(|w| w.group_size),
        workload_via = ?workload.as_ref().map(|w| &w.via),
        dra_claims = ?c.features.dra_claims,
        ops,
        admin = scoring.admin,
        fallback = decision.outcome == Outcome::TierDefault,
        "Pod mutated"
    );
}

fn record_pod(span: &tracing::Span, req: &AdmissionRequest<Pod>) {
    if let Some(pod) = &req.object {
        let name = pod
            .metadata
            .name
            .as_deref()
            .or(pod.metadata.generate_name.as_deref())
            .unwrap_or("");
        span.record("k8s.pod.name", name);
    }
    if let Some(ns) = &req.namespace {
        span.record("k8s.namespace.name", ns.as_str());
    }
}

fn skipped(span: &tracing::Span, reason: &str, detail: &str) {
    span.record("admission.reason", reason);
    tracing::debug!(reason, detail, "allowed unchanged");
}

/// The operation of a review that is not about a Pod, as the decoder spelled it (`Create`).
fn operation_text(op: &str) -> &'static str {
    match op {
        "Create" => "CREATE",
        "Update" => "UPDATE",
        "Delete" => "DELETE",
        "Connect" => "CONNECT",
        _ => "unknown",
    }
}
