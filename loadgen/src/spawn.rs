//! `--spawn`: starts the scorer and the webhook frontend (found next to loadgen's own executable) on
//! ephemeral loopback ports with self-signed TLS, and the baseline endpoint; reads each bound address from
//! the `listening on ADDR` line of its log. Children are killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gpu_admission_testkit::ChildProcess;

use crate::workload::NAMESPACE_TIERS;

/// How long a service may take to print its `listening on ADDR` line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A child process serving on `addr`; stdout and stderr go to `log`. Killed when dropped.
pub struct Service {
    pub name: String,
    pub addr: SocketAddr,
    pub log: PathBuf,
    bin: PathBuf,
    args: Vec<String>,
    process: Option<ChildProcess>,
}

impl Service {
    /// Starts `bin args...` and waits (up to 60 s) for its serving `listening on ADDR` line.
    pub async fn start(name: &str, bin: &Path, args: Vec<String>, log: PathBuf) -> Result<Self> {
        let mut s = Self {
            name: name.to_string(),
            addr: ([127, 0, 0, 1], 0).into(),
            log,
            bin: bin.to_path_buf(),
            args,
            process: None,
        };
        s.launch(None).await?;
        Ok(s)
    }

    async fn launch(&mut self, listen: Option<SocketAddr>) -> Result<()> {
        let mut args = self.args.clone();
        if let Some(addr) = listen
            && let Some(i) = args.iter().position(|a| a == "--listen")
        {
            args[i + 1] = addr.to_string();
        }
        let dir = self.log.parent().context("log file without a folder")?;
        let stem = self
            .log
            .file_stem()
            .and_then(|s| s.to_str())
            .context("log file name")?;
        let mut process = ChildProcess::spawn(stem, &self.bin, &args, &[], dir)
            .with_context(|| format!("starting {}", self.bin.display()))?;
        // Its log tail goes into the error below, not to stderr on every drop.
        process.quiet();
        self.addr = process.wait_serving_addr(START_TIMEOUT).await?;
        self.process = Some(process);
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ChildProcess::pid)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts the process again on the address it had; the previous log is kept as `<name>.previous.log`.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        let _ = std::fs::rename(&self.log, self.log.with_extension("previous.log"));
        let addr = self.addr;
        self.launch(Some(addr)).await
    }
}

/// Where the service binaries are: `--bin-dir`, else the directory of loadgen's own executable.
pub fn bin_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = match explicit {
        Some(d) => d.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .context("executable without a directory")?
            .to_path_buf(),
    };
    for bin in ["scorer", "webhook-frontend"] {
        if !dir.join(bin).is_file() {
            bail!(
                "`{bin}` not found in {} (--spawn runs the binaries next to loadgen). Build all three with \
                 the same profile: `cargo build --release -p scorer -p webhook-frontend -p loadgen`, then \
                 `cargo run --release -p loadgen -- ...` (or pass --bin-dir DIR)",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// Starts the scorer: ephemeral gRPC and admin ports, the embedded default policy, no state file.
pub async fn start_scorer(bin_dir: &Path, work: &Path) -> Result<Service> {
    let args = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    Service::start(
        "scorer",
        &bin_dir.join("scorer"),
        args,
        work.join("scorer.log"),
    )
    .await
}

/// Starts a webhook frontend talking to `scorer_url`, self-signed TLS in `tls_dir` (ca.crt for clients),
/// no Kubernetes API: namespace tiers of the generated workload, PriorityClasses from the policy.
pub async fn start_frontend(
    bin_dir: &Path,
    name: &str,
    scorer_url: &str,
    tls_dir: &Path,
    deadline_ms: u64,
    log: PathBuf,
    extra: &[String],
) -> Result<Service> {
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--scorer".into(),
        scorer_url.into(),
        "--tls=self-signed".into(),
        "--tls-dir".into(),
        tls_dir.display().to_string(),
        "--deadline-ms".into(),
        deadline_ms.to_string(),
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
        "--no-kube".into(),
    ];
    for (ns, tier) in NAMESPACE_TIERS {
        args.push("--namespace-tier".into());
        args.push(format!("{ns}={tier}"));
    }
    args.extend(extra.iter().cloned());
    Service::start(name, &bin_dir.join("webhook-frontend"), args, log).await
}

/// Starts `loadgen baseline-server` (this very executable) with self-signed TLS in `tls_dir`.
pub async fn start_baseline(tls_dir: &Path, log: PathBuf) -> Result<Service> {
    let me = std::env::current_exe()?;
    let args = vec![
        "baseline-server".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--self-signed".into(),
        tls_dir.display().to_string(),
    ];
    Service::start("baseline", &me, args, log).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_give_a_build_hint() {
        let dir = tempfile::tempdir().unwrap();
        let err = bin_dir(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("cargo build --release"), "{err}");
    }
}
