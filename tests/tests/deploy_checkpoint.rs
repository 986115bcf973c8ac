//! Checkpoint restore in `deploy/kustomize`, rendered offline: the second webhook entry of every install
//! mode (route, selectors, fail-open, its caBundle in every certificate mode), and the optional
//! `components/checkpoint-restore` CRD (it renders with the default install, passes strict schema
//! validation, names exactly the API the frontend's code watches, and no mode includes it by default).
//! The CRD itself is installed into a real kube-apiserver by `cluster_checkpoint.rs`.
//!
//! Needs `kubectl` (its kustomize) and, for the schema check, PyPI's `kubernetes-validate`.

#[path = "deploy_support/mod.rs"]
mod support;

use std::process::Command;

use base64::Engine as _;
use serde_json::Value;
use support::{NAMESPACE, arr_at, str_at, strings_at};

const HOOK: &str = "checkpoint-restore.gpu-admission.io";
const ROUTE: &str = "/mutate-pod-checkpoint";
/// The CheckpointBackup type the frontend watches and the restore reads.
const CODE: &str = "core/src/admission/checkpoint_restore/backup.rs";
const COMPONENT: &str = "components/checkpoint-restore";

fn checkpoint_hook(m: &support::Rendered) -> &Value {
    arr_at(
        m.get("MutatingWebhookConfiguration", "gpu-admission"),
        "/webhooks",
    )
    .iter()
    .find(|h| h["name"] == HOOK)
    .unwrap_or_else(|| panic!("{}: no webhook {HOOK}", m.mode))
}

#[test]
fn every_mode_registers_the_checkpoint_webhook_fail_open_for_job_pods() {
    let Some(modes) = support::rendered_modes() else {
        return;
    };
    for m in modes {
        let hook = checkpoint_hook(m);
        assert_eq!(str_at(hook, "/clientConfig/service/path"), ROUTE);
        assert_eq!(hook["failurePolicy"], "Ignore", "{}", m.mode);
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["reinvocationPolicy"], "Never");
        assert_eq!(strings_at(hook, "/admissionReviewVersions"), ["v1"]);
        let timeout = hook["timeoutSeconds"].as_i64().expect("timeoutSeconds");
        assert!((1..=3).contains(&timeout), "timeoutSeconds {timeout}");
        let rules = arr_at(hook, "/rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(strings_at(&rules[0], "/operations"), ["CREATE"]);
        assert_eq!(strings_at(&rules[0], "/resources"), ["pods"]);
        assert_eq!(strings_at(&rules[0], "/apiGroups"), [""]);
        // Any Pod the job controller made (`job-name`, set by every version since 1.0), GPU or not, in any
        // namespace but the system's and ours; no tier needed, no GPU filter.
        let sel = arr_at(hook, "/objectSelector/matchExpressions");
        assert_eq!(sel.len(), 1, "{sel:?}");
        assert_eq!(
            (sel[0]["key"].as_str(), sel[0]["operator"].as_str()),
            (Some("job-name"), Some("Exists"))
        );
        assert!(hook.get("matchConditions").is_none());
        let ns = arr_at(hook, "/namespaceSelector/matchExpressions");
        assert_eq!(ns.len(), 1, "{ns:?}");
        assert_eq!(ns[0]["operator"], "NotIn");
        assert_eq!(
            strings_at(&ns[0], "/values"),
            ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]
        );

        // The caBundle, per certificate mode.
        let mwc = m.get("MutatingWebhookConfiguration", "gpu-admission");
        match m.mode.as_str() {
            // cert-manager's cainjector writes every webhook of an annotated configuration.
            "default" | "observability" => {
                assert!(
                    mwc["metadata"]["annotations"]
                        .get("cert-manager.io/inject-ca-from")
                        .is_some()
                );
                assert!(hook["clientConfig"].get("caBundle").is_none());
            }
            "external" => {
                let b = str_at(hook, "/clientConfig/caBundle");
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(b.split_whitespace().collect::<String>())
                    .unwrap();
                assert_eq!(String::from_utf8(pem).unwrap(), support::TEST_EXTERNAL_CA);
            }
            // The frontend patches the caBundle of every entry of the configuration it is given (by name;
            // shown with two entries against a real apiserver in deploy_auto_tls.rs).
            "automatic" => {
                let d = m.get("Deployment", "gpu-admission-webhook");
                let args = strings_at(&d["spec"]["template"]["spec"]["containers"][0], "/args");
                assert!(args.contains(&"--tls-webhook-config=gpu-admission".to_string()));
            }
            other => println!("{other}: caBundle not checked"),
        }
        // The optional CRD is not part of any install mode (the base ships only gpu-admission.io's own).
        let crds = m.all("CustomResourceDefinition");
        assert!(
            crds.iter()
                .all(|c| c["spec"]["group"] == "gpu-admission.io"),
            "{}",
            m.mode
        );
    }
}

/// The code's constant `name` (`pub const NAME: &str = "...";`).
fn code_const(text: &str, name: &str) -> String {
    let needle = format!("pub const {name}: &str = \"");
    let start = text
        .find(&needle)
        .unwrap_or_else(|| panic!("{name} not in {CODE}"))
        + needle.len();
    text[start..start + text[start..].find('"').unwrap()].to_string()
}

#[test]
fn the_optional_crd_component_is_the_api_the_frontend_watches() {
    if !support::require_tool("kubectl", "its kustomize renders the install") {
        return;
    }
    // The default install plus the component, as a user's own kustomization would add it.
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("kustomize");
    support::copy_dir(&support::kustomize_dir(), &tree).unwrap();
    let user = tmp.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../kustomize/base\n\
             components:\n  - ../kustomize/components/cert-manager\n  - ../kustomize/{COMPONENT}\n"
        ),
    )
    .unwrap();
    let yaml = support::kustomize(&user).expect("default install + checkpoint-restore renders");
    let objects = support::parse_yaml_stream(&yaml).unwrap();
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter(|o| o["spec"]["group"] != "gpu-admission.io")
        .collect();
    assert_eq!(crds.len(), 1);
    let crd = crds[0];

    let code = std::fs::read_to_string(support::repo_root().join(CODE)).unwrap();
    let (group, version, kind, plural) = (
        code_const(&code, "GROUP"),
        code_const(&code, "VERSION"),
        code_const(&code, "KIND"),
        code_const(&code, "PLURAL"),
    );
    assert_eq!(str_at(crd, "/apiVersion"), "apiextensions.k8s.io/v1");
    assert_eq!(str_at(crd, "/metadata/name"), format!("{plural}.{group}"));
    assert_eq!(str_at(crd, "/spec/group"), group);
    assert_eq!(str_at(crd, "/spec/scope"), "Namespaced");
    assert_eq!(str_at(crd, "/spec/names/kind"), kind);
    assert_eq!(str_at(crd, "/spec/names/plural"), plural);
    let versions = arr_at(crd, "/spec/versions");
    assert_eq!(versions.len(), 1);
    let v = &versions[0];
    assert_eq!(str_at(v, "/name"), version);
    assert_eq!(
        (v["served"].as_bool(), v["storage"].as_bool()),
        (Some(true), Some(true))
    );
    assert!(
        v["subresources"]["status"].is_object(),
        "status subresource"
    );
    // The fields the frontend reads are typed; the operator's others are kept.
    let schema = &v["schema"]["openAPIV3Schema"]["properties"];
    for (path, ty) in [
        (
            "/spec/properties/resourceRef/properties/apiVersion/type",
            "string",
        ),
        (
            "/spec/properties/resourceRef/properties/kind/type",
            "string",
        ),
        (
            "/spec/properties/resourceRef/properties/namespace/type",
            "string",
        ),
        (
            "/spec/properties/resourceRef/properties/name/type",
            "string",
        ),
        (
            "/spec/properties/containers/items/properties/name/type",
            "string",
        ),
        (
            "/spec/properties/containers/items/properties/image/type",
            "string",
        ),
        (
            "/status/properties/builtImages/items/properties/containerName/type",
            "string",
        ),
        (
            "/status/properties/builtImages/items/properties/imageName/type",
            "string",
        ),
        (
            "/status/properties/builtImages/items/properties/buildTime/type",
            "string",
        ),
        (
            "/status/properties/builtImages/items/properties/pushed/type",
            "boolean",
        ),
    ] {
        assert_eq!(str_at(schema, path), ty, "{path}");
    }
    for path in ["/spec", "/status"] {
        assert_eq!(
            schema.pointer(path).unwrap()["x-kubernetes-preserve-unknown-fields"],
            true,
            "{path}"
        );
    }
    // Everything the frontend deserializes from a backup is spelled as in the schema.
    for field in [
        "resourceRef",
        "builtImages",
        "containerName",
        "imageName",
        "buildTime",
    ] {
        assert!(
            code.contains(&format!("pub {}", snake(field))),
            "{field} not read by {CODE}"
        );
    }

    if !support::require_tool("kubernetes-validate", "pip install kubernetes-validate") {
        return;
    }
    let file = tmp.path().join("crd.yaml");
    std::fs::write(&file, serde_yaml::to_string(crd).unwrap()).unwrap();
    for version in ["1.28.0", "1.33.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "-k", version])
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains(" passed for resource "),
            "{version}:\n{text}"
        );
    }
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
