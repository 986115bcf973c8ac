//! The policy ConfigMap (`--policy-configmap`) for every round that renders it (the floor's parameters, the
//! GPU ResourceQuotas): a watch of that one object, by name, into a store ([`crate::watched`]: no read per
//! round, a change seen as it is written, not at a mounted volume's delay), its text parsed and validated
//! once per resourceVersion and shared ([`PolicySource::read`]).

use std::sync::{Arc, Mutex};

use gpu_admission_core::admission::validate_policy::PolicyConfigMap;
use gpu_admission_policy::Policy;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::metrics::Metrics;

/// The policy as one resourceVersion of the ConfigMap says it.
#[derive(Debug)]
pub struct PolicyRead {
    /// `ConfigMap NS/NAME key KEY`, for the log lines.
    pub source: String,
    /// The validated policy, or why there is none (missing object or key, problems).
    pub policy: Result<Policy, String>,
}

/// The watched policy ConfigMap and its last parse.
pub struct PolicySource {
    config: PolicyConfigMap,
    store: Store<ConfigMap>,
    /// The resourceVersion last parsed (`None`: no object) and its parse.
    parsed: Mutex<Option<(Option<String>, Arc<PolicyRead>)>>,
    watch: tokio::task::AbortHandle,
}

impl Drop for PolicySource {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl PolicySource {
    /// Starts the watch (on the current tokio runtime).
    pub fn start(
        client: &kube::Client,
        config: PolicyConfigMap,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
        let by_name = watcher::Config::default().fields(&format!("metadata.name={}", config.name));
        let (store, watch) =
            crate::watched::spawn(watcher(api, by_name), (), "configmaps", metrics, |_, _| {});
        Arc::new(Self {
            config,
            store,
            parsed: Mutex::new(None),
            watch,
        })
    }

    /// The policy as the ConfigMap says it now; `None` until the watch has listed it once.
    pub fn read(&self) -> Option<Arc<PolicyRead>> {
        if !crate::watched::ready(&self.store) {
            return None;
        }
        let at = ObjectRef::new(&self.config.name).within(&self.config.namespace);
        let stored = self.store.get(&at);
        let version = stored
            .as_ref()
            .and_then(|cm| cm.metadata.resource_version.clone());
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, read)) = parsed.as_ref()
            && *v == version
        {
            return Some(read.clone());
        }
        let source = format!(
            "ConfigMap {}/{} key {}",
            self.config.namespace, self.config.name, self.config.key
        );
        let text = stored
            .as_deref()
            .and_then(|cm| crate::floor::policy_text(cm, &self.config.key));
        let read = Arc::new(PolicyRead {
            policy: parse(text, &source),
            source,
        });
        *parsed = Some((version, read.clone()));
        Some(read)
    }
}

/// The policy of the ConfigMap's text; why not when it is missing or does not validate (then the rounds
/// change nothing).
pub fn parse(text: Option<&str>, source: &str) -> Result<Policy, String> {
    let text = text.ok_or_else(|| format!("{source}: no policy"))?;
    gpu_admission_policy::parse(text, source)
        .map_err(|e| format!("{source}: {} problems", e.problems.len()))
}
