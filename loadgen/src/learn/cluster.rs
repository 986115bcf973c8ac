//! The default truth of `loadgen learn`: a cluster as real ones are, where the policy's priors are often
//! wrong and the right class is only a little cheaper than the next.
//!
//! From the policy (catalog, prices, tiers, its job types and their priors) and a seed:
//! - **Job types**: the policy's, then names from [`EXTRA`] up to `--job-types` (default 26): every other
//!   one is added to the policy the scorers run (with a prior a platform team would write from spec sheets:
//!   its workload class's runtime × lognormal(0.5), a throughput exponent in 0.6–1.0), the others are
//!   **not listed** (the scorer only has their workload class's profile). [`LATE`] of them first appear
//!   between 15 % and 60 % of the run.
//! - **Speed**: per job type a true size off its prior (lognormal σ 0.3; 0.6 when unlisted), per class a
//!   deviation from its catalog throughput shared by every job type (σ 0.15), per (job type, class) one of
//!   its own (σ 0.08). For a third of the job types the prior is **contradicted**: their throughput exponent
//!   is off by 0.3–0.8 and one class suits them or fails them (×0.55–0.8 or ×1.25–1.6 speed), so that the
//!   class their prior calls cheapest is not. For the others it is.
//! - **Close calls**: each job type is drawn again until, under `cheapest` over every class it fits, the
//!   runner-up costs 5–30 % more than the best (best-vs-second-best gap, as measured on real clusters).
//! - **Noise**: per job type σ of ln runtime in 0.10–0.20, and 3 % of runs straggle (× a Pareto(2.5)
//!   factor: heavy-tailed runtimes); GPU scaling per job type t ∝ 1/g^s with s in 0.70–0.95 (the scorer
//!   assumes 0.9).
//! - **Co-location**: per unordered pair a base slowdown (the policy's prior × lognormal(0.3), default 0.05
//!   for pairs it does not list); 10 % of the pairs the prior calls harmless hurt (0.35–0.9); one job type's
//!   harmful pairs are harmless. Per direction × lognormal(0.15) (A slows B more than B slows A), per class ×
//!   a contention factor (slower, smaller GPUs suffer more: (θ_max/θ_c)^0.2, geometric mean 1) ×
//!   lognormal(0.1).
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::Value;

use super::truth::{Catalog, JobType, Truth, normal};

/// Names and workload classes of the job types beyond the policy's (listed and unlisted alternate).
pub const EXTRA: [(&str, &str); 16] = [
    ("train-gpt2-xl", "training"),
    ("train-yolo-v8", "training"),
    ("train-vit-large", "training"),
    ("train-moe-8x7b", "training"),
    ("finetune-t5", "training"),
    ("inference-llama-70b", "inference"),
    ("train-dlrm", "training"),
    ("inference-rerank", "inference"),
    ("inference-whisper", "inference"),
    ("batch-transcode", "batch"),
    ("inference-sdxl", "inference"),
    ("batch-protein-fold", "batch"),
    ("batch-ocr", "batch"),
    ("notebook-rapids", "interactive"),
    ("train-gnn", "training"),
    ("train-wav2vec", "training"),
];

/// Job types that first appear mid-run.
pub const LATE: usize = 6;
/// Share of runs that straggle.
pub const STRAGGLERS: f64 = 0.03;
/// Best-vs-second-best cost gap of every job type under `cheapest`.
pub const GAP: (f64, f64) = (0.05, 0.30);

/// Extends `cat` (and the policy the scorers will run) to `job_types` job types and draws the truth.
pub fn generate(policy: &mut Value, cat: &mut Catalog, seed: u64, job_types: usize) -> Truth {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc1a5_7e12);
    cat.jobs.truncate(job_types);
    add_job_types(policy, cat, &mut rng, job_types);
    let nj = cat.jobs.len();
    for _ in 0..LATE.min(nj.saturating_sub(1)) {
        let j = rng.random_range(0..nj);
        cat.jobs[j].appears_at = rng.random_range(0.15..0.6);
    }
    let nc = cat.classes.len();
    let class_dev: Vec<f64> = (0..nc).map(|_| (0.15 * normal(&mut rng)).exp()).collect();
    let mut contradicted = vec![false; nj];
    let mut order: Vec<usize> = (0..nj).collect();
    for i in 0..nj {
        order.swap(i, rng.random_range(i..nj));
    }
    for &j in order.iter().take(nj.div_ceil(3)) {
        contradicted[j] = true;
    }
    let memory = default_memory(policy, cat);
    let runtime: Vec<Vec<f64>> = (0..nj)
        .map(|j| speeds(cat, &class_dev, &memory[j], j, contradicted[j], &mut rng))
        .collect();
    Truth {
        runtime,
        slowdown: interference(cat, &mut rng),
        scaling: (0..nj).map(|_| rng.random_range(0.70..0.95)).collect(),
        noise: (0..nj).map(|_| rng.random_range(0.10..0.20)).collect(),
        stragglers: STRAGGLERS,
        pinned: Vec::new(),
        contradicted,
    }
}

/// Appends job types from [`EXTRA`] (then numbered ones) to `cat`; the listed ones to the policy too.
fn add_job_types(policy: &mut Value, cat: &mut Catalog, rng: &mut StdRng, job_types: usize) {
    let mut added = Vec::new();
    for k in 0..job_types.saturating_sub(cat.jobs.len()) {
        let (name, workload) = match EXTRA.get(k) {
            Some(&(n, w)) => (n.to_string(), w),
            None => (
                format!("team-job-{k}"),
                ["training", "inference", "batch"][k % 3],
            ),
        };
        let (base_w, exponent_w) = Catalog::workload_profile(policy, workload);
        let listed = k % 2 == 0;
        let (base, exponent) = if listed {
            let base = (base_w * (0.5 * normal(rng)).exp() / 100.0)
                .round()
                .max(1.0)
                * 100.0;
            let exponent = (rng.random_range(0.6f64..1.0) * 20.0).round() / 20.0;
            (base, exponent)
        } else {
            (base_w, exponent_w)
        };
        if listed {
            let mut m = serde_yaml::Mapping::new();
            m.insert("name".into(), name.clone().into());
            m.insert("workloadClass".into(), workload.into());
            m.insert("baseRuntimeSeconds".into(), base.into());
            m.insert("relativeStddev".into(), 0.4.into());
            m.insert("throughputExponent".into(), exponent.into());
            added.push(Value::Mapping(m));
        }
        cat.jobs.push(JobType {
            name,
            workload: workload.to_string(),
            base,
            exponent,
            listed,
            appears_at: 0.0,
        });
    }
    if let Some(jobs) = policy.get_mut("jobTypes").and_then(Value::as_sequence_mut) {
        let keep: Vec<String> = cat.jobs.iter().map(|j| j.name.clone()).collect();
        jobs.retain(|j| {
            j.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| keep.iter().any(|k| k == n))
        });
        jobs.extend(added);
    }
}

/// Per job type, whether it fits each class (its `defaultMemoryGiB` against the class's memory).
fn default_memory(policy: &Value, cat: &Catalog) -> Vec<Vec<bool>> {
    let memory_of = |name: &str| {
        policy
            .get("jobTypes")
            .and_then(Value::as_sequence)
            .and_then(|s| {
                s.iter()
                    .find(|j| j.get("name").and_then(Value::as_str) == Some(name))
            })
            .and_then(|j| j.get("defaultMemoryGiB"))
            .and_then(Value::as_f64)
    };
    cat.jobs
        .iter()
        .map(|job| {
            let need = memory_of(&job.name);
            cat.classes
                .iter()
                .map(|c| need.is_none_or(|m| m <= c.memory_gib))
                .collect()
        })
        .collect()
}

/// The true 1-GPU runtimes of job `j` on every class, drawn until its `cheapest` gap is within [`GAP`] and
/// its prior's cheapest class is wrong exactly when `contradicted`.
fn speeds(
    cat: &Catalog,
    class_dev: &[f64],
    fits: &[bool],
    j: usize,
    contradicted: bool,
    rng: &mut StdRng,
) -> Vec<f64> {
    let job = &cat.jobs[j];
    let nc = cat.classes.len();
    let cheapest = |cost: &dyn Fn(usize) -> f64| -> Option<(usize, f64)> {
        let mut feasible: Vec<(usize, f64)> =
            (0..nc).filter(|&c| fits[c]).map(|c| (c, cost(c))).collect();
        feasible.sort_by(|a, b| a.1.total_cmp(&b.1));
        let gap = feasible
            .get(1)
            .map_or(f64::INFINITY, |s| s.1 / feasible[0].1 - 1.0);
        feasible.first().map(|&(c, _)| (c, gap))
    };
    let price = |c: usize| cat.classes[c].price;
    let theta = |c: usize| cat.classes[c].throughput;
    let prior_best = cheapest(&|c| price(c) * job.base / theta(c).powf(job.exponent)).map(|b| b.0);
    let size_sigma = if job.listed { 0.3 } else { 0.6 };
    let size = job.base * (size_sigma * normal(rng)).exp();
    let mut last = Vec::new();
    for _ in 0..100_000 {
        let exponent = if contradicted {
            let off = rng.random_range(0.3..0.8);
            job.exponent + if rng.random::<bool>() { off } else { -off }
        } else {
            job.exponent + 0.1 * normal(rng)
        }
        .clamp(0.05, 1.6);
        let mut cell: Vec<f64> = (0..nc).map(|_| (0.08 * normal(rng)).exp()).collect();
        if contradicted {
            let c = rng.random_range(0..nc);
            cell[c] *= if rng.random::<bool>() {
                rng.random_range(0.55..0.8)
            } else {
                rng.random_range(1.25..1.6)
            };
        }
        last = (0..nc)
            .map(|c| size / (theta(c).powf(exponent) * class_dev[c] * cell[c]))
            .collect();
        let Some((best, gap)) = cheapest(&|c| price(c) * last[c]) else {
            return last;
        };
        let wrong = prior_best != Some(best);
        if (GAP.0..=GAP.1).contains(&gap) && wrong == contradicted {
            return last;
        }
    }
    last
}

/// `slowdown[j][k][c]`: how much longer j runs next to k on class c (see the module's doc).
pub fn interference(cat: &Catalog, rng: &mut StdRng) -> Vec<Vec<Vec<f64>>> {
    let nj = cat.jobs.len();
    let nc = cat.classes.len();
    let prior = |a: usize, b: usize| {
        if cat.jobs[a].listed && cat.jobs[b].listed {
            cat.prior_slowdown(a, b)
        } else {
            cat.default_slowdown
        }
    };
    let mut base = vec![vec![0.0; nj]; nj];
    let pairs: Vec<(usize, usize)> = (0..nj).flat_map(|a| (a..nj).map(move |b| (a, b))).collect();
    for (a, b) in pairs {
        let x = if prior(a, b) < 0.15 && rng.random::<f64>() < 0.10 {
            rng.random_range(0.35..0.9)
        } else {
            prior(a, b) * (0.3 * normal(rng)).exp()
        };
        base[a][b] = x;
        base[b][a] = x;
    }
    if let Some(j) = (0..nj).find(|&j| (0..nj).any(|k| prior(j, k) > 0.3)) {
        for k in (0..nj).filter(|&k| prior(j, k) > 0.3) {
            base[j][k] = 0.05;
            base[k][j] = 0.05;
        }
    }
    let max_theta = cat
        .classes
        .iter()
        .map(|c| c.throughput)
        .fold(f64::MIN, f64::max);
    let raw: Vec<f64> = cat
        .classes
        .iter()
        .map(|c| (max_theta / c.throughput).powf(0.2))
        .collect();
    let geo = (raw.iter().map(|x| x.ln()).sum::<f64>() / nc as f64).exp();
    (0..nj)
        .map(|j| {
            (0..nj)
                .map(|k| {
                    let direction = (0.15 * normal(rng)).exp();
                    (0..nc)
                        .map(|c| base[j][k] * direction * raw[c] / geo * (0.1 * normal(rng)).exp())
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(seed: u64) -> (Value, Catalog, Truth) {
        let mut policy: Value = serde_yaml::from_str(include_str!(
            "../../../deploy/kustomize/base/policy/default-policy.yaml"
        ))
        .unwrap();
        let mut cat = Catalog::from_policy(&policy).unwrap();
        let truth = generate(&mut policy, &mut cat, seed, 26);
        (policy, cat, truth)
    }

    #[test]
    fn twenty_six_job_types_some_unlisted_some_late_a_third_contradicted() {
        let (policy, cat, truth) = setup(1);
        assert_eq!(cat.jobs.len(), 26);
        let listed = cat.jobs.iter().filter(|j| j.listed).count();
        assert_eq!(listed, 18);
        assert_eq!(policy["jobTypes"].as_sequence().unwrap().len(), 18);
        assert!(cat.jobs.iter().filter(|j| j.appears_at > 0.0).count() >= 4);
        assert_eq!(truth.contradicted.iter().filter(|&&c| c).count(), 9);
        // Seeded.
        assert_eq!(setup(1).2.runtime, truth.runtime);
        assert_ne!(setup(2).2.runtime, truth.runtime);
    }

    #[test]
    fn close_calls_and_harmful_pairs_the_prior_misses() {
        for seed in 1..=5 {
            let (policy, cat, truth) = setup(seed);
            let fits = default_memory(&policy, &cat);
            for (j, runtimes) in truth.runtime.iter().enumerate() {
                let mut costs: Vec<f64> = runtimes
                    .iter()
                    .enumerate()
                    .filter(|&(c, _)| fits[j][c])
                    .map(|(c, r)| r * cat.classes[c].price)
                    .collect();
                costs.sort_by(f64::total_cmp);
                let gap = costs[1] / costs[0] - 1.0;
                assert!(
                    (GAP.0..=GAP.1).contains(&gap),
                    "seed {seed} job {j}: gap {gap}"
                );
            }
            let harmful = (0..26)
                .flat_map(|a| (0..26).map(move |b| (a, b)))
                .filter(|&(a, b)| truth.pair_slowdown(a, b) > 0.3)
                .count();
            let prior_harmful = (0..26)
                .flat_map(|a| (0..26).map(move |b| (a, b)))
                .filter(|&(a, b)| cat.prior_slowdown(a, b) > 0.3)
                .count();
            assert!(
                harmful > prior_harmful,
                "{seed}: {harmful} vs {prior_harmful}"
            );
            // Slower classes suffer more from the same neighbour.
            let (l4, h200) = (
                cat.class_index("L4-24GB").unwrap(),
                cat.class_index("H200-141GB").unwrap(),
            );
            let mean = |c: usize| {
                (0..26)
                    .flat_map(|a| (0..26).map(move |b| (a, b)))
                    .map(|(a, b)| truth.slowdown[a][b][c])
                    .sum::<f64>()
            };
            assert!(mean(l4) > mean(h200) * 1.3, "{seed}");
        }
    }
}
