//! Logging, OpenTelemetry tracing, Prometheus metrics and process start-up shared by the scorer, the webhook
//! frontend and the observer.
//!
//! - [`runtime::Service`]: what every binary's `main` does: the Tokio runtime, [`init`], the exit code.
//! - [`shutdown::Shutdown`]: SIGTERM/SIGINT as one future every server of the binary waits on.
//! - [`init`]: installs the global `tracing` subscriber (logs to stderr; OTLP/gRPC trace export when an
//!   `OTEL_EXPORTER_OTLP_*ENDPOINT` is set) and returns a [`TelemetryGuard`] that flushes spans on drop.
//! - [`propagation`]: W3C `traceparent`/`tracestate` in and out of gRPC metadata and HTTP headers.
//! - [`admin`]: the plain-HTTP admin server with `/metrics` and `/healthz`.
//!
//! Environment variables are documented in the crate README.

pub mod admin;
mod logging;
mod otel;
pub mod propagation;
pub mod runtime;
pub mod shutdown;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use logging::REQUEST_SPANS;
pub use otel::TraceExportConfig;

/// Keeps the trace pipeline alive; dropping it flushes pending spans and shuts the tracer provider down.
///
/// Hold it in `main` for the life of the process (`let _telemetry = init("scorer")?;`). Dropping it
/// blocks for at most the SDK's shutdown timeout (5 s) while the batch processor exports what is left.
#[must_use = "dropping the guard shuts trace export down immediately"]
#[derive(Debug)]
pub struct TelemetryGuard {
    tracer_provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether spans are exported over OTLP (an endpoint was configured).
    pub fn traces_exported(&self) -> bool {
        self.tracer_provider.is_some()
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.tracer_provider.take() {
            // shutdown() flushes the batch span processor first; errors are only reportable on stderr now.
            if let Err(err) = provider.shutdown() {
                eprintln!("telemetry: trace provider shutdown: {err}");
            }
        }
    }
}

/// Installs the process-wide tracing subscriber.
///
/// - Logs: level filter from `RUST_LOG` (default `info`), JSON lines when `LOG_FORMAT=json`, else text; stderr.
/// - Traces: when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and
///   `OTEL_SDK_DISABLED` is not `true`), spans are exported over OTLP/gRPC through a batch span processor and
///   the W3C TraceContext propagator is installed globally. The service name is `OTEL_SERVICE_NAME` (or
///   `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), else `service_name`. Sampling follows
///   `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG` (read by the SDK; default `parentbased_always_on`).
///
/// Must be called from within a Tokio runtime when trace export is on (the gRPC channel is spawned on it).
/// Fails if a global subscriber is already installed or the exporter cannot be built.
pub fn init(service_name: &'static str) -> anyhow::Result<TelemetryGuard> {
    let export = TraceExportConfig::from_env();
    let tracer_provider = match &export {
        Some(config) => Some(otel::build_tracer_provider(service_name, config)?),
        None => None,
    };
    let mut layers = vec![logging::layer()?];
    layers.extend(tracer_provider.as_ref().map(otel::layer));
    tracing_subscriber::registry().with(layers).try_init()?;

    if let Some(provider) = &tracer_provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
    }
    match &export {
        Some(config) => tracing::info!(
            service = service_name,
            endpoint = %config.endpoint,
            "telemetry: exporting traces over OTLP/gRPC"
        ),
        None => tracing::debug!(
            service = service_name,
            "telemetry: trace export off (no OTLP endpoint)"
        ),
    }
    Ok(TelemetryGuard { tracer_provider })
}

#[cfg(test)]
mod tests {
    //! `init` end to end: the test binary re-runs itself as a child process (which installs the global
    //! subscriber, emits spans and drops the guard) and receives its spans over OTLP/gRPC.

    use crate::testing::{TraceReceiver, summary};

    /// The child: what a binary's `main` does.
    #[test]
    #[ignore = "child process of init_exports_and_flushes_on_drop"]
    fn init_child() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let guard = crate::init("telemetry-selftest").unwrap();
            let outer =
                tracing::info_span!("outer", k8s.namespace.name = "ml", priority.score = 93_i64);
            let inner = tracing::info_span!(parent: &outer, "inner");
            inner.in_scope(|| tracing::info!(answer = 42, "inside"));
            // Dependency noise must not become spans.
            tracing::info_span!(target: "h2::proto", "h2_internal").in_scope(|| {});
            drop(inner);
            drop(outer);
            eprintln!("traces exported: {}", guard.traces_exported());
            drop(guard);
        });
    }

    async fn run_child(envs: &[(&str, &str)]) -> String {
        let output = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::init_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_TRACES_SAMPLER")
            .env_remove("RUST_LOG")
            .envs(envs.iter().copied())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.success(),
            "child failed: {stderr}\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        stderr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn init_exports_and_flushes_on_drop() {
        let receiver = TraceReceiver::start().await.unwrap();
        let endpoint = receiver.endpoint();
        let stderr = run_child(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("LOG_FORMAT", "json"),
        ])
        .await;
        assert!(stderr.contains("traces exported: true"), "{stderr}");
        // JSON log lines on stderr.
        let inside = stderr
            .lines()
            .find(|l| l.contains("inside"))
            .expect("event logged");
        assert!(
            inside.starts_with('{') && inside.contains(r#""message":"inside""#),
            "{inside}"
        );

        // The child has exited: everything it exported arrived during the guard's shutdown flush (the batch
        // processor's schedule is 5 s), so no waiting here.
        let spans = receiver.spans();
        let all = summary(&spans);
        let outer = spans
            .iter()
            .find(|s| s.name == "outer")
            .unwrap_or_else(|| panic!("no outer span:\n{all}"));
        let inner = spans
            .iter()
            .find(|s| s.name == "inner")
            .unwrap_or_else(|| panic!("no inner span:\n{all}"));
        assert_eq!(outer.service_name, "telemetry-selftest");
        assert_eq!(inner.trace_id, outer.trace_id);
        assert_eq!(inner.parent_span_id, outer.span_id);
        assert!(outer.parent_span_id.is_empty(), "{all}");
        assert_eq!(outer.attr_text("k8s.namespace.name").as_deref(), Some("ml"));
        assert_eq!(outer.attr_i64("priority.score"), Some(93));
        assert!(
            !spans.iter().any(|s| s.name == "h2_internal"),
            "transport spans exported:\n{all}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_name_and_sampler_come_from_the_environment() {
        let receiver = TraceReceiver::start().await.unwrap();
        let endpoint = receiver.endpoint();
        run_child(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "renamed"),
        ])
        .await;
        let spans = receiver.spans();
        assert!(
            !spans.is_empty() && spans.iter().all(|s| s.service_name == "renamed"),
            "{}",
            summary(&spans)
        );

        let silent = TraceReceiver::start().await.unwrap();
        let endpoint = silent.endpoint();
        run_child(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_TRACES_SAMPLER", "always_off"),
        ])
        .await;
        assert!(silent.spans().is_empty(), "{}", summary(&silent.spans()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_endpoint_means_no_export() {
        let stderr = run_child(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]).await;
        assert!(stderr.contains("traces exported: false"), "{stderr}");
        // Text format by default.
        let inside = stderr
            .lines()
            .find(|l| l.contains("inside"))
            .expect("event logged");
        assert!(
            !inside.starts_with('{') && inside.contains("INFO"),
            "{inside}"
        );
    }
}
