//! Hostile peers on the webhook port against another tenant's reviews, over the real binary: requests that
//! declare 24 MiB bodies and send nothing (the two-silent-requests attack, renewed as soon as it is
//! answered), requests that send half a maximum-size body fast and then stall, and another namespace's
//! flood of large reviews from the same address (as through one apiserver). While each runs, a second
//! client sends plain GPU Pod reviews as the apiserver would, on kept-alive connections: every one is
//! answered 200 allowed. The attackers are answered `408` (read deadline) or `503` (shed), never decided.
//! Prints the second tenant's p99 latency per phase and the frontend's peak resident memory (numbers in
//! docs/measurements/2026-11-29-hostile-load.md; latency is reported, not asserted).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use gpu_admission_testkit::hostile::{AttackCounts, attacker};
use serde_json::Value;

/// Reviews the second tenant sends per phase, over `CLIENTS` kept-alive connections.
const REVIEWS: usize = 200;
const CLIENTS: usize = 2;
/// What the second tenant saw in one phase.
struct Phase {
    allowed: usize,
    denied: usize,
    failed: usize,
    latencies: Vec<Duration>,
}

impl Phase {
    fn p(&self, q: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l[((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1]
    }
}

/// The second tenant's plain GPU Pods, `REVIEWS` of them over `CLIENTS` kept-alive connections.
async fn second_tenant(wh: &Webhook, phase: &str) -> Phase {
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (addr, ca, phase) = (wh.addr, wh.ca.clone(), phase.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = connect(addr, &ca, false).await;
            let mut seen = Vec::new();
            for i in 0..REVIEWS / CLIENTS {
                let uid = format!("{phase}-{c}-{i}");
                let body = serde_json::to_vec(&review_for(
                    "admission.k8s.io/v1",
                    &uid,
                    "ml",
                    gpu_pod(&uid),
                ))
                .unwrap();
                let start = Instant::now();
                let (status, text) =
                    request(&mut conn, "POST", "/validate-pod?timeout=10s", body).await;
                let took = start.elapsed();
                let allowed = (status == 200).then(|| {
                    let answer: Value = serde_json::from_slice(&text).unwrap();
                    assert_eq!(answer["response"]["uid"], uid.as_str());
                    answer["response"]["allowed"] == true
                });
                seen.push((allowed, took));
            }
            seen
        }));
    }
    let mut phase = Phase {
        allowed: 0,
        denied: 0,
        failed: 0,
        latencies: Vec::new(),
    };
    for t in tasks {
        for (allowed, took) in t.await.unwrap() {
            match allowed {
                Some(true) => phase.allowed += 1,
                Some(false) => phase.denied += 1,
                None => phase.failed += 1,
            }
            phase.latencies.push(took);
        }
    }
    phase
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `attackers` attackers (each sending `sent` body bytes, then stalling) while the second tenant
/// sends its reviews.
async fn attacked(
    wh: &Arc<Webhook>,
    name: &str,
    attackers: usize,
    sent: usize,
) -> (Phase, Arc<AttackCounts>) {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(AttackCounts::default());
    let running: Vec<_> = (0..attackers)
        .map(|_| {
            tokio::spawn(attacker(
                wh.addr,
                wh.ca.clone(),
                sent,
                stop.clone(),
                counts.clone(),
            ))
        })
        .collect();
    // The attack is in place before the second tenant starts.
    while counts.requests.load(Ordering::Relaxed) < attackers {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let phase = second_tenant(wh, name).await;
    stop.store(true, Ordering::Relaxed);
    for r in running {
        r.await.unwrap();
    }
    (phase, counts)
}

/// A review of about `mib` MiB (one annotation carries the bulk) in namespace `bulk`.
fn bulk_review(uid: &str, mib: usize) -> Vec<u8> {
    let mut pod = gpu_pod(uid);
    pod["metadata"]["annotations"]["bulk"] = Value::String("x".repeat(mib * 1024 * 1024));
    serde_json::to_vec(&review_for("admission.k8s.io/v1", uid, "bulk", pod)).unwrap()
}

/// Another namespace's flood of large reviews, `senders` at a time from the same address as the second
/// tenant (as both come through one apiserver), while the second tenant sends its reviews. The flood's
/// answers: (200, 503 or 408).
async fn flooded(wh: &Arc<Webhook>, senders: usize, mib: usize) -> (Phase, (usize, usize)) {
    let stop = Arc::new(AtomicBool::new(false));
    let body = bulk_review("bulk", mib);
    let running: Vec<_> = (0..senders)
        .map(|_| {
            let (wh, stop, body) = (wh.clone(), stop.clone(), body.clone());
            tokio::spawn(async move {
                let mut conn = connect(wh.addr, &wh.ca, false).await;
                let (mut decided, mut refused) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    match try_request(&mut conn, "POST", "/validate-pod?timeout=10s", body.clone())
                        .await
                    {
                        Ok((200, _)) => decided += 1,
                        Ok((503 | 408, _)) => refused += 1,
                        Ok((other, text)) => {
                            panic!("bulk: HTTP {other}: {}", String::from_utf8_lossy(&text))
                        }
                        Err(_) => conn = connect(wh.addr, &wh.ca, false).await,
                    }
                }
                (decided, refused)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let phase = second_tenant(wh, "flooded").await;
    stop.store(true, Ordering::Relaxed);
    let mut totals = (0, 0);
    for r in running {
        let (d, f) = r.await.unwrap();
        totals = (totals.0 + d, totals.1 + f);
    }
    (phase, totals)
}

fn report(name: &str, phase: &Phase) {
    println!(
        "| {name} | {} | {} | {} | {:.1} | {:.1} |",
        phase.allowed,
        phase.denied,
        phase.failed,
        phase.p(0.5).as_secs_f64() * 1000.0,
        phase.p(0.99).as_secs_f64() * 1000.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attackers_on_the_port_never_make_another_tenants_reviews_fail() {
    let (_double, scorer) = start_scorer(Mode::Good).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let args = [
        "--tls=self-signed",
        "--tls-dir",
        d.as_str(),
        "--scorer",
        scorer.as_str(),
        "--no-kube",
        "--namespace-tier",
        "ml=gold",
    ];
    let mut wh = start_webhook(&args, &dir.path().join("ca.crt")).await;
    wh.wait_for_log("policy loaded").await;
    let wh = Arc::new(wh);

    println!("| phase | allowed | denied | failed | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    let quiet = second_tenant(&wh, "quiet").await;
    report("quiet", &quiet);
    let (silent, silent_attack) = attacked(&wh, "silent", 2, 0).await;
    report("two silent 24 MiB requests, renewed", &silent);
    let (stalled, stalled_attack) = attacked(&wh, "stalled", 4, 12 * 1024 * 1024).await;
    report("four 12 MiB-then-stalled requests, renewed", &stalled);
    let (bulk, (bulk_decided, bulk_refused)) = flooded(&wh, 6, 6).await;
    report(
        "another namespace's 6 concurrent 6 MiB reviews, renewed",
        &bulk,
    );
    let peak = peak_rss_kib(wh.process.pid());
    println!("frontend peak resident memory: {} MiB", peak / 1024);
    println!("bulk flood: {bulk_decided} decided, {bulk_refused} refused (503 or 408)");

    for (name, phase) in [
        ("quiet", &quiet),
        ("silent", &silent),
        ("stalled", &stalled),
        ("bulk", &bulk),
    ] {
        assert_eq!(
            (phase.allowed, phase.denied, phase.failed),
            (REVIEWS, 0, 0),
            "{name}: every plain GPU Pod of the second tenant is answered 200 allowed"
        );
    }
    for (name, counts) in [("silent", &silent_attack), ("stalled", &stalled_attack)] {
        let (t408, s503, other) = counts.answers();
        println!("{name} attack: {t408} answered 408, {s503} answered 503, {other} other");
        assert!(
            t408 + s503 > 0,
            "{name}: the attackers' requests are refused"
        );
        assert_eq!(other, 0, "{name}: no attacking request is decided");
    }
    let log = wh.stderr_text();
    assert!(
        log.contains("body_read_deadline"),
        "a refused body is logged with its reason"
    );
}
