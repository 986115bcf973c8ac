//! `deploy/kustomize/overlays/namespaced`, rendered offline: it passes strict schema validation
//! for the versions the install supports; everything is in the team namespace but its one
//! MutatingWebhookConfiguration, which selects only that namespace, sorts before the cluster-wide
//! `gpu-admission` and points at the team's Service; its only RBAC is a Role on its own Lease, bound to its
//! frontend's ServiceAccount; the frontend runs restricted to the namespace and `--no-kube`; every flag is
//! one the real binaries accept. Applied whole and unchanged to a real apiserver by `deploy_apiserver.rs`, and
//! in part (run as the restricted instance's identity) by `cluster_restricted.rs`.
//!
//! Needs `kubectl` (its kustomize) and `kubernetes-validate`, as deploy_render.rs.

#[path = "deploy_support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::process::Command;

use clap::CommandFactory;
use serde_json::Value;
use support::{arr_at, str_at, strings_at};

const TEAM: &str = "gpu-team";

fn args(m: &support::Rendered, deployment: &str, container: &str) -> Vec<String> {
    let d = m.get("Deployment", deployment);
    let c = arr_at(d, "/spec/template/spec/containers")
        .iter()
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("{deployment}: no container {container}"));
    strings_at(c, "/args")
}

/// The long flags a binary's `--help` lists.
/// Every long flag of a service, hidden ones too (a Deployment may set a knob `--help` does not show), from
/// its clap definition.
fn flags_of(command: clap::Command) -> BTreeSet<String> {
    gpu_admission_flags::long_flags(&command)
        .into_iter()
        .map(|(flag, _)| flag)
        .collect()
}

#[test]
fn the_namespaced_overlay_is_namespaced_but_its_registration() {
    let Some(m) = support::rendered_namespaced() else {
        return;
    };
    println!("namespaced: {:?}", m.kinds());
    // Everything in the team namespace, but the registration and the ClusterRole (and its binding) that
    // reads the team's own Namespace; no other cluster-wide power at all.
    for o in &m.objects {
        let kind = str_at(o, "/kind");
        if matches!(
            kind,
            "MutatingWebhookConfiguration" | "ClusterRole" | "ClusterRoleBinding"
        ) {
            assert_eq!(str_at(o, "/metadata/namespace"), "");
            continue;
        }
        assert_eq!(
            str_at(o, "/metadata/namespace"),
            TEAM,
            "{kind} {}",
            o["metadata"]["name"]
        );
        assert!(
            !matches!(
                kind,
                "ClusterRole"
                    | "ClusterRoleBinding"
                    | "PriorityClass"
                    | "ValidatingWebhookConfiguration"
                    | "Namespace"
            ),
            "{kind}"
        );
    }
    // The registration: only the team namespace, sorted before the cluster-wide one, fail-open, at our
    // Service, with the CA injected from the team's certificate.
    let mwcs = m.all("MutatingWebhookConfiguration");
    assert_eq!(mwcs.len(), 1);
    let mwc = mwcs[0];
    let name = str_at(mwc, "/metadata/name");
    assert!(
        name < "gpu-admission",
        "{name} must sort before gpu-admission"
    );
    assert_eq!(
        str_at(mwc, "/metadata/annotations/cert-manager.io~1inject-ca-from"),
        format!("{TEAM}/gpu-admission-webhook")
    );
    let hooks = arr_at(mwc, "/webhooks");
    assert_eq!(hooks.len(), 1);
    let h = &hooks[0];
    assert_eq!(str_at(h, "/failurePolicy"), "Ignore");
    assert_eq!(str_at(h, "/clientConfig/service/namespace"), TEAM);
    assert_eq!(
        str_at(h, "/clientConfig/service/name"),
        "gpu-admission-webhook"
    );
    assert_eq!(str_at(h, "/clientConfig/service/path"), "/mutate-pod");
    let exprs = arr_at(h, "/namespaceSelector/matchExpressions");
    assert_eq!(exprs.len(), 1);
    assert_eq!(str_at(&exprs[0], "/key"), "kubernetes.io/metadata.name");
    assert_eq!(str_at(&exprs[0], "/operator"), "In");
    assert_eq!(strings_at(&exprs[0], "/values"), [TEAM]);
    // The certificate names the Service the registration calls.
    let cert = m.get("Certificate", "gpu-admission-webhook");
    assert!(
        strings_at(cert, "/spec/dnsNames").contains(&format!("gpu-admission-webhook.{TEAM}.svc"))
    );

    // RBAC: one Role, on the Lease by name, bound to the frontend's ServiceAccount; the Lease shipped.
    let roles = m.all("Role");
    assert_eq!(roles.len(), 1);
    let rules = arr_at(roles[0], "/rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(strings_at(&rules[0], "/apiGroups"), ["coordination.k8s.io"]);
    assert_eq!(strings_at(&rules[0], "/resources"), ["leases"]);
    assert_eq!(
        strings_at(&rules[0], "/resourceNames"),
        ["gpu-admission-ns-lock"]
    );
    assert_eq!(strings_at(&rules[0], "/verbs"), ["get", "patch"]);
    let binding = &m.all("RoleBinding")[0];
    assert_eq!(str_at(binding, "/subjects/0/name"), "gpu-admission-webhook");
    // The tier label: `get` on the team's own Namespace by name, nothing else, bound to the same account.
    let cluster_roles = m.all("ClusterRole");
    assert_eq!(cluster_roles.len(), 1);
    let rules = arr_at(cluster_roles[0], "/rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(strings_at(&rules[0], "/apiGroups"), [""]);
    assert_eq!(strings_at(&rules[0], "/resources"), ["namespaces"]);
    assert_eq!(strings_at(&rules[0], "/resourceNames"), [TEAM]);
    assert_eq!(strings_at(&rules[0], "/verbs"), ["get"]);
    let cluster_binding = &m.all("ClusterRoleBinding")[0];
    assert_eq!(
        str_at(cluster_binding, "/roleRef/name"),
        str_at(cluster_roles[0], "/metadata/name")
    );
    assert_eq!(
        str_at(cluster_binding, "/subjects/0/name"),
        "gpu-admission-webhook"
    );
    assert_eq!(str_at(cluster_binding, "/subjects/0/namespace"), TEAM);
    m.get("Lease", "gpu-admission-ns-lock");
    m.get("ConfigMap", "gpu-admission-policy");
    // The scorer talks to no API.
    let scorer = m.get("Deployment", "gpu-admission-scorer");
    assert_eq!(
        scorer["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );

    // The frontend: restricted to the team namespace, --no-kube, its scorer by an absolute name.
    let webhook = args(&m, "gpu-admission-webhook", "webhook");
    assert!(
        !webhook.iter().any(|a| a.starts_with("--namespace-tier")),
        "the tier is read from the cluster: {webhook:?}"
    );
    for want in [
        format!("--restrict-to-namespaces={TEAM}"),
        "--no-kube".to_string(),
        "--release-after-fallbacks=3".to_string(),
        format!("--scorer=http://gpu-admission-scorer.{TEAM}.svc.cluster.local.:50051"),
    ] {
        assert!(webhook.contains(&want), "{want} not in {webhook:?}");
    }
    // Only the apiserver reaches it, as the cluster-wide frontend: the client CA from its ConfigMap.
    let pod = &m.get("Deployment", "gpu-admission-webhook")["spec"]["template"]["spec"];
    let env = &pod["containers"][0]["env"];
    assert!(
        arr_at(env, "")
            .iter()
            .any(|e| e["name"] == "WEBHOOK_CLIENT_CA_FILE"
                && e["value"] == "/etc/gpu-admission/webhook-client-ca/ca.crt"),
        "the team frontend requires the apiserver's client certificate: {env}"
    );
    assert!(
        arr_at(&pod["volumes"], "")
            .iter()
            .any(|v| v["configMap"]["name"] == "gpu-admission-webhook-client-ca"),
        "the client CA is mounted from its ConfigMap"
    );
    let flags = |a: &[String]| -> Vec<String> {
        a.iter()
            .filter(|a| a.starts_with("--"))
            .map(|a| a.split('=').next().unwrap().to_string())
            .collect()
    };
    let webhook_flags = flags_of(webhook_frontend::config::Args::command());
    for f in flags(&webhook) {
        assert!(webhook_flags.contains(&f), "webhook-frontend has no {f}");
    }
    let scorer_flags = flags_of(scorer::cli::Cli::command());
    for f in flags(&args(&m, "gpu-admission-scorer", "scorer")) {
        assert!(scorer_flags.contains(&f), "scorer has no {f}");
    }

    if !support::require_tool("kubernetes-validate", "pip install kubernetes-validate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("namespaced.yaml");
    let built_in: Vec<&Value> = m
        .objects
        .iter()
        .filter(|o| !str_at(o, "/apiVersion").starts_with("cert-manager.io/"))
        .collect();
    std::fs::write(&file, &m.yaml).unwrap();
    for version in ["1.30.0", "1.34.0", "1.37.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .arg(&file)
            .output()
            .expect("running kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "against {version}:\n{text}");
        let passed = text
            .lines()
            .filter(|l| l.contains(" passed for resource "))
            .count();
        assert_eq!(passed, built_in.len(), "against {version}:\n{text}");
    }
    println!(
        "namespaced: {} objects valid (strict) for 1.30, 1.34, 1.37",
        built_in.len()
    );
}
