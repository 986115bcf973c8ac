//! The log output: an `EnvFilter` from `RUST_LOG` and a text or JSON formatter on stderr.

use std::io::IsTerminal;

use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::{Layer, Registry};

/// The target of the spans opened for every request (admission, decode, patch, scorer call, Score): they are
/// exported as traces but never formatted into log lines, because formatting their fields into every request's
/// span (which the log layer does eagerly, whether a line is logged or not) cost more than deciding the Pod.
/// The log lines inside a request name its uid themselves.
pub const REQUEST_SPANS: &str = "gpu_admission::request";

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
/// The filter applies to this layer only, so quieting logs never removes spans from exported traces; the
/// [`REQUEST_SPANS`] are left to the trace layer.
pub(crate) fn layer() -> anyhow::Result<BoxedLayer> {
    Ok(layer_to(
        LogFormat::from_env()?,
        std::io::stderr,
        std::io::stderr().is_terminal(),
    ))
}

/// The log layer in `format`, written to `writer` (colours only when `ansi`).
fn layer_to<W>(format: LogFormat, writer: W, ansi: bool) -> BoxedLayer
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let not_a_request_span = filter_fn(|meta| !(meta.is_span() && meta.target() == REQUEST_SPANS));
    let filter = EnvFilter::builder()
        .with_default_directive(tracing::level_filters::LevelFilter::INFO.into())
        .from_env_lossy()
        .and(not_a_request_span);
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            // Colours only on a terminal: piped logs (kubectl logs, files, tests) stay plain text.
            .with_ansi(ansi)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::{LogFormat, REQUEST_SPANS, layer_to};

    /// The log lines, kept in memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the log layer writes for an event inside a request span inside another span.
    fn logged(format: LogFormat) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber =
            tracing_subscriber::registry().with(layer_to(format, move || writer.clone(), false));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer", tenant = "ml");
            let request = tracing::info_span!(target: REQUEST_SPANS, "admission", uid = "u-1");
            outer.in_scope(|| request.in_scope(|| tracing::info!(uid = "u-1", "decided")));
        });
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn request_spans_are_not_formatted_into_log_lines() {
        let text = logged(LogFormat::Text);
        assert!(
            text.contains("decided") && text.contains("uid=\"u-1\""),
            "{text}"
        );
        assert!(text.contains("outer{tenant=\"ml\"}"), "{text}");
        assert!(!text.contains("admission{"), "{text}");
        let json = logged(LogFormat::Json);
        assert!(json.contains("\"message\":\"decided\""), "{json}");
        assert!(json.contains("\"name\":\"outer\""), "{json}");
        assert!(!json.contains("\"admission\""), "{json}");
    }

    #[test]
    fn log_format_values() {
        assert_eq!(LogFormat::parse("json").unwrap(), LogFormat::Json);
        assert_eq!(LogFormat::parse(" JSON ").unwrap(), LogFormat::Json);
        assert_eq!(LogFormat::parse("text").unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse("").unwrap(), LogFormat::Text);
        assert!(LogFormat::parse("xml").is_err());
    }
}
