//! The gRPC client of the scorer: one long-lived, lazily connecting channel shared by every request, with a
//! per-call deadline sent as `grpc-timeout` and enforced locally too.

use std::time::Duration;

use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient as GrpcClient;
use gpu_admission_proto::scorer::v1::{
    GetPolicyRequest, GetPolicyResponse, ScoreRequest, ScoreResponse,
};
use tonic::transport::{Channel, Endpoint};

use crate::metrics::CallResult;

/// The result of one Score call, classified for pass-through decisions and metrics.
#[derive(Debug)]
pub enum ScoreCall {
    Ok(Box<ScoreResponse>),
    /// The deadline passed (locally or as reported by the server).
    Timeout,
    /// No connection, connection refused/reset, or the server is shutting down.
    Unavailable(String),
    /// The scorer answered something unusable (a protocol/decoding error, or another gRPC error).
    Invalid(String),
}

impl ScoreCall {
    pub fn result(&self) -> CallResult {
        match self {
            ScoreCall::Ok(_) => CallResult::ok,
            ScoreCall::Timeout => CallResult::timeout,
            ScoreCall::Unavailable(_) => CallResult::unavailable,
            ScoreCall::Invalid(_) => CallResult::invalid,
        }
    }
}

/// Classifies a gRPC status. Decoding garbage surfaces as `Internal`; transport failures as `Unavailable`
/// or `Unknown`.
fn classify(status: tonic::Status) -> ScoreCall {
    use tonic::Code;
    match status.code() {
        Code::DeadlineExceeded | Code::Cancelled => ScoreCall::Timeout,
        Code::Unavailable | Code::Unknown | Code::ResourceExhausted | Code::Aborted => {
            ScoreCall::Unavailable(format!("{:?}: {}", status.code(), status.message()))
        }
        code => ScoreCall::Invalid(format!("{code:?}: {}", status.message())),
    }
}

/// The smaller of the configured budget and the apiserver's own timeout minus a safety margin; never below
/// `floor` (a deadline of 0 would fail every call).
pub fn effective_deadline(
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

/// Parses the apiserver's `?timeout=` value, a Go duration such as `10s`, `500ms`, `1m30s`, `1.5s`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    (total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

/// A cheap-to-clone handle on the shared channel.
#[derive(Debug, Clone)]
pub struct Scorer {
    client: GrpcClient<Channel>,
    budget: Duration,
    margin: Duration,
}

impl Scorer {
    /// Creates the client; nothing is dialled until the first call (the scorer may start later).
    pub fn new(uri: &str, budget: Duration, margin: Duration) -> anyhow::Result<Self> {
        let endpoint = Endpoint::from_shared(uri.to_string())
            .map_err(|e| anyhow::anyhow!("invalid --scorer {uri:?}: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .http2_adaptive_window(true);
        Ok(Self {
            client: GrpcClient::new(endpoint.connect_lazy()),
            budget,
            margin,
        })
    }

    pub fn deadline(&self, apiserver_timeout: Option<Duration>) -> Duration {
        effective_deadline(self.budget, apiserver_timeout, self.margin)
    }

    /// One Score call that must be over by `deadline_at` (counted from the admission request's arrival, so
    /// the time spent decoding is part of the budget); `prepare` may add metadata (trace context).
    pub async fn score(
        &self,
        request: ScoreRequest,
        deadline_at: std::time::Instant,
        prepare: impl FnOnce(&mut tonic::metadata::MetadataMap),
    ) -> ScoreCall {
        let remaining = deadline_at.saturating_duration_since(std::time::Instant::now());
        if remaining.is_zero() {
            return ScoreCall::Timeout;
        }
        let mut req = tonic::Request::new(request);
        req.set_timeout(remaining);
        prepare(req.metadata_mut());
        let mut client = self.client.clone();
        match tokio::time::timeout_at(deadline_at.into(), client.score(req)).await {
            Err(_elapsed) => ScoreCall::Timeout,
            Ok(Ok(resp)) => ScoreCall::Ok(Box::new(resp.into_inner())),
            Ok(Err(status)) => classify(status),
        }
    }

    /// Fetches the policy in force (catalog + priority buckets), with its own timeout.
    pub async fn get_policy(&self, timeout: Duration) -> anyhow::Result<GetPolicyResponse> {
        let mut req = tonic::Request::new(GetPolicyRequest {});
        req.set_timeout(timeout);
        let mut client = self.client.clone();
        let resp = tokio::time::timeout(timeout, client.get_policy(req))
            .await
            .map_err(|_| anyhow::anyhow!("GetPolicy timed out after {timeout:?}"))??;
        Ok(resp.into_inner())
    }

    /// Asks the scorer to check a policy text (`ValidatePolicy`); loads nothing.
    pub async fn validate_policy(
        &self,
        file: &str,
        text: &str,
        timeout: Duration,
    ) -> anyhow::Result<gpu_admission_proto::scorer::v1::ValidatePolicyResponse> {
        let mut req = tonic::Request::new(gpu_admission_proto::scorer::v1::ValidatePolicyRequest {
            file: file.to_string(),
            text: text.to_string(),
        });
        req.set_timeout(timeout);
        let mut client = self.client.clone();
        let resp = tokio::time::timeout(timeout, client.validate_policy(req))
            .await
            .map_err(|_| anyhow::anyhow!("ValidatePolicy timed out after {timeout:?}"))??;
        Ok(resp.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "10", "s", "10x", "-1s", "1e400s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

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
            classify(tonic::Status::deadline_exceeded("x")).result(),
            CallResult::timeout
        );
        assert_eq!(
            classify(tonic::Status::unavailable("x")).result(),
            CallResult::unavailable
        );
        assert_eq!(
            classify(tonic::Status::internal("decode")).result(),
            CallResult::invalid
        );
    }
}
