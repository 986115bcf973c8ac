//! Proto <-> model: requests into the model's types (checked against the scorer's limits), answers and the
//! policy back into messages.

use gpu_admission_proto::limits;
use gpu_admission_proto::scorer::v1 as pb;

use super::{CoreError, one_class_for_a_group};
use crate::model::{self, JobRequest, Observation};
use crate::policy::Policy;
use gpu_admission_policy::wire::{vendor, workload_class as workload};

pub(crate) fn invalid(msg: String) -> CoreError {
    CoreError::InvalidArgument(msg)
}

/// A request outside the limits shared with the clients (`gpu_admission_proto::limits`).
pub(crate) fn out_of_limits(v: limits::Violation) -> CoreError {
    invalid(v.to_string())
}

/// Validates a `ScoreRequest` into the model's terms.
pub fn job_request(req: &pb::ScoreRequest) -> Result<JobRequest, CoreError> {
    limits::check_score_request(req).map_err(out_of_limits)?;
    Ok(JobRequest {
        tier: req.tier.clone(),
        job_type: req.job_type.clone(),
        workload_class: workload(req.workload_class),
        gpu_count: req.gpu_count,
        vendor: vendor(req.gpu_vendor),
        memory_gib: req.gpu_memory_gib,
        model_size_billion_params: req.model_size_billion_params,
        candidate_classes: req.candidate_classes.clone(),
        colocated_job_types: req.colocated_job_types.clone(),
        ..JobRequest::default()
    })
}

pub(crate) fn observation(
    policy: &Policy,
    req: &pb::ObserveRequest,
) -> Result<Observation, CoreError> {
    limits::check_observe_request(req).map_err(out_of_limits)?;
    if req.job_type.is_empty() {
        return Err(invalid("job_type is empty".to_string()));
    }
    if policy.class_index(&req.gpu_class).is_none() {
        return Err(invalid(format!(
            "unknown gpu_class `{}`: not in policy version {}",
            req.gpu_class, policy.version
        )));
    }
    Ok(Observation {
        id: (!req.observation_id.is_empty()).then(|| req.observation_id.clone()),
        gpu_count: req.gpu_count.max(1),
        job_type: req.job_type.clone(),
        workload_class: workload(req.workload_class),
        gpu_class: req.gpu_class.clone(),
        runtime_seconds: req.runtime_seconds,
        colocated_job_types: req.colocated_job_types.clone(),
        ..Observation::default()
    })
}

pub(crate) fn gpu_class_pb(policy: &Policy, index: usize) -> pb::GpuClass {
    (&policy.classes[index]).into()
}

pub(crate) fn priority_pb(b: &crate::policy::Bucket) -> pb::PriorityAssignment {
    b.into()
}

/// The answer to `req`; `state_digest`: the digest of the learned state `d` was decided with.
pub(crate) fn score_response(
    policy: &Policy,
    req: &pb::ScoreRequest,
    d: model::Decision,
    state_digest: &str,
) -> pb::ScoreResponse {
    pb::ScoreResponse {
        request_id: req.request_id.clone(),
        accepted_classes: d
            .accepted()
            .iter()
            .map(|c| gpu_class_pb(policy, c.class))
            .collect(),
        candidates: d
            .candidates
            .iter()
            .filter(|c| !req.feasible_candidates_only || c.feasible())
            .map(|c| pb::CandidateScore {
                gpu_class: policy.classes[c.class].name.clone(),
                feasible: c.feasible(),
                infeasible_reason: model::feasibility::describe(&c.infeasible),
                runtime_mean_seconds: c.runtime.mean,
                runtime_stddev_seconds: c.runtime.stddev,
                information_gain: c.information_gain,
                interference_penalty: c.interference_penalty,
                price_per_hour: policy.classes[c.class].price_per_hour,
                cost: c.cost,
            })
            .collect(),
        priority_score: d.priority_score,
        priority_class: Some(priority_pb(&d.priority_class)),
        avoid_job_types: d.avoid_job_types,
        policy_version: policy.version.clone(),
        explored: d.explored,
        infeasible_reason: d.infeasible_reason.unwrap_or_default(),
        state_digest: state_digest.to_string(),
    }
}

pub(crate) fn explain_response(
    policy: &Policy,
    req: &pb::ScoreRequest,
    d: model::Decision,
    exploration_share: f64,
    state_digest: String,
    observations: u64,
    decided_with: &str,
) -> pb::ExplainResponse {
    let name = |i: Option<usize>| i.map_or(String::new(), |i| policy.classes[i].name.clone());
    let candidates = d
        .candidates
        .iter()
        .map(|c| pb::ExplainedCandidate {
            gpu_class: policy.classes[c.class].name.clone(),
            feasible: c.feasible(),
            infeasible_reasons: c
                .infeasible
                .iter()
                .map(|r| model::feasibility::describe(std::slice::from_ref(r)))
                .collect(),
            runtime_mean_seconds: c.runtime.mean,
            runtime_stddev_seconds: c.runtime.stddev,
            prior_runtime_seconds: c.prior_mean,
            observations: c.observations,
            price_per_hour: policy.classes[c.class].price_per_hour,
            interference_slowdown: c.slowdown,
            interference_penalty: c.interference_penalty,
            information_gain: c.information_gain,
            cost: c.cost,
            sampled_cost: c.sampled_cost,
        })
        .collect();
    let why = d.why.clone();
    pb::ExplainResponse {
        rule: why.rule.as_str().to_string(),
        reason: why.reason(policy),
        exploit_class: name(why.exploit),
        sampled_class: name(why.sampled),
        exploration_share,
        exploration_cap: policy.learning.exploration_cap,
        exploration_allowed: why.exploration_allowed,
        state_digest,
        observations,
        candidates,
        answer: Some({
            let mut answer = score_response(policy, req, d, decided_with);
            one_class_for_a_group(req, &mut answer);
            answer
        }),
    }
}

pub(crate) fn policy_response(policy: &Policy) -> pb::GetPolicyResponse {
    gpu_admission_policy::wire::get_policy_response(policy)
}
