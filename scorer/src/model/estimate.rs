//! Gaussian runtime estimates per (job type, GPU class).
//!
//! Prior: mean μ₀ = baseRuntimeSeconds / throughput^throughputExponent, σ₀ = relativeStddev · μ₀.
//! Observations update it as a normal-normal model whose observation noise is `k·σ₀²`, where `k` is the
//! policy's `priorStrength`: the prior weighs as much as `k` observations, so after `n` observations
//! with sum `S`, μ = (k·μ₀ + S)/(k + n) and σ² = k·σ₀²/(k + n). The mean converges to the observed
//! mean; σ is the uncertainty of that mean and shrinks with every observation.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::{GpuClass, RuntimeProfile};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gaussian {
    pub mean: f64,
    pub stddev: f64,
}

/// Sufficient statistics of the observations of one quantity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Observations {
    pub count: u64,
    pub sum: f64,
}

impl Observations {
    pub fn add(&mut self, x: f64) {
        self.count += 1;
        self.sum += x;
    }

    /// Posterior mean of a quantity whose prior mean `prior` weighs as `strength` observations.
    pub fn shrunk_mean(&self, prior: f64, strength: f64) -> f64 {
        (strength * prior + self.sum) / (strength + self.count as f64)
    }
}

/// The prior runtime of a job with `profile` on `class`.
pub fn prior(profile: &RuntimeProfile, class: &GpuClass) -> Gaussian {
    let mean =
        profile.base_runtime_seconds / class.relative_throughput.powf(profile.throughput_exponent);
    Gaussian {
        mean,
        stddev: profile.relative_stddev * mean,
    }
}

/// The posterior after `obs`, with the prior weighing as `strength` observations.
pub fn posterior(prior: Gaussian, obs: Observations, strength: f64) -> Gaussian {
    let n = obs.count as f64;
    Gaussian {
        mean: obs.shrunk_mean(prior.mean, strength),
        stddev: prior.stddev * (strength / (strength + n)).sqrt(),
    }
}

/// Observed runtimes, keyed by job type then GPU class (names, so that they survive policy edits).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeTable {
    pub by_job: BTreeMap<String, BTreeMap<String, Observations>>,
}

impl RuntimeTable {
    pub fn get(&self, job_type: &str, class: &str) -> Observations {
        self.by_job
            .get(job_type)
            .and_then(|m| m.get(class))
            .copied()
            .unwrap_or_default()
    }

    /// The observations of one job type on every class (empty when none).
    pub fn for_job(&self, job_type: &str) -> Option<&BTreeMap<String, Observations>> {
        self.by_job.get(job_type)
    }

    pub fn record(&mut self, job_type: &str, class: &str, runtime_seconds: f64) {
        self.by_job
            .entry(job_type.to_string())
            .or_default()
            .entry(class.to_string())
            .or_default()
            .add(runtime_seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prior_scales_with_throughput_and_exponent() {
        let class = GpuClass {
            name: "X".into(),
            vendor: crate::policy::Vendor::Nvidia,
            memory_gib: 80.0,
            relative_throughput: 2.0,
            price_per_hour: 1.0,
            gpus_per_node: 8,
            node_label_key: "k".into(),
            node_label_value: "X".into(),
            taint_key: None,
        };
        let p = RuntimeProfile {
            base_runtime_seconds: 100.0,
            relative_stddev: 0.5,
            throughput_exponent: 1.0,
        };
        assert_eq!(
            prior(&p, &class),
            Gaussian {
                mean: 50.0,
                stddev: 25.0
            }
        );
        let flat = RuntimeProfile {
            throughput_exponent: 0.0,
            ..p
        };
        assert_eq!(prior(&flat, &class).mean, 100.0);
    }

    #[test]
    fn posterior_converges_to_the_observed_mean_and_narrows() {
        let p = Gaussian {
            mean: 100.0,
            stddev: 30.0,
        };
        let mut obs = Observations::default();
        let mut last = posterior(p, obs, 4.0);
        assert_eq!(last, p);
        for i in 0..400 {
            // Observations alternate around 250 s.
            obs.add(if i % 2 == 0 { 240.0 } else { 260.0 });
            let post = posterior(p, obs, 4.0);
            assert!(post.stddev < last.stddev);
            last = post;
        }
        assert!((last.mean - 250.0).abs() < 2.0, "mean {}", last.mean);
        assert!(last.stddev < 3.0, "stddev {}", last.stddev);
    }
}
