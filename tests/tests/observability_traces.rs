//! One admission = one trace across the two real processes.
//!
//! An in-test OTLP/gRPC trace receiver (the collector `TraceService`, served by tonic on 127.0.0.1:0) stands
//! in for Jaeger. The real `scorer` and `webhook-frontend` export to it (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_TRACES_SAMPLER=always_on`); the test acts as the kube-apiserver over HTTPS (verified against the
//! webhook's `ca.crt`) and asserts on the received spans: names, parent links across the gRPC hop, and the
//! attributes of the telemetry contract (BRIEF.md, "Spans").

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use gpu_admission_telemetry::testing::{ReceivedSpan, TraceReceiver, summary};
use gpu_admission_tests::review::{check_response, pod_review};
use gpu_admission_tests::{AdmissionOutcome, Operation, Scorer, Webhook};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::{Value, json};

const SCORER_SERVICE: &str = "obs-test-scorer";
const WEBHOOK_SERVICE: &str = "obs-test-webhook";
/// How long exported spans may take to arrive (the batch processor is set to flush every 100 ms).
const SPAN_WAIT: Duration = Duration::from_secs(20);
/// OTLP `SpanKind::Server`.
const KIND_SERVER: i32 = 2;

/// OTel environment for a product process exporting to `receiver`.
fn otel_env(receiver: &TraceReceiver, service: &str) -> Vec<(String, String)> {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_TRACES_SAMPLER", "always_on".to_string()),
        ("OTEL_SERVICE_NAME", service.to_string()),
        // Flush every 100 ms instead of 5 s, so the test does not wait.
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
        ("RUST_LOG", "info".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

async fn start_scorer(receiver: &TraceReceiver) -> anyhow::Result<Scorer> {
    let mut builder = Scorer::builder().name("scorer-traced");
    for (k, v) in otel_env(receiver, SCORER_SERVICE) {
        builder = builder.env(k, v);
    }
    builder.start().await
}

async fn start_webhook(receiver: &TraceReceiver, scorer_url: &str) -> anyhow::Result<Webhook> {
    let mut builder = Webhook::builder(scorer_url)
        .no_kube()
        .namespace_tier("ml", "gold")
        .name("webhook-traced");
    for (k, v) in otel_env(receiver, WEBHOOK_SERVICE) {
        builder = builder.env(k, v);
    }
    builder.start().await
}

/// A gold-tier training Pod asking for one NVIDIA GPU and 70 GiB: the scorer picks a class for it.
fn gpu_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {
                "gpu-admission.io/job-type": "train-llama",
                "gpu-admission.io/gpu-memory-gib": "70"
            }
        },
        "spec": {
            "containers": [{
                "name": "trainer",
                "image": "registry.example/trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}
            }]
        }
    })
}

/// The value of annotation `key` after applying the outcome's patch to `pod`.
fn patched_annotation(
    outcome: &AdmissionOutcome,
    pod: &Value,
    key: &str,
) -> anyhow::Result<String> {
    let patched = outcome.apply(pod)?;
    patched
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("patched pod has no annotation {key}: {patched}"))
}

fn find<'a>(spans: &'a [ReceivedSpan], trace_id: &str, name: &str) -> Option<&'a ReceivedSpan> {
    spans
        .iter()
        .find(|s| s.trace_id == trace_id && s.name == name)
}

/// The webhook's `admission` span for request `uid`.
fn admission_span<'a>(spans: &'a [ReceivedSpan], uid: &str) -> Option<&'a ReceivedSpan> {
    spans
        .iter()
        .find(|s| s.name == "admission" && s.attr_text("admission.uid").as_deref() == Some(uid))
}

/// True once the admission span for `uid` and the named spans of its trace have all arrived.
fn trace_complete(spans: &[ReceivedSpan], uid: &str, names: &[&str]) -> bool {
    admission_span(spans, uid)
        .is_some_and(|a| names.iter().all(|n| find(spans, &a.trace_id, n).is_some()))
}

/// Asserts one span attribute as text, with every span in the failure message.
fn assert_attr(span: &ReceivedSpan, key: &str, expected: &str, all: &[ReceivedSpan]) {
    assert_eq!(
        span.attr_text(key).as_deref(),
        Some(expected),
        "span {} attribute {key}; spans:\n{}",
        span.name,
        summary(all)
    );
}

/// Asserts `priority.score` equals the score annotation, which carries it rounded to two decimals.
fn assert_score(span: &ReceivedSpan, annotation: &str, all: &[ReceivedSpan]) {
    let expected: f64 = annotation
        .parse()
        .expect("numeric priority-score annotation");
    let got = span
        .attr_text("priority.score")
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        got.is_some_and(|g| (g - expected).abs() <= 0.005 + 1e-9),
        "span {} priority.score {got:?} vs annotation {annotation}; spans:\n{}",
        span.name,
        summary(all)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_admission_is_one_trace_across_webhook_and_scorer() -> anyhow::Result<()> {
    let receiver = TraceReceiver::start().await?;
    let scorer = start_scorer(&receiver).await?;
    let webhook = start_webhook(&receiver, &scorer.url()).await?;

    let pod = gpu_pod("train-llama-0");
    let review = pod_review(&pod, "ml", Operation::Create);
    let outcome = webhook.review(&review).await?;
    assert!(
        outcome.allowed && outcome.patch.is_some(),
        "expected a mutation: {:?}",
        outcome.raw
    );
    let uid = outcome.uid.clone();
    let class = patched_annotation(&outcome, &pod, "gpu-admission.io/gpu-class")?;
    let score = patched_annotation(&outcome, &pod, "gpu-admission.io/priority-score")?;

    let names = ["decode", "scorer.score", "build_patch", "Score"];
    let spans = receiver
        .wait_for(SPAN_WAIT, |spans| trace_complete(spans, &uid, &names))
        .await
        .with_context(|| {
            format!(
                "{}\n{}",
                webhook.process.log_tail(20),
                scorer.process.log_tail(20)
            )
        })?;

    let admission = admission_span(&spans, &uid).expect("checked by wait_for");
    let trace = admission.trace_id.as_str();
    let in_trace: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == trace)
        .cloned()
        .collect();

    // The webhook's server span: a root (no incoming traceparent), kind SERVER, the contract's attributes.
    assert_eq!(admission.service_name, WEBHOOK_SERVICE);
    assert!(
        admission.parent_span_id.is_empty(),
        "admission should be a root:\n{}",
        summary(&in_trace)
    );
    assert_eq!(
        admission.kind,
        KIND_SERVER,
        "admission span kind:\n{}",
        summary(&in_trace)
    );
    assert_attr(admission, "k8s.namespace.name", "ml", &in_trace);
    assert_attr(admission, "k8s.pod.name", "train-llama-0", &in_trace);
    assert_attr(admission, "admission.outcome", "mutated", &in_trace);
    assert_attr(admission, "gpu.class", &class, &in_trace);
    assert_score(admission, &score, &in_trace);

    // Its children.
    for name in ["decode", "scorer.score", "build_patch"] {
        let child = find(&in_trace, trace, name).expect("checked by wait_for");
        assert_eq!(child.service_name, WEBHOOK_SERVICE, "{name}");
        assert_eq!(
            child.parent_span_id,
            admission.span_id,
            "{name} must be a child of admission:\n{}",
            summary(&in_trace)
        );
    }

    // The scorer's span: same trace, parent = the webhook's scorer-call span (W3C context in gRPC metadata).
    let call = find(&in_trace, trace, "scorer.score").expect("checked by wait_for");
    let score_span = find(&in_trace, trace, "Score").expect("checked by wait_for");
    assert_eq!(score_span.service_name, SCORER_SERVICE);
    assert_eq!(
        score_span.parent_span_id,
        call.span_id,
        "Score must be a child of the webhook's scorer.score span:\n{}",
        summary(&in_trace)
    );
    assert_attr(score_span, "gpu.class", &class, &in_trace);
    assert_score(score_span, &score, &in_trace);
    assert!(
        matches!(
            score_span.attr_text("explored").as_deref(),
            Some("true" | "false")
        ),
        "Score needs a boolean `explored` attribute:\n{}",
        summary(&in_trace)
    );

    // A Pod without GPUs is skipped: its own trace, outcome `skipped` with a reason, and no scorer call.
    let plain = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let skipped = webhook.admit_pod(&plain, "ml").await?;
    assert!(
        skipped.allowed && skipped.patch.is_none(),
        "{:?}",
        skipped.raw
    );
    let spans = receiver
        .wait_for(SPAN_WAIT, |spans| {
            admission_span(spans, &skipped.uid).is_some()
        })
        .await?;
    let admission = admission_span(&spans, &skipped.uid).expect("checked by wait_for");
    assert_ne!(
        admission.trace_id, trace,
        "each admission gets its own trace"
    );
    assert_attr(admission, "admission.outcome", "skipped", &spans);
    assert_attr(admission, "k8s.pod.name", "web-", &spans);
    assert!(
        admission
            .attr_text("admission.reason")
            .is_some_and(|r| !r.is_empty()),
        "a skipped admission says why:\n{}",
        summary(&spans)
    );
    assert!(
        find(&spans, &admission.trace_id, "Score").is_none(),
        "a skipped Pod must not reach the scorer:\n{}",
        summary(&spans)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incoming_traceparent_is_continued_into_the_scorer() -> anyhow::Result<()> {
    let receiver = TraceReceiver::start().await?;
    let scorer = start_scorer(&receiver).await?;
    let webhook = start_webhook(&receiver, &scorer.url()).await?;

    // What a kube-apiserver with APIServerTracing sends: its own span as the parent.
    let trace_id = format!("{:032x}", rand_u128());
    let parent_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{trace_id}-{parent_span}-01");
    let pod = gpu_pod("train-llama-traced");
    let review = pod_review(&pod, "ml", Operation::Create);
    let outcome = post_review_with_headers(
        webhook.addr(),
        webhook.ca_path(),
        &review,
        &[("traceparent", traceparent.as_str())],
    )
    .await?;
    assert!(
        outcome.allowed && outcome.patch.is_some(),
        "{:?}",
        outcome.raw
    );

    let spans = receiver
        .wait_for(SPAN_WAIT, |spans| {
            find(spans, &trace_id, "admission").is_some()
                && find(spans, &trace_id, "Score").is_some()
        })
        .await
        .with_context(|| {
            format!(
                "{}\n{}",
                webhook.process.log_tail(20),
                scorer.process.log_tail(20)
            )
        })?;
    let admission = find(&spans, &trace_id, "admission").expect("checked by wait_for");
    assert_eq!(
        admission.parent_span_id,
        parent_span,
        "admission must continue the incoming traceparent:\n{}",
        summary(&spans)
    );
    assert_attr(admission, "admission.uid", &outcome.uid, &spans);
    let call = find(&spans, &trace_id, "scorer.score")
        .context("no scorer.score span in the continued trace")?;
    let score_span = find(&spans, &trace_id, "Score").expect("checked by wait_for");
    assert_eq!(
        score_span.parent_span_id,
        call.span_id,
        "{}",
        summary(&spans)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_is_visible_in_the_trace() -> anyhow::Result<()> {
    let receiver = TraceReceiver::start().await?;
    let mut scorer = start_scorer(&receiver).await?;
    let webhook = start_webhook(&receiver, &scorer.url()).await?;
    // The scorer goes down: every call now fails at once (connection refused).
    scorer.process.kill();

    let outcome = webhook
        .admit_pod(&gpu_pod("train-llama-orphan"), "ml")
        .await?;
    assert!(
        outcome.allowed && outcome.patch_string().contains("tier-default"),
        "scorer down: the tier's default placement: {:?}",
        outcome.raw
    );

    let uid = outcome.uid.clone();
    let spans = receiver
        .wait_for(SPAN_WAIT, |spans| {
            trace_complete(spans, &uid, &["scorer.score"])
        })
        .await
        .with_context(|| webhook.process.log_tail(20))?;
    let admission = admission_span(&spans, &uid).expect("checked by wait_for");
    assert_attr(admission, "admission.outcome", "tier_default", &spans);
    assert!(
        admission
            .attr_text("admission.reason")
            .is_some_and(|r| !r.is_empty()),
        "a fallback says why:\n{}",
        summary(&spans)
    );
    assert_eq!(
        admission.attr_text("gpu.class").as_deref(),
        Some("H100-80GB"),
        "the fallback's class is the tier's preferred one:\n{}",
        summary(&spans)
    );
    Ok(())
}

/// 128 random-enough bits for a trace id (never zero), without a dependency.
fn rand_u128() -> u128 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let state = std::collections::hash_map::RandomState::new();
    let mut a = state.build_hasher();
    a.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let mut b = state.build_hasher();
    b.write_u64(a.finish() ^ u64::from(std::process::id()));
    (u128::from(a.finish()) << 64 | u128::from(b.finish())).max(1)
}

/// POSTs an AdmissionReview to `/mutate-pod` over HTTPS (trusting only `ca`) with extra request headers,
/// and checks the answer by the apiserver's rules. The harness client sends no custom headers.
async fn post_review_with_headers(
    addr: SocketAddr,
    ca: &Path,
    review: &Value,
    headers: &[(&str, &str)],
) -> anyhow::Result<AdmissionOutcome> {
    let pem = std::fs::read(ca)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    let mut request = http::Request::post(format!("https://{addr}/mutate-pod?timeout=10s"))
        .header(http::header::HOST, addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(serde_json::to_vec(review)?)))?;
    let response =
        tokio::time::timeout(Duration::from_secs(10), sender.send_request(request)).await??;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    anyhow::ensure!(
        status == http::StatusCode::OK,
        "POST /mutate-pod: {status} {}",
        String::from_utf8_lossy(&body)
    );
    check_response(review, &serde_json::from_slice(&body)?)
}
