//! The CEL the floor's ValidatingAdmissionPolicies run inside the kube-apiserver. What a policy change can
//! move (tiers, their classes and caps, grants, the mode) is read from the parameter object
//! ([`super::params`]); what the expressions are shaped by (the GPU resource names, the catalog's class
//! label keys, the tier label key) is written in here from the policy.
//!
//! Lists in the parameters are strings of `\n`-delimited entries (`"\nbronze\ngold\n"`): the object's data are
//! strings, and a membership test is then a plain `contains('\n' + x + '\n')`, exact because no label key,
//! label value or tier name of the floor holds a newline.

use gpu_admission_policy::Policy;

use crate::authority::{Permission, Question, SUPERUSER_GROUP};
use gpu_admission_policy::gpu_resources::{GpuResourceKind, MEMORY_PLACEHOLDER};

/// A CEL string literal (single-quoted; `\`, `'` and newlines escaped).
pub(crate) fn lit(s: &str) -> String {
    format!(
        "'{}'",
        s.replace('\\', "\\\\")
            .replace('\'', "\\'")
            .replace('\n', "\\n")
    )
}

/// The regular expression of a `gpuResources` pattern (`nvidia.com/mig-*g.{memoryGiB}gb`, `nvidia.com/**`):
/// `**` is `[A-Za-z0-9._-]+`, `*` is `[a-z0-9]+`, the memory placeholder digits, everything else literal
/// (the rule the policy crate's `match_pattern` follows).
pub(crate) fn pattern_regex(pattern: &str) -> String {
    let mut out = String::from("^");
    let mut rest = pattern;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(MEMORY_PLACEHOLDER) {
            out.push_str("[0-9]+");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("**") {
            out.push_str("[A-Za-z0-9._-]+");
            rest = r;
        } else if let Some(r) = rest.strip_prefix('*') {
            out.push_str("[a-z0-9]+");
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '/' {
                out.push(c);
            } else {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    out.push('$');
    out
}

/// `r` (a resource name) is one the policy counts as GPUs, by the policy crate's `lookup`: an exact name
/// first (a GPU kind, or a `notGpu` exception), else the first pattern that matches, in list order.
fn is_gpu_resource(policy: &Policy, r: &str) -> String {
    use gpu_admission_policy::gpu_resources::is_pattern;
    let rules = if policy.gpu_resources.is_empty() {
        gpu_admission_policy::gpu_resources::default_rules()
    } else {
        policy.gpu_resources.clone()
    };
    // DeviceClass rules name no container resource.
    let rules: Vec<_> = rules
        .into_iter()
        .filter(|g| g.kind != GpuResourceKind::DraDeviceClass)
        .collect();
    let exact = |gpu: bool| -> Vec<String> {
        rules
            .iter()
            .filter(|g| !is_pattern(&g.name) && (g.kind != GpuResourceKind::NotGpu) == gpu)
            .map(|g| lit(&g.name))
            .collect()
    };
    // The first pattern that matches decides: a GPU pattern counts unless a `notGpu` pattern before it
    // matches too (flat, so that no evaluator nests deeper than the list is long).
    let mut gpu_patterns = Vec::new();
    let mut exceptions_before: Vec<String> = Vec::new();
    for g in rules.iter().filter(|g| is_pattern(&g.name)) {
        let m = format!("{r}.matches({})", lit(&pattern_regex(&g.name)));
        if g.kind == GpuResourceKind::NotGpu {
            exceptions_before.push(format!("!{m}"));
        } else {
            gpu_patterns.push(
                std::iter::once(m)
                    .chain(exceptions_before.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" && "),
            );
        }
    }
    let patterns = if gpu_patterns.is_empty() {
        "false".to_string()
    } else {
        format!("(({}))", gpu_patterns.join(") || ("))
    };
    format!(
        "({r} in [{}] || (!({r} in [{}]) && {patterns}))",
        exact(true).join(", "),
        exact(false).join(", ")
    )
}

/// Some container or init container (native sidecars included) of the Pod spec `spec` (a CEL expression:
/// `object.spec`, or a workload's template spec) asks, in its requests or limits, a non-zero quantity of a
/// resource `r` for which the CEL predicate `counts` (on `r`) holds.
pub(crate) fn asks_resource(spec: &str, counts: &str) -> String {
    let map = |map: &str| {
        format!(
            "(has(c.resources.{map}) && c.resources.{map}.exists(r, ({counts}) && string(c.resources.{map}[r]) != '0'))"
        )
    };
    format!(
        "[{spec}.containers, has({spec}.initContainers) ? {spec}.initContainers : []]\
         .exists(cs, cs.exists(c, has(c.resources) && ({} || {})))",
        map("requests"),
        map("limits")
    )
}

/// The resources `r` the cluster's GPU DeviceClasses back (`deviceclass.resource.kubernetes.io/<class>`, a
/// class's `extendedResourceName`), as the observer writes them into the parameters
/// ([`super::device_classes`]); none while the parameters hold no such list (written by an observer older than
/// the floor).
pub(crate) fn class_backed(r: &str) -> String {
    let key = lit(super::device_classes::GPU_RESOURCES);
    format!("({key} in params.data && params.data[{key}].contains('\\n' + {r} + '\\n'))")
}

/// `r` may be backed by a DeviceClass: the DeviceClass prefix, or an extended resource of a domain outside
/// Kubernetes' own (the names a DeviceClass's `extendedResourceName` may take). For match conditions, which
/// read no parameters in every form of the floor: the validations then tell by the parameters.
pub(crate) fn maybe_class_backed(r: &str) -> String {
    format!(
        "{r}.startsWith({}) || ({r}.contains('/') && !{r}.matches('^([^/]*[.])?kubernetes[.]io/'))",
        lit(gpu_admission_policy::gpu_resources::DEVICE_CLASS_RESOURCE_PREFIX)
    )
}

/// The Pod spec `spec` (a CEL expression: `object.spec`, or a workload's template spec) asks for GPUs: a
/// resource the policy counts, or one for which the CEL predicate `also` (on `r`) holds, non-zero, in the
/// requests or limits of a container or an init container (native sidecars included), or, with `claims`,
/// DRA claims (which the floor cannot read: held to the tier like GPUs, as `/validate-pod` holds a Pod's
/// claims it cannot read; a template's unread claims it does not hold, so neither does the floor).
pub(crate) fn asks_for_gpus(
    policy: &Policy,
    spec: &str,
    claims: bool,
    also: Option<&str>,
) -> String {
    let gpu = is_gpu_resource(policy, "r");
    let counts = match also {
        Some(also) => format!("{gpu} || {also}"),
        None => gpu,
    };
    let containers = asks_resource(spec, &counts);
    if claims {
        format!("(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0) || {containers}")
    } else {
        containers
    }
}

/// The catalog's class label keys, as a CEL list.
pub(crate) fn class_keys(policy: &Policy) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for c in &policy.classes {
        if !keys.contains(&c.node_label_key.as_str()) {
            keys.push(&c.node_label_key);
        }
    }
    let keys: Vec<String> = keys.into_iter().map(lit).collect();
    format!("[{}]", keys.join(", "))
}

/// One way of scheduling (the `nodeSelector` ANDed with the expressions `exprs`) is held to the allowed
/// classes: on some class label key, the values a node may carry (the selector's value and every `In` list
/// on that key, intersected) are all allowed `key=value` pairs — core's `tier_bound::branch_bound`, where
/// an empty intersection (a branch no node matches) holds too.
fn branch_bound(policy: &Policy, exprs: &str) -> String {
    let allowed =
        |k: &str, v: &str| format!("variables.excepted.contains('\\n' + {k} + '=' + {v} + '\\n')");
    let in_all = |v: &str| {
        format!(
            "{exprs}.all(f, f.key != k || f.operator != 'In' || (has(f.values) && {v} in f.values))"
        )
    };
    format!(
        "{keys}.exists(k, (k in variables.selector) ? (!{in_sel} || {allowed_sel}) : \
         ({exprs}.exists(e, e.key == k && e.operator == 'In') && {exprs}.all(e, e.key != k || e.operator != 'In' || \
         !has(e.values) || e.values.all(v, !{in_v} || {allowed_v}))))",
        keys = class_keys(policy),
        in_sel = in_all("variables.selector[k]"),
        allowed_sel = allowed("k", "variables.selector[k]"),
        in_v = in_all("v"),
        allowed_v = allowed("k", "v"),
    )
}

/// Every way of scheduling the Pod is held to the allowed classes (core's `tier_bound::class_bound`): the
/// `nodeSelector` alone when there are no required node-affinity terms, else with each term (an empty term
/// matches no node).
pub(crate) fn class_bound(policy: &Policy) -> String {
    format!(
        "size(variables.terms) == 0 ? {alone} : variables.terms.all(t, \
         ((!has(t.matchExpressions) || size(t.matchExpressions) == 0) && (!has(t.matchFields) || size(t.matchFields) == 0)) || \
         {with_term})",
        alone = branch_bound(policy, "[]"),
        with_term = branch_bound(
            policy,
            "(has(t.matchExpressions) ? t.matchExpressions : [])"
        ),
    )
}

/// The template names a class outside the allowed ones itself (`/validate-pod`'s class check of a pod
/// template, core's `placement::named_classes`): on a class label key, a `nodeSelector` value or a value of an
/// `In` in some required node-affinity term that is no allowed `key=value` pair (not a catalog class counts).
pub(crate) fn names_class_outside(policy: &Policy) -> String {
    let outside = |v: &str| format!("!variables.excepted.contains('\\n' + k + '=' + {v} + '\\n')");
    format!(
        "{keys}.exists(k, (k in variables.selector && {sel}) || variables.terms.exists(t, has(t.matchExpressions) && \
         t.matchExpressions.exists(e, e.key == k && e.operator == 'In' && has(e.values) && e.values.exists(v, {val}))))",
        keys = class_keys(policy),
        sel = outside("variables.selector[k]"),
        val = outside("v"),
    )
}

/// The namespace's tier label value (`''` when it has none).
pub(crate) fn tier_label_value(tier_label: &str, object: &str) -> String {
    let key = lit(tier_label);
    format!(
        "has({object}.metadata.labels) && {key} in {object}.metadata.labels ? {object}.metadata.labels[{key}] : ''"
    )
}

/// The authorizer's answer to `q` about the object named by the CEL expression `name` (`None`: a power
/// about no object).
fn check(q: &Question, name: Option<&str>) -> String {
    let name = name.map(|n| format!(".name({n})")).unwrap_or_default();
    format!(
        "authorizer.group({}).resource({}){name}.check({}).allowed()",
        lit(q.group),
        lit(q.resource),
        lit(q.verb)
    )
}

/// The requester holds `power` for the object named by the CEL expression `name`, as the frontend judges it
/// ([`crate::authority`]): granted, and either a member of `system:masters` or granted none of the power's
/// wildcard probes (each the same question with its verb, resource or group replaced by a name no role
/// names). Each authorizer question is a variable of its own, `<prefix>Granted`, `<prefix>WildcardVerb`,
/// `<prefix>WildcardResource`, `<prefix>WildcardGroup`: one check costs about a third of the apiserver's
/// per-expression CEL cost limit, so four in one expression exceed it (measured: a lead granted
/// `update tiers/bronze` was denied with "actual cost limit exceeded"); variables are evaluated lazily, each
/// against its own limit, and only when the expression `<prefix>` reaches them (the probes only for a
/// requester granted the power, not a superuser). Returns the five variables, `<prefix>` last.
pub(crate) fn holds(prefix: &str, power: &Permission, name: Option<&str>) -> Vec<(String, String)> {
    let mut vars = vec![(format!("{prefix}Granted"), check(&power.question(), name))];
    let mut probes = Vec::new();
    for (wildcard, q) in power.wildcard_probes() {
        let var = format!("{prefix}Wildcard{wildcard:?}");
        probes.push(format!("variables.{var}"));
        vars.push((var, check(&q, name)));
    }
    vars.push((
        prefix.to_string(),
        format!(
            "variables.{prefix}Granted && ((has(request.userInfo.groups) && {} in request.userInfo.groups) || \
             !({}))",
            lit(SUPERUSER_GROUP),
            probes.join(" || ")
        ),
    ));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_patterns_become_anchored_regular_expressions() {
        assert_eq!(
            pattern_regex("nvidia.com/mig-*g.{memoryGiB}gb"),
            "^nvidia[.]com/mig-[a-z0-9]+g[.][0-9]+gb$"
        );
        assert_eq!(lit("it's \\"), "'it\\'s \\\\'");
    }
}
