//! gpu-admission installed on a [`LocalCluster`] as the benchmark runs it: the real scorer and frontend (the
//! shipped default policy in Enforce), the policy's PriorityClasses, the SHIPPED webhook registrations (every
//! webhook of both files, only the Service reference swapped for the frontend's URL and CA), with the
//! control's namespaces added to the system list they exclude (`kubernetes.io/metadata.name NotIn [...]`: the
//! one exclusion mechanism the registrations ship, extended as an admin would with a patch), and a plain
//! tenant whose clients create the Pods.

use std::path::PathBuf;

use anyhow::Context;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_tests::cluster::{LocalCluster, shipped_policy_in_enforce, shipped_registration};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The user the benchmark's clients impersonate: `edit`-like rights on the built-in groups, none of
/// gpu-admission.io's powers (as [`LocalCluster::bind_tenant`] makes it).
pub const TENANT: &str = "bench-tenant";
const REGISTRATION: &str = "gpu-admission-bench";
/// The tier given quotas (every class it allows, a `max` no run reaches): its namespaces' GPU Pods are
/// reserved in the quota ledger.
pub const QUOTA_TIER: &str = "silver";

/// The scorer and frontend serving one cluster.
pub struct Installed {
    pub scorer: Scorer,
    pub webhook: Webhook,
    pub policy: PolicySnapshot,
    _dir: tempfile::TempDir,
}

impl Installed {
    /// Our processes, for the CPU and RSS accounts.
    pub fn pids(&self) -> Vec<(String, u32)> {
        vec![
            ("frontend".into(), self.webhook.process.pid()),
            ("scorer".into(), self.scorer.process.pid()),
        ]
    }
}

/// [`start`], then registers the shipped webhooks with `skipped` added to their excluded namespaces.
pub async fn install(
    cluster: &LocalCluster,
    policy_text: &str,
    skipped: &[String],
    deadline_ms: u64,
) -> anyhow::Result<Installed> {
    let installed = start(cluster, policy_text, deadline_ms).await?;
    register(cluster, &installed.webhook, skipped).await?;
    Ok(installed)
}

/// Starts scorer and frontend against `cluster` with `policy_text` and creates the PriorityClasses and the
/// tenant; registers nothing.
pub async fn start(
    cluster: &LocalCluster,
    policy_text: &str,
    deadline_ms: u64,
) -> anyhow::Result<Installed> {
    let dir = tempfile::tempdir()?;
    let policy_file: PathBuf = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy_text)?;
    let scorer = Scorer::builder().policy(&policy_file).start().await?;
    let policy = scorer.policy().clone();
    cluster.create_priority_classes(&policy).await?;
    cluster.bind_tenant(TENANT).await?;
    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .policy_file(&policy_file)
        .deadline_ms(deadline_ms)
        .start()
        .await?;
    Ok(Installed {
        scorer,
        webhook,
        policy,
        _dir: dir,
    })
}

/// Creates both shipped registrations pointed at `webhook` ([`registrations`]).
pub async fn register(
    cluster: &LocalCluster,
    webhook: &Webhook,
    skipped: &[String],
) -> anyhow::Result<()> {
    let client = cluster.client();
    let (mutating, validating) = registrations(webhook, skipped)?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(mutating)?)
        .await
        .context("the mutating registration")?;
    Api::<ValidatingWebhookConfiguration>::all(client)
        .create(&PostParams::default(), &serde_json::from_value(validating)?)
        .await
        .context("the validating registration")?;
    Ok(())
}

/// Both shipped registrations, every webhook of them, pointed at `webhook`, `skipped` added to the namespaces
/// they exclude: (mutating, validating).
pub fn registrations(webhook: &Webhook, skipped: &[String]) -> anyhow::Result<(Value, Value)> {
    let mutating = registration(
        "mutatingwebhookconfiguration.yaml",
        webhook,
        &[
            "pods.gpu-admission.io",
            "claims.gpu-admission.io",
            "checkpoint-restore.gpu-admission.io",
        ],
        skipped,
    )?;
    let validating = registration(
        "validatingwebhookconfiguration.yaml",
        webhook,
        &[
            "pods.validate.gpu-admission.io",
            "workloads.validate.gpu-admission.io",
            "claims.validate.gpu-admission.io",
            "policy.validate.gpu-admission.io",
            "namespaces.validate.gpu-admission.io",
        ],
        skipped,
    )?;
    Ok((mutating, validating))
}

/// A shipped registration pointed at `webhook`, every webhook of it kept, `skipped` appended to the values of
/// each `kubernetes.io/metadata.name NotIn` selector (the webhooks that exclude the system namespaces).
fn registration(
    file: &str,
    webhook: &Webhook,
    all: &[&str],
    skipped: &[String],
) -> anyhow::Result<Value> {
    let mut config = shipped_registration(file, webhook, all, REGISTRATION)?;
    let mut extended = 0;
    for hook in config["webhooks"].as_array_mut().into_iter().flatten() {
        let exprs = hook["namespaceSelector"]["matchExpressions"].as_array_mut();
        for e in exprs.into_iter().flatten() {
            if e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn" {
                let values = e["values"].as_array_mut().context("NotIn without values")?;
                values.extend(skipped.iter().map(|s| json!(s)));
                extended += 1;
            }
        }
    }
    anyhow::ensure!(
        extended > 0,
        "{file}: no webhook excludes namespaces by name any more"
    );
    Ok(config)
}

/// `n` clients acting as [`TENANT`] (impersonated by the admin kubeconfig's token), each its own connection
/// pool, as `n` separate controllers or users would be.
pub async fn tenant_clients(cluster: &LocalCluster, n: usize) -> anyhow::Result<Vec<kube::Client>> {
    clients_as(cluster, TENANT, n).await
}

/// `n` clients acting as `user` (impersonated by the admin's kubeconfig).
pub async fn clients_as(
    cluster: &LocalCluster,
    user: &str,
    n: usize,
) -> anyhow::Result<Vec<kube::Client>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        config.auth_info.impersonate = Some(user.into());
        out.push(kube::Client::try_from(config)?);
    }
    Ok(out)
}

/// The shipped policy in Enforce with quotas on [`QUOTA_TIER`].
pub fn policy_with_quotas() -> anyhow::Result<String> {
    policy_with_quotas_on(&[QUOTA_TIER])
}

/// The shipped policy in Enforce with quotas on `tiers`, each on every class it allows with a `max` no run
/// reaches: each such tier has its own quota ledger.
pub fn policy_with_quotas_on(tiers: &[&str]) -> anyhow::Result<String> {
    let text = shipped_policy_in_enforce()?;
    let policy = gpu_admission_policy::parse(&text, "shipped policy")?;
    let mut out = format!("{text}\nquotas:\n  tiers:\n");
    for name in tiers {
        let tier = (policy.tiers.iter())
            .find(|t| t.name == *name)
            .with_context(|| format!("the shipped policy has no tier {name}"))?;
        let classes: Vec<String> = (policy.classes.iter().zip(&tier.allowed))
            .filter(|(_, allowed)| **allowed)
            .map(|(c, _)| format!("{}: {{ max: 1000000 }}", c.name))
            .collect();
        let classes = classes.join(", ");
        out.push_str(&format!(
            "    - tier: {name}\n      classes: {{ {classes} }}\n"
        ));
    }
    Ok(out)
}
