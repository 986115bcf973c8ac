//! Cholesky factor and inverse of the posterior's symmetric positive-definite matrices.
use ndarray::Array2;

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
