//! Prometheus metrics of the two real processes: scraped from their plain-HTTP admin ports (`/metrics`)
//! before and after admissions, and after scorer faults made from outside (SIGSTOP = hung, SIGKILL = down).
//! Names and labels are the telemetry contract (BRIEF.md, "Each binary owns its own metrics struct").

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use gpu_admission_tests::{Scorer, Webhook};
use serde_json::{Value, json};

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition (Prometheus text or OpenMetrics): samples plus the `# TYPE` declarations.
#[derive(Debug, Default)]
struct Exposition {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
    text: String,
}

impl Exposition {
    fn parse(text: &str) -> anyhow::Result<Self> {
        let mut out = Exposition {
            text: text.to_string(),
            ..Default::default()
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    out.types.insert(name.to_string(), kind.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            out.samples
                .push(parse_sample(line).with_context(|| format!("metrics line {line:?}"))?);
        }
        Ok(out)
    }

    /// Sum of the samples named `name` whose labels include every `(key, value)` of `filter`
    /// (label values compared case-insensitively).
    fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                filter.iter().all(|(k, v)| {
                    s.labels
                        .get(*k)
                        .is_some_and(|got| got.eq_ignore_ascii_case(v))
                })
            })
            .map(|s| s.value)
            .sum()
    }

    /// Fails with the whole exposition unless metric family `family` is declared with type `kind`.
    fn require_type(&self, family: &str, kind: &str) {
        assert_eq!(
            self.types.get(family).map(String::as_str),
            Some(kind),
            "metric family {family} ({kind}) missing; exposition:\n{}",
            self.text
        );
    }
}

fn parse_sample(line: &str) -> anyhow::Result<Sample> {
    let (name_and_labels, rest) = match line.find('{') {
        Some(_) => {
            let close = line.rfind('}').context("unclosed label set")?;
            (&line[..close + 1], &line[close + 1..])
        }
        None => {
            let space = line.find(' ').context("no value")?;
            (&line[..space], &line[space..])
        }
    };
    let value = rest.split_whitespace().next().context("no value")?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse()?,
    };
    let (name, labels) = match name_and_labels.find('{') {
        None => (name_and_labels.to_string(), BTreeMap::new()),
        Some(open) => (
            name_and_labels[..open].to_string(),
            parse_labels(&name_and_labels[open + 1..name_and_labels.len() - 1])?,
        ),
    };
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// `k="v",k2="v\"2"` → map (handles `\\`, `\"`, `\n` escapes).
fn parse_labels(mut s: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if s.is_empty() {
            return Ok(labels);
        }
        let eq = s.find('=').context("label without =")?;
        let key = s[..eq].trim().to_string();
        let mut chars = s[eq + 1..].char_indices();
        anyhow::ensure!(
            matches!(chars.next(), Some((_, '"'))),
            "label value not quoted"
        );
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => break,
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.context("unterminated label value")?;
        labels.insert(key, value);
        s = &s[end..];
    }
}

/// `GET /metrics` on an admin port; returns the content type and the parsed body.
async fn scrape(addr: SocketAddr) -> anyhow::Result<(String, Exposition)> {
    let response = gpu_admission_tests::https::http_get(addr, "/metrics").await?;
    anyhow::ensure!(
        response.status.is_success(),
        "GET /metrics on {addr}: {}",
        response.status
    );
    let content_type = response
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((
        content_type,
        Exposition::parse(&String::from_utf8_lossy(&response.body))?,
    ))
}

async fn scrape_body(addr: SocketAddr) -> anyhow::Result<Exposition> {
    Ok(scrape(addr).await?.1)
}

fn gpu_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {
            "gpu-admission.io/job-type": "train-llama", "gpu-admission.io/gpu-memory-gib": "70"}},
        "spec": {"containers": [{"name": "trainer", "image": "registry.example/trainer:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    })
}

fn plain_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_move_with_admissions_and_scorer_faults_are_counted() -> anyhow::Result<()> {
    let mut scorer = Scorer::builder().name("scorer-metrics").start().await?;
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier("ml", "gold")
        .deadline_ms(300)
        .name("webhook-metrics")
        .start()
        .await?;
    let scorer_admin = scorer.admin_addr().with_context(|| {
        format!(
            "scorer printed no admin `listening on` line\n{}",
            scorer.process.log_tail(20)
        )
    })?;
    let webhook_admin = webhook.admin_addr().with_context(|| {
        format!(
            "webhook printed no admin `listening on` line\n{}",
            webhook.process.log_tail(20)
        )
    })?;

    // Both admin ports speak OpenMetrics text and declare the contract's families.
    let (scorer_type, scorer_before) = scrape(scorer_admin).await?;
    let (webhook_type, webhook_before) = scrape(webhook_admin).await?;
    for content_type in [&scorer_type, &webhook_type] {
        assert!(
            content_type.starts_with("application/openmetrics-text")
                || content_type.starts_with("text/plain"),
            "unexpected /metrics content type {content_type:?}"
        );
    }
    // Families without labels exist from the start; labelled ones appear with their first sample.
    webhook_before.require_type("gpu_admission_scorer_call_duration_seconds", "histogram");
    scorer_before.require_type("scorer_score_duration_seconds", "histogram");
    scorer_before.require_type("scorer_state_snapshot_age_seconds", "gauge");
    scorer_before.require_type("scorer_explored_decisions", "counter");

    // Three GPU Pods (mutated) and one Pod without GPUs (skipped, no scorer call).
    const GPU_PODS: usize = 3;
    for i in 0..GPU_PODS {
        let outcome = webhook
            .admit_pod(&gpu_pod(&format!("train-{i}")), "ml")
            .await?;
        assert!(
            outcome.patch.is_some(),
            "GPU pod {i} not mutated: {:?}",
            outcome.raw
        );
    }
    let skipped = webhook.admit_pod(&plain_pod("web-0"), "ml").await?;
    assert!(skipped.patch.is_none());

    let webhook_after = scrape_body(webhook_admin).await?;
    let scorer_after = scrape_body(scorer_admin).await?;
    let delta_w = |name: &str, filter: &[(&str, &str)]| {
        webhook_after.sum(name, filter) - webhook_before.sum(name, filter)
    };
    let delta_s = |name: &str, filter: &[(&str, &str)]| {
        scorer_after.sum(name, filter) - scorer_before.sum(name, filter)
    };
    let n = GPU_PODS as f64;
    webhook_after.require_type("gpu_admission_admissions", "counter");
    webhook_after.require_type("gpu_admission_admission_duration_seconds", "histogram");
    webhook_after.require_type("gpu_admission_scorer_calls", "counter");
    scorer_after.require_type("scorer_requests", "counter");

    assert_eq!(
        delta_w(
            "gpu_admission_admissions_total",
            &[
                ("webhook", "mutate-pod"),
                ("operation", "CREATE"),
                ("outcome", "mutated")
            ]
        ),
        n,
        "{}",
        webhook_after.text
    );
    assert_eq!(
        delta_w(
            "gpu_admission_admissions_total",
            &[("webhook", "mutate-pod"), ("outcome", "skipped")]
        ),
        1.0,
        "{}",
        webhook_after.text
    );
    assert_eq!(
        delta_w(
            "gpu_admission_admission_duration_seconds_count",
            &[("webhook", "mutate-pod")]
        ),
        n + 1.0,
        "{}",
        webhook_after.text
    );
    assert!(
        delta_w(
            "gpu_admission_admission_duration_seconds_sum",
            &[("webhook", "mutate-pod")]
        ) > 0.0,
        "{}",
        webhook_after.text
    );
    assert_eq!(
        delta_w("gpu_admission_scorer_calls_total", &[("result", "ok")]),
        n,
        "{}",
        webhook_after.text
    );
    assert_eq!(
        delta_w("gpu_admission_scorer_call_duration_seconds_count", &[]),
        n,
        "{}",
        webhook_after.text
    );

    assert_eq!(
        delta_s(
            "scorer_requests_total",
            &[("rpc", "Score"), ("result", "ok")]
        ),
        n,
        "{}",
        scorer_after.text
    );
    assert_eq!(
        delta_s("scorer_score_duration_seconds_count", &[]),
        n,
        "{}",
        scorer_after.text
    );

    // Fault 1: the scorer hangs (SIGSTOP). Within its deadline the webhook falls back to the tier's default
    // placement (a tier that restricts classes is never left unbound) and counts a timeout.
    let fault_before = scrape_body(webhook_admin).await?;
    scorer.process.pause()?;
    let hung = webhook.admit_pod(&gpu_pod("train-hung"), "ml").await;
    scorer.process.resume()?;
    let hung = hung?;
    assert!(
        hung.allowed && hung.patch_string().contains("tier-default"),
        "hung scorer: the tier's default placement: {:?}",
        hung.raw
    );
    let after_hang = scrape_body(webhook_admin).await?;
    let faults = |e: &Exposition, result: &str| {
        e.sum("gpu_admission_scorer_calls_total", &[("result", result)])
    };
    assert_eq!(
        faults(&after_hang, "timeout") - faults(&fault_before, "timeout"),
        1.0,
        "a hung scorer is a timeout:\n{}",
        after_hang.text
    );
    assert_eq!(
        after_hang.sum(
            "gpu_admission_admissions_total",
            &[("webhook", "mutate-pod"), ("outcome", "tier_default")]
        ) - fault_before.sum(
            "gpu_admission_admissions_total",
            &[("webhook", "mutate-pod"), ("outcome", "tier_default")]
        ),
        1.0,
        "{}",
        after_hang.text
    );

    // Fault 2: the scorer is down (SIGKILL). The fallback again, counted as unavailable (or a timeout,
    // should the connection attempt itself outlast the deadline).
    scorer.process.kill();
    let down = webhook.admit_pod(&gpu_pod("train-down"), "ml").await?;
    assert!(
        down.allowed && down.patch_string().contains("tier-default"),
        "dead scorer: the tier's default placement: {:?}",
        down.raw
    );
    let after_kill = scrape_body(webhook_admin).await?;
    let failed = |e: &Exposition| faults(e, "unavailable") + faults(e, "timeout");
    assert_eq!(
        failed(&after_kill) - failed(&after_hang),
        1.0,
        "a dead scorer is counted as unavailable or timeout:\n{}",
        after_kill.text
    );
    assert_eq!(
        after_kill.sum(
            "gpu_admission_admissions_total",
            &[("webhook", "mutate-pod"), ("outcome", "tier_default")]
        ) - after_hang.sum(
            "gpu_admission_admissions_total",
            &[("webhook", "mutate-pod"), ("outcome", "tier_default")]
        ),
        1.0,
        "{}",
        after_kill.text
    );
    Ok(())
}

#[test]
fn exposition_parser_reads_labels_and_escapes() {
    let text = "# TYPE demo counter\n\
                demo_total{result=\"ok\",op=\"a\\\"b\"} 3\n\
                demo_total{result=\"timeout\"} 1.5\n\
                demo_created 1.7e9\n\
                # EOF\n";
    let e = Exposition::parse(text).unwrap();
    assert_eq!(e.types.get("demo").map(String::as_str), Some("counter"));
    assert_eq!(e.sum("demo_total", &[]), 4.5);
    assert_eq!(e.sum("demo_total", &[("result", "OK")]), 3.0);
    assert_eq!(e.sum("demo_total", &[("op", "a\"b")]), 3.0);
    assert_eq!(e.sum("demo_created", &[]), 1.7e9);
    assert_eq!(e.sum("missing", &[]), 0.0);
}

/// Scrapes `addr` until `done(exposition)` holds; fails with the last exposition after `timeout`.
async fn scrape_until(
    addr: SocketAddr,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Exposition) -> bool,
) -> anyhow::Result<Exposition> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let e = scrape_body(addr).await?;
        if done(&e) {
            return Ok(e);
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "{what} not seen within {timeout:?}; last exposition:\n{}",
                e.text
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The repository's default policy (the scorer's embedded default and the ConfigMap's file).
fn default_policy_yaml() -> anyhow::Result<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/policy/default-policy.yaml");
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// Replaces `path` in one step (a new file renamed over it), as a Secret or ConfigMap volume update does: a
/// plain write truncates first, and a poll between the truncation and the write would count one more failure.
fn replace_file(path: &std::path::Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    let tmp = path.with_extension("next");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_and_certificate_reloads_and_failures_are_counted() -> anyhow::Result<()> {
    const WAIT: Duration = Duration::from_secs(20);

    // Scorer with a policy file it polls every 100 ms: the start counts one successful load.
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yaml");
    let good = default_policy_yaml()?;
    std::fs::write(&policy, &good)?;
    let scorer = Scorer::builder()
        .name("scorer-reloads")
        .policy(&policy)
        .env("GPU_ADMISSION_POLICY_POLL_MS", "100")
        .start()
        .await?;
    let admin = scorer
        .admin_addr()
        .context("scorer printed no admin `listening on` line")?;
    let reloads =
        |e: &Exposition, result: &str| e.sum("scorer_policy_reloads_total", &[("result", result)]);
    let start = scrape_until(admin, WAIT, "the initial policy load", |e| {
        reloads(e, "ok") >= 1.0
    })
    .await?;
    start.require_type("scorer_policy_reloads", "counter");
    let ok_at_start = reloads(&start, "ok");

    // An invalid file is refused (and counted); the previous policy stays in force.
    replace_file(&policy, "catalog: [this is not a policy\n")?;
    scrape_until(admin, WAIT, "a rejected policy reload", |e| {
        reloads(e, "rejected") == 1.0
    })
    .await?;
    scorer
        .fetch_policy()
        .await
        .context("the scorer must keep serving its previous policy")?;

    // A valid new version loads.
    replace_file(&policy, format!("version: \"obs-reload-test\"\n{good}"))?;
    let after = scrape_until(admin, WAIT, "a successful policy reload", |e| {
        reloads(e, "ok") == ok_at_start + 1.0
    })
    .await?;
    assert_eq!(reloads(&after, "rejected"), 1.0, "{}", after.text);
    assert_eq!(scorer.fetch_policy().await?.version, "obs-reload-test");

    // Webhook: its certificate files (here the dev mode's, watched like a mounted Secret) are checked every
    // 200 ms. A broken key is refused and counted; the original files load again.
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier("ml", "gold")
        .env("WEBHOOK_TLS_POLL_MS", "200")
        .name("webhook-reloads")
        .start()
        .await?;
    let admin = webhook
        .admin_addr()
        .context("webhook printed no admin `listening on` line")?;
    let tls_reloads = |e: &Exposition, result: &str| {
        e.sum("gpu_admission_tls_reloads_total", &[("result", result)])
    };
    let key = webhook.dir().join("tls").join("tls.key");
    let original_key = std::fs::read(&key)?;
    replace_file(
        &key,
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )?;
    scrape_until(admin, WAIT, "a failed certificate reload", |e| {
        tls_reloads(e, "error") == 1.0
    })
    .await?;
    // Still serving with the previous certificate.
    let outcome = webhook
        .admit_pod(&gpu_pod("train-during-bad-cert"), "ml")
        .await?;
    assert!(outcome.allowed);
    replace_file(&key, &original_key)?;
    let after = scrape_until(admin, WAIT, "a successful certificate reload", |e| {
        tls_reloads(e, "ok") == 1.0
    })
    .await?;
    after.require_type("gpu_admission_tls_reloads", "counter");
    assert_eq!(tls_reloads(&after, "error"), 1.0, "{}", after.text);
    Ok(())
}
