//! Whether exploring pays: the value of the information one run on another class brings, against what
//! that run costs.
//!
//! Thompson sampling proposes the class to try (the one whose posterior draw is cheapest); this gate
//! accepts it only when the expected saving over the job type's future runs beats the expected extra cost
//! of this run:
//!
//! - **cost of exploring** = E[cost on the proposed class] / E[cost on the lowest-cost class] − 1 (risk
//!   neutral: what this run is expected to cost more);
//! - **value** = H · KG, with KG the knowledge gradient of one run on the proposed class s: the expected
//!   log-cost gap d between s and the lowest-cost class e moves by N(0, σ̃²) once the run is observed,
//!   σ̃ = (v_s − c_se)/√(v_s + τ²) (v_s the variance of the estimate of ln runtime on s, c_se its
//!   covariance with the estimate on e, τ the run-to-run noise), and later runs switch to s if it then
//!   looks cheaper, which saves E[(−d − X)⁺] = σ̃·f(−d/σ̃) in log cost per run, with
//!   f(z) = z·Φ(z) + φ(z). What the two estimates share (above all the job type's size, unknown for a
//!   new job type, which moves every class alike) is learned by a run on any class and does not change
//!   which class is cheaper, so it does not count: a new job type whose classes differ as the catalog
//!   says does not pay for a run on a dearer class just because its runtime is unknown;
//! - **H**, the job type's expected future runs: as many as it has had so far (observed runs + 1: with no
//!   other knowledge of a job type's future, one seen n times is expected to run about n more times);
//!   for a job type of a family, plus the other job types' of the family, weighted by the share of a
//!   class's deviation the family holds a priori (`Posterior::family_horizon`): the run teaches the
//!   family's offset on the class, which they read too.
//!
//! For a class the job's family never ran on, the value is the mixture of two knowledge gradients: the
//! family's offset there as its prior says, or wrong (3x as wide, held 20 % likely, as a contradicted
//! prior is); and when the draw's class does not pay, such a class may be proposed by its value alone
//! (`decide::choose`), since the draw rarely reaches the wide alternative's tail.
//!
//! A job type's first try on a class, asked next to neighbours the class is expected to suffer from more
//! than the lowest-cost class, costs that much more there; it is worth at most what it gains over the
//! same try made alone (one run's saving plus its cost then), so it is left to a run without them unless
//! one run's saving covers the difference ([`next_to_neighbours`]): the try is made where it is cheap,
//! not skipped (docs/measurements/2026-11-30-learning-round-ten.md).
//!
//! A try that pays is still made only if the replica can **afford** it ([`affordable`]): conservative
//! exploration (Wu, Shariff, Lattimore, Szepesvári, "Conservative Bandits", ICML 2016) with the prior's own
//! choice as the baseline. Each decision is expected to save, against the class the prior alone would have
//! chosen for it, the difference of the two classes' expected costs (posterior means, in runs' cost); a
//! try on a class dearer than the prior's choice saves a negative amount. A try is made only if what the
//! replica's decisions have saved so far covers it, so the decisions' expected cost never exceeds what
//! the prior's choices would have cost: a new cluster pays for its tries with what its first runs taught,
//! and where the prior is right and the tries are dear (the Sia truth), they wait until runs have saved
//! enough. There is no constant: the bound is the prior's own choice (α = 0 in the paper's terms).
//!
//! So a job type whose classes are all well known, or whose alternatives are clearly dearer, stops paying
//! for exploration, and a frequent job type with an uncertain close alternative keeps trying it. The
//! operator's `explorationCap` stays the hard limit on the share of exploratory decisions.

/// What exploring one class would cost and bring (relative to the cost of the lowest-cost class).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Expected extra cost of this run (0.08 = 8 % more than the lowest-cost class).
    pub cost: f64,
    /// Expected saving over the job type's future runs (in units of one run's cost).
    pub value: f64,
    /// Future runs the saving is counted over.
    pub horizon: f64,
}

impl Verdict {
    pub fn pays(&self) -> bool {
        self.value > self.cost
    }

    /// What exploring is expected to gain, net of its cost (in runs' cost).
    pub fn net(&self) -> f64 {
        self.value - self.cost
    }
}

/// Whether a try expected to save `saving` runs' cost against the prior's choice (negative: to cost that
/// much more) is affordable with `saved`, what the decisions so far are expected to have saved against
/// theirs: only if the total stays at or above zero.
pub fn affordable(saved: f64, saving: f64) -> bool {
    saved + saving >= 0.0
}

/// The job type's expected future runs when it has been observed `runs` times.
pub fn horizon(runs: u64) -> f64 {
    runs as f64 + 1.0
}

/// The verdict on exploring a class whose expected cost is `exp(log_gap)` times the lowest one's and whose
/// log-runtime estimate has variance `log_var`, of which `unshared` (v_s − c_se) is not shared with the
/// lowest-cost class's estimate, with run-to-run noise `tau` (ln) and `horizon` future runs.
pub fn of_exploring(log_gap: f64, unshared: f64, log_var: f64, tau: f64, horizon: f64) -> Verdict {
    let gap = log_gap.max(0.0);
    Verdict {
        cost: gap.exp_m1(),
        value: horizon * saving(gap, unshared, log_var, tau),
        horizon,
    }
}

/// The verdict on a job type's first try on a class, made next to neighbours expected to slow it `slowed`
/// times as much as they would slow the lowest-cost class (`alone`: the verdict without them). When they
/// make the try dearer, it costs that much more here, and it is worth at most what it gains over the same
/// try made alone: the one run that waiting for it loses, plus what it would cost then. A first try is
/// then made where it is cheap, not skipped; one whose neighbours do not make it dearer is as `alone`.
pub fn next_to_neighbours(alone: Verdict, slowed: f64) -> Verdict {
    if slowed <= 1.0 {
        return alone;
    }
    let here = (alone.cost + 1.0) * slowed - 1.0;
    let per_run = alone.value / alone.horizon.max(1.0);
    Verdict {
        cost: here,
        value: alone.value.min(per_run + alone.cost),
        ..alone
    }
}

/// The expected saving per later run (ln cost) of one run on a class whose expected ln cost is `log_gap`
/// above the lowest one's (negative: below it, as an alternative reading of its estimate may hold), its
/// estimate of variance `log_var`, `unshared` of it not shared with the lowest-cost class's.
pub fn saving(log_gap: f64, unshared: f64, log_var: f64, tau: f64) -> f64 {
    let moves = unshared.max(0.0) / (log_var.max(0.0) + tau * tau).sqrt();
    if moves > 0.0 {
        moves * improvement(-log_gap / moves)
    } else {
        (-log_gap).max(0.0)
    }
}

/// f(z) = z·Φ(z) + φ(z): E[(Z + z)⁺] for a standard normal Z.
fn improvement(z: f64) -> f64 {
    let pdf = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = 0.5 * libm::erfc(-z / std::f64::consts::SQRT_2);
    (z * cdf + pdf).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn improvement_matches_the_normal_tables() {
        // f(0) = φ(0); f(−1) = −Φ(−1) + φ(1) = −0.158655 + 0.241971.
        assert!((improvement(0.0) - 0.398_942).abs() < 1e-6);
        assert!((improvement(-1.0) - 0.083_316).abs() < 1e-6);
        assert!((improvement(2.0) - 2.008_491).abs() < 1e-6);
        assert!(improvement(-40.0) == 0.0);
    }

    #[test]
    fn a_known_class_or_a_clearly_dearer_one_is_not_worth_a_run() {
        // Known to ±1 %: nothing to learn.
        assert!(!of_exploring(0.05, 1e-4, 1e-4, 0.2, 100.0).pays());
        // Uncertain (±30 %) but 60 % dearer, with few runs to come.
        assert!(!of_exploring(0.47, 0.09, 0.09, 0.2, 3.0).pays());
    }

    #[test]
    fn a_first_try_next_to_neighbours_that_make_it_dearer_waits_for_one_made_alone() {
        // Alone: 5 % dearer, worth 20 runs' saving (it pays).
        let alone = of_exploring(0.05, 0.09, 0.09, 0.2, 20.0);
        assert!(alone.pays(), "{alone:?}");
        let per_run = alone.value / alone.horizon;
        // Neighbours that slow it 30 % more than the lowest-cost class: about 37 % dearer here, more than
        // one run's saving above its cost alone, so it waits for a run without them.
        let here = next_to_neighbours(alone, 1.3);
        assert!((here.cost - (0.05f64.exp() * 1.3 - 1.0)).abs() < 1e-9);
        assert!(here.cost - alone.cost > per_run);
        assert!(!here.pays(), "{here:?}");
        assert!((here.value - (per_run + alone.cost)).abs() < 1e-12);
        // Neighbours that slow it a little more: one run's saving covers it, and it is made here.
        let close = next_to_neighbours(alone, 1.0 + 0.5 * per_run / 1.05);
        assert!(close.pays() && close.cost > alone.cost, "{close:?}");
        // Neighbours that slow it no more (or less) than the lowest-cost class: as alone.
        assert_eq!(next_to_neighbours(alone, 1.0), alone);
        assert_eq!(next_to_neighbours(alone, 0.8), alone);
    }

    #[test]
    fn a_try_is_affordable_only_out_of_what_was_saved() {
        // A fresh replica can afford a try no dearer than the prior's choice, not one 30 % dearer.
        assert!(affordable(0.0, 0.0));
        assert!(affordable(0.0, 0.1));
        assert!(!affordable(0.0, -0.3));
        // Once its decisions saved half a run, it can; not one dearer than that.
        assert!(affordable(0.5, -0.3));
        assert!(!affordable(0.5, -0.6));
        assert!(!affordable(0.5, f64::NAN));
    }

    #[test]
    fn an_uncertain_close_class_of_a_frequent_job_type_is() {
        let v = of_exploring(0.05, 0.09, 0.09, 0.2, 20.0);
        assert!(v.pays(), "{v:?}");
        assert!((v.cost - 0.05f64.exp_m1()).abs() < 1e-12);
        // More future runs, more value; a wider gap, less.
        assert!(of_exploring(0.05, 0.09, 0.09, 0.2, 40.0).value > v.value);
        assert!(of_exploring(0.2, 0.09, 0.09, 0.2, 20.0).value < v.value);
        // The same uncertainty, but all of it shared with the lowest-cost class (the job's size): a run
        // there would not tell which class is cheaper.
        assert!(!of_exploring(0.05, 0.0, 0.09, 0.2, 20.0).pays());
        assert!(of_exploring(0.05, 0.03, 0.09, 0.2, 20.0).value < v.value);
        assert_eq!(horizon(0), 1.0);
        assert_eq!(horizon(9), 10.0);
    }
}
