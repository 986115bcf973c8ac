//! `POST /validate-pod`: Pods and the pod templates of workloads (any kind) in tier namespaces are checked
//! against their tier (class selectors, priority cap, a need no class of the tier meets). `decide` is pure;
//! this handler does the I/O (metrics, logs).

pub mod decide;
pub mod templates;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::admission::review::{self, Verdict};
use crate::priority_class::{NoPriorityClasses, PriorityClassLookup};
use crate::state::AppState;
use decide::Check;

pub async fn validate_pod(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let start = Instant::now();
    let incoming = match review::decode_object(&body) {
        Ok(i) => i,
        Err(bad) => {
            tracing::info!(error = %bad, "validate-pod: rejecting a body that is not an AdmissionReview");
            state
                .metrics
                .record_validation("validate-pod", "bad_request", start);
            return (StatusCode::BAD_REQUEST, format!("bad request: {bad}\n")).into_response();
        }
    };
    let (outcome, verdict) = match &incoming.request {
        Err(why) => {
            tracing::info!(uid = incoming.uid, %why, "validate-pod: unreadable review; allowed");
            (
                "unreadable",
                Verdict {
                    denied: None,
                    warnings: vec![format!("gpu-admission: {why}; not validated")],
                },
            )
        }
        Ok(req) => {
            let policy = state.policy.snapshot();
            let pcs: &dyn PriorityClassLookup = match state.cluster.priority_classes() {
                Some(lookup) => lookup,
                None if policy.priority_classes.is_empty() => &NoPriorityClasses,
                None => policy.as_ref(),
            };
            let check = decide::check(req, &policy, |ns| state.cluster.namespace_tier(ns), pcs);
            let verdict = decide::verdict(&check, policy.mode);
            let outcome = match &check {
                Check::NotOurs(_) => "skipped",
                Check::Allowed(why) => {
                    if *why == "admin" {
                        tracing::info!(uid = incoming.uid, user = ?req.user_info.username, kind = %review::gvk_text(&req.kind), "validate-pod: admin request outside its tier allowed");
                    }
                    "allowed"
                }
                Check::Violations {
                    tier,
                    object,
                    violations,
                    ..
                } => {
                    let mode = crate::policy::mode_name(policy.mode);
                    for v in violations {
                        state
                            .metrics
                            .record_violation(tier, v.reason.as_str(), mode);
                        tracing::warn!(uid = incoming.uid, object, tier, reason = v.reason.as_str(), path = v.path, what = v.what, mode, user = ?req.user_info.username, "tier violation");
                    }
                    if verdict.denied.is_some() {
                        "denied"
                    } else {
                        "violation_admitted"
                    }
                }
            };
            (outcome, verdict)
        }
    };
    state
        .metrics
        .record_validation("validate-pod", outcome, start);
    let body = review::encode_verdict(incoming.api_version, &incoming.uid, &verdict);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
