//! Which namespaces have a restricted instance a cluster admin registered. A Lease is a namespaced object a
//! tenant may be able to create in her own namespace, and a decision record an annotation she can write; a
//! `MutatingWebhookConfiguration` is cluster-scoped, and only a cluster admin creates one. So a namespace's
//! Lease counts (the cluster-wide instance leaves its scoring, the observer reports its runs to its team's
//! scorer) only where a registration calls a restricted instance for that namespace: a webhook whose
//! `namespaceSelector` is exactly `kubernetes.io/metadata.name In [...]` (the label only the apiserver sets;
//! what `overlays/namespaced` ships) selects those namespaces. The cluster-wide registration
//! (`NotIn [...]`) and any broader selector register nothing.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;

/// The label the apiserver sets on every Namespace to its name.
const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces `mwc` registers a restricted instance for (empty for any other registration).
pub fn registered_namespaces(mwc: &MutatingWebhookConfiguration) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for hook in mwc.webhooks.iter().flatten() {
        let Some(selector) = hook.namespace_selector.as_ref() else {
            continue;
        };
        if selector
            .match_labels
            .as_ref()
            .is_some_and(|l| !l.is_empty())
        {
            continue;
        }
        if let [expr] = selector.match_expressions.as_deref().unwrap_or_default()
            && expr.key == NAME_LABEL
            && expr.operator == "In"
        {
            out.extend(
                expr.values
                    .iter()
                    .flatten()
                    .filter(|v| !v.is_empty())
                    .cloned(),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mwc(selector: serde_json::Value) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({
            "metadata": {"name": "r"},
            "webhooks": [{"name": "pods.ns.gpu-admission.io", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "clientConfig": {"url": "https://x"},
                "namespaceSelector": selector}]
        }))
        .unwrap()
    }

    #[test]
    fn only_a_selector_by_namespace_name_registers() {
        let team = mwc(json!({"matchExpressions": [
            {"key": NAME_LABEL, "operator": "In", "values": ["gpu-team", "lab"]}]}));
        assert_eq!(
            registered_namespaces(&team),
            BTreeSet::from(["gpu-team".to_string(), "lab".to_string()])
        );
        for other in [
            // the cluster-wide registration
            json!({"matchExpressions": [
                {"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]}]}),
            // a label a namespace's owner may set
            json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["gpu-team"]}]}),
            // narrowed further by labels: not the shape shipped
            json!({"matchLabels": {"x": "y"}, "matchExpressions": [
                {"key": NAME_LABEL, "operator": "In", "values": ["gpu-team"]}]}),
            json!({}),
        ] {
            assert!(
                registered_namespaces(&mwc(other.clone())).is_empty(),
                "{other}"
            );
        }
    }
}
