//! loadgen: the benchmark of gpu-admission. Drives the webhook frontend and the scorer from outside
//! (processes and sockets only). See README.md for the modes and the output.

mod abuse;
mod baseline;
mod bench;
mod cli;
mod demo;
mod drivers;
mod faults;
mod learn;
mod procfs;
mod report;
mod schedule;
mod spawn;
mod tls;
mod workload;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    match cli.command {
        Some(cli::Command::BaselineServer(args)) => baseline::serve(args),
        Some(cli::Command::Demo(args)) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = rt.block_on(demo::run(args))?;
            drop(rt);
            std::process::exit(code);
        }
        Some(cli::Command::Learn(args)) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = rt.block_on(learn::run(args))?;
            drop(rt);
            std::process::exit(code);
        }
        None => {
            // One thread drives all connections (the pacing thread aside): the services get the other core(s).
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let code = rt.block_on(bench::run(cli.bench))?;
            drop(rt);
            std::process::exit(code);
        }
    }
}
