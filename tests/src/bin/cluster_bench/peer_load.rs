//! Part C's moving parts: the registrations and the floor's bindings installed and removed (and the wait
//! until the apiserver acts on the change), and Pod creation by concurrent clients timed per request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
/// The apiserver's histogram of each admission plugin's time (label `name`): Kubernetes 1.37 has no series
/// per ValidatingAdmissionPolicy (`apiserver_validating_admission_policy_*` stays empty), so the floor's
/// cost is read as the `ValidatingAdmissionPolicy` plugin's time on CREATEs, with the floor bound against
/// without it (the plugin runs, matching nothing, for every request either way).
pub const PLUGIN_DURATION: &str = "apiserver_admission_controller_admission_duration_seconds";
/// The plugin that evaluates every ValidatingAdmissionPolicy ([`PLUGIN_DURATION`]'s `name`).
pub const POLICY_PLUGIN: &str = "ValidatingAdmissionPolicy";
/// [`PLUGIN_DURATION`]'s series of validating CREATEs.
pub const PLUGIN_CREATES: [&str; 2] = ["operation=\"CREATE\"", "type=\"validate\""];
/// How the floor's denials begin (`deploy/kustomize/base/floor.yaml`).
const FLOOR_DENIAL: &str = "gpu-admission (floor in the apiserver)";
/// The apiserver's own latency of each request (Pod CREATEs: `verb="POST"`, `resource="pods"`).
pub const REQUEST_DURATION: &str = "apiserver_request_duration_seconds";
/// The frontend's own time per admission (label `webhook`).
pub const FRONTEND_DURATION: &str = "gpu_admission_admission_duration_seconds";
/// The frontends' time per write of the quota ledger, and reservations per write.
pub const LEDGER_WRITE_DURATION: &str = "gpu_admission_quota_ledger_write_duration_seconds";
pub const LEDGER_BATCH: &str = "gpu_admission_quota_ledger_batch_reservations";
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

/// The Pods that show what the apiserver acts on: one GPU Pod both webhooks see (`gpu_ns`), and one Pod
/// beyond its tier's priority cap (`floor_ns`, created as a dry run), which a bound floor denies with its own
/// message (the floor runs before the validating webhooks, and `/mutate-pod` leaves such a Pod as it is).
pub struct Probes {
    pub gpu_ns: String,
    pub floor_ns: String,
    pub floor_pod: Pod,
}

/// The apiserver's webhook and policy histograms, read now.
pub async fn admission_histograms(
    admin: &kube::Client,
) -> anyhow::Result<(BTreeMap<String, Histogram>, BTreeMap<String, Histogram>)> {
    let text = apiserver_metrics(admin).await?;
    Ok((
        histograms(&text, WEBHOOK_DURATION, "name", &[]),
        histograms(&text, PLUGIN_DURATION, "name", &PLUGIN_CREATES),
    ))
}

/// How long the apiserver may take to act on an installed or removed floor and registrations: seconds on a
/// quiet machine, more on two cores shared with other builds and a second control plane.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(120);

impl Installation {
    /// Installs (`With`) or removes (`Without`) everything, then waits until the [`Probes`] show the apiserver
    /// acting on it: with, the GPU Pod decided, both Pod webhooks called and the capped Pod denied by the
    /// floor; without, none of that.
    pub async fn set(
        &self,
        cluster: &LocalCluster,
        arm: Arm,
        tenant: &kube::Client,
        probes: &Probes,
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
                self.create_bindings(cluster)?;
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
            let (state, seen) = probe(&admin, tenant, probes, attempt).await?;
            if state == Some(arm == Arm::With) {
                return Ok(started.elapsed());
            }
            ensure!(
                started.elapsed() < PICKUP_TIMEOUT,
                "the apiserver did not act on {arm:?} within {PICKUP_TIMEOUT:?}; the last probe: {seen}; {}",
                floor_state(cluster)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        unreachable!()
    }
}

/// What the apiserver holds of the floor when a pickup failed: its bindings, and its parameters' mode and
/// tiers (the observer writes them), so that a failure says which half was missing.
fn floor_state(cluster: &LocalCluster) -> String {
    let get = |args: &[&str]| {
        let out = kubectl(cluster.kubeconfig(), None, &[], args, "");
        if out.ok { out.stdout } else { out.stderr }
    };
    let bindings = get(&["get", "validatingadmissionpolicybindings", "-o", "name"]);
    let params = get(&[
        "-n",
        "gpu-admission",
        "get",
        "floorparameters",
        "gpu-admission-floor",
        "-o",
        "jsonpath={.data.mode} {.data.tiers} {.metadata.resourceVersion}",
    ]);
    format!(
        "bindings held: {:?}; the floor's parameters (mode, tiers, resourceVersion): {params:?}",
        bindings.split_whitespace().collect::<Vec<_>>()
    )
}

impl Installation {
    /// Creates the floor's bindings.
    fn create_bindings(&self, cluster: &LocalCluster) -> anyhow::Result<()> {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": self.bindings});
        let a = kubectl(
            cluster.kubeconfig(),
            None,
            &[],
            &["create", "-f", "-"],
            &list.to_string(),
        );
        ensure!(a.ok, "the floor's bindings: {}", a.stderr);
        Ok(())
    }
}

/// Creates the GPU probe Pod as the tenant and deletes it, and the capped one as a dry run: `Some(true)` when
/// the first was decided with both Pod webhooks called and the second denied by the floor, `Some(false)` when
/// both were accepted and no webhook was called, `None` in between (a change half picked up).
async fn probe(
    admin: &kube::Client,
    tenant: &kube::Client,
    probes: &Probes,
    attempt: u32,
) -> anyhow::Result<(Option<bool>, String)> {
    let (hooks0, _) = admission_histograms(admin).await?;
    let api = Api::<Pod>::namespaced(tenant.clone(), &probes.gpu_ns);
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
    let (hooks1, _) = admission_histograms(admin).await?;
    let called = |key: &str| {
        hooks1.get(key).map_or(0.0, |h| h.count) > hooks0.get(key).map_or(0.0, |h| h.count)
    };
    let hooks = POD_WEBHOOKS.map(called);
    let pinned = Api::<Pod>::namespaced(tenant.clone(), &probes.floor_ns)
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &probes.floor_pod,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let floor = pinned.as_ref().is_err_and(|e| e.contains(FLOOR_DENIAL));
    let all = decided && hooks.iter().all(|c| *c) && floor;
    let none = created.is_ok() && !decided && !hooks.iter().any(|c| *c) && pinned.is_ok();
    let seen = format!(
        "created {:?}, decided {decided}, {POD_WEBHOOKS:?} called {hooks:?}; the capped Pod: {pinned:?}",
        created.as_ref().map(|_| ()).map_err(|e| e.to_string()),
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
    create_until(clients, namespaces, Until::Count(pods), run, shape).await
}

/// When a load stops creating.
#[derive(Clone)]
pub enum Until {
    /// After this many Pods.
    Count(usize),
    /// Once the flag is set (the Pod in flight finishes).
    Stopped(Arc<AtomicBool>),
}

/// Pods of `shape` over `namespaces` (round-robin) until `until`, created by `clients` in closed loops, each
/// request timed. Pod `i` is `{run}-{i}`.
pub async fn create_until(
    clients: &[kube::Client],
    namespaces: &[(String, String)],
    until: Until,
    run: &str,
    shape: Shape,
) -> Load {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients {
        let (client, next, namespaces, run, until) = (
            client.clone(),
            next.clone(),
            namespaces.to_vec(),
            run.to_string(),
            until.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut failed, mut retried, mut errors, mut latencies) =
                (0, 0, Vec::new(), Vec::new());
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let done = match &until {
                    Until::Count(pods) => i >= *pods,
                    Until::Stopped(stop) => stop.load(Ordering::Relaxed),
                };
                if done {
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
    let pods = latencies.len() + failed;
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
