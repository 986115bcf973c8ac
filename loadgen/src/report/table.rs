//! The table for people, printed to stdout at the end of a benchmark.

use std::fmt::Write as _;

use super::RunResult;
use super::json::Meta;
use super::summary::Summary;

pub fn render(meta: &Meta, runs: &[RunResult], s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\ngpu-admission loadgen — {} — {} CPUs ({}) — {}",
        meta.date, meta.cpus, meta.cpu_model, meta.workload
    );
    let _ = writeln!(
        o,
        "load average at start {}, at end {} (other work on the machine skews the numbers)",
        meta.loadavg_start, meta.loadavg_end
    );
    let _ = writeln!(
        o,
        "latency in ms; open loop measured from each request's intended send time (coordinated omission corrected)\n"
    );
    let _ = writeln!(
        o,
        "{:<34} {:>5} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}  cpu cores / peak RSS MiB",
        "run",
        "conns",
        "target/s",
        "achieved",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "mutated",
        "passed",
        "skipped",
        "errors",
        "lag p99",
        "svc p99",
    );
    for r in runs {
        let c = &r.outcomes;
        let usage: Vec<String> = r
            .services
            .iter()
            .map(|u| {
                format!(
                    "{} {:.2}/{:.1}",
                    u.service,
                    u.cpu_cores,
                    u.rss_peak_kib as f64 / 1024.0
                )
            })
            .chain(std::iter::once(format!(
                "loadgen {:.2}",
                r.loadgen_cpu_cores
            )))
            .collect();
        let (ok_a, ok_b) = if r.target == "scorer" {
            (c.scored, c.infeasible)
        } else {
            (c.mutated, c.passed_through)
        };
        let _ = writeln!(
            o,
            "{:<34} {:>5} {:>9} {:>9.0} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9.3} {:>8} {:>7} {:>7} {:>6} {:>8} {:>8}  {}{}{}",
            r.name,
            r.connections,
            r.target_rps.map_or("-".to_string(), |t| format!("{t:.0}")),
            r.achieved_rps,
            r.latency_ms.p50,
            r.latency_ms.p90,
            r.latency_ms.p99,
            r.latency_ms.p999,
            r.latency_ms.max,
            ok_a,
            ok_b,
            c.skipped,
            c.errors,
            r.send_lag_ms
                .as_ref()
                .map_or("-".to_string(), |p| format!("{:.3}", p.p99)),
            r.service_ms
                .as_ref()
                .map_or("-".to_string(), |p| format!("{:.3}", p.p99)),
            usage.join(", "),
            if r.saturated { "  [saturated]" } else { "" },
            if r.client_bound {
                "  [client-bound]"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        o,
        "(scorer runs: 'mutated' = scored, 'passed' = infeasible; lag = how late loadgen sent, svc = answer time from the actual send)\n"
    );

    for (target, by_rate) in &s.p99_ms {
        let list: Vec<String> = by_rate
            .iter()
            .map(|(rate, p99)| format!("{rate}/s {p99:.3} ms"))
            .collect();
        let _ = writeln!(o, "p99 {target:<9} {}", list.join(" | "));
    }
    for (target, m) in &s.max_rps {
        let _ = writeln!(o, "max rate {target:<9} {m:.0}/s");
    }
    if let Some(ratio) = s.ratio_to_baseline {
        let _ = writeln!(o, "webhook max rate / baseline max rate = {ratio:.2}");
        if s.baseline_client_bound {
            let _ = writeln!(
                o,
                "  (the baseline's max run was client-bound: its true max is higher, the ratio lower)"
            );
        }
    }
    for f in &s.faults {
        let _ = writeln!(
            o,
            "fault {:<12} pass-through {:>5.1}%  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  {}",
            f.fault,
            100.0 * f.pass_through_share,
            f.p50_ms,
            f.p99_ms,
            f.max_ms,
            if f.errors == 0 {
                "no request failed".to_string()
            } else {
                format!("{} REQUESTS FAILED", f.errors)
            }
        );
    }
    for r in &s.rss {
        let _ = writeln!(
            o,
            "RSS {:<17} idle {:>6.1} MiB  peak under load {:>6.1} MiB",
            r.service,
            r.idle_kib as f64 / 1024.0,
            r.peak_kib as f64 / 1024.0
        );
    }
    if !s.checks.is_empty() {
        let _ = writeln!(o, "\ntargets:");
        for c in &s.checks {
            let _ = writeln!(
                o,
                "  [{}] {:<42} {:<28} measured {}",
                if c.ok { " ok " } else { "MISS" },
                c.what,
                c.target,
                c.measured
            );
        }
    }
    o
}
