//! The OpenTelemetry trace pipeline: OTLP/gRPC exporter, batch span processor, `tracing` bridge layer.
//!
//! The SDK itself reads the exporter variables (`OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_TIMEOUT`,
//! `_HEADERS`, `_COMPRESSION`), the sampler (`OTEL_TRACES_SAMPLER[_ARG]`), span limits and the resource
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`); this module only decides whether export is on and
//! supplies the default service name.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Directive, EnvFilter};

use crate::logging::BoxedLayer;

const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];
const PROTOCOL_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// Targets never exported as spans: the exporter's own transport stack (its spans would feed back into
/// the exporter) and the SDK's internal diagnostics.
const TRANSPORT_TARGETS: [&str; 8] = [
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
];

/// Whether and where traces are exported, decided from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExportConfig {
    /// The OTLP/gRPC endpoint (the traces-specific variable wins), for log lines only: the SDK reads it itself.
    pub endpoint: String,
}

impl TraceExportConfig {
    /// `Some` when an OTLP endpoint variable is set to a non-empty value and `OTEL_SDK_DISABLED` is not `true`.
    pub fn from_env() -> Option<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let endpoint = ENDPOINT_VARS
            .iter()
            .filter_map(|name| var(name))
            .map(|value| value.trim().to_owned())
            .find(|value| !value.is_empty())?;
        Some(Self { endpoint })
    }
}

/// Builds the tracer provider: OTLP/gRPC exporter behind the SDK's batch span processor.
///
/// The batch processor exports from its own thread; the tonic channel it uses is created here, on the
/// caller's Tokio runtime, which drives its I/O. The exporter's timeout bounds each export and the
/// processor's shutdown timeout bounds the final flush, so a hung collector never blocks shutdown for long.
pub(crate) fn build_tracer_provider(
    service_name: &'static str,
    config: &TraceExportConfig,
) -> anyhow::Result<SdkTracerProvider> {
    for name in PROTOCOL_VARS {
        if let Ok(protocol) = std::env::var(name)
            && !protocol.trim().is_empty()
            && protocol.trim() != "grpc"
        {
            anyhow::bail!("{name}={protocol:?}: only OTLP over gRPC (`grpc`) is supported");
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|err| anyhow::anyhow!("OTLP span exporter for {}: {err}", config.endpoint))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource(service_name))
        .build())
}

/// The SDK's default resource (env detectors), with `service_name` unless the environment names the service.
fn resource(service_name: &'static str) -> Resource {
    let detected = Resource::builder().build();
    let named_by_env = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named_by_env {
        detected
    } else {
        Resource::builder().with_service_name(service_name).build()
    }
}

/// The `tracing` → OpenTelemetry bridge layer with its own filter: `info` and above from every target
/// except [`TRANSPORT_TARGETS`], independent of `RUST_LOG`. `TRACES_FILTER` (EnvFilter syntax) overrides it.
pub(crate) fn layer(provider: &SdkTracerProvider) -> BoxedLayer {
    let tracer = provider.tracer("gpu-admission");
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_filter(traces_filter(
            std::env::var("TRACES_FILTER").ok().as_deref(),
        ))
        .boxed()
}

fn traces_filter(user: Option<&str>) -> EnvFilter {
    let user = user.unwrap_or("").trim();
    let mut filter = EnvFilter::builder()
        .with_default_directive(tracing::level_filters::LevelFilter::INFO.into())
        .parse_lossy(user);
    for target in TRANSPORT_TARGETS {
        let named_by_user = user
            .split(',')
            .any(|directive| directive.trim().split(['=', '[']).next() == Some(target));
        if !named_by_user && let Ok(directive) = format!("{target}=off").parse::<Directive>() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn export_off_without_endpoint() {
        assert_eq!(TraceExportConfig::from_lookup(lookup(&[])), None);
        assert_eq!(
            TraceExportConfig::from_lookup(lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            None
        );
    }

    #[test]
    fn traces_endpoint_wins_over_generic_one() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ];
        let config = TraceExportConfig::from_lookup(lookup(&vars)).unwrap();
        assert_eq!(config.endpoint, "http://traces:4317");
        let generic_only = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317")];
        let config = TraceExportConfig::from_lookup(lookup(&generic_only)).unwrap();
        assert_eq!(config.endpoint, "http://generic:4317");
    }

    #[test]
    fn sdk_disabled_turns_export_off() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ];
        assert_eq!(TraceExportConfig::from_lookup(lookup(&vars)), None);
    }

    #[test]
    fn transport_targets_are_off_unless_named() {
        let default = traces_filter(None).to_string();
        assert!(
            default.contains("h2=off") && default.contains("tonic=off"),
            "{default}"
        );
        let user = traces_filter(Some("debug,tonic=info")).to_string();
        assert!(
            user.contains("tonic=info") && !user.contains("tonic=off"),
            "{user}"
        );
        assert!(user.contains("hyper=off"), "{user}");
    }
}
