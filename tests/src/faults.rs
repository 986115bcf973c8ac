//! Faults injected at the process boundary (the product has no fault switches, by design):
//!
//! - [`FaultProxy`]: a TCP proxy put between the webhook and the scorer; its [`ProxyMode`] can be switched
//!   at any time: forward bytes, hang (accept and never answer), answer garbage bytes, or reset at once;
//! - [`NonsenseScorer`]: a gRPC server speaking the scorer's protocol correctly but answering nonsense
//!   (`Score` with an unknown GPU class, a score out of 0-100 and a PriorityClass no policy has). Its
//!   `GetPolicy` serves a real policy (taken from a real scorer) so only the `Score` answer is wrong.
//!
//! SIGSTOP/SIGCONT (hung) and kill (down) are on [`crate::ChildProcess`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use gpu_admission_proto::scorer::v1::{
    GetPolicyRequest, GetPolicyResponse, GpuClass, GpuVendor, ObserveRequest, ObserveResponse,
    PriorityAssignment, ScoreRequest, ScoreResponse,
    scorer_server::{Scorer as ScorerService, ScorerServer},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What a [`FaultProxy`] does with new and existing connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ProxyMode {
    /// Forward bytes both ways to the backend.
    Forward = 0,
    /// Read and discard what the client sends; never answer (a hung peer that keeps the socket open).
    Hang = 1,
    /// Answer every read with garbage bytes (not HTTP/2), then close.
    Garbage = 2,
    /// Close the connection at once (a crashed peer).
    Reset = 3,
}

impl ProxyMode {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => ProxyMode::Hang,
            2 => ProxyMode::Garbage,
            3 => ProxyMode::Reset,
            _ => ProxyMode::Forward,
        }
    }
}

/// A loopback TCP proxy with a switchable fault mode. Stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    connections: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1:0 and proxies to `backend` in [`ProxyMode::Forward`].
    pub async fn start(backend: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(AtomicU8::new(ProxyMode::Forward as u8));
        let connections = Arc::new(AtomicU64::new(0));
        let (m, n) = (mode.clone(), connections.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    break;
                };
                n.fetch_add(1, Ordering::Relaxed);
                let m = m.clone();
                conns.spawn(handle(client, backend, m));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Self {
            addr,
            mode,
            connections,
            task,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for `--scorer`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches the mode; applies to new connections and to the next read on existing ones.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        ProxyMode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

const GARBAGE: &[u8] =
    b"HTTP/1.1 418 I'm a teapot\r\n\r\n\x00\x00\x12\x04\x00\xde\xad\xbe\xef not h2 at all";

async fn handle(mut client: TcpStream, backend: SocketAddr, mode: Arc<AtomicU8>) {
    let current = || ProxyMode::from_u8(mode.load(Ordering::SeqCst));
    match current() {
        ProxyMode::Reset => {
            let _ = client.set_zero_linger();
        }
        ProxyMode::Hang => {
            let mut buf = [0u8; 4096];
            while matches!(client.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        ProxyMode::Garbage => {
            let mut buf = [0u8; 4096];
            if matches!(client.read(&mut buf).await, Ok(n) if n > 0) {
                let _ = client.write_all(GARBAGE).await;
            }
        }
        ProxyMode::Forward => {
            let Ok(server) = TcpStream::connect(backend).await else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let m2 = mode.clone();
            let up = async move {
                let mut buf = vec![0u8; 16384];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    match ProxyMode::from_u8(m2.load(Ordering::SeqCst)) {
                        ProxyMode::Forward => {
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        ProxyMode::Hang => continue,
                        ProxyMode::Garbage | ProxyMode::Reset => break,
                    }
                }
                let _ = sw.shutdown().await;
            };
            let down = async move {
                let mut buf = vec![0u8; 16384];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    match ProxyMode::from_u8(mode.load(Ordering::SeqCst)) {
                        ProxyMode::Forward => {
                            if cw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        ProxyMode::Hang => continue,
                        ProxyMode::Garbage => {
                            let _ = cw.write_all(GARBAGE).await;
                            break;
                        }
                        ProxyMode::Reset => break,
                    }
                }
                let _ = cw.shutdown().await;
            };
            tokio::join!(up, down);
        }
    }
}

/// How a [`NonsenseScorer`] answers `Score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nonsense {
    /// A GPU class that is in no catalog, with a made-up node label; otherwise plausible.
    UnknownClass,
    /// A real class of the policy, but priority score 250 and a PriorityClass with a negative value that no
    /// policy defines.
    ScoreOutOfRange,
    /// A NaN priority score.
    NotANumber,
}

/// A gRPC `Scorer` that answers `Score` with nonsense. Stops when dropped.
pub struct NonsenseScorer {
    addr: SocketAddr,
    calls: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

#[derive(Clone)]
struct NonsenseService {
    kind: Nonsense,
    policy: GetPolicyResponse,
    calls: Arc<AtomicU64>,
    get_policy_delay: std::time::Duration,
}

#[tonic::async_trait]
impl ScorerService for NonsenseService {
    async fn score(
        &self,
        request: tonic::Request<ScoreRequest>,
    ) -> Result<tonic::Response<ScoreResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let req = request.into_inner();
        let real = self.policy.catalog.first().cloned().unwrap_or_default();
        let (class, score, pc) = match self.kind {
            Nonsense::UnknownClass => (
                GpuClass {
                    name: "NO-SUCH-GPU-9000".into(),
                    vendor: GpuVendor::Nvidia as i32,
                    memory_gib: 4096.0,
                    node_label_key: "gpu.nvidia.com/class".into(),
                    node_label_value: "NO-SUCH-GPU-9000".into(),
                    relative_throughput: 1.0,
                    price_per_hour: 1.0,
                    taint_key: "nvidia.com/gpu".into(),
                },
                55.0,
                self.policy
                    .priority_buckets
                    .first()
                    .and_then(|b| b.priority_class.clone()),
            ),
            Nonsense::ScoreOutOfRange => (
                real,
                250.0,
                Some(PriorityAssignment {
                    name: "gpu-bogus".into(),
                    value: -7,
                    preemption_policy: "Sometimes".into(),
                }),
            ),
            Nonsense::NotANumber => (
                real,
                f64::NAN,
                self.policy
                    .priority_buckets
                    .first()
                    .and_then(|b| b.priority_class.clone()),
            ),
        };
        Ok(tonic::Response::new(ScoreResponse {
            request_id: req.request_id,
            accepted_classes: vec![class],
            candidates: vec![],
            priority_score: score,
            priority_class: pc,
            avoid_job_types: vec![],
            policy_version: self.policy.version.clone(),
            explored: false,
            infeasible_reason: String::new(),
        }))
    }

    async fn observe(
        &self,
        _request: tonic::Request<ObserveRequest>,
    ) -> Result<tonic::Response<ObserveResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("nonsense scorer"))
    }

    async fn get_policy(
        &self,
        _request: tonic::Request<GetPolicyRequest>,
    ) -> Result<tonic::Response<GetPolicyResponse>, tonic::Status> {
        tokio::time::sleep(self.get_policy_delay).await;
        Ok(tonic::Response::new(self.policy.clone()))
    }

    async fn validate_policy(
        &self,
        _request: tonic::Request<gpu_admission_proto::scorer::v1::ValidatePolicyRequest>,
    ) -> Result<
        tonic::Response<gpu_admission_proto::scorer::v1::ValidatePolicyResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("not in the nonsense scorer"))
    }
}

impl NonsenseScorer {
    /// Serves on 127.0.0.1:0; `GetPolicy` answers `policy` (take it from a real scorer).
    pub async fn start(kind: Nonsense, policy: GetPolicyResponse) -> anyhow::Result<Self> {
        Self::start_with_policy_delay(kind, policy, std::time::Duration::ZERO).await
    }

    /// Like [`NonsenseScorer::start`], with `GetPolicy` answering only after `delay` (a slow policy fetch).
    pub async fn start_with_policy_delay(
        kind: Nonsense,
        policy: GetPolicyResponse,
        delay: std::time::Duration,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let calls = Arc::new(AtomicU64::new(0));
        let svc = NonsenseService {
            kind,
            policy,
            calls: calls.clone(),
            get_policy_delay: delay,
        };
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(ScorerServer::new(svc))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        Ok(Self { addr, calls, task })
    }

    /// The server address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for `--scorer`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `Score` calls answered so far.
    pub fn score_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for NonsenseScorer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
