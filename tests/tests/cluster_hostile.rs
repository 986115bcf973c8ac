//! Hostile load against another tenant's admissions, on a real kube-apiserver with the shipped Pod
//! registrations (`failurePolicy: Ignore`) and the default policy in Enforce: a gold tenant creates plain
//! GPU Pods through the apiserver, one phase quiet, one while two peers hold silent 24 MiB requests on the
//! webhook port (renewed as soon as they are answered), one while a bronze tenant floods the apiserver with
//! UPDATEs of a ~1 MiB GPU Pod (each review carries `object` and `oldObject`, ~2 MiB), twelve at a time. In
//! every phase each of the gold tenant's Pods is decided by our webhooks (stored with the decision's
//! annotation: not admitted through `Ignore` with our webhooks failing, not denied). Prints the table of
//! phase × decided / failed open / refused and p50/p99 of the gold tenant's CREATE, where the time went
//! (the apiserver's mean per Pod CREATE, the part its calls to our webhooks took, the frontend's own time per
//! review, from both processes' `/metrics`), and the frontend's peak resident memory (numbers in
//! docs/measurements/; latency is reported, not asserted).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpu_admission_testkit::hostile::{AttackCounts, attacker};
use gpu_admission_testkit::procfs::peak_rss_kib;
use gpu_admission_tests::apiserver_metrics::{
    WebhookSeconds, apiserver_metrics, histogram_seconds,
};
use gpu_admission_tests::cluster::{LocalCluster, shipped_policy_in_enforce};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const GOLD: &str = "hostile-gold";
const BRONZE: &str = "hostile-bronze";
const REGISTRATION: &str = "gpu-admission-hostile-e2e";
/// The decision's annotation `/mutate-pod` writes on every Pod it decides.
const DECIDED: &str = "gpu-admission.io/decided-at";
/// The gold tenant's Pods per phase, over `CLIENTS` concurrent clients.
const PODS: usize = 40;
const CLIENTS: usize = 2;
/// The bronze tenant's concurrent UPDATE loops.
const SENDERS: usize = 12;

fn gpu_pod(name: &str, extra_env: Option<String>) -> Pod {
    let mut container = json!({"name": "c", "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}});
    if let Some(value) = extra_env {
        container["env"] = json!([{"name": "BULK", "value": value}]);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name}, "spec": {"containers": [container]}}))
    .unwrap()
}

/// Where a phase's time went, as the apiserver and the frontend account for it: seconds and count of the
/// apiserver's Pod CREATEs (`apiserver_request_duration_seconds`), of its webhook calls for CREATEs (every
/// webhook: ours are the only ones), and of the frontend's answers to `/mutate-pod` and `/validate-pod` (every
/// tenant's reviews, the flood's UPDATEs included).
#[derive(Debug, Clone, Copy, Default)]
struct Accounts {
    creates: (f64, u64),
    create_webhook_calls: (f64, u64),
    frontend_reviews: (f64, u64),
    small_bodies: (f64, u64),
    large_bodies: (f64, u64),
}

impl Accounts {
    async fn read(client: &kube::Client, webhook: &Webhook) -> Self {
        let api = apiserver_metrics(client)
            .await
            .expect("the apiserver's /metrics");
        let ours = webhook.metrics().await.expect("the frontend's /metrics");
        let post = ["verb=\"POST\"", "resource=\"pods\"", "subresource=\"\""];
        let calls = WebhookSeconds::parse_operation(&api, Some("CREATE"));
        let frontend = ["mutate-pod", "validate-pod"].map(|w| {
            histogram_seconds(
                &ours,
                "gpu_admission_admission_duration_seconds",
                &[&format!("webhook=\"{w}\"")],
            )
        });
        Self {
            creates: histogram_seconds(&api, "apiserver_request_duration_seconds", &post),
            create_webhook_calls: calls
                .0
                .values()
                .fold((0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
            frontend_reviews: (frontend[0].0 + frontend[1].0, frontend[0].1 + frontend[1].1),
            small_bodies: histogram_seconds(
                &ours,
                "gpu_admission_body_arrival_seconds",
                &["size=\"small\""],
            ),
            large_bodies: histogram_seconds(
                &ours,
                "gpu_admission_body_arrival_seconds",
                &["size=\"large\""],
            ),
        }
    }

    /// `| CREATEs | mean CREATE ms | our webhooks' calls per CREATE ms | the rest ms | small and large body
    /// arrival ms (count) | frontend ms per review | reviews |` between `before` and `self`.
    fn row(&self, before: &Self, name: &str) -> String {
        let d = |a: (f64, u64), b: (f64, u64)| (a.0 - b.0, a.1.saturating_sub(b.1));
        let creates = d(self.creates, before.creates);
        let calls = d(self.create_webhook_calls, before.create_webhook_calls);
        let reviews = d(self.frontend_reviews, before.frontend_reviews);
        let small = d(self.small_bodies, before.small_bodies);
        let large = d(self.large_bodies, before.large_bodies);
        let per = |(s, n): (f64, u64)| if n == 0 { 0.0 } else { s * 1000.0 / n as f64 };
        let create_ms = per(creates);
        let webhooks_ms = if creates.1 == 0 {
            0.0
        } else {
            calls.0 * 1000.0 / creates.1 as f64
        };
        format!(
            "| {name} | {} | {create_ms:.1} | {webhooks_ms:.1} | {:.1} | {:.2} ({}) | {:.2} ({}) | {:.2} | {} |",
            creates.1,
            create_ms - webhooks_ms,
            per(small),
            small.1,
            per(large),
            large.1,
            per(reviews),
            reviews.1
        )
    }
}

/// Whether `/mutate-pod` decided the stored Pod.
fn decided(pod: &Pod) -> bool {
    let annotations = pod.metadata.annotations.as_ref();
    annotations.is_some_and(|a| a.contains_key(DECIDED))
}

/// What the gold tenant saw in one phase.
#[derive(Default)]
struct Phase {
    decided: usize,
    failed_open: usize,
    refused: Vec<String>,
    latencies: Vec<Duration>,
}

impl Phase {
    fn p(&self, q: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort();
        let i = ((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1;
        l[i].as_secs_f64() * 1000.0
    }

    fn row(&self, name: &str) -> String {
        format!(
            "| {name} | {} | {} | {} | {:.0} | {:.0} |",
            self.decided,
            self.failed_open,
            self.refused.len(),
            self.p(0.5),
            self.p(0.99)
        )
    }
}

/// The gold tenant's `PODS` GPU Pods, `CLIENTS` at a time.
async fn gold_tenant(client: &kube::Client, phase: &str) -> Phase {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let api = Api::<Pod>::namespaced(client.clone(), GOLD);
            let phase = phase.to_string();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for i in 0..PODS / CLIENTS {
                    let pod = gpu_pod(&format!("{phase}-{c}-{i}"), None);
                    let start = Instant::now();
                    let created = api.create(&PostParams::default(), &pod).await;
                    seen.push((created, start.elapsed()));
                }
                seen
            })
        })
        .collect();
    let mut out = Phase::default();
    for t in tasks {
        for (created, took) in t.await.unwrap() {
            out.latencies.push(took);
            match created {
                Ok(pod) if decided(&pod) => out.decided += 1,
                Ok(_) => out.failed_open += 1,
                Err(e) => out.refused.push(e.to_string()),
            }
        }
    }
    out
}

/// The bronze tenant's flood: `senders` loops each rewriting an annotation of its ~1 MiB GPU Pod until
/// `stop`; (UPDATEs stored, UPDATEs refused).
fn update_flood(
    client: &kube::Client,
    senders: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<(usize, usize)>> {
    (0..senders)
        .map(|s| {
            let api = Api::<Pod>::namespaced(client.clone(), BRONZE);
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut stored, mut refused) = (0, 0);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let patch =
                        json!({"metadata": {"annotations": {format!("flood-{s}"): n.to_string()}}});
                    match api
                        .patch("bulk", &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => stored += 1,
                        Err(_) => refused += 1,
                    }
                }
                (stored, refused)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_attacks_never_make_gold_pods_fail_open_or_denied() {
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, shipped_policy_in_enforce().unwrap()).unwrap();
    cluster.create_namespace(GOLD, Some("gold")).await.unwrap();
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook");
    cluster
        .register_shipped_pod_webhooks(&webhook, REGISTRATION)
        .await
        .unwrap();
    let gold = Api::<Pod>::namespaced(client.clone(), GOLD);
    let mut in_force = false;
    for i in 0..60 {
        let pod = gpu_pod(&format!("probe-{i}"), None);
        let created = gold.create(&PostParams::default(), &pod).await;
        if created.is_ok_and(|p| {
            p.metadata
                .annotations
                .is_some_and(|a| a.contains_key(DECIDED))
        }) {
            in_force = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(in_force, "our webhooks never decided a Pod");
    // The bronze tenant's large GPU Pod, decided (and stored) once.
    let bulk = gpu_pod("bulk", Some("x".repeat(1024 * 1024)));
    Api::<Pod>::namespaced(client.clone(), BRONZE)
        .create(&PostParams::default(), &bulk)
        .await
        .expect("the bronze tenant's ~1 MiB GPU Pod");

    println!(
        "| phase | decided by our webhooks | admitted without them | refused | p50 ms | p99 ms |"
    );
    println!("|---|---|---|---|---|---|");
    let mut accounts = Vec::new();
    let before = Accounts::read(&client, &webhook).await;
    let quiet = gold_tenant(&client, "quiet").await;
    accounts.push(
        Accounts::read(&client, &webhook)
            .await
            .row(&before, "quiet"),
    );
    println!("{}", quiet.row("quiet"));

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(AttackCounts::default());
    let silent: Vec<_> = (0..2)
        .map(|_| {
            let (addr, ca) = (webhook.addr(), webhook.ca_path().to_path_buf());
            tokio::spawn(attacker(addr, ca, 0, stop.clone(), counts.clone()))
        })
        .collect();
    while counts.requests.load(Ordering::Relaxed) < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = Accounts::read(&client, &webhook).await;
    let under_silence = gold_tenant(&client, "silent").await;
    accounts.push(
        Accounts::read(&client, &webhook)
            .await
            .row(&before, "silent"),
    );
    stop.store(true, Ordering::Relaxed);
    for s in silent {
        s.await.unwrap();
    }
    println!(
        "{}",
        under_silence.row("two silent 24 MiB requests on the port, renewed")
    );

    let stop = Arc::new(AtomicBool::new(false));
    let flood = update_flood(&client, SENDERS, &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = Accounts::read(&client, &webhook).await;
    let flooded = gold_tenant(&client, "flooded").await;
    accounts.push(
        Accounts::read(&client, &webhook)
            .await
            .row(&before, "flooded"),
    );
    stop.store(true, Ordering::Relaxed);
    let (mut stored, mut refused) = (0, 0);
    for f in flood {
        let (s, r) = f.await.unwrap();
        stored += s;
        refused += r;
    }
    println!(
        "{}",
        flooded.row("bronze: 12 concurrent UPDATEs of its ~1 MiB GPU Pod, renewed")
    );
    let (t408, s503, other) = counts.answers();
    println!("silent attackers: {t408} answered 408, {s503} answered 503, {other} other");
    println!("bronze's flood: {stored} UPDATEs stored, {refused} refused");
    println!(
        "\n| phase | Pod CREATEs | apiserver ms per CREATE | of it in our webhooks' calls | the rest | small body arrival ms (bodies) | large body arrival ms (bodies) | frontend ms per review | reviews answered |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in &accounts {
        println!("{row}");
    }
    let peak = peak_rss_kib(webhook.process.pid()).unwrap_or(0);
    println!("frontend peak resident memory: {} MiB", peak / 1024);

    for (name, phase) in [
        ("quiet", &quiet),
        ("silent", &under_silence),
        ("flooded", &flooded),
    ] {
        assert_eq!(
            (phase.decided, phase.failed_open),
            (PODS, 0),
            "{name}: every gold GPU Pod is decided by our webhooks; refused: {:?}",
            phase.refused
        );
    }
    assert!(
        stored > 0,
        "the flood reached the webhooks (its UPDATEs were stored)"
    );
    assert_eq!(other, 0, "no silent request is decided");
}
