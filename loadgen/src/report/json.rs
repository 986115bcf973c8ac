//! The machine-readable report (`--json PATH`).

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::RunResult;
use super::summary::Summary;

#[derive(Debug, Serialize)]
pub struct Meta {
    /// UTC, RFC 3339.
    pub date: String,
    pub loadgen_version: &'static str,
    pub command: Vec<String>,
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub workload: String,
    pub workload_mix: std::collections::BTreeMap<String, usize>,
    pub mean_request_bytes: usize,
    pub http: String,
    pub deadline_ms: u64,
    /// /proc/loadavg before the first run and after the last: other work on the machine skews results.
    pub loadavg_start: String,
    pub loadavg_end: String,
}

#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub meta: &'a Meta,
    pub summary: &'a Summary,
    pub runs: &'a [RunResult],
}

pub fn write(path: &Path, report: &Report) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

impl Meta {
    pub fn collect(
        workload: &crate::workload::Workload,
        http: String,
        deadline_ms: u64,
        loadavg_start: String,
    ) -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        Self {
            date: time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            loadgen_version: env!("CARGO_PKG_VERSION"),
            command: std::env::args().collect(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel,
            workload: workload.source.clone(),
            workload_mix: workload.mix(),
            mean_request_bytes: workload.mean_body_bytes(),
            http,
            deadline_ms,
            loadavg_start,
            loadavg_end: loadavg(),
        }
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
