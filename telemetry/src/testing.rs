//! Test support (feature `test-support`): an in-process OTLP/gRPC trace receiver that stands in for an
//! OpenTelemetry collector or Jaeger, so tests can assert on the spans real processes export.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use gpu_admission_telemetry::testing::TraceReceiver;
//! let receiver = TraceReceiver::start().await?;
//! // start a process with OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint() ...
//! let spans = receiver
//!     .wait_for(std::time::Duration::from_secs(20), |spans| spans.iter().any(|s| s.name == "admission"))
//!     .await?;
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};

/// One exported span, flattened with its resource's `service.name`. Ids are lowercase hex; a root span has
/// an empty `parent_span_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    pub service_name: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// OTLP `SpanKind` as its numeric value (1 internal, 2 server, 3 client).
    pub kind: i32,
    pub attributes: Vec<KeyValue>,
}

impl ReceivedSpan {
    /// The attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    /// The attribute `key` rendered as text (strings as-is, numbers and booleans in decimal/`true`).
    pub fn attr_text(&self, key: &str) -> Option<String> {
        self.attr(key).map(render)
    }

    /// The attribute `key` as an integer (an int attribute, or a string holding one).
    pub fn attr_i64(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            Value::IntValue(i) => Some(*i),
            Value::StringValue(s) => s.parse().ok(),
            _ => None,
        }
    }
}

fn render(value: &Value) -> String {
    match value {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        Value::IntValue(i) => i.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        Value::BytesValue(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        Value::ArrayValue(a) => {
            let items: Vec<String> = a
                .values
                .iter()
                .filter_map(|v| v.value.as_ref())
                .map(render)
                .collect();
            format!("[{}]", items.join(","))
        }
        Value::StringValueStrindex(index) => format!("strindex:{index}"),
        Value::KvlistValue(kv) => {
            let items: Vec<String> = kv
                .values
                .iter()
                .map(|kv| {
                    format!(
                        "{}={}",
                        kv.key,
                        kv.value
                            .as_ref()
                            .and_then(|v| v.value.as_ref())
                            .map(render)
                            .unwrap_or_default()
                    )
                })
                .collect();
            format!("{{{}}}", items.join(","))
        }
    }
}

#[derive(Default)]
struct Store {
    spans: Mutex<Vec<ReceivedSpan>>,
    changed: tokio::sync::Notify,
}

struct Collector(Arc<Store>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service_name = resource_spans
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v: &AnyValue| v.value.as_ref())
                .map(render)
                .unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                for span in scope_spans.spans {
                    received.push(ReceivedSpan {
                        service_name: service_name.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        kind: span.kind,
                        attributes: span.attributes,
                    });
                }
            }
        }
        self.0
            .spans
            .lock()
            .map_err(|_| tonic::Status::internal("span store poisoned"))?
            .extend(received);
        self.0.changed.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/gRPC `TraceService` on 127.0.0.1 (ephemeral port) that keeps every span it receives.
/// Stops serving when dropped.
pub struct TraceReceiver {
    addr: SocketAddr,
    store: Arc<Store>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl TraceReceiver {
    /// Binds 127.0.0.1:0 and serves in a background task.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = TraceServiceServer::new(Collector(store.clone()));
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            store,
            _stop: stop,
        })
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.store
            .spans
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Waits until `done(spans so far)` holds and returns the spans; fails with a summary of what arrived
    /// when `timeout` passes first.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[ReceivedSpan]) -> bool,
    ) -> anyhow::Result<Vec<ReceivedSpan>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.store.changed.notified();
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let spans = self.spans();
                if done(&spans) {
                    return Ok(spans);
                }
                anyhow::bail!(
                    "spans expected within {timeout:?} did not arrive; received:\n{}",
                    summary(&spans)
                );
            }
        }
    }
}

/// One line per span: `service name trace/span<-parent attrs`, for failure messages.
pub fn summary(spans: &[ReceivedSpan]) -> String {
    let mut out = String::new();
    for s in spans {
        let attrs: Vec<String> = s
            .attributes
            .iter()
            .map(|kv| {
                format!(
                    "{}={}",
                    kv.key,
                    kv.value
                        .as_ref()
                        .and_then(|v| v.value.as_ref())
                        .map(render)
                        .unwrap_or_default()
                )
            })
            .collect();
        out.push_str(&format!(
            "  [{}] {} trace={} span={} parent={} {}\n",
            s.service_name,
            s.name,
            s.trace_id,
            s.span_id,
            if s.parent_span_id.is_empty() {
                "-"
            } else {
                &s.parent_span_id
            },
            attrs.join(" ")
        ));
    }
    if out.is_empty() {
        out.push_str("  (nothing)\n");
    }
    out
}
