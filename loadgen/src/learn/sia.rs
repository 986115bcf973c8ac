//! The second truth of `loadgen learn` (`--truth sia`): measured throughputs nobody here designed.
//!
//! The runtimes come from the published profiles of Sia (SOSP'23, `siasosp23/artifacts`), reduced by
//! `loadgen/data/sia/derive.py` to [`DATA`]: per job type (a model at a per-GPU batch size: 23 of them,
//! BERT, CIFAR-10, DeepSpeech2, ImageNet, NCF, YOLOv3) the measured seconds per training sample on one GPU
//! of five classes (T4, V100, A100, Quadro RTX 6000, RTX 2080 Ti: three GPU generations) and a measured
//! GPU-scaling exponent. Where those measurements disagree with spec sheets is what the scorer must learn
//! (the A100 is slower than the V100 on DeepSpeech2, the V100 ten times slower than the T4 on NCF).
//!
//! The policy the scorers run is the default one with its catalog, tiers and job types replaced:
//! - **catalog** ([`CLASSES`]): relative throughput from the spec sheets (FP16 tensor TFLOPS against the
//!   A100's 312), prices per GPU-hour from list prices (on-demand 2023: g4dn.12xlarge / 4, ND40rs_v2 / 8,
//!   p4d.24xlarge / 8; the two workstation cards, which no large cloud rents, at assumed prices);
//! - **tiers**: `bench-fast` (`fastest`) and the benchmark's `bench-spot` (`cheapest`), both over every class;
//! - **job types**: every other one listed (training, a prior a platform team would write: its true size
//!   × lognormal(0.3), throughput exponent 1 as the spec sheet suggests, its family `<model>-*`: the
//!   measurements' model name, which the unlisted job types of the model match too), the others **not
//!   listed**; [`LATE`]
//!   of them first appear between 15 % and 60 % of the run; no interference pairs.
//!
//! What is drawn per seed (only where the measurements say nothing): a job type's size (its 1-GPU runtime
//! on the A100, 4 h × lognormal(0.5): the number of samples it trains on; the ratios between classes are the
//! measured ones), run-to-run noise (σ 0.10–0.20 of ln runtime, 3 % stragglers as in the cluster truth)
//! and co-location slowdowns (Sia measured none: the cluster truth's generator with no prior pairs, i.e.
//! default 0.05, 10 % of the pairs 0.35–0.9, per direction and per class).
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::{Mapping, Value};

use super::cluster::{STRAGGLERS, interference};
use super::truth::{Catalog, JobType, Truth, normal};

/// `loadgen/data/sia/throughput.csv`, derived by `loadgen/data/sia/derive.py`.
pub const DATA: &str = include_str!("../../data/sia/throughput.csv");

/// The benchmark's fastest tier of this truth (the cheapest one is [`super::SPOT_TIER`]).
pub const FAST_TIER: &str = "bench-fast";

/// Job types that first appear mid-run.
const LATE: usize = 6;
/// Workload class of every job type here (all are training jobs).
const WORKLOAD: &str = "training";
/// Size of a job type: its 1-GPU runtime on the A100 (median, seconds).
const SIZE: f64 = 14_400.0;

/// A measured class: (name, memory GiB, spec-sheet relative throughput, price per GPU-hour, GPUs per node).
pub const CLASSES: [(&str, f64, f64, f64, u32); 5] = [
    ("T4-16GB", 16.0, 0.21, 0.98, 4),
    ("V100-32GB", 32.0, 0.40, 2.75, 8),
    ("A100-40GB", 40.0, 1.0, 4.10, 8),
    ("RTX6000-24GB", 24.0, 0.42, 1.25, 4),
    ("RTX2080Ti-11GB", 11.0, 0.34, 0.60, 8),
];

/// One row of [`DATA`].
#[derive(Debug, Clone)]
struct Measured {
    name: String,
    /// The model it trains (its family: the job types of one model share how they deviate from the spec
    /// sheets).
    model: String,
    scaling: f64,
    /// Seconds per sample on one GPU, in [`CLASSES`] order.
    per_sample: Vec<f64>,
}

fn measured() -> Vec<Measured> {
    let mut lines = DATA.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = |class: &str| {
        header
            .iter()
            .position(|h| h.strip_prefix("sec_per_sample_") == Some(class))
            .expect("a column per class")
    };
    let columns: Vec<usize> = CLASSES.iter().map(|c| column(c.0)).collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let num = |i: usize| f[i].parse::<f64>().expect("a number");
            Measured {
                name: f[0].to_string(),
                model: f[1].to_string(),
                scaling: num(3),
                per_sample: columns.iter().map(|&i| num(i)).collect(),
            }
        })
        .collect()
}

/// Replaces the policy's catalog, tiers, job types and pairs with this truth's (see the module's doc);
/// returns, per measured job type, its true size and whether it is listed.
pub fn rewrite_policy(policy: &mut Value, seed: u64) -> Vec<(f64, bool)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x51a_da7a);
    let template = policy
        .get("catalog")
        .and_then(Value::as_sequence)
        .and_then(|s| s.first())
        .cloned()
        .unwrap_or(Value::Mapping(Mapping::new()));
    let catalog: Vec<Value> = CLASSES
        .iter()
        .map(|&(name, memory, throughput, price, per_node)| {
            let mut c = template.clone();
            if let Some(m) = c.as_mapping_mut() {
                // The template's identity (its node labels and DRA product names) is not these classes'.
                m.remove("nodeLabels");
                m.remove("dra");
                m.insert("name".into(), name.into());
                m.insert("memoryGiB".into(), memory.into());
                m.insert("relativeThroughput".into(), throughput.into());
                m.insert("pricePerHour".into(), price.into());
                m.insert("gpusPerNode".into(), u64::from(per_node).into());
            }
            c
        })
        .collect();
    let names: Vec<Value> = CLASSES.iter().map(|c| c.0.into()).collect();
    let mut fast = Mapping::new();
    fast.insert("name".into(), FAST_TIER.into());
    fast.insert("allowedClasses".into(), Value::Sequence(names));
    fast.insert("objective".into(), "fastest".into());
    fast.insert("priorityWeight".into(), 0.6.into());
    let mut jobs = Vec::new();
    let sizes = measured()
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let size = SIZE * (0.5 * normal(&mut rng)).exp();
            let listed = k % 2 == 0;
            if listed {
                let base = (size * (0.3 * normal(&mut rng)).exp() / 100.0)
                    .round()
                    .max(1.0)
                    * 100.0;
                let mut j = Mapping::new();
                j.insert("name".into(), m.name.clone().into());
                j.insert("workloadClass".into(), WORKLOAD.into());
                j.insert("baseRuntimeSeconds".into(), base.into());
                j.insert("relativeStddev".into(), 0.4.into());
                j.insert("throughputExponent".into(), 1.0.into());
                j.insert("family".into(), format!("{}-*", m.model).into());
                jobs.push(Value::Mapping(j));
            }
            (size, listed)
        })
        .collect();
    if let Some(m) = policy.as_mapping_mut() {
        m.insert("catalog".into(), Value::Sequence(catalog));
        m.insert("tiers".into(), Value::Sequence(vec![Value::Mapping(fast)]));
        m.insert("defaultTier".into(), FAST_TIER.into());
        m.insert("jobTypes".into(), Value::Sequence(jobs));
        m.insert("namespaceGrants".into(), Value::Sequence(Vec::new()));
    }
    if let Some(i) = policy
        .get_mut("interference")
        .and_then(Value::as_mapping_mut)
    {
        i.insert("pairs".into(), Value::Sequence(Vec::new()));
    }
    sizes
}

/// The truth of one seed, on the catalog read back from the rewritten policy (`sizes` from
/// [`rewrite_policy`]); appends the unlisted job types to `cat`.
pub fn generate(cat: &mut Catalog, policy: &Value, sizes: &[(f64, bool)], seed: u64) -> Truth {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x51a_7e57);
    let rows = measured();
    let (base_w, exponent_w) = Catalog::workload_profile(policy, WORKLOAD);
    // The catalog's jobs in the data's order: the listed ones from the policy, the others added here.
    let mut jobs = Vec::with_capacity(rows.len());
    for (m, &(_, listed)) in rows.iter().zip(sizes) {
        let job = cat
            .jobs
            .iter()
            .find(|j| j.name == m.name)
            .cloned()
            .unwrap_or(JobType {
                name: m.name.clone(),
                workload: WORKLOAD.into(),
                base: base_w,
                exponent: exponent_w,
                listed,
                appears_at: 0.0,
            });
        jobs.push(job);
    }
    cat.jobs = jobs;
    let nj = cat.jobs.len();
    for _ in 0..LATE.min(nj.saturating_sub(1)) {
        let j = rng.random_range(0..nj);
        cat.jobs[j].appears_at = rng.random_range(0.15..0.6);
    }
    let class_of = |name: &str| CLASSES.iter().position(|c| c.0 == name);
    let reference = class_of("A100-40GB").expect("the A100 is measured");
    let runtime: Vec<Vec<f64>> = rows
        .iter()
        .zip(sizes)
        .map(|(m, &(size, _))| {
            cat.classes
                .iter()
                .map(|c| {
                    let k = class_of(&c.name).expect("a measured class");
                    size * m.per_sample[k] / m.per_sample[reference]
                })
                .collect()
        })
        .collect();
    let contradicted = (0..nj)
        .map(|j| prior_is_wrong(cat, &runtime[j], j))
        .collect();
    Truth {
        runtime,
        slowdown: interference(cat, &mut rng),
        scaling: rows.iter().map(|m| m.scaling).collect(),
        noise: (0..nj).map(|_| rng.random_range(0.10..0.20)).collect(),
        stragglers: STRAGGLERS,
        pinned: Vec::new(),
        contradicted,
    }
}

/// Whether the class the prior calls cheapest (spec-sheet throughput, the job type's prior exponent) is
/// not the truly cheapest one.
fn prior_is_wrong(cat: &Catalog, runtime: &[f64], j: usize) -> bool {
    let job = &cat.jobs[j];
    let argmin = |cost: &dyn Fn(usize) -> f64| {
        (0..cat.classes.len()).min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
    };
    let price = |c: usize| cat.classes[c].price;
    let prior = argmin(&|c| price(c) / cat.classes[c].throughput.powf(job.exponent));
    let truth = argmin(&|c| price(c) * runtime[c]);
    prior != truth
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
