//! The floor: the tier holds while no gpu-admission process runs. A real control plane (apiserver,
//! scheduler, controllers, kwok with one L4 Node), the floor as shipped (`deploy/kustomize/base/floor.yaml`),
//! the default policy in Enforce in the policy ConfigMap, the observer as its ServiceAccount with the shipped
//! RBAC keeping the floor's parameters in step, the shipped Pod webhooks pointed at a test frontend. As the
//! tenant "alice" (everything in the built-in API groups, none of gpu-admission.io's powers):
//!
//! 1. with the frontend up, a bronze GPU Pod without a class is admitted, placed on L4 by the mutation, which
//!    runs before the floor (the floor agrees with what the webhooks admit);
//! 2. with the frontend, the scorer and the observer killed: an H100-pinned GPU Pod, a CPU-only Pod at
//!    gpu-ultra, a namespace created with the gold label, and the bypass shapes (required node affinity with an
//!    H100 term, a GPU only in an init container or a native sidecar, a MIG slice, a DRA claim, no class at
//!    all, an admin DeviceClass's `extendedResourceName` or `deviceclass.resource.kubernetes.io/<class>` pinned
//!    to L4, the class selecting H100 and written into the parameters by the observer before it was killed)
//!    are all denied by the apiserver itself; a bronze Pod stating its L4 class runs on the L4 Node; a
//!    CPU-only Pod is admitted. Of workloads, a Deployment and a Job whose Pod template pins H100 (by
//!    `nodeSelector`, by an `In` of L4 and H100) and a CPU-only Deployment at gpu-ultra are denied by the
//!    floor's workload policy; a Job stating L4 and a Deployment stating no class (a template is never
//!    mutated: with the frontend up such a Deployment is admitted too) are admitted;
//! 3. a frontend started again restores normal decisions (the GPU Pod without a class admitted, placed on
//!    L4) within 10 s.
//!
//! Prints the table of cases and answers.

use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_tests::cluster::{
    CaseTable, Components, LocalCluster, eventually, floor_parameter, service_account_kubeconfig,
};
use gpu_admission_tests::kwok::{self, phase, wait_for};
use gpu_admission_tests::observer::Observer;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const USER: &str = "alice";
const CLASS: &str = "gpu.nvidia.com/class";
const BRONZE: &str = "floor-bronze";
const REGISTRATION: &str = "gpu-admission-floor-e2e";

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn repo_path(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
        .display()
        .to_string()
}

use gpu_admission_tests::cluster::KubectlAnswer as Answer;

/// How this file's table reads an answer.
trait Read {
    fn summary(&self) -> String;
    fn floor_denied(&self) -> bool;
}

impl Read for Answer {
    fn summary(&self) -> String {
        if self.ok {
            return format!("ALLOWED: {}", self.stdout.trim());
        }
        let why = self.stderr.trim();
        let why = why.split_once("denied request: ").map_or(why, |(_, m)| m);
        format!("DENIED: {}", why.replace('\n', " / "))
    }

    /// Denied by the floor (a ValidatingAdmissionPolicy of ours), not by RBAC or a webhook.
    fn floor_denied(&self) -> bool {
        !self.ok
            && self
                .stderr
                .contains("ValidatingAdmissionPolicy 'gpu-admission-floor-")
    }
}

fn kubectl(kubeconfig: &Path, as_user: bool, args: &[&str], stdin: &str) -> Answer {
    gpu_admission_tests::cluster::kubectl(kubeconfig, as_user.then_some(USER), &[], args, stdin)
}

/// A Pod whose one container asks for `resource` (in `where_`: containers, initContainers or a native
/// sidecar), with `extra` merged into its spec.
fn pod(name: &str, resource: &str, where_: &str, extra: Value) -> Value {
    let gpu = json!({"name": "gpu", "image": "registry.example/train:1",
        "resources": {"limits": {resource: "1"}}});
    let plain = json!({"name": "main", "image": "registry.example/train:1"});
    let mut spec = match where_ {
        "containers" => json!({"containers": [gpu]}),
        "initContainers" => json!({"containers": [plain], "initContainers": [gpu]}),
        _ => {
            let mut sidecar = gpu;
            sidecar["restartPolicy"] = json!("Always");
            json!({"containers": [plain], "initContainers": [sidecar]})
        }
    };
    spec["tolerations"] =
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn gpu_pod(name: &str, extra: Value) -> Value {
    pod(name, "nvidia.com/gpu", "containers", extra)
}

/// A workload (`Deployment`, `Job`) whose Pod template is [`gpu_pod`]'s spec with `extra`, or a CPU-only one
/// (`gpu: false`); no Pod is made of it (a Deployment of 0 replicas, a suspended Job).
fn workload(kind: &str, name: &str, gpu: bool, extra: Value) -> Value {
    let mut spec = if gpu {
        gpu_pod(name, extra)["spec"].clone()
    } else {
        let mut s = json!({"containers": [{"name": "main", "image": "registry.example/web:1"}]});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let labels = json!({"app": name});
    match kind {
        "Deployment" => {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec}}})
        }
        _ => {
            spec["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"suspend": true, "template": {"spec": spec}}})
        }
    }
}

fn required_affinity(terms: &[&[&str]]) -> Value {
    let terms: Vec<Value> = terms
        .iter()
        .map(|values| json!({"matchExpressions": [{"key": CLASS, "operator": "In", "values": values}]}))
        .collect();
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}})
}

/// The stored Pod's class `nodeSelector` value, when admitted.
fn stored_class(kc: &Path, name: &str) -> Option<String> {
    let a = kubectl(
        kc,
        false,
        &["-n", BRONZE, "get", "pod", name, "-o", "json"],
        "",
    );
    let pod: Value = serde_json::from_str(&a.stdout).ok()?;
    pod["spec"]["nodeSelector"][CLASS]
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_holds_while_no_gpu_admission_process_runs() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let text = repo_file("deploy/kustomize/base/policy/default-policy.yaml");
    assert!(text.contains("  mode: Warn"));
    let enforce = text.replace("  mode: Warn", "  mode: Enforce");
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, &enforce).unwrap();

    // Our namespace, the floor and the observer's objects as shipped; the policy ConfigMap in Enforce.
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    for file in [
        "deploy/kustomize/base/floor.yaml",
        "deploy/kustomize/base/observer/serviceaccount.yaml",
        "deploy/kustomize/base/observer/rbac.yaml",
        "deploy/kustomize/base/observer/lease.yaml",
    ] {
        let a = kubectl(
            kc,
            false,
            &["-n", "gpu-admission", "apply", "-f", &repo_path(file)],
            "",
        );
        assert!(a.ok, "{file}: {}", a.stderr);
    }
    let a = kubectl(
        kc,
        false,
        &[
            "-n",
            "gpu-admission",
            "create",
            "configmap",
            "gpu-admission-policy",
            &format!("--from-file=default-policy.yaml={}", policy_file.display()),
        ],
        "",
    );
    assert!(a.ok, "policy ConfigMap: {}", a.stderr);
    cluster.bind_tenant(USER).await.unwrap();

    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .unwrap();
    let l4 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .expect("L4 in the catalog")
        .clone();
    kwok::create_ready_nodes(
        &client,
        &[kwok::gpu_node("floor-l4", &l4, "nvidia.com/gpu", 8)],
    )
    .await
    .expect("the L4 Node");

    // The observer (its ServiceAccount, the shipped RBAC) creates the parameters (none is shipped), in Enforce.
    let sa = service_account_kubeconfig(kc, dir.path(), "gpu-admission", "gpu-admission-observer")
        .unwrap();
    let started = Instant::now();
    let mut observer = Observer::builder(&sa, &[scorer.url()], "floor-observer")
        .arg("--floor-params=gpu-admission-floor")
        .start()
        .await
        .expect("observer");
    let mode = || floor_parameter(kc, "mode");
    assert!(
        eventually(Duration::from_secs(30), |_| mode() == "Enforce"),
        "the observer never put the floor in Enforce\n{}",
        observer.process.log_tail(30)
    );
    println!(
        "floor parameters in step with the policy {:?} after the observer started",
        started.elapsed()
    );
    // A tier-labelled namespace once the parameters exist: until then the floor denies its label.
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    // The parameter object deleted: the leader puts it back.
    let a = kubectl(
        kc,
        false,
        &[
            "-n",
            "gpu-admission",
            "delete",
            "floorparameters",
            "gpu-admission-floor",
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    let deleted = Instant::now();
    assert!(
        eventually(Duration::from_secs(20), |_| mode() == "Enforce"),
        "the observer never recreated the parameters\n{}",
        observer.process.log_tail(30)
    );
    println!(
        "deleted parameter object recreated after {:?}",
        deleted.elapsed()
    );
    bindings_gone_and_back_read_the_parameters_of_now(kc, &enforce, &observer);

    let mut table = CaseTable::start();
    let create = |ns: &str, object: &Value| {
        kubectl(
            kc,
            true,
            &["-n", ns, "create", "-f", "-", "-o", "name"],
            &object.to_string(),
        )
    };

    // 1. Frontend up: the mutation places the classless GPU Pod before the floor runs.
    let mut webhook = Webhook::builder(&scorer.url())
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook");
    cluster
        .register_shipped_pod_webhooks(&webhook, REGISTRATION)
        .await
        .unwrap();
    let mut last = None;
    eventually(Duration::from_secs(30), |i| {
        let name = format!("up-no-class-{i}");
        let a = create(BRONZE, &gpu_pod(&name, json!({})));
        let placed = a.ok && stored_class(kc, &name).as_deref() == Some("L4-24GB");
        last = Some(a);
        placed
    });
    let a = last.unwrap();
    table.check(
        "frontend up: bronze GPU Pod without a class",
        a.summary(),
        a.ok,
    );
    let a = create(
        BRONZE,
        &gpu_pod("up-h100", json!({"nodeSelector": {CLASS: "H100-80GB"}})),
    );
    table.check(
        "frontend up: bronze GPU Pod pinned to H100",
        a.summary(),
        !a.ok,
    );
    // A workload is not mutated: a template without a class stays admitted with the floor in place.
    let a = create(
        BRONZE,
        &workload("Deployment", "up-no-class", true, json!({})),
    );
    table.check(
        "frontend up: bronze GPU Deployment without a class",
        a.summary(),
        a.ok,
    );

    // An admin's DeviceClass selecting H100 by product, with its own extended resource: the observer (the
    // shipped RBAC lists DeviceClasses) writes it into the floor's parameters, outside bronze.
    let h100_class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "h100.example.com"},
        "spec": {"extendedResourceName": "example.com/h100", "selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}});
    let a = kubectl(kc, false, &["create", "-f", "-"], &h100_class.to_string());
    assert!(a.ok, "DeviceClass: {}", a.stderr);
    // What the apiserver stored: an apiserver without DRA extended resources (1.34, `DRAExtendedResource` off)
    // drops `extendedResourceName`, and then no device is ever allocated through `example.com/h100`.
    let stored = kubectl(
        kc,
        false,
        &["get", "deviceclass", "h100.example.com", "-o", "json"],
        "",
    );
    let h100_class: Value = serde_json::from_str(&stored.stdout).expect("the stored DeviceClass");
    let named_resource = h100_class["spec"]["extendedResourceName"].is_string();
    let expected_in_params = if named_resource {
        "example.com/h100"
    } else {
        "deviceclass.resource.kubernetes.io/h100.example.com"
    };
    let outside = || floor_parameter(kc, "tier.bronze.deviceClasses.outside");
    let created = Instant::now();
    assert!(
        eventually(Duration::from_secs(20), |_| outside()
            .contains(expected_in_params)),
        "the observer never wrote the DeviceClass into the parameters: {:?}\n{}",
        outside(),
        observer.process.log_tail(30)
    );
    println!(
        "a new DeviceClass in the floor's parameters after {:?}",
        created.elapsed()
    );

    // 2. Every process of ours gone.
    webhook.process.kill();
    drop(scorer);
    observer.process.kill();
    // What `gpu-admission check` says the floor alone answers (the same rendered CEL, evaluated offline):
    // it must agree with the apiserver on every Pod below.
    let parsed = gpu_admission_policy::parse(&enforce, "policy.yaml").unwrap();
    let offline = gpu_admission_cli::floor::Floor::with_device_classes(
        &parsed,
        &[serde_json::from_value(h100_class.clone()).unwrap()],
    )
    .unwrap();
    let view = gpu_admission_cli::engine::snapshot_of(parsed);
    let request = json!({"operation": "CREATE", "userInfo": {"username": USER, "groups": ["system:authenticated"]}});
    let check_says =
        |object: &Value| offline.pod(&request, object, (BRONZE, Some("bronze")), false, &view);
    let h100 = json!({"nodeSelector": {CLASS: "H100-80GB"}});
    let mut attempts: Vec<(&str, Value)> = vec![
        (
            "GPU Pod with nodeSelector H100",
            gpu_pod("down-h100", h100.clone()),
        ),
        (
            "GPU Pod without a class",
            gpu_pod("down-no-class", json!({})),
        ),
        (
            "required node affinity: an L4 term OR an H100 term",
            gpu_pod(
                "down-affinity",
                required_affinity(&[&["L4-24GB"], &["H100-80GB"]]),
            ),
        ),
        (
            "GPU only in an init container",
            pod("down-init", "nvidia.com/gpu", "initContainers", json!({})),
        ),
        (
            "GPU only in a native sidecar",
            pod("down-sidecar", "nvidia.com/gpu", "sidecar", json!({})),
        ),
        (
            "MIG slice nvidia.com/mig-1g.10gb",
            pod(
                "down-mig",
                "nvidia.com/mig-1g.10gb",
                "containers",
                json!({}),
            ),
        ),
        (
            "DRA claim, no class",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "down-dra"},
                "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
                    "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-h100"}]}}),
        ),
        (
            "admin DeviceClass's extendedResourceName example.com/h100, pinned to L4",
            pod(
                "down-ext-h100",
                "example.com/h100",
                "containers",
                json!({"nodeSelector": {CLASS: "L4-24GB"}}),
            ),
        ),
        (
            "deviceclass.resource.kubernetes.io/h100.example.com, pinned to L4",
            pod(
                "down-class-h100",
                "deviceclass.resource.kubernetes.io/h100.example.com",
                "containers",
                json!({"nodeSelector": {CLASS: "L4-24GB"}}),
            ),
        ),
        (
            "CPU-only Pod at gpu-ultra",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "down-cpu-ultra"},
                "spec": {"priorityClassName": "gpu-ultra",
                    "containers": [{"name": "main", "image": "registry.example/web:1"}]}}),
        ),
    ];
    if !named_resource {
        // No extended resource is backed by the class here: the Pod asking for it is admitted and can never
        // be scheduled (no Node has `example.com/h100`), so it holds no H100.
        let (case, object) = attempts
            .iter()
            .position(|(case, _)| case.contains("extendedResourceName"))
            .map(|i| attempts.remove(i))
            .expect("the extendedResourceName case");
        let a = create(BRONZE, &object);
        std::thread::sleep(Duration::from_secs(5));
        let bound = kubectl(
            kc,
            false,
            &[
                "-n",
                BRONZE,
                "get",
                "pod",
                "down-ext-h100",
                "-o",
                "jsonpath={.spec.nodeName}",
            ],
            "",
        );
        table.check(
            &format!("all down, extendedResourceName not served: bronze {case}"),
            format!("{}; bound to {:?} after 5 s", a.summary(), bound.stdout),
            a.ok && bound.ok && bound.stdout.is_empty(),
        );
    }
    for (case, object) in &attempts {
        let a = create(BRONZE, object);
        let named = !case.starts_with("CPU") && a.stderr.contains("L4-24GB");
        let offline = check_says(object);
        let ok = a.floor_denied() && (named || case.starts_with("CPU")) && offline.denies();
        table.check(
            &format!("all down: bronze {case}"),
            format!(
                "{} (gpu-admission check: floor {})",
                a.summary(),
                offline.describe()
            ),
            ok,
        );
    }
    // Workloads' Pod templates: what /validate-pod denies of a template, the floor denies alone.
    let says_for_workload =
        |object: &Value| offline.workload(&request, object, (BRONZE, Some("bronze")), false);
    let templates: Vec<(&str, Value, bool)> = vec![
        (
            "GPU Deployment pinning H100",
            workload("Deployment", "down-h100", true, h100.clone()),
            false,
        ),
        (
            "GPU Job pinning H100 by required node affinity",
            workload(
                "Job",
                "down-h100",
                true,
                required_affinity(&[&["L4-24GB", "H100-80GB"]]),
            ),
            false,
        ),
        (
            "CPU-only Deployment at gpu-ultra",
            workload(
                "Deployment",
                "down-ultra",
                false,
                json!({"priorityClassName": "gpu-ultra"}),
            ),
            false,
        ),
        (
            "GPU Job stating L4",
            workload(
                "Job",
                "down-l4",
                true,
                json!({"nodeSelector": {CLASS: "L4-24GB"}}),
            ),
            true,
        ),
        (
            "GPU Deployment without a class (its Pods meet the Pod floor)",
            workload("Deployment", "down-no-class", true, json!({})),
            true,
        ),
    ];
    for (case, object, admitted) in &templates {
        let a = create(BRONZE, object);
        let offline = says_for_workload(object);
        let ok = if *admitted {
            a.ok && !offline.denies()
        } else {
            a.floor_denied()
                && a.stderr.contains("gpu-admission-floor-workloads")
                && offline.denies()
        };
        table.check(
            &format!("all down: bronze {case}"),
            format!(
                "{} (gpu-admission check: floor {})",
                a.summary(),
                offline.describe()
            ),
            ok,
        );
    }
    let a = kubectl(
        kc,
        true,
        &["create", "-f", "-", "-o", "name"],
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "alice-gold",
            "labels": {"tenant.kubenexus.io/tier": "gold"}}})
        .to_string(),
    );
    table.check(
        "all down: namespace created with tier gold",
        a.summary(),
        a.floor_denied(),
    );
    let a = kubectl(
        kc,
        true,
        &[
            "label",
            "namespace",
            BRONZE,
            "tenant.kubenexus.io/tier=gold",
            "--overwrite",
        ],
        "",
    );
    table.check(
        "all down: bronze namespace relabelled gold",
        a.summary(),
        a.floor_denied(),
    );
    // Through the subresources that persist a Namespace's labels too.
    let patch = json!({"metadata": {"labels": {"tenant.kubenexus.io/tier": "gold"}}}).to_string();
    let a = kubectl(
        kc,
        true,
        &[
            "patch",
            "namespace",
            BRONZE,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
        "",
    );
    table.check(
        "all down: bronze namespace relabelled gold through namespaces/status",
        a.summary(),
        a.floor_denied(),
    );
    let got = kubectl(kc, false, &["get", "namespace", BRONZE, "-o", "json"], "");
    let mut object: Value = serde_json::from_str(&got.stdout).expect("the bronze namespace");
    object["metadata"]["labels"]["tenant.kubenexus.io/tier"] = json!("gold");
    let a = kubectl(
        kc,
        true,
        &[
            "replace",
            "--raw",
            &format!("/api/v1/namespaces/{BRONZE}/finalize"),
            "-f",
            "-",
        ],
        &object.to_string(),
    );
    table.check(
        "all down: bronze namespace relabelled gold through namespaces/finalize",
        a.summary(),
        a.floor_denied(),
    );
    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "down-cpu"},
        "spec": {"containers": [{"name": "main", "image": "registry.example/web:1"}]}});
    let a = create(BRONZE, &cpu);
    table.check(
        "all down: CPU-only Pod",
        a.summary(),
        a.ok && !check_says(&cpu).denies(),
    );
    let l4 = gpu_pod("down-l4", json!({"nodeSelector": {CLASS: "L4-24GB"}}));
    let offline_l4 = check_says(&l4);
    let a = create(BRONZE, &l4);
    let runs = a.ok
        && wait_for("the L4 Pod running", Duration::from_secs(60), || async {
            let p = Api::<Pod>::namespaced(client.clone(), BRONZE)
                .get("down-l4")
                .await?;
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            Ok(phase(&p) == "Running" && node.as_deref() == Some("floor-l4"))
        })
        .await
        .is_ok();
    table.check(
        "all down: bronze GPU Pod stating L4 runs on the L4 Node",
        format!(
            "{} (gpu-admission check: floor {})",
            a.summary(),
            offline_l4.describe()
        ),
        runs && offline_l4 == gpu_admission_cli::floor::FloorAnswer::Allowed,
    );

    // 3. A frontend again: normal decisions within 10 s of its start.
    let restarted = Instant::now();
    let webhook2 = Webhook::builder("http://127.0.0.1:9")
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook restarts");
    cluster
        .register_shipped_pod_webhooks(&webhook2, REGISTRATION)
        .await
        .unwrap();
    let restored = eventually(Duration::from_secs(10), |i| {
        let name = format!("again-no-class-{i}");
        create(BRONZE, &gpu_pod(&name, json!({}))).ok
            && stored_class(kc, &name).as_deref() == Some("L4-24GB")
    });
    table.check(
        "frontend started again: bronze GPU Pod without a class placed on L4",
        format!("after {:?}", restarted.elapsed()),
        restored,
    );
    drop(webhook);
    table.finish(&format!("frontend log:\n{}", webhook2.process.log_tail(30)));
}

/// The percentile `p` (0..100) of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The apiserver's admission cost of the floor (docs/measurements/2026-11-26-floor-admission-cost.md),
/// by hand: `cargo test -p gpu-admission-tests --test cluster_floor -- --ignored --nocapture`.
/// One control plane (etcd + apiserver), the floor as shipped with its parameters in Enforce, no webhook;
/// 2 × N Pod CREATEs (a GPU Pod stating L4 at `gpu-default`: every validation of the Pod policy evaluated in
/// full) by one client, alternating a bronze namespace the floor binds and `kube-public`, which its bindings
/// leave out; per-request latency p50/p99 of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn admission_cost_of_the_floor() {
    const N: usize = 1000;
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    let a = kubectl(
        kc,
        false,
        &[
            "apply",
            "-f",
            &repo_path("deploy/kustomize/base/floor.yaml"),
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    let a = kubectl(
        kc,
        false,
        &[
            "apply",
            "-f",
            &repo_path("deploy/kustomize/base/priorityclasses.yaml"),
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    floor_params_enforce(kc);
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    let mut template = gpu_pod(
        "x",
        json!({"nodeSelector": {CLASS: "L4-24GB"}, "priorityClassName": "gpu-default"}),
    );
    template["metadata"] = json!({"generateName": "cost-"});
    let pod: Pod = serde_json::from_value(template).unwrap();
    let floor = Api::<Pod>::namespaced(client.clone(), BRONZE);
    let outside = Api::<Pod>::namespaced(client.clone(), "kube-public");
    // The floor denies in the bronze namespace what it should (its parameters are read), then warm up.
    let denied = gpu_pod("denied", json!({"nodeSelector": {CLASS: "H100-80GB"}}));
    let as_alice = kubectl(
        kc,
        true,
        &["-n", BRONZE, "create", "-f", "-"],
        &denied.to_string(),
    );
    assert!(
        !as_alice.ok || as_alice.stderr.contains("forbidden"),
        "{}",
        as_alice.stdout
    );
    for _ in 0..50 {
        floor.create(&PostParams::default(), &pod).await.unwrap();
        outside.create(&PostParams::default(), &pod).await.unwrap();
    }
    let (mut with, mut without) = (Vec::with_capacity(N), Vec::with_capacity(N));
    for i in 0..2 * N {
        let (api, into) = if i % 2 == 0 {
            (&floor, &mut with)
        } else {
            (&outside, &mut without)
        };
        let t = Instant::now();
        api.create(&PostParams::default(), &pod).await.unwrap();
        into.push(t.elapsed());
    }
    with.sort();
    without.sort();
    for (name, d) in [
        ("with the floor", &with),
        ("without (kube-public)", &without),
    ] {
        println!(
            "{name}: {N} Pod CREATEs, p50 {:?}, p99 {:?}, mean {:?}",
            percentile(d, 50.0),
            percentile(d, 99.0),
            d.iter().sum::<Duration>() / N as u32
        );
    }
}

/// Applies `files` (paths from the repository root) as the admin.
fn apply(kc: &Path, files: &[&str]) {
    for file in files {
        let a = kubectl(kc, false, &["apply", "-f", &repo_path(file)], "");
        assert!(a.ok, "{file}: {}", a.stderr);
    }
}

/// The floor's bindings deleted and created again (a reinstall) while the policy went from Warn to Enforce:
/// the floor acts on the parameters the observer wrote meanwhile. With a ConfigMap as the parameter kind the
/// apiserver stopped watching it once no binding named it (kubernetes/kubernetes#130887) and kept denying
/// nothing here, the parameters frozen in Warn. The CPU-only Pod at gpu-ultra is one only the floor denies (no
/// webhook is registered yet).
fn bindings_gone_and_back_read_the_parameters_of_now(
    kc: &Path,
    enforce: &str,
    observer: &Observer,
) {
    let set_policy = |text: &str| {
        let patch = json!({"data": {"default-policy.yaml": text}});
        let a = kubectl(
            kc,
            false,
            &[
                "-n",
                "gpu-admission",
                "patch",
                "configmap",
                "gpu-admission-policy",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            "",
        );
        assert!(a.ok, "the policy ConfigMap: {}", a.stderr);
    };
    let mode_is = |mode: &str| {
        eventually(Duration::from_secs(30), |_| {
            floor_parameter(kc, "mode") == mode
        })
    };
    set_policy(&enforce.replace("  mode: Enforce", "  mode: Warn"));
    assert!(mode_is("Warn"), "{}", observer.process.log_tail(30));
    let bindings = [
        "delete",
        "validatingadmissionpolicybinding",
        "-l",
        "app.kubernetes.io/component=floor",
    ];
    let a = kubectl(kc, false, &bindings, "");
    assert!(a.ok, "{}", a.stderr);
    // Longer than the apiserver's policy refresh (1 s): it sees no binding.
    std::thread::sleep(Duration::from_secs(3));
    set_policy(enforce);
    assert!(mode_is("Enforce"), "{}", observer.process.log_tail(30));
    let a = kubectl(
        kc,
        false,
        &[
            "apply",
            "-f",
            &repo_path("deploy/kustomize/base/floor.yaml"),
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    let capped = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rebound-cpu-ultra"},
        "spec": {"priorityClassName": "gpu-ultra",
            "containers": [{"name": "main", "image": "registry.example/web:1"}]}});
    let mut last = None;
    let denied = eventually(Duration::from_secs(30), |_| {
        let a = kubectl(
            kc,
            true,
            &["-n", BRONZE, "create", "--dry-run=server", "-f", "-"],
            &capped.to_string(),
        );
        let denied = a.floor_denied();
        last = Some(a);
        denied
    });
    assert!(
        denied,
        "the floor's bindings created again did not act on the parameters written while they were gone: {}",
        last.unwrap().summary()
    );
    println!("floor bindings deleted and created again: the parameters of now are in force");
}

/// Puts the API floor's parameters in Enforce, as the observer does for a policy in Enforce.
fn floor_params_enforce(kc: &Path) {
    gpu_admission_tests::cluster::apply_floor_parameters_in_enforce(kc).unwrap();
}

/// The stored Pod, as JSON (`Null` when absent).
fn stored(kc: &Path, name: &str) -> Value {
    let a = kubectl(
        kc,
        false,
        &["-n", BRONZE, "get", "pod", name, "-o", "json"],
        "",
    );
    serde_json::from_str(&a.stdout).unwrap_or(Value::Null)
}

/// Waits until the Pod is bound to `node` and Running (kwok), or 60 s.
async fn runs_on(client: &kube::Client, name: &str, node: &str) -> bool {
    wait_for(
        &format!("{name} running on {node}"),
        Duration::from_secs(60),
        || async {
            let p = Api::<Pod>::namespaced(client.clone(), BRONZE)
                .get(name)
                .await?;
            let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
            Ok(phase(&p) == "Running" && bound.as_deref() == Some(node))
        },
    )
    .await
    .is_ok()
}

/// A cluster with the scheduler, the controllers and kwok's one L4 Node, the tenant bound, the bronze
/// namespace, the shipped PriorityClasses and the API floor in Enforce (parameters patched, no observer).
async fn bronze_cluster(cluster: &LocalCluster, policy_file: &Path) -> Scorer {
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    apply(
        cluster.kubeconfig(),
        &[
            "deploy/kustomize/base/floor.yaml",
            "deploy/kustomize/base/priorityclasses.yaml",
        ],
    );
    floor_params_enforce(cluster.kubeconfig());
    cluster.bind_tenant(USER).await.unwrap();
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    let scorer = Scorer::builder()
        .policy(policy_file)
        .start()
        .await
        .expect("scorer");
    let l4 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .expect("L4 in the catalog")
        .clone();
    kwok::create_ready_nodes(
        &cluster.client(),
        &[kwok::gpu_node("floor-l4", &l4, "nvidia.com/gpu", 8)],
    )
    .await
    .expect("the L4 Node");
    scorer
}

/// The placing floor (`deploy/kustomize/components/placing-floor`, a MutatingAdmissionPolicy) beside the
/// floor as shipped, in Enforce, with the real scheduler and kwok's one L4 Node. Where the apiserver serves
/// MutatingAdmissionPolicy v1 (1.36+):
///
/// 0. once the apiserver has loaded it, with nothing of ours running yet, a bronze GPU Pod without a class is
///    placed (marked `gpu-admission.io/floor-placed`);
/// 1. frontend up: a bronze GPU Pod without a class is placed by the floor (mutating admission policies run
///    before mutating webhooks) and decided by `/mutate-pod` on top of it (its decision record), and runs on
///    the L4 Node;
/// 2. frontend and scorer killed (no observer runs: the parameters were patched): a bronze GPU Pod without a
///    class is admitted, marked `gpu-admission.io/floor-placed: bronze`, and runs on the L4 Node; one naming
///    gpu-ultra is admitted at bronze's cap gpu-default; one pinned to H100 is still denied by the
///    validating floor, naming L4.
///
/// On 1.34–1.35 (no MutatingAdmissionPolicy v1) the component is not applied and the classless bronze GPU
/// Pod is denied by the validating floor with a message naming L4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_placing_floor_places_a_classless_gpu_pod_while_no_gpu_admission_process_runs() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let dir = tempfile::tempdir().unwrap();
    let enforce = repo_file("deploy/kustomize/base/policy/default-policy.yaml")
        .replace("  mode: Warn", "  mode: Enforce");
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, &enforce).unwrap();
    let scorer = bronze_cluster(&cluster, &policy_file).await;
    // MutatingAdmissionPolicy is served as admissionregistration.k8s.io/v1 from 1.36.
    let v1 = kubectl(
        kc,
        false,
        &["get", "--raw", "/apis/admissionregistration.k8s.io/v1"],
        "",
    );
    assert!(v1.ok, "{}", v1.stderr);
    let placing = v1.stdout.contains("\"mutatingadmissionpolicies\"");
    let mut table = CaseTable::start();
    let create = |object: &Value| {
        kubectl(
            kc,
            true,
            &["-n", BRONZE, "create", "-f", "-", "-o", "name"],
            &object.to_string(),
        )
    };
    if !placing {
        let a = create(&gpu_pod("old-no-class", json!({})));
        table.check(
            "no MutatingAdmissionPolicy v1: bronze GPU Pod without a class",
            a.summary(),
            a.floor_denied() && a.stderr.contains("L4-24GB"),
        );
        table.finish("");
        return;
    }
    apply(
        kc,
        &["deploy/kustomize/components/placing-floor/placing-floor.yaml"],
    );
    // The apiserver loads a new policy within seconds: until then the validating floor denies.
    let in_force = eventually(Duration::from_secs(30), |i| {
        let name = format!("probe-{i}");
        create(&gpu_pod(&name, json!({}))).ok
            && stored(kc, &name)["metadata"]["annotations"]["gpu-admission.io/floor-placed"]
                == "bronze"
    });
    assert!(in_force, "the placing floor never placed a Pod");

    // 1. Frontend up: the floor places first (mutating admission policies run before mutating webhooks),
    //    the mutation decides on top of it.
    let mut webhook = Webhook::builder(&scorer.url())
        .kubeconfig(kc)
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook");
    cluster
        .register_shipped_pod_webhooks(&webhook, REGISTRATION)
        .await
        .unwrap();
    let mut last = None;
    let decided = eventually(Duration::from_secs(30), |i| {
        let name = format!("up-no-class-{i}");
        let a = create(&gpu_pod(&name, json!({})));
        let annotations = &stored(kc, &name)["metadata"]["annotations"];
        let ok = a.ok
            && annotations["gpu-admission.io/decided-at"].is_string()
            && annotations["gpu-admission.io/floor-placed"] == "bronze";
        last = Some((name, a));
        ok
    });
    let (name, a) = last.unwrap();
    let runs = decided && runs_on(&client, &name, "floor-l4").await;
    let pod = stored(kc, &name);
    table.check(
        "frontend up: bronze GPU Pod without a class",
        format!(
            "{} annotations {} affinity {}",
            a.summary(),
            pod["metadata"]["annotations"],
            pod["spec"]["affinity"]
        ),
        runs,
    );

    // 2. Every process of ours gone.
    webhook.process.kill();
    drop(scorer);
    let a = create(&gpu_pod("down-no-class", json!({})));
    let pod = stored(kc, "down-no-class");
    let placed = pod["metadata"]["annotations"]["gpu-admission.io/floor-placed"] == "bronze"
        && pod["metadata"]["annotations"]["gpu-admission.io/decided-at"].is_null();
    let runs = a.ok && placed && runs_on(&client, "down-no-class", "floor-l4").await;
    table.check(
        "all down: bronze GPU Pod without a class",
        format!(
            "{} annotations {} affinity {}",
            a.summary(),
            pod["metadata"]["annotations"],
            pod["spec"]["affinity"]
        ),
        runs,
    );
    let a = create(&gpu_pod(
        "down-ultra",
        json!({"priorityClassName": "gpu-ultra"}),
    ));
    let pod = stored(kc, "down-ultra");
    table.check(
        "all down: bronze GPU Pod at gpu-ultra",
        format!(
            "{} priority {} {} {}",
            a.summary(),
            pod["spec"]["priorityClassName"],
            pod["spec"]["priority"],
            pod["spec"]["preemptionPolicy"]
        ),
        a.ok && pod["spec"]["priorityClassName"] == "gpu-default"
            && pod["spec"]["priority"] == 1000
            && pod["spec"]["preemptionPolicy"] == "Never",
    );
    let a = create(&gpu_pod(
        "down-h100",
        json!({"nodeSelector": {CLASS: "H100-80GB"}}),
    ));
    table.check(
        "all down: bronze GPU Pod pinned to H100",
        a.summary(),
        a.floor_denied() && a.stderr.contains("L4-24GB"),
    );
    table.finish(&format!("frontend log:\n{}", webhook.process.log_tail(30)));
}

/// The floor as manifest-based admission files (`gpu-admission floor render --static DIR` of the default
/// policy in Enforce) loaded by the apiserver at its start (1.37: beta, on by default), with the real
/// scheduler and kwok's one L4 Node: the API floor's objects (policies, bindings, parameters) applied and
/// deleted again; the static policies cannot be deleted through the API; and the floor still holds: a bronze
/// GPU Pod pinned to H100 is denied (naming L4), one without a class is placed by the static placing floor and
/// runs on the L4 Node. Skipped below 1.37 (manifest-based admission is alpha in 1.36, absent before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_based_floor_holds_and_cannot_be_deleted_through_the_api() {
    let version = std::env::var("GPU_ADMISSION_K8S_VERSION").unwrap_or_default();
    if ["1.34", "1.35", "1.36"]
        .iter()
        .any(|v| version.starts_with(v))
    {
        eprintln!(
            "SKIP manifest-based floor: Kubernetes {version} has no beta manifest-based admission"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let enforce = repo_file("deploy/kustomize/base/policy/default-policy.yaml")
        .replace("  mode: Warn", "  mode: Enforce");
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, &enforce).unwrap();
    let parsed = gpu_admission_policy::parse(&enforce, "policy.yaml").unwrap();
    let static_dir = dir.path().join("static");
    let said = gpu_admission_cli::floor::write_manifest_based(&parsed, &static_dir).unwrap();
    println!("{said}");
    let Some(cluster) = LocalCluster::start_with_static_policies(Components::ALL, &static_dir)
        .await
        .expect("the local control plane starts with the static floor")
    else {
        return;
    };
    let client = cluster.client();
    let kc = cluster.kubeconfig();
    let scorer = bronze_cluster(&cluster, &policy_file).await;
    drop(scorer);
    let mut table = CaseTable::start();
    let a = kubectl(
        kc,
        false,
        &[
            "delete",
            "-f",
            &repo_path("deploy/kustomize/base/floor.yaml"),
        ],
        "",
    );
    table.check("the API floor's objects deleted", a.summary(), a.ok);
    for (kind, name) in [
        (
            "validatingadmissionpolicy",
            "gpu-admission-floor-pods.static.k8s.io",
        ),
        (
            "validatingadmissionpolicybinding",
            "gpu-admission-floor-pods.static.k8s.io",
        ),
        (
            "mutatingadmissionpolicy",
            "gpu-admission-floor-placing.static.k8s.io",
        ),
    ] {
        let a = kubectl(kc, false, &["delete", kind, name], "");
        table.check(&format!("admin deletes {kind} {name}"), a.summary(), !a.ok);
    }
    let create = |object: &Value| {
        kubectl(
            kc,
            true,
            &["-n", BRONZE, "create", "-f", "-", "-o", "name"],
            &object.to_string(),
        )
    };
    // The apiserver drops the deleted API floor within seconds; until then its binding, whose parameters are
    // gone, denies every GPU Pod.
    let mut last = None;
    let placed = eventually(Duration::from_secs(30), |i| {
        let name = format!("static-no-class-{i}");
        let a = create(&gpu_pod(&name, json!({})));
        let ok = a.ok
            && stored(kc, &name)["metadata"]["annotations"]["gpu-admission.io/floor-placed"]
                == "bronze";
        last = Some((name, a));
        ok
    });
    let (name, a) = last.unwrap();
    let pod = stored(kc, &name);
    let runs = placed && runs_on(&client, &name, "floor-l4").await;
    table.check(
        "static floor only: bronze GPU Pod without a class",
        format!("{} affinity {}", a.summary(), pod["spec"]["affinity"]),
        runs,
    );
    // The API floor gone (above), what the floor answers is the static one's.
    let a = create(&gpu_pod(
        "static-h100",
        json!({"nodeSelector": {CLASS: "H100-80GB"}}),
    ));
    table.check(
        "static floor only: bronze GPU Pod pinned to H100",
        a.summary(),
        !a.ok
            && a.stderr.contains("gpu-admission-floor-pods.static.k8s.io")
            && a.stderr.contains("L4-24GB"),
    );
    table.finish(&cluster.apiserver_log_tail(20));
}

/// The apiserver's admission cost of the placing floor
/// (docs/measurements/2026-11-29-placing-floor.md), by hand:
/// `cargo test -p gpu-admission-tests --test cluster_floor admission_cost_of_the_placing -- --ignored --nocapture`.
/// One control plane (etcd + apiserver), the floor and the placing floor as shipped, parameters in Enforce,
/// no webhook; one client impersonating the tenant (not exempt: the placing floor's every variable is
/// evaluated), 3 × N Pod CREATEs alternated: a bronze GPU Pod without a class (placed by the placing floor,
/// then admitted by the floor), a bronze GPU Pod stating L4 (both floors evaluated, nothing to place), and the
/// same Pod in `kube-public`, which neither binds; per-request latency p50/p99 of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, run by hand"]
async fn admission_cost_of_the_placing_floor() {
    const N: usize = 1000;
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the control plane starts")
    else {
        return;
    };
    let kc = cluster.kubeconfig();
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    apply(
        kc,
        &[
            "deploy/kustomize/base/floor.yaml",
            "deploy/kustomize/base/priorityclasses.yaml",
            "deploy/kustomize/components/placing-floor/placing-floor.yaml",
        ],
    );
    floor_params_enforce(kc);
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    cluster.bind_tenant(USER).await.unwrap();
    let a = kubectl(
        kc,
        false,
        &[
            "create",
            "rolebinding",
            "cost-public",
            "-n",
            "kube-public",
            "--clusterrole=edit",
            &format!("--user={USER}"),
        ],
        "",
    );
    assert!(a.ok, "{}", a.stderr);
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kc).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info.impersonate = Some(USER.into());
    let client = kube::Client::try_from(config).unwrap();
    let pod_of = |extra: Value| -> Pod {
        let mut p = gpu_pod("x", extra);
        p["metadata"] = json!({"generateName": "cost-"});
        serde_json::from_value(p).unwrap()
    };
    let classless = pod_of(json!({}));
    let l4 = pod_of(json!({"nodeSelector": {CLASS: "L4-24GB"}}));
    let bronze = Api::<Pod>::namespaced(client.clone(), BRONZE);
    let public = Api::<Pod>::namespaced(client.clone(), "kube-public");
    // The placing floor places (once the apiserver has loaded it; its parameters are read), then warm up.
    let mut placed = false;
    for _ in 0..100 {
        let pod = bronze.create(&PostParams::default(), &classless).await;
        let annotations = pod.ok().and_then(|p| p.metadata.annotations);
        if annotations.is_some_and(|a| {
            a.get("gpu-admission.io/floor-placed")
                .is_some_and(|t| t == "bronze")
        }) {
            placed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(placed, "the placing floor never placed a Pod");
    for _ in 0..50 {
        bronze
            .create(&PostParams::default(), &classless)
            .await
            .unwrap();
        public.create(&PostParams::default(), &l4).await.unwrap();
    }
    let mut runs: [(&str, Vec<Duration>); 3] = [
        (
            "bronze, no class: placed by the placing floor",
            Vec::with_capacity(N),
        ),
        (
            "bronze, stating L4: both floors, nothing to place",
            Vec::with_capacity(N),
        ),
        ("kube-public: no floor", Vec::with_capacity(N)),
    ];
    for i in 0..3 * N {
        let (api, pod) = match i % 3 {
            0 => (&bronze, &classless),
            1 => (&bronze, &l4),
            _ => (&public, &l4),
        };
        let t = Instant::now();
        api.create(&PostParams::default(), pod).await.unwrap();
        runs[i % 3].1.push(t.elapsed());
    }
    for (name, d) in &mut runs {
        d.sort();
        println!(
            "{name}: {N} Pod CREATEs, p50 {:?}, p99 {:?}, mean {:?}",
            percentile(d, 50.0),
            percentile(d, 99.0),
            d.iter().sum::<Duration>() / N as u32
        );
    }
}
