//! The hidden ground truth of `loadgen learn`: a synthetic cluster whose job types run at speeds the
//! scorer's catalog priors do not know. Two generators fill the same [`Truth`]: the harder one that looks
//! like a real cluster ([`super::cluster`], the default) and the first, easier one (`--truth classic`, here).
//!
//! The classic truth, built from the policy (classes, throughputs, prices, job types and their priors) and a
//! seed:
//! - per job type, a true size (base runtime × lognormal(0, 0.3)) and a true throughput exponent
//!   (the policy's ± up to 0.6), so that between the slowest and the fastest NVIDIA class some job
//!   types gain 1.4x and others 9x; two job types are pinned to exactly those two extremes between L4 and
//!   H100 (as real models do across two GPU generations);
//! - per class, a speed deviation from its catalog throughput shared by every job type (lognormal σ 0.25),
//!   and per (job type, class) a particular one (σ 0.15);
//! - per workload class, a true GPU-scaling exponent (runtime ∝ 1/g^s): training 0.85, inference 0.95,
//!   batch 0.9, interactive 0.75, where the scorer assumes one exponent for all;
//! - pair interference: the policy's prior matrix, scaled by lognormal(0, 0.3), with three pairs the prior
//!   calls harmless made harmful (0.5-0.9) and the harmful ones of one job type made harmless;
//! - run-to-run noise: lognormal σ 0.2.
use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::Value;

/// What the benchmark needs of the policy.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub classes: Vec<Class>,
    pub jobs: Vec<JobType>,
    /// Prior pair slowdowns, by (job index, job index), symmetric.
    pub prior_pairs: BTreeMap<(usize, usize), f64>,
    pub default_slowdown: f64,
    pub tiers: Vec<Tier>,
}

#[derive(Debug, Clone)]
pub struct Class {
    pub name: String,
    pub throughput: f64,
    pub price: f64,
    pub memory_gib: f64,
}

#[derive(Debug, Clone)]
pub struct JobType {
    pub name: String,
    pub workload: String,
    /// The prior: runtime on a class of throughput 1.0, and the throughput exponent.
    pub base: f64,
    pub exponent: f64,
    /// Whether the policy lists the job type (an unlisted one is scored by its workload class's profile).
    pub listed: bool,
    /// Share of the run before the first job of this type arrives (0 = from the start).
    pub appears_at: f64,
}

#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub cheapest: bool,
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn s(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

impl Catalog {
    /// Reads the policy YAML (the same file the scorer is started with).
    pub fn from_policy(policy: &Value) -> anyhow::Result<Self> {
        let seq = |key: &str| {
            policy
                .get(key)
                .and_then(Value::as_sequence)
                .cloned()
                .unwrap_or_default()
        };
        let classes: Vec<Class> = seq("catalog")
            .iter()
            .map(|c| Class {
                name: s(c, "name").unwrap_or_default(),
                throughput: f(c, "relativeThroughput").unwrap_or(1.0),
                price: f(c, "pricePerHour").unwrap_or(1.0),
                memory_gib: f(c, "memoryGiB").unwrap_or(f64::INFINITY),
            })
            .collect();
        let workload_profile = |w: &str, key: &str, default: f64| {
            policy
                .get("workloadClasses")
                .and_then(|m| m.get(w))
                .and_then(|m| m.get("profile"))
                .and_then(|p| f(p, key))
                .unwrap_or(default)
        };
        let jobs: Vec<JobType> = seq("jobTypes")
            .iter()
            .map(|j| {
                let workload = s(j, "workloadClass").unwrap_or_else(|| "unknown".into());
                JobType {
                    name: s(j, "name").unwrap_or_default(),
                    base: f(j, "baseRuntimeSeconds").unwrap_or_else(|| {
                        workload_profile(&workload, "baseRuntimeSeconds", 3600.0)
                    }),
                    exponent: f(j, "throughputExponent").unwrap_or(1.0),
                    workload,
                    listed: true,
                    appears_at: 0.0,
                }
            })
            .collect();
        let index = |n: &str| jobs.iter().position(|j| j.name == n);
        let interference = policy.get("interference");
        let mut prior_pairs = BTreeMap::new();
        for p in interference
            .and_then(|i| i.get("pairs"))
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default()
        {
            if let (Some(a), Some(b), Some(x)) = (
                s(&p, "a").as_deref().and_then(index),
                s(&p, "b").as_deref().and_then(index),
                f(&p, "slowdown"),
            ) {
                prior_pairs.insert((a, b), x);
                prior_pairs.insert((b, a), x);
            }
        }
        let tiers = seq("tiers")
            .iter()
            .map(|t| Tier {
                name: s(t, "name").unwrap_or_default(),
                cheapest: s(t, "objective").as_deref() == Some("cheapest"),
            })
            .collect();
        anyhow::ensure!(
            !classes.is_empty() && !jobs.is_empty(),
            "the policy has no catalog or no job types"
        );
        Ok(Self {
            classes,
            jobs,
            prior_pairs,
            default_slowdown: interference
                .and_then(|i| f(i, "defaultSlowdown"))
                .unwrap_or(0.0),
            tiers,
        })
    }

    /// The prior profile of a workload class (what an unlisted job type of that class is scored by).
    pub fn workload_profile(policy: &Value, workload: &str) -> (f64, f64) {
        let p = policy
            .get("workloadClasses")
            .and_then(|m| m.get(workload))
            .and_then(|m| m.get("profile"));
        (
            p.and_then(|p| f(p, "baseRuntimeSeconds")).unwrap_or(7200.0),
            p.and_then(|p| f(p, "throughputExponent")).unwrap_or(0.8),
        )
    }

    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }

    pub fn prior_slowdown(&self, a: usize, b: usize) -> f64 {
        self.prior_pairs
            .get(&(a, b))
            .copied()
            .unwrap_or(self.default_slowdown)
    }
}

/// Standard normal by Box–Muller.
pub fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Run-to-run noise of the classic truth (σ of ln runtime).
pub const NOISE: f64 = 0.2;

/// The hidden truth.
#[derive(Debug, Clone)]
pub struct Truth {
    /// 1-GPU, interference-free median runtime (seconds), by [job][class].
    pub runtime: Vec<Vec<f64>>,
    /// How much longer job j runs next to job k on class c: `slowdown[j][k][c]` (0.3 = 30 % longer).
    pub slowdown: Vec<Vec<Vec<f64>>>,
    /// Per job type: its GPU-scaling exponent (runtime ∝ 1/g^s).
    pub scaling: Vec<f64>,
    /// Per job type: σ of ln runtime run to run.
    pub noise: Vec<f64>,
    /// Share of runs that straggle (a Pareto factor, [`STRAGGLER_ALPHA`], on top of the noise).
    pub stragglers: f64,
    /// The two job types pinned to gain 1.4x and 9x between the slowest and the fastest class (classic).
    pub pinned: Vec<(String, f64)>,
    /// Per job type: whether the truth contradicts its prior (the prior's cheapest class is not the truly
    /// cheapest one; cluster truth).
    pub contradicted: Vec<bool>,
}

/// Tail index of a straggling run's factor (Pareto, ≥ 1; mean α/(α − 1)).
pub const STRAGGLER_ALPHA: f64 = 2.5;

impl Truth {
    /// The classic truth (see the module's doc).
    pub fn classic(cat: &Catalog, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let nj = cat.jobs.len();
        let nc = cat.classes.len();
        let class_dev: Vec<f64> = (0..nc).map(|_| (0.25 * normal(&mut rng)).exp()).collect();
        let mut exponent: Vec<f64> = cat
            .jobs
            .iter()
            .map(|j| (j.exponent + rng.random_range(-0.6..0.6)).clamp(0.1, 1.6))
            .collect();
        // Pin two job types to gain exactly 1.4x and 9x between the slowest and the fastest class
        // (catalog throughputs; the class deviations come on top).
        let (slow, fast) = (
            (0..nc)
                .min_by(|&a, &b| {
                    cat.classes[a]
                        .throughput
                        .total_cmp(&cat.classes[b].throughput)
                })
                .unwrap_or(0),
            (0..nc)
                .max_by(|&a, &b| {
                    cat.classes[a]
                        .throughput
                        .total_cmp(&cat.classes[b].throughput)
                })
                .unwrap_or(0),
        );
        let span = (cat.classes[fast].throughput / cat.classes[slow].throughput).ln();
        let mut pinned = Vec::new();
        if nj >= 2 && span > 0.0 {
            let a = rng.random_range(0..nj);
            let b = (a + 1 + rng.random_range(0..nj - 1)) % nj;
            for (j, gain) in [(a, 1.4f64), (b, 9.0)] {
                exponent[j] = gain.ln() / span;
                pinned.push((cat.jobs[j].name.clone(), gain));
            }
        }
        let runtime = cat
            .jobs
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let base = job.base * (0.3 * normal(&mut rng)).exp();
                (0..nc)
                    .map(|c| {
                        let speed = cat.classes[c].throughput.powf(exponent[j])
                            * class_dev[c]
                            * (0.15 * normal(&mut rng)).exp();
                        base / speed
                    })
                    .collect()
            })
            .collect();
        let mut slowdown = vec![vec![vec![0.0; nc]; nj]; nj];
        let set = |s: &mut Vec<Vec<Vec<f64>>>, a: usize, b: usize, x: f64| {
            s[a][b] = vec![x; nc];
            s[b][a] = vec![x; nc];
        };
        let pairs: Vec<(usize, usize)> =
            (0..nj).flat_map(|a| (a..nj).map(move |b| (a, b))).collect();
        for &(a, b) in &pairs {
            let x = cat.prior_slowdown(a, b) * (0.3 * normal(&mut rng)).exp();
            set(&mut slowdown, a, b, x);
        }
        // Surprises: three pairs the prior calls harmless hurt; one job type's harmful pairs do not.
        let mut harmless: Vec<(usize, usize)> = (0..nj)
            .flat_map(|a| (a..nj).map(move |b| (a, b)))
            .filter(|&(a, b)| cat.prior_slowdown(a, b) < 0.15)
            .collect();
        for _ in 0..3.min(harmless.len()) {
            let (a, b) = harmless.swap_remove(rng.random_range(0..harmless.len()));
            let x = rng.random_range(0.5..0.9);
            set(&mut slowdown, a, b, x);
        }
        if let Some(j) = (0..nj).find(|&j| (0..nj).any(|k| cat.prior_slowdown(j, k) > 0.3)) {
            for k in (0..nj).filter(|&k| cat.prior_slowdown(j, k) > 0.3) {
                set(&mut slowdown, j, k, 0.05);
            }
        }
        let scaling = cat
            .jobs
            .iter()
            .map(|j| match j.workload.as_str() {
                "training" => 0.85,
                "inference" => 0.95,
                "batch" => 0.9,
                "interactive" => 0.75,
                _ => 0.9,
            })
            .collect();
        Self {
            runtime,
            slowdown,
            scaling,
            noise: vec![NOISE; nj],
            stragglers: 0.0,
            pinned,
            contradicted: vec![false; nj],
        }
    }

    /// Sets every co-location slowdown to 0 (`--no-colocation-slowdowns`): neighbours stay, and cost nothing.
    pub fn remove_colocation_slowdowns(&mut self) {
        for x in self.slowdown.iter_mut().flatten().flatten() {
            *x = 0.0;
        }
    }

    /// Replaces each pair's per-class slowdowns by the pair's mean over the classes × the class's mean over
    /// the pairs / the mean of all (`--separable-colocation-slowdowns`): every pair's mean over the classes,
    /// which the avoid-list is judged by, is kept; how much more a class suffers is the same for every pair.
    pub fn make_colocation_separable(&mut self) {
        let nc = self
            .slowdown
            .first()
            .and_then(|r| r.first())
            .map_or(0, Vec::len);
        let pairs = self.slowdown.iter().map(Vec::len).sum::<usize>();
        if nc == 0 || pairs == 0 {
            return;
        }
        let cells = self.slowdown.iter().flatten();
        let class_mean: Vec<f64> = (0..nc)
            .map(|c| cells.clone().map(|s| s[c]).sum::<f64>() / pairs as f64)
            .collect();
        let all = class_mean.iter().sum::<f64>() / nc as f64;
        if all <= 0.0 {
            return;
        }
        for s in self.slowdown.iter_mut().flatten() {
            let pair = s.iter().sum::<f64>() / nc as f64;
            for (x, m) in s.iter_mut().zip(&class_mean) {
                *x = pair * m / all;
            }
        }
    }

    /// The slowdown of job `j` next to job `k`, averaged over the classes (what the avoid-list is judged by).
    pub fn pair_slowdown(&self, j: usize, k: usize) -> f64 {
        let s = &self.slowdown[j][k];
        s.iter().sum::<f64>() / s.len().max(1) as f64
    }

    /// Expected runtime of job type `j` on `gpus` GPUs of class `c` next to `colocated`.
    pub fn expected(&self, j: usize, c: usize, gpus: u32, colocated: &[usize]) -> f64 {
        let slow: f64 = colocated.iter().map(|&k| self.slowdown[j][k][c]).sum();
        let a = STRAGGLER_ALPHA;
        let tail = 1.0 + self.stragglers * (a / (a - 1.0) - 1.0);
        self.runtime[j][c] / f64::from(gpus.max(1)).powf(self.scaling[j]) * (1.0 + slow) * tail
    }

    /// One run: lognormal noise around the median (mean-preserving), and now and then a straggler.
    pub fn sample(
        &self,
        rng: &mut StdRng,
        j: usize,
        c: usize,
        gpus: u32,
        colocated: &[usize],
    ) -> f64 {
        let slow: f64 = colocated.iter().map(|&k| self.slowdown[j][k][c]).sum();
        let median = self.runtime[j][c] / f64::from(gpus.max(1)).powf(self.scaling[j]);
        let sigma = self.noise[j];
        let mut t = median * (1.0 + slow) * (sigma * normal(rng) - sigma * sigma / 2.0).exp();
        if self.stragglers > 0.0 && rng.random::<f64>() < self.stragglers {
            t *= (1.0 - rng.random::<f64>()).powf(-1.0 / STRAGGLER_ALPHA);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let yaml: Value = serde_yaml::from_str(include_str!(
            "../../../deploy/kustomize/base/policy/default-policy.yaml"
        ))
        .unwrap();
        Catalog::from_policy(&yaml).unwrap()
    }

    #[test]
    fn seeded_and_deviating_from_the_priors() {
        let cat = catalog();
        let a = Truth::classic(&cat, 1);
        let b = Truth::classic(&cat, 1);
        assert_eq!(a.runtime, b.runtime);
        assert_ne!(a.runtime, Truth::classic(&cat, 2).runtime);
        // The pinned job types gain about 1.4x and 9x between L4 and H100 (plus class deviations).
        let (l4, h100) = (
            cat.class_index("L4-24GB").unwrap(),
            cat.class_index("H100-80GB").unwrap(),
        );
        let gains: Vec<f64> = a
            .pinned
            .iter()
            .map(|(n, _)| {
                let j = cat.jobs.iter().position(|x| &x.name == n).unwrap();
                a.runtime[j][l4] / a.runtime[j][h100]
            })
            .collect();
        assert!(gains[1] / gains[0] > 3.0, "{gains:?}");
        // Bigger jobs are faster, neighbours slow down.
        assert!(a.expected(0, 0, 8, &[]) < a.expected(0, 0, 1, &[]) / 5.0);
        assert!(a.expected(0, 0, 1, &[0]) > a.expected(0, 0, 1, &[]));
    }
}
