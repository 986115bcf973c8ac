//! Cholesky factor and inverse of the posterior's symmetric positive-definite matrices, and the 2×2
//! arithmetic of a job type's own block of parameters (a_j, b_j).
use ndarray::{Array1, Array2};

/// A 2×2 matrix (a job type's block: its precision or covariance).
pub(super) type Mat2 = [[f64; 2]; 2];

/// The inverse of a 2×2 matrix.
pub(super) fn inverse2(m: Mat2) -> Mat2 {
    let det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    [
        [m[1][1] / det, -m[0][1] / det],
        [-m[1][0] / det, m[0][0] / det],
    ]
}

/// m·v.
pub(super) fn mul2(m: Mat2, v: [f64; 2]) -> [f64; 2] {
    [
        m[0][0] * v[0] + m[0][1] * v[1],
        m[1][0] * v[0] + m[1][1] * v[1],
    ]
}

/// u·v.
pub(super) fn dot2(u: [f64; 2], v: [f64; 2]) -> f64 {
    u[0] * v[0] + u[1] * v[1]
}

/// zᵀ·m·z.
pub(super) fn quad2(m: Mat2, z: [f64; 2]) -> f64 {
    dot2(z, mul2(m, z))
}

/// φ·θ over the non-zero features φ.
pub(super) fn dot(phi: &[(usize, f64)], theta: &Array1<f64>) -> f64 {
    phi.iter().map(|&(i, f)| f * theta[i]).sum()
}

/// φᵀ·Σ·φ over the non-zero features φ, at least 0.
pub(super) fn quad(phi: &[(usize, f64)], cov: &Array2<f64>) -> f64 {
    let mut s = 0.0;
    for &(i, fi) in phi {
        for &(k, fk) in phi {
            s += fi * fk * cov[[i, k]];
        }
    }
    s.max(0.0)
}

/// The lower Cholesky factor `L` of a symmetric positive-definite matrix (`m = L·Lᵀ`), a diagonal floored at
/// 1e-150 so that a near-singular matrix never divides by zero.
pub(in crate::model) fn cholesky_lower(m: &Array2<f64>) -> Array2<f64> {
    let n = m.nrows();
    let mut l = Array2::<f64>::zeros((n, n));
    for i in 0..n {
        for j in 0..=i {
            let mut s = m[[i, j]];
            for k in 0..j {
                s -= l[[i, k]] * l[[j, k]];
            }
            if i == j {
                l[[i, i]] = s.max(1e-300).sqrt();
            } else {
                l[[i, j]] = s / l[[j, j]];
            }
        }
    }
    l
}

/// Inverse of a symmetric positive-definite matrix (Cholesky). The precision matrices built here are
/// always positive definite: every parameter has a proper prior.
pub(super) fn invert_spd(m: &Array2<f64>) -> Array2<f64> {
    let n = m.nrows();
    let l = cholesky_lower(m);
    // L⁻¹ (lower triangular), then m⁻¹ = L⁻ᵀ·L⁻¹.
    let mut li = Array2::<f64>::zeros((n, n));
    for col in 0..n {
        li[[col, col]] = 1.0 / l[[col, col]];
        for i in col + 1..n {
            let mut s = 0.0;
            for k in col..i {
                s -= l[[i, k]] * li[[k, col]];
            }
            li[[i, col]] = s / l[[i, i]];
        }
    }
    li.t().dot(&li)
}
