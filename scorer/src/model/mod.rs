//! The scoring model: pure functions of (policy, learned state, request, seed), no I/O.
//!
//! [`score`] checks feasibility, estimates each class's runtime ([`posterior`]: a hierarchical model
//! that shares what was learned across job types and classes), weighs it by the tier's objective and
//! the cost function ([`objective`]), explores by Thompson sampling within the exploration budget
//! ([`exploration`], [`sampling`]), and computes the job's priority ([`priority`]) and avoid-list
//! ([`interference`]). [`observe`] feeds an observed runtime back into [`Learned`], once per
//! observation id ([`observed`]).
//!
//! Exploration: every decision draws, from a seed derived from the request and the learned state, one
//! posterior sample of each class's runtime. The class whose *sampled* cost is lowest is the one
//! Thompson sampling would try; it is chosen over the lowest expected cost only when the decision's
//! seeded draw is below `explorationCap` *and* the window's budget allows it (and once at least one
//! observation arrived: without an observer, exploring teaches nothing). So exploration goes where
//! a class may plausibly be better (its chance of being tried is its posterior chance of being the best),
//! its share stays ≤ the cap, and the same request on the same state gets the same answer.
pub mod estimate;
pub mod exploration;
pub mod feasibility;
pub mod interference;
pub mod learn;
pub mod objective;
pub mod observed;
pub mod posterior;
pub mod priority;
pub mod sampling;
pub mod unlisted;

use std::sync::Arc;

use ndarray::Array1;
use serde::{Deserialize, Serialize};

use crate::policy::{Bucket, Policy, Vendor, WorkloadClass};
use estimate::{Gaussian, RuntimeTable};
use exploration::ExplorationWindow;
use feasibility::{Infeasible, Needs};
use interference::InterferenceTable;
pub use learn::{JobTypeSummary, Observation, ObserveOutcome, learn, observe, summary};
use posterior::Posterior;

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
    /// This replica's recent decisions (not shared between replicas: each spends its own budget).
    pub exploration: ExplorationWindow,
    /// Ids of the observations learned.
    #[serde(default)]
    pub observed: observed::ObservedIds,
    /// Distinct observations learned (also those whose ids were forgotten).
    #[serde(default)]
    pub observations: u64,
    /// Job types the policy does not list that were learned (under a budget).
    #[serde(default)]
    pub unlisted: unlisted::UnlistedJobTypes,
    /// The posterior of the current policy, rebuilt after every change (never serialised).
    #[serde(skip)]
    pub posterior: PosteriorCache,
}

/// A cached [`Posterior`] and state digest; they do not take part in comparisons of learned states.
#[derive(Clone, Default)]
pub struct PosteriorCache(Option<Arc<Posterior>>, Option<Arc<str>>);

impl PartialEq for PosteriorCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for PosteriorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "PosteriorCache(cached)"
        } else {
            "PosteriorCache(empty)"
        })
    }
}

impl Learned {
    /// The posterior for `policy`: the cached one when it was computed for this policy.
    pub fn posterior(&self, policy: &Policy) -> Arc<Posterior> {
        match &self.posterior.0 {
            Some(p) if p.fingerprint == posterior::fingerprint(policy) => p.clone(),
            _ => Arc::new(Posterior::compute(policy, &self.runtimes, &self.unlisted)),
        }
    }

    /// Makes sure the cached posterior is the one of `policy` (after a change or a policy reload).
    pub fn refresh(&mut self, policy: &Policy) {
        let fresh = self.posterior(policy);
        let digest = Some(self.digest());
        self.posterior = PosteriorCache(Some(fresh), digest);
    }

    /// Drops the caches (after the learned statistics changed).
    pub fn invalidate(&mut self) {
        self.posterior = PosteriorCache(None, None);
    }

    /// Digest of what was learned (statistics, observation ids; not this replica's exploration
    /// window): equal digests mean equal answers under the same policy and budget.
    pub fn digest(&self) -> Arc<str> {
        if let Some(d) = &self.posterior.1 {
            return d.clone();
        }
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let tables = serde_json::to_vec(&(&self.runtimes, &self.interference, &self.unlisted))
            .expect("plain maps of integers serialise");
        h.update(&tables);
        h.update(self.observed.fingerprint().to_le_bytes());
        h.update(self.observations.to_le_bytes());
        hex::encode(&h.finalize()[..16]).into()
    }
}

/// How the scorer weighed one class.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index into `policy.classes`.
    pub class: usize,
    pub infeasible: Vec<Infeasible>,
    pub runtime: Gaussian,
    /// The runtime the catalog alone predicts (seconds).
    pub prior_mean: f64,
    /// Observations of this job type on this class.
    pub observations: u64,
    /// Expected relative slowdown from the co-located job types.
    pub slowdown: f64,
    pub information_gain: f64,
    pub interference_penalty: f64,
    /// 0 when infeasible.
    pub cost: f64,
    /// Cost of this decision's posterior draw (what exploration ranks on); 0 when infeasible.
    pub sampled_cost: f64,
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
    /// Which rule picked the answer.
    pub why: Why,
}

/// The rule that picked a decision's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    LowestCost,
    Exploration,
    /// The posterior draw favoured another class, but the decision's draw or the budget did not allow
    /// exploring.
    ExplorationDeclined,
    TiePreferredClass,
    TieCatalogOrder,
    SingleFeasibleClass,
    NoFeasibleClass,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::LowestCost => "lowest-cost",
            Rule::Exploration => "exploration",
            Rule::ExplorationDeclined => "exploration-declined",
            Rule::TiePreferredClass => "tie-preferred-class",
            Rule::TieCatalogOrder => "tie-catalog-order",
            Rule::SingleFeasibleClass => "single-feasible-class",
            Rule::NoFeasibleClass => "no-feasible-class",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Why {
    pub rule: Rule,
    /// The rule in one sentence, with the numbers.
    pub reason: String,
    /// The class of lowest cost, and the class of lowest sampled cost (indices into `policy.classes`).
    pub exploit: Option<usize>,
    pub sampled: Option<usize>,
    /// Whether this decision's draw and the budget allowed exploring.
    pub exploration_allowed: bool,
}

impl Decision {
    pub fn accepted(&self) -> &[Candidate] {
        &self.candidates[..self.feasible]
    }
}

/// The current runtime estimate of a known or unknown `job_type` on `gpus` GPUs of class `class`.
pub fn runtime_estimate(
    policy: &Policy,
    learned: &Learned,
    job_type: &str,
    gpus: u32,
    class: usize,
) -> Gaussian {
    let workload = policy
        .job_index(job_type)
        .map_or(WorkloadClass::Unknown, |j| {
            policy.job_types[j].workload_class
        });
    let size = estimate::size_log_speedup(gpus, policy.learning.gpu_scaling_exponent);
    let post = learned.posterior(policy);
    post.estimate(policy, post.job(policy, job_type, workload), class)
        .shifted(-size)
        .seconds()
}

/// What lets a decision explore, besides its posterior draw favouring another class than the lowest cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// This replica's exploration window (`true`: it has room for one more exploratory decision): the
    /// decision explores whenever its Thompson draw says so, so a job type explores as often as another
    /// class is plausibly its best, and the operator's cap bounds the share (unkeyed decisions).
    Window(bool),
    /// Also the decision's own seeded draw below `explorationCap` (the same on every replica: keyed
    /// decisions, with `true`, see [`crate::decisions`]).
    SeededDraw(bool),
}

/// Scores `req` with [`Gate::SeededDraw`]`(budget_allows)`; see [`score_gated`].
pub fn score(
    policy: &Policy,
    learned: &Learned,
    req: &JobRequest,
    budget_allows: bool,
    seed: u64,
) -> Decision {
    score_gated(policy, learned, req, Gate::SeededDraw(budget_allows), seed)
}

/// Scores `req`. `gate` says what allows exploring; `seed` drives this decision's draws (the caller derives
/// it from the request and the learned state). The caller records whether the decision explored.
pub fn score_gated(
    policy: &Policy,
    learned: &Learned,
    req: &JobRequest,
    gate: Gate,
    seed: u64,
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
    let post = learned.posterior(policy);
    let who = post.job(policy, &req.job_type, workload);
    let (memory_gib, memory_defaulted) =
        match (req.memory_gib, job.and_then(|j| j.default_memory_gib)) {
            (Some(m), _) => (Some(m), false),
            (None, Some(d)) => (Some(d), true),
            (None, None) => (None, false),
        };
    let gpus = req.gpu_count.max(1);
    let needs = Needs {
        vendor: req.vendor,
        memory_gib,
        memory_defaulted,
        gpu_count: gpus,
        candidates: &req.candidate_classes,
    };
    let learning = &policy.learning;
    let size = estimate::size_log_speedup(gpus, learning.gpu_scaling_exponent);

    // This decision's draws: first the exploration gate, then one normal per class (catalog order).
    // A scorer that has never received an observation does not explore: with nobody reporting
    // runtimes, trying a class teaches nothing.
    let mut draws = sampling::Draws::new(seed);
    let u = draws.uniform();
    let exploration_allowed = learned.observations > 0
        && match gate {
            Gate::Window(room) => room && learning.exploration_cap > 0.0,
            Gate::SeededDraw(room) => room && u < learning.exploration_cap,
        };

    // Per-class inputs.
    let n = policy.classes.len();
    let slowdown = interference::total_slowdown(
        policy,
        &learned.interference,
        &req.job_type,
        &req.colocated_job_types,
    );
    let mut mean = Array1::zeros(n);
    let mut stddev = Array1::zeros(n);
    let mut log_var = Array1::zeros(n);
    let mut sampled = Array1::zeros(n);
    let mut multiplier = Array1::zeros(n);
    let mut prior_mean = Vec::with_capacity(n);
    let mut infeasible = Vec::with_capacity(n);
    for (i, class) in policy.classes.iter().enumerate() {
        let e = post.estimate(policy, who, i).shifted(-size);
        let g = e.seconds();
        mean[i] = g.mean;
        stddev[i] = g.stddev;
        log_var[i] = e.log_var;
        sampled[i] = (e.log_mean + e.log_var.sqrt() * draws.normal()).exp();
        multiplier[i] = objective::multiplier(tier.objective, class);
        prior_mean
            .push((posterior::prior_log_mean(&profile, class.relative_throughput) - size).exp());
        infeasible.push(feasibility::check(i, class, tier, &needs));
    }
    let inputs = objective::cost::Inputs {
        mean,
        stddev,
        multiplier,
        interference: Array1::from_elem(n, slowdown),
        log_var,
        sampled,
        reference_runtime: profile.base_runtime_seconds * (-size).exp(),
    };
    let terms = objective::cost::compute(&inputs, learning);

    // Rank the feasible classes: by cost, then the tier's preferred class, then catalog order; an
    // exploratory decision puts the class of lowest sampled cost first.
    let pref = tier.preferred;
    let mut feasible: Vec<usize> = (0..n).filter(|&i| infeasible[i].is_empty()).collect();
    feasible.sort_by(|&a, &b| rank(&terms.cost, pref, a, b));
    let exploit = feasible.first().copied();
    let sampled_best = feasible
        .iter()
        .copied()
        .min_by(|&a, &b| rank(&terms.sampled_cost, pref, a, b));
    let explored = exploration_allowed && sampled_best != exploit;
    if explored && let Some(s) = sampled_best {
        feasible.retain(|&i| i != s);
        feasible.insert(0, s);
    }
    let mut why = explain_rule(
        policy,
        &feasible,
        &terms,
        pref,
        exploit,
        sampled_best,
        explored,
        exploration_allowed,
    );
    if let (true, Some(s)) = (explored, sampled_best) {
        why.reason.push_str(&format!(
            "; {} run(s) of this job type on {} so far, its runtime known to ±{:.0} %{}",
            post.count(who, s),
            policy.classes[s].name,
            100.0 * inputs.log_var[s].sqrt(),
            if post.contradicted(who) {
                "; the job type's runs contradict its prior, so it is learned under a wider one"
            } else {
                ""
            }
        ));
    }

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
        prior_mean: prior_mean[i],
        observations: post.count(who, i),
        slowdown,
        information_gain: terms.information_gain[i],
        interference_penalty: terms.interference_penalty[i],
        cost: if feasible { terms.cost[i] } else { 0.0 },
        sampled_cost: if feasible { terms.sampled_cost[i] } else { 0.0 },
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
        gpu_count: gpus,
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
        avoid_job_types: interference::avoid_list(
            policy,
            &learned.interference,
            learned.unlisted.seen.keys(),
            &req.job_type,
        ),
        explored,
        infeasible_reason,
        why,
    }
}

/// Names the rule that picked the first of `ranked` (already in answer order).
#[allow(clippy::too_many_arguments)]
fn explain_rule(
    policy: &Policy,
    ranked: &[usize],
    terms: &objective::cost::Terms,
    pref: Option<usize>,
    exploit: Option<usize>,
    sampled: Option<usize>,
    explored: bool,
    exploration_allowed: bool,
) -> Why {
    let name = |i: usize| policy.classes[i].name.as_str();
    let (rule, reason) = match (exploit, sampled) {
        (Some(e), Some(s)) if explored => (
            Rule::Exploration,
            format!(
                "exploring {}: its posterior draw costs {:.4}, below {:.4} for {}; its expected cost is {:.4} against {:.4}",
                name(s),
                terms.sampled_cost[s],
                terms.sampled_cost[e],
                name(e),
                terms.cost[s],
                terms.cost[e]
            ),
        ),
        (Some(e), _) if ranked.len() == 1 => (
            Rule::SingleFeasibleClass,
            format!("{} is the only feasible class", name(e)),
        ),
        (Some(e), Some(s)) if s != e => (
            Rule::ExplorationDeclined,
            format!(
                "{} has the lowest cost {:.4}; the posterior draw favoured {} but {}",
                name(e),
                terms.cost[e],
                name(s),
                if exploration_allowed {
                    "exploring was not needed"
                } else {
                    "this decision may not explore (seeded draw above the cap, the window's budget spent, or nothing observed yet)"
                }
            ),
        ),
        (Some(e), _) => {
            let second = ranked[1];
            if terms.cost[second] == terms.cost[e] {
                if pref == Some(e) {
                    (
                        Rule::TiePreferredClass,
                        format!(
                            "{} ties with {} at cost {:.4} and is the tier's preferred class",
                            name(e),
                            name(second),
                            terms.cost[e]
                        ),
                    )
                } else {
                    (
                        Rule::TieCatalogOrder,
                        format!(
                            "{} ties with {} at cost {:.4} and comes first in the catalog",
                            name(e),
                            name(second),
                            terms.cost[e]
                        ),
                    )
                }
            } else {
                (
                    Rule::LowestCost,
                    format!(
                        "{} has the lowest cost {:.4} (next: {} at {:.4})",
                        name(e),
                        terms.cost[e],
                        name(second),
                        terms.cost[second]
                    ),
                )
            }
        }
        (None, _) => (Rule::NoFeasibleClass, "no class is feasible".to_string()),
    };
    Why {
        rule,
        reason,
        exploit,
        sampled,
        exploration_allowed,
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

#[cfg(test)]
mod tests;
