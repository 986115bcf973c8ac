//! Interference between job types: the policy's prior matrix, learned from observed slowdowns.
//!
//! A pair's slowdown s (0.3 = 30 % longer) is learned in log space: each observation of the pair is
//! ln(1 + s_observed), where s_observed is how much longer the run took than the (interference-free)
//! runtime estimate, less what the other co-located job types account for. Observations are not clamped
//! at 0, so run-to-run noise averages out instead of piling up as phantom interference. Pairs are
//! unordered.
//!
//! **Weighted**: an excess measured against a runtime estimate known to ±√v, next to other neighbours whose
//! slowdowns are known to ±√v_j (ln), has noise τ² + v + Σ v_j, not τ², so the observation weighs
//! w = τ²/(τ² + v + Σ v_j) of a run next to the pair alone measured against a known runtime (a weighted
//! mean; the weights sum in place of the count; [`log_variance`] is v_j). The first runs of a new job
//! type, whose runtime is still known to ±50 %, then no longer put a harmless neighbour on its avoid-list
//! (avoid-list precision 0.81 → 0.91 over five seeds of `loadgen learn`), and a run next to two
//! job types teaches each pair less while the other's slowdown is unknown (without it, what an
//! unknown harmful neighbour did not explain went to the harmless one, precision 0.77 on the Sia truth).
//!
//! The estimate is Bayesian with a check of the prior: either the prior ln(1 + prior) is right, weighing
//! as `priorStrength` observations (variance τ²/k), or it is wrong and the pair can be anything (variance
//! [`VAGUE`]², held a priori [`PRIOR_WRONG`] likely, as for runtimes). The two posteriors are averaged by
//! how well each explains the pair's observations (their count and mean, noise τ), so a pair the prior
//! calls harmless that hurts in two or three runs reaches the avoid-list, where the prior alone would
//! hold it back for a dozen.
//!
//! **Per tenant pair** ([`InterferenceTable::directed`]): when the two job types of a pair have different
//! owners ([`super::tenants`]), a run's slowdown is kept per direction, under (the job type that ran, its
//! neighbour), and read only for the avoid-list and cost of the job type whose runs it came from. So a
//! tenant's runs, true or fake, next to another tenant's job type put nothing on that job type's
//! avoid-list and change none of its costs (the bound is zero entries); they teach the reporting
//! tenant's own job type to avoid its neighbour. A pair with a job type no tenant owns yet (or runs
//! without a namespace) is learned unordered, as before.
//!
//! Bounded: at most [`MAX_PAIRS`] pairs (unordered and directed together) are kept; past that the pair seen least recently is forgotten (it
//! falls back to its prior), and the pairs of an evicted unlisted job type go with it.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::estimate::Stat;
use super::related::Related;
use crate::policy::Policy;

/// Most pairs kept.
pub const MAX_PAIRS: usize = 2048;
/// σ (ln) of a pair's slowdown when its prior is wrong.
pub const VAGUE: f64 = 0.5;
/// A priori chance that a prior (runtime or interference) is wrong.
pub const PRIOR_WRONG: f64 = 0.2;

/// Observed slowdowns, keyed by the lexically smaller job type, then the larger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterferenceTable {
    pub pairs: BTreeMap<String, BTreeMap<String, Stat>>,
    /// Slowdowns of pairs whose job types have different owners, keyed by the job type that ran, then its
    /// neighbour (see the module's doc; absent in older snapshots and while there are none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub directed: BTreeMap<String, BTreeMap<String, Stat>>,
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

    /// What `a`'s avoid-list and costs read of the pair: its own runs next to `b` when the two have different
    /// owners (kept per direction), else the unordered pair.
    pub fn view(&self, a: &str, b: &str) -> Stat {
        self.directed
            .get(a)
            .and_then(|m| m.get(b))
            .copied()
            .unwrap_or_else(|| self.get(a, b))
    }

    /// Records one observed slowdown of the pair (clamped to > −50 %, a guard against nonsense) at
    /// sequence number `seq`; past [`MAX_PAIRS`] the least recently seen pair is forgotten.
    #[cfg(test)]
    pub fn record(&mut self, a: &str, b: &str, slowdown: f64, seq: u64) {
        self.record_weighted(a, b, slowdown, 1.0, seq);
    }

    /// Records one observed slowdown weighing `weight` (in (0, 1], see the module's doc), clamped to
    /// more than −50 % (a guard against nonsense), at sequence number `seq`; past [`MAX_PAIRS`] the
    /// least recently seen pair is forgotten (then `true`).
    pub fn record_weighted(
        &mut self,
        a: &str,
        b: &str,
        slowdown: f64,
        weight: f64,
        seq: u64,
    ) -> bool {
        let (lo, hi) = ordered(a, b);
        self.add(false, lo, hi, slowdown, weight, seq)
    }

    /// [`InterferenceTable::record_weighted`] for a run of `ran` next to `neighbour` when the two have
    /// different owners: kept for `ran`'s reading only ([`InterferenceTable::view`]).
    pub fn record_directed(
        &mut self,
        ran: &str,
        neighbour: &str,
        slowdown: f64,
        weight: f64,
        seq: u64,
    ) -> bool {
        self.add(true, ran, neighbour, slowdown, weight, seq)
    }

    /// Whether a pair was forgotten to make room.
    fn add(
        &mut self,
        directed: bool,
        a: &str,
        b: &str,
        slowdown: f64,
        weight: f64,
        seq: u64,
    ) -> bool {
        let table = if directed {
            &mut self.directed
        } else {
            &mut self.pairs
        };
        let stat = table
            .entry(a.to_string())
            .or_default()
            .entry(b.to_string())
            .or_default();
        stat.add_weighted(slowdown.max(-0.5).ln_1p(), weight);
        stat.last = seq;
        if self.len() > MAX_PAIRS {
            let oldest = |t: &BTreeMap<String, BTreeMap<String, Stat>>, d: bool| {
                t.iter()
                    .flat_map(|(a, m)| {
                        m.iter()
                            .map(move |(b, s)| (s.last, d, a.clone(), b.clone()))
                    })
                    .min()
            };
            let oldest = [oldest(&self.pairs, false), oldest(&self.directed, true)]
                .into_iter()
                .flatten()
                .min();
            if let Some((_, d, a, b)) = oldest {
                Self::remove_pair(
                    if d {
                        &mut self.directed
                    } else {
                        &mut self.pairs
                    },
                    &a,
                    &b,
                );
                return true;
            }
        }
        false
    }

    fn remove_pair(table: &mut BTreeMap<String, BTreeMap<String, Stat>>, a: &str, b: &str) {
        if let Some(m) = table.get_mut(a) {
            m.remove(b);
            if m.is_empty() {
                table.remove(a);
            }
        }
    }

    /// Forgets every pair of `job_type` (evicted).
    pub fn remove_job(&mut self, job_type: &str) {
        for table in [&mut self.pairs, &mut self.directed] {
            table.remove(job_type);
            for m in table.values_mut() {
                m.remove(job_type);
            }
            table.retain(|_, m| !m.is_empty());
        }
    }

    /// Pairs kept (unordered and directed).
    pub fn len(&self) -> usize {
        [&self.pairs, &self.directed]
            .iter()
            .flat_map(|t| t.values())
            .map(BTreeMap::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty() && self.directed.is_empty()
    }
}

/// The prior slowdown between two job types (the policy's default for pairs it does not list or
/// job types it does not know).
/// A tenant's own name for a job type has that job type's prior.
pub fn prior_slowdown(policy: &Policy, a: &str, b: &str) -> f64 {
    use super::tenants::base;
    match (policy.job_index(base(a)), policy.job_index(base(b))) {
        (Some(i), Some(j)) => policy.interference_prior[[i, j]],
        _ => policy.default_slowdown,
    }
}

/// The current estimate of the slowdown between two job types (see the module's doc).
pub fn slowdown(policy: &Policy, learned: &InterferenceTable, a: &str, b: &str) -> f64 {
    slowdown_from(policy, learned, prior_slowdown(policy, a, b), a, b)
}

/// [`slowdown`] with the pair's prior slowdown already looked up.
fn slowdown_from(
    policy: &Policy,
    learned: &InterferenceTable,
    prior_slowdown: f64,
    a: &str,
    b: &str,
) -> f64 {
    log_posterior(policy, learned, prior_slowdown, a, b)
        .0
        .exp_m1()
        .max(0.0)
}

/// The posterior mean of the pair's slowdown itself, E[s] = E[exp(ln(1 + s))] − 1 over the two models of
/// [`log_posterior`] (each normal in ln: exp(m + v/2)), for the avoid-list: a pair is listed when the
/// slowdown it is expected to cost is above the threshold, not only when it is more likely than not above
/// it (what exp(E[ln(1 + s)]) − 1, the median, says). So a pair whose few runs hurt, and whose estimate
/// is still wide, is listed before a dozen runs have made it sure; a pair known to be harmless is not.
/// "Prior wrong" is read as `a`'s other pairs say ([`super::related`]).
fn expected_slowdown_from(
    policy: &Policy,
    learned: &InterferenceTable,
    related: &Related,
    prior_slowdown: f64,
    (a, b): (&str, &str),
) -> f64 {
    let prior = prior_slowdown.max(0.0).ln_1p();
    // The neighbour's name as `a` reads it, made once for both readings.
    let read_as = read_name(policy, a, b);
    let wrong = related.wrong_model_of(&read_as, prior);
    models_of(policy, learned.view(a, &read_as), prior, wrong)
        .iter()
        .map(|&(w, m, v)| w * (m + v / 2.0).exp())
        .sum::<f64>()
        - 1.0
}

/// The posterior mean and variance of the pair's ln(1 + slowdown): the model average of "prior right" and
/// "prior wrong" (see the module's doc); before any run, the two priors mixed at their a priori odds.
fn log_posterior(
    policy: &Policy,
    learned: &InterferenceTable,
    prior_slowdown: f64,
    a: &str,
    b: &str,
) -> (f64, f64) {
    let [(w_right, m_right, v_right), (w_wrong, m_wrong, v_wrong)] =
        log_models(policy, learned, prior_slowdown, a, b);
    if m_right == m_wrong {
        // Before any run: the two priors' common mean, their variances mixed.
        return (m_right, w_right * v_right + w_wrong * v_wrong);
    }
    let m = w_right * m_right + w_wrong * m_wrong;
    let second = w_right * (v_right + m_right * m_right) + w_wrong * (v_wrong + m_wrong * m_wrong);
    (m, (second - m * m).max(0.0))
}

/// The two models of the pair's ln(1 + slowdown), "prior right" and "prior wrong", each as (posterior
/// weight, mean, variance).
fn log_models(
    policy: &Policy,
    learned: &InterferenceTable,
    prior_slowdown: f64,
    a: &str,
    b: &str,
) -> [(f64, f64, f64); 2] {
    let prior = prior_slowdown.max(0.0).ln_1p();
    models_of(
        policy,
        read_stat(policy, learned, a, b),
        prior,
        (PRIOR_WRONG, prior),
    )
}

/// The runs of the pair `a` reads next to `b` (a tenant's own name reads its neighbours as its tenant
/// learned them).
fn read_stat(policy: &Policy, learned: &InterferenceTable, a: &str, b: &str) -> Stat {
    learned.view(a, &read_name(policy, a, b))
}

/// The name `a` reads its neighbour `b` under ([`InterferenceTable::view`]): a tenant's own name reads its
/// tenant's names.
pub(super) fn read_name<'b>(policy: &Policy, a: &str, b: &'b str) -> std::borrow::Cow<'b, str> {
    match super::tenants::tenant_in(a) {
        Some(t) => super::tenants::neighbour_of(policy, Some(t), b),
        None => std::borrow::Cow::Borrowed(b),
    }
}

/// [`log_models`] of the runs `stat` against the prior `prior` (ln), "prior wrong" held a priori `p_wrong`
/// likely and centred at `wrong_at` (ln; today's reading: [`PRIOR_WRONG`] and the prior itself, what
/// [`super::related`] changes for the avoid-list).
pub(super) fn models_of(
    policy: &Policy,
    stat: Stat,
    prior: f64,
    (p_wrong, wrong_at): (f64, f64),
) -> [(f64, f64, f64); 2] {
    let noise = policy.learning.tau.powi(2);
    let (v_right, v_wrong) = (noise / policy.learning.prior_strength, VAGUE * VAGUE);
    if stat.count == 0 {
        return [
            (1.0 - p_wrong, prior, v_right),
            (p_wrong, wrong_at, v_wrong),
        ];
    }
    let n = stat.weight();
    let m = stat.mean();
    let variance = |v: f64| 1.0 / (1.0 / v + n / noise);
    let mean = |v: f64, at: f64| variance(v) * (at / v + n * m / noise);
    let evidence = |v: f64, at: f64| {
        let var = v + noise / n;
        -0.5 * ((m - at).powi(2) / var + var.ln())
    };
    let (right, wrong) = (
        evidence(v_right, prior) + (1.0 - p_wrong).ln(),
        evidence(v_wrong, wrong_at) + p_wrong.ln(),
    );
    let w_wrong = 1.0 / (1.0 + (right - wrong).exp());
    [
        (1.0 - w_wrong, mean(v_right, prior), variance(v_right)),
        (w_wrong, mean(v_wrong, wrong_at), variance(v_wrong)),
    ]
}

/// The posterior variance of ln(1 + slowdown) of `a` next to `b`: how uncertain the pair's part of a
/// co-located run's prediction is.
pub fn log_variance(policy: &Policy, learned: &InterferenceTable, a: &str, b: &str) -> f64 {
    log_posterior(policy, learned, prior_slowdown(policy, a, b), a, b).1
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

/// Most job types on one avoid-list (each becomes an anti-affinity term of the Pod): the most harmful
/// are kept, so no amount of (true or claimed) co-location grows a Pod's terms past this. Above the
/// number of job types a catalog of measured interference hurts a job type with (Gavel's: 24.6 of 26 on
/// average, docs/measurements/2026-11-29-learning-truths.md), so the list says all of them.
pub const MAX_AVOID: usize = 32;

/// Job types (listed, or among `unlisted`: those learned; never a tenant's own name for a job type) that
/// `job_type` (a tenant's own name for a job type reads its tenant's runs, [`InterferenceTable::view`]) is
/// to avoid: those whose (prior or learned) slowdown with `job_type` is above the anti-affinity threshold, the
/// [`MAX_AVOID`] most harmful of them, sorted by name. The listed job types' priors are read by index (one
/// name lookup per call, not two per pair).
pub fn avoid_list<'a>(
    policy: &'a Policy,
    learned: &InterferenceTable,
    unlisted: impl IntoIterator<Item = &'a String>,
    job_type: &str,
) -> Vec<String> {
    let me = policy.job_index(super::tenants::base(job_type));
    let related = Related::of(policy, learned, job_type);
    let above = |prior: f64, other: &'a String| {
        let s = expected_slowdown_from(policy, learned, &related, prior, (job_type, other));
        (s > policy.anti_affinity_threshold).then_some((other, s))
    };
    let listed = policy
        .job_types
        .iter()
        .enumerate()
        .filter_map(|(j, other)| {
            let prior = me.map_or(policy.default_slowdown, |i| {
                policy.interference_prior[[i, j]]
            });
            above(prior, &other.name)
        });
    let mut avoid: Vec<(&String, f64)> = listed
        .chain(
            unlisted
                .into_iter()
                .filter(|other| !super::tenants::is_tenant_name(other))
                .filter_map(|other| above(prior_slowdown(policy, job_type, other), other)),
        )
        .collect();
    avoid.sort_by(|a, b| a.0.cmp(b.0));
    avoid.dedup_by(|a, b| a.0 == b.0);
    if avoid.len() > MAX_AVOID {
        avoid.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        avoid.truncate(MAX_AVOID);
        avoid.sort_by(|a, b| a.0.cmp(b.0));
    }
    avoid.into_iter().map(|(n, _)| n.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn an_avoid_list_keeps_the_most_harmful_job_types_only() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        let names: Vec<String> = (0..MAX_AVOID + 12)
            .map(|k| format!("noisy-{k:02}"))
            .collect();
        for (k, name) in names.iter().enumerate() {
            for i in 0..30 {
                let slowdown = 0.5 + k as f64 / 10.0;
                learned.record(name, "notebook", slowdown, (k * 30 + i) as u64 + 1);
            }
        }
        let list = avoid_list(&policy, &learned, &names, "notebook");
        assert_eq!(list.len(), MAX_AVOID);
        let mut sorted = list.clone();
        sorted.sort();
        assert_eq!(list, sorted, "by name");
        // The MAX_AVOID most harmful: nothing left off is expected to cost more than anything kept. The listed
        // job types notebook never ran next to are among them: its 44 learned neighbours all hurt it by more
        // than half, so the next one is expected to ([`super::related`]).
        let cost = |o: &String| expected_slowdown(&policy, &learned, "notebook", o);
        let listed: Vec<String> = policy.job_types.iter().map(|j| j.name.clone()).collect();
        let kept = list.iter().map(cost).fold(f64::INFINITY, f64::min);
        let left = listed
            .iter()
            .chain(&names)
            .filter(|o| !list.contains(o))
            .map(cost)
            .fold(f64::NEG_INFINITY, f64::max);
        assert!(kept >= left, "kept from {kept}, left off up to {left}");
        // Among the learned ones, the most harmful (the last ones).
        let learned_kept: Vec<&String> = list.iter().filter(|o| names.contains(o)).collect();
        let expected: Vec<String> = (names.len() - learned_kept.len()..names.len())
            .map(|k| format!("noisy-{k:02}"))
            .collect();
        assert_eq!(learned_kept, expected.iter().collect::<Vec<_>>());
    }

    /// What the avoid-list compares with the threshold: the expected slowdown.
    fn expected_slowdown(policy: &Policy, learned: &InterferenceTable, a: &str, b: &str) -> f64 {
        let related = Related::of(policy, learned, a);
        expected_slowdown_from(
            policy,
            learned,
            &related,
            prior_slowdown(policy, a, b),
            (a, b),
        )
    }

    #[test]
    fn a_declared_slowdown_is_read_as_the_slowdown_it_is_expected_to_cost() {
        let policy = embedded_default().unwrap();
        let learned = InterferenceTable::default();
        // Prior: train-llama/train-llama 0.45, /finetune-llm 0.40, /inference-llm 0.35, /batch-embedding 0.20,
        // threshold 0.3.
        assert_eq!(
            avoid_list(&policy, &learned, [], "train-llama"),
            ["finetune-llm", "inference-llm", "train-llama"]
        );
        // finetune-llm/inference-llm is declared exactly 0.30, its median; a declared value is wrong 1 time in
        // 5 (then anything within ±50 % in ln), so the slowdown it is expected to cost is 1.30 × 1.031 − 1 =
        // 0.34: above the threshold. batch-embedding's 0.20 is expected to cost 0.24: not.
        let e = expected_slowdown(&policy, &learned, "finetune-llm", "inference-llm");
        assert!((e - 0.340).abs() < 0.001, "{e}");
        let median = slowdown(&policy, &learned, "finetune-llm", "inference-llm");
        assert!((median - 0.30).abs() < 1e-9, "{median}");
        assert_eq!(
            avoid_list(&policy, &learned, [], "finetune-llm"),
            ["finetune-llm", "inference-llm", "train-llama"]
        );
        assert!(
            !avoid_list(&policy, &learned, [], "batch-embedding")
                .contains(&"train-llama".to_string())
        );
        assert!(avoid_list(&policy, &learned, [], "notebook").is_empty());
        // Unknown job types get the default slowdown, far below the threshold.
        assert!(avoid_list(&policy, &learned, [], "mystery").is_empty());
    }

    #[test]
    fn learned_slowdown_moves_a_pair_over_the_threshold_and_back() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        assert!(!avoid_list(&policy, &learned, [], "notebook").contains(&"batch-etl".to_string()));
        for _ in 0..20 {
            learned.record("batch-etl", "notebook", 0.8, 1);
        }
        // Symmetric: recorded as (batch-etl, notebook), read from either side.
        assert!(slowdown(&policy, &learned, "notebook", "batch-etl") > 0.6);
        assert!(avoid_list(&policy, &learned, [], "notebook").contains(&"batch-etl".to_string()));
        assert!(avoid_list(&policy, &learned, [], "batch-etl").contains(&"notebook".to_string()));
        for _ in 0..200 {
            learned.record("notebook", "batch-etl", 0.0, 2);
        }
        assert!(!avoid_list(&policy, &learned, [], "notebook").contains(&"batch-etl".to_string()));
    }

    #[test]
    fn a_run_measured_against_an_uncertain_runtime_weighs_less() {
        let policy = embedded_default().unwrap();
        let (mut sure, mut unsure) = (InterferenceTable::default(), InterferenceTable::default());
        for _ in 0..3 {
            sure.record_weighted("batch-etl", "notebook", 0.8, 1.0, 1);
            unsure.record_weighted("batch-etl", "notebook", 0.8, 0.1, 1);
        }
        let (s, u) = (
            slowdown(&policy, &sure, "notebook", "batch-etl"),
            slowdown(&policy, &unsure, "notebook", "batch-etl"),
        );
        // Three sure runs put the pair over the threshold; three runs a tenth as informative do not.
        assert!(s > 0.3 && u < 0.3, "sure {s}, unsure {u}");
        assert_eq!(unsure.get("notebook", "batch-etl").count, 3);
        assert!((unsure.get("notebook", "batch-etl").weight() - 0.3).abs() < 1e-9);
        // The weighted mean is still the mean of the values.
        assert!((unsure.get("batch-etl", "notebook").mean() - 0.8f64.ln_1p()).abs() < 1e-6);
    }

    #[test]
    fn avoid_list_is_every_job_type_whose_slowdown_is_above_the_threshold() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        learned.record("batch-etl", "notebook", 0.8, 1);
        learned.record("mystery", "train-llama", 0.9, 2);
        learned.record("mystery", "other", 0.6, 3);
        learned.record("train-llama", "finetune-llm", -0.4, 4);
        let unlisted = [
            "mystery".to_string(),
            "other".to_string(),
            "notebook".to_string(),
        ];
        let names: Vec<String> = policy.job_types.iter().map(|j| j.name.clone()).collect();
        let mut found = 0;
        for job_type in names.iter().chain(&unlisted) {
            let mut expected: Vec<String> = names
                .iter()
                .chain(&unlisted)
                .filter(|o| {
                    expected_slowdown(&policy, &learned, job_type, o)
                        > policy.anti_affinity_threshold
                })
                .cloned()
                .collect();
            expected.sort();
            expected.dedup();
            let got = avoid_list(&policy, &learned, &unlisted, job_type);
            assert_eq!(got, expected, "{job_type}");
            found += got.len();
        }
        assert!(
            found > 5,
            "too few pairs above the threshold to check anything"
        );
    }

    #[test]
    fn a_pair_that_hurt_in_its_few_runs_is_listed_before_its_median_is_above_the_threshold() {
        let policy = embedded_default().unwrap();
        let (mut few, mut many) = (InterferenceTable::default(), InterferenceTable::default());
        // Unlisted job types: the pair's prior is the default 0.05.
        let noisy = ["noisy".to_string()];
        few.record("noisy", "quiet", 0.66, 1);
        for i in 0..40 {
            many.record("noisy", "quiet", 0.25, i + 1);
        }
        let t = policy.anti_affinity_threshold;
        let listed = |l: &InterferenceTable| avoid_list(&policy, l, &noisy, "quiet") == noisy;
        // One run 66 % slower against a prior of 0.05: more likely than not below 0.3, but the slowdown the
        // pair is expected to cost (the prior may be wrong, and one run says little) is above it: listed.
        let (median, mean) = (
            slowdown(&policy, &few, "quiet", "noisy"),
            expected_slowdown(&policy, &few, "quiet", "noisy"),
        );
        assert!(median < t && mean > t, "median {median}, mean {mean}");
        assert!(listed(&few));
        // Forty runs 25 % slower: sure, the two readings agree, and the pair is not listed.
        let (median, mean) = (
            slowdown(&policy, &many, "quiet", "noisy"),
            expected_slowdown(&policy, &many, "quiet", "noisy"),
        );
        assert!(
            mean < t && (mean - median).abs() < 0.01,
            "median {median}, mean {mean}"
        );
        assert!(!listed(&many));
        // Score's reading is unchanged: the log posterior is the same two models mixed.
        let (m, v) = log_posterior(&policy, &few, 0.05, "quiet", "noisy");
        let models = log_models(&policy, &few, 0.05, "quiet", "noisy");
        let m2: f64 = models.iter().map(|&(w, m, _)| w * m).sum();
        let s2: f64 = models.iter().map(|&(w, m, v)| w * (v + m * m)).sum();
        assert!((m - m2).abs() < 1e-12 && (v - (s2 - m2 * m2)).abs() < 1e-12);
    }

    #[test]
    fn a_pairs_log_variance_is_the_two_priors_mixed_then_shrinks_with_runs() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        let tau2 = policy.learning.tau.powi(2);
        let prior = (1.0 - PRIOR_WRONG) * tau2 / policy.learning.prior_strength
            + PRIOR_WRONG * VAGUE * VAGUE;
        let v0 = log_variance(&policy, &learned, "notebook", "batch-etl");
        assert!((v0 - prior).abs() < 1e-12, "{v0} vs {prior}");
        // Runs as the prior says: the prior was right, the variance that of k + n observations.
        let at_prior = prior_slowdown(&policy, "notebook", "batch-etl");
        for i in 0..40 {
            learned.record("notebook", "batch-etl", at_prior, i + 1);
        }
        let v = log_variance(&policy, &learned, "batch-etl", "notebook");
        assert!(
            v < 1.2 * tau2 / (policy.learning.prior_strength + 40.0),
            "{v}"
        );
        // Runs far from the prior: the variance is the vague posterior's, the mean the runs'.
        let mut far = InterferenceTable::default();
        for i in 0..3 {
            far.record("notebook", "batch-etl", 1.0, i + 1);
        }
        let v = log_variance(&policy, &far, "notebook", "batch-etl");
        let vague = 1.0 / (1.0 / (VAGUE * VAGUE) + 3.0 / tau2);
        assert!((v - vague).abs() < 0.2 * vague, "{v} vs {vague}");
        assert!(slowdown(&policy, &far, "notebook", "batch-etl") > 0.8);
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
