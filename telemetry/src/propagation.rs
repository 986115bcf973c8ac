//! W3C Trace Context (`traceparent`, `tracestate`) across process boundaries.
//!
//! Uses the global text-map propagator that [`crate::init`] installs when trace export is on; with export
//! off every function here is a no-op. The server-side functions must be called right after the span is
//! created and before it is first entered: once entered, its OpenTelemetry parent is fixed.

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt as _;
use tonic::metadata::{KeyRef, MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Client side: writes `span`'s context into outgoing gRPC request metadata.
pub fn inject_into_grpc(span: &tracing::Span, metadata: &mut MetadataMap) {
    inject(span, &mut MetadataInjector(metadata));
}

/// Server side: makes `span` a child of the context carried in incoming gRPC metadata, if any.
pub fn set_parent_from_grpc(span: &tracing::Span, metadata: &MetadataMap) {
    set_parent(span, &MetadataExtractor(metadata));
}

/// Client side: writes `span`'s context into a message's map (a call on a long-lived stream has no metadata
/// of its own).
pub fn inject_into_map(span: &tracing::Span, map: &mut std::collections::HashMap<String, String>) {
    inject(span, map);
}

fn inject(span: &tracing::Span, carrier: &mut dyn Injector) {
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&cx, carrier);
    });
}

/// Server side: makes `span` a child of the context carried in a message's map, if any.
pub fn set_parent_from_map(span: &tracing::Span, map: &std::collections::HashMap<String, String>) {
    if !map.is_empty() {
        set_parent(span, map);
    }
}

/// Server side: makes `span` a child of the context carried in incoming HTTP headers, if any.
pub fn set_parent_from_http(span: &tracing::Span, headers: &http::HeaderMap) {
    set_parent(span, &HeaderExtractor(headers));
}

/// Applies an extracted remote context only when it is valid, so a request without (or with a malformed)
/// `traceparent` keeps the span's local parent instead of being forced to a new root.
fn set_parent(span: &tracing::Span, carrier: &dyn Extractor) {
    let cx =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(carrier));
    if cx.span().span_context().is_valid() {
        // Errors mean export is off (no OTel layer), the span is disabled or already started: nothing to link.
        if let Err(err) = span.set_parent(cx) {
            tracing::trace!(%err, "trace context not applied to span");
        }
    }
}

/// Writes propagation fields into tonic metadata (ASCII values only; invalid ones are skipped).
struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct MetadataExtractor<'a>(&'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                KeyRef::Ascii(key) => Some(key.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceId};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt as _;

    /// A subscriber built like `init`'s (log + OTel layers in a Vec, each behind its own filter), exporting
    /// to memory.
    fn otel_subscriber() -> (
        impl tracing::Subscriber + Send + Sync,
        InMemorySpanExporter,
        SdkTracerProvider,
    ) {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layers = vec![
            crate::logging::layer().unwrap(),
            crate::otel::layer(&provider),
        ];
        (
            tracing_subscriber::registry().with(layers),
            exporter,
            provider,
        )
    }

    fn ids(span: &tracing::Span) -> (TraceId, SpanId) {
        let cx = span.context();
        let span_ref = cx.span();
        let sc = span_ref.span_context();
        (sc.trace_id(), sc.span_id())
    }

    #[test]
    fn grpc_round_trip_keeps_trace_and_links_parent() {
        let (subscriber, exporter, provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            let client = tracing::info_span!("client.call");
            let mut metadata = MetadataMap::new();
            inject_into_grpc(&client, &mut metadata);
            let (client_trace, client_span) = ids(&client);
            assert_ne!(client_trace, TraceId::INVALID);
            let traceparent = metadata
                .get("traceparent")
                .expect("traceparent injected")
                .to_str()
                .unwrap();
            assert_eq!(traceparent, format!("00-{client_trace}-{client_span}-01"));

            // The server span lives elsewhere: no local parent, only the metadata links it.
            let server = tracing::info_span!(parent: None, "Score");
            set_parent_from_grpc(&server, &metadata);
            let (server_trace, server_span) = ids(&server);
            assert_eq!(server_trace, client_trace);
            assert_ne!(server_span, client_span);
            drop(server);
            drop(client);
        });
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let client = spans
            .iter()
            .find(|s| s.name == "client.call")
            .expect("client span exported");
        let server = spans
            .iter()
            .find(|s| s.name == "Score")
            .expect("server span exported");
        assert_eq!(
            server.span_context.trace_id(),
            client.span_context.trace_id()
        );
        assert_eq!(server.parent_span_id, client.span_context.span_id());
        assert!(server.parent_span_is_remote);
    }

    #[test]
    fn map_round_trip_links_parent() {
        let (subscriber, exporter, provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            let client = tracing::info_span!("client.call");
            let mut map = std::collections::HashMap::new();
            inject_into_map(&client, &mut map);
            let (client_trace, client_span) = ids(&client);
            assert_eq!(
                map.get("traceparent").map(String::as_str),
                Some(format!("00-{client_trace}-{client_span}-01").as_str())
            );
            let server = tracing::info_span!(parent: None, "Score");
            set_parent_from_map(&server, &map);
            assert_eq!(ids(&server).0, client_trace);
            drop(server);
            drop(client);
        });
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let client = spans.iter().find(|s| s.name == "client.call").unwrap();
        let server = spans.iter().find(|s| s.name == "Score").unwrap();
        assert_eq!(server.parent_span_id, client.span_context.span_id());
        assert!(server.parent_span_is_remote);
    }

    #[test]
    fn http_traceparent_is_continued() {
        let (subscriber, exporter, provider) = otel_subscriber();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("admission");
            set_parent_from_http(&span, &headers);
            let (trace, _) = ids(&span);
            assert_eq!(trace.to_string(), "0af7651916cd43dd8448eb211c80319c");
        });
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let admission = spans
            .iter()
            .find(|s| s.name == "admission")
            .expect("admission span exported");
        assert_eq!(admission.parent_span_id.to_string(), "b7ad6b7169203331");
    }

    #[test]
    fn missing_or_malformed_context_keeps_local_parent() {
        let (subscriber, _exporter, _provider) = otel_subscriber();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static("00-garbage-01"),
        );
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer");
            let _entered = outer.enter();
            let inner = tracing::info_span!("inner");
            set_parent_from_http(&inner, &headers);
            set_parent_from_grpc(&inner, &MetadataMap::new());
            assert_eq!(ids(&inner).0, ids(&outer).0);
        });
    }

    #[test]
    fn without_otel_layer_nothing_is_injected() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("client.call");
            let mut metadata = MetadataMap::new();
            inject_into_grpc(&span, &mut metadata);
            assert!(metadata.get("traceparent").is_none());
        });
    }
}
