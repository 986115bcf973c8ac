//! `scorer` binary: parse the CLI, set telemetry up, serve until SIGTERM/SIGINT.
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use gpu_admission_telemetry::runtime::Service;
use gpu_admission_telemetry::shutdown::Shutdown;
use scorer::cli::Cli;
use scorer::{metrics::Metrics, policy, server};

/// jemalloc (configured in the workspace Cargo.toml): requests are decoded on one tokio worker and often freed
/// on another, where glibc malloc contends on its arena locks; its background thread returns freed memory to
/// the OS even when no worker runs again.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.check_policy {
        return check_policy(&cli);
    }
    Service::new("scorer").run(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let listener = tokio::net::TcpListener::bind(cli.listen).await?;
    let running = server::start(cli.server_config(), listener, metrics).await?;
    let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    // The admin server (GET /metrics) logs its own bound address.
    gpu_admission_telemetry::admin::serve(cli.admin_listen, Arc::new(registry), async {
        let _ = admin_stopped.await;
    })
    .await?;
    let shutdown = Shutdown::install()?;
    let result = running.wait_for(shutdown.wait()).await;
    let _ = admin_stop.send(());
    result
}

fn check_policy(cli: &Cli) -> ExitCode {
    let loaded = match &cli.policy.policy_file {
        Some(path) => policy::load_file(path),
        None => policy::embedded_default(),
    };
    match loaded {
        Ok(p) => {
            println!("policy {} is valid: version {}", p.source, p.version);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
