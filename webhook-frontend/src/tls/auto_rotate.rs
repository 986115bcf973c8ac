//! Automatic certificates, the Kubernetes side (`--tls=auto`, `--tls-secret`): keeps a CA + serving certificate in a
//! Secret of our namespace, serves it through the reloading resolver, and patches the CA into the caBundle
//! of our MutatingWebhookConfiguration (`--tls-webhook-config`).
//!
//! Every `check_interval` one pass: GET the Secret; [`auto_plan::plan`] says keep or issue; a new Secret is
//! CREATEd (AlreadyExists = another replica won: re-read and use theirs), a renewal is an UPDATE carrying
//! the resourceVersion that was read (Conflict = someone else wrote first: re-read and decide again). Then
//! the Secret's pair is served if it differs from the one being served (so a certificate another replica
//! renewed is picked up), and every webhook entry of the configuration whose caBundle differs from `ca.crt`
//! is patched, by entry name, with a strategic merge patch guarded by the configuration's resourceVersion.
//! Only `get`/`create`/`update` on Secrets and `get`/`patch` on the configuration are used (the RBAC of
//! `deploy/kustomize/components/automatic/rbac.yaml`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::auto_plan::{self, Lifetimes, Material, Plan};
use super::certs;
use super::reload::ReloadingCertResolver;
use crate::metrics::{Metrics, ReloadResult};

/// How many conflicting writes one pass tolerates before giving up until the next pass.
const MAX_ATTEMPTS: usize = 5;
/// Retry delay while no certificate is served yet (or after a failed pass), capped by the check interval.
const RETRY: Duration = Duration::from_secs(2);
/// Field manager name on our writes.
const MANAGER: &str = "gpu-admission-webhook";

/// What automatic mode manages.
#[derive(Clone, Debug)]
pub struct AutoTlsConfig {
    pub(crate) namespace: String,
    pub(crate) secret: String,
    /// MutatingWebhookConfiguration whose caBundles are kept equal to `ca.crt`.
    pub(crate) webhook_config: Option<String>,
    /// Extra SANs (the defaults localhost, 127.0.0.1, ::1 are always present).
    pub(crate) sans: Vec<String>,
    pub(crate) lifetimes: Lifetimes,
    /// How often the Secret (and the caBundle) is read again.
    pub(crate) check_interval: Duration,
}

/// The automatic-certificate loop.
pub(crate) struct AutoTls {
    secrets: Api<Secret>,
    webhook_configs: Api<MutatingWebhookConfiguration>,
    validating_configs: Api<ValidatingWebhookConfiguration>,
    config: AutoTlsConfig,
    resolver: Arc<ReloadingCertResolver>,
    metrics: Arc<Metrics>,
    /// Set once a certificate from the Secret is served (readiness).
    served: Arc<AtomicBool>,
    served_hash: Option<[u8; 32]>,
}

impl AutoTls {
    pub(crate) fn new(
        client: kube::Client,
        config: AutoTlsConfig,
        resolver: Arc<ReloadingCertResolver>,
        metrics: Arc<Metrics>,
        served: Arc<AtomicBool>,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), &config.namespace),
            webhook_configs: Api::all(client.clone()),
            validating_configs: Api::all(client),
            config,
            resolver,
            metrics,
            served,
            served_hash: None,
        }
    }

    /// A placeholder certificate (a throwaway CA nobody trusts) served until the Secret's certificate is:
    /// `/healthz` answers meanwhile, `/readyz` does not.
    pub(crate) fn placeholder(sans: &[String]) -> anyhow::Result<Arc<rustls::sign::CertifiedKey>> {
        let m = auto_plan::issue(
            None,
            true,
            sans,
            OffsetDateTime::now_utc(),
            &Lifetimes {
                serving: time::Duration::days(1),
                ca: time::Duration::days(2),
                renew_before: None,
            },
        )?;
        Ok(Arc::new(certs::certified_key_from_pem(
            &m.tls_crt, &m.tls_key,
        )?))
    }

    /// Runs passes forever (a failed pass is logged, counted and retried).
    pub(crate) async fn run(mut self) {
        loop {
            let wait = match self.pass().await {
                Ok(()) => self.config.check_interval,
                Err(err) => {
                    self.metrics.record_tls_reload(ReloadResult::error);
                    tracing::warn!(
                        error = %format!("{err:#}"),
                        secret = %self.config.secret,
                        namespace = %self.config.namespace,
                        "automatic certificate pass failed; retrying"
                    );
                    if self.served.load(Ordering::Acquire) {
                        RETRY.max(self.config.check_interval / 4)
                    } else {
                        RETRY
                    }
                    .min(self.config.check_interval)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One pass: make sure the Secret holds a good certificate, serve it, make sure the caBundles match.
    pub(crate) async fn pass(&mut self) -> anyhow::Result<()> {
        let material = self.ensure_secret().await?;
        self.serve(&material)?;
        if let Some(name) = self.config.webhook_config.clone() {
            self.ensure_ca_bundle(&self.webhook_configs, &name, &material.ca_crt, true)
                .await?;
            // The validating half shares the name; an install without it is fine.
            self.ensure_ca_bundle(&self.validating_configs, &name, &material.ca_crt, false)
                .await?;
        }
        Ok(())
    }

    async fn ensure_secret(&self) -> anyhow::Result<Material> {
        let (name, ns) = (&self.config.secret, &self.config.namespace);
        for _ in 0..MAX_ATTEMPTS {
            let now = OffsetDateTime::now_utc();
            let current = self
                .secrets
                .get_opt(name)
                .await
                .with_context(|| format!("reading Secret {ns}/{name}"))?;
            let stored = current.as_ref().map(|s| {
                Material::from_data(s.data.iter().flatten().map(|(k, v)| (k, v.0.as_slice())))
            });
            let reason = match auto_plan::plan(
                stored.as_ref(),
                &self.config.sans,
                now,
                &self.config.lifetimes,
            ) {
                Plan::Keep => return Ok(stored.unwrap_or_default()),
                Plan::Issue { new_ca, reason } => (new_ca, reason),
            };
            let (new_ca, reason) = reason;
            let fresh = auto_plan::issue(
                stored.as_ref(),
                new_ca,
                &self.config.sans,
                now,
                &self.config.lifetimes,
            )?;
            let data: BTreeMap<String, ByteString> = fresh
                .to_data()
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect();
            let params = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            let written = match current {
                None => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            namespace: Some(ns.clone()),
                            labels: Some(BTreeMap::from([(
                                "app.kubernetes.io/managed-by".to_string(),
                                MANAGER.to_string(),
                            )])),
                            ..ObjectMeta::default()
                        },
                        type_: Some("kubernetes.io/tls".into()),
                        data: Some(data),
                        ..Secret::default()
                    };
                    self.secrets.create(&params, &secret).await
                }
                Some(mut secret) => {
                    // Same resourceVersion as read: the apiserver refuses the update if anyone wrote since.
                    secret.data = Some(data);
                    secret.string_data = None;
                    self.secrets.replace(name, &params, &secret).await
                }
            };
            match written {
                Ok(_) => {
                    let not_after = auto_plan::first_cert_validity(&fresh.tls_crt).map(|v| v.1);
                    tracing::info!(secret = %name, namespace = %ns, new_ca, %reason,
                        not_after = ?not_after, "issued a serving certificate into the Secret");
                    self.metrics.record_certificate_issued(new_ca);
                    return Ok(fresh);
                }
                Err(kube::Error::Api(status))
                    if status.is_already_exists() || status.is_conflict() =>
                {
                    tracing::info!(secret = %name, namespace = %ns, reason = %status.reason,
                        "another replica wrote the Secret first; reading it again");
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("writing Secret {ns}/{name}"));
                }
            }
        }
        bail!("Secret {ns}/{name}: {MAX_ATTEMPTS} conflicting writes in a row")
    }

    /// Swaps the served certificate when the Secret's pair differs from the one being served.
    fn serve(&mut self, m: &Material) -> anyhow::Result<()> {
        let mut h = Sha256::new();
        h.update(&m.tls_crt);
        h.update(&m.tls_key);
        let hash: [u8; 32] = h.finalize().into();
        if self.served_hash == Some(hash) {
            return Ok(());
        }
        let key = certs::certified_key_from_pem(&m.tls_crt, &m.tls_key)
            .context("the Secret's tls.crt/tls.key")?;
        self.resolver.set(Arc::new(key));
        self.served_hash = Some(hash);
        self.served.store(true, Ordering::Release);
        self.metrics.record_tls_reload(ReloadResult::ok);
        let not_after = auto_plan::first_cert_validity(&m.tls_crt).map(|v| v.1);
        tracing::info!(secret = %self.config.secret, namespace = %self.config.namespace,
            not_after = ?not_after, "serving the certificate of the Secret");
        Ok(())
    }

    /// Patches `ca` into the caBundle of every webhook entry of configuration `name` that differs. A missing
    /// configuration is an error only when `required`.
    async fn ensure_ca_bundle<K: WebhookEntries>(
        &self,
        api: &Api<K>,
        name: &str,
        ca: &[u8],
        required: bool,
    ) -> anyhow::Result<()> {
        let kind = K::KIND;
        for _ in 0..MAX_ATTEMPTS {
            let Some(config) = api
                .get_opt(name)
                .await
                .with_context(|| format!("reading {kind} {name}"))?
            else {
                if required {
                    bail!("{kind} {name} not found");
                }
                return Ok(());
            };
            let Some(patch) = ca_bundle_patch(&config, ca) else {
                return Ok(());
            };
            let count = patch["webhooks"].as_array().map_or(0, Vec::len);
            let params = PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            };
            match api.patch(name, &params, &Patch::Strategic(&patch)).await {
                Ok(_) => {
                    tracing::info!(webhook_config = %name, kind, webhooks = count, "patched the caBundle");
                    self.metrics.record_ca_bundle_patch();
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    tracing::info!(webhook_config = %name, kind, "configuration changed meanwhile; reading it again");
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("patching {kind} {name}"));
                }
            }
        }
        bail!("{kind} {name}: {MAX_ATTEMPTS} conflicting patches in a row")
    }
}

/// A webhook configuration's entries: name and caBundle (both admission configuration kinds).
pub(crate) trait WebhookEntries:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
{
    const KIND: &'static str;
    fn entries(&self) -> Vec<(&str, Option<&[u8]>)>;
    fn resource_version(&self) -> Option<&String>;
}

/// Both configuration kinds have the same `webhooks[].clientConfig.caBundle` shape (distinct types in
/// k8s-openapi), so one body serves both.
macro_rules! webhook_entries {
    ($($ty:ident),+) => {$(
        impl WebhookEntries for $ty {
            const KIND: &'static str = stringify!($ty);
            fn entries(&self) -> Vec<(&str, Option<&[u8]>)> {
                self.webhooks
                    .iter()
                    .flatten()
                    .map(|w| {
                        (
                            w.name.as_str(),
                            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()),
                        )
                    })
                    .collect()
            }
            fn resource_version(&self) -> Option<&String> {
                self.metadata.resource_version.as_ref()
            }
        }
    )+};
}

webhook_entries!(MutatingWebhookConfiguration, ValidatingWebhookConfiguration);

/// The strategic merge patch setting `clientConfig.caBundle` = `ca` on every webhook entry (matched by its
/// `name`, the list's merge key) whose caBundle differs; guarded by the resourceVersion that was read, so
/// an entry renamed or removed meanwhile is never re-added. `None` when every entry already matches.
pub(crate) fn ca_bundle_patch<K: WebhookEntries>(
    config: &K,
    ca: &[u8],
) -> Option<serde_json::Value> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(ca);
    let entries: Vec<serde_json::Value> = config
        .entries()
        .into_iter()
        .filter(|(_, bundle)| *bundle != Some(ca))
        .map(|(name, _)| serde_json::json!({"name": name, "clientConfig": {"caBundle": b64}}))
        .collect();
    if entries.is_empty() {
        return None;
    }
    Some(serde_json::json!({
        "metadata": {"resourceVersion": config.resource_version()},
        "webhooks": entries,
    }))
}

/// The namespace of the Secret: the flag, else `POD_NAMESPACE`, else the client's default namespace (the
/// in-cluster service account's namespace, or the kubeconfig context's).
pub(crate) fn namespace(flag: Option<&str>, client: &kube::Client) -> String {
    flag.map(str::to_string)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or_else(|| client.default_namespace().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_touches_only_differing_entries_by_name() {
        let mwc: MutatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-admission", "resourceVersion": "42"},
            "webhooks": [
                {"name": "a.gpu-admission.io", "clientConfig": {"url": "https://x/a"},
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]},
                {"name": "b.gpu-admission.io", "clientConfig": {"url": "https://x/b", "caBundle": "Q0E="},
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]}
            ]
        }))
        .unwrap();
        let p = ca_bundle_patch(&mwc, b"CA").unwrap();
        assert_eq!(
            p,
            serde_json::json!({
                "metadata": {"resourceVersion": "42"},
                "webhooks": [{"name": "a.gpu-admission.io", "clientConfig": {"caBundle": "Q0E="}}]
            })
        );
        let p = ca_bundle_patch(&mwc, b"other").unwrap();
        assert_eq!(p["webhooks"].as_array().unwrap().len(), 2);
        let mut done = mwc.clone();
        for w in done.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ByteString(b"CA".to_vec()));
        }
        assert_eq!(ca_bundle_patch(&done, b"CA"), None);

        // The validating configuration the same way.
        let vwc: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-admission", "resourceVersion": "7"},
            "webhooks": [{"name": "pods.validate.gpu-admission.io", "clientConfig": {"url": "https://x/v"},
                 "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
        }))
        .unwrap();
        let p = ca_bundle_patch(&vwc, b"CA").unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["webhooks"][0]["name"], "pods.validate.gpu-admission.io");
    }
}
