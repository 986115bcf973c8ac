//! The placing floor: a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, served from Kubernetes 1.36)
//! rendered from the same policy, variables and parameter object as the validating floor, so that with every
//! gpu-admission process down a GPU Pod without a class constraint is placed on its tier's classes by the
//! kube-apiserver itself instead of being denied by [`super::POD_POLICY`].
//!
//! For a Pod CREATE that asks for GPUs, in `Enforce`, in a tier that restricts classes, from a requester
//! without `exempt tiers/<tier>`, carrying no decision record (`gpu-admission.io/decided-at`), not already
//! held to its tier ([`super::cel::class_bound`]) and naming no class outside it itself (that Pod is left to the
//! validating floor's denial, which says what is allowed):
//! - a required node-affinity `In` on the tier's classes of the first class label key the tier uses (catalog
//!   order), ANDed into every non-empty required term (a new term when there is none), the shape of
//!   `/mutate-pod`'s tier default; and the annotation `gpu-admission.io/floor-placed` (the tier), by which `/mutate-pod`
//!   knows that constraint is the floor's and not the Pod's own choice;
//! - of the same GPU Pods (decided or not, placed or not), a PriorityClass beyond the tier's cap replaced by the
//!   cap (`priorityClassName`, `priority`, `preemptionPolicy`), as `/mutate-pod` caps a GPU Pod's own class; a
//!   CPU-only Pod beyond the cap is left to the validating floor's denial, as `/mutate-pod` leaves it to
//!   `/validate-pod`.
//!
//! The apiserver runs mutating admission policies before mutating webhooks, so this policy sees every Pod
//! first, whether `/mutate-pod` is up or not; `/mutate-pod` then narrows the floor's placement to the class it
//! chose (it appends its own `In` to every term: the intersection is its choice, which is inside the tier).
//! Each mutation is evaluated on the object the previous one produced, so placement and its annotation are one
//! JSON Patch.

use serde_json::{Value, json};

use super::{
    PARAMS_NAME, PARAMS_NAMESPACE, Target, TierNameError, cel, labels, match_conditions, params,
    var, variables,
};
use crate::names::EXEMPT_NAMESPACES;
use crate::names::decision::ANN_FLOOR_PLACED;
use gpu_admission_policy::Policy;

/// The MutatingAdmissionPolicy (and its binding's name).
pub const PLACING_POLICY: &str = "gpu-admission-floor-placing";

/// The typed object path of a Pod's required node-affinity selector, for the apiserver's CEL object types.
const REQUIRED: &str =
    "Object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
const REQUIRED_PATH: &str =
    "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";

/// The variables beyond the validating floor's: whether to place, on which key and values, whether to cap.
fn placing_variables(policy: &Policy, tier_label: &str) -> Vec<Value> {
    let mut vars = variables(policy, tier_label, Target::Pods);
    vars.extend([
        var(
            "decided",
            format!(
                "has(object.metadata.annotations) && {} in object.metadata.annotations",
                cel::lit(crate::names::decision::ANN_DECIDED_AT)
            ),
        ),
        // The authorizer last: asked only of a Pod the floor would place.
        var(
            "place",
            format!(
                "variables.enforce && variables.tier != '' && variables.gpu && !variables.decided && \
                 params.data[variables.scope + '.restricts'] == 'true' && !variables.bound && !({}) && \
                 !variables.exempt",
                cel::names_class_outside(policy)
            ),
        ),
        var(
            "key",
            format!(
                "{}.filter(k, variables.allowed.contains('\\n' + k + '='))[0]",
                cel::class_keys(policy)
            ),
        ),
        var(
            "values",
            "variables.allowed.split('\\n').filter(p, p.startsWith(variables.key + '=')).map(p, \
             p.substring(size(variables.key) + 1))"
                .into(),
        ),
        var(
            "beyondCap",
            "variables.enforce && variables.tier != '' && variables.gpu && variables.named && \
             variables.capped && !variables.exempt && !variables.exceptCapped && !(variables.priority <= int(params.data[variables.scope + '.cap']) && \
             (params.data[variables.scope + '.capNever'] != 'true' || variables.preemptNever))"
                .into(),
        ),
    ]);
    vars
}

/// The JSON Patch (a CEL list of `JSONPatch`) that places the Pod and marks it.
fn placement_patch() -> String {
    let class_in = format!(
        "{REQUIRED}.nodeSelectorTerms.matchExpressions{{key: variables.key, operator: 'In', values: variables.values}}"
    );
    let fresh = format!(
        "{REQUIRED}{{nodeSelectorTerms: [{REQUIRED}.nodeSelectorTerms{{matchExpressions: [{class_in}]}}]}}"
    );
    // An existing term, rebuilt as the typed object it must be in a patch value, with the class `In` added.
    let expr_copy = format!(
        "{REQUIRED}.nodeSelectorTerms.matchExpressions{{key: e.key, operator: e.operator, ?values: e.?values}}"
    );
    let field_copy = format!(
        "{REQUIRED}.nodeSelectorTerms.matchFields{{key: f.key, operator: f.operator, ?values: f.?values}}"
    );
    let with_class = format!(
        "{REQUIRED}.nodeSelectorTerms{{matchExpressions: (has(t.matchExpressions) ? \
         t.matchExpressions.map(e, {expr_copy}) : []) + [{class_in}], \
         ?matchFields: t.?matchFields.optMap(fs, fs.map(f, {field_copy}))}}"
    );
    // An empty term matches no node: it stays empty (adding the class would widen it), rebuilt like the others.
    let empty = "(!has(t.matchExpressions) || size(t.matchExpressions) == 0) && \
                 (!has(t.matchFields) || size(t.matchFields) == 0)";
    let mark = format!(
        "(has(object.metadata.annotations) ? [] : [JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{}}}}]) + \
         [JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey({}), value: variables.tier}}]",
        cel::lit(ANN_FLOOR_PLACED)
    );
    format!(
        "!variables.place ? [] : {mark} + (\
         !has(object.spec.affinity) ? [JSONPatch{{op: 'add', path: '/spec/affinity', value: \
           Object.spec.affinity{{nodeAffinity: Object.spec.affinity.nodeAffinity{{requiredDuringSchedulingIgnoredDuringExecution: {fresh}}}}}}}] : \
         !has(object.spec.affinity.nodeAffinity) ? [JSONPatch{{op: 'add', path: '/spec/affinity/nodeAffinity', value: \
           Object.spec.affinity.nodeAffinity{{requiredDuringSchedulingIgnoredDuringExecution: {fresh}}}}}] : \
         !has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? \
           [JSONPatch{{op: 'add', path: '{REQUIRED_PATH}', value: {fresh}}}] : \
         [JSONPatch{{op: 'replace', path: '{REQUIRED_PATH}/nodeSelectorTerms', value: \
           variables.terms.map(t, {empty} ? {REQUIRED}.nodeSelectorTerms{{}} : {with_class})}}])"
    )
}

/// The JSON Patch that replaces a PriorityClass beyond the tier's cap by the cap, with its value and
/// preemption policy (the apiserver's Priority plugin resolved the Pod's own class before this runs).
fn cap_patch() -> String {
    "!variables.beyondCap ? [] : [\
     JSONPatch{op: 'replace', path: '/spec/priorityClassName', value: params.data[variables.scope + '.capClass']}, \
     JSONPatch{op: 'add', path: '/spec/priority', value: int(params.data[variables.scope + '.cap'])}, \
     JSONPatch{op: 'add', path: '/spec/preemptionPolicy', value: params.data[variables.scope + '.capNever'] == 'true' ? \
       'Never' : params.data[?'priorityClass.preemption.' + params.data[variables.scope + '.capClass']].orValue('PreemptLowerPriority')}]"
        .into()
}

/// The placing floor for `policy`: the MutatingAdmissionPolicy and its binding (every namespace but the system
/// ones), reading the validating floor's parameter object (whose definition [`super::render`] renders).
pub fn render_placing(policy: &Policy, tier_label: &str) -> Result<Vec<Value>, TierNameError> {
    params(policy)?;
    let map = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": PLACING_POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "paramKind": super::parameters::param_kind(),
            "matchConstraints": {"resourceRules": Target::Pods.resource_rules()},
            "matchConditions": match_conditions(policy, Target::Pods),
            "variables": placing_variables(policy, tier_label),
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": placement_patch()}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": cap_patch()}},
            ],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": PLACING_POLICY, "labels": labels()},
        "spec": {
            "policyName": PLACING_POLICY,
            "paramRef": {"name": PARAMS_NAME, "namespace": PARAMS_NAMESPACE, "parameterNotFoundAction": "Deny"},
            "matchResources": {"namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXEMPT_NAMESPACES}]}},
        },
    });
    Ok(vec![map, binding])
}
