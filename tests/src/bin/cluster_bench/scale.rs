//! Part B, scale with kwok: `nodes` fake GPU Nodes (every catalog class in turn: its class label,
//! taint and vendor resource) kept Ready by kwok, the real kube-scheduler and controllers, and `pods` one-GPU
//! Pods over `namespaces` tier namespaces created through the shipped webhooks by `clients` tenant clients,
//! then `cpu_pods` CPU-only Pods naming `gpu-default`; quotas on [`crate::install::QUOTA_TIER`] (a `max` no run reaches), and
//! the observer's leader auditing everything into PolicyReports every `audit_interval_secs`.
//! Measured: the admission rate, the time until every Pod is bound, each process's CPU and peak RSS, the
//! audit passes' time. Checked: every Pod created (no quota'd Pod denied, `not counted yet` included), every
//! GPU Pod decided and bound, to a Node of a class its tier allows, and (the placement oracle, which shares
//! no code with core) no Node of another class reachable by its stored placement; an audit pass over the
//! final state.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_properties::placement_oracle::reachable_nodes;
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok;
use gpu_admission_tests::names::{ANN_DECIDED_AT, CLASS_LABEL};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde::Serialize;

use gpu_admission_tests::observer::{Observer, metric_value};

use crate::install::{install, policy_with_quotas, tenant_clients};
use crate::measure::{Usage, Watch};
use crate::pods::{Created, Shape, annotation, create_namespaces, create_pods, list_run};
use crate::{Args, component_pids};

const RUN: &str = "scale";
const CPU_RUN: &str = "scale-cpu";
const AUDIT: &str = "observer_audit_duration_seconds";

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub gpus_per_node: u32,
    pub nodes_ready_seconds: f64,
    pub created: Created,
    /// From the first creation until every Pod is bound.
    pub all_bound_seconds: f64,
    /// From the last creation's answer until every Pod is bound.
    pub bound_after_created_seconds: f64,
    pub bound: usize,
    pub decided: usize,
    /// Pods bound to a Node of a class their tier does not allow (must be 0).
    pub out_of_tier: usize,
    /// Pods whose stored placement the oracle finds reaching a Node outside their tier, or none (must be 0).
    pub oracle_escapes: usize,
    /// Bound Pods per Node class.
    pub per_class: BTreeMap<String, usize>,
    /// The CPU-only Pods, created after the GPU Pods; not waited for to be bound (GPU Nodes with a class
    /// taint keep them off).
    pub cpu_created: Created,
    /// The observer's audit passes from its start until one after every Pod was bound.
    pub audit: Audit,
    /// During creation and binding.
    pub usage: Vec<Usage>,
}

/// The observer's audit passes (its `observer_audit_duration_seconds`).
#[derive(Debug, Clone, Serialize)]
pub struct Audit {
    pub passes: u64,
    pub mean_seconds: f64,
    /// The smallest bucket bound holding every pass: the longest pass is at most this.
    pub longest_at_most_seconds: f64,
    /// From every Pod bound until a pass over that state had finished.
    pub final_pass_after_seconds: f64,
}

/// Runs part B with `args`' sizes.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let Some(cluster) = LocalCluster::start_with(Components::ALL).await? else {
        anyhow::bail!("the control plane is not built here (tests/cluster/build.sh)");
    };
    let installed = install(&cluster, &policy_with_quotas()?, &[], args.deadline_ms).await?;
    let observer = start_observer(&cluster, &installed.scorer.url(), args).await?;
    let policy = installed.policy.clone();
    let admin = cluster.client();
    let gpus_per_node = gpus_per_node(args, &policy);
    let nodes = fake_nodes(&policy, args.nodes, gpus_per_node);
    eprintln!(
        "  {} Nodes of {} classes, {gpus_per_node} GPUs each",
        nodes.len(),
        policy.catalog().len()
    );
    let nodes_ready = kwok::create_ready_nodes_bulk(&admin, &nodes, args.clients).await?;
    eprintln!(
        "  Nodes Ready and untainted in {:.1}s",
        nodes_ready.as_secs_f64()
    );
    let tiers: Vec<String> = policy.tiers().iter().map(|t| t.name.clone()).collect();
    let namespaces = create_namespaces(&cluster, "scale", args.namespaces, &tiers).await?;
    let clients = tenant_clients(&cluster, args.clients).await?;
    let mut pids = component_pids(
        &cluster,
        &[
            "apiserver",
            "etcd",
            "scheduler",
            "controller-manager",
            "kwok",
        ],
    );
    pids.extend(installed.pids());
    pids.push(("observer".into(), observer.process.pid()));
    pids.push(("cluster-bench".into(), std::process::id()));

    let watch = Watch::start(&pids);
    let started = Instant::now();
    let created = create_pods(&clients, &namespaces, args.pods, RUN, Shape::Gpu).await;
    let created_at = started.elapsed();
    eprintln!(
        "  created {} Pods at {:.0}/s ({} failed)",
        created.pods - created.failed,
        created.per_second,
        created.failed
    );
    ensure!(created.failed == 0, "Pods refused: {:?}", created.errors);
    let cpu_created = create_pods(&clients, &namespaces, args.cpu_pods, CPU_RUN, Shape::Cpu).await;
    eprintln!(
        "  created {} CPU-only Pods at {:.0}/s ({} failed)",
        cpu_created.pods - cpu_created.failed,
        cpu_created.per_second,
        cpu_created.failed
    );
    ensure!(
        cpu_created.failed == 0,
        "CPU Pods refused: {:?}",
        cpu_created.errors
    );
    let unbound = ListParams::default()
        .labels(&format!("{}={RUN}", crate::pods::RUN_LABEL))
        .fields("spec.nodeName=");
    let all = Api::<Pod>::all(admin.clone());
    kwok::wait_for(
        "every Pod bound",
        Duration::from_secs(args.bind_timeout_secs),
        || async {
            let left = all.list_metadata(&unbound.clone().limit(1)).await?;
            Ok(left.items.is_empty())
        },
    )
    .await
    .with_context(|| format!("scheduler:\n{}", cluster.log_tail("scheduler", 20)))?;
    let all_bound = started.elapsed();
    let audit = audit_after(&observer, args).await?;
    let usage = watch.stop();

    let stored = list_run(&admin, RUN).await?;
    let nodes = Api::<Node>::all(admin.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let judged = judge(&stored, &nodes, &namespaces, &policy);
    Ok(Report {
        nodes: nodes.len(),
        gpus_per_node,
        nodes_ready_seconds: nodes_ready.as_secs_f64(),
        created,
        all_bound_seconds: all_bound.as_secs_f64(),
        bound_after_created_seconds: (all_bound - created_at).as_secs_f64(),
        bound: judged.bound,
        decided: judged.decided,
        out_of_tier: judged.out_of_tier,
        oracle_escapes: judged.escapes,
        per_class: judged.per_class,
        cpu_created,
        audit,
        usage,
    })
}

/// The observer as its leader runs in the base plus the policy-reports component: the reports' CRD, the
/// audit every `audit_interval_secs`.
pub async fn start_observer(
    cluster: &LocalCluster,
    scorer: &str,
    args: &Args,
) -> anyhow::Result<Observer> {
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/components/policy-reports/policyreports.yaml");
    let applied = gpu_admission_tests::cluster::kubectl(
        cluster.kubeconfig(),
        None,
        &[],
        &["apply", "-f", &crd.display().to_string()],
        "",
    );
    ensure!(applied.ok, "the PolicyReport CRD: {}", applied.stderr);
    // Its lease's namespace.
    cluster.create_namespace("gpu-admission", None).await?;
    Observer::builder(
        cluster.kubeconfig(),
        &[scorer.to_string()],
        "bench-observer",
    )
    .env("LOG_FORMAT", "json")
    .arg("--policy-reports")
    .arg(format!(
        "--audit-interval-secs={}",
        args.audit_interval_secs
    ))
    .start()
    .await
}

/// Waits for an audit pass that started after now (the state every Pod bound) to finish: the second to finish
/// from now, the first may have started before. Then reads every pass's time.
pub async fn audit_after(observer: &Observer, args: &Args) -> anyhow::Result<Audit> {
    let passes = |text: &str| metric_value(text, &format!("{AUDIT}_count")) as u64;
    let metrics =
        async || (observer.metrics().await).with_context(|| observer.process.log_tail(30));
    let before = passes(&metrics().await?);
    let asked = Instant::now();
    let text = loop {
        let text = metrics().await?;
        if passes(&text) > before + 1 {
            break text;
        }
        ensure!(
            asked.elapsed() < Duration::from_secs(3 * args.audit_interval_secs + 300),
            "no audit pass finished within {:?} of every Pod bound (passes: {before})",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let count = passes(&text);
    let longest = (text.lines())
        .filter_map(|l| l.strip_prefix(&format!("{AUDIT}_bucket{{le=\"")))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(le, n)| Some((le.parse::<f64>().ok()?, n.trim().parse::<f64>().ok()?)))
        .find(|(_, n)| *n as u64 >= count)
        .map_or(f64::INFINITY, |(le, _)| le);
    Ok(Audit {
        passes: count,
        mean_seconds: metric_value(&text, &format!("{AUDIT}_sum")) / count.max(1) as f64,
        longest_at_most_seconds: longest,
        final_pass_after_seconds: asked.elapsed().as_secs_f64(),
    })
}

/// GPUs per Node: the flag, or enough that any class could hold every Pod (the scorer knows nothing of
/// capacity, so many tiers' Pods may go to one class), at least the shipped catalog's 8.
fn gpus_per_node(args: &Args, policy: &PolicySnapshot) -> u32 {
    if let Some(n) = args.gpus_per_node {
        return n;
    }
    let per_class = (args.nodes / policy.catalog().len().max(1)).max(1);
    (args.pods.div_ceil(per_class) as u32).max(8)
}

/// `n` fake Nodes, classes of the catalog in turn, each with the class's vendor resource.
pub fn fake_nodes(policy: &PolicySnapshot, n: usize, gpus: u32) -> Vec<serde_json::Value> {
    (fake_node_classes(policy, n))
        .map(|(name, class)| kwok::gpu_node(&name, class, vendor_resource(class), gpus))
        .collect()
}

/// The names and classes of [`fake_nodes`].
pub fn fake_node_classes(
    policy: &PolicySnapshot,
    n: usize,
) -> impl Iterator<Item = (String, &gpu_admission_policy::GpuClass)> {
    (0..n).map(|i| {
        let class = &policy.catalog()[i % policy.catalog().len()];
        (
            format!("kwok-{}-{i:05}", class.name.to_ascii_lowercase()),
            class,
        )
    })
}

/// The extended resource a fake Node of `class` offers its GPUs as.
pub fn vendor_resource(class: &gpu_admission_policy::GpuClass) -> &'static str {
    if class.vendor == gpu_admission_policy::Vendor::Amd {
        "amd.com/gpu"
    } else {
        "nvidia.com/gpu"
    }
}

/// The classes `tier` allows.
pub fn allowed_classes<'p>(policy: &'p PolicySnapshot, tier: &str) -> Vec<&'p str> {
    (policy.tiers().iter())
        .find(|t| t.name == tier)
        .map(|t| {
            (policy.catalog().iter().zip(&t.allowed))
                .filter(|(_, allowed)| **allowed)
                .map(|(c, _)| c.name.as_str())
                .collect()
        })
        .unwrap_or_default()
}

struct Judged {
    bound: usize,
    decided: usize,
    out_of_tier: usize,
    escapes: usize,
    per_class: BTreeMap<String, usize>,
}

/// Every stored Pod against its tier: the class of the Node it is bound to, and the oracle's reading of its
/// placement over one Node of each class (the Nodes of a class differ only in name and hostname label, which
/// no benchmark Pod names).
fn judge(
    stored: &[Pod],
    nodes: &[Node],
    namespaces: &[(String, String)],
    policy: &PolicySnapshot,
) -> Judged {
    let node_class: BTreeMap<&str, &str> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, class_of(n)?)))
        .collect();
    let mut representatives: BTreeMap<&str, &Node> = BTreeMap::new();
    for n in nodes {
        if let Some(c) = class_of(n) {
            representatives.entry(c).or_insert(n);
        }
    }
    let representatives: Vec<Node> = representatives.values().map(|n| (*n).clone()).collect();
    let tier_of: BTreeMap<&str, &str> = namespaces
        .iter()
        .map(|(ns, t)| (ns.as_str(), t.as_str()))
        .collect();
    let allowed = |tier: &str| allowed_classes(policy, tier);
    let mut j = Judged {
        bound: 0,
        decided: 0,
        out_of_tier: 0,
        escapes: 0,
        per_class: BTreeMap::new(),
    };
    for pod in stored {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let classes = allowed(tier_of.get(ns).copied().unwrap_or_default());
        if annotation(pod, ANN_DECIDED_AT).is_some() {
            j.decided += 1;
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(node) = node {
            j.bound += 1;
            let class = node_class.get(node).copied().unwrap_or("(no class)");
            *j.per_class.entry(class.to_string()).or_default() += 1;
            if !classes.contains(&class) {
                j.out_of_tier += 1;
            }
        }
        let mut unbound = pod.clone();
        if let Some(s) = unbound.spec.as_mut() {
            s.node_name = None;
        }
        let reach = reachable_nodes(&unbound, &representatives);
        let escapes = reach.is_empty()
            || reach.iter().any(|name| {
                let class = node_class.get(name.as_str()).copied().unwrap_or_default();
                !classes.contains(&class)
            });
        if escapes {
            j.escapes += 1;
        }
    }
    j
}

fn class_of(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()?
        .get(CLASS_LABEL)
        .map(String::as_str)
}

/// Part B's table (markdown).
pub fn print(r: &Report, args: &Args) {
    println!(
        "\n### B. Scale with kwok: {} Nodes, {} GPU Pods in {} tier namespaces, {} clients\n",
        r.nodes, r.created.pods, args.namespaces, args.clients
    );
    println!("| what | measured |");
    println!("|---|---|");
    println!(
        "| Nodes Ready and untainted ({} GPUs each) | {:.1} s |",
        r.gpus_per_node, r.nodes_ready_seconds
    );
    println!(
        "| admission (creation through the webhooks) | {:.0} Pods/s ({} Pods in {:.1} s, {} failed) |",
        r.created.per_second, r.created.pods, r.created.seconds, r.created.failed
    );
    println!(
        "| every Pod bound | {:.1} s after the first creation, {:.1} s after the last |",
        r.all_bound_seconds, r.bound_after_created_seconds
    );
    println!(
        "| bound / decided by `/mutate-pod` | {} / {} of {} |",
        r.bound, r.decided, r.created.pods
    );
    println!(
        "| CPU-only Pods (`gpu-default`) created after them | {:.0} Pods/s ({} Pods, {} failed) |",
        r.cpu_created.per_second, r.cpu_created.pods, r.cpu_created.failed
    );
    println!(
        "| audit passes (observer's leader, every {} s and on changes) | {}: mean {:.2} s, longest ≤ {} s; \
         a pass over the final state done {:.1} s after every Pod was bound |",
        args.audit_interval_secs,
        r.audit.passes,
        r.audit.mean_seconds,
        r.audit.longest_at_most_seconds,
        r.audit.final_pass_after_seconds
    );
    println!(
        "| bound outside the tier's classes | **{}** |",
        r.out_of_tier
    );
    println!(
        "| placement reaching a Node outside the tier (oracle) | **{}** |",
        r.oracle_escapes
    );
    let classes: Vec<String> = r
        .per_class
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    println!("| bound per class | {} |", classes.join(", "));
    crate::measure::print_usage(&r.usage, "creation + binding");
}

/// What must hold whatever the timing.
pub fn check(r: &Report) -> anyhow::Result<()> {
    ensure!(
        r.bound == r.created.pods && r.decided == r.created.pods,
        "{} bound and {} decided of {}",
        r.bound,
        r.decided,
        r.created.pods
    );
    ensure!(
        r.out_of_tier == 0 && r.oracle_escapes == 0,
        "{} Pods bound outside their tier, {} placements reaching outside it",
        r.out_of_tier,
        r.oracle_escapes
    );
    Ok(())
}
