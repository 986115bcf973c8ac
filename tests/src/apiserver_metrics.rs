//! The kube-apiserver's own account of what it spent, from its `/metrics` (read with the admin client): its
//! webhook calls (`apiserver_admission_webhook_admission_duration_seconds`, per webhook, optionally per
//! operation) and any histogram's sum and count over a label filter (`apiserver_request_duration_seconds` of
//! Pod CREATEs). The same reader takes a frontend's `/metrics` text.

use std::collections::BTreeMap;

use serde::Serialize;

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
        Self::parse_operation(metrics, None)
    }

    /// [`Self::parse`] of the calls for one `operation` (`CREATE`, `UPDATE`, …) only, or of all.
    pub fn parse_operation(metrics: &str, operation: Option<&str>) -> Self {
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
            if operation.is_some_and(|op| label(labels, "operation") != Some(op)) {
                continue;
            }
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
pub async fn apiserver_metrics(client: &kube::Client) -> anyhow::Result<String> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}

/// [`WebhookSeconds`] of the apiserver's `/metrics`, read with the admin client.
pub async fn apiserver_webhook_seconds(client: &kube::Client) -> anyhow::Result<WebhookSeconds> {
    Ok(WebhookSeconds::parse(&apiserver_metrics(client).await?))
}

/// Sum (seconds) and count of a histogram's samples whose label sets hold every one of `labels`
/// (`verb="POST"`), all other labels summed over: `histogram_seconds(text,
/// "apiserver_request_duration_seconds", &["verb=\"POST\"", "resource=\"pods\""])`.
pub fn histogram_seconds(metrics: &str, name: &str, labels: &[&str]) -> (f64, u64) {
    let (sum, count) = (format!("{name}_sum"), format!("{name}_count"));
    let mut out = (0.0, 0);
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, set) = series.split_once('{').unwrap_or((series, "}"));
        if !labels.iter().all(|l| set.contains(l)) {
            continue;
        }
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        if metric == sum {
            out.0 += value;
        } else if metric == count {
            out.1 += value as u64;
        }
    }
    out
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
        let creates = WebhookSeconds::parse_operation(
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"a.io\",operation=\"UPDATE\",rejected=\"true\",type=\"admit\"} 5\n",
            Some("CREATE"),
        );
        assert!(creates.0.is_empty());
        let calls = after.since(&before);
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].webhook, "a.io");
        assert_eq!(calls[0].calls, 25);
        assert!((calls[0].seconds - 1.25).abs() < 1e-9);
        assert!((calls[0].mean_ms - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_histograms_sum_and_count_over_a_label_filter() {
        let text = "apiserver_request_duration_seconds_sum{resource=\"pods\",subresource=\"\",verb=\"POST\"} 2.5\n\
             apiserver_request_duration_seconds_count{resource=\"pods\",subresource=\"\",verb=\"POST\"} 10\n\
             apiserver_request_duration_seconds_sum{resource=\"pods\",subresource=\"binding\",verb=\"POST\"} 9\n\
             apiserver_request_duration_seconds_sum{resource=\"pods\",subresource=\"\",verb=\"PUT\"} 7\n\
             gpu_admission_admission_duration_seconds_sum{webhook=\"mutate-pod\"} 0.5\n";
        let post = ["verb=\"POST\"", "resource=\"pods\"", "subresource=\"\""];
        assert_eq!(
            histogram_seconds(text, "apiserver_request_duration_seconds", &post),
            (2.5, 10)
        );
        assert_eq!(
            histogram_seconds(text, "gpu_admission_admission_duration_seconds", &[]),
            (0.5, 0)
        );
    }
}
