//! How much more co-location hurts on one GPU class than on another: a per-class contention factor.
//!
//! The same neighbour slows a job more on a slower, smaller GPU (it has less to share) than on a big one.
//! The slowdown of a job next to job types k on class c is modelled as f_c · Σ_k s_k, with s_k the pair's
//! slowdown ([`super::interference`], learned from runs on whatever classes the pair met) and f_c the
//! class's factor. f_c is learned by least squares through the origin from every co-located run on c:
//! x = the run's observed excess over its interference-free estimate, S = Σ_k s_k as estimated then,
//! f_c = (W + Σ S·x) / (W + Σ S²), where the prior f_c = 1 weighs as [`PRIOR_WEIGHT`] (as much as ten runs
//! next to a 0.15 slowdown). The factors are normalised to a geometric mean of 1 over the catalog. The
//! pairs themselves are learned from the undivided excess: dividing it by f_c would feed the factors back
//! into the pairs they are measured against.
//!
//! Bounded: one entry per GPU class name; sums in fixed point like [`super::estimate::Stat`].
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::Policy;

/// Weight (in units of S²) of the prior factor 1.
pub const PRIOR_WEIGHT: f64 = 10.0 * 0.15 * 0.15;
/// A factor stays within [1/`LIMIT`, `LIMIT`] (a guard against nonsense).
pub const LIMIT: f64 = 4.0;
const UNIT: f64 = 4_294_967_296.0;

/// Σ S·x and Σ S² of one class, fixed point (units of 2⁻³²).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sums {
    #[serde(rename = "n")]
    pub count: u64,
    #[serde(rename = "sx")]
    pub cross: i64,
    #[serde(rename = "ss")]
    pub square: i64,
}

/// Per GPU class (by name), the co-located runs seen on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContentionTable {
    pub by_class: BTreeMap<String, Sums>,
}

impl ContentionTable {
    /// Records a co-located run on `class`: expected class-neutral slowdown `expected`, observed excess
    /// `excess`.
    pub fn record(&mut self, class: &str, expected: f64, excess: f64) {
        let s = self.by_class.entry(class.to_string()).or_default();
        s.count += 1;
        s.cross = s
            .cross
            .saturating_add((expected * excess * UNIT).round() as i64);
        s.square = s
            .square
            .saturating_add((expected * expected * UNIT).round() as i64);
    }

    /// The raw (not normalised) factor of `class`.
    fn raw(&self, class: &str) -> f64 {
        let s = self.by_class.get(class).copied().unwrap_or_default();
        let (cross, square) = (s.cross as f64 / UNIT, s.square as f64 / UNIT);
        ((PRIOR_WEIGHT + cross) / (PRIOR_WEIGHT + square)).clamp(1.0 / LIMIT, LIMIT)
    }

    /// Every class's factor (catalog order), normalised to a geometric mean of 1.
    pub fn factors(&self, policy: &Policy) -> Vec<f64> {
        let raw: Vec<f64> = policy.classes.iter().map(|c| self.raw(&c.name)).collect();
        let n = raw.len().max(1) as f64;
        let geo = (raw.iter().map(|f| f.ln()).sum::<f64>() / n).exp();
        raw.iter().map(|f| f / geo).collect()
    }

    /// The factor of class `c` (index into the catalog).
    pub fn factor(&self, policy: &Policy, c: usize) -> f64 {
        self.factors(policy)[c]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn no_runs_no_difference_between_classes() {
        let policy = embedded_default().unwrap();
        let t = ContentionTable::default();
        assert!(t.factors(&policy).iter().all(|&f| (f - 1.0).abs() < 1e-12));
    }

    #[test]
    fn a_class_where_neighbours_hurt_twice_as_much_gets_twice_the_factor() {
        let policy = embedded_default().unwrap();
        let mut t = ContentionTable::default();
        for _ in 0..200 {
            t.record("L4-24GB", 0.3, 0.6);
            t.record("H100-80GB", 0.3, 0.3);
        }
        let (l4, h100) = (
            policy.class_index("L4-24GB").unwrap(),
            policy.class_index("H100-80GB").unwrap(),
        );
        let f = t.factors(&policy);
        assert!((f[l4] / f[h100] - 2.0).abs() < 0.1, "{f:?}");
        let geo: f64 = f.iter().map(|x| x.ln()).sum::<f64>();
        assert!(geo.abs() < 1e-9);
        assert_eq!(t.factor(&policy, l4), f[l4]);
        // Nonsense stays bounded.
        for _ in 0..1000 {
            t.record("A100-80GB", 0.1, 100.0);
        }
        let a100 = policy.class_index("A100-80GB").unwrap();
        assert!(t.factors(&policy)[a100] <= LIMIT * LIMIT);
    }
}
