//! The burst and abuse scenarios (`--burst N`, `--idle-conns N`): what a 1,000-replica Job or a reconcile
//! storm does to the webhook, and what idle or half-open clients do to its port.
//!
//! - **Burst**: rounds of N admissions sent at once, over one HTTP/2 connection (N streams) and over 64
//!   HTTP/1.1 connections (N requests queued on the client for 64 connections); latency from the round's
//!   start; pass-throughs counted by the reason the frontend's warning gives.
//! - **Idle connections**: N TLS connections that complete the handshake and say nothing, plus M TCP
//!   connections that send one byte; how long until the frontend closed each of them, whether a probe
//!   admission on a new connection every 0.5 s kept succeeding (also for `--idle-settle` after the last was
//!   closed), and the frontend's RSS: idle (after one warm-up admission, so that what every frontend sets up
//!   on its first request is not counted as the idle run's), at the peak, at each probe of the settle time,
//!   and how long after the last close it was back within [`RSS_BACK_MARGIN_MIB`] of idle.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::drivers::webhook::{Conn, PassReason, WebhookTarget};
use crate::drivers::{ErrorKind, Outcome};
use crate::procfs;

/// HTTP/1.1 connections of the burst over HTTP/1.1.
pub const BURST_H1_CONNECTIONS: usize = 64;

/// One burst run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BurstResult {
    pub name: String,
    pub concurrency: usize,
    pub connections: usize,
    pub requests: u64,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mutated: u64,
    pub passed_through: u64,
    pub skipped: u64,
    pub errors: u64,
    /// Pass-throughs by the reason in the frontend's warning.
    pub pass_reasons: BTreeMap<&'static str, u64>,
    pub error_kinds: BTreeMap<ErrorKind, u64>,
}

#[derive(Default)]
struct Tally {
    mutated: u64,
    passed: u64,
    skipped: u64,
    errors: u64,
    reasons: BTreeMap<PassReason, u64>,
    error_kinds: BTreeMap<ErrorKind, u64>,
}

impl Tally {
    fn add(&mut self, outcome: Outcome, reason: Option<PassReason>) {
        match outcome {
            Outcome::Mutated => self.mutated += 1,
            Outcome::PassedThrough => {
                self.passed += 1;
                *self
                    .reasons
                    .entry(reason.unwrap_or(PassReason::Other))
                    .or_default() += 1;
            }
            Outcome::Skipped | Outcome::Scored | Outcome::Infeasible => self.skipped += 1,
            Outcome::Error(kind) => {
                self.errors += 1;
                *self.error_kinds.entry(kind).or_default() += 1;
            }
        }
    }
}

/// `rounds` rounds of `n` admissions at once. `h2` = one HTTP/2 connection (`target` must speak h2), else
/// [`BURST_H1_CONNECTIONS`] HTTP/1.1 connections.
pub async fn burst(
    name: String,
    target: Arc<WebhookTarget>,
    n: usize,
    rounds: usize,
    h2: bool,
) -> Result<BurstResult> {
    let n = n.max(1);
    let mut conns: Vec<Conn> = Vec::new();
    if h2 {
        let first = Conn::open(target.clone()).await?;
        for _ in 1..n {
            conns.push(first.share_h2().context("not an HTTP/2 connection")?);
        }
        conns.push(first);
    } else {
        for _ in 0..BURST_H1_CONNECTIONS.min(n) {
            conns.push(Conn::open(target.clone()).await?);
        }
    }
    let workers = conns.len();
    let hist = Rc::new(std::cell::RefCell::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("static histogram bounds"),
    ));
    let tally = Rc::new(std::cell::RefCell::new(Tally::default()));
    let started = Instant::now();
    let mut seq = 0u64;
    for _ in 0..rounds.max(1) {
        let round_start = Instant::now();
        let next = Rc::new(std::cell::Cell::new(seq));
        let end = seq + n as u64;
        let futures = conns.iter_mut().map(|conn| {
            let (next, hist, tally) = (next.clone(), hist.clone(), tally.clone());
            async move {
                loop {
                    let s = next.get();
                    if s >= end {
                        return;
                    }
                    next.set(s + 1);
                    let (outcome, reason) = conn.call_with_reason(s).await;
                    let us = round_start.elapsed().as_micros() as u64;
                    let _ = hist.borrow_mut().record(us.max(1));
                    tally.borrow_mut().add(outcome, reason);
                }
            }
        });
        futures_join_all(futures).await;
        seq = end;
    }
    let seconds = started.elapsed().as_secs_f64();
    let hist = hist.borrow();
    let tally = tally.borrow();
    Ok(BurstResult {
        name,
        concurrency: n,
        connections: if h2 { 1 } else { workers },
        requests: seq,
        seconds,
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: hist.max() as f64 / 1000.0,
        mutated: tally.mutated,
        passed_through: tally.passed,
        skipped: tally.skipped,
        errors: tally.errors,
        pass_reasons: tally
            .reasons
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect(),
        error_kinds: tally.error_kinds.clone(),
    })
}

/// Polls every future to completion on the current task.
async fn futures_join_all<F: std::future::Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut pending: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    std::future::poll_fn(move |cx| {
        pending.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if pending.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// The idle-connection run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IdleResult {
    pub idle_tls: usize,
    pub one_byte: usize,
    /// Connections that could not even be opened (refused, reset during the handshake).
    pub open_failed: usize,
    /// Seconds from the last one opened until the frontend closed the last of each kind (None: some still open
    /// at the end of the wait).
    pub idle_tls_all_closed_s: Option<f64>,
    pub one_byte_all_closed_s: Option<f64>,
    pub idle_tls_still_open: usize,
    pub one_byte_still_open: usize,
    pub probes: u64,
    pub probes_ok: u64,
    pub probe_max_ms: f64,
    /// Before the first admission.
    pub rss_start_mib: Option<f64>,
    /// After one warm-up admission: the idle frontend the run is compared with.
    pub rss_before_mib: Option<f64>,
    pub rss_peak_mib: Option<f64>,
    /// At the end of the settle time (`--idle-settle`).
    pub rss_after_mib: Option<f64>,
    /// Seconds from the moment the last connection was closed until the RSS was back within
    /// [`RSS_BACK_MARGIN_MIB`] of `rss_before_mib` (None: not within the settle time).
    pub rss_back_s: Option<f64>,
    /// The RSS at each probe after the last connection was closed: (seconds since then, MiB).
    pub rss_settle: Vec<(f64, f64)>,
}

/// Opens `idle` TLS connections that say nothing and `one_byte` TCP connections that send one byte, then
/// waits (up to `wait`) until the frontend closed them all, probing every 0.5 s with a new connection.
pub async fn idle_connections(
    target: Arc<WebhookTarget>,
    idle: usize,
    one_byte: usize,
    wait: Duration,
    settle: Duration,
    frontend_pid: Option<u32>,
) -> Result<IdleResult> {
    let rss = || {
        frontend_pid
            .and_then(procfs::rss_kib)
            .map(|k| k as f64 / 1024.0)
    };
    let rss_start = rss();
    let mut seq = 1u64 << 40;
    let probe = |seq: u64| {
        let target = target.clone();
        async move {
            let t0 = Instant::now();
            let ok = match tokio::time::timeout(Duration::from_secs(2), async {
                let mut conn = Conn::open(target).await?;
                anyhow::Ok(conn.call(seq).await)
            })
            .await
            {
                Ok(Ok(outcome)) => !matches!(outcome, Outcome::Error(_)),
                _ => false,
            };
            (ok, t0.elapsed())
        }
    };
    // The warm-up admission (its result is not one of the probes).
    let _ = probe(seq).await;
    seq += 1;
    let rss_before = rss();
    let closed_idle: Closed = Arc::default();
    let closed_one: Closed = Arc::default();
    let mut open_failed = 0usize;
    let mut watchers = Vec::new();
    // Opened 32 at a time, so that the handshakes do not themselves hit the first-request timeout.
    let mut i = 0;
    while i < idle {
        let batch = (idle - i).min(32);
        let opened = futures_collect((0..batch).map(|_| {
            let t = target.clone();
            async move { t.connect_tls_only().await }
        }))
        .await;
        for c in opened {
            match c {
                Ok(tls) => watchers.push(watch_until_closed(tls, closed_idle.clone())),
                Err(_) => open_failed += 1,
            }
        }
        i += batch;
    }
    for _ in 0..one_byte {
        match TcpStream::connect(target.addr()).await {
            Ok(mut tcp) => {
                // The first byte of a TLS record header, and nothing after it.
                let _ = tcp.write_all(&[0x16]).await;
                watchers.push(watch_until_closed(tcp, closed_one.clone()));
            }
            Err(_) => open_failed += 1,
        }
    }
    let opened_at = Instant::now();
    let mut rss_peak = rss();
    let (mut probes, mut probes_ok, mut probe_max) = (0u64, 0u64, Duration::ZERO);
    let mut settle_from: Option<Instant> = None;
    let mut rss_settle = Vec::new();
    loop {
        let t0 = Instant::now();
        let all_closed = count(&closed_idle) + count(&closed_one) >= idle + one_byte - open_failed;
        if all_closed || opened_at.elapsed() >= wait {
            let from = *settle_from.get_or_insert(t0);
            if let Some(now) = rss() {
                rss_settle.push((t0.duration_since(from).as_secs_f64(), now));
            }
            if t0 >= from + settle {
                break;
            }
        }
        probes += 1;
        let (ok, took) = probe(seq).await;
        seq += 1;
        probe_max = probe_max.max(took);
        if ok {
            probes_ok += 1;
        }
        rss_peak = match (rss_peak, rss()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        tokio::time::sleep_until((t0 + Duration::from_millis(500)).into()).await;
    }
    let last = |v: &Closed, want: usize| {
        let v = v.lock().unwrap_or_else(|e| e.into_inner());
        (v.len() >= want).then(|| {
            v.iter().max().map_or(0.0, |t| {
                t.saturating_duration_since(opened_at).as_secs_f64()
            })
        })
    };
    let rss_back_s = rss_before.and_then(|idle| {
        rss_settle
            .iter()
            .find(|(_, now)| *now <= idle + RSS_BACK_MARGIN_MIB)
            .map(|(t, _)| *t)
    });
    let idle_closed = count(&closed_idle);
    let one_closed = count(&closed_one);
    let result_idle = last(&closed_idle, idle);
    let result_one = last(&closed_one, one_byte);
    for w in watchers {
        w.abort();
    }
    Ok(IdleResult {
        idle_tls: idle,
        one_byte,
        open_failed,
        idle_tls_all_closed_s: result_idle,
        one_byte_all_closed_s: result_one,
        idle_tls_still_open: idle.saturating_sub(idle_closed),
        one_byte_still_open: one_byte.saturating_sub(one_closed),
        probes,
        probes_ok,
        probe_max_ms: probe_max.as_secs_f64() * 1000.0,
        rss_start_mib: rss_start,
        rss_before_mib: rss_before,
        rss_peak_mib: rss_peak,
        rss_after_mib: rss_settle.last().map(|(_, now)| *now),
        rss_back_s,
        rss_settle,
    })
}

/// "Back to idle": the RSS within this many MiB of the idle frontend's (the issue's ±10 MiB).
pub const RSS_BACK_MARGIN_MIB: f64 = 10.0;

/// When each connection of a kind was closed by the frontend.
type Closed = Arc<std::sync::Mutex<Vec<Instant>>>;

/// Reads (and drops) whatever the frontend sends on `conn` until it closes the connection, then notes when.
fn watch_until_closed<S>(mut conn: S, closed: Closed) -> tokio::task::JoinHandle<()>
where
    S: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf = [0u8; 256];
        while let Ok(n) = conn.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
        closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    })
}

fn count(c: &Closed) -> usize {
    c.lock().unwrap_or_else(|e| e.into_inner()).len()
}

async fn futures_collect<T, F: std::future::Future<Output = T>>(
    futures: impl Iterator<Item = F>,
) -> Vec<T> {
    let mut slots: Vec<(std::pin::Pin<Box<F>>, Option<T>)> =
        futures.map(|f| (Box::pin(f), None)).collect();
    std::future::poll_fn(move |cx| {
        let mut done = true;
        for (f, out) in slots.iter_mut() {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *out = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(slots.iter_mut().filter_map(|(_, o)| o.take()).collect())
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// The scenarios' lines of the table.
pub fn render(bursts: &[BurstResult], idle: Option<&IdleResult>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if !bursts.is_empty() {
        let _ = writeln!(
            out,
            "\nburst                              conc  conns  requests    /s       p50       p99       max  mutated  passed skipped errors  pass-through reasons"
        );
        for b in bursts {
            let reasons = if b.pass_reasons.is_empty() {
                "-".to_string()
            } else {
                b.pass_reasons
                    .iter()
                    .map(|(r, n)| format!("{r} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "{:<34} {:>4} {:>6} {:>9} {:>5.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>7} {:>7} {:>6}  {}",
                b.name,
                b.concurrency,
                b.connections,
                b.requests,
                b.requests as f64 / b.seconds.max(1e-9),
                b.p50_ms,
                b.p99_ms,
                b.max_ms,
                b.mutated,
                b.passed_through,
                b.skipped,
                b.errors,
                reasons
            );
        }
    }
    if let Some(i) = idle {
        let secs = |s: Option<f64>, open: usize| match s {
            Some(s) => format!("all closed after {s:.1} s"),
            None => format!("{open} STILL OPEN"),
        };
        let _ = writeln!(
            out,
            "\nidle connections: {} idle TLS: {}; {} one-byte: {}; {} could not open\n\
             probe every 0.5 s on a new connection: {}/{} ok, slowest {:.1} ms\n\
             {}",
            i.idle_tls,
            secs(i.idle_tls_all_closed_s, i.idle_tls_still_open),
            i.one_byte,
            secs(i.one_byte_all_closed_s, i.one_byte_still_open),
            i.open_failed,
            i.probes_ok,
            i.probes,
            i.probe_max_ms,
            rss_line(i),
        );
    }
    out
}

/// The idle run's RSS line: idle, peak, the last reading of the settle time and whether it was back to idle.
fn rss_line(i: &IdleResult) -> String {
    let (Some(idle), Some((settled_s, after))) = (i.rss_before_mib, i.rss_settle.last()) else {
        return "frontend RSS not measured (no pid: --spawn or --watch-pid webhook-frontend=PID)"
            .to_string();
    };
    let mib = |m: Option<f64>| m.map_or("-".to_string(), |m| format!("{m:.1}"));
    let back = match i.rss_back_s {
        Some(t) => format!("within {RSS_BACK_MARGIN_MIB} MiB of idle {t:.1} s after"),
        None => format!("not back within {RSS_BACK_MARGIN_MIB} MiB of idle"),
    };
    format!(
        "frontend RSS MiB: idle {idle:.1} (at start {}), peak {}, {settled_s:.0} s after the last was closed \
         {after:.1}; {back}",
        mib(i.rss_start_mib),
        mib(i.rss_peak_mib),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rss_line_says_when_the_frontend_was_back_to_idle_or_that_it_was_not_measured() {
        let measured = IdleResult {
            rss_start_mib: Some(13.3),
            rss_before_mib: Some(16.0),
            rss_peak_mib: Some(40.5),
            rss_settle: vec![(0.0, 40.0), (7.5, 25.9), (20.0, 18.4)],
            rss_back_s: Some(7.5),
            ..Default::default()
        };
        assert_eq!(
            rss_line(&measured),
            "frontend RSS MiB: idle 16.0 (at start 13.3), peak 40.5, 20 s after the last was closed 18.4; \
             within 10 MiB of idle 7.5 s after"
        );
        let never_back = IdleResult {
            rss_back_s: None,
            ..measured
        };
        assert!(rss_line(&never_back).ends_with("; not back within 10 MiB of idle"));
        assert_eq!(
            rss_line(&IdleResult::default()),
            "frontend RSS not measured (no pid: --spawn or --watch-pid webhook-frontend=PID)"
        );
    }
}
