//! What the frontend's process tests share, on top of the project's test kit (`gpu_admission_testkit`):
//! the real `webhook-frontend` binary as a process, a scorer double at the process boundary with a small
//! fixed policy, and HTTPS verified against the generated CA.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpu_admission_proto::scorer::v1::*;
use gpu_admission_testkit::ChildProcess;
use gpu_admission_testkit::faults::{Behaviour, FaultProxy, Nonsense, ProxyMode};
use gpu_admission_testkit::https::{Connection, HttpsClient};
use gpu_admission_testkit::review::{self, Operation};
use serde_json::{Value, json};

pub use gpu_admission_testkit::faults::ScorerDouble;

pub const CLASS_KEY: &str = "gpu.nvidia.com/class";

/// How the scorer double answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A100-80GB, score 75, gpu-high at 7000, avoid serve-llm.
    Good,
    /// Never answers Score.
    Hang,
    /// A priority score out of 0..=100.
    OutOfRange,
    /// A class that is not in the catalog.
    UnknownClass,
}

impl Mode {
    pub fn behaviour(self) -> Behaviour {
        match self {
            Mode::Good => Behaviour::Answer(Box::new(good_answer())),
            Mode::Hang => Behaviour::Hang,
            Mode::OutOfRange => Behaviour::Nonsense(Nonsense::ScoreOutOfRange),
            Mode::UnknownClass => Behaviour::Nonsense(Nonsense::UnknownClass),
        }
    }
}

pub fn gpu_class(name: &str) -> GpuClass {
    GpuClass {
        name: name.into(),
        vendor: GpuVendor::Nvidia as i32,
        memory_gib: 80.0,
        node_label_key: CLASS_KEY.into(),
        node_label_value: name.into(),
        relative_throughput: 1.0,
        price_per_hour: 3.0,
        taint_key: "nvidia.com/gpu".into(),
    }
}

fn assignment(name: &str, value: i32) -> PriorityAssignment {
    PriorityAssignment {
        name: name.into(),
        value,
        preemption_policy: "PreemptLowerPriority".into(),
    }
}

fn good_answer() -> ScoreResponse {
    ScoreResponse {
        accepted_classes: vec![gpu_class("A100-80GB")],
        priority_score: 75.0,
        priority_class: Some(assignment("gpu-high", 7000)),
        avoid_job_types: vec!["serve-llm".into()],
        policy_version: "test-1".into(),
        ..Default::default()
    }
}

/// The tests' policy file: two classes; cluster-less PriorityClasses come from its buckets (gpu-high at 7500),
/// not from the answer (7000). The frontend reads it as its `--policy-file`; the double serves it as `GetPolicy`.
pub const POLICY_YAML: &str = r#"
version: test-1
defaultTier: gold
catalog:
  - { name: A100-80GB, vendor: nvidia, memoryGiB: 80, relativeThroughput: 1.0, pricePerHour: 3.0, taintKey: nvidia.com/gpu }
  - { name: H100-80GB, vendor: nvidia, memoryGiB: 80, relativeThroughput: 1.0, pricePerHour: 3.0, taintKey: nvidia.com/gpu }
tiers:
  - { name: gold, allowedClasses: [A100-80GB, H100-80GB], objective: fastest, priorityWeight: 1.0 }
workloadClasses:
  training: { priorityWeight: 0.7, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }
  inference: { priorityWeight: 1.0, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }
  batch: { priorityWeight: 0.4, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }
  interactive: { priorityWeight: 0.8, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }
  unknown: { priorityWeight: 0.5, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }
priority:
  tierPoints: 50
  workloadPoints: 30
  sizePoints: 20
  sizeReference: { gpuCount: 8, memoryGiB: 80, modelSizeBillionParams: 70 }
  buckets:
    - { minScore: 70, name: gpu-high, value: 7500, preemptionPolicy: PreemptLowerPriority }
    - { minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: PreemptLowerPriority }
"#;

/// [`POLICY_YAML`] as `GetPolicy` answers it.
pub fn policy() -> GetPolicyResponse {
    let p = gpu_admission_policy::parse(POLICY_YAML, "test-policy.yaml")
        .expect("the test policy is valid");
    gpu_admission_policy::wire::get_policy_response(&p)
}

/// Starts the double on an ephemeral port; returns it and its `http://` address.
pub async fn start_scorer(mode: Mode) -> (ScorerDouble, String) {
    let double = ScorerDouble::start(policy(), mode.behaviour())
        .await
        .expect("the scorer double starts");
    let url = double.url();
    (double, url)
}

/// A TCP server answering every connection with junk bytes (not HTTP/2, not gRPC). Keep it alive.
pub async fn start_junk_server() -> FaultProxy {
    let unused: SocketAddr = ([127, 0, 0, 1], 9).into();
    let proxy = FaultProxy::start(unused).await.expect("the proxy starts");
    proxy.set_mode(ProxyMode::Garbage);
    proxy
}

/// The webhook binary as a child process (killed on drop), its log in a temp dir.
pub struct Webhook {
    pub process: ChildProcess,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub ca: PathBuf,
    _logs: tempfile::TempDir,
}

/// Starts `webhook-frontend` with `args` (plus `--listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`) and waits
/// for its `listening on` lines. `ca` is the CA bundle clients trust.
pub async fn start_webhook(args: &[&str], ca: &Path) -> Webhook {
    let logs = tempfile::tempdir().unwrap();
    let mut all: Vec<String> = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    // The tests' scorer budget (the product's 200 ms assumes a release build on a quiet machine), unless the
    // test sets its own.
    if !args.contains(&"--deadline-ms") {
        all.extend([
            "--deadline-ms".to_string(),
            gpu_admission_testkit::services::TEST_DEADLINE_MS.to_string(),
        ]);
    }
    all.extend(args.iter().map(|a| a.to_string()));
    // The frontend reads the same policy the double serves, unless the test gives its own.
    if !args.contains(&"--policy-file") {
        let file = logs.path().join("policy.yaml");
        std::fs::write(&file, POLICY_YAML).unwrap();
        all.extend(["--policy-file".to_string(), file.display().to_string()]);
    }
    let envs = [("RUST_LOG".to_string(), "info".to_string())];
    let mut process = ChildProcess::spawn(
        "webhook-frontend",
        Path::new(env!("CARGO_BIN_EXE_webhook-frontend")),
        &all,
        &envs,
        logs.path(),
    )
    .expect("spawn webhook-frontend");
    let lines = process
        .wait_listening(2, gpu_admission_testkit::START_TIMEOUT)
        .await
        .expect("webhook-frontend listens");
    let is_admin = |l: &str| l.contains("admin") || l.contains("metrics");
    let addr = lines.iter().find(|(_, l)| !is_admin(l)).expect("main").0;
    let admin = lines.iter().find(|(_, l)| is_admin(l)).map(|(a, _)| *a);
    Webhook {
        process,
        addr,
        admin,
        ca: ca.to_path_buf(),
        _logs: logs,
    }
}

/// An HTTPS connection to `addr` verified as `localhost` against `ca`, offering HTTP/2 and HTTP/1.1 (or
/// HTTP/1.1 only).
pub async fn connect(addr: SocketAddr, ca: &Path, force_http1: bool) -> Connection {
    let client = HttpsClient::new(addr, ca)
        .unwrap()
        .server_name("localhost")
        .unwrap()
        .alpn(if force_http1 {
            &["http/1.1"]
        } else {
            &["h2", "http/1.1"]
        });
    client.connect().await.expect("TLS connection")
}

/// One request on `conn`; the status and the body.
pub async fn request(
    conn: &mut Connection,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    try_request(conn, method, path, body).await.unwrap()
}

/// Like [`request`], but a connection the server closed is an `Err`.
pub async fn try_request(
    conn: &mut Connection,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let r = conn
        .send(method.parse()?, path, Some("application/json"), body.into())
        .await?;
    Ok((r.status.as_u16(), r.body.to_vec()))
}

impl Webhook {
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        request(
            &mut connect(self.addr, &self.ca, false).await,
            "POST",
            path,
            body,
        )
        .await
    }

    pub async fn get(&self, path: &str) -> (u16, Vec<u8>) {
        request(
            &mut connect(self.addr, &self.ca, false).await,
            "GET",
            path,
            Vec::new(),
        )
        .await
    }

    /// POSTs a review and returns the answer, checked by the apiserver's rules (HTTP 200, uid echoed...).
    pub async fn review(&self, review: &Value) -> Value {
        let (status, body) = self
            .post(
                "/mutate-pod?timeout=10s",
                serde_json::to_vec(review).unwrap(),
            )
            .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        review::check_response(review, &answer).unwrap_or_else(|e| panic!("{e:#}"));
        answer
    }

    /// Waits (up to 30 s) until a log line contains `needle`; panics with the log otherwise.
    pub async fn wait_for_log(&mut self, needle: &str) {
        self.process
            .wait_for_log(needle, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    pub fn stderr_text(&self) -> String {
        self.process.log()
    }
}

pub fn gpu_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": {"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "40"}},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
        }
    })
}

/// A CREATE review of `object` in `namespace` with this uid and envelope version.
pub fn review_for(api_version: &str, uid: &str, namespace: &str, object: Value) -> Value {
    review::with_uid_and_version(
        review::review_of(&object, namespace, Operation::Create),
        uid,
        api_version,
    )
}

/// Applies the answer's JSON Patch to `object`; `None` when the answer has no patch.
pub fn apply_patch(answer: &Value, object: &Value) -> Option<Value> {
    let sent =
        json!({"apiVersion": answer["apiVersion"], "request": {"uid": answer["response"]["uid"]}});
    let outcome = review::check_response(&sent, answer).unwrap_or_else(|e| panic!("{e:#}"));
    outcome.patch.as_ref()?;
    Some(outcome.apply(object).unwrap_or_else(|e| panic!("{e:#}")))
}
