//! A flood of maximum-size reviews straight to every webhook path: each is answered, shed with 503 or refused
//! with 408 when its body could not arrive within the read deadline (never a dropped connection), the body
//! budget holds the frontend's peak memory below its
//! 256 MiB container limit (measured: 157 MiB peak, debug build), and a review sent
//! right after is decided.

mod common;

use common::*;
use serde_json::{Value, json};

/// Concurrent reviews in the flood.
const FLOOD: usize = 32;
/// The frontend's memory limit in the shipped Deployment.
const MEMORY_LIMIT_KIB: u64 = 256 * 1024;

/// A Pod CREATE review of about `mib` MiB (one annotation carries the bulk), for namespace `ml`.
fn big_review(uid: &str, mib: usize) -> Vec<u8> {
    let mut pod = gpu_pod(uid);
    pod["metadata"]["annotations"] = json!({"bulk": "x".repeat(mib * 1024 * 1024)});
    serde_json::to_vec(&review_for("admission.k8s.io/v1", uid, "ml", pod)).unwrap()
}

/// The peak resident memory of a process, from /proc (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_maximum_size_reviews_is_answered_or_shed_within_the_memory_limit() {
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
    let paths = [
        "/mutate-pod",
        "/validate-pod",
        "/validate-namespace",
        "/validate-policy",
        "/mutate-pod-checkpoint",
    ];
    let body = big_review("flood", 19);
    let wh = std::sync::Arc::new(wh);
    let mut sent = Vec::new();
    for i in 0..FLOOD {
        let (wh, body, path) = (wh.clone(), body.clone(), paths[i % paths.len()]);
        sent.push(tokio::spawn(
            async move { (path, wh.post(path, body).await) },
        ));
    }
    let (mut answered, mut shed) = (0, 0);
    for s in sent {
        let (path, (status, text)) = s.await.expect("every request gets an HTTP answer");
        match status {
            200 => {
                let answer: Value = serde_json::from_slice(&text).expect("a review answer");
                assert_eq!(answer["response"]["uid"], "flood", "{path}");
                answered += 1;
            }
            503 | 408 => shed += 1,
            other => panic!("{path}: HTTP {other}: {}", String::from_utf8_lossy(&text)),
        }
    }
    println!("flood: {answered} answered, {shed} shed of {FLOOD}");
    assert!(answered > 0, "some reviews are answered");
    assert!(
        shed > 0,
        "a 40 MiB budget cannot hold {FLOOD} reviews of 19 MiB"
    );
    let metrics = wh.stderr_text();
    assert!(
        metrics.contains("the in-flight body budget or its namespace"),
        "a shed request is logged"
    );
    let peak = peak_rss_kib(wh.process.pid()).expect("VmHWM");
    println!("peak resident memory: {} MiB", peak / 1024);
    assert!(
        peak < MEMORY_LIMIT_KIB,
        "peak {peak} KiB: the default budget must keep the flood inside the 256 MiB limit"
    );

    // Still deciding after the flood: a review sent now is answered (and its uid echoed).
    let mut pin = gpu_pod("pin-after-flood");
    pin["spec"]["nodeSelector"] = json!({CLASS_KEY: "NO-SUCH-CLASS"});
    let (status, text) = wh
        .post(
            "/validate-pod",
            serde_json::to_vec(&review_for("admission.k8s.io/v1", "after", "ml", pin)).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&text));
    let answer: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(answer["response"]["uid"], "after");
}
