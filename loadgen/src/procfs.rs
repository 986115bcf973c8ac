//! Memory and CPU of processes, read from /proc: VmRSS sampled during each run, CPU time around it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Linux reports utime/stime in clock ticks of USER_HZ, 100 on every mainstream architecture.
const TICKS_PER_SEC: f64 = 100.0;

/// Memory and CPU of one service during a run.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceUsage {
    pub service: String,
    pub pid: u32,
    /// VmRSS just before the run's load.
    pub rss_before_kib: u64,
    /// Highest VmRSS sampled (every 100 ms) during the run.
    pub rss_peak_kib: u64,
    /// VmHWM at the end of the run: the process's peak RSS since it started (catches spikes between samples).
    pub rss_hwm_kib: u64,
    /// CPU time used during the run, as a share of one core (1.0 = one core busy).
    pub cpu_cores: f64,
}

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

/// User + system CPU time in ticks (fields 14 and 15 of /proc/PID/stat).
fn cpu_ticks(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after its closing parenthesis are plain.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// loadgen's own CPU use during a run.
#[derive(Debug, Clone, Default)]
pub struct ProcUsage {
    pub cpu_cores: f64,
}

/// Watches a set of processes during one run.
pub struct Watch {
    pids: Vec<(String, u32)>,
    before: Vec<u64>,
    cpu0: Vec<Option<u64>>,
    self_cpu0: Option<u64>,
    t0: Instant,
    peaks: Arc<Mutex<Vec<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    pub fn start(pids: &[(String, u32)]) -> Self {
        let before: Vec<u64> = pids.iter().map(|(_, p)| rss_kib(*p).unwrap_or(0)).collect();
        let peaks = Arc::new(Mutex::new(before.clone()));
        let task = {
            let peaks = peaks.clone();
            let pids: Vec<u32> = pids.iter().map(|(_, p)| *p).collect();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tick.tick().await;
                    let mut pk = peaks.lock().expect("peaks lock");
                    for (i, p) in pids.iter().enumerate() {
                        pk[i] = pk[i].max(rss_kib(*p).unwrap_or(0));
                    }
                }
            })
        };
        Self {
            cpu0: pids
                .iter()
                .map(|(_, p)| cpu_ticks(&p.to_string()))
                .collect(),
            self_cpu0: cpu_ticks("self"),
            pids: pids.to_vec(),
            before,
            t0: Instant::now(),
            peaks,
            task,
        }
    }

    pub fn finish(self) -> (Vec<ServiceUsage>, ProcUsage) {
        self.task.abort();
        let secs = self.t0.elapsed().as_secs_f64().max(1e-3);
        let cores = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / TICKS_PER_SEC / secs,
            _ => 0.0,
        };
        let peaks = self.peaks.lock().expect("peaks lock").clone();
        let usage = self
            .pids
            .iter()
            .enumerate()
            .map(|(i, (name, pid))| ServiceUsage {
                service: name.clone(),
                pid: *pid,
                rss_before_kib: self.before[i],
                rss_peak_kib: peaks[i].max(rss_kib(*pid).unwrap_or(0)),
                rss_hwm_kib: peak_rss_kib(*pid).unwrap_or(0),
                cpu_cores: cores(self.cpu0[i], cpu_ticks(&pid.to_string())),
            })
            .collect();
        (
            usage,
            ProcUsage {
                cpu_cores: cores(self.self_cpu0, cpu_ticks("self")),
            },
        )
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
        assert!(rss_kib(u32::MAX).is_none());
    }
}
