//! `webhook-frontend`: see the crate README for flags and behaviour.

use std::process::ExitCode;

use clap::Parser;
use webhook_frontend::config::Config;

/// jemalloc (configured in the workspace Cargo.toml): an AdmissionReview is decoded on one worker and often
/// dropped on another, which made glibc malloc's arena locks a tenth of the frontend's CPU under load; its
/// background thread returns the memory of closed connections to the OS even when no worker runs again.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Environment variable for the number of tokio worker threads (default: one per core). `1` runs everything
/// on one thread (a current-thread runtime), which saves the cross-thread wake-ups when the frontend shares
/// a small machine with the scorer.
const WORKER_THREADS_ENV: &str = "WEBHOOK_WORKER_THREADS";

fn worker_threads() -> Result<Option<usize>, String> {
    match std::env::var(WORKER_THREADS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!(
                "{WORKER_THREADS_ENV}={v:?}: expected a number of threads ≥ 1"
            )),
        },
        Err(e) => Err(format!("{WORKER_THREADS_ENV}: {e}")),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    let mut builder = match worker_threads()? {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn main() -> ExitCode {
    let config = Config::parse();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("webhook-frontend: error: {err}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let _telemetry = match gpu_admission_telemetry::init("webhook-frontend") {
            Ok(guard) => guard,
            Err(err) => {
                eprintln!("webhook-frontend: telemetry set-up failed: {err:#}");
                return ExitCode::FAILURE;
            }
        };
        match webhook_frontend::app::run(config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!(error = %format!("{err:#}"), "webhook-frontend failed");
                eprintln!("webhook-frontend: error: {err:#}");
                ExitCode::FAILURE
            }
        }
    })
}
