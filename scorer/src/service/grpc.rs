//! The tonic adapter: each RPC of `gpuadmission.scorer.v1.Scorer` as a span, the trace context, and a call
//! into [`Core`].

use std::sync::Arc;

use gpu_admission_proto::scorer::v1 as pb;
use gpu_admission_telemetry::REQUEST_SPANS;
use tonic::{Request, Response, Status};

use super::Core;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct ScorerService {
    core: Arc<Core>,
}

impl ScorerService {
    pub fn new(core: Arc<Core>) -> Self {
        Self { core }
    }
}

#[tonic::async_trait]
impl pb::scorer_server::Scorer for ScorerService {
    async fn score(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ScoreResponse>, Status> {
        let span = tracing::info_span!(
            target: REQUEST_SPANS,
            "Score",
            request_id = %request.get_ref().request_id,
            "gpu.class" = tracing::field::Empty,
            "priority.score" = tracing::field::Empty,
            explored = tracing::field::Empty,
        );
        gpu_admission_telemetry::propagation::set_parent_from_grpc(&span, request.metadata());
        let _enter = span.enter();
        let result = self.core.score(request.get_ref());
        match &result {
            Ok(r) => {
                let class = r.accepted_classes.first().map_or("", |c| c.name.as_str());
                span.record("gpu.class", class);
                span.record("priority.score", r.priority_score);
                span.record("explored", r.explored);
                tracing::debug!(
                    request_id = request.get_ref().request_id,
                    class,
                    score = r.priority_score,
                    explored = r.explored,
                    "scored"
                );
            }
            Err(status) => {
                tracing::info!(request_id = request.get_ref().request_id, code = ?status.code(), message = status.message(), "Score refused")
            }
        }
        result.map(Response::new)
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        let span = tracing::info_span!(target: REQUEST_SPANS, "Observe", job_type = %request.get_ref().job_type);
        gpu_admission_telemetry::propagation::set_parent_from_grpc(&span, request.metadata());
        let _enter = span.enter();
        self.core.observe(request.get_ref()).map(Response::new)
    }

    async fn get_policy(
        &self,
        _request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.core.get_policy().map(Response::new)
    }

    async fn explain(
        &self,
        request: Request<pb::ScoreRequest>,
    ) -> Result<Response<pb::ExplainResponse>, Status> {
        self.core.explain(request.get_ref()).map(Response::new)
    }

    async fn export_state(
        &self,
        _request: Request<pb::ExportStateRequest>,
    ) -> Result<Response<pb::LearnedState>, Status> {
        self.core.export_state().map(Response::new)
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
        r.map(Response::new)
    }

    async fn validate_policy(
        &self,
        request: Request<pb::ValidatePolicyRequest>,
    ) -> Result<Response<pb::ValidatePolicyResponse>, Status> {
        let result = self.core.validate_policy(request.get_ref());
        if let Ok(r) = &result {
            tracing::info!(file = %request.get_ref().file, valid = r.valid, problems = r.problems.len(), "ValidatePolicy");
        }
        result.map(Response::new)
    }
}
