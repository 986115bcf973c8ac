//! Proto <-> model: requests into the model's types (checked against the scorer's limits), answers and the
//! policy back into messages.

use gpu_admission_proto::limits;
use gpu_admission_proto::scorer::v1 as pb;
use tonic::Status;

use super::one_class_for_a_group;
use crate::model::{self, JobRequest, Observation};
use crate::policy::{EnforcementMode, Fallback, Policy, Vendor, WorkloadClass};

pub(crate) fn invalid(msg: String) -> Status {
    Status::invalid_argument(msg)
}

/// A request outside the limits shared with the clients (`gpu_admission_proto::limits`).
pub(crate) fn out_of_limits(v: limits::Violation) -> Status {
    invalid(v.to_string())
}

pub(crate) fn vendor(v: i32) -> Option<Vendor> {
    match pb::GpuVendor::try_from(v).unwrap_or(pb::GpuVendor::Unknown) {
        pb::GpuVendor::Nvidia => Some(Vendor::Nvidia),
        pb::GpuVendor::Amd => Some(Vendor::Amd),
        pb::GpuVendor::Intel => Some(Vendor::Intel),
        pb::GpuVendor::Unknown => None,
    }
}

pub(crate) fn vendor_to_pb(v: Vendor) -> pb::GpuVendor {
    match v {
        Vendor::Nvidia => pb::GpuVendor::Nvidia,
        Vendor::Amd => pb::GpuVendor::Amd,
        Vendor::Intel => pb::GpuVendor::Intel,
    }
}

/// The request's workload class; unknown (or unset) means "not said".
pub(crate) fn workload(v: i32) -> Option<WorkloadClass> {
    match pb::WorkloadClass::try_from(v).unwrap_or(pb::WorkloadClass::Unknown) {
        pb::WorkloadClass::Training => Some(WorkloadClass::Training),
        pb::WorkloadClass::Inference => Some(WorkloadClass::Inference),
        pb::WorkloadClass::Batch => Some(WorkloadClass::Batch),
        pb::WorkloadClass::Interactive => Some(WorkloadClass::Interactive),
        pb::WorkloadClass::Unknown => None,
    }
}

/// Validates a `ScoreRequest` into the model's terms.
pub fn job_request(req: &pb::ScoreRequest) -> Result<JobRequest, Status> {
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
) -> Result<Observation, Status> {
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
    let c = &policy.classes[index];
    pb::GpuClass {
        name: c.name.clone(),
        vendor: vendor_to_pb(c.vendor) as i32,
        memory_gib: c.memory_gib,
        node_label_key: c.node_label_key.clone(),
        node_label_value: c.node_label_value.clone(),
        relative_throughput: c.relative_throughput,
        price_per_hour: c.price_per_hour,
        taint_key: c.taint_key.clone().unwrap_or_default(),
    }
}

pub(crate) fn priority_pb(b: &crate::policy::Bucket) -> pb::PriorityAssignment {
    pb::PriorityAssignment {
        name: b.name.clone(),
        value: b.value,
        preemption_policy: b.preemption_policy.clone(),
    }
}

pub(crate) fn score_response(
    policy: &Policy,
    req: &pb::ScoreRequest,
    d: model::Decision,
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
    }
}

pub(crate) fn explain_response(
    policy: &Policy,
    req: &pb::ScoreRequest,
    d: model::Decision,
    exploration_share: f64,
    state_digest: String,
    observations: u64,
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
            let mut answer = score_response(policy, req, d);
            one_class_for_a_group(req, &mut answer);
            answer
        }),
    }
}

pub(crate) fn policy_response(policy: &Policy) -> pb::GetPolicyResponse {
    pb::GetPolicyResponse {
        version: policy.version.clone(),
        default_tier: policy.tiers[policy.default_tier].name.clone(),
        catalog: (0..policy.classes.len())
            .map(|i| gpu_class_pb(policy, i))
            .collect(),
        tiers: policy
            .tiers
            .iter()
            .map(|t| pb::Tier {
                name: t.name.clone(),
                allowed_classes: (0..policy.classes.len())
                    .filter(|&i| t.allowed[i])
                    .map(|i| policy.classes[i].name.clone())
                    .collect(),
                preferred_class: t
                    .preferred
                    .map(|i| policy.classes[i].name.clone())
                    .unwrap_or_default(),
                objective: t.objective.as_str().to_string(),
                priority_weight: t.priority_weight,
                max_priority_class: t.max_priority_class.clone().unwrap_or_default(),
                fallback: match t.fallback {
                    Fallback::PassThrough => pb::TierFallback::PassThrough,
                    Fallback::TierDefault => pb::TierFallback::TierDefault,
                } as i32,
            })
            .collect(),
        priority_buckets: policy
            .priority
            .buckets
            .iter()
            .map(|b| pb::PriorityBucket {
                min_score: b.min_score,
                priority_class: Some(priority_pb(b)),
            })
            .collect(),
        job_types: policy.job_types.iter().map(|j| j.name.clone()).collect(),
        anti_affinity_threshold: policy.anti_affinity_threshold,
        enforcement: Some(pb::Enforcement {
            mode: match policy.enforcement.mode {
                EnforcementMode::Enforce => pb::EnforcementMode::Enforce,
                EnforcementMode::Warn => pb::EnforcementMode::Warn,
                EnforcementMode::Audit => pb::EnforcementMode::Audit,
            } as i32,
            admin_groups: policy.enforcement.admin_groups.clone(),
            admin_users: policy.enforcement.admin_users.clone(),
        }),
        namespace_grants: policy
            .namespace_grants
            .iter()
            .map(|g| pb::NamespaceGrant {
                namespace: g.namespace.clone(),
                allowed_classes: g.allowed_classes.clone(),
                max_priority_class: g.max_priority_class.clone().unwrap_or_default(),
            })
            .collect(),
        job_type_default_memory_gib: policy
            .job_types
            .iter()
            .filter_map(|j| j.default_memory_gib.map(|m| (j.name.clone(), m)))
            .collect(),
        gpu_resources: policy.gpu_resources.clone(),
        class_labels: policy
            .classes
            .iter()
            .filter(|c| !c.identifying_labels.is_empty())
            .map(|c| pb::ClassLabels {
                class: c.name.clone(),
                labels: c
                    .identifying_labels
                    .iter()
                    .map(|(key, value)| pb::NodeLabel {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}
