//! The rendered install, applied unchanged for real to a local kube-apiserver (1.37.2 by default, see
//! tests/README.md) + etcd + kube-controller-manager (no scheduler, no kubelet: the Deployments' Pods are
//! created, judged by Pod Security admission, and never run; admission runs for real, the webhooks'
//! matchConditions compiled and evaluated by the apiserver).
//!
//! cert-manager's CRDs are stood in by schema-less CRDs of the same names (cert-manager itself is not
//! installed here).
//!
//! Checks: every object of the default install, then of the automatic and external overlays, then of a
//! team's `overlays/namespaced` (into its namespace, its Deployments' Pods created, its ServiceAccount's
//! RBAC: its Lease only), is accepted and stored; the stored objects keep the hardening fields; the webhook's ServiceAccount
//! can do exactly what RBAC should allow (`kubectl auth can-i` as that account); with the webhook not
//! running, a GPU Pod in a tier-labelled namespace is still created unchanged (failurePolicy Ignore)
//! and the apiserver did try the webhook for it and for a Pod in an unlabelled namespace, but not for one in
//! kube-system or our own; the
//! external CA bundle is stored byte for byte; `kubectl delete` removes the cluster-scoped objects.
//!
//! Needs kubectl and `tests/cluster/start.sh RUN_DIR` (writes RUN_DIR/kubeconfig; builds or finds the
//! control plane via build.sh). Missing: a failure under CI, SKIP otherwise.
//! `GPU_ADMISSION_START_APISERVER` may name another start script with the same interface.

#[path = "deploy_support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use gpu_admission_tests::ports::ClaimedPorts;
use serde_json::{Value, json};
use support::{NAMESPACE, Rendered, arr_at, run, str_at};

const WEBHOOK_SA: &str = "system:serviceaccount:gpu-admission:gpu-admission-webhook";
const WEBHOOK_NAME: &str = "pods.gpu-admission.io";

/// A kube-apiserver started by the project's script, stopped (by the pids it wrote) on drop.
struct Apiserver {
    dir: tempfile::TempDir,
    _claimed: ClaimedPorts,
}

impl Apiserver {
    fn start() -> Option<Self> {
        let script = std::env::var_os("GPU_ADMISSION_START_APISERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| support::repo_root().join("tests/cluster/start.sh"));
        if !script.is_file() {
            gpu_admission_tests::skip::skip(
                "the install on a real apiserver",
                &format!("{} is missing", script.display()),
            );
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("deploy-apiserver-")
            .tempdir()
            .unwrap();
        let claimed = ClaimedPorts::claim(7).unwrap();
        let ports: Vec<String> = claimed.ports().iter().map(u16::to_string).collect();
        let server = Apiserver {
            dir,
            _claimed: claimed,
        };
        let t = Instant::now();
        // The controllers, so that the Deployments make their Pods (Pod Security admission judges them).
        let out = Command::new("bash")
            .arg(&script)
            .arg(server.dir.path())
            .arg("controller-manager")
            .env("GPU_ADMISSION_CLUSTER_PORTS", ports.join(" "))
            .output()
            .unwrap();
        println!("apiserver started in {:?}", t.elapsed());
        assert!(
            out.status.success(),
            "{} failed:\n{}\n{}\napiserver log: {}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            server.log()
        );
        assert!(
            server.kubeconfig().is_file(),
            "start script wrote no kubeconfig"
        );
        Some(server)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("apiserver.log")).unwrap_or_default()
    }

    fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(self.kubeconfig())
            .arg("--request-timeout=30s");
        c
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let t = Instant::now();
        let out = run(self.kubectl().args(args)).unwrap_or_else(|e| panic!("{e}"));
        if t.elapsed() > Duration::from_secs(5) {
            eprintln!("slow ({:?}): kubectl {args:?}", t.elapsed());
        }
        out
    }

    fn get_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&a)).unwrap()
    }

    /// `kubectl apply --server-side` of a list of objects, for real.
    fn apply(&self, objects: &[Value], file: &Path) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        std::fs::write(file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
        let f = file.to_str().unwrap();
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--field-manager=deploy-test",
            "-f",
            f,
        ]);
    }

    /// `kubectl auth can-i VERB RESOURCE [-n NS]` as the webhook's ServiceAccount.
    fn can_i(&self, verb: &str, resource: &str, ns: Option<&str>) -> bool {
        self.can_i_as(WEBHOOK_SA, verb, resource, ns)
    }

    /// `kubectl auth can-i VERB RESOURCE [-n NS]` as `user`.
    fn can_i_as(&self, user: &str, verb: &str, resource: &str, ns: Option<&str>) -> bool {
        let mut c = self.kubectl();
        c.args(["auth", "can-i", verb, resource, "--as", user]);
        if let Some(ns) = ns {
            c.args(["-n", ns]);
        }
        let t = Instant::now();
        let out = c.output().unwrap();
        if t.elapsed() > Duration::from_secs(5) {
            eprintln!("slow ({:?}): can-i {verb} {resource}", t.elapsed());
        }
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            answer == "yes" || answer == "no",
            "can-i {verb} {resource}: {answer:?} {out:?}"
        );
        answer == "yes"
    }

    /// How many times the apiserver logged a failed call of our webhook (failing open).
    fn failed_webhook_calls(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains("failing open") && l.contains(WEBHOOK_NAME))
            .count()
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let stop = support::repo_root().join("tests/cluster/stop.sh");
        if stop.is_file() {
            let _ = Command::new("bash").arg(stop).arg(self.dir.path()).status();
        }
        for name in ["apiserver.pid", "etcd.pid"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.path().join(name)) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
}

/// Schema-less CRDs named like cert-manager's Issuer and Certificate, so their objects can be stored.
fn cert_manager_stand_in_crds() -> Vec<Value> {
    [("Issuer", "issuers"), ("Certificate", "certificates")]
        .into_iter()
        .map(|(kind, plural)| {
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.cert-manager.io")},
                "spec": {
                    "group": "cert-manager.io",
                    "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                              "listKind": format!("{kind}List")},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]
                }
            })
        })
        .collect()
}

/// Every rendered object is stored in the apiserver.
fn assert_all_stored(api: &Apiserver, m: &Rendered) {
    for o in &m.objects {
        let kind = str_at(o, "/kind");
        let group = str_at(o, "/apiVersion")
            .split_once('/')
            .map(|(g, _)| g)
            .unwrap_or("");
        let resource = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let name = str_at(o, "/metadata/name");
        let mut args = vec!["get", resource.as_str(), name, "-o", "name"];
        let ns = str_at(o, "/metadata/namespace");
        if !ns.is_empty() {
            args.extend_from_slice(&["-n", ns]);
        }
        api.kubectl_ok(&args);
    }
}

/// A GPU Pod that the `restricted` Pod Security Standard admits (the install's namespace enforces it).
fn gpu_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "train", "image": "registry.invalid/train:1",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
}

#[test]
fn rendered_install_applies_unchanged_to_a_real_kube_apiserver() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    let Some(api) = Apiserver::start() else {
        return;
    };
    let version = api.kubectl_ok(&["version", "-o", "json"]);
    let version: Value = serde_json::from_str(&version).unwrap();
    println!(
        "kube-apiserver {}",
        str_at(&version, "/serverVersion/gitVersion")
    );
    let mode = |name: &str| modes.iter().find(|m| m.mode == name).unwrap();
    let work = tempfile::tempdir().unwrap();

    api.apply(
        &cert_manager_stand_in_crds(),
        &work.path().join("crds.json"),
    );
    for crd in ["issuers.cert-manager.io", "certificates.cert-manager.io"] {
        let crd = format!("crd/{crd}");
        api.kubectl_ok(&["wait", "--for=condition=Established", "--timeout=60s", &crd]);
    }
    // The optional checkpoint-restore component's CRD (apiextensions v1), as shipped: `kubectl auth can-i`
    // below can only resolve checkpointbackups once it is served.
    let checkpoint_crd =
        support::kustomize_dir().join("components/checkpoint-restore/checkpointbackups.yaml");
    let checkpoint_crd =
        support::parse_yaml_stream(&std::fs::read_to_string(checkpoint_crd).unwrap()).unwrap();
    api.apply(&checkpoint_crd, &work.path().join("checkpoint-crd.json"));
    api.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/checkpointbackups.migration.dcnlab.com",
    ]);

    // 1. The default install (cert-manager mode).
    let default = mode("default");
    api.apply(&default.objects, &work.path().join("default.json"));
    assert_all_stored(&api, default);
    println!(
        "default: {} objects applied and stored",
        default.objects.len()
    );
    let t = Instant::now();
    assert_deployments_make_their_pods(&api, NAMESPACE);
    println!(
        "default: every Deployment's Pods admitted under the restricted Pod Security Standard in {:?}",
        t.elapsed()
    );

    let mwc = api.get_json(&["mutatingwebhookconfiguration", "gpu-admission"]);
    let hook = &mwc["webhooks"][0];
    assert_eq!(hook["name"], WEBHOOK_NAME);
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-pod");
    assert_eq!(
        str_at(
            &mwc,
            "/metadata/annotations/cert-manager.io~1inject-ca-from"
        ),
        "gpu-admission/gpu-admission-webhook"
    );
    // The hardening survives storage.
    for d in ["gpu-admission-webhook", "gpu-admission-scorer"] {
        let d = api.get_json(&["deployment", d, "-n", NAMESPACE]);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    }
    let pc = api.get_json(&["priorityclass", "gpu-default"]);
    assert_eq!(pc["preemptionPolicy"], "Never");

    // RBAC as the webhook's ServiceAccount.
    assert!(api.can_i("list", "namespaces", None));
    assert!(api.can_i("watch", "namespaces", None));
    assert!(api.can_i("list", "priorityclasses.scheduling.k8s.io", None));
    assert!(api.can_i("watch", "priorityclasses.scheduling.k8s.io", None));
    assert!(!api.can_i("get", "namespaces", None), "no per-request GETs");
    // Checkpoint restore: CheckpointBackups (list/watch) and Jobs (+ get).
    for verb in ["list", "watch"] {
        assert!(api.can_i(verb, "checkpointbackups.migration.dcnlab.com", None));
    }
    for verb in ["get", "list", "watch"] {
        assert!(api.can_i(verb, "jobs.batch", Some("default")));
    }
    assert!(!api.can_i(
        "update",
        "checkpointbackups.migration.dcnlab.com",
        Some("default")
    ));
    assert!(!api.can_i("create", "jobs.batch", Some("default")));
    // GPU quota usage: Pods are listed and watched, never read one by one or changed.
    for verb in ["list", "watch"] {
        assert!(api.can_i(verb, "pods", Some("default")));
    }
    for verb in ["get", "create", "delete", "patch"] {
        assert!(!api.can_i(verb, "pods", Some("default")), "{verb} pods");
    }
    assert!(!api.can_i("get", "secrets", Some(NAMESPACE)));
    assert!(!api.can_i("create", "secrets", Some(NAMESPACE)));
    assert!(!api.can_i("patch", "mutatingwebhookconfigurations/gpu-admission", None));
    assert!(!api.can_i("create", "pods", Some(NAMESPACE)));

    // Fail-open with the real registration: no webhook Pod runs (no kubelet), the Service has no
    // endpoints, yet a GPU Pod in a tier namespace is created, unchanged. No observer runs either: the
    // floor's parameters are put in place as its leader writes them for the shipped policy (Warn); without
    // them the floor denies the tier label and the GPU Pod.
    let shipped = std::fs::read_to_string(
        support::repo_root().join("deploy/kustomize/base/policy/default-policy.yaml"),
    )
    .unwrap();
    gpu_admission_tests::cluster::apply_floor_parameters(&api.kubeconfig(), &shipped).unwrap();
    api.kubectl_ok(&["create", "namespace", "team-gold"]);
    api.kubectl_ok(&[
        "label",
        "namespace",
        "team-gold",
        "tenant.kubenexus.io/tier=gold",
    ]);
    api.kubectl_ok(&["create", "namespace", "no-tier"]);
    let before = api.failed_webhook_calls();
    let pod_file = work.path().join("pod.json");
    std::fs::write(&pod_file, gpu_pod("train-1").to_string()).unwrap();
    let t = Instant::now();
    api.kubectl_ok(&[
        "create",
        "-n",
        "team-gold",
        "-f",
        pod_file.to_str().unwrap(),
    ]);
    println!(
        "GPU Pod created in a tier namespace with the webhook down in {:?}",
        t.elapsed()
    );
    let stored = api.get_json(&["pod", "train-1", "-n", "team-gold"]);
    assert!(
        stored["metadata"]["annotations"].is_null(),
        "{}",
        stored["metadata"]
    );
    assert!(stored["spec"]["priorityClassName"].is_null());
    // The apiserver logs failed calls asynchronously to the request; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.failed_webhook_calls() == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after_tier = api.failed_webhook_calls();
    assert_eq!(
        after_tier,
        before + 1,
        "the tier namespace's Pod went to our webhook once"
    );
    // A namespace without a tier label is held to the default tier: sent too.
    api.kubectl_ok(&["create", "-n", "no-tier", "-f", pod_file.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.failed_webhook_calls() == after_tier && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after_untiered = api.failed_webhook_calls();
    assert_eq!(
        after_untiered,
        after_tier + 1,
        "the unlabelled namespace's Pod went to our webhook once"
    );
    // The system namespaces and our own: never sent (by name, not by a label).
    api.kubectl_ok(&["create", "-n", NAMESPACE, "-f", pod_file.to_str().unwrap()]);
    api.kubectl_ok(&[
        "create",
        "-n",
        "kube-system",
        "-f",
        pod_file.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        api.failed_webhook_calls(),
        after_untiered,
        "kube-system / own namespace: not sent"
    );

    // 2. The automatic certificate overlay on top: its extra, narrow RBAC.
    let automatic = mode("automatic");
    api.apply(&automatic.objects, &work.path().join("automatic.json"));
    assert_all_stored(&api, automatic);
    println!(
        "automatic: {} objects applied and stored",
        automatic.objects.len()
    );
    let secret = "secrets/gpu-admission-webhook-tls";
    assert!(api.can_i("get", secret, Some(NAMESPACE)));
    assert!(api.can_i("update", secret, Some(NAMESPACE)));
    assert!(api.can_i("create", "secrets", Some(NAMESPACE)));
    assert!(!api.can_i("create", "secrets", Some("default")));
    assert!(!api.can_i("get", "secrets/gpu-admission-ca", Some(NAMESPACE)));
    assert!(!api.can_i("list", "secrets", Some(NAMESPACE)));
    assert!(!api.can_i("delete", secret, Some(NAMESPACE)));
    assert!(api.can_i("get", "mutatingwebhookconfigurations/gpu-admission", None));
    assert!(api.can_i("patch", "mutatingwebhookconfigurations/gpu-admission", None));
    assert!(!api.can_i("patch", "mutatingwebhookconfigurations/someone-else", None));
    // Read-only list/watch of every registration (which namespaces have a restricted instance), never a
    // write beyond its own.
    assert!(api.can_i("list", "mutatingwebhookconfigurations", None));
    assert!(!api.can_i(
        "delete",
        "mutatingwebhookconfigurations/gpu-admission",
        None
    ));
    assert!(!api.can_i("list", "validatingwebhookconfigurations", None));
    let d = api.get_json(&["deployment", "gpu-admission-webhook", "-n", NAMESPACE]);
    let args = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--tls-secret=gpu-admission-webhook-tls"),
        "{args}"
    );

    // 3. The external overlay: the user's CA lands in caBundle byte for byte.
    let external = mode("external");
    api.apply(&external.objects, &work.path().join("external.json"));
    assert_all_stored(&api, external);
    println!(
        "external: {} objects applied and stored",
        external.objects.len()
    );
    let mwc = api.get_json(&["mutatingwebhookconfiguration", "gpu-admission"]);
    let bundle = str_at(&mwc["webhooks"][0], "/clientConfig/caBundle");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .unwrap();
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        support::TEST_EXTERNAL_CA
    );

    // 4. Any other overlay (e.g. observability) applies too.
    let others: Vec<&Rendered> = modes
        .iter()
        .filter(|m| !["default", "automatic", "external"].contains(&m.mode.as_str()))
        .collect();
    for m in &others {
        api.apply(&m.objects, &work.path().join(format!("{}.json", m.mode)));
        assert_all_stored(&api, m);
        println!("{}: {} objects applied and stored", m.mode, m.objects.len());
    }

    // 5. A team's namespace-restricted instance beside it (overlays/namespaced).
    let namespaced = support::rendered_namespaced().expect("kubectl renders");
    team_instance_applies(&api, &namespaced, &work.path().join("namespaced.json"));

    // Uninstall: what `kubectl delete -k` does; cluster-scoped objects go at once, the namespace through
    // the namespace controller.
    let all: Vec<Value> = [default, automatic, external]
        .into_iter()
        .chain(others)
        .chain([&namespaced])
        .flat_map(|m| m.objects.iter().cloned())
        .collect();
    let all_file = work.path().join("all.json");
    std::fs::write(
        &all_file,
        json!({"apiVersion": "v1", "kind": "List", "items": all}).to_string(),
    )
    .unwrap();
    api.kubectl_ok(&[
        "delete",
        "--wait=false",
        "--ignore-not-found",
        "-f",
        all_file.to_str().unwrap(),
    ]);
    let left = api.kubectl_ok(&[
        "get",
        "mutatingwebhookconfigurations,priorityclasses,clusterroles,clusterrolebindings",
        "-o",
        "name",
    ]);
    let ours: Vec<_> = left
        .lines()
        .filter(|l| l.contains("gpu-admission") || l.contains("/gpu-"))
        .collect();
    assert!(ours.is_empty(), "left behind after delete: {ours:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !api
        .kubectl_ok(&["get", "namespaces", "-o", "name"])
        .lines()
        .all(|l| l != format!("namespace/{NAMESPACE}"))
    {
        assert!(
            Instant::now() < deadline,
            "namespace {NAMESPACE} not deleted"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `overlays/namespaced` applied unchanged into its team namespace (which the team's admin creates): every
/// object stored, its Deployments make their Pods, its registration selects only the namespace and sorts
/// before the cluster-wide one, and its frontend's ServiceAccount may take, renew and release its Lease and
/// get its own Namespace, and nothing else.
fn team_instance_applies(api: &Apiserver, namespaced: &Rendered, file: &Path) {
    const TEAM: &str = "gpu-team";
    api.kubectl_ok(&["create", "namespace", TEAM]);
    api.apply(&namespaced.objects, file);
    assert_all_stored(api, namespaced);
    assert_deployments_make_their_pods(api, TEAM);
    println!(
        "namespaced: {} objects applied and stored, its Deployments' Pods created",
        namespaced.objects.len()
    );
    let mwc = api.get_json(&[
        "mutatingwebhookconfiguration",
        "0-gpu-admission-ns-gpu-team",
    ]);
    assert_eq!(
        mwc["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!([TEAM])
    );
    let names = api.kubectl_ok(&["get", "mutatingwebhookconfigurations", "-o", "name"]);
    let order: Vec<&str> = names
        .lines()
        .filter(|l| l.contains("gpu-admission"))
        .collect();
    assert_eq!(
        order.first(),
        Some(
            &"mutatingwebhookconfiguration.admissionregistration.k8s.io/0-gpu-admission-ns-gpu-team"
        ),
        "the apiserver calls the team's first: {order:?}"
    );
    let sa = "system:serviceaccount:gpu-team:gpu-admission-webhook";
    let lease = "leases.coordination.k8s.io/gpu-admission-ns-lock";
    assert!(api.can_i_as(sa, "get", lease, Some(TEAM)));
    assert!(api.can_i_as(sa, "patch", lease, Some(TEAM)));
    assert!(!api.can_i_as(sa, "patch", "leases.coordination.k8s.io/other", Some(TEAM)));
    assert!(!api.can_i_as(sa, "create", "leases.coordination.k8s.io", Some(TEAM)));
    assert!(!api.can_i_as(sa, "patch", lease, Some("default")));
    assert!(!api.can_i_as(sa, "list", "pods", Some(TEAM)));
    assert!(!api.can_i_as(sa, "list", "namespaces", None));
    // Its own Namespace by name (the tier label), no other.
    assert!(api.can_i_as(sa, "get", &format!("namespaces/{TEAM}"), None));
    assert!(!api.can_i_as(sa, "get", "namespaces/default", None));
    assert!(!api.can_i_as(sa, "watch", "namespaces", None));
    let scorer = "system:serviceaccount:gpu-team:gpu-admission-scorer";
    assert!(!api.can_i_as(scorer, "get", lease, Some(TEAM)));
}

/// Every Deployment of namespace `ns` has created all its Pods (in the install's namespace the restricted Pod
/// Security Standard admits them; a refused Pod shows as a `ReplicaFailure` condition).
fn assert_deployments_make_their_pods(api: &Apiserver, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api.get_json(&["replicasets", "-n", ns]);
        let mut waiting = Vec::new();
        for rs in arr_at(&list, "/items") {
            let name = str_at(rs, "/metadata/name");
            for c in arr_at(rs, "/status/conditions") {
                assert!(
                    !(c["type"] == "ReplicaFailure" && c["status"] == "True"),
                    "ReplicaSet {name} cannot create its Pods: {}",
                    c["message"]
                );
            }
            if rs["status"]["replicas"] != rs["spec"]["replicas"] {
                waiting.push(name.to_string());
            }
        }
        let deployments = arr_at(&api.get_json(&["deployments", "-n", ns]), "/items").len();
        let wanted: u64 = arr_at(&list, "/items")
            .iter()
            .filter_map(|rs| rs["spec"]["replicas"].as_u64())
            .sum();
        let pods = arr_at(&api.get_json(&["pods", "-n", ns]), "/items").len() as u64;
        if waiting.is_empty() && arr_at(&list, "/items").len() >= deployments && deployments > 0 {
            assert_eq!(
                pods,
                wanted,
                "the Pods of {} ReplicaSets",
                arr_at(&list, "/items").len()
            );
            println!("{deployments} Deployments, {pods} Pods created");
            return;
        }
        assert!(Instant::now() < deadline, "Pods not created by {waiting:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}
