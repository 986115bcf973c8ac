//! `webhook-frontend`: see the crate README for flags and behaviour.

use std::process::ExitCode;

use clap::Parser;
use gpu_admission_telemetry::runtime::Service;
use webhook_frontend::config::{Args, Config};

/// jemalloc (configured in the workspace Cargo.toml): an AdmissionReview is decoded on one worker and often
/// dropped on another, which made glibc malloc's arena locks a tenth of the frontend's CPU under load; its
/// background thread returns the memory of closed connections to the OS even when no worker runs again.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Environment variable for the number of tokio worker threads (default: one per core). `1` runs everything
/// on one thread (a current-thread runtime), which saves the cross-thread wake-ups when the frontend shares
/// a small machine with the scorer.
const WORKER_THREADS_ENV: &str = "WEBHOOK_WORKER_THREADS";

fn main() -> ExitCode {
    let args = Args::parse();
    Service::new("webhook-frontend")
        .worker_threads_env(WORKER_THREADS_ENV)
        .run(async move { webhook_frontend::app::run(Config::try_from(args)?).await })
}
