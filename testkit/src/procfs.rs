//! Memory and CPU of processes, read from /proc (Linux): what loadgen and cluster-bench report of the
//! processes they start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Linux reports utime/stime in clock ticks of USER_HZ, 100 on every mainstream architecture.
pub const TICKS_PER_SEC: f64 = 100.0;

/// Resident set size in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmRSS:")
}

/// Peak resident set size since the process started, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmHWM:")
}

fn status_field(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// User + system CPU time in ticks (fields 14 and 15 of /proc/PID/stat); `pid` a number or `self`.
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its closing parenthesis are plain.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// User + system CPU seconds of a process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_ticks(&pid.to_string()).map(|t| t as f64 / TICKS_PER_SEC)
}

/// The highest RSS of each of a set of processes, sampled in the background until [`RssPeaks::stop`].
pub struct RssPeaks {
    pids: Vec<u32>,
    peaks: Arc<Mutex<Vec<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssPeaks {
    /// Starts sampling every `every` (within a tokio runtime), from the processes' RSS now.
    pub fn start(pids: &[u32], every: Duration) -> Self {
        let now: Vec<u64> = pids.iter().map(|p| rss_kib(*p).unwrap_or(0)).collect();
        let peaks = Arc::new(Mutex::new(now));
        let task = {
            let (peaks, pids) = (peaks.clone(), pids.to_vec());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let mut peaks = peaks.lock().expect("not poisoned");
                    for (peak, pid) in peaks.iter_mut().zip(&pids) {
                        *peak = (*peak).max(rss_kib(*pid).unwrap_or(0));
                    }
                }
            })
        };
        Self {
            pids: pids.to_vec(),
            peaks,
            task,
        }
    }

    /// Stops sampling: each process's highest RSS in KiB (its RSS now included), in the order given.
    pub fn stop(self) -> Vec<u64> {
        self.task.abort();
        let peaks = self.peaks.lock().expect("not poisoned").clone();
        peaks
            .into_iter()
            .zip(&self.pids)
            .map(|(peak, pid)| peak.max(rss_kib(*pid).unwrap_or(0)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_memory_and_cpu() {
        let me = std::process::id();
        let rss = rss_kib(me).unwrap();
        assert!(rss > 100, "{rss}");
        assert!(peak_rss_kib(me).unwrap() >= rss);
        assert!(cpu_ticks("self").is_some());
        assert!(cpu_seconds(me).is_some());
        assert!(rss_kib(u32::MAX).is_none());
    }
}
