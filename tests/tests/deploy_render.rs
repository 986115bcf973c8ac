//! `deploy/kustomize`, rendered offline: every install mode renders, passes strict schema validation
//! for recent Kubernetes versions, and its objects refer to each other (and to the code) correctly.
//!
//! Needs `kubectl` (its kustomize) and PyPI's `kubernetes-validate`; when either is missing the
//! test fails under CI (env CI set) and prints SKIP otherwise.

#[path = "deploy_support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use base64::Engine as _;
use gpu_admission_policy::gpu_resources::GpuResourceKind;
use serde_json::{Value, json};
use support::{NAMESPACE, Rendered, arg_value, arr_at, mode, str_at, strings_at};

/// Kubernetes versions the install is validated against: the oldest it supports (the floor's
/// ValidatingAdmissionPolicies are admissionregistration.k8s.io/v1 from 1.30) and recent ones.
const VALIDATE_VERSIONS: [&str; 3] = ["1.30.0", "1.34.0", "1.37.0"];

/// API groups of custom resources the schema validator cannot know (cert-manager, Prometheus
/// operator); their objects are checked by the cross-reference tests below instead.
const CRD_GROUPS: [&str; 2] = ["cert-manager.io/", "monitoring.coreos.com/"];

/// The frontend's admission route (brief contract: POST /mutate-pod).
const MUTATE_PATH: &str = "/mutate-pod";

const WEBHOOK_DEPLOYMENT: &str = "gpu-admission-webhook";
const SCORER_DEPLOYMENT: &str = "gpu-admission-scorer";
const OBSERVER_DEPLOYMENT: &str = "gpu-admission-observer";
const WEBHOOK_CONFIG: &str = "gpu-admission";
const TLS_SECRET: &str = "gpu-admission-webhook-tls";
const POLICY_FILE: &str = "deploy/kustomize/base/policy/default-policy.yaml";

fn container<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    arr_at(deployment, "/spec/template/spec/containers")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn args(container: &Value) -> Vec<String> {
    strings_at(container, "/args")
}

/// The port number behind a Service targetPort (a number or a container port name).
fn resolve_target_port(target: &Value, container: &Value) -> i64 {
    match target {
        Value::Number(n) => n.as_i64().unwrap(),
        Value::String(name) => arr_at(container, "/ports")
            .iter()
            .find(|p| p["name"] == name.as_str())
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("targetPort {name} is not a port of the container")),
        other => panic!("bad targetPort {other}"),
    }
}

fn port_of_listen(addr: &str) -> i64 {
    addr.rsplit(':')
        .next()
        .unwrap()
        .parse()
        .expect("listen address ends in a port")
}

/// Does this Service select the pods of this Deployment?
fn selects(service: &Value, deployment: &Value) -> bool {
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let sel = service["spec"]["selector"]
        .as_object()
        .expect("service has a selector");
    !sel.is_empty() && sel.iter().all(|(k, v)| labels[k] == *v)
}

#[test]
fn every_mode_renders_and_passes_strict_schema_validation() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    let names: Vec<_> = modes.iter().map(|m| m.mode.as_str()).collect();
    for expected in ["default", "external", "automatic"] {
        assert!(
            names.contains(&expected),
            "mode {expected} missing from {names:?}"
        );
    }
    for m in modes {
        println!("{}: {} objects {:?}", m.mode, m.objects.len(), m.kinds());
        assert!(
            m.objects.len() >= 15,
            "{}: only {} objects",
            m.mode,
            m.objects.len()
        );
        // Every namespaced object lands in our namespace (cluster-scoped kinds have none).
        for o in &m.objects {
            let ns = str_at(o, "/metadata/namespace");
            let kind = str_at(o, "/kind");
            let cluster_scoped = matches!(
                kind,
                "Namespace"
                    | "CustomResourceDefinition"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "PriorityClass"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
            );
            if cluster_scoped {
                assert_eq!(ns, "", "{}: {kind} is cluster-scoped", m.mode);
            } else {
                // The observability overlay may add its own namespaced objects elsewhere; ours stay here.
                assert!(
                    !ns.is_empty(),
                    "{}: {kind} {} has no namespace",
                    m.mode,
                    o["metadata"]["name"]
                );
            }
        }
        assert_eq!(m.all("MutatingWebhookConfiguration").len(), 1, "{}", m.mode);
    }

    if !support::require_tool("kubernetes-validate", "pip install kubernetes-validate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for m in modes {
        let file = dir.path().join(format!("{}.yaml", m.mode));
        std::fs::write(&file, &m.yaml).unwrap();
        let schema_checked = m
            .objects
            .iter()
            .filter(|o| {
                !CRD_GROUPS
                    .iter()
                    .any(|g| str_at(o, "/apiVersion").starts_with(g))
            })
            .count();
        for version in VALIDATE_VERSIONS {
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
            assert!(
                out.status.success(),
                "{} against {version}:\n{text}",
                m.mode
            );
            for line in text.lines().filter(|l| l.contains("Couldn't find schema")) {
                assert!(
                    CRD_GROUPS.iter().any(|g| line.contains(g)),
                    "{} against {version}: a built-in kind without schema: {line}",
                    m.mode
                );
            }
            let passed = text
                .lines()
                .filter(|l| l.contains(" passed for resource "))
                .count();
            assert_eq!(
                passed, schema_checked,
                "{} against {version}:\n{text}",
                m.mode
            );
        }
        println!(
            "{}: {schema_checked} objects valid (strict) for {VALIDATE_VERSIONS:?}",
            m.mode
        );
    }
}

#[test]
fn external_overlay_refuses_to_render_without_the_users_ca() {
    if !support::require_tool("kubectl", "its kustomize renders the install") {
        return;
    }
    let overlay = support::kustomize_dir().join("overlays/external");
    if overlay.join("ca.crt").exists() {
        eprintln!(
            "SKIP: a ca.crt was put into {} (a user's own install)",
            overlay.display()
        );
        return;
    }
    let err = support::kustomize(&overlay).expect_err("external overlay rendered without ca.crt");
    assert!(err.to_string().contains("ca.crt"), "{err}");
}

#[test]
fn webhook_registration_points_at_the_service_port_and_route_of_the_frontend() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    // Each webhook entry of the configuration and the route of the frontend it calls.
    let hook_routes = [
        ("pods.gpu-admission.io", MUTATE_PATH),
        ("claims.gpu-admission.io", "/mutate-claim"),
        (
            "checkpoint-restore.gpu-admission.io",
            "/mutate-pod-checkpoint",
        ),
    ];
    let sources = support::rust_sources("webhook-frontend/src");
    for (_, path) in hook_routes {
        assert!(
            sources
                .iter()
                .any(|(_, text)| text.contains(&format!("\"{path}\""))),
            "webhook-frontend/src serves no \"{path}\" route"
        );
    }

    for m in modes {
        let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
        let hooks = arr_at(mwc, "/webhooks");
        assert_eq!(hooks.len(), hook_routes.len(), "{}", m.mode);
        assert_eq!(hooks[0]["name"], "pods.gpu-admission.io");
        for (name, path) in hook_routes {
            let hook = hooks
                .iter()
                .find(|h| h["name"] == name)
                .unwrap_or_else(|| panic!("{}: no webhook {name}", m.mode));
            let svc_ref = &hook["clientConfig"]["service"];
            assert_eq!(svc_ref["path"], path, "{}: {name}", m.mode);
            assert_eq!(svc_ref["name"], hooks[0]["clientConfig"]["service"]["name"]);
            assert_eq!(svc_ref["port"], hooks[0]["clientConfig"]["service"]["port"]);
        }
        let svc_ref = &hooks[0]["clientConfig"]["service"];
        assert_eq!(svc_ref["namespace"], NAMESPACE, "{}", m.mode);
        let svc = m.get("Service", svc_ref["name"].as_str().unwrap());
        assert_eq!(str_at(svc, "/metadata/namespace"), NAMESPACE);
        let port = svc_ref["port"].as_i64().unwrap_or(443);
        let svc_port = arr_at(svc, "/spec/ports")
            .iter()
            .find(|p| p["port"].as_i64() == Some(port))
            .unwrap_or_else(|| panic!("{}: Service has no port {port}", m.mode));

        let deploy = m.get("Deployment", WEBHOOK_DEPLOYMENT);
        assert!(
            selects(svc, deploy),
            "{}: webhook Service does not select the webhook Pods",
            m.mode
        );
        let c = container(deploy, "webhook");
        let target = resolve_target_port(&svc_port["targetPort"], c);
        let listen = arg_value(&args(c), "--listen").expect("--listen");
        assert_eq!(
            target,
            port_of_listen(&listen),
            "{}: Service targetPort vs --listen",
            m.mode
        );

        // Probes hit the frontend's HTTPS port on its health routes.
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            let p = &c[probe]["httpGet"];
            assert_eq!(p["path"], path, "{}: {probe}", m.mode);
            assert_eq!(p["scheme"], "HTTPS", "{}: {probe}", m.mode);
            assert_eq!(
                resolve_target_port(&p["port"], c),
                target,
                "{}: {probe} port",
                m.mode
            );
        }

        // The frontend reaches the scorer through the scorer Service's gRPC port.
        let scorer_url = arg_value(&args(c), "--scorer").expect("--scorer");
        let host_port = scorer_url
            .strip_prefix("http://")
            .expect("plain-text gRPC inside the cluster");
        let (host, port) = host_port.split_once(':').unwrap();
        // By absolute name, in the scorer's namespace: never through the DNS search path.
        assert_eq!(
            gpu_admission_core::names::relative_dns_host(&scorer_url),
            None,
            "{scorer_url}"
        );
        let scorer_svc = m.get("Service", host.split('.').next().unwrap());
        assert_eq!(
            host,
            format!(
                "{}.{}.svc.cluster.local.",
                scorer_svc["metadata"]["name"].as_str().unwrap(),
                scorer_svc["metadata"]["namespace"].as_str().unwrap()
            )
        );
        let scorer_port = arr_at(scorer_svc, "/spec/ports")
            .iter()
            .find(|p| p["port"].as_i64() == Some(port.parse().unwrap()))
            .expect("scorer Service has the --scorer port");
        let scorer = m.get("Deployment", SCORER_DEPLOYMENT);
        assert!(
            selects(scorer_svc, scorer),
            "scorer Service does not select the scorer"
        );
        let sc = container(scorer, "scorer");
        assert_eq!(
            resolve_target_port(&scorer_port["targetPort"], sc),
            port_of_listen(&arg_value(&args(sc), "--listen").unwrap())
        );
        let admin = arg_value(&args(sc), "--admin-listen").expect("scorer --admin-listen");
        assert_eq!(port_of_listen(&admin), 9091);
        let admin = arg_value(&args(c), "--admin-listen").expect("webhook --admin-listen");
        assert_eq!(port_of_listen(&admin), 9092);
    }
}

#[test]
fn webhook_registration_is_safe_and_selective() {
    let Some(m) = mode("default") else { return };
    let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
    let hook = &mwc["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(hook["sideEffects"], "None");
    let timeout = hook["timeoutSeconds"].as_i64().expect("timeoutSeconds set");
    assert!((1..=3).contains(&timeout), "timeoutSeconds {timeout}");
    assert_eq!(strings_at(hook, "/admissionReviewVersions"), ["v1"]);
    assert!(matches!(
        hook["reinvocationPolicy"].as_str(),
        Some("Never" | "IfNeeded")
    ));
    let rules = arr_at(hook, "/rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(strings_at(&rules[0], "/operations"), ["CREATE"]);
    assert_eq!(strings_at(&rules[0], "/resources"), ["pods"]);
    assert_eq!(strings_at(&rules[0], "/apiGroups"), [""]);

    // Every namespace but the system list, by the name only the apiserver sets: never by the tier label
    // (a namespace without one is held to the default tier), never by a label a user can set.
    let vwc = m.get("ValidatingWebhookConfiguration", WEBHOOK_CONFIG);
    let system: BTreeSet<String> = ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]
        .map(String::from)
        .into();
    for h in [
        hook,
        &mwc["webhooks"][1],
        &vwc["webhooks"][0],
        &vwc["webhooks"][1],
        &vwc["webhooks"][2],
    ] {
        let exprs = arr_at(h, "/namespaceSelector/matchExpressions");
        assert_eq!(exprs.len(), 1, "{}: {exprs:?}", h["name"]);
        assert_eq!(exprs[0]["key"], "kubernetes.io/metadata.name");
        assert_eq!(exprs[0]["operator"], "NotIn");
        let excluded: BTreeSet<String> = strings_at(&exprs[0], "/values").into_iter().collect();
        assert_eq!(excluded, system, "{}", h["name"]);
        assert!(h["namespaceSelector"].get("matchLabels").is_none());
    }
    // The observer's audit covers the same namespaces.
    let exempt: BTreeSet<String> = gpu_admission_core::names::EXEMPT_NAMESPACES
        .map(String::from)
        .into();
    assert_eq!(exempt, system);

    // The CEL filter names every GPU resource the frontend handles, in containers and init containers.
    let conds = arr_at(hook, "/matchConditions");
    assert_eq!(conds.len(), 1);
    let expr = str_at(&conds[0], "/expression");
    for needle in [
        "object.spec.priorityClassName",
        "object.spec.containers",
        "object.spec.initContainers",
        "requests",
        "limits",
        "'^([^/]*[.])?kubernetes[.]io/'",
        "'deviceclass.resource.kubernetes.io/'",
        "resourceClaims",
    ] {
        assert!(
            expr.contains(needle),
            "matchConditions lacks {needle}: {expr}"
        );
    }
}

#[test]
fn pods_are_hardened_and_the_webhook_is_highly_available() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        for (name, cname) in [
            (WEBHOOK_DEPLOYMENT, "webhook"),
            (SCORER_DEPLOYMENT, "scorer"),
            (OBSERVER_DEPLOYMENT, "observer"),
        ] {
            let d = m.get("Deployment", name);
            let pod = &d["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"], true,
                "{}: {name}",
                m.mode
            );
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            assert_ne!(pod["securityContext"]["runAsUser"], 0);
            let c = container(d, cname);
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{}: {name}", m.mode);
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{}: {name}", m.mode);
            assert_eq!(
                strings_at(sc, "/capabilities/drop"),
                ["ALL"],
                "{}: {name}",
                m.mode
            );
            assert!(arr_at(sc, "/capabilities/add").is_empty());
            for k in ["cpu", "memory"] {
                assert!(
                    c["resources"]["requests"][k].is_string(),
                    "{name}: requests.{k}"
                );
            }
            assert!(
                c["resources"]["limits"]["memory"].is_string(),
                "{name}: limits.memory"
            );
            for vm in arr_at(c, "/volumeMounts") {
                assert!(
                    vm.get("subPath").is_none(),
                    "{name}: subPath mounts never see updates"
                );
            }
        }
        let d = m.get("Deployment", WEBHOOK_DEPLOYMENT);
        assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2, "{}", m.mode);
        let anti = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        let term = arr_at(anti, "/preferredDuringSchedulingIgnoredDuringExecution")
            .first()
            .map(|t| &t["podAffinityTerm"])
            .or_else(|| arr_at(anti, "/requiredDuringSchedulingIgnoredDuringExecution").first())
            .expect("webhook pod anti-affinity");
        let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
        for (k, v) in term["labelSelector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(
                &pod_labels[k], v,
                "anti-affinity selects the webhook's own Pods"
            );
        }
        let pdb = m.get("PodDisruptionBudget", WEBHOOK_DEPLOYMENT);
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert!(pdb["spec"]["minAvailable"].as_i64().unwrap() >= 1);
        for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "PDB selects the webhook Pods");
        }
    }
}

#[test]
fn policy_configmap_is_the_scorers_embedded_default_byte_for_byte() {
    let Some(m) = mode("default") else { return };
    let file = support::repo_root().join(POLICY_FILE);
    let on_disk = std::fs::read_to_string(&file).expect("the default policy file");

    let scorer = m.get("Deployment", SCORER_DEPLOYMENT);
    let c = container(scorer, "scorer");
    let policy_arg = arg_value(&args(c), "--policy-file").expect("scorer --policy-file");
    let (dir, key) = policy_arg.rsplit_once('/').unwrap();
    let mount = arr_at(c, "/volumeMounts")
        .iter()
        .find(|vm| vm["mountPath"] == dir)
        .unwrap_or_else(|| panic!("nothing is mounted at {dir}"));
    let volume = arr_at(scorer, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the policy volume");
    let cm_name = str_at(volume, "/configMap/name");
    let cm = m.get("ConfigMap", cm_name);
    let data = cm["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no {key}"));
    assert!(
        data == on_disk,
        "ConfigMap {cm_name}/{key} differs from {POLICY_FILE}"
    );

    // ...and that file is the one the policy crate (the scorer's and the frontend's default) compiles in.
    let embeds = support::rust_sources("policy/src")
        .into_iter()
        .any(|(path, text)| {
            text.match_indices("include_str!(").any(|(i, _)| {
                let rest = &text[i + "include_str!(".len()..];
                let Some(lit) = rest.split('"').nth(1) else {
                    return false;
                };
                let target = path.parent().unwrap().join(lit);
                target.canonicalize().ok() == file.canonicalize().ok()
            })
        });
    assert!(
        embeds,
        "no include_str! in policy/src points at {POLICY_FILE}"
    );
}

/// The ConfigMap and key a container reads as its policy file (`flag`), through its mounts.
fn policy_source(deployment: &Value, container_name: &str, flag: &str) -> (String, String) {
    let c = container(deployment, container_name);
    let arg = arg_value(&args(c), flag).unwrap_or_else(|| panic!("{container_name} has no {flag}"));
    let (dir, key) = arg.rsplit_once('/').unwrap();
    let mount = arr_at(c, "/volumeMounts")
        .iter()
        .find(|vm| vm["mountPath"] == dir)
        .unwrap_or_else(|| panic!("{container_name}: nothing is mounted at {dir}"));
    let volume = arr_at(deployment, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("{container_name}: no volume {}", mount["name"]));
    (
        str_at(volume, "/configMap/name").to_string(),
        key.to_string(),
    )
}

/// The frontend enforces the very policy the scorer scores with (one ConfigMap, one key, mounted
/// as a directory into both), in every install mode, and keeps its last good copy on a writable volume.
#[test]
fn the_frontend_reads_the_scorers_policy_file_in_every_mode() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        let scorer = policy_source(
            m.get("Deployment", SCORER_DEPLOYMENT),
            "scorer",
            "--policy-file",
        );
        let webhook_deployment = m.get("Deployment", WEBHOOK_DEPLOYMENT);
        let webhook = policy_source(webhook_deployment, "webhook", "--policy-file");
        assert_eq!(
            webhook, scorer,
            "{}: the frontend reads another policy",
            m.mode
        );
        let c = container(webhook_deployment, "webhook");
        let last_good = arg_value(&args(c), "--policy-last-good")
            .unwrap_or_else(|| panic!("{}: no --policy-last-good", m.mode));
        let (dir, _) = last_good.rsplit_once('/').unwrap();
        let mount = arr_at(c, "/volumeMounts")
            .iter()
            .find(|vm| vm["mountPath"] == dir)
            .unwrap_or_else(|| panic!("{}: nothing is mounted at {dir}", m.mode));
        assert_ne!(
            mount["readOnly"], true,
            "{}: the last good copy is written",
            m.mode
        );
        let volume = arr_at(webhook_deployment, "/spec/template/spec/volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        assert!(volume.get("emptyDir").is_some(), "{}: {volume}", m.mode);
    }
}

#[test]
fn priority_classes_equal_the_policy_buckets() {
    let Some(m) = mode("default") else { return };
    let policy: Value = serde_yaml::from_str(
        &std::fs::read_to_string(support::repo_root().join(POLICY_FILE)).unwrap(),
    )
    .unwrap();
    let buckets = arr_at(&policy, "/priority/buckets");
    assert!(!buckets.is_empty(), "policy has no priority buckets");
    let classes: Vec<&Value> = m
        .all("PriorityClass")
        .into_iter()
        .filter(|c| c["metadata"]["name"] != OWN_PRIORITY_CLASS)
        .filter(|c| c["metadata"]["name"] != "gpu-borrowed")
        .collect();
    assert_eq!(classes.len(), buckets.len(), "one PriorityClass per bucket");
    // The quota borrowers' class: the policy's default `quotas.borrowingPriorityClass`, below every
    // bucket, preempting nobody.
    let borrowed = m.get("PriorityClass", "gpu-borrowed");
    let default = gpu_admission_policy::quotas::BorrowingClassSpec::default();
    assert_eq!(str_at(borrowed, "/metadata/name"), default.name);
    assert_eq!(borrowed["value"], default.value);
    assert_eq!(str_at(borrowed, "/preemptionPolicy"), "Never");
    assert!(
        buckets
            .iter()
            .all(|b| b["value"].as_i64().unwrap() > i64::from(default.value))
    );
    for b in buckets {
        let pc = m.get("PriorityClass", str_at(b, "/name"));
        assert_eq!(pc["value"], b["value"], "{}", b["name"]);
        let preemption = b["preemptionPolicy"]
            .as_str()
            .unwrap_or("PreemptLowerPriority");
        assert_eq!(str_at(pc, "/preemptionPolicy"), preemption, "{}", b["name"]);
        assert_ne!(
            pc["globalDefault"], true,
            "{} must not become the cluster default",
            b["name"]
        );
    }
    let names: BTreeSet<_> = classes
        .iter()
        .map(|c| str_at(c, "/metadata/name"))
        .collect();
    assert_eq!(
        names,
        ["gpu-default", "gpu-high", "gpu-medium", "gpu-ultra"].into()
    );
    // Our own Pods' class: above every bucket, so no tenant Pod (capped at its tier's bucket) preempts
    // them; named by every Deployment of ours.
    let own = m.get("PriorityClass", OWN_PRIORITY_CLASS);
    let top = buckets
        .iter()
        .filter_map(|b| b["value"].as_i64())
        .max()
        .unwrap();
    assert!(own["value"].as_i64().unwrap() > top);
    assert_ne!(own["globalDefault"], true);
    for d in m.all("Deployment") {
        assert_eq!(
            d["spec"]["template"]["spec"]["priorityClassName"], OWN_PRIORITY_CLASS,
            "{}",
            d["metadata"]["name"]
        );
    }
}

/// The PriorityClass of gpu-admission's own Pods.
const OWN_PRIORITY_CLASS: &str = "gpu-admission-critical";

/// RBAC resource of each Kubernetes type the frontend may use through `kube::Api<T>`.
const KNOWN_TYPES: [(&str, &str, &str); 22] = [
    ("Namespace", "", "namespaces"),
    ("ResourceQuota", "", "resourcequotas"),
    (
        "GpuPolicyException",
        "gpu-admission.io",
        "gpupolicyexceptions",
    ),
    ("FloorParameters", "gpu-admission.io", "floorparameters"),
    ("QuotaLedger", "gpu-admission.io", "quotaledgers"),
    ("Lease", "coordination.k8s.io", "leases"),
    (
        "SubjectAccessReview",
        "authorization.k8s.io",
        "subjectaccessreviews",
    ),
    (
        "ResourceClaimTemplate",
        "resource.k8s.io",
        "resourceclaimtemplates",
    ),
    ("ResourceClaim", "resource.k8s.io", "resourceclaims"),
    ("DeviceClass", "resource.k8s.io", "deviceclasses"),
    ("Job", "batch", "jobs"),
    ("ReplicaSet", "apps", "replicasets"),
    (
        "CheckpointBackup",
        "migration.dcnlab.com",
        "checkpointbackups",
    ),
    ("PriorityClass", "scheduling.k8s.io", "priorityclasses"),
    ("PodGroup", "scheduling.k8s.io", "podgroups"),
    ("Pod", "", "pods"),
    // core's projection of a Pod for the quota watch.
    ("WatchedPod", "", "pods"),
    ("Node", "", "nodes"),
    ("ConfigMap", "", "configmaps"),
    ("Secret", "", "secrets"),
    (
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    (
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
];

/// The type arguments of every `Api<...>` / `Api::<...>` in a source text, e.g.
/// `PartialObjectMeta<Namespace>` (a metadata-only watch needs the same list/watch).
fn api_type_args(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // `OptionalCache<T>` watches `Api::<T>` once its API is served.
    for pat in ["Api<", "Api::<", "OptionalCache<"] {
        for (i, _) in text.match_indices(pat) {
            if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `DynamicApi<`
            }
            let start = i + pat.len();
            let mut depth = 1;
            for (j, c) in text[start..].char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    out.push(&text[start..start + j]);
                    break;
                }
            }
        }
    }
    out
}

fn contains_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// (group, resource) pairs of a set of RBAC rules, with their verbs and resourceNames.
fn rule_set(rules: &[Value]) -> BTreeMap<(String, String), (BTreeSet<String>, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for r in rules {
        for g in strings_at(r, "/apiGroups") {
            for res in strings_at(r, "/resources") {
                let e: &mut (BTreeSet<String>, BTreeSet<String>) =
                    out.entry((g.clone(), res)).or_default();
                e.0.extend(strings_at(r, "/verbs"));
                e.1.extend(strings_at(r, "/resourceNames"));
            }
        }
    }
    out
}

/// The RBAC subjects bound to the webhook's ServiceAccount, as (kind, name) of the roles.
fn roles_bound_to_webhook(m: &Rendered) -> Vec<(String, String)> {
    roles_bound_to(m, WEBHOOK_DEPLOYMENT)
}

/// The roles bound to the ServiceAccount a Deployment runs as, as (kind, name).
fn roles_bound_to(m: &Rendered, deployment: &str) -> Vec<(String, String)> {
    let d = m.get("Deployment", deployment);
    let sa = str_at(d, "/spec/template/spec/serviceAccountName");
    m.get("ServiceAccount", sa);
    m.objects
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("RoleBinding" | "ClusterRoleBinding")
            )
        })
        .filter(|b| {
            arr_at(b, "/subjects").iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NAMESPACE
            })
        })
        .map(|b| {
            (
                str_at(b, "/roleRef/kind").to_string(),
                str_at(b, "/roleRef/name").to_string(),
            )
        })
        .collect()
}

#[test]
fn rbac_grants_exactly_what_the_frontend_watches() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    // What the code uses: `Api<T>` / `Api::<T>` for the known types, anywhere in webhook-frontend/src.
    let sources = support::rust_sources("webhook-frontend/src");
    let api_types: Vec<&str> = sources.iter().flat_map(|(_, t)| api_type_args(t)).collect();
    let used: BTreeSet<(String, String)> = KNOWN_TYPES
        .iter()
        .filter(|(ty, _, _)| api_types.iter().any(|arg| contains_word(arg, ty)))
        .map(|(_, g, r)| (g.to_string(), r.to_string()))
        .collect();
    // A type this test does not know would need RBAC nobody checked: fail until it is listed above.
    // (Single-letter names are generic parameters, e.g. `Api<K>` in a helper.)
    for arg in &api_types {
        let inner = arg.rsplit('<').next().unwrap().trim_end_matches('>').trim();
        let ty = inner.rsplit("::").next().unwrap();
        assert!(
            ty.len() <= 1 || KNOWN_TYPES.iter().any(|(k, _, _)| *k == ty),
            "webhook-frontend uses Api<{arg}>: add it to KNOWN_TYPES and grant its RBAC"
        );
    }
    // The automatic certificate mode's Secret and validating configuration are checked separately (the
    // mutating ones are also watched: which namespaces have a registered restricted instance).
    let cert_resources = [
        ("", "secrets"),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
    ];
    // The quota ledgers: QuotaLedgers of its own namespace, granted by a Role (checked below).
    let ledger = ("gpu-admission.io".to_string(), "quotaledgers".to_string());
    assert!(used.contains(&ledger), "the quota ledgers");
    let watched: BTreeSet<_> = used
        .iter()
        .filter(|(g, r)| !cert_resources.contains(&(g.as_str(), r.as_str())))
        .filter(|k| **k != ledger)
        .cloned()
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("".to_string(), "namespaces".to_string()),
        ("".to_string(), "nodes".to_string()),
        ("".to_string(), "pods".to_string()),
        ("coordination.k8s.io".to_string(), "leases".to_string()),
        (
            "resource.k8s.io".to_string(),
            "resourceclaimtemplates".to_string(),
        ),
        ("resource.k8s.io".to_string(), "resourceclaims".to_string()),
        ("resource.k8s.io".to_string(), "deviceclasses".to_string()),
        (
            "scheduling.k8s.io".to_string(),
            "priorityclasses".to_string(),
        ),
        ("scheduling.k8s.io".to_string(), "podgroups".to_string()),
        ("batch".to_string(), "jobs".to_string()),
        ("apps".to_string(), "replicasets".to_string()),
        (
            "migration.dcnlab.com".to_string(),
            "checkpointbackups".to_string(),
        ),
        (
            "gpu-admission.io".to_string(),
            "gpupolicyexceptions".to_string(),
        ),
        (
            "authorization.k8s.io".to_string(),
            "subjectaccessreviews".to_string(),
        ),
        (
            "admissionregistration.k8s.io".to_string(),
            "mutatingwebhookconfigurations".to_string(),
        ),
    ]
    .into();
    assert_eq!(
        watched, expected,
        "webhook-frontend/src uses kube Api<T> for these types"
    );

    for m in modes {
        let bound = roles_bound_to_webhook(m);
        let base_role = m.get("ClusterRole", "gpu-admission-webhook");
        assert!(bound.contains(&("ClusterRole".into(), "gpu-admission-webhook".into())));
        let rules = rule_set(arr_at(base_role, "/rules"));
        let granted: BTreeSet<_> = rules.keys().cloned().collect();
        assert_eq!(
            granted, expected,
            "{}: ClusterRole gpu-admission-webhook",
            m.mode
        );
        for ((_, resource), (verbs, names)) in &rules {
            // Jobs and ReplicaSets: also one GET of an owner the watch has not delivered yet (checkpoint
            // restore, the workload of a Pod).
            let mut want = BTreeSet::from(["list".to_string(), "watch".to_string()]);
            if resource == "jobs" || resource == "replicasets" {
                want.insert("get".to_string());
            }
            // Who may set a tier, change the rules or run outside a tier: asked, never read.
            if resource == "subjectaccessreviews" {
                want = BTreeSet::from(["create".to_string()]);
            }
            assert_eq!(verbs, &want, "{resource}");
            assert!(names.is_empty());
        }
        // In its namespace: get, list, watch, create and update of the quota ledgers (one per tier, created at
        // its first reservation, watched for the other replicas' writes), nothing else; no other role grants
        // them.
        assert!(bound.contains(&("Role".into(), "gpu-admission-webhook".into())));
        let ledger_role = rule_set(arr_at(m.get("Role", "gpu-admission-webhook"), "/rules"));
        let only_ledger = BTreeMap::from([(
            ledger.clone(),
            (
                BTreeSet::from(["get", "list", "watch", "create", "update"].map(String::from)),
                BTreeSet::new(),
            ),
        )]);
        assert_eq!(
            ledger_role, only_ledger,
            "{}: Role gpu-admission-webhook",
            m.mode
        );
        let definition = m.get("CustomResourceDefinition", "quotaledgers.gpu-admission.io");
        assert_eq!(definition["spec"]["scope"], "Namespaced");
        // No other role reaches the webhook outside the automatic certificate mode.
        let others: Vec<_> = bound
            .iter()
            .filter(|(_, n)| n != "gpu-admission-webhook")
            .collect();
        if m.mode != "automatic" {
            assert!(
                others.is_empty(),
                "{}: extra roles bound: {others:?}",
                m.mode
            );
        }
        // The scorer talks to no Kubernetes API at all.
        let scorer = m.get("Deployment", SCORER_DEPLOYMENT);
        assert_eq!(
            scorer["spec"]["template"]["spec"]["automountServiceAccountToken"],
            false
        );
    }
}

#[test]
fn automatic_mode_grants_only_its_own_secret_and_webhook_configuration() {
    let Some(m) = mode("automatic") else { return };
    let d = m.get("Deployment", WEBHOOK_DEPLOYMENT);
    let a = args(container(d, "webhook"));
    assert_eq!(arg_value(&a, "--tls").as_deref(), Some("auto"));
    assert_eq!(arg_value(&a, "--tls-secret").as_deref(), Some(TLS_SECRET));
    assert_eq!(
        arg_value(&a, "--tls-webhook-config").as_deref(),
        Some(WEBHOOK_CONFIG)
    );
    assert!(
        arg_value(&a, "--tls-dir").is_none(),
        "no mounted certificate in automatic mode"
    );
    assert!(
        a.contains(&"--san=gpu-admission-webhook.gpu-admission.svc".to_string()),
        "{a:?}"
    );
    // No mounted certificate: the only volumes are the policy, its last good copy and the CA of the
    // apiserver's client certificate.
    let volumes = arr_at(d, "/spec/template/spec/volumes");
    assert!(
        volumes.iter().all(|v| v.get("secret").is_none()),
        "{volumes:?}"
    );
    let names: Vec<&str> = volumes.iter().map(|v| str_at(v, "/name")).collect();
    assert_eq!(names, ["policy", "last-good-policy", "webhook-client-ca"]);

    let bound = roles_bound_to_webhook(m);
    let role = m.get("Role", "gpu-admission-webhook-certs");
    assert_eq!(str_at(role, "/metadata/namespace"), NAMESPACE);
    assert!(bound.contains(&("Role".into(), "gpu-admission-webhook-certs".into())));
    let rules = arr_at(role, "/rules");
    for r in rules {
        assert_eq!(strings_at(r, "/resources"), ["secrets"]);
        let verbs = strings_at(r, "/verbs");
        if verbs == ["create"] {
            // RBAC cannot restrict create by name; the Role is confined to our namespace.
            continue;
        }
        assert_eq!(strings_at(r, "/resourceNames"), [TLS_SECRET], "{r}");
        let allowed = ["get", "update", "patch", "watch"];
        assert!(
            verbs.iter().all(|v| allowed.contains(&v.as_str())),
            "{verbs:?}"
        );
    }
    let cr = m.get("ClusterRole", "gpu-admission-webhook-certs");
    assert!(bound.contains(&("ClusterRole".into(), "gpu-admission-webhook-certs".into())));
    let rules = rule_set(arr_at(cr, "/rules"));
    let keys = [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ]
    .map(|r| ("admissionregistration.k8s.io".to_string(), r.to_string()));
    assert_eq!(
        rules.keys().collect::<Vec<_>>(),
        keys.iter().collect::<Vec<_>>()
    );
    for key in &keys {
        let (verbs, names) = &rules[key];
        assert_eq!(
            verbs,
            &BTreeSet::from(["get".to_string(), "patch".to_string()])
        );
        assert_eq!(names, &BTreeSet::from([WEBHOOK_CONFIG.to_string()]));
    }
    assert!(m.all("Certificate").is_empty() && m.all("Issuer").is_empty());
}

#[test]
fn cert_manager_mode_chains_a_ca_to_the_mounted_secret_and_injects_it() {
    let Some(m) = mode("default") else { return };
    let d = m.get("Deployment", WEBHOOK_DEPLOYMENT);
    let c = container(d, "webhook");
    let a = args(c);
    // The frontend reads DIR/tls.crt and DIR/tls.key: the mounted Secret's keys.
    assert_eq!(arg_value(&a, "--tls").as_deref(), Some("files"));
    let dir = arg_value(&a, "--tls-dir").expect("--tls-dir");
    let mount = arr_at(c, "/volumeMounts")
        .iter()
        .find(|vm| vm["mountPath"] == dir)
        .expect("tls mount");
    let volume = arr_at(d, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("tls volume");
    assert_eq!(str_at(volume, "/secret/secretName"), TLS_SECRET);

    let serving = m
        .all("Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == TLS_SECRET)
        .expect("a Certificate writes the mounted Secret");
    let svc = m.get("Service", "gpu-admission-webhook");
    let dns = strings_at(serving, "/spec/dnsNames");
    let svc_name = str_at(svc, "/metadata/name");
    for name in [
        format!("{svc_name}.{NAMESPACE}.svc"),
        format!("{svc_name}.{NAMESPACE}.svc.cluster.local"),
    ] {
        assert!(
            dns.contains(&name),
            "serving certificate lacks {name}: {dns:?}"
        );
    }
    assert_ne!(serving["spec"]["isCA"], true);
    // serving Certificate -> CA Issuer -> its Secret = the CA Certificate's -> self-signed Issuer.
    let ca_issuer = m.get("Issuer", str_at(serving, "/spec/issuerRef/name"));
    let ca_secret = str_at(ca_issuer, "/spec/ca/secretName");
    let ca_cert = m
        .all("Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == ca_secret)
        .expect("a CA Certificate writes the CA Issuer's Secret");
    assert_eq!(ca_cert["spec"]["isCA"], true);
    let root = m.get("Issuer", str_at(ca_cert, "/spec/issuerRef/name"));
    assert!(root["spec"]["selfSigned"].is_object());
    let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
    assert_eq!(
        str_at(mwc, "/metadata/annotations/cert-manager.io~1inject-ca-from"),
        format!("{NAMESPACE}/{}", str_at(serving, "/metadata/name"))
    );
    assert!(mwc["webhooks"][0]["clientConfig"].get("caBundle").is_none());
}

#[test]
fn external_mode_puts_the_users_ca_into_the_webhook_found_by_name() {
    let Some(m) = mode("external") else { return };
    let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
    let bundle = str_at(&mwc["webhooks"][0], "/clientConfig/caBundle");
    // The apiserver's base64 decoder (Go) skips line breaks; so does this check.
    let compact: String = bundle.chars().filter(|c| !c.is_whitespace()).collect();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .expect("caBundle is base64");
    assert_eq!(
        String::from_utf8(decoded).unwrap(),
        support::TEST_EXTERNAL_CA
    );
    assert!(
        m.all("Secret").is_empty(),
        "the CA helper Secret is local-config, never applied"
    );
    assert!(m.all("Certificate").is_empty() && m.all("Issuer").is_empty());
    assert!(
        mwc["metadata"]["annotations"]
            .get("cert-manager.io/inject-ca-from")
            .is_none()
    );
    let d = m.get("Deployment", WEBHOOK_DEPLOYMENT);
    let volume = arr_at(d, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["secret"].is_object());
    assert_eq!(
        str_at(volume.expect("tls volume"), "/secret/secretName"),
        TLS_SECRET
    );
}

#[test]
fn network_policies_admit_the_apiserver_and_only_the_webhook_reaches_the_scorer() {
    let Some(m) = mode("default") else { return };
    let policies = m.all("NetworkPolicy");
    assert!(
        policies
            .iter()
            .any(|p| p["spec"]["podSelector"] == serde_json::json!({})
                && strings_at(p, "/spec/policyTypes").contains(&"Ingress".to_string())
                && arr_at(p, "/spec/ingress").is_empty()),
        "a default-deny ingress policy"
    );
    let webhook_labels =
        &m.get("Deployment", WEBHOOK_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"];
    let scorer_labels =
        &m.get("Deployment", SCORER_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"];
    let applies_to = |p: &Value, labels: &Value| {
        p["spec"]["podSelector"]["matchLabels"]
            .as_object()
            .is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| labels[k] == *v))
    };
    let ingress_ports = |p: &Value| -> Vec<(i64, bool)> {
        // (port, open to any source)
        arr_at(p, "/spec/ingress")
            .iter()
            .flat_map(|rule| {
                let open = arr_at(rule, "/from").is_empty();
                arr_at(rule, "/ports")
                    .iter()
                    .map(move |pt| (pt["port"].as_i64().unwrap(), open))
            })
            .collect()
    };
    let wp = policies
        .iter()
        .find(|p| applies_to(p, webhook_labels))
        .expect("webhook policy");
    assert!(
        ingress_ports(wp).contains(&(8443, true)),
        "apiserver reaches 8443 from anywhere"
    );
    assert!(
        ingress_ports(wp).contains(&(9092, true)),
        "metrics scrapable"
    );
    let sp = policies
        .iter()
        .find(|p| applies_to(p, scorer_labels))
        .expect("scorer policy");
    let grpc_rules: Vec<_> = arr_at(sp, "/spec/ingress")
        .iter()
        .filter(|r| arr_at(r, "/ports").iter().any(|p| p["port"] == 50051))
        .collect();
    assert_eq!(grpc_rules.len(), 1);
    let from = arr_at(grpc_rules[0], "/from");
    let observer_labels =
        &m.get("Deployment", OBSERVER_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"];
    assert_eq!(
        from.len(),
        2,
        "only the webhook and the observer reach the scorer's gRPC port"
    );
    for (peer, labels) in from.iter().zip([webhook_labels, observer_labels]) {
        for (k, v) in peer["podSelector"]["matchLabels"]
            .as_object()
            .expect("a podSelector")
        {
            assert_eq!(&labels[k], v);
        }
        assert!(peer.get("namespaceSelector").is_none());
    }
    // The observer may dial the scorer and the apiserver; nothing may dial it but scrapers (9093).
    let op = policies
        .iter()
        .find(|p| applies_to(p, observer_labels))
        .expect("observer policy");
    assert_eq!(ingress_ports(op), [(9093, true)]);
    assert!(arr_at(op, "/spec/egress").iter().any(|r| {
        arr_at(r, "/ports").iter().any(|p| p["port"] == 50051)
            && arr_at(r, "/to").iter().any(|t| {
                t["podSelector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|s| s.iter().all(|(k, v)| scorer_labels[k] == *v))
            })
    }));
    // The webhook may dial the scorer.
    assert!(arr_at(wp, "/spec/egress").iter().any(|r| {
        arr_at(r, "/ports").iter().any(|p| p["port"] == 50051)
            && arr_at(r, "/to").iter().any(|t| {
                t["podSelector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|s| s.iter().all(|(k, v)| scorer_labels[k] == *v))
            })
    }));
}

/// The ConfigMap holding the CA of the apiserver's webhook client certificate, which the installer creates.
const CLIENT_CA_CONFIGMAP: &str = "gpu-admission-webhook-client-ca";

/// The CA file the frontend's container holds callers to (`WEBHOOK_CLIENT_CA_FILE`), and the ConfigMap it is
/// mounted from; `None` when the frontend answers any caller.
fn client_ca_of(deployment: &Value) -> Option<(String, String)> {
    let c = &arr_at(deployment, "/spec/template/spec/containers")[0];
    let file = arr_at(c, "/env")
        .iter()
        .find(|e| e["name"] == "WEBHOOK_CLIENT_CA_FILE")
        .map(|e| str_at(e, "/value").to_string());
    assert!(
        arg_value(&args(c), "--client-ca-file").is_none(),
        "set once, by the environment"
    );
    let file = file?;
    let mount = arr_at(c, "/volumeMounts")
        .iter()
        .find(|vm| file.starts_with(&format!("{}/", str_at(vm, "/mountPath"))))
        .unwrap_or_else(|| panic!("{file} is not mounted"));
    let volume = arr_at(deployment, "/spec/template/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_ne!(
        volume["configMap"]["optional"], true,
        "no CA must not mean no check"
    );
    Some((file, str_at(volume, "/configMap/name").to_string()))
}

#[test]
fn only_the_apiserver_reaches_the_webhooks_unless_the_install_opts_out() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        let (file, configmap) = client_ca_of(m.get("Deployment", WEBHOOK_DEPLOYMENT))
            .unwrap_or_else(|| panic!("{}: the frontend runs with --client-ca-file", m.mode));
        assert_eq!(
            file, "/etc/gpu-admission/webhook-client-ca/ca.crt",
            "{}",
            m.mode
        );
        assert_eq!(configmap, CLIENT_CA_CONFIGMAP, "{}", m.mode);
        assert!(
            m.find("ConfigMap", CLIENT_CA_CONFIGMAP).is_none(),
            "{}: the installer's CA, never one shipped here",
            m.mode
        );
    }
    // The opt-out for control planes that cannot present a certificate removes the check and the mount.
    let tmp = tempfile::tempdir().unwrap();
    support::copy_dir(&support::kustomize_dir(), &tmp.path().join("kustomize")).unwrap();
    std::fs::write(
        tmp.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [kustomize]\n\
         components: [kustomize/components/without-client-certificate]\n",
    )
    .unwrap();
    let objects = support::parse_yaml_stream(&support::kustomize(tmp.path()).unwrap()).unwrap();
    let d = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == WEBHOOK_DEPLOYMENT)
        .expect("the frontend's Deployment");
    assert_eq!(client_ca_of(d), None);
    let volumes = arr_at(d, "/spec/template/spec/volumes");
    assert!(
        volumes
            .iter()
            .all(|v| v["configMap"]["name"] != CLIENT_CA_CONFIGMAP),
        "{volumes:?}"
    );
}

/// Every long flag of a service, hidden ones too, from its clap definition.
fn flags_of(command: clap::Command) -> BTreeSet<String> {
    gpu_admission_flags::long_flags(&command)
        .into_iter()
        .map(|(flag, _)| flag)
        .collect()
}

/// The flag names (`--x` of `--x=value`) of a container's args.
fn flag_names(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn deployment_args_are_flags_the_real_binaries_accept() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    use clap::CommandFactory;
    // Every flag, hidden ones too (a Deployment may set a knob `--help` does not show).
    let scorer_flags = flags_of(scorer::cli::Cli::command());
    let webhook_flags = flags_of(webhook_frontend::config::Args::command());
    assert!(scorer_flags.contains("--policy-file") && webhook_flags.contains("--scorer"));
    // The automatic certificate mode is written ahead of its frontend feature (see
    // deploy/kustomize/components/automatic): its flags must come all together, or not yet at all.
    let auto_flags = ["--tls-secret", "--tls-webhook-config"];
    let implemented = auto_flags
        .iter()
        .filter(|f| webhook_flags.contains(**f))
        .count();
    assert!(
        implemented == 0 || implemented == auto_flags.len(),
        "webhook-frontend implements only some of {auto_flags:?}: align the automatic overlay"
    );
    if implemented == 0 {
        println!("PENDING: webhook-frontend has no {auto_flags:?} yet (automatic overlay)");
    }
    for m in modes {
        let sc = container(m.get("Deployment", SCORER_DEPLOYMENT), "scorer");
        for f in flag_names(&args(sc)) {
            assert!(scorer_flags.contains(&f), "{}: scorer has no {f}", m.mode);
        }
        let wc = container(m.get("Deployment", WEBHOOK_DEPLOYMENT), "webhook");
        for f in flag_names(&args(wc)) {
            if implemented == 0 && m.mode == "automatic" && auto_flags.contains(&f.as_str()) {
                continue;
            }
            assert!(
                webhook_flags.contains(&f),
                "{}: webhook-frontend has no {f}",
                m.mode
            );
        }
    }
}

#[test]
fn the_real_scorer_accepts_the_policy_configmap() {
    let Some(m) = mode("default") else { return };
    let cm = m.get("ConfigMap", "gpu-admission-policy");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("default-policy.yaml");
    std::fs::write(&file, str_at(cm, "/data/default-policy.yaml")).unwrap();
    let out = support::run(
        Command::new(gpu_admission_tests::binaries::scorer())
            .arg("--check-policy")
            .arg("--policy-file")
            .arg(&file),
    )
    .expect("scorer --check-policy rejects the ConfigMap's policy");
    println!("scorer --check-policy: {}", out.trim());
}

/// Evaluates a CEL expression with `object` bound to each Pod, using PyPI's cel-python (celpy):
/// the offline check of their logic over every fixture (the real apiserver evaluates them in
/// `cluster_webhooks.rs` and `deploy_apiserver.rs`).
const CEL_EVAL: &str = r#"
import json, sys, celpy
expr, pods = json.load(sys.stdin)
env = celpy.Environment()
prog = env.program(env.compile(expr))
print(json.dumps([bool(prog.evaluate({"object": celpy.json_to_cel(p)})) for p in pods]))
"#;

/// Is a resource sent by the matchConditions: any extended resource outside Kubernetes' own `kubernetes.io`
/// domains (a GPU vendor's, an admin DeviceClass's `extendedResourceName`), and DeviceClass-backed ones?
fn is_sent(r: &str) -> bool {
    r.starts_with(gpu_admission_policy::gpu_resources::DEVICE_CLASS_RESOURCE_PREFIX)
        || r.split_once('/').is_some_and(|(domain, _)| {
            domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io")
        })
}

/// Does the Pod name a sent resource (any quantity) in requests or limits of any (init) container, or carry
/// DRA resource claims?
fn names_a_gpu_resource(pod: &Value) -> bool {
    pod.pointer("/spec/resourceClaims")
        .is_some_and(|c| !c.is_null())
        || ["/spec/containers", "/spec/initContainers"]
            .iter()
            .any(|list| {
                arr_at(pod, list).iter().any(|c| {
                    ["requests", "limits"].iter().any(|k| {
                        c["resources"][k]
                            .as_object()
                            .is_some_and(|m| m.keys().any(|r| is_sent(r)))
                    })
                })
            })
}

/// The CEL of every GPU filter sends every domain of the default `gpuResources` list, DeviceClass-backed
/// resources, any other extended resource (a DeviceClass may name it), and DRA claims.
#[test]
fn match_conditions_send_every_domain_of_the_default_gpu_resources() {
    let Some(m) = mode("default") else { return };
    let rules = gpu_admission_policy::gpu_resources::default_rules();
    for r in rules.iter().filter(|r| {
        !matches!(
            r.kind,
            GpuResourceKind::DraDeviceClass | GpuResourceKind::NotGpu
        )
    }) {
        let domain = r.name.split_once('/').expect("domain/name").0;
        assert!(is_sent(&format!("{domain}/some-gpu")), "{}", r.name);
    }
    assert!(is_sent("example.com/h100") && !is_sent("kubernetes.io/batch") && !is_sent("cpu"));
    let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
    let vwc = m.get("ValidatingWebhookConfiguration", WEBHOOK_CONFIG);
    let expressions = [
        str_at(&mwc["webhooks"][0]["matchConditions"][0], "/expression").to_string(),
        str_at(&vwc["webhooks"][0]["matchConditions"][0], "/expression").to_string(),
        str_at(&vwc["webhooks"][1]["matchConditions"][0], "/expression").to_string(),
    ];
    for expr in &expressions {
        // Every quoted string naming a domain or a domain pattern.
        let named: BTreeSet<&str> = expr
            .split('\'')
            .skip(1)
            .step_by(2)
            .filter(|q| q.contains('/'))
            .collect();
        assert_eq!(
            named,
            BTreeSet::from([
                gpu_admission_policy::gpu_resources::DEVICE_CLASS_RESOURCE_PREFIX,
                "^([^/]*[.])?kubernetes[.]io/",
                "/",
            ]),
            "resource domains in {expr}"
        );
        assert!(expr.contains("resourceClaims"), "DRA claims in {expr}");
    }
}

#[test]
fn match_conditions_send_exactly_the_gpu_pods_of_the_corpus() {
    let Some(m) = mode("default") else { return };
    let python_has_celpy = Command::new("python3")
        .args(["-c", "import celpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_has_celpy {
        gpu_admission_tests::skip::skip(
            "matchConditions on the corpus",
            "python3 cannot import celpy (pip install cel-python, or run bash .ci/run)",
        );
        return;
    }
    let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
    let expr = str_at(&mwc["webhooks"][0]["matchConditions"][0], "/expression");

    let mut pods: Vec<(String, Value)> = Vec::new();
    for file in gpu_admission_tests::corpus::manifest_files().expect("the shared corpus") {
        for p in gpu_admission_tests::corpus::extract_pods(&file) {
            pods.push((p.source, p.pod));
        }
    }
    for r in gpu_admission_tests::corpus::admission_reviews().expect("the shared corpus") {
        let obj = &r.review["request"]["object"];
        if obj["kind"] == "Pod" || obj["spec"]["containers"].is_array() {
            pods.push((r.file.clone(), obj.clone()));
        }
    }
    // Shapes the corpus may lack: Intel and AMD, init containers only, requests only, zero GPUs.
    let extra = [
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"gpu.intel.com/i915": "1"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"requests": {"amd.com/gpu": "2"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c"}]),
            Some(json!([{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}])),
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]),
            None,
        ),
        json_pod(json!([{"name": "c", "resources": {}}]), None),
        json_pod(json!([{"name": "c"}]), Some(json!([{"name": "i"}]))),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"example.com/gpu": "1"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": "20000"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"gpu.intel.com/memory.max": "1Gi"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.gb": "1"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb.shared": "1"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"gpu.intel.com/i915_monitoring": "1"}}}]),
            None,
        ),
        json_pod(
            json!([{"name": "c", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}}}]),
            None,
        ),
    ];
    for (i, p) in extra.into_iter().enumerate() {
        pods.push((format!("synthetic-{i}"), p));
    }
    let input = serde_json::to_vec(&json!([
        expr,
        pods.iter().map(|(_, p)| p).collect::<Vec<_>>()
    ]))
    .unwrap();
    let mut child = Command::new("python3")
        .args(["-c", CEL_EVAL])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "celpy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: Vec<bool> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent.len(), pods.len());
    let mut gpu = 0;
    for ((source, pod), sent) in pods.iter().zip(sent) {
        assert_eq!(
            sent,
            names_a_gpu_resource(pod) || names_a_priority_class(pod),
            "matchConditions on {source}"
        );
        if gpu_admission_tests::gpu::gpu_ask(pod).is_some() {
            assert!(sent, "{source} asks for GPUs but would not be sent");
            gpu += 1;
        }
    }
    println!(
        "matchConditions evaluated on {} Pods ({gpu} asking for GPUs)",
        pods.len()
    );
    assert!(gpu >= 5, "the corpus should hold GPU Pods");
}

/// Evaluates CEL expressions, each with its own bindings (`object`, `params`, `variables`), with celpy.
const CEL_EVAL_BOUND: &str = r#"
import json, sys, celpy
cases = json.load(sys.stdin)
env = celpy.Environment()
out = []
for expr, bindings in cases:
    prog = env.program(env.compile(expr))
    out.append(bool(prog.evaluate({k: celpy.json_to_cel(v) for k, v in bindings.items()})))
print(json.dumps(out))
"#;

/// The floor's DeviceClass CEL in a second interpreter: the Pod policy's match condition (which now also sends
/// a Pod with any extended resource outside `kubernetes.io`) and its `outsideClass` variable, with the
/// parameters the observer writes for an admin class selecting H100 (`example.com/h100`), evaluated by celpy on
/// the corpus's Pods and Pods asking class-backed resources, against the CLI's interpreter (`cel` crate, the
/// floor `gpu-admission check` evaluates) and against the rule stated here.
#[test]
fn the_floors_device_class_cel_agrees_in_celpy() {
    let python_has_celpy = Command::new("python3")
        .args(["-c", "import celpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python_has_celpy {
        gpu_admission_tests::skip::skip(
            "the floor's DeviceClass CEL in celpy",
            "python3 cannot import celpy (pip install cel-python, or run bash .ci/run)",
        );
        return;
    }
    let mut policy = gpu_admission_policy::embedded_default().unwrap();
    policy.enforcement.mode = gpu_admission_policy::EnforcementMode::Enforce;
    let h100: k8s_openapi::api::resource::v1::DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "h100.example.com"},
        "spec": {"extendedResourceName": "example.com/h100", "selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}
    }))
    .unwrap();
    let label = gpu_admission_core::names::DEFAULT_TIER_LABEL;
    let objects = gpu_admission_core::render::floor::render(&policy, label).unwrap();
    let vap = objects
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "gpu-admission-floor-pods"
        })
        .unwrap();
    let matches = str_at(&vap["spec"]["matchConditions"][0], "/expression").to_string();
    let outside = vap["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "outsideClass")
        .map(|v| str_at(v, "/expression").to_string())
        .expect("the outsideClass variable");
    let params = gpu_admission_core::render::floor::params_with_device_classes(
        &policy,
        std::slice::from_ref(&h100),
    )
    .unwrap();
    let floor = gpu_admission_cli::floor::Floor::with_device_classes(&policy, &[h100]).unwrap();

    let mut pods: Vec<Value> = Vec::new();
    for file in gpu_admission_tests::corpus::manifest_files().expect("the shared corpus") {
        pods.extend(
            gpu_admission_tests::corpus::extract_pods(&file)
                .into_iter()
                .map(|p| p.pod),
        );
    }
    let limits = |r: &str, q: &str| {
        json_pod(
            json!([{"name": "c", "resources": {"limits": {r: q}}}]),
            None,
        )
    };
    for (r, q) in [
        ("example.com/h100", "1"),
        ("example.com/h100", "0"),
        ("deviceclass.resource.kubernetes.io/h100.example.com", "2"),
        ("deviceclass.resource.kubernetes.io/l4.example.com", "1"),
        ("example.com/nic", "1"),
        ("hugepages-2Mi", "1Gi"),
        ("kubernetes.io/something", "1"),
        ("foo.kubernetes.io/bar", "1"),
    ] {
        pods.push(limits(r, q));
    }
    pods.push(json_pod(
        json!([{"name": "c"}]),
        Some(json!([{"name": "i", "resources": {"requests": {"example.com/h100": "1"}}}])),
    ));
    let mut cases = Vec::new();
    for pod in &pods {
        cases.push(json!([matches, {"object": pod}]));
        cases.push(json!([outside, {"object": pod, "params": {"data": params},
            "variables": {"scope": "tier.bronze", "spec": pod["spec"]}}]));
    }
    let mut child = Command::new("python3")
        .args(["-c", CEL_EVAL_BOUND])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&cases).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "celpy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<bool> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answers.len(), cases.len());
    let view = gpu_admission_cli::engine::snapshot_of(policy.clone());
    let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
    let asks = |pod: &Value, r: &str| {
        ["containers", "initContainers"].iter().any(|k| {
            pod["spec"][k].as_array().into_iter().flatten().any(|c| {
                ["requests", "limits"]
                    .iter()
                    .any(|m| c["resources"][m][r].as_str().is_some_and(|q| q != "0"))
            })
        })
    };
    let (mut matched, mut denied) = (0, 0);
    for (pod, pair) in pods.iter().zip(answers.chunks(2)) {
        let (celpy_matches, celpy_outside) = (pair[0], pair[1]);
        let expected = asks(pod, "example.com/h100")
            || asks(pod, "deviceclass.resource.kubernetes.io/h100.example.com");
        let mut pod = pod.clone();
        pod["metadata"]["namespace"] = json!("team");
        if expected {
            // Pinned to bronze's L4: only the DeviceClass rule can deny it.
            pod["spec"]["nodeSelector"] = json!({"gpu.nvidia.com/class": "L4-24GB"});
        }
        let rust = floor.pod(&request, &pod, ("team", Some("bronze")), false, &view);
        assert_eq!(
            celpy_matches,
            rust != gpu_admission_cli::floor::FloorAnswer::NotMatched,
            "match condition on {pod}: celpy {celpy_matches}, cel crate {}",
            rust.describe()
        );
        assert_eq!(celpy_outside, expected, "outsideClass on {pod}");
        if expected {
            assert!(
                matches!(&rust, gpu_admission_cli::floor::FloorAnswer::Denied(m) if m.contains("DeviceClass")),
                "{pod}: {}",
                rust.describe()
            );
            denied += 1;
        }
        matched += usize::from(celpy_matches);
    }
    println!(
        "floor DeviceClass CEL: {} Pods in celpy and the cel crate agree; {matched} matched, {denied} denied as \
         outside bronze",
        pods.len()
    );
    assert!(denied >= 3, "the class-backed Pods were not denied");
}

/// Every Pod naming a PriorityClass is sent: its priority is capped at its tier's, GPU or not.
fn names_a_priority_class(pod: &Value) -> bool {
    pod["spec"]["priorityClassName"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
}

fn json_pod(containers: Value, init: Option<Value>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": containers}});
    if let Some(init) = init {
        pod["spec"]["initContainers"] = init;
    }
    pod
}

// ----------------------------------------------------------------------------------------------------------
// The runtime observer and the scorer replicas it keeps converged.

const OBSERVER_LEASE: &str = "gpu-admission-observer";
/// The floor's parameter object (core's `floor::PARAMS_NAME`), which the observer creates and keeps in step.
const FLOOR_PARAMS: &str = "gpu-admission-floor";
const LEARNED_STATE_CONFIGMAP: &str = "gpu-admission-learned-state";

#[test]
fn observer_rbac_grants_exactly_what_it_uses() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    // What the code uses: Api<T> in observer/src (its Lease goes through kube-lease-manager: get + patch);
    // the background audit (observer/src/audit) runs only with the policy-reports component, whose RBAC
    // is checked by `policy_reports_component_grants_exactly_what_the_audit_uses`.
    let sources = support::rust_sources("observer/src");
    let api_types: Vec<&str> = sources
        .iter()
        .filter(|(path, _)| !path.components().any(|c| c.as_os_str() == "audit"))
        .flat_map(|(_, t)| api_type_args(t))
        .collect();
    let used: BTreeSet<&str> = KNOWN_TYPES
        .iter()
        .filter(|(ty, _, _)| api_types.iter().any(|arg| contains_word(arg, ty)))
        .map(|(_, _, r)| *r)
        .collect();
    assert_eq!(
        used,
        BTreeSet::from([
            "configmaps",
            "deviceclasses",
            "floorparameters",
            "gpupolicyexceptions",
            "checkpointbackups",
            "leases",
            "mutatingwebhookconfigurations",
            "namespaces",
            "nodes",
            "pods",
            "resourcequotas"
        ])
    );
    for arg in &api_types {
        let inner = arg.rsplit('<').next().unwrap().trim_end_matches('>').trim();
        let ty = inner.rsplit("::").next().unwrap();
        assert!(
            ty.len() <= 1 || KNOWN_TYPES.iter().any(|(k, _, _)| *k == ty),
            "observer uses Api<{arg}>: add it to KNOWN_TYPES and grant its RBAC"
        );
    }
    let set = |pairs: &[(&str, &str)]| -> BTreeSet<String> {
        pairs.iter().map(|(a, b)| format!("{a}/{b}")).collect()
    };
    for m in modes {
        let d = m.get("Deployment", OBSERVER_DEPLOYMENT);
        // Every scorer replica by the headless Service's absolute name: never through the search path.
        for scorer in args(container(d, "observer"))
            .iter()
            .filter_map(|a| a.strip_prefix("--scorer="))
        {
            let svc = m.get("Service", "gpu-admission-scorer-replicas");
            let expected = format!(
                "http://gpu-admission-scorer-replicas.{}.svc.cluster.local.:50051",
                svc["metadata"]["namespace"].as_str().unwrap()
            );
            assert_eq!(scorer, expected, "{}", m.mode);
        }
        let bound: BTreeSet<(String, String)> =
            roles_bound_to(m, OBSERVER_DEPLOYMENT).into_iter().collect();
        assert_eq!(
            bound,
            BTreeSet::from([
                ("ClusterRole".to_string(), OBSERVER_DEPLOYMENT.to_string()),
                ("Role".to_string(), OBSERVER_DEPLOYMENT.to_string())
            ]),
            "{}",
            m.mode
        );
        // Cluster-wide: read-only Pods, Nodes, the restricted instances' Leases and the registrations that
        // make them count (list + watch, never by name); the CheckpointBackups (list + watch) and, by name, our
        // own registration whose checkpoint-restore condition the leader patches; the GPU ResourceQuotas: list
        // + watch namespaces, list ResourceQuotas, create them, and get, update and delete them only by their
        // one name.
        let cluster_rules = arr_at(m.get("ClusterRole", OBSERVER_DEPLOYMENT), "/rules");
        let mut cluster = rule_set(cluster_rules);
        let is_quota_rule =
            |r: &Value| strings_at(r, "/resources").contains(&"resourcequotas".to_string());
        let quota_rules: BTreeSet<(Vec<String>, Vec<String>, Vec<String>)> = cluster_rules
            .iter()
            .filter(|r| is_quota_rule(r))
            .map(|r| {
                let mut names = strings_at(r, "/resourceNames");
                names.sort();
                (strings_at(r, "/resources"), strings_at(r, "/verbs"), names)
            })
            .collect();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            quota_rules,
            BTreeSet::from([
                (owned(&["resourcequotas"]), owned(&["list"]), Vec::new()),
                (owned(&["resourcequotas"]), owned(&["create"]), Vec::new()),
                (
                    owned(&["resourcequotas"]),
                    owned(&["get", "update", "delete"]),
                    owned(&["gpu-admission-quota"])
                ),
            ]),
            "{}",
            m.mode
        );
        let namespaces = cluster.remove(&(String::new(), "namespaces".to_string()));
        assert_eq!(
            namespaces,
            Some((
                BTreeSet::from(["list".to_string(), "watch".to_string()]),
                BTreeSet::new()
            ))
        );
        cluster.remove(&(String::new(), "resourcequotas".to_string()));
        let keys: Vec<(&str, &str)> = cluster
            .keys()
            .map(|(g, r)| (g.as_str(), r.as_str()))
            .collect();
        assert_eq!(
            set(&keys),
            set(&[
                ("", "nodes"),
                ("", "pods"),
                ("coordination.k8s.io", "leases"),
                ("gpu-admission.io", "gpupolicyexceptions"),
                (
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations"
                ),
                ("resource.k8s.io", "deviceclasses"),
                ("migration.dcnlab.com", "checkpointbackups")
            ]),
            "{}",
            m.mode
        );
        let registration = args(container(d, "observer"))
            .iter()
            .find_map(|a| a.strip_prefix("--checkpoint-registration="))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{}: the observer keeps no checkpoint registration", m.mode));
        let mwc = m.get("MutatingWebhookConfiguration", &registration);
        assert!(
            arr_at(mwc, "/webhooks")
                .iter()
                .any(|w| w["name"] == "checkpoint-restore.gpu-admission.io"),
            "{}",
            m.mode
        );
        for rule in cluster_rules.iter().filter(|r| !is_quota_rule(r)) {
            let resources = strings_at(rule, "/resources");
            let mut verbs = strings_at(rule, "/verbs");
            verbs.sort();
            let names = strings_at(rule, "/resourceNames");
            match resources.as_slice() {
                [r] if r == "checkpointbackups" => {
                    assert_eq!(verbs, ["list", "watch"], "{}", m.mode);
                    assert!(names.is_empty());
                }
                [r] if r == "mutatingwebhookconfigurations" && !names.is_empty() => {
                    assert_eq!(verbs, ["get", "patch"], "{}", m.mode);
                    assert_eq!(names, std::slice::from_ref(&registration), "{}", m.mode);
                }
                _ => {
                    assert_eq!(verbs, ["list", "watch"], "{}: {resources:?}", m.mode);
                    assert!(names.is_empty(), "{}: {resources:?}", m.mode);
                }
            }
        }
        // In our namespace, by name: the Lease (get + patch) and the state ConfigMap (get + update).
        let role = m.get("Role", OBSERVER_DEPLOYMENT);
        assert_eq!(str_at(role, "/metadata/namespace"), NAMESPACE);
        let rules = rule_set(arr_at(role, "/rules"));
        let lease = &rules[&("coordination.k8s.io".to_string(), "leases".to_string())];
        assert_eq!(
            lease.0,
            BTreeSet::from(["get".to_string(), "patch".to_string()])
        );
        assert_eq!(lease.1, BTreeSet::from([OBSERVER_LEASE.to_string()]));
        // ConfigMaps, rule by rule: get + update the learned state by name, list + watch the policy by name (a
        // watch with a metadata.name field selector), never create. The floor's parameters: get + update by
        // name, and create (none is shipped; a deleted one is recreated; RBAC cannot name a create).
        let rules_of = |resource: &str| -> BTreeSet<(Vec<String>, Vec<String>)> {
            arr_at(role, "/rules")
                .iter()
                .filter(|r| strings_at(r, "/resources") == [resource])
                .map(|r| {
                    let mut verbs = strings_at(r, "/verbs");
                    verbs.sort();
                    let mut names = if r.get("resourceNames").is_some() {
                        strings_at(r, "/resourceNames")
                    } else {
                        Vec::new()
                    };
                    names.sort();
                    (verbs, names)
                })
                .collect()
        };
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            rules_of("configmaps"),
            BTreeSet::from([
                (owned(&["get", "update"]), owned(&[LEARNED_STATE_CONFIGMAP])),
                (owned(&["list", "watch"]), owned(&["gpu-admission-policy"])),
            ]),
            "{}",
            m.mode
        );
        assert_eq!(
            rules_of("floorparameters"),
            BTreeSet::from([
                (owned(&["get", "update"]), owned(&[FLOOR_PARAMS])),
                (owned(&["create"]), Vec::new()),
            ]),
            "{}",
            m.mode
        );
        assert_eq!(rules.len(), 3, "{}: nothing else", m.mode);
        // The parameter object is not shipped (its definition is: floor.yaml); the observer creates it.
        m.get(
            "CustomResourceDefinition",
            "floorparameters.gpu-admission.io",
        );
        // Both named objects are shipped (no create needed), and the flags point at them.
        m.get("Lease", OBSERVER_LEASE);
        m.get("ConfigMap", LEARNED_STATE_CONFIGMAP);
        let a = args(container(d, "observer"));
        assert_eq!(arg_value(&a, "--lease").as_deref(), Some(OBSERVER_LEASE));
        assert_eq!(
            arg_value(&a, "--state-configmap").as_deref(),
            Some(LEARNED_STATE_CONFIGMAP)
        );
        assert_eq!(
            arg_value(&a, "--floor-params").as_deref(),
            Some(FLOOR_PARAMS)
        );
        assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2, "{}", m.mode);
    }
}

/// The default install with the policy-reports component, rendered.
fn render_with_policy_reports() -> anyhow::Result<Vec<Value>> {
    let tmp = tempfile::tempdir()?;
    support::copy_dir(&support::kustomize_dir(), &tmp.path().join("kustomize"))?;
    let user = tmp.path().join("user");
    std::fs::create_dir_all(&user)?;
    std::fs::write(
        user.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../kustomize/base\n\
         components:\n  - ../kustomize/components/cert-manager\n  - ../kustomize/components/policy-reports\n",
    )?;
    support::parse_yaml_stream(&support::kustomize(&user)?)
}

/// The policy-reports component: the wgpolicyk8s.io/v1alpha2 CRD, `--policy-reports` on the observer, and
/// a ClusterRole granting exactly what the audit uses: list of what observer/src/audit reads (beyond the
/// base role's Pods and Nodes), list of the workload kinds the shipped ValidatingWebhookConfiguration sends
/// to /validate-pod (the observer's default --audit-resource), and list/create/patch/delete of
/// PolicyReports; a read-only role aggregated to view for tenants.
#[test]
fn policy_reports_component_grants_exactly_what_the_audit_uses() {
    if !support::require_tool("kubectl", "its kustomize renders the install") {
        return;
    }
    let objects = render_with_policy_reports().expect("renders with the policy-reports component");
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let crd = find("CustomResourceDefinition", "policyreports.wgpolicyk8s.io");
    assert_eq!(str_at(crd, "/spec/group"), "wgpolicyk8s.io");
    assert_eq!(str_at(crd, "/spec/scope"), "Namespaced");
    let versions = arr_at(crd, "/spec/versions");
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha2");
    assert_eq!(
        (&versions[0]["served"], &versions[0]["storage"]),
        (&json!(true), &json!(true))
    );
    let result =
        &versions[0]["schema"]["openAPIV3Schema"]["properties"]["results"]["items"]["properties"];
    for field in [
        "source",
        "policy",
        "rule",
        "result",
        "message",
        "resources",
        "properties",
        "timestamp",
        "scored",
    ] {
        assert!(
            result.get(field).is_some(),
            "results[].{field} in the schema"
        );
    }
    assert_eq!(
        result["result"]["enum"],
        json!(["pass", "fail", "warn", "error", "skip"])
    );

    let observer = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == OBSERVER_DEPLOYMENT)
        .unwrap();
    let observer_args = args(container(observer, "observer"));
    assert!(observer_args.contains(&"--policy-reports".to_string()));
    let flags = flags_of(<observer::cli::Cli as clap::CommandFactory>::command());
    for f in flag_names(&observer_args) {
        assert!(flags.contains(&f), "observer has no {f}");
    }

    // What the audit watches through typed APIs (list + watch: its stores), beyond the base role's Pods,
    // Nodes and GpuPolicyExceptions.
    let sources = support::rust_sources("observer/src/audit");
    let api_types: Vec<&str> = sources.iter().flat_map(|(_, t)| api_type_args(t)).collect();
    let watched = || BTreeSet::from(["list".to_string(), "watch".to_string()]);
    let mut expected: BTreeMap<(String, String), BTreeSet<String>> = KNOWN_TYPES
        .iter()
        .filter(|(ty, _, _)| api_types.iter().any(|arg| contains_word(arg, ty)))
        .filter(|(_, _, r)| !matches!(*r, "pods" | "nodes" | "gpupolicyexceptions"))
        .map(|(_, g, r)| ((g.to_string(), r.to_string()), watched()))
        .collect();
    // The workload kinds /validate-pod is sent, which the audit watches dynamically.
    let vwc = find("ValidatingWebhookConfiguration", WEBHOOK_CONFIG);
    let workloads = arr_at(vwc, "/webhooks")
        .iter()
        .find(|w| w["name"] == "workloads.validate.gpu-admission.io")
        .unwrap();
    let mut sent = Vec::new();
    for rule in arr_at(workloads, "/rules") {
        for g in strings_at(rule, "/apiGroups") {
            for r in strings_at(rule, "/resources") {
                sent.push(format!("{g}/{r}"));
                expected.insert((g.clone(), r), watched());
            }
        }
    }
    let cli = std::fs::read_to_string(support::repo_root().join("observer/src/cli.rs")).unwrap();
    let default = cli
        .split("long = \"audit-resource\"")
        .nth(1)
        .and_then(|rest| rest.split("default_value = \"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("the observer's --audit-resource default");
    let mut defaults: Vec<&str> = default.split(',').collect();
    defaults.sort();
    sent.sort();
    assert_eq!(
        defaults, sent,
        "the audit watches what /validate-pod is sent"
    );
    expected.insert(
        ("wgpolicyk8s.io".into(), "policyreports".into()),
        ["list", "watch", "create", "patch", "delete"]
            .map(String::from)
            .into(),
    );
    let role = find("ClusterRole", "gpu-admission-observer-policy-reports");
    let granted: BTreeMap<(String, String), BTreeSet<String>> = rule_set(arr_at(role, "/rules"))
        .into_iter()
        .map(|(k, (verbs, names))| {
            assert!(names.is_empty(), "{k:?}: not limited by name");
            (k, verbs)
        })
        .collect();
    assert_eq!(granted, expected);
    let binding = find(
        "ClusterRoleBinding",
        "gpu-admission-observer-policy-reports",
    );
    assert_eq!(
        str_at(binding, "/roleRef/name"),
        "gpu-admission-observer-policy-reports"
    );
    assert_eq!(str_at(binding, "/subjects/0/name"), OBSERVER_DEPLOYMENT);
    assert_eq!(str_at(binding, "/subjects/0/namespace"), NAMESPACE);

    let view = find("ClusterRole", "gpu-admission-policyreports-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    let read = rule_set(arr_at(view, "/rules"));
    assert_eq!(
        read.keys().cloned().collect::<Vec<_>>(),
        [("wgpolicyk8s.io".to_string(), "policyreports".to_string())]
    );
    assert!(read.values().all(|(v, _)| {
        v.iter()
            .all(|v| matches!(v.as_str(), "get" | "list" | "watch"))
    }));
}

#[test]
fn the_observer_finds_every_ready_scorer_replica_through_a_headless_service() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        let scorer = m.get("Deployment", SCORER_DEPLOYMENT);
        assert!(
            scorer["spec"]["replicas"].as_i64().unwrap() >= 2,
            "{}",
            m.mode
        );
        let pod_labels = &scorer["spec"]["template"]["metadata"]["labels"];
        let pdb = m.get("PodDisruptionBudget", SCORER_DEPLOYMENT);
        assert!(pdb["spec"]["minAvailable"].as_i64().unwrap() >= 1);
        for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&pod_labels[k], v, "PDB selects the scorer Pods");
        }

        let d = m.get("Deployment", OBSERVER_DEPLOYMENT);
        let c = container(d, "observer");
        let a = args(c);
        let url = arg_value(&a, "--scorer").expect("observer --scorer");
        let host_port = url.strip_prefix("http://").expect("plain-text gRPC");
        let (host, port) = host_port.split_once(':').unwrap();
        let mut labels = host.split('.');
        let svc = m.get("Service", labels.next().unwrap());
        assert_eq!(
            labels.next(),
            Some(NAMESPACE),
            "{host}: the namespace is named"
        );
        assert_eq!(
            svc["spec"]["clusterIP"], "None",
            "headless: one address per Pod"
        );
        assert_ne!(svc["spec"]["publishNotReadyAddresses"], true);
        assert!(selects(svc, scorer));
        let svc_port = arr_at(svc, "/spec/ports")
            .iter()
            .find(|p| p["port"].as_i64() == Some(port.parse().unwrap()))
            .expect("the headless Service has the --scorer port");
        let sc = container(scorer, "scorer");
        assert_eq!(
            resolve_target_port(&svc_port["targetPort"], sc),
            port_of_listen(&arg_value(&args(sc), "--listen").unwrap())
        );
        // Its identity in the Lease is its Pod name; its namespace the Pod's.
        let env = arr_at(c, "/env");
        let field = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .map(|e| str_at(e, "/valueFrom/fieldRef/fieldPath").to_string())
        };
        assert_eq!(field("OBSERVER_IDENTITY").as_deref(), Some("metadata.name"));
        assert_eq!(
            field("OBSERVER_NAMESPACE").as_deref(),
            Some("metadata.namespace")
        );
        let admin = arg_value(&a, "--admin-listen").expect("observer --admin-listen");
        assert_eq!(port_of_listen(&admin), 9093);
        assert_eq!(
            resolve_target_port(&c["livenessProbe"]["httpGet"]["port"], c),
            9093
        );
    }
}

#[test]
fn observer_args_are_flags_the_real_binary_accepts() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    let flags = flags_of(<observer::cli::Cli as clap::CommandFactory>::command());
    assert!(flags.contains("--scorer") && flags.contains("--lease"));
    for m in modes {
        let c = container(m.get("Deployment", OBSERVER_DEPLOYMENT), "observer");
        for f in flag_names(&args(c)) {
            assert!(flags.contains(&f), "{}: observer has no {f}", m.mode);
        }
    }
}

/// The validating webhooks: registered in every mode with their CA, fail-open, only tier namespaces for
/// Pods and workloads (the same GPU filter as the mutating webhook for Pods), the policy ConfigMap of our
/// namespace for `/validate-policy` (by namespace and name: no label selector a user could step out of),
/// every Namespace for `/validate-namespace`.
#[test]
fn validating_webhooks_are_selective_and_trusted_in_every_mode() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        let vwc = m.get("ValidatingWebhookConfiguration", WEBHOOK_CONFIG);
        let mwc = m.get("MutatingWebhookConfiguration", WEBHOOK_CONFIG);
        let hooks = arr_at(vwc, "/webhooks");
        let by_name = |n: &str| {
            hooks
                .iter()
                .find(|h| h["name"] == n)
                .unwrap_or_else(|| panic!("{}: webhook {n} missing", m.mode))
        };
        let pods = by_name("pods.validate.gpu-admission.io");
        let workloads = by_name("workloads.validate.gpu-admission.io");
        let policy = by_name("policy.validate.gpu-admission.io");
        let namespaces = by_name("namespaces.validate.gpu-admission.io");
        let claims = by_name("claims.validate.gpu-admission.io");
        let exceptions = by_name("exceptions.validate.gpu-admission.io");
        assert_eq!(hooks.len(), 6, "{}", m.mode);
        // `/validate-policy` gets the ConfigMaps of the policy's namespace but the learned state (rewritten
        // all the time), never a condition naming the policy: a policy ConfigMap renamed with
        // `--policy-configmap` stays validated.
        let (policy_ns, policy_name) = gpu_admission_flags::DEFAULT_POLICY_CONFIGMAP
            .split_once('/')
            .unwrap();
        assert_eq!(
            policy["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            policy_ns
        );
        let left_out = str_at(&policy["matchConditions"][0], "/expression");
        assert!(
            left_out.ends_with(&format!("!= '{LEARNED_STATE_CONFIGMAP}'"))
                && !left_out.contains(policy_name),
            "{left_out}"
        );
        // Who may relax the rules fails closed: no exception is created while no frontend answers.
        assert_eq!(
            exceptions["clientConfig"]["service"]["path"],
            "/validate-exception"
        );
        assert_eq!(exceptions["failurePolicy"], "Fail", "{}", m.mode);
        assert_eq!(
            strings_at(&exceptions["rules"][0], "/resources"),
            ["gpupolicyexceptions"]
        );
        assert_eq!(
            strings_at(&claims["rules"][0], "/resources"),
            ["resourceclaims", "resourceclaimtemplates"]
        );
        for (hook, path) in [
            (pods, "/validate-pod"),
            (workloads, "/validate-pod"),
            (claims, "/validate-pod"),
            (policy, "/validate-policy"),
            (namespaces, "/validate-namespace"),
        ] {
            assert_eq!(hook["clientConfig"]["service"]["path"], path);
            assert_eq!(
                hook["clientConfig"]["service"],
                json!(mwc["webhooks"][0]["clientConfig"]["service"])
                    .as_object()
                    .map(|s| {
                        let mut s = s.clone();
                        s.insert("path".into(), json!(path));
                        Value::Object(s)
                    })
                    .unwrap()
            );
            assert_eq!(hook["failurePolicy"], "Ignore", "{}", m.mode);
            assert_eq!(hook["sideEffects"], "None");
            // Every mode gets the CA to the validating webhooks the way it does to the mutating one.
            assert_eq!(
                hook["clientConfig"].get("caBundle"),
                mwc["webhooks"][0]["clientConfig"].get("caBundle"),
                "{}",
                m.mode
            );
            for op in strings_at(&hook["rules"][0], "/operations") {
                // The policy ConfigMap's deletion is the admins' too.
                let delete = path == "/validate-policy" && op == "DELETE";
                assert!(op == "CREATE" || op == "UPDATE" || delete, "{op}");
            }
        }
        assert_eq!(
            vwc["metadata"]["annotations"].get("cert-manager.io/inject-ca-from"),
            mwc["metadata"]["annotations"].get("cert-manager.io/inject-ca-from"),
            "{}",
            m.mode
        );
        assert_eq!(
            pods["namespaceSelector"],
            mwc["webhooks"][0]["namespaceSelector"]
        );
        assert_eq!(
            workloads["namespaceSelector"],
            mwc["webhooks"][0]["namespaceSelector"]
        );
        // The mutating webhook's filter, and an UPDATE only when it changes what is validated.
        let conditions = arr_at(pods, "/matchConditions");
        assert_eq!(conditions.len(), 2, "{}", m.mode);
        assert_eq!(
            conditions[0], mwc["webhooks"][0]["matchConditions"][0],
            "{}",
            m.mode
        );
        let update = str_at(&conditions[1], "/expression");
        for field in ["spec", "metadata.labels", "metadata.annotations"] {
            assert!(
                update.contains(&format!("object.{field} != "))
                    || update.contains(&format!("object.{field} : {{}}) !=")),
                "{field} in {update}"
            );
        }
        let kinds: BTreeSet<String> = arr_at(workloads, "/rules")
            .iter()
            .flat_map(|r| strings_at(r, "/resources"))
            .collect();
        for k in [
            "jobs",
            "cronjobs",
            "deployments",
            "statefulsets",
            "daemonsets",
            "replicasets",
        ] {
            assert!(kinds.contains(k), "{}: {k} not validated", m.mode);
        }
        // The one policy ConfigMap: our namespace, and labels the ConfigMap really carries.
        assert_eq!(
            strings_at(&policy["rules"][0], "/resources"),
            ["configmaps"]
        );
        assert_eq!(
            policy["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            NAMESPACE
        );
        m.get("ConfigMap", "gpu-admission-policy");
        assert!(policy.get("objectSelector").is_none(), "{}", m.mode);
        assert_eq!(
            strings_at(&namespaces["rules"][0], "/resources"),
            gpu_admission_core::admission::validate_namespace::NAMESPACE_RESOURCES
        );
        assert!(namespaces.get("namespaceSelector").is_none(), "{}", m.mode);
        assert!(namespaces.get("objectSelector").is_none(), "{}", m.mode);
    }
}
