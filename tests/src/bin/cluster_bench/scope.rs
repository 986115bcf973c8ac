//! Part A, the cost of scope: on etcd + kube-apiserver alone (no scheduler: every Pod stays
//! Pending), the rate at which `clients` create `pods` Pods in tier namespaces the shipped registrations send
//! to the webhooks, against the same creation in as many tier namespaces the registrations exclude by name
//! (the control). GPU Pods, then CPU-only Pods naming a PriorityClass. Runs alternate webhooked, skipped,
//! webhooked, skipped…; every run's Pods are deleted before the next.

use anyhow::ensure;
use gpu_admission_tests::cluster::{LocalCluster, shipped_policy_in_enforce};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use serde::Serialize;

use crate::install::{install, tenant_clients};
use crate::measure::{Usage, Watch};
use crate::pods::{
    Created, Shape, annotation, create_namespaces, create_pods, delete_all, list_run,
};
use crate::{Args, component_pids, median};
use gpu_admission_tests::apiserver_metrics::{WebhookCalls, apiserver_webhook_seconds};

/// Whether a run's namespaces are sent to the webhooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arm {
    Webhooked,
    Skipped,
}

/// One run: `pods` Pods of one shape in one arm's namespaces.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub round: usize,
    pub shape: Shape,
    pub arm: Arm,
    pub created: Created,
    /// Stored Pods carrying `gpu-admission.io/decided-at` (GPU Pods decided by `/mutate-pod`).
    pub decided: usize,
    pub usage: Vec<Usage>,
    pub webhook_calls: Vec<WebhookCalls>,
}

/// Medians over the rounds for one shape.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub shape: Shape,
    pub webhooked_per_second: f64,
    pub skipped_per_second: f64,
    pub ratio: f64,
    pub ratio_per_round: Vec<f64>,
    /// Median CPU milliseconds per Pod, webhooked run minus its skipped run, per process.
    pub extra_cpu_ms_per_pod: Vec<(String, f64)>,
    /// Median milliseconds per Pod the apiserver spent waiting on each webhook (its own histogram).
    pub webhook_ms_per_pod: Vec<(String, f64)>,
    /// Median extra wall time per creation seen by one client: clients/webhooked − clients/skipped, ms.
    pub extra_latency_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub runs: Vec<Run>,
    pub summaries: Vec<Summary>,
}

/// Runs part A with `args`' sizes.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let Some(cluster) = LocalCluster::start().await? else {
        anyhow::bail!("the control plane is not built here (tests/cluster/build.sh)");
    };
    let skipped_names: Vec<String> = (0..args.namespaces)
        .map(|i| format!("bench-s-{i:03}"))
        .collect();
    let installed = install(
        &cluster,
        &shipped_policy_in_enforce()?,
        &skipped_names,
        args.deadline_ms,
    )
    .await?;
    let tiers: Vec<String> = (installed.policy.tiers().iter())
        .map(|t| t.name.clone())
        .collect();
    let webhooked = create_namespaces(&cluster, "bench-w", args.namespaces, &tiers).await?;
    let skipped = create_namespaces(&cluster, "bench-s", args.namespaces, &tiers).await?;
    let clients = tenant_clients(&cluster, args.clients).await?;
    let admin = cluster.client();
    let mut pids = component_pids(&cluster, &["apiserver", "etcd"]);
    pids.extend(installed.pids());
    pids.push(("cluster-bench".into(), std::process::id()));

    // Warm-up: the apiserver has picked the registrations up, connections are open, the caches are filled.
    for (arm, namespaces) in [(Arm::Webhooked, &webhooked), (Arm::Skipped, &skipped)] {
        for shape in [Shape::Gpu, Shape::Cpu] {
            let run = format!("warm-{}-{}", short(arm), short_shape(shape));
            let n = (args.clients * 4).min(args.pods);
            let c = create_pods(&clients, namespaces, n, &run, shape).await;
            ensure!(c.failed == 0, "warm-up failed: {:?}", c.errors);
        }
        delete_all(&admin, namespaces).await?;
    }

    let mut runs = Vec::new();
    for round in 0..args.rounds {
        for shape in [Shape::Gpu, Shape::Cpu] {
            for (arm, namespaces) in [(Arm::Webhooked, &webhooked), (Arm::Skipped, &skipped)] {
                let name = format!("r{round}-{}-{}", short(arm), short_shape(shape));
                let m0 = apiserver_webhook_seconds(&admin).await?;
                let watch = Watch::start(&pids);
                let created = create_pods(&clients, namespaces, args.pods, &name, shape).await;
                let usage = watch.stop();
                let webhook_calls = apiserver_webhook_seconds(&admin).await?.since(&m0);
                let stored = list_run(&admin, &name).await?;
                let decided = stored
                    .iter()
                    .filter(|p| annotation(p, ANN_DECIDED_AT).is_some())
                    .count();
                let run = Run {
                    round,
                    shape,
                    arm,
                    created,
                    decided,
                    usage,
                    webhook_calls,
                };
                eprintln!(
                    "  round {round} {} {:?}: {:.0} Pods/s ({} failed), decided {}",
                    shape.name(),
                    arm,
                    run.created.per_second,
                    run.created.failed,
                    run.decided
                );
                check_run(&run, stored.len())?;
                runs.push(run);
                delete_all(&admin, namespaces).await?;
            }
        }
    }
    let summaries = [Shape::Gpu, Shape::Cpu]
        .into_iter()
        .map(|s| summarize(&runs, s, args.clients))
        .collect();
    Ok(Report { runs, summaries })
}

/// What must hold of every run, whatever the timing: every Pod created and stored; a skipped run calls no
/// webhook; a webhooked run calls the Pod webhooks for each Pod and decides every GPU Pod.
fn check_run(run: &Run, stored: usize) -> anyhow::Result<()> {
    ensure!(
        run.created.failed == 0 && stored == run.created.pods,
        "run {}/{:?}/{:?}: {} failed, {stored} stored: {:?}",
        run.round,
        run.shape,
        run.arm,
        run.created.failed,
        run.created.errors
    );
    let calls = |hook: &str| {
        run.webhook_calls
            .iter()
            .find(|c| c.webhook == hook)
            .map_or(0, |c| c.calls)
    };
    let (mutate, validate) = (
        calls("pods.gpu-admission.io"),
        calls("pods.validate.gpu-admission.io"),
    );
    match run.arm {
        Arm::Skipped => ensure!(
            run.webhook_calls.is_empty(),
            "a skipped run called webhooks: {:?}",
            run.webhook_calls
        ),
        Arm::Webhooked => ensure!(
            mutate == run.created.pods as u64 && validate == run.created.pods as u64,
            "a webhooked run of {} Pods: {mutate} mutating and {validate} validating calls",
            run.created.pods
        ),
    }
    if run.arm == Arm::Webhooked && run.shape == Shape::Gpu {
        ensure!(
            run.decided == run.created.pods,
            "only {} of {} GPU Pods decided (the scorer's deadline passed?)",
            run.decided,
            run.created.pods
        );
    }
    Ok(())
}

fn summarize(runs: &[Run], shape: Shape, clients: usize) -> Summary {
    let of = |arm| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.shape == shape && r.arm == arm)
            .collect()
    };
    let (w, s) = (of(Arm::Webhooked), of(Arm::Skipped));
    let rate = |rs: &[&Run]| median(rs.iter().map(|r| r.created.per_second).collect());
    let (wr, sr) = (rate(&w), rate(&s));
    let ratio_per_round = w
        .iter()
        .zip(&s)
        .map(|(a, b)| a.created.per_second / b.created.per_second)
        .collect();
    let processes: Vec<String> = w
        .first()
        .map(|r| r.usage.iter().map(|u| u.process.clone()).collect())
        .unwrap_or_default();
    let extra_cpu_ms_per_pod = processes
        .iter()
        .map(|p| {
            let per_pod = |r: &Run| {
                r.usage
                    .iter()
                    .find(|u| &u.process == p)
                    .map_or(0.0, |u| u.cpu_seconds * 1000.0 / r.created.pods as f64)
            };
            let diffs = w.iter().zip(&s).map(|(a, b)| per_pod(a) - per_pod(b));
            (p.clone(), median(diffs.collect()))
        })
        .collect();
    let hooks: Vec<String> = w
        .iter()
        .flat_map(|r| r.webhook_calls.iter().map(|c| c.webhook.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let webhook_ms_per_pod = hooks
        .iter()
        .map(|h| {
            let per_pod = w.iter().map(|r| {
                r.webhook_calls
                    .iter()
                    .find(|c| &c.webhook == h)
                    .map_or(0.0, |c| c.seconds * 1000.0 / r.created.pods as f64)
            });
            (h.clone(), median(per_pod.collect()))
        })
        .collect();
    let extra_latency_ms = median(
        w.iter()
            .zip(&s)
            .map(|(a, b)| {
                clients as f64 * 1000.0 * (1.0 / a.created.per_second - 1.0 / b.created.per_second)
            })
            .collect(),
    );
    Summary {
        shape,
        webhooked_per_second: wr,
        skipped_per_second: sr,
        ratio: wr / sr,
        ratio_per_round,
        extra_cpu_ms_per_pod,
        webhook_ms_per_pod,
        extra_latency_ms,
    }
}

fn short(arm: Arm) -> &'static str {
    match arm {
        Arm::Webhooked => "w",
        Arm::Skipped => "s",
    }
}

fn short_shape(shape: Shape) -> &'static str {
    match shape {
        Shape::Gpu => "gpu",
        Shape::Cpu => "cpu",
    }
}

/// Part A's tables (markdown).
pub fn print(report: &Report) {
    println!(
        "\n### A. Cost of scope: Pod creation through the webhooks vs in namespaces they skip\n"
    );
    println!("| round | Pods | webhooked Pods/s | skipped Pods/s | ratio |");
    println!("|---|---|---|---|---|");
    for shape in [Shape::Gpu, Shape::Cpu] {
        let w = report
            .runs
            .iter()
            .filter(|r| r.shape == shape && r.arm == Arm::Webhooked);
        let s = report
            .runs
            .iter()
            .filter(|r| r.shape == shape && r.arm == Arm::Skipped);
        for (a, b) in w.zip(s) {
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.2} |",
                a.round,
                shape.name(),
                a.created.per_second,
                b.created.per_second,
                a.created.per_second / b.created.per_second
            );
        }
    }
    for s in &report.summaries {
        println!(
            "| **median** | {} | **{:.0}** | **{:.0}** | **{:.2}** (of the medians; the rounds' ratios' median {:.2}) |",
            s.shape.name(),
            s.webhooked_per_second,
            s.skipped_per_second,
            s.ratio,
            median(s.ratio_per_round.clone())
        );
    }
    println!("\nWhere the difference goes (medians over the rounds, per Pod created):\n");
    println!(
        "| Pods | extra wall time per creation, per client | extra CPU ms per Pod (webhooked − skipped) | apiserver's webhook wait per Pod |"
    );
    println!("|---|---|---|---|");
    for s in &report.summaries {
        let cpu: Vec<String> = s
            .extra_cpu_ms_per_pod
            .iter()
            .map(|(p, ms)| format!("{p} {ms:+.2}"))
            .collect();
        let hooks: Vec<String> = s
            .webhook_ms_per_pod
            .iter()
            .map(|(h, ms)| format!("{h} {ms:.2} ms"))
            .collect();
        println!(
            "| {} | {:.2} ms | {} | {} |",
            s.shape.name(),
            s.extra_latency_ms,
            cpu.join(", "),
            if hooks.is_empty() {
                "none".into()
            } else {
                hooks.join(", ")
            }
        );
    }
}
