//! Logging, OpenTelemetry tracing and Prometheus metrics set-up shared by the scorer and the webhook frontend.
//!
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

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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
