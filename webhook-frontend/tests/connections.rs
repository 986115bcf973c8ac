//! The webhook port against idle, half-open and bursting clients, over the real binaries (short timeouts
//! so that the tests are quick): connections that never become a request are closed within the
//! first-request timeout, idle keep-alive connections within the idle timeout, at the connection cap the
//! oldest idle connection makes room for a new one, and a burst over one HTTP/2 connection never turns the
//! scorer channel "unavailable".

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_admission_testkit::review::{self, Operation};
use gpu_admission_testkit::{Scorer, Webhook};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const NS: &str = "team-gold";

fn tls_connector(ca: &std::path::Path, alpn: &[&str]) -> TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    addr: SocketAddr,
    connector: &TlsConnector,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::from(addr.ip());
    Ok(connector.connect(name, tcp).await?)
}

/// Reads until the server closes the stream; the time it took.
async fn time_until_closed(mut stream: impl AsyncReadExt + Unpin, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 512];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "still open after {limit:?}");
    start.elapsed()
}

async fn get(c: &mut gpu_admission_testkit::https::Connection) -> anyhow::Result<http::StatusCode> {
    c.send(http::Method::GET, "/healthz", None, Bytes::new())
        .await
        .map(|r| r.status)
}

async fn webhook(scorer: &Scorer, args: &[&str]) -> Webhook {
    let mut builder = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier(NS, "gold");
    for a in args {
        builder = builder.arg(*a);
    }
    builder.start().await.expect("webhook starts")
}

async fn metric(wh: &Webhook, needle: &str) -> u64 {
    let text = wh.metrics().await.expect("metrics");
    text.lines()
        .find(|l| l.starts_with(needle))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn gpu_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
            "annotations": {"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "40"}},
        "spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_one_byte_and_idle_keep_alive_connections_are_closed_in_time() {
    let scorer = Scorer::builder().start().await.unwrap();
    let wh = webhook(
        &scorer,
        &[
            "--header-read-timeout-ms",
            "1000",
            "--idle-timeout-secs",
            "3",
        ],
    )
    .await;
    let connector = tls_connector(wh.ca_path(), &["h2", "http/1.1"]);

    // A TLS connection that says nothing after the handshake (protocol detection never finishes).
    let silent = tls_connect(wh.addr(), &connector).await.unwrap();
    // A connection that sends one byte of a TLS record header, and nothing after it.
    let mut one_byte = TcpStream::connect(wh.addr()).await.unwrap();
    one_byte.write_all(&[0x16]).await.unwrap();
    // An h2 preface trickled one byte at a time, 4 bytes a second.
    let trickle = tls_connect(wh.addr(), &connector).await.unwrap();
    let (reader, mut writer) = tokio::io::split(trickle);
    let trickler = tokio::spawn(async move {
        for b in b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
            if writer.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let trickled = time_until_closed(reader, Duration::from_secs(10));
    let (silent, one_byte, trickled) = tokio::join!(
        time_until_closed(silent, Duration::from_secs(10)),
        time_until_closed(one_byte, Duration::from_secs(10)),
        trickled
    );
    for (what, took) in [
        ("silent TLS", silent),
        ("one byte", one_byte),
        ("trickled h2 preface", trickled),
    ] {
        assert!(
            took < Duration::from_millis(2500),
            "{what} connection closed after {took:?}"
        );
    }
    assert!(silent >= Duration::from_millis(800), "{silent:?}");
    trickler.abort();

    // A keep-alive HTTP/1.1 connection outlives the first-request timeout between requests, and is closed
    // once idle for the idle timeout.
    let mut h1 = wh
        .https()
        .clone()
        .alpn(&["http/1.1"])
        .connect()
        .await
        .unwrap();
    assert_eq!(get(&mut h1).await.unwrap(), 200);
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        get(&mut h1).await.unwrap(),
        200,
        "closed between requests before the idle timeout"
    );
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(
        get(&mut h1).await.is_err(),
        "still open after the idle timeout"
    );

    assert!(
        metric(
            &wh,
            "gpu_admission_connections_closed_total{reason=\"first_request_timeout\"}"
        )
        .await
            >= 3
    );
    assert!(
        metric(
            &wh,
            "gpu_admission_connections_closed_total{reason=\"idle_timeout\"}"
        )
        .await
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_idle_connections_make_room_for_a_probe() {
    let scorer = Scorer::builder().start().await.unwrap();
    let wh = webhook(
        &scorer,
        &[
            "--max-connections",
            "8",
            "--header-read-timeout-ms",
            "60000",
        ],
    )
    .await;
    let connector = tls_connector(wh.ca_path(), &["h2", "http/1.1"]);
    let mut idle = Vec::new();
    for _ in 0..40 {
        if let Ok(c) = tls_connect(wh.addr(), &connector).await {
            idle.push(c);
        }
    }
    for i in 0..5 {
        let pod = gpu_pod(&format!("probe-{i}"));
        let outcome = wh.admit_pod(&pod, NS).await.expect("probe answered");
        assert!(outcome.allowed);
    }
    let shed = metric(
        &wh,
        "gpu_admission_connections_closed_total{reason=\"shed\"}",
    )
    .await;
    assert!(shed >= 32, "only {shed} idle connections shed");
    let open = metric(&wh, "gpu_admission_connections_open").await;
    assert!(open <= 9, "{open} connections open above the cap of 8");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_one_h2_connection_never_makes_the_scorer_unavailable() {
    const BURST: usize = 300;
    let scorer = Scorer::builder().start().await.unwrap();
    let wh = webhook(&scorer, &[]).await;
    let connector = tls_connector(wh.ca_path(), &["h2"]);
    let tls = tls_connect(wh.addr(), &connector).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let uri = format!("https://{}/mutate-pod?timeout=10s", wh.addr());
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..3 {
        let calls = (0..BURST).map(|i| {
            let mut sender = sender.clone();
            let body =
                review::pod_review(&gpu_pod(&format!("p-{round}-{i}")), NS, Operation::Create);
            let uri = uri.clone();
            async move {
                let req = http::Request::post(uri)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                    .unwrap();
                sender.ready().await.unwrap();
                let resp = sender.send_request(req).await.expect("answered");
                assert_eq!(resp.status(), 200);
                let bytes = resp.into_body().collect().await.unwrap().to_bytes();
                let answer: Value = serde_json::from_slice(&bytes).unwrap();
                review::check_response(&body, &answer).expect("a valid answer");
                answer["response"]["warnings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .find_map(|w| {
                        w.strip_prefix("gpu-admission: scorer ")
                            .and_then(|rest| rest.split(" (").next())
                            .map(str::to_string)
                    })
            }
        });
        for reason in futures::future::join_all(calls).await.into_iter().flatten() {
            *reasons.entry(reason).or_default() += 1;
        }
    }
    assert!(
        !reasons.contains_key("unavailable"),
        "pass-throughs by reason: {reasons:?}"
    );
    assert!(
        reasons.keys().all(|r| r == "timed out"),
        "pass-throughs by reason: {reasons:?}"
    );
    assert_eq!(
        metric(
            &wh,
            "gpu_admission_scorer_calls_total{result=\"unavailable\"}"
        )
        .await,
        0
    );
    assert!(
        metric(&wh, "gpu_admission_scorer_calls_total{result=\"ok\"}").await > 0,
        "no call went through at all"
    );
}

/// One HTTP/2 connection to `wh`: its request sender, and its driver, which resolves once the connection has
/// ended.
async fn h2_connection(
    wh: &Webhook,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let connector = tls_connector(wh.ca_path(), &["h2"]);
    let tls = tls_connect(wh.addr(), &connector).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    (sender, tokio::spawn(conn))
}

async fn h2_get(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    wh: &Webhook,
) -> hyper::Result<http::StatusCode> {
    let req = http::Request::get(format!("https://{}/healthz", wh.addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.send_request(req).await.map(|r| r.status())
}

/// An HTTP/2 connection (the apiserver's one) ends gracefully after `--max-connection-requests` requests, each
/// of them answered, and after `--max-connection-age-secs` whatever it serves: the client sees the server
/// end it (GOAWAY, then the close) and serves its next request on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_connection_ends_after_its_requests_or_its_age() {
    let scorer = Scorer::builder().start().await.unwrap();
    let wh = webhook(
        &scorer,
        &[
            "--max-connection-requests",
            "5",
            "--max-connection-age-secs",
            "2",
        ],
    )
    .await;
    let (mut sender, conn) = h2_connection(&wh).await;
    for _ in 0..5 {
        assert_eq!(h2_get(&mut sender, &wh).await.unwrap(), 200);
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the connection did not end cleanly after its 5 requests: {ended:?}"
    );
    assert!(h2_get(&mut sender, &wh).await.is_err());
    // The next request goes over a new connection, which ends once old enough (far less than 10 s).
    let (mut sender, conn) = h2_connection(&wh).await;
    assert_eq!(h2_get(&mut sender, &wh).await.unwrap(), 200);
    let ended = tokio::time::timeout(Duration::from_secs(10), conn).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the connection did not end cleanly at its age: {ended:?}"
    );
    let closed =
        |reason: &str| format!("gpu_admission_connections_closed_total{{reason=\"{reason}\"}}");
    // At least ours (the test kit's own probes may have ended so too).
    assert!(metric(&wh, &closed("max_requests")).await >= 1);
    assert!(metric(&wh, &closed("max_age")).await >= 1);
}
