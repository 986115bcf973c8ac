//! Which namespaces a cluster admin registered a namespace-restricted instance for, from a watch of the
//! `MutatingWebhookConfiguration`s (core's [`registered_namespaces`]). A restricted record (`decided-by:
//! restricted:…`) teaches a team's scorer only in such a namespace: elsewhere it is nobody's decision but the
//! cluster-wide instance's (a tenant wrote it, and the cluster-wide frontend decides such Pods again), and its
//! run is learned by the cluster-wide scorer. RBAC: `list`/`watch` on `mutatingwebhookconfigurations`.

use std::collections::{BTreeSet, HashMap};

use gpu_admission_core::ns_lock::registration::registered_namespaces;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::runtime::watcher::Event;

/// The registrations as last watched: configuration name → the namespaces it registers.
#[derive(Debug, Default)]
pub(crate) struct Registrations {
    by_config: HashMap<String, BTreeSet<String>>,
    relisted: Option<HashMap<String, BTreeSet<String>>>,
    listed: bool,
}

impl Registrations {
    pub(crate) fn on_event(&mut self, event: Event<MutatingWebhookConfiguration>) {
        let entry = |m: &MutatingWebhookConfiguration| {
            (
                m.metadata.name.clone().unwrap_or_default(),
                registered_namespaces(m),
            )
        };
        match event {
            Event::Apply(m) => {
                let (name, ns) = entry(&m);
                self.by_config.insert(name, ns);
            }
            Event::Delete(m) => {
                self.by_config.remove(&entry(&m).0);
            }
            Event::Init => self.relisted = Some(HashMap::new()),
            Event::InitApply(m) => {
                let (name, ns) = entry(&m);
                self.relisted
                    .get_or_insert_with(HashMap::new)
                    .insert(name, ns);
            }
            Event::InitDone => {
                self.by_config = self.relisted.take().unwrap_or_default();
                self.listed = true;
            }
        }
    }

    /// Whether a registration calls a restricted instance for `namespace`; `None` until first listed.
    pub(crate) fn registered(&self, namespace: &str) -> Option<bool> {
        self.listed
            .then(|| self.by_config.values().any(|ns| ns.contains(namespace)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mwc(name: &str, values: &[&str]) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{"name": "pods.ns.gpu-admission.io", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "clientConfig": {"url": "https://x"},
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": values}]}}]
        }))
        .unwrap()
    }

    #[test]
    fn a_namespace_is_registered_while_a_registration_names_it() {
        let mut r = Registrations::default();
        assert_eq!(r.registered("gpu-team"), None);
        r.on_event(Event::Init);
        r.on_event(Event::InitApply(mwc(
            "0-gpu-admission-ns-gpu-team",
            &["gpu-team"],
        )));
        assert_eq!(r.registered("gpu-team"), None, "not listed yet");
        r.on_event(Event::InitDone);
        assert_eq!(r.registered("gpu-team"), Some(true));
        assert_eq!(r.registered("ml"), Some(false));
        r.on_event(Event::Delete(mwc("0-gpu-admission-ns-gpu-team", &[])));
        assert_eq!(r.registered("gpu-team"), Some(false));
    }
}
