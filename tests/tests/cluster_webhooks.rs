//! What reaches each webhook, decided by a real kube-apiserver from the shipped registrations
//! (deploy/kustomize/base/webhook: rules, namespace and object selectors, matchConditions, timeouts, all as
//! shipped; only `clientConfig` points at the test's frontend by URL + caBundle, since no Pod runs it here).
//! The kube-controller-manager runs, so Jobs, CronJobs and Deployments make their own Pods.
//!
//! Each row creates or changes one thing and counts, on the real frontend's metrics, the requests each
//! webhook got meanwhile (`gpu_admission_admissions_total` by `webhook`): `/mutate-pod`, `/validate-pod` (Pods
//! and workloads) and `/mutate-pod-checkpoint`. Rows run one after another and wait for what the controllers
//! make, so each count belongs to its row. The table is printed; tests/README.md says what the conditions skip.

use std::time::{Duration, Instant};

use base64::Engine as _;
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok::wait_for;
use gpu_admission_tests::names::ANN_DECIDED_AT;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const GOLD: &str = "wh-gold";
const PLAIN: &str = "wh-plain";
const BRONZE: &str = "wh-bronze";

/// How many requests each webhook has answered so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reached {
    mutate: u64,
    validate: u64,
    checkpoint: u64,
}

impl Reached {
    fn since(self, before: Reached) -> Reached {
        Reached {
            mutate: self.mutate - before.mutate,
            validate: self.validate - before.validate,
            checkpoint: self.checkpoint - before.checkpoint,
        }
    }
}

fn sum(metrics: &str, prefix: &str) -> u64 {
    gpu_admission_tests::observer::metric_sum(metrics, prefix) as u64
}

async fn reached(webhook: &Webhook) -> Reached {
    let m = webhook.metrics().await.expect("frontend metrics");
    Reached {
        mutate: sum(&m, "gpu_admission_admissions_total{webhook=\"mutate-pod\","),
        validate: sum(
            &m,
            "gpu_admission_admissions_total{webhook=\"validate-pod\",",
        ),
        checkpoint: sum(
            &m,
            "gpu_admission_admissions_total{webhook=\"mutate-pod-checkpoint\",",
        ),
    }
}

/// A shipped webhook configuration with every entry's `clientConfig.service` turned into our URL.
fn shipped(file: &str, base_url: &str, ca_pem: &[u8]) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/webhook")
        .join(file);
    let mut cfg: Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for hook in cfg["webhooks"].as_array_mut().unwrap() {
        let p = hook["clientConfig"]["service"]["path"]
            .as_str()
            .unwrap()
            .to_string();
        hook["clientConfig"] = json!({"url": format!("{base_url}{p}"), "caBundle": ca});
    }
    cfg
}

fn container(name: &str, limits: Value) -> Value {
    json!({"name": name, "image": "registry.example/app:1", "resources": {"limits": limits}})
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn gpu_spec() -> Value {
    json!({"containers": [container("main", json!({"nvidia.com/gpu": "1"}))]})
}

/// Whether the row's request reaches `/mutate-pod`, reaches `/validate-pod`, and is admitted.
type Expect = (bool, bool, bool);

/// One row: what was done, what reached each webhook, whether it was admitted, and what was expected.
struct Row {
    what: String,
    got: Reached,
    admitted: String,
    mutate: bool,
    validate: bool,
    admit: bool,
}

struct Table {
    client: kube::Client,
    rows: Vec<Row>,
}

/// Creates `obj` (any kind) in `ns`; the apiserver's refusal as text.
async fn create(client: &kube::Client, ns: &str, obj: &Value) -> Result<(), String> {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj.clone()).unwrap(),
    )
    .await
    .map(|_| ())
    .map_err(|e| match e {
        kube::Error::Api(s) => s.message,
        e => e.to_string(),
    })
}

impl Table {
    /// Runs `act`, waits until `settled` holds (what the controllers make), then records the row.
    async fn row<A, S, Fut>(
        &mut self,
        webhook: &Webhook,
        what: &str,
        (mutate, validate, admit): Expect,
        act: A,
        settled: S,
    ) where
        A: std::future::Future<Output = Result<(), String>>,
        S: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        let before = reached(webhook).await;
        let admitted = match act.await {
            Ok(()) => "admitted".to_string(),
            Err(e) => format!("refused: {}", e.chars().take(400).collect::<String>()),
        };
        wait_for(what, Duration::from_secs(90), settled)
            .await
            .unwrap();
        // The apiserver's calls are over when the object is stored; a moment for the metrics.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = reached(webhook).await.since(before);
        self.rows.push(Row {
            what: what.into(),
            got,
            admitted,
            mutate,
            validate,
            admit,
        });
    }
}

/// A JSON merge patch of Pod `name`; the apiserver's refusal as text.
async fn merge(pods: &Api<Pod>, name: &str, patch: Value) -> Result<(), String> {
    pods.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            kube::Error::Api(s) => s.message,
            e => e.to_string(),
        })
}

async fn done() -> anyhow::Result<bool> {
    Ok(true)
}

async fn pod_exists(client: &kube::Client, ns: &str, selector: &str) -> anyhow::Result<bool> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    Ok(!pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_reaches_each_webhook_as_shipped() {
    let t0 = Instant::now();
    let components = Components {
        controller_manager: true,
        ..Components::APISERVER
    };
    let Some(cluster) = LocalCluster::start_with(components)
        .await
        .expect("control plane")
    else {
        return;
    };
    let client = cluster.client();
    // The default policy in Enforce, so that the table also shows what the validating webhook refuses.
    let policy_dir = tempfile::tempdir().unwrap();
    let policy_file = policy_dir.path().join("policy.yaml");
    let default = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/policy/default-policy.yaml");
    let text = std::fs::read_to_string(default).unwrap();
    assert!(
        text.contains("  mode: Warn"),
        "the default policy's enforcement moved"
    );
    std::fs::write(
        &policy_file,
        text.replace("  mode: Warn", "  mode: Enforce"),
    )
    .unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer");
    cluster.create_namespace(GOLD, Some("gold")).await.unwrap();
    cluster.create_namespace(PLAIN, None).await.unwrap();
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .start()
        .await
        .expect("webhook");
    let base = format!("https://{}", webhook.addr());
    let ca = webhook.ca_pem().unwrap();
    let mwc: MutatingWebhookConfiguration =
        serde_json::from_value(shipped("mutatingwebhookconfiguration.yaml", &base, &ca)).unwrap();
    let vwc: ValidatingWebhookConfiguration =
        serde_json::from_value(shipped("validatingwebhookconfiguration.yaml", &base, &ca)).unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mwc)
        .await
        .expect(
            "the shipped MutatingWebhookConfiguration, matchConditions compiled by the apiserver",
        );
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &vwc)
        .await
        .expect("the shipped ValidatingWebhookConfiguration");
    // The apiserver picks registrations up asynchronously: wait until a GPU Pod is decided.
    let pods = Api::<Pod>::namespaced(client.clone(), GOLD);
    let mut n = 0;
    wait_for("the webhooks registered", Duration::from_secs(30), || {
        n += 1;
        let (pods, name) = (pods.clone(), format!("probe-{n}"));
        async move {
            let p: Pod = serde_json::from_value(pod(&name, gpu_spec()))?;
            let p = pods.create(&PostParams::default(), &p).await?;
            Ok(p.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(ANN_DECIDED_AT))
        }
    })
    .await
    .unwrap();

    // The rows' objects are a tenant's: every verb of the built-in API groups, none of gpu-admission.io's
    // powers (the admin kubeconfig is system:masters, which RBAC lets run outside any tier).
    let tenant = "system:serviceaccount:default:tenant";
    cluster
        .bind_tenant(tenant)
        .await
        .expect("the tenant binding");
    let kubeconfig = gpu_admission_tests::cluster::service_account_kubeconfig(
        cluster.kubeconfig(),
        policy_dir.path(),
        "default",
        "tenant",
    )
    .unwrap();
    let mut t = Table {
        client: gpu_admission_tests::cluster::client_for(&kubeconfig)
            .await
            .unwrap(),
        rows: Vec::new(),
    };
    rows_of_pods(&mut t, &webhook).await;
    rows_of_workloads(&mut t, &webhook).await;

    println!("{:<58} MUTATE VALIDATE CHECKPOINT  APISERVER", "ROW");
    let mut wrong = Vec::new();
    for r in &t.rows {
        println!(
            "{:<58} {:>6} {:>8} {:>10}  {}",
            r.what, r.got.mutate, r.got.validate, r.got.checkpoint, r.admitted
        );
        let admitted = r.admitted == "admitted";
        if (r.got.mutate > 0) != r.mutate
            || (r.got.validate > 0) != r.validate
            || admitted != r.admit
        {
            wrong.push(format!(
                "{}: expected mutate {} validate {} admitted {}, got {:?} {}",
                r.what, r.mutate, r.validate, r.admit, r.got, r.admitted
            ));
        }
    }
    println!(
        "{} rows in {:.1}s",
        t.rows.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Pods created directly: what the conditions send and skip.
/// The Pods created directly: (row, namespace, Pod, expected).
fn pod_cases() -> Vec<(&'static str, &'static str, Value, Expect)> {
    let gpu = |name: &str, spec: Value| pod(name, spec);
    vec![
        (
            "GPU Pod (limits nvidia.com/gpu)",
            GOLD,
            gpu("gpu", gpu_spec()),
            (true, true, true),
        ),
        (
            "CPU-only Pod",
            GOLD,
            gpu(
                "cpu",
                json!({"containers": [container("main", json!({"cpu": "1"}))]}),
            ),
            (false, false, true),
        ),
        // Every Pod's priority is capped: a CPU-only Pod naming a PriorityClass reaches both
        // webhooks, and above gold's cap (gpu-high) it is denied in Enforce.
        (
            "CPU-only Pod naming PriorityClass gpu-ultra (Enforce)",
            GOLD,
            gpu(
                "cpu-ultra",
                json!({"priorityClassName": "gpu-ultra", "containers": [container("main", json!({"cpu": "1"}))]}),
            ),
            (true, true, false),
        ),
        // Every namespace has a tier: an unlabelled one is held to the default tier (bronze) and its GPU
        // Pod decided there.
        (
            "GPU Pod in an unlabelled namespace",
            PLAIN,
            gpu("gpu-plain", gpu_spec()),
            (true, true, true),
        ),
        (
            "GPU only in an init container",
            GOLD,
            gpu(
                "gpu-init",
                json!({"initContainers": [container("prep", json!({"nvidia.com/gpu": "1"}))],
                "containers": [container("main", json!({"cpu": "1"}))]}),
            ),
            (true, true, true),
        ),
        (
            "GPU only in a native sidecar (restartPolicy Always)",
            GOLD,
            gpu(
                "gpu-sidecar",
                json!({"initContainers": [{"restartPolicy": "Always",
                "name": "side", "image": "registry.example/side:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "containers": [container("main", json!({"cpu": "1"}))]}),
            ),
            (true, true, true),
        ),
        (
            "MIG slice nvidia.com/mig-1g.10gb",
            GOLD,
            gpu(
                "gpu-mig",
                json!({"containers": [container("main", json!({"nvidia.com/mig-1g.10gb": "1"}))]}),
            ),
            (true, true, true),
        ),
        // Every GPU counts: names the list does not spell out, under a GPU vendor's domain.
        (
            "time-sliced MIG renamed nvidia.com/mig-1g.10gb.shared",
            GOLD,
            gpu(
                "gpu-mig-shared",
                json!({"containers": [container("main", json!({"nvidia.com/mig-1g.10gb.shared": "1"}))]}),
            ),
            (true, true, true),
        ),
        // Intel's monitoring resource opens every GPU of the node: an Intel GPU, held to the tier, and gold
        // (the whole catalog) has no Intel class: denied in Enforce.
        (
            "Intel gpu.intel.com/i915_monitoring (no Intel class in gold)",
            GOLD,
            gpu(
                "gpu-intel-monitoring",
                json!({"containers": [container("main", json!({"gpu.intel.com/i915_monitoring": "1"}))]}),
            ),
            (true, true, false),
        ),
        // DRA claims and templates reach /validate-pod (claims.validate.gpu-admission.io), after /mutate-claim
        // (claims.gpu-admission.io, not counted here) has added the tier's product selector: NVIDIA's
        // quickstart claim is admitted in bronze, held to L4.
        (
            "bronze ResourceClaim on gpu.nvidia.com, no selector (Enforce)",
            BRONZE,
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "any-gpu"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}),
            (false, true, true),
        ),
        (
            "bronze ResourceClaimTemplate on l4-24gb.gpu-admission.io",
            BRONZE,
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "l4"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "l4-24gb.gpu-admission.io"}}]}}}}),
            (false, true, true),
        ),
        (
            "AMD GPU amd.com/gpu",
            GOLD,
            gpu(
                "gpu-amd",
                json!({"containers": [container("main", json!({"amd.com/gpu": "1"}))]}),
            ),
            (true, true, true),
        ),
        (
            "DRA Pod, its ResourceClaimTemplate not created yet (Enforce)",
            GOLD,
            gpu(
                "gpu-dra",
                json!({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "containers": [{"name": "main", "image": "registry.example/app:1", "resources": {"claims": [{"name": "gpu"}]}}]}),
            ),
            (true, true, false),
        ),
        (
            "GPU Pod with schedulingGates (as Kueue creates it)",
            GOLD,
            gpu(
                "gpu-gated",
                json!({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
                "containers": [container("main", json!({"nvidia.com/gpu": "1"}))]}),
            ),
            (true, true, true),
        ),
    ]
}

async fn rows_of_pods(t: &mut Table, webhook: &Webhook) {
    let client = t.client.clone();
    for (what, ns, obj, expect) in pod_cases() {
        t.row(webhook, what, expect, create(&client, ns, &obj), done)
            .await;
    }
    rows_of_updates(t, webhook).await;
    rows_of_subresources(t, webhook).await;
}

/// UPDATEs of gated Pods, as Kueue makes them.
async fn rows_of_updates(t: &mut Table, webhook: &Webhook) {
    let client = t.client.clone();
    // The gated Pod: an UPDATE adding a node selector while gated, then the gate lifted. Updates reach
    // /validate-pod only; the decision of its CREATE is not taken again.
    let gold = Api::<Pod>::namespaced(client.clone(), GOLD);
    let zone = json!({"spec": {"nodeSelector": {"cloud.example/zone": "a"}}});
    let what = "gated Pod: UPDATE adding a nodeSelector";
    t.row(
        webhook,
        what,
        (false, true, true),
        merge(&gold, "gpu-gated", zone),
        done,
    )
    .await;
    let ungate = json!({"spec": {"schedulingGates": null}});
    let what = "gated Pod: UPDATE lifting the gate";
    t.row(
        webhook,
        what,
        (false, true, true),
        merge(&gold, "gpu-gated", ungate),
        done,
    )
    .await;

    // A Pod Kueue holds in a bronze namespace (Enforce): decided once at CREATE without a placement (Kueue's
    // flavor places it), then held to the tier by /validate-pod when Kueue writes the flavor's node selector.
    let bronze = Api::<Pod>::namespaced(client.clone(), BRONZE);
    let mut kueue = pod(
        "kueue-held",
        json!({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "containers": [container("main", json!({"nvidia.com/gpu": "1"}))]}),
    );
    kueue["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team-q"});
    let what = "bronze Kueue Pod (queue label, admission gate)";
    t.row(
        webhook,
        what,
        (true, true, true),
        create(&client, BRONZE, &kueue),
        done,
    )
    .await;
    // Bronze is one class, so the CREATE already pinned it; the apiserver lets a gated Pod only add selector
    // keys, so Kueue's H100 flavor comes as GPU Feature Discovery's product label.
    let h100 =
        json!({"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}});
    let what = "bronze Kueue Pod: + nvidia.com/gpu.product H100 (Enforce)";
    t.row(
        webhook,
        what,
        (false, true, false),
        merge(&bronze, "kueue-held", h100),
        done,
    )
    .await;
    let l4 = json!({"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}});
    let what = "bronze Kueue Pod: + nvidia.com/gpu.product L4";
    t.row(
        webhook,
        what,
        (false, true, true),
        merge(&bronze, "kueue-held", l4),
        done,
    )
    .await;
    // Metadata no check reads (a finalizer, as the job controller adds and removes them): not sent; an
    // annotation: sent.
    let what = "GPU Pod: UPDATE adding a finalizer only";
    let finalizer = json!({"metadata": {"finalizers": ["example.com/keep"]}});
    t.row(
        webhook,
        what,
        (false, false, true),
        merge(&gold, "gpu-gated", finalizer),
        done,
    )
    .await;
    let what = "GPU Pod: UPDATE removing it";
    let none = json!({"metadata": {"finalizers": null}});
    t.row(
        webhook,
        what,
        (false, false, true),
        merge(&gold, "gpu-gated", none),
        done,
    )
    .await;
    let what = "GPU Pod: UPDATE of an annotation";
    let note = json!({"metadata": {"annotations": {"example.com/note": "x"}}});
    t.row(
        webhook,
        what,
        (false, true, true),
        merge(&gold, "gpu-gated", note),
        done,
    )
    .await;
    let ungate = json!({"spec": {"schedulingGates": null}});
    let what = "bronze Kueue Pod: gate lifted";
    t.row(
        webhook,
        what,
        (false, true, true),
        merge(&bronze, "kueue-held", ungate),
        done,
    )
    .await;
}

/// Subresources: what no rule names, and what the apiserver refuses itself.
async fn rows_of_subresources(t: &mut Table, webhook: &Webhook) {
    let pods = Api::<Pod>::namespaced(t.client.clone(), GOLD);
    // An ephemeral container (pods/ephemeralcontainers) is a subresource no rule names; the apiserver itself
    // refuses resources on one, so it cannot add a GPU.
    let ephemeral = json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    let p = pods.clone();
    t.row(
        webhook,
        "ephemeral container asking for a GPU",
        (false, false, false),
        async move {
            p.patch_subresource(
                "ephemeralcontainers",
                "gpu",
                &PatchParams::default(),
                &Patch::Strategic(ephemeral),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        },
        done,
    )
    .await;
    let resize = json!({"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}});
    let p = pods.clone();
    t.row(
        webhook,
        "in-place resize to 4 GPUs (pods/resize)",
        (false, false, false),
        async move {
            p.patch_subresource(
                "resize",
                "gpu",
                &PatchParams::default(),
                &Patch::Strategic(resize),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        },
        done,
    )
    .await;
}

/// Workloads, and the Pods their controllers create.
async fn rows_of_workloads(t: &mut Table, webhook: &Webhook) {
    let client = t.client.clone();
    let template = |limits: Value| {
        json!({"metadata": {"labels": {"app": "w"}},
        "spec": {"restartPolicy": "Never", "containers": [container("main", limits)]}})
    };
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"template": template(json!({"nvidia.com/gpu": "1"}))}});
    t.row(
        webhook,
        "GPU Job -> its Pod (job controller)",
        (true, true, true),
        create(&client, GOLD, &job),
        || pod_exists(&client, GOLD, "job-name=train"),
    )
    .await;
    let cpu_job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
        "spec": {"template": template(json!({"cpu": "1"}))}});
    t.row(
        webhook,
        "CPU-only Job -> its Pod",
        (false, false, true),
        create(&client, GOLD, &cpu_job),
        || pod_exists(&client, GOLD, "job-name=etl"),
    )
    .await;
    let mut dep_template = template(json!({"nvidia.com/gpu": "1"}));
    dep_template["spec"]["restartPolicy"] = json!("Always");
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}}, "template": dep_template}});
    t.row(
        webhook,
        "GPU Deployment -> ReplicaSet -> Pod",
        (true, true, true),
        create(&client, GOLD, &dep),
        || pod_exists(&client, GOLD, "app=w,pod-template-hash"),
    )
    .await;
    // The CronJob controller creates its Job at the next minute.
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template(json!({"nvidia.com/gpu": "1"}))}}}});
    t.row(
        webhook,
        "GPU CronJob -> Job -> Pod (cronjob, job controllers)",
        (true, true, true),
        create(&client, GOLD, &cron),
        || async {
            let pods = Api::<Pod>::namespaced(client.clone(), GOLD);
            Ok(pods
                .list(&ListParams::default().labels("job-name"))
                .await?
                .items
                .iter()
                .any(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("job-name"))
                        .is_some_and(|j| j.starts_with("nightly-"))
                }))
        },
    )
    .await;
}
