//! Seeded draws for exploration: SplitMix64 (a fixed, tiny generator, so a seed means the same draws
//! on every platform and every version) and standard normal variates by Box–Muller.

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub struct Draws {
    state: u64,
}

impl Draws {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws_and_sane_moments() {
        let a: Vec<f64> = {
            let mut d = Draws::new(7);
            (0..5).map(|_| d.normal()).collect()
        };
        let b: Vec<f64> = {
            let mut d = Draws::new(7);
            (0..5).map(|_| d.normal()).collect()
        };
        assert_eq!(a, b);
        let mut d = Draws::new(1);
        let xs: Vec<f64> = (0..20_000).map(|_| d.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        let u = Draws::new(3).uniform();
        assert!((0.0..1.0).contains(&u));
    }
}
