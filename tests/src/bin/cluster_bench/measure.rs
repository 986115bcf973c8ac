//! What a run costs: CPU seconds and RSS of each process from /proc, and the kube-apiserver's own account of
//! its webhook calls (`apiserver_admission_webhook_admission_duration_seconds`, per webhook) from its
//! `/metrics`.

use std::collections::BTreeMap;
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

/// Sum (seconds) and count of the apiserver's webhook admission durations, per webhook name (all operations,
/// types and outcomes together).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebhookSeconds(pub BTreeMap<String, (f64, u64)>);

/// The webhook calls between two readings of the apiserver's metrics.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookCalls {
    pub webhook: String,
    pub calls: u64,
    /// Total seconds the apiserver spent in this webhook's calls (their latency, as it measures it).
    pub seconds: f64,
    pub mean_ms: f64,
}

const DURATION: &str = "apiserver_admission_webhook_admission_duration_seconds";

impl WebhookSeconds {
    /// Reads them from the text exposition of `/metrics`.
    pub fn parse(metrics: &str) -> Self {
        let mut out: BTreeMap<String, (f64, u64)> = BTreeMap::new();
        for line in metrics.lines() {
            let (is_sum, rest) = if let Some(r) = line.strip_prefix(&format!("{DURATION}_sum{{")) {
                (true, r)
            } else if let Some(r) = line.strip_prefix(&format!("{DURATION}_count{{")) {
                (false, r)
            } else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Some(name) = label(labels, "name") else {
                continue;
            };
            let entry = out.entry(name.to_string()).or_default();
            if is_sum {
                entry.0 += value.trim().parse::<f64>().unwrap_or(0.0);
            } else {
                entry.1 += value.trim().parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        Self(out)
    }

    /// What was added since `before`, webhooks without calls left out.
    pub fn since(&self, before: &Self) -> Vec<WebhookCalls> {
        self.0
            .iter()
            .filter_map(|(name, (sum, count))| {
                let (sum0, count0) = before.0.get(name).copied().unwrap_or_default();
                let calls = count.saturating_sub(count0);
                let seconds = sum - sum0;
                (calls > 0).then(|| WebhookCalls {
                    webhook: name.clone(),
                    calls,
                    seconds,
                    mean_ms: seconds * 1000.0 / calls as f64,
                })
            })
            .collect()
    }
}

/// The value of label `key` in a Prometheus label set (`a="x",b="y"`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let end = labels[start..].find('"')?;
    Some(&labels[start..start + end])
}

/// The apiserver's `/metrics`, read with the admin client.
pub async fn apiserver_webhook_seconds(client: &kube::Client) -> anyhow::Result<WebhookSeconds> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(WebhookSeconds::parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sum_and_count_per_webhook_and_the_difference() {
        let before = WebhookSeconds::parse(
            "# HELP x\n\
             apiserver_admission_webhook_admission_duration_seconds_bucket{name=\"a.io\",operation=\"CREATE\",rejected=\"false\",type=\"admit\",le=\"0.005\"} 3\n\
             apiserver_admission_webhook_admission_duration_seconds_sum{name=\"a.io\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"} 0.5\n\
             apiserver_admission_webhook_admission_duration_seconds_count{name=\"a.io\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"} 10\n",
        );
        let after = WebhookSeconds::parse(
            "apiserver_admission_webhook_admission_duration_seconds_sum{name=\"a.io\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"} 1.5\n\
             apiserver_admission_webhook_admission_duration_seconds_count{name=\"a.io\",operation=\"CREATE\",rejected=\"false\",type=\"admit\"} 30\n\
             apiserver_admission_webhook_admission_duration_seconds_sum{name=\"a.io\",operation=\"UPDATE\",rejected=\"true\",type=\"admit\"} 0.25\n\
             apiserver_admission_webhook_admission_duration_seconds_count{name=\"a.io\",operation=\"UPDATE\",rejected=\"true\",type=\"admit\"} 5\n\
             apiserver_admission_webhook_admission_duration_seconds_sum{name=\"b.io\",operation=\"CREATE\",rejected=\"false\",type=\"validating\"} 0\n\
             apiserver_admission_webhook_admission_duration_seconds_count{name=\"b.io\",operation=\"CREATE\",rejected=\"false\",type=\"validating\"} 0\n",
        );
        let calls = after.since(&before);
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].webhook, "a.io");
        assert_eq!(calls[0].calls, 25);
        assert!((calls[0].seconds - 1.25).abs() < 1e-9);
        assert!((calls[0].mean_ms - 50.0).abs() < 1e-9);
    }
}
