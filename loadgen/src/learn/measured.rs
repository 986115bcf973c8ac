//! What the truths built from published measurements ([`super::sia`], [`super::gavel`]) share: the policy
//! the scorers run (the measured classes with spec-sheet throughputs and list prices, every other job type
//! listed with a prior a platform team would write) and the truth drawn around the measured ratios.
//!
//! - **catalog**: the data set's classes, relative throughput from spec sheets, prices from list prices;
//! - **tiers**: the data set's `fastest` tier and the benchmark's `bench-spot` (`cheapest`), both over every
//!   class;
//! - **job types**: every other one listed (its workload class, a prior: its true size × lognormal(0.3),
//!   throughput exponent 1 as the spec sheet suggests, its family `<model>-*` when the model has more than
//!   one job type: the measurements' model name, which the unlisted job types of the model match too), the
//!   others **not listed**; [`LATE`] of them
//!   first appear between 15 % and 60 % of the run; no interference pairs.
//!
//! Drawn per seed (only where the measurements say nothing): a job type's size (its 1-GPU runtime on the
//! reference class, 4 h × lognormal(0.5); the ratios between classes are the measured ones), run-to-run
//! noise (σ 0.10–0.20 of ln runtime, 3 % stragglers as in the cluster truth); co-location slowdowns come
//! from the data set (measured, or drawn by it).
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::{Mapping, Value};

use super::cluster::STRAGGLERS;
use super::truth::{Catalog, JobType, Truth, normal};

/// Job types that first appear mid-run.
const LATE: usize = 6;
/// Workload class of every job type here (all are training jobs).
const WORKLOAD: &str = "training";
/// Size of a job type: its 1-GPU runtime on the reference class (median, seconds).
const SIZE: f64 = 14_400.0;

/// A measured class: (name, memory GiB, spec-sheet relative throughput, price per GPU-hour, GPUs per node).
pub type MeasuredClass = (&'static str, f64, f64, f64, u32);

/// One measured job type.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    /// The model it trains (its family: the job types of one model share how they deviate from the spec
    /// sheets).
    pub model: String,
    /// Measured GPU-scaling exponent (runtime ∝ 1/g^s).
    pub scaling: f64,
    /// Time of one unit of its work on one GPU, in the data set's class order (only ratios matter).
    pub unit_time: Vec<f64>,
}

/// How a derived throughput table states a job type's work on a class.
pub enum Measure {
    /// Seconds per unit of work (`sec_per_sample_<class>` columns).
    SecondsPerUnit,
    /// Units of work per second (`iters_per_sec_<class>` columns).
    UnitsPerSecond,
}

/// The rows of a derived throughput table: `name`, `model` first, the GPU-scaling exponent in column
/// `scaling`, and one column per class of `classes` named `<prefix><class>`.
pub fn read_rows(
    csv: &str,
    classes: &[MeasuredClass],
    (prefix, measure): (&str, Measure),
    scaling: usize,
) -> Vec<Row> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let column = |class: &str| {
        header
            .iter()
            .position(|h| h.strip_prefix(prefix) == Some(class))
            .expect("a column per class")
    };
    let columns: Vec<usize> = classes.iter().map(|c| column(c.0)).collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let num = |i: usize| f[i].parse::<f64>().expect("a number");
            Row {
                name: f[0].to_string(),
                model: f[1].to_string(),
                scaling: num(scaling),
                unit_time: columns
                    .iter()
                    .map(|&i| match measure {
                        Measure::SecondsPerUnit => num(i),
                        Measure::UnitsPerSecond => 1.0 / num(i),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// A data set of published measurements and how the benchmark names it.
pub struct Dataset {
    pub classes: &'static [MeasuredClass],
    /// The class whose runtime is the drawn size.
    pub reference: &'static str,
    /// The benchmark's fastest tier of this truth (the cheapest one is [`super::SPOT_TIER`]).
    pub fast_tier: &'static str,
    pub rows: Vec<Row>,
    /// Salts of the seed for the policy's draws and for the truth's.
    pub salts: (u64, u64),
}

/// Replaces the policy's catalog, tiers, job types and pairs with the data set's (see the module's doc);
/// returns, per measured job type, its true size and whether it is listed.
pub fn rewrite_policy(policy: &mut Value, data: &Dataset, seed: u64) -> Vec<(f64, bool)> {
    let mut rng = StdRng::seed_from_u64(seed ^ data.salts.0);
    let template = policy
        .get("catalog")
        .and_then(Value::as_sequence)
        .and_then(|s| s.first())
        .cloned()
        .unwrap_or(Value::Mapping(Mapping::new()));
    let catalog: Vec<Value> = data
        .classes
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
    let names: Vec<Value> = data.classes.iter().map(|c| c.0.into()).collect();
    let mut fast = Mapping::new();
    fast.insert("name".into(), data.fast_tier.into());
    fast.insert("allowedClasses".into(), Value::Sequence(names));
    fast.insert("objective".into(), "fastest".into());
    fast.insert("priorityWeight".into(), 0.6.into());
    let mut jobs = Vec::new();
    let sizes = data
        .rows
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
                if data.rows.iter().filter(|r| r.model == m.model).count() > 1 {
                    j.insert("family".into(), format!("{}-*", m.model).into());
                }
                jobs.push(Value::Mapping(j));
            }
            (size, listed)
        })
        .collect();
    if let Some(m) = policy.as_mapping_mut() {
        m.insert("catalog".into(), Value::Sequence(catalog));
        m.insert("tiers".into(), Value::Sequence(vec![Value::Mapping(fast)]));
        m.insert("defaultTier".into(), data.fast_tier.into());
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
/// [`rewrite_policy`]); appends the unlisted job types to `cat`. `slowdown` gives the co-location
/// slowdowns, `[job][other][class]` in the catalog's order.
pub fn generate(
    cat: &mut Catalog,
    policy: &Value,
    data: &Dataset,
    sizes: &[(f64, bool)],
    seed: u64,
    slowdown: impl FnOnce(&Catalog, &mut StdRng) -> Vec<Vec<Vec<f64>>>,
) -> Truth {
    let mut rng = StdRng::seed_from_u64(seed ^ data.salts.1);
    let rows = &data.rows;
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
    let reference = data
        .class_of(data.reference)
        .expect("the reference is measured");
    let runtime: Vec<Vec<f64>> = rows
        .iter()
        .zip(sizes)
        .map(|(m, &(size, _))| {
            cat.classes
                .iter()
                .map(|c| {
                    let k = data.class_of(&c.name).expect("a measured class");
                    size * m.unit_time[k] / m.unit_time[reference]
                })
                .collect()
        })
        .collect();
    let contradicted = (0..nj)
        .map(|j| prior_is_wrong(cat, &runtime[j], j))
        .collect();
    Truth {
        runtime,
        slowdown: slowdown(cat, &mut rng),
        scaling: rows.iter().map(|m| m.scaling).collect(),
        noise: (0..nj).map(|_| rng.random_range(0.10..0.20)).collect(),
        stragglers: STRAGGLERS,
        pinned: Vec::new(),
        contradicted,
    }
}

impl Dataset {
    /// Index of a class in the data set's order.
    pub fn class_of(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.0 == name)
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
