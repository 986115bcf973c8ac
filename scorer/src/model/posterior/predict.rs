//! Every cell's estimate from the solved model: the shared prediction combined with the cell's own mean,
//! and the reading that a cell's only run straggled.
use std::collections::HashMap;

use ndarray::Array2;

use super::linalg::{dot, dot2, quad, quad2};
use super::shared::{Families, Shared};
use super::straggler::{self, Straggled};
use super::{Block, Slot, Solved, Variances};
use crate::policy::Policy;

type Predictions = (
    Array2<f64>,
    Array2<f64>,
    Array2<u64>,
    Array2<f64>,
    HashMap<(usize, usize), Straggled>,
);

/// Every (slot, class) cell's estimate: the shared prediction combined with the cell's own mean.
pub(super) fn predict(
    policy: &Policy,
    slots: &[Slot],
    solved: &Solved,
    wide: &[bool],
) -> Predictions {
    let v = Variances::of(policy);
    let shared = Shared::of(policy, &Families::of(policy));
    let s = shared.len();
    let nc = policy.classes.len();
    let mut log_mean = Array2::<f64>::zeros((slots.len(), nc));
    let mut log_var = Array2::<f64>::zeros((slots.len(), nc));
    let mut counts = Array2::<u64>::zeros((slots.len(), nc));
    let mut shrink = Array2::<f64>::ones((slots.len(), nc));
    let mut stragglers = HashMap::new();
    for (j, (slot, block)) in slots.iter().zip(&solved.blocks).enumerate() {
        let vr = v.own(slot, wide[j]).2;
        for c in 0..nc {
            let x = policy.classes[c].relative_throughput.ln();
            let z = [1.0, -x];
            let phi = shared.features(slot.workload, slot.family, c, x);
            let mut mean = -slot.profile.throughput_exponent * x
                + dot2(z, block.mean)
                + dot(&phi, &solved.mean);
            let shared_var = quad(&phi, &solved.cov);
            let mut var = shared_var + quad2(block.cov, z);
            if !block.cross.is_empty() {
                for (r, zr) in z.iter().enumerate() {
                    var += 2.0
                        * zr
                        * phi
                            .iter()
                            .map(|&(i, f)| f * block.cross[r * s + i])
                            .sum::<f64>();
                }
            }
            var = var.max(0.0);
            if let Some(&(_, n, own)) = slot.cells.iter().find(|cell| cell.0 == c) {
                counts[[j, c]] = n;
                if n == 1
                    && let Some(s) = straggled(policy, block, z, own, mean, shared_var, vr)
                {
                    stragglers.insert((j, c), s);
                }
                let k = vr / (vr + v.noise / n as f64);
                shrink[[j, c]] = 1.0 - k;
                mean = (1.0 - k) * mean + k * own;
                var = (1.0 - k).powi(2) * var + (1.0 - k) * vr;
            } else {
                var += vr;
            }
            log_mean[[j, c]] = mean;
            log_var[[j, c]] = var;
        }
    }
    (log_mean, log_var, counts, shrink, stragglers)
}

/// The reading that a cell's only run (`own`, whose prediction with it is `mean`) straggled, when it is
/// not negligible ([`straggler`]): the cell's estimate from the job type's block without the run, the
/// shared parameters' part (of variance `shared_var`) kept.
fn straggled(
    policy: &Policy,
    block: &Block,
    z: [f64; 2],
    own: f64,
    mean: f64,
    shared_var: f64,
    vr: f64,
) -> Option<Straggled> {
    let noise = policy.learning.tau.powi(2);
    let base = mean - dot2(z, block.mean);
    let (z_mean, z_var) = straggler::leave_out(block, z, own - base, vr + noise)?;
    let (log_mean, log_var) = (base + z_mean, shared_var + z_var + vr);
    let weight = straggler::weight(policy, own - log_mean, log_var + noise);
    (weight > 0.0).then_some(Straggled { weight, log_mean })
}
