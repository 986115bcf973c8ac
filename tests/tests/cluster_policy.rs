//! Tier policy against a real kube-apiserver: both webhooks registered (mutating `/mutate-pod`,
//! validating `/validate-pod` for Pods and workloads and `/validate-policy` for the policy ConfigMap), the
//! real scorer with the default policy switched to Enforce (bronze falls back to TierDefault). Requests are
//! made with `kubectl --as` (a plain user, bound to every verb of the built-in API groups and none of
//! gpu-admission.io: `LocalCluster::bind_tenant`) and with `--as-group gpu-admission:admins` (the same user
//! in a group RBAC grants every power of gpu-admission.io): RBAC never stops the requests, so only our
//! webhooks decide, and only RBAC grants the product's powers. Nodes of every class; the attacks on the tier rules
//! (`cluster_policy/attacks.rs`) checked on the stored Pods with the placement oracle. Prints the table of
//! cases and answers.

use std::path::Path;

use std::time::Duration;

use gpu_admission_tests::cluster::{LocalCluster, eventually};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

#[path = "cluster_policy/attacks.rs"]
mod attacks;

const BRONZE: &str = "pol-bronze";
const SILVER: &str = "pol-silver";
const POLICY_NS: &str = "gpu-admission";
const POLICY_CM: &str = "gpu-admission-policy";
const CLASS: &str = "gpu.nvidia.com/class";
const USER: &str = "alice";
const ADMINS: &str = "gpu-admission:admins";

fn default_policy() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/kustomize/base/policy/default-policy.yaml"),
    )
    .expect("the default policy")
}

/// The default policy in `mode`, bronze falling back to TierDefault.
fn policy(mode: &str) -> String {
    default_policy()
        .replace("  mode: Warn", &format!("  mode: {mode}"))
        .replace(
            "    maxPriorityClass: gpu-default\n    fallback: PassThrough",
            "    maxPriorityClass: gpu-default\n    fallback: TierDefault",
        )
}

struct Kubectl<'a> {
    kubeconfig: &'a Path,
}

/// What kubectl answered.
use gpu_admission_tests::cluster::KubectlAnswer as Answer;

/// How this file's table reads an answer.
trait Read {
    fn summary(&self) -> String;
}

impl Read for Answer {
    /// One line for the table: the denial message, or what was created and the warnings.
    fn summary(&self) -> String {
        let short = |t: &str| -> String {
            let t = t.trim();
            if t.chars().count() > 330 {
                t.chars().take(330).collect::<String>() + "…"
            } else {
                t.to_string()
            }
        };
        if !self.ok {
            let why = self
                .stderr
                .lines()
                .find_map(|l| l.split_once("denied the request: ").map(|(_, m)| m))
                .unwrap_or(self.stderr.trim());
            return format!("DENIED: {}", short(why));
        }
        let warnings: Vec<&str> = self
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("Warning: "))
            .collect();
        let created = self.stdout.lines().next().unwrap_or("").trim();
        if warnings.is_empty() {
            format!("ALLOWED: {created}")
        } else {
            format!(
                "ALLOWED + warning: {created}; {}",
                short(&warnings.join(" | "))
            )
        }
    }
}

impl Kubectl<'_> {
    fn run(&self, groups: &[&str], args: &[&str], stdin: &str) -> Answer {
        self.run_as(Some(USER), groups, args, stdin)
    }

    /// As `user` (`None`: the admin kubeconfig's own user, a member of system:masters).
    fn run_as(&self, user: Option<&str>, groups: &[&str], args: &[&str], stdin: &str) -> Answer {
        gpu_admission_tests::cluster::kubectl(self.kubeconfig, user, groups, args, stdin)
    }

    fn create(&self, groups: &[&str], ns: &str, object: &Value) -> Answer {
        self.run(
            groups,
            &["-n", ns, "create", "-f", "-"],
            &object.to_string(),
        )
    }

    fn get(&self, ns: &str, kind: &str, name: &str) -> Value {
        let a = self.run(&[], &["-n", ns, "get", kind, name, "-o", "json"], "");
        assert!(a.ok, "get {kind} {name}: {}", a.stderr);
        serde_json::from_str(&a.stdout).unwrap()
    }
}

fn gpu_pod(name: &str, annotations: Value, spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    });
    for (k, v) in spec.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// The classes a stored Pod can reach: its nodeSelector class and the `In` values of its required terms.
fn placement(pod: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(c) = pod.pointer("/spec/nodeSelector").and_then(|s| s.get(CLASS)) {
        parts.push(format!("nodeSelector {}", c.as_str().unwrap_or("")));
    }
    if let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    {
        for t in terms {
            for e in t["matchExpressions"].as_array().into_iter().flatten() {
                if e["key"] == CLASS {
                    parts.push(format!("affinity In {}", e["values"]));
                }
            }
        }
    }
    if parts.is_empty() {
        "no class constraint".into()
    } else {
        parts.join(" + ")
    }
}

fn validating_configuration(webhook: &Webhook) -> ValidatingWebhookConfiguration {
    let base = webhook.mutate_url().replace("/mutate-pod", "");
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        webhook.ca_pem().unwrap(),
    );
    let tier_ns =
        json!({"matchExpressions": [{"key": "tenant.kubenexus.io/tier", "operator": "Exists"}]});
    let hook = |name: &str, path: &str, rules: Value, ns: Value, objects: Value| {
        json!({"name": name, "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("{base}{path}"), "caBundle": ca},
            "rules": rules, "namespaceSelector": ns, "objectSelector": objects,
            "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5})
    };
    let mut policy_hook = hook(
        "policy.validate.gpu-admission.io",
        "/validate-policy",
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["configmaps"]}]),
        json!({}),
        json!({}),
    );
    policy_hook["matchConditions"] = shipped_policy_match_conditions();
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gpu-admission-policy-e2e"},
        "webhooks": [
            hook("pods.validate.gpu-admission.io", "/validate-pod",
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]),
                tier_ns.clone(), json!({})),
            hook("workloads.validate.gpu-admission.io", "/validate-pod",
                json!([{"apiGroups": ["batch"], "apiVersions": ["v1", "v1beta1"], "operations": ["CREATE", "UPDATE"], "resources": ["jobs", "cronjobs"]},
                       {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"]}]),
                tier_ns, json!({})),
            // As shipped: ConfigMaps, deletions too, but the ledger's (the shipped matchConditions).
            policy_hook,
            hook("namespaces.validate.gpu-admission.io", "/validate-namespace",
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                    "resources": gpu_admission_core::admission::validate_namespace::NAMESPACE_RESOURCES}]),
                json!({}), json!({})),
        ]
    }))
    .unwrap()
}

/// How many reviews `/validate-policy` has answered.
async fn policy_reviews(webhook: &Webhook) -> u64 {
    let text = webhook.metrics().await.unwrap();
    let prefix = "gpu_admission_admissions_total{webhook=\"validate-policy\",";
    gpu_admission_tests::observer::metric_sum(&text, prefix) as u64
}

/// The shipped `/validate-policy` registration's matchConditions (the learned state is not sent).
fn shipped_policy_match_conditions() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/webhook/validatingwebhookconfiguration.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let vwc: Value = serde_yaml::from_str(&text).unwrap();
    let hooks = vwc["webhooks"].as_array().unwrap();
    let policy = hooks
        .iter()
        .find(|h| h["name"] == "policy.validate.gpu-admission.io")
        .expect("the shipped policy webhook");
    assert!(policy["matchConditions"].is_array());
    policy["matchConditions"].clone()
}

fn configmap(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": POLICY_CM, "namespace": POLICY_NS,
            "labels": {"app.kubernetes.io/name": "gpu-admission-scorer", "app.kubernetes.io/component": "policy"}},
        "data": {"default-policy.yaml": text}})
}

/// [`ADMINS`]: every power of gpu-admission.io (`update` and `exempt` on every tier, `update policies`,
/// `update jobtypes`), as cluster-admin holds them, and the policy ConfigMap.
async fn bind_admins(cluster: &LocalCluster) {
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-gpu-admission-admin"},
         "rules": [{"apiGroups": ["gpu-admission.io"], "resources": ["tiers", "policies", "jobtypes"],
                    "verbs": ["update", "exempt"]},
                   {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [POLICY_CM],
                    "verbs": ["get", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-gpu-admission-admins"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "e2e-gpu-admission-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMINS}]}
    ]});
    for item in rbac["items"].as_array().unwrap() {
        let object: kube::api::DynamicObject = serde_json::from_value(item.clone()).unwrap();
        let kind = item["kind"].as_str().unwrap();
        let resource = kube::api::ApiResource {
            group: "rbac.authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        Api::<kube::api::DynamicObject>::all_with(cluster.client(), &resource)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{kind} for {ADMINS}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tier_policy_holds_against_a_real_apiserver() {
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let client = cluster.client();
    let policy_dir = tempfile::tempdir().unwrap();
    let policy_file = policy_dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy("Enforce")).unwrap();
    let mut scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer starts");
    let pol = scorer.policy().clone();
    for (ns, tier) in [
        (BRONZE, Some("bronze")),
        (SILVER, Some("silver")),
        (POLICY_NS, None),
        // A tier label the policy does not know: the default tier (bronze) holds.
        ("pol-bronze-capital", Some("Bronze")),
        ("pol-scratch", None),
    ] {
        cluster.create_namespace(ns, tier).await.expect("namespace");
    }
    cluster
        .create_priority_classes(&pol)
        .await
        .expect("priority classes");
    cluster.bind_tenant(USER).await.expect("the tenant binding");
    bind_admins(&cluster).await;

    let nodes = attacks::create_nodes(&client).await;
    let webhook = Webhook::builder(&scorer.url())
        .policy_file(&policy_file)
        .kubeconfig(cluster.kubeconfig())
        .env("WEBHOOK_POLICY_REFRESH_SECS", "1")
        .arg("--policy-configmap")
        .arg(format!("{POLICY_NS}/{POLICY_CM}"))
        .start()
        .await
        .expect("webhook starts");
    cluster
        .register_webhook(
            "gpu-admission-e2e",
            &webhook.mutate_url(),
            &webhook.ca_pem().unwrap(),
        )
        .await
        .expect("mutating webhook");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating_configuration(&webhook))
        .await
        .expect("validating webhook");
    let k = Kubectl {
        kubeconfig: cluster.kubeconfig(),
    };

    let mut table: Vec<(String, String)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut check = |case: &str, answer: String, ok: bool| {
        println!("| {case} | {answer} |");
        table.push((case.to_string(), answer.clone()));
        if !ok {
            failures.push(format!("{case}: {answer}"));
        }
    };

    // 1. A plain user's H100 pin in bronze: denied (wait for the apiserver to call the new configuration).
    let h100 = |name: &str| {
        gpu_pod(
            name,
            json!({}),
            json!({"nodeSelector": {CLASS: "H100-80GB"}}),
        )
    };
    let mut denial = None;
    let registered = eventually(Duration::from_secs(30), |i| {
        let a = k.create(&[], BRONZE, &h100(&format!("pin-h100-{i}")));
        let denied = !a.ok && a.stderr.contains("outside tier bronze");
        if denied {
            denial = Some(a);
        }
        denied
    });
    assert!(
        registered,
        "validate-pod never denied\n{}",
        webhook.process.log_tail(30)
    );
    let a = denial.unwrap();
    check(
        "plain user, bronze Pod pinning H100 (Enforce)",
        a.summary(),
        a.stderr.contains("L4-24GB (24 GiB, nvidia)"),
    );

    // 2. The same as a member of gpu-admission:admins: created, pin kept, not constrained further.
    let a = k.create(&[ADMINS], BRONZE, &h100("admin-pin-h100"));
    let stored = if a.ok {
        k.get(BRONZE, "pod", "admin-pin-h100")
    } else {
        Value::Null
    };
    let placed = placement(&stored);
    check(
        "gpu-admission:admins member, same Pod",
        format!("{} -> {placed}", a.summary()),
        a.ok && placed == "nodeSelector H100-80GB",
    );

    // 3. A bronze Pod needing 70 GiB: denied in Enforce.
    let big = |name: &str| gpu_pod(name, json!({"gpu.mem.gi": "70"}), json!({}));
    let a = k.create(&[], BRONZE, &big("needs-70g"));
    check(
        "bronze Pod needing 70 GiB (Enforce)",
        a.summary(),
        !a.ok
            && a.stderr.contains(
                "needs 70 GiB of GPU memory per GPU, more than any GPU class of the tier has",
            ),
    );

    // 4. Every priority-raising annotation: at most gpu-default.
    let raise = gpu_pod(
        "raise-priority",
        json!({"gpu-admission.io/workload-class": "inference", "gpu-admission.io/model-size-b": "400",
               "gpu.mem.gi": "24", "ml.batch_size": "4096", "app.kubernetes.io/job-type": "inference-llm"}),
        json!({}),
    );
    let mut raise = raise;
    raise["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
    let a = k.create(&[], BRONZE, &raise);
    let stored = if a.ok {
        k.get(BRONZE, "pod", "raise-priority")
    } else {
        Value::Null
    };
    let pc = stored
        .pointer("/spec/priorityClassName")
        .cloned()
        .unwrap_or(Value::Null);
    check(
        "bronze Pod with every priority-raising annotation",
        format!(
            "{} -> priorityClassName {pc}, {}",
            a.summary(),
            placement(&stored)
        ),
        a.ok && pc == "gpu-default",
    );

    // 5. A forged decided-at without a placement: still placed on the tier.
    let forged = gpu_pod(
        "forged-decided",
        json!({"gpu-admission.io/decided-at": "2020-01-01T00:00:00Z"}),
        json!({}),
    );
    let a = k.create(&[], BRONZE, &forged);
    let stored = if a.ok {
        k.get(BRONZE, "pod", "forged-decided")
    } else {
        Value::Null
    };
    let placed = placement(&stored);
    check(
        "bronze Pod with a forged decided-at, no placement",
        format!("{} -> {placed}", a.summary()),
        a.ok && placed == "nodeSelector L4-24GB",
    );

    // 6. A batch/v1 Job whose template pins H100: denied at create.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-h100"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeSelector": {CLASS: "H100-80GB"},
            "containers": [{"name": "main", "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let a = k.create(&[], BRONZE, &job);
    check(
        "batch/v1 Job in bronze, template pins H100",
        a.summary(),
        !a.ok
            && a.stderr
                .contains("spec.template: selects GPU class H100-80GB"),
    );

    // 7. The policy ConfigMap: a valid one is created, an invalid edit denied with the field, a valid edit
    //    accepted.
    let a = k.run(
        &[ADMINS],
        &["apply", "-f", "-"],
        &configmap(&policy("Enforce")).to_string(),
    );
    check("policy ConfigMap, valid (create)", a.summary(), a.ok);
    let bad = policy("Enforce").replace(
        "maxPriorityClass: gpu-default",
        "maxPriorityClass: gpu-gold",
    );
    let mut denied = None;
    let registered = eventually(Duration::from_secs(20), |_| {
        let a = k.run(
            &[ADMINS],
            &["apply", "-f", "-"],
            &configmap(&bad).to_string(),
        );
        let d = !a.ok;
        if d {
            denied = Some(a);
        }
        d
    });
    let a = denied.unwrap_or(Answer {
        ok: true,
        stdout: String::new(),
        stderr: "accepted".into(),
    });
    check(
        "policy ConfigMap, invalid maxPriorityClass (apply)",
        a.summary(),
        registered && a.stderr.contains("tiers[bronze].maxPriorityClass"),
    );
    let edit = policy("Enforce").replace("    priorityWeight: 0.2\n", "    priorityWeight: 0.25\n");
    let a = k.run(
        &[ADMINS],
        &["apply", "-f", "-"],
        &configmap(&edit).to_string(),
    );
    check("policy ConfigMap, valid edit (apply)", a.summary(), a.ok);
    // The observer's learned state beside it is not sent to the webhook at all: the admin writes one with
    // the invalid policy's text.
    let mut other = configmap(&bad);
    other["metadata"]["name"] = json!("gpu-admission-learned-state");
    let before = policy_reviews(&webhook).await;
    let a = k.run_as(None, &[], &["apply", "-f", "-"], &other.to_string());
    let after = policy_reviews(&webhook).await;
    check(
        "the learned state's ConfigMap beside the policy (not sent)",
        format!(
            "{} (validate-policy calls {before} -> {after})",
            a.summary()
        ),
        a.ok && before == after,
    );

    // 7b. The attacks on the tier rules, and who may change the rules.
    attacks::run(&k, &nodes, &mut check);
    attacks::rules(&k, &mut check);

    // 8. Warn: the 70 GiB Pod is created with a warning and placed on L4 only.
    std::fs::write(&policy_file, policy("Warn")).unwrap();
    let mut warned = None;
    let switched = eventually(Duration::from_secs(30), |i| {
        let name = format!("needs-70g-warn-{i}");
        let a = k.create(&[], BRONZE, &big(&name));
        if a.ok {
            warned = Some((a, name));
        }
        warned.is_some()
    });
    assert!(switched, "the Warn policy never took effect");
    let (a, name) = warned.unwrap();
    let stored = k.get(BRONZE, "pod", &name);
    let placed = placement(&stored);
    check(
        "bronze Pod needing 70 GiB (Warn)",
        format!("{} -> {placed}", a.summary()),
        a.stderr.contains("Warning:") && placed == "nodeSelector L4-24GB",
    );

    // 9. Back to Enforce, then the scorer is killed.
    std::fs::write(&policy_file, policy("Enforce")).unwrap();
    let enforced = eventually(Duration::from_secs(30), |i| {
        !k.create(&[], BRONZE, &big(&format!("probe-enforce-{i}")))
            .ok
    });
    assert!(enforced, "the Enforce policy never came back");
    scorer.process.kill();
    let a = k.create(&[], BRONZE, &h100("pin-h100-scorer-down"));
    check(
        "scorer killed: plain user, bronze Pod pinning H100",
        a.summary(),
        !a.ok && a.stderr.contains("outside tier bronze"),
    );
    let plain = |name: &str| gpu_pod(name, json!({}), json!({}));
    let a = k.create(&[], BRONZE, &plain("scorer-down-bronze"));
    let stored = if a.ok {
        k.get(BRONZE, "pod", "scorer-down-bronze")
    } else {
        Value::Null
    };
    let placed = placement(&stored);
    check(
        "scorer killed: bronze GPU Pod (fallback TierDefault)",
        format!("{} -> {placed}", a.summary()),
        a.ok && placed == "nodeSelector L4-24GB",
    );
    let a = k.create(&[], SILVER, &plain("scorer-down-silver"));
    let stored = if a.ok {
        k.get(SILVER, "pod", "scorer-down-silver")
    } else {
        Value::Null
    };
    let placed = placement(&stored);
    // PassThrough cannot leave a Pod of a tier that restricts classes unbound: it is bound to the tier.
    check(
        "scorer killed: silver GPU Pod (fallback PassThrough, a restricting tier)",
        format!("{} -> {placed}", a.summary()),
        a.ok && placed.starts_with("affinity In [\"A100-80GB\""),
    );

    let metrics = webhook.metrics().await.unwrap_or_default();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("gpu_admission_policy_violations_total"))
    {
        println!("{line}");
    }
    assert!(
        metrics.contains("gpu_admission_policy_violations_total{tier=\"bronze\",reason=\"class_outside_tier\",mode=\"Enforce\"}"),
        "{metrics}"
    );
    drop(webhook);
    assert!(failures.is_empty(), "{failures:#?}");
}
