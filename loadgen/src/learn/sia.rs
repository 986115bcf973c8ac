//! The second truth of `loadgen learn` (`--truth sia`): measured throughputs nobody here designed.
//!
//! The runtimes come from the published profiles of Sia (SOSP'23, `siasosp23/artifacts`), reduced by
//! `loadgen/data/sia/derive.py` to [`DATA`]: per job type (a model at a per-GPU batch size: 23 of them,
//! BERT, CIFAR-10, DeepSpeech2, ImageNet, NCF, YOLOv3) the measured seconds per training sample on one GPU
//! of five classes (T4, V100, A100, Quadro RTX 6000, RTX 2080 Ti: three GPU generations) and a measured
//! GPU-scaling exponent. Where those measurements disagree with spec sheets is what the scorer must learn
//! (the A100 is slower than the V100 on DeepSpeech2, the V100 ten times slower than the T4 on NCF).
//!
//! The policy the scorers run and what is drawn per seed are as for every measured truth
//! ([`super::measured`]): the catalog ([`CLASSES`]) has relative throughput from the spec sheets (FP16
//! tensor TFLOPS against the A100's 312) and prices per GPU-hour from list prices (on-demand 2023:
//! g4dn.12xlarge / 4, ND40rs_v2 / 8, p4d.24xlarge / 8; the two workstation cards, which no large cloud rents,
//! at assumed prices); the reference class of the drawn sizes is the A100. Co-location slowdowns (Sia
//! measured none) are the cluster truth's generator with no prior pairs, i.e. default 0.05, 10 % of the
//! pairs 0.35–0.9, per direction and per class.
use serde_yaml::Value;

use super::cluster::interference;
use super::measured::{self, Dataset, MeasuredClass};
use super::truth::{Catalog, Truth};

/// `loadgen/data/sia/throughput.csv`, derived by `loadgen/data/sia/derive.py`.
pub const DATA: &str = include_str!("../../data/sia/throughput.csv");

/// The benchmark's fastest tier of this truth (the cheapest one is [`super::SPOT_TIER`]).
pub const FAST_TIER: &str = "bench-fast";

/// The measured classes (see [`MeasuredClass`]).
pub const CLASSES: [MeasuredClass; 5] = [
    ("T4-16GB", 16.0, 0.21, 0.98, 4),
    ("V100-32GB", 32.0, 0.40, 2.75, 8),
    ("A100-40GB", 40.0, 1.0, 4.10, 8),
    ("RTX6000-24GB", 24.0, 0.42, 1.25, 4),
    ("RTX2080Ti-11GB", 11.0, 0.34, 0.60, 8),
];

/// The measurements of [`DATA`] as a data set.
fn dataset() -> Dataset {
    let rows = measured::read_rows(
        DATA,
        &CLASSES,
        ("sec_per_sample_", measured::Measure::SecondsPerUnit),
        3,
    );
    Dataset {
        classes: &CLASSES,
        reference: "A100-40GB",
        fast_tier: FAST_TIER,
        rows,
        salts: (0x51a_da7a, 0x51a_7e57),
    }
}

/// Replaces the policy's catalog, tiers, job types and pairs with this truth's; returns, per measured job
/// type, its true size and whether it is listed.
pub fn rewrite_policy(policy: &mut Value, seed: u64) -> Vec<(f64, bool)> {
    measured::rewrite_policy(policy, &dataset(), seed)
}

/// The truth of one seed (`sizes` from [`rewrite_policy`]); appends the unlisted job types to `cat`.
pub fn generate(cat: &mut Catalog, policy: &Value, sizes: &[(f64, bool)], seed: u64) -> Truth {
    measured::generate(cat, policy, &dataset(), sizes, seed, interference)
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
    fn measured_ratios_some_listed_some_contradicted() {
        let (policy, cat, truth) = setup(1);
        assert_eq!(cat.jobs.len(), 23);
        assert_eq!(cat.classes.len(), 5);
        assert_eq!(policy["jobTypes"].as_sequence().unwrap().len(), 12);
        assert_eq!(cat.jobs.iter().filter(|j| !j.listed).count(), 11);
        // A listed job type's family is its model's.
        assert_eq!(policy["jobTypes"][0]["name"], "bert-b4");
        assert_eq!(policy["jobTypes"][0]["family"], "bert-*");
        // The ratios between classes are the measured ones, whatever the drawn size.
        let j = cat.jobs.iter().position(|j| j.name == "ncf-b32").unwrap();
        let (t4, v100) = (
            cat.class_index("T4-16GB").unwrap(),
            cat.class_index("V100-32GB").unwrap(),
        );
        let ratio = truth.runtime[j][v100] / truth.runtime[j][t4];
        assert!((ratio - 0.00304984 / 0.000237473).abs() < 1e-6, "{ratio}");
        // The spec sheets are wrong for some job types, right for others.
        let wrong = truth.contradicted.iter().filter(|&&c| c).count();
        assert!(wrong > 0 && wrong < 23, "{wrong}");
        // Seeded.
        assert_eq!(setup(1).2.runtime, truth.runtime);
        assert_ne!(setup(2).2.runtime, truth.runtime);
    }
}
