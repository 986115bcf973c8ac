//! `deploy/kustomize/components/monitoring` (the PrometheusRule and the Grafana dashboard): it renders with the
//! default install (`kubectl kustomize`); every rule and every dashboard query parses (promql-parser here, and
//! `promtool check rules`, the dashboard's queries as recording rules); the alerts fire as their unit tests say
//! (`promtool test rules` on `alerts-test.yaml`); and every metric they name is exported by the running
//! services' `/metrics` — the real webhook, scorer and observer (the observer against the real kube-apiserver)
//! after a few admissions — with the labels the queries group and filter by. The only other metrics allowed
//! are the few that come from Prometheus, kube-state-metrics and cert-manager, listed in [`EXTERNAL`].
//!
//! promtool comes from Debian's `prometheus` package: on PATH, else unpacked once into
//! `~/.cache/gpu-admission/prometheus` by `tests/tools/unpack-debian-package.sh` (a private apt
//! configuration: no root, nothing installed system-wide). Missing: SKIP, a failure under CI.

#[path = "deploy_support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::observer::Observer;
use gpu_admission_tests::{Scorer, Webhook};
use promql_parser::parser::{self, Expr};
use serde_json::{Value, json};

/// Metrics the rules may name that none of our services exports, and who does.
const EXTERNAL: [(&str, &str); 4] = [
    ("up", "Prometheus (one per scrape target)"),
    (
        "kube_deployment_status_replicas_available",
        "kube-state-metrics",
    ),
    ("kube_deployment_spec_replicas", "kube-state-metrics"),
    (
        "certmanager_certificate_expiration_timestamp_seconds",
        "cert-manager",
    ),
];

/// Our metrics the test cannot make count (a family shows in `/metrics` only once something was counted in
/// it), and the test that does count them against the real binaries.
const COUNTED_ELSEWHERE: [(&str, &str); 4] = [
    // Counted once the leader has learned something to store: cluster_observer.rs checks the stored state,
    // not this counter.
    (
        "observer_state_stores_total",
        "observer/src/convergence.rs store_if_due, once something was learned",
    ),
    (
        "observer_reported_total",
        "tests/tests/cluster_observer.rs (finished decided Pods)",
    ),
    (
        "observer_skipped_total",
        "tests/tests/cluster_observer.rs (finished Pods it cannot report)",
    ),
    // Written only by a frontend with a cluster (its Pod watch) and a policy with quotas.
    (
        "gpu_admission_quota_gpus",
        "tests/tests/cluster_quota.rs (usage of a quota'd namespace)",
    ),
];

/// Labels Prometheus adds to every scraped sample (target labels) or that external metrics carry.
const TARGET_LABELS: [&str; 7] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "deployment",
    "name",
];

const COMPONENT: &str = "components/monitoring";

/// The default install plus the servicemonitor and monitoring components, rendered.
fn render() -> anyhow::Result<Vec<Value>> {
    let tmp = tempfile::tempdir()?;
    let tree = tmp.path().join("kustomize");
    support::copy_dir(&support::kustomize_dir(), &tree)?;
    let user = tmp.path().join("user");
    std::fs::create_dir_all(&user)?;
    std::fs::write(
        user.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../kustomize/base\n\
             components:\n  - ../kustomize/components/cert-manager\n  - ../kustomize/components/servicemonitor\n  \
             - ../kustomize/{COMPONENT}\n"
        ),
    )?;
    support::parse_yaml_stream(&support::kustomize(&user)?)
}

/// Every PromQL expression: (where, expr) for each alert rule and each dashboard query (Grafana's
/// `$__rate_interval` as 5m).
fn expressions(objects: &[Value]) -> anyhow::Result<(Value, Vec<(String, String)>)> {
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule" && o["metadata"]["name"] == "gpu-admission")
        .context("no PrometheusRule gpu-admission")?;
    let mut out = Vec::new();
    for g in rule["spec"]["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap_or("?");
            out.push((
                format!("rule {name}"),
                r["expr"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "gpu-admission-dashboard")
        .context("no ConfigMap gpu-admission-dashboard")?;
    anyhow::ensure!(cm["metadata"]["labels"]["grafana_dashboard"] == "1");
    let dashboard: Value = serde_json::from_str(
        cm["data"]["gpu-admission-dashboard.json"]
            .as_str()
            .context("no dashboard JSON")?,
    )?;
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or("")
                .replace("$__rate_interval", "5m");
            out.push((
                format!("panel {:?}", p["title"].as_str().unwrap_or("?")),
                expr,
            ));
        }
    }
    Ok((rule["spec"].clone(), out))
}

/// Every (metric name, label names of its matchers) an expression selects.
fn selectors(expr: &Expr, out: &mut Vec<(String, BTreeSet<String>)>) {
    match expr {
        Expr::VectorSelector(vs) => {
            let labels = vs
                .matchers
                .matchers
                .iter()
                .map(|m| m.name.clone())
                .collect();
            out.push((vs.name.clone().unwrap_or_default(), labels));
        }
        Expr::MatrixSelector(ms) => selectors(&Expr::VectorSelector(ms.vs.clone()), out),
        Expr::Aggregate(a) => {
            selectors(&a.expr, out);
            if let Some(p) = &a.param {
                selectors(p, out);
            }
        }
        Expr::Unary(u) => selectors(&u.expr, out),
        Expr::Binary(b) => {
            selectors(&b.lhs, out);
            selectors(&b.rhs, out);
        }
        Expr::Paren(p) => selectors(&p.expr, out),
        Expr::Subquery(s) => selectors(&s.expr, out),
        Expr::Call(c) => c.args.args.iter().for_each(|a| selectors(a, out)),
        _ => {}
    }
}

/// Families and the label names of their samples, from OpenMetrics text (`# TYPE` lines and samples).
fn families(text: &str, out: &mut BTreeMap<String, BTreeSet<String>>) {
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            out.entry(name.to_string()).or_default();
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels) = match line.split_once('{') {
            Some((n, rest)) => (n, rest.split_once('}').map(|(l, _)| l).unwrap_or("")),
            None => (line.split_whitespace().next().unwrap_or(""), ""),
        };
        let names: BTreeSet<String> = labels
            .split(',')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
            .filter(|k| k != "le" && k != "quantile")
            .collect();
        out.entry(name.to_string()).or_default().extend(names);
    }
}

/// The family a selected series name belongs to (`x_total`, `x_bucket`, … → `x`), if exported.
fn family_of<'a>(
    name: &str,
    exported: &'a BTreeMap<String, BTreeSet<String>>,
) -> Option<&'a BTreeSet<String>> {
    if let Some(f) = exported.get(name) {
        return Some(f);
    }
    ["_total", "_bucket", "_count", "_sum", "_created"]
        .iter()
        .find_map(|s| name.strip_suffix(s).and_then(|base| exported.get(base)))
}

/// promtool: on PATH, else unpacked (once, into the cache) from Debian's `prometheus` package by
/// `tests/tools/unpack-debian-package.sh`.
fn promtool() -> Option<PathBuf> {
    if let Some(p) = support::which("promtool") {
        return Some(p);
    }
    let out = Command::new("bash")
        .arg(support::repo_root().join("tests/tools/unpack-debian-package.sh"))
        .arg("prometheus")
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "unpack-debian-package.sh prometheus: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let root = String::from_utf8_lossy(&out.stdout);
    let bin = PathBuf::from(root.lines().last()?.trim()).join("usr/bin/promtool");
    bin.is_file().then_some(bin)
}

fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(promtool)
        .current_dir(dir)
        .args(args)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool {args:?} failed:\n{text}");
    }
    Ok(text)
}

#[test]
fn rules_and_dashboard_render_parse_and_fire() {
    if !support::require_tool("kubectl", "its kustomize renders the install") {
        return;
    }
    let objects = render().expect("the default install with the monitoring component renders");
    let (spec, exprs) = expressions(&objects).unwrap();
    assert!(exprs.len() >= 25, "{} expressions", exprs.len());
    for (at, e) in &exprs {
        parser::parse(e).unwrap_or_else(|err| panic!("{at}: {err}\n{e}"));
    }
    let alerts: Vec<&str> = exprs
        .iter()
        .filter_map(|(at, _)| at.strip_prefix("rule "))
        .collect();
    for wanted in [
        "GpuAdmissionWebhookDown",
        "GpuAdmissionWebhookNotReady",
        "GpuAdmissionPassThroughHigh",
        "GpuAdmissionScorerUnavailable",
        "GpuAdmissionPolicyReloadFailing",
        "GpuAdmissionCertificateExpiring",
        "GpuAdmissionLearnedStateNotStored",
    ] {
        assert!(alerts.contains(&wanted), "no alert {wanted}: {alerts:?}");
    }
    // Every runbook link names a section of deploy/README.md.
    let readme = std::fs::read_to_string(support::repo_root().join("deploy/README.md")).unwrap();
    for g in spec["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let link = r["annotations"]["runbook"].as_str().unwrap_or("");
            let anchor = link
                .strip_prefix("deploy/README.md#")
                .expect("runbook link");
            let heading = readme
                .lines()
                .any(|l| l.starts_with('#') && l.to_lowercase().replace(['#', ' '], "") == anchor);
            assert!(
                heading,
                "{}: no heading for #{anchor} in deploy/README.md",
                r["alert"]
            );
        }
    }

    let Some(promtool) = promtool() else {
        gpu_admission_tests::skip::skip(
            "promtool check rules / test rules",
            "promtool is not on PATH and Debian's prometheus package could not be unpacked",
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("rules.yaml"),
        serde_yaml::to_string(&spec).unwrap(),
    )
    .unwrap();
    let dashboard_rules = json!({"groups": [{"name": "dashboard", "rules": exprs.iter().enumerate()
        .filter(|(_, (at, _))| at.starts_with("panel"))
        .map(|(i, (_, e))| json!({"record": format!("dashboard:query_{i}"), "expr": e}))
        .collect::<Vec<_>>()}]});
    std::fs::write(
        tmp.path().join("dashboard.yaml"),
        serde_yaml::to_string(&dashboard_rules).unwrap(),
    )
    .unwrap();
    let component = support::kustomize_dir().join(COMPONENT);
    std::fs::copy(
        component.join("alerts-test.yaml"),
        tmp.path().join("alerts-test.yaml"),
    )
    .unwrap();
    let checked = run_promtool(
        &promtool,
        tmp.path(),
        &["check", "rules", "rules.yaml", "dashboard.yaml"],
    )
    .unwrap();
    println!("{checked}");
    let tested = run_promtool(
        &promtool,
        tmp.path(),
        &["test", "rules", "alerts-test.yaml"],
    )
    .unwrap();
    println!("{tested}");
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Drives one decision, one Warn-mode violation and one validation through the webhook.
async fn admit_a_little(webhook: &Webhook) -> anyhow::Result<()> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
        "annotations": {"app.kubernetes.io/job-type": "train-llama"}},
        "spec": {"nodeSelector": {"gpu.nvidia.com/class": "H100-80GB"},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    let outcome = webhook.admit_pod(&pod, "students").await?;
    anyhow::ensure!(outcome.allowed);
    let review = gpu_admission_tests::review::pod_review(
        &pod,
        "students",
        gpu_admission_tests::Operation::Create,
    );
    let resp = webhook.https().post_json("/validate-pod", &review).await?;
    anyhow::ensure!(resp.status.is_success(), "validate-pod: {}", resp.status);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_named_is_exported_by_the_services() -> anyhow::Result<()> {
    if !support::require_tool("kubectl", "its kustomize renders the install") {
        return Ok(());
    }
    let (_, exprs) = expressions(&render()?)?;
    let Some(cluster) = LocalCluster::start().await? else {
        return Ok(());
    };
    cluster.create_namespace("gpu-admission", None).await?;
    // The learned-state ConfigMap the observer stores into (shipped empty by the install).
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(
        json!({"apiVersion": "v1",
        "kind": "ConfigMap", "metadata": {"name": "gpu-admission-learned-state", "namespace": "gpu-admission"}}),
    )?;
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        cluster.client(),
        "gpu-admission",
    )
    .create(&Default::default(), &cm)
    .await?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, scorer::policy::DEFAULT_POLICY_YAML)?;
    let scorer = Scorer::builder()
        .policy(&policy)
        .arg("--policy-poll-ms=100")
        .start()
        .await?;
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier("students", "bronze")
        .start()
        .await?;
    let observer = Observer::builder(cluster.kubeconfig(), &[scorer.url()], "observer-0")
        .arg("--state-configmap=gpu-admission-learned-state")
        .start()
        .await?;
    admit_a_little(&webhook).await?;

    // A policy the scorer refuses, and a serving certificate the webhook cannot load: the reload counters.
    std::fs::write(&policy, "catalog: [not a policy\n")?;
    std::fs::write(webhook.dir().join("tls/tls.crt"), "not a certificate\n")?;
    let scorer_admin = scorer.admin_addr().context("scorer admin address")?;
    let scrape = || async {
        let mut exported = BTreeMap::new();
        families(&webhook.metrics().await?, &mut exported);
        families(
            &gpu_admission_tests::https::http_get_text(scorer_admin, "/metrics").await?,
            &mut exported,
        );
        families(&observer.metrics().await?, &mut exported);
        anyhow::Ok(exported)
    };
    let counted = ["gpu_admission_tls_reloads", "scorer_policy_reloads"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let exported = loop {
        let exported = scrape().await?;
        let missing: Vec<&&str> = counted
            .iter()
            .filter(|f| !exported.contains_key(**f))
            .collect();
        if missing.is_empty() {
            break exported;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "never counted: {missing:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };

    let mut problems = Vec::new();
    let mut named = BTreeSet::new();
    for (at, e) in &exprs {
        let mut found = Vec::new();
        selectors(&parser::parse(e).map_err(anyhow::Error::msg)?, &mut found);
        for (name, labels) in found {
            named.insert(name.clone());
            if EXTERNAL
                .iter()
                .chain(&COUNTED_ELSEWHERE)
                .any(|(n, _)| *n == name)
            {
                continue;
            }
            let Some(family_labels) = family_of(&name, &exported) else {
                problems.push(format!("{at}: {name} is exported by no service"));
                continue;
            };
            // Label names are checked where the family has samples (a family nothing was counted in yet
            // shows only its `# TYPE`).
            for l in labels
                .iter()
                .filter(|l| !TARGET_LABELS.contains(&l.as_str()) && *l != "__name__")
            {
                if !family_labels.is_empty() && !family_labels.contains(l) {
                    problems.push(format!(
                        "{at}: {name} has no label {l} (it has {family_labels:?})"
                    ));
                }
            }
        }
    }
    println!(
        "{} metrics named, all exported but {:?}",
        named.len(),
        EXTERNAL.map(|(n, who)| format!("{n} ({who})"))
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for prefix in ["gpu_admission_", "scorer_", "observer_"] {
        assert!(
            named.iter().any(|n| n.starts_with(prefix)),
            "no {prefix} metric named"
        );
    }
    Ok(())
}
