//! Scorer faults made from outside, as a real outage would look to the frontend: a stopped process
//! (SIGSTOP: connections stay open, nothing answers), a killed one, or a slow network (the test kit's
//! `FaultProxy::start_delayed`, which delays every chunk the scorer sends back); and real-time priority for
//! the measured processes.

use anyhow::{Context, Result, bail};

/// Sends a signal (`STOP`, `CONT`, `KILL`) with the system's `kill`.
pub use gpu_admission_testkit::process::signal;

/// Puts every thread of `pid` under SCHED_FIFO at `priority` (with the system's `chrt`).
pub fn set_realtime(pid: u32, priority: u32) -> Result<()> {
    let status = std::process::Command::new("chrt")
        .args(["-a", "-f", "-p", &priority.to_string(), &pid.to_string()])
        .status()
        .context("running chrt (util-linux)")?;
    if !status.success() {
        bail!("chrt -a -f -p {priority} {pid} failed: {status} (needs root or CAP_SYS_NICE)");
    }
    Ok(())
}
