//! The gRPC client of the scorer: a small pool of long-lived, lazily connecting channels shared by every
//! request, with a per-call deadline enforced locally. Score calls travel as messages of one `ScoreCalls`
//! stream per connection ([`streams`]), or, with `--scorer-calls unary` or a scorer without it, as unary calls
//! whose deadline is also sent as `grpc-timeout`.
//!
//! Under a burst the channel must hold: calls in flight are bounded (beyond the bound an admission is passed
//! through at once as `overloaded`, never queued past its deadline); a unary call asks the scorer to give up a
//! little before our own deadline, so that most late calls end with its DEADLINE_EXCEEDED answer rather than
//! with a RST_STREAM from us (a flood of resets is what HTTP/2 servers treat as an attack); the streams we do
//! cancel are remembered long enough that the scorer's late answers on them are ignored (see
//! [`RESET_STREAM_MEMORY`]); and after a connection failure new attempts wait an exponential backoff instead
//! of dialling once per admission.

mod streams;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient as GrpcClient;
use gpu_admission_proto::scorer::v1::{
    GetPolicyRequest, GetPolicyResponse, ScoreCall, ScoreRequest, ScoreResponse,
};
use tokio::sync::Semaphore;
use tonic::transport::{Channel, Endpoint};

use gpu_admission_core::admission::mutate_pod::ScorerOutcome;
use streams::{CallStreams, NotSent};

/// A failed call classified by core's one reading of a gRPC status ([`ScorerOutcome::of_failed_call`]).
fn classify(status: tonic::Status, budget_ms: u64) -> ScorerOutcome {
    let detail = format!("{:?}: {}", status.code(), status.message());
    ScorerOutcome::of_failed_call(status.code() as i32, detail, budget_ms)
}

/// Whether a failed call means the connection to the scorer is gone (refused, reset, closed), as opposed to
/// an answer of a live scorer. Only these start the reconnection backoff.
fn is_connection_failure(status: &tonic::Status) -> bool {
    use std::error::Error;
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    // tonic reports transport errors as UNAVAILABLE with the hyper/io error as the source; a live scorer's
    // own UNAVAILABLE (no policy loaded) has none.
    let mut source = status.source();
    while let Some(err) = source {
        if err.downcast_ref::<tonic::transport::Error>().is_some()
            || err.downcast_ref::<std::io::Error>().is_some()
            || err.downcast_ref::<hyper::Error>().is_some()
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// The smaller of the configured budget and the apiserver's own timeout minus a safety margin; never below
/// `floor` (a deadline of 0 would fail every call).
pub(crate) fn effective_deadline(
    budget: Duration,
    apiserver_timeout: Option<Duration>,
    margin: Duration,
) -> Duration {
    const FLOOR: Duration = Duration::from_millis(5);
    match apiserver_timeout {
        Some(t) => budget.min(t.saturating_sub(margin)).max(FLOOR),
        None => budget.max(FLOOR),
    }
}

/// How Score calls travel (`--scorer-calls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CallMode {
    /// As messages on one long-lived `ScoreCalls` stream per connection (see [`streams`]): no HTTP/2 stream,
    /// headers or trailers per call. A scorer without `ScoreCalls` (an older release) is called unary.
    #[default]
    Stream,
    /// One unary `Score` call per admission.
    Unary,
}

/// How the channel to the scorer behaves under load (flags of the same names, see `config.rs`).
#[derive(Debug, Clone, Copy)]
pub struct ChannelLimits {
    /// Score calls in flight at once, over all connections; an admission beyond it is passed through at once.
    pub(crate) max_in_flight: usize,
    /// HTTP/2 connections to the scorer, used in turn (each one is served by one task on either side).
    pub(crate) connections: usize,
    pub(crate) calls: CallMode,
}

impl Default for ChannelLimits {
    fn default() -> Self {
        Self {
            max_in_flight: 1024,
            connections: 2,
            calls: CallMode::Stream,
        }
    }
}

/// How one call ended, before it is classified. (The answer inline: one per call, moved once; a box would add
/// an allocation per admission.)
#[allow(clippy::large_enum_variant)]
enum CallEnd {
    Answered(ScoreResponse),
    TimedOut,
    Failed(tonic::Status),
    /// Not sent: the stream's queue is full or its streams keep ending.
    NotSent(&'static str),
}

/// The receive window of each connection to the scorer. It is fixed, not adaptive, because HTTP/2 bounds
/// the small DATA frames a connection may hold unread by half of it: each answer of the scorer is one small
/// DATA frame, and when a burst's answers arrive faster than the admission tasks read them, an adaptive window
/// (which starts at 64 KiB, a budget of about 300 answers) made the client close the connection with
/// `GOAWAY(ENHANCE_YOUR_CALM, "too_many_data_frames")`, failing every call in flight on it. 4 MiB holds
/// the small answers of many times the in-flight bound.
const CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// The receive window of each stream: far above the largest answer the scorer sends.
const STREAM_WINDOW: u32 = 1024 * 1024;

/// How long the client remembers a stream it cancelled. HTTP/2 ignores frames for a remembered cancelled
/// stream; a frame for a forgotten one is a protocol error that counts toward the client's own limit of 1,024
/// local error resets, after which it closes the connection with `GOAWAY(ENHANCE_YOUR_CALM)` and fails every
/// call in flight on it ("h2 protocol error", seen as RESOURCE_EXHAUSTED). With the defaults (50 streams,
/// 1 s) a burst of 1,000 admissions that time out together forgets most of its cancelled streams while the
/// scorer is still answering them. So every call that can be in flight is remembered (the stream memory of
/// each connection is the in-flight bound), for longer than the scorer can take to notice a cancel.
const RESET_STREAM_MEMORY: Duration = Duration::from_secs(10);

/// The scorer is asked to stop this much before our own deadline (at least 2 ms, else 5 % of what is left):
/// its DEADLINE_EXCEEDED answer then usually arrives before we would cancel the stream ourselves. A call on a
/// `ScoreCalls` stream is waited for as long, so that both end at the same time, leaving the rest to answer.
fn server_deadline(remaining: Duration) -> Duration {
    let early = (remaining / 20).max(Duration::from_millis(2));
    remaining
        .saturating_sub(early)
        .max(Duration::from_millis(1))
}

/// Exponential backoff after connection failures: while it runs, calls fail at once as unavailable instead
/// of dialling; the first call after it is the probe. Any answer from the scorer resets it.
#[derive(Debug, Default)]
struct Reconnect {
    state: Mutex<ReconnectState>,
}

#[derive(Debug, Default)]
struct ReconnectState {
    failures: u32,
    retry_at: Option<Instant>,
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

impl Reconnect {
    /// `Some(wait)` while the backoff runs.
    fn blocked(&self, now: Instant) -> Option<Duration> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .retry_at
            .filter(|at| *at > now)
            .map(|at| at.duration_since(now))
    }

    fn failed(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Calls that were already in flight when the connection broke fail together: count them once.
        if state.retry_at.is_some_and(|at| at > now) {
            return state.retry_at.map_or(Duration::ZERO, |at| at - now);
        }
        state.failures = state.failures.saturating_add(1);
        let base = BACKOFF_MIN
            .saturating_mul(1 << state.failures.saturating_sub(1).min(10))
            .min(BACKOFF_MAX);
        // ±25 % jitter so that frontend replicas do not dial in step.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let jitter = (clock.subsec_nanos() ^ std::process::id()) % 500;
        let wait = base.mul_f64(0.75 + f64::from(jitter) / 1000.0);
        state.retry_at = Some(now + wait);
        wait
    }

    fn succeeded(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.failures != 0 || state.retry_at.is_some() {
            *state = ReconnectState::default();
        }
    }
}

/// A cheap-to-clone handle on the shared channels.
#[derive(Debug, Clone)]
pub struct Scorer {
    clients: Arc<[GrpcClient<Channel>]>,
    next: Arc<AtomicUsize>,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    reconnect: Arc<Reconnect>,
    /// `None` when calls are unary (`--scorer-calls unary`).
    streams: Option<Arc<CallStreams>>,
    budget: Duration,
    margin: Duration,
}

impl Scorer {
    /// Creates the client; nothing is dialled until the first call (the scorer may start later).
    pub fn new(
        uri: &str,
        budget: Duration,
        margin: Duration,
        limits: ChannelLimits,
    ) -> anyhow::Result<Self> {
        let endpoint = Endpoint::from_shared(uri.to_string())
            .map_err(|e| anyhow::anyhow!("invalid --scorer {uri:?}: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .initial_stream_window_size(STREAM_WINDOW)
            .http2_max_concurrent_reset_streams(limits.max_in_flight.max(1))
            .http2_reset_stream_duration(RESET_STREAM_MEMORY);
        let clients: Vec<_> = (0..limits.connections.max(1))
            .map(|_| GrpcClient::new(endpoint.clone().connect_lazy()))
            .collect();
        let max_in_flight = limits.max_in_flight.max(1);
        let streams = (limits.calls == CallMode::Stream)
            .then(|| Arc::new(CallStreams::new(clients.len(), max_in_flight)));
        Ok(Self {
            clients: clients.into(),
            next: Arc::new(AtomicUsize::new(0)),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            reconnect: Arc::new(Reconnect::default()),
            streams,
            budget,
            margin,
        })
    }

    /// The index of the next channel of the pool, in turn.
    fn next_slot(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len()
    }

    /// The next channel of the pool, in turn.
    fn client(&self) -> GrpcClient<Channel> {
        self.clients[self.next_slot()].clone()
    }

    /// The call streams, unless calls are unary (by configuration, or for a while after the scorer said it
    /// has no `ScoreCalls`).
    fn streams(&self, now: Instant) -> Option<&CallStreams> {
        self.streams.as_deref().filter(|s| s.usable(now))
    }

    pub(crate) fn deadline(&self, apiserver_timeout: Option<Duration>) -> Duration {
        effective_deadline(self.budget, apiserver_timeout, self.margin)
    }

    /// One Score call that must be over `budget` after `started` (the admission request's arrival, so the
    /// time spent decoding is part of the budget), in `span`'s trace context.
    pub(crate) async fn score(
        &self,
        request: ScoreRequest,
        started: Instant,
        budget: Duration,
        span: &tracing::Span,
    ) -> ScorerOutcome {
        let deadline_at = started + budget;
        let budget_ms = budget.as_millis() as u64;
        let now = Instant::now();
        let remaining = deadline_at.saturating_duration_since(now);
        if remaining.is_zero() {
            return ScorerOutcome::TimedOut { budget_ms };
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return ScorerOutcome::Overloaded {
                in_flight: self.max_in_flight,
            };
        };
        if let Some(wait) = self.reconnect.blocked(now) {
            return ScorerOutcome::Unavailable(format!(
                "not connected; next attempt in {} ms",
                wait.as_millis()
            ));
        }
        let slot = self.next_slot();
        let end = match self.streams(now) {
            Some(streams) => {
                // Until a stream has answered once, the scorer may be a release without `ScoreCalls`: the
                // request is kept, to be sent unary then.
                let unary = (!streams.confirmed()).then(|| request.clone());
                let mut call = ScoreCall {
                    request: Some(request),
                    ..ScoreCall::default()
                };
                gpu_admission_telemetry::propagation::inject_into_map(
                    span,
                    &mut call.trace_context,
                );
                // The answer is waited for as long as a unary call lasts (the scorer's `grpc-timeout`): what
                // is left of the budget decides and answers the admission, inside the budget.
                let answer_by = now + server_deadline(remaining);
                match (self.on_stream(streams, slot, call, answer_by).await, unary) {
                    (CallEnd::Failed(s), Some(request))
                        if s.code() == tonic::Code::Unimplemented =>
                    {
                        Box::pin(self.unary(slot, request, deadline_at, span)).await
                    }
                    (end, _) => end,
                }
            }
            None => Box::pin(self.unary(slot, request, deadline_at, span)).await,
        };
        self.outcome(end, budget_ms)
    }

    /// A unary call on connection `slot`, with the deadline sent as `grpc-timeout`. Its future (tonic's
    /// channel and call) is large: callers box it, so that every admission's future, which axum moves, stays
    /// small (unboxed, the copies cost ~8k instructions an admission).
    async fn unary(
        &self,
        slot: usize,
        request: ScoreRequest,
        deadline_at: Instant,
        span: &tracing::Span,
    ) -> CallEnd {
        let remaining = deadline_at.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return CallEnd::TimedOut;
        }
        let mut req = tonic::Request::new(request);
        req.set_timeout(server_deadline(remaining));
        gpu_admission_telemetry::propagation::inject_into_grpc(span, req.metadata_mut());
        let mut client = self.clients[slot].clone();
        match tokio::time::timeout_at(deadline_at.into(), client.score(req)).await {
            Err(_elapsed) => CallEnd::TimedOut,
            Ok(Ok(resp)) => CallEnd::Answered(resp.into_inner()),
            Ok(Err(status)) => CallEnd::Failed(status),
        }
    }

    /// A call sent as a message of the stream of connection `slot`, and its answer.
    async fn on_stream(
        &self,
        streams: &CallStreams,
        slot: usize,
        call: ScoreCall,
        deadline_at: Instant,
    ) -> CallEnd {
        let sent = match streams.send(slot, &self.clients[slot], call) {
            Ok(sent) => sent,
            Err(NotSent::Full) => return CallEnd::NotSent("the scorer is not reading its calls"),
            Err(NotSent::Ended) => {
                return CallEnd::NotSent("the scorer's call streams keep ending");
            }
        };
        match tokio::time::timeout_at(deadline_at.into(), &mut { sent }.reply).await {
            Err(_elapsed) => CallEnd::TimedOut,
            Ok(Ok(Ok(answer))) => CallEnd::Answered(answer),
            Ok(Ok(Err(status))) => {
                if status.code() == tonic::Code::Unimplemented {
                    streams.fall_back(Instant::now());
                }
                CallEnd::Failed(status)
            }
            Ok(Err(_dropped)) => CallEnd::NotSent("the scorer's call stream ended"),
        }
    }

    /// The outcome of a call; a failed connection starts the reconnection backoff, an answer ends it.
    fn outcome(&self, end: CallEnd, budget_ms: u64) -> ScorerOutcome {
        match end {
            CallEnd::Answered(answer) => {
                self.reconnect.succeeded();
                ScorerOutcome::Answered(Box::new(answer))
            }
            CallEnd::TimedOut => ScorerOutcome::TimedOut { budget_ms },
            CallEnd::NotSent(why) => ScorerOutcome::Unavailable(why.to_string()),
            CallEnd::Failed(status) => {
                if is_connection_failure(&status) {
                    let wait = self.reconnect.failed(Instant::now());
                    tracing::debug!(
                        retry_in_ms = wait.as_millis() as u64,
                        "scorer connection failed; backing off"
                    );
                }
                classify(status, budget_ms)
            }
        }
    }

    /// Fetches the policy in force (catalog + priority buckets), with its own timeout.
    pub(crate) async fn get_policy(&self, timeout: Duration) -> anyhow::Result<GetPolicyResponse> {
        let mut req = tonic::Request::new(GetPolicyRequest {});
        req.set_timeout(timeout);
        let mut client = self.client();
        let resp = tokio::time::timeout(timeout, client.get_policy(req))
            .await
            .map_err(|_| anyhow::anyhow!("GetPolicy timed out after {timeout:?}"))??;
        Ok(resp.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_core::admission::mutate_pod::ScorerResult;

    #[test]
    fn deadline_is_the_smaller_of_budget_and_apiserver_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(effective_deadline(ms(200), None, ms(50)), ms(200));
        assert_eq!(
            effective_deadline(ms(200), Some(ms(10_000)), ms(50)),
            ms(200)
        );
        assert_eq!(effective_deadline(ms(200), Some(ms(150)), ms(50)), ms(100));
        assert_eq!(effective_deadline(ms(200), Some(ms(20)), ms(50)), ms(5));
    }

    #[test]
    fn status_classification() {
        assert_eq!(
            classify(tonic::Status::cancelled("x"), 1).result(),
            ScorerResult::Timeout
        );
        assert_eq!(
            classify(tonic::Status::resource_exhausted("x"), 1).result(),
            ScorerResult::Unavailable
        );
        assert_eq!(
            classify(tonic::Status::deadline_exceeded("x"), 1).result(),
            ScorerResult::Timeout
        );
        assert_eq!(
            classify(tonic::Status::unavailable("x"), 1).result(),
            ScorerResult::Unavailable
        );
        assert_eq!(
            classify(tonic::Status::internal("decode"), 1).result(),
            ScorerResult::Invalid
        );
        assert!(!is_connection_failure(&tonic::Status::unavailable(
            "no policy loaded"
        )));
    }

    #[test]
    fn the_scorer_is_asked_to_stop_before_our_deadline() {
        let ms = Duration::from_millis;
        assert_eq!(server_deadline(ms(200)), ms(190));
        assert_eq!(server_deadline(ms(20)), ms(18));
        assert_eq!(server_deadline(ms(2)), ms(1));
    }

    #[test]
    fn reconnection_backs_off_exponentially_and_resets_on_success() {
        let r = Reconnect::default();
        let t0 = Instant::now();
        assert_eq!(r.blocked(t0), None);
        let first = r.failed(t0);
        assert!(first >= BACKOFF_MIN.mul_f64(0.75) && first <= BACKOFF_MIN.mul_f64(1.25));
        assert!(r.blocked(t0).is_some());
        // Failures of calls already in flight during the backoff do not lengthen it.
        assert_eq!(r.failed(t0 + ms_(10)), first - ms_(10));
        let after = t0 + first;
        assert_eq!(r.blocked(after), None);
        let second = r.failed(after);
        assert!(second >= BACKOFF_MIN.mul_f64(1.5), "{second:?}");
        let mut t = after + second;
        let mut last = second;
        for _ in 0..20 {
            last = r.failed(t);
            t += last;
        }
        assert!(
            last >= BACKOFF_MAX.mul_f64(0.75) && last <= BACKOFF_MAX.mul_f64(1.25),
            "{last:?}"
        );
        r.succeeded();
        assert_eq!(r.blocked(t), None);
    }

    fn ms_(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A client of `double` with `budget`, calls on streams.
    fn stream_client(url: &str, budget: Duration) -> Scorer {
        Scorer::new(
            url,
            budget,
            Duration::from_millis(50),
            ChannelLimits {
                max_in_flight: 8,
                connections: 1,
                calls: CallMode::Stream,
            },
        )
        .unwrap()
    }

    fn good_answer() -> gpu_admission_proto::scorer::v1::ScoreResponse {
        gpu_admission_proto::scorer::v1::ScoreResponse {
            priority_score: 42.0,
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_survives_unanswered_calls_and_fails_its_calls_when_it_breaks() {
        use gpu_admission_testkit::faults::{Behaviour, FaultProxy, ScorerDouble};
        let double = ScorerDouble::start(Default::default(), Behaviour::Hang)
            .await
            .unwrap();
        let proxy = FaultProxy::start(double.addr()).await.unwrap();
        let scorer = stream_client(&proxy.url(), Duration::from_secs(10));
        let score = |budget_ms| {
            let scorer = scorer.clone();
            async move {
                let budget = Duration::from_millis(budget_ms);
                scorer
                    .score(
                        ScoreRequest::default(),
                        Instant::now(),
                        budget,
                        &tracing::Span::none(),
                    )
                    .await
            }
        };
        // An unanswered call times out; the stream stays, and the next call on it is answered.
        assert_eq!(score(100).await.result(), ScorerResult::Timeout);
        double.set_behaviour(Behaviour::Answer(Box::new(good_answer())));
        let answered = score(2000).await;
        assert!(
            matches!(&answered, ScorerOutcome::Answered(a) if a.priority_score == 42.0),
            "{answered:?}"
        );
        assert_eq!(double.streamed_calls(), 2);

        // A call waiting when the connection breaks (a crashed scorer) fails then, long before its budget.
        double.set_behaviour(Behaviour::Hang);
        let waiting = tokio::spawn(score(10_000));
        while double.streamed_calls() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = Instant::now();
        drop(proxy);
        let failed = waiting.await.unwrap();
        assert_eq!(failed.result(), ScorerResult::Unavailable, "{failed:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn calls_beyond_the_in_flight_bound_are_not_sent() {
        // Nothing listens on port 9 of loopback; the bound is checked before any connection attempt.
        let scorer = Scorer::new(
            "http://127.0.0.1:9",
            Duration::from_millis(200),
            Duration::from_millis(50),
            ChannelLimits {
                max_in_flight: 1,
                connections: 1,
                calls: CallMode::Unary,
            },
        )
        .unwrap();
        let held = scorer.in_flight.clone().try_acquire_owned().unwrap();
        let (started, budget) = (Instant::now(), Duration::from_millis(200));
        let call = scorer
            .score(
                ScoreRequest::default(),
                started,
                budget,
                &tracing::Span::none(),
            )
            .await;
        assert!(
            matches!(call, ScorerOutcome::Overloaded { in_flight: 1 }),
            "{call:?}"
        );
        assert_eq!(call.result(), ScorerResult::Overloaded);
        drop(held);
        let call = scorer
            .score(
                ScoreRequest::default(),
                started,
                budget,
                &tracing::Span::none(),
            )
            .await;
        assert_eq!(call.result(), ScorerResult::Unavailable, "{call:?}");
        // The refused connection started the backoff: the next call fails at once, without dialling.
        let call = scorer
            .score(
                ScoreRequest::default(),
                started,
                budget,
                &tracing::Span::none(),
            )
            .await;
        assert!(
            matches!(&call, ScorerOutcome::Unavailable(d) if d.contains("next attempt")),
            "{call:?}"
        );
    }
}
