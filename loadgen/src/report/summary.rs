//! The numbers the benchmark exists for, pulled out of the runs, and the targets they are held to.

use std::collections::BTreeMap;

use serde::Serialize;

use super::RunResult;

/// Targets of the issue: p99 at 5k/s, ratio to the baseline, pass-through p99 margin, RSS.
pub const P99_TARGET_MS: f64 = 1.0;
pub const P99_TARGET_RATE: f64 = 5000.0;
pub const RATIO_TARGET: f64 = 0.6;
pub const PASS_THROUGH_MARGIN_MS: f64 = 2.0;
pub const RSS_TARGET_KIB: u64 = 64 * 1024;

#[derive(Debug, Clone, Serialize)]
pub struct FaultSummary {
    pub fault: String,
    pub requests: u64,
    pub pass_through_share: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RssSummary {
    pub service: String,
    /// Before any load.
    pub idle_kib: u64,
    /// Highest sample over all runs.
    pub peak_kib: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub ok: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// p99 (ms) of the open-loop runs, by target and rate.
    pub p99_ms: BTreeMap<String, BTreeMap<u64, f64>>,
    /// Maximum sustainable rate by target: the closed-loop rate, else the best unsaturated open-loop rate.
    pub max_rps: BTreeMap<String, f64>,
    /// webhook max rate / baseline max rate.
    pub ratio_to_baseline: Option<f64>,
    /// The baseline's maximum was limited by loadgen's own thread (so the ratio is an upper bound).
    pub baseline_client_bound: bool,
    pub faults: Vec<FaultSummary>,
    pub rss: Vec<RssSummary>,
    pub checks: Vec<Check>,
}

pub fn summarize(runs: &[RunResult], idle_rss: &[(String, u64)], deadline_ms: u64) -> Summary {
    let mut s = Summary::default();
    for r in runs.iter().filter(|r| r.fault.is_none()) {
        if let (Some(rate), "open") = (r.target_rps, r.mode.as_str()) {
            s.p99_ms
                .entry(r.target.clone())
                .or_default()
                .insert(rate.round() as u64, r.latency_ms.p99);
        }
    }
    for target in ["webhook", "baseline", "scorer"] {
        let of_target = || {
            runs.iter()
                .filter(|r| r.fault.is_none() && r.target == target)
        };
        let closed = of_target()
            .filter(|r| r.mode == "closed")
            .map(|r| r.achieved_rps)
            .fold(None, max_opt);
        let open = of_target()
            .filter(|r| r.mode == "open" && !r.saturated)
            .map(|r| r.achieved_rps)
            .fold(None, max_opt);
        if let Some(m) = closed.or(open) {
            s.max_rps.insert(target.to_string(), m);
        }
    }
    s.baseline_client_bound = runs.iter().any(|r| {
        r.fault.is_none() && r.target == "baseline" && r.mode == "closed" && r.client_bound
    });
    if let (Some(w), Some(b)) = (s.max_rps.get("webhook"), s.max_rps.get("baseline"))
        && *b > 0.0
    {
        s.ratio_to_baseline = Some(w / b);
    }
    for r in runs.iter().filter(|r| r.fault.is_some()) {
        s.faults.push(FaultSummary {
            fault: r.fault.clone().unwrap_or_default(),
            requests: r.requests,
            pass_through_share: r.pass_through_share,
            p50_ms: r.latency_ms.p50,
            p99_ms: r.latency_ms.p99,
            max_ms: r.latency_ms.max,
            errors: r.outcomes.errors,
        });
    }
    for (service, idle) in idle_rss {
        let peak = runs
            .iter()
            .flat_map(|r| &r.services)
            .filter(|u| &u.service == service)
            .map(|u| u.rss_peak_kib)
            .max()
            .unwrap_or(*idle);
        s.rss.push(RssSummary {
            service: service.clone(),
            idle_kib: *idle,
            peak_kib: peak,
        });
    }

    // The targets.
    if let Some(r) = runs.iter().find(|r| {
        r.fault.is_none()
            && r.target == "webhook"
            && r.mode == "open"
            && r.target_rps == Some(P99_TARGET_RATE)
    }) {
        s.checks.push(Check {
            what: format!("webhook p99 at {P99_TARGET_RATE}/s"),
            target: format!("<= {P99_TARGET_MS} ms"),
            measured: format!(
                "{:.3} ms (achieved {:.0}/s)",
                r.latency_ms.p99, r.achieved_rps
            ),
            ok: r.latency_ms.p99 <= P99_TARGET_MS && !r.saturated,
        });
    }
    if let Some(ratio) = s.ratio_to_baseline {
        s.checks.push(Check {
            what: "max rate / baseline max rate".into(),
            target: format!(">= {RATIO_TARGET}"),
            measured: format!("{ratio:.2}"),
            ok: ratio >= RATIO_TARGET,
        });
    }
    for f in &s.faults {
        if f.fault == "hung" {
            let limit = deadline_ms as f64 + PASS_THROUGH_MARGIN_MS;
            s.checks.push(Check {
                what: "pass-through p99, scorer hung".into(),
                target: format!("<= {limit} ms (deadline + {PASS_THROUGH_MARGIN_MS} ms)"),
                measured: format!("{:.1} ms", f.p99_ms),
                ok: f.p99_ms <= limit,
            });
        }
        s.checks.push(Check {
            what: format!("no failed request, scorer {}", f.fault),
            target: "0 errors".into(),
            measured: format!("{} errors of {}", f.errors, f.requests),
            ok: f.errors == 0,
        });
    }
    for r in s.rss.iter().filter(|r| r.service != "baseline") {
        s.checks.push(Check {
            what: format!("RSS of {} under load", r.service),
            target: format!("<= {} MiB", RSS_TARGET_KIB / 1024),
            measured: format!("{:.1} MiB", r.peak_kib as f64 / 1024.0),
            ok: r.peak_kib <= RSS_TARGET_KIB,
        });
    }
    s
}

fn max_opt(acc: Option<f64>, x: f64) -> Option<f64> {
    Some(acc.map_or(x, |a| a.max(x)))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::drivers::Outcome;
    use crate::procfs::ProcUsage;
    use crate::procfs::ServiceUsage;
    use crate::report::Recorder;

    fn run(
        target: &str,
        mode: &str,
        rate: Option<f64>,
        n: u64,
        latency_us: u64,
        outcome: Outcome,
    ) -> RunResult {
        let mut rec = Recorder::default();
        let start = Instant::now();
        for _ in 0..n {
            rec.record(
                Duration::from_micros(latency_us),
                Duration::ZERO,
                outcome,
                start,
            );
        }
        let usage = vec![ServiceUsage {
            service: "webhook-frontend".into(),
            pid: 1,
            rss_before_kib: 10_000,
            rss_peak_kib: 20_000,
            rss_hwm_kib: 20_000,
            cpu_cores: 0.5,
        }];
        let name = format!("{target} {mode}");
        RunResult::from_recorder(
            name,
            target,
            mode,
            rate,
            4,
            Duration::from_secs(1),
            &rec,
            start,
            usage,
            &ProcUsage::default(),
        )
    }

    #[test]
    fn summary_picks_rates_ratio_faults_and_checks_targets() {
        let mut hung = run(
            "webhook",
            "open",
            Some(200.0),
            100,
            203_000,
            Outcome::PassedThrough,
        );
        hung.fault = Some("hung".into());
        let runs = vec![
            run("webhook", "open", Some(5000.0), 5000, 800, Outcome::Mutated),
            run(
                "webhook",
                "open",
                Some(10000.0),
                10000,
                900,
                Outcome::Mutated,
            ),
            run("webhook", "closed", None, 6000, 2000, Outcome::Mutated),
            run("baseline", "closed", None, 10000, 500, Outcome::Skipped),
            hung,
        ];
        let s = summarize(&runs, &[("webhook-frontend".into(), 9_000)], 200);
        assert_eq!(
            s.p99_ms["webhook"].keys().copied().collect::<Vec<_>>(),
            vec![5000, 10000]
        );
        assert!((s.max_rps["webhook"] - 6000.0).abs() < 1.0);
        assert!((s.ratio_to_baseline.unwrap() - 0.6).abs() < 1e-3);
        assert_eq!(s.faults.len(), 1);
        assert!((s.faults[0].pass_through_share - 1.0).abs() < 1e-9);
        let check = |what: &str| s.checks.iter().find(|c| c.what.contains(what)).unwrap().ok;
        assert!(check("p99 at 5000"));
        assert!(check("baseline max rate"));
        assert!(!check("pass-through p99"), "203 ms > 200 + 2 ms");
        assert!(check("no failed request"));
        assert!(check("RSS of webhook-frontend"));
        assert_eq!(s.rss[0].idle_kib, 9_000);
        assert_eq!(s.rss[0].peak_kib, 20_000);
    }
}
