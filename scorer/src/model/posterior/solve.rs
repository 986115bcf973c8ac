//! The exact solve: each job type's block (a_j, b_j) eliminated by its Schur complement, the shared
//! parameters solved by Cholesky, then each block recovered from the shared solution.
use ndarray::{Array1, Array2};

use super::linalg::{Mat2, inverse2, invert_spd, mul2};
use super::shared::{Families, Shared};
use super::{Block, Slot, Solved, Variances, WIDE, WORKLOADS};
use crate::policy::Policy;

/// One job type's contribution before elimination: its 2×2 precision, vector, and coupling to the shared
/// parameters (2 × shared, only `cols` non-zero).
struct Local {
    a: Mat2,
    bz: [f64; 2],
    coupling: Vec<f64>,
    cols: Vec<usize>,
}

fn local(shared: Shared, xs: &[f64], slot: &Slot, v: Variances, wide: bool) -> Local {
    let (va, vb, vr) = v.own(slot, wide);
    let s = shared.len();
    let mut a = [[1.0 / va, 0.0], [0.0, 1.0 / vb]];
    let mut bz = [slot.profile.base_runtime_seconds.ln() / va, 0.0];
    let mut coupling = vec![0.0; 2 * s];
    let mut cols = Vec::new();
    for &(c, n, mean) in &slot.cells {
        let var = vr + v.noise / n as f64;
        let target = mean + slot.profile.throughput_exponent * xs[c];
        let z = [1.0, -xs[c]];
        for r in 0..2 {
            bz[r] += z[r] * target / var;
            for k in 0..2 {
                a[r][k] += z[r] * z[k] / var;
            }
            for &(i, fi) in shared.features(slot.workload, slot.family, c, xs[c]).iter() {
                coupling[r * s + i] += z[r] * fi / var;
            }
        }
        for &(i, _) in shared.features(slot.workload, slot.family, c, xs[c]).iter() {
            if !cols.contains(&i) {
                cols.push(i);
            }
        }
    }
    Local {
        a,
        bz,
        coupling,
        cols,
    }
}

/// The exact posterior of every parameter, each job type's block eliminated first.
/// `wide_offsets` (families × classes): the family offsets whose prior is held wrong ([`WIDE`]x as wide,
/// see [`super::contradicted::offsets`]).
pub(super) fn solve(
    policy: &Policy,
    slots: &[Slot],
    wide: &[bool],
    wide_offsets: &Array2<bool>,
) -> Solved {
    let v = Variances::of(policy);
    let shared = Shared::of(policy, &Families::of(policy));
    let s = shared.len();
    let xs: Vec<f64> = policy
        .classes
        .iter()
        .map(|c| c.relative_throughput.ln())
        .collect();
    let mut precision = Array2::<f64>::zeros((s, s));
    let mut h = Array1::<f64>::zeros(s);
    for w in 0..WORKLOADS {
        precision[[shared.bw(w), shared.bw(w)]] += 1.0 / v.exponent;
        for c in 0..shared.classes {
            precision[[shared.uwc(w, c), shared.uwc(w, c)]] += 1.0 / v.class;
        }
    }
    for c in 0..shared.classes {
        precision[[shared.uc(c), shared.uc(c)]] += 1.0 / v.class;
    }
    // A family's exponent and class offsets: a workload class's, for the job types of one family.
    for f in 0..shared.families {
        precision[[shared.bf(f), shared.bf(f)]] += 1.0 / v.exponent;
        for c in 0..shared.classes {
            let widen = if wide_offsets[[f, c]] {
                WIDE * WIDE
            } else {
                1.0
            };
            precision[[shared.ufc(f, c), shared.ufc(f, c)]] += 1.0 / (widen * v.class);
        }
    }
    let locals: Vec<Local> = slots
        .iter()
        .zip(wide)
        .map(|(slot, &w)| local(shared, &xs, slot, v, w))
        .collect();
    for (slot, (l, &w)) in slots.iter().zip(locals.iter().zip(wide)) {
        if slot.shared_weight <= 0.0 {
            continue;
        }
        // A bounded slot teaches the shared parameters its cells taken within the bound of the catalog;
        // its own parameters are recovered from its cells as they are.
        let bounded_slot;
        let bounded_local;
        let (slot, l) = if slot.bounded {
            bounded_slot = bounded(slot, &xs);
            bounded_local = local(shared, &xs, &bounded_slot, v, w);
            (&bounded_slot, &bounded_local)
        } else {
            (slot, l)
        };
        // What the slot's data say of the shared parameters (its a_j, b_j integrated out) is the Gaussian
        // information below; a slot weighing less than 1 brings that share of it (a tempered likelihood),
        // and its own parameters are still recovered from all of its data.
        let weight = slot.shared_weight;
        let vr = v.own(slot, w).2;
        for &(c, n, mean) in &slot.cells {
            let var = (vr + v.noise / n as f64) / weight;
            let target = mean + slot.profile.throughput_exponent * xs[c];
            let phi = shared.features(slot.workload, slot.family, c, xs[c]);
            for &(i, fi) in &phi {
                h[i] += fi * target / var;
                for &(k, fk) in &phi {
                    precision[[i, k]] += fi * fk / var;
                }
            }
        }
        // Schur complement: − Bᵀ A⁻¹ B and − Bᵀ A⁻¹ bz.
        let ai = inverse2(l.a);
        let aib = [
            ai[0][0] * l.bz[0] + ai[0][1] * l.bz[1],
            ai[1][0] * l.bz[0] + ai[1][1] * l.bz[1],
        ];
        for &i in &l.cols {
            let bi = [l.coupling[i], l.coupling[s + i]];
            h[i] -= weight * (bi[0] * aib[0] + bi[1] * aib[1]);
            for &k in &l.cols {
                let bk = [l.coupling[k], l.coupling[s + k]];
                let q = bi[0] * (ai[0][0] * bk[0] + ai[0][1] * bk[1])
                    + bi[1] * (ai[1][0] * bk[0] + ai[1][1] * bk[1]);
                precision[[i, k]] -= weight * q;
            }
        }
    }
    let cov = invert_spd(&precision);
    let mean = cov.dot(&h);
    let blocks = locals.iter().map(|l| recover(l, s, &mean, &cov)).collect();
    Solved { mean, cov, blocks }
}

/// A job type's block from the shared solution: mean A⁻¹(bz − B·θ), covariance A⁻¹ + M·Σ·Mᵀ with M = A⁻¹B,
/// cross-covariance −M·Σ.
fn recover(l: &Local, s: usize, theta: &Array1<f64>, cov: &Array2<f64>) -> Block {
    let ai = inverse2(l.a);
    if l.cols.is_empty() {
        return Block {
            mean: mul2(ai, l.bz),
            cov: ai,
            precision: l.a,
            cross: Vec::new(),
        };
    }
    let bt = |r: usize| -> f64 {
        l.cols
            .iter()
            .map(|&i| l.coupling[r * s + i] * theta[i])
            .sum()
    };
    let mean = mul2(ai, [l.bz[0] - bt(0), l.bz[1] - bt(1)]);
    // M = A⁻¹ B over the non-zero columns.
    let m = |r: usize, i: usize| ai[r][0] * l.coupling[i] + ai[r][1] * l.coupling[s + i];
    let mut cross = vec![0.0; 2 * s];
    for r in 0..2 {
        for &i in &l.cols {
            let mri = m(r, i);
            for k in 0..s {
                cross[r * s + k] -= mri * cov[[i, k]];
            }
        }
    }
    let mut bcov = ai;
    for (r, row) in bcov.iter_mut().enumerate() {
        for (q, v) in row.iter_mut().enumerate() {
            // M Σ Mᵀ = −cross · Mᵀ
            *v -= l
                .cols
                .iter()
                .map(|&i| cross[r * s + i] * m(q, i))
                .sum::<f64>();
        }
    }
    Block {
        mean,
        cov: bcov,
        precision: l.a,
        cross,
    }
}

/// `slot` with each cell's mean taken within [`crate::model::tenants::BOUND`] of the catalog prior there.
fn bounded(slot: &Slot, xs: &[f64]) -> Slot {
    let bound = crate::model::tenants::BOUND;
    let mut s = slot.clone();
    for cell in &mut s.cells {
        let prior =
            slot.profile.base_runtime_seconds.ln() - slot.profile.throughput_exponent * xs[cell.0];
        cell.2 = cell.2.clamp(prior - bound, prior + bound);
    }
    s
}
