//! The one admission pipeline every webhook runs through: a span (joined to the caller's trace), decode once,
//! the 400 answer for a body that is no AdmissionReview, the webhook's own decision, the outcome recorded in
//! the span and the metrics, encode once. A webhook plugs in through [`Webhook`]; its handler is
//! [`handle::<W>`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use gpu_admission_core::review::{
    self, Answer, BadRequest, Content, Incoming, IncomingObject, Verdict,
};
use gpu_admission_policy::EnforcementMode;
use gpu_admission_telemetry::REQUEST_SPANS;
use tracing::{Instrument, field::Empty};

use gpu_admission_core::review::parse_go_duration;

use crate::body_budget::body::Claim;
use crate::metrics::Metrics;

/// What every decoded review tells the pipeline: the version to answer with and the uid to echo.
pub(crate) trait Envelope {
    fn api_version(&self) -> &'static str;
    fn uid(&self) -> &str;
    /// The requesting namespace (`request.namespace`; empty for cluster-scoped objects and unreadable
    /// requests): whose share of the frontend the review is decided in.
    fn namespace(&self) -> &str;
}

impl Envelope for Incoming {
    fn api_version(&self) -> &'static str {
        self.api_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn namespace(&self) -> &str {
        match &self.content {
            Content::Pod(request) => request.namespace.as_deref().unwrap_or_default(),
            Content::OtherKind { .. } | Content::Unreadable(_) => "",
        }
    }
}

impl Envelope for IncomingObject {
    fn api_version(&self) -> &'static str {
        self.api_version
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn namespace(&self) -> &str {
        match &self.request {
            Ok(request) => request.namespace.as_deref().unwrap_or_default(),
            Err(_) => "",
        }
    }
}

/// The request beyond its body.
pub(crate) struct Call {
    /// When the request arrived: every budget counts from here.
    pub(crate) started: Instant,
    /// The apiserver's `?timeout=10s`.
    pub(crate) apiserver_timeout: Option<Duration>,
    /// The request's span, for the webhook to record what it found.
    pub(crate) span: tracing::Span,
}

/// A webhook's answer.
pub(crate) enum Body {
    /// Allowed, with a patch or not (mutating webhooks).
    Answer(Answer),
    /// Allowed or denied (validating webhooks).
    Verdict(Verdict),
}

/// What a webhook decided, and how to count it.
pub(crate) struct Reply {
    /// The metric's `outcome` label.
    pub(crate) outcome: &'static str,
    /// `CREATE`, `UPDATE`, … or `unknown` when the review could not be read.
    pub(crate) operation: &'static str,
    pub(crate) body: Body,
}

/// One admission webhook: how its body is decoded, what it decides, how it is counted.
pub(crate) trait Webhook: Send + Sync + 'static {
    /// Its path without the slash (`mutate-pod`): the span's `admission.webhook` and the log's name.
    const NAME: &'static str;
    type Review: Envelope + Send + Sync;

    fn decode(body: &[u8]) -> Result<Self::Review, BadRequest>;

    fn admit(&self, review: &Self::Review, call: &Call) -> impl Future<Output = Reply> + Send;

    /// Where the pipeline records every answered request (`gpu_admission_admissions_total`).
    fn metrics(&self) -> &Metrics;
}

/// Counts one answered request (`bad_request` for a 400) in the one family.
fn record<W: Webhook>(
    webhook: &W,
    operation: &'static str,
    outcome: &'static str,
    elapsed: Duration,
) {
    webhook
        .metrics()
        .record_admission(W::NAME, operation, outcome, elapsed);
}

/// The axum handler of webhook `W`.
pub(crate) async fn handle<W: Webhook>(
    State(webhook): State<Arc<W>>,
    uri: Uri,
    headers: HeaderMap,
    claim: Option<Extension<Arc<Claim>>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let claim = claim.map(|Extension(claim)| claim);
    let span = tracing::info_span!(
        target: REQUEST_SPANS,
        "admission",
        otel.kind = "server",
        admission.webhook = W::NAME,
        admission.uid = Empty,
        k8s.namespace.name = Empty,
        k8s.pod.name = Empty,
        admission.outcome = Empty,
        admission.reason = Empty,
        admission.fallback = Empty,
        tenant.tier = Empty,
        gpu.class = Empty,
        priority.score = Empty,
    );
    gpu_admission_telemetry::propagation::set_parent_from_http(&span, &headers);
    let call = Call {
        started: Instant::now(),
        apiserver_timeout: apiserver_timeout(&uri),
        span: span.clone(),
    };
    let body = match body {
        Ok(body) => body,
        // Over the body limit (413), or the body could not be read: answered by axum, logged and counted here.
        Err(rejection) => {
            // Shed for the body budget, or past the read deadline: answered and counted by the budget.
            if let Some(why) = claim.as_ref().and_then(|c| c.refusal()) {
                record(&*webhook, "unknown", "shed", call.started.elapsed());
                let claim = claim.expect("refused above");
                return claim.refused_response(why, uri.path());
            }
            let status = rejection.status();
            let outcome = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "body_too_large"
            } else {
                "bad_request"
            };
            span.in_scope(|| {
                call.span.record("admission.outcome", outcome);
                tracing::warn!(webhook = W::NAME, status = status.as_u16(), error = %rejection.body_text(), "refusing a request body");
            });
            record(&*webhook, "unknown", outcome, call.started.elapsed());
            return rejection.into_response();
        }
    };
    run(&*webhook, &body, claim.as_deref(), call)
        .instrument(span)
        .await
}

/// Until when a reservation may keep trying a contended quota ledger: three quarters of the apiserver's
/// timeout (10 s unless it says) from the request's arrival, so that the refusal still reaches it in time.
pub(crate) fn reservation_deadline(call: &Call) -> Instant {
    call.started + call.apiserver_timeout.unwrap_or(Duration::from_secs(10)) * 3 / 4
}

/// How long a decoded review may wait for its namespace's share: half the apiserver's timeout (10 s unless
/// it says), so that a shed answer still reaches it in time.
fn share_wait(call: &Call) -> Duration {
    call.apiserver_timeout.unwrap_or(Duration::from_secs(10)) / 2
}

async fn run<W: Webhook>(webhook: &W, body: &[u8], claim: Option<&Claim>, call: Call) -> Response {
    let decoded = tracing::info_span!(target: REQUEST_SPANS, "decode").in_scope(|| W::decode(body));
    let review = match decoded {
        Ok(review) => review,
        Err(bad) => {
            call.span.record("admission.outcome", "bad_request");
            call.span.record("admission.reason", bad.0.as_str());
            tracing::info!(webhook = W::NAME, error = %bad, "rejecting a body that is not an AdmissionReview");
            record(webhook, "unknown", "bad_request", call.started.elapsed());
            return (StatusCode::BAD_REQUEST, format!("bad request: {bad}\n")).into_response();
        }
    };
    call.span.record("admission.uid", review.uid());
    if let Some(claim) = claim
        && let Err(why) = claim.enter(review.namespace(), share_wait(&call)).await
    {
        call.span.record("admission.outcome", "shed");
        record(webhook, "unknown", "shed", call.started.elapsed());
        return claim.refused_response(why, W::NAME);
    }
    // On the heap: the decision's future is large (SubjectAccessReviews, the scorer's call, the namespace
    // lock), and every future that holds it by value is moved (copied) when it is created and instrumented.
    let reply = Box::pin(webhook.admit(&review, &call)).await;
    call.span.record("admission.outcome", reply.outcome);
    let encoded = match &reply.body {
        Body::Answer(answer) => review::encode(review.api_version(), review.uid(), answer),
        Body::Verdict(verdict) => {
            review::encode_verdict(review.api_version(), review.uid(), verdict)
        }
    };
    record(
        webhook,
        reply.operation,
        reply.outcome,
        call.started.elapsed(),
    );
    ([(header::CONTENT_TYPE, "application/json")], encoded).into_response()
}

/// A validating webhook's answer to a review it could not read ([`review::unreadable_verdict`]), logged and
/// counted (`unreadable`).
pub(crate) fn not_validated(
    webhook: &str,
    uid: &str,
    why: &str,
    what: &str,
    mode: EnforcementMode,
) -> Reply {
    let verdict = review::unreadable_verdict(why, what, mode);
    let denied = verdict.denied.is_some();
    tracing::warn!(webhook, uid, %why, denied, "unreadable review");
    Reply {
        outcome: "unreadable",
        operation: "unknown",
        body: Body::Verdict(verdict),
    }
}

/// The apiserver's `?timeout=10s` query parameter.
fn apiserver_timeout(uri: &Uri) -> Option<Duration> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(parse_go_duration)
}

/// The operation of a request as the metrics spell it.
pub(crate) fn operation_label(op: &kube::core::admission::Operation) -> &'static str {
    use kube::core::admission::Operation;
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_keeps_trying_for_three_quarters_of_the_apiservers_timeout() {
        let call = |timeout| Call {
            started: Instant::now(),
            apiserver_timeout: timeout,
            span: tracing::Span::none(),
        };
        let two = call(Some(Duration::from_secs(2)));
        assert_eq!(
            reservation_deadline(&two) - two.started,
            Duration::from_millis(1500)
        );
        let unsaid = call(None);
        assert_eq!(
            reservation_deadline(&unsaid) - unsaid.started,
            Duration::from_millis(7500)
        );
    }

    #[test]
    fn timeout_query_parameter() {
        let uri: Uri = "/mutate-pod?timeout=10s".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), Some(Duration::from_secs(10)));
        let uri: Uri = "/mutate-pod?x=1&timeout=250ms".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), Some(Duration::from_millis(250)));
        let uri: Uri = "/mutate-pod?timeout=soon".parse().unwrap();
        assert_eq!(apiserver_timeout(&uri), None);
        assert_eq!(apiserver_timeout(&"/mutate-pod".parse().unwrap()), None);
    }
}
