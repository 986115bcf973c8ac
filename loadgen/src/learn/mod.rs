//! `loadgen learn`: the decision-quality benchmark of the scorer's learning.
//!
//! A synthetic cluster with a hidden ground truth ([`truth`]) drives the real scorer process over gRPC:
//! for every job, `Score`, then (after `--feedback-delay` later decisions, as runs take time) `Observe`
//! with a runtime drawn from the truth on the class the scorer chose. Each decision is compared with
//! what an oracle that knows the truth would have chosen, with the best single static class of the tier
//! (in hindsight), and with a second scorer that never learns (its priors only). See [`report`].
pub mod report;
pub mod truth;

use std::collections::VecDeque;
use std::path::PathBuf;

use anyhow::{Context, Result};
use gpu_admission_proto::scorer::v1::{self as pb, scorer_client::ScorerClient};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::Value;
use tonic::transport::Channel;

use crate::cli::LearnArgs;
use crate::spawn::Service;
use report::{Decision, Report};
use truth::{Catalog, Truth};

/// The policy the scorer embeds (the benchmark's default).
const DEFAULT_POLICY: &str =
    include_str!("../../../deploy/kustomize/base/policy/default-policy.yaml");

/// Name of the tier the benchmark adds: `cheapest` over the whole catalog (the default policy's only
/// `cheapest` tier allows a single class, which leaves nothing to learn).
pub const SPOT_TIER: &str = "bench-spot";

/// GPU counts of the generated jobs (1-8, small ones more frequent).
const GPU_COUNTS: [u32; 7] = [1, 1, 1, 2, 2, 4, 8];
/// Share of jobs that run next to other job types.
const COLOCATED_SHARE: f64 = 0.4;

pub async fn run(args: LearnArgs) -> Result<i32> {
    let text = match &args.policy {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => DEFAULT_POLICY.to_string(),
    };
    let mut policy: Value = serde_yaml::from_str(&text).context("parsing the policy")?;
    add_spot_tier(&mut policy);
    let work = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => tempfile::Builder::new()
            .prefix("loadgen-learn-")
            .tempdir()?
            .keep(),
    };
    let policy_path = work.join("policy.yaml");
    std::fs::write(&policy_path, serde_yaml::to_string(&policy)?)?;

    let bin = scorer_bin(args.bin_dir.clone())?;
    let start = |name: &'static str| {
        let args = vec![
            "--listen".to_string(),
            "127.0.0.1:0".into(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--policy".into(),
            policy_path.display().to_string(),
        ];
        Service::start(name, &bin, args, work.join(format!("{name}.log")))
    };
    let learner_svc = start("scorer-learning").await?;
    let prior_svc = start("scorer-prior-only").await?;
    let mut learner = client(&learner_svc).await?;
    let mut prior = client(&prior_svc).await?;

    let cat = Catalog::from_policy(&policy)?;
    let truth = Truth::generate(&cat, args.seed);
    let threshold = learner
        .get_policy(pb::GetPolicyRequest {})
        .await?
        .into_inner()
        .anti_affinity_threshold;
    let tiers: Vec<(String, bool)> = choice_tiers(&policy, &cat);
    let mut rng = StdRng::seed_from_u64(args.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x1ea2);
    let mut pending: VecDeque<pb::ObserveRequest> = VecDeque::new();
    let mut decisions = Vec::with_capacity(args.decisions);
    let mut infeasible = 0usize;
    let mut cap = 0.0;
    for i in 0..args.decisions {
        let j = rng.random_range(0..cat.jobs.len());
        let (tier, cheapest) = tiers[rng.random_range(0..tiers.len())].clone();
        let gpus = GPU_COUNTS[rng.random_range(0..GPU_COUNTS.len())];
        let colocated: Vec<usize> = if rng.random::<f64>() < COLOCATED_SHARE {
            (0..rng.random_range(1..=2))
                .map(|_| rng.random_range(0..cat.jobs.len()))
                .collect()
        } else {
            Vec::new()
        };
        let req = pb::ScoreRequest {
            request_id: format!("learn-{}-{i}", args.seed),
            namespace: "bench".into(),
            tier: tier.clone(),
            job_type: cat.jobs[j].name.clone(),
            gpu_count: gpus,
            colocated_job_types: colocated
                .iter()
                .map(|&k| cat.jobs[k].name.clone())
                .collect(),
            ..Default::default()
        };
        let answer = learner.score(req.clone()).await?.into_inner();
        let baseline = prior.explain(req).await?.into_inner();
        if i == 0 {
            cap = baseline.exploration_cap;
        }
        let (Some(chosen), Some(prior_choice)) = (
            answer.accepted_classes.first(),
            baseline
                .answer
                .as_ref()
                .and_then(|a| a.accepted_classes.first()),
        ) else {
            infeasible += 1;
            continue;
        };
        let index = |name: &str| cat.class_index(name).context("class not in the catalog");
        let (c, p) = (index(&chosen.name)?, index(&prior_choice.name)?);
        let true_cost = |k: usize| {
            let runtime = truth.expected(j, k, gpus, &colocated);
            if cheapest {
                runtime * cat.classes[k].price * f64::from(gpus) / 3600.0
            } else {
                runtime
            }
        };
        let mut costs = vec![None; cat.classes.len()];
        for cand in answer.candidates.iter().filter(|c| c.feasible) {
            let k = index(&cand.gpu_class)?;
            costs[k] = Some(true_cost(k));
        }
        decisions.push(Decision {
            tier,
            cheapest,
            chosen: c,
            prior: p,
            costs,
            explored: answer.explored,
        });
        pending.push_back(pb::ObserveRequest {
            job_type: cat.jobs[j].name.clone(),
            gpu_class: chosen.name.clone(),
            runtime_seconds: truth.sample(&mut rng, j, c, gpus, &colocated),
            colocated_job_types: colocated
                .iter()
                .map(|&k| cat.jobs[k].name.clone())
                .collect(),
            observation_id: format!("pod-{}-{i}", args.seed),
            gpu_count: gpus,
        });
        while pending.len() > args.feedback_delay {
            let o = pending.pop_front().expect("non-empty");
            learner.observe(o).await?;
        }
    }
    for o in pending.drain(..) {
        learner.observe(o).await?;
    }

    // Avoid-lists at the end, against the truth.
    let mut avoid = Vec::new();
    let mut avoid_prior = Vec::new();
    for job in &cat.jobs {
        let req = pb::ScoreRequest {
            request_id: "avoid".into(),
            tier: tiers[0].0.clone(),
            job_type: job.name.clone(),
            gpu_count: 1,
            ..Default::default()
        };
        let names = |r: pb::ExplainResponse| {
            r.answer
                .map(|a| a.avoid_job_types)
                .unwrap_or_default()
                .iter()
                .filter_map(|n| cat.jobs.iter().position(|x| &x.name == n))
                .collect::<Vec<_>>()
        };
        avoid.push(names(learner.explain(req.clone()).await?.into_inner()));
        avoid_prior.push(names(prior.explain(req).await?.into_inner()));
    }

    let report = Report::build(
        &args,
        &cat,
        &truth,
        &decisions,
        infeasible,
        cap,
        threshold,
        &avoid,
        &avoid_prior,
    );
    report.print();
    if let Some(path) = &args.json {
        write_file(path, &serde_json::to_vec_pretty(&report)?)?;
    }
    if let Some(path) = &args.svg {
        report::plot(path, &report)?;
    }
    Ok(0)
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
