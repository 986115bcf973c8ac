//! `cluster-bench`: gpu-admission on the real control plane (tests/README.md, "cluster-bench").
//!
//! - part A, the cost of scope: [`scope`];
//! - part B, scale with kwok: [`scale`];
//! - part C, admission cost in the peers' form: [`peer`] (its load and arms [`peer_load`], its endpoint
//!   [`balancer`], its tables [`peer_report`], another tenant's latency during a burst [`bystander`]);
//! - part D, the scale envelope held by our processes: [`held`].
//!
//! Each part starts its own control plane ([`gpu_admission_tests::cluster::LocalCluster`]) and gpu-admission
//! on it ([`install`]), prints markdown tables on stdout (progress on stderr), optionally writes every number
//! as JSON, and exits non-zero when an invariant fails (a Pod not created or not decided, a webhook called in
//! a skipped namespace, a Pod bound outside its tier). Timing is measured and printed, never judged.

mod balancer;
mod bystander;
mod held;
mod install;
mod measure;
mod peer;
mod peer_load;
mod peer_report;
mod pods;
mod scale;
mod scope;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use gpu_admission_tests::cluster::LocalCluster;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// A: Pod creation through the webhooks vs in namespaces they skip (no scheduler).
    Scope,
    /// B: kwok Nodes, the real scheduler, Pods through the webhooks until all are bound.
    Scale,
    /// A and B.
    Both,
    /// C: Pod CREATEs at 50/200/500 clients, 1/3 replicas, with and without our registrations and floor.
    Peer,
    /// D: a cluster of the envelope's size created around the webhooks, then quota'd Pods through them.
    Held,
}

/// gpu-admission on a real kube-apiserver: the cost of its scope and its scale with kwok Nodes.
#[derive(Debug, Parser)]
#[command(name = "cluster-bench")]
pub struct Args {
    #[arg(long, value_enum, default_value = "both")]
    part: Part,
    /// Fake GPU Nodes kept Ready by kwok (part B).
    #[arg(long, default_value_t = 2000)]
    pub nodes: usize,
    /// GPUs per Node (part B; default: enough for every Pod on one class, at least 8).
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    /// Pods per run.
    #[arg(long, default_value_t = 6000)]
    pub pods: usize,
    /// CPU-only Pods naming `gpu-default` created after the GPU Pods (part B).
    #[arg(long, default_value_t = 0)]
    pub cpu_pods: usize,
    /// The observer's audit interval (part B).
    #[arg(long, default_value_t = 30)]
    pub audit_interval_secs: u64,
    /// Tier namespaces per arm (tiers in turn).
    #[arg(long, default_value_t = 300)]
    pub namespaces: usize,
    /// Concurrent clients creating the Pods (closed loop each).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Rounds of part A (each: GPU webhooked, skipped, CPU-only webhooked, skipped).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The frontend's scorer budget (`--deadline-ms`; the product's default is 200).
    #[arg(long, default_value_t = 200)]
    pub deadline_ms: u64,
    /// How long part B waits for every Pod to be bound.
    #[arg(long, default_value_t = 900)]
    pub bind_timeout_secs: u64,
    /// Part C: concurrent clients per cell (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "50,200,500")]
    pub peer_clients: Vec<usize>,
    /// Part C: frontend replicas behind the one endpoint (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub peer_replicas: Vec<usize>,
    /// Part C: the kinds of Pods (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "gpu,cpu,quota-gpu"
    )]
    pub peer_kinds: Vec<peer::Kind>,
    /// Part C: timed Pods per run.
    #[arg(long, default_value_t = 2000)]
    pub peer_pods: usize,
    /// Part C: with/without pairs per cell.
    #[arg(long, default_value_t = 2)]
    pub peer_rounds: usize,
    /// Part C: kwok Nodes.
    #[arg(long, default_value_t = 100)]
    pub peer_nodes: usize,
    /// Part C: namespaces per kind of tier (without quotas, with).
    #[arg(long, default_value_t = 10)]
    pub peer_namespaces: usize,
    /// Part C: the tiers with quotas the quota'd namespaces are spread over (1 to 3: silver, bronze, gold),
    /// each with its own quota ledger; the others are the tiers without quotas.
    #[arg(long, default_value_t = 1)]
    pub peer_quota_tiers: usize,
    /// Part C: while each GPU and quota'd GPU burst runs (then on the first quota'd tier only), another
    /// tenant creates Pods one at a time in the burst's tier and in the second quota'd tier, also alone
    /// before it (`bystander.rs`); needs `--peer-quota-tiers` ≥ 2.
    #[arg(long)]
    pub peer_bystander: bool,
    /// Part D: quota'd GPU Pods created through the webhooks once the cluster is filled.
    #[arg(long, default_value_t = 1000)]
    pub held_admissions: usize,
    /// Part C: the replicas' `--max-connection-requests` (their default when not given): how many calls
    /// the apiserver's connection carries before it connects again and the balancer picks the next replica.
    #[arg(long)]
    pub peer_max_connection_requests: Option<u64>,
    /// Writes every number as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    machine: Machine,
    scope: Option<scope::Report>,
    scale: Option<scale::Report>,
    peer: Option<PeerReport>,
    held: Option<held::Report>,
}

/// Part C's runs and cells.
#[derive(Serialize)]
struct PeerReport {
    /// The tiers with quotas the quota'd namespaces were spread over (`--peer-quota-tiers`).
    quota_tiers: usize,
    runs: Vec<peer::Run>,
    cells: Vec<peer_report::Cell>,
    /// What [`peer::check`] found not held, per run.
    violations: Vec<String>,
}

/// Where it ran: the machine is part of every number.
#[derive(Serialize)]
struct Machine {
    cpus: usize,
    load_average_before: String,
    load_average_after: String,
    binaries_profile: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The median of `v` (0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The control plane's processes by their pid files in RUN_DIR (those that run).
pub fn component_pids(cluster: &LocalCluster, names: &[&str]) -> Vec<(String, u32)> {
    names
        .iter()
        .filter_map(|n| {
            let pid = std::fs::read_to_string(cluster.run_dir().join(format!("{n}.pid"))).ok()?;
            Some((n.to_string(), pid.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let profile = gpu_admission_tests::binaries::profile_dir()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let mut report = Report {
        machine: Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            load_average_before: load_average(),
            load_average_after: String::new(),
            binaries_profile: profile,
        },
        scope: None,
        scale: None,
        peer: None,
        held: None,
    };
    // Built before the clocks start (at most once per run; a no-op when up to date).
    gpu_admission_tests::binaries::binaries();
    let mut failure = None;
    if matches!(args.part, Part::Scope | Part::Both) {
        eprintln!(
            "A. cost of scope: {} Pods per run, {} namespaces per arm, {} clients, {} rounds",
            args.pods, args.namespaces, args.clients, args.rounds
        );
        let r = scope::run(&args).await?;
        scope::print(&r);
        report.scope = Some(r);
    }
    if matches!(args.part, Part::Scale | Part::Both) {
        eprintln!(
            "B. scale: {} kwok Nodes, {} GPU Pods, {} namespaces, {} clients",
            args.nodes, args.pods, args.namespaces, args.clients
        );
        let r = scale::run(&args).await?;
        scale::print(&r, &args);
        failure = scale::check(&r).err();
        report.scale = Some(r);
    }
    if args.part == Part::Peer {
        eprintln!(
            "C. peers' form: {} Pods per run, clients {:?}, replicas {:?}, {:?}, {} rounds",
            args.peer_pods,
            args.peer_clients,
            args.peer_replicas,
            args.peer_kinds,
            args.peer_rounds
        );
        let (runs, violations) = peer::run(&args).await?;
        let cells = peer_report::cells(&runs);
        peer_report::print(&cells, &violations);
        if !violations.is_empty() {
            failure = Some(anyhow::anyhow!(
                "part C: {} runs not held",
                violations.len()
            ));
        }
        report.peer = Some(PeerReport {
            quota_tiers: args.peer_quota_tiers,
            runs,
            cells,
            violations,
        });
    }
    if args.part == Part::Held {
        eprintln!(
            "D. the envelope held: {} Nodes, {} GPU and {} CPU-only Pods, {} namespaces, {} clients",
            args.nodes, args.pods, args.cpu_pods, args.namespaces, args.clients
        );
        let r = held::run(&args).await?;
        held::print(&r);
        failure = held::check(&r).err();
        report.held = Some(r);
    }
    report.machine.load_average_after = load_average();
    println!(
        "\nmachine: {} CPUs, load average {} before, {} after; {} binaries",
        report.machine.cpus,
        report.machine.load_average_before,
        report.machine.load_average_after,
        report.machine.binaries_profile
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
