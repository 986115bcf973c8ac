//! Part D, the envelope held: what our processes hold and do with a cluster of the scale envelope's size in
//! the apiserver (`nodes` GPU Nodes, `pods` GPU Pods bound to them and `cpu_pods` CPU-only Pods over
//! `namespaces` tier namespaces), created around the webhooks as a cluster that ran before gpu-admission was
//! installed would hold them. Only etcd and the kube-apiserver run (no scheduler, controllers or kwok: Nodes
//! are objects, GPU Pods name their Node as if the scheduler had bound them there, on a class their tier
//! allows), so the apiserver's own limits on two cores (kwok's heartbeats, binding 50,000 Pods) are not
//! what is measured. Then the registrations are created and `held_admissions` quota'd GPU Pods go through
//! the webhooks.
//!
//! Measured: each process's CPU and peak RSS over the whole run, how long after the last creation the
//! frontend's quota usage counts every prefilled GPU Pod of [`QUOTA_TIER`], the admission rate, the
//! observer's audit passes. Checked: no quota'd admission refused (`not counted yet` included), the
//! frontend's usage equal to what the quota'd tier holds before and after.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::names::{ANN_DECIDED_AT, JOB_TYPE_LABEL};
use gpu_admission_tests::observer::metric_value;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde::Serialize;
use serde_json::json;

use crate::install::{QUOTA_TIER, policy_with_quotas, register, start, tenant_clients};
use crate::measure::{Usage, Watch};
use crate::pods::{Created, Shape, annotation, create_namespaces, create_pods};
use crate::pods::{MakePod, create_pods_with, pod};
use crate::scale::{
    Audit, allowed_classes, audit_after, fake_node_classes, fake_nodes, start_observer,
    vendor_resource,
};
use crate::{Args, component_pids};

const RUN: &str = "held";
const CPU_RUN: &str = "held-cpu";
const ADMITTED_RUN: &str = "held-admitted";
/// How long the apiserver may take to act on created or deleted registrations, and the frontend to count.
const SETTLE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub namespaces: usize,
    /// GPU Pods created around the webhooks, each bound by name to a Node of a class its tier allows.
    pub prefilled: Created,
    /// CPU-only Pods created around the webhooks (Pending).
    pub prefilled_cpu: Created,
    /// GPUs the quota'd tier's prefilled Pods hold.
    pub quota_tier_gpus: usize,
    /// From the last prefilled Pod's creation until the frontend's usage of the quota'd tier counted them all.
    pub counted_after_seconds: f64,
    /// Quota'd GPU Pods created through the webhooks afterwards.
    pub admitted: Created,
    /// Admitted Pods decided by `/mutate-pod`.
    pub admitted_decided: usize,
    /// The frontend's usage of the quota'd tier once the admitted Pods were counted.
    pub quota_tier_used_after: f64,
    /// The observer's audit passes from its start until one after the admissions.
    pub audit: Audit,
    /// Every pass's seconds from the observer's log, in order (exact; the histogram only bounds them).
    pub pass_seconds: Vec<f64>,
    /// How many of them had finished when the prefill's last creation was answered.
    pub passes_during_prefill: usize,
    /// Over the whole run, from before the prefill.
    pub usage: Vec<Usage>,
}

/// Runs part D with `args`' sizes.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let Some(cluster) = LocalCluster::start_with(Components::APISERVER).await? else {
        anyhow::bail!("the control plane is not built here (tests/cluster/build.sh)");
    };
    let admin = cluster.client();
    // No registration yet: the cluster is filled around the webhooks.
    let installed = start(&cluster, &policy_with_quotas()?, args.deadline_ms).await?;
    let policy = installed.policy.clone();
    let nodes = fake_nodes(&policy, args.nodes, 8);
    gpu_admission_tests::kwok::create_nodes_bulk(&admin, &nodes, args.clients).await?;
    let tiers: Vec<String> = policy.tiers().iter().map(|t| t.name.clone()).collect();
    let namespaces = create_namespaces(&cluster, "held", args.namespaces, &tiers).await?;
    eprintln!(
        "  {} Nodes, {} namespaces created",
        nodes.len(),
        namespaces.len()
    );
    let observer = start_observer(&cluster, &installed.scorer.url(), args).await?;
    let clients = tenant_clients(&cluster, args.clients).await?;
    let mut pids = component_pids(&cluster, &["apiserver", "etcd"]);
    pids.extend(installed.pids());
    pids.push(("observer".into(), observer.process.pid()));
    pids.push(("cluster-bench".into(), std::process::id()));
    let watch = Watch::start(&pids);

    let bound_to = nodes_by_tier(&policy, args.nodes, &tiers);
    let make: MakePod = Arc::new(move |i, (_, tier)| bound_gpu_pod(i, &bound_to[tier]));
    let prefilled = create_pods_with(&clients, &namespaces, args.pods, make).await;
    ensure!(prefilled.failed == 0, "prefill: {:?}", prefilled.errors);
    let prefilled_cpu =
        create_pods(&clients, &namespaces, args.cpu_pods, CPU_RUN, Shape::Cpu).await;
    ensure!(
        prefilled_cpu.failed == 0,
        "prefill: {:?}",
        prefilled_cpu.errors
    );
    let passes_during_prefill = logged_passes(&observer.process.log()).len();
    eprintln!(
        "  prefilled {} GPU Pods at {:.0}/s, {} CPU-only at {:.0}/s",
        prefilled.pods, prefilled.per_second, prefilled_cpu.pods, prefilled_cpu.per_second
    );
    let quota_tier_gpus = (0..args.pods)
        .filter(|i| namespaces[i % namespaces.len()].1 == QUOTA_TIER)
        .count();
    let counted_after = until_used(&installed.webhook, quota_tier_gpus as f64).await?;
    eprintln!(
        "  the frontend counted the {quota_tier_gpus} GPUs of {QUOTA_TIER} {:.1}s after the last creation",
        counted_after.as_secs_f64()
    );

    register(&cluster, &installed.webhook, &[]).await?;
    until_decided(&clients[0], &probe_namespace(&namespaces)?).await?;
    let quota_namespaces: Vec<(String, String)> = (namespaces.iter())
        .filter(|(_, t)| t == QUOTA_TIER)
        .cloned()
        .collect();
    let admitted = create_pods(
        &clients,
        &quota_namespaces,
        args.held_admissions,
        ADMITTED_RUN,
        Shape::Gpu,
    )
    .await;
    eprintln!(
        "  admitted {} quota'd GPU Pods at {:.0}/s ({} failed)",
        admitted.pods - admitted.failed,
        admitted.per_second,
        admitted.failed
    );
    let want = (quota_tier_gpus + admitted.pods - admitted.failed) as f64;
    until_used(&installed.webhook, want).await?;
    let admitted_decided = (crate::pods::list_run(&admin, ADMITTED_RUN).await?.iter())
        .filter(|p| annotation(p, ANN_DECIDED_AT).is_some())
        .count();
    let audit = audit_after(&observer, args).await?;
    let usage = watch.stop();
    let pass_seconds = logged_passes(&observer.process.log());
    Ok(Report {
        nodes: nodes.len(),
        namespaces: namespaces.len(),
        prefilled,
        prefilled_cpu,
        quota_tier_gpus,
        counted_after_seconds: counted_after.as_secs_f64(),
        admitted,
        admitted_decided,
        quota_tier_used_after: want,
        audit,
        pass_seconds,
        passes_during_prefill,
        usage,
    })
}

/// Per tier, the fake Nodes (name, vendor resource) of the classes it allows.
fn nodes_by_tier(
    policy: &PolicySnapshot,
    nodes: usize,
    tiers: &[String],
) -> BTreeMap<String, Vec<(String, &'static str)>> {
    (tiers.iter())
        .map(|tier| {
            let allowed = allowed_classes(policy, tier);
            let on = (fake_node_classes(policy, nodes))
                .filter(|(_, class)| allowed.contains(&class.name.as_str()))
                .map(|(name, class)| (name, vendor_resource(class)))
                .collect();
            (tier.clone(), on)
        })
        .collect()
}

/// GPU Pod `i`, bound by name to one of `nodes` (its tier's), asking one GPU of the Node's vendor.
fn bound_gpu_pod(i: usize, nodes: &[(String, &'static str)]) -> Pod {
    let mut p = pod(&format!("{RUN}-{i}"), RUN, Shape::Cpu, i);
    let (node, resource) = &nodes[i % nodes.len()];
    let labels = p.metadata.labels.get_or_insert_default();
    labels.insert(JOB_TYPE_LABEL.into(), "train-bert".into());
    if let Some(spec) = p.spec.as_mut() {
        spec.priority_class_name = None;
        spec.node_name = Some(node.clone());
        let limits = json!({ *resource: "1" });
        spec.containers[0].resources.get_or_insert_default().limits =
            Some(serde_json::from_value(limits).expect("limits"));
    }
    p
}

/// A namespace of a tier without quotas, where probe Pods count against nothing.
fn probe_namespace(namespaces: &[(String, String)]) -> anyhow::Result<String> {
    (namespaces.iter())
        .find(|(_, t)| t != QUOTA_TIER)
        .map(|(ns, _)| ns.clone())
        .context("no namespace outside the quota'd tier")
}

/// Creates probe GPU Pods in `ns` until one is decided by `/mutate-pod`: the apiserver acts on the
/// registrations just created. Each probe is deleted.
async fn until_decided(tenant: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let api = Api::<Pod>::namespaced(tenant.clone(), ns);
    let started = Instant::now();
    let mut k = 0;
    loop {
        let name = format!("held-probe-{k}");
        let stored = api
            .create(&PostParams::default(), &pod(&name, "probe", Shape::Gpu, 0))
            .await?;
        api.delete(&name, &DeleteParams::default().grace_period(0))
            .await?;
        if annotation(&stored, ANN_DECIDED_AT).is_some() {
            return Ok(());
        }
        ensure!(
            started.elapsed() < SETTLE,
            "the apiserver did not call the registrations"
        );
        k += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the frontend's usage of the quota'd tier is `want` GPUs; how long that took.
async fn until_used(webhook: &gpu_admission_tests::Webhook, want: f64) -> anyhow::Result<Duration> {
    let sample = format!(
        "gpu_admission_quota_gpus{{tier=\"{QUOTA_TIER}\",tenant_namespace=\"\",class=\"\",kind=\"used\"}}"
    );
    let started = Instant::now();
    loop {
        let used = metric_value(&webhook.metrics().await?, &sample);
        if used == want {
            return Ok(started.elapsed());
        }
        ensure!(
            started.elapsed() < SETTLE,
            "the frontend counts {used} GPUs of {QUOTA_TIER}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every `audit done` pass's seconds in the observer's JSON log, in order.
fn logged_passes(log: &str) -> Vec<f64> {
    (log.lines())
        .filter(|l| l.contains("audit done"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["seconds"].as_f64())
        .collect()
}

/// Part D's table (markdown).
pub fn print(r: &Report) {
    println!(
        "\n### D. The envelope held: {} Nodes, {} GPU and {} CPU-only Pods in {} tier namespaces\n",
        r.nodes, r.prefilled.pods, r.prefilled_cpu.pods, r.namespaces
    );
    println!("| what | measured |");
    println!("|---|---|");
    println!(
        "| created around the webhooks | {:.0} GPU Pods/s, {:.0} CPU-only Pods/s |",
        r.prefilled.per_second, r.prefilled_cpu.per_second
    );
    println!(
        "| the frontend's usage of {QUOTA_TIER} counts its {} prefilled GPUs | {:.1} s after the last creation |",
        r.quota_tier_gpus, r.counted_after_seconds
    );
    println!(
        "| quota'd GPU Pods through the webhooks | {} at {:.0}/s, **{} refused**, {} decided |",
        r.admitted.pods, r.admitted.per_second, r.admitted.failed, r.admitted_decided
    );
    let longest = |passes: &[f64]| passes.iter().copied().fold(0.0, f64::max);
    let after = &r.pass_seconds[r.passes_during_prefill.min(r.pass_seconds.len())..];
    println!(
        "| audit passes | {}: mean {:.2} s, longest {:.1} s; {} after the prefill, longest {:.1} s |",
        r.pass_seconds.len(),
        r.audit.mean_seconds,
        longest(&r.pass_seconds),
        after.len(),
        longest(after)
    );
    crate::measure::print_usage(&r.usage, "whole run");
}

/// What must hold whatever the timing.
pub fn check(r: &Report) -> anyhow::Result<()> {
    ensure!(
        r.admitted.failed == 0,
        "quota'd admissions refused: {:?}",
        r.admitted.errors
    );
    ensure!(
        r.admitted_decided == r.admitted.pods,
        "{} of {} admitted Pods decided",
        r.admitted_decided,
        r.admitted.pods
    );
    Ok(())
}
