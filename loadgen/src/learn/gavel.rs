//! The third truth of `loadgen learn` (`--truth gavel`): measured throughputs and measured co-location
//! slowdowns, nobody here designed either.
//!
//! The data are the published throughput measurements of Gavel (Narayanan et al., OSDI'20,
//! `stanford-futuredata/gavel` at `c4fa40097339e9608ab71fd64c8bdea96a5e4a4c`, MIT licence,
//! `scheduler/simulation_throughputs.json`), reduced by `loadgen/data/gavel/derive.py` to [`DATA`] and
//! [`COLOCATION`]: per job type (26: ResNet-18, ResNet-50, Transformer, LM and Recommendation at several
//! batch sizes, A3C, CycleGAN) the measured training iterations per second on one GPU of three classes (K80,
//! P100, V100), a GPU-scaling exponent from the measured 2-, 4- and 8-GPU throughputs, and per (job type,
//! class) the measured slowdown next to each other job type sharing the GPU. Where they disagree with spec
//! sheets is what the scorer must learn (Recommendation runs about twice as fast on the P100 as on the V100,
//! ResNet-18 at small batches as fast or faster on the P100).
//!
//! The policy the scorers run and what is drawn per seed are as for every measured truth
//! ([`super::measured`]): the catalog ([`CLASSES`]) has relative throughput from the spec sheets (FP32
//! TFLOPS against the V100 SXM2's 15.7: one K80 die 4.37 at boost, the P100 PCIe 9.3) and prices per
//! GPU-hour from list prices (on-demand GPU prices of a large cloud, 2020: K80 0.45, P100 1.46, V100 2.48);
//! the reference class of the drawn sizes is the V100. Co-location slowdowns are the measured ones, the same
//! in every seed; nothing in this truth was tuned for the scorer.
use std::collections::HashMap;

use rand::rngs::StdRng;
use serde_yaml::Value;

use super::measured::{self, Dataset, MeasuredClass};
use super::truth::{Catalog, Truth};

/// `loadgen/data/gavel/throughput.csv`, derived by `loadgen/data/gavel/derive.py`.
pub const DATA: &str = include_str!("../../data/gavel/throughput.csv");
/// `loadgen/data/gavel/colocation.csv`: per (job type, class) the slowdown next to each job type.
pub const COLOCATION: &str = include_str!("../../data/gavel/colocation.csv");

/// The benchmark's fastest tier of this truth (the cheapest one is [`super::SPOT_TIER`]).
pub const FAST_TIER: &str = "bench-fast";

/// The measured classes (see [`MeasuredClass`]).
pub const CLASSES: [MeasuredClass; 3] = [
    ("K80-12GB", 12.0, 0.28, 0.45, 8),
    ("P100-16GB", 16.0, 0.59, 1.46, 8),
    ("V100-16GB", 16.0, 1.0, 2.48, 8),
];

/// The measurements of [`DATA`] as a data set.
fn dataset() -> Dataset {
    let rows = measured::read_rows(
        DATA,
        &CLASSES,
        ("iters_per_sec_", measured::Measure::UnitsPerSecond),
        2,
    );
    Dataset {
        classes: &CLASSES,
        reference: "V100-16GB",
        fast_tier: FAST_TIER,
        rows,
        salts: (0x9_a7e1_da7a, 0x9_a7e1_7e57),
    }
}

/// The measured slowdowns, `[job][other][class]` in the catalog's order.
fn colocation(cat: &Catalog, _: &mut StdRng) -> Vec<Vec<Vec<f64>>> {
    let mut lines = COLOCATION.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let mut by: HashMap<(&str, &str), Vec<f64>> = HashMap::new();
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = l.split(',').collect();
        let values = f[2..]
            .iter()
            .map(|x| x.parse::<f64>().expect("a number"))
            .collect();
        by.insert((f[0], f[1]), values);
    }
    let column = |name: &str| {
        header[2..]
            .iter()
            .position(|h| *h == name)
            .expect("a column per job type")
    };
    cat.jobs
        .iter()
        .map(|j| {
            cat.jobs
                .iter()
                .map(|k| {
                    let at = column(&k.name);
                    cat.classes
                        .iter()
                        .map(|c| by[&(j.name.as_str(), c.name.as_str())][at])
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// Replaces the policy's catalog, tiers, job types and pairs with this truth's; returns, per measured job
/// type, its true size and whether it is listed.
pub fn rewrite_policy(policy: &mut Value, seed: u64) -> Vec<(f64, bool)> {
    measured::rewrite_policy(policy, &dataset(), seed)
}

/// The truth of one seed (`sizes` from [`rewrite_policy`]); appends the unlisted job types to `cat`.
pub fn generate(cat: &mut Catalog, policy: &Value, sizes: &[(f64, bool)], seed: u64) -> Truth {
    measured::generate(cat, policy, &dataset(), sizes, seed, colocation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(seed: u64) -> (Value, Catalog, Truth) {
        let mut policy: Value = serde_yaml::from_str(include_str!(
            "../../../deploy/kustomize/base/policy/default-policy.yaml"
        ))
        .unwrap();
        let sizes = rewrite_policy(&mut policy, seed);
        let mut cat = Catalog::from_policy(&policy).unwrap();
        let truth = generate(&mut cat, &policy, &sizes, seed);
        (policy, cat, truth)
    }

    #[test]
    fn measured_ratios_and_slowdowns() {
        let (policy, cat, truth) = setup(1);
        assert_eq!(cat.jobs.len(), 26);
        assert_eq!(cat.classes.len(), 3);
        assert_eq!(policy["jobTypes"].as_sequence().unwrap().len(), 13);
        assert_eq!(policy["jobTypes"][0]["name"], "resnet18-b16");
        assert_eq!(policy["jobTypes"][0]["family"], "resnet18-*");
        let job = |n: &str| cat.jobs.iter().position(|j| j.name == n).unwrap();
        let (p100, v100) = (
            cat.class_index("P100-16GB").unwrap(),
            cat.class_index("V100-16GB").unwrap(),
        );
        // The measured ratio: Recommendation at batch 512 runs 48.88 iterations/s on the P100, 23.32 on
        // the V100.
        let r = job("recommendation-b512");
        let ratio = truth.runtime[r][v100] / truth.runtime[r][p100];
        assert!((ratio - 48.8824 / 23.3176).abs() < 1e-6, "{ratio}");
        // The measured slowdown of ResNet-18 (batch 16) next to CycleGAN on the P100, as derived.
        assert!((truth.slowdown[job("resnet18-b16")][job("cyclegan")][p100] - 1.020).abs() < 1e-9);
        // The spec sheets are wrong for some job types, right for others.
        let wrong = truth.contradicted.iter().filter(|&&c| c).count();
        assert!(wrong > 0 && wrong < 26, "{wrong}");
        // Seeded sizes, the same measurements.
        assert_eq!(setup(1).2.runtime, truth.runtime);
        assert_ne!(setup(2).2.runtime, truth.runtime);
        assert_eq!(setup(2).2.slowdown, truth.slowdown);
    }
}
