//! The tonic adapter: each RPC of `gpuadmission.scorer.v1.Scorer` as a span, the trace context, and a call
//! into [`Core`].

use std::sync::Arc;

use futures::StreamExt;
use gpu_admission_proto::scorer::v1 as pb;
use gpu_admission_telemetry::REQUEST_SPANS;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use super::{Core, CoreError};

/// The tonic service.
#[derive(Debug, Clone)]
pub struct ScorerService {
    core: Arc<Core>,
    /// Turns true when the server shuts down: every `ScoreCalls` stream then ends, so that the server's
    /// graceful shutdown is not held by its callers' long-lived streams.
    stop: watch::Receiver<bool>,
}

impl ScorerService {
    pub fn new(core: Arc<Core>, stop: watch::Receiver<bool>) -> Self {
        Self { core, stop }
    }

    /// One Score call (unary or on a stream) as a span, child of the caller's context when `parent` gives it.
    fn score_one(
        &self,
        req: &pb::ScoreRequest,
        parent: impl FnOnce(&tracing::Span),
    ) -> Result<pb::ScoreResponse, Status> {
        let span = tracing::info_span!(
            target: REQUEST_SPANS,
            "Score",
            request_id = %req.request_id,
            "gpu.class" = tracing::field::Empty,
            "priority.score" = tracing::field::Empty,
            explored = tracing::field::Empty,
        );
        parent(&span);
        let _enter = span.enter();
        let result = self.core.score(req);
        match &result {
            Ok(r) => {
                let class = r.accepted_classes.first().map_or("", |c| c.name.as_str());
                span.record("gpu.class", class);
                span.record("priority.score", r.priority_score);
                span.record("explored", r.explored);
                tracing::debug!(
                    request_id = req.request_id,
                    class,
                    score = r.priority_score,
                    explored = r.explored,
                    "scored"
                );
            }
            Err(refusal) => {
                tracing::info!(request_id = req.request_id, %refusal, "Score refused")
            }
        }
        result.map_err(Status::from)
    }

    /// The answer to one call of a `ScoreCalls` stream.
    fn answer(&self, call: pb::ScoreCall) -> pb::ScoreAnswer {
        let req = call.request.unwrap_or_default();
        let result = self.score_one(&req, |span| {
            gpu_admission_telemetry::propagation::set_parent_from_map(span, &call.trace_context)
        });
        pb::ScoreAnswer {
            id: call.id,
            result: Some(match result {
                Ok(response) => pb::score_answer::Result::Response(response),
                Err(status) => pb::score_answer::Result::Error(pb::CallError {
                    code: status.code() as i32,
                    message: status.message().to_string(),
                }),
            }),
        }
    }
}

#[tonic::async_trait]
impl pb::scorer_server::Scorer for ScorerService {
    async fn score(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ScoreResponse>, Status> {
        self.score_one(request.get_ref(), |span| {
            gpu_admission_telemetry::propagation::set_parent_from_grpc(span, request.metadata())
        })
        .map(Response::new)
    }

    /// Each call is answered where it is read, in order: a Score is a few microseconds of CPU, less than
    /// handing it to another task would cost. A call that cannot be decoded ends the stream with its status.
    async fn score_calls(
        &self,
        request: Request<Streaming<pb::ScoreCall>>,
    ) -> Result<Response<tonic::codegen::BoxStream<pb::ScoreAnswer>>, Status> {
        let service = self.clone();
        let mut stop = self.stop.clone();
        let stopped = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        let answers = request
            .into_inner()
            .map(move |call| call.map(|call| service.answer(call)))
            .take_until(Box::pin(stopped));
        Ok(Response::new(Box::pin(answers)))
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        let span = tracing::info_span!(target: REQUEST_SPANS, "Observe", job_type = %request.get_ref().job_type);
        gpu_admission_telemetry::propagation::set_parent_from_grpc(&span, request.metadata());
        let _enter = span.enter();
        self.core
            .observe(request.get_ref())
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn get_policy(
        &self,
        _request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.core
            .get_policy()
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn explain(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ExplainResponse>, Status> {
        self.core
            .explain(request.get_ref())
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn export_state(
        &self,
        _request: Request<pb::ExportStateRequest>,
    ) -> Result<Response<pb::LearnedState>, Status> {
        self.core
            .export_state()
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn import_state(
        &self,
        request: Request<pb::LearnedState>,
    ) -> Result<Response<pb::ImportStateResponse>, Status> {
        let span = tracing::info_span!(target: REQUEST_SPANS, "ImportState");
        let _enter = span.enter();
        let r = self.core.import_state(request.get_ref());
        if let Ok(r) = &r {
            tracing::info!(
                applied = r.applied,
                observations = r.observations,
                "state import"
            );
        }
        r.map(Response::new).map_err(Status::from)
    }

    async fn validate_policy(
        &self,
        request: Request<pb::ValidatePolicyRequest>,
    ) -> Result<Response<pb::ValidatePolicyResponse>, Status> {
        let result = self.core.validate_policy(request.get_ref());
        if let Ok(r) = &result {
            tracing::info!(file = %request.get_ref().file, valid = r.valid, problems = r.problems.len(), "ValidatePolicy");
        }
        result.map(Response::new).map_err(Status::from)
    }
}

/// The one place a refusal of the core becomes a gRPC status.
impl From<CoreError> for Status {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::NoPolicy => Status::unavailable(e.to_string()),
            CoreError::InvalidArgument(m) => Status::invalid_argument(m),
            CoreError::Internal(m) => Status::internal(m),
        }
    }
}
