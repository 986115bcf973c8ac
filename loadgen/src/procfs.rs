//! Memory and CPU of the services during a run: VmRSS sampled during it, CPU time around it (the /proc
//! readers are testkit's).

use std::time::{Duration, Instant};

use serde::Serialize;

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

use gpu_admission_testkit::procfs::{RssPeaks, TICKS_PER_SEC};
pub use gpu_admission_testkit::procfs::{cpu_ticks, peak_rss_kib, rss_kib};

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
    peaks: RssPeaks,
}

impl Watch {
    pub fn start(pids: &[(String, u32)]) -> Self {
        let before: Vec<u64> = pids.iter().map(|(_, p)| rss_kib(*p).unwrap_or(0)).collect();
        let numbers: Vec<u32> = pids.iter().map(|(_, p)| *p).collect();
        let peaks = RssPeaks::start(&numbers, Duration::from_millis(100));
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
        }
    }

    pub fn finish(self) -> (Vec<ServiceUsage>, ProcUsage) {
        let peaks = self.peaks.stop();
        let secs = self.t0.elapsed().as_secs_f64().max(1e-3);
        let cores = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / TICKS_PER_SEC / secs,
            _ => 0.0,
        };
        let usage = self
            .pids
            .iter()
            .enumerate()
            .map(|(i, (name, pid))| ServiceUsage {
                service: name.clone(),
                pid: *pid,
                rss_before_kib: self.before[i],
                rss_peak_kib: peaks[i].max(self.before[i]),
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
