//! A product binary running as a child process for the duration of a test.
//!
//! - stdout and stderr go to `<log_dir>/<name>.log` (both binaries log to stderr);
//! - [`ChildProcess::wait_listening`] reads the `listening on ADDR` lines to learn the real bound ports;
//! - [`ChildProcess::pause`] / [`ChildProcess::resume`] send SIGSTOP / SIGCONT (a "hung" process);
//! - the process is killed (SIGKILL) when the value is dropped, and when the drop happens during a panic
//!   (a failing test) the last lines of its log are printed, so the test output shows why.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How many log lines [`ChildProcess::log_tail`] shows by default.
pub const TAIL_LINES: usize = 40;

/// The extra command-line arguments and environment variables a test adds to a process builder.
#[derive(Debug, Default, Clone)]
pub struct Extras {
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
}

/// Gives a process builder with an `extras: Extras` field its `arg` and `env` methods.
macro_rules! process_extras {
    ($builder:ty) => {
        impl $builder {
            /// An extra command-line argument.
            pub fn arg(mut self, a: impl Into<String>) -> Self {
                self.extras.args.push(a.into());
                self
            }
            /// An extra environment variable (e.g. `RUST_LOG`, `OTEL_EXPORTER_OTLP_ENDPOINT`).
            pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
                self.extras.envs.push((k.into(), v.into()));
                self
            }
        }
    };
}
pub(crate) use process_extras;

/// A running child process with its log file. Killed on drop.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    child: Child,
    log: PathBuf,
    dump_on_drop: bool,
}

impl ChildProcess {
    /// Spawns `bin args...` with extra `envs`, logging to `log_dir/<name>.log`. `NO_COLOR=1` is set so log
    /// lines are plain text; callers override it through `envs` if needed.
    pub fn spawn(
        name: &str,
        bin: &Path,
        args: &[String],
        envs: &[(String, String)],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(log_dir)?;
        let log = log_dir.join(format!("{name}.log"));
        let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("NO_COLOR", "1")
            .envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {} {:?}", bin.display(), args))?;
        Ok(Self {
            name: name.to_string(),
            child,
            log,
            dump_on_drop: true,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn time (used for the log file name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the log file (stdout + stderr).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far (lossy UTF-8).
    pub fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last `n` lines of the log, prefixed with the process name.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(n);
        let mut out = format!(
            "----- last {} lines of {} ({}) -----\n",
            lines.len() - start,
            self.name,
            self.log.display()
        );
        for l in &lines[start..] {
            out.push_str(l);
            out.push('\n');
        }
        out
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until the log has `count` lines containing `listening on <socket address>` and returns the
    /// addresses with their whole log lines, in log order. Fails with the log tail when the process exits or
    /// `timeout` passes first.
    pub async fn wait_listening(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(SocketAddr, String)>> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = listening_lines(&self.log());
            if found.len() >= count {
                return Ok(found);
            }
            if let Some(status) = self.exited() {
                bail!(
                    "{} exited ({status}) before printing `listening on`\n{}",
                    self.name,
                    self.log_tail(TAIL_LINES)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} printed {} of {count} `listening on` lines within {timeout:?}\n{}",
                    self.name,
                    found.len(),
                    self.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits for the serving (non-admin) `listening on` address: the first such line not naming the admin or
    /// metrics server.
    pub async fn wait_serving_addr(&mut self, timeout: Duration) -> anyhow::Result<SocketAddr> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let lines = self.wait_listening(1, left).await?;
            if let Some((a, _)) = lines.iter().find(|(_, l)| !is_admin_line(l)) {
                return Ok(*a);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} printed only admin `listening on` lines\n{}",
                    self.name,
                    self.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The admin (metrics) server's address, once the process has logged it.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        listening_lines(&self.log())
            .into_iter()
            .find(|(_, l)| is_admin_line(l))
            .map(|(a, _)| a)
    }

    /// Waits until a log line contains `needle`; returns that line.
    pub async fn wait_for_log(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.log().lines().find(|l| l.contains(needle)) {
                return Ok(l.to_string());
            }
            if let Some(status) = self.exited() {
                bail!(
                    "{} exited ({status}) before logging {needle:?}\n{}",
                    self.name,
                    self.log_tail(TAIL_LINES)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not log {needle:?} within {timeout:?}\n{}",
                    self.name,
                    self.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGSTOP: the process keeps its sockets but answers nothing (a hung service). Returns once every
    /// thread is stopped: `kill` returns when the signal is queued, and a thread busy on another (or a
    /// descheduled virtual) CPU could still answer a request sent right after it.
    pub fn pause(&self) -> anyhow::Result<()> {
        signal(self.pid(), "STOP")?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(self.pid()) {
            if Instant::now() > deadline {
                bail!(
                    "{} (pid {}) not stopped 5 s after SIGSTOP",
                    self.name,
                    self.pid()
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// SIGCONT after [`ChildProcess::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        signal(self.pid(), "CONT")
    }

    /// SIGTERM (graceful shutdown request); does not wait.
    pub fn terminate(&self) -> anyhow::Result<()> {
        signal(self.pid(), "TERM")
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn wait_exit(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exited() {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!(
                    "{} still running after {timeout:?}\n{}",
                    self.name,
                    self.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILL and reap (idempotent). A paused process is killed too.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Don't print the log tail when dropped during a panic (e.g. for processes expected to fail).
    pub fn quiet(&mut self) {
        self.dump_on_drop = false;
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() && self.dump_on_drop {
            eprintln!("{}", self.log_tail(TAIL_LINES));
        }
    }
}

/// Whether a `listening on` line belongs to the admin (metrics) server.
pub fn is_admin_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("admin") || l.contains("metrics")
}

/// Whether every thread of `pid` is in the stopped state (`T` in `/proc/PID/task/TID/stat`). Off Linux
/// (no /proc) it cannot tell and says yes.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            // `pid (comm) S ...`: the state follows the last `)` (comm may contain spaces and parentheses).
            .map(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            })
            // A thread that exited meanwhile is not running either.
            .unwrap_or(true)
    })
}

/// Sends `sig` (`STOP`, `CONT`, `TERM`, `KILL`...) to `pid` with the system's `kill`.
pub fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed: {status}");
    }
    Ok(())
}

/// Every `listening on ADDR` in `log`, in order. Tolerates text and JSON log formats, ANSI colours, a
/// scheme prefix (`https://`) and a field prefix (`addr=`).
pub fn listening_lines(log: &str) -> Vec<(SocketAddr, String)> {
    let mut out = Vec::new();
    for line in log.lines() {
        let plain = strip_ansi(line);
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("listening on") {
            rest = &rest[i + "listening on".len()..];
            let token = rest
                .trim_start_matches([' ', ':', '='])
                .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '}' || c == '\'')
                .next()
                .unwrap_or("");
            let token = token
                .trim_start_matches("addr=")
                .trim_start_matches("https://")
                .trim_start_matches("http://")
                .trim_end_matches('/');
            if let Ok(addr) = token.parse::<SocketAddr>() {
                out.push((addr, plain.clone()));
                break;
            }
        }
    }
    out
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_json_and_coloured_lines() {
        let log = "2026 INFO scorer: listening on 127.0.0.1:50051\n\
                   {\"fields\":{\"message\":\"listening on 127.0.0.1:8443\"}}\n\
                   \u{1b}[32mINFO\u{1b}[0m admin listening on http://127.0.0.1:9092/\n\
                   nothing here\n\
                   listening on addr=[::1]:7\n";
        let addrs: Vec<String> = listening_lines(log)
            .iter()
            .map(|(a, _)| a.to_string())
            .collect();
        assert_eq!(
            addrs,
            [
                "127.0.0.1:50051",
                "127.0.0.1:8443",
                "127.0.0.1:9092",
                "[::1]:7"
            ]
        );
    }
}
