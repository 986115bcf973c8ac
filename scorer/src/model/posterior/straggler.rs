//! A class whose only run of a job type was far slower than expected: was the class slow, or did the run
//! straggle?
//!
//! Run times have a heavy right tail: a share π of runs (`learning.stragglerShare`) take a factor f ≥ 1
//! longer, P(f > x) = x^−α (`learning.stragglerTail`), on top of the Gaussian noise the model knows. One
//! run 3x slower than the catalog's best class promised turns the class's Gaussian estimate against it for
//! good: the draw rarely reaches back, so the class is never run again. So for a cell of exactly one run,
//! slower than what the job type's other runs and the shared parameters predict without it (its
//! leave-one-out prediction), the posterior keeps a second reading, weighed by Bayes' rule:
//!
//! - the run was representative: its excess x (ln) over the leave-one-out prediction is drawn from that
//!   prediction's variance plus the noise, with the prior as likely to be wrong as everywhere else
//!   ([`super::WIDE`]x as wide, held [`PRIOR_WRONG`] likely);
//! - it straggled: x is ln f, of density α·e^(−α·x), held π likely.
//!
//! The second reading is the leave-one-out estimate's mean. The decision values a run there by both
//! readings ([`crate::model::decide`]), and may propose the class for that value alone; the exploiting
//! estimate and the posterior draw stay the Gaussian ones. Two runs that both straggled are π² likely, so a cell of two runs or more, or
//! one faster than predicted (stragglers are only slower), keeps the one reading.
use super::linalg::{dot2, inverse2, mul2, quad2};
use super::{Block, WIDE};
use crate::model::interference::PRIOR_WRONG;
use crate::policy::Policy;

/// Below this, the second reading is dropped (it would change no draw and no value).
const NEGLIGIBLE: f64 = 1e-3;

/// The reading that a cell's only run straggled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Straggled {
    /// How likely it is held.
    pub weight: f64,
    /// The 1-GPU ln-runtime estimate without the run (its mean).
    pub log_mean: f64,
}

/// z·(a_j, b_j) (mean, variance) from the job type's block of parameters without one cell's run, the
/// shared parameters held at their posterior mean: `block` less the information of an observation `obs`
/// of z·(a_j, b_j) with variance `var`. `None` when what is left is not a proper Gaussian (rounding; the
/// prior's information is always left).
pub(super) fn leave_out(block: &Block, z: [f64; 2], obs: f64, var: f64) -> Option<(f64, f64)> {
    let p = block.precision;
    let h = mul2(p, block.mean);
    let mut q = p;
    let mut g = h;
    for r in 0..2 {
        g[r] -= z[r] * obs / var;
        for k in 0..2 {
            q[r][k] -= z[r] * z[k] / var;
        }
    }
    let det = q[0][0] * q[1][1] - q[0][1] * q[1][0];
    if !(det > 0.0 && q[0][0] > 0.0) {
        return None;
    }
    let cov = inverse2(q);
    let mean = mul2(cov, g);
    Some((dot2(z, mean), quad2(cov, z)))
}

/// How likely a run `excess` (ln) slower than its leave-one-out prediction of variance `predictive`
/// (noise included) is held to have straggled; 0 for a run no slower.
pub fn weight(policy: &Policy, excess: f64, predictive: f64) -> f64 {
    let (share, tail) = (
        policy.learning.straggler_share,
        policy.learning.straggler_tail,
    );
    if excess <= 0.0 || share <= 0.0 || predictive <= 0.0 {
        return 0.0;
    }
    let normal =
        |var: f64| (-0.5 * excess * excess / var).exp() / (2.0 * std::f64::consts::PI * var).sqrt();
    let representative =
        (1.0 - PRIOR_WRONG) * normal(predictive) + PRIOR_WRONG * normal(WIDE * WIDE * predictive);
    let straggled = share * tail * (-tail * excess).exp();
    let w = straggled / (straggled + (1.0 - share) * representative);
    if w.is_finite() && w >= NEGLIGIBLE {
        w
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        crate::policy::parse(
            include_str!("../../../../deploy/kustomize/base/policy/default-policy.yaml"),
            "p.yaml",
        )
        .unwrap()
    }

    #[test]
    fn a_far_slower_run_may_have_straggled_a_close_or_faster_one_not() {
        let p = policy();
        // Predicted to ±0.5 (ln): a run 3.3x slower (x = 1.2) is a straggler a few % likely.
        let far = weight(&p, 1.2, 0.25);
        assert!(far > 0.03 && far < 0.2, "{far}");
        // Faster: stragglers are only slower.
        assert_eq!(weight(&p, -1.2, 0.25), 0.0);
        // Ten times slower: as likely a wrong prior (the wide reading) as a straggler, not more.
        let ten = weight(&p, 10f64.ln(), 0.25);
        assert!(ten < far, "{ten} vs {far}");
        // No stragglers held possible, none read.
        let mut q = p.clone();
        q.learning.straggler_share = 0.0;
        assert_eq!(weight(&q, 1.2, 0.25), 0.0);
    }
}
