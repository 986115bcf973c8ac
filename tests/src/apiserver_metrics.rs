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

/// One Prometheus histogram's buckets (upper bound, cumulative count), sum (seconds) and count, its other
/// labels summed over.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// The mean, milliseconds (0 without samples).
    pub fn mean_ms(&self) -> f64 {
        if self.count > 0.0 {
            self.sum * 1000.0 / self.count
        } else {
            0.0
        }
    }

    /// The `q` quantile in milliseconds, interpolated in its bucket as PromQL's `histogram_quantile` does (the
    /// highest finite bound when it falls in `+Inf`; 0 without samples).
    pub fn quantile_ms(&self, q: f64) -> f64 {
        let mut buckets = self.buckets.clone();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let Some(&(_, total)) = buckets.last() else {
            return 0.0;
        };
        if total <= 0.0 {
            return 0.0;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, cumulative) in &buckets {
            if cumulative >= rank {
                if le.is_infinite() {
                    return lower * 1000.0;
                }
                let within = cumulative - below;
                let share = if within > 0.0 {
                    (rank - below) / within
                } else {
                    1.0
                };
                return (lower + (le - lower) * share) * 1000.0;
            }
            (lower, below) = (le, cumulative);
        }
        lower * 1000.0
    }

    /// What was added since `before` (the same series, read earlier).
    pub fn since(&self, before: &Self) -> Self {
        let of = |le: f64| {
            (before.buckets.iter())
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, c)| *c)
        };
        Self {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c - of(le)))
                .collect(),
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    /// Both histograms' samples together (the same bounds).
    pub fn merged(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for &(le, c) in &other.buckets {
            out.add("_bucket", Some(le), c);
        }
        out.sum += other.sum;
        out.count += other.count;
        out
    }

    fn add(&mut self, part: &str, le: Option<f64>, value: f64) {
        match (part, le) {
            ("_sum", _) => self.sum += value,
            ("_count", _) => self.count += value,
            (_, Some(le)) => match self.buckets.iter_mut().find(|(l, _)| *l == le) {
                Some(b) => b.1 += value,
                None => self.buckets.push((le, value)),
            },
            _ => {}
        }
    }
}

/// Histogram `name` per value of label `key` (`name`, `policy`, `webhook`; `""`: one series, under `""`), over
/// the series holding every one of `filter` (`operation="CREATE"`).
pub fn histograms(
    metrics: &str,
    name: &str,
    key: &str,
    filter: &[&str],
) -> BTreeMap<String, Histogram> {
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some((part, rest)) = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|p| rest.strip_prefix(p).map(|r| (*p, r)))
        else {
            continue;
        };
        let labelled = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once("} "),
            None => rest.strip_prefix(' ').map(|v| ("", v)),
        };
        let Some((labels, value)) = labelled else {
            continue;
        };
        if !filter.iter().all(|f| labels.contains(f)) {
            continue;
        }
        let series = if key.is_empty() {
            Some("")
        } else {
            label(labels, key)
        };
        let Some(series) = series else {
            continue;
        };
        let le = label(labels, "le").map(|l| l.parse::<f64>().unwrap_or(f64::INFINITY));
        let value = value.trim().parse::<f64>().unwrap_or(0.0);
        (out.entry(series.to_string()).or_default()).add(part, le, value);
    }
    out
}

/// Each histogram of `now` minus its reading in `before`, those without new samples left out.
pub fn histograms_since(
    now: &BTreeMap<String, Histogram>,
    before: &BTreeMap<String, Histogram>,
) -> BTreeMap<String, Histogram> {
    now.iter()
        .map(|(k, h)| {
            (
                k.clone(),
                h.since(&before.get(k).cloned().unwrap_or_default()),
            )
        })
        .filter(|(_, h)| h.count > 0.0)
        .collect()
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

    #[test]
    fn histograms_per_label_their_difference_and_quantiles() {
        let before = histograms(
            "vap_bucket{policy=\"p\",le=\"0.005\"} 1\n\
             vap_bucket{policy=\"p\",le=\"0.01\"} 1\n\
             vap_bucket{policy=\"p\",le=\"+Inf\"} 1\n\
             vap_sum{policy=\"p\"} 0.001\n\
             vap_count{policy=\"p\"} 1\n",
            "vap",
            "policy",
            &[],
        );
        let now = histograms(
            "vap_bucket{policy=\"p\",binding=\"a\",le=\"0.005\"} 6\n\
             vap_bucket{policy=\"p\",binding=\"b\",le=\"0.005\"} 5\n\
             vap_bucket{policy=\"p\",binding=\"a\",le=\"0.01\"} 11\n\
             vap_bucket{policy=\"p\",binding=\"b\",le=\"0.01\"} 10\n\
             vap_bucket{policy=\"p\",binding=\"a\",le=\"+Inf\"} 11\n\
             vap_bucket{policy=\"p\",binding=\"b\",le=\"+Inf\"} 10\n\
             vap_sum{policy=\"p\",binding=\"a\"} 0.1\n\
             vap_sum{policy=\"p\",binding=\"b\"} 0.101\n\
             vap_count{policy=\"p\",binding=\"a\"} 11\n\
             vap_count{policy=\"p\",binding=\"b\"} 10\n\
             vap_count{policy=\"q\"} 0\n\
             vapx_count{policy=\"p\"} 9\n",
            "vap",
            "policy",
            &[],
        );
        let added = histograms_since(&now, &before);
        assert_eq!(added.len(), 1, "q had no samples: {added:?}");
        let p = &added["p"];
        assert_eq!(p.count, 20.0);
        assert!((p.mean_ms() - 10.0).abs() < 1e-9);
        // 10 samples up to 5 ms, 10 more up to 10 ms: the median at 5 ms, p99 at 9.9 ms.
        assert!((p.quantile_ms(0.5) - 5.0).abs() < 1e-9);
        assert!((p.quantile_ms(0.99) - 9.9).abs() < 1e-9);
        assert_eq!(Histogram::default().quantile_ms(0.99), 0.0);
    }

    #[test]
    fn a_histogram_without_labels_is_one_series() {
        let text = "batch_bucket{le=\"1\"} 2\n\
             batch_bucket{le=\"4\"} 3\n\
             batch_bucket{le=\"+Inf\"} 3\n\
             batch_sum 7\n\
             batch_count 3\n\
             batch_size_count 9\n";
        let all = histograms(text, "batch", "", &[]);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[""].count, 3.0);
        assert!((all[""].sum - 7.0).abs() < 1e-9);
        assert!(histograms(text, "batch", "webhook", &[]).is_empty());
    }
}
