//! The log output: an `EnvFilter` from `RUST_LOG` and a text or JSON formatter on stderr.

use std::io::IsTerminal;

use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::{Layer, Registry};

/// Boxed so the text and JSON formatters share one type.
pub(crate) type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync + 'static>;

/// Output format of the log lines, from `LOG_FORMAT` (`json` or `text`, the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    fn from_env() -> anyhow::Result<Self> {
        match std::env::var("LOG_FORMAT") {
            Err(_) => Ok(Self::Text),
            Ok(value) => Self::parse(&value),
        }
    }

    fn parse(value: &str) -> anyhow::Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "text" | "plain" | "pretty" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => anyhow::bail!("LOG_FORMAT={other:?}: expected `json` or `text`"),
        }
    }
}

/// The stderr log layer, filtered by `RUST_LOG` (default `info`; invalid directives are reported and skipped).
///
/// The filter applies to this layer only, so quieting logs never removes spans from exported traces.
pub(crate) fn layer() -> anyhow::Result<BoxedLayer> {
    let filter = EnvFilter::builder()
        .with_default_directive(tracing::level_filters::LevelFilter::INFO.into())
        .from_env_lossy();
    let layer = match LogFormat::from_env()? {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            // Colours only on a terminal: piped logs (kubectl logs, files, tests) stay plain text.
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::LogFormat;

    #[test]
    fn log_format_values() {
        assert_eq!(LogFormat::parse("json").unwrap(), LogFormat::Json);
        assert_eq!(LogFormat::parse(" JSON ").unwrap(), LogFormat::Json);
        assert_eq!(LogFormat::parse("text").unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse("").unwrap(), LogFormat::Text);
        assert!(LogFormat::parse("xml").is_err());
    }
}
