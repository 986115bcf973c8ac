//! Learning from one observed run ([`observe`]), once per observation id ([`super::observed`]).
//!
//! The run's log runtime is brought to one GPU (see [`super::estimate`]); when it ran next to other job
//! types, its excess over the current interference-free estimate (winsorised around the run's prediction,
//! its neighbours' slowdowns included: a straggling run is not a harmful neighbour, and a harmful
//! neighbour is not a straggler) is the observed slowdown: it teaches the class's contention factor
//! ([`super::contention`]) and is shared among the co-located job types (each pair gets the excess less
//! what the others' current slowdowns explain, weighing τ²/(τ² + v + Σ v_j) of a run, v the variance of
//! the estimate the excess was measured against, v_j those of the other neighbours' slowdowns: see
//! [`super::interference`]); the runtime with the estimated slowdown taken out updates the runtime
//! statistics. A job type the policy does not list is learned too, under the budget of
//! [`super::unlisted`].
use super::estimate::{self, Gaussian};
use super::tables::Touched;
use super::{Learned, interference, tenants};
use crate::policy::{Policy, WorkloadClass};

/// A co-located run's excess is winsorised at this many standard deviations (see [`learn_colocated`]).
pub const CLIP: f64 = 2.5;
/// A run is implausibly fast when it is more than this many times faster than its estimate ...
pub const IMPLAUSIBLE_FACTOR: f64 = 10.0;
/// ... and beyond this many standard deviations of it (the estimate's and the run-to-run noise).
pub const IMPLAUSIBLE_SDS: f64 = 3.0;

/// What of a GPU a run had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuShape {
    /// Whole devices of the class (also: not said).
    #[default]
    Whole,
    /// MIG slices of a device.
    MigSlice,
    /// A time-sliced or memory/core share of a device.
    Shared,
}

/// An observed runtime, validated by the caller (known class, finite runtime > 0).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// Unique id (the Pod UID): an id already learned is not learned again.
    pub id: Option<String>,
    pub job_type: String,
    /// The job's workload class when said (used for job types the policy does not list).
    pub workload_class: Option<WorkloadClass>,
    pub gpu_class: String,
    /// GPUs the job ran on (≥ 1).
    pub gpu_count: u32,
    pub runtime_seconds: f64,
    pub colocated_job_types: Vec<String>,
    /// The namespace that ran it (the tenant, [`super::tenants`]); `None` = not said.
    pub tenant: Option<String>,
    /// Runs on a part of a device teach nothing of the class's runtime (their id is still recorded).
    pub gpu_shape: GpuShape,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ObserveOutcome {
    /// The runtime estimate of the job type on the class, at the observed size.
    pub estimate: Gaussian,
    /// Observations of the job type on the class.
    pub observations: u64,
    /// The id had already been learned: nothing changed.
    pub duplicate: bool,
    /// The unlisted job type forgotten to make room for this one (least recently seen).
    pub evicted: Option<String>,
    /// The run had a MIG slice or a share of a device: recorded, not learned.
    pub partial: bool,
    /// The run was implausibly fast: learned at the plausibility bound ([`weigh_down`]).
    pub implausible: bool,
}

/// What [`learn`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learnt {
    pub duplicate: bool,
    pub evicted: Option<String>,
    pub partial: bool,
    /// The name the run was learned under (the tenant's own one when another tenant owns the job type).
    pub name: String,
}

/// Learns from `obs` (unless its id was already learned); the posterior is rebuilt only when the run was
/// co-located (its slowdown is measured against the current estimate), else at the next read.
pub fn learn(policy: &Policy, learned: &mut Learned, obs: &Observation) -> Learnt {
    let class = policy
        .class_index(&obs.gpu_class)
        .expect("validated by the caller");
    if obs
        .id
        .as_deref()
        .is_some_and(|id| learned.observed.contains(id))
    {
        return Learnt {
            duplicate: true,
            ..Learnt::default()
        };
    }
    let seq = learned.observations + 1;
    if obs.gpu_shape != GpuShape::Whole {
        if let Some(id) = &obs.id {
            learned.observed.insert(id);
        }
        learned.observations = seq;
        // The runtimes and pairs are as they were: no avoid-list moves.
        learned.invalidate_touching(&Touched::default());
        return Learnt {
            partial: true,
            name: obs.job_type.clone(),
            ..Learnt::default()
        };
    }
    // The owners the posterior reads, as they were (they change only when the job type's owner is not per
    // tenant: a declared owner, or an unlisted job type's first reporter).
    let owners_before = (tenants::ownership(policy, &obs.job_type)
        != tenants::Ownership::PerTenant)
        .then(|| learned.owners.clone());
    let name = learned
        .owners
        .learned_name(
            &obs.job_type,
            obs.tenant.as_deref(),
            tenants::ownership(policy, &obs.job_type),
        )
        .into_owned();
    let mut evicted = None;
    let mut touched = Touched::default();
    if policy.job_index(&name).is_none() {
        let workload = obs.workload_class.or_else(|| {
            policy
                .job_index(tenants::base(&name))
                .map(|j| policy.job_types[j].workload_class)
        });
        let before = learned.unlisted.get(&name);
        if before.is_none() {
            // One more name on every avoid-list's candidates.
            touched.everything();
        }
        let owners = &learned.owners;
        evicted = learned.unlisted.touch(&name, workload, seq, |n| {
            owners.tenant_of(n).map(str::to_string)
        });
        if let Some(old) = &evicted {
            learned.runtimes.forget(old);
            learned.interference.remove_job(old);
            learned.owners.forget(old);
            touched.everything();
        }
        // A name learned before, of the same workload class, under the same owners: only when it was last
        // seen moved, which the posterior does not read (it is rebuilt below only if something it reads did).
        let seen_again = evicted.is_none()
            && before.map(|s| s.workload) == learned.unlisted.get(&name).map(|s| s.workload)
            && owners_before.is_none_or(|o| o == learned.owners);
        if seen_again {
            learned.forget_digest();
        } else {
            learned.invalidate_touching(&touched);
        }
    }
    let size = estimate::size_log_speedup(obs.gpu_count, policy.learning.gpu_scaling_exponent);
    let y = obs.runtime_seconds.ln() + size;
    let mut colocated: Vec<&str> = Vec::new();
    for other in &obs.colocated_job_types {
        if !colocated.contains(&other.as_str()) {
            colocated.push(other);
        }
    }
    let mut clean = y;
    if !colocated.is_empty() {
        let at = (class, y, seq);
        clean = learn_colocated(policy, learned, obs, &name, at, &colocated, &mut touched);
    }
    learned
        .runtimes
        .record(&name, &obs.gpu_class, clean, obs.gpu_count);
    if let Some(id) = &obs.id {
        learned.observed.insert(id);
    }
    learned.observations = seq;
    learned.invalidate_touching(&touched);
    Learnt {
        duplicate: false,
        evicted,
        partial: false,
        name,
    }
}

/// `obs` as it is learned, and whether it was implausibly fast: more than [`IMPLAUSIBLE_FACTOR`] times faster
/// than the current estimate of its job type (under the name it is learned under) on its class and beyond
/// [`IMPLAUSIBLE_SDS`] standard deviations of it. Such a run (a container that exits at once, a Pod that
/// claims a job type it is not) is weighed down, not trusted: it is learned as a run at that bound, so one
/// run moves the estimate by a bounded step however short it was. A prior wrong by a factor of a few is far
/// inside the bound and learned as it is. Reads the posterior of the state before the run (already built
/// by the previous Observe's answer: no extra rebuild).
fn weigh_down<'o>(
    policy: &Policy,
    learned: &mut Learned,
    obs: &'o Observation,
) -> (std::borrow::Cow<'o, Observation>, bool) {
    let whole = obs.gpu_shape == GpuShape::Whole;
    let new = obs
        .id
        .as_deref()
        .is_none_or(|id| !learned.observed.contains(id));
    let Some(class) = policy.class_index(&obs.gpu_class).filter(|_| whole && new) else {
        return (std::borrow::Cow::Borrowed(obs), false);
    };
    learned.refresh(policy);
    let post = learned.posterior(policy);
    let name = learned.owners.name_for(
        &obs.job_type,
        obs.tenant.as_deref(),
        tenants::ownership(policy, &obs.job_type),
    );
    let workload = obs.workload_class.unwrap_or(WorkloadClass::Unknown);
    // A tenant's first run of another tenant's job type is judged by that job type's estimate.
    let who = match post.job(policy, &name, workload) {
        super::posterior::JobRef::Unknown(_) => post.job(policy, tenants::base(&name), workload),
        known => known,
    };
    let e = post.expected_run(policy, who, class, obs.gpu_count);
    // As it would be stored (brought to one GPU with the policy's exponent).
    let size = estimate::size_log_speedup(obs.gpu_count, policy.learning.gpu_scaling_exponent);
    let spread = e.log_var + policy.learning.tau.powi(2);
    let floor = e.log_mean - IMPLAUSIBLE_FACTOR.ln() - IMPLAUSIBLE_SDS * spread.sqrt();
    if obs.runtime_seconds.ln() + size >= floor {
        return (std::borrow::Cow::Borrowed(obs), false);
    }
    let mut at_bound = obs.clone();
    at_bound.runtime_seconds = (floor - size).exp();
    (std::borrow::Cow::Owned(at_bound), true)
}

/// Records the slowdown `(slowdown, weight)` of a run of `name` next to `other`, reported by `tenant`, at
/// sequence number `seq`; adds the readers of the pairs recorded to `touched`.
///
/// Learned for both job types only when both are the run's tenant's (or it carries none): else it teaches
/// `name`'s avoid-list (its tenant's), not the neighbour's. A tenant's own name's neighbours are named as
/// its tenant reads them (`interference`). A pair of a tenant's own name for a listed job type (`L@t`)
/// and a job type the tenant owns (`U`) is read under two names: by `L@t` as (L@t, U), and by `U` as
/// (U, L), since `U` reads the listed job types by their plain names; a run of either is recorded under
/// both, so each side reads all of the pair's runs, not only its own.
fn record_pair(
    policy: &Policy,
    learned: &mut Learned,
    tenant: Option<&str>,
    name: &str,
    other: &str,
    (slowdown, weight, seq): (f64, f64, u64),
    touched: &mut Touched,
) {
    let read_as = if tenants::is_tenant_name(name) {
        tenants::neighbour_of(policy, tenant, other)
    } else {
        std::borrow::Cow::Borrowed(other)
    };
    let read_as = read_as.as_ref();
    let its_own =
        |n: &str, t: &str| tenants::tenant_in(n).or_else(|| learned.owners.tenant_of(n)) == Some(t);
    let both_its_own = tenant.is_none_or(|t| its_own(name, t) && its_own(read_as, t));
    let table = &mut learned.interference;
    let mut record = |directed: bool, a: &str, b: &str| {
        touched.pair(directed, a, b);
        let forgot = if directed {
            table.record_directed(a, b, slowdown, weight, seq)
        } else {
            table.record_weighted(a, b, slowdown, weight, seq)
        };
        if forgot {
            touched.everything();
        }
    };
    record(
        !both_its_own || learned.owners.differ(name, read_as),
        name,
        read_as,
    );
    let Some(t) = tenant else {
        return;
    };
    let owned_plain =
        |n: &str| !tenants::is_tenant_name(n) && learned.owners.tenant_of(n) == Some(t);
    if tenants::tenant_in(name) == Some(t) && owned_plain(read_as) {
        // L@t next to U: U reads it as (U, L).
        record(true, read_as, tenants::base(name));
        return;
    }
    if !owned_plain(name) {
        return;
    }
    let mirror = tenants::neighbour_of(policy, tenant, other);
    if mirror.as_ref() != other {
        // U next to L: L@t reads it as (L@t, U).
        record(false, name, &mirror);
    }
}

/// Learns the slowdown of a co-located run (log 1-GPU runtime `y` on class `class`) and returns its log
/// runtime with the estimated slowdown taken out.
///
/// The run's log runtime is winsorised around its prediction (the interference-free estimate times 1 +
/// the class's contention factor × the neighbours' current slowdowns) at [`CLIP`] standard deviations of
/// that prediction (the estimate's, the run-to-run noise's and, in ln, the neighbours' slowdowns'), so one
/// straggling run (3 × its usual time) does not read as a harmful neighbour, and a run next to one is not
/// cut back as a straggler (cut around the interference-free estimate, the more harmful a pair the lower
/// it was learned: by 0.05 in ln at a slowdown of 0.4, by 0.15 at 0.7). The class's contention factor
/// learns from the whole excess against the summed slowdowns; each pair gets the excess less what the
/// others' current slowdowns explain. `(class, y, seq)`: the run's class, log 1-GPU runtime and sequence
/// number; the readers of the pairs recorded are added to `touched`.
fn learn_colocated(
    policy: &Policy,
    learned: &mut Learned,
    obs: &Observation,
    name: &str,
    (class, y, seq): (usize, f64, u64),
    colocated: &[&str],
    touched: &mut Touched,
) -> f64 {
    learned.refresh(policy);
    let post = learned.posterior(policy);
    let workload = obs.workload_class.unwrap_or(WorkloadClass::Unknown);
    let who = post.job(policy, name, workload);
    let expected = post.expected_run(policy, who, class, obs.gpu_count);
    let noise = policy.learning.tau.powi(2);
    let current: Vec<f64> = colocated
        .iter()
        .map(|o| interference::slowdown(policy, &learned.interference, name, o))
        .collect();
    let total: f64 = current.iter().sum();
    let spreads: Vec<f64> = colocated
        .iter()
        .map(|o| interference::log_variance(policy, &learned.interference, name, o))
        .collect();
    let spread: f64 = spreads.iter().sum();
    let predicted = (learned.contention.factor(policy, class) * total).ln_1p();
    let bound = CLIP * (expected.log_var + noise + spread).sqrt();
    let excess = (predicted + (y - expected.log_mean - predicted).clamp(-bound, bound)).exp_m1();
    // A tenant's runs of another tenant's job type teach nobody else's contention; its runs of a listed job
    // type nobody owns (learned under its own name) teach the classes' contention as any job type's do.
    let owned_by_another = tenants::is_tenant_name(name)
        && tenants::ownership(policy, tenants::base(name)) != tenants::Ownership::PerTenant;
    if !owned_by_another {
        learned.contention.record(&obs.gpu_class, total, excess);
    }
    for (k, other) in colocated.iter().enumerate() {
        let known = policy.job_index(other).is_some() || learned.unlisted.get(other).is_some();
        if known {
            let others = total - current[k];
            let slowdown = excess - others;
            // The pair's excess is measured against the runtime estimate (known to ±√v) and the other
            // neighbours' slowdowns (each known to ±√v_j in log): it tells the pair as much as a run with
            // noise τ² + v + Σ v_j, i.e. τ²/(τ² + v + Σ v_j) of a run next to it alone, measured against a
            // known runtime. So a run next to two job types teaches each pair less while the other is
            // unknown, and what the other's slowdown does not explain is not all put on this one.
            let weight = noise / (noise + expected.log_var + spread - spreads[k]);
            let tenant = obs.tenant.as_deref().filter(|t| !t.is_empty());
            record_pair(
                policy,
                learned,
                tenant,
                name,
                other,
                (slowdown, weight, seq),
                touched,
            );
        }
    }
    let total = interference::total_slowdown(
        policy,
        &learned.interference,
        name,
        &obs.colocated_job_types,
    );
    y - (learned.contention.factor(policy, class) * total).ln_1p()
}

/// [`learn`] (an implausibly fast run weighed down first, [`weigh_down`]), then the updated estimate of the job type on the class (the posterior rebuilt).
pub fn observe(policy: &Policy, learned: &mut Learned, obs: &Observation) -> ObserveOutcome {
    let class = policy
        .class_index(&obs.gpu_class)
        .expect("validated by the caller");
    let (obs, implausible) = weigh_down(policy, learned, obs);
    let learnt = learn(policy, learned, &obs);
    learned.refresh(policy);
    let post = learned.posterior(policy);
    let workload = obs.workload_class.unwrap_or(WorkloadClass::Unknown);
    let name = if learnt.name.is_empty() {
        &obs.job_type
    } else {
        &learnt.name
    };
    let who = post.job(policy, name, workload);
    let estimate = post
        .estimate_on(policy, who, class, obs.gpu_count)
        .seconds();
    ObserveOutcome {
        estimate,
        observations: learned.runtimes.get(name, &obs.gpu_class).count,
        duplicate: learnt.duplicate,
        evicted: learnt.evicted,
        partial: learnt.partial,
        implausible,
    }
}

/// What the scorer has learned of one job type, for its metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTypeSummary {
    /// Observations over every class.
    pub observations: u64,
    /// Per class (catalog order): the estimated speedup over the catalog's slowest class (1-GPU runtimes).
    pub speedups: Vec<(String, f64)>,
    /// Whether its runs contradict its prior.
    pub contradicted: bool,
    /// Its own GPU-scaling exponent (runtime ∝ 1/g^s; [`super::scaling`]).
    pub gpu_scaling_exponent: f64,
}

/// The summary of `job_type` in the current (refreshed) state.
pub fn summary(policy: &Policy, learned: &Learned, job_type: &str) -> JobTypeSummary {
    let post = learned.posterior(policy);
    let who = post.job(policy, job_type, WorkloadClass::Unknown);
    let n = policy.classes.len();
    let runtime: Vec<f64> = (0..n)
        .map(|c| post.estimate(policy, who, c).log_mean)
        .collect();
    let slowest = (0..n)
        .min_by(|&a, &b| {
            policy.classes[a]
                .relative_throughput
                .total_cmp(&policy.classes[b].relative_throughput)
        })
        .unwrap_or(0);
    JobTypeSummary {
        observations: (0..n).map(|c| post.count(who, c)).sum(),
        speedups: (0..n)
            .map(|c| {
                (
                    policy.classes[c].name.clone(),
                    (runtime[slowest] - runtime[c]).exp(),
                )
            })
            .collect(),
        contradicted: post.contradicted(who),
        gpu_scaling_exponent: post.scaling(policy, who).mean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::runtime_estimate;
    use crate::policy::embedded_default;

    fn run(runtime: f64, colocated: &[&str]) -> Observation {
        Observation {
            job_type: "notebook".into(),
            gpu_class: "L4-24GB".into(),
            gpu_count: 1,
            runtime_seconds: runtime,
            colocated_job_types: colocated.iter().map(|s| s.to_string()).collect(),
            ..Observation::default()
        }
    }

    /// A state where notebook's runtime on L4 is pinned by 40 runs alone; and that runtime.
    fn pinned() -> (Policy, Learned, f64) {
        let p = embedded_default().unwrap();
        let mut l = Learned::default();
        let l4 = p.class_index("L4-24GB").unwrap();
        let alone = runtime_estimate(&p, &l, "notebook", 1, l4).mean;
        for _ in 0..40 {
            observe(&p, &mut l, &run(alone, &[]));
        }
        let t = runtime_estimate(&p, &l, "notebook", 1, l4).mean;
        (p, l, t)
    }

    #[test]
    fn a_harmful_neighbour_is_learned_at_its_slowdown_not_cut_back_as_a_straggler() {
        let (p, mut l, t) = pinned();
        for _ in 0..20 {
            observe(&p, &mut l, &run(2.0 * t, &["batch-etl"]));
        }
        // Twice as long next to batch-etl: 1.0. Winsorised around the interference-free estimate, each
        // run was cut at 2.5 × 0.2 in ln and the pair learned at ~0.65.
        let s = interference::slowdown(&p, &l.interference, "notebook", "batch-etl");
        assert!((s - 1.0).abs() < 0.1, "learned slowdown {s}");
        // A straggler next to it is still cut back: one run 20x as long moves the pair by little.
        observe(&p, &mut l, &run(20.0 * t, &["batch-etl"]));
        let after = interference::slowdown(&p, &l.interference, "notebook", "batch-etl");
        assert!(after < s + 0.15, "{s} -> {after}");
    }

    #[test]
    fn a_run_next_to_two_teaches_each_pair_less_while_the_other_is_unknown() {
        let (p, l, t) = pinned();
        let weight = |colocated: &[&str], l: &Learned| {
            let mut l = l.clone();
            observe(&p, &mut l, &run(1.3 * t, colocated));
            l.interference.get("notebook", "batch-etl").weight()
        };
        let alone = weight(&["batch-etl"], &l);
        let with_unknown = weight(&["batch-etl", "train-bert"], &l);
        assert!(alone > 0.9, "{alone}");
        assert!(with_unknown < 0.5 * alone, "{with_unknown} vs {alone}");
        // Once notebook next to train-bert is known, a run next to both teaches batch-etl's pair about as
        // much as one next to it alone.
        let mut known = l.clone();
        for _ in 0..30 {
            observe(&p, &mut known, &run(1.05 * t, &["train-bert"]));
        }
        let with_known = weight(&["batch-etl", "train-bert"], &known);
        assert!(with_known > 0.85 * alone, "{with_known} vs {alone}");
    }
}
