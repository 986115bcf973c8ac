//! The `gpuadmission.scorer.v1.Scorer` gRPC service: validates requests, maps proto <-> model, and
//! holds the shared state (policy in force, learned state, metrics).
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gpu_admission_proto::limits::{self, MAX_POLICY_BYTES};
use gpu_admission_proto::scorer::v1 as pb;
use tonic::{Request, Response, Status};

use crate::decisions::{self, DecisionState};
use crate::metrics::Metrics;
use crate::model::{self, JobRequest, Learned, Observation};
use crate::policy::watch::PolicyStore;
use crate::policy::{EnforcementMode, Fallback, Policy, Vendor, WorkloadClass};
use crate::state;

/// State shared by every request.
#[derive(Debug)]
pub struct Core {
    pub policy: Arc<PolicyStore>,
    /// One lock for estimates and the exploration budget: a Score reads the estimates and records its
    /// decision in the budget atomically, so the exploratory share never overshoots its cap.
    pub learned: Mutex<Learned>,
    /// The pinned learned state and the answers per workload (locked after `learned`, never before).
    decisions: Mutex<DecisionState>,
    pub metrics: Arc<Metrics>,
}

impl Core {
    pub fn new(policy: Arc<PolicyStore>, learned: Learned, metrics: Arc<Metrics>) -> Self {
        Self {
            policy,
            learned: Mutex::new(learned),
            decisions: Mutex::new(DecisionState::new(decisions::DEFAULT_EPOCH)),
            metrics,
        }
    }

    /// Sets the length of the learned-state epochs keyed decisions read (0 = the live state).
    pub fn with_decision_epoch(self, epoch: std::time::Duration) -> Self {
        Self {
            decisions: Mutex::new(DecisionState::new(epoch)),
            ..self
        }
    }

    fn learned(&self) -> std::sync::MutexGuard<'_, Learned> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn decisions(&self) -> std::sync::MutexGuard<'_, DecisionState> {
        self.decisions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live learned state, about to be changed: the decision epoch is pinned first.
    fn learned_for_write(&self) -> std::sync::MutexGuard<'_, Learned> {
        let learned = self.learned();
        self.decisions().before_write(&learned, unix_seconds());
        learned
    }

    /// A copy of the learned state, for snapshots.
    pub fn snapshot(&self) -> Learned {
        self.learned().clone()
    }

    fn policy(&self, rpc: &'static str) -> Result<Arc<Policy>, Status> {
        self.policy.current().ok_or_else(|| {
            self.metrics.request(rpc, "unavailable");
            Status::unavailable("no valid policy loaded yet")
        })
    }

    /// Scores one request (everything but the gRPC envelope).
    pub fn score(&self, req: &pb::ScoreRequest) -> Result<pb::ScoreResponse, Status> {
        let policy = self.policy("Score")?;
        let job =
            job_request(req).inspect_err(|_| self.metrics.request("Score", "invalid_argument"))?;
        let started = Instant::now();
        let (answer, newly_explored) = {
            let mut learned = self.learned();
            learned.refresh(&policy);
            let window = policy.learning.exploration_window as usize;
            let key = req.workload_key.as_str();
            if key.is_empty() {
                let allowed = learned
                    .exploration
                    .allows(policy.learning.exploration_cap, window);
                let seed = decision_seed(&policy, &learned, req);
                let d = model::score(&policy, &learned, &job, allowed, seed);
                if !d.accepted().is_empty() {
                    learned.exploration.record(d.explored, window);
                }
                let explored = d.explored;
                (score_response(&policy, req, d), explored)
            } else {
                let mut decisions = self.decisions();
                let now = Instant::now();
                // Cached per workload AND what the Pod asks: Pods of one template share the answer; a member
                // that asks something else (another vendor, more memory) is decided for itself, from the
                // workload's seed and pinned state, so it lands on the same class whenever that class fits.
                let cache_key = format!("{key}\n{}", asked_digest(req));
                if let Some(cached) = decisions.cached(&cache_key, &policy.version, now) {
                    let mut answer = cached.clone();
                    answer.request_id = req.request_id.clone();
                    one_class_for_a_group(req, &mut answer);
                    self.metrics.workload_answer("cached");
                    (answer, false)
                } else {
                    let d = workload_decision(&policy, &mut decisions, &learned, &job, key);
                    if !d.accepted().is_empty() {
                        learned.exploration.record(d.explored, window);
                    }
                    let explored = d.explored;
                    let mut answer = score_response(&policy, req, d);
                    decisions.remember(&cache_key, &policy.version, answer.clone(), now);
                    one_class_for_a_group(req, &mut answer);
                    self.metrics.workload_answer("decided");
                    (answer, explored)
                }
            }
        };
        self.metrics
            .score_duration
            .observe(started.elapsed().as_secs_f64());
        if newly_explored {
            self.metrics.explored_decisions.inc();
        }
        let result = if answer.accepted_classes.is_empty() {
            "infeasible"
        } else {
            "ok"
        };
        self.metrics.request("Score", result);
        Ok(answer)
    }

    pub fn observe(&self, req: &pb::ObserveRequest) -> Result<pb::ObserveResponse, Status> {
        let policy = self.policy("Observe")?;
        let obs = observation(&policy, req)
            .inspect_err(|_| self.metrics.request("Observe", "invalid_argument"))?;
        let outcome = model::observe(&policy, &mut self.learned_for_write(), &obs);
        self.metrics.request(
            "Observe",
            if outcome.duplicate { "duplicate" } else { "ok" },
        );
        Ok(pb::ObserveResponse {
            runtime_mean_seconds: outcome.estimate.mean,
            runtime_stddev_seconds: outcome.estimate.stddev,
            observations: outcome.observations,
            duplicate: outcome.duplicate,
        })
    }

    /// What Score would answer, and why, without recording anything.
    pub fn explain(&self, req: &pb::ScoreRequest) -> Result<pb::ExplainResponse, Status> {
        let policy = self.policy("Explain")?;
        let job = job_request(req)
            .inspect_err(|_| self.metrics.request("Explain", "invalid_argument"))?;
        let mut learned = self.learned();
        // Only the caches: nothing learned, no budget spent.
        learned.refresh(&policy);
        let window = policy.learning.exploration_window as usize;
        let decision = if req.workload_key.is_empty() {
            let budget = learned
                .exploration
                .allows(policy.learning.exploration_cap, window);
            let seed = decision_seed(&policy, &learned, req);
            model::score(&policy, &learned, &job, budget, seed)
        } else {
            // What a first Pod of the workload would get now (a cached answer may be older).
            workload_decision(
                &policy,
                &mut self.decisions(),
                &learned,
                &job,
                &req.workload_key,
            )
        };
        let share = learned.exploration.share(window);
        let digest = state::digest(&learned);
        let observations = learned.observations;
        drop(learned);
        self.metrics.request("Explain", "ok");
        Ok(explain_response(
            &policy,
            req,
            decision,
            share,
            digest,
            observations,
        ))
    }

    /// The learned state (without this replica's exploration budget), for another replica.
    pub fn export_state(&self) -> Result<pb::LearnedState, Status> {
        let learned = self.learned().clone();
        let snapshot = state::encode_shared(&learned).map_err(|e| {
            self.metrics.request("ExportState", "internal");
            Status::internal(format!("cannot encode the learned state: {e}"))
        })?;
        self.metrics.request("ExportState", "ok");
        Ok(pb::LearnedState {
            snapshot,
            observations: learned.observations,
            digest: state::digest(&learned),
        })
    }

    /// Adopts `incoming` when it holds every observation this replica holds.
    pub fn import_state(
        &self,
        incoming: &pb::LearnedState,
    ) -> Result<pb::ImportStateResponse, Status> {
        let theirs = state::decode_shared(&incoming.snapshot).map_err(|e| {
            self.metrics.request("ImportState", "invalid_argument");
            invalid(format!("snapshot: {e}"))
        })?;
        let mut learned = self.learned();
        let applied = state::is_superset(&theirs, &learned);
        if applied {
            self.decisions().before_write(&learned, unix_seconds());
            let exploration = std::mem::take(&mut learned.exploration);
            *learned = Learned {
                exploration,
                ..theirs
            };
            if let Some(policy) = self.policy.current() {
                learned.refresh(&policy);
            }
        }
        self.metrics
            .request("ImportState", if applied { "applied" } else { "kept" });
        Ok(pb::ImportStateResponse {
            applied,
            observations: learned.observations,
            digest: state::digest(&learned),
        })
    }

    pub fn get_policy(&self) -> Result<pb::GetPolicyResponse, Status> {
        let policy = self.policy("GetPolicy")?;
        self.metrics.request("GetPolicy", "ok");
        Ok(policy_response(&policy))
    }

    /// Checks a policy text with exactly the validation a reload applies; loads nothing.
    pub fn validate_policy(
        &self,
        req: &pb::ValidatePolicyRequest,
    ) -> Result<pb::ValidatePolicyResponse, Status> {
        if req.text.len() > MAX_POLICY_BYTES {
            self.metrics.request("ValidatePolicy", "invalid_argument");
            return Err(invalid(format!(
                "policy text of {} bytes; at most {MAX_POLICY_BYTES}",
                req.text.len()
            )));
        }
        let response = validate_policy_text(&req.text, &req.file);
        self.metrics.request("ValidatePolicy", "ok");
        Ok(response)
    }
}

/// The policy validation's verdict as the proto carries it.
pub fn validate_policy_text(text: &str, file: &str) -> pb::ValidatePolicyResponse {
    let file = if file.is_empty() { "<policy>" } else { file };
    match crate::policy::parse(text, file) {
        Ok(p) => pb::ValidatePolicyResponse {
            valid: true,
            version: p.version,
            problems: Vec::new(),
        },
        Err(e) => pb::ValidatePolicyResponse {
            valid: false,
            version: String::new(),
            problems: e
                .problems
                .into_iter()
                .map(|p| pb::PolicyProblem {
                    file: e.file.clone(),
                    field: p.field,
                    reason: p.reason,
                })
                .collect(),
        },
    }
}

/// A workload's decision: read from the epoch's pinned state, seeded by the workload key, gated by its
/// seeded draw alone (not by this replica's exploration window; see [`crate::decisions`]).
fn workload_decision(
    policy: &Policy,
    decisions: &mut DecisionState,
    live: &Learned,
    job: &JobRequest,
    key: &str,
) -> model::Decision {
    let state = decisions.decision_state(live, policy, unix_seconds());
    let seed = decisions::workload_seed(policy, &state.digest(), key);
    model::score(policy, state, job, true, seed)
}

/// A group of several Pods runs at the speed of its slowest member: a workload is given its chosen class
/// only, so that all its Pods land on that class (the others stay in `candidates`). Only a workload known
/// to be one Pod (`group_size` 1) keeps every acceptable class: an unknown size counts as a group, so a Pod
/// whose owner could not be read in time is placed like its siblings.
fn one_class_for_a_group(req: &pb::ScoreRequest, answer: &mut pb::ScoreResponse) {
    if !req.workload_key.is_empty() && req.group_size.is_none_or(|n| n > 1) {
        answer.accepted_classes.truncate(1);
    }
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The seed of a decision's posterior sample: the request's content, the learned state and the
/// policy's `learning.seed`, so that replicas with equal state answer a request identically.
fn decision_seed(policy: &Policy, learned: &Learned, req: &pb::ScoreRequest) -> u64 {
    use prost::Message;
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(policy.learning.seed.to_le_bytes());
    h.update(state::digest(learned).as_bytes());
    h.update(req.encode_to_vec());
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}

/// A digest of what a request asks, without its request id and group size (a frontend that could not read
/// the owner in time leaves the size out): equal for the Pods of one template.
fn asked_digest(req: &pb::ScoreRequest) -> String {
    use prost::Message;
    use sha2::{Digest, Sha256};
    let asked = pb::ScoreRequest {
        request_id: String::new(),
        group_size: None,
        ..req.clone()
    };
    let d = Sha256::digest(asked.encode_to_vec());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn invalid(msg: String) -> Status {
    Status::invalid_argument(msg)
}

/// A request outside the limits shared with the clients (`gpu_admission_proto::limits`).
fn out_of_limits(v: limits::Violation) -> Status {
    invalid(v.to_string())
}

fn vendor(v: i32) -> Option<Vendor> {
    match pb::GpuVendor::try_from(v).unwrap_or(pb::GpuVendor::Unknown) {
        pb::GpuVendor::Nvidia => Some(Vendor::Nvidia),
        pb::GpuVendor::Amd => Some(Vendor::Amd),
        pb::GpuVendor::Intel => Some(Vendor::Intel),
        pb::GpuVendor::Unknown => None,
    }
}

fn vendor_to_pb(v: Vendor) -> pb::GpuVendor {
    match v {
        Vendor::Nvidia => pb::GpuVendor::Nvidia,
        Vendor::Amd => pb::GpuVendor::Amd,
        Vendor::Intel => pb::GpuVendor::Intel,
    }
}

/// The request's workload class; unknown (or unset) means "not said".
fn workload(v: i32) -> Option<WorkloadClass> {
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
    })
}

fn observation(policy: &Policy, req: &pb::ObserveRequest) -> Result<Observation, Status> {
    limits::check_observe_request(req).map_err(out_of_limits)?;
    if policy.job_index(&req.job_type).is_none() {
        return Err(invalid(format!(
            "unknown job_type `{}`: not in policy version {} (only known job types are learned)",
            req.job_type, policy.version
        )));
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
        gpu_class: req.gpu_class.clone(),
        runtime_seconds: req.runtime_seconds,
        colocated_job_types: req.colocated_job_types.clone(),
    })
}

fn gpu_class_pb(policy: &Policy, index: usize) -> pb::GpuClass {
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

fn priority_pb(b: &crate::policy::Bucket) -> pb::PriorityAssignment {
    pb::PriorityAssignment {
        name: b.name.clone(),
        value: b.value,
        preemption_policy: b.preemption_policy.clone(),
    }
}

fn score_response(
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

fn explain_response(
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
        reason: why.reason,
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

fn policy_response(policy: &Policy) -> pb::GetPolicyResponse {
    pb::GetPolicyResponse {
        version: policy.version.clone(),
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
                    class,
                    score = r.priority_score,
                    explored = r.explored,
                    "scored"
                );
            }
            Err(status) => {
                tracing::info!(code = ?status.code(), message = status.message(), "Score refused")
            }
        }
        result.map(Response::new)
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::ObserveResponse>, Status> {
        let span = tracing::info_span!("Observe", job_type = %request.get_ref().job_type);
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
        let span = tracing::info_span!("ImportState");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    fn core() -> Core {
        let store = Arc::new(PolicyStore::new(Some(embedded_default().unwrap())));
        Core::new(store, Learned::default(), Arc::new(Metrics::unregistered()))
    }

    fn request(memory: Option<f64>) -> pb::ScoreRequest {
        pb::ScoreRequest {
            request_id: "r1".into(),
            tier: "gold".into(),
            job_type: "train-llama".into(),
            gpu_count: 1,
            gpu_vendor: pb::GpuVendor::Nvidia as i32,
            gpu_memory_gib: memory,
            ..Default::default()
        }
    }

    /// A replica exploring on every decision it may (cap 100 %), started with a state that holds one
    /// observation (nothing is explored before the first), with `epoch` as its decision epoch.
    fn exploring_replica(epoch: std::time::Duration) -> Core {
        let mut policy = embedded_default().unwrap();
        policy.learning.exploration_cap = 1.0;
        let store = Arc::new(PolicyStore::new(Some(policy)));
        let metrics = Arc::new(Metrics::unregistered());
        let learner = Core::new(store.clone(), Learned::default(), metrics.clone());
        learner
            .observe(&pb::ObserveRequest {
                job_type: "train-llama".into(),
                gpu_class: "H100-80GB".into(),
                runtime_seconds: 40_000.0,
                observation_id: "pod-1".into(),
                ..Default::default()
            })
            .unwrap();
        Core::new(store, learner.snapshot(), metrics).with_decision_epoch(epoch)
    }

    fn pod_of(key: &str, pod: usize) -> pb::ScoreRequest {
        pb::ScoreRequest {
            request_id: format!("{key}-pod-{pod}"),
            workload_key: key.into(),
            group_size: Some(32),
            ..request(Some(20.0))
        }
    }

    fn first_class(r: &pb::ScoreResponse) -> String {
        r.accepted_classes[0].name.clone()
    }

    #[test]
    fn one_workload_one_answer_across_exploration_and_replicas() {
        // Epoch pinning off on one pair, on (default length) on the other: both must agree per workload.
        for epoch in [std::time::Duration::ZERO, decisions::DEFAULT_EPOCH] {
            let (a, b) = (exploring_replica(epoch), exploring_replica(epoch));
            let mut classes = std::collections::BTreeSet::new();
            let mut explored = 0;
            for w in 0..24 {
                let key = format!("batch/Job/ml/train-{w}");
                let first = a.score(&pod_of(&key, 0)).unwrap();
                // Replica b has not seen this workload: it must derive the same answer on its own.
                let other = b.score(&pod_of(&key, 1)).unwrap();
                assert_eq!(first_class(&first), first_class(&other), "{key}");
                assert_eq!(first.priority_class, other.priority_class, "{key}");
                for pod in 2..32 {
                    let replica = if pod % 2 == 0 { &a } else { &b };
                    let r = replica.score(&pod_of(&key, pod)).unwrap();
                    assert_eq!(first_class(&r), first_class(&first), "{key} pod {pod}");
                    assert_eq!(r.priority_class, first.priority_class);
                    assert_eq!(r.request_id, format!("{key}-pod-{pod}"));
                }
                assert_eq!(first.accepted_classes.len(), 1, "a group gets one class");
                classes.insert(first_class(&first));
                explored += usize::from(first.explored);
            }
            // Each replica decided each workload once and served it from its cache afterwards.
            let answers = |c: &Core, answer| {
                c.metrics
                    .workload_answers
                    .get_or_create(&crate::metrics::WorkloadLabels { answer })
                    .get()
            };
            for replica in [&a, &b] {
                assert_eq!(answers(replica, "decided"), 24);
                assert_eq!(answers(replica, "cached"), 24 * 15);
            }
            // Different workloads are sampled independently: exploration spreads them over several classes.
            assert!(explored > 0, "nothing explored");
            assert!(classes.len() >= 2, "{classes:?}");
        }
        // The per-request seed (no key) does not keep Pods together: the reason for the key.
        let c = exploring_replica(decisions::DEFAULT_EPOCH);
        let unkeyed: std::collections::BTreeSet<String> = (0..32)
            .map(|i| {
                first_class(
                    &c.score(&pb::ScoreRequest {
                        request_id: format!("uid-{i}"),
                        ..request(Some(20.0))
                    })
                    .unwrap(),
                )
            })
            .collect();
        assert!(unkeyed.len() >= 2, "{unkeyed:?}");
        // A workload known to be one Pod keeps every acceptable class; an unknown size counts as a group,
        // also when the answer comes from the cache.
        let mut single = pod_of("batch/Job/ml/one", 0);
        single.group_size = Some(1);
        assert!(c.score(&single).unwrap().accepted_classes.len() > 1);
        single.group_size = None;
        assert_eq!(c.score(&single).unwrap().accepted_classes.len(), 1);
    }

    /// Twenty fast runs on L4: the live state moves away from the pinned one.
    fn learn_fast_l4_runs(c: &Core) {
        for i in 0..20 {
            c.observe(&pb::ObserveRequest {
                job_type: "train-llama".into(),
                gpu_class: "L4-24GB".into(),
                runtime_seconds: 1_000.0 + f64::from(i),
                observation_id: format!("obs-{i}"),
                ..Default::default()
            })
            .unwrap();
        }
    }

    #[test]
    fn learning_during_an_epoch_does_not_move_a_workload() {
        let c = exploring_replica(decisions::DEFAULT_EPOCH);
        let keys: Vec<String> = (0..16)
            .map(|w| format!("kubeflow.org/MPIJob/ml/w{w}"))
            .collect();
        let answers: Vec<pb::ScoreResponse> = keys
            .iter()
            .map(|k| c.score(&pod_of(k, 0)).unwrap())
            .collect();
        assert!(answers.iter().any(|a| a.explored), "nothing explored");
        let before: Vec<String> = answers.iter().map(first_class).collect();
        let digest = c.snapshot().digest();
        learn_fast_l4_runs(&c);
        assert_ne!(c.snapshot().digest(), digest, "the live state learned");
        let after: Vec<String> = keys
            .iter()
            .map(|k| first_class(&c.score(&pod_of(k, 5)).unwrap()))
            .collect();
        assert_eq!(before, after);
        // Not the cache: a second replica that learns the same during the epoch and then sees these
        // workloads for the first time decides as the first did before learning (the pinned state). Once in
        // 600 s an epoch boundary may fall inside this block: then it is run again.
        let second_replica = || {
            let epoch = decisions::epoch_of(unix_seconds(), decisions::DEFAULT_EPOCH);
            let b = exploring_replica(decisions::DEFAULT_EPOCH);
            learn_fast_l4_runs(&b);
            let classes: Vec<String> = keys
                .iter()
                .map(|k| first_class(&b.score(&pod_of(k, 7)).unwrap()))
                .collect();
            (epoch == decisions::epoch_of(unix_seconds(), decisions::DEFAULT_EPOCH))
                .then_some(classes)
        };
        let theirs = second_replica().or_else(second_replica).unwrap();
        assert_eq!(theirs, before);
        // Explain shows the pinned decision too (same seed, same pinned state).
        let e = c.explain(&pod_of(&keys[0], 9)).unwrap();
        assert_eq!(first_class(e.answer.as_ref().unwrap()), before[0]);
        // A workload key that does not fit is refused.
        let mut r = pod_of(&"x".repeat(2000), 0);
        r.workload_key = "x".repeat(2000);
        assert_eq!(
            c.score(&r).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn bad_numbers_are_invalid_arguments() {
        let c = core();
        for bad in [f64::NAN, -1.0, f64::INFINITY] {
            let e = c.score(&request(Some(bad))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.message().contains("gpu_memory_gib"), "{}", e.message());
        }
        let mut r = request(Some(10.0));
        r.model_size_billion_params = Some(f64::NAN);
        assert_eq!(
            c.score(&r).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let mut r = request(Some(10.0));
        r.job_type = "x".repeat(1000);
        assert_eq!(
            c.score(&r).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        // Unknown enum numbers are treated as "not said", not as errors.
        let mut r = request(Some(10.0));
        r.workload_class = 99;
        r.gpu_vendor = 42;
        assert!(c.score(&r).is_ok());
    }

    #[test]
    fn observe_validates_and_learns() {
        let c = core();
        let ok = pb::ObserveRequest {
            job_type: "train-llama".into(),
            gpu_class: "H100-80GB".into(),
            runtime_seconds: 40_000.0,
            colocated_job_types: vec![],
            ..Default::default()
        };
        let r = c.observe(&ok).unwrap();
        assert_eq!(r.observations, 1);
        assert!(r.runtime_mean_seconds < 43_200.0);
        for bad in [
            pb::ObserveRequest {
                runtime_seconds: f64::NAN,
                ..ok.clone()
            },
            pb::ObserveRequest {
                runtime_seconds: 0.0,
                ..ok.clone()
            },
            pb::ObserveRequest {
                gpu_class: "T4".into(),
                ..ok.clone()
            },
            pb::ObserveRequest {
                job_type: "mystery".into(),
                ..ok.clone()
            },
        ] {
            assert_eq!(
                c.observe(&bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad:?}"
            );
        }
        assert_eq!(
            c.snapshot().runtimes.get("train-llama", "H100-80GB").count,
            1
        );
    }

    #[test]
    fn no_policy_means_unavailable() {
        let c = Core::new(
            Arc::new(PolicyStore::new(None)),
            Learned::default(),
            Arc::new(Metrics::unregistered()),
        );
        assert_eq!(
            c.score(&request(Some(1.0))).unwrap_err().code(),
            tonic::Code::Unavailable
        );
        assert_eq!(c.get_policy().unwrap_err().code(), tonic::Code::Unavailable);
    }

    #[test]
    fn get_policy_lists_catalog_tiers_and_buckets() {
        let p = core().get_policy().unwrap();
        assert!(
            p.catalog
                .iter()
                .any(|c| c.name == "H100-80GB" && c.node_label_key == "gpu.nvidia.com/class")
        );
        let bronze = p.tiers.iter().find(|t| t.name == "bronze").unwrap();
        assert_eq!(bronze.allowed_classes, ["L4-24GB"]);
        assert_eq!(bronze.objective, "cheapest");
        let names: Vec<_> = p
            .priority_buckets
            .iter()
            .map(|b| b.priority_class.as_ref().unwrap().name.as_str())
            .collect();
        assert_eq!(
            names,
            ["gpu-ultra", "gpu-high", "gpu-medium", "gpu-default"]
        );
        assert!(p.job_types.contains(&"train-llama".to_string()));
        let caps: Vec<_> = p
            .tiers
            .iter()
            .map(|t| (t.name.as_str(), t.max_priority_class.as_str()))
            .collect();
        assert_eq!(
            caps,
            [
                ("platinum", "gpu-ultra"),
                ("gold", "gpu-high"),
                ("silver", "gpu-medium"),
                ("bronze", "gpu-default")
            ]
        );
        let e = p.enforcement.unwrap();
        assert_eq!(e.mode(), pb::EnforcementMode::Warn);
        assert_eq!(e.admin_groups, ["gpu-admission:admins"]);
        assert_eq!(p.job_type_default_memory_gib["train-llama"], 40.0);
    }

    #[test]
    fn validate_policy_reports_every_problem_and_loads_nothing() {
        let c = core();
        let before = c.get_policy().unwrap().version;
        let ok = c
            .validate_policy(&pb::ValidatePolicyRequest {
                file: "cm".into(),
                text: crate::policy::DEFAULT_POLICY_YAML.into(),
            })
            .unwrap();
        assert!(ok.valid && ok.problems.is_empty() && !ok.version.is_empty());
        let bad = crate::policy::DEFAULT_POLICY_YAML
            .replace(
                "maxPriorityClass: gpu-default",
                "maxPriorityClass: gpu-gold",
            )
            .replace("  tau: 0.2 ", "  tau: 0 ");
        let r = c
            .validate_policy(&pb::ValidatePolicyRequest {
                file: "cm".into(),
                text: bad,
            })
            .unwrap();
        assert!(!r.valid);
        let fields: Vec<_> = r.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["tiers[bronze].maxPriorityClass", "learning.tau"]);
        assert!(r.problems.iter().all(|p| p.file == "cm"));
        assert_eq!(c.get_policy().unwrap().version, before);
        let huge = "x".repeat(MAX_POLICY_BYTES + 1);
        let err = c
            .validate_policy(&pb::ValidatePolicyRequest {
                file: "cm".into(),
                text: huge,
            })
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
    }
}
