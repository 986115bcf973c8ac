//! The floor's parameter object: a `FloorParameters` (`gpu-admission.io/v1alpha1`, namespaced) whose `data`
//! holds [`super::params`]' strings, and its CustomResourceDefinition.
//!
//! Not a ConfigMap: the apiserver watches a built-in `paramKind` through its shared informer factory and, once
//! no binding names that kind for one policy refresh (a second), stops that informer for the life of the
//! process while keeping its last contents (kubernetes/kubernetes#130887). A floor whose bindings were
//! deleted and created again (a reinstall, a `kubectl delete -f` then `apply -f`) would then read the
//! parameters as they were, whatever the observer writes after: a tier's caps and classes frozen, or the
//! mode left in `Warn`. A custom resource's informer is the policy plugin's own, started again with the
//! bindings. Until its first list the apiserver denies what the floor matches, as for a missing object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{LABELS, PARAMS_NAME, PARAMS_NAMESPACE, labels};

/// The label kustomize gives every object of the installation.
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "gpu-admission");

/// The API group, version, kind and plural of the parameter object.
pub const GROUP: &str = "gpu-admission.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "FloorParameters";
pub const PLURAL: &str = "floorparameters";

/// The parameter object as stored: its metadata and the strings the floor's CEL reads as `params.data`
/// (serialized with its `apiVersion` and `kind`, which the apiserver requires of a write).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FloorParameters {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

crate::resource::namespaced_resource!(FloorParameters, group: GROUP, version: VERSION, kind: KIND, plural: PLURAL,
    serialized: [data]);

impl FloorParameters {
    /// The object named `name` in `namespace`, labelled as the floor's and as part of the installation (as
    /// kustomize labels what it applies; this object is written by the observer, not applied), holding `data`.
    pub fn new(name: &str, namespace: &str, data: BTreeMap<String, String>) -> Self {
        let labels = (LABELS.iter().chain([&PART_OF]))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            data,
        }
    }

    /// The shipped name and namespace's object holding `data`, as JSON (what a test or an operator applies
    /// when no observer writes it).
    pub fn object(data: BTreeMap<String, String>) -> Value {
        json!(Self::new(PARAMS_NAME, PARAMS_NAMESPACE, data))
    }
}

/// What the floor's policies name as their `paramKind`.
pub(super) fn param_kind() -> Value {
    json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": KIND})
}

/// The CustomResourceDefinition of [`FloorParameters`]: `data` a map of strings, nothing else stored.
pub(super) fn definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}"), "labels": labels()},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": "floorparameters"},
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "description": "The floor's parameters, written by gpu-admission's observer from the \
                                    policy: what the floor's ValidatingAdmissionPolicies read as params.data.",
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "data": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                }},
            }],
        },
    })
}
