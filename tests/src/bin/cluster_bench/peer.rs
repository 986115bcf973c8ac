//! Part C, admission cost in the peers' form (Kyverno's published method: N Pod CREATEs at 50, 200 and 500
//! concurrent clients, 1 and 3 replicas, kwok Nodes): on etcd + kube-apiserver + controllers + kwok
//! (`--peer-nodes` Ready fake GPU Nodes; no scheduler, so every Pod stays Pending), the shipped registrations (every webhook) pointed at one
//! endpoint ([`Balancer`]) in front of 1 or 3 frontend replicas, and the shipped floor (its parameters kept
//! by a real observer from the policy ConfigMap, in Enforce). Each cell (clients × replicas × kind) runs
//! `rounds` pairs: with the registrations and the floor's bindings installed, then with them removed, the
//! apiserver's pickup of each change waited for by a probe Pod. Kinds: GPU Pods in tiers without quotas,
//! CPU-only Pods naming a PriorityClass there, GPU Pods in a tier with quotas (reservations in the ledger).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use base64::Engine;
use clap::ValueEnum;
use gpu_admission_tests::apiserver_metrics::{
    Histogram, apiserver_metrics, histograms, histograms_since,
};
use gpu_admission_tests::cluster::{Components, LocalCluster, floor_parameter, kubectl};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use gpu_admission_tests::observer::Observer;
use gpu_admission_tests::{Scorer, Webhook};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Args;
use crate::balancer::Balancer;
use crate::bystander::{Bystander, Bystanders};
use crate::install::{QUOTA_TIER, TENANT, policy_with_quotas_on, registrations, tenant_clients};
use crate::peer_load::{
    Arm, FRONTEND_DURATION, Installation, LEDGER_BATCH, LEDGER_WRITE_DURATION, Load,
    PLUGIN_CREATES, PLUGIN_DURATION, POD_WEBHOOKS, POLICY_PLUGIN, Probes, REQUEST_DURATION,
    WEBHOOK_DURATION, create_timed,
};
use crate::pods::{Shape, annotation, create_namespaces, delete_all, list_run};

const FLOOR: &str = "deploy/kustomize/base/floor.yaml";
/// The frontends' count of quota ledger writes by tier and result.
const LEDGER_WRITES: &str = "gpu_admission_quota_ledger_writes_total{";

/// The tiers the quota'd namespaces are spread over (`--peer-quota-tiers` of them, [`QUOTA_TIER`] first,
/// whose namespace the floor's probe uses): each has its own quota ledger.
const QUOTA_TIERS: [&str; 3] = [QUOTA_TIER, "bronze", "gold"];

/// What one cell's Pods are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One-GPU Pods without a class in tiers without quotas: the scorer decides.
    Gpu,
    /// CPU-only Pods at `gpu-default` in the same namespaces (the priority cap; no scorer call).
    Cpu,
    /// One-GPU Pods in the tier with quotas: decided, then reserved in the quota ledger.
    QuotaGpu,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gpu => "GPU",
            Kind::Cpu => "CPU",
            Kind::QuotaGpu => "quota'd GPU",
        }
    }
    fn shape(self) -> Shape {
        match self {
            Kind::Cpu => Shape::Cpu,
            Kind::Gpu | Kind::QuotaGpu => Shape::Gpu,
        }
    }
}

/// A histogram's summary for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub calls: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl From<&Histogram> for Latency {
    fn from(h: &Histogram) -> Self {
        Self {
            calls: h.count as u64,
            mean_ms: h.mean_ms(),
            p50_ms: h.quantile_ms(0.5),
            p99_ms: h.quantile_ms(0.99),
        }
    }
}

/// One run: `pods` Pods of one kind, in one arm.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub clients: usize,
    pub replicas: usize,
    pub kind: Kind,
    pub round: usize,
    pub arm: Arm,
    pub load: Load,
    pub decided: usize,
    /// The apiserver's own time per Pod CREATE (`apiserver_request_duration_seconds`, POST pods).
    #[serde(skip)]
    pub apiserver_post: Histogram,
    /// The apiserver's time waiting on each webhook, by webhook name.
    #[serde(skip)]
    pub webhooks: BTreeMap<String, Histogram>,
    /// The apiserver's ValidatingAdmissionPolicy plugin on CREATEs.
    #[serde(skip)]
    pub policy_plugin: Histogram,
    /// The frontends' own time per admission (all replicas), by path.
    #[serde(skip)]
    pub frontend: BTreeMap<String, Histogram>,
    /// Admissions each replica served (its own count).
    pub per_replica: Vec<u64>,
    /// Reservations per write of the quota ledger (all replicas); the writes' own time is `frontend`'s
    /// `ledger-write`.
    #[serde(skip)]
    pub ledger_batch: Histogram,
    /// Another tenant's Pods created one at a time, alone and during the burst (`--peer-bystander`).
    pub bystanders: Vec<Bystander>,
    /// The quota ledgers' writes during the run by result (`gpu_admission_quota_ledger_writes_total`, every
    /// replica and tier).
    pub ledger_writes: BTreeMap<String, u64>,
}

/// `gpu_admission_quota_ledger_writes_total` by `result`, summed over tiers.
fn ledger_writes(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(LEDGER_WRITES) else {
            continue;
        };
        let (Some(result), Some(n)) = (
            rest.split("result=\"")
                .nth(1)
                .and_then(|r| r.split('"').next()),
            rest.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()),
        ) else {
            continue;
        };
        *out.entry(result.to_string()).or_default() += n as u64;
    }
    out
}

/// Runs part C with `args`' sizes: the runs in order, and what [`check`] found not held (each run is
/// measured whatever an earlier one showed).
pub async fn run(args: &Args) -> anyhow::Result<(Vec<Run>, Vec<String>)> {
    // The controllers take the not-ready taint off kwok's Nodes; no scheduler: Pods stay Pending.
    let components = Components {
        scheduler: false,
        ..Components::ALL
    };
    let Some(cluster) = LocalCluster::start_with(components).await? else {
        anyhow::bail!("the control plane is not built here (tests/cluster/build.sh)");
    };
    let set_up = SetUp::start(&cluster, args).await?;
    let admin = cluster.client();
    let most = args.peer_clients.iter().copied().max().unwrap_or(1);
    let clients = tenant_clients(&cluster, most).await?;
    let probes = set_up.probes()?;
    let mut runs = Vec::new();
    let mut violations = Vec::new();
    for &replicas in &args.peer_replicas {
        let (_balancer, installation) = set_up.installation(replicas).await?;
        for &n in &args.peer_clients {
            for &kind in &args.peer_kinds {
                for round in 0..args.peer_rounds {
                    for arm in [Arm::With, Arm::Without] {
                        let took = installation
                            .set(&cluster, arm, &clients[0], &probes)
                            .await?;
                        let cell = Cell {
                            clients: n,
                            replicas,
                            kind,
                            round,
                            arm,
                        };
                        let run = cell.run(&admin, &clients[..n], &set_up, args).await?;
                        eprintln!(
                            "  {n} clients, {replicas} replica(s), {} {arm:?} r{round} (picked up in {:.1}s): \
                             {:.0} Pods/s, p50 {:.0} ms, p99 {:.0} ms, {} retried 429",
                            kind.name(),
                            took.as_secs_f64(),
                            run.load.per_second,
                            run.load.p50_ms,
                            run.load.p99_ms,
                            run.load.retried_429
                        );
                        if !run.ledger_writes.is_empty() {
                            eprintln!("    quota ledger writes: {:?}", run.ledger_writes);
                        }
                        for b in &run.bystanders {
                            eprintln!(
                                "    bystander ({}): alone p50 {:.0} / p99 {:.0} ms, during p50 {:.0} / \
                                 p99 {:.0} ms over {} Pods, {} failed",
                                b.relation.name(),
                                b.quiet.p50_ms,
                                b.quiet.p99_ms,
                                b.during.p50_ms,
                                b.during.p99_ms,
                                b.during.pods,
                                b.quiet.failed + b.during.failed
                            );
                        }
                        if let Err(e) = check(&run) {
                            eprintln!("  NOT HELD: {e:#}");
                            violations.push(format!("{e:#}"));
                        }
                        runs.push(run);
                    }
                }
            }
        }
    }
    Ok((runs, violations))
}

/// Everything the cells share: the policy, scorer, observer, frontends, Nodes and namespaces.
struct SetUp {
    frontends: Vec<Webhook>,
    gpu_ns: Vec<(String, String)>,
    quota_ns: Vec<(String, String)>,
    bystanders: Option<Bystanders>,
    bindings: Vec<Value>,
    scorer: Scorer,
    _observer: Observer,
    _dir: tempfile::TempDir,
}

impl SetUp {
    async fn start(cluster: &LocalCluster, args: &Args) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let policy_file = dir.path().join("default-policy.yaml");
        let quota_tiers = &QUOTA_TIERS[..args.peer_quota_tiers.clamp(1, QUOTA_TIERS.len())];
        std::fs::write(&policy_file, policy_with_quotas_on(quota_tiers)?)?;
        let scorer = Scorer::builder().policy(&policy_file).start().await?;
        let policy = scorer.policy().clone();
        cluster.create_priority_classes(&policy).await?;
        cluster.bind_tenant(TENANT).await?;
        cluster.create_namespace("gpu-admission", None).await?;
        let kc = cluster.kubeconfig();
        let from_file = format!("--from-file=default-policy.yaml={}", policy_file.display());
        let policy_cm = [
            "-n",
            "gpu-admission",
            "create",
            "configmap",
            "gpu-admission-policy",
            &from_file,
        ];
        let a = kubectl(kc, None, &[], &policy_cm, "");
        ensure!(a.ok, "kubectl {policy_cm:?}: {}", a.stderr);
        // The floor's bindings come and go with the arms (created by the first); its parameters are the
        // observer's.
        let (bindings, rest) = floor_documents()?;
        let rest = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": rest});
        let a = kubectl(kc, None, &[], &["apply", "-f", "-"], &rest.to_string());
        ensure!(a.ok, "the floor's policies and parameters: {}", a.stderr);
        let observer = Observer::builder(kc, &[scorer.url()], "bench-observer")
            .arg("--floor-params=gpu-admission-floor")
            .start()
            .await?;
        wait_floor_enforce(cluster).await?;
        let mut frontends = Vec::new();
        for i in 0..args.peer_replicas.iter().copied().max().unwrap_or(1) {
            let mut builder = Webhook::builder(&scorer.url())
                .name(format!("frontend-{i}"))
                .kubeconfig(kc)
                .policy_file(&policy_file)
                .deadline_ms(args.deadline_ms);
            if let Some(n) = args.peer_max_connection_requests {
                builder = builder.arg(format!("--max-connection-requests={n}"));
            }
            let frontend = builder.start().await?;
            frontends.push(frontend);
        }
        let nodes = crate::scale::fake_nodes(&policy, args.peer_nodes, 8);
        gpu_admission_tests::kwok::create_ready_nodes_bulk(&cluster.client(), &nodes, 8).await?;
        let tiers: Vec<String> = (policy.tiers().iter())
            .map(|t| t.name.clone())
            .filter(|t| !quota_tiers.contains(&t.as_str()))
            .collect();
        let gpu_ns = create_namespaces(cluster, "peer-g", args.peer_namespaces, &tiers).await?;
        let quota: Vec<String> = quota_tiers.iter().map(|t| t.to_string()).collect();
        // With bystanders, the burst is the first quota'd tier's alone.
        let (burst, bystanders) = match args.peer_bystander {
            true => (
                &quota[..1],
                Some(Bystanders::create(cluster, &quota).await?),
            ),
            false => (&quota[..], None),
        };
        let quota_ns = create_namespaces(cluster, "peer-q", args.peer_namespaces, burst).await?;
        Ok(Self {
            frontends,
            gpu_ns,
            quota_ns,
            bystanders,
            bindings,
            scorer,
            _observer: observer,
            _dir: dir,
        })
    }

    /// The probes: the first GPU namespace's Pod, and a CPU-only Pod of the first quota'd namespace naming
    /// the policy's highest PriorityClass, beyond [`QUOTA_TIER`]'s cap (`/mutate-pod` leaves such a Pod to the
    /// floor's denial).
    fn probes(&self) -> anyhow::Result<Probes> {
        let buckets =
            (self.scorer.policy().policy.as_ref()).map_or(&[][..], |p| &p.priority.buckets);
        let highest =
            (buckets.iter().max_by_key(|b| b.value)).context("the policy's PriorityClasses")?;
        let mut floor_pod = crate::pods::pod("floor-probe", "probe", Shape::Cpu, 0);
        floor_pod
            .spec
            .as_mut()
            .expect("a Pod's spec")
            .priority_class_name = Some(highest.name.clone());
        Ok(Probes {
            gpu_ns: self.gpu_ns[0].0.clone(),
            floor_ns: self.quota_ns[0].0.clone(),
            floor_pod,
        })
    }

    fn namespaces(&self, kind: Kind) -> &[(String, String)] {
        match kind {
            Kind::Gpu | Kind::Cpu => &self.gpu_ns,
            Kind::QuotaGpu => &self.quota_ns,
        }
    }

    /// A balancer in front of the first `replicas` frontends and the shipped registrations calling it (every
    /// replica's CA in their `caBundle`).
    async fn installation(&self, replicas: usize) -> anyhow::Result<(Balancer, Installation)> {
        let frontends = &self.frontends[..replicas];
        let balancer = Balancer::start(frontends.iter().map(Webhook::addr).collect()).await?;
        let mut cas = Vec::new();
        for f in frontends {
            cas.extend(f.ca_pem()?);
        }
        let ca = base64::engine::general_purpose::STANDARD.encode(cas);
        let (mut mutating, mut validating) = registrations(&frontends[0], &[])?;
        let first = frontends[0].addr().to_string();
        for config in [&mut mutating, &mut validating] {
            for hook in config["webhooks"].as_array_mut().into_iter().flatten() {
                let url = hook["clientConfig"]["url"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                hook["clientConfig"] = json!({
                    "url": url.replace(&first, &balancer.addr.to_string()),
                    "caBundle": ca,
                });
            }
        }
        let installation = Installation {
            mutating,
            validating,
            bindings: self.bindings.clone(),
        };
        Ok((balancer, installation))
    }
}

/// Which run, in which arm.
struct Cell {
    clients: usize,
    replicas: usize,
    kind: Kind,
    round: usize,
    arm: Arm,
}

impl Cell {
    /// Warms up (one Pod per client), then creates `peer_pods` Pods timed, reading the apiserver's and the
    /// frontends' histograms around them; counts what was stored and decided, and deletes every Pod.
    async fn run(
        self,
        admin: &kube::Client,
        clients: &[kube::Client],
        set_up: &SetUp,
        args: &Args,
    ) -> anyhow::Result<Run> {
        let namespaces = set_up.namespaces(self.kind);
        let frontends = &set_up.frontends[..self.replicas];
        let name = format!(
            "c{}-r{}-{:?}-{}-{:?}",
            self.clients, self.replicas, self.kind, self.round, self.arm
        )
        .to_ascii_lowercase();
        let shape = self.kind.shape();
        let warm = create_timed(
            clients,
            namespaces,
            clients.len(),
            &format!("w{name}"),
            shape,
        )
        .await;
        ensure!(warm.failed == 0, "warm-up failed: {:?}", warm.errors);
        let bystanders = set_up
            .bystanders
            .as_ref()
            .filter(|_| self.kind != Kind::Cpu);
        let quiet = match bystanders {
            Some(b) => b.quiet(&name).await,
            None => Vec::new(),
        };
        let (a0, f0) = (
            apiserver_metrics(admin).await?,
            frontend_metrics(frontends).await?,
        );
        let running = bystanders.map(|b| b.start(&name));
        let load = create_timed(clients, namespaces, args.peer_pods, &name, shape).await;
        let during = match running {
            Some(r) => r.stop().await,
            None => Vec::new(),
        };
        let (a1, f1) = (
            apiserver_metrics(admin).await?,
            frontend_metrics(frontends).await?,
        );
        let stored = list_run(admin, &name).await?;
        let decided = (stored.iter())
            .filter(|p| annotation(p, ANN_DECIDED_AT).is_some())
            .count();
        ensure!(
            stored.len() == load.pods - load.failed,
            "{name}: {} stored of {} created",
            stored.len(),
            load.pods - load.failed
        );
        let mut created = namespaces.to_vec();
        created.extend(bystanders.iter().flat_map(|b| b.namespaces()).cloned());
        delete_all(admin, &created).await?;
        let bystanders = match bystanders {
            Some(b) => b.results(quiet, during),
            None => Vec::new(),
        };
        let post = ["verb=\"POST\"", "resource=\"pods\"", "subresource=\"\""];
        let of = |text: &str| histograms(text, REQUEST_DURATION, "verb", &post);
        let mut frontend = BTreeMap::new();
        let mut per_replica = Vec::new();
        let mut ledger_batch = Histogram::default();
        let mut writes_by_result = BTreeMap::new();
        for (before, now) in f0.iter().zip(&f1) {
            let earlier = ledger_writes(before);
            for (result, n) in ledger_writes(now) {
                let added = n.saturating_sub(earlier.get(&result).copied().unwrap_or(0));
                *writes_by_result.entry(result).or_insert(0) += added;
            }
            let added = histograms_since(
                &histograms(now, FRONTEND_DURATION, "webhook", &[]),
                &histograms(before, FRONTEND_DURATION, "webhook", &[]),
            );
            per_replica.push(added.values().map(|h| h.count as u64).sum());
            let single = |text: &str, name: &str| histograms(text, name, "", &[]);
            let writes = histograms_since(
                &single(now, LEDGER_WRITE_DURATION),
                &single(before, LEDGER_WRITE_DURATION),
            );
            let batches =
                histograms_since(&single(now, LEDGER_BATCH), &single(before, LEDGER_BATCH));
            if let Some(b) = batches.get("") {
                ledger_batch = ledger_batch.merged(b);
            }
            let writes = writes
                .into_values()
                .map(|h| ("ledger-write".to_string(), h));
            for (path, h) in added.into_iter().chain(writes) {
                let merged = frontend
                    .get(&path)
                    .map_or(h.clone(), |m: &Histogram| m.merged(&h));
                frontend.insert(path, merged);
            }
        }
        Ok(Run {
            clients: self.clients,
            replicas: self.replicas,
            kind: self.kind,
            round: self.round,
            arm: self.arm,
            load,
            decided,
            apiserver_post: histograms_since(&of(&a1), &of(&a0))
                .remove("POST")
                .unwrap_or_default(),
            webhooks: histograms_since(
                &histograms(&a1, WEBHOOK_DURATION, "name", &[]),
                &histograms(&a0, WEBHOOK_DURATION, "name", &[]),
            ),
            policy_plugin: histograms_since(
                &histograms(&a1, PLUGIN_DURATION, "name", &PLUGIN_CREATES),
                &histograms(&a0, PLUGIN_DURATION, "name", &PLUGIN_CREATES),
            )
            .remove(POLICY_PLUGIN)
            .unwrap_or_default(),
            frontend,
            per_replica,
            ledger_batch,
            bystanders,
            ledger_writes: writes_by_result,
        })
    }
}

async fn frontend_metrics(frontends: &[Webhook]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for f in frontends {
        out.push(f.metrics().await?);
    }
    Ok(out)
}

/// What must hold of every run, whatever the timing: every Pod created (and stored: [`Cell::run`]); with
/// our registrations, both Pod webhooks and the floor's Pod policy evaluated for each Pod and every GPU Pod
/// decided; without them, no webhook or policy of ours called and no Pod decided.
pub fn check(run: &Run) -> anyhow::Result<()> {
    let what = format!(
        "{} clients, {} replicas, {:?} {:?} r{}",
        run.clients, run.replicas, run.kind, run.arm, run.round
    );
    let bystanders: usize = run.bystanders.iter().map(|b| b.during.pods).sum();
    let pods = (run.load.pods + bystanders) as u64;
    ensure!(
        run.bystanders
            .iter()
            .all(|b| b.quiet.failed + b.during.failed == 0),
        "{what}: a bystander's Pod failed: {:?}",
        run.bystanders
            .iter()
            .flat_map(|b| b.during.errors.iter())
            .collect::<Vec<_>>()
    );
    ensure!(
        run.load.failed == 0,
        "{what}: {} failed: {:?}",
        run.load.failed,
        run.load.errors
    );
    let calls = |m: &BTreeMap<String, Histogram>, k: &str| m.get(k).map_or(0, |h| h.count as u64);
    match run.arm {
        Arm::With => {
            for hook in POD_WEBHOOKS {
                let n = calls(&run.webhooks, hook);
                ensure!(n == pods, "{what}: {n} calls of {hook} for {pods} Pods");
            }
            // The floor's binding was shown acting by the probe before the run; the plugin itself runs for
            // every CREATE.
            let n = run.policy_plugin.count as u64;
            ensure!(
                n >= pods,
                "{what}: the policy plugin ran {n} times for {pods} Pods"
            );
            if run.kind != Kind::Cpu {
                ensure!(
                    run.decided == run.load.pods,
                    "{what}: {} decided",
                    run.decided
                );
            }
        }
        Arm::Without => {
            let ours = |m: &BTreeMap<String, Histogram>| {
                m.keys().filter(|k| k.contains("gpu-admission")).count()
            };
            ensure!(
                ours(&run.webhooks) == 0 && run.decided == 0,
                "{what}: called without registrations: {:?}, {} decided",
                run.webhooks.keys(),
                run.decided
            );
        }
    }
    Ok(())
}

fn repo_path(rel: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
        .display()
        .to_string()
}

/// The ValidatingAdmissionPolicyBindings of the shipped floor.
fn floor_documents() -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let text = std::fs::read_to_string(repo_path(FLOOR))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        docs.push(Value::deserialize(doc)?);
    }
    let (bindings, rest): (Vec<Value>, Vec<Value>) =
        (docs.into_iter()).partition(|v| v["kind"] == "ValidatingAdmissionPolicyBinding");
    ensure!(!bindings.is_empty(), "{FLOOR} has no bindings");
    Ok((bindings, rest))
}

/// Waits until the observer has put the floor's parameters in Enforce.
async fn wait_floor_enforce(cluster: &LocalCluster) -> anyhow::Result<()> {
    for _ in 0..120 {
        if floor_parameter(cluster.kubeconfig(), "mode") == "Enforce" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("the observer never put the floor in Enforce")
}
