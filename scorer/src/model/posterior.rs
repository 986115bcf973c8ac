//! The runtime model shared across job types and classes: a hierarchical Gaussian in log space.
//!
//! For job type j (workload class w) on GPU class c of catalog throughput θ_c, with x_c = ln θ_c, the
//! 1-GPU log runtime is
//!
//! ```text
//! ln t_jc = a_j − (e_j + b_w + b_j)·x_c + u_c + u_wc + r_jc + noise
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
//! - r_jc ~ N(0, cellStddev²): what is particular to this job type on this class;
//! - noise ~ N(0, τ²), τ = `learning.tau` (the log runtime's noise: 0.2 ≈ 20 % run to run).
//!
//! Observations enter as each cell's count n and mean ȳ (see [`super::estimate`]). r_jc is integrated
//! out, so every cell's mean is one observation of the shared part with variance cellStddev² + τ²/n; the
//! posterior of the shared parameters is exact (dense precision matrix, Cholesky). A cell's own estimate
//! then combines the shared prediction with its own mean, weighted by k = cellStddev²/(cellStddev² + τ²/n).
//! The whole posterior is rebuilt after every observation (O(p³), p = 2·jobTypes + 6·classes + 5) and
//! cached; a Score only reads it.
use std::hash::{Hash, Hasher};

use ndarray::{Array1, Array2};

use super::estimate::{LogNormal, RuntimeTable};
use crate::policy::{Policy, RuntimeProfile, WorkloadClass};

const WORKLOADS: usize = 5;

/// Who a job is, for the model: a job type the policy knows, or only its workload class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    Known(usize),
    Unknown(WorkloadClass),
}

#[derive(Debug, Clone, Copy)]
struct Layout {
    jobs: usize,
    classes: usize,
}

impl Layout {
    fn a(self, j: usize) -> usize {
        j
    }
    fn bj(self, j: usize) -> usize {
        self.jobs + j
    }
    fn bw(self, w: usize) -> usize {
        2 * self.jobs + w
    }
    fn uc(self, c: usize) -> usize {
        2 * self.jobs + WORKLOADS + c
    }
    fn uwc(self, w: usize, c: usize) -> usize {
        2 * self.jobs + WORKLOADS + self.classes + w * self.classes + c
    }
    fn len(self) -> usize {
        2 * self.jobs + WORKLOADS + self.classes + WORKLOADS * self.classes
    }
}

/// The posterior, for one policy and one learned state.
#[derive(Debug, Clone)]
pub struct Posterior {
    /// Of the policy it was computed for.
    pub fingerprint: u64,
    layout: Layout,
    theta: Array1<f64>,
    cov: Array2<f64>,
    /// Per (known job type, class): the 1-GPU log-runtime estimate.
    log_mean: Array2<f64>,
    log_var: Array2<f64>,
    /// Observations per (known job type, class).
    counts: Array2<u64>,
}

/// What of the policy the posterior depends on (catalog, job types, workload profiles, learning).
pub fn fingerprint(policy: &Policy) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    policy.version.hash(&mut h);
    for c in &policy.classes {
        c.name.hash(&mut h);
        c.relative_throughput.to_bits().hash(&mut h);
    }
    for j in &policy.job_types {
        j.name.hash(&mut h);
        j.workload_class.index().hash(&mut h);
        hash_profile(&j.profile, &mut h);
    }
    for w in WorkloadClass::ALL {
        hash_profile(&policy.workload_profile(w), &mut h);
    }
    let l = &policy.learning;
    for v in [
        l.tau,
        l.class_offset_stddev,
        l.exponent_stddev,
        l.cell_stddev,
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

impl Posterior {
    pub fn compute(policy: &Policy, runtimes: &RuntimeTable) -> Self {
        let l = &policy.learning;
        let layout = Layout {
            jobs: policy.job_types.len(),
            classes: policy.classes.len(),
        };
        let p = layout.len();
        let (sb2, su2, sr2, noise2) = (
            l.exponent_stddev.powi(2),
            l.class_offset_stddev.powi(2),
            l.cell_stddev.powi(2),
            l.tau.powi(2),
        );
        let mut precision = Array2::<f64>::zeros((p, p));
        let mut b = Array1::<f64>::zeros(p);
        let mut prior = |i: usize, mean: f64, var: f64| {
            precision[[i, i]] += 1.0 / var;
            b[i] += mean / var;
        };
        for (j, job) in policy.job_types.iter().enumerate() {
            prior(
                layout.a(j),
                job.profile.base_runtime_seconds.ln(),
                log_var_of(job.profile.relative_stddev),
            );
            prior(layout.bj(j), 0.0, sb2);
        }
        for w in 0..WORKLOADS {
            prior(layout.bw(w), 0.0, sb2);
            for c in 0..layout.classes {
                prior(layout.uwc(w, c), 0.0, su2);
            }
        }
        for c in 0..layout.classes {
            prior(layout.uc(c), 0.0, su2);
        }

        let xs: Vec<f64> = policy
            .classes
            .iter()
            .map(|c| c.relative_throughput.ln())
            .collect();
        let mut counts = Array2::<u64>::zeros((layout.jobs, layout.classes));
        let mut means = Array2::<f64>::zeros((layout.jobs, layout.classes));
        for (job_name, by_class) in &runtimes.by_job {
            let Some(j) = policy.job_index(job_name) else {
                continue;
            };
            let job = &policy.job_types[j];
            let w = job.workload_class.index();
            for (class_name, stat) in by_class {
                let Some(c) = policy.class_index(class_name) else {
                    continue;
                };
                if stat.count == 0 {
                    continue;
                }
                counts[[j, c]] = stat.count;
                means[[j, c]] = stat.mean();
                let var = sr2 + noise2 / stat.count as f64;
                let offset = -job.profile.throughput_exponent * xs[c];
                let phi = features(layout, j, w, c, xs[c]);
                let target = stat.mean() - offset;
                for &(i, fi) in &phi {
                    b[i] += fi * target / var;
                    for &(k, fk) in &phi {
                        precision[[i, k]] += fi * fk / var;
                    }
                }
            }
        }
        let cov = invert_spd(&precision);
        let theta = cov.dot(&b);

        let mut log_mean = Array2::<f64>::zeros((layout.jobs, layout.classes));
        let mut log_var = Array2::<f64>::zeros((layout.jobs, layout.classes));
        for (j, job) in policy.job_types.iter().enumerate() {
            let w = job.workload_class.index();
            for c in 0..layout.classes {
                let phi = features(layout, j, w, c, xs[c]);
                let shared_mean = -job.profile.throughput_exponent * xs[c] + dot(&phi, &theta);
                let shared_var = quad(&phi, &cov);
                let n = counts[[j, c]];
                let (m, v) = if n == 0 {
                    (shared_mean, shared_var + sr2)
                } else {
                    let k = sr2 / (sr2 + noise2 / n as f64);
                    (
                        (1.0 - k) * shared_mean + k * means[[j, c]],
                        (1.0 - k).powi(2) * shared_var + (1.0 - k) * sr2,
                    )
                };
                log_mean[[j, c]] = m;
                log_var[[j, c]] = v;
            }
        }
        Self {
            fingerprint: fingerprint(policy),
            layout,
            theta,
            cov,
            log_mean,
            log_var,
            counts,
        }
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
                let wi = w.index();
                let phi = [
                    (self.layout.bw(wi), -x),
                    (self.layout.uc(c), 1.0),
                    (self.layout.uwc(wi, c), 1.0),
                ];
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
}

/// The non-zero features of cell (j, c): (parameter index, coefficient).
fn features(layout: Layout, j: usize, w: usize, c: usize, x: f64) -> [(usize, f64); 5] {
    [
        (layout.a(j), 1.0),
        (layout.bj(j), -x),
        (layout.bw(w), -x),
        (layout.uc(c), 1.0),
        (layout.uwc(w, c), 1.0),
    ]
}

fn dot(phi: &[(usize, f64)], theta: &Array1<f64>) -> f64 {
    phi.iter().map(|&(i, f)| f * theta[i]).sum()
}

fn quad(phi: &[(usize, f64)], cov: &Array2<f64>) -> f64 {
    let mut s = 0.0;
    for &(i, fi) in phi {
        for &(k, fk) in phi {
            s += fi * fk * cov[[i, k]];
        }
    }
    s.max(0.0)
}

/// Inverse of a symmetric positive-definite matrix (Cholesky). The precision matrices built here are
/// always positive definite: every parameter has a proper prior.
fn invert_spd(m: &Array2<f64>) -> Array2<f64> {
    let n = m.nrows();
    // m = L·Lᵀ
    let mut l = Array2::<f64>::zeros((n, n));
    for i in 0..n {
        for j in 0..=i {
            let mut s = m[[i, j]];
            for k in 0..j {
                s -= l[[i, k]] * l[[j, k]];
            }
            if i == j {
                l[[i, i]] = s.max(1e-300).sqrt();
            } else {
                l[[i, j]] = s / l[[j, j]];
            }
        }
    }
    // L⁻¹ (lower triangular), then m⁻¹ = L⁻ᵀ·L⁻¹.
    let mut li = Array2::<f64>::zeros((n, n));
    for col in 0..n {
        li[[col, col]] = 1.0 / l[[col, col]];
        for i in col + 1..n {
            let mut s = 0.0;
            for k in col..i {
                s -= l[[i, k]] * li[[k, col]];
            }
            li[[i, col]] = s / l[[i, i]];
        }
    }
    li.t().dot(&li)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::estimate::RuntimeTable;
    use crate::policy::embedded_default;

    #[test]
    fn inverse_of_a_small_spd_matrix() {
        let m = ndarray::array![[4.0, 2.0, 0.6], [2.0, 2.0, 0.5], [0.6, 0.5, 3.0]];
        let inv = invert_spd(&m);
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
        let post = Posterior::compute(&policy, &RuntimeTable::default());
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
        let before = Posterior::compute(&policy, &RuntimeTable::default());
        let ratio = |p: &Posterior| {
            (p.estimate(&policy, bert, l4).log_mean - p.estimate(&policy, bert, h100).log_mean)
                .exp()
        };
        let mut t = RuntimeTable::default();
        let base = 86_400f64;
        for _ in 0..20 {
            t.record("train-llama", "H100-80GB", (base / 2.0 / 1.8).ln());
            t.record(
                "train-llama",
                "L4-24GB",
                (base / 2.0 / 1.8 * 9.0 * 1.8).ln(),
            );
            t.record("finetune-llm", "H100-80GB", (21_600f64 / 3.0).ln());
            t.record("finetune-llm", "L4-24GB", (21_600f64 / 3.0 * 12.0).ln());
        }
        let after = Posterior::compute(&policy, &t);
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
