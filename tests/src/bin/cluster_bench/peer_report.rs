//! Part C's cells: the runs of one (clients, replicas, kind) pooled per arm, and their markdown tables.

use std::collections::BTreeMap;

use gpu_admission_tests::apiserver_metrics::Histogram;
use serde::Serialize;

use crate::median;
use crate::peer::{Kind, Latency, Run};
use crate::peer_load::{Arm, quantile};

/// Client-side latency and throughput of one arm, the rounds pooled.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub pods: usize,
    /// Pods refused (by the apiserver, the floor or a webhook), over the rounds.
    pub failed: usize,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    /// Median over the rounds.
    pub per_second: f64,
    pub retried_429: usize,
    /// The apiserver's own time per Pod CREATE.
    pub apiserver_post: Latency,
}

/// One cell: with against without, and whose time the difference is.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub clients: usize,
    pub replicas: usize,
    pub kind: Kind,
    pub with: Side,
    pub without: Side,
    /// with's Pods/s ÷ without's.
    pub ratio: f64,
    /// with's client p99 − without's, ms.
    pub added_p99_ms: f64,
    /// The apiserver's wait on each of our webhooks (with).
    pub webhooks: BTreeMap<String, Latency>,
    /// The apiserver's ValidatingAdmissionPolicy plugin per CREATE, with the floor bound and without.
    pub policy_plugin: [Latency; 2],
    /// The frontends' own time per admission, by path (with; all replicas).
    pub frontend: BTreeMap<String, Latency>,
    /// Admissions per replica (with, pooled).
    pub per_replica: Vec<u64>,
    /// Mean reservations per write of the quota ledger (with; 0 without writes).
    pub ledger_reservations_per_write: f64,
}

fn pooled(
    runs: &[&Run],
    pick: impl Fn(&Run) -> &BTreeMap<String, Histogram>,
) -> BTreeMap<String, Latency> {
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for r in runs {
        for (k, h) in pick(r) {
            let merged = out.get(k).map_or(h.clone(), |m| m.merged(h));
            out.insert(k.clone(), merged);
        }
    }
    out.iter()
        .map(|(k, h)| (k.clone(), Latency::from(h)))
        .collect()
}

fn side(runs: &[&Run]) -> Side {
    let mut all: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.load.latencies_ms.clone())
        .collect();
    all.sort_by(f64::total_cmp);
    let post = runs
        .iter()
        .fold(Histogram::default(), |acc, r| acc.merged(&r.apiserver_post));
    Side {
        pods: all.len(),
        failed: runs.iter().map(|r| r.load.failed).sum(),
        avg_ms: all.iter().sum::<f64>() / all.len().max(1) as f64,
        p50_ms: quantile(&all, 0.5),
        p95_ms: quantile(&all, 0.95),
        p99_ms: quantile(&all, 0.99),
        per_second: median(runs.iter().map(|r| r.load.per_second).collect()),
        retried_429: runs.iter().map(|r| r.load.retried_429).sum(),
        apiserver_post: Latency::from(&post),
    }
}

/// The cells of `runs`, in the order they ran.
pub fn cells(runs: &[Run]) -> Vec<Cell> {
    let mut keys: Vec<(usize, usize, Kind)> = Vec::new();
    for r in runs {
        if !keys.contains(&(r.clients, r.replicas, r.kind)) {
            keys.push((r.clients, r.replicas, r.kind));
        }
    }
    keys.into_iter()
        .map(|(clients, replicas, kind)| {
            let of = |arm| -> Vec<&Run> {
                (runs.iter())
                    .filter(|r| {
                        (r.clients, r.replicas, r.kind, r.arm) == (clients, replicas, kind, arm)
                    })
                    .collect()
            };
            let (w, wo) = (of(Arm::With), of(Arm::Without));
            let (with, without) = (side(&w), side(&wo));
            let mut per_replica = vec![0; replicas];
            for r in &w {
                for (i, n) in r.per_replica.iter().enumerate() {
                    per_replica[i] += n;
                }
            }
            Cell {
                clients,
                replicas,
                kind,
                ratio: with.per_second / without.per_second,
                added_p99_ms: with.p99_ms - without.p99_ms,
                webhooks: pooled(&w, |r| &r.webhooks),
                policy_plugin: [&w, &wo].map(|runs| {
                    let merged = (runs.iter())
                        .fold(Histogram::default(), |acc, r| acc.merged(&r.policy_plugin));
                    Latency::from(&merged)
                }),
                frontend: pooled(&w, |r| &r.frontend),
                per_replica,
                ledger_reservations_per_write: {
                    let b =
                        (w.iter()).fold(Histogram::default(), |acc, r| acc.merged(&r.ledger_batch));
                    b.sum / b.count.max(1.0)
                },
                with,
                without,
            }
        })
        .collect()
}

fn latencies(m: &BTreeMap<String, Latency>, strip: &str) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, l)| {
            format!(
                "{} {} × {:.1}/{:.1}",
                k.trim_end_matches(strip),
                l.calls,
                l.mean_ms,
                l.p99_ms
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn frontend_own(c: &Cell) -> String {
    let own = latencies(&c.frontend, "");
    if c.ledger_reservations_per_write > 0.0 {
        format!(
            "{own}; {:.1} per ledger write",
            c.ledger_reservations_per_write
        )
    } else {
        own
    }
}

fn plugin([with, without]: &[Latency; 2]) -> String {
    format!(
        "{} × {:.2}/{:.1} / {} × {:.2}/{:.1}",
        with.calls, with.mean_ms, with.p99_ms, without.calls, without.mean_ms, without.p99_ms
    )
}

/// Part C's tables (markdown).
pub fn print(cells: &[Cell], violations: &[String]) {
    println!(
        "\n### C. Admission cost in the peers' form: Pod CREATEs with and without gpu-admission\n"
    );
    println!(
        "| clients | replicas | Pods | with: avg / p50 / p95 / p99 ms | without: avg / p50 / p95 / p99 ms | \
         added p99 ms | with Pods/s | without Pods/s | ratio | 429s with / without | refused with / without |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for c in cells {
        let (w, o) = (&c.with, &c.without);
        println!(
            "| {} | {} | {} | {:.0} / {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} / {:.0} | **{:+.0}** | {:.0} | {:.0} | **{:.2}** | {} / {} | {} / {} |",
            c.clients,
            c.replicas,
            c.kind.name(),
            w.avg_ms,
            w.p50_ms,
            w.p95_ms,
            w.p99_ms,
            o.avg_ms,
            o.p50_ms,
            o.p95_ms,
            o.p99_ms,
            c.added_p99_ms,
            w.per_second,
            o.per_second,
            c.ratio,
            w.retried_429,
            o.retried_429,
            w.failed,
            o.failed
        );
    }
    println!(
        "\nWhose time (the with runs; `calls × mean/p99 ms`, p99 interpolated in the histograms' buckets). \
         The apiserver's: its own time per Pod CREATE, its wait on each webhook (our frontend's time plus TLS, \
         the proxy hop and its own encoding), its ValidatingAdmissionPolicy plugin per CREATE with the floor bound / without (the plugin \
         runs for every CREATE; Kubernetes 1.37 keeps no series per policy). Ours: the \
         frontends' own time per admission and per write of the quota ledger (their `/metrics`; \
         reservations per write after it), and the calls each replica served:\n"
    );
    println!(
        "| clients | replicas | Pods | apiserver per CREATE with / without (mean/p99 ms) | apiserver → webhook | \
         apiserver: VAP plugin with / without | frontend's own | per replica |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for c in cells {
        println!(
            "| {} | {} | {} | {:.1}/{:.1} / {:.1}/{:.1} | {} | {} | {} | {:?} |",
            c.clients,
            c.replicas,
            c.kind.name(),
            c.with.apiserver_post.mean_ms,
            c.with.apiserver_post.p99_ms,
            c.without.apiserver_post.mean_ms,
            c.without.apiserver_post.p99_ms,
            latencies(&c.webhooks, ".gpu-admission.io"),
            plugin(&c.policy_plugin),
            frontend_own(c),
            c.per_replica
        );
    }
    if !violations.is_empty() {
        println!(
            "
Not held ({} runs):
",
            violations.len()
        );
        for v in violations {
            println!("- {}", v.lines().next().unwrap_or(v));
        }
    }
}
