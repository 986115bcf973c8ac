//! Score calls on long-lived `ScoreCalls` streams, one per connection to the scorer: each call is a message
//! carrying an id, and its answer a message carrying the same id. A unary call pays for an HTTP/2 stream of
//! its own on both sides (headers, trailers, a task on the server, a dispatch through the channel's buffer);
//! a message on an open stream does not.
//!
//! A stream is opened lazily by the first call that needs it and replaced when it ends: the scorer ends its
//! streams cleanly when it shuts down, and a broken connection ends them with its error. Either way every call
//! still waiting on it is failed at once with that status (the caller then decides as for a unary call that
//! failed so). Calls are queued for the stream in a bounded channel: a scorer that stops reading its calls fills
//! it, and the calls beyond are failed at once rather than kept in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient as GrpcClient;
use gpu_admission_proto::scorer::v1::{ScoreAnswer, ScoreCall, ScoreResponse, score_answer};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::transport::Channel;

type Reply = Result<ScoreResponse, Status>;

/// The calls waiting for their answer on one stream.
#[derive(Debug, Default)]
struct Pending {
    /// Set once the stream has ended: no call is registered any more.
    ended: bool,
    calls: HashMap<u64, oneshot::Sender<Reply>>,
}

/// One open (or opening) `ScoreCalls` stream.
#[derive(Debug)]
struct CallStream {
    sender: mpsc::Sender<ScoreCall>,
    pending: Mutex<Pending>,
}

impl CallStream {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_ended(&self) -> bool {
        self.pending().ended
    }

    /// Hands an answer to its caller; an answer nobody waits for any more (the call timed out) is dropped.
    fn deliver(&self, answer: ScoreAnswer) {
        let Some(caller) = self.pending().calls.remove(&answer.id) else {
            return;
        };
        let reply = match answer.result {
            Some(score_answer::Result::Response(response)) => Ok(response),
            Some(score_answer::Result::Error(e)) => Err(Status::new(e.code.into(), e.message)),
            None => Err(Status::internal(
                "the scorer answered a call with neither a response nor an error",
            )),
        };
        let _ = caller.send(reply);
    }

    /// Ends the stream: every call still waiting gets `status`.
    fn end(&self, status: &Status) {
        let calls = {
            let mut pending = self.pending();
            pending.ended = true;
            std::mem::take(&mut pending.calls)
        };
        for caller in calls.into_values() {
            let _ = caller.send(Err(status.clone()));
        }
    }

    fn is_pending(&self, id: u64) -> bool {
        self.pending().calls.contains_key(&id)
    }

    fn forget(&self, id: u64) {
        self.pending().calls.remove(&id);
    }
}

/// A call sent on a stream, until it is answered or given up. Dropping it (an answer came, the caller timed
/// out or was cancelled) forgets the call, so a late answer is dropped.
pub(super) struct SentCall {
    stream: Arc<CallStream>,
    id: u64,
    pub(super) reply: oneshot::Receiver<Reply>,
}

impl Drop for SentCall {
    fn drop(&mut self) {
        self.stream.forget(self.id);
    }
}

/// Why a call was not sent.
#[derive(Debug)]
pub(super) enum NotSent {
    /// The stream's queue is full: the scorer is not reading its calls.
    Full,
    /// The streams ended as fast as they were opened (the scorer is going away).
    Ended,
}

/// One stream slot per connection of the pool.
#[derive(Debug)]
pub(super) struct CallStreams {
    slots: Box<[Mutex<Option<Arc<CallStream>>>]>,
    next_id: AtomicU64,
    /// Set by the first answer of any stream: the scorer serves `ScoreCalls`.
    confirmed: Arc<AtomicBool>,
    /// Calls a stream may hold unsent (the in-flight bound: more cannot be waiting).
    queue: usize,
    /// Until when calls are unary because the scorer answered UNIMPLEMENTED (see [`CallStreams::fall_back`]).
    unary_until: Mutex<Option<Instant>>,
}

/// How long Score calls are made unary after the scorer answered that it has no `ScoreCalls` (an older
/// scorer during a rollout): then streams are tried again.
const UNARY_FALLBACK: Duration = Duration::from_secs(60);

impl CallStreams {
    pub(super) fn new(connections: usize, queue: usize) -> Self {
        Self {
            slots: (0..connections).map(|_| Mutex::new(None)).collect(),
            next_id: AtomicU64::new(1),
            confirmed: Arc::default(),
            queue: queue.max(1),
            unary_until: Mutex::new(None),
        }
    }

    /// Sends `call` on the stream of connection `slot` (opened on `client` when there is none, or the last
    /// one ended).
    pub(super) fn send(
        &self,
        slot: usize,
        client: &GrpcClient<Channel>,
        mut call: ScoreCall,
    ) -> Result<SentCall, NotSent> {
        call.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // A stream can end between the moment it is picked and the call's registration: then once more on a
        // new one (a second end in that window is the scorer going away; the call fails like its neighbours).
        for _ in 0..2 {
            let stream = self.stream(slot, client);
            let (tx, rx) = oneshot::channel();
            {
                let mut pending = stream.pending();
                if pending.ended {
                    continue;
                }
                pending.calls.insert(call.id, tx);
            }
            let sent = SentCall {
                stream: stream.clone(),
                id: call.id,
                reply: rx,
            };
            return match stream.sender.try_send(call) {
                Ok(()) => Ok(sent),
                Err(mpsc::error::TrySendError::Full(_)) => Err(NotSent::Full),
                Err(mpsc::error::TrySendError::Closed(back)) => {
                    // The stream's task is gone: its `end` answers the call (or already did).
                    drop(back);
                    Ok(sent)
                }
            };
        }
        Err(NotSent::Ended)
    }

    /// Whether a stream has answered: the scorer serves `ScoreCalls`.
    pub(super) fn confirmed(&self) -> bool {
        self.confirmed.load(Ordering::Relaxed)
    }

    /// Whether calls go on streams now (not during the unary fall-back after UNIMPLEMENTED).
    pub(super) fn usable(&self, now: Instant) -> bool {
        let mut until = self.unary_until.lock().unwrap_or_else(|e| e.into_inner());
        match *until {
            Some(at) if at > now => false,
            Some(_) => {
                *until = None;
                true
            }
            None => true,
        }
    }

    /// The scorer answered UNIMPLEMENTED (a release without `ScoreCalls`): calls are unary for
    /// [`UNARY_FALLBACK`], and then a stream must answer once again before the request stops being kept.
    pub(super) fn fall_back(&self, now: Instant) {
        tracing::warn!(
            fallback_secs = UNARY_FALLBACK.as_secs(),
            "the scorer has no ScoreCalls (an older release?): Score calls are unary for a while"
        );
        *self.unary_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(now + UNARY_FALLBACK);
        self.confirmed.store(false, Ordering::Relaxed);
    }

    /// The live stream of `slot`, or a new one.
    fn stream(&self, slot: usize, client: &GrpcClient<Channel>) -> Arc<CallStream> {
        let mut current = self.slots[slot].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stream) = current.as_ref().filter(|s| !s.is_ended()) {
            return stream.clone();
        }
        let (sender, calls) = mpsc::channel(self.queue);
        let stream = Arc::new(CallStream {
            sender,
            pending: Mutex::new(Pending::default()),
        });
        tokio::spawn(run(
            client.clone(),
            calls,
            stream.clone(),
            self.confirmed.clone(),
        ));
        *current = Some(stream.clone());
        stream
    }
}

/// Opens the stream, hands each answer to its caller, and ends the stream with the status it ended with.
async fn run(
    mut client: GrpcClient<Channel>,
    calls: mpsc::Receiver<ScoreCall>,
    stream: Arc<CallStream>,
    confirmed: Arc<AtomicBool>,
) {
    // A call whose caller gave up while it was queued (a scorer slow to read) is not sent at all: the scorer
    // would spend a Score, and record an exploration, on an answer nobody reads.
    let waiting = stream.clone();
    let calls = ReceiverStream::new(calls).filter(move |call| waiting.is_pending(call.id));
    let status = match client.score_calls(calls).await {
        Err(status) => status,
        Ok(response) => {
            let mut answers = response.into_inner();
            loop {
                match answers.message().await {
                    Ok(Some(answer)) => {
                        confirmed.store(true, Ordering::Relaxed);
                        stream.deliver(answer);
                    }
                    Ok(None) => {
                        break Status::unavailable(
                            "the scorer ended the call stream (shutting down)",
                        );
                    }
                    Err(status) => break status,
                }
            }
        }
    };
    tracing::debug!(code = ?status.code(), message = status.message(), "scorer call stream ended");
    stream.end(&status);
}
