//! What a job type's other pairs say of a pair it has few runs of, for its avoid-list.
//!
//! A pair's estimate ([`super::interference`]) checks its prior against the pair's own runs: "prior right"
//! or "prior wrong" (then anything, centred at the prior, ±[`VAGUE`] in ln), the latter held a priori
//! [`PRIOR_WRONG`] likely for every pair alike. A pair with no or one or two runs then reads almost its
//! prior, however often its job type's other pairs have shown their priors wrong, and by how much. Measured
//! co-location is not like that: a job type whose other neighbours slow it down by half is likely slowed
//! down by the next one too (Gavel's measured slowdowns are above the threshold for 24.6 of 26 neighbours on
//! average; docs/measurements/2026-11-29-learning-truths.md).
//!
//! So for the avoid-list of `a`, a pair (a, b) borrows from a's other learned pairs (those a reads: its
//! unordered pairs and its own directed ones, never another job type's, so nobody's runs next to a
//! tenant's job type say anything of any other job type's list), two things, both empirical Bayes:
//! - **how likely its prior is wrong**: each other pair counts as wrong by its own posterior weight of
//!   "prior wrong" (a soft count), against a Beta prior of one pair in 1/[`PRIOR_WRONG`]
//!   (Beta(1, 1/[`PRIOR_WRONG`] − 1), mean [`PRIOR_WRONG`]): p = (1 + Σ w_wrong) / (1/[`PRIOR_WRONG`] + N),
//!   never below [`PRIOR_WRONG`]. The floor is what a job type's list is for: pairs whose priors held say
//!   little of the rare one that hurts (on the truths of `loadgen learn` whose harmful pairs are one in ten,
//!   letting p fall below [`PRIOR_WRONG`] lost recall, −0.012 and −0.014, and bought no precision;
//!   docs/measurements/2026-11-30-learning-round-seven.md);
//! - **where "prior wrong" is centred**: the mean of the wrong pairs' slowdowns (ln), each pair's mean
//!   m_k an observation of it with variance [`VAGUE`]² + τ²/n_k weighing its w_wrong, the pair's own prior
//!   (ln) the centre's prior with variance [`VAGUE`]².
//!
//! With no other pair learned this is exactly the pair's own reading (p = [`PRIOR_WRONG`], centred at the
//! prior), so prior-only avoid-lists do not move. A pair's own runs still decide once there are a few: one
//! run milder than its job type's other pairs pulls the pair below them. No new constant; Score's costs do not read it (they read
//! the pair's own median, [`super::interference::slowdown`]), and nothing is added to the learned state.
use super::estimate::Stat;
use super::interference::{InterferenceTable, PRIOR_WRONG, VAGUE, models_of, prior_slowdown};
use crate::policy::Policy;

/// One other pair's part: its posterior weight of "prior wrong", and its mean's weight toward the centre.
#[derive(Debug, Clone, Copy, Default)]
struct Part {
    wrong: f64,
    pairs: f64,
    /// Σ w_wrong / (V + τ²/n), Σ w_wrong · m / (V + τ²/n).
    precision: f64,
    weighted: f64,
}

impl Part {
    fn minus(self, o: Part) -> Part {
        Part {
            wrong: self.wrong - o.wrong,
            pairs: self.pairs - o.pairs,
            precision: self.precision - o.precision,
            weighted: self.weighted - o.weighted,
        }
    }
}

/// The learned pairs of one job type (as it reads them), summed, and each one's part (to leave it out of
/// its own reading).
#[derive(Debug, Clone, Default)]
pub struct Related {
    parts: Vec<(String, Part)>,
    total: Part,
}

impl Related {
    /// The pairs `job_type` reads: unordered pairs with it on either side, and its directed ones.
    pub fn of(policy: &Policy, learned: &InterferenceTable, job_type: &str) -> Self {
        let mut names: Vec<&str> = learned
            .pairs
            .get(job_type)
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
            .chain(
                learned
                    .pairs
                    .iter()
                    .filter(|(_, m)| m.contains_key(job_type))
                    .map(|(lo, _)| lo.as_str()),
            )
            .chain(
                learned
                    .directed
                    .get(job_type)
                    .into_iter()
                    .flat_map(|m| m.keys().map(String::as_str)),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        let noise = policy.learning.tau.powi(2);
        let v = VAGUE * VAGUE;
        let mut out = Self::default();
        for other in names {
            let stat: Stat = learned.view(job_type, other);
            if stat.count == 0 || stat.weight() <= 0.0 {
                continue;
            }
            let prior = prior_slowdown(policy, job_type, other).max(0.0).ln_1p();
            let [_, (wrong, _, _)] = models_of(policy, stat, prior, (PRIOR_WRONG, prior));
            let to_centre = wrong / (v + noise / stat.weight());
            let part = Part {
                wrong,
                pairs: 1.0,
                precision: to_centre,
                weighted: to_centre * stat.mean(),
            };
            out.total = Part {
                wrong: out.total.wrong + part.wrong,
                pairs: out.total.pairs + 1.0,
                precision: out.total.precision + part.precision,
                weighted: out.total.weighted + part.weighted,
            };
            out.parts.push((other.to_string(), part));
        }
        out
    }

    /// (a priori chance that the prior of the pair with `other` is wrong, centre (ln) of "prior wrong") for
    /// the pair whose prior is `prior` (ln), its own runs left out (see the module's doc).
    #[cfg(test)]
    pub fn wrong_model(
        &self,
        policy: &Policy,
        job_type: &str,
        other: &str,
        prior: f64,
    ) -> (f64, f64) {
        self.wrong_model_of(
            &super::interference::read_name(policy, job_type, other),
            prior,
        )
    }

    /// [`Related::wrong_model`] of the pair with the neighbour `job_type` reads as `read_as`.
    pub fn wrong_model_of(&self, read_as: &str, prior: f64) -> (f64, f64) {
        let own = self
            .parts
            .binary_search_by(|(n, _)| n.as_str().cmp(read_as))
            .map_or(Part::default(), |i| self.parts[i].1);
        let rest = self.total.minus(own);
        if rest.pairs < 0.5 {
            return (PRIOR_WRONG, prior);
        }
        let p = ((1.0 + rest.wrong) / (1.0 / PRIOR_WRONG + rest.pairs)).max(PRIOR_WRONG);
        let v = VAGUE * VAGUE;
        let centre = (prior / v + rest.weighted) / (1.0 / v + rest.precision);
        (p, centre)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn a_job_type_with_no_other_pair_reads_its_own_prior() {
        let policy = embedded_default().unwrap();
        let mut learned = InterferenceTable::default();
        learned.record("noisy", "quiet", 0.9, 1);
        let r = Related::of(&policy, &learned, "quiet");
        // Its only pair is left out of its own reading: today's model.
        assert_eq!(
            r.wrong_model(&policy, "quiet", "noisy", 0.1),
            (PRIOR_WRONG, 0.1)
        );
        // A job type with nothing learned.
        let r = Related::of(&policy, &learned, "other");
        assert_eq!(
            r.wrong_model(&policy, "other", "noisy", 0.1),
            (PRIOR_WRONG, 0.1)
        );
    }

    #[test]
    fn pairs_whose_priors_were_wrong_make_the_next_one_likely_wrong_and_centre_it() {
        let policy = embedded_default().unwrap();
        let (mut hurt, mut fine) = (InterferenceTable::default(), InterferenceTable::default());
        for k in 0..8 {
            for i in 0..3 {
                let seq = (k * 3 + i) as u64 + 1;
                // Unlisted job types: the prior is the default 0.05.
                hurt.record("victim", &format!("n{k}"), 0.8, seq);
                fine.record("victim", &format!("n{k}"), 0.05, seq);
            }
        }
        let prior = policy.default_slowdown.ln_1p();
        let (p, centre) =
            Related::of(&policy, &hurt, "victim").wrong_model(&policy, "victim", "new", prior);
        // Eight pairs, each wrong by its posterior weight (near 1 after three runs): p near 9 / 13; the
        // centre near ln 1.8, pulled a little toward the prior.
        assert!(p > 8.5 / 13.0 && p <= 9.0 / 13.0, "{p}");
        assert!(centre > 0.5 && centre < 0.8f64.ln_1p(), "{centre}");
        let (p, centre) =
            Related::of(&policy, &fine, "victim").wrong_model(&policy, "victim", "new", prior);
        // Eight pairs as their priors said: no more likely wrong than a priori (the floor), the centre the
        // prior's.
        assert_eq!(p, PRIOR_WRONG);
        assert!((centre - prior).abs() < 0.05, "{centre}");
        // A pair's own runs are not counted twice: "n0" reads the seven others, (1 + 7 w) / 12.
        let related = Related::of(&policy, &hurt, "victim");
        let (all, _) = related.wrong_model(&policy, "victim", "new", prior);
        let (p, _) = related.wrong_model(&policy, "victim", "n0", prior);
        let w = (all * 13.0 - 1.0) / 8.0;
        assert!((p - (1.0 + 7.0 * w) / 12.0).abs() < 1e-9, "{p}");
    }

    #[test]
    fn a_job_type_hurt_by_its_other_neighbours_lists_the_next_one_sooner() {
        use super::super::interference::avoid_list;
        let policy = embedded_default().unwrap();
        let mut hurt = InterferenceTable::default();
        let mut alone = InterferenceTable::default();
        let mut names: Vec<String> = (0..8).map(|k| format!("n{k}")).collect();
        for (k, n) in names.iter().enumerate() {
            for i in 0..3 {
                hurt.record("victim", n, 0.8, (k * 3 + i) as u64 + 1);
            }
        }
        // One run 45 % slower next to "once", against its prior of 0.05; "never" never ran next to it.
        for t in [&mut hurt, &mut alone] {
            t.record("victim", "once", 0.45, 100);
        }
        names.extend(["once".to_string(), "never".to_string()]);
        let list = |t: &InterferenceTable| avoid_list(&policy, t, &names, "victim");
        // Alone, one run says little against the prior: not listed. Next to eight neighbours that each hurt it
        // by 80 %, the pair is likely as wrong as theirs were: listed, and so is the one it never ran next to.
        assert!(!list(&alone).contains(&"once".to_string()));
        let with_others = list(&hurt);
        assert!(with_others.contains(&"once".to_string()), "{with_others:?}");
        assert!(
            with_others.contains(&"never".to_string()),
            "{with_others:?}"
        );
        // The listed job types it never ran next to are read the same way (the policy's harmless priors).
        assert!(
            with_others.contains(&"notebook".to_string()),
            "{with_others:?}"
        );
        // Its neighbours' own lists are theirs: "once" has only its run next to "victim", not listed.
        assert!(!avoid_list(&policy, &hurt, &names, "once").contains(&"victim".to_string()));
    }
}
