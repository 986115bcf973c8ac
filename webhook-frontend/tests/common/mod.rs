//! Test harness: the real `webhook-frontend` binary as a process, a tiny in-test gRPC Scorer double (at the
//! process boundary: it can answer well, hang, or answer out of range), and an HTTPS client that verifies
//! the server against the generated CA.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use gpu_admission_proto::scorer::v1::scorer_server::{Scorer, ScorerServer};
use gpu_admission_proto::scorer::v1::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub const CLASS_KEY: &str = "gpu.nvidia.com/class";

/// How the scorer double behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Good,
    /// Never answers Score.
    Hang,
    /// Answers with a priority score of 250 (out of 0..=100).
    OutOfRange,
    /// Answers with a class that is not in the catalog.
    UnknownClass,
}

#[derive(Clone)]
pub struct ScorerDouble {
    pub mode: Arc<Mutex<Mode>>,
    pub requests: Arc<Mutex<Vec<ScoreRequest>>>,
    /// grpc-timeout header values seen on Score calls.
    pub timeouts: Arc<Mutex<Vec<String>>>,
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

#[tonic::async_trait]
impl Scorer for ScorerDouble {
    async fn score(
        &self,
        request: tonic::Request<ScoreRequest>,
    ) -> Result<tonic::Response<ScoreResponse>, tonic::Status> {
        if let Some(t) = request.metadata().get("grpc-timeout") {
            self.timeouts
                .lock()
                .unwrap()
                .push(t.to_str().unwrap_or("").to_string());
        }
        let req = request.into_inner();
        self.requests.lock().unwrap().push(req.clone());
        let mode = *self.mode.lock().unwrap();
        if mode == Mode::Hang {
            std::future::pending::<()>().await;
        }
        let mut resp = ScoreResponse {
            request_id: req.request_id,
            accepted_classes: vec![gpu_class("A100-80GB")],
            priority_score: 75.0,
            priority_class: Some(assignment("gpu-high", 7000)),
            avoid_job_types: vec!["serve-llm".into()],
            policy_version: "test-1".into(),
            ..Default::default()
        };
        match mode {
            Mode::OutOfRange => resp.priority_score = 250.0,
            Mode::UnknownClass => resp.accepted_classes = vec![gpu_class("B999")],
            _ => {}
        }
        Ok(tonic::Response::new(resp))
    }

    async fn observe(
        &self,
        _r: tonic::Request<ObserveRequest>,
    ) -> Result<tonic::Response<ObserveResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in the double"))
    }

    async fn validate_policy(
        &self,
        _r: tonic::Request<gpu_admission_proto::scorer::v1::ValidatePolicyRequest>,
    ) -> Result<
        tonic::Response<gpu_admission_proto::scorer::v1::ValidatePolicyResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("not in the double"))
    }

    async fn get_policy(
        &self,
        _r: tonic::Request<GetPolicyRequest>,
    ) -> Result<tonic::Response<GetPolicyResponse>, tonic::Status> {
        Ok(tonic::Response::new(GetPolicyResponse {
            version: "test-1".into(),
            catalog: vec![gpu_class("A100-80GB"), gpu_class("H100-80GB")],
            priority_buckets: vec![
                PriorityBucket {
                    min_score: 70.0,
                    // Cluster-less PriorityClasses come from these buckets (7500), not the answer (7000).
                    priority_class: Some(assignment("gpu-high", 7500)),
                },
                PriorityBucket {
                    min_score: 0.0,
                    priority_class: Some(assignment("gpu-default", 1000)),
                },
            ],
            ..Default::default()
        }))
    }
}

/// Starts the double on an ephemeral port; returns it and its `http://` address.
pub async fn start_scorer(mode: Mode) -> (ScorerDouble, String) {
    let double = ScorerDouble {
        mode: Arc::new(Mutex::new(mode)),
        requests: Arc::default(),
        timeouts: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = ScorerServer::new(double.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (double, format!("http://{addr}"))
}

/// A TCP server that answers every connection with junk bytes (not HTTP/2, not gRPC).
pub async fn start_junk_server() -> String {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\xff\xfe garbage")
                    .await;
                tokio::time::sleep(Duration::from_secs(5)).await;
            });
        }
    });
    format!("http://{addr}")
}

/// The webhook binary as a child process (killed on drop).
pub struct Webhook {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub ca: PathBuf,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn addr_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '\u{1b}')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Starts `webhook-frontend` with `args` (plus `--listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`) and waits
/// for its `listening on` line. `ca` is the CA bundle clients trust.
pub fn start_webhook(args: &[&str], ca: &Path) -> Webhook {
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhook-frontend"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn webhook-frontend");
    let stderr = child.stderr.take().unwrap();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            sink.lock().unwrap().push(line);
        }
    });
    let (mut addr, mut admin) = (None, None);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (addr.is_none() || admin.is_none()) && std::time::Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                if line.contains("webhook-frontend listening on ") {
                    addr = addr_after(&line, "webhook-frontend listening on ");
                } else if line.contains("admin server (metrics) listening on ") {
                    admin = addr_after(&line, "admin server (metrics) listening on ");
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "webhook-frontend exited early ({status}): {:#?}",
                        lines.lock().unwrap()
                    );
                }
            }
            Err(_) => break,
        }
    }
    let addr =
        addr.unwrap_or_else(|| panic!("no `listening on` line: {:#?}", lines.lock().unwrap()));
    Webhook {
        child,
        addr,
        admin,
        ca: ca.to_path_buf(),
        stderr: lines,
    }
}

pub fn tls_connector(ca: &Path) -> TlsConnector {
    let pem = std::fs::read(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// An open HTTPS connection (HTTP/2 when negotiated, else HTTP/1.1).
pub enum Conn {
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
}

pub struct Connected {
    pub conn: Conn,
    pub alpn: Option<Vec<u8>>,
    pub server_cert: CertificateDer<'static>,
}

/// Opens a TLS connection to `addr`, verifying the server as `localhost` against `ca`.
pub async fn connect(addr: SocketAddr, ca: &Path, force_http1: bool) -> Connected {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut connector = tls_connector(ca);
    if force_http1 {
        let mut config = (*tls_connector(ca).config().clone()).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        connector = TlsConnector::from(Arc::new(config));
    }
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake");
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(|p| p.to_vec());
    let server_cert = session.peer_certificates().unwrap()[0].clone().into_owned();
    let io = hyper_util::rt::TokioIo::new(tls);
    let conn = if alpn.as_deref() == Some(b"h2") {
        let (send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(conn);
        Conn::H2(send)
    } else {
        let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        Conn::H1(send)
    };
    Connected {
        conn,
        alpn,
        server_cert,
    }
}

impl Connected {
    pub async fn request(&mut self, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        self.try_request(method, path, body).await.unwrap()
    }

    /// Like [`Self::request`], but a connection the server closed (e.g. after answering 413 before the
    /// whole body was sent, which HTTP/1.1 allows) is an `Err` instead of a panic.
    pub async fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), hyper::Error> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = match &mut self.conn {
            Conn::H2(s) => s.send_request(req).await?,
            Conn::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes().to_vec();
        Ok((status, body))
    }
}

impl Webhook {
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        connect(self.addr, &self.ca, false)
            .await
            .request("POST", path, body)
            .await
    }

    pub async fn get(&self, path: &str) -> (u16, Vec<u8>) {
        connect(self.addr, &self.ca, false)
            .await
            .request("GET", path, Vec::new())
            .await
    }

    /// POSTs a review and returns the parsed AdmissionReview response (asserting HTTP 200).
    pub async fn review(&self, review: &Value) -> Value {
        let (status, body) = self
            .post(
                "/mutate-pod?timeout=10s",
                serde_json::to_vec(review).unwrap(),
            )
            .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }

    /// Waits (up to 30 s) until a stderr line contains `needle`; panics with the log otherwise.
    pub async fn wait_for_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !self
            .stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no log line with {needle:?}: {}",
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
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

pub fn review_for(api_version: &str, uid: &str, namespace: &str, object: Value) -> Value {
    let kind = object
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("Pod")
        .to_string();
    let (group, version) = match object
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("v1")
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), "v1".to_string()),
    };
    json!({
        "apiVersion": api_version, "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": object, "oldObject": null, "dryRun": false
        }
    })
}

/// Applies the response's base64 JSON Patch to `object`; `None` when the response has no patch.
pub fn apply_patch(response: &Value, object: &Value) -> Option<Value> {
    let r = &response["response"];
    let patch = r.get("patch")?.as_str()?;
    assert_eq!(r["patchType"], "JSONPatch");
    let ops: json_patch::Patch = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap(),
    )
    .unwrap();
    let mut doc = object.clone();
    json_patch::patch(&mut doc, &ops).unwrap();
    Some(doc)
}
