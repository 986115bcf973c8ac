//! The HTTPS server: axum routes served by hyper-util's auto (HTTP/2 + HTTP/1.1) connection builder over
//! tokio-rustls, every connection watched for its first-request, header and idle timeouts and counted against
//! a cap (see [`crate::connections`]), a 24 MiB body limit (413 beyond; above anything the apiserver sends), backoff on failed accepts and a
//! graceful drain on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::admission::Webhooks;
use crate::body_budget::BODY_LIMIT_BYTES;
use crate::connections::{Limits, Registration, Registry, TrackedIo, TrackedService, Verdict};
use crate::metrics::{ConnectionClose, Metrics};
use crate::readiness::Readiness;

/// Whole-request timeout (body included), beyond the header read timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The connection's client presented a certificate that chains to `--client-ca-file` (rustls verified it
/// during the handshake): put into its requests' extensions by [`serve_connection`], only then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientCertificate;

/// The webhooks' routes, `/healthz` and `/readyz`, under the body limit and the request timeout. With
/// `client_certificate_required` (`--client-ca-file`), the webhook paths answer 401 to a caller without a
/// verified client certificate (counted, logged); the probes' paths stay open.
pub fn router(
    webhooks: Webhooks,
    readiness: Arc<Readiness>,
    client_certificate_required: bool,
) -> Router {
    let metrics = webhooks.metrics();
    let mut routes = webhooks.routes();
    if client_certificate_required {
        routes = routes.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let metrics = metrics.clone();
                async move {
                    let verified = req.extensions().get::<ClientCertificate>().is_some();
                    if verified {
                        return next.run(req).await;
                    }
                    metrics.unauthenticated_requests.inc();
                    tracing::warn!(path = %req.uri().path(), "webhook request without a verified client certificate refused");
                    (
                        StatusCode::UNAUTHORIZED,
                        "gpu-admission: this port answers the kube-apiserver only: present a client certificate signed by the CA of --client-ca-file\n",
                    )
                        .into_response()
                }
            },
        ));
    }
    routes
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz).with_state(readiness))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
}

async fn readyz(State(readiness): State<Arc<Readiness>>) -> (StatusCode, &'static str) {
    if readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// HTTP/2 keep-alive: a PING after this much silence from the client...
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
/// ...that must be acknowledged within this, or the connection is closed (a peer that vanished).
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection closing gracefully (idle, shed) that has not finished after this is dropped.
const GRACEFUL_CLOSE_MAX: Duration = Duration::from_secs(10);
/// After a graceful close, how long what the peer still sends is read and dropped before the socket is
/// closed (Go's HTTP/2 server waits 1 s after its last GOAWAY likewise).
const LINGER: Duration = Duration::from_secs(1);
/// Backoff after a failed accept (EMFILE and the like): never a busy loop, never an exit.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// `EMFILE` / `ENFILE` on Linux: out of file descriptors.
const OUT_OF_FDS: [i32; 2] = [24, 23];

/// Accepts connections until `shutdown` resolves, then stops accepting and waits up to `drain` for the open
/// connections to finish their requests. Every connection is held to `limits` (see [`crate::connections`]).
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: Limits,
    metrics: Arc<Metrics>,
    drain: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own header read timeout would also run while a keep-alive connection waits for its next
    // request, i.e. it would be the idle timeout; the watchdog of each connection does both instead.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Option::<Duration>::None)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(H2_PING_TIMEOUT)
        .max_concurrent_streams(1000);
    let registry = Registry::new(limits, metrics.clone());
    tracing::info!(
        first_request_timeout_ms = limits.first_request.as_millis() as u64,
        idle_timeout_ms = limits.idle.as_millis() as u64,
        max_connections = limits.max_connections,
        max_connection_age_s = limits.max_age.map(|a| a.as_secs()),
        max_connection_requests = limits.max_requests,
        "connection limits of the webhook port"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut last_warning: Option<Instant> = None;
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    a
                }
                Err(err) => {
                    metrics.accept_errors.inc();
                    let out_of_fds = err.raw_os_error().is_some_and(|e| OUT_OF_FDS.contains(&e));
                    // Free a descriptor for the connections waiting in the backlog.
                    let shed = out_of_fds && registry.shed_one();
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(%err, open = registry.open(), shed_idle = shed,
                            retry_in_ms = backoff.as_millis() as u64, "accept failed; backing off");
                        last_warning = Some(Instant::now());
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = &mut shutdown => break,
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(registration) = registry.admit() else {
            tracing::debug!(%peer, open = registry.open(), "connection refused: at the cap and none idle");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve_connection(
            Accepted {
                tcp,
                peer,
                registration,
            },
            acceptor.clone(),
            builder.clone(),
            router.clone(),
            metrics.clone(),
            stop_rx.clone(),
        ));
    }
    drop(listener);
    tracing::info!(
        open = registry.open(),
        "stopped accepting; draining open connections"
    );
    let _ = stop_tx.send(true);
    tokio::select! {
        _ = registry.closed() => tracing::info!("drained"),
        _ = tokio::time::sleep(drain) => tracing::warn!(open = registry.open(), "drain timeout; closing the remaining connections"),
    }
}

struct Accepted {
    tcp: TcpStream,
    peer: SocketAddr,
    registration: Registration,
}

/// One connection: the TLS handshake, then hyper's connection driven next to its watchdog, which applies the
/// verdicts of its tracker (first request, request headers, idle, shed) and the server's shutdown.
async fn serve_connection(
    accepted: Accepted,
    acceptor: TlsAcceptor,
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    metrics: Arc<Metrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Accepted {
        tcp,
        peer,
        registration,
    } = accepted;
    let Ok((tcp, linger)) = with_second_handle(tcp) else {
        return;
    };
    let tracker = registration.tracker.clone();
    let limits = *registration.limits();
    let first_deadline = tracker.first_request_deadline(&limits);
    let tls = tokio::select! {
        handshake = tokio::time::timeout_at(first_deadline.into(), acceptor.accept(tcp)) => match handshake {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => {
                tracing::debug!(%peer, %err, "TLS handshake failed");
                return;
            }
            Err(_) => {
                metrics.record_connection_closed(ConnectionClose::first_request_timeout);
                tracing::debug!(%peer, "TLS handshake not done within the first-request timeout");
                return;
            }
        },
        _ = tracker.notified() => {
            metrics.record_connection_closed(ConnectionClose::shed);
            tracing::debug!(%peer, "shed during its TLS handshake");
            return;
        }
        _ = stop.wait_for(|stop| *stop) => return,
    };
    let verified = tls
        .get_ref()
        .1
        .peer_certificates()
        .is_some_and(|c| !c.is_empty());
    let router = if verified {
        router.layer(axum::Extension(ClientCertificate))
    } else {
        router
    };
    let service = TrackedService::new(TowerToHyperService::new(router), &registration, peer.ip());
    let conn = builder
        .serve_connection(TokioIo::new(TrackedIo::new(tls, tracker.clone())), service)
        .into_owned();
    let mut conn = std::pin::pin!(conn);
    let shutdown = |c: std::pin::Pin<&mut _>| auto::Connection::graceful_shutdown(c);
    let graceful = drive(
        conn.as_mut(),
        shutdown,
        (&tracker, &limits, &metrics),
        peer,
        &mut stop,
    )
    .await;
    drop(registration);
    if graceful {
        linger_close(linger).await;
    }
}

/// Drives hyper's connection next to its watchdog until it ends; whether it ended after a graceful close.
async fn drive<C, E>(
    mut conn: std::pin::Pin<&mut C>,
    graceful_shutdown: impl Fn(std::pin::Pin<&mut C>),
    (tracker, limits, metrics): (&crate::connections::Tracker, &Limits, &Metrics),
    peer: SocketAddr,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> bool
where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    // Set once a graceful close started: until when it may take.
    let mut closing_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let wake_at = match closing_until {
            Some(until) => until,
            None => match tracker.verdict(now, limits) {
                Verdict::Wait(at) => at,
                Verdict::Close(reason) => {
                    metrics.record_connection_closed(reason);
                    tracing::debug!(%peer, ?reason, "connection closed");
                    return false;
                }
                Verdict::Drain(reason) => {
                    metrics.record_connection_closed(reason);
                    tracing::debug!(%peer, ?reason, "closing the connection gracefully");
                    graceful_shutdown(conn.as_mut());
                    *closing_until.insert(now + GRACEFUL_CLOSE_MAX)
                }
            },
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(%peer, %err, "connection ended with an error");
                    return false;
                }
                return closing_until.is_some();
            }
            _ = tracker.notified() => {}
            _ = tokio::time::sleep_until(wake_at.into()) => {
                if closing_until.is_some() {
                    tracing::debug!(%peer, "graceful close took too long; dropping the connection");
                    return false;
                }
            }
            _ = stop.wait_for(|stop| *stop), if closing_until.is_none() => {
                graceful_shutdown(conn.as_mut());
                // The server's drain timeout bounds this one.
                closing_until = Some(Instant::now() + Duration::from_secs(24 * 3600));
            }
        }
    }
}

/// The socket, and a second handle on it that keeps it open once hyper has dropped its own.
fn with_second_handle(tcp: TcpStream) -> std::io::Result<(TcpStream, std::net::TcpStream)> {
    let tcp = tcp.into_std()?;
    let second = tcp.try_clone()?;
    Ok((TcpStream::from_std(tcp)?, second))
}

/// A lingering close: the write side shut, what the peer still sends (a WINDOW_UPDATE, a request sent before
/// it read the GOAWAY) read and dropped until it closes or for [`LINGER`]. Closed at once with unread bytes,
/// the socket would answer them with a reset, which makes the peer's kernel drop responses it has received
/// but not yet read: the apiserver would see a webhook call fail that was answered.
async fn linger_close(socket: std::net::TcpStream) {
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let Ok(mut socket) = TcpStream::from_std(socket) else {
        return;
    };
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        use tokio::io::AsyncReadExt;
        while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}
