//! A real Jaeger (v2, `github.com/jaegertracing/jaeger` v1.76.0 `cmd/jaeger`) for the trace tests: built
//! from its Go module by `tests/peers/jaeger.sh` (cached outside the clone), started as a child process with a
//! config file of ours on free loopback ports (OTLP gRPC and HTTP receivers, in-memory storage, the query
//! API, the health check), stopped on drop.
//!
//! Without a config Jaeger runs its all-in-one on fixed ports (4317, 4318, 16686, 13133, …), which parallel
//! test processes would fight over; ours names every listener, and the collector's own metrics server is off.
//!
//! - [`jaeger_bin`] runs the build script (cached → instant). When the machine cannot build it: a failure
//!   when `CI` is set, else a SKIP (`Ok(None)`); `GPU_ADMISSION_JAEGER_BIN` names a prebuilt binary;
//! - [`Jaeger::start`] → [`Jaeger::otlp_grpc_endpoint`] for `OTEL_EXPORTER_OTLP_ENDPOINT`,
//!   [`Jaeger::find_traces`] / [`Jaeger::trace`] read the query API (`/api/traces`) as [`Trace`]s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;

use crate::ports::ClaimedPorts;
use crate::process::{ChildProcess, TAIL_LINES};

/// The binary, building it if needed. `Ok(None)` = skip (not in CI, cannot build here).
pub fn jaeger_bin() -> anyhow::Result<Option<PathBuf>> {
    crate::built_by_script::run(&crate::built_by_script::Script {
        prebuilt_env: "GPU_ADMISSION_JAEGER_BIN",
        script: "tests/peers/jaeger.sh",
        what: "Jaeger",
        suite: "the Jaeger trace tests",
        built: Path::is_file,
    })
}

/// The free loopback ports of one Jaeger.
#[derive(Debug, Clone, Copy)]
struct Ports {
    otlp_grpc: u16,
    otlp_http: u16,
    query_http: u16,
    query_grpc: u16,
    health: u16,
}

impl Ports {
    /// Ports claimed for this Jaeger (see [`crate::ports`]), held until it stops.
    fn claim() -> anyhow::Result<(Self, ClaimedPorts)> {
        let claimed = ClaimedPorts::claim(5)?;
        let p = claimed.ports();
        let ports = Self {
            otlp_grpc: p[0],
            otlp_http: p[1],
            query_http: p[2],
            query_grpc: p[3],
            health: p[4],
        };
        Ok((ports, claimed))
    }

    /// The all-in-one's pipeline (OTLP in, batch, memory store, query API), every listener on these ports.
    fn config(self) -> String {
        let Ports {
            otlp_grpc,
            otlp_http,
            query_http,
            query_grpc,
            health,
        } = self;
        format!(
            r#"service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    # On by default: Jaeger traces its own queries to OTLP on localhost:4317, whoever listens there.
    enable_tracing: false
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"#
        )
    }
}

/// A running Jaeger. Killed on drop (its log tail printed when a test fails).
#[derive(Debug)]
pub struct Jaeger {
    pub process: ChildProcess,
    ports: Ports,
    _claimed: ClaimedPorts,
    _dir: tempfile::TempDir,
}

impl Jaeger {
    /// Builds (or finds) Jaeger and starts it; ready once its health check says every component runs and
    /// the query API answers. `Ok(None)` = skipped (see [`jaeger_bin`]).
    pub async fn start() -> anyhow::Result<Option<Self>> {
        let Some(bin) = jaeger_bin()? else {
            return Ok(None);
        };
        let (ports, claimed) = Ports::claim()?;
        let dir = tempfile::Builder::new()
            .prefix("gpu-adm-jaeger-")
            .tempdir()?;
        let config = dir.path().join("jaeger.yaml");
        std::fs::write(&config, ports.config())?;
        let mut process = ChildProcess::spawn(
            "jaeger",
            &bin,
            &[format!("--config={}", config.display())],
            &[],
            dir.path(),
        )?;
        let health: SocketAddr = ([127, 0, 0, 1], ports.health).into();
        let query: SocketAddr = ([127, 0, 0, 1], ports.query_http).into();
        let deadline = Instant::now() + crate::START_TIMEOUT;
        loop {
            let healthy = crate::https::http_get(health, "/status")
                .await
                .is_ok_and(|r| r.status.is_success());
            if healthy
                && crate::https::http_get(query, "/api/services")
                    .await
                    .is_ok_and(|r| r.status.is_success())
            {
                break;
            }
            if let Some(status) = process.exited() {
                bail!(
                    "jaeger exited ({status}) before it was ready\n{}",
                    process.log_tail(TAIL_LINES)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "jaeger not ready within {:?}\n{}",
                    crate::START_TIMEOUT,
                    process.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Some(Self {
            process,
            ports,
            _claimed: claimed,
            _dir: dir,
        }))
    }

    /// `http://127.0.0.1:PORT`: the OTLP/gRPC receiver, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.otlp_grpc)
    }

    /// The query API's address (`/api/services`, `/api/traces`, …).
    pub fn query_addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.ports.query_http).into()
    }

    /// `GET /api/traces?service=SERVICE&tags={...}` (the last hour, up to 100 traces): every trace with a
    /// span of `service` carrying all of `tags` (attribute = value as text), as Jaeger finds them.
    pub async fn find_traces(
        &self,
        service: &str,
        tags: &[(&str, &str)],
    ) -> anyhow::Result<Vec<Trace>> {
        let tags: BTreeMap<&str, &str> = tags.iter().copied().collect();
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("service", service)
            .append_pair("tags", &serde_json::to_string(&tags)?)
            .append_pair("lookback", "1h")
            .append_pair("limit", "100")
            .finish();
        self.get_traces(&format!("/api/traces?{query}")).await
    }

    /// `GET /api/traces/ID`: the trace, or `None` when Jaeger has no span of it.
    pub async fn trace(&self, trace_id: &str) -> anyhow::Result<Option<Trace>> {
        let path = format!("/api/traces/{trace_id}");
        let r = crate::https::http_get(self.query_addr(), &path).await?;
        if r.status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(self.get_traces(&path).await?.into_iter().next())
    }

    async fn get_traces(&self, path: &str) -> anyhow::Result<Vec<Trace>> {
        let text = crate::https::http_get_text(self.query_addr(), path).await?;
        let answer: TracesAnswer = serde_json::from_str(&text)
            .with_context(|| format!("GET {path}: not Jaeger's answer: {text}"))?;
        if let Some(errors) = answer.errors.filter(|e| !e.is_null()) {
            bail!("GET {path}: Jaeger answered errors: {errors}");
        }
        Ok(answer.data)
    }

    /// Retries [`Jaeger::find_traces`] every 200 ms until `done` holds for its answer (spans arrive in
    /// batches, the two services' separately) or `timeout` passes; the last answer either way.
    pub async fn wait_traces(
        &self,
        service: &str,
        tags: &[(&str, &str)],
        timeout: Duration,
        done: impl Fn(&[Trace]) -> bool,
    ) -> anyhow::Result<Vec<Trace>> {
        let deadline = Instant::now() + timeout;
        loop {
            let traces = self.find_traces(service, tags).await?;
            if done(&traces) || Instant::now() > deadline {
                return Ok(traces);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[derive(Debug, Deserialize)]
struct TracesAnswer {
    #[serde(default)]
    data: Vec<Trace>,
    #[serde(default)]
    errors: Option<Value>,
}

/// One trace as Jaeger's query API spells it.
#[derive(Debug, Clone, Deserialize)]
pub struct Trace {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    pub spans: Vec<Span>,
    /// Process id (`p1`, …) → the process: its service name.
    pub processes: BTreeMap<String, Process>,
}

/// A span of a [`Trace`].
#[derive(Debug, Clone, Deserialize)]
pub struct Span {
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
    #[serde(rename = "operationName")]
    pub operation_name: String,
    #[serde(default)]
    pub references: Vec<Reference>,
    #[serde(default)]
    pub tags: Vec<Tag>,
    #[serde(rename = "processID")]
    pub process_id: String,
}

/// A parent link (`CHILD_OF`) or a `FOLLOWS_FROM`.
#[derive(Debug, Clone, Deserialize)]
pub struct Reference {
    #[serde(rename = "refType")]
    pub ref_type: String,
    #[serde(rename = "traceID")]
    pub trace_id: String,
    #[serde(rename = "spanID")]
    pub span_id: String,
}

/// A span attribute (`value` typed: string, bool, int64, float64).
#[derive(Debug, Clone, Deserialize)]
pub struct Tag {
    pub key: String,
    pub value: Value,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Process {
    #[serde(rename = "serviceName")]
    pub service_name: String,
}

impl Trace {
    /// The spans named `operation`.
    pub fn spans_named<'a>(&'a self, operation: &'a str) -> impl Iterator<Item = &'a Span> {
        self.spans
            .iter()
            .filter(move |s| s.operation_name == operation)
    }

    /// The one span named `operation`; `None` when there is none or several.
    pub fn span(&self, operation: &str) -> Option<&Span> {
        let mut named = self.spans.iter().filter(|s| s.operation_name == operation);
        let first = named.next()?;
        named.next().is_none().then_some(first)
    }

    /// The service a span was exported by.
    pub fn service_of(&self, span: &Span) -> Option<&str> {
        self.processes
            .get(&span.process_id)
            .map(|p| p.service_name.as_str())
    }

    /// A span's parent in this trace (its `CHILD_OF` reference).
    pub fn parent_of(&self, span: &Span) -> Option<&Span> {
        let parent = span.parent_id()?;
        self.spans.iter().find(|s| s.span_id == parent)
    }

    /// One line per span (`service/operation span_id <- parent tags`), for failure messages.
    pub fn summary(&self) -> String {
        self.spans
            .iter()
            .map(|s| {
                let tags: Vec<String> = s
                    .tags
                    .iter()
                    .map(|t| format!("{}={}", t.key, t.value))
                    .collect();
                format!(
                    "  {}/{} {} <- {} {}",
                    self.service_of(s).unwrap_or("?"),
                    s.operation_name,
                    s.span_id,
                    s.parent_id().unwrap_or("-"),
                    tags.join(" ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Span {
    /// The parent's span id (the `CHILD_OF` reference), `None` for a root.
    pub fn parent_id(&self) -> Option<&str> {
        self.references
            .iter()
            .find(|r| r.ref_type == "CHILD_OF")
            .map(|r| r.span_id.as_str())
    }

    /// An attribute's value as text (`true`, `85.06`, `H100-80GB`).
    pub fn tag(&self, key: &str) -> Option<String> {
        self.tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| match &t.value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
    }
}
