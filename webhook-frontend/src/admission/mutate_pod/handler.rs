//! `POST /mutate-pod`: decode → triage → ask the scorer → validate → build the patch → encode.
//! All I/O of the admission path (the scorer call, caches, metrics, logs, spans) lives here; the decisions are
//! the pure functions of `decide` and `patch`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use gpu_admission_proto::scorer::v1::{ScoreResponse, TierFallback};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};
use time::OffsetDateTime;
use tracing::{Instrument, field::Empty};

use super::decide::{self, Skip};
use super::gpu_resources::NoClaimTemplates;
use super::patch::{self, PatchInput};
use crate::admission::review::{self, Answer, Content};
use crate::metrics::Outcome;
use crate::policy::{PolicySnapshot, TierRules};
use crate::priority_class::{AnswerPriorityClass, NoPriorityClasses, PriorityClassLookup};
use crate::scorer_client::{ScoreCall, parse_go_duration};
use crate::state::AppState;

/// The apiserver's `?timeout=10s` query parameter.
fn apiserver_timeout(uri: &Uri) -> Option<Duration> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(parse_go_duration)
}

fn operation_label(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn operation_label_text(op: &str) -> &'static str {
    match op {
        "Create" => "CREATE",
        "Update" => "UPDATE",
        "Delete" => "DELETE",
        "Connect" => "CONNECT",
        _ => "unknown",
    }
}

pub async fn mutate_pod(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let start = Instant::now();
    let span = tracing::info_span!(
        "admission",
        otel.kind = "server",
        admission.uid = Empty,
        k8s.namespace.name = Empty,
        k8s.pod.name = Empty,
        admission.outcome = Empty,
        admission.reason = Empty,
        gpu.class = Empty,
        priority.score = Empty,
    );
    gpu_admission_telemetry::propagation::set_parent_from_http(&span, &headers);
    let timeout = apiserver_timeout(&uri);
    async move {
        let decoded = tracing::info_span!("decode").in_scope(|| review::decode(&body));
        let incoming = match decoded {
            Ok(i) => i,
            Err(bad) => {
                let span = tracing::Span::current();
                span.record("admission.outcome", Outcome::bad_request.as_str());
                span.record("admission.reason", bad.0.as_str());
                tracing::info!(error = %bad, "rejecting a body that is not an AdmissionReview");
                state.metrics.record_request(
                    "unknown",
                    Outcome::bad_request,
                    start.elapsed().as_secs_f64(),
                );
                return (StatusCode::BAD_REQUEST, format!("bad request: {bad}\n")).into_response();
            }
        };
        let span = tracing::Span::current();
        span.record("admission.uid", incoming.uid.as_str());
        let (operation, outcome, answer) = match &incoming.content {
            Content::OtherKind { kind, operation } => {
                record_skip(&span, "not a Pod", kind);
                (
                    operation_label_text(operation),
                    Outcome::skipped,
                    Answer::default(),
                )
            }
            Content::Unreadable(why) => {
                record_skip(&span, "unreadable review", why);
                let warning = format!("gpu-admission: {why}; admitted unchanged");
                (
                    "unknown",
                    Outcome::skipped,
                    Answer {
                        patch: Vec::new(),
                        warnings: vec![warning],
                    },
                )
            }
            Content::Pod(req) => {
                let (outcome, answer) =
                    admit_pod(&state, &incoming.uid, req, timeout, start, &span).await;
                (operation_label(&req.operation), outcome, answer)
            }
        };
        span.record("admission.outcome", outcome.as_str());
        let body = review::encode(incoming.api_version, &incoming.uid, &answer);
        state
            .metrics
            .record_request(operation, outcome, start.elapsed().as_secs_f64());
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
    .instrument(span)
    .await
}

fn record_skip(span: &tracing::Span, reason: &str, detail: &str) {
    span.record("admission.reason", reason);
    tracing::debug!(reason, detail, "allowed unchanged");
}

/// The decision for one Pod request.
async fn admit_pod(
    state: &AppState,
    uid: &str,
    req: &AdmissionRequest<Pod>,
    apiserver_timeout: Option<Duration>,
    started: Instant,
    span: &tracing::Span,
) -> (Outcome, Answer) {
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
    let policy = state.policy.snapshot();
    // No ResourceClaimTemplate source yet: DRA claims count only where a caller can read their templates.
    let candidate = match decide::triage_with(
        req,
        |ns| state.cluster.namespace_tier(ns),
        &policy,
        &NoClaimTemplates,
    ) {
        Ok(c) => c,
        Err(Skip(reason)) => {
            record_skip(span, reason, "");
            return (Outcome::skipped, Answer::default());
        }
    };
    let mut warnings: Vec<String> = candidate
        .features
        .warnings
        .iter()
        .map(|w| format!("gpu-admission: {w}"))
        .collect();
    let rules = policy.tier_rules(&candidate.tier, candidate.namespace);
    let admin = policy.is_admin(
        req.user_info.username.as_deref(),
        req.user_info.groups.as_deref().unwrap_or(&[]),
    );
    let input = |answer, fallback| {
        patch_input(&candidate, &policy, rules.as_ref(), admin, answer, fallback)
    };
    // A Pod that already carries our decision, inside its tier, needs no score (a second pass, a re-sent
    // request). Our annotations alone are not enough: see `patch::is_settled`.
    if rules.is_some()
        && patch::is_settled(
            &input(&ScoreResponse::default(), true),
            known_priority_classes(state, &policy).unwrap_or(&NoPriorityClasses),
        )
    {
        record_skip(span, "already decided", "");
        return (Outcome::skipped, Answer::default());
    }
    let (mut request, mut fitted) = decide::score_request(uid, &candidate, &policy);

    let deadline = state.scorer.deadline(apiserver_timeout);
    // One decision per workload: the scorer groups by this key. Reading the owner takes from the scorer's
    // budget, at most a quarter of it.
    let workload = crate::cluster::workloads::resolve_workload(
        state.workloads.as_ref(),
        candidate.pod,
        candidate.namespace,
        (deadline / 4).min(crate::cluster::workloads::OWNER_READ_BUDGET),
    )
    .await;
    if let Some(w) = &workload {
        request.workload_key = w.key();
        request.group_size = w.group_size;
        fitted.extend(decide::fit_to_limits(&mut request));
    }
    if !fitted.is_empty() {
        tracing::info!(uid, namespace = candidate.namespace, fitted = ?fitted, "scorer request fitted to its limits");
        warnings.extend(fitted);
    }
    let call_span = tracing::info_span!(
        "scorer.score",
        otel.kind = "client",
        rpc.system = "grpc",
        deadline_ms = deadline.as_millis() as u64
    );
    let call_start = Instant::now();
    let call = state
        .scorer
        .score(request, started + deadline, |md| {
            gpu_admission_telemetry::propagation::inject_into_grpc(&call_span, md)
        })
        .instrument(call_span.clone())
        .await;
    let call = match call {
        ScoreCall::Ok(answer) => {
            if answer.policy_version != policy.version {
                state.policy.request_refresh();
            }
            match decide::validate_answer(&answer, &policy) {
                Ok(()) => ScoreCall::Ok(answer),
                Err(why) => ScoreCall::Invalid(why),
            }
        }
        other => other,
    };
    state
        .metrics
        .record_scorer_call(call.result(), call_start.elapsed().as_secs_f64());

    let (mut answer, fallback) = match call {
        ScoreCall::Ok(answer) => (*answer, false),
        failed => {
            let (kind, detail) = match &failed {
                ScoreCall::Timeout => (
                    "timed out",
                    format!("no answer within {} ms", deadline.as_millis()),
                ),
                ScoreCall::Unavailable(d) => ("unavailable", d.clone()),
                ScoreCall::Invalid(d) => ("answered invalidly", d.clone()),
                ScoreCall::Overloaded(max) => (
                    "overloaded",
                    format!("{max} scorer calls already in flight"),
                ),
                ScoreCall::Ok(_) => unreachable!("handled above"),
            };
            span.record("admission.reason", format!("scorer {kind}").as_str());
            match rules.as_ref() {
                Some(r) if r.fallback == TierFallback::TierDefault => {
                    tracing::warn!(uid, namespace = candidate.namespace, tier = r.tier, result = ?failed.result(), %detail, "scorer {kind}; tier default placement");
                    warnings.push(format!(
                        "gpu-admission: scorer {kind} ({detail}); placed on the default classes of tier {}",
                        r.tier
                    ));
                    (
                        patch::tier_default_answer(r, &policy.catalog, &policy.version),
                        true,
                    )
                }
                _ => {
                    tracing::warn!(uid, namespace = candidate.namespace, result = ?failed.result(), %detail, "scorer {kind}; Pod admitted unchanged (pass-through)");
                    warnings.push(format!(
                        "gpu-admission: scorer {kind} ({detail}); Pod admitted unchanged"
                    ));
                    return (
                        Outcome::passed_through,
                        Answer {
                            patch: Vec::new(),
                            warnings,
                        },
                    );
                }
            }
        }
    };
    decide::restrict_answer(&mut answer, candidate.own.as_ref());
    let mutation = tracing::info_span!("build_patch").in_scope(|| {
        let input = patch_input(
            &candidate,
            &policy,
            rules.as_ref(),
            admin,
            &answer,
            fallback,
        );
        match known_priority_classes(state, &policy) {
            Some(lookup) => patch::decide_pod(&input, lookup),
            // --no-kube before the first GetPolicy answer: the buckets are not known yet, but the answer's own
            // assignment comes from those very buckets.
            None => match answer.priority_class.as_ref() {
                Some(pc) => patch::decide_pod(&input, &AnswerPriorityClass(pc)),
                None => patch::decide_pod(&input, &NoPriorityClasses),
            },
        }
    });
    warnings.extend(mutation.warnings);
    let class = answer
        .accepted_classes
        .first()
        .map(|c| c.name.as_str())
        .unwrap_or("");
    span.record("gpu.class", class);
    span.record("priority.score", answer.priority_score);
    tracing::debug!(
        uid,
        namespace = candidate.namespace,
        tier = candidate.tier,
        gpu_class = class,
        priority = answer.priority_score,
        avoid = ?answer.avoid_job_types,
        workload = workload.as_ref().map(|w| w.key()).unwrap_or_default(),
        group_size = workload.as_ref().and_then(|w| w.group_size),
        workload_via = ?workload.as_ref().map(|w| &w.via),
        dra_claims = ?candidate.features.dra_claims,
        ops = mutation.ops.len(),
        admin,
        fallback,
        "Pod mutated"
    );
    (
        if fallback {
            Outcome::tier_default
        } else {
            Outcome::mutated
        },
        Answer {
            patch: mutation.ops,
            warnings,
        },
    )
}

fn patch_input<'a>(
    candidate: &'a decide::Candidate<'a>,
    policy: &'a PolicySnapshot,
    rules: Option<&'a TierRules<'a>>,
    admin: bool,
    answer: &'a ScoreResponse,
    fallback: bool,
) -> PatchInput<'a> {
    PatchInput {
        pod: candidate.pod,
        job_type: candidate.features.job_type.as_deref(),
        answer,
        class_label_keys: &policy.class_label_keys,
        class_labels: &policy.class_labels,
        now: OffsetDateTime::now_utc(),
        catalog: &policy.catalog,
        tier: rules,
        admin,
        fallback,
    }
}

/// The PriorityClasses decisions may use: the cluster's, or with `--no-kube` the policy's buckets once known.
fn known_priority_classes<'s>(
    state: &'s AppState,
    policy: &'s PolicySnapshot,
) -> Option<&'s dyn PriorityClassLookup> {
    match state.cluster.priority_classes() {
        Some(lookup) => Some(lookup),
        None if !policy.priority_classes.is_empty() => Some(policy),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_query_parameter() {
        let uri: Uri = "/mutate-pod?timeout=10s".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), Some(Duration::from_secs(10)));
        let uri: Uri = "/mutate-pod?x=1&timeout=250ms".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), Some(Duration::from_millis(250)));
        let uri: Uri = "/mutate-pod?timeout=soon".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), None);
        assert_eq!(apiserver_timeout(&"/mutate-pod".parse().unwrap()), None);
    }
}
