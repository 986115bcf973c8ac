//! The HTTP side of the body budget: the middleware that opens a claim for each webhook request, the body
//! that claims its frames as they are read (and fails at the read deadline or when shed), and the wait of a
//! decoded review for its namespace's share.

use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Frame;

use super::{BODY_LIMIT_BYTES, Ledger, Origin, Refusal, ShareVerdict, Signal};
use crate::metrics::{Metrics, ShedReason};

/// The connection a request arrived on, put into its extensions by the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionOrigin(pub(crate) Origin);

/// The budget as the webhooks' routes hold it.
pub(crate) struct BodyBudget {
    ledger: Ledger,
    read_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl BodyBudget {
    pub(crate) fn new(ledger: Ledger, read_timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            ledger,
            read_timeout,
            metrics,
        }
    }
}

/// One request's claim: released when the last holder (its body, its handler) drops it.
pub(crate) struct Claim {
    budget: Arc<BodyBudget>,
    id: u64,
    signal: Arc<Signal>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.budget.ledger.release(self.id, None);
    }
}

impl Claim {
    /// Why this claim was refused, if it was.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.signal.refusal()
    }

    /// Waits until the review, of `namespace`, may be decided inside its namespace's share, at most `wait`.
    pub(crate) async fn enter(&self, namespace: &str, wait: Duration) -> Result<(), Refusal> {
        let ledger = &self.budget.ledger;
        // Inside its share at once (the common case): no timer.
        match ledger.enter(self.id, namespace, std::task::Waker::noop()) {
            ShareVerdict::Entered => return Ok(()),
            ShareVerdict::Refused(why) => return Err(why),
            ShareVerdict::Wait => {}
        }
        let entered =
            std::future::poll_fn(|cx| match ledger.enter(self.id, namespace, cx.waker()) {
                ShareVerdict::Entered => Poll::Ready(Ok(())),
                ShareVerdict::Refused(why) => Poll::Ready(Err(why)),
                ShareVerdict::Wait => Poll::Pending,
            });
        match tokio::time::timeout(wait, entered).await {
            Ok(entered) => entered,
            Err(_) => {
                ledger.release(self.id, Some(Refusal::NamespaceShare));
                Err(Refusal::NamespaceShare)
            }
        }
    }

    /// The answer to a refused request, counted and logged.
    pub(crate) fn refused_response(&self, why: Refusal, path: &str) -> Response {
        let metrics = &self.budget.metrics;
        let (status, reason, text) = match why {
            Refusal::Shed => (
                StatusCode::SERVICE_UNAVAILABLE,
                ShedReason::body_budget,
                "gpu-admission: too many large reviews in flight; retry\n",
            ),
            Refusal::ReadDeadline => (
                StatusCode::REQUEST_TIMEOUT,
                ShedReason::body_read_deadline,
                "gpu-admission: the request body did not arrive in time\n",
            ),
            Refusal::NamespaceShare => (
                StatusCode::SERVICE_UNAVAILABLE,
                ShedReason::namespace_share,
                "gpu-admission: too many reviews of this namespace in flight; retry\n",
            ),
        };
        metrics.record_shed(reason);
        tracing::warn!(
            path,
            ?reason,
            "request shed: the in-flight body budget or its namespace's share is spent"
        );
        (status, [(header::RETRY_AFTER, "1")], text).into_response()
    }
}

/// The middleware of the webhook routes: opens the request's claim (of nothing yet), hands it to the
/// handler (an extension) and to the body, which claims its frames as they are read.
pub(crate) async fn claim(
    State(budget): State<Arc<BodyBudget>>,
    mut req: Request,
    next: Next,
) -> Response {
    let origin = req
        .extensions()
        .get::<ConnectionOrigin>()
        .map(|c| c.0)
        .unwrap_or(Origin {
            peer: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            connection: u64::MAX,
        });
    let (id, signal) = budget.ledger.open(origin);
    let opened = Instant::now();
    let deadline = opened + budget.read_timeout;
    let claim = Arc::new(Claim { budget, id, signal });
    req.extensions_mut().insert(claim.clone());
    let req = req.map(|inner| {
        Body::new(ClaimedBody {
            inner,
            claim,
            read: 0,
            opened: Some(opened),
            deadline,
            timer: None,
        })
    });
    next.run(req).await
}

/// The refusal as the body's error (the handler reads the reason from its claim).
#[derive(Debug)]
pub(crate) struct BodyRefused(pub(crate) Refusal);

impl std::fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body refused: {:?}", self.0)
    }
}

impl std::error::Error for BodyRefused {}

/// A request body whose data frames are claimed as they arrive, which fails once shed or past its deadline.
struct ClaimedBody {
    inner: Body,
    claim: Arc<Claim>,
    /// Bytes read so far.
    read: usize,
    /// When the request's head arrived; taken when its body's end is counted.
    opened: Option<Instant>,
    deadline: Instant,
    /// Set the first time the body has to wait for bytes.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ClaimedBody {
    fn refuse(&self, why: Refusal) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        self.claim.budget.ledger.release(self.claim.id, Some(why));
        Poll::Ready(Some(Err(Box::new(BodyRefused(why)))))
    }
}

impl http_body::Body for ClaimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Some(why) = self.claim.refusal() {
            return self.refuse(why);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let bytes = frame.data_ref().map_or(0, |d| d.len());
                self.read += bytes;
                // Past the body limit the server's limit answers 413 at this frame: nothing to claim.
                if bytes > 0
                    && self.read <= BODY_LIMIT_BYTES
                    && let Err(why) = self.claim.budget.ledger.grow(self.claim.id, bytes)
                {
                    return self.refuse(why);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                if let Some(opened) = self.opened.take() {
                    let metrics = &self.claim.budget.metrics;
                    metrics.record_body_arrival(self.read, opened.elapsed().as_secs_f64());
                }
                Poll::Ready(None)
            }
            Poll::Ready(other) => Poll::Ready(other.map(|r| r.map_err(Into::into))),
            Poll::Pending => {
                let deadline = self.deadline;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
                if timer.as_mut().poll(cx).is_ready() {
                    return self.refuse(Refusal::ReadDeadline);
                }
                self.claim.budget.ledger.park(self.claim.id, cx.waker());
                // Shed between the first look and the parking: nobody will wake us.
                if let Some(why) = self.claim.refusal() {
                    return self.refuse(why);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
