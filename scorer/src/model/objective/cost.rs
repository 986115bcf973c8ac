//! cost = m·(μ + λσ + γ·I·μ)/R (exploiting) and sampled cost = m·(μ̃ + γ·I·μ̃)/R − β·IG (exploring).
//!
//! All terms are normalised by R, the job type's reference runtime (its runtime on a class of relative
//! throughput 1.0), so λ, β, γ mean the same for a 10-minute and a 10-hour job:
//! - μ, σ: the runtime estimate on the class (seconds; σ is the uncertainty of μ);
//! - μ̃: a draw of the runtime from its posterior (Thompson sampling, see [`crate::model`]);
//! - I: the summed slowdown from the job types running alongside (so γ·I·μ is the expected extra time);
//! - m: the objective's multiplier (1, or the class's price per hour);
//! - IG = ½·ln(1 + v/τ²): information gain in nats of one more observation, v the variance of the
//!   log-runtime estimate and τ the log runtime's noise.
//!
//! Lower is better. Computed for all candidates at once.
use ndarray::Array1;

use crate::policy::LearningSpec;

/// Per-candidate inputs, all of the same length.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub mean: Array1<f64>,
    pub stddev: Array1<f64>,
    pub multiplier: Array1<f64>,
    /// Summed slowdown I on each class (the co-located job types' slowdowns × the class's contention factor).
    pub interference: Array1<f64>,
    /// Variance of the log-runtime estimate.
    pub log_var: Array1<f64>,
    /// A posterior draw of the runtime (seconds).
    pub sampled: Array1<f64>,
    pub reference_runtime: f64,
}

/// Per-candidate terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Terms {
    pub information_gain: Array1<f64>,
    /// m·γ·I·μ/R: the interference term of the cost.
    pub interference_penalty: Array1<f64>,
    /// What exploiting minimises.
    pub cost: Array1<f64>,
    /// What an exploratory decision minimises: the cost of the posterior draw, less β·IG.
    pub sampled_cost: Array1<f64>,
}

/// The terms of every candidate, in one pass: each term is computed with the operations, in the order, the
/// formula above names them (the same as the whole-array expressions it replaced), without temporary arrays.
pub fn compute(inputs: &Inputs, learning: &LearningSpec) -> Terms {
    let r = inputs.reference_runtime;
    let tau2 = learning.tau * learning.tau;
    let gamma_per_r = learning.gamma / r;
    let n = inputs.mean.len();
    let mut information_gain = Vec::with_capacity(n);
    let mut interference_penalty = Vec::with_capacity(n);
    let mut cost = Vec::with_capacity(n);
    let mut sampled_cost = Vec::with_capacity(n);
    for i in 0..n {
        let (m, mu, s) = (inputs.multiplier[i], inputs.mean[i], inputs.stddev[i]);
        let interference = inputs.interference[i];
        let ig = 0.5 * (1.0 + inputs.log_var[i] / tau2).ln();
        let pen = m * interference * mu * gamma_per_r;
        let slowed = 1.0 + learning.gamma * interference;
        information_gain.push(ig);
        interference_penalty.push(pen);
        cost.push(m * (mu + learning.lambda * s) / r + pen);
        sampled_cost.push(m * inputs.sampled[i] * slowed / r - ig * learning.beta);
    }
    Terms {
        information_gain: Array1::from_vec(information_gain),
        interference_penalty: Array1::from_vec(interference_penalty),
        cost: Array1::from_vec(cost),
        sampled_cost: Array1::from_vec(sampled_cost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn learning() -> LearningSpec {
        LearningSpec {
            lambda: 0.5,
            beta: 0.1,
            gamma: 1.0,
            tau: 0.1,
            ..LearningSpec::default()
        }
    }

    #[test]
    fn formula_by_hand() {
        let inputs = Inputs {
            mean: array![100.0, 50.0],
            stddev: array![30.0, 10.0],
            multiplier: array![1.0, 2.0],
            interference: array![0.2, 0.2],
            log_var: array![0.09, 0.01],
            sampled: array![80.0, 60.0],
            reference_runtime: 100.0,
        };
        let t = compute(&inputs, &learning());
        let ig0 = 0.5 * (1.0f64 + 0.09 / 0.01).ln();
        assert!((t.information_gain[0] - ig0).abs() < 1e-12);
        assert!((t.interference_penalty[1] - 2.0 * 0.2 * 50.0 / 100.0).abs() < 1e-12);
        let c0 = (100.0 + 15.0) / 100.0 + 0.2;
        assert!((t.cost[0] - c0).abs() < 1e-12, "{} vs {c0}", t.cost[0]);
        let s1 = 2.0 * 60.0 * 1.2 / 100.0 - 0.1 * t.information_gain[1];
        assert!((t.sampled_cost[1] - s1).abs() < 1e-12);
    }

    /// The terms as first written, with whole-array ndarray expressions.
    fn by_arrays(inputs: &Inputs, learning: &LearningSpec) -> Terms {
        use ndarray::Zip;
        let r = inputs.reference_runtime;
        let tau2 = learning.tau * learning.tau;
        let information_gain = inputs.log_var.mapv(|v| 0.5 * (1.0 + v / tau2).ln());
        let interference_penalty =
            &inputs.multiplier * &inputs.interference * &inputs.mean * (learning.gamma / r);
        let mut cost = Array1::zeros(inputs.mean.len());
        Zip::from(&mut cost)
            .and(&inputs.multiplier)
            .and(&inputs.mean)
            .and(&inputs.stddev)
            .and(&interference_penalty)
            .for_each(|c, &m, &mu, &s, &pen| *c = m * (mu + learning.lambda * s) / r + pen);
        let slowed = inputs.interference.mapv(|i| 1.0 + learning.gamma * i);
        let sampled_cost = &inputs.multiplier * &inputs.sampled * &slowed / r
            - &(&information_gain * learning.beta);
        Terms {
            information_gain,
            interference_penalty,
            cost,
            sampled_cost,
        }
    }

    #[test]
    fn the_same_bits_as_the_array_expressions() {
        let mut x = 7u64;
        let mut next = |scale: f64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            scale * ((x >> 11) as f64 / (1u64 << 53) as f64)
        };
        for _ in 0..200 {
            let n = 7;
            let inputs = Inputs {
                mean: (0..n).map(|_| next(50_000.0)).collect(),
                stddev: (0..n).map(|_| next(20_000.0)).collect(),
                multiplier: (0..n).map(|_| next(12.0)).collect(),
                interference: (0..n).map(|_| next(0.9)).collect(),
                log_var: (0..n).map(|_| next(1.5)).collect(),
                sampled: (0..n).map(|_| next(60_000.0)).collect(),
                reference_runtime: 1.0 + next(30_000.0),
            };
            let learning = LearningSpec {
                lambda: next(1.0),
                beta: next(0.5),
                gamma: next(2.0),
                tau: 0.05 + next(0.5),
                ..LearningSpec::default()
            };
            let (a, b) = (compute(&inputs, &learning), by_arrays(&inputs, &learning));
            for (x, y) in [
                (&a.information_gain, &b.information_gain),
                (&a.interference_penalty, &b.interference_penalty),
                (&a.cost, &b.cost),
                (&a.sampled_cost, &b.sampled_cost),
            ] {
                let bits = |v: &Array1<f64>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(x), bits(y));
            }
        }
    }

    #[test]
    fn zero_uncertainty_means_zero_information_gain() {
        let inputs = Inputs {
            mean: array![10.0],
            stddev: array![0.0],
            multiplier: array![1.0],
            interference: array![0.0],
            log_var: array![0.0],
            sampled: array![10.0],
            reference_runtime: 10.0,
        };
        let t = compute(&inputs, &learning());
        assert_eq!(t.information_gain[0], 0.0);
        assert_eq!(t.cost[0], 1.0);
    }
}
