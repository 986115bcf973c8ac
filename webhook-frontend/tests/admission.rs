//! The real binary over HTTPS against an in-test Scorer double: mutation, pass-through, malformed input.

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn self_signed_args<'a>(dir: &'a str, scorer: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "--tls=self-signed",
        "--tls-dir",
        dir,
        "--scorer",
        scorer,
        "--no-kube",
        "--namespace-tier",
        "ml=gold",
    ];
    v.extend_from_slice(extra);
    v
}

async fn webhook_with(mode: Mode, extra: &[&str]) -> (Webhook, ScorerDouble, tempfile::TempDir) {
    let (double, scorer) = start_scorer(mode).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let mut wh = start_webhook(
        &self_signed_args(&d, &scorer, extra),
        &dir.path().join("ca.crt"),
    )
    .await;
    // Until it has the scorer's catalog the webhook passes every Pod through; the double answers GetPolicy at once.
    wh.wait_for_log("policy loaded").await;
    (wh, double, dir)
}

/// Posts until the PriorityClasses from GetPolicy are known (fetched right after start-up).
async fn mutate_until_priority(wh: &Webhook, pod: &Value) -> Value {
    for i in 0..100 {
        let resp = wh
            .review(&review_for(
                "admission.k8s.io/v1",
                &format!("uid-{i}"),
                "ml",
                pod.clone(),
            ))
            .await;
        // Before GetPolicy's buckets are known, the answer's own assignment (7000) is used; then the bucket's.
        let patched = apply_patch(&resp, pod).expect("a patch");
        assert_eq!(patched["spec"]["priorityClassName"], "gpu-high");
        if patched["spec"]["priority"] == 7500 {
            return resp;
        }
        assert_eq!(patched["spec"]["priority"], 7000);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the webhook never used the PriorityClasses of the policy's buckets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_is_fetched_at_start_and_a_gpu_pod_is_mutated() {
    // The decision itself is covered in-process (router.rs); here: the process fetches GetPolicy on its own
    // and answers over TLS with a patch that applies.
    let (wh, double, _dir) = webhook_with(Mode::Good, &[]).await;
    let pod = gpu_pod("train-1");
    let resp = mutate_until_priority(&wh, &pod).await;
    assert_eq!(resp["response"]["allowed"], true);
    let patched = apply_patch(&resp, &pod).expect("a patch");
    let p: Pod = serde_json::from_value(patched).unwrap();
    assert_eq!(
        p.spec.unwrap().node_selector.unwrap()[CLASS_KEY],
        "A100-80GB"
    );
    // The calls travel on a ScoreCalls stream: no unary call, so no grpc-timeout.
    assert!(double.streamed_calls() > 0, "Score calls on a stream");
    assert_eq!(double.streamed_calls(), double.score_calls());
    assert!(double.timeouts().is_empty());
}

/// A GPU Pod posted once: whether its answer carries a patch.
async fn mutated_once(wh: &Webhook, uid: &str) -> bool {
    let resp = wh
        .review(&review_for("admission.k8s.io/v1", uid, "ml", gpu_pod(uid)))
        .await;
    apply_patch(&resp, &gpu_pod(uid)).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_carry_the_deadline_and_an_older_scorer_is_called_unary() {
    // `--scorer-calls unary`: one unary Score a Pod, with the deadline as grpc-timeout.
    let (wh, double, _dir) = webhook_with(Mode::Good, &["--scorer-calls", "unary"]).await;
    assert!(mutated_once(&wh, "unary-1").await);
    assert_eq!((double.score_calls(), double.streamed_calls()), (1, 0));
    assert_eq!(double.timeouts().len(), 1, "grpc-timeout must be sent");
    let t = double.timeouts()[0].clone();
    assert!(
        t.ends_with('m') || t.ends_with('u') || t.ends_with('n'),
        "grpc-timeout {t}"
    );

    // A scorer release without ScoreCalls (UNIMPLEMENTED): the very first Pod is decided, by a unary call,
    // and so are the next ones.
    let double = ScorerDouble::start_unary_only(policy(), Mode::Good.behaviour())
        .await
        .expect("the scorer double starts");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    let url = double.url();
    let mut wh = start_webhook(&self_signed_args(&d, &url, &[]), &dir.path().join("ca.crt")).await;
    wh.wait_for_log("policy loaded").await;
    for i in 0..3 {
        assert!(mutated_once(&wh, &format!("older-{i}")).await, "Pod {i}");
    }
    assert_eq!((double.score_calls(), double.streamed_calls()), (3, 0));
    assert_eq!(double.timeouts().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_scorer_passes_through_inside_the_deadline() {
    let (wh, double, _dir) = webhook_with(Mode::Hang, &["--deadline-ms", "150"]).await;
    let pod = gpu_pod("train-hung");
    let started = Instant::now();
    let resp = wh
        .review(&review_for("admission.k8s.io/v1", "uid-hung", "ml", pod))
        .await;
    let took = started.elapsed();
    let r = &resp["response"];
    assert_eq!(
        (r["uid"].as_str(), r["allowed"].as_bool()),
        (Some("uid-hung"), Some(true))
    );
    assert!(
        r.get("patch").is_none() && r.get("patchType").is_none(),
        "{r}"
    );
    let warnings = r["warnings"].to_string();
    assert!(warnings.contains("timed out"), "{warnings}");
    // 150 ms budget; generous bound for a loaded CI machine, far below the apiserver's 10 s.
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(double.requests().len(), 1);

    // The apiserver's own timeout wins when it is shorter than the budget.
    double.set_behaviour(Mode::Hang.behaviour());
    let (_, body) = wh
        .post(
            "/mutate-pod?timeout=100ms",
            serde_json::to_vec(&review_for(
                "admission.k8s.io/v1",
                "u2",
                "ml",
                gpu_pod("p2"),
            ))
            .unwrap(),
        )
        .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        v["response"]["warnings"]
            .to_string()
            .contains("within 50 ms"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_answers_pass_through() {
    for mode in [Mode::OutOfRange, Mode::UnknownClass] {
        let (wh, _double, _dir) = webhook_with(mode, &[]).await;
        // An unknown class is only recognisable once the catalog is fetched (right after start-up).
        let mut resp = Value::Null;
        for i in 0..100 {
            resp = wh
                .review(&review_for(
                    "admission.k8s.io/v1",
                    &format!("uid-bad-{i}"),
                    "ml",
                    gpu_pod("p"),
                ))
                .await;
            if resp["response"].get("patch").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = &resp["response"];
        assert_eq!(r["allowed"], true);
        assert!(r.get("patch").is_none(), "{mode:?}: {r}");
        assert!(
            r["warnings"].to_string().contains("answered invalidly"),
            "{mode:?}: {r}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_missing_scorers_pass_through() {
    let junk_server = start_junk_server().await;
    let junk = junk_server.url();
    // A port that was free a moment ago: connection refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for scorer in [junk.as_str(), closed.as_str()] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_string();
        let wh = start_webhook(
            &self_signed_args(&d, scorer, &[]),
            &dir.path().join("ca.crt"),
        )
        .await;
        let resp = wh
            .review(&review_for(
                "admission.k8s.io/v1",
                "uid-junk",
                "ml",
                gpu_pod("p"),
            ))
            .await;
        let r = &resp["response"];
        assert_eq!(
            (r["allowed"].as_bool(), r["uid"].as_str()),
            (Some(true), Some("uid-junk"))
        );
        assert!(r.get("patch").is_none(), "{scorer}: {r}");
        assert!(
            r["warnings"].to_string().contains("Pod admitted unchanged"),
            "{scorer}: {r}"
        );
        // The log line is written before the answer, but the pipe reader may lag on a loaded machine.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !wh.stderr_text().contains("pass-through") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(wh.stderr_text().contains("pass-through"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_bodies() {
    let (wh, _double, _dir) = webhook_with(Mode::Good, &[]).await;
    let (status, body) = wh.post("/mutate-pod", b"{\"apiVersion\": ".to_vec()).await;
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("malformed JSON"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    let (status, body) = wh
        .post(
            "/mutate-pod",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));

    let big = vec![b' '; 25 * 1024 * 1024];
    for force_http1 in [false, true] {
        // The server may answer 413 and close before the client has sent the whole body; then the client sees
        // a closed connection instead of the status. Every status that does arrive must be 413.
        let mut got_413 = false;
        for _ in 0..10 {
            let mut conn = connect(wh.addr, &wh.ca, force_http1).await;
            if let Ok((status, _)) =
                try_request(&mut conn, "POST", "/mutate-pod", big.clone()).await
            {
                assert_eq!(status, 413, "http1={force_http1}");
                got_413 = true;
                break;
            }
        }
        assert!(got_413, "http1={force_http1}: never saw the 413");
    }

    // A Pod object that does not parse (annotation value is a number): answered, allowed, with a warning.
    let mut pod = gpu_pod("p");
    pod["metadata"]["annotations"]["sleep"] = json!(4);
    let resp = wh
        .review(&review_for("admission.k8s.io/v1", "uid-odd", "ml", pod))
        .await;
    assert_eq!(
        (
            resp["response"]["allowed"].as_bool(),
            resp["response"]["uid"].as_str()
        ),
        (Some(true), Some("uid-odd"))
    );
    assert!(
        resp["response"]["warnings"]
            .to_string()
            .contains("could not be read")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_metrics_alpn_and_drain() {
    let (mut wh, _double, _dir) = webhook_with(Mode::Good, &[]).await;
    assert_eq!(wh.get("/healthz").await.0, 200);
    assert_eq!(wh.get("/readyz").await.0, 200);
    let conn = connect(wh.addr, &wh.ca, false).await;
    assert_eq!(conn.alpn.as_deref(), Some(&b"h2"[..]));
    let mut h1 = connect(wh.addr, &wh.ca, true).await;
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(request(&mut h1, "GET", "/healthz", Vec::new()).await.0, 200);

    wh.review(&review_for(
        "admission.k8s.io/v1",
        "uid-m",
        "ml",
        gpu_pod("p"),
    ))
    .await;
    let admin = wh.admin.expect("admin address logged");
    let metrics = gpu_admission_testkit::https::http_get_text(admin, "/metrics")
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "gpu_admission_admissions_total{webhook=\"mutate-pod\",operation=\"CREATE\",outcome=\"mutated\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("gpu_admission_scorer_calls_total{result=\"ok\"}"),
        "{metrics}"
    );

    // SIGTERM: drains and exits 0.
    wh.process.terminate().unwrap();
    let status = wh
        .process
        .wait_exit(Duration::from_secs(25))
        .await
        .expect("exits after SIGTERM");
    assert!(status.success(), "{status}");
    assert!(wh.stderr_text().contains("draining"));
}

#[test]
fn a_broken_kube_config_is_an_error_not_a_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "this: [is not a kubeconfig").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webhook-frontend"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--tls=self-signed",
            "--tls-dir",
        ])
        .arg(dir.path().join("certs"))
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("WEBHOOK_NO_KUBE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no usable Kubernetes configuration"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening on"), "{stderr}");
}
