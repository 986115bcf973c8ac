//! The floor: what of the tier invariant the kube-apiserver enforces by itself, with no process of ours
//! running, as ValidatingAdmissionPolicies (CEL in the apiserver) rendered from the policy. One pure
//! rendering: [`render`] gives the objects (shipped in deploy/, printed by `gpu-admission floor render`),
//! [`params`] the parameter object's data (tiers, their class labels and priority caps, grants, the mode),
//! which the observer's leader writes and keeps in step with the policy ([`parameters`]: a custom resource,
//! never a ConfigMap, whose informer the apiserver could stop for good).
//!
//! In `Enforce` the floor denies, in every namespace but the system ones:
//! - a Pod asking for GPUs (a resource the policy counts, in any container, init container or sidecar; or DRA
//!   claims, which it cannot read) that is not held to its tier's classes by a `nodeSelector` or an `In` in
//!   every required node-affinity term on a class label (core's [`crate::tier_bound::class_bound`]);
//! - a Pod asking, by an extended resource with no claim (`deviceclass.resource.kubernetes.io/<class>`, a
//!   class's `extendedResourceName`), for a cluster DeviceClass outside its tier or one whose selectors cannot
//!   be decided: the parameters [`device_classes`] the observer writes from the cluster's DeviceClasses, each
//!   judged by core's own functions (and every such resource of a GPU class counts as GPUs above);
//! - a Pod naming a PriorityClass whose resolved `spec.priority` is above its tier's cap, or which may
//!   preempt under a cap that says `Never` ([`crate::policy::TierRules::priority_beyond_cap`]);
//! - in a namespace without a tier under `untieredNamespaces: Deny`, GPU Pods and Pods naming a PriorityClass;
//! - a workload's Pod template (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs) asking for
//!   GPUs that names a class outside its tier itself, or naming a PriorityClass beyond the cap (by the policy's
//!   buckets), and in an untiered namespace under `Deny` as a Pod: what `/validate-pod` denies of a template,
//!   no more (a template is never mutated, so one without a class constraint is admitted; see [`Target`]);
//!
//! requesters RBAC grants `exempt tiers/<tier>` excepted; and in every mode
//! it denies setting, changing or removing a Namespace's tier label without `update tiers/<tier>`
//! ([`crate::admission::validate_namespace`]).
//!
//! A missing parameter object denies, never admits: the apiserver looks the parameters up before it evaluates
//! a policy's `matchConditions`, so it then denies every Pod CREATE outside the system namespaces and every
//! change of a Namespace carrying a tier label (the bindings' object selector), until the observer (or an
//! apply) puts it back. None is shipped (a custom resource cannot be applied with its definition in one
//! `kubectl apply`): from the install to the observer's first round, the floor denies what it matches.

mod admin_access;
mod cel;
pub mod device_classes;
mod manifest_based;
pub mod parameters;
mod placing;

use std::collections::BTreeMap;

use gpu_admission_policy::names::is_label_value;
use gpu_admission_policy::{Policy, UntieredNamespaces};
use serde_json::{Value, json};

use crate::authority::Permission;
use crate::names::EXEMPT_NAMESPACES;
pub use admin_access::{ADMIN_ACCESS_POLICY, ADMIN_CLAIMS_POLICY};

/// The floor's variables that hold the authorizer's answers about the `exempt` power (`exempt` itself and the
/// questions it asks, all named with this prefix): what an offline evaluation states instead of asking.
pub const EXEMPT_VARIABLES_PREFIX: &str = "exempt";
/// The suffix of a scope's parameter key listing the catalog's DeviceClasses (`<class>.gpu-admission.io`) of
/// the classes it allows.
pub const CATALOG_DEVICE_CLASSES_SUFFIX: &str = ".catalogDeviceClasses";
pub use manifest_based::{ManifestBasedFloor, STATIC_SUFFIX, render_manifest_based};
pub use placing::{PLACING_POLICY, render_placing};

/// The parameter object's name (in the product's namespace).
pub const PARAMS_NAME: &str = "gpu-admission-floor";
/// The product's namespace, where the parameter object lives.
pub const PARAMS_NAMESPACE: &str = "gpu-admission";
/// The ValidatingAdmissionPolicy for Pods (and its binding's name).
pub const POD_POLICY: &str = "gpu-admission-floor-pods";
/// The ValidatingAdmissionPolicy for workloads' Pod templates (and its binding's name): see [`Target`].
pub const WORKLOAD_POLICY: &str = "gpu-admission-floor-workloads";
/// The ValidatingAdmissionPolicy for Namespaces' tier label (and its binding's name).
pub const NAMESPACE_POLICY: &str = "gpu-admission-floor-namespaces";

/// The parameter key of a namespace's exceptions, as CEL spells it for the object's namespace.
const EXCEPT: &str = "('except.' + namespaceObject.metadata.name)";

/// The parameter entries of the live `GpuPolicyException`s at `now`, by namespace (the observer adds them
/// to [`params`] and drops an expired one at its next round): `except.<namespace>` the `key=value` labels of
/// every class a live `Classes` exception of the namespace allows, `except.<namespace>.cap` the highest
/// value of a live `PriorityCap` exception's bucket. Coarser than `/validate-pod`: the floor cannot follow
/// owner references (CEL reads no other object), so with these entries it holds every Pod and template of
/// the namespace to the tier as the union of its exceptions relaxes it.
pub fn exception_params(
    policy: &Policy,
    exceptions: &[crate::exception::Exception],
    now: time::OffsetDateTime,
) -> BTreeMap<String, String> {
    use crate::exception::Rule;
    let mut classes: BTreeMap<&str, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut caps: BTreeMap<&str, i32> = BTreeMap::new();
    for e in exceptions.iter().filter(|e| e.live(now)) {
        let ns = e.id.namespace.as_str();
        if e.relaxes(Rule::Classes) {
            let pairs = policy
                .classes
                .iter()
                .filter(|c| e.spec.classes.contains(&c.name))
                .map(|c| format!("{}={}", c.node_label_key, c.node_label_value));
            classes.entry(ns).or_default().extend(pairs);
        }
        let bucket = e
            .spec
            .max_priority_class
            .as_deref()
            .filter(|_| e.relaxes(Rule::PriorityCap));
        if let Some(b) = bucket.and_then(|b| policy.priority.buckets.iter().find(|x| x.name == b)) {
            let cap = caps.entry(ns).or_insert(b.value);
            *cap = (*cap).max(b.value);
        }
    }
    let mut out: BTreeMap<String, String> = classes
        .into_iter()
        .map(|(ns, pairs)| {
            (
                format!("except.{ns}"),
                list(pairs.iter().map(String::as_str)),
            )
        })
        .collect();
    out.extend(
        caps.into_iter()
            .map(|(ns, v)| (format!("except.{ns}.cap"), v.to_string())),
    );
    out
}

/// Why a policy cannot be carried by the floor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tier `{0}` cannot be a namespace label value, so the floor cannot carry it")]
pub struct TierNameError(pub String);

fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut s = String::from("\n");
    for i in items {
        s.push_str(i);
        s.push('\n');
    }
    s
}

/// What one scope (a tier, or a tier widened by a namespace grant) allows, as parameter entries.
fn scope_entries(
    policy: &Policy,
    tier: usize,
    grant: Option<usize>,
    key: &str,
) -> Vec<(String, String)> {
    let Some(scope) = policy.scope_with(tier, grant.map(|g| &policy.namespace_grants[g])) else {
        return Vec::new();
    };
    let allowed: Vec<&gpu_admission_policy::GpuClass> = policy
        .classes
        .iter()
        .enumerate()
        .filter(|(i, _)| scope.allows(*i))
        .map(|(_, c)| c)
        .collect();
    let pairs: Vec<String> = allowed
        .iter()
        .map(|c| format!("{}={}", c.node_label_key, c.node_label_value))
        .collect();
    let catalog: Vec<String> = allowed
        .iter()
        .map(|c| gpu_admission_policy::device_classes::device_class_name(&c.name))
        .collect();
    let cap = scope.max_priority_class();
    let mut out = vec![
        (
            format!("{key}.classes"),
            list(pairs.iter().map(String::as_str)),
        ),
        (
            format!("{key}.names"),
            allowed
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            format!("{key}.restricts"),
            (allowed.len() < policy.classes.len()).to_string(),
        ),
        (
            format!("{key}{CATALOG_DEVICE_CLASSES_SUFFIX}"),
            list(catalog.iter().map(String::as_str)),
        ),
    ];
    if let Some(cap) = cap {
        out.push((format!("{key}.cap"), cap.value.to_string()));
        out.push((format!("{key}.capClass"), cap.name.clone()));
        out.push((
            format!("{key}.capNever"),
            (cap.preemption_policy == "Never").to_string(),
        ));
    }
    out
}

/// The parameter object's data for a policy: what the floor's CEL reads at every admission (no DeviceClass
/// of a cluster known: [`params_with_device_classes`]).
pub fn params(policy: &Policy) -> Result<BTreeMap<String, String>, TierNameError> {
    params_with_device_classes(policy, &[])
}

/// The parameter object's data for a policy and the cluster's DeviceClasses ([`device_classes::params`]):
/// what the observer writes.
pub fn params_with_device_classes(
    policy: &Policy,
    classes: &[k8s_openapi::api::resource::v1::DeviceClass],
) -> Result<BTreeMap<String, String>, TierNameError> {
    if let Some(t) = policy.tiers.iter().find(|t| !is_label_value(&t.name)) {
        return Err(TierNameError(t.name.clone()));
    }
    let mut data = BTreeMap::new();
    data.insert("mode".into(), policy.enforcement.mode.as_str().into());
    data.insert(
        "tiers".into(),
        list(policy.tiers.iter().map(|t| t.name.as_str())),
    );
    data.insert(
        "defaultTier".into(),
        policy.tiers[policy.default_tier].name.clone(),
    );
    let untiered = match policy.untiered_namespaces {
        UntieredNamespaces::DefaultTier => "DefaultTier",
        UntieredNamespaces::Deny => "Deny",
        UntieredNamespaces::Ignore => "Ignore",
    };
    data.insert("untieredNamespaces".into(), untiered.into());
    data.insert(
        "grants".into(),
        list(policy.namespace_grants.iter().map(|g| g.namespace.as_str())),
    );
    // The policy's PriorityClasses, for templates (a Pod's class the apiserver resolves itself).
    for b in &policy.priority.buckets {
        data.insert(
            format!("priorityClass.value.{}", b.name),
            b.value.to_string(),
        );
        let preemption = format!("priorityClass.preemption.{}", b.name);
        data.insert(preemption, b.preemption_policy.clone());
    }
    for (i, t) in policy.tiers.iter().enumerate() {
        data.extend(scope_entries(policy, i, None, &format!("tier.{}", t.name)));
        for (j, g) in policy.namespace_grants.iter().enumerate() {
            let key = format!("grant.{}.{}", g.namespace, t.name);
            data.extend(scope_entries(policy, i, Some(j), &key));
        }
    }
    data.extend(device_classes::params(policy, classes));
    Ok(data)
}

/// A binding with the parameter object; `excluded`: namespaces whose objects it leaves alone.
fn binding(name: &str, excluded: Option<&[&str]>) -> Value {
    let mut spec = json!({
        "policyName": name,
        "validationActions": ["Deny"],
        "paramRef": {"name": PARAMS_NAME, "namespace": PARAMS_NAMESPACE, "parameterNotFoundAction": "Deny"},
    });
    if let Some(excluded) = excluded {
        spec["matchResources"] = json!({"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}]}});
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels()},
        "spec": spec,
    })
}

/// Every Namespace, as `/validate-namespace`, but only those with a tier label before or after the request
/// (an object selector matches either): a missing parameter object then stops tier label changes, not every
/// Namespace update.
fn namespace_binding(tier_label: &str) -> Value {
    let mut b = binding(NAMESPACE_POLICY, None);
    b["spec"]["matchResources"] = json!({"objectSelector": {"matchExpressions": [{
        "key": tier_label, "operator": "Exists"}]}});
    b
}

/// The labels of every object of the floor.
const LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "gpu-admission-floor"),
    ("app.kubernetes.io/component", "floor"),
];

fn labels() -> Value {
    Value::Object(
        (LABELS.iter())
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect(),
    )
}

fn var(name: &str, expression: String) -> Value {
    json!({"name": name, "expression": expression})
}

/// The variables of [`cel::holds`]: whether the requester holds `power` (`variables.<prefix>`).
fn authorizer_vars(prefix: &str, power: &Permission, name: Option<&str>) -> Vec<Value> {
    cel::holds(prefix, power, name)
        .into_iter()
        .map(|(n, e)| var(&n, e))
        .collect()
}

/// The workloads whose Pod templates the floor checks, as `(API group, kind, resource)` (all `v1`): the kinds
/// of `workloads.validate.gpu-admission.io`.
pub const WORKLOAD_KINDS: [(&str, &str, &str); 6] = [
    ("apps", "Deployment", "deployments"),
    ("apps", "StatefulSet", "statefulsets"),
    ("apps", "DaemonSet", "daemonsets"),
    ("apps", "ReplicaSet", "replicasets"),
    ("batch", "Job", "jobs"),
    ("batch", "CronJob", "cronjobs"),
];

/// What a policy of the floor admits: Pods, or the Pod templates of workloads.
///
/// Templates get a policy of their own (the same variables and validations, on `variables.spec`) rather than
/// more resources on the Pod policy: they are held to less. A workload is never mutated (only its Pods are),
/// so a template without a class constraint is what every GPU Deployment looks like today, and `/validate-pod`
/// denies of a template only what it names itself: a class outside the tier on a class label key, a
/// PriorityClass beyond the cap (by the policy's buckets: a template has no resolved `spec.priority`), and GPUs
/// or a PriorityClass in an untiered namespace under `Deny`. Its Pods meet the Pod policy when created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Pods,
    Workloads,
}

impl Target {
    /// The policy's (and its binding's) name.
    pub fn policy_name(self) -> &'static str {
        match self {
            Target::Pods => POD_POLICY,
            Target::Workloads => WORKLOAD_POLICY,
        }
    }

    /// The Pod spec the policy reads, as CEL on `object` (usable in `matchConditions`, where no variable is).
    fn spec(self) -> &'static str {
        match self {
            Target::Pods => "object.spec",
            Target::Workloads => {
                "(has(object.spec.jobTemplate) ? object.spec.jobTemplate.spec.template.spec : object.spec.template.spec)"
            }
        }
    }

    fn resource_rules(self) -> Value {
        match self {
            Target::Pods => {
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}])
            }
            // CREATE only: an UPDATE's new template reaches the apiserver again as a CREATE (a Deployment's
            // ReplicaSet, a CronJob's Job) or as Pods.
            Target::Workloads => {
                let mut rules: Vec<Value> = Vec::new();
                for (group, _, resource) in WORKLOAD_KINDS {
                    match rules.iter_mut().find(|r| r["apiGroups"][0] == group) {
                        Some(r) => r["resources"]
                            .as_array_mut()
                            .into_iter()
                            .for_each(|a| a.push(json!(resource))),
                        None => rules.push(json!({"apiGroups": [group], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": [resource]})),
                    }
                }
                Value::Array(rules)
            }
        }
    }

    /// How the PriorityClass named is resolved: a Pod's by the apiserver's Priority plugin (`spec.priority`,
    /// `spec.preemptionPolicy` set before validation); a template's by the policy's buckets in the
    /// parameters (a class that is no bucket is not judged, as `/validate-pod` does not judge a class it does
    /// not know).
    fn priority_variables(self) -> [Value; 3] {
        let own_never =
            "has(variables.spec.preemptionPolicy) && variables.spec.preemptionPolicy == 'Never'";
        match self {
            Target::Pods => [
                var("resolved", "variables.named".into()),
                var(
                    "priority",
                    "has(variables.spec.priority) ? variables.spec.priority : 0".into(),
                ),
                var("preemptNever", own_never.into()),
            ],
            Target::Workloads => [
                var(
                    "resolved",
                    "variables.named && \
                    ('priorityClass.value.' + variables.spec.priorityClassName) in params.data"
                        .into(),
                ),
                var(
                    "priority",
                    "variables.resolved ? \
                    int(params.data['priorityClass.value.' + variables.spec.priorityClassName]) : 0"
                        .into(),
                ),
                var(
                    "preemptNever",
                    format!(
                        "has(variables.spec.preemptionPolicy) ? ({own_never}) : \
                    (variables.resolved && params.data['priorityClass.preemption.' + variables.spec.priorityClassName] == 'Never')"
                    ),
                ),
            ],
        }
    }
}

/// Which scope of the parameters the request's namespace is held to: `enforce`, the namespace's tier `label`,
/// whether it is a tier (`tiered`), `untieredDeny`, the `tier` it is held to (`''`: none) and its parameter
/// `scope` (`tier.<t>`, or `grant.<namespace>.<t>`). Every floor policy reading a tier reads these.
fn scope_variables(tier_label: &str) -> Vec<Value> {
    vec![
        var("enforce", "params.data['mode'] == 'Enforce'".into()),
        var("label", cel::tier_label_value(tier_label, "namespaceObject")),
        var("tiered", "params.data['tiers'].contains('\\n' + variables.label + '\\n')".into()),
        var("untieredDeny", "!variables.tiered && params.data['untieredNamespaces'] == 'Deny'".into()),
        var("tier", "variables.tiered ? variables.label : \
            (params.data['untieredNamespaces'] == 'DefaultTier' ? params.data['defaultTier'] : '')".into()),
        var("scope", "variables.tier == '' ? '' : \
            (params.data['grants'].contains('\\n' + namespaceObject.metadata.name + '\\n') ? \
            'grant.' + namespaceObject.metadata.name + '.' + variables.tier : 'tier.' + variables.tier)".into()),
    ]
}

fn variables(policy: &Policy, tier_label: &str, target: Target) -> Vec<Value> {
    let mut vars = vec![var("spec", target.spec().into())];
    vars.extend(scope_variables(tier_label));
    vars.extend([
        var("gpu", cel::asks_for_gpus(policy, "variables.spec", target == Target::Pods,
            (target == Target::Pods).then(|| cel::class_backed("r")).as_deref())),
        var("named", "has(variables.spec.priorityClassName) && variables.spec.priorityClassName != ''".into()),
        var("allowed", "variables.scope == '' ? '' : params.data[variables.scope + '.classes']".into()),
        // The tier's classes and those the namespace's live Classes exceptions allow (see [`exception_params`]).
        var("excepted", format!("variables.allowed + ({EXCEPT} in params.data ? params.data[{EXCEPT}] : '')")),
        var("selector", "has(variables.spec.nodeSelector) ? variables.spec.nodeSelector : {}".into()),
        var("terms", "has(variables.spec.affinity) && has(variables.spec.affinity.nodeAffinity) && \
            has(variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ? \
            variables.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms : []".into()),
    ]);
    vars.extend(authorizer_vars(
        "exempt",
        &Permission::Exempt(String::new()),
        Some("variables.tier != '' ? variables.tier : params.data['defaultTier']"),
    ));
    if target == Target::Pods {
        vars.push(var("bound", cel::class_bound(policy)));
        // Extended resources of the cluster's DeviceClasses outside the scope (an empty or missing list, as an
        // observer older than the floor writes, costs nothing).
        let key = format!(
            "variables.scope + {}",
            cel::lit(device_classes::OUTSIDE_SUFFIX)
        );
        let outside = format!("params.data[{key}]");
        vars.push(var(
            "outsideClass",
            format!(
                "variables.scope != '' && ({key}) in params.data && {outside} != '\\n' && {}",
                cel::asks_resource(
                    "variables.spec",
                    &format!("{outside}.contains('\\n' + r + '\\n')")
                )
            ),
        ));
    }
    vars.extend(target.priority_variables());
    vars.push(var(
        "exceptCapped",
        format!("({EXCEPT} + '.cap') in params.data && variables.priority <= int(params.data[{EXCEPT} + '.cap'])"),
    ));
    vars.push(var(
        "capped",
        "variables.resolved && variables.scope != '' && \
        (variables.scope + '.cap') in params.data"
            .into(),
    ));
    vars
}

/// The class rule: a Pod must be held to its tier's classes, a template must not name a class outside them.
fn class_validation(policy: &Policy, target: Target) -> Value {
    let off = "!variables.enforce || variables.tier == ''";
    let keys = cel::lit(&class_key_text(policy));
    match target {
        Target::Pods => json!({
            "expression": format!("{off} || !variables.gpu || \
                params.data[variables.scope + '.restricts'] != 'true' || variables.bound || variables.exempt"),
            "messageExpression": format!("'gpu-admission (floor in the apiserver): this Pod asks for GPUs but is not \
                constrained to the GPU classes of tier ' + variables.tier + ' (' + params.data[variables.scope + '.names'] + \
                ') by a nodeSelector or an In in every required node-affinity term on ' + {keys} + '. gpu-admission, which \
                adds that constraint, is unavailable or did not run: state one of these classes yourself, or retry'"),
            "reason": "Forbidden",
        }),
        Target::Workloads => json!({
            "expression": format!("{off} || !variables.gpu || !({}) || variables.exempt",
                cel::names_class_outside(policy)),
            "messageExpression": format!("'gpu-admission (floor in the apiserver): the pod template of this ' + object.kind + \
                ' asks for GPUs and names a GPU class outside tier ' + variables.tier + ' (' + params.data[variables.scope + '.names'] + \
                ') on ' + {keys}"),
            "reason": "Forbidden",
        }),
    }
}

/// The cluster's DeviceClasses (a Pod's): an extended resource backed by a DeviceClass outside the tier, or
/// one whose selectors cannot be decided ([`device_classes`]), as `/validate-pod` denies it.
fn device_class_validation() -> Value {
    json!({
        "expression": "!variables.enforce || variables.tier == '' || !variables.outsideClass || variables.exempt",
        "messageExpression": "'gpu-admission (floor in the apiserver): this Pod asks for devices of a DeviceClass by an \
            extended resource (deviceclass.resource.kubernetes.io/<class>, or the class\\'s extendedResourceName) that \
            could be allocated devices outside tier ' + variables.tier + ' (' + params.data[variables.scope + '.names'] + \
            '), or whose selectors gpu-admission cannot decide'",
        "reason": "Forbidden",
    })
}

/// Only objects the floor has a rule for: a missing parameter object then stops these, not every one.
fn match_conditions(policy: &Policy, target: Target) -> Value {
    let spec = target.spec();
    json!([{
        "name": "asks-for-gpus-or-names-a-priority-class",
        "expression": format!(
            "(has({spec}.priorityClassName) && {spec}.priorityClassName != '') || {}",
            cel::asks_for_gpus(policy, spec, target == Target::Pods,
                (target == Target::Pods).then(|| cel::maybe_class_backed("r")).as_deref())),
    }])
}

/// A floor policy for `target`: GPU class (bound for Pods, no out-of-tier class for templates), priority
/// cap, untiered namespaces under `Deny`.
fn admission_policy(policy: &Policy, tier_label: &str, target: Target) -> Value {
    let off = "!variables.enforce || variables.tier == ''";
    let mut object = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": target.policy_name(), "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": parameters::param_kind(),
            "matchConstraints": {"resourceRules": target.resource_rules()},
            "matchConditions": match_conditions(policy, target),
            "variables": variables(policy, tier_label, target),
            "validations": [
                class_validation(policy, target),
                {
                    "expression": format!("{off} || !variables.named || !variables.capped || \
                        (variables.priority <= int(params.data[variables.scope + '.cap']) && \
                        (params.data[variables.scope + '.capNever'] != 'true' || variables.preemptNever)) || \
                        variables.exceptCapped || variables.exempt"),
                    "messageExpression": "'gpu-admission (floor in the apiserver): PriorityClass ' + variables.spec.priorityClassName + \
                        ' (' + string(variables.priority) + (has(variables.spec.preemptionPolicy) ? ', ' + variables.spec.preemptionPolicy : '') + \
                        ') is beyond the cap of tier ' + variables.tier + ': ' + params.data[variables.scope + '.capClass'] + ' (' + \
                        params.data[variables.scope + '.cap'] + (params.data[variables.scope + '.capNever'] == 'true' ? ', Never' : '') + ')'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!variables.enforce || !variables.untieredDeny || \
                        (!variables.gpu && !variables.named) || variables.exempt",
                    "messageExpression": format!("'gpu-admission (floor in the apiserver): namespace ' + namespaceObject.metadata.name + \
                        ' has no tier of the policy (label ' + {} + ') and untieredNamespaces is Deny: no GPU Pod and no Pod naming a \
                        PriorityClass runs here'", cel::lit(tier_label)),
                    "reason": "Forbidden",
                },
            ],
        },
    });
    if let (Target::Pods, Some(v)) = (target, object["spec"]["validations"].as_array_mut()) {
        v.insert(1, device_class_validation());
    }
    object
}

fn class_key_text(policy: &Policy) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for c in &policy.classes {
        if !keys.contains(&c.node_label_key.as_str()) {
            keys.push(&c.node_label_key);
        }
    }
    keys.join(", ")
}

/// The Namespace policy: the tier label is RBAC's (`update tiers/<tier>` for the tier left and the tier set),
/// through the Namespace and each subresource that persists its labels
/// ([`crate::admission::validate_namespace::NAMESPACE_RESOURCES`]).
fn namespace_policy(tier_label: &str) -> Value {
    let present = |o: &str| {
        format!(
            "{o} != null && has({o}.metadata.labels) && {key} in {o}.metadata.labels",
            key = cel::lit(tier_label)
        )
    };
    let value = |o: &str| format!("{o}.metadata.labels[{}]", cel::lit(tier_label));
    let changed = format!(
        "({po}) != ({pn}) || (({po}) && {vo} != {vn})",
        po = present("oldObject"),
        pn = present("object"),
        vo = value("oldObject"),
        vn = value("object")
    );
    let may = |o: &str, holds: &str| format!("!({p}) || variables.{holds}", p = present(o));
    let mut variables = authorizer_vars(
        "mayLeave",
        &Permission::SetTier(String::new()),
        Some(&value("oldObject")),
    );
    variables.extend(authorizer_vars(
        "mayEnter",
        &Permission::SetTier(String::new()),
        Some(&value("object")),
    ));
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAMESPACE_POLICY, "labels": labels()},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": parameters::param_kind(),
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": crate::admission::validate_namespace::NAMESPACE_RESOURCES}]},
            "matchConditions": [{"name": "tier-label-changes", "expression": changed}],
            "variables": variables,
            "validations": [
                {
                    "expression": format!("({}) && ({})", may("oldObject", "mayLeave"), may("object", "mayEnter")),
                    "messageExpression": format!("'gpu-admission (floor in the apiserver): ' + request.userInfo.username + \
                        ' may not set, change or remove the tier label ' + {label} + ' of namespace ' + object.metadata.name + \
                        ': it needs update tiers/<tier> (gpu-admission.io) in Kubernetes RBAC for ' + \
                        (({po}) ? 'the tier ' + {vo} + ' it leaves' : '') + (({po}) && ({pn}) ? ' and ' : '') + \
                        (({pn}) ? 'the tier ' + {vn} + ' it sets' : '')",
                        label = cel::lit(tier_label), po = present("oldObject"), pn = present("object"),
                        vo = value("oldObject"), vn = value("object")),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

/// Every object of the floor for `policy`: the parameter object's definition ([`parameters`]), the three
/// ValidatingAdmissionPolicies (Pods, workloads' Pod templates, Namespaces), their bindings (every namespace
/// but the system ones), then DRA admin access's two policies and bindings (the Namespace label, GPU claims:
/// [`admin_access`]). The parameter object itself is the observer's ([`params`]' data).
pub fn render(policy: &Policy, tier_label: &str) -> Result<Vec<Value>, TierNameError> {
    params(policy)?;
    let mut objects = vec![
        parameters::definition(),
        admission_policy(policy, tier_label, Target::Pods),
        binding(POD_POLICY, Some(&EXEMPT_NAMESPACES)),
        admission_policy(policy, tier_label, Target::Workloads),
        binding(WORKLOAD_POLICY, Some(&EXEMPT_NAMESPACES)),
        namespace_policy(tier_label),
        namespace_binding(tier_label),
    ];
    objects.extend(admin_access::render(policy, tier_label));
    Ok(objects)
}

#[cfg(test)]
mod tests;
