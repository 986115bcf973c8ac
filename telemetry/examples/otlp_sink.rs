//! A counting OTLP/gRPC trace sink for local measurements: accepts `ExportTraceServiceRequest`s, counts the
//! spans and throws them away, so tracing overhead can be measured at 100 % sampling without Jaeger.
//!
//! ```sh
//! cargo run --release -p gpu-admission-telemetry --example otlp_sink -- 127.0.0.1:4317
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_TRACES_SAMPLER=always_on scorer ...
//! ```
//! Prints the running totals every 5 s and once more on Ctrl-C.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

#[derive(Default)]
struct Counts {
    exports: AtomicU64,
    spans: AtomicU64,
}

struct Sink(Arc<Counts>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.exports.fetch_add(1, Ordering::Relaxed);
        self.0.spans.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4317".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("otlp_sink listening on {}", listener.local_addr()?);
    let counts = Arc::new(Counts::default());
    let report = counts.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            print_counts(&report);
        }
    });
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Sink(counts.clone())))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
    print_counts(&counts);
    Ok(())
}

fn print_counts(counts: &Counts) {
    eprintln!(
        "otlp_sink: {} exports, {} spans",
        counts.exports.load(Ordering::Relaxed),
        counts.spans.load(Ordering::Relaxed)
    );
}
