//! Results: what each run recorded ([`Recorder`]), what it came to ([`RunResult`]), and the outputs:
//! a table for people ([`table`]), JSON for machines ([`json`]), a latency-percentile plot ([`svg`]).

pub mod json;
pub mod summary;
pub mod svg;
pub mod table;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::drivers::{ErrorKind, Outcome};
use crate::procfs::{ProcUsage, ServiceUsage};

/// loadgen drives all connections from one thread (plus the pacing thread): near one core, it is the limit.
pub const CLIENT_BOUND_CORES: f64 = 0.85;

/// Latencies are recorded in microseconds, 3 significant digits, up to an hour.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

/// Counts of what the answers meant.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub mutated: u64,
    pub passed_through: u64,
    pub skipped: u64,
    pub scored: u64,
    pub infeasible: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<ErrorKind, u64>,
}

impl Counts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Mutated => self.mutated += 1,
            Outcome::PassedThrough => self.passed_through += 1,
            Outcome::Skipped => self.skipped += 1,
            Outcome::Scored => self.scored += 1,
            Outcome::Infeasible => self.infeasible += 1,
            Outcome::Error(k) => {
                self.errors += 1;
                *self.error_kinds.entry(k).or_insert(0) += 1;
            }
        }
    }

    pub fn total(&self) -> u64 {
        self.mutated
            + self.passed_through
            + self.skipped
            + self.scored
            + self.infeasible
            + self.errors
    }

    /// Share of pass-through among the answers that were not skipped (what the scorer trouble cost).
    pub fn pass_through_share(&self) -> f64 {
        let decided = self.mutated + self.passed_through;
        if decided == 0 {
            0.0
        } else {
            self.passed_through as f64 / decided as f64
        }
    }
}

/// What the workers of one run record, shared behind a mutex (uncontended: one runtime thread).
pub struct Recorder {
    /// Completion minus intended send time (open loop) or minus actual send time (closed loop).
    pub latency: Histogram<u64>,
    /// Actual minus intended send time (open loop): loadgen's own lateness or a full connection pool.
    pub send_lag: Histogram<u64>,
    /// Completion minus actual send time: the service time alone, without loadgen's or the pool's lateness.
    pub service: Histogram<u64>,
    pub counts: Counts,
    pub last_done: Option<Instant>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            latency: new_histogram(),
            send_lag: new_histogram(),
            service: new_histogram(),
            counts: Counts::default(),
            last_done: None,
        }
    }
}

impl Recorder {
    pub fn record(
        &mut self,
        latency: Duration,
        send_lag: Duration,
        outcome: Outcome,
        done: Instant,
    ) {
        let _ = self.latency.record((latency.as_micros() as u64).max(1));
        let _ = self.send_lag.record((send_lag.as_micros() as u64).max(1));
        let _ = self
            .service
            .record((latency.saturating_sub(send_lag).as_micros() as u64).max(1));
        self.counts.add(outcome);
        self.last_done = Some(self.last_done.map_or(done, |d| d.max(done)));
    }
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// One run: a target, a pacing, a duration; what it achieved.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// e.g. "webhook open 5000/s".
    pub name: String,
    /// webhook | baseline | scorer.
    pub target: String,
    /// open | closed.
    pub mode: String,
    pub fault: Option<String>,
    pub target_rps: Option<f64>,
    pub connections: usize,
    pub duration_s: f64,
    pub requests: u64,
    pub achieved_rps: f64,
    pub latency_ms: Percentiles,
    /// Open loop only: how late requests left loadgen compared with their schedule.
    pub send_lag_ms: Option<Percentiles>,
    /// Open loop only: from actual send to answer (the service time, no queueing in loadgen).
    pub service_ms: Option<Percentiles>,
    pub outcomes: Counts,
    pub pass_through_share: f64,
    pub services: Vec<ServiceUsage>,
    pub loadgen_cpu_cores: f64,
    /// True when a sweep step counted as saturated.
    pub saturated: bool,
    /// True when loadgen's one driving thread was nearly busy all the time: the client, not the service,
    /// may have been the limit of this run.
    pub client_bound: bool,
    /// (percentile, latency ms) points for plots.
    pub curve: Vec<(f64, f64)>,
}

impl RunResult {
    #[allow(clippy::too_many_arguments)]
    pub fn from_recorder(
        name: String,
        target: &str,
        mode: &str,
        target_rps: Option<f64>,
        connections: usize,
        window: Duration,
        rec: &Recorder,
        window_start: Instant,
        usage: Vec<ServiceUsage>,
        loadgen: &ProcUsage,
    ) -> Self {
        let requests = rec.counts.total();
        let elapsed = rec
            .last_done
            .map_or(window, |d| d.saturating_duration_since(window_start))
            .max(window);
        let achieved = if elapsed.is_zero() {
            0.0
        } else {
            requests as f64 / elapsed.as_secs_f64()
        };
        Self {
            name,
            target: target.to_string(),
            mode: mode.to_string(),
            fault: None,
            target_rps,
            connections,
            duration_s: window.as_secs_f64(),
            requests,
            achieved_rps: achieved,
            latency_ms: Percentiles::of(&rec.latency),
            send_lag_ms: (mode == "open").then(|| Percentiles::of(&rec.send_lag)),
            service_ms: (mode == "open").then(|| Percentiles::of(&rec.service)),
            pass_through_share: rec.counts.pass_through_share(),
            outcomes: rec.counts.clone(),
            services: usage,
            loadgen_cpu_cores: loadgen.cpu_cores,
            saturated: false,
            client_bound: loadgen.cpu_cores >= CLIENT_BOUND_CORES,
            curve: curve(&rec.latency),
        }
    }
}

/// Latency at percentiles spaced evenly in "nines" (50, 90, 99, 99.9 ... ), for the percentile plot.
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return vec![];
    }
    let max_nines = ((h.len() as f64).log10()).clamp(1.0, 6.0);
    let steps = 60;
    (0..=steps)
        .map(|i| {
            let nines = max_nines * i as f64 / steps as f64;
            let q = 1.0 - 10f64.powf(-nines);
            (q * 100.0, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .chain(std::iter::once((100.0, h.max() as f64 / 1000.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_counts_and_percentiles() {
        let mut r = Recorder::default();
        let now = Instant::now();
        for i in 1..=1000u64 {
            r.record(
                Duration::from_micros(i),
                Duration::ZERO,
                Outcome::Mutated,
                now,
            );
        }
        r.record(
            Duration::from_millis(200),
            Duration::ZERO,
            Outcome::PassedThrough,
            now,
        );
        r.record(
            Duration::from_millis(1),
            Duration::ZERO,
            Outcome::Error(ErrorKind::Rejected),
            now,
        );
        let p = Percentiles::of(&r.latency);
        assert!((p.p50 - 0.5).abs() < 0.01, "{p:?}");
        assert!((p.p99 - 0.99).abs() < 0.01, "{p:?}");
        assert!((p.max - 200.0).abs() < 0.5, "{p:?}");
        assert_eq!(r.counts.total(), 1002);
        assert_eq!(r.counts.errors, 1);
        assert_eq!(r.counts.error_kinds[&ErrorKind::Rejected], 1);
        assert!((r.counts.pass_through_share() - 1.0 / 1001.0).abs() < 1e-9);
        let c = curve(&r.latency);
        assert!(
            c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
            "{c:?}"
        );
    }
}
