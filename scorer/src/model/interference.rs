//! Interference between job types: the policy's prior matrix, learned from observed slowdowns.
//!
//! A pair's slowdown s (0.3 = 30 % longer) is learned in log space: each observation of the pair is
//! ln(1 + s_observed), where s_observed is how much longer the run took than the (interference-free)
//! runtime estimate, less what the other co-located job types account for. The mean is shrunk toward
//! ln(1 + prior), the prior weighing as `priorStrength` observations; s = e^mean − 1. Observations are
//! not clamped at 0, so run-to-run noise averages out instead of piling up as phantom interference.
//! Pairs are unordered.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::estimate::Stat;
use crate::policy::Policy;

/// Observed slowdowns, keyed by the lexically smaller job type, then the larger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterferenceTable {
    pub pairs: BTreeMap<String, BTreeMap<String, Stat>>,
}

fn ordered<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    if a <= b { (a, b) } else { (b, a) }
}

impl InterferenceTable {
    pub fn get(&self, a: &str, b: &str) -> Stat {
        let (lo, hi) = ordered(a, b);
        self.pairs
            .get(lo)
            .and_then(|m| m.get(hi))
            .copied()
            .unwrap_or_default()
    }

    /// Records one observed slowdown of the pair (clamped to > −50 %, a guard against nonsense).
    pub fn record(&mut self, a: &str, b: &str, slowdown: f64) {
        let (lo, hi) = ordered(a, b);
        self.pairs
            .entry(lo.to_string())
            .or_default()
            .entry(hi.to_string())
            .or_default()
            .add(slowdown.max(-0.5).ln_1p());
    }
}

/// The prior slowdown between two job types (the policy's default for pairs it does not list or
/// job types it does not know).
pub fn prior_slowdown(policy: &Policy, a: &str, b: &str) -> f64 {
    match (policy.job_index(a), policy.job_index(b)) {
        (Some(i), Some(j)) => policy.interference_prior[[i, j]],
        _ => policy.default_slowdown,
    }
}

/// The current estimate of the slowdown between two job types.
pub fn slowdown(policy: &Policy, learned: &InterferenceTable, a: &str, b: &str) -> f64 {
    let prior = prior_slowdown(policy, a, b).max(0.0).ln_1p();
    learned
        .get(a, b)
        .shrunk_mean(prior, policy.learning.prior_strength)
        .exp_m1()
        .max(0.0)
}

/// Sum of the slowdowns `job_type` suffers from each (distinct) co-located job type.
pub fn total_slowdown(
    policy: &Policy,
    learned: &InterferenceTable,
    job_type: &str,
    colocated: &[String],
) -> f64 {
    let mut seen: Vec<&str> = Vec::with_capacity(colocated.len());
    let mut total = 0.0;
    for other in colocated {
        if !seen.contains(&other.as_str()) {
            seen.push(other);
            total += slowdown(policy, learned, job_type, other);
        }
    }
    total
}

/// Known job types whose (prior or learned) slowdown with `job_type` is above the anti-affinity
/// threshold, sorted by name.
pub fn avoid_list(policy: &Policy, learned: &InterferenceTable, job_type: &str) -> Vec<String> {
    let mut avoid: Vec<String> = policy
        .job_types
        .iter()
        .filter(|other| {
            slowdown(policy, learned, job_type, &other.name) > policy.anti_affinity_threshold
        })
        .map(|other| other.name.clone())
        .collect();
    avoid.sort();
    avoid
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn avoid_list_uses_the_threshold_strictly() {
        let policy = embedded_default().unwrap();
        let learned = InterferenceTable::default();
        // Prior: train-llama/train-llama 0.45, /finetune-llm 0.40, /inference-llm 0.35, /batch-embedding 0.20,
        // threshold 0.3.
        assert_eq!(
            avoid_list(&policy, &learned, "train-llama"),
            ["finetune-llm", "inference-llm", "train-llama"]
        );
        // finetune-llm/inference-llm is exactly 0.30: not above the threshold.
        assert_eq!(
            avoid_list(&policy, &learned, "finetune-llm"),
            ["finetune-llm", "train-llama"]
        );
        assert!(avoid_list(&policy, &learned, "notebook").is_empty());
        // Unknown job types get the default slowdown, far below the threshold.
        assert!(avoid_list(&policy, &learned, "mystery").is_empty());
    }

    #[test]
    fn learned_slowdown_moves_a_pair_over_the_threshold_and_back() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        assert!(!avoid_list(&policy, &learned, "notebook").contains(&"batch-etl".to_string()));
        for _ in 0..20 {
            learned.record("batch-etl", "notebook", 0.8);
        }
        // Symmetric: recorded as (batch-etl, notebook), read from either side.
        assert!(slowdown(&policy, &learned, "notebook", "batch-etl") > 0.6);
        assert!(avoid_list(&policy, &learned, "notebook").contains(&"batch-etl".to_string()));
        assert!(avoid_list(&policy, &learned, "batch-etl").contains(&"notebook".to_string()));
        for _ in 0..200 {
            learned.record("notebook", "batch-etl", 0.0);
        }
        assert!(!avoid_list(&policy, &learned, "notebook").contains(&"batch-etl".to_string()));
    }

    #[test]
    fn total_counts_each_colocated_type_once() {
        let policy = embedded_default().unwrap();
        let learned = InterferenceTable::default();
        let twice = vec![
            "inference-llm".to_string(),
            "inference-llm".to_string(),
            "notebook".to_string(),
        ];
        let t = total_slowdown(&policy, &learned, "train-llama", &twice);
        assert!((t - (0.35 + 0.05)).abs() < 1e-12, "{t}");
    }
}
