//! One decision, step by step: who the job is ([`Job`]), every class's estimate and cost ([`Classes`]),
//! the ranking and whether to explore ([`Choice`]), then the answer ([`super::Decision`]).
use ndarray::Array1;

use super::estimate::{Gaussian, LogNormal};
use super::feasibility::{self, Infeasible, Needs};
use super::posterior::{self, JobRef, Posterior};
use super::{
    AlternativeKind, Candidate, Choice, Decision, Gate, JobRequest, Learned, explain, interference,
    objective, priority, sampling, value,
};
use crate::policy::{Policy, RuntimeProfile, Tier, WorkloadClass};

/// The job as the model sees it.
struct Job<'a> {
    tier_index: usize,
    tier: &'a Tier,
    workload: WorkloadClass,
    profile: RuntimeProfile,
    who: JobRef,
    memory_gib: Option<f64>,
    memory_defaulted: bool,
    gpus: u32,
    /// ln of how much faster the job's GPU count makes it than one GPU.
    size: f64,
}

impl<'a> Job<'a> {
    fn of(policy: &'a Policy, post: &Posterior, req: &JobRequest) -> Self {
        let tier_index = policy.tier_index(&req.tier).unwrap_or(policy.default_tier);
        let listed = policy
            .job_index(&req.job_type)
            .map(|j| &policy.job_types[j]);
        let workload = req
            .workload_class
            .or(listed.map(|j| j.workload_class))
            .unwrap_or(WorkloadClass::Unknown);
        let (memory_gib, memory_defaulted) =
            match (req.memory_gib, listed.and_then(|j| j.default_memory_gib)) {
                (Some(m), _) => (Some(m), false),
                (None, Some(d)) => (Some(d), true),
                (None, None) => (None, false),
            };
        let gpus = req.gpu_count.max(1);
        let who = post.who(
            &req.job_type,
            req.tenant.as_deref(),
            post.job(policy, &req.job_type, workload),
        );
        Self {
            tier_index,
            tier: &policy.tiers[tier_index],
            workload,
            profile: listed.map_or_else(|| policy.workload_profile(workload), |j| j.profile),
            who,
            memory_gib,
            memory_defaulted,
            gpus,
            size: post.log_speedup(policy, who, gpus),
        }
    }
}

/// Every class's estimate, feasibility and cost for one job.
struct Classes {
    inputs: objective::cost::Inputs,
    terms: objective::cost::Terms,
    prior_mean: Vec<f64>,
    infeasible: Vec<Vec<Infeasible>>,
    /// Per class: another reading of its estimate than the Gaussian one, when there is one.
    alternative: Vec<Option<Alternative>>,
}

/// Another reading of a class's ln-runtime estimate than the posterior's Gaussian, held `weight` likely:
/// the value of a run there counts it (and, for a class the family never ran on, so does the draw).
#[derive(Debug, Clone, Copy)]
struct Alternative {
    kind: AlternativeKind,
    weight: f64,
    /// Its ln-mean and variance against the Gaussian estimate's.
    shift: f64,
    extra: f64,
}

impl Alternative {
    /// The class's alternative reading for `job`, if any: no job type of its family has run there, so the
    /// family's offset may be wrong ([`Posterior::untried_family_class`]); or its only run there may have
    /// straggled ([`Posterior::straggled`]; the two exclude each other).
    fn of(
        policy: &Policy,
        post: &Posterior,
        job: &Job,
        c: usize,
        estimate: LogNormal,
    ) -> Option<Self> {
        if let Some(extra) = post.untried_family_class(policy, job.who, c) {
            return Some(Self {
                kind: AlternativeKind::FamilyUntried,
                weight: interference::PRIOR_WRONG,
                shift: 0.0,
                extra,
            });
        }
        // Its estimate without the run, as certain as the Gaussian one: counting the wider uncertainty of
        // the estimate without it (or drawing from it) made the decisions explore more than they saved,
        // on both truths of `loadgen learn` (docs/measurements/2026-11-26-learning-rounds.md, "sixth round").
        post.straggled(job.who, c).map(|s| Self {
            kind: AlternativeKind::Straggled,
            weight: s.weight,
            shift: s.log_mean - (estimate.log_mean + job.size),
            extra: 0.0,
        })
    }
}

impl Classes {
    /// `draws` gives one normal per class (catalog order): this decision's posterior sample.
    fn of(
        policy: &Policy,
        learned: &Learned,
        post: &Posterior,
        req: &JobRequest,
        job: &Job,
        draws: &mut sampling::Draws,
    ) -> Self {
        let needs = Needs {
            vendor: req.vendor,
            memory_gib: job.memory_gib,
            memory_defaulted: job.memory_defaulted,
            gpu_count: job.gpus,
            candidates: &req.candidate_classes,
        };
        let n = policy.classes.len();
        let neutral = interference::total_slowdown(
            policy,
            &learned.interference,
            &post.reading_name(&req.job_type, req.tenant.as_deref()),
            &req.colocated_job_types,
        );
        let contention = learned.contention_factors(policy);
        let mut mean = Array1::zeros(n);
        let mut stddev = Array1::zeros(n);
        let mut log_var = Array1::zeros(n);
        let mut sampled = Array1::zeros(n);
        let mut multiplier = Array1::zeros(n);
        let mut prior_mean = Vec::with_capacity(n);
        let mut infeasible = Vec::with_capacity(n);
        let mut alternative = Vec::with_capacity(n);
        for (i, class) in policy.classes.iter().enumerate() {
            let e = post.estimate(policy, job.who, i).shifted(-job.size);
            let g = e.seconds();
            mean[i] = g.mean;
            stddev[i] = g.stddev;
            log_var[i] = e.log_var;
            // A class the job's family never ran on: this decision's draw comes from the alternative (the
            // family's offset wrong) as often as it is held likely. (A straggled run's reading counts in
            // the value of exploring only: see [`Alternative::of`].)
            let alt = Alternative::of(policy, post, job, i, e);
            let draw_var = match alt {
                Some(a)
                    if a.kind == AlternativeKind::FamilyUntried && draws.uniform() < a.weight =>
                {
                    e.log_var + a.extra
                }
                _ => e.log_var,
            };
            alternative.push(alt);
            sampled[i] = (e.log_mean + draw_var.sqrt() * draws.normal()).exp();
            multiplier[i] = objective::multiplier(job.tier.objective, class);
            prior_mean.push(
                (posterior::prior_log_mean(&job.profile, class.relative_throughput) - job.size)
                    .exp(),
            );
            infeasible.push(feasibility::check(i, class, job.tier, &needs));
        }
        let inputs = objective::cost::Inputs {
            mean,
            stddev,
            multiplier,
            interference: Array1::from_iter(contention.iter().map(|f| f * neutral)),
            log_var,
            sampled,
            reference_runtime: job.profile.base_runtime_seconds * (-job.size).exp(),
        };
        let terms = objective::cost::compute(&inputs, &policy.learning);
        Self {
            inputs,
            terms,
            prior_mean,
            infeasible,
            alternative,
        }
    }

    /// The class the prior alone would choose among the feasible `ranked`: the lowest prior mean ×
    /// multiplier (ties as [`rank`] orders them).
    fn prior_choice(&self, ranked: &[usize], preferred: Option<usize>) -> Option<usize> {
        let by_prior = |i: usize| self.inputs.multiplier[i] * self.prior_mean[i];
        ranked.iter().copied().min_by(|&a, &b| {
            (by_prior(a).total_cmp(&by_prior(b)))
                .then_with(|| rank(&self.terms.cost, preferred, a, b))
        })
    }

    /// What choosing `c` is expected to save against the prior's choice `prior`, in runs' cost of the
    /// lowest-cost class `exploit` (posterior means × multiplier, as the gap reads them).
    fn saving_over(&self, prior: Option<usize>, exploit: Option<usize>, c: usize) -> f64 {
        let expected = |i: usize| self.inputs.multiplier[i] * self.inputs.mean[i];
        match (prior, exploit) {
            (Some(b), Some(e)) => (expected(b) - expected(c)) / expected(e),
            _ => 0.0,
        }
    }

    /// ln of how much more `a` is expected to cost than `b` (risk neutral: mean runtime × multiplier).
    fn log_gap(&self, a: usize, b: usize) -> f64 {
        let expected = |i: usize| self.inputs.multiplier[i] * self.inputs.mean[i];
        (expected(a) / expected(b)).ln()
    }

    /// Class `i` as a candidate of the answer (an infeasible class's reasons are moved out of `self`).
    fn candidate(&mut self, post: &Posterior, who: JobRef, i: usize, feasible: bool) -> Candidate {
        Candidate {
            class: i,
            infeasible: if feasible {
                Vec::new()
            } else {
                std::mem::take(&mut self.infeasible[i])
            },
            runtime: Gaussian {
                mean: self.inputs.mean[i],
                stddev: self.inputs.stddev[i],
            },
            prior_mean: self.prior_mean[i],
            observations: post.count(who, i),
            slowdown: self.inputs.interference[i],
            information_gain: self.terms.information_gain[i],
            interference_penalty: self.terms.interference_penalty[i],
            cost: if feasible { self.terms.cost[i] } else { 0.0 },
            sampled_cost: if feasible {
                self.terms.sampled_cost[i]
            } else {
                0.0
            },
        }
    }
}

/// Orders classes by `key`, then the tier's preferred class first, then catalog order.
fn rank(key: &Array1<f64>, preferred: Option<usize>, a: usize, b: usize) -> std::cmp::Ordering {
    key[a]
        .total_cmp(&key[b])
        .then_with(|| (preferred != Some(a)).cmp(&(preferred != Some(b))))
        .then(a.cmp(&b))
}

/// Ranks the feasible classes by cost, then the tier's preferred class, then catalog order; an
/// exploratory decision (allowed, the draw favours another class, exploring it pays, and, when `saved` is
/// given, the replica can afford it: [`value::affordable`]) puts the class of lowest sampled cost first.
fn choose(
    policy: &Policy,
    post: &Posterior,
    job: &Job,
    classes: &Classes,
    (allowed, saved): (bool, Option<f64>),
) -> Choice {
    let pref = job.tier.preferred;
    let terms = &classes.terms;
    let mut ranked: Vec<usize> = (0..policy.classes.len())
        .filter(|&i| classes.infeasible[i].is_empty())
        .collect();
    ranked.sort_by(|&a, &b| rank(&terms.cost, pref, a, b));
    let exploit = ranked.first().copied();
    let sampled = ranked
        .iter()
        .copied()
        .min_by(|&a, &b| rank(&terms.sampled_cost, pref, a, b));
    let mut verdict = match (exploit, sampled) {
        (Some(e), Some(s)) if s != e => Some(verdict_on(policy, post, job, classes, s, e)),
        _ => None,
    };
    let mut sampled = sampled;
    let mut by_value = None;
    // When the draw's class does not pay, a class with an alternative reading may (its value counts the
    // reading, which the draw rarely reaches): the one whose saving most exceeds its cost.
    if allowed
        && !verdict.is_some_and(|v| v.pays())
        && let Some(e) = exploit
        && let Some((c, v)) = ranked
            .iter()
            .filter(|&&c| c != e && classes.alternative[c].is_some())
            .map(|&c| (c, verdict_on(policy, post, job, classes, c, e)))
            .filter(|(_, v)| v.pays())
            .max_by(|a, b| a.1.net().total_cmp(&b.1.net()))
    {
        (sampled, verdict) = (Some(c), Some(v));
        by_value = classes.alternative[c].map(|a| a.kind);
    }
    let prior = classes.prior_choice(&ranked, pref);
    let saving = |c: usize| classes.saving_over(prior, exploit, c);
    let mut explored = allowed && verdict.is_some_and(|v| v.pays());
    let unaffordable = explored
        && saved.is_some_and(|v| sampled.is_some_and(|s| !value::affordable(v, saving(s))));
    explored &= !unaffordable;
    if explored && let Some(s) = sampled {
        ranked.retain(|&i| i != s);
        ranked.insert(0, s);
    }
    let saving = ranked.first().map_or(0.0, |&c| saving(c));
    Choice {
        ranked,
        saving,
        unaffordable,
        exploit,
        sampled,
        allowed,
        preferred: pref,
        verdict,
        explored,
        by_value,
    }
}

/// The verdict on exploring `s` over the lowest-cost `e` ([`value::of_exploring`]); for a class with an
/// alternative reading, the value is the mixture of the two readings' values, weighed by how likely each
/// is held; a first try next to neighbours that make it dearer is costed with them and left to a run
/// without them unless one run's saving covers the difference ([`value::next_to_neighbours`]).
fn verdict_on(
    policy: &Policy,
    post: &Posterior,
    job: &Job,
    classes: &Classes,
    s: usize,
    e: usize,
) -> value::Verdict {
    let runs = (0..policy.classes.len())
        .map(|c| post.count(job.who, c))
        .sum();
    // A run on s teaches its gap to e only through the part of its variance not shared with e.
    let unshared = classes.inputs.log_var[s] - post.covariance(policy, job.who, s, e);
    let horizon = value::horizon(runs) + post.family_horizon(policy, job.who);
    let of = |extra: f64| {
        value::of_exploring(
            classes.log_gap(s, e),
            unshared + extra,
            classes.inputs.log_var[s] + extra,
            policy.learning.tau,
            horizon,
        )
    };
    let narrow = of(0.0);
    let verdict = match classes.alternative[s] {
        Some(a) => {
            let other = horizon
                * value::saving(
                    classes.log_gap(s, e).max(0.0) + a.shift,
                    unshared + a.extra,
                    classes.inputs.log_var[s] + a.extra,
                    policy.learning.tau,
                );
            value::Verdict {
                value: (1.0 - a.weight) * narrow.value + a.weight * other,
                ..narrow
            }
        }
        None => narrow,
    };
    match neighbours_slow(policy, post, job, classes, s) {
        Some(slowed) => value::next_to_neighbours(verdict, slowed),
        None => verdict,
    }
}

/// For the job type's first try on `s` next to neighbours: how many times more they are expected to slow
/// it there than on the class of lowest expected cost (1 + γ·I, I the class's contention factor × the
/// neighbours' summed slowdown; mean runtime × multiplier, as the gap reads the classes). `None` for a
/// class the job type has run on, or a job without neighbours.
fn neighbours_slow(
    policy: &Policy,
    post: &Posterior,
    job: &Job,
    classes: &Classes,
    s: usize,
) -> Option<f64> {
    let i = &classes.inputs.interference;
    if post.count(job.who, s) > 0 || i.iter().all(|&x| x <= 0.0) {
        return None;
    }
    let expected = |c: usize| classes.inputs.multiplier[c] * classes.inputs.mean[c];
    let e = (0..policy.classes.len())
        .filter(|&c| classes.infeasible[c].is_empty())
        .min_by(|&a, &b| expected(a).total_cmp(&expected(b)))
        .unwrap_or(s);
    let g = policy.learning.gamma;
    Some((1.0 + g * i[s]) / (1.0 + g * i[e]))
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
    score_with(policy, learned, &learned.posterior(policy), req, gate, seed)
}

/// [`score_gated`] with `post`, the posterior of `learned` under `policy`, already at hand (what
/// [`Learned::refresh`] returns): its cache check is not repeated.
pub fn score_with(
    policy: &Policy,
    learned: &Learned,
    post: &Posterior,
    req: &JobRequest,
    gate: Gate,
    seed: u64,
) -> Decision {
    let job = Job::of(policy, post, req);
    let learning = &policy.learning;
    // This decision's draws: first the exploration gate, then one normal per class (catalog order).
    // A scorer that has never received an observation does not explore: with nobody reporting
    // runtimes, trying a class teaches nothing.
    let mut draws = sampling::Draws::new(seed);
    let u = draws.uniform();
    let (allowed, saved) = match gate {
        Gate::Window { room, saved } => (room && learning.exploration_cap > 0.0, Some(saved)),
        Gate::SeededDraw(room) => (room && u < learning.exploration_cap, None),
    };
    let allowed = allowed && learned.observations > 0;
    let mut classes = Classes::of(policy, learned, post, req, &job, &mut draws);
    let choice = choose(policy, post, &job, &classes, (allowed, saved));
    let why = explain::why(policy, post, job.who, &classes.terms, &choice);

    // Feasible classes in answer order, then the infeasible ones in catalog order.
    let mut candidates: Vec<Candidate> = Vec::with_capacity(policy.classes.len());
    for &i in &choice.ranked {
        candidates.push(classes.candidate(post, job.who, i, true));
    }
    for i in 0..policy.classes.len() {
        if !classes.infeasible[i].is_empty() {
            candidates.push(classes.candidate(post, job.who, i, false));
        }
    }
    let infeasible_reason = choice
        .ranked
        .is_empty()
        .then(|| explain::no_class_reason(policy, job.tier_index, &candidates));
    let size = priority::Size {
        gpu_count: job.gpus,
        memory_gib: job.memory_gib,
        model_size_billion_params: req.model_size_billion_params,
    };
    let priority_score = priority::score(policy, job.tier, job.workload, &size);
    Decision {
        tier: job.tier.name.clone(),
        workload_class: job.workload,
        feasible: choice.ranked.len(),
        candidates,
        priority_score,
        priority_class: priority::bucket(&policy.priority.buckets, priority_score).clone(),
        avoid_job_types: learned.avoid_list(
            policy,
            &post.reading_name(&req.job_type, req.tenant.as_deref()),
        ),
        explored: choice.explored,
        saving: choice.saving,
        infeasible_reason,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Observation, observe};
    use super::*;
    use crate::policy::embedded_default;

    /// The verdict on `train-llama`'s first try on MI300X-192GB over H100-80GB in `gold` (30 runs on the
    /// H100, none on the MI300X), next to `neighbours`, where co-location hurts three times as much on
    /// the MI300X as on the H100.
    fn first_try(neighbours: &[&str]) -> value::Verdict {
        let p = embedded_default().unwrap();
        let mut l = Learned::default();
        for _ in 0..30 {
            let run = Observation {
                job_type: "train-llama".into(),
                gpu_class: "H100-80GB".into(),
                gpu_count: 1,
                runtime_seconds: 36_000.0,
                ..Observation::default()
            };
            observe(&p, &mut l, &run);
        }
        for _ in 0..200 {
            l.contention.record("MI300X-192GB", 0.3, 0.9);
            l.contention.record("H100-80GB", 0.3, 0.3);
        }
        let req = JobRequest {
            tier: "gold".into(),
            job_type: "train-llama".into(),
            gpu_count: 1,
            memory_gib: Some(40.0),
            colocated_job_types: neighbours.iter().map(|n| n.to_string()).collect(),
            ..JobRequest::default()
        };
        let post = l.posterior(&p);
        let job = Job::of(&p, &post, &req);
        let classes = Classes::of(&p, &l, &post, &req, &job, &mut sampling::Draws::new(7));
        let (s, e) = (
            p.class_index("MI300X-192GB").unwrap(),
            p.class_index("H100-80GB").unwrap(),
        );
        assert_eq!(post.count(job.who, s), 0);
        verdict_on(&p, &post, &job, &classes, s, e)
    }

    #[test]
    fn a_try_dearer_than_the_prior_choice_waits_until_the_replica_saved_enough() {
        let p = embedded_default().unwrap();
        let mut l = Learned::default();
        close_alternative(&p, &mut l);
        let req = JobRequest {
            tier: "gold".into(),
            job_type: "train-llama".into(),
            gpu_count: 1,
            memory_gib: Some(40.0),
            ..JobRequest::default()
        };
        let decide = |saved: f64, seed: u64| {
            score_gated(&p, &l, &req, Gate::Window { room: true, saved }, seed)
        };
        let (poor, rich): (Vec<_>, Vec<_>) =
            (0..200).map(|s| (decide(0.0, s), decide(10.0, s))).unzip();
        // With savings, the same draws make tries on A100-80GB, a little dearer than the prior's H100.
        let tries: Vec<&Decision> = rich.iter().filter(|d| d.explored).collect();
        assert!(!tries.is_empty());
        for d in &tries {
            assert!(d.saving < 0.0 && d.saving > -0.2, "{}", d.saving);
        }
        // Without, none is made, the answer is the lowest-cost class, and the reason says why.
        assert!(poor.iter().all(|d| !d.explored && d.saving == 0.0));
        let declined = poor.iter().zip(&rich).find(|(_, r)| r.explored).unwrap().0;
        assert_eq!(declined.why.rule, super::super::Rule::ExplorationDeclined);
        assert!(
            declined.why.reason(&p).contains("not affordable"),
            "{}",
            declined.why.reason(&p)
        );
        // A try that saved is affordable without savings: exactly when the total stays at or above zero.
        assert!(tries.iter().all(|d| value::affordable(-d.saving, d.saving)));
    }

    /// train-llama ran 30 times on H100-80GB and twice on A100-80GB, about as fast.
    fn close_alternative(p: &Policy, l: &mut Learned) {
        for i in 0..32 {
            let run = Observation {
                job_type: "train-llama".into(),
                gpu_class: if i < 30 { "H100-80GB" } else { "A100-80GB" }.into(),
                gpu_count: 1,
                runtime_seconds: if i < 30 { 36_000.0 } else { 36_700.0 },
                ..Observation::default()
            };
            observe(p, l, &run);
        }
    }

    #[test]
    fn a_first_try_that_neighbours_make_dearer_is_left_to_a_run_without_them() {
        let alone = first_try(&[]);
        assert!(alone.pays(), "{alone:?}");
        let next_to = first_try(&["notebook", "train-bert"]);
        assert!(next_to.cost > alone.cost, "{next_to:?} {alone:?}");
        assert!(!next_to.pays(), "{next_to:?} {alone:?}");
    }
}
