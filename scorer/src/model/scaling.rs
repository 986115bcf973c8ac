//! Each job type's own GPU-scaling exponent, learned from its runs at several GPU counts.
//!
//! A run of t seconds on g GPUs is stored as y = ln t + s₀·ln g (s₀ = the policy's
//! `gpuScalingExponent`; [`super::estimate`]). A job type whose runs scale as g^s (Sia's measured job
//! types: 0.35–1.00, mean 0.67) then has y = ln t(1) + (s₀ − s)·ln g: at s = 0.5 its runs on 8 GPUs look
//! 2.3x slower than its runs on one, a spread that would otherwise read as noise, as a slow class or as a
//! harmful neighbour.
//!
//! Per job type, δ = s₀ − s ~ N(0, `gpuScalingStddev`²) is the slope of y on ℓ = ln g **within** its (job
//! type, class) cells, so that a class it happened to run on with bigger jobs does not read as scaling,
//! and what is particular to a cell cancels: with Sxx = Σ ℓ² − Σ_c (Σ_c ℓ)²/n_c and
//! Sxy = Σ y·ℓ − Σ_c (Σ_c y)(Σ_c ℓ)/n_c, the posterior mean is δ̂ = Sxy / (Sxx + τ²/σ²) (runs differ by
//! the noise τ around the line), its variance τ² / (Sxx + τ²/σ²). s = s₀ − δ̂ is kept in [0, 1]: no job type runs slower on more GPUs or
//! faster than linearly, so no run, forged or not, moves a cell's 1-GPU mean by more than its mean ln g.
//! Each cell enters the runtime model ([`super::posterior`]) at one GPU with δ̂ taken out
//! (ȳ_c − δ̂·ℓ̄_c), and a request for g GPUs is scaled by g^s. A run on g GPUs is judged (as implausibly
//! fast, or as slowed by its neighbours) against its estimate widened by the exponent's variance × (ln g)²,
//! so that the first runs of a job type on 8 GPUs, before its exponent is known, teach its neighbours'
//! slowdowns little. The sums are the job type's own: another
//! tenant's runs of it are learned under that tenant's name ([`super::tenants`]) and teach this exponent
//! nothing.
use std::collections::BTreeMap;

use super::estimate::{SizeSums, Stat};
use crate::policy::LearningSpec;

/// A job type's GPU-scaling exponent: its posterior mean (kept in [0, 1]) and variance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exponent {
    pub mean: f64,
    pub var: f64,
}

impl Exponent {
    /// The policy's, for a job type without runs on several GPU counts.
    pub fn prior(learning: &LearningSpec) -> Self {
        Self {
            mean: learning.gpu_scaling_exponent,
            var: learning.gpu_scaling_stddev.powi(2),
        }
    }

    /// ln of how much faster a run on `gpus` GPUs is than on one: s·ln g.
    pub fn log_speedup(self, gpus: u32) -> f64 {
        super::estimate::size_log_speedup(gpus, self.mean)
    }

    /// The variance of [`Exponent::log_speedup`]: var(s)·(ln g)².
    pub fn log_speedup_var(self, gpus: u32) -> f64 {
        self.var * f64::from(gpus.max(1)).ln().powi(2)
    }

    /// How far a run's stored value (its log runtime brought to one GPU with the policy's s₀) is above its
    /// 1-GPU log runtime under this exponent: (s₀ − s)·ln g, for `log_gpus` = ln g (or a cell's mean ln g).
    pub fn stored_excess(self, learning: &LearningSpec, log_gpus: f64) -> f64 {
        (learning.gpu_scaling_exponent - self.mean) * log_gpus
    }
}

/// The job type's own GPU-scaling exponent, from its cells (by class) and its [`SizeSums`].
pub fn exponent(
    cells: &BTreeMap<String, Stat>,
    sums: SizeSums,
    learning: &LearningSpec,
) -> Exponent {
    let prior = Exponent::prior(learning);
    if sums == SizeSums::default() {
        return prior;
    }
    let (mut sxx, mut sxy) = (sums.square(), sums.product());
    for cell in cells.values().filter(|c| c.count > 0) {
        let n = cell.count as f64;
        sxx -= cell.log_gpus() * cell.log_gpus() / n;
        sxy -= cell.sum() * cell.log_gpus() / n;
    }
    let ridge = (learning.tau / learning.gpu_scaling_stddev).powi(2);
    let information = sxx.max(0.0) + ridge;
    let delta = sxy / information;
    if !delta.is_finite() {
        return prior;
    }
    Exponent {
        mean: (prior.mean - delta).clamp(0.0, 1.0),
        var: learning.tau.powi(2) / information,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::estimate::RuntimeTable;

    fn learning() -> LearningSpec {
        LearningSpec::default()
    }

    /// Runs of a job type whose runtime is `t1 / g^s` on each class (`t1` per class), stored as the
    /// learner stores them (with the policy's s₀).
    fn table(s: f64, runs: &[(&str, f64, u32)]) -> RuntimeTable {
        let s0 = learning().gpu_scaling_exponent;
        let mut t = RuntimeTable::default();
        for &(class, t1, g) in runs {
            let l = f64::from(g).ln();
            t.record("job", class, t1.ln() - s * l + s0 * l, g);
        }
        t
    }

    fn learned(t: &RuntimeTable) -> f64 {
        exponent(&t.by_job["job"], t.sizes("job"), &learning()).mean
    }

    #[test]
    fn runs_at_several_gpu_counts_teach_the_exponent() {
        let mut runs = Vec::new();
        for _ in 0..5 {
            for g in [1, 2, 4, 8] {
                runs.push(("A", 1000.0, g));
                runs.push(("B", 3000.0, g));
            }
        }
        let t = table(0.5, &runs);
        let e = exponent(&t.by_job["job"], t.sizes("job"), &learning());
        assert!(e.var < Exponent::prior(&learning()).var / 10.0, "{e:?}");
        let s = e.mean;
        // Noise-free: the ridge τ²/σ² = 0.64 against Sxx ≈ 17 keeps 4 % of the prior's pull.
        assert!((s - 0.5).abs() < 0.03, "{s}");
        let s = learned(&table(0.9, &runs));
        assert!((s - 0.9).abs() < 1e-6, "{s}");
    }

    #[test]
    fn one_gpu_count_per_class_teaches_nothing() {
        // 8 GPUs on the fast class, 1 on the slow: the difference is the classes', not the scaling's.
        let runs = [
            ("fast", 1000.0, 8),
            ("fast", 1000.0, 8),
            ("slow", 5000.0, 1),
        ];
        let s = learned(&table(0.3, &runs));
        // (Up to the fixed point's rounding.)
        assert!((s - learning().gpu_scaling_exponent).abs() < 1e-6, "{s}");
    }

    #[test]
    fn the_exponent_stays_in_zero_to_one() {
        // Runs 30x slower on 8 GPUs than on one (a forged or broken report): s is 0, not negative.
        let mut t = RuntimeTable::default();
        for _ in 0..10 {
            t.record("job", "A", 1000f64.ln(), 1);
            t.record("job", "A", 30_000f64.ln() + 0.9 * 8f64.ln(), 8);
        }
        assert_eq!(learned(&t), 0.0);
        let mut t = RuntimeTable::default();
        for _ in 0..10 {
            t.record("job", "A", 1000f64.ln(), 1);
            t.record("job", "A", 1.0 + 0.9 * 8f64.ln(), 8);
        }
        assert_eq!(learned(&t), 1.0);
        // Forged sums: still in range.
        t.sizes.get_mut("job").unwrap().product = i64::MAX;
        assert!((0.0..=1.0).contains(&learned(&t)));
    }
}
