//! `POST /mutate-pod`: the I/O around the core decision — the namespace and PriorityClass caches, the policy
//! snapshot, the Pod's workload (cache, else one bounded GET), the one scorer call, logs and metrics. What is
//! decided is [`gpu_admission_core::admission::mutate_pod`]'s `plan` and `decide`.

use std::sync::Arc;
use std::time::Instant;

use gpu_admission_core::admission::mutate_pod::{self, Decision, Outcome, Scoring};
use gpu_admission_core::review::{self, Answer, BadRequest, Content, Incoming};
use gpu_admission_telemetry::REQUEST_SPANS;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::AdmissionRequest;
use time::OffsetDateTime;
use tracing::Instrument;

use super::pipeline::{Body, Call, Reply, Webhook, operation_label};
use crate::cluster::ClusterFacts;
use crate::cluster::access::AccessReviews;
use crate::cluster::workloads::{self, WorkloadOwners};
use crate::metrics::Metrics;
use crate::policy::PolicyCache;
use crate::scorer_client::Scorer;
use crate::workload_answers::WorkloadAnswers;
use gpu_admission_core::authority::Grants;

/// What `/mutate-pod` reads.
pub(crate) struct MutatePod {
    pub(crate) scorer: Scorer,
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) access: Arc<AccessReviews>,
    /// Jobs and ReplicaSets, to resolve a Pod's workload; `None` with `--no-kube` (first hop only).
    pub(crate) workloads: Option<Arc<WorkloadOwners>>,
    /// The scorer's answers for earlier Pods of a workload (see [`WorkloadAnswers`]).
    pub(crate) answers: WorkloadAnswers,
    pub(crate) metrics: Arc<Metrics>,
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

    fn record(&self, operation: &'static str, outcome: &'static str, elapsed: std::time::Duration) {
        self.metrics
            .record_request(operation, outcome, elapsed.as_secs_f64());
    }
}

impl MutatePod {
    /// The decision for one Pod request: plan, the workload, the scorer call, decide.
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
                let label = self.cluster.namespace_tier(ns);
                (self.access.exemption(&req.user_info, label, ns, &policy)).await
            }
            None => Grants::none(),
        };
        let planned = self.cluster.with_facts(&policy, &grants, |facts| {
            mutate_pod::plan(uid, req, facts, &policy)
        });
        let mut scoring = match planned {
            Ok(s) => s,
            Err(skip) => {
                // Not scored (no GPU, already decided…): still held to its tier's priority cap.
                let capped = self.cluster.with_facts(&policy, &grants, |facts| {
                    mutate_pod::cap_priority(req, facts, &policy)
                });
                if let Some(c) = capped {
                    call.span.record("admission.reason", "priority capped");
                    tracing::info!(
                        uid,
                        tier = c.tier,
                        own = c.own,
                        cap = c.cap,
                        "PriorityClass lowered to the tier's cap"
                    );
                    return (Outcome::Mutated, c.answer);
                }
                skipped(&call.span, skip.0, "");
                return (Outcome::Skipped, Answer::default());
            }
        };
        let budget = self.scorer.deadline(call.apiserver_timeout);
        // One decision per workload: the scorer groups by its key. Reading the owner takes from the scorer's
        // budget, at most a quarter of it.
        let candidate = &scoring.candidate;
        let workload = workloads::resolve_workload(
            self.workloads.as_deref(),
            candidate.pod,
            candidate.namespace,
            (budget / 4).min(workloads::OWNER_READ_BUDGET),
        )
        .await;
        if let Some(w) = &workload {
            scoring.set_workload(w.key(), w.group_size);
        }
        if !scoring.fitted.is_empty() {
            tracing::info!(uid, namespace = scoring.candidate.namespace, fitted = ?scoring.fitted, "scorer request fitted to its limits");
        }
        let kept_as = WorkloadAnswers::key(&mut scoring.request, &policy.version);
        let reused = kept_as.as_ref().and_then(|key| {
            self.answers
                .get(key, &scoring.request.request_id, Instant::now())
        });
        let (outcome, call_elapsed) = match reused {
            // A later Pod of a workload the scorer has decided: its answer, without the call.
            Some(answer) => {
                self.metrics.workload_answers_reused.inc();
                (mutate_pod::ScorerOutcome::Answered(Box::new(answer)), None)
            }
            None => {
                let (outcome, elapsed) = self.call_scorer(&mut scoring, budget, call).await;
                (outcome, Some(elapsed))
            }
        };
        if let mutate_pod::ScorerOutcome::Answered(answer) = &outcome
            && answer.policy_version != policy.version
        {
            self.policy.request_refresh();
        }
        let to_keep = match (&kept_as, call_elapsed, &outcome) {
            (Some(_), Some(_), mutate_pod::ScorerOutcome::Answered(answer))
                if answer.policy_version == policy.version =>
            {
                Some(answer.as_ref().clone())
            }
            _ => None,
        };
        let decision = tracing::info_span!(target: REQUEST_SPANS, "build_patch").in_scope(|| {
            self.cluster.with_facts(&policy, &grants, |facts| {
                mutate_pod::decide(&scoring, outcome, facts, OffsetDateTime::now_utc())
            })
        });
        if let Some(elapsed) = call_elapsed {
            self.metrics
                .record_scorer_call(decision.scorer_result, elapsed.as_secs_f64());
        }
        // The scorer's answer as it came (before this Pod's own constraints narrowed it), once it passed the
        // checks of `decide`.
        if let (Some(key), Some(answer), "ok") = (kept_as, to_keep, decision.scorer_result) {
            self.answers.keep(key, answer, Instant::now());
        }
        log_decision(uid, &scoring, &decision, workload.as_ref(), &call.span);
        (decision.outcome, decision.answer)
    }

    /// The one Score call, in its client span; the outcome and how long the call took.
    async fn call_scorer(
        &self,
        scoring: &mut Scoring<'_>,
        budget: std::time::Duration,
        call: &Call,
    ) -> (mutate_pod::ScorerOutcome, std::time::Duration) {
        let call_span = tracing::info_span!(
            target: REQUEST_SPANS,
            "scorer.score",
            otel.kind = "client",
            rpc.system = "grpc",
            deadline_ms = budget.as_millis() as u64
        );
        let call_start = Instant::now();
        let outcome = self
            .scorer
            .score(
                std::mem::take(&mut scoring.request),
                call.started,
                budget,
                &call_span,
            )
            .instrument(call_span.clone())
            .await;
        (outcome, call_start.elapsed())
    }
}

/// The decision in the span and the log.
fn log_decision(
    uid: &str,
    scoring: &Scoring<'_>,
    decision: &Decision,
    workload: Option<&gpu_admission_core::workload::WorkloadRef>,
    span: &tracing::Span,
) {
    let c = &scoring.candidate;
    if let Some((kind, detail)) = &decision.failure {
        span.record("admission.reason", kind.as_str());
        match decision.outcome {
            Outcome::TierDefault => {
                tracing::warn!(uid, namespace = c.namespace, tier = c.tier, result = decision.scorer_result, %detail, "{kind}; tier default placement")
            }
            _ => {
                tracing::warn!(uid, namespace = c.namespace, result = decision.scorer_result, %detail, "{kind}; Pod admitted unchanged (pass-through)")
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
        workload = workload.map(|w| w.key()).unwrap_or_default(),
        group_size = workload.and_then(|w| w.group_size),
        workload_via = ?workload.map(|w| &w.via),
        dra_claims = ?c.features.dra_claims,
        ops = decision.answer.patch.len(),
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
