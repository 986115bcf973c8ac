//! `--spawn`: starts the scorer and the webhook frontend (found next to loadgen's own executable) on
//! ephemeral loopback ports with self-signed TLS, and the baseline endpoint; reads each bound address from
//! the `listening on ADDR` line of its log. Children are killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::workload::NAMESPACE_TIERS;

/// A child process serving on `addr`; stderr goes to `log`.
pub struct Service {
    pub name: String,
    pub addr: SocketAddr,
    pub log: PathBuf,
    bin: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Service {
    /// Starts `bin args...` and waits (up to 60 s) for its `listening on ADDR` line.
    pub async fn start(name: &str, bin: &Path, args: Vec<String>, log: PathBuf) -> Result<Self> {
        let mut s = Self {
            name: name.to_string(),
            addr: ([127, 0, 0, 1], 0).into(),
            log,
            bin: bin.to_path_buf(),
            args,
            child: None,
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
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let offset = log.metadata()?.len();
        let child = Command::new(&self.bin)
            .args(&args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        self.addr = self.wait_listening(offset).await?;
        Ok(())
    }

    async fn wait_listening(&mut self, offset: u64) -> Result<SocketAddr> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read(&self.log).unwrap_or_default();
            let text =
                String::from_utf8_lossy(&text[(offset as usize).min(text.len())..]).into_owned();
            if let Some(addr) = text.lines().find_map(listening_addr) {
                return Ok(addr);
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "{} exited ({status}) before listening; its log {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&text)
                );
            }
            if Instant::now() > until {
                bail!(
                    "{} printed no `listening on ADDR` line within 60 s; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&text)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the process again on the address it had.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        let addr = self.addr;
        self.launch(Some(addr)).await
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The address of a `... listening on 127.0.0.1:PORT ...` log line (not the admin/metrics listener's).
/// Tolerates ANSI colours and `key=value` / quoted forms.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    let clean = strip_ansi(line);
    let lower = clean.to_ascii_lowercase();
    if lower.contains("admin") || lower.contains("metrics") {
        return None;
    }
    let at = lower.find("listening on")?;
    clean[at + "listening on".len()..]
        .split(|c: char| {
            c.is_whitespace() || c == '=' || c == '"' || c == ',' || c == '\'' || c == '}'
        })
        .find_map(|tok| tok.trim_end_matches(['.', ')']).parse().ok())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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
                "`{bin}` not found in {} (--spawn runs the binaries next to loadgen). Build them first: \
                 `cargo build --release -p scorer -p webhook-frontend -p loadgen` and run target/release/loadgen \
                 (or pass --bin-dir DIR)",
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
) -> Result<Service> {
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--scorer".into(),
        scorer_url.into(),
        "--self-signed".into(),
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
    fn finds_the_serving_address_in_log_lines() {
        let a: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        assert_eq!(
            listening_addr("2026-11-22T03:00:00Z  INFO scorer: listening on 127.0.0.1:40123"),
            Some(a)
        );
        assert_eq!(
            listening_addr("INFO webhook_frontend: listening on addr=127.0.0.1:40123"),
            Some(a)
        );
        assert_eq!(
            listening_addr(
                r#"{"level":"INFO","fields":{"message":"listening on","addr":"127.0.0.1:40123"}}"#
            ),
            Some(a)
        );
        assert_eq!(
            listening_addr(
                "\u{1b}[32m INFO\u{1b}[0m listening on \u{1b}[3maddr\u{1b}[0m=127.0.0.1:40123"
            ),
            Some(a)
        );
        assert_eq!(
            listening_addr("INFO admin server listening on 127.0.0.1:9091"),
            None
        );
        assert_eq!(
            listening_addr("INFO metrics listening on 127.0.0.1:9091"),
            None
        );
        assert_eq!(listening_addr("INFO loading policy"), None);
    }

    #[test]
    fn missing_binaries_give_a_build_hint() {
        let dir = tempfile::tempdir().unwrap();
        let err = bin_dir(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("cargo build --release"), "{err}");
    }
}
