//! A real control plane on loopback for the real-cluster tier: etcd + kube-apiserver (Kubernetes 1.37.2 by
//! default, `GPU_ADMISSION_K8S_VERSION` for another, 1.34 the oldest supported), and on request kube-scheduler,
//! kube-controller-manager and kwok playing the kubelet of fake Nodes. Started by `tests/cluster/start.sh`
//! in a temp RUN_DIR on free ports and stopped on drop.
//!
//! - [`control_plane_bin`] runs `tests/cluster/build.sh` (cached → instant; cold ≈ 17 min). When the machine
//!   cannot build it: a failure when env `CI` is set, else a SKIP (`Ok(None)`);
//! - [`LocalCluster::start`] (etcd + apiserver: Pods stay Pending) or [`LocalCluster::start_with`]
//!   ([`Components`]) → kubeconfig + a `kube::Client`;
//! - helpers to create tier-labelled namespaces, the PriorityClasses of the scorer's policy, and to register
//!   a webhook by URL (`clientConfig.url`, never a Service) as a MutatingWebhookConfiguration
//!   (admissionregistration.k8s.io/v1, failurePolicy Ignore, sideEffects None, timeoutSeconds 5,
//!   namespaceSelector on the tier label).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use base64::Engine as _;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_policy::Bucket;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::names::TIER_LABEL;
use crate::ports::ClaimedPorts;

fn cluster_scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster")
}

/// The folder holding the control plane's binaries, building them if needed (`GPU_ADMISSION_K8S_BIN` names
/// a prebuilt one). `Ok(None)` = skip (not in CI, cannot build here).
pub fn control_plane_bin() -> anyhow::Result<Option<PathBuf>> {
    crate::built_by_script::run(&crate::built_by_script::Script {
        prebuilt_env: "GPU_ADMISSION_K8S_BIN",
        script: "tests/cluster/build.sh",
        what: "the control plane",
        suite: "the real-cluster tier",
        built: |dir| dir.join("kube-apiserver").is_file(),
    })
}

/// What runs beside etcd and kube-apiserver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Components {
    /// kube-scheduler: binds Pods (DRA allocation included).
    pub scheduler: bool,
    /// kube-controller-manager: every controller (Jobs, CronJobs, garbage collection, node lifecycle, …).
    pub controller_manager: bool,
    /// kwok: keeps the Nodes annotated `kwok.x-k8s.io/node=fake` Ready and runs their Pods.
    pub kwok: bool,
    /// The workload API (Kubernetes 1.37+, beta, off by default): `scheduling.k8s.io/v1beta1` Workloads and
    /// PodGroups served, the `GenericWorkload` and `DRAWorkloadResourceClaims` gates on every component.
    /// Ignored by a Kubernetes without it.
    pub workload_api: bool,
}

impl Components {
    /// etcd + kube-apiserver only: Pods stay Pending.
    pub const APISERVER: Self = Self {
        scheduler: false,
        controller_manager: false,
        kwok: false,
        workload_api: false,
    };
    /// Scheduler, controllers and kwok: a cluster whose Pods are scheduled, run and finish.
    pub const ALL: Self = Self {
        scheduler: true,
        controller_manager: true,
        kwok: true,
        workload_api: false,
    };

    fn args(self) -> Vec<&'static str> {
        [
            (self.scheduler, "scheduler"),
            (self.controller_manager, "controller-manager"),
            (self.kwok, "kwok"),
            (self.workload_api, "workload-api"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// The loopback ports `start.sh` takes from `GPU_ADMISSION_CLUSTER_PORTS`.
const START_SH_PORTS: usize = 7;

/// etcd + kube-apiserver (and the [`Components`] asked for) in a temp RUN_DIR. Stopped (and the dir removed)
/// on drop.
pub struct LocalCluster {
    run_dir: tempfile::TempDir,
    _claimed: ClaimedPorts,
    kubeconfig: PathBuf,
    client: kube::Client,
}

impl LocalCluster {
    /// Builds (or finds) the control plane and starts etcd + kube-apiserver. `Ok(None)` = skipped (see
    /// [`control_plane_bin`]).
    pub async fn start() -> anyhow::Result<Option<Self>> {
        Self::start_with(Components::APISERVER).await
    }

    /// [`LocalCluster::start`], with `components` beside the apiserver.
    pub async fn start_with(components: Components) -> anyhow::Result<Option<Self>> {
        Self::start_configured(components, None).await
    }

    /// [`LocalCluster::start_with`], the apiserver loading the manifest-based admission policies of
    /// `static_dir` at its start (`static_dir/validating`, `static_dir/mutating`: the layout of
    /// `gpu-admission floor render --static`).
    pub async fn start_with_static_policies(
        components: Components,
        static_dir: &Path,
    ) -> anyhow::Result<Option<Self>> {
        Self::start_configured(components, Some(static_dir)).await
    }

    async fn start_configured(
        components: Components,
        static_dir: Option<&Path>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(bin) = control_plane_bin()? else {
            return Ok(None);
        };
        let run_dir = tempfile::Builder::new()
            .prefix("gpu-adm-cluster-")
            .tempdir()?;
        let claimed = ClaimedPorts::claim(START_SH_PORTS)?;
        let ports: Vec<String> = claimed.ports().iter().map(u16::to_string).collect();
        let script = cluster_scripts().join("start.sh");
        let mut command = tokio::process::Command::new("bash");
        command
            .arg(&script)
            .arg(run_dir.path())
            .args(components.args())
            .env("GPU_ADMISSION_K8S_BIN", &bin)
            .env("GPU_ADMISSION_CLUSTER_PORTS", ports.join(" "));
        if let Some(dir) = static_dir {
            command.env("STATIC_ADMISSION_DIR", dir);
        }
        let out = command.output().await.context("running start.sh")?;
        if !out.status.success() {
            bail!(
                "start.sh failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let kubeconfig = run_dir.path().join("kubeconfig");
        let client = client_for(&kubeconfig).await?;
        install_quota_ledgers(&kubeconfig)?;
        Ok(Some(Self {
            run_dir,
            _claimed: claimed,
            kubeconfig,
            client,
        }))
    }

    /// The admin kubeconfig (pass it as `KUBECONFIG`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The RUN_DIR (logs: apiserver.log, etcd.log, scheduler.log, controller-manager.log, kwok.log).
    pub fn run_dir(&self) -> &Path {
        self.run_dir.path()
    }

    /// An admin client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The last `n` lines of the apiserver log.
    pub fn apiserver_log_tail(&self, n: usize) -> String {
        self.log_tail("apiserver", n)
    }

    /// The last `n` lines of a component's log (`apiserver`, `etcd`, `scheduler`, `controller-manager`,
    /// `kwok`).
    pub fn log_tail(&self, component: &str, n: usize) -> String {
        let log = std::fs::read_to_string(self.run_dir.path().join(format!("{component}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Creates a namespace, labelled `tenant.kubenexus.io/tier=TIER` when `tier` is given.
    /// Lets `user` do anything with the built-in API groups Pods, workloads, ConfigMaps, Namespaces and
    /// PriorityClasses live in, and nothing with gpu-admission.io: the apiserver's RBAC never stops the
    /// user's requests, and none of the product's powers (set a tier, change the rules, run outside a tier)
    /// is held, so only our webhooks decide.
    pub async fn bind_tenant(&self, user: &str) -> anyhow::Result<()> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let role: ClusterRole = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "e2e-tenant-everything"},
            "rules": [{"apiGroups": ["", "apps", "batch", "scheduling.k8s.io", "resource.k8s.io", "kueue.x-k8s.io"],
                       "resources": ["*"], "verbs": ["*"]}]
        }))?;
        let roles = Api::<ClusterRole>::all(self.client());
        if roles.get_opt("e2e-tenant-everything").await?.is_none() {
            roles.create(&PostParams::default(), &role).await?;
        }
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("e2e-tenant-{}", user.replace(':', "-"))},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-tenant-everything"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        }))?;
        Api::<ClusterRoleBinding>::all(self.client())
            .create(&PostParams::default(), &binding)
            .await
            .context("binding the tenant")?;
        Ok(())
    }

    pub async fn create_namespace(&self, name: &str, tier: Option<&str>) -> anyhow::Result<()> {
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        if let Some(t) = tier {
            ns["metadata"]["labels"] = json!({TIER_LABEL: t});
        }
        let ns: Namespace = serde_json::from_value(ns)?;
        Api::<Namespace>::all(self.client())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(())
    }

    /// Creates the PriorityClasses of the policy's buckets (name, value, preemption policy).
    pub async fn create_priority_classes(
        &self,
        policy: &PolicySnapshot,
    ) -> anyhow::Result<Vec<String>> {
        let buckets = policy
            .policy
            .as_ref()
            .map_or(&[][..], |p| &p.priority.buckets);
        self.create_buckets(buckets).await
    }

    /// Creates the PriorityClasses of `buckets` (name, value, preemption policy).
    pub async fn create_buckets(&self, buckets: &[Bucket]) -> anyhow::Result<Vec<String>> {
        let api = Api::<PriorityClass>::all(self.client());
        let mut names = Vec::new();
        for pc in buckets {
            let mut obj = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": pc.name}, "value": pc.value, "globalDefault": false,
                "description": format!("gpu-admission bucket >= {}", pc.min_score)});
            if !pc.preemption_policy.is_empty() {
                obj["preemptionPolicy"] = json!(pc.preemption_policy);
            }
            api.create(&PostParams::default(), &serde_json::from_value(obj)?)
                .await
                .with_context(|| format!("creating PriorityClass {}", pc.name))?;
            names.push(pc.name.clone());
        }
        Ok(names)
    }

    /// Registers (or replaces) the shipped Pod webhooks of `webhook` under `name`: `/mutate-pod`
    /// (`pods.gpu-admission.io`) and `/validate-pod` (`pods.validate.gpu-admission.io`), as
    /// [`shipped_registration`] points them.
    pub async fn register_shipped_pod_webhooks(
        &self,
        webhook: &crate::Webhook,
        name: &str,
    ) -> anyhow::Result<()> {
        use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
        let mutating: MutatingWebhookConfiguration = serde_json::from_value(shipped_registration(
            "mutatingwebhookconfiguration.yaml",
            webhook,
            &["pods.gpu-admission.io"],
            name,
        )?)?;
        let validating: ValidatingWebhookConfiguration =
            serde_json::from_value(shipped_registration(
                "validatingwebhookconfiguration.yaml",
                webhook,
                &["pods.validate.gpu-admission.io"],
                name,
            )?)?;
        let m = Api::<MutatingWebhookConfiguration>::all(self.client());
        let v = Api::<ValidatingWebhookConfiguration>::all(self.client());
        let _ = m.delete(name, &DeleteParams::default()).await;
        let _ = v.delete(name, &DeleteParams::default()).await;
        m.create(&PostParams::default(), &mutating).await?;
        v.create(&PostParams::default(), &validating).await?;
        Ok(())
    }

    /// Registers (or replaces) a MutatingWebhookConfiguration `name` calling `url` with `ca_pem` as the
    /// caBundle, for CREATE of v1 Pods in namespaces carrying the tier label.
    pub async fn register_webhook(
        &self,
        name: &str,
        url: &str,
        ca_pem: &[u8],
    ) -> anyhow::Result<()> {
        let mwc = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "pods.gpu-admission.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": TIER_LABEL, "operator": "Exists"}]},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "Never"
            }]
        });
        let mwc: MutatingWebhookConfiguration = serde_json::from_value(mwc)?;
        let api = Api::<MutatingWebhookConfiguration>::all(self.client());
        if api.get_opt(name).await?.is_some() {
            api.delete(name, &DeleteParams::default()).await?;
            for _ in 0..50 {
                if api.get_opt(name).await?.is_none() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        api.create(&PostParams::default(), &mwc)
            .await
            .context("creating the MutatingWebhookConfiguration")?;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for component in ["apiserver", "scheduler", "controller-manager", "kwok"] {
                if self
                    .run_dir
                    .path()
                    .join(format!("{component}.log"))
                    .is_file()
                {
                    eprintln!(
                        "----- tail of {}/{component}.log -----\n{}",
                        self.run_dir.path().display(),
                        self.log_tail(component, 30)
                    );
                }
            }
        }
        let _ = Command::new("bash")
            .arg(cluster_scripts().join("stop.sh"))
            .arg(self.run_dir.path())
            .status();
    }
}

/// A copy of the admin `kubeconfig` in `dir` that acts as ServiceAccount `namespace/name` (impersonation,
/// with the groups every ServiceAccount has), so that a process run with it has exactly that account's RBAC.
pub fn service_account_kubeconfig(
    kubeconfig: &Path,
    dir: &Path,
    namespace: &str,
    name: &str,
) -> anyhow::Result<PathBuf> {
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(kubeconfig)?)?;
    let user = kc["users"][0]["user"]
        .as_mapping_mut()
        .context("kubeconfig without a user")?;
    user.insert(
        "as".into(),
        format!("system:serviceaccount:{namespace}:{name}").into(),
    );
    user.insert(
        "as-groups".into(),
        serde_yaml::to_value(["system:serviceaccounts", "system:authenticated"])?,
    );
    let path = dir.join(format!("kubeconfig-{name}"));
    std::fs::write(&path, serde_yaml::to_string(&kc)?)?;
    Ok(path)
}

/// Retries `attempt` (given its attempt number, from 1) every 500 ms until it returns true or `timeout` passes:
/// the apiserver picks webhook configurations, and the frontend policy changes, up asynchronously.
pub fn eventually(timeout: std::time::Duration, mut attempt: impl FnMut(u32) -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut i = 0;
    while std::time::Instant::now() < deadline {
        i += 1;
        if attempt(i) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    false
}

/// A client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// What `kubectl` answered.
#[derive(Debug)]
pub struct KubectlAnswer {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Installs the QuotaLedger kind (`deploy/kustomize/base/webhook/quota-ledger.yaml`), as every installation
/// has it: the frontend reserves quota'd Pods in one per tier, in its own (here the kubeconfig's) namespace.
fn install_quota_ledgers(kubeconfig: &Path) -> anyhow::Result<()> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/webhook/quota-ledger.yaml");
    let file = file.to_string_lossy();
    let established = [
        "wait",
        "--for=condition=Established",
        "crd/quotaledgers.gpu-admission.io",
        "--timeout=60s",
    ];
    for args in [&["apply", "-f", &file][..], &established[..]] {
        let a = kubectl(kubeconfig, None, &[], args, "");
        anyhow::ensure!(a.ok, "kubectl {}: {}", args.join(" "), a.stderr);
    }
    Ok(())
}

/// `kubectl --kubeconfig KUBECONFIG [--as=USER] [--as-group=GROUP]... ARGS`, with `stdin` piped in: how the
/// cluster tests act as a tenant, an admin or a lead.
pub fn kubectl(
    kubeconfig: &Path,
    user: Option<&str>,
    groups: &[&str],
    args: &[&str],
    stdin: &str,
) -> KubectlAnswer {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig);
    if let Some(user) = user {
        cmd.arg(format!("--as={user}"));
    }
    for g in groups {
        cmd.arg(format!("--as-group={g}"));
    }
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    KubectlAnswer {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// The table of cases and answers a cluster test prints as it goes (`| case | answer | ok |`), and fails at
/// the end with every case answered wrongly.
#[derive(Debug)]
pub struct CaseTable {
    wrong: Vec<String>,
}

impl CaseTable {
    /// Prints the header.
    pub fn start() -> Self {
        println!("| case | answer | |\n|---|---|---|");
        Self { wrong: Vec::new() }
    }

    pub fn check(&mut self, case: &str, answer: String, ok: bool) {
        println!(
            "| {case} | {answer} | {} |",
            if ok { "ok" } else { "WRONG" }
        );
        if !ok {
            self.wrong.push(format!("{case}: {answer}"));
        }
    }

    /// Fails with every wrong case, and `context` (a log tail) after them.
    pub fn finish(self, context: &str) {
        assert!(
            self.wrong.is_empty(),
            "cases answered wrongly:\n{}\n{context}",
            self.wrong.join("\n")
        );
    }
}

/// The shipped policy (`deploy/kustomize/base/policy/default-policy.yaml`) with `mode: Enforce`.
pub fn shipped_policy_in_enforce() -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/policy/default-policy.yaml");
    let text = std::fs::read_to_string(&path)?;
    anyhow::ensure!(text.contains("  mode: Warn"), "the shipped mode moved");
    Ok(text.replace("  mode: Warn", "  mode: Enforce"))
}

/// Creates the floor's parameter object as the observer writes it for the policy `text`, once the apiserver
/// serves its kind (defined by `deploy/kustomize/base/floor.yaml`, which must be applied before): what a test
/// without a running observer puts in place.
pub fn apply_floor_parameters(kubeconfig: &Path, text: &str) -> anyhow::Result<()> {
    use gpu_admission_core::render::floor::{self, parameters};
    let crd = format!("crd/{}.{}", parameters::PLURAL, parameters::GROUP);
    let wait = ["wait", "--for=condition=Established", "--timeout=60s", &crd];
    let a = kubectl(kubeconfig, None, &[], &wait, "");
    anyhow::ensure!(
        a.ok,
        "the floor's parameter kind is not served: {}",
        a.stderr
    );
    let policy =
        gpu_admission_policy::parse(text, "policy.yaml").map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let object = parameters::FloorParameters::object(floor::params(&policy)?);
    let a = kubectl(
        kubeconfig,
        None,
        &[],
        &["apply", "-f", "-"],
        &object.to_string(),
    );
    anyhow::ensure!(a.ok, "the floor's parameters: {}", a.stderr);
    Ok(())
}

/// The value of `key` in the floor's parameter object as stored (`""` while it or the key is missing).
pub fn floor_parameter(kubeconfig: &Path, key: &str) -> String {
    use gpu_admission_core::render::floor::{PARAMS_NAME, PARAMS_NAMESPACE, parameters};
    let path = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
    let get = [
        "-n",
        PARAMS_NAMESPACE,
        "get",
        parameters::PLURAL,
        PARAMS_NAME,
        "-o",
        &path,
    ];
    kubectl(kubeconfig, None, &[], &get, "").stdout
}

/// [`apply_floor_parameters`] for the shipped policy in Enforce.
pub fn apply_floor_parameters_in_enforce(kubeconfig: &Path) -> anyhow::Result<()> {
    apply_floor_parameters(kubeconfig, &shipped_policy_in_enforce()?)
}

/// Registers, under `name`, the shipped mutating webhooks `mutating` and validating webhooks `validating`,
/// each pointed at `webhook` ([`shipped_registration`]).
pub async fn register_shipped(
    client: &kube::Client,
    webhook: &crate::Webhook,
    (mutating, validating): (&[&str], &[&str]),
    name: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kube::api::{Api, PostParams};
    let m: MutatingWebhookConfiguration = serde_json::from_value(shipped_registration(
        "mutatingwebhookconfiguration.yaml",
        webhook,
        mutating,
        name,
    )?)?;
    let v: ValidatingWebhookConfiguration = serde_json::from_value(shipped_registration(
        "validatingwebhookconfiguration.yaml",
        webhook,
        validating,
        name,
    )?)?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &m)
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &v)
        .await?;
    Ok(())
}

/// A shipped webhook registration (`deploy/kustomize/base/webhook/FILE`) named `name`, only the webhooks named
/// in `keep`, each pointed at `webhook` (`clientConfig.service` → `url` + `caBundle`, timeout 10 s).
pub fn shipped_registration(
    file: &str,
    webhook: &crate::Webhook,
    keep: &[&str],
    name: &str,
) -> anyhow::Result<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kustomize/base/webhook")
        .join(file);
    let mut config: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let base = webhook.mutate_url().replace("/mutate-pod", "");
    let ca = base64::engine::general_purpose::STANDARD.encode(webhook.ca_pem()?);
    config["metadata"] = json!({"name": name});
    let hooks = config["webhooks"]
        .as_array_mut()
        .context("a registration without webhooks")?;
    hooks.retain(|h| keep.contains(&h["name"].as_str().unwrap_or("")));
    if hooks.len() != keep.len() {
        bail!("{file} does not ship every webhook of {keep:?}");
    }
    for h in hooks {
        let path = h["clientConfig"]["service"]["path"]
            .as_str()
            .context("a shipped webhook without a service path")?
            .to_string();
        h["clientConfig"] = json!({"url": format!("{base}{path}"), "caBundle": ca});
        h["timeoutSeconds"] = json!(10);
    }
    Ok(config)
}
