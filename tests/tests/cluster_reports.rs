//! PolicyReports against a real kube-apiserver: the real scorer (the default policy, `Warn`) and the
//! real observer with `--policy-reports`, run as its ServiceAccount with the base RBAC plus the
//! policy-reports component's, started BEFORE the PolicyReport CRD exists. There is no webhook: the test
//! plays a controller that creates objects directly, so violating objects are stored as they are.
//!
//! What must hold:
//! - without the CRD the observer runs, says once that the API is not served, and starts reporting when
//!   the component's CRD is installed;
//! - a silver namespace's violating Pod and Deployment (an H100 pin) show in its PolicyReport `gpu-admission`
//!   as `warn` results with `/validate-pod`'s message (core's decision of the same review), compliant GPU
//!   objects as `pass`; the report is capped (`--report-max-results`) and says what it left out;
//! - switching A100-80GB out of silver (a new policy version) turns the report of the A100 Pod already
//!   running into a `warn` within one audit interval;
//! - a GpuPolicyException naming the violating Deployment turns its result into a `skip` naming the
//!   exception and its expiry;
//! - a GPU quota lowered below what the namespace runs reports the Pod created last as `over_quota` (a `warn`
//!   in Warn mode, nothing evicted);
//! - a namespace with nothing left to report loses its report.

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_core::admission::validate_pod;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::tier_bound::NoNodes;
use gpu_admission_tests::Scorer;
use gpu_admission_tests::cluster::{LocalCluster, service_account_kubeconfig};
use gpu_admission_tests::observer::{Observer, metric_value};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};

const NS: &str = "team-silver";
/// A second namespace of the same tier (its quota counts both).
const NS_B: &str = "team-silver-b";
const SYSTEM_NS: &str = "gpu-admission";
/// A namespace whose one Pod is bound by name to [`BOUND_NODE`], relabelled under it.
const NS_NODE: &str = "team-silver-node";
const BOUND_NODE: &str = "audit-gpu-node";
const SERVICE_ACCOUNT: &str = "gpu-admission-observer";
const CLASS: &str = "gpu.nvidia.com/class";
/// The observer's audit interval in this test.
const INTERVAL_SECS: u64 = 3;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn default_policy() -> String {
    std::fs::read_to_string(repo().join("deploy/kustomize/base/policy/default-policy.yaml"))
        .expect("the default policy")
}

/// Applies `files`, then waits until the CRDs among them are established (a custom resource created before
/// would get a 404).
fn kubectl_apply(kubeconfig: &Path, files: &[std::path::PathBuf]) {
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .expect("kubectl (it applies the shipped manifests)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut apply: Vec<&std::ffi::OsStr> = vec!["apply".as_ref(), "-o".as_ref(), "name".as_ref()];
    for f in files {
        apply.extend(["-f".as_ref(), f.as_os_str()]);
    }
    let applied = run(&apply);
    for crd in applied
        .lines()
        .filter(|l| l.starts_with("customresourcedefinition"))
    {
        run(&["wait", "--for=condition=Established", crd, "--timeout=60s"].map(AsRef::as_ref));
    }
}

fn gpu_spec(class: &str) -> Value {
    json!({"nodeSelector": {CLASS: class}, "containers": [{"name": "main", "image": "registry.example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]})
}

fn pod(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": gpu_spec(class)})
}

fn deployment(name: &str, class: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": gpu_spec(class)}}})
}

/// What `/validate-pod` answers a plain user's CREATE of `object` in Warn mode: core's decision, the one the
/// frontend calls.
fn validate_pod_warning(
    object: &Value,
    kind: (&str, &str, &str),
    policy: &PolicySnapshot,
) -> String {
    let review = serde_json::from_value(json!({
        "uid": "u", "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "resource": {"group": kind.0, "version": kind.1, "resource": "x"}, "namespace": NS,
        "operation": "CREATE", "userInfo": {"username": "alice"}, "object": object}))
    .unwrap();
    let tier_of = |ns: &str| (ns == NS).then(|| "silver".to_string());
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &gpu_admission_core::authority::Grants::none(),
    };
    let (_, verdict) = validate_pod::decide(&review, policy, &facts);
    verdict
        .warnings
        .into_iter()
        .next()
        .expect("a warning in Warn mode")
}

fn reports_api() -> ApiResource {
    ApiResource {
        group: "wgpolicyk8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "wgpolicyk8s.io/v1alpha2".into(),
        kind: "PolicyReport".into(),
        plural: "policyreports".into(),
    }
}

async fn report(client: &kube::Client) -> Option<Value> {
    report_in(client, NS).await
}

async fn report_in(client: &kube::Client, namespace: &str) -> Option<Value> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &reports_api());
    let r = api.get_opt("gpu-admission").await.ok()??;
    serde_json::to_value(r).ok()
}

/// `(result, rule, kind, name)` of every result of a report.
fn results(report: &Value) -> Vec<(String, String, String, String)> {
    report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&r["result"]),
                s(&r["rule"]),
                s(&r["resources"][0]["kind"]),
                s(&r["resources"][0]["name"]),
            )
        })
        .collect()
}

fn result_of<'r>(report: &'r Value, name: &str) -> Option<&'r Value> {
    report["results"]
        .as_array()?
        .iter()
        .find(|r| r["resources"][0]["name"] == name)
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return (v, started.elapsed());
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reports_show_violations_and_follow_a_policy_change() {
    let Some(cluster) = LocalCluster::start().await.expect("control plane") else {
        return;
    };
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    let warn = default_policy();
    assert!(
        warn.contains("  mode: Warn\n"),
        "the default policy is in Warn mode"
    );
    std::fs::write(&policy_file, &warn).unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .env("GPU_ADMISSION_POLICY_POLL_MS", "200")
        .start()
        .await
        .unwrap();
    let snapshot = scorer.policy().clone();

    cluster.create_namespace(SYSTEM_NS, None).await.unwrap();
    cluster.create_namespace(NS, Some("silver")).await.unwrap();
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    let base = repo().join("deploy/kustomize/base/observer");
    let component = repo().join("deploy/kustomize/components/policy-reports");
    kubectl_apply(
        cluster.kubeconfig(),
        &[
            base.join("serviceaccount.yaml"),
            base.join("rbac.yaml"),
            base.join("lease.yaml"),
            component.join("rbac.yaml"),
        ],
    );
    let sa =
        service_account_kubeconfig(cluster.kubeconfig(), dir.path(), SYSTEM_NS, SERVICE_ACCOUNT)
            .unwrap();

    // The observer starts before the CRD exists.
    let mut observer = Observer::builder(&sa, &[scorer.url()], "observer-reports")
        .env("LOG_FORMAT", "json")
        .arg("--policy-reports")
        .arg(format!("--audit-interval-secs={INTERVAL_SECS}"))
        .arg("--audit-poll-secs=1")
        .arg("--report-max-results=3")
        .start()
        .await
        .unwrap();
    wait_for(
        "the observer to say the API is not served",
        Duration::from_secs(20),
        || async { observer.process.log().contains("not served").then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = observer.process.log();
    assert_eq!(log.matches("not served").count(), 1, "said once:\n{log}");
    let metrics = observer.metrics().await.unwrap();
    assert_eq!(
        metric_value(&metrics, "observer_policy_report_api_served"),
        0.0
    );

    // The component's CRD; then what a controller would create, stored as it is (no webhook).
    kubectl_apply(
        cluster.kubeconfig(),
        &[component.join("policyreports.yaml")],
    );
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let deployments = Api::<Deployment>::namespaced(client.clone(), NS);
    let pin = pod("pin-h100", "H100-80GB");
    let d_pin = deployment("d-h100", "H100-80GB");
    for p in [&pin, &pod("on-a100", "A100-80GB")] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(p.clone()).unwrap(),
        )
        .await
        .unwrap();
    }
    for d in [&d_pin, &deployment("d-l4", "L4-24GB")] {
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(d.clone()).unwrap(),
            )
            .await
            .unwrap();
    }
    let created = Instant::now();

    let (first, _) = wait_for(
        "the silver report with its four objects",
        Duration::from_secs(30),
        || async {
            report(&client)
                .await
                .filter(|r| r["summary"]["warn"] == 2 && r["summary"]["pass"] == 2)
        },
    )
    .await;
    println!(
        "first report {:.1}s after the objects were created (CRD installed just before)",
        created.elapsed().as_secs_f64()
    );
    println!("{}", serde_json::to_string_pretty(&first).unwrap());
    // Failures first, capped at 3: the A100 Pod's pass is left out and counted.
    assert_eq!(
        results(&first),
        [
            (
                "warn".into(),
                "class_outside_tier".into(),
                "Deployment".into(),
                "d-h100".into()
            ),
            (
                "warn".into(),
                "class_outside_tier".into(),
                "Pod".into(),
                "pin-h100".into()
            ),
            (
                "pass".into(),
                "within_tier".into(),
                "Deployment".into(),
                "d-l4".into()
            ),
        ]
    );
    assert_eq!(
        first["metadata"]["annotations"]["gpu-admission.io/results-omitted"],
        "1"
    );
    let warned = result_of(&first, "pin-h100").unwrap();
    assert_eq!(warned["source"], "gpu-admission");
    assert_eq!(warned["scored"], false);
    assert_eq!(warned["resources"][0]["namespace"], NS);
    assert!(
        warned["resources"][0]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert_eq!(
        warned["message"],
        validate_pod_warning(&pin, ("", "v1", "Pod"), &snapshot)
    );
    assert_eq!(
        result_of(&first, "d-h100").unwrap()["message"],
        validate_pod_warning(&d_pin, ("apps", "v1", "Deployment"), &snapshot)
    );
    assert!(
        warned["message"].as_str().unwrap().contains(
            "Pod team-silver/pin-h100 is outside tier silver: selects GPU class H100-80GB"
        )
    );
    assert_eq!(warned["properties"]["mode"], "Warn");

    // A100-80GB out of silver: a new policy version; the running A100 Pod's result turns to warn.
    let tightened = warn.replace(
        "    allowedClasses: [A100-80GB, A100-40GB, MI300X-192GB, L40S-48GB, L4-24GB]\n    preferredClass: A100-80GB",
        "    allowedClasses: [A100-40GB, MI300X-192GB, L40S-48GB, L4-24GB]\n    preferredClass: A100-40GB",
    );
    assert_ne!(
        tightened, warn,
        "the silver tier line is in the default policy"
    );
    let old_version = first["metadata"]["annotations"]["gpu-admission.io/policy-version"].clone();
    std::fs::write(&policy_file, &tightened).unwrap();
    let changed = Instant::now();
    let (second, _) = wait_for("the A100 Pod's warn", Duration::from_secs(30), || async {
        report(&client)
            .await
            .filter(|r| result_of(r, "on-a100").is_some_and(|x| x["result"] == "warn"))
    })
    .await;
    let took = changed.elapsed();
    println!(
        "policy change -> report updated in {:.1}s (audit interval {INTERVAL_SECS}s)",
        took.as_secs_f64()
    );
    assert!(
        took <= Duration::from_secs(INTERVAL_SECS),
        "not within one audit interval: {took:?}"
    );
    assert_ne!(
        second["metadata"]["annotations"]["gpu-admission.io/policy-version"],
        old_version
    );
    let a100 = result_of(&second, "on-a100").unwrap();
    assert_eq!(a100["rule"], "class_outside_tier");
    assert!(
        a100["message"]
            .as_str()
            .unwrap()
            .contains("selects GPU class A100-80GB"),
        "{a100}"
    );
    assert_eq!(
        second["summary"],
        json!({"pass": 1, "fail": 0, "warn": 3, "error": 0, "skip": 0})
    );

    // A GpuPolicyException letting d-h100 use H100: its result turns to a skip naming the exception (the
    // other objects unchanged), as /validate-pod would allow it.
    kubectl_apply(
        cluster.kubeconfig(),
        &[repo().join("deploy/kustomize/base/exceptions.yaml")],
    );
    let expires = (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .replace_nanosecond(0)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let exception: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
        "metadata": {"name": "d-h100-on-h100", "namespace": NS},
        "spec": {"rules": ["Classes"], "classes": ["H100-80GB"],
                 "workloads": [{"kind": "Deployment", "name": "d-h100"}], "expiresAt": expires}}))
    .unwrap();
    let exceptions = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "gpu-admission.io",
                "v1alpha1",
                "GpuPolicyException",
            ),
            "gpupolicyexceptions",
        ),
    );
    exceptions
        .create(&PostParams::default(), &exception)
        .await
        .unwrap();
    let (third, _) = wait_for(
        "the excepted Deployment's skip",
        Duration::from_secs(30),
        || async {
            report(&client)
                .await
                .filter(|r| result_of(r, "d-h100").is_some_and(|x| x["result"] == "skip"))
        },
    )
    .await;
    let skipped = result_of(&third, "d-h100").unwrap();
    assert_eq!(skipped["rule"], "excepted");
    assert_eq!(skipped["scored"], false);
    assert_eq!(
        skipped["properties"]["exception"],
        format!("{NS}/d-h100-on-h100")
    );
    assert_eq!(skipped["properties"]["expiresAt"], expires.as_str());
    assert_eq!(
        third["summary"],
        json!({"pass": 1, "fail": 0, "warn": 2, "error": 0, "skip": 1})
    );
    println!("excepted: {skipped}");

    // The gauges follow the reports once the pass's writes have all returned: a moment after the report
    // itself can be read.
    let (metrics, _) = wait_for(
        "the gauges of the excepted report",
        Duration::from_secs(10),
        || async {
            let metrics = observer.metrics().await.ok()?;
            let excepted = "observer_policy_report_results{result=\"skip\",reason=\"excepted\"}";
            (metric_value(&metrics, excepted) == 1.0).then_some(metrics)
        },
    )
    .await;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("observer_policy_report") || l.starts_with("observer_audit"))
    {
        println!("{line}");
    }
    assert_eq!(
        metric_value(&metrics, "observer_policy_report_api_served"),
        1.0
    );
    assert_eq!(
        metric_value(
            &metrics,
            "observer_policy_report_results{result=\"warn\",reason=\"class_outside_tier\"}"
        ),
        2.0
    );
    assert_eq!(
        metric_value(&metrics, "observer_policy_report_results_omitted"),
        1.0
    );
    assert!(
        metric_value(
            &metrics,
            "observer_policy_reports_total{result=\"applied\"}"
        ) >= 2.0
    );

    // A GPU quota lowered below what runs: silver may hold 1 L4-24GB GPU and holds 2 (two Pods, `l4-a` then
    // `l4-b`; no controller-manager runs here, so the Deployments have no Pods). Nothing is evicted; the
    // later Pod, replayed in creation order (then by name), is the one past the `max`, reported with
    // /validate-pod's message.
    for name in ["l4-a", "l4-b"] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod(name, "L4-24GB")).unwrap(),
        )
        .await
        .unwrap();
    }
    let quota_d = format!(
        "{tightened}\nquotas:\n  tiers:\n    - tier: silver\n      classes: {{ L4-24GB: {{ max: 1 }} }}\n"
    );
    std::fs::write(&policy_file, &quota_d).unwrap();
    let (fourth, _) = wait_for(
        "the Pod past the lowered quota",
        Duration::from_secs(30),
        || async {
            report(&client)
                .await
                .filter(|r| result_of(r, "l4-b").is_some_and(|x| x["rule"] == "over_quota"))
        },
    )
    .await;
    let over = result_of(&fourth, "l4-b").unwrap();
    println!("over the lowered quota: {over}");
    assert_eq!(over["result"], "warn", "Warn mode reports, never evicts");
    assert!(
        over["message"]
            .as_str()
            .is_some_and(|m| m.contains("L4-24GB") && m.contains("silver")),
        "{over}"
    );
    assert!(
        over["properties"]["gpu-admission.io/quota"]
            .as_str()
            .is_some_and(|r| r.contains("over-max")),
        "{over}"
    );
    assert!(
        results(&fourth)
            .iter()
            .all(|(_, rule, _, name)| rule != "over_quota" || name == "l4-b"),
        "only the Pod created last is past the max: {fourth}"
    );
    for name in ["l4-a", "l4-b"] {
        assert_eq!(
            pods.get(name).await.unwrap().metadata.deletion_timestamp,
            None,
            "nothing is evicted"
        );
    }

    // The tier's other namespace: its Pod, created after both, is past the `max` too. Then both Pods of the
    // first namespace go (a change there only): the other namespace's Pod, never changed itself, now fits,
    // and its report says so (the tier's quota replayed from what each Pod was counted).
    cluster
        .create_namespace(NS_B, Some("silver"))
        .await
        .unwrap();
    let pods_b = Api::<Pod>::namespaced(client.clone(), NS_B);
    pods_b
        .create(
            &PostParams::default(),
            &serde_json::from_value({
                let mut p = pod("l4-c", "L4-24GB");
                p["metadata"]["namespace"] = json!(NS_B);
                p
            })
            .unwrap(),
        )
        .await
        .unwrap();
    let over_c = |r: &Value| result_of(r, "l4-c").is_some_and(|x| x["rule"] == "over_quota");
    wait_for(
        "the other namespace's Pod past the max",
        Duration::from_secs(30),
        || async { report_in(&client, NS_B).await.filter(over_c) },
    )
    .await;
    for name in ["l4-a", "l4-b"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    let (fifth, _) = wait_for(
        "the other namespace's Pod within the max once the first's went",
        Duration::from_secs(30),
        || async {
            report_in(&client, NS_B)
                .await
                .filter(|r| result_of(r, "l4-c").is_some_and(|x| x["result"] == "pass"))
        },
    )
    .await;
    assert!(!over_c(&fifth), "{fifth}");
    pods_b
        .delete("l4-c", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();

    // Nothing left to report: the report goes.
    for name in ["pin-h100", "on-a100"] {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    for name in ["d-h100", "d-l4"] {
        deployments
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    // The Deployments' Pods go by the controller-manager's garbage collector, which a loaded machine
    // delays: wait for the namespace to be empty, then bound the observer's own part.
    let (_, collected) = wait_for(
        "the Deployments' Pods to be collected",
        Duration::from_secs(120),
        || async {
            let left = pods.list(&Default::default()).await.ok()?.items.len()
                + deployments
                    .list(&Default::default())
                    .await
                    .ok()?
                    .items
                    .len();
            (left == 0).then_some(())
        },
    )
    .await;
    let (_, gone) = wait_for(
        "the empty namespace's report to go",
        Duration::from_secs(4 * INTERVAL_SECS),
        || async { report(&client).await.is_none().then_some(()) },
    )
    .await;
    println!(
        "namespace empty {:.1}s after the deletes; report gone {:.1}s later",
        collected.as_secs_f64(),
        gone.as_secs_f64()
    );

    // A Node relabelled under a Pod bound to it by name: its namespace is decided again (a Pod's class is
    // read from its Node), with no event of the Pod's own.
    node_relabelled_under_a_bound_pod(&client, &cluster).await;
    assert!(
        observer.process.exited().is_none(),
        "{}",
        observer.process.log_tail(30)
    );
}

async fn node_relabelled_under_a_bound_pod(client: &kube::Client, cluster: &LocalCluster) {
    cluster
        .create_namespace(NS_NODE, Some("silver"))
        .await
        .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": BOUND_NODE, "labels": {CLASS: "L4-24GB"}}});
    (nodes.create(
        &PostParams::default(),
        &serde_json::from_value(node).unwrap(),
    ))
    .await
    .unwrap();
    let mut spec = gpu_spec("L4-24GB");
    spec["nodeName"] = json!(BOUND_NODE);
    let bound = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound", "namespace": NS_NODE},
        "spec": spec});
    Api::<Pod>::namespaced(client.clone(), NS_NODE)
        .create(
            &PostParams::default(),
            &serde_json::from_value(bound).unwrap(),
        )
        .await
        .unwrap();
    let result = |class: &'static str| {
        move |r: Value| {
            let of = result_of(&r, "bound")?;
            (of["result"] == class).then(|| of.clone())
        }
    };
    wait_for(
        "the bound Pod's pass on its L4 Node",
        Duration::from_secs(30),
        || async { report_in(client, NS_NODE).await.and_then(result("pass")) },
    )
    .await;
    let relabel = json!({"metadata": {"labels": {CLASS: "H100-80GB"}}});
    (nodes.patch(BOUND_NODE, &PatchParams::default(), &Patch::Merge(&relabel)))
        .await
        .unwrap();
    let (warned, after) = wait_for(
        "the bound Pod's warning once its Node is an H100",
        Duration::from_secs(30),
        || async { report_in(client, NS_NODE).await.and_then(result("warn")) },
    )
    .await;
    println!(
        "Node relabelled: the bound Pod's report followed {:.1}s later: {warned}",
        after.as_secs_f64()
    );
    assert_eq!(warned["rule"], "node_outside_tier", "{warned}");
}
