//! Runtime estimates: what is stored about observed runtimes, and how a job's size enters them.
//!
//! Runtimes are modelled in natural-log space. An observed runtime `t` of a job on `g` GPUs is stored
//! as `y = ln t + s·ln g` (its 1-GPU equivalent, `s` = the policy's `learning.gpuScalingExponent`):
//! the scaling model is t(g) = t(1) / g^s, so jobs of different sizes are compared at one size and
//! never averaged as if equal. With it are kept the sums that teach each job type its own exponent
//! (Σ ln g per cell, Σ (ln g)² and Σ y·ln g per job type: [`super::scaling`]). The estimate itself
//! (shared across job types and classes) is [`super::posterior`].
//!
//! Sums are kept in fixed point ([`Stat`]): adding the same observations in any order gives
//! bit-identical state, so two replicas that learned the same observations answer identically.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Fixed-point unit of [`Stat`] sums: 2⁻³² (rounding error ≈ 2·10⁻¹⁰, irrelevant next to runtime noise).
const UNIT: f64 = 4_294_967_296.0;

/// The estimate of a runtime, in seconds: mean and standard deviation of that mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gaussian {
    pub mean: f64,
    pub stddev: f64,
}

/// A log-normal estimate: ln(runtime) ~ N(`log_mean`, `log_var`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormal {
    pub log_mean: f64,
    pub log_var: f64,
}

impl LogNormal {
    /// Mean and standard deviation in seconds.
    pub fn seconds(self) -> Gaussian {
        let mean = (self.log_mean + self.log_var / 2.0).exp();
        Gaussian {
            mean,
            stddev: mean * (self.log_var.exp() - 1.0).max(0.0).sqrt(),
        }
    }

    /// Shifted by `delta` in log space (a size or an interference factor).
    pub fn shifted(self, delta: f64) -> Self {
        Self {
            log_mean: self.log_mean + delta,
            ..self
        }
    }
}

/// ln of the factor a job on `gpus` GPUs runs faster than on one: s·ln g.
pub fn size_log_speedup(gpus: u32, exponent: f64) -> f64 {
    exponent * f64::from(gpus.max(1)).ln()
}

/// Count and fixed-point sum of observed values (serialised as `n`, `s`; the `count`, `sum` of format v2
/// still read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    #[serde(rename = "n", alias = "count")]
    pub count: u64,
    /// Σ values, in units of 2⁻³².
    #[serde(rename = "s", alias = "sum")]
    pub sum: i64,
    /// Sequence number (the learned state's observation count) of the last value added, where the table
    /// evicts the least recently seen (pairs); 0 = not kept.
    #[serde(rename = "l", default, skip_serializing_if = "is_zero")]
    pub last: u64,
    /// Σ weights, in units of 2⁻³², when values were added with weights ([`Stat::add_weighted`]; then
    /// `sum` is Σ weight·value); absent, every value weighs 1 (runtimes, and pairs of older snapshots).
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// Runtimes only: Σ ln(GPU count) of the runs, in units of 2⁻³² (absent while every run had 1 GPU).
    #[serde(rename = "g", default, skip_serializing_if = "is_zero_i64")]
    pub log_gpus: i64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_i64(x: &i64) -> bool {
    *x == 0
}

/// ln g in the fixed point of [`Stat`].
fn fixed(x: f64) -> i64 {
    (x * UNIT).round() as i64
}

fn float(x: i64) -> f64 {
    x as f64 / UNIT
}

impl Stat {
    pub fn add(&mut self, x: f64) {
        self.add_weighted(x, 1.0);
    }

    /// Adds `x` weighing `w` (in (0, 1]: an observation worth a fraction of a noise-only one, as when
    /// it is measured against an uncertain estimate). The first weight other than 1 turns the values
    /// already added into weights of 1.
    pub fn add_weighted(&mut self, x: f64, w: f64) {
        if self.weight.is_none() && w != 1.0 {
            self.weight = Some((self.count as f64 * UNIT) as i64);
        }
        self.count += 1;
        let w = if self.weight.is_some() { w } else { 1.0 };
        self.sum = self.sum.saturating_add((w * x * UNIT).round() as i64);
        if let Some(total) = &mut self.weight {
            *total = total.saturating_add((w * UNIT).round() as i64);
        }
    }

    pub fn sum(&self) -> f64 {
        float(self.sum)
    }

    /// Σ ln(GPU count) of the runs (runtimes only).
    pub fn log_gpus(&self) -> f64 {
        float(self.log_gpus)
    }

    /// Σ weights: the number of values when every value weighs 1.
    pub fn weight(&self) -> f64 {
        self.weight
            .map_or(self.count as f64, |w| w.max(0) as f64 / UNIT)
    }

    /// (Weighted) mean of the values (0 when none).
    pub fn mean(&self) -> f64 {
        let w = self.weight();
        if self.count == 0 || w <= 0.0 {
            0.0
        } else {
            self.sum() / w
        }
    }

    /// Posterior mean of a quantity whose prior mean `prior` weighs as `strength` observations.
    pub fn shrunk_mean(&self, prior: f64, strength: f64) -> f64 {
        (strength * prior + self.sum()) / (strength + self.count as f64)
    }
}

/// Per job type, over its runs on more than one GPU: Σ (ln g)² and Σ y·ln g (y the run's stored 1-GPU
/// log runtime), in units of 2⁻³².
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeSums {
    #[serde(rename = "q")]
    pub square: i64,
    #[serde(rename = "p")]
    pub product: i64,
}

impl SizeSums {
    pub fn square(&self) -> f64 {
        float(self.square)
    }

    pub fn product(&self) -> f64 {
        float(self.product)
    }
}

/// Observed 1-GPU log runtimes (interference taken out), keyed by job type then GPU class (names, so
/// they survive policy edits), and the sums of their GPU counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeTable {
    pub by_job: BTreeMap<String, BTreeMap<String, Stat>>,
    /// Per job type that ran on more than one GPU (keys a subset of `by_job`'s).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, SizeSums>,
}

impl RuntimeTable {
    pub fn get(&self, job_type: &str, class: &str) -> Stat {
        self.by_job
            .get(job_type)
            .and_then(|m| m.get(class))
            .copied()
            .unwrap_or_default()
    }

    /// Records a run of `gpus` GPUs whose 1-GPU log runtime is `log_runtime_1gpu`.
    pub fn record(&mut self, job_type: &str, class: &str, log_runtime_1gpu: f64, gpus: u32) {
        let cell = self
            .by_job
            .entry(job_type.to_string())
            .or_default()
            .entry(class.to_string())
            .or_default();
        cell.add(log_runtime_1gpu);
        let l = f64::from(gpus.max(1)).ln();
        if l > 0.0 {
            cell.log_gpus = cell.log_gpus.saturating_add(fixed(l));
            let sums = self.sizes.entry(job_type.to_string()).or_default();
            sums.square = sums.square.saturating_add(fixed(l * l));
            sums.product = sums.product.saturating_add(fixed(log_runtime_1gpu * l));
        }
    }

    pub fn sizes(&self, job_type: &str) -> SizeSums {
        self.sizes.get(job_type).copied().unwrap_or_default()
    }

    /// Forgets every run of `job_type`.
    pub fn forget(&mut self, job_type: &str) {
        self.by_job.remove(job_type);
        self.sizes.remove(job_type);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_sums_do_not_depend_on_order() {
        let xs = [10.123_456_789, 9.87, 11.000_000_1, 8.5, 10.0];
        let mut a = Stat::default();
        let mut b = Stat::default();
        xs.iter().for_each(|&x| a.add(x));
        xs.iter().rev().for_each(|&x| b.add(x));
        assert_eq!(a, b);
        assert!((a.mean() - xs.iter().sum::<f64>() / 5.0).abs() < 1e-9);
        assert!((a.shrunk_mean(0.0, 5.0) - a.mean() / 2.0).abs() < 1e-9);
    }

    #[test]
    fn weighted_values_and_the_unweighted_ones_before_them() {
        let mut s = Stat::default();
        s.add(1.0);
        s.add(3.0);
        // Unweighted: no weight field is stored (runtimes, and the snapshots of older scorers).
        assert_eq!(s.weight, None);
        assert_eq!(s.weight(), 2.0);
        let old = serde_json::to_string(&s).unwrap();
        assert!(!old.contains("\"w\""), "{old}");
        // A weighted value turns the earlier ones into weights of 1.
        s.add_weighted(6.0, 0.5);
        assert_eq!(s.count, 3);
        assert!((s.weight() - 2.5).abs() < 1e-9);
        assert!((s.mean() - (1.0 + 3.0 + 3.0) / 2.5).abs() < 1e-9);
        let back: Stat = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        // Order does not matter.
        let mut t = Stat::default();
        t.add_weighted(6.0, 0.5);
        t.add(3.0);
        t.add(1.0);
        assert_eq!((t.count, t.sum, t.weight), (s.count, s.sum, s.weight));
    }

    #[test]
    fn lognormal_seconds_and_size() {
        let e = LogNormal {
            log_mean: 100f64.ln(),
            log_var: 0.0,
        };
        assert!((e.seconds().mean - 100.0).abs() < 1e-9);
        assert_eq!(e.seconds().stddev, 0.0);
        // 8 GPUs with s = 1: 8x faster.
        let eight = e.shifted(-size_log_speedup(8, 1.0));
        assert!((eight.seconds().mean - 12.5).abs() < 1e-9);
        assert_eq!(size_log_speedup(0, 0.9), 0.0);
        let wide = LogNormal {
            log_mean: 0.0,
            log_var: 0.25,
        };
        assert!(wide.seconds().mean > 1.0 && wide.seconds().stddev > 0.5);
    }
}
