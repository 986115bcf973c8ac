//! The gRPC server: the Scorer service, `grpc.health.v1` (SERVING only while a valid policy is loaded),
//! server reflection v1 and v1alpha, the policy watcher and the learned-state snapshots. Drains
//! gracefully on shutdown and writes a last snapshot.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpu_admission_proto::scorer::v1::scorer_server::ScorerServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::metrics::Metrics;
use crate::model::Learned;
use crate::policy::watch::{self as policy_watch, FileWatcher, PolicyStore, ReloadOutcome};
use crate::service::Core;
use crate::service::grpc::ScorerService;
use crate::{policy, state};

/// The Scorer service's full name, as health checks and reflection know it.
pub const SERVICE_NAME: &str = <ScorerServer<ScorerService> as NamedService>::NAME;

#[derive(Debug, Clone)]
pub struct Config {
    /// `None` = the embedded default policy.
    pub policy_path: Option<PathBuf>,
    /// `None` = learned state is not persisted.
    pub state_path: Option<PathBuf>,
    pub snapshot_interval: Duration,
    pub policy_poll_interval: Duration,
    /// Length of the learned-state epochs keyed decisions read (0 = the live state); see [`crate::decisions`].
    pub decision_epoch: Duration,
    pub http2: Http2Limits,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            policy_path: None,
            state_path: None,
            snapshot_interval: Duration::from_secs(60),
            policy_poll_interval: Duration::from_secs(1),
            decision_epoch: crate::decisions::DEFAULT_EPOCH,
            http2: Http2Limits::default(),
        }
    }
}

/// The HTTP/2 limits of the gRPC server, set deliberately rather than left to hyper's and h2's defaults.
///
/// A frontend that gives up on calls at its deadline cancels them with RST_STREAM, many at once under a
/// burst. h2 counts the resets of streams not yet accepted by the server and, past its default of 20, answers
/// `GOAWAY ENHANCE_YOUR_CALM "too_many_resets"` (its defence against the "rapid reset" attack), which fails
/// every call on the connection. The pending-accept reset limit is therefore as high as the streams a
/// connection may have open, so that cancelling every stream in flight never looks like an attack, while a
/// client that opens and resets without end is still stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS per connection (clients queue beyond it).
    pub max_concurrent_streams: u32,
    /// Streams reset by the client before the server accepted them, per connection, before GOAWAY.
    pub max_pending_accept_reset_streams: usize,
    /// Streams the server itself reset for protocol errors, per connection, before GOAWAY.
    pub max_local_error_reset_streams: usize,
}

impl Default for Http2Limits {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 1024,
            max_pending_accept_reset_streams: 1024,
            max_local_error_reset_streams: 1024,
        }
    }
}

impl Http2Limits {
    /// Each setting with its value, as the metrics label them.
    pub fn settings(&self) -> [(&'static str, i64); 3] {
        [
            (
                "max_concurrent_streams",
                i64::from(self.max_concurrent_streams),
            ),
            (
                "max_pending_accept_reset_streams",
                self.max_pending_accept_reset_streams as i64,
            ),
            (
                "max_local_error_reset_streams",
                self.max_local_error_reset_streams as i64,
            ),
        ]
    }
}

impl std::fmt::Display for Http2Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max_concurrent_streams={} max_pending_accept_reset_streams={} max_local_error_reset_streams={}",
            self.max_concurrent_streams,
            self.max_pending_accept_reset_streams,
            self.max_local_error_reset_streams
        )
    }
}

/// A started server.
#[derive(Debug)]
pub struct Running {
    /// The bound gRPC address.
    pub addr: SocketAddr,
    pub core: Arc<Core>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Stops accepting, drains requests in flight, writes a last snapshot.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.shutdown.send(true);
        self.task.await.context("server task")?
    }

    /// Waits until the server stops (it only stops after [`Running::shutdown`] or on a fatal error).
    pub async fn wait_for(
        self,
        signal: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        signal.await;
        self.shutdown().await
    }
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health.set_service_status(SERVICE_NAME, status).await;
}

/// The initial policy: the embedded default, or the file (an invalid file leaves the scorer NOT_SERVING
/// and waiting for a valid one rather than exiting, as a ConfigMap may be fixed in place).
fn initial_policy(
    config: &Config,
    store: &PolicyStore,
    metrics: &Metrics,
) -> anyhow::Result<Option<FileWatcher>> {
    let Some(path) = &config.policy_path else {
        let p = policy::embedded_default().context("the embedded default policy is invalid")?;
        tracing::info!(version = %p.version, "serving the embedded default policy");
        store.replace(Arc::new(p));
        return Ok(None);
    };
    let mut watcher = FileWatcher::new(path);
    report_reload(&watcher.check(store), metrics);
    Ok(Some(watcher))
}

fn report_reload(outcome: &ReloadOutcome, metrics: &Metrics) {
    match outcome {
        ReloadOutcome::Unchanged => {}
        ReloadOutcome::Loaded(p) => {
            metrics.policy_reload("ok");
            tracing::info!(version = %p.version, file = %p.source, "policy loaded");
        }
        ReloadOutcome::Rejected(e) => {
            metrics.policy_reload("rejected");
            tracing::error!(error = %e, "policy file refused; the previous policy (if any) stays in force");
        }
    }
}

/// Starts serving on `listener` (already bound, so the caller knows the real address).
pub async fn start(
    config: Config,
    listener: TcpListener,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Running> {
    let addr = listener.local_addr()?;
    let store = Arc::new(PolicyStore::new(None));
    let watcher = initial_policy(&config, &store, &metrics)?;

    let mut learned = config
        .state_path
        .as_deref()
        .and_then(state::load_or_report)
        .unwrap_or_default();
    if let Some(p) = store.current() {
        learned
            .exploration
            .normalise(p.learning.exploration_window as usize);
    }
    let core = Arc::new(
        Core::new(store.clone(), learned, metrics.clone())
            .with_decision_epoch(config.decision_epoch),
    );

    let (health, health_service) = tonic_health::server::health_reporter();
    let serving = if store.current().is_some() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    set_health(&health, serving).await;

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(gpu_admission_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut background = Vec::new();

    if let Some(watcher) = watcher {
        background.extend(watch_policy(
            watcher,
            &store,
            config.policy_poll_interval,
            &shutdown_rx,
            &health,
            &metrics,
            &core,
        ));
    }
    if let Some(path) = config.state_path.clone() {
        background.push(keep_snapshots(
            path,
            config.snapshot_interval,
            shutdown_rx.clone(),
            core.clone(),
            metrics.clone(),
        ));
    }

    // Our own listener (for the real bound address) means tonic does not set TCP_NODELAY: without it,
    // Nagle's algorithm and delayed ACKs add ~40 ms to a response.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn
            && let Err(e) = stream.set_nodelay(true)
        {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        conn
    });
    let mut stop = shutdown_rx.clone();
    let health_on_stop = health.clone();
    let h2 = config.http2;
    metrics.record_http2_limits(&h2.settings());
    tracing::info!("HTTP/2 limits: {h2}");
    let server = tonic::transport::Server::builder()
        .max_concurrent_streams(h2.max_concurrent_streams)
        .http2_max_pending_accept_reset_streams(Some(h2.max_pending_accept_reset_streams))
        .http2_max_local_error_reset_streams(Some(h2.max_local_error_reset_streams))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ScorerServer::new(ScorerService::new(
            core.clone(),
            shutdown_rx.clone(),
        )))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.changed().await;
            tracing::info!("shutting down: draining requests in flight");
            set_health(&health_on_stop, ServingStatus::NotServing).await;
        });
    tracing::info!("listening on {addr}");

    let (final_core, state_path) = (core.clone(), config.state_path.clone());
    let task = tokio::spawn(async move {
        let served = server.await;
        for task in background {
            // Background tasks stop on the same signal; a failed one must not block the exit.
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        if let Some(path) = state_path {
            save(&path, &final_core.snapshot()).await;
        }
        tracing::info!("scorer stopped");
        served.context("gRPC server")
    });
    Ok(Running {
        addr,
        core,
        shutdown: shutdown_tx,
        task,
    })
}

/// Policy hot reload: the file watcher, and what a reload changes (metrics, exploration window, health).
fn watch_policy(
    watcher: FileWatcher,
    store: &Arc<PolicyStore>,
    poll_interval: Duration,
    shutdown: &watch::Receiver<bool>,
    health: &HealthReporter,
    metrics: &Arc<Metrics>,
    core: &Arc<Core>,
) -> [JoinHandle<()>; 2] {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(policy_watch::run(
        watcher,
        store.clone(),
        poll_interval,
        tx,
        shutdown.clone(),
    ));
    let (health, metrics, core) = (health.clone(), metrics.clone(), core.clone());
    let reporting = tokio::spawn(async move {
        while let Some(outcome) = rx.recv().await {
            report_reload(&outcome, &metrics);
            if let ReloadOutcome::Loaded(p) = &outcome {
                core.learned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .exploration
                    .normalise(p.learning.exploration_window as usize);
                set_health(&health, ServingStatus::Serving).await;
            }
        }
    });
    [watching, reporting]
}

/// Snapshots of the learned state every `interval`, and their age as a metric, until shutdown.
fn keep_snapshots(
    path: PathBuf,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
    core: Arc<Core>,
    metrics: Arc<Metrics>,
) -> JoinHandle<()> {
    let started = Instant::now();
    let interval = interval.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut last_saved: Option<Instant> = None;
        let mut tick = tokio::time::interval(Duration::from_secs(1).min(interval));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if last_saved.is_none_or(|t| t.elapsed() >= interval)
                && save(&path, &core.snapshot()).await
            {
                last_saved = Some(Instant::now());
            }
            metrics
                .snapshot_age
                .set(last_saved.unwrap_or(started).elapsed().as_secs_f64());
        }
    })
}

/// Writes a snapshot off the async threads; reports failures, never panics.
async fn save(path: &std::path::Path, learned: &Learned) -> bool {
    let (path, learned) = (path.to_path_buf(), learned.clone());
    match tokio::task::spawn_blocking(move || state::save(&path, &learned)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "learned state snapshot failed");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "learned state snapshot task failed");
            false
        }
    }
}
