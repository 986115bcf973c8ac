//! The runtime model shared across job types and classes: a hierarchical Gaussian in log space.
//!
//! For job type j (workload class w) on GPU class c of catalog throughput θ_c, with x_c = ln θ_c, the
//! 1-GPU log runtime is
//!
//! ```text
//! ln t_jc = a_j − (e_j + b_w + b_f + b_j)·x_c + u_c + u_wc + u_fc + r_jc + noise
//! ```
//!
//! - a_j ~ N(ln baseRuntimeSeconds_j, ln(1 + relativeStddev_j²)): the job type's size;
//! - e_j = the job type's `throughputExponent` (from the policy), b_w, b_j ~ N(0, exponentStddev²): how
//!   much more (or less) than the catalog says the workload class, and the job type, gain from a faster
//!   class. A job type seen 9x faster on H100 than on L4 raises b_w, so the other job types of its
//!   workload class are expected to gain more too (a rank-one factor model of job × class, as in
//!   collaborative filtering);
//! - u_c ~ N(0, classOffsetStddev²): the class is faster or slower than its catalog throughput for every
//!   job type; u_wc ~ N(0, classOffsetStddev²): for the job types of one workload class;
//! - b_f ~ N(0, exponentStddev²), u_fc ~ N(0, classOffsetStddev²): the same for the job types of one
//!   family (`jobTypes[].family`, a name pattern; [`shared::Families`]), absent for a job type of none;
//! - r_jc ~ N(0, cellStddev²): what is particular to this job type on this class;
//! - noise ~ N(0, τ²), τ = `learning.tau` (the log runtime's noise: 0.2 ≈ 20 % run to run).
//!
//! Job types the policy does not list but that were learned ([`super::unlisted`]) take part like listed
//! ones, with their workload class's profile as the prior.
//!
//! Observations enter as each cell's count n and mean ȳ (see [`super::estimate`]), brought to one GPU by
//! the job type's own GPU-scaling exponent ([`super::scaling`]). r_jc is integrated
//! out, so every cell's mean is one observation of the shared part with variance cellStddev² + τ²/n. The
//! posterior is exact: each job type's own parameters (a_j, b_j) are eliminated by their 2×2 block (Schur
//! complement), which leaves a small system in the 6·classes + 5 shared parameters (47 with the default
//! catalog), solved by Cholesky; then each job type's block is recovered. Cost O(job types + classes³),
//! not O((job types + classes)³), so hundreds of job types cost microseconds to a millisecond. A cell's own
//! estimate then combines the shared prediction with its own mean, weighted by
//! k = cellStddev²/(cellStddev² + τ²/n).
//!
//! **A contradicted prior** is detected per job type by Bayesian model choice: the likelihood of its cells
//! (given the shared parameters) under its prior against under a prior 3x as wide in every direction (size,
//! exponent, what is particular to a class), the latter held a priori 20 % likely. When the wide one is
//! more likely the job type is flagged (Explain says so) and recomputed with the wide prior, so its own
//! data, not the catalog, decide, and its larger uncertainty draws exploration to it. **A family's offset
//! on a class** (u_fc) gets the same check on its posterior marginal ([`contradicted::offsets`]); the
//! offsets held wrong are solved again under the wide prior, so a measured outlier (NCF 8-13x slower on
//! the V100 than the spec sheet says) reaches the family's other job types from a run or two. A class no
//! job type of the family ran on keeps both alternatives open ([`Posterior::untried_family_class`]): the
//! decision draws from the wide one as often as it is held likely, and values a run there by both.
mod contradicted;
mod covariance;
mod linalg;
mod predict;
mod shared;
mod slots;
mod solve;
mod straggler;
mod tenancy;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use ndarray::{Array1, Array2};

use super::estimate::{LogNormal, RuntimeTable};
use super::scaling;
use super::tenants;
use super::unlisted::UnlistedJobTypes;
use crate::policy::{Policy, RuntimeProfile, WorkloadClass};
pub(super) use linalg::cholesky_lower;
use linalg::{Mat2, dot, quad};
use shared::{Families, Shared};
pub use straggler::Straggled;

pub(super) const WORKLOADS: usize = 5;
/// How much wider (standard deviations) the prior of a job type flagged as contradicted is.
const WIDE: f64 = 3.0;

/// Who a job is, for the model: a job type the posterior knows (a slot: the policy's job types first,
/// then the unlisted ones learned), or only its workload class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    Known(usize),
    Unknown(WorkloadClass),
}

/// One job type of the posterior: its prior and its observed cells.
#[derive(Debug, Clone)]
struct Slot {
    profile: RuntimeProfile,
    workload: usize,
    /// Its family ([`Families`]), whose per-class deviations it shares.
    family: Option<usize>,
    /// (class, count, mean of the 1-GPU log runtime).
    cells: Vec<(usize, u64, f64)>,
    /// Its own GPU-scaling exponent ([`super::scaling`]), by which its cells are brought to one GPU.
    scaling: scaling::Exponent,
    /// How much its runs weigh in the shared parameters (1 = as its data say; 0 = they teach its own
    /// parameters only, so they cannot move any other job type's estimates): 0 for a tenant's own name for
    /// another tenant's job type ([`tenants`]); for a job type a tenant invented (not listed, of no family,
    /// reported with a namespace), the tenant's invented job types together weigh as many job types as the
    /// listed ones it owns, at least one ([`tenancy::invented_weights`]).
    shared_weight: f64,
    /// Whether what its cells teach the shared parameters is bounded: each cell's mean taken within
    /// [`tenants::BOUND`] of the catalog prior there ([`solve`]); for a tenant's own name for a listed job type
    /// nobody owns, so one tenant's runs, however many or wild, move what the others read by a bounded
    /// amount.
    bounded: bool,
}

/// A job type's parameters (a_j, b_j) after the solve: mean, covariance, covariance with the shared ones.
#[derive(Debug, Clone)]
struct Block {
    mean: [f64; 2],
    cov: Mat2,
    /// The precision of (a_j, b_j) given the shared parameters (prior and the job type's cells): `mean` is
    /// its posterior mean given theirs.
    precision: Mat2,
    /// 2 × shared, row-major; empty when the job type has no observations (no correlation).
    cross: Vec<f64>,
}

/// The solved model: shared parameters and one block per slot.
struct Solved {
    mean: Array1<f64>,
    cov: Array2<f64>,
    blocks: Vec<Block>,
}

/// The posterior, for one policy and one learned state.
#[derive(Debug, Clone)]
pub struct Posterior {
    /// Of the policy it was computed for.
    pub fingerprint: u64,
    shared: Shared,
    theta: Array1<f64>,
    cov: Array2<f64>,
    /// Slots of the unlisted job types learned, by name.
    unlisted: HashMap<String, usize>,
    /// Whether some of them are tenants' own names for other tenants' job types ([`tenants`]).
    tenant_job_types: bool,
    /// Per (slot, class): the 1-GPU log-runtime estimate.
    log_mean: Array2<f64>,
    log_var: Array2<f64>,
    /// Observations per (slot, class).
    counts: Array2<u64>,
    /// Per (slot, class) of one run that may have straggled: the reading that it did ([`straggler`]).
    stragglers: HashMap<(usize, usize), Straggled>,
    /// Per slot: whether its data contradict its prior.
    contradicted: Vec<bool>,
    /// Per slot: the covariance of its (a_j, b_j) and their cross-covariance with the shared parameters.
    blocks: Vec<Block>,
    /// Per (slot, class): the weight 1 − k of the shared prediction in the cell's estimate.
    shrink: Array2<f64>,
    /// Per slot: its workload class (index) and family.
    workload_of: Vec<usize>,
    /// Per slot: its own GPU-scaling exponent.
    scaling_of: Vec<scaling::Exponent>,
    family_of: Vec<Option<usize>>,
    /// Per family: its job types' expected future runs ([`super::value::horizon`] of each), summed.
    family_horizon: Vec<f64>,
    /// Per (family, class): whether any job type of the family ran on the class.
    family_tried: Array2<bool>,
    /// Per (family, class): whether the family's runs there contradict its offset's prior
    /// ([`contradicted::offsets`]; it is then learned under the wide one).
    offsets_contradicted: Array2<bool>,
}

/// What of the policy the posterior depends on (catalog, job types, workload profiles, learning). Compared
/// in memory only, on every Score: a fast fixed-seed hash, not SipHash (which cost 10 % of a Score).
pub fn fingerprint(policy: &Policy) -> u64 {
    use std::hash::BuildHasher;
    let mut h = foldhash::fast::FixedState::with_seed(0).build_hasher();
    policy.version.hash(&mut h);
    for c in &policy.classes {
        c.name.hash(&mut h);
        c.relative_throughput.to_bits().hash(&mut h);
    }
    for j in &policy.job_types {
        j.name.hash(&mut h);
        j.workload_class.index().hash(&mut h);
        j.family.hash(&mut h);
        hash_profile(&j.profile, &mut h);
    }
    for w in WorkloadClass::ALL {
        hash_profile(&policy.workload_profile(w), &mut h);
    }
    let l = &policy.learning;
    for v in [
        l.tau,
        l.gpu_scaling_exponent,
        l.gpu_scaling_stddev,
        l.class_offset_stddev,
        l.exponent_stddev,
        l.cell_stddev,
        l.straggler_share,
        l.straggler_tail,
    ] {
        v.to_bits().hash(&mut h);
    }
    h.finish()
}

fn hash_profile(p: &RuntimeProfile, h: &mut impl Hasher) {
    for v in [
        p.base_runtime_seconds,
        p.relative_stddev,
        p.throughput_exponent,
    ] {
        v.to_bits().hash(h);
    }
}

fn log_var_of(relative_stddev: f64) -> f64 {
    (1.0 + relative_stddev * relative_stddev).ln()
}

/// The catalog-only prior log mean of a profile on a class.
pub fn prior_log_mean(profile: &RuntimeProfile, throughput: f64) -> f64 {
    profile.base_runtime_seconds.ln() - profile.throughput_exponent * throughput.ln()
}

/// The learning parameters in variance terms; `wide` widens a job type's own priors.
#[derive(Debug, Clone, Copy)]
struct Variances {
    exponent: f64,
    class: f64,
    cell: f64,
    noise: f64,
}

impl Variances {
    fn of(policy: &Policy) -> Self {
        let l = &policy.learning;
        Self {
            exponent: l.exponent_stddev.powi(2),
            class: l.class_offset_stddev.powi(2),
            cell: l.cell_stddev.powi(2),
            noise: l.tau.powi(2),
        }
    }

    /// Prior variances of (a_j, b_j) and of r_jc for a slot.
    fn own(self, slot: &Slot, wide: bool) -> (f64, f64, f64) {
        let f = if wide { WIDE * WIDE } else { 1.0 };
        (
            log_var_of(slot.profile.relative_stddev) * f,
            self.exponent * f,
            self.cell * f,
        )
    }
}

impl Posterior {
    pub fn compute(
        policy: &Policy,
        runtimes: &RuntimeTable,
        unlisted: &UnlistedJobTypes,
        owners: &tenants::Owners,
    ) -> Self {
        let (slots, names) = slots::slots(policy, runtimes, unlisted, owners);
        let contradicted: Vec<bool> = slots
            .iter()
            .map(|s| contradicted::contradicts(policy, s))
            .collect();
        // Solved under every family offset's prior, then again with the offsets their data contradict
        // held under the wide one (only when there are).
        let families = Families::of(policy).len();
        let narrow = Array2::from_elem((families, policy.classes.len()), false);
        let mut solved = solve::solve(policy, &slots, &contradicted, &narrow);
        let offsets_contradicted = contradicted::offsets(policy, &solved);
        if offsets_contradicted.iter().any(|&w| w) {
            solved = solve::solve(policy, &slots, &contradicted, &offsets_contradicted);
        }
        let (log_mean, log_var, counts, shrink, stragglers) =
            predict::predict(policy, &slots, &solved, &contradicted);
        Self {
            fingerprint: fingerprint(policy),
            shared: Shared::of(policy, &Families::of(policy)),
            theta: solved.mean,
            cov: solved.cov,
            tenant_job_types: names.keys().any(|n| tenants::is_tenant_name(n)),
            unlisted: names,
            log_mean,
            log_var,
            counts,
            stragglers,
            contradicted,
            blocks: solved.blocks,
            shrink,
            workload_of: slots.iter().map(|s| s.workload).collect(),
            scaling_of: slots.iter().map(|s| s.scaling).collect(),
            family_of: slots.iter().map(|s| s.family).collect(),
            family_horizon: shared::family_horizons(&slots, Families::of(policy).len()),
            family_tried: shared::family_tried(&slots, families, policy.classes.len()),
            offsets_contradicted,
        }
    }

    /// Whether a tenant learned a job type under its own name ([`tenants`]).
    pub fn has_tenant_job_types(&self) -> bool {
        self.tenant_job_types
    }

    /// The slot of a learned unlisted job type.
    pub fn unlisted_slot(&self, name: &str) -> Option<usize> {
        self.unlisted.get(name).copied()
    }

    /// Who `job_type` asked by `tenant` is for the model: its own job type when it learned runs under its
    /// own name ([`tenants`]), else `fallback` (the job type itself, [`Posterior::job`]).
    pub fn who(&self, job_type: &str, tenant: Option<&str>, fallback: JobRef) -> JobRef {
        match tenant.filter(|t| !t.is_empty() && self.has_tenant_job_types()) {
            Some(t) => self
                .unlisted_slot(&format!("{job_type}{}{t}", tenants::SEPARATOR))
                .map_or(fallback, JobRef::Known),
            None => fallback,
        }
    }

    /// The name whose runs `tenant`'s requests for `job_type` read ([`Posterior::who`]): the tenant's own
    /// name for it when it learned runs under it, else the job type's.
    pub fn reading_name<'a>(
        &self,
        job_type: &'a str,
        tenant: Option<&str>,
    ) -> std::borrow::Cow<'a, str> {
        if let Some(t) = tenant.filter(|t| !t.is_empty() && self.has_tenant_job_types()) {
            let own = format!("{job_type}{}{t}", tenants::SEPARATOR);
            if self.unlisted.contains_key(&own) {
                return std::borrow::Cow::Owned(own);
            }
        }
        std::borrow::Cow::Borrowed(job_type)
    }

    /// Who `job_type` is: a listed or learned job type, else its workload class.
    pub fn job(&self, policy: &Policy, job_type: &str, workload: WorkloadClass) -> JobRef {
        policy
            .job_index(job_type)
            .or_else(|| self.unlisted.get(job_type).copied())
            .map_or(JobRef::Unknown(workload), JobRef::Known)
    }

    /// `job`'s own GPU-scaling exponent ([`scaling`]; the policy's prior for a job type never seen).
    pub fn scaling(&self, policy: &Policy, job: JobRef) -> scaling::Exponent {
        match job {
            JobRef::Known(j) => self.scaling_of[j],
            JobRef::Unknown(_) => scaling::Exponent::prior(&policy.learning),
        }
    }

    /// ln of how much faster `job` runs on `gpus` GPUs than on one: s·ln g ([`Posterior::scaling`]).
    pub fn log_speedup(&self, policy: &Policy, job: JobRef, gpus: u32) -> f64 {
        self.scaling(policy, job).log_speedup(gpus)
    }

    /// The log-runtime estimate of `job` on `gpus` GPUs of class `c`, interference excluded.
    pub fn estimate_on(&self, policy: &Policy, job: JobRef, c: usize, gpus: u32) -> LogNormal {
        self.estimate(policy, job, c)
            .shifted(-self.log_speedup(policy, job, gpus))
    }

    /// What a run of `job` on `gpus` GPUs of class `c` is expected to be stored as (its log runtime brought
    /// to one GPU with the policy's exponent, as [`super::estimate`] keeps it), interference excluded: the
    /// 1-GPU estimate plus [`scaling::Exponent::stored_excess`], its variance widened by the exponent's
    /// ([`scaling::Exponent::log_speedup_var`]). What a run is judged against when it is learned.
    pub fn expected_run(&self, policy: &Policy, job: JobRef, c: usize, gpus: u32) -> LogNormal {
        let scaling = self.scaling(policy, job);
        let log_gpus = f64::from(gpus.max(1)).ln();
        let mut e = self
            .estimate(policy, job, c)
            .shifted(scaling.stored_excess(&policy.learning, log_gpus));
        e.log_var += scaling.log_speedup_var(gpus);
        e
    }

    /// The 1-GPU log-runtime estimate of `job` on class `c`, interference excluded.
    pub fn estimate(&self, policy: &Policy, job: JobRef, c: usize) -> LogNormal {
        match job {
            JobRef::Known(j) => LogNormal {
                log_mean: self.log_mean[[j, c]],
                log_var: self.log_var[[j, c]],
            },
            JobRef::Unknown(w) => {
                let l = &policy.learning;
                let profile = policy.workload_profile(w);
                let x = policy.classes[c].relative_throughput.ln();
                let phi = self.shared.features(w.index(), None, c, x);
                LogNormal {
                    log_mean: prior_log_mean(&profile, policy.classes[c].relative_throughput)
                        + dot(&phi, &self.theta),
                    log_var: quad(&phi, &self.cov)
                        + log_var_of(profile.relative_stddev)
                        + x * x * l.exponent_stddev.powi(2)
                        + l.cell_stddev.powi(2),
                }
            }
        }
    }

    /// Observations of `job` on class `c` that the estimate used.
    pub fn count(&self, job: JobRef, c: usize) -> u64 {
        match job {
            JobRef::Known(j) => self.counts[[j, c]],
            JobRef::Unknown(_) => 0,
        }
    }

    /// The reading that the only run of `job` on class `c` straggled, when it is held possible
    /// ([`straggler`]).
    pub fn straggled(&self, job: JobRef, c: usize) -> Option<Straggled> {
        match job {
            // Only a cell of one run has one: most lookups end at the count, not the hash.
            JobRef::Known(j) if self.counts[[j, c]] == 1 => self.stragglers.get(&(j, c)).copied(),
            JobRef::Known(_) => None,
            JobRef::Unknown(_) => None,
        }
    }

    /// Whether the data of `job` contradict its prior (it is then learned under a wider one).
    pub fn contradicted(&self, job: JobRef) -> bool {
        match job {
            JobRef::Known(j) => self.contradicted[j],
            JobRef::Unknown(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::estimate::RuntimeTable;
    use crate::policy::embedded_default;

    #[test]
    fn an_unlisted_job_type_is_learned_under_its_workload_profile() {
        let policy = embedded_default().unwrap();
        let h100 = policy.class_index("H100-80GB").unwrap();
        let mut unlisted = UnlistedJobTypes::default();
        unlisted.touch("train-new", Some(WorkloadClass::Training), 1, |_| None);
        let mut t = RuntimeTable::default();
        for _ in 0..10 {
            t.record("train-new", "H100-80GB", 1000f64.ln(), 1);
        }
        let post = Posterior::compute(&policy, &t, &unlisted, &Default::default());
        let who = post.job(&policy, "train-new", WorkloadClass::Batch);
        assert_eq!(who, JobRef::Known(policy.job_types.len()));
        let e = post.estimate(&policy, who, h100);
        assert!((e.log_mean - 1000f64.ln()).abs() < 0.1, "{}", e.log_mean);
        assert_eq!(post.count(who, h100), 10);
        // Never observed and not learned: its workload class only.
        assert_eq!(
            post.job(&policy, "other", WorkloadClass::Batch),
            JobRef::Unknown(WorkloadClass::Batch)
        );
    }

    #[test]
    fn a_job_type_far_from_its_prior_is_flagged_and_follows_its_data() {
        // notebook's prior: exponent 0.3 (2x faster on H100 than on L4); it turns out 16x faster.
        let policy = embedded_default().unwrap();
        let nb = JobRef::Known(policy.job_index("notebook").unwrap());
        let mut t = RuntimeTable::default();
        for _ in 0..3 {
            t.record("notebook", "H100-80GB", 450f64.ln(), 1);
            t.record("notebook", "L4-24GB", 7200f64.ln(), 1);
            t.record("notebook", "L40S-48GB", 6000f64.ln(), 1);
        }
        let post = Posterior::compute(
            &policy,
            &t,
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        assert!(post.contradicted(nb));
        let l40s = policy.class_index("L40S-48GB").unwrap();
        let e = post.estimate(&policy, nb, l40s);
        assert!(
            (e.log_mean - 6000f64.ln()).abs() < 0.15,
            "{}",
            e.log_mean.exp()
        );
        // A job type whose runs agree with its prior is not flagged.
        let mut t = RuntimeTable::default();
        for _ in 0..3 {
            t.record(
                "train-bert",
                "H100-80GB",
                (14_400f64 / 2f64.powf(0.9)).ln(),
                1,
            );
            t.record("train-bert", "A100-80GB", 14_400f64.ln(), 1);
        }
        let post = Posterior::compute(
            &policy,
            &t,
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        assert!(!post.contradicted(JobRef::Known(policy.job_index("train-bert").unwrap())));
    }

    #[test]
    fn inverse_of_a_small_spd_matrix() {
        let m = ndarray::array![[4.0, 2.0, 0.6], [2.0, 2.0, 0.5], [0.6, 0.5, 3.0]];
        let inv = linalg::invert_spd(&m);
        let id = m.dot(&inv);
        for i in 0..3 {
            for j in 0..3 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((id[[i, j]] - want).abs() < 1e-12, "{id:?}");
            }
        }
    }

    #[test]
    fn without_observations_the_estimate_is_the_catalog_prior() {
        let policy = embedded_default().unwrap();
        let post = Posterior::compute(
            &policy,
            &RuntimeTable::default(),
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        let j = policy.job_index("train-bert").unwrap();
        let c = policy.class_index("H100-80GB").unwrap();
        let e = post.estimate(&policy, JobRef::Known(j), c);
        let prior = prior_log_mean(&policy.job_types[j].profile, 2.0);
        assert!(
            (e.log_mean - prior).abs() < 1e-9,
            "{} vs {prior}",
            e.log_mean
        );
        assert!(e.log_var > 0.1);
    }

    #[test]
    fn a_steeper_speedup_on_one_job_type_is_expected_of_its_siblings() {
        // train-llama turns out 9x faster on H100 than on L4 (the catalog says 2.0/0.3 = 6.7x); its
        // sibling train-bert (same workload class), never observed, is expected to gain more too.
        let policy = embedded_default().unwrap();
        let (h100, l4) = (
            policy.class_index("H100-80GB").unwrap(),
            policy.class_index("L4-24GB").unwrap(),
        );
        let bert = JobRef::Known(policy.job_index("train-bert").unwrap());
        let before = Posterior::compute(
            &policy,
            &RuntimeTable::default(),
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        let ratio = |p: &Posterior| {
            (p.estimate(&policy, bert, l4).log_mean - p.estimate(&policy, bert, h100).log_mean)
                .exp()
        };
        let mut t = RuntimeTable::default();
        let base = 86_400f64;
        for _ in 0..20 {
            t.record("train-llama", "H100-80GB", (base / 2.0 / 1.8).ln(), 1);
            t.record(
                "train-llama",
                "L4-24GB",
                (base / 2.0 / 1.8 * 9.0 * 1.8).ln(),
                1,
            );
            t.record("finetune-llm", "H100-80GB", (21_600f64 / 3.0).ln(), 1);
            t.record("finetune-llm", "L4-24GB", (21_600f64 / 3.0 * 12.0).ln(), 1);
        }
        let after = Posterior::compute(
            &policy,
            &t,
            &UnlistedJobTypes::default(),
            &Default::default(),
        );
        assert!(
            ratio(&after) > ratio(&before) * 1.3,
            "before {} after {}",
            ratio(&before),
            ratio(&after)
        );
        // And the observed cells converge to what was observed.
        let llama = JobRef::Known(policy.job_index("train-llama").unwrap());
        let e = after.estimate(&policy, llama, h100);
        assert!(
            (e.log_mean - (base / 3.6).ln()).abs() < 0.05,
            "{}",
            e.log_mean
        );
        assert!(e.log_var < before.estimate(&policy, llama, h100).log_var / 4.0);
    }
}
