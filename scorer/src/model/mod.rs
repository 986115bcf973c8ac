//! The scoring model: pure functions of (policy, learned state, request), no I/O.
//!
//! [`score`] checks feasibility, estimates each class's runtime ([`estimate`]), weighs it by the tier's
//! objective and the cost function ([`objective`]), lets the information gain change the winner only
//! within the exploration budget ([`exploration`]), and computes the job's priority ([`priority`]) and
//! avoid-list ([`interference`]). [`observe`] feeds an observed runtime back into [`Learned`].
pub mod estimate;
pub mod exploration;
pub mod feasibility;
pub mod interference;
pub mod objective;
pub mod priority;

use ndarray::Array1;
use serde::{Deserialize, Serialize};

use crate::policy::{Bucket, Policy, RuntimeProfile, Vendor, WorkloadClass};
use estimate::{Gaussian, RuntimeTable};
use exploration::ExplorationWindow;
use feasibility::{Infeasible, Needs};
use interference::InterferenceTable;

/// A job to score, in the model's terms (already validated: numbers are finite and non-negative).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRequest {
    pub tier: String,
    pub job_type: String,
    /// `None` = not said: the job type's class, else unknown.
    pub workload_class: Option<WorkloadClass>,
    pub gpu_count: u32,
    /// `None` = any vendor.
    pub vendor: Option<Vendor>,
    pub memory_gib: Option<f64>,
    pub model_size_billion_params: Option<f64>,
    pub candidate_classes: Vec<String>,
    pub colocated_job_types: Vec<String>,
}

/// Everything the scorer has learned; snapshotted by [`crate::state`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    pub runtimes: RuntimeTable,
    pub interference: InterferenceTable,
    pub exploration: ExplorationWindow,
}

/// How the scorer weighed one class.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index into `policy.classes`.
    pub class: usize,
    pub infeasible: Vec<Infeasible>,
    pub runtime: Gaussian,
    pub information_gain: f64,
    pub interference_penalty: f64,
    /// 0 when infeasible.
    pub cost: f64,
}

impl Candidate {
    pub fn feasible(&self) -> bool {
        self.infeasible.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The tier actually applied (the policy's default when the request's is empty or unknown).
    pub tier: String,
    pub workload_class: WorkloadClass,
    /// Feasible classes first (best first), then infeasible ones in catalog order.
    pub candidates: Vec<Candidate>,
    /// How many leading `candidates` are feasible.
    pub feasible: usize,
    pub priority_score: f64,
    pub priority_class: Bucket,
    pub avoid_job_types: Vec<String>,
    pub explored: bool,
    /// Set when no class is feasible.
    pub infeasible_reason: Option<String>,
}

impl Decision {
    pub fn accepted(&self) -> &[Candidate] {
        &self.candidates[..self.feasible]
    }
}

/// The runtime profile of a job type (its own, else its workload class's).
fn profile(policy: &Policy, job_type: &str, workload: WorkloadClass) -> RuntimeProfile {
    match policy.job_index(job_type) {
        Some(j) => policy.job_types[j].profile,
        None => policy.workload_profile(workload),
    }
}

/// The current runtime estimate of `job_type` on class `class`.
pub fn runtime_estimate(
    policy: &Policy,
    learned: &Learned,
    job_type: &str,
    class: usize,
) -> Gaussian {
    let workload = policy
        .job_index(job_type)
        .map_or(WorkloadClass::Unknown, |j| {
            policy.job_types[j].workload_class
        });
    let prior = estimate::prior(&profile(policy, job_type, workload), &policy.classes[class]);
    let obs = learned.runtimes.get(job_type, &policy.classes[class].name);
    estimate::posterior(prior, obs, policy.learning.prior_strength)
}

/// Scores `req`. `explore_allowed` comes from the exploration budget (see [`exploration`]); the
/// caller records whether the decision explored.
pub fn score(
    policy: &Policy,
    learned: &Learned,
    req: &JobRequest,
    explore_allowed: bool,
) -> Decision {
    let tier_index = policy.tier_index(&req.tier).unwrap_or(policy.default_tier);
    let tier = &policy.tiers[tier_index];
    let job = policy
        .job_index(&req.job_type)
        .map(|j| &policy.job_types[j]);
    let workload = req
        .workload_class
        .or(job.map(|j| j.workload_class))
        .unwrap_or(WorkloadClass::Unknown);
    let profile = job.map_or_else(|| policy.workload_profile(workload), |j| j.profile);
    let (memory_gib, memory_defaulted) =
        match (req.memory_gib, job.and_then(|j| j.default_memory_gib)) {
            (Some(m), _) => (Some(m), false),
            (None, Some(d)) => (Some(d), true),
            (None, None) => (None, false),
        };
    let needs = Needs {
        vendor: req.vendor,
        memory_gib,
        memory_defaulted,
        gpu_count: req.gpu_count.max(1),
        candidates: &req.candidate_classes,
    };

    // Per-class inputs.
    let n = policy.classes.len();
    let observed = if job.is_some() {
        learned.runtimes.for_job(&req.job_type)
    } else {
        None
    };
    let strength = policy.learning.prior_strength;
    let slowdown = interference::total_slowdown(
        policy,
        &learned.interference,
        &req.job_type,
        &req.colocated_job_types,
    );
    let mut mean = Array1::zeros(n);
    let mut stddev = Array1::zeros(n);
    let mut multiplier = Array1::zeros(n);
    let mut infeasible = Vec::with_capacity(n);
    for (i, class) in policy.classes.iter().enumerate() {
        let obs = observed
            .and_then(|m| m.get(&class.name))
            .copied()
            .unwrap_or_default();
        let g = estimate::posterior(estimate::prior(&profile, class), obs, strength);
        mean[i] = g.mean;
        stddev[i] = g.stddev;
        multiplier[i] = objective::multiplier(tier.objective, class);
        infeasible.push(feasibility::check(i, class, tier, &needs));
    }
    let inputs = objective::cost::Inputs {
        mean,
        stddev,
        multiplier,
        interference: Array1::from_elem(n, slowdown),
        reference_runtime: profile.base_runtime_seconds,
    };
    let terms = objective::cost::compute(&inputs, &policy.learning);

    // Rank the feasible classes: by cost, then the tier's preferred class, then catalog order.
    let pref = tier.preferred;
    let mut feasible: Vec<usize> = (0..n).filter(|&i| infeasible[i].is_empty()).collect();
    let best_exploit = feasible
        .iter()
        .copied()
        .min_by(|&a, &b| rank(&terms.exploit_cost, pref, a, b));
    let best_explore = feasible
        .iter()
        .copied()
        .min_by(|&a, &b| rank(&terms.cost, pref, a, b));
    let explored = explore_allowed && best_explore != best_exploit;
    // Without the budget to explore (or when it changes nothing), rank as pure exploitation.
    let key = if explored {
        &terms.cost
    } else {
        &terms.exploit_cost
    };
    feasible.sort_by(|&a, &b| rank(key, pref, a, b));

    let candidate = |i: usize, feasible: bool| Candidate {
        class: i,
        infeasible: if feasible {
            Vec::new()
        } else {
            infeasible[i].clone()
        },
        runtime: Gaussian {
            mean: inputs.mean[i],
            stddev: inputs.stddev[i],
        },
        information_gain: terms.information_gain[i],
        interference_penalty: terms.interference_penalty[i],
        cost: if feasible { terms.cost[i] } else { 0.0 },
    };
    let mut candidates: Vec<Candidate> = feasible.iter().map(|&i| candidate(i, true)).collect();
    candidates.extend(
        (0..n)
            .filter(|&i| !infeasible[i].is_empty())
            .map(|i| candidate(i, false)),
    );

    let infeasible_reason = feasible
        .is_empty()
        .then(|| no_class_reason(policy, tier_index, &candidates));
    let size = priority::Size {
        gpu_count: req.gpu_count.max(1),
        memory_gib,
        model_size_billion_params: req.model_size_billion_params,
    };
    let priority_score = priority::score(policy, tier, workload, &size);
    Decision {
        tier: tier.name.clone(),
        workload_class: workload,
        feasible: feasible.len(),
        candidates,
        priority_score,
        priority_class: priority::bucket(&policy.priority.buckets, priority_score).clone(),
        avoid_job_types: interference::avoid_list(policy, &learned.interference, &req.job_type),
        explored,
        infeasible_reason,
    }
}

/// Orders classes by `key`, then the tier's preferred class first, then catalog order.
fn rank(key: &Array1<f64>, preferred: Option<usize>, a: usize, b: usize) -> std::cmp::Ordering {
    key[a]
        .total_cmp(&key[b])
        .then_with(|| (preferred != Some(a)).cmp(&(preferred != Some(b))))
        .then(a.cmp(&b))
}

/// "no feasible GPU class for tier bronze: L4-24GB: needs 70 GiB …; 6 other classes not allowed for tier bronze".
fn no_class_reason(policy: &Policy, tier: usize, candidates: &[Candidate]) -> String {
    let tier = &policy.tiers[tier];
    let mut parts = Vec::new();
    let mut not_allowed = 0;
    for c in candidates {
        if tier.allowed[c.class] {
            parts.push(format!(
                "{}: {}",
                policy.classes[c.class].name,
                feasibility::describe(&c.infeasible)
            ));
        } else {
            not_allowed += 1;
        }
    }
    if not_allowed > 0 {
        parts.push(format!(
            "{not_allowed} other class{} not allowed for tier {}",
            if not_allowed == 1 { " is" } else { "es are" },
            tier.name
        ));
    }
    format!(
        "no feasible GPU class for tier {}: {}",
        tier.name,
        parts.join("; ")
    )
}

/// An observed runtime, validated by the caller (known job type and class, finite runtime > 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub job_type: String,
    pub gpu_class: String,
    pub runtime_seconds: f64,
    pub colocated_job_types: Vec<String>,
}

/// Learns from `obs`: the slowdown against the current estimate updates the interference with each
/// co-located job type, and the runtime with that slowdown taken out updates the runtime estimate.
/// Returns the new estimate and its number of observations.
pub fn observe(policy: &Policy, learned: &mut Learned, obs: &Observation) -> (Gaussian, u64) {
    let class = policy
        .class_index(&obs.gpu_class)
        .expect("validated by the caller");
    let mut clean = obs.runtime_seconds;
    if !obs.colocated_job_types.is_empty() {
        let expected = runtime_estimate(policy, learned, &obs.job_type, class).mean;
        let slowdown = (obs.runtime_seconds / expected - 1.0).max(0.0);
        let mut seen: Vec<&str> = Vec::new();
        for other in &obs.colocated_job_types {
            if !seen.contains(&other.as_str()) && policy.job_index(other).is_some() {
                seen.push(other);
                learned.interference.record(&obs.job_type, other, slowdown);
            }
        }
        let total = interference::total_slowdown(
            policy,
            &learned.interference,
            &obs.job_type,
            &obs.colocated_job_types,
        );
        clean /= 1.0 + total;
    }
    learned
        .runtimes
        .record(&obs.job_type, &obs.gpu_class, clean);
    let estimate = runtime_estimate(policy, learned, &obs.job_type, class);
    (
        estimate,
        learned.runtimes.get(&obs.job_type, &obs.gpu_class).count,
    )
}

#[cfg(test)]
mod tests;
