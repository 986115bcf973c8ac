//! The axum handler of `POST /mutate-pod-checkpoint`: decode → (a CREATE of a Job's Pod?) → the namespace's
//! CheckpointBackups from the watch cache → the Job's controller when a CronJob backup could match → the pure
//! decision → metrics, log, encode.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};
use tracing::{Instrument, field::Empty};

use super::decision::{self, JobFacts, RestoreInput};
use crate::admission::review::{self, Answer, Content};
use crate::app::AppState;
use crate::metrics::CheckpointOutcome;

/// Budget of the one GET of a Job the watch has not delivered yet: well inside the registration's
/// `timeoutSeconds` (2), so a slow API never turns into the apiserver giving up on us.
const JOB_LOOKUP_DEADLINE: Duration = Duration::from_millis(500);

pub async fn mutate_pod_checkpoint(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let span = tracing::info_span!(
        "checkpoint_restore",
        otel.kind = "server",
        admission.uid = Empty,
        admission.outcome = Empty,
    );
    gpu_admission_telemetry::propagation::set_parent_from_http(&span, &headers);
    answer(state, body).instrument(span).await
}

async fn answer(state: Arc<AppState>, body: Bytes) -> Response {
    let incoming = match review::decode(&body) {
        Ok(i) => i,
        Err(bad) => {
            tracing::info!(error = %bad, "checkpoint restore: rejecting a body that is not an AdmissionReview");
            state
                .metrics
                .record_checkpoint_request(CheckpointOutcome::bad_request);
            return (StatusCode::BAD_REQUEST, format!("bad request: {bad}\n")).into_response();
        }
    };
    let (outcome, answer) = match &incoming.content {
        Content::Pod(req) => restore(&state, req).await,
        Content::OtherKind { .. } | Content::Unreadable(_) => {
            (CheckpointOutcome::skipped, Answer::default())
        }
    };
    state.metrics.record_checkpoint_request(outcome);
    let span = tracing::Span::current();
    span.record("admission.uid", incoming.uid.as_str());
    span.record("admission.outcome", format!("{outcome:?}").as_str());
    let body = review::encode(incoming.api_version, &incoming.uid, &answer);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn restore(state: &AppState, req: &AdmissionRequest<Pod>) -> (CheckpointOutcome, Answer) {
    let skipped = (CheckpointOutcome::skipped, Answer::default());
    let (Operation::Create, Some(pod)) = (&req.operation, &req.object) else {
        return skipped;
    };
    let Some(job) = decision::controlling_job(pod) else {
        return skipped;
    };
    let Some(caches) = &state.checkpoints else {
        return skipped; // --no-kube
    };
    let namespace = req
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("");
    // None: the CRD is not installed (logged once by the cache) or not listed yet.
    let Some(backups) = caches.backups_for(namespace) else {
        return (CheckpointOutcome::not_installed, Answer::default());
    };
    let controller = if !backups.iter().any(|b| decision::names_cron_job(b)) {
        Ok(None) // not needed: no CronJob backup could match
    } else if let Some(owners) = &state.workloads {
        owners
            .job_controller(namespace, &job.name, &job.uid, JOB_LOOKUP_DEADLINE)
            .await
    } else {
        Err("the frontend runs without its Job cache".to_string())
    };
    let controller = match &controller {
        Ok(c) => Ok(c.as_ref()),
        Err(why) => {
            tracing::warn!(namespace, job = %job.name, %why, "checkpoint restore: the Job's controller is unknown");
            Err(why.as_str())
        }
    };
    let input = RestoreInput {
        pod,
        namespace,
        job: JobFacts {
            name: &job.name,
            controller,
        },
        backups: &backups,
    };
    let Some(r) = decision::decide(&input) else {
        return skipped;
    };
    state
        .metrics
        .record_checkpoint_images(r.restored.len(), r.misses.iter().map(|(_, m)| *m));
    let pod_name = pod
        .metadata
        .name
        .as_deref()
        .or(pod.metadata.generate_name.as_deref())
        .unwrap_or("");
    let outcome = if r.restored.is_empty() {
        tracing::debug!(namespace, pod = pod_name, job = %job.name, backup = ?r.backup, misses = ?r.misses,
            "checkpoint restore: no image restored");
        CheckpointOutcome::unchanged
    } else {
        let images: Vec<String> = r
            .restored
            .iter()
            .map(|i| format!("{}: {} -> {}", i.container, i.original, i.image))
            .collect();
        tracing::info!(namespace, pod = pod_name, job = %job.name, backup = ?r.backup, ?images,
            misses = ?r.misses, "checkpoint restore: Pod starts from its checkpoint images");
        CheckpointOutcome::restored
    };
    (
        outcome,
        Answer {
            patch: r.patch,
            warnings: r.warnings,
        },
    )
}
