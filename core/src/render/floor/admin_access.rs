//! The floor's DRA admin access rules, as `/validate-namespace` and `/validate-pod` hold them: setting a
//! Namespace's `resource.kubernetes.io/admin-access` label to `"true"` (through the Namespace or a
//! subresource that persists labels), and creating a claim or claim template asking for a GPU DeviceClass with
//! `adminAccess: true`, need `use adminaccess` in `gpu-admission.io` (a grant only through a `*` does not count,
//! but `system:masters` holds it: [`crate::authority`]). In every enforcement mode, as the tier label: who
//! may reach devices other tenants' Pods use is no tier rule. No parameters: the GPU DeviceClasses are written
//! in at render time (the catalog's `<class>.gpu-admission.io`, the policy's `draDeviceClass` resources).

use gpu_admission_policy::Policy;
use gpu_admission_policy::device_classes;
use gpu_admission_policy::gpu_resources::{GpuResourceKind, is_pattern};
use serde_json::{Value, json};

use super::cel::{self, lit};
use super::labels;
use crate::admission::validate_namespace::{ADMIN_ACCESS_LABEL, NAMESPACE_RESOURCES};
use crate::authority::Permission;

/// The ValidatingAdmissionPolicy for the Namespace label (and its binding's name).
pub const ADMIN_ACCESS_POLICY: &str = "gpu-admission-floor-admin-access";
/// The ValidatingAdmissionPolicy for GPU claims with `adminAccess: true` (and its binding's name).
pub const ADMIN_CLAIMS_POLICY: &str = "gpu-admission-floor-admin-claims";

fn binding(name: &str, match_resources: Value) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels()},
        "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": match_resources},
    })
}

/// Whether the requester holds `use adminaccess` (`variables.mayAdmin`).
fn power() -> Vec<Value> {
    super::authorizer_vars("mayAdmin", &Permission::AdminAccess, None)
}

/// Setting the label: the label `"true"` after the request and not before.
fn label_policy() -> Value {
    let is_true = |o: &str| {
        format!(
            "({o} != null && has({o}.metadata.labels) && {l} in {o}.metadata.labels && {o}.metadata.labels[{l}] == 'true')",
            l = lit(ADMIN_ACCESS_LABEL)
        )
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ADMIN_ACCESS_POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": NAMESPACE_RESOURCES}]},
            "matchConditions": [{"name": "sets-admin-access",
                "expression": format!("{} && !{}", is_true("object"), is_true("oldObject"))}],
            "variables": power(),
            "validations": [{
                "expression": "variables.mayAdmin",
                "messageExpression": format!("'gpu-admission (floor in the apiserver): ' + request.userInfo.username + \
                    ' may not set ' + {l} + '=true on namespace ' + object.metadata.name + ': DRA admin access needs use \
                    adminaccess (gpu-admission.io) in Kubernetes RBAC, by a rule that names it'", l = lit(ADMIN_ACCESS_LABEL)),
                "reason": "Forbidden",
            }],
        },
    })
}

/// The DeviceClass named by the CEL expression `c` is a GPU one: the catalog's, any of the product's suffix,
/// a `draDeviceClass` resource of the policy (exact or pattern; a `notGpu` exception is not subtracted, so
/// the floor guards a little more than `/validate-pod`, never less).
fn is_gpu_class(policy: &Policy, c: &str) -> String {
    let rules = if policy.gpu_resources.is_empty() {
        gpu_admission_policy::gpu_resources::default_rules()
    } else {
        policy.gpu_resources.clone()
    };
    let dra = rules
        .iter()
        .filter(|r| r.kind == GpuResourceKind::DraDeviceClass);
    let exact: Vec<String> = dra
        .clone()
        .filter(|r| !is_pattern(&r.name))
        .map(|r| lit(&r.name))
        .collect();
    let mut any = vec![
        format!("{c}.endsWith({})", lit(device_classes::SUFFIX)),
        format!("{c} in [{}]", exact.join(", ")),
    ];
    any.extend(
        dra.filter(|r| is_pattern(&r.name))
            .map(|r| format!("{c}.matches({})", lit(&cel::pattern_regex(&r.name)))),
    );
    format!("({})", any.join(" || "))
}

/// Claims and claim templates asking for a GPU DeviceClass with `adminAccess: true` (`exactly` requests: the
/// only ones `resource.k8s.io/v1` lets ask for admin access).
fn claims_policy(policy: &Policy) -> Value {
    let spec = "(object.kind == 'ResourceClaimTemplate' ? object.spec.spec : object.spec)";
    let admin = format!(
        "has({spec}.devices) && has({spec}.devices.requests) && {spec}.devices.requests.exists(r, has(r.exactly) && \
         has(r.exactly.adminAccess) && r.exactly.adminAccess == true && {})",
        is_gpu_class(policy, "r.exactly.deviceClassName")
    );
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ADMIN_CLAIMS_POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["resourceclaims", "resourceclaimtemplates"]}]},
            "matchConditions": [{"name": "gpu-admin-access", "expression": admin}],
            "variables": power(),
            "validations": [{
                "expression": "variables.mayAdmin",
                "messageExpression": "'gpu-admission (floor in the apiserver): ' + request.userInfo.username + ' may not \
                    create ' + object.kind + ' ' + object.metadata.name + ' asking for GPUs with adminAccess: true (devices \
                    other tenants\\' Pods are using): it needs use adminaccess (gpu-admission.io) in Kubernetes RBAC, by a rule \
                    that names it'",
                "reason": "Forbidden",
            }],
        },
    })
}

/// The two policies and their bindings: the label's on Namespaces that carry it before or after the request,
/// the claims' on every namespace (kube-system's claims included: admin access there is as wide).
pub(super) fn render(policy: &Policy) -> Vec<Value> {
    vec![
        label_policy(),
        binding(
            ADMIN_ACCESS_POLICY,
            json!({"objectSelector": {"matchExpressions": [{
            "key": ADMIN_ACCESS_LABEL, "operator": "Exists"}]}}),
        ),
        claims_policy(policy),
        binding(ADMIN_CLAIMS_POLICY, json!({})),
    ]
}
