//! Nothing outside the rules against a real kube-apiserver, with the SHIPPED
//! webhook registrations (`deploy/kustomize/base/webhook/*webhookconfiguration.yaml`: only the Service
//! reference is replaced by the test frontend's URL and CA, and the timeout widened for debug builds), the
//! real scorer and frontend reading the default policy switched to Enforce, then to Warn. Requests are made as
//! the tenant "alice" (`kubectl --as alice`), allowed to create and read Pods in each namespace she uses (a
//! Role of her own: the bootstrap `edit` role is aggregated by a controller this control plane does not run).
//!
//! Shows: a namespace without a tier label, with `tier: ""` and with a tier the policy does not know is held
//! to the default tier (bronze: an H100 pin denied in Enforce); a CPU-only Pod at `gpu-ultra` in bronze is
//! denied in Enforce and lowered to the tier's cap (`gpu-default`, its value and `Never`) by mutation in Warn,
//! with no other field touched, and so is one at `system-node-critical`; kube-system is never sent to the
//! webhooks (its Pods are stored as created). With the real scheduler and kwok, in Warn: a CPU-only bronze
//! Pod at `gpu-ultra` that needs the room of a gold GPU Pod stays Pending and preempts nothing (capped),
//! while the same Pod in kube-system (uncapped) preempts it. Prints the table of cases and answers.

use std::path::Path;
use std::time::Duration;

use gpu_admission_tests::cluster::{CaseTable, Components, LocalCluster, eventually};
use gpu_admission_tests::kwok;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const USER: &str = "alice";
const CLASS: &str = "gpu.nvidia.com/class";
const BRONZE: &str = "scope-bronze";
/// The preemption case: a gold GPU Pod on the one L4 Node, and a CPU-only Pod that would need its room.
const GOLD: &str = "scope-gold";
/// Namespaces without a tier of the policy: no label, an empty value, a value naming no tier.
const UNTIERED: [(&str, Option<&str>); 3] = [
    ("scope-unlabelled", None),
    ("scope-empty", Some("")),
    ("scope-unknown", Some("diamond")),
];

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn policy(mode: &str) -> String {
    let text = repo_file("deploy/kustomize/base/policy/default-policy.yaml");
    assert!(text.contains("  mode: Warn"));
    text.replace("  mode: Warn", &format!("  mode: {mode}"))
}

use gpu_admission_tests::cluster::KubectlAnswer as Answer;

/// How this file's table reads an answer.
trait Read {
    fn summary(&self) -> String;
}

impl Read for Answer {
    fn summary(&self) -> String {
        if !self.ok {
            let why = self
                .stderr
                .lines()
                .find_map(|l| l.split_once("denied the request: ").map(|(_, m)| m))
                .unwrap_or(self.stderr.trim());
            return format!("DENIED: {why}");
        }
        let warnings: Vec<&str> = self
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("Warning: "))
            .collect();
        format!(
            "ALLOWED: {}{}",
            self.stdout.trim(),
            if warnings.is_empty() {
                String::new()
            } else {
                format!("; {}", warnings.join(" | "))
            }
        )
    }
}

fn kubectl(kubeconfig: &Path, as_user: bool, args: &[&str], stdin: &str) -> Answer {
    gpu_admission_tests::cluster::kubectl(kubeconfig, as_user.then_some(USER), &[], args, stdin)
}

fn h100_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeSelector": {CLASS: "H100-80GB"}, "containers": [{"name": "main",
            "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
}

fn cpu_pod(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"priorityClassName": class, "nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "main", "image": "registry.example/web:1",
                "resources": {"requests": {"cpu": "100m"}}}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_has_a_tier_and_every_pods_priority_is_capped() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy("Enforce")).unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer starts");
    cluster
        .create_priority_classes(scorer.policy())
        .await
        .expect("priority classes");
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    for (ns, label) in UNTIERED {
        cluster.create_namespace(ns, label).await.unwrap();
    }
    // alice may create Pods in her namespaces (and, for the kube-system case, there): RBAC never decides.
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "scope-tenant"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let namespaces: Vec<&str> = [BRONZE, "kube-system"]
        .into_iter()
        .chain(UNTIERED.iter().map(|(ns, _)| *ns))
        .collect();
    for ns in &namespaces {
        let binding: RoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-tenant", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "scope-tenant"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .expect("binding");
    }
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .policy_file(&policy_file)
        .start()
        .await
        .expect("webhook starts");
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(
        gpu_admission_tests::cluster::shipped_registration(
            "mutatingwebhookconfiguration.yaml",
            &webhook,
            &["pods.gpu-admission.io"],
            "gpu-admission-scope-e2e",
        )
        .unwrap(),
    )
    .unwrap();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(
        gpu_admission_tests::cluster::shipped_registration(
            "validatingwebhookconfiguration.yaml",
            &webhook,
            &[
                "pods.validate.gpu-admission.io",
                "workloads.validate.gpu-admission.io",
            ],
            "gpu-admission-scope-e2e",
        )
        .unwrap(),
    )
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .expect("mutating registration");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .expect("validating registration");

    let kc = cluster.kubeconfig();
    let create = |ns: &str, object: &Value| {
        kubectl(
            kc,
            true,
            &["-n", ns, "create", "-f", "-", "-o", "name"],
            &object.to_string(),
        )
    };
    let get = |ns: &str, name: &str| -> Value {
        let a = kubectl(kc, false, &["-n", ns, "get", "pod", name, "-o", "json"], "");
        assert!(a.ok, "get {ns}/{name}: {}", a.stderr);
        serde_json::from_str(&a.stdout).unwrap()
    };
    let mut table = CaseTable::start();

    // 1. Untiered namespaces are held to the default tier (bronze) in Enforce: an H100 pin is denied. The
    // first attempt waits for the apiserver to call the new registrations.
    for (ns, label) in UNTIERED {
        let mut last = None;
        eventually(Duration::from_secs(30), |i| {
            let a = create(ns, &h100_pod(&format!("pin-h100-{i}")));
            let denied = !a.ok && a.stderr.contains("outside tier bronze");
            last = Some(a);
            denied
        });
        let a = last.unwrap();
        let denied = !a.ok && a.stderr.contains("outside tier bronze");
        table.check(
            &format!("Enforce: H100-pinned GPU Pod in {ns} (tier label {label:?})"),
            a.summary(),
            denied && a.stderr.contains("L4-24GB"),
        );
    }

    // 2. A CPU-only Pod at gpu-ultra (and at system-node-critical) in bronze: denied in Enforce.
    for class in ["gpu-ultra", "system-node-critical"] {
        let a = create(BRONZE, &cpu_pod(&format!("cpu-{class}-enforce"), class));
        table.check(
            &format!("Enforce: CPU-only Pod at {class} in bronze"),
            a.summary(),
            !a.ok
                && a.stderr
                    .contains(&format!("asks for PriorityClass {class}")),
        );
    }
    // Within the cap: admitted, unchanged.
    let a = create(BRONZE, &cpu_pod("cpu-gpu-default", "gpu-default"));
    table.check(
        "Enforce: CPU-only Pod at gpu-default in bronze",
        a.summary(),
        a.ok && get(BRONZE, "cpu-gpu-default")["spec"]["priorityClassName"] == "gpu-default",
    );

    // 3. kube-system is never sent: an H100 pin and a CPU Pod at gpu-ultra are stored as created.
    let a = create("kube-system", &h100_pod("scope-pin-h100"));
    let stored = if a.ok {
        get("kube-system", "scope-pin-h100")
    } else {
        Value::Null
    };
    table.check(
        "Enforce: H100-pinned GPU Pod in kube-system",
        a.summary(),
        a.ok && stored["metadata"]["annotations"].is_null()
            && stored["spec"]["nodeSelector"] == json!({CLASS: "H100-80GB"}),
    );
    let a = create("kube-system", &cpu_pod("scope-cpu-ultra", "gpu-ultra"));
    let stored = if a.ok {
        get("kube-system", "scope-cpu-ultra")
    } else {
        Value::Null
    };
    table.check(
        "Enforce: CPU-only Pod at gpu-ultra in kube-system",
        a.summary(),
        a.ok && stored["spec"]["priorityClassName"] == "gpu-ultra"
            && stored["spec"]["priority"] == 1_000_000,
    );

    // 4. Warn: the CPU-only Pod is admitted with its priority lowered to bronze's cap, nothing else
    // touched; the same in an untiered namespace (held to bronze).
    std::fs::write(&policy_file, policy("Warn")).unwrap();
    let mut first = None;
    let switched = eventually(Duration::from_secs(30), |i| {
        let name = format!("cpu-gpu-ultra-warn-{i}");
        let a = create(BRONZE, &cpu_pod(&name, "gpu-ultra"));
        let ok = a.ok;
        if ok {
            first = Some((name, a));
        }
        ok
    });
    assert!(
        switched,
        "the policy never switched to Warn\n{}",
        webhook.process.log_tail(30)
    );
    let (name, a) = first.unwrap();
    let capped = |ns: &str, name: &str, a: &Answer| -> (bool, String) {
        let stored = get(ns, name);
        let spec = &stored["spec"];
        let ok = spec["priorityClassName"] == "gpu-default"
            && spec["priority"] == 1000
            && spec["preemptionPolicy"] == "Never"
            && spec["nodeSelector"] == json!({"disk": "ssd"})
            && spec.get("affinity").is_none()
            && spec.get("tolerations").is_none_or(|t| {
                t.as_array()
                    .is_none_or(|t| t.iter().all(|t| t["key"] != "nvidia.com/gpu"))
            })
            && stored["metadata"]["annotations"].is_null()
            && a.stderr.contains("lowered to gpu-default");
        (
            ok,
            format!(
                "{} -> stored priorityClassName {}, priority {}, preemptionPolicy {}",
                a.summary(),
                spec["priorityClassName"],
                spec["priority"],
                spec["preemptionPolicy"]
            ),
        )
    };
    let (ok, answer) = capped(BRONZE, &name, &a);
    table.check("Warn: CPU-only Pod at gpu-ultra in bronze", answer, ok);
    let a = create(
        BRONZE,
        &cpu_pod("cpu-node-critical-warn", "system-node-critical"),
    );
    let (ok, answer) = if a.ok {
        capped(BRONZE, "cpu-node-critical-warn", &a)
    } else {
        (false, a.summary())
    };
    table.check(
        "Warn: CPU-only Pod at system-node-critical in bronze",
        answer,
        ok,
    );
    let (ns, _) = UNTIERED[0];
    let a = create(ns, &cpu_pod("cpu-gpu-ultra-warn", "gpu-ultra"));
    let (ok, answer) = if a.ok {
        capped(ns, "cpu-gpu-ultra-warn", &a)
    } else {
        (false, a.summary())
    };
    table.check(
        &format!("Warn: CPU-only Pod at gpu-ultra in {ns}"),
        answer,
        ok,
    );

    // 5. Warn, with the real scheduler: a CPU-only Pod asking gpu-ultra in bronze, capped by mutation, does
    // not preempt a gold GPU Pod holding the room it needs; the same Pod in kube-system (never sent to the
    // webhooks, so uncapped) does, which shows the cap is what stops it.
    let l4 = scorer
        .policy()
        .catalog()
        .iter()
        .find(|c| c.name == "L4-24GB")
        .unwrap()
        .clone();
    kwok::create_ready_nodes(&client, &[kwok::gpu_node("l4-0", &l4, "nvidia.com/gpu", 1)])
        .await
        .unwrap();
    cluster.create_namespace(GOLD, Some("gold")).await.unwrap();
    let room = |name: &str, priority_class: &str, gpu: bool| -> Value {
        let mut resources = json!({"requests": {"cpu": "90"}});
        let mut node_selector = json!({});
        if gpu {
            resources["limits"] = json!({"nvidia.com/gpu": "1"});
            node_selector = json!({CLASS: "L4-24GB"});
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"priorityClassName": priority_class, "nodeSelector": node_selector,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "registry.example/job:1", "resources": resources}]}})
    };
    let gold = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), GOLD);
    gold.create(
        &PostParams::default(),
        &serde_json::from_value(room("gold-gpu", "gpu-high", true)).unwrap(),
    )
    .await
    .unwrap();
    kwok::wait_for(
        "the gold GPU Pod running",
        Duration::from_secs(60),
        || async { Ok(kwok::phase(&gold.get("gold-gpu").await?) == "Running") },
    )
    .await
    .unwrap();
    let a = create(BRONZE, &room("cpu-gpu-ultra-room", "gpu-ultra", false));
    // The scheduler has had its chance to preempt (it tries at once) when the Pod is still Pending after a
    // few scheduling rounds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let stored = get(BRONZE, "cpu-gpu-ultra-room");
    let victim = gold.get("gold-gpu").await.unwrap();
    let spared = a.ok
        && stored["spec"]["priority"] == 1000
        && stored["status"]["phase"] == "Pending"
        && stored["status"].get("nominatedNodeName").is_none()
        && victim.metadata.deletion_timestamp.is_none()
        && kwok::phase(&victim) == "Running";
    table.check(
        "Warn: CPU-only Pod at gpu-ultra in bronze needing a gold GPU Pod's room",
        format!(
            "{} -> priority {}, {}; gold's GPU Pod {}",
            a.summary(),
            stored["spec"]["priority"],
            stored["status"]["phase"],
            kwok::phase(&victim)
        ),
        spared,
    );
    let control = kubectl(
        cluster.kubeconfig(),
        false,
        &["create", "-n", "kube-system", "-f", "-", "-o", "name"],
        &room("cpu-gpu-ultra-room", "gpu-ultra", false).to_string(),
    );
    let preempted = control.ok
        && kwok::wait_for(
            "gold's GPU Pod preempted",
            Duration::from_secs(60),
            || async {
                Ok(gold
                    .get_opt("gold-gpu")
                    .await?
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
            },
        )
        .await
        .is_ok();
    table.check(
        "control: the same Pod in kube-system (not sent to the webhooks, uncapped)",
        format!(
            "{} -> gold's GPU Pod preempted: {preempted}",
            control.summary()
        ),
        preempted,
    );

    table.finish(&format!("frontend log:\n{}", webhook.process.log_tail(40)));
}
