//! Part C's moving parts: the registrations and the floor's bindings installed and removed (and the wait
//! until the apiserver acts on the change), and Pod creation by concurrent clients timed per request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpu_admission_tests::apiserver_metrics::{Histogram, apiserver_metrics, histograms};
use gpu_admission_tests::cluster::{LocalCluster, kubectl};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde::Serialize;
use serde_json::Value;

use crate::pods::{Shape, annotation, pod};

/// The apiserver's histogram of its calls to each webhook (label `name`).
pub const WEBHOOK_DURATION: &str = "apiserver_admission_webhook_admission_duration_seconds";
/// The apiserver's histogram of each ValidatingAdmissionPolicy's evaluation (label `policy`).
pub const POLICY_DURATION: &str = "apiserver_validating_admission_policy_check_duration_seconds";
/// The apiserver's own latency of each request (Pod CREATEs: `verb="POST"`, `resource="pods"`).
pub const REQUEST_DURATION: &str = "apiserver_request_duration_seconds";
/// The frontend's own time per admission (label `webhook`).
pub const FRONTEND_DURATION: &str = "gpu_admission_admission_duration_seconds";
/// The Pod webhooks every benchmark Pod reaches when installed.
pub const POD_WEBHOOKS: [&str; 2] = ["pods.gpu-admission.io", "pods.validate.gpu-admission.io"];

/// Whether our registrations and the floor's bindings are in the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arm {
    With,
    Without,
}

/// What is installed for the `with` arm: the two registrations and the floor's bindings.
pub struct Installation {
    pub mutating: Value,
    pub validating: Value,
    /// The ValidatingAdmissionPolicyBindings of `deploy/kustomize/base/floor.yaml`.
    pub bindings: Vec<Value>,
}

/// The apiserver's webhook and policy histograms, read now.
pub async fn admission_histograms(
    admin: &kube::Client,
) -> anyhow::Result<(BTreeMap<String, Histogram>, BTreeMap<String, Histogram>)> {
    let text = apiserver_metrics(admin).await?;
    Ok((
        histograms(&text, WEBHOOK_DURATION, "name", &[]),
        histograms(&text, POLICY_DURATION, "policy", &[]),
    ))
}

impl Installation {
    /// Installs (`With`) or removes (`Without`) everything, then waits until a probe Pod shows the apiserver
    /// acting on it: with, the Pod decided, both Pod webhooks and the floor's Pod policy called; without,
    /// none of that.
    pub async fn set(
        &self,
        cluster: &LocalCluster,
        arm: Arm,
        tenant: &kube::Client,
        probe_ns: &str,
    ) -> anyhow::Result<Duration> {
        let admin = cluster.client();
        let started = Instant::now();
        let mutating = Api::<MutatingWebhookConfiguration>::all(admin.clone());
        let validating = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
        let names: Vec<String> = (self.bindings.iter())
            .filter_map(|b| b["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        match arm {
            Arm::With => {
                let pp = PostParams::default();
                mutating
                    .create(&pp, &serde_json::from_value(self.mutating.clone())?)
                    .await
                    .context("the mutating registration")?;
                validating
                    .create(&pp, &serde_json::from_value(self.validating.clone())?)
                    .await
                    .context("the validating registration")?;
                let list =
                    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": self.bindings});
                let a = kubectl(
                    cluster.kubeconfig(),
                    None,
                    &[],
                    &["create", "-f", "-"],
                    &list.to_string(),
                );
                ensure!(a.ok, "the floor's bindings: {}", a.stderr);
            }
            Arm::Without => {
                let dp = DeleteParams::default();
                let name = |v: &Value| v["metadata"]["name"].as_str().unwrap_or("").to_string();
                mutating.delete(&name(&self.mutating), &dp).await?;
                validating.delete(&name(&self.validating), &dp).await?;
                let mut args = vec!["delete", "validatingadmissionpolicybinding"];
                args.extend(names.iter().map(String::as_str));
                let a = kubectl(cluster.kubeconfig(), None, &[], &args, "");
                ensure!(a.ok, "deleting the floor's bindings: {}", a.stderr);
            }
        }
        for attempt in 0.. {
            let (state, seen) = probe(&admin, tenant, probe_ns, attempt).await?;
            if state == Some(arm == Arm::With) {
                return Ok(started.elapsed());
            }
            ensure!(
                started.elapsed() < Duration::from_secs(60),
                "the apiserver did not act on {arm:?} within 60 s; the last probe: {seen}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        unreachable!()
    }
}

/// Creates one GPU Pod as the tenant and deletes it: `Some(true)` when it was decided and both Pod webhooks and
/// the floor's Pod policy were called for it, `Some(false)` when it was stored and none was, `None` in
/// between (one of them picked up, or the Pod denied by the floor alone).
async fn probe(
    admin: &kube::Client,
    tenant: &kube::Client,
    ns: &str,
    attempt: u32,
) -> anyhow::Result<(Option<bool>, String)> {
    let (hooks0, policies0) = admission_histograms(admin).await?;
    let api = Api::<Pod>::namespaced(tenant.clone(), ns);
    let name = format!("probe-{attempt}");
    let created = api
        .create(&PostParams::default(), &pod(&name, "probe", Shape::Gpu, 0))
        .await;
    let decided = created
        .as_ref()
        .is_ok_and(|p| annotation(p, ANN_DECIDED_AT).is_some());
    if created.is_ok() {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        api.delete(&name, &dp).await?;
    }
    let (hooks1, policies1) = admission_histograms(admin).await?;
    let called =
        |now: &BTreeMap<String, Histogram>, before: &BTreeMap<String, Histogram>, key: &str| {
            now.get(key).map_or(0.0, |h| h.count) > before.get(key).map_or(0.0, |h| h.count)
        };
    let hooks = POD_WEBHOOKS.map(|h| called(&hooks1, &hooks0, h));
    let floor = called(&policies1, &policies0, "gpu-admission-floor-pods");
    let all = decided && hooks.iter().all(|c| *c) && floor;
    let none = created.is_ok() && !decided && !hooks.iter().any(|c| *c) && !floor;
    let seen = format!(
        "created {:?}, decided {decided}, {POD_WEBHOOKS:?} called {hooks:?}, the floor's Pod policy {floor}; \
         policies seen {:?}",
        created.as_ref().map(|_| ()).map_err(|e| e.to_string()),
        policies1.keys().collect::<Vec<_>>()
    );
    let state = if all {
        Some(true)
    } else if none {
        Some(false)
    } else {
        None
    };
    Ok((state, seen))
}

/// What one run's clients saw.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub pods: usize,
    pub failed: usize,
    /// Answers 429 (the apiserver's flow control) retried after 50 ms; a Pod's latency counts from its first
    /// attempt.
    pub retried_429: usize,
    pub seconds: f64,
    pub per_second: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: Vec<String>,
    /// Every creation's latency, ms (pooled over rounds for the cell's percentiles).
    #[serde(skip)]
    pub latencies_ms: Vec<f64>,
}

/// The `q` quantile of sorted `v` (nearest rank; 0 when empty).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `pods` Pods of `shape` over `namespaces` (round-robin), created by `clients` in closed loops, each
/// request timed. Pod `i` is `{run}-{i}`.
pub async fn create_timed(
    clients: &[kube::Client],
    namespaces: &[(String, String)],
    pods: usize,
    run: &str,
    shape: Shape,
) -> Load {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let (client, next, namespaces, run) = (
            client.clone(),
            next.clone(),
            namespaces.to_vec(),
            run.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut failed, mut retried, mut errors, mut latencies) =
                (0, 0, Vec::new(), Vec::new());
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    break;
                }
                let (ns, _) = &namespaces[i % namespaces.len()];
                let p = pod(&format!("{run}-{i}"), &run, shape, i);
                let api = Api::<Pod>::namespaced(client.clone(), ns);
                let sent = Instant::now();
                loop {
                    match api.create(&PostParams::default(), &p).await {
                        Ok(_) => {
                            latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                            break;
                        }
                        Err(kube::Error::Api(e)) if e.code == 429 => {
                            retried += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => {
                            failed += 1;
                            if errors.len() < 3 {
                                errors.push(format!("{ns}/{run}-{i}: {e}"));
                            }
                            break;
                        }
                    }
                }
            }
            (failed, retried, errors, latencies)
        }));
    }
    let (mut failed, mut retried_429, mut errors, mut latencies) = (0, 0, Vec::new(), Vec::new());
    for t in tasks {
        let (f, r, e, l) = t.await.expect("a creating client panicked");
        failed += f;
        retried_429 += r;
        errors.extend(e);
        latencies.extend(l);
    }
    let seconds = started.elapsed().as_secs_f64();
    errors.truncate(5);
    latencies.sort_by(f64::total_cmp);
    let avg_ms = latencies.iter().sum::<f64>() / latencies.len().max(1) as f64;
    Load {
        pods,
        failed,
        retried_429,
        seconds,
        per_second: (pods - failed) as f64 / seconds,
        avg_ms,
        p50_ms: quantile(&latencies, 0.5),
        p95_ms: quantile(&latencies, 0.95),
        p99_ms: quantile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(0.0),
        errors,
        latencies_ms: latencies,
    }
}
