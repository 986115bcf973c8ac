//! `webhook-frontend`: see the crate README for flags and behaviour.

use std::process::ExitCode;

use clap::Parser;
use webhook_frontend::config::Config;

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
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
}
