//! The plain-HTTP admin server: `GET /metrics` (OpenMetrics text from a `prometheus_client` registry) and
//! `GET /healthz`. Kept off the service's own port so scraping never competes with TLS or gRPC traffic.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Content type of `/metrics`: the OpenMetrics text format `prometheus_client` encodes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr`, serves `/metrics` and `/healthz` in a background task until `shutdown` resolves, and returns
/// the bound address (so port 0 works). Fails only if the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| anyhow::anyhow!("admin server: bind {addr}: {err}"))?;
    let bound = listener.local_addr()?;
    let app = router(registry);
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(%err, "admin server stopped");
        }
    });
    tracing::info!(addr = %bound, "admin server (metrics) listening on {bound}");
    Ok(bound)
}

fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(registry)
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response(),
        Err(err) => {
            tracing::error!(%err, "encoding metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics encoding failed\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::EncodeLabelSet;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct ResultLabel {
        result: String,
    }

    /// A minimal HTTP/1.1 GET; returns the whole response (status line, headers, body).
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn metrics_and_healthz_are_served() {
        let mut registry = Registry::default();
        let calls = Family::<ResultLabel, Counter>::default();
        registry.register("demo_calls", "Calls by result", calls.clone());
        calls
            .get_or_create(&ResultLabel {
                result: "ok".into(),
            })
            .inc_by(3);

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::new(registry), async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        assert_ne!(addr.port(), 0);

        let response = get(addr, "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            response
                .to_ascii_lowercase()
                .contains(&format!("content-type: {METRICS_CONTENT_TYPE}")),
            "{response}"
        );
        assert!(response.contains("# TYPE demo_calls counter"), "{response}");
        assert!(
            response.contains("demo_calls_total{result=\"ok\"} 3"),
            "{response}"
        );
        assert!(response.trim_end().ends_with("# EOF"), "{response}");

        // The registry is live: later increments show on the next scrape.
        calls
            .get_or_create(&ResultLabel {
                result: "ok".into(),
            })
            .inc();
        assert!(
            get(addr, "/metrics")
                .await
                .contains("demo_calls_total{result=\"ok\"} 4")
        );

        let health = get(addr, "/healthz").await;
        assert!(
            health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
            "{health}"
        );
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));

        stop.send(()).unwrap();
    }

    #[tokio::test]
    async fn bind_failure_is_an_error() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let result = serve(addr, Arc::new(Registry::default()), std::future::pending()).await;
        assert!(result.is_err());
    }
}
