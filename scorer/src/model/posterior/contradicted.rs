//! A contradicted prior ([`contradicts`]): whether a job type's runs are better explained by a prior
//! [`super::WIDE`]x as wide, by Bayesian model choice.
use ndarray::{Array1, Array2};

use super::shared::{Families, Shared};
use super::{Slot, Solved, Variances, WIDE, prior_log_mean};
use crate::model::interference::PRIOR_WRONG;
use crate::policy::Policy;

/// Whether a job type's cells are better explained by a prior [`WIDE`]x as wide: every parameter integrated
/// out under its prior (the prior predictive; the shared ones are not taken from the posterior, which the
/// job type's own data pull along).
pub(super) fn contradicts(policy: &Policy, slot: &Slot) -> bool {
    if slot.cells.len() < 2 {
        return false;
    }
    let v = Variances::of(policy);
    let xs: Vec<f64> = policy
        .classes
        .iter()
        .map(|c| c.relative_throughput.ln())
        .collect();
    let k = slot.cells.len();
    // A family's exponent and class offsets add to the workload class's.
    let groups = if slot.family.is_some() { 2.0 } else { 1.0 };
    let loglik = |wide: bool| {
        let (va, vb, vr) = v.own(slot, wide);
        let mut cov = Array2::<f64>::zeros((k, k));
        let mut resid = Array1::<f64>::zeros(k);
        for (p, &(c, n, mean)) in slot.cells.iter().enumerate() {
            let prior = prior_log_mean(&slot.profile, policy.classes[c].relative_throughput);
            resid[p] = mean - prior;
            for (q, &(c2, _, _)) in slot.cells.iter().enumerate() {
                cov[[p, q]] = va + (vb + groups * v.exponent) * xs[c] * xs[c2];
            }
            cov[[p, p]] += (1.0 + groups) * v.class + vr + v.noise / n as f64;
        }
        gaussian_loglik(&resid, &cov)
    };
    let (narrow, wide) = (loglik(false), loglik(true));
    (wide + PRIOR_WRONG.ln()) > (narrow + (1.0 - PRIOR_WRONG).ln())
}

/// ln N(r; 0, cov) by Cholesky.
fn gaussian_loglik(r: &Array1<f64>, cov: &Array2<f64>) -> f64 {
    let n = r.len();
    let l = super::cholesky_lower(cov);
    // Solve L z = r.
    let mut z = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| l[[i, k]] * z[k]).sum();
        z[i] = (r[i] - s) / l[[i, i]];
    }
    let logdet: f64 = (0..n).map(|i| l[[i, i]].ln()).sum::<f64>() * 2.0;
    -0.5 * (z.iter().map(|x| x * x).sum::<f64>() + logdet + n as f64 * std::f64::consts::TAU.ln())
}

/// Per (family, class): whether the family's offset on the class is better explained by a prior [`WIDE`]x
/// as wide. The posterior marginal N(m, v) of the offset under its prior N(0, σ²) is what its data say,
/// N(μ, s²) with 1/s² = 1/v − 1/σ² and μ = m·s²/v (exact in the joint Gaussian: every other parameter is
/// integrated out), weighed under both priors as the job types' check does.
pub(super) fn offsets(policy: &Policy, solved: &Solved) -> Array2<bool> {
    let shared = Shared::of(policy, &Families::of(policy));
    let prior = Variances::of(policy).class;
    let mut wide = Array2::from_elem((shared.families, shared.classes), false);
    for f in 0..shared.families {
        for c in 0..shared.classes {
            let i = shared.ufc(f, c);
            let (m, v) = (solved.mean[i], solved.cov[[i, i]]);
            let data_precision = 1.0 / v - 1.0 / prior;
            if data_precision <= 1e-9 {
                continue;
            }
            let s2 = 1.0 / data_precision;
            let mu = m * s2 / v;
            let ll = |var: f64| -0.5 * (mu * mu / var + var.ln());
            wide[[f, c]] = ll(WIDE * WIDE * prior + s2) + PRIOR_WRONG.ln()
                > ll(prior + s2) + (1.0 - PRIOR_WRONG).ln();
        }
    }
    wide
}
