//! Traces in Jaeger: the real scorer and webhook-frontend export OTLP/gRPC to a real Jaeger (v2, built from
//! its Go module by `tests/peers/jaeger.sh`, in-memory storage, free loopback ports), Pods are created
//! through a real kube-apiserver (the frontend registered by URL + caBundle), and every assertion reads
//! Jaeger's query API (`/api/traces`), as someone debugging an admission would:
//!
//! - one trace per admission, found by the Pod's name as a tag, holding the frontend's `admission`, `decode`,
//!   `scorer.score`, `build_patch` and the scorer's `Score`, whose parent is the frontend's `scorer.score`
//!   (the W3C context crossed the gRPC hop); the decision's attributes equal the stored Pod's annotations;
//! - the decision's attributes are searchable: `tenant.tier` + `gpu.class` find the gold and the bronze
//!   admissions apart;
//! - a CPU-only Pod is skipped: its own trace, outcome `skipped` with a reason, no `Score`;
//! - a caller's W3C `traceparent` (as a kube-apiserver with APIServerTracing sends it) is continued: the
//!   admission is that span's child, and the scorer's `Score` still the child of `scorer.score`;
//! - the scorer stopped: the admission that fell back is found by `admission.fallback=true` and its reason
//!   (`admission.reason=scorer unavailable`), placed on the tier's default, with no `Score` span.
//!
//! One control plane (etcd + apiserver) and one Jaeger for those. A second test checks the observability
//! overlay's Jaeger with the same binary (its own all-in-one, in a network namespace of its own). Without the
//! means to build either: a SKIP, or a failure when `CI` is set. The in-process OTLP receiver of the telemetry
//! crate is no longer used here: Jaeger answers every question the former receiver-based test asked, the
//! continued `traceparent` included (Jaeger keeps the reference to the absent parent and warns
//! `invalid parent span IDs`); it stays for the telemetry crate's own `init` tests.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

use gpu_admission_core::names::decision::ANN_FALLBACK;
use gpu_admission_tests::cluster::{LocalCluster, eventually};
use gpu_admission_tests::jaeger::{Jaeger, Trace};
use gpu_admission_tests::names::{ANN_GPU_CLASS, ANN_PRIORITY_SCORE};
use gpu_admission_tests::review::{check_response, pod_review};
use gpu_admission_tests::{AdmissionOutcome, Operation, Scorer, Webhook};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const WEBHOOK_SERVICE: &str = "jaeger-test-webhook";
const SCORER_SERVICE: &str = "jaeger-test-scorer";
const GOLD: &str = "tr-gold";
const BRONZE: &str = "tr-bronze";
const MWC: &str = "gpu-admission-jaeger";
/// How long exported spans may take to be found (both services flush every 100 ms, Jaeger's batch 100 ms).
const SPAN_WAIT: Duration = Duration::from_secs(20);

/// OTel environment for a product process exporting to `jaeger` as `service`.
fn otel_env(jaeger: &Jaeger, service: &str) -> [(&'static str, String); 4] {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_grpc_endpoint()),
        ("OTEL_TRACES_SAMPLER", "always_on".into()),
        ("OTEL_SERVICE_NAME", service.into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
}

/// A GPU Pod of `job_type` asking for one NVIDIA GPU and `mem_gib`.
fn gpu_pod(name: &str, job_type: &str, mem_gib: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {
            "gpu-admission.io/job-type": job_type,
            "gpu-admission.io/gpu-memory-gib": mem_gib.to_string()}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    })
}

/// Creates `pod` in `ns` and returns the STORED Pod.
async fn create(client: &kube::Client, ns: &str, pod: &Value) -> anyhow::Result<Value> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod.clone())?,
        )
        .await?;
    Ok(serde_json::to_value(created)?)
}

fn annotation(pod: &Value, key: &str) -> Option<String> {
    pod.pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
        .map(str::to_string)
}

/// The frontend's admission traces of Pod `ns/name`, once they hold `operations` (the two services' spans
/// arrive separately).
async fn traces_of(
    jaeger: &Jaeger,
    ns: &str,
    name: &str,
    operations: &[&str],
) -> anyhow::Result<Vec<Trace>> {
    let tags = [("k8s.namespace.name", ns), ("k8s.pod.name", name)];
    jaeger
        .wait_traces(WEBHOOK_SERVICE, &tags, SPAN_WAIT, |traces| {
            traces.len() == 1 && operations.iter().all(|o| traces[0].span(o).is_some())
        })
        .await
}

/// The one trace of Pod `ns/name`'s admission holding `operations`, or a failure naming what Jaeger has.
async fn one_trace(
    jaeger: &Jaeger,
    ns: &str,
    name: &str,
    operations: &[&str],
) -> anyhow::Result<Trace> {
    let mut traces = traces_of(jaeger, ns, name, operations).await?;
    anyhow::ensure!(
        traces.len() == 1,
        "{ns}/{name}: expected one admission trace, Jaeger has {}:\n{}",
        traces.len(),
        traces
            .iter()
            .map(Trace::summary)
            .collect::<Vec<_>>()
            .join("\n--\n")
    );
    let trace = traces.remove(0);
    for op in operations {
        anyhow::ensure!(
            trace.span(op).is_some(),
            "{ns}/{name}: no single `{op}` span within {SPAN_WAIT:?}:\n{}",
            trace.summary()
        );
    }
    Ok(trace)
}

/// The admission span's tag `key`, with the trace in the failure message.
fn tag(trace: &Trace, key: &str) -> String {
    let span = trace.span("admission").expect("checked by one_trace");
    span.tag(key)
        .unwrap_or_else(|| panic!("admission has no tag {key}:\n{}", trace.summary()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_through_the_apiserver_are_traces_in_jaeger() -> anyhow::Result<()> {
    let t0 = Instant::now();
    let Some(jaeger) = Jaeger::start().await? else {
        return Ok(()); // SKIP printed (not in CI)
    };
    let Some(cluster) = LocalCluster::start().await? else {
        return Ok(());
    };
    println!(
        "jaeger and apiserver ready in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let client = cluster.client();
    let mut scorer = otel_env(&jaeger, SCORER_SERVICE)
        .into_iter()
        .fold(Scorer::builder().name("scorer-traced"), |b, (k, v)| {
            b.env(k, v)
        })
        .start()
        .await?;
    cluster.create_namespace(GOLD, Some("gold")).await?;
    cluster.create_namespace(BRONZE, Some("bronze")).await?;
    cluster.create_priority_classes(scorer.policy()).await?;
    let webhook = otel_env(&jaeger, WEBHOOK_SERVICE)
        .into_iter()
        .fold(
            Webhook::builder(&scorer.url())
                .kubeconfig(cluster.kubeconfig())
                .name("webhook-traced"),
            |b, (k, v)| b.env(k, v),
        )
        .start()
        .await?;
    cluster
        .register_webhook(MWC, &webhook.mutate_url(), &webhook.ca_pem()?)
        .await?;
    // The apiserver picks the registration up asynchronously: warm-up Pods until one is decided.
    let mut warm = 0;
    let registered = eventually(Duration::from_secs(30), |i| {
        warm = i;
        let client = client.clone();
        let pod = gpu_pod(&format!("warm-up-{i}"), "train-bert", 16);
        futures_block(async move { create(&client, GOLD, &pod).await })
            .is_ok_and(|p| annotation(&p, ANN_GPU_CLASS).is_some())
    });
    assert!(
        registered,
        "the apiserver never stored a decided Pod\n{}\n{}",
        webhook.process.log_tail(30),
        cluster.apiserver_log_tail(30)
    );
    println!(
        "webhook mutating after {warm} warm-up Pod(s), {:.1}s",
        t0.elapsed().as_secs_f64()
    );

    // 1. A gold training Pod: one trace across both services, the decision's attributes as tags.
    let gold = create(&client, GOLD, &gpu_pod("train-llama-0", "train-llama", 70)).await?;
    let class = annotation(&gold, ANN_GPU_CLASS).expect("a decided Pod names its class");
    let score = annotation(&gold, ANN_PRIORITY_SCORE).expect("and its score");
    let ops = [
        "admission",
        "decode",
        "scorer.score",
        "build_patch",
        "Score",
    ];
    let trace = one_trace(&jaeger, GOLD, "train-llama-0", &ops).await?;
    let admission = trace.span("admission").expect("checked");
    assert_eq!(
        admission.parent_id(),
        None,
        "admission is the root:\n{}",
        trace.summary()
    );
    assert_eq!(admission.tag("span.kind").as_deref(), Some("server"));
    for op in ["admission", "decode", "scorer.score", "build_patch"] {
        let span = trace.span(op).expect("checked");
        assert_eq!(trace.service_of(span), Some(WEBHOOK_SERVICE), "{op}");
        if op != "admission" {
            assert_eq!(
                span.parent_id(),
                Some(admission.span_id.as_str()),
                "{op} is a child of admission:\n{}",
                trace.summary()
            );
        }
    }
    let call = trace.span("scorer.score").expect("checked");
    let scored = trace.span("Score").expect("checked");
    assert_eq!(trace.service_of(scored), Some(SCORER_SERVICE));
    assert_eq!(scored.trace_id, admission.trace_id);
    assert_eq!(
        trace.parent_of(scored).map(|p| p.span_id.as_str()),
        Some(call.span_id.as_str()),
        "the scorer's Score continues the frontend's scorer.score across the gRPC hop:\n{}",
        trace.summary()
    );
    assert_eq!(scored.tag("gpu.class").as_deref(), Some(class.as_str()));
    for (key, want) in [
        ("tenant.tier", "gold"),
        ("gpu.class", class.as_str()),
        ("admission.outcome", "mutated"),
        ("admission.fallback", "false"),
    ] {
        assert_eq!(tag(&trace, key), want, "{key}:\n{}", trace.summary());
    }
    let traced: f64 = tag(&trace, "priority.score").parse()?;
    assert!(
        (traced - score.parse::<f64>()?).abs() <= 0.005 + 1e-9,
        "priority.score {traced} vs the Pod's {score}"
    );

    // 2. Searchable: tier and class find the gold and the bronze admissions apart.
    let bronze = create(&client, BRONZE, &gpu_pod("infer-0", "inference-llm", 16)).await?;
    let bronze_class = annotation(&bronze, ANN_GPU_CLASS).expect("decided");
    assert_eq!(bronze_class, "L4-24GB", "bronze's only class");
    let bronze_trace = one_trace(&jaeger, BRONZE, "infer-0", &["admission", "Score"]).await?;
    let by_tier = jaeger
        .find_traces(
            WEBHOOK_SERVICE,
            &[("tenant.tier", "bronze"), ("gpu.class", "L4-24GB")],
        )
        .await?;
    let ids: Vec<&str> = by_tier.iter().map(|t| t.trace_id.as_str()).collect();
    assert_eq!(
        ids,
        [bronze_trace.trace_id.as_str()],
        "tier=bronze, class=L4-24GB"
    );
    let by_tier = jaeger
        .find_traces(
            WEBHOOK_SERVICE,
            &[
                ("tenant.tier", "gold"),
                ("gpu.class", class.as_str()),
                ("k8s.pod.name", "train-llama-0"),
            ],
        )
        .await?;
    let ids: Vec<&str> = by_tier.iter().map(|t| t.trace_id.as_str()).collect();
    assert_eq!(ids, [trace.trace_id.as_str()], "tier=gold, class={class}");

    // 3. A CPU-only Pod: skipped, its own trace, no scorer call.
    let plain = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    create(&client, GOLD, &plain).await?;
    let skipped = one_trace(&jaeger, GOLD, "web-0", &["admission"]).await?;
    assert_eq!(tag(&skipped, "admission.outcome"), "skipped");
    assert!(!tag(&skipped, "admission.reason").is_empty());
    assert!(skipped.span("Score").is_none(), "{}", skipped.summary());

    // 4. A caller's W3C traceparent (what a kube-apiserver with APIServerTracing sends; the tests' apiserver
    // does not trace) is continued: posted straight to the frontend, the admission is that span's child.
    let trace_id = format!("{:032x}", rand_u128());
    let parent_span = "00f067aa0ba902b7";
    let pod = gpu_pod("traced-0", "train-llama", 70);
    let review = pod_review(&pod, GOLD, Operation::Create);
    let traceparent = format!("00-{trace_id}-{parent_span}-01");
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
    let deadline = Instant::now() + SPAN_WAIT;
    let continued = loop {
        let trace = jaeger.trace(&trace_id).await?;
        let complete = trace
            .as_ref()
            .is_some_and(|t| t.span("admission").is_some() && t.span("Score").is_some());
        if complete || Instant::now() > deadline {
            break trace.with_context(|| format!("Jaeger has no trace {trace_id}"))?;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let admission = continued
        .span("admission")
        .with_context(|| continued.summary())?;
    assert_eq!(
        admission.parent_id(),
        Some(parent_span),
        "{}",
        continued.summary()
    );
    assert_eq!(admission.tag("admission.uid"), Some(outcome.uid.clone()));
    let call = continued
        .span("scorer.score")
        .with_context(|| continued.summary())?;
    let scored = continued.span("Score").expect("waited for");
    assert_eq!(
        scored.parent_id(),
        Some(call.span_id.as_str()),
        "{}",
        continued.summary()
    );

    // 5. The scorer stopped: the admission falls back to the tier's default, findable by its fallback tag.
    let fallbacks_before = jaeger
        .find_traces(WEBHOOK_SERVICE, &[("admission.fallback", "true")])
        .await?;
    assert!(fallbacks_before.is_empty(), "no fallback yet");
    scorer.process.kill();
    let orphan = create(&client, GOLD, &gpu_pod("orphan-0", "train-llama", 70)).await?;
    assert_eq!(
        annotation(&orphan, ANN_FALLBACK).as_deref(),
        Some("tier-default"),
        "scorer down: the tier's default placement: {orphan}"
    );
    let fallen = one_trace(&jaeger, GOLD, "orphan-0", &["admission", "scorer.score"]).await?;
    assert_eq!(
        tag(&fallen, "admission.outcome"),
        "tier_default",
        "{}",
        fallen.summary()
    );
    assert_eq!(tag(&fallen, "tenant.tier"), "gold");
    assert_eq!(
        Some(tag(&fallen, "gpu.class")),
        annotation(&orphan, ANN_GPU_CLASS)
    );
    assert!(fallen.span("Score").is_none(), "{}", fallen.summary());
    // Found by its fallback tag and reason alone (the only admission that fell back).
    let tags = [
        ("admission.fallback", "true"),
        ("admission.reason", "scorer unavailable"),
    ];
    let found = jaeger.find_traces(WEBHOOK_SERVICE, &tags).await?;
    let ids: Vec<&str> = found.iter().map(|t| t.trace_id.as_str()).collect();
    assert_eq!(
        ids,
        [fallen.trace_id.as_str()],
        "admission.fallback=true, admission.reason=scorer unavailable; the fallback's trace:\n{}",
        fallen.summary()
    );
    println!("done in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// Runs a future to completion from the synchronous `eventually` closure (the test's runtime is
/// multi-threaded, so blocking one worker in place is allowed).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
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

/// The Jaeger release whose image the observability overlay runs: the v2 release of the module
/// `tests/peers/jaeger.sh` builds (github.com/jaegertracing/jaeger v1.76.0 = Jaeger v2.13.0), so that what is
/// checked below is what the overlay deploys.
const OVERLAY_JAEGER_IMAGE: &str = "jaegertracing/jaeger:2.13.0";

/// The overlay's YAML documents of `file`.
fn overlay_docs(file: &str) -> Vec<Value> {
    let path = gpu_admission_tests::workspace_root()
        .join("deploy/kustomize/overlays/observability")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("overlay file");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("overlay YAML"))
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// `curl -s ARGS` inside the network namespace of process `pid` (with `stdin` piped in): its output.
fn curl_in(pid: u32, args: &[&str], stdin: Option<&[u8]>) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "curl",
            "-s",
            "--max-time",
            "5",
        ])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nsenter runs");
    let mut input = child.stdin.take().expect("piped");
    input.write_all(stdin.unwrap_or_default()).expect("stdin");
    drop(input);
    let out = child.wait_with_output().expect("curl ends");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The observability overlay's Jaeger, checked with the binary the trace test runs: the Deployment runs the
/// image's built-in all-in-one configuration (no config file of ours) with `JAEGER_LISTEN_HOST`; that
/// configuration is started as the image starts it (no `--config`, the overlay's environment), alone in a
/// network namespace of its own (its ports are fixed: 4317, 4318, 16686, 13133, …), and every port the
/// overlay names must be served there by what the overlay says: OTLP/gRPC (an `Export` answered with
/// `grpc-status: 0`), OTLP/HTTP (a span posted, then read back from the query API), the query API, and the
/// readiness probe's path. The Service's port that the scorer's and the frontend's
/// `OTEL_EXPORTER_OTLP_ENDPOINT` name must lead to the OTLP/gRPC container port. Needs `unshare`/`nsenter`
/// (root, as CI runs); without them a SKIP, or a failure under CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observability_overlay_jaeger_serves_what_the_overlay_names() -> anyhow::Result<()> {
    let Some(bin) = gpu_admission_tests::jaeger::jaeger_bin()? else {
        return Ok(());
    };
    let isolated = std::process::Command::new("unshare")
        .args(["--net", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !isolated {
        gpu_admission_tests::skip::skip(
            "the observability overlay's Jaeger check",
            "`unshare --net` is not permitted here (needs root)",
        );
        return Ok(());
    }
    let docs = overlay_docs("jaeger.yaml");
    let deployment = of_kind(&docs, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], OVERLAY_JAEGER_IMAGE);
    assert!(
        container.get("args").is_none() && container.get("command").is_none(),
        "the built-in config"
    );
    let port = |name: &str| -> u16 {
        container["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no container port {name}")) as u16
    };
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["value"].as_str().unwrap().into(),
            )
        })
        .collect();

    // The endpoint the two services export to: the Service's port leading to the OTLP/gRPC container port.
    let service = of_kind(&docs, "Service");
    let name = service["metadata"]["name"].as_str().expect("Service name");
    let otlp_port = service["spec"]["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["targetPort"] == "otlp-grpc"))
        .and_then(|p| p["port"].as_u64())
        .expect("a Service port for otlp-grpc");
    for patch in ["scorer-telemetry.yaml", "webhook-telemetry.yaml"] {
        let d = &overlay_docs(patch)[0];
        let endpoint = d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .and_then(|e| {
                e.iter()
                    .find(|v| v["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
            })
            .and_then(|v| v["value"].as_str())
            .unwrap_or_else(|| panic!("{patch}: no OTEL_EXPORTER_OTLP_ENDPOINT"));
        assert_eq!(endpoint, format!("http://{name}:{otlp_port}"), "{patch}");
    }

    // The image's start: the binary without a config, with the overlay's environment, alone on its network.
    let dir = tempfile::tempdir()?;
    let script = format!("ip link set lo up && exec '{}'", bin.display());
    let jaeger = gpu_admission_tests::ChildProcess::spawn(
        "jaeger-all-in-one",
        Path::new("unshare"),
        &["--net".into(), "sh".into(), "-c".into(), script],
        &env,
        dir.path(),
    )?;
    let pid = jaeger.pid();
    let probe = container["readinessProbe"]["httpGet"].clone();
    let health = format!(
        "http://127.0.0.1:{}{}",
        port(probe["port"].as_str().expect("a named probe port")),
        probe["path"].as_str().expect("a probe path")
    );
    let ready = eventually(Duration::from_secs(30), |_| {
        curl_in(
            pid,
            &["-o", "/dev/null", "-w", "%{http_code}", &health],
            None,
        ) == "200"
    });
    assert!(
        ready,
        "readiness probe {health} never 200\n{}",
        jaeger.log_tail(30)
    );

    // In a Pod the ports are reached on the Pod's address, not on loopback: every one bound to all addresses.
    let listening = std::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "ss", "-Hltn"])
        .output()?;
    let listening = String::from_utf8_lossy(&listening.stdout).into_owned();
    for name in ["otlp-grpc", "otlp-http", "ui", "health"] {
        let p = port(name);
        let everywhere = [
            format!("*:{p}"),
            format!("0.0.0.0:{p}"),
            format!("[::]:{p}"),
        ];
        assert!(
            listening
                .split_whitespace()
                .any(|a| everywhere.iter().any(|e| e == a)),
            "{name} ({p}) is not listening on all addresses:\n{listening}"
        );
    }
    let export = format!(
        "http://127.0.0.1:{}/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        port("otlp-grpc")
    );
    let grpc = curl_in(
        pid,
        &[
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            "@-",
            &export,
        ],
        Some(&[0, 0, 0, 0, 0]), // one empty ExportTraceServiceRequest
    );
    assert!(
        grpc.contains("grpc-status: 0"),
        "OTLP/gRPC on otlp-grpc: {grpc}"
    );

    let trace_id = format!("{:032x}", rand_u128());
    let span = json!({"resourceSpans": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "overlay-probe"}}]},
        "scopeSpans": [{"spans": [{"traceId": trace_id, "spanId": "eee19b7ec3c1b174", "name": "probe",
            "kind": 2, "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000"}]}]}]});
    let posted = curl_in(
        pid,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "content-type: application/json",
            "--data-binary",
            "@-",
            &format!("http://127.0.0.1:{}/v1/traces", port("otlp-http")),
        ],
        Some(span.to_string().as_bytes()),
    );
    assert_eq!(posted, "200", "OTLP/HTTP on otlp-http");
    let query = format!("http://127.0.0.1:{}/api/traces/{trace_id}", port("ui"));
    let stored = eventually(Duration::from_secs(10), |_| {
        curl_in(pid, &[&query], None).contains("\"operationName\":\"probe\"")
    });
    assert!(
        stored,
        "the posted span is not served by the query API on ui\n{}",
        jaeger.log_tail(30)
    );
    Ok(())
}
