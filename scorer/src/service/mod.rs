//! The scorer's application core: the shared state (policy in force, learned state, metrics) and what each
//! RPC does with it, refusing with a [`CoreError`]. `convert` maps proto <-> model; `grpc` is the tonic
//! adapter over [`Core`], and the only place a [`CoreError`] becomes a gRPC status.

mod convert;
pub mod grpc;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use gpu_admission_proto::limits::{self, MAX_POLICY_BYTES};
use gpu_admission_proto::scorer::v1 as pb;

use crate::decisions::{self, DecisionState};
use crate::metrics::Metrics;
use crate::model::{self, JobRequest, Learned};
use crate::policy::Policy;
use crate::policy::watch::PolicyStore;
use crate::state;
use convert::{explain_response, invalid, observation, policy_response, score_response};

/// Why the core refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// No valid policy is loaded yet: nothing can be answered now (gRPC `UNAVAILABLE`).
    #[error("no valid policy loaded yet")]
    NoPolicy,
    /// The request is malformed or outside the limits (gRPC `INVALID_ARGUMENT`).
    #[error("{0}")]
    InvalidArgument(String),
    /// The scorer failed on its own side (gRPC `INTERNAL`).
    #[error("{0}")]
    Internal(String),
}

/// The request in the model's terms ([`convert::job_request`]), with the namespace as the tenant whose own
/// estimates are read ([`model::tenants`]).
fn job_request(req: &pb::ScoreRequest) -> Result<JobRequest, CoreError> {
    let mut job = convert::job_request(req)?;
    job.tenant = (!req.namespace.is_empty()).then(|| req.namespace.clone());
    Ok(job)
}

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

    /// The scorer in process, without a server: one policy, no metrics registry. What the CLI, the fuzz
    /// targets, the property replays and the benchmarks score with (the same `Core` the gRPC service runs).
    pub fn in_process(policy: crate::policy::Policy, learned: Learned) -> Self {
        Self::new(
            Arc::new(PolicyStore::new(Some(policy))),
            learned,
            Arc::new(Metrics::unregistered()),
        )
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

    fn policy(&self, rpc: &'static str) -> Result<Arc<Policy>, CoreError> {
        self.policy.current().ok_or_else(|| {
            self.metrics.request(rpc, "unavailable");
            CoreError::NoPolicy
        })
    }

    /// Scores one request (everything but the gRPC envelope).
    pub fn score(&self, req: &pb::ScoreRequest) -> Result<pb::ScoreResponse, CoreError> {
        let policy = self.policy("Score")?;
        let job =
            job_request(req).inspect_err(|_| self.metrics.request("Score", "invalid_argument"))?;
        let started = Instant::now();
        let (answer, newly_explored) = {
            let mut learned = self.learned();
            let post = learned.refresh_shared(&policy);
            let window = policy.learning.exploration_window as usize;
            let key = req.workload_key.as_str();
            // A dry run changes nothing: no exploration (it would spend the budget), no kept decision.
            let unrecorded = |learned: &Learned| {
                let seed = decision_seed(&policy, learned, req);
                let gate = model::Gate::Window {
                    room: false,
                    saved: 0.0,
                };
                let d = model::score_with(&policy, learned, &post, &job, gate, seed);
                (score_response(&policy, req, d, &learned.digest()), false)
            };
            if key.is_empty() && req.dry_run {
                unrecorded(&learned)
            } else if key.is_empty() {
                let gate = learned
                    .exploration
                    .gate(policy.learning.exploration_cap, window);
                let seed = decision_seed(&policy, &learned, req);
                let d = model::score_with(&policy, &learned, &post, &job, gate, seed);
                if !d.accepted().is_empty() {
                    learned.exploration.record(d.explored, d.saving, window);
                }
                let explored = d.explored;
                (score_response(&policy, req, d, &learned.digest()), explored)
            } else {
                let mut decisions = self.decisions();
                let now = Instant::now();
                // Cached per workload AND what the Pod asks: Pods of one template share the answer; a member
                // that asks something else (another vendor, more memory) is decided for itself, from the
                // workload's seed and pinned state, so it lands on the same class whenever that class fits.
                let cache_key = format!(
                    "{key}\n{}",
                    gpu_admission_proto::workload::asked_digest(req)
                );
                if let Some(cached) = decisions.cached(&cache_key, &policy.version, now) {
                    let mut answer = cached.clone();
                    answer.request_id = req.request_id.clone();
                    one_class_for_a_group(req, &mut answer);
                    self.metrics.workload_answer("cached");
                    (answer, false)
                } else if req.dry_run {
                    let (mut answer, explored) = unrecorded(&learned);
                    one_class_for_a_group(req, &mut answer);
                    (answer, explored)
                } else {
                    let (d, digest) =
                        workload_decision(&policy, &mut decisions, &learned, &job, key);
                    if !d.accepted().is_empty() {
                        learned.exploration.record(d.explored, d.saving, window);
                    }
                    let explored = d.explored;
                    let mut answer = score_response(&policy, req, d, &digest);
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

    pub fn observe(&self, req: &pb::ObserveRequest) -> Result<pb::ObserveResponse, CoreError> {
        let policy = self.policy("Observe")?;
        let mut obs = observation(&policy, req)
            .inspect_err(|_| self.metrics.request("Observe", "invalid_argument"))?;
        for (field, value) in [("namespace", &req.namespace), ("tier", &req.tier)] {
            if value.len() > limits::MAX_NAME_BYTES {
                self.metrics.request("Observe", "invalid_argument");
                return Err(CoreError::InvalidArgument(format!(
                    "{field} is longer than {} bytes",
                    limits::MAX_NAME_BYTES
                )));
            }
        }
        obs.tenant = (!req.namespace.is_empty()).then(|| req.namespace.clone());
        obs.gpu_shape = match pb::GpuShape::try_from(req.gpu_shape) {
            Ok(pb::GpuShape::MigSlice) => model::learn::GpuShape::MigSlice,
            Ok(pb::GpuShape::Shared) => model::learn::GpuShape::Shared,
            _ => model::learn::GpuShape::Whole,
        };
        let (outcome, summary) = {
            let mut learned = self.learned_for_write();
            let outcome = model::observe(&policy, &mut learned, &obs);
            // Every Score answers with the digest: made here, once per change, not on the admission path.
            learned.digest();
            let summary =
                (!outcome.duplicate).then(|| model::summary(&policy, &learned, &obs.job_type));
            (outcome, summary)
        };
        if let Some(summary) = &summary {
            self.metrics.job_type_learned(&obs.job_type, summary);
        }
        if let Some(evicted) = &outcome.evicted {
            let classes: Vec<String> = policy.classes.iter().map(|c| c.name.clone()).collect();
            self.metrics.job_type_evicted(evicted, &classes);
            tracing::info!(evicted = %evicted, learned = %obs.job_type,
                "unlisted job type forgotten: the budget of unlisted job types is full (least recently seen first)");
        }
        self.metrics.request(
            "Observe",
            if outcome.duplicate {
                "duplicate"
            } else if outcome.partial {
                "partial_gpu"
            } else if outcome.implausible {
                "implausible"
            } else {
                "ok"
            },
        );
        Ok(pb::ObserveResponse {
            runtime_mean_seconds: outcome.estimate.mean,
            runtime_stddev_seconds: outcome.estimate.stddev,
            observations: outcome.observations,
            duplicate: outcome.duplicate,
            implausible: outcome.implausible,
        })
    }

    /// What Score would answer, and why, without recording anything.
    pub fn explain(&self, req: &pb::ScoreRequest) -> Result<pb::ExplainResponse, CoreError> {
        let policy = self.policy("Explain")?;
        let job = job_request(req)
            .inspect_err(|_| self.metrics.request("Explain", "invalid_argument"))?;
        let mut learned = self.learned();
        // Only the caches: nothing learned, no budget spent.
        learned.refresh(&policy);
        let window = policy.learning.exploration_window as usize;
        let (decision, decided_with) = if req.workload_key.is_empty() {
            let gate = learned
                .exploration
                .gate(policy.learning.exploration_cap, window);
            let seed = decision_seed(&policy, &learned, req);
            let d = model::score_gated(&policy, &learned, &job, gate, seed);
            (d, learned.digest())
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
            &decided_with,
        ))
    }

    /// The learned state (without this replica's exploration budget), for another replica.
    pub fn export_state(&self) -> Result<pb::LearnedState, CoreError> {
        let learned = self.learned().clone();
        let snapshot = state::encode_shared(&learned).map_err(|e| {
            self.metrics.request("ExportState", "internal");
            CoreError::Internal(format!("cannot encode the learned state: {e}"))
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
    ) -> Result<pb::ImportStateResponse, CoreError> {
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

    pub fn get_policy(&self) -> Result<pb::GetPolicyResponse, CoreError> {
        let policy = self.policy("GetPolicy")?;
        self.metrics.request("GetPolicy", "ok");
        Ok(policy_response(&policy))
    }

    /// Checks a policy text with exactly the validation a reload applies; loads nothing.
    pub fn validate_policy(
        &self,
        req: &pb::ValidatePolicyRequest,
    ) -> Result<pb::ValidatePolicyResponse, CoreError> {
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

pub use gpu_admission_policy::wire::validation as validate_policy_text;

/// A workload's decision: read from the epoch's pinned state, seeded by the workload key, gated by its
/// seeded draw alone (not by this replica's exploration window; see [`crate::decisions`]); and the digest of
/// that state.
fn workload_decision(
    policy: &Policy,
    decisions: &mut DecisionState,
    live: &Learned,
    job: &JobRequest,
    key: &str,
) -> (model::Decision, Arc<str>) {
    let state = decisions.decision_state(live, policy, unix_seconds());
    let digest = state.digest();
    let seed = decisions::workload_seed(policy, &digest, key);
    (model::score(policy, state, job, true, seed), digest)
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

/// The seed of a decision's posterior sample: the request's content, which observations were learned
/// (their count and the fingerprint of their ids) and the policy's `learning.seed`, so that replicas that
/// learned the same observations answer a request identically. Not the digest of what was learned from
/// them: a change to what a run teaches (a statistic added, one kept otherwise) would otherwise redraw
/// every later decision, and its effect on decisions could not be told from drawing again. The request
/// is encoded into a buffer kept per thread (the same bytes as `encode_to_vec`, without an allocation a call).
fn decision_seed(policy: &Policy, learned: &Learned, req: &pb::ScoreRequest) -> u64 {
    use prost::Message;
    use sha2::{Digest, Sha256};
    thread_local! {
        static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut h = Sha256::new();
    h.update(policy.learning.seed.to_le_bytes());
    h.update(learned.observations.to_le_bytes());
    h.update(learned.observed.fingerprint().to_le_bytes());
    ENCODED.with_borrow_mut(|buf| {
        buf.clear();
        req.encode(buf).expect("a Vec grows as needed");
        h.update(buf.as_slice());
        // A rare huge request does not keep its buffer for good.
        if buf.capacity() > 64 * 1024 {
            *buf = Vec::new();
        }
    });
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}
