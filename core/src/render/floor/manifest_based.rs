//! The floor as manifest-based admission control (Kubernetes 1.37, beta): the same policies as
//! [`super::render`] and [`super::render_placing`], loaded by the kube-apiserver from files at its start
//! (`staticManifestsDir` of the ValidatingAdmissionPolicy and MutatingAdmissionPolicy plugins in its
//! `--admission-control-config-file`), which no API request can delete or change and which hold while etcd is
//! down.
//!
//! Such policies take no parameters (`paramKind` and `paramRef` are refused) and their names end in
//! [`STATIC_SUFFIX`] (which the API refuses for objects it stores). So the parameter object's data
//! ([`super::params`]) is written into each policy as its first variable, a CEL map literal `variables.params`,
//! and every `params.data` of the rendered CEL reads it: the expressions are otherwise the API floor's, byte
//! for byte. A policy change then takes a new render and an apiserver restart; the observer keeps only the API
//! floor's parameters in step.

use serde_json::{Map, Value};

use super::{TierNameError, params, render, render_placing};
use gpu_admission_policy::Policy;

/// The suffix the apiserver requires of a manifest-based policy's and binding's name.
pub const STATIC_SUFFIX: &str = ".static.k8s.io";

/// What the parameter object's data is read through in the rendered CEL, and what it becomes here.
const PARAMS_DATA: &str = "params.data";
const INLINE_PARAMS: &str = "variables.params";

/// The floor as files for the apiserver: the ValidatingAdmissionPolicies and their bindings (one
/// `staticManifestsDir`), the MutatingAdmissionPolicy and its binding (another: each plugin reads its own
/// directory, and refuses the other's kinds).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestBasedFloor {
    pub validating: Vec<Value>,
    pub mutating: Vec<Value>,
}

/// Rewrites every CEL string under `v` to read the inline parameters.
fn inline_params(v: &mut Value) {
    match v {
        Value::String(s) if s.contains(PARAMS_DATA) => *s = s.replace(PARAMS_DATA, INLINE_PARAMS),
        Value::Array(items) => items.iter_mut().for_each(inline_params),
        Value::Object(map) => map.values_mut().for_each(inline_params),
        _ => {}
    }
}

/// One API floor object as a manifest-based one: named with the suffix, no parameter kind or reference, the
/// parameters inline in a policy that reads them.
fn manifest_based(mut object: Value, params_literal: &str) -> Value {
    let suffixed =
        |name: &Value| Value::String(format!("{}{STATIC_SUFFIX}", name.as_str().unwrap_or("")));
    object["metadata"]["name"] = suffixed(&object["metadata"]["name"]);
    let spec = object["spec"]
        .as_object_mut()
        .expect("a floor object has a spec");
    spec.remove("paramKind");
    spec.remove("paramRef");
    if let Some(policy_name) = spec.get("policyName") {
        let name = suffixed(policy_name);
        spec.insert("policyName".into(), name);
    }
    if Value::Object(spec.clone())
        .to_string()
        .contains(PARAMS_DATA)
    {
        spec.values_mut().for_each(inline_params);
        let mut variable = Map::new();
        variable.insert("name".into(), "params".into());
        variable.insert("expression".into(), params_literal.into());
        if let Value::Array(list) = spec
            .entry("variables")
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            list.insert(0, Value::Object(variable));
        }
    }
    object
}

/// The floor of `policy` as manifest-based admission files' objects (the parameter object's definition is not
/// among them: its data is inline).
pub fn render_manifest_based(
    policy: &Policy,
    tier_label: &str,
) -> Result<ManifestBasedFloor, TierNameError> {
    let data = params(policy)?;
    let entries: Vec<String> = data
        .iter()
        .map(|(k, v)| format!("{}: {}", super::cel::lit(k), super::cel::lit(v)))
        .collect();
    let literal = format!("{{{}}}", entries.join(", "));
    let is_admission = |o: &Value| o["apiVersion"] == "admissionregistration.k8s.io/v1";
    let validating = render(policy, tier_label)?
        .into_iter()
        .filter(is_admission)
        .map(|o| manifest_based(o, &literal))
        .collect();
    let mutating = render_placing(policy, tier_label)?
        .into_iter()
        .map(|o| manifest_based(o, &literal))
        .collect();
    Ok(ManifestBasedFloor {
        validating,
        mutating,
    })
}
