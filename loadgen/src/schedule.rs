//! Pacing of one run: open loop at a fixed rate, or closed loop with N workers.
//!
//! Open loop with coordinated-omission correction: request `i` is due at `start + i / rate`, whether or not
//! earlier requests have come back. A pacing thread (plain `std::thread::sleep`, which is precise to tens
//! of microseconds where tokio's timer has 1 ms ticks) hands out one permit per due request; whichever
//! worker (connection) is free takes it. Latency is measured from the request's *intended* send time, so a
//! stall of the server or a full connection pool shows up in full, not as one slow request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::drivers::{Conn, ErrorKind, Outcome, Target};
use crate::report::Recorder;

#[derive(Debug, Clone, Copy)]
pub enum Pacing {
    Open { rate: f64 },
    Closed,
}

#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub pacing: Pacing,
    pub connections: usize,
    /// Client threads of the closed loop (each its own current-thread runtime with its share of the
    /// connections); 1 = everything on the caller's runtime. The open loop always uses the caller's runtime.
    pub client_threads: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

/// What a run recorded; `window_start` is when measurement began.
pub struct Measured {
    pub recorder: Recorder,
    pub window_start: Instant,
    pub window: Duration,
}

/// Time allowed after the schedule's end for late answers before they are counted as unfinished.
fn grace(plan: &Plan) -> Duration {
    (plan.duration / 2).max(Duration::from_secs(3))
}

async fn connect_all(target: &Target, n: usize) -> Result<Vec<Conn>> {
    let mut set = JoinSet::new();
    for _ in 0..n {
        let t = target.clone();
        set.spawn(async move { t.connect().await });
    }
    let mut conns = Vec::with_capacity(n);
    while let Some(c) = set.join_next().await {
        conns.push(c.context("connect task")??);
    }
    Ok(conns)
}

/// Runs one plan against `target` and returns what was recorded during the measured window.
/// `on_start` is called once connections are up and the clock starts (faults hook in there).
pub async fn run(target: &Target, plan: &Plan, on_start: impl FnOnce(Instant)) -> Result<Measured> {
    if matches!(plan.pacing, Pacing::Closed) && plan.client_threads > 1 {
        return closed_loop_threads(target, plan, on_start).await;
    }
    let conns = connect_all(target, plan.connections.max(1)).await?;
    match plan.pacing {
        Pacing::Open { rate } => open_loop(conns, rate, plan, on_start).await,
        Pacing::Closed => closed_loop(conns, plan, on_start).await,
    }
}

struct OpenShared {
    next: AtomicU64,
    permits: Semaphore,
    stop: AtomicBool,
    recorder: Mutex<Recorder>,
}

async fn open_loop(
    conns: Vec<Conn>,
    rate: f64,
    plan: &Plan,
    on_start: impl FnOnce(Instant),
) -> Result<Measured> {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let warm = (plan.warmup.as_secs_f64() * rate).ceil() as u64;
    let measured = (plan.duration.as_secs_f64() * rate).round().max(1.0) as u64;
    let total = warm + measured;
    let workers = conns.len();
    let shared = Arc::new(OpenShared {
        next: AtomicU64::new(0),
        permits: Semaphore::new(0),
        stop: AtomicBool::new(false),
        recorder: Mutex::new(Recorder::default()),
    });
    let start = Instant::now() + Duration::from_millis(10);
    let due = move |i: u64| start + interval.mul_f64(i as f64);
    on_start(start);

    let pacer = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("loadgen-pacer".into())
            .spawn(move || {
                let mut released = 0u64;
                while released < total && !shared.stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    let next = due(released);
                    if next > now {
                        std::thread::sleep(next - now);
                        continue;
                    }
                    // Every slot due by now (several at high rates: the sleep has some slack).
                    let elapsed = now.saturating_duration_since(start).as_secs_f64();
                    let due_count = ((elapsed * rate).floor() as u64 + 1).min(total);
                    shared.permits.add_permits((due_count - released) as usize);
                    released = due_count;
                }
                // Wake every worker so it sees the schedule is exhausted.
                shared.permits.add_permits(workers);
            })?
    };

    let mut set = JoinSet::new();
    for mut conn in conns {
        let shared = shared.clone();
        set.spawn(async move {
            loop {
                match shared.permits.acquire().await {
                    Ok(p) => p.forget(),
                    Err(_) => break,
                }
                let i = shared.next.fetch_add(1, Ordering::Relaxed);
                if i >= total || shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let intended = due(i);
                let sent = Instant::now();
                let outcome = conn.call(i).await;
                let done = Instant::now();
                if i >= warm {
                    let lag = sent.saturating_duration_since(intended);
                    let latency = done.saturating_duration_since(intended);
                    shared
                        .recorder
                        .lock()
                        .expect("recorder lock")
                        .record(latency, lag, outcome, done);
                }
            }
        });
    }
    let deadline = due(total) + grace(plan);
    let finished = tokio::time::timeout_at(deadline.into(), async {
        while set.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        shared.stop.store(true, Ordering::Relaxed);
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
    let _ = tokio::task::spawn_blocking(move || pacer.join()).await;
    let mut recorder = std::mem::take(&mut *shared.recorder.lock().expect("recorder lock"));
    let unfinished = measured.saturating_sub(recorder.counts.total());
    for _ in 0..unfinished {
        recorder.counts.add(Outcome::Error(ErrorKind::Unfinished));
    }
    Ok(Measured {
        recorder,
        window_start: due(warm),
        window: plan.duration,
    })
}

async fn closed_loop(
    conns: Vec<Conn>,
    plan: &Plan,
    on_start: impl FnOnce(Instant),
) -> Result<Measured> {
    let workers = conns.len() as u64;
    let recorder = Arc::new(Mutex::new(Recorder::default()));
    let start = Instant::now();
    on_start(start);
    drive_closed(conns, 0, workers, start, plan, recorder.clone()).await;
    let recorder = std::mem::take(&mut *recorder.lock().expect("recorder lock"));
    Ok(Measured {
        recorder,
        window_start: start + plan.warmup,
        window: plan.duration,
    })
}

/// The closed loop's workers on the current runtime: worker `first + k` (of `stride` in the whole run) sends
/// requests `first + k`, `first + k + stride`, ... back to back until the window ends.
async fn drive_closed(
    conns: Vec<Conn>,
    first: u64,
    stride: u64,
    start: Instant,
    plan: &Plan,
    recorder: Arc<Mutex<Recorder>>,
) {
    let window_start = start + plan.warmup;
    let end = window_start + plan.duration;
    let mut set = JoinSet::new();
    for (w, mut conn) in conns.into_iter().enumerate() {
        let recorder = recorder.clone();
        set.spawn(async move {
            let mut seq = first + w as u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let outcome = conn.call(seq).await;
                seq += stride;
                let done = Instant::now();
                if t0 >= window_start {
                    recorder.lock().expect("recorder lock").record(
                        done - t0,
                        Duration::ZERO,
                        outcome,
                        done,
                    );
                }
            }
        });
    }
    let deadline = end + grace(plan);
    if tokio::time::timeout_at(deadline.into(), async {
        while set.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        set.abort_all();
        while set.join_next().await.is_some() {}
    }
}

/// The connections of thread `t` of `threads` (as even as possible) and the index of its first worker.
fn thread_share(connections: usize, threads: usize, t: usize) -> (usize, usize) {
    let base = connections / threads;
    let extra = connections % threads;
    let first = t * base + t.min(extra);
    (base + usize::from(t < extra), first)
}

/// The closed loop on `plan.client_threads` OS threads, each a current-thread runtime that opens its share of
/// the connections (so their TLS and socket work runs on that thread too); the clock starts once all are up.
async fn closed_loop_threads(
    target: &Target,
    plan: &Plan,
    on_start: impl FnOnce(Instant),
) -> Result<Measured> {
    let connections = plan.connections.max(1);
    let threads = plan.client_threads.clamp(1, connections);
    let recorder = Arc::new(Mutex::new(Recorder::default()));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<Result<()>>();
    let (start_tx, start_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let (share, first) = thread_share(connections, threads, t);
        let target = target.clone();
        let plan = *plan;
        let recorder = recorder.clone();
        let ready_tx = ready_tx.clone();
        let mut start_rx = start_rx.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("loadgen-client-{t}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    rt.block_on(async move {
                        let conns = match connect_all(&target, share).await {
                            Ok(c) => c,
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        };
                        let _ = ready_tx.send(Ok(()));
                        let start = loop {
                            if let Some(s) = *start_rx.borrow_and_update() {
                                break s;
                            }
                            if start_rx.changed().await.is_err() {
                                return; // the run was abandoned
                            }
                        };
                        drive_closed(
                            conns,
                            first as u64,
                            connections as u64,
                            start,
                            &plan,
                            recorder,
                        )
                        .await;
                    });
                })?,
        );
    }
    drop(ready_tx);
    let mut failure = None;
    for _ in 0..threads {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                failure = Some(e);
                break;
            }
            None => {
                failure = Some(anyhow::anyhow!("a client thread ended before connecting"));
                break;
            }
        }
    }
    let start = Instant::now();
    if failure.is_none() {
        on_start(start);
        let _ = start_tx.send(Some(start));
    }
    drop(start_tx);
    let joined = tokio::task::spawn_blocking(move || handles.into_iter().all(|h| h.join().is_ok()))
        .await
        .unwrap_or(false);
    if let Some(e) = failure {
        return Err(e.context("closed loop: connecting"));
    }
    anyhow::ensure!(joined, "a client thread panicked");
    let recorder = std::mem::take(&mut *recorder.lock().expect("recorder lock"));
    Ok(Measured {
        recorder,
        window_start: start + plan.warmup,
        window: plan.duration,
    })
}

#[cfg(test)]
mod tests {
    use super::thread_share;

    #[test]
    fn connections_are_shared_evenly_between_client_threads() {
        let shares: Vec<_> = (0..3).map(|t| thread_share(32, 3, t)).collect();
        assert_eq!(shares, vec![(11, 0), (11, 11), (10, 22)]);
        assert_eq!(thread_share(4, 2, 1), (2, 2));
    }
}
