//! Faults injected at the process boundary (the product has no fault switches, by design):
//!
//! - [`FaultProxy`]: a TCP proxy put between the webhook and the scorer; its [`ProxyMode`] can be switched
//!   at any time: forward bytes (optionally delayed: a slow network), hang (accept and never answer), answer
//!   garbage bytes, or reset at once;
//! - [`ScorerDouble`]: a gRPC server speaking the scorer's protocol, serving a given policy and answering
//!   `Score` with a given answer, never, or nonsense (an unknown GPU class, a score out of 0-100 and a
//!   PriorityClass no policy has, NaN), as unary calls and on `ScoreCalls` streams (or, like a scorer release
//!   before them, unary only); it records what it was asked. [`NonsenseScorer`] starts one
//!   answering nonsense with a real policy (taken from a real scorer), so only the `Score` answer is wrong.
//!
//! SIGSTOP/SIGCONT (hung) and kill (down) are on [`crate::ChildProcess`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_proto::scorer::v1::{
    ExplainResponse, ExportStateRequest, GetPolicyRequest, GetPolicyResponse, GpuClass, GpuVendor,
    ImportStateResponse, LearnedState, ObserveRequest, ObserveResponse, PriorityAssignment,
    ScoreAnswer, ScoreCall, ScoreRequest, ScoreResponse, score_answer,
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
        Self::start_delayed(backend, Duration::ZERO).await
    }

    /// Like [`FaultProxy::start`], and what the backend sends back is delayed by `delay` (per chunk and
    /// pipelined: a slow network, whose added latency is `delay` while throughput stays unlimited).
    pub async fn start_delayed(backend: SocketAddr, delay: Duration) -> anyhow::Result<Self> {
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
                conns.spawn(handle(client, backend, m, delay));
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

fn client_nodelay(w: &tokio::net::tcp::OwnedWriteHalf) -> std::io::Result<()> {
    w.as_ref().set_nodelay(true)
}

const GARBAGE: &[u8] =
    b"HTTP/1.1 418 I'm a teapot\r\n\r\n\x00\x00\x12\x04\x00\xde\xad\xbe\xef not h2 at all";

async fn handle(mut client: TcpStream, backend: SocketAddr, mode: Arc<AtomicU8>, delay: Duration) {
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
            let _ = client_nodelay(&cw);
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
            let down = async move {
                let mut buf = vec![0u8; 16384];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let chunk = match ProxyMode::from_u8(mode.load(Ordering::SeqCst)) {
                        ProxyMode::Forward => buf[..n].to_vec(),
                        ProxyMode::Hang => continue,
                        ProxyMode::Garbage => {
                            let _ = tx.send((Instant::now(), GARBAGE.to_vec()));
                            break;
                        }
                        ProxyMode::Reset => break,
                    };
                    if tx.send((Instant::now() + delay, chunk)).is_err() {
                        break;
                    }
                }
            };
            let write_down = async move {
                while let Some((at, chunk)) = rx.recv().await {
                    tokio::time::sleep_until(at.into()).await;
                    if cw.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
                let _ = cw.shutdown().await;
            };
            tokio::join!(up, down, write_down);
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

/// How a [`ScorerDouble`] answers `Score`.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// This answer, with the request's id echoed.
    Answer(Box<ScoreResponse>),
    /// Never answers (the call stays open until the client gives up).
    Hang,
    /// A nonsense answer made from the served policy.
    Nonsense(Nonsense),
}

/// A gRPC `Scorer` at the process boundary: serves a given policy on `GetPolicy` and answers `Score` as
/// its [`Behaviour`] says (switchable at any time); records every `ScoreRequest` and `grpc-timeout` header.
/// Stops when dropped.
pub struct ScorerDouble {
    addr: SocketAddr,
    state: Arc<DoubleState>,
    task: JoinHandle<()>,
}

struct DoubleState {
    behaviour: Mutex<Behaviour>,
    policy: GetPolicyResponse,
    get_policy_delay: std::time::Duration,
    requests: Mutex<Vec<ScoreRequest>>,
    timeouts: Mutex<Vec<String>>,
    calls: AtomicU64,
    /// Whether `ScoreCalls` is served (else UNIMPLEMENTED, as by a scorer release before it).
    streams: bool,
    streamed: AtomicU64,
}

impl DoubleState {
    /// Records `req` and gives the answer the behaviour says; `None` for a call never answered.
    fn answer(&self, req: &ScoreRequest) -> Option<ScoreResponse> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        lock(&self.requests).push(req.clone());
        let behaviour = lock(&self.behaviour).clone();
        let answer = match behaviour {
            Behaviour::Answer(a) => *a,
            Behaviour::Hang => return None,
            Behaviour::Nonsense(kind) => nonsense(kind, &self.policy),
        };
        Some(ScoreResponse {
            request_id: req.request_id.clone(),
            ..answer
        })
    }
}

#[derive(Clone)]
struct DoubleService(Arc<DoubleState>);

#[tonic::async_trait]
impl ScorerService for DoubleService {
    async fn score(
        &self,
        request: tonic::Request<ScoreRequest>,
    ) -> Result<tonic::Response<ScoreResponse>, tonic::Status> {
        let state = &self.0;
        if let Some(t) = request.metadata().get("grpc-timeout") {
            lock(&state.timeouts).push(t.to_str().unwrap_or("").to_string());
        }
        match state.answer(request.get_ref()) {
            Some(answer) => Ok(tonic::Response::new(answer)),
            None => std::future::pending().await,
        }
    }

    /// Each call answered as `score` would, in order; a hung call gets no answer (the next ones still do).
    async fn score_calls(
        &self,
        request: tonic::Request<tonic::Streaming<ScoreCall>>,
    ) -> Result<tonic::Response<tonic::codegen::BoxStream<ScoreAnswer>>, tonic::Status> {
        use tokio_stream::StreamExt as _;
        let state = self.0.clone();
        if !state.streams {
            return Err(tonic::Status::unimplemented(
                "scorer double without ScoreCalls",
            ));
        }
        let answers = request.into_inner().filter_map(move |call| {
            let call = match call {
                Ok(call) => call,
                Err(status) => return Some(Err(status)),
            };
            state.streamed.fetch_add(1, Ordering::Relaxed);
            let answer = state.answer(&call.request.unwrap_or_default())?;
            Some(Ok(ScoreAnswer {
                id: call.id,
                result: Some(score_answer::Result::Response(answer)),
            }))
        });
        Ok(tonic::Response::new(Box::pin(answers)))
    }

    async fn observe(
        &self,
        _request: tonic::Request<ObserveRequest>,
    ) -> Result<tonic::Response<ObserveResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("scorer double"))
    }

    async fn get_policy(
        &self,
        _request: tonic::Request<GetPolicyRequest>,
    ) -> Result<tonic::Response<GetPolicyResponse>, tonic::Status> {
        tokio::time::sleep(self.0.get_policy_delay).await;
        Ok(tonic::Response::new(self.0.policy.clone()))
    }

    async fn explain(
        &self,
        _request: tonic::Request<ScoreRequest>,
    ) -> Result<tonic::Response<ExplainResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("scorer double"))
    }

    // The double learns nothing: it has no state to share.
    async fn export_state(
        &self,
        _request: tonic::Request<ExportStateRequest>,
    ) -> Result<tonic::Response<LearnedState>, tonic::Status> {
        Err(tonic::Status::unimplemented("scorer double"))
    }

    async fn import_state(
        &self,
        _request: tonic::Request<LearnedState>,
    ) -> Result<tonic::Response<ImportStateResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("scorer double"))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn nonsense(kind: Nonsense, policy: &GetPolicyResponse) -> ScoreResponse {
    let snapshot = PolicySnapshot::from_response(policy).unwrap_or_default();
    let real = snapshot
        .catalog()
        .first()
        .map(GpuClass::from)
        .unwrap_or_default();
    let first_bucket = (snapshot.policy.as_ref())
        .and_then(|p| p.priority.buckets.first())
        .map(PriorityAssignment::from);
    let (class, score, pc) = match kind {
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
            first_bucket,
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
        Nonsense::NotANumber => (real, f64::NAN, first_bucket),
    };
    ScoreResponse {
        accepted_classes: vec![class],
        priority_score: score,
        priority_class: pc,
        policy_version: policy.version.clone(),
        ..Default::default()
    }
}

impl ScorerDouble {
    /// Serves on 127.0.0.1:0: `GetPolicy` answers `policy`, `Score` as `behaviour` says.
    pub async fn start(policy: GetPolicyResponse, behaviour: Behaviour) -> anyhow::Result<Self> {
        Self::start_with_policy_delay(policy, behaviour, std::time::Duration::ZERO).await
    }

    /// Like [`ScorerDouble::start`], without `ScoreCalls` (UNIMPLEMENTED): a scorer release before it.
    pub async fn start_unary_only(
        policy: GetPolicyResponse,
        behaviour: Behaviour,
    ) -> anyhow::Result<Self> {
        Self::serve(policy, behaviour, std::time::Duration::ZERO, false).await
    }

    /// Like [`ScorerDouble::start`], with `GetPolicy` answering only after `delay` (a slow policy fetch).
    pub async fn start_with_policy_delay(
        policy: GetPolicyResponse,
        behaviour: Behaviour,
        delay: std::time::Duration,
    ) -> anyhow::Result<Self> {
        Self::serve(policy, behaviour, delay, true).await
    }

    async fn serve(
        policy: GetPolicyResponse,
        behaviour: Behaviour,
        delay: std::time::Duration,
        streams: bool,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(DoubleState {
            behaviour: Mutex::new(behaviour),
            policy,
            get_policy_delay: delay,
            requests: Mutex::default(),
            timeouts: Mutex::default(),
            calls: AtomicU64::new(0),
            streams,
            streamed: AtomicU64::new(0),
        });
        let svc = DoubleService(state.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(ScorerServer::new(svc))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        Ok(Self { addr, state, task })
    }

    /// The server address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for `--scorer`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches how the next `Score` calls are answered.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        *lock(&self.state.behaviour) = behaviour;
    }

    /// Every `ScoreRequest` received so far, in order.
    pub fn requests(&self) -> Vec<ScoreRequest> {
        lock(&self.state.requests).clone()
    }

    /// The `grpc-timeout` header of every `Score` call that had one.
    pub fn timeouts(&self) -> Vec<String> {
        lock(&self.state.timeouts).clone()
    }

    /// `Score` calls received so far (unary or on a stream).
    pub fn score_calls(&self) -> u64 {
        self.state.calls.load(Ordering::Relaxed)
    }

    /// The calls of [`Self::score_calls`] that came on a `ScoreCalls` stream.
    pub fn streamed_calls(&self) -> u64 {
        self.state.streamed.load(Ordering::Relaxed)
    }
}

impl Drop for ScorerDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A [`ScorerDouble`] answering nonsense: the shorthand of the fault suites (derefs to the double).
pub struct NonsenseScorer(ScorerDouble);

impl NonsenseScorer {
    /// Serves on 127.0.0.1:0; `GetPolicy` answers `policy` (take it from a real scorer).
    pub async fn start(kind: Nonsense, policy: GetPolicyResponse) -> anyhow::Result<Self> {
        Self::start_with_policy_delay(kind, policy, std::time::Duration::ZERO).await
    }

    /// Like [`NonsenseScorer::start`], with `GetPolicy` answering only after `delay`.
    pub async fn start_with_policy_delay(
        kind: Nonsense,
        policy: GetPolicyResponse,
        delay: std::time::Duration,
    ) -> anyhow::Result<Self> {
        ScorerDouble::start_with_policy_delay(policy, Behaviour::Nonsense(kind), delay)
            .await
            .map(Self)
    }
}

impl std::ops::Deref for NonsenseScorer {
    type Target = ScorerDouble;
    fn deref(&self) -> &ScorerDouble {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(proxy: &FaultProxy) -> (Vec<u8>, Duration) {
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        let t0 = Instant::now();
        c.write_all(b"hello").await.unwrap();
        let mut buf = vec![0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf))
            .await
            .map_or(0, |r| r.unwrap_or(0));
        buf.truncate(n);
        (buf, t0.elapsed())
    }

    #[tokio::test]
    async fn forwards_delays_and_corrupts() {
        let backend = echo_server().await;
        let plain = FaultProxy::start(backend).await.unwrap();
        assert_eq!(round_trip(&plain).await.0, b"hello");
        plain.set_mode(ProxyMode::Garbage);
        assert_eq!(round_trip(&plain).await.0, GARBAGE);
        plain.set_mode(ProxyMode::Reset);
        assert!(round_trip(&plain).await.0.is_empty());

        let slow = FaultProxy::start_delayed(backend, Duration::from_millis(80))
            .await
            .unwrap();
        let (bytes, took) = round_trip(&slow).await;
        assert_eq!(bytes, b"hello");
        assert!(took >= Duration::from_millis(80), "{took:?}");
        assert_eq!(slow.connections(), 1);
    }
}
