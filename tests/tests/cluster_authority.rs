//! Who holds the powers over the tier rules on a real kube-apiserver, for identities as platform teams run
//! them: the cluster's superuser (`system:masters`), a cluster-admin bound by a ClusterRoleBinding (kubeadm's
//! `kubeadm:cluster-admins`), Argo CD's application controller with its shipped ClusterRole (`*` on `*`),
//! Flux's kustomize-controller bound to `cluster-admin`, the garbage collector's bootstrap role (`update` on
//! `*`), a lead bound to `update tiers/bronze` by `resourceNames`, and a tenant with `edit` in her namespace.
//!
//! Each power is measured three ways: RBAC alone (a SubjectAccessReview of the power's question, what the
//! frontend took as the power before the wildcard rule), the frontend's answer (an AdmissionReview carrying the identity's userInfo
//! posted to it: its SubjectAccessReviews, its probes) and the floor's (the shipped `floor.yaml` in
//! `Enforce`, a server-side dry run as the identity; `RBAC` when RBAC refuses the request before admission).
//! Prints the table; asserts the rule: only a grant naming the power, or `system:masters`, holds it.
//!
//! Then admin access held to the tier by the floor alone (no webhook is registered): `device-admin` holds
//! `use adminaccess` but not `exempt tiers/bronze`; in a bronze namespace labelled for admin access, its
//! adminAccess claim with no selector on the H100 catalog class is refused by the floor's claims policy, and
//! those on the L4 catalog class and on the vendor's class (which no render knows outside bronze) are not.

use std::path::Path;

use gpu_admission_tests::Webhook;
use gpu_admission_tests::cluster::{Components, KubectlAnswer, LocalCluster, kubectl};
use gpu_admission_tests::review::{Operation, object_review};
use serde_json::{Value, json};

const TIER_LABEL: &str = "tenant.kubenexus.io/tier";
const CLASS: &str = "gpu.nvidia.com/class";
const BRONZE: &str = "auth-bronze";
const SCRATCH: &str = "auth-scratch";
const POLICY_NS: &str = "gpu-admission";
const ADMIN_NS: &str = "auth-admin-access";
const ADMIN_BRONZE: &str = "auth-admin-bronze";
const DEVICE_ADMIN: &str = "device-admin";
const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access";
const POLICY_CM: &str = "gpu-admission-policy";

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn policy(mode: &str) -> String {
    repo("deploy/kustomize/base/policy/default-policy.yaml")
        .replace("  mode: Warn", &format!("  mode: {mode}"))
}

/// One identity: how kubectl impersonates it, and the userInfo the apiserver would send for it.
struct Identity {
    name: &'static str,
    user: Option<&'static str>,
    groups: &'static [&'static str],
}

impl Identity {
    fn user_info(&self) -> Value {
        let mut groups: Vec<&str> = self.groups.to_vec();
        if self.user.is_none() {
            groups.push("system:masters");
        }
        if let Some(sa) = self
            .user
            .and_then(|u| u.strip_prefix("system:serviceaccount:"))
        {
            let ns = sa.split(':').next().unwrap_or_default();
            groups.push("system:serviceaccounts");
            groups.push(Box::leak(
                format!("system:serviceaccounts:{ns}").into_boxed_str(),
            ));
        }
        groups.push("system:authenticated");
        json!({"username": self.user.unwrap_or("admin"), "groups": groups})
    }

    fn kubectl(&self, kc: &Path, args: &[&str], stdin: &str) -> KubectlAnswer {
        kubectl(kc, self.user, self.groups, args, stdin)
    }
}

const IDENTITIES: [Identity; 7] = [
    Identity {
        name: "cluster-admin (system:masters)",
        user: None,
        groups: &[],
    },
    Identity {
        name: "cluster-admin by ClusterRoleBinding (kubeadm:cluster-admins)",
        user: Some("kubeadm-admin"),
        groups: &["kubeadm:cluster-admins"],
    },
    Identity {
        name: "Argo CD application controller (shipped ClusterRole)",
        user: Some("system:serviceaccount:argocd:argocd-application-controller"),
        groups: &[],
    },
    Identity {
        name: "Flux kustomize-controller (cluster-admin)",
        user: Some("system:serviceaccount:flux-system:kustomize-controller"),
        groups: &[],
    },
    Identity {
        name: "garbage collector (bootstrap role)",
        user: Some("system:serviceaccount:kube-system:generic-garbage-collector"),
        groups: &[],
    },
    Identity {
        name: "lead (update tiers, resourceNames [bronze])",
        user: Some("lead"),
        groups: &[],
    },
    Identity {
        name: "tenant (edit in her namespace)",
        user: Some("dev"),
        groups: &[],
    },
];

/// The RBAC of the identities, as their projects ship it (Argo CD's `argocd-application-controller`
/// ClusterRole of its install.yaml; Flux's `cluster-reconciler` binding to `cluster-admin`); the garbage
/// collector's is the apiserver's bootstrap policy.
fn rbac() -> Value {
    let crb = |name: &str, role: &str, subject: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject]})
    };
    let sa =
        |ns: &str, name: &str| json!({"kind": "ServiceAccount", "namespace": ns, "name": name});
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "argocd-application-controller"},
         "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]},
        crb("argocd-application-controller", "argocd-application-controller",
            sa("argocd", "argocd-application-controller")),
        crb("cluster-reconciler-flux-system", "cluster-admin", sa("flux-system", "kustomize-controller")),
        crb("kubeadm:cluster-admins", "cluster-admin",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "kubeadm:cluster-admins"})),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-bronze-setter"},
         "rules": [{"apiGroups": ["gpu-admission.io"], "resources": ["tiers"], "resourceNames": ["bronze"], "verbs": ["update"]},
                   {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch", "update"]}]},
        crb("e2e-lead-bronze", "e2e-bronze-setter",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lead"})),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "dev-edit", "namespace": BRONZE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dev"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "dev-edit", "namespace": ADMIN_NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dev"}]},
    ]})
}

fn h100_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BRONZE},
        "spec": {"nodeSelector": {CLASS: "H100-80GB"},
            "containers": [{"name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
}

/// A claim on NVIDIA's GPU DeviceClass with `adminAccess: true`, in [`ADMIN_NS`] (labelled for admin access
/// by the superuser, so that the apiserver's own check lets it through to admission).
fn admin_claim(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ADMIN_NS},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": true}}]}}})
}

/// A claim with one `adminAccess` request, no selector, on `class`, in [`ADMIN_BRONZE`].
fn admin_claim_on(name: &str, class: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ADMIN_BRONZE},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": class, "adminAccess": true}}]}}})
}

/// [`DEVICE_ADMIN`]: `use adminaccess` by a rule naming it (as the shipped `gpu-admission-device-admin`),
/// and creating claims.
fn device_admin_rbac() -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-device-admin"},
         "rules": [{"apiGroups": ["gpu-admission.io"], "resources": ["adminaccess"], "verbs": ["use"]},
                   {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-device-admin"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-device-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": DEVICE_ADMIN}]},
    ]})
}

fn namespace(tier: Option<&str>) -> Value {
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SCRATCH}});
    if let Some(t) = tier {
        ns["metadata"]["labels"] = json!({TIER_LABEL: t});
    }
    ns
}

fn policy_cm(text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": POLICY_CM, "namespace": POLICY_NS},
        "data": {"default-policy.yaml": text}})
}

/// The frontend's answer to `review` (its request's userInfo replaced by `who`'s).
async fn frontend(webhook: &Webhook, path: &str, mut review: Value, who: &Identity) -> bool {
    review["request"]["userInfo"] = who.user_info();
    let resp = webhook
        .https()
        .post_json(path, &review)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let answer: Value = resp.json().expect("an AdmissionReview");
    answer["response"]["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("{path}: {answer}"))
}

/// RBAC alone: a SubjectAccessReview of the power's own question for `who` (what the frontend took as the
/// power before the wildcard rule). `kubectl auth can-i` is not used: for a resource the apiserver does not
/// serve, it answered `no` to the lead's `update tiers/bronze` that a review with the name grants (measured).
fn rbac_alone(kc: &Path, who: &Identity, verb: &str, resource: &str, name: Option<&str>) -> bool {
    let info = who.user_info();
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": info["username"], "groups": info["groups"],
            "resourceAttributes": {"group": "gpu-admission.io", "resource": resource, "verb": verb, "name": name}}});
    let a = IDENTITIES[0].kubectl(kc, &["create", "-f", "-", "-o", "json"], &sar.to_string());
    assert!(a.ok, "SubjectAccessReview: {}", a.stderr);
    let answer: Value = serde_json::from_str(&a.stdout).expect("a SubjectAccessReview");
    answer["status"]["allowed"] == json!(true)
}

/// The floor's answer to a dry run: allowed, denied by the floor, or refused by RBAC first.
fn floor(a: &KubectlAnswer) -> &'static str {
    if !a.ok {
        eprintln!("floor or RBAC: {}", a.stderr.trim());
    }
    if a.ok {
        "allowed"
    } else if a
        .stderr
        .contains("ValidatingAdmissionPolicy 'gpu-admission-floor-")
    {
        "denied"
    } else if a.stderr.contains("Forbidden") || a.stderr.contains("forbidden") {
        "RBAC"
    } else {
        panic!("neither the floor nor RBAC: {}", a.stderr)
    }
}

fn yn(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_grant_naming_a_power_or_system_masters_holds_it() {
    // The controller manager aggregates the built-in `edit` role (empty without it).
    let components = Components {
        controller_manager: true,
        ..Components::APISERVER
    };
    let Some(cluster) = LocalCluster::start_with(components)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let kc = cluster.kubeconfig();
    let admin = &IDENTITIES[0];
    for (ns, tier) in [(BRONZE, Some("bronze")), (SCRATCH, None), (POLICY_NS, None)] {
        cluster.create_namespace(ns, tier).await.expect("namespace");
    }
    cluster
        .create_namespace(ADMIN_NS, None)
        .await
        .expect("namespace");
    cluster
        .create_namespace(ADMIN_BRONZE, Some("bronze"))
        .await
        .expect("namespace");
    let l = format!("{ADMIN_ACCESS_LABEL}=true");
    for ns in [ADMIN_NS, ADMIN_BRONZE] {
        let a = admin.kubectl(kc, &["label", "namespace", ns, &l], "");
        assert!(a.ok, "admin access label: {}", a.stderr);
    }
    let a = admin.kubectl(kc, &["apply", "-f", "-"], &rbac().to_string());
    assert!(a.ok, "RBAC: {}", a.stderr);
    // The shipped floor, its parameters in Enforce (as the observer would write them for this policy).
    let a = admin.kubectl(
        kc,
        &["apply", "-f", "-"],
        &repo("deploy/kustomize/base/floor.yaml"),
    );
    assert!(a.ok, "floor.yaml: {}", a.stderr);
    gpu_admission_tests::cluster::apply_floor_parameters_in_enforce(kc).unwrap();
    let policy_dir = tempfile::tempdir().unwrap();
    let policy_file = policy_dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy("Enforce")).unwrap();
    let a = admin.kubectl(
        kc,
        &["apply", "-f", "-"],
        &policy_cm(&policy("Enforce")).to_string(),
    );
    assert!(a.ok, "policy ConfigMap: {}", a.stderr);
    let webhook = Webhook::builder("http://127.0.0.1:9")
        .policy_file(&policy_file)
        .kubeconfig(kc)
        .arg("--policy-configmap")
        .arg(format!("{POLICY_NS}/{POLICY_CM}"))
        .start()
        .await
        .expect("webhook starts");
    // The floor's policies take a moment to be loaded by the apiserver's admission.
    let mut last = String::new();
    let loaded =
        gpu_admission_tests::cluster::eventually(std::time::Duration::from_secs(30), |i| {
            let pod = h100_pod(&format!("probe-{i}"));
            let a = IDENTITIES[6].kubectl(
                kc,
                &["create", "--dry-run=server", "-f", "-"],
                &pod.to_string(),
            );
            last = format!("{} {}", a.stdout, a.stderr);
            !a.ok
                && a.stderr
                    .contains("ValidatingAdmissionPolicy 'gpu-admission-floor-")
        });
    assert!(
        loaded,
        "the floor never denied the tenant's H100 Pod: {last}"
    );

    let enforce = policy("Enforce");
    let audit = enforce.replace("  mode: Enforce", "  mode: Audit");
    let llama = enforce.replacen("baseRuntimeSeconds: 86400", "baseRuntimeSeconds: 90000", 1);
    assert_ne!(llama, enforce);
    let cm_review = |text: &str| {
        let mut r = object_review(
            &policy_cm(text),
            POLICY_NS,
            Operation::Update,
            json!({"group": "", "version": "v1", "kind": "ConfigMap"}),
            json!({"group": "", "version": "v1", "resource": "configmaps"}),
        );
        r["request"]["oldObject"] = policy_cm(&enforce);
        r["request"]["oldObject"]["metadata"]["namespace"] = json!(POLICY_NS);
        r
    };
    let ns_review = |tier: &str| {
        let mut r = object_review(
            &namespace(Some(tier)),
            "",
            Operation::Update,
            json!({"group": "", "version": "v1", "kind": "Namespace"}),
            json!({"group": "", "version": "v1", "resource": "namespaces"}),
        );
        r["request"]["oldObject"] = namespace(None);
        r["request"]["object"]["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        r
    };
    let admin_review = {
        let mut r = ns_review("bronze");
        r["request"]["object"] = namespace(None);
        r["request"]["object"]["metadata"]["labels"] = json!({ADMIN_ACCESS_LABEL: "true"});
        r
    };
    let pod_review = object_review(
        &h100_pod("exempt-probe"),
        BRONZE,
        Operation::Create,
        json!({"group": "", "version": "v1", "kind": "Pod"}),
        json!({"group": "", "version": "v1", "resource": "pods"}),
    );

    println!(
        "| identity | update tiers/bronze: RBAC / frontend / floor | update tiers/gold: RBAC / frontend / floor | \
         exempt tiers/bronze (H100 Pod in bronze): RBAC / frontend / floor | use adminaccess (namespace label): \
         RBAC / frontend / floor | GPU claim with adminAccess in an admin-access namespace: frontend / floor | \
         update policies: RBAC / frontend | update jobtypes/train-llama: RBAC / frontend |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for (i, who) in IDENTITIES.iter().enumerate() {
        let mut cells = Vec::new();
        let mut held = Vec::new();
        for tier in ["bronze", "gold"] {
            let rbac = rbac_alone(kc, who, "update", "tiers", Some(tier));
            let fe = frontend(&webhook, "/validate-namespace", ns_review(tier), who).await;
            let l = format!("{TIER_LABEL}={tier}");
            let a = who.kubectl(
                kc,
                &["label", "namespace", SCRATCH, &l, "--dry-run=server"],
                "",
            );
            let fl = floor(&a);
            cells.push(format!("{} / {} / {fl}", yn(rbac), yn(fe)));
            held.push((fe, fl));
        }
        let rbac = rbac_alone(kc, who, "exempt", "tiers", Some("bronze"));
        let fe = frontend(&webhook, "/validate-pod", pod_review.clone(), who).await;
        let a = who.kubectl(
            kc,
            &["create", "--dry-run=server", "-f", "-"],
            &h100_pod(&format!("exempt-{i}")).to_string(),
        );
        let fl = floor(&a);
        cells.push(format!("{} / {} / {fl}", yn(rbac), yn(fe)));
        held.push((fe, fl));
        let rbac = rbac_alone(kc, who, "use", "adminaccess", None);
        let fe = frontend(&webhook, "/validate-namespace", admin_review.clone(), who).await;
        let l = format!("{ADMIN_ACCESS_LABEL}=true");
        let a = who.kubectl(
            kc,
            &["label", "namespace", SCRATCH, &l, "--dry-run=server"],
            "",
        );
        let fl = floor(&a);
        cells.push(format!("{} / {} / {fl}", yn(rbac), yn(fe)));
        held.push((fe, fl));
        let a = who.kubectl(
            kc,
            &["create", "--dry-run=server", "-f", "-"],
            &admin_claim(&format!("admin-{i}")).to_string(),
        );
        let fl = floor(&a);
        let claim = object_review(
            &admin_claim(&format!("admin-{i}")),
            ADMIN_NS,
            Operation::Create,
            json!({"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"}),
            json!({"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}),
        );
        let fe = frontend(&webhook, "/validate-pod", claim, who).await;
        cells.push(format!("{} / {fl}", yn(fe)));
        held.push((fe, fl));
        for (resource, name, text) in [
            ("policies", None, &audit),
            ("jobtypes", Some("train-llama"), &llama),
        ] {
            let rbac = rbac_alone(kc, who, "update", resource, name);
            let fe = frontend(&webhook, "/validate-policy", cm_review(text), who).await;
            cells.push(format!("{} / {}", yn(rbac), yn(fe)));
            held.push((fe, "-"));
        }
        println!("| {} | {} |", who.name, cells.join(" | "));
        // The rule: masters hold everything; the lead sets bronze only; nobody else holds anything.
        let expected: [bool; 7] = match i {
            0 => [true; 7],
            5 => [true, false, false, false, false, false, false],
            _ => [false; 7],
        };
        for (k, ((fe, fl), want)) in held.iter().zip(expected).enumerate() {
            let floor_ok = match *fl {
                "-" | "RBAC" => true,
                "allowed" => want,
                _ => !want,
            };
            if *fe != want || !floor_ok {
                failures.push(format!(
                    "{}: power {k}: frontend {fe}, floor {fl}, expected {want}",
                    who.name
                ));
            }
        }
    }
    // Admin access held to the tier by the floor alone.
    let a = admin.kubectl(kc, &["apply", "-f", "-"], &device_admin_rbac().to_string());
    assert!(a.ok, "device-admin RBAC: {}", a.stderr);
    for (i, (class, want)) in [
        ("h100-80gb.gpu-admission.io", "denied"),
        ("l4-24gb.gpu-admission.io", "allowed"),
        ("gpu.nvidia.com", "allowed"),
    ]
    .into_iter()
    .enumerate()
    {
        let a = kubectl(
            kc,
            Some(DEVICE_ADMIN),
            &[],
            &["create", "--dry-run=server", "-f", "-"],
            &admin_claim_on(&format!("device-admin-{i}"), class).to_string(),
        );
        let fl = floor(&a);
        println!(
            "{DEVICE_ADMIN} (use adminaccess) claims {class} with adminAccess in bronze: floor {fl}"
        );
        let named = want == "allowed" || a.stderr.contains("outside tier bronze");
        if fl != want || !named {
            failures.push(format!(
                "{DEVICE_ADMIN} on {class}: floor {fl} ({})",
                a.stderr.trim()
            ));
        }
    }
    // The tier label through the status subresource, which persists labels: Argo CD (RBAC lets it) is
    // refused by the floor; the superuser relabels through it.
    let patch = json!({"metadata": {"labels": {TIER_LABEL: "gold"}}}).to_string();
    let status = |who: &Identity| {
        who.kubectl(
            kc,
            &[
                "patch",
                "namespace",
                BRONZE,
                "--subresource=status",
                "--type=merge",
                "-p",
                &patch,
                "--dry-run=server",
            ],
            "",
        )
    };
    let a = status(&IDENTITIES[2]);
    let argo = floor(&a);
    println!("Argo CD relabels bronze gold through namespaces/status: floor {argo}");
    if argo != "denied" {
        failures.push(format!("Argo CD through namespaces/status: {}", a.stderr));
    }
    let a = status(&IDENTITIES[0]);
    println!(
        "system:masters relabels bronze gold through namespaces/status: floor {}",
        floor(&a)
    );
    if !a.ok {
        failures.push(format!(
            "system:masters through namespaces/status: {}",
            a.stderr
        ));
    }
    assert!(
        failures.is_empty(),
        "{failures:#?}\n{}",
        webhook.process.log_tail(40)
    );
}
