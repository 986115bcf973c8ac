//! A global budget of request-body bytes in flight, so that a flood of large reviews is shed instead of
//! growing the frontend to its memory limit (an OOM kill is a window in which every `failurePolicy: Ignore`
//! webhook admits unchecked).
//!
//! A request claims its `Content-Length` (the whole body limit when it has none: a chunked or streamed
//! body may be that large) before its body is read, and holds the claim until its answer is written. A
//! claim the budget cannot cover at once is answered `503 Service Unavailable` with `Retry-After: 1`, counted
//! (`gpu_admission_requests_shed_total{reason="body_budget"}`) and logged; the apiserver retries or applies
//! the webhook's failure policy. Reviews are KiB-sized: only reviews of megabytes ever meet the budget.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::metrics::{Metrics, ShedReason};

/// Largest AdmissionReview body accepted (the server's body limit, and the most one request claims here):
/// every review the apiserver can send. etcd stores objects up to 1.5 MiB (`--max-request-bytes`); the
/// apiserver's JSON escapes `<`, `>` and `&` as `\u003c` (six bytes for one), so one object can reach 9 MiB
/// in a review, and an UPDATE carries `oldObject` too: 18 MiB, plus the envelope. A body refused by the
/// server would make the apiserver fail open (`failurePolicy: Ignore`) or shut (`Fail`): either way our
/// answer would not count, so the limit is above what can be sent, and the connection cap bounds the memory.
pub(crate) const BODY_LIMIT_BYTES: usize = 24 * 1024 * 1024;

/// The bytes of request bodies the frontend holds at once.
pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl BodyBudget {
    /// `total` bytes, at least one maximum-size body (so that any single review can be answered).
    pub(crate) fn new(total: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(total.max(BODY_LIMIT_BYTES))),
            metrics,
        }
    }
}

/// What a request claims: nothing for a body-less method, its `Content-Length` (capped at the body limit,
/// beyond which it is refused with 413 anyway), else the whole limit.
fn claim(req: &Request) -> u32 {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return 0;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let bytes = declared.unwrap_or(BODY_LIMIT_BYTES).min(BODY_LIMIT_BYTES);
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// The middleware: claim, run the request, release; or shed at once.
pub(crate) async fn hold(
    State(budget): State<Arc<BodyBudget>>,
    req: Request,
    next: Next,
) -> Response {
    let wanted = claim(&req);
    if wanted == 0 {
        return next.run(req).await;
    }
    match budget.bytes.clone().try_acquire_many_owned(wanted) {
        Ok(held) => {
            let response = next.run(req).await;
            drop(held);
            response
        }
        Err(_) => {
            budget.metrics.record_shed(ShedReason::body_budget);
            tracing::warn!(
                path = req.uri().path(),
                claimed_bytes = wanted,
                available_bytes = budget.bytes.available_permits(),
                "request shed: the in-flight body budget is spent"
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "gpu-admission: too many large reviews in flight; retry\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn post(len: Option<usize>) -> Request {
        let mut b = Request::builder().method(Method::POST).uri("/mutate-pod");
        if let Some(len) = len {
            b = b.header(header::CONTENT_LENGTH, len);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn a_request_claims_its_declared_length_or_the_whole_limit() {
        assert_eq!(claim(&post(Some(4096))), 4096);
        assert_eq!(claim(&post(None)), BODY_LIMIT_BYTES as u32);
        assert_eq!(
            claim(&post(Some(BODY_LIMIT_BYTES * 4))),
            BODY_LIMIT_BYTES as u32
        );
        let get = Request::builder()
            .uri("/readyz")
            .body(Body::empty())
            .unwrap();
        assert_eq!(claim(&get), 0);
    }
}
