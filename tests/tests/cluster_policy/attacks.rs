//! The attacks on the tier rules, replayed as a plain user (and the admin counterparts) against the real
//! apiserver with Nodes of every class: every bronze Pod that is stored is checked with the independent
//! placement oracle (it reaches no Node outside L4-24GB) and for its priority (none above `gpu-default`).

use gpu_admission_properties::placement_oracle::{
    class_label, default_policy_nodes, reachable_nodes,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::{
    ADMINS, Answer, BRONZE, CLASS, Kubectl, POLICY_CM, POLICY_NS, Read, configmap, gpu_pod, policy,
};

/// What a case expects: a denial whose message contains the text, or a stored Pod held to bronze.
enum Expect {
    Denied(&'static str),
    HeldToBronze,
    Allowed,
}

/// The Nodes of every class of the shipped policy (and a CPU Node, an H100 without the class label).
pub(super) async fn create_nodes(client: &kube::Client) -> Vec<Node> {
    let nodes = default_policy_nodes();
    for n in &nodes {
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), n)
            .await
            .expect("node");
    }
    nodes
}

/// Why a stored bronze Pod is outside its tier, if it is: a reachable Node of another class, or a priority
/// above `gpu-default`'s 1000.
fn escape(stored: &Value, nodes: &[Node]) -> Option<String> {
    let pod: Pod = serde_json::from_value(stored.clone()).ok()?;
    let outside: Vec<String> = reachable_nodes(&pod, nodes)
        .into_iter()
        .filter(|name| {
            let node = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
            node.and_then(class_label) != Some("L4-24GB")
        })
        .collect();
    if !outside.is_empty() {
        return Some(format!("reaches {outside:?}"));
    }
    let priority = stored.pointer("/spec/priority").and_then(Value::as_i64);
    priority
        .filter(|p| *p > 1000)
        .map(|p| format!("priority {p} above gpu-default"))
}

/// Who asks, in which namespace, for what.
type Request<'a> = (&'a [&'a str], &'a str, Value);

/// Runs one case and records it with `check`.
fn case(
    k: &Kubectl<'_>,
    nodes: &[Node],
    check: &mut dyn FnMut(&str, String, bool),
    what: &str,
    (groups, ns, object): Request<'_>,
    expect: Expect,
) {
    let a = k.create(groups, ns, &object);
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or("Pod").to_lowercase();
    let (ok, detail) = match expect {
        Expect::Denied(text) => (!a.ok && a.stderr.contains(text), String::new()),
        Expect::Allowed => (a.ok, String::new()),
        Expect::HeldToBronze if a.ok && kind == "pod" => {
            let stored = k.get(ns, "pod", name);
            match escape(&stored, nodes) {
                None => (true, " -> oracle: L4-24GB nodes only".into()),
                Some(why) => (false, format!(" -> oracle: {why}")),
            }
        }
        Expect::HeldToBronze => (false, String::new()),
    };
    check(what, format!("{}{detail}", a.summary()), ok);
}

fn pinned(name: &str, spec: Value, annotations: Value) -> Value {
    gpu_pod(name, annotations, spec)
}

/// Every case of the list that a Pod can carry (CheckpointBackup and DRA are answered
/// at the review tier: core's and the frontend's tests).
pub(super) fn run(k: &Kubectl<'_>, nodes: &[Node], check: &mut dyn FnMut(&str, String, bool)) {
    let h100_node = "h100-80gb-1";
    let user: &[&str] = &[];
    let admin: &[&str] = &[ADMINS];
    let not_l4 = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": CLASS, "operator": "NotIn",
            "values": ["H200-141GB", "H100-80GB", "MI300X-192GB", "A100-80GB", "A100-40GB", "L40S-48GB"]}]}]}}});
    let cases: Vec<(&str, Request<'_>, Expect)> = vec![
        (
            "attack: nodeName of an H100 node",
            (
                user,
                BRONZE,
                pinned("atk-nodename", json!({"nodeName": h100_node}), json!({})),
            ),
            Expect::Denied("names node h100-80gb-1 of GPU class H100-80GB"),
        ),
        (
            "admin: nodeName of an H100 node",
            (
                admin,
                BRONZE,
                pinned("adm-nodename", json!({"nodeName": h100_node}), json!({})),
            ),
            Expect::Allowed,
        ),
        (
            "attack: Job template with nodeName of an H100 node",
            (
                user,
                BRONZE,
                json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "atk-job-nodename"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeName": h100_node,
                "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}),
            ),
            Expect::Denied("names node h100-80gb-1 of GPU class H100-80GB"),
        ),
        (
            "attack: Kueue queue-name label without Kueue",
            (user, BRONZE, {
                let mut p = pinned("atk-kueue", json!({}), json!({}));
                p["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team-a"});
                p
            }),
            Expect::HeldToBronze,
        ),
        (
            "attack: HAMi use-gputype L4 without HAMi",
            (
                user,
                BRONZE,
                pinned(
                    "atk-hami",
                    json!({}),
                    json!({"nvidia.com/use-gputype": "L4"}),
                ),
            ),
            Expect::HeldToBronze,
        ),
        (
            "attack: HAMi use-gputype H100",
            (
                user,
                BRONZE,
                pinned(
                    "atk-hami-h100",
                    json!({}),
                    json!({"nvidia.com/use-gputype": "H100"}),
                ),
            ),
            Expect::Denied("outside tier bronze"),
        ),
        (
            "attack: NotIn every other class",
            (
                user,
                BRONZE,
                pinned("atk-notin", json!({"affinity": not_l4}), json!({})),
            ),
            Expect::HeldToBronze,
        ),
        // kubectl escapes `<` as `\u003c` too: 450 KB make a 2.7 MB request (under the apiserver's 3 MiB), and
        // a review of as much, which the webhooks read (their limit is 24 MiB).
        (
            "attack: 450 KB of `<` in an env value (a 2.7 MB request), H100 pin",
            (user, BRONZE, {
                let mut p = pinned(
                    "atk-big",
                    json!({"nodeSelector": {CLASS: "H100-80GB"}}),
                    json!({}),
                );
                p["spec"]["containers"][0]["env"] =
                    json!([{"name": "X", "value": "<".repeat(450_000)}]);
                p
            }),
            Expect::Denied("outside tier bronze"),
        ),
        (
            "GPU Pod with 250 KiB of annotations",
            (
                user,
                BRONZE,
                pinned(
                    "big-annotations",
                    json!({}),
                    json!({"filler": "x".repeat(250 * 1024)}),
                ),
            ),
            Expect::HeldToBronze,
        ),
        (
            "attack: namespace labelled `Bronze`, H100 pin",
            (
                user,
                "pol-bronze-capital",
                pinned(
                    "atk-capital",
                    json!({"nodeSelector": {CLASS: "H100-80GB"}}),
                    json!({}),
                ),
            ),
            Expect::Denied("outside tier bronze"),
        ),
    ];
    for (what, request, expect) in cases {
        case(k, nodes, check, what, request, expect);
    }
}

/// The rules are the admins': the tier label and the policy ConfigMap.
pub(super) fn rules(k: &Kubectl<'_>, check: &mut dyn FnMut(&str, String, bool)) {
    let label = |groups: &[&str], ns: &str, tier: &str| -> Answer {
        k.run(
            groups,
            &[
                "label",
                "--overwrite",
                "namespace",
                ns,
                &format!("tenant.kubenexus.io/tier={tier}"),
            ],
            "",
        )
    };
    let a = label(&[], BRONZE, "platinum");
    check(
        "attack: relabel own namespace to platinum",
        a.summary(),
        !a.ok && a.stderr.contains("needs update tiers/"),
    );
    let a = k.run(
        &[],
        &["label", "namespace", BRONZE, "tenant.kubenexus.io/tier-"],
        "",
    );
    check(
        "attack: remove own namespace's tier label",
        a.summary(),
        !a.ok && a.stderr.contains("removes it"),
    );
    let a = label(&[ADMINS], "pol-scratch", "gold");
    check("admin: label a namespace gold", a.summary(), a.ok);
    subresource_relabels(k, check);
    tier_powers_from_rbac(k, check);
    let apply = |groups: &[&str], cm: Value| k.run(groups, &["apply", "-f", "-"], &cm.to_string());
    let base = policy("Enforce");
    for (what, text) in [
        (
            "attack: policy ConfigMap, mode Audit",
            base.replace("  mode: Enforce", "  mode: Audit"),
        ),
        (
            "attack: policy ConfigMap, grant H100 to own namespace",
            base.replace(
                "namespaceGrants: []",
                &format!("namespaceGrants: [{{namespace: {BRONZE}, allowedClasses: [H100-80GB]}}]"),
            ),
        ),
        // Fields that were once "not rules" and steer or deny other tenants' Pods.
        (
            "attack: policy ConfigMap, a job type's defaultMemoryGiB 500 (denies its Pods)",
            base.replacen("defaultMemoryGiB: 40", "defaultMemoryGiB: 500", 1),
        ),
        (
            "attack: policy ConfigMap, interference.antiAffinityThreshold",
            base.replace("antiAffinityThreshold: 0.3", "antiAffinityThreshold: 0.01"),
        ),
    ] {
        let a = apply(&[], configmap(&text));
        check(
            what,
            a.summary(),
            !a.ok && a.stderr.contains("needs update policies"),
        );
    }
    let mut unlabelled = configmap(&base.replace("  mode: Enforce", "  mode: Audit"));
    unlabelled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    let a = apply(&[], unlabelled);
    check(
        "attack: policy ConfigMap without its labels, mode Audit",
        a.summary(),
        !a.ok && a.stderr.contains("needs update policies"),
    );
    let a = k.run(
        &[],
        &["-n", POLICY_NS, "delete", "configmap", POLICY_CM],
        "",
    );
    check(
        "attack: delete the policy ConfigMap",
        a.summary(),
        !a.ok && a.stderr.contains("deletes the policy"),
    );
    let a = apply(&[ADMINS], configmap(&base));
    check(
        "admin: policy ConfigMap, the shipped rules in Enforce",
        a.summary(),
        a.ok,
    );
    let jobs = base.replacen("baseRuntimeSeconds: 86400", "baseRuntimeSeconds: 90000", 1);
    let a = apply(&[], configmap(&jobs));
    check(
        "plain user: policy ConfigMap, a job type's runtime (another team's job type)",
        a.summary(),
        !a.ok && a.stderr.contains("needs update jobtypes/train-llama"),
    );
    job_type_powers_from_rbac(k, &jobs, check);
    let a = apply(
        &[ADMINS],
        configmap(&jobs.replace("  mode: Enforce", "  mode: Warn")),
    );
    check("admin: policy ConfigMap, mode Warn", a.summary(), a.ok);
    let a = apply(&[ADMINS], configmap(&base));
    check(
        "admin: policy ConfigMap, the shipped rules in Enforce again",
        a.summary(),
        a.ok,
    );
}

/// A job type's priors are its owner's: `lead`, bound to `update jobtypes/train-llama`, may change that job
/// type's runtime and no other's. (`lead` is asked here first: the frontend caches answers for 10 s.)
fn job_type_powers_from_rbac(
    k: &Kubectl<'_>,
    jobs: &str,
    check: &mut dyn FnMut(&str, String, bool),
) {
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-llama-owner"},
         "rules": [{"apiGroups": ["gpu-admission.io"], "resources": ["jobtypes"], "resourceNames": ["train-llama"], "verbs": ["update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-lead-llama"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-llama-owner"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lead"}]}
    ]});
    let a = k.run_as(None, &[], &["apply", "-f", "-"], &rbac.to_string());
    assert!(a.ok, "RBAC for the lead: {}", a.stderr);
    let apply = |text: &str| {
        k.run_as(
            Some("lead"),
            &[],
            &["apply", "-f", "-"],
            &configmap(text).to_string(),
        )
    };
    let a = apply(jobs);
    check(
        "lead with update jobtypes/train-llama: train-llama's runtime",
        a.summary(),
        a.ok,
    );
    let bert = jobs.replacen(
        "baseRuntimeSeconds: 14400\n    relativeStddev: 0.3",
        "baseRuntimeSeconds: 15000\n    relativeStddev: 0.3",
        1,
    );
    assert_ne!(bert, jobs);
    let a = apply(&bert);
    check(
        "lead with update jobtypes/train-llama: train-bert's runtime",
        a.summary(),
        !a.ok && a.stderr.contains("needs update jobtypes/train-bert"),
    );
    let a = apply(&jobs.replace("  mode: Enforce", "  mode: Audit"));
    check(
        "lead with update jobtypes/train-llama: mode Audit",
        a.summary(),
        !a.ok && a.stderr.contains("needs update policies"),
    );
}

/// Who may set a tier is RBAC's answer: the cluster's own admin (system:masters) may, with no list naming
/// them; a lead bound to `update tiers/bronze` may hand out bronze and not gold.
fn tier_powers_from_rbac(k: &Kubectl<'_>, check: &mut dyn FnMut(&str, String, bool)) {
    let admin = |args: &[&str], stdin: &str| k.run_as(None, &[], args, stdin);
    let label_as = |user: Option<&str>, ns: &str, tier: &str| {
        let l = format!("tenant.kubenexus.io/tier={tier}");
        k.run_as(
            user,
            &[],
            &["label", "--overwrite", "namespace", ns, &l],
            "",
        )
    };
    for ns in ["pol-lead", "pol-installed"] {
        assert!(admin(&["create", "namespace", ns], "").ok, "namespace {ns}");
    }
    let a = label_as(None, "pol-installed", "gold");
    check(
        "cluster admin (system:masters): label a namespace gold",
        a.summary(),
        a.ok,
    );
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-bronze-setter"},
         "rules": [{"apiGroups": ["gpu-admission.io"], "resources": ["tiers"], "resourceNames": ["bronze"], "verbs": ["update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-lead-bronze"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-bronze-setter"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lead"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-tenant-lead"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-tenant-everything"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lead"}]}
    ]});
    let a = admin(&["apply", "-f", "-"], &rbac.to_string());
    assert!(a.ok, "RBAC for the lead: {}", a.stderr);
    let a = label_as(Some("lead"), "pol-lead", "bronze");
    check(
        "lead with update tiers/bronze: label a namespace bronze",
        a.summary(),
        a.ok,
    );
    let a = label_as(Some("lead"), "pol-lead", "gold");
    check(
        "lead with update tiers/bronze: relabel it gold",
        a.summary(),
        !a.ok && a.stderr.contains("needs update tiers/gold"),
    );
}

/// The tier label written through each Namespace subresource that persists labels (`status` with a merge
/// patch, `finalize` with a PUT of the whole Namespace): the tenant, whom RBAC lets update both, is denied
/// and the label stays; an admin sets it through either.
fn subresource_relabels(k: &Kubectl<'_>, check: &mut dyn FnMut(&str, String, bool)) {
    let through = |groups: &[&str], sub: &str, ns: &str, tier: &str| -> Answer {
        match sub {
            "status" => {
                let patch = json!({"metadata": {"labels": {TIER_LABEL: tier}}});
                k.run(
                    groups,
                    &[
                        "patch",
                        "namespace",
                        ns,
                        "--subresource=status",
                        "--type=merge",
                        "-p",
                        &patch.to_string(),
                    ],
                    "",
                )
            }
            _ => {
                let got = k.run(&[], &["get", "namespace", ns, "-o", "json"], "");
                assert!(got.ok, "get namespace {ns}: {}", got.stderr);
                let mut object: Value = serde_json::from_str(&got.stdout).unwrap();
                object["metadata"]["labels"][TIER_LABEL] = json!(tier);
                let path = format!("/api/v1/namespaces/{ns}/{sub}");
                k.run(
                    groups,
                    &["replace", "--raw", &path, "-f", "-"],
                    &object.to_string(),
                )
            }
        }
    };
    let tier_of = |ns: &str| -> String {
        let got = k.run(&[], &["get", "namespace", ns, "-o", "json"], "");
        let object: Value = serde_json::from_str(&got.stdout).unwrap_or_default();
        object["metadata"]["labels"][TIER_LABEL]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    for sub in ["status", "finalize"] {
        let a = through(&[], sub, BRONZE, "platinum");
        let kept = tier_of(BRONZE);
        check(
            &format!("attack: relabel own namespace to platinum through namespaces/{sub}"),
            format!("{} -> label {kept}", a.summary()),
            !a.ok
                && a.stderr.contains(&format!("through its {sub} subresource"))
                && a.stderr.contains("needs update tiers/bronze")
                && kept == "bronze",
        );
    }
    let a = through(&[ADMINS], "status", "pol-scratch", "silver");
    check(
        "admin: relabel a gold namespace silver through namespaces/status",
        format!("{} -> label {}", a.summary(), tier_of("pol-scratch")),
        a.ok && tier_of("pol-scratch") == "silver",
    );
    let a = through(&[ADMINS], "finalize", "pol-scratch", "gold");
    check(
        "admin: relabel it gold again through namespaces/finalize",
        format!("{} -> label {}", a.summary(), tier_of("pol-scratch")),
        a.ok && tier_of("pol-scratch") == "gold",
    );
}

const TIER_LABEL: &str = "tenant.kubenexus.io/tier";
