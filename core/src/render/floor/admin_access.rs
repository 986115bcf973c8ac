//! The floor's DRA admin access rules, as `/validate-namespace` and `/validate-pod` hold them: setting a
//! Namespace's `resource.kubernetes.io/admin-access` label to `"true"` (through the Namespace or a
//! subresource that persists labels), and creating a claim or claim template asking for a GPU DeviceClass with
//! `adminAccess: true`, need `use adminaccess` in `gpu-admission.io` (a grant only through a `*` does not count,
//! but `system:masters` holds it: [`crate::authority`]). In every enforcement mode, as the tier label: who
//! may reach devices other tenants' Pods use is no tier rule. The GPU DeviceClasses are those written in at
//! render time (the catalog's `<class>.gpu-admission.io`, the policy's `draDeviceClass` resources) and the
//! cluster's classes the observer writes into the parameters as GPUs (`deviceClasses.gpuResources`: judged by
//! what they select, [`super::device_classes`]).
//!
//! In `Enforce` the claims policy also holds an admin-access request to the namespace's tier, as
//! `/validate-claim` does, where the floor can tell: a request with no selector (the webhooks' mutation adds
//! the tier's product selector to every request that needs one; a request without one did not meet it) on a
//! catalog DeviceClass of a class outside the tier, or on a cluster DeviceClass the parameters list outside it
//! (`<scope>.deviceClasses.outside`: could be allocated devices of a class outside it, or undecidable). A
//! request with selectors is left to the webhooks: the floor reads no CEL selector. The system namespaces
//! (`EXEMPT_NAMESPACES`, which no webhook sees) are held to the power only.

use gpu_admission_policy::Policy;
use gpu_admission_policy::device_classes;
use gpu_admission_policy::gpu_resources::{GpuResourceKind, is_pattern};
use serde_json::{Value, json};

use super::cel::{self, lit};
use super::labels;
use crate::admission::validate_namespace::{ADMIN_ACCESS_LABEL, NAMESPACE_RESOURCES};
use crate::authority::Permission;
use crate::names::EXEMPT_NAMESPACES;
use gpu_admission_policy::gpu_resources::DEVICE_CLASS_RESOURCE_PREFIX;

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

/// The variables of the claims policy: the admin-access requests, whether one is on a GPU DeviceClass
/// (`gpuAdmin`), the namespace's scope, whether one is outside it (`outsideAdmin`), the two powers.
fn claims_variables(policy: &Policy, tier_label: &str) -> Vec<Value> {
    let spec = "(object.kind == 'ResourceClaimTemplate' ? object.spec.spec : object.spec)";
    let prefix = lit(DEVICE_CLASS_RESOURCE_PREFIX);
    let listed = |key: &str| format!("({key} in params.data ? params.data[{key}] : '')");
    let outside_key = format!(
        "variables.scope + {}",
        lit(super::device_classes::OUTSIDE_SUFFIX)
    );
    let catalog_key = format!(
        "variables.scope + {}",
        lit(super::CATALOG_DEVICE_CLASSES_SUFFIX)
    );
    let exempt_namespaces: Vec<String> = EXEMPT_NAMESPACES.iter().map(|n| lit(n)).collect();
    let mut vars = vec![
        super::var(
            "adminRequests",
            format!(
                "has({spec}.devices) && has({spec}.devices.requests) ? {spec}.devices.requests.filter(r, has(r.exactly) && \
             has(r.exactly.adminAccess) && r.exactly.adminAccess == true) : []"
            ),
        ),
        super::var(
            "clusterGpu",
            listed(&lit(super::device_classes::GPU_RESOURCES)),
        ),
        super::var(
            "gpuAdmin",
            format!(
                "variables.adminRequests.exists(r, {} || variables.clusterGpu.contains('\\n' + {prefix} + \
             r.exactly.deviceClassName + '\\n'))",
                is_gpu_class(policy, "r.exactly.deviceClassName")
            ),
        ),
    ];
    vars.extend(super::scope_variables(tier_label));
    vars.extend([
        super::var("outsideList", format!("variables.scope == '' ? '' : {}", listed(&outside_key))),
        super::var("catalogList", format!("variables.scope == '' ? '' : {}", listed(&catalog_key))),
        super::var("outsideAdmin", format!(
            "variables.scope != '' && !(namespaceObject.metadata.name in [{}]) && variables.adminRequests.exists(r, \
             (!has(r.exactly.selectors) || size(r.exactly.selectors) == 0) && \
             (variables.outsideList.contains('\\n' + {prefix} + r.exactly.deviceClassName + '\\n') || \
             (r.exactly.deviceClassName.endsWith({}) && !variables.catalogList.contains('\\n' + r.exactly.deviceClassName + '\\n'))))",
            exempt_namespaces.join(", "), lit(device_classes::SUFFIX))),
    ]);
    vars.extend(power());
    vars.extend(super::authorizer_vars(
        super::EXEMPT_VARIABLES_PREFIX,
        &Permission::Exempt(String::new()),
        Some("variables.tier"),
    ));
    vars
}

/// Claims and claim templates asking for admin access (`exactly` requests: the only ones `resource.k8s.io/v1`
/// lets ask for it): on a GPU DeviceClass they need `use adminaccess`; in `Enforce`, on a class outside the
/// namespace's tier with no selector, `exempt tiers/<tier>`.
fn claims_policy(policy: &Policy, tier_label: &str) -> Value {
    let spec = "(object.kind == 'ResourceClaimTemplate' ? object.spec.spec : object.spec)";
    let admin = format!(
        "has({spec}.devices) && has({spec}.devices.requests) && {spec}.devices.requests.exists(r, has(r.exactly) && \
         has(r.exactly.adminAccess) && r.exactly.adminAccess == true)"
    );
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ADMIN_CLAIMS_POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": super::parameters::param_kind(),
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["resourceclaims", "resourceclaimtemplates"]}]},
            "matchConditions": [{"name": "admin-access", "expression": admin}],
            "variables": claims_variables(policy, tier_label),
            "validations": [{
                "expression": "!variables.gpuAdmin || variables.mayAdmin",
                "messageExpression": "'gpu-admission (floor in the apiserver): ' + request.userInfo.username + ' may not \
                    create ' + object.kind + ' ' + object.metadata.name + ' asking for GPUs with adminAccess: true (devices \
                    other tenants\\' Pods are using): it needs use adminaccess (gpu-admission.io) in Kubernetes RBAC, by a rule \
                    that names it'",
                "reason": "Forbidden",
            }, {
                "expression": "!variables.enforce || variables.tier == '' || !variables.outsideAdmin || variables.exempt",
                "messageExpression": "'gpu-admission (floor in the apiserver): ' + object.kind + ' ' + object.metadata.name + \
                    ' asks with adminAccess: true, and no selector, for a DeviceClass that could be allocated devices outside \
                    tier ' + variables.tier + ' (' + params.data[variables.scope + '.names'] + '), or whose selectors \
                    gpu-admission cannot decide; gpu-admission is unavailable to add the tier\\'s selector'",
                "reason": "Forbidden",
            }],
        },
    })
}

/// The two policies and their bindings: the label's on Namespaces that carry it before or after the request,
/// the claims' on every namespace (kube-system's claims included: admin access there is as wide).
pub(super) fn render(policy: &Policy, tier_label: &str) -> Vec<Value> {
    vec![
        label_policy(),
        binding(
            ADMIN_ACCESS_POLICY,
            json!({"objectSelector": {"matchExpressions": [{
            "key": ADMIN_ACCESS_LABEL, "operator": "Exists"}]}}),
        ),
        claims_policy(policy, tier_label),
        super::binding(ADMIN_CLAIMS_POLICY, None),
    ]
}
