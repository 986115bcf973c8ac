//! `loadgen learn`: the decision-quality benchmark of the scorer's learning.
//!
//! A synthetic cluster with a hidden ground truth ([`cluster`] by default, [`truth`]'s classic one with
//! `--truth classic`) drives the real scorer process over gRPC: for every job, `Score`, then (after
//! `--feedback-delay` later decisions, as runs take time) `Observe` with a runtime drawn from the truth on
//! the class the scorer chose. Each decision is compared with what an oracle that knows the truth would
//! have chosen, with the best single static class of the tier (in hindsight), and with a second scorer
//! that never learns (its priors only). With `--seeds`, one run per seed (fresh scorers each), then the
//! mean and spread. See [`report`].
pub mod cluster;
pub mod gavel;
pub mod measured;
pub mod report;
pub mod sia;
pub mod truth;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_proto::scorer::v1::{self as pb, scorer_client::ScorerClient};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::Value;
use tonic::transport::Channel;

use crate::cli::{LearnArgs, TruthKind};
use crate::spawn::Service;
use report::{Decision, Outcome, Report, Summary};
use truth::{Catalog, Truth};

/// The policy the scorer embeds (the benchmark's default).
const DEFAULT_POLICY: &str =
    include_str!("../../../deploy/kustomize/base/policy/default-policy.yaml");

/// Name of the tier the benchmark adds: `cheapest` over the whole catalog (the default policy's only
/// `cheapest` tier allows a single class, which leaves nothing to learn).
pub const SPOT_TIER: &str = "bench-spot";

/// The namespace (tenant) every job of the benchmark runs in, and asks its avoid-lists as.
const NAMESPACE: &str = "bench";

/// GPU counts of the generated jobs (1-8, small ones more frequent).
const GPU_COUNTS: [u32; 7] = [1, 1, 1, 2, 2, 4, 8];

/// How the job stream of a truth is drawn.
#[derive(Debug, Clone, Copy)]
struct StreamShape {
    /// Share of jobs that run next to 1-2 other job types.
    colocated: f64,
    /// Share of jobs in the `cheapest` tier (`None`: every tier that leaves a choice equally often).
    cheapest: Option<f64>,
}

impl StreamShape {
    fn of(kind: TruthKind) -> Self {
        match kind {
            TruthKind::Classic => Self {
                colocated: 0.4,
                cheapest: None,
            },
            TruthKind::Cluster | TruthKind::Sia | TruthKind::Gavel => Self {
                colocated: 0.5,
                cheapest: Some(0.5),
            },
        }
    }
}

pub async fn run(args: LearnArgs) -> Result<i32> {
    let seeds = if args.seeds.is_empty() {
        vec![args.seed]
    } else {
        args.seeds.clone()
    };
    let mut truths = args.truth.clone();
    truths.dedup();
    let mut all = Vec::new();
    let mut summaries = Vec::new();
    for &kind in &truths {
        let mut reports = Vec::with_capacity(seeds.len());
        for (seed, learner) in seeds
            .iter()
            .flat_map(|&s| (0..args.learner_seeds).map(move |l| (s, l)))
        {
            let report = run_seed(&args, kind, seed, learner).await?;
            report.print();
            if let Some(path) = args.svg.as_ref().filter(|_| learner == 0) {
                let name = svg_path(path, kind, seed, seeds.len(), truths.len());
                report::plot(&name, &report)?;
            }
            reports.push(report);
        }
        let summary = Summary::of(&reports);
        if reports.len() > 1 {
            summary.print(&format!("{kind:?}").to_lowercase());
        }
        summaries.push((format!("{kind:?}").to_lowercase(), summary));
        all.extend(reports);
    }
    if summaries.len() > 1 {
        report::print_side_by_side(&summaries);
    }
    if let Some(path) = &args.json {
        let by_truth: serde_json::Map<String, serde_json::Value> = summaries
            .iter()
            .map(|(t, s)| Ok((t.clone(), serde_json::to_value(s)?)))
            .collect::<Result<_>>()?;
        let out = serde_json::json!({
            "summary": summaries.first().map(|s| &s.1),
            "summary_by_truth": by_truth,
            "runs": all,
        });
        write_file(path, &serde_json::to_vec_pretty(&out)?)?;
    }
    Ok(0)
}

/// `learn.svg` for one seed of one truth, `learn-seed3.svg` for each of several seeds, `learn-sia-seed3.svg`
/// when several truths run.
fn svg_path(path: &Path, kind: TruthKind, seed: u64, seeds: usize, truths: usize) -> PathBuf {
    if seeds <= 1 && truths <= 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("learn");
    let truth = if truths > 1 {
        format!("-{}", format!("{kind:?}").to_lowercase())
    } else {
        String::new()
    };
    path.with_file_name(format!("{stem}{truth}-seed{seed}.svg"))
}

/// The policy, catalog and truth of one seed: the policy the scorers run gets the spot tier (and, for the
/// cluster truth, its listed job types; for the Sia and Gavel truths, their measured classes and job types), and its
/// `learning.seed` moved by `learner` (0: the policy's own).
fn setup(
    args: &LearnArgs,
    kind: TruthKind,
    seed: u64,
    learner: u64,
) -> Result<(Value, Catalog, Truth)> {
    let text = match &args.policy {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => DEFAULT_POLICY.to_string(),
    };
    let mut policy: Value = serde_yaml::from_str(&text).context("parsing the policy")?;
    move_learner_seed(&mut policy, learner)?;
    let sizes = match kind {
        TruthKind::Sia => sia::rewrite_policy(&mut policy, seed),
        TruthKind::Gavel => gavel::rewrite_policy(&mut policy, seed),
        TruthKind::Classic | TruthKind::Cluster => Vec::new(),
    };
    add_spot_tier(&mut policy);
    let mut cat = Catalog::from_policy(&policy)?;
    let mut truth = match kind {
        TruthKind::Classic => Truth::classic(&cat, seed),
        TruthKind::Cluster => cluster::generate(&mut policy, &mut cat, seed, args.job_types),
        TruthKind::Sia => sia::generate(&mut cat, &policy, &sizes, seed),
        TruthKind::Gavel => gavel::generate(&mut cat, &policy, &sizes, seed),
    };
    if args.no_colocation_slowdowns {
        truth.remove_colocation_slowdowns();
    }
    if args.separable_colocation_slowdowns {
        truth.make_colocation_separable();
    }
    Ok((policy, cat, truth))
}

/// Adds `by` to the policy's `learning.seed` (the seed mixed into every decision's draws).
fn move_learner_seed(policy: &mut Value, by: u64) -> Result<()> {
    if by == 0 {
        return Ok(());
    }
    let learning = policy
        .get_mut("learning")
        .and_then(Value::as_mapping_mut)
        .context("the policy has no `learning` section")?;
    let own = learning.get("seed").and_then(Value::as_u64).unwrap_or(0);
    learning.insert("seed".into(), own.wrapping_add(by).into());
    Ok(())
}

/// The two scorers of one run (learning, prior-only), started on the written policy.
async fn start_scorers(
    args: &LearnArgs,
    policy: &Value,
    kind: TruthKind,
    seed: u64,
    learner: u64,
) -> Result<[Service; 2]> {
    let work = match &args.work_dir {
        Some(d) => d.join(format!(
            "{}-seed-{seed}{}",
            format!("{kind:?}").to_lowercase(),
            if learner > 0 {
                format!("-learner-{learner}")
            } else {
                String::new()
            }
        )),
        None => tempfile::Builder::new()
            .prefix("loadgen-learn-")
            .tempdir()?
            .keep(),
    };
    std::fs::create_dir_all(&work)?;
    let policy_path = work.join("policy.yaml");
    std::fs::write(&policy_path, serde_yaml::to_string(policy)?)?;
    let bin = scorer_bin(args.bin_dir.clone())?;
    let start = |name: &'static str| {
        let args = vec![
            "--listen".to_string(),
            "127.0.0.1:0".into(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--policy-file".into(),
            policy_path.display().to_string(),
        ];
        Service::start(name, &bin, args, work.join(format!("{name}.log")))
    };
    Ok([
        start("scorer-learning").await?,
        start("scorer-prior-only").await?,
    ])
}

/// One job of the stream.
struct Job {
    j: usize,
    tier: String,
    cheapest: bool,
    gpus: u32,
    colocated: Vec<usize>,
}

/// Draws job `i` of `n`: a job type among those that have appeared, a tier, a size, its neighbours.
fn draw_job(
    rng: &mut StdRng,
    cat: &Catalog,
    tiers: &[(String, bool)],
    shape: StreamShape,
    i: usize,
    n: usize,
) -> Job {
    let progress = i as f64 / n.max(1) as f64;
    let active: Vec<usize> = (0..cat.jobs.len())
        .filter(|&j| cat.jobs[j].appears_at <= progress)
        .collect();
    let j = active[rng.random_range(0..active.len())];
    let (tier, cheapest) = match shape.cheapest {
        None => tiers[rng.random_range(0..tiers.len())].clone(),
        Some(share) => {
            let want = rng.random::<f64>() < share;
            let of: Vec<&(String, bool)> = tiers.iter().filter(|t| t.1 == want).collect();
            let pick = if of.is_empty() {
                tiers.iter().collect()
            } else {
                of
            };
            pick[rng.random_range(0..pick.len())].clone()
        }
    };
    let gpus = GPU_COUNTS[rng.random_range(0..GPU_COUNTS.len())];
    let colocated: Vec<usize> = if rng.random::<f64>() < shape.colocated {
        (0..rng.random_range(1..=2))
            .map(|_| active[rng.random_range(0..active.len())])
            .collect()
    } else {
        Vec::new()
    };
    Job {
        j,
        tier,
        cheapest,
        gpus,
        colocated,
    }
}

fn workload_pb(name: &str) -> pb::WorkloadClass {
    match name {
        "training" => pb::WorkloadClass::Training,
        "inference" => pb::WorkloadClass::Inference,
        "batch" => pb::WorkloadClass::Batch,
        "interactive" => pb::WorkloadClass::Interactive,
        _ => pb::WorkloadClass::Unknown,
    }
}

/// One seed, with the scorer's randomness moved by `learner_seed`: fresh scorers, `--decisions` jobs, the
/// avoid-lists at the end.
async fn run_seed(
    args: &LearnArgs,
    kind: TruthKind,
    seed: u64,
    learner_seed: u64,
) -> Result<Report> {
    let (policy, cat, truth) = setup(args, kind, seed, learner_seed)?;
    let services = start_scorers(args, &policy, kind, seed, learner_seed).await?;
    let mut learner = client(&services[0]).await?;
    let mut prior = client(&services[1]).await?;
    let answer = learner.get_policy(pb::GetPolicyRequest {}).await?;
    let threshold = (PolicySnapshot::from_response(&answer.into_inner())?.policy)
        .map_or(0.0, |p| p.anti_affinity_threshold);
    let tiers: Vec<(String, bool)> = choice_tiers(&policy, &cat);
    let shape = StreamShape::of(kind);
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1ea2);
    let mut pending: VecDeque<pb::ObserveRequest> = VecDeque::new();
    let mut decisions = Vec::with_capacity(args.decisions);
    let mut infeasible = 0usize;
    let mut refused = 0usize;
    let mut cap = 0.0;
    for i in 0..args.decisions {
        let job = draw_job(&mut rng, &cat, &tiers, shape, i, args.decisions);
        let names = |ks: &[usize]| -> Vec<String> {
            ks.iter().map(|&k| cat.jobs[k].name.clone()).collect()
        };
        let workload = workload_pb(&cat.jobs[job.j].workload) as i32;
        let req = pb::ScoreRequest {
            request_id: format!("learn-{seed}-{i}"),
            namespace: NAMESPACE.into(),
            tier: job.tier.clone(),
            job_type: cat.jobs[job.j].name.clone(),
            workload_class: workload,
            gpu_count: job.gpus,
            colocated_job_types: names(&job.colocated),
            ..Default::default()
        };
        let answer = learner.score(req.clone()).await?.into_inner();
        let baseline = prior.explain(req).await?.into_inner();
        if i == 0 {
            cap = baseline.exploration_cap;
        }
        let Some(d) = decision(&cat, &truth, &job, &answer, &baseline)? else {
            infeasible += 1;
            continue;
        };
        let runtime = truth.sample(&mut rng, job.j, d.chosen, job.gpus, &job.colocated);
        pending.push_back(pb::ObserveRequest {
            job_type: cat.jobs[job.j].name.clone(),
            gpu_class: cat.classes[d.chosen].name.clone(),
            runtime_seconds: runtime,
            colocated_job_types: names(&job.colocated),
            observation_id: format!("pod-{seed}-{i}"),
            gpu_count: job.gpus,
            workload_class: workload,
            namespace: NAMESPACE.into(),
            tier: job.tier.clone(),
            gpu_shape: pb::GpuShape::Whole as i32,
        });
        decisions.push(d);
        while pending.len() > args.feedback_delay {
            let o = pending.pop_front().expect("non-empty");
            refused += observe(&mut learner, o).await?;
        }
    }
    for o in pending.drain(..) {
        refused += observe(&mut learner, o).await?;
    }
    let avoid = avoid_lists(&cat, &tiers[0].0, &mut learner).await?;
    let avoid_prior = avoid_lists(&cat, &tiers[0].0, &mut prior).await?;
    let outcome = Outcome {
        learner_seed,
        decisions,
        infeasible,
        refused,
        cap,
        threshold,
        avoid,
        avoid_prior,
    };
    Ok(Report::build(args, kind, seed, &cat, &truth, &outcome))
}

/// Reports one run; 1 when the scorer refused it (`INVALID_ARGUMENT`: a scorer that learns only the job
/// types its policy lists), 0 when learned.
async fn observe(scorer: &mut ScorerClient<Channel>, o: pb::ObserveRequest) -> Result<usize> {
    match scorer.observe(o).await {
        Ok(_) => Ok(0),
        Err(s) if s.code() == tonic::Code::InvalidArgument => Ok(1),
        Err(s) => Err(s.into()),
    }
}

/// The decision as the report needs it: what the learner and the prior-only scorer chose, and the true
/// expected cost of every feasible class; `None` when no class was feasible.
fn decision(
    cat: &Catalog,
    truth: &Truth,
    job: &Job,
    answer: &pb::ScoreResponse,
    baseline: &pb::ExplainResponse,
) -> Result<Option<Decision>> {
    let (Some(chosen), Some(prior_choice)) = (
        answer.accepted_classes.first(),
        baseline
            .answer
            .as_ref()
            .and_then(|a| a.accepted_classes.first()),
    ) else {
        return Ok(None);
    };
    let index = |name: &str| cat.class_index(name).context("class not in the catalog");
    let true_cost = |k: usize| {
        let runtime = truth.expected(job.j, k, job.gpus, &job.colocated);
        if job.cheapest {
            runtime * cat.classes[k].price * f64::from(job.gpus) / 3600.0
        } else {
            runtime
        }
    };
    let mut costs = vec![None; cat.classes.len()];
    for cand in answer.candidates.iter().filter(|c| c.feasible) {
        let k = index(&cand.gpu_class)?;
        costs[k] = Some(true_cost(k));
    }
    Ok(Some(Decision {
        tier: job.tier.clone(),
        cheapest: job.cheapest,
        job: job.j,
        chosen: index(&chosen.name)?,
        prior: index(&prior_choice.name)?,
        costs,
        explored: answer.explored,
        colocated: job.colocated.clone(),
    }))
}

/// Every job type's avoid-list as `scorer` answers it now to the namespace that ran the jobs (indices into
/// `cat.jobs`).
async fn avoid_lists(
    cat: &Catalog,
    tier: &str,
    scorer: &mut ScorerClient<Channel>,
) -> Result<Vec<Vec<usize>>> {
    let mut lists = Vec::with_capacity(cat.jobs.len());
    for job in &cat.jobs {
        let req = pb::ScoreRequest {
            request_id: "avoid".into(),
            namespace: NAMESPACE.into(),
            tier: tier.to_string(),
            job_type: job.name.clone(),
            workload_class: workload_pb(&job.workload) as i32,
            gpu_count: 1,
            ..Default::default()
        };
        let answer = scorer.explain(req).await?.into_inner().answer;
        lists.push(
            answer
                .map(|a| a.avoid_job_types)
                .unwrap_or_default()
                .iter()
                .filter_map(|n| cat.jobs.iter().position(|x| &x.name == n))
                .collect(),
        );
    }
    Ok(lists)
}

fn write_file(path: &PathBuf, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

async fn client(svc: &Service) -> Result<ScorerClient<Channel>> {
    let ch = Channel::from_shared(format!("http://{}", svc.addr))?
        .connect()
        .await
        .with_context(|| format!("connecting to {} at {}", svc.name, svc.addr))?;
    Ok(ScorerClient::new(ch))
}

/// The scorer binary: `--bin-dir`, else next to loadgen's own executable.
fn scorer_bin(dir: Option<PathBuf>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::current_exe()?
            .parent()
            .context("executable without a directory")?
            .to_path_buf(),
    };
    let bin = dir.join("scorer");
    anyhow::ensure!(
        bin.is_file(),
        "`scorer` not found in {} (build it: `cargo build --release -p scorer -p loadgen`, or pass --bin-dir)",
        dir.display()
    );
    Ok(bin)
}

/// Adds [`SPOT_TIER`]: every class allowed, objective `cheapest`.
fn add_spot_tier(policy: &mut Value) {
    let classes: Vec<Value> = policy
        .get("catalog")
        .and_then(Value::as_sequence)
        .map(|s| s.iter().filter_map(|c| c.get("name").cloned()).collect())
        .unwrap_or_default();
    if let Some(tiers) = policy.get_mut("tiers").and_then(Value::as_sequence_mut) {
        let mut t = serde_yaml::Mapping::new();
        t.insert("name".into(), SPOT_TIER.into());
        t.insert("allowedClasses".into(), Value::Sequence(classes));
        t.insert("objective".into(), "cheapest".into());
        t.insert("priorityWeight".into(), 0.3.into());
        tiers.push(Value::Mapping(t));
    }
}

/// Tiers that leave a choice (more than one allowed class), with whether they minimise cost.
fn choice_tiers(policy: &Value, cat: &Catalog) -> Vec<(String, bool)> {
    let allowed = |name: &str| {
        policy
            .get("tiers")
            .and_then(Value::as_sequence)
            .and_then(|ts| {
                ts.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            })
            .and_then(|t| t.get("allowedClasses"))
            .and_then(Value::as_sequence)
            .map_or(0, Vec::len)
    };
    cat.tiers
        .iter()
        .filter(|t| allowed(&t.name) > 1)
        .map(|t| (t.name.clone(), t.cheapest))
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(extra: &[&str]) -> LearnArgs {
        let argv = ["loadgen", "learn"].iter().chain(extra);
        match Cli::parse_from(argv).command {
            Some(Command::Learn(a)) => a,
            other => panic!("not `learn`: {other:?}"),
        }
    }

    #[test]
    fn without_colocation_slowdowns_neighbours_cost_nothing_and_the_rest_is_the_same() {
        for kind in [
            TruthKind::Gavel,
            TruthKind::Sia,
            TruthKind::Cluster,
            TruthKind::Classic,
        ] {
            let (_, cat, on) = setup(&args(&[]), kind, 7, 0).unwrap();
            let (_, _, off) = setup(&args(&["--no-colocation-slowdowns"]), kind, 7, 0).unwrap();
            let harmful = |t: &Truth| {
                t.slowdown
                    .iter()
                    .flatten()
                    .flatten()
                    .filter(|&&x| x > 0.3)
                    .count()
            };
            assert!(harmful(&on) > 0, "{kind:?}");
            assert_eq!(harmful(&off), 0, "{kind:?}");
            assert_eq!(on.runtime, off.runtime, "{kind:?}");
            let (_, _, separable) =
                setup(&args(&["--separable-colocation-slowdowns"]), kind, 7, 0).unwrap();
            let (n, classes) = (cat.jobs.len(), cat.classes.len());
            // Separable: each pair's mean kept, and one ratio between two classes for every pair.
            let ratio = |s: &[f64]| s[classes - 1] / s[0];
            let shared = ratio(&separable.slowdown[0][0]);
            for (j, k) in (0..n).flat_map(|j| (0..n).map(move |k| (j, k))) {
                let (a, b) = (on.pair_slowdown(j, k), separable.pair_slowdown(j, k));
                assert!((a - b).abs() < 1e-9, "{kind:?} {j} {k}: {a} {b}");
                if a > 0.0 {
                    assert!((ratio(&separable.slowdown[j][k]) - shared).abs() < 1e-9);
                }
            }
            for j in 0..n {
                for (k, c) in (0..n).flat_map(|k| (0..classes).map(move |c| (k, c))) {
                    assert_eq!(off.expected(j, c, 2, &[k, j]), off.expected(j, c, 2, &[]));
                    if on.slowdown[j][k][c] > 0.3 {
                        assert!(on.expected(j, c, 2, &[k]) > 1.3 * on.expected(j, c, 2, &[]));
                    }
                }
            }
        }
    }
}
