//! What a run costs: CPU seconds and RSS of each process from /proc (the kube-apiserver's own account of its
//! webhook calls is `gpu_admission_tests::apiserver_metrics`).

use std::time::Duration;

use serde::Serialize;

use gpu_admission_tests::procfs::{RssPeaks, cpu_seconds};

/// One process's use during a phase.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub process: String,
    pub cpu_seconds: f64,
    /// Highest RSS sampled (every 250 ms) during the phase, MiB.
    pub rss_peak_mib: f64,
}

/// CPU before and RSS sampled during a phase, for a fixed set of processes.
pub struct Watch {
    pids: Vec<(String, u32)>,
    cpu0: Vec<f64>,
    peaks: RssPeaks,
}

impl Watch {
    pub fn start(pids: &[(String, u32)]) -> Self {
        let cpu0 = pids
            .iter()
            .map(|(_, p)| cpu_seconds(*p).unwrap_or(0.0))
            .collect();
        let numbers: Vec<u32> = pids.iter().map(|(_, p)| *p).collect();
        Self {
            pids: pids.to_vec(),
            cpu0,
            peaks: RssPeaks::start(&numbers, Duration::from_millis(250)),
        }
    }

    pub fn stop(self) -> Vec<Usage> {
        let peaks = self.peaks.stop();
        self.pids
            .iter()
            .zip(self.cpu0)
            .zip(peaks)
            .map(|(((name, pid), cpu0), peak)| Usage {
                process: name.clone(),
                cpu_seconds: cpu_seconds(*pid).map_or(0.0, |c| c - cpu0),
                rss_peak_mib: peak as f64 / 1024.0,
            })
            .collect()
    }
}

/// The processes' table (markdown), CPU over `phase`.
pub fn print_usage(usage: &[Usage], phase: &str) {
    println!("\n| process | CPU s ({phase}) | peak RSS MiB |");
    println!("|---|---|---|");
    for u in usage {
        println!(
            "| {} | {:.1} | {:.0} |",
            u.process, u.cpu_seconds, u.rss_peak_mib
        );
    }
}
