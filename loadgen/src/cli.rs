//! Command line: what to drive, how hard, for how long, and where to write the results.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    about = "Benchmark for gpu-admission: drives the webhook frontend and the scorer from outside",
    long_about = "Benchmark for gpu-admission. Drives the webhook frontend (HTTPS AdmissionReview POSTs, \
                  CA-verified keep-alive connections) and the scorer (gRPC Score) as a client from outside.\n\n\
                  One command for the whole benchmark:  loadgen --spawn --baseline --json run/bench.json --svg run/bench.svg",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The do-nothing admission endpoint used as `--baseline` (rustls + axum, answers allowed:true with the uid).
    /// `--spawn --baseline` starts it as a child process; run it by hand to compare with another client.
    BaselineServer(BaselineServerArgs),
    /// The local demo: starts the scorer and the webhook frontend (self-signed TLS, no cluster), admits a set of
    /// real-looking Pods through HTTPS and prints one line per decision.
    Demo(DemoArgs),
    /// Decision-quality benchmark of the scorer's learning: a synthetic cluster with a hidden truth drives a real
    /// scorer through Score and Observe; regret against an oracle, the best static class and the priors alone.
    Learn(LearnArgs),
}

#[derive(Debug, Clone, Args)]
pub struct LearnArgs {
    /// Seed of the synthetic truth and of the job stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Several seeds, one run each (fresh scorers), then their mean and spread, e.g. `1,2,3,4,5`; overrides --seed.
    #[arg(long, value_delimiter = ',', value_name = "SEED,...")]
    pub seeds: Vec<u64>,
    /// The hidden truths, one run per seed each and their summaries side by side: `cluster` (priors wrong
    /// for a third of the job types, close calls, unlisted and late job types, heavy tails), `sia`
    /// (measured throughputs of 23 deep-learning job types on 5 GPU classes, from the Sia SOSP'23 artifact,
    /// spec-sheet priors), `gavel` (measured throughputs and co-location slowdowns of 26 job types on 3 GPU
    /// classes, from Gavel's OSDI'20 measurements, spec-sheet priors) or `classic` (the first, easier
    /// benchmark); e.g. `cluster,sia,gavel`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cluster,sia")]
    pub truth: Vec<TruthKind>,
    /// Runs of each seed with the scorer's own randomness moved (`learning.seed` + 0, 1, …, N−1; the truth
    /// and the job stream unchanged): one run of a learner is one draw of its posterior samples and
    /// exploration, so with N > 1 every row is the mean over all runs and whether a seed is below its best
    /// static class is judged on the mean of its N runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub learner_seeds: u64,
    /// Runs every truth with its co-location slowdowns set to 0 (the job stream, its neighbours and
    /// everything else unchanged): a counterfactual, paired seed by seed with a run without it, for what
    /// the co-location estimates cost.
    #[arg(long)]
    pub no_colocation_slowdowns: bool,
    /// Runs every truth with each pair's per-class co-location slowdowns replaced by the pair's mean over
    /// the classes × the class's mean over the pairs / the mean of all (each pair's mean unchanged): the
    /// shape the scorer models (one slowdown per pair × one factor per class), as a counterfactual.
    #[arg(long, conflicts_with = "no_colocation_slowdowns")]
    pub separable_colocation_slowdowns: bool,
    /// Job types of the `cluster` truth (the policy's first, then listed and unlisted ones alternately).
    #[arg(long, default_value_t = 26)]
    pub job_types: usize,
    /// Number of jobs scored (and observed).
    #[arg(long, default_value_t = 2000)]
    pub decisions: usize,
    /// Observations arrive this many decisions after their Score (runs take time).
    #[arg(long, default_value_t = 8)]
    pub feedback_delay: usize,
    /// Policy the scorers run (default: the embedded default policy); a `cheapest` tier over every class is added.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Folder of the `scorer` binary (default: next to this executable).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Where the scorers' logs and the policy go (default: a new folder under the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Writes the report as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Writes the regret-over-decisions plot as SVG.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
}

/// The truth `loadgen learn` hides from the scorer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TruthKind {
    Cluster,
    Sia,
    Classic,
    Gavel,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder of the `scorer` and `webhook-frontend` binaries (default: next to this executable).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Keep the logs and the generated CA (with its private key) in this folder. Without it they go to a
    /// temporary folder that is removed when the demo ends.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BaselineServerArgs {
    /// Address to listen on (port 0 = ephemeral; the bound address is printed as `listening on ADDR`).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Generates a CA and a serving certificate (localhost, 127.0.0.1, ::1) and writes DIR/ca.crt, tls.crt, tls.key.
    #[arg(long, value_name = "DIR")]
    pub self_signed: PathBuf,
}

/// Which service(s) the load goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetSel {
    /// The webhook frontend (and the baseline endpoint with --baseline).
    Webhook,
    /// The scorer alone, over gRPC.
    Scorer,
    /// Both.
    All,
}

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Open loop at a fixed rate (`--rate`), latency from each request's intended send time.
    Open,
    /// Closed loop: `--connections` workers back to back, to find the maximum sustainable rate.
    Closed,
    /// Open loop at each of `--rates` until saturation, then a closed-loop run for the maximum rate.
    Sweep,
}

/// HTTP version used on the webhook connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpVersion {
    /// HTTP/1.1 with keep-alive: one request in flight per connection.
    Http1,
    /// HTTP/2 (ALPN h2): one stream in flight per connection, like one HTTP/1.1 connection.
    H2,
}

/// A fault injected into the scorer during a dedicated run against the webhook (needs --spawn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The scorer is stopped (SIGSTOP) for the whole run: connections stay open, nothing answers.
    Hung,
    /// The scorer is killed (SIGKILL) a third into the run, and restarted afterwards.
    Killed,
    /// Every read from the scorer is delayed by this much (a TCP proxy inside loadgen).
    Slow(Duration),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Hung => write!(f, "hung"),
            Fault::Killed => write!(f, "killed"),
            Fault::Slow(d) => write!(f, "slow={}ms", d.as_millis()),
        }
    }
}

pub fn parse_fault(s: &str) -> Result<Fault, String> {
    match s {
        "hung" => Ok(Fault::Hung),
        "killed" => Ok(Fault::Killed),
        _ => match s.strip_prefix("slow=").or_else(|| s.strip_prefix("slow:")) {
            Some(d) => parse_duration(d).map(Fault::Slow),
            None if s == "slow" => Ok(Fault::Slow(Duration::from_millis(50))),
            None => Err(format!(
                "unknown fault {s:?}: expected hung, killed or slow=50ms"
            )),
        },
    }
}

/// Parses `2s`, `500ms`, `1.5s`, `1m`, `250us` (a bare number means seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" => v,
        "m" | "min" => v * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (use us, ms, s or m)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a rate: `5000`, `5k`, `1.5k`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, mult) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1000.0),
        None => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad rate {s:?}"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("rate must be > 0: {s:?}"));
    }
    Ok(v * mult)
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to load: the webhook, the scorer alone, or both (default: all with --spawn, else what has a URL).
    #[arg(long, value_enum)]
    pub target: Option<TargetSel>,
    /// Pacing (default: sweep, or open when --rate is given).
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Requests per second of a single open-loop run (e.g. 5000 or 5k).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Rates of the sweep, comma-separated; stops at saturation (achieved < 95% of target or p99 above --saturation-p99).
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, default_value = "1k,2k,5k,10k,20k,50k")]
    pub rates: Vec<f64>,
    /// Keep-alive connections (one worker each): the pool of the open loop, the concurrency of the closed loop.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Client threads of the closed loop, the connections shared between them (the open loop always runs on
    /// one thread plus the pacing thread). One thread is the limit for the do-nothing baseline on 2 cores.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub client_threads: u16,
    /// Measured time of each run.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// Unmeasured load before each run's measurement (warms connections, caches, allocators).
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,
    /// A sweep step counts as saturated when its p99 exceeds this.
    #[arg(long, value_parser = parse_duration, default_value = "50ms")]
    pub saturation_p99: Duration,
    /// Seed of the generated workload (same seed, same Pods, same order).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Distinct Pods generated from the seed (requests cycle through them).
    #[arg(long, default_value_t = 1024)]
    pub pods: usize,
    /// Replay a folder of manifests instead of generating Pods: Pods, pod templates of workloads
    /// (Job, CronJob, Deployment, operators' CRs...), AdmissionReviews and bare AdmissionRequests (YAML or JSON).
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Start the scorer and the webhook frontend found next to this executable (self-signed TLS, --no-kube).
    #[arg(long)]
    pub spawn: bool,
    /// Also measure the built-in do-nothing rustls+axum admission endpoint, the same way, in the same run.
    #[arg(long)]
    pub baseline: bool,
    /// Fault runs against the webhook (repeatable, needs --spawn): hung, killed, slow=50ms.
    #[arg(long = "fault", value_parser = parse_fault)]
    pub faults: Vec<Fault>,
    /// Rate of the fault runs.
    #[arg(long, value_parser = parse_rate, default_value = "200")]
    pub fault_rate: f64,
    /// Webhook URL when not spawning, e.g. https://127.0.0.1:8443/mutate-pod
    #[arg(long, env = "LOADGEN_WEBHOOK")]
    pub webhook: Option<String>,
    /// CA bundle (PEM) that the webhook's certificate is verified against.
    #[arg(long, env = "LOADGEN_CA")]
    pub ca: Option<PathBuf>,
    /// Scorer URL when not spawning, e.g. http://127.0.0.1:50051
    #[arg(long, env = "LOADGEN_SCORER")]
    pub scorer: Option<String>,
    /// PIDs whose RSS is sampled when not spawning, as NAME=PID (repeatable).
    #[arg(long = "watch-pid", value_name = "NAME=PID")]
    pub watch_pids: Vec<String>,
    /// HTTP version of the webhook connections.
    #[arg(long, value_enum, default_value = "http1")]
    pub http: HttpVersion,
    /// Scorer deadline given to the spawned frontend (--deadline-ms); also sizes the fault runs' connection pool.
    #[arg(long, default_value_t = 200)]
    pub deadline_ms: u64,
    /// Directory with the `scorer` and `webhook-frontend` binaries (default: next to this executable).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Real-time scheduling (SCHED_FIFO, via `chrt`; needs root or CAP_SYS_NICE): the spawned services at this
    /// priority, loadgen one above. Keeps other work on a shared machine out of the numbers.
    #[arg(long, value_name = "PRIO", value_parser = clap::value_parser!(u32).range(1..=98))]
    pub rt_priority: Option<u32>,
    /// Write every run, percentiles and the summary as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write a latency-percentile plot (SVG).
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// Keep the spawned services' logs and certificates in this directory (default: a temporary one).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// Burst runs against the webhook: rounds of N admissions sent at once, over one HTTP/2 connection and over
    /// 64 HTTP/1.1 connections; pass-throughs by reason.
    #[arg(long, value_name = "N")]
    pub burst: Option<usize>,
    /// Rounds of each burst run.
    #[arg(long, default_value_t = 20)]
    pub burst_rounds: usize,
    /// Idle-connection run: N TLS connections that say nothing (and --one-byte-conns that send one byte);
    /// reports when the frontend closed them, a probe every 0.5 s, and the frontend's RSS.
    #[arg(long, value_name = "N")]
    pub idle_conns: Option<usize>,
    /// One-byte TCP connections of the idle-connection run (default: a tenth of --idle-conns).
    #[arg(long, value_name = "N")]
    pub one_byte_conns: Option<usize>,
    /// How long the idle-connection run waits for the frontend to close them all.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub idle_wait: Duration,
    /// How long the idle-connection run goes on probing after the last connection was closed, before its
    /// last RSS reading (the services' allocator, jemalloc, returns freed pages over 10 s).
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    pub idle_settle: Duration,
    /// Only the fault, burst and idle-connection runs (no sweep, open or closed loop).
    #[arg(long)]
    pub scenarios_only: bool,
    /// Extra argument for the spawned webhook frontend (repeatable), e.g.
    /// `--frontend-arg=--header-read-timeout-ms=2000`.
    #[arg(long = "frontend-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub frontend_args: Vec<String>,
    /// Leave out the performance targets (p99, ratio to baseline, RSS): for smoke runs, whose short debug
    /// runs say nothing about them. Wrong answers and failed runs still fail.
    #[arg(long)]
    pub no_targets: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_rates_parse() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("x").is_err());
        assert_eq!(parse_rate("5k").unwrap(), 5000.0);
        assert_eq!(parse_rate("1.5k").unwrap(), 1500.0);
        assert!(parse_rate("0").is_err());
    }

    #[test]
    fn faults_parse() {
        assert_eq!(parse_fault("hung").unwrap(), Fault::Hung);
        assert_eq!(parse_fault("killed").unwrap(), Fault::Killed);
        assert_eq!(
            parse_fault("slow=50ms").unwrap(),
            Fault::Slow(Duration::from_millis(50))
        );
        assert!(parse_fault("melted").is_err());
    }

    #[test]
    fn smoke_command_line_parses() {
        let cli = Cli::try_parse_from([
            "loadgen",
            "--spawn",
            "--baseline",
            "--duration",
            "1s",
            "--warmup",
            "200ms",
            "--rates",
            "200",
            "--json",
            "run/bench.json",
            "--svg",
            "run/bench.svg",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.bench.rates, vec![200.0]);
        assert!(cli.bench.spawn && cli.bench.baseline);
    }
}
