//! Connection hygiene of the webhook port: every accepted connection is registered and watched.
//!
//! - **First request**: the TLS handshake, HTTP/1-vs-HTTP/2 detection and the first request's headers must all
//!   be done within the first-request timeout, or the connection is closed (a client that connects and sends
//!   nothing, one byte, or a trickled h2 preface).
//! - **Request headers** (HTTP/1): bytes of a next request that do not become a request within the same
//!   timeout close the connection.
//! - **Idle**: a keep-alive connection with no request for the idle timeout is closed gracefully (HTTP/2:
//!   GOAWAY). Keep it well above the apiserver's own idle interval (90 s), so that the apiserver closes
//!   first and never sends a request into a connection we are closing.
//! - **Lifetime**: a connection that has served `max_requests` requests, or is `max_age` old (less a random
//!   tenth, so that connections opened together do not end together), is closed gracefully (HTTP/2: GOAWAY;
//!   what is in flight finishes). The apiserver multiplexes every webhook call over one HTTP/2 connection:
//!   without an end, a Service balancing connections sends it all to one replica for good; ended, the
//!   apiserver connects again, and the Service picks a replica again.
//! - **Cap**: at most `max_connections` are open. At the cap a new connection makes the oldest idle one close
//!   (shed) instead of failing; only when none is idle is the new one refused.
//!
//! Each request carries its connection's origin (peer address, connection id) for the body budget's caps.
//!
//! A connection's "activity" is a request starting or ending: HTTP/2 PINGs and their ACKs keep it alive at
//! the TCP level but do not make it busy.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use crate::body_budget::Origin;
use crate::body_budget::body::ConnectionOrigin;
use crate::metrics::{ConnectionClose, Metrics};

/// The timeouts and the cap.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// TLS handshake + protocol detection + the first request's headers; also an HTTP/1 request's headers.
    pub(crate) first_request: Duration,
    /// No request for this long: closed gracefully.
    pub(crate) idle: Duration,
    /// Open connections at most (handshakes included).
    pub(crate) max_connections: usize,
    /// A connection this old (less up to a tenth) is closed gracefully (`None`: never).
    pub(crate) max_age: Option<Duration>,
    /// A connection that has served this many requests is closed gracefully (`None`: never).
    pub(crate) max_requests: Option<u64>,
}

/// What the watchdog of a connection must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing before this instant.
    Wait(Instant),
    /// Drop the connection at once (it never became a request).
    Close(ConnectionClose),
    /// Close gracefully (finish what is in flight, HTTP/2 GOAWAY).
    Drain(ConnectionClose),
}

/// The shared state of one connection: written by its I/O and its requests, read by its watchdog and by the
/// registry when it looks for a connection to shed.
#[derive(Debug)]
pub(crate) struct Tracker {
    epoch: Instant,
    accepted_ms: u64,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    /// Milliseconds since `epoch` of the last request start or end (the accept time at first).
    last_active_ms: AtomicU64,
    /// 1 + milliseconds since `epoch` when bytes arrived on an idle HTTP/1 connection; 0 = none pending.
    pending_read_ms: AtomicU64,
    http2: AtomicBool,
    /// When the connection has lived long enough (`None`: never).
    ends_at: Option<Instant>,
    /// Requests it serves at most (`u64::MAX`: no end).
    max_requests: u64,
    /// Set once: shed by the registry (the watchdog drains it).
    shed: AtomicBool,
    wake: Notify,
}

impl Tracker {
    fn new(epoch: Instant, limits: &Limits) -> Self {
        let accepted = Instant::now();
        let now = ms_since(epoch, accepted);
        let ends_at = limits.max_age.map(|age| {
            let age = age.as_millis() as u64;
            accepted + Duration::from_millis(age - jitter(age / 10))
        });
        Self {
            epoch,
            accepted_ms: now,
            ends_at,
            max_requests: limits.max_requests.unwrap_or(u64::MAX),
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            last_active_ms: AtomicU64::new(now),
            pending_read_ms: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            shed: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// A request's headers were read; the guard ends it when dropped.
    pub(crate) fn start_request(self: &Arc<Self>, http2: bool) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let served = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        self.pending_read_ms.store(0, Ordering::Relaxed);
        if served == self.max_requests || served == 1 {
            // Its last request: the watchdog closes the connection gracefully now. Its first: the watchdog,
            // asleep until the first-request deadline, wakes to wait for the next one instead (its age).
            self.wake.notify_one();
        }
        if http2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        self.touch();
        RequestGuard(self.clone())
    }

    fn touch(&self) {
        self.last_active_ms
            .store(ms_since(self.epoch, Instant::now()), Ordering::Relaxed);
    }

    /// Bytes arrived. On an idle HTTP/1 connection they start the request-header clock.
    fn on_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && !self.http2.load(Ordering::Relaxed)
            && self.requests.load(Ordering::Relaxed) > 0
            && self.pending_read_ms.load(Ordering::Relaxed) == 0
        {
            let now = ms_since(self.epoch, Instant::now());
            self.pending_read_ms.store(now + 1, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Wakes the watchdog on a change it must act on (shed, shutdown).
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    pub(crate) fn is_shed(&self) -> bool {
        self.shed.load(Ordering::Acquire)
    }

    /// Until when the connection may wait for its first request.
    pub(crate) fn first_request_deadline(&self, limits: &Limits) -> Instant {
        self.at(self.accepted_ms) + limits.first_request
    }

    /// What the watchdog must do at `now`.
    pub(crate) fn verdict(&self, now: Instant, limits: &Limits) -> Verdict {
        if self.is_shed() {
            return Verdict::Drain(ConnectionClose::shed);
        }
        if self.requests.load(Ordering::Relaxed) == 0 {
            let deadline = self.first_request_deadline(limits);
            return if now >= deadline {
                Verdict::Close(ConnectionClose::first_request_timeout)
            } else {
                Verdict::Wait(deadline)
            };
        }
        if self.requests.load(Ordering::Relaxed) >= self.max_requests {
            return Verdict::Drain(ConnectionClose::max_requests);
        }
        if self.ends_at.is_some_and(|t| now >= t) {
            return Verdict::Drain(ConnectionClose::max_age);
        }
        let or_end = |t: Instant| self.ends_at.map_or(t, |end| t.min(end));
        if !self.is_idle() {
            // Busy: looked at again when woken, or after the idle timeout (or its end) at the latest.
            return Verdict::Wait(or_end(now + limits.idle));
        }
        let mut next = or_end(self.at(self.last_active_ms.load(Ordering::Relaxed)) + limits.idle);
        if now >= next {
            return Verdict::Drain(ConnectionClose::idle_timeout);
        }
        let pending = self.pending_read_ms.load(Ordering::Relaxed);
        if pending != 0 {
            let deadline = self.at(pending - 1) + limits.first_request;
            if now >= deadline {
                return Verdict::Close(ConnectionClose::request_header_timeout);
            }
            next = next.min(deadline);
        }
        Verdict::Wait(next)
    }
}

/// A random number of milliseconds below `spread` (0 when `spread` is 0).
fn jitter(spread: u64) -> u64 {
    use std::hash::{BuildHasher, RandomState};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let random = RandomState::new().hash_one(NEXT.fetch_add(1, Ordering::Relaxed));
    random.checked_rem(spread).unwrap_or(0)
}

fn ms_since(epoch: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(epoch).as_millis() as u64
}

/// Ends a request (also when its future is dropped because the client went away).
pub(crate) struct RequestGuard(Arc<Tracker>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections.
pub(crate) struct Registry {
    epoch: Instant,
    limits: Limits,
    metrics: Arc<Metrics>,
    conns: Mutex<HashMap<u64, Arc<Tracker>>>,
    next_id: AtomicU64,
    emptied: Notify,
}

/// A registered connection; unregistered when dropped.
pub(crate) struct Registration {
    registry: Arc<Registry>,
    id: u64,
    pub(crate) tracker: Arc<Tracker>,
}

impl Registration {
    pub(crate) fn limits(&self) -> &Limits {
        &self.registry.limits
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut conns = self
            .registry
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        conns.remove(&self.id);
        self.registry
            .metrics
            .connections_open
            .set(conns.len() as i64);
        if conns.is_empty() {
            self.registry.emptied.notify_waiters();
        }
    }
}

impl Registry {
    pub(crate) fn new(limits: Limits, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            limits,
            metrics,
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            emptied: Notify::new(),
        })
    }

    #[cfg(test)]
    fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn open(&self) -> usize {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Registers a new connection. At the cap the oldest idle connection is shed to make room; `None` when
    /// every open connection is busy (the new one is refused).
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Registration> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        // Connections already shed are on their way out and do not count.
        let live = conns.values().filter(|t| !t.is_shed()).count();
        if live >= self.limits.max_connections && !Self::shed_oldest_idle(&conns) {
            drop(conns);
            self.metrics
                .record_connection_closed(ConnectionClose::rejected);
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tracker = Arc::new(Tracker::new(self.epoch, &self.limits));
        conns.insert(id, tracker.clone());
        self.metrics.connections_open.set(conns.len() as i64);
        Some(Registration {
            registry: self.clone(),
            id,
            tracker,
        })
    }

    /// Sheds the idle connection whose last activity is the oldest; false when none is idle.
    fn shed_oldest_idle(conns: &HashMap<u64, Arc<Tracker>>) -> bool {
        let oldest = conns
            .values()
            .filter(|t| t.is_idle() && !t.is_shed())
            .min_by_key(|t| t.last_active_ms.load(Ordering::Relaxed));
        match oldest {
            Some(t) => {
                t.shed.store(true, Ordering::Release);
                t.wake.notify_one();
                true
            }
            None => false,
        }
    }

    /// Sheds one idle connection to free a file descriptor (accept failed with EMFILE).
    pub(crate) fn shed_one(&self) -> bool {
        let conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        Self::shed_oldest_idle(&conns)
    }

    /// Resolves once no connection is open.
    pub(crate) async fn closed(&self) {
        loop {
            let emptied = self.emptied.notified();
            if self.open() == 0 {
                return;
            }
            emptied.await;
        }
    }
}

/// The connection's byte stream, reporting reads to its tracker.
pub(crate) struct TrackedIo<T> {
    inner: T,
    tracker: Arc<Tracker>,
}

impl<T> TrackedIo<T> {
    pub(crate) fn new(inner: T, tracker: Arc<Tracker>) -> Self {
        Self { inner, tracker }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.tracker.on_read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The connection's service, reporting each request's start and end to its tracker.
#[derive(Clone)]
pub(crate) struct TrackedService<S> {
    inner: S,
    tracker: Arc<Tracker>,
    origin: ConnectionOrigin,
}

impl<S> TrackedService<S> {
    /// `peer` is the connection's remote address: what the body budget caps per peer.
    pub(crate) fn new(inner: S, registration: &Registration, peer: IpAddr) -> Self {
        Self {
            inner,
            tracker: registration.tracker.clone(),
            origin: ConnectionOrigin(Origin {
                peer,
                connection: registration.id,
            }),
        }
    }
}

impl<S, B> hyper::service::Service<http::Request<B>> for TrackedService<S>
where
    S: hyper::service::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, mut req: http::Request<B>) -> Self::Future {
        req.extensions_mut().insert(self.origin);
        let guard = self
            .tracker
            .start_request(req.version() == http::Version::HTTP_2);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            drop(guard);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> Limits {
        Limits {
            first_request: Duration::from_secs(10),
            idle: Duration::from_secs(100),
            max_connections: max,
            max_age: None,
            max_requests: None,
        }
    }

    fn registry(max: usize) -> Arc<Registry> {
        let metrics = Arc::new(Metrics::register(
            &mut prometheus_client::registry::Registry::default(),
        ));
        Registry::new(limits(max), metrics)
    }

    #[test]
    fn first_request_then_idle_then_header_timeouts() {
        let r = registry(10);
        let reg = r.admit().unwrap();
        let t = &reg.tracker;
        let l = r.limits();
        let now = Instant::now();
        let first = t.first_request_deadline(l);
        assert_eq!(t.verdict(now, l), Verdict::Wait(first));
        assert_eq!(
            t.verdict(first, l),
            Verdict::Close(ConnectionClose::first_request_timeout)
        );

        let guard = t.start_request(false);
        // Busy: never idle-closed, whatever the time.
        assert!(matches!(
            t.verdict(now + Duration::from_secs(1000), l),
            Verdict::Wait(_)
        ));
        drop(guard);
        let idle_at = t.at(t.last_active_ms.load(Ordering::Relaxed)) + l.idle;
        assert_eq!(t.verdict(now, l), Verdict::Wait(idle_at));
        assert_eq!(
            t.verdict(idle_at, l),
            Verdict::Drain(ConnectionClose::idle_timeout)
        );

        // A few bytes of a next HTTP/1 request that never completes.
        t.on_read();
        let header_deadline = t.at(t.pending_read_ms.load(Ordering::Relaxed) - 1) + l.first_request;
        assert_eq!(t.verdict(now, l), Verdict::Wait(header_deadline));
        assert_eq!(
            t.verdict(header_deadline, l),
            Verdict::Close(ConnectionClose::request_header_timeout)
        );
        // A request clears it.
        drop(t.start_request(false));
        assert_eq!(t.pending_read_ms.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn http2_control_frames_do_not_start_the_header_clock() {
        let r = registry(10);
        let reg = r.admit().unwrap();
        drop(reg.tracker.start_request(true));
        reg.tracker.on_read();
        assert_eq!(reg.tracker.pending_read_ms.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_shed_and_busy_ones_never() {
        let r = registry(2);
        let a = r.admit().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let b = r.admit().unwrap();
        // The third sheds the oldest idle one (a).
        let c = r.admit().unwrap();
        assert!(a.tracker.is_shed() && !b.tracker.is_shed());
        assert_eq!(
            a.tracker.verdict(Instant::now(), r.limits()),
            Verdict::Drain(ConnectionClose::shed)
        );
        // b and c busy: the next one is refused.
        let _gb = b.tracker.start_request(false);
        let _gc = c.tracker.start_request(false);
        assert!(r.admit().is_none());
        drop(a);
        assert_eq!(r.open(), 2);
        assert!(r.admit().is_none());
        drop(_gb);
        let d = r.admit().unwrap();
        assert!(b.tracker.is_shed());
        drop((b, c, d));
        assert_eq!(r.open(), 0);
    }

    /// A connection ends gracefully after its last request, or once old enough (less up to a tenth), busy or
    /// not; the watchdog is woken by the first request (to wait for the age) and the last.
    #[test]
    fn a_connection_ends_after_its_requests_or_its_age() {
        let metrics = Arc::new(Metrics::register(
            &mut prometheus_client::registry::Registry::default(),
        ));
        let l = Limits {
            max_age: Some(Duration::from_secs(100)),
            max_requests: Some(3),
            ..limits(10)
        };
        let r = Registry::new(l, metrics);
        let reg = r.admit().unwrap();
        let t = &reg.tracker;
        let now = Instant::now();
        drop(t.start_request(true));
        assert!(
            futures::FutureExt::now_or_never(t.notified()).is_some(),
            "the first request wakes the watchdog, asleep until the first-request deadline, to wait for its age"
        );
        let busy = t.start_request(true);
        assert!(
            futures::FutureExt::now_or_never(t.notified()).is_none(),
            "a request neither first nor last leaves the watchdog asleep"
        );
        let Verdict::Wait(next) = t.verdict(now, &l) else {
            panic!("ended before its requests or its age")
        };
        assert!(
            next <= now + Duration::from_secs(100),
            "its age bounds the wait"
        );
        assert!(
            next >= now + Duration::from_secs(89),
            "less at most a tenth"
        );
        assert_eq!(
            t.verdict(now + Duration::from_secs(100), &l),
            Verdict::Drain(ConnectionClose::max_age),
            "busy, it still ends (what is in flight finishes)"
        );
        let last = t.start_request(true);
        assert!(
            futures::FutureExt::now_or_never(t.notified()).is_some(),
            "the last request wakes the watchdog"
        );
        assert_eq!(
            t.verdict(now, &l),
            Verdict::Drain(ConnectionClose::max_requests)
        );
        drop((busy, last));
        // Without limits, a connection never ends so.
        let open = registry(10).admit().unwrap();
        drop(open.tracker.start_request(true));
        let later = now + Duration::from_secs(1_000_000);
        assert!(matches!(
            open.tracker.verdict(later, &limits(10)),
            Verdict::Drain(ConnectionClose::idle_timeout)
        ));
    }
}
