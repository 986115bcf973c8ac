//! The validating decision as pure functions: an object (a Pod, or a workload holding pod templates) +
//! requester + namespace tier + policy snapshot + PriorityClass facts → violations → verdict. No scorer: the
//! check is local, so it holds when the scorer is down.

pub mod templates;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

use crate::admission::Facts;
use crate::placement;
use crate::pod::features;
use crate::policy::{PolicySnapshot, TierRules};
use crate::priority_class::{NoPriorityClasses, PriorityClassLookup};
use crate::review::Verdict;
use crate::tier_bound::{self, Breach};
use gpu_admission_proto::scorer::v1::{EnforcementMode, GpuVendor};
use templates::{DescribedPod, described_pods};

/// What is wrong (the metric's `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A class selector naming a class outside the tier (or no catalog class at all).
    ClassOutsideTier,
    /// A `priorityClassName` above the tier's `maxPriorityClass`.
    PriorityAboveCap,
    /// A GPU need (memory per GPU, vendor) that no class of the tier meets.
    NoClassFits,
    /// A Pod without a positive constraint to the tier's classes on every way of scheduling it (see
    /// [`crate::tier_bound`]).
    NotBoundToTier,
    /// `spec.nodeName` names a Node outside the tier, or one the frontend does not know.
    NodeOutsideTier,
    /// Whether the Pod asks for GPUs cannot be told (a DRA claim the frontend cannot read).
    Undecidable,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ClassOutsideTier => "class_outside_tier",
            Reason::PriorityAboveCap => "priority_above_cap",
            Reason::NoClassFits => "no_class_fits",
            Reason::NotBoundToTier => "not_bound_to_tier",
            Reason::NodeOutsideTier => "node_outside_tier",
            Reason::Undecidable => "undecidable",
        }
    }
}

/// One violation of one described Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: Reason,
    /// Where the Pod is described (`Pod`, `spec.template`, …).
    pub path: String,
    /// What is wrong, as a clause: `pins GPU class H100-80GB`.
    pub what: String,
}

/// The result of checking one request.
#[derive(Debug, PartialEq)]
pub enum Check {
    /// Not held to a tier (another operation, no GPU, no tier…): allowed without a word.
    NotOurs(&'static str),
    /// Nothing wrong, or the requester may run outside the tier: allowed.
    Allowed(Allowance),
    /// Violations to answer according to the enforcement mode.
    Violations {
        tier: String,
        /// `Job batch/train`.
        object: String,
        violations: Vec<Violation>,
        /// What the tier allows, for the message.
        allowed: String,
    },
}

/// Why an object held to a tier is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// Within the tier's classes and priority cap.
    WithinTier,
    /// Outside the tier, by a requester RBAC allows `exempt tiers/<tier>` (or on the policy's deprecated
    /// admin lists).
    Exempt,
    /// An UPDATE that adds no violation to those the object already had.
    PredatesUpdate,
}

impl Allowance {
    pub fn as_str(self) -> &'static str {
        match self {
            Allowance::WithinTier => "within the tier",
            Allowance::Exempt => "exempt from the tier (RBAC: exempt tiers/<tier>)",
            Allowance::PredatesUpdate => "violations predate the update",
        }
    }
}

fn is_pod(req: &AdmissionRequest<DynamicObject>) -> bool {
    req.kind.group.is_empty()
        && req.kind.kind == "Pod"
        && req.sub_resource.as_deref().unwrap_or("").is_empty()
}

/// Checks a CREATE or UPDATE of a Pod or of any object holding pod templates. On UPDATE only violations the
/// old object did not have count, so objects admitted earlier (in Warn, or before a policy change) can still
/// be scaled, labelled or deleted.
pub fn check(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    pcs: &dyn PriorityClassLookup,
) -> Check {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Check::NotOurs("not a CREATE or UPDATE");
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Check::NotOurs("a sub-resource");
    }
    let Some(object) = &req.object else {
        return Check::NotOurs("no object in the request");
    };
    let Some(namespace) = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Check::NotOurs("not namespaced");
    };
    let Some(tier) = (facts.tier_of)(namespace) else {
        return Check::NotOurs("namespace has no tier label");
    };
    let Some(rules) = policy.tier_rules(&tier, namespace) else {
        return Check::NotOurs("the policy is not known yet");
    };
    let pod = is_pod(req);
    let at = Where {
        namespace,
        rules: &rules,
        policy,
        facts,
        pcs,
    };
    let mut violations = object_violations(object, pod, &at);
    if violations.is_empty() {
        return Check::Allowed(Allowance::WithinTier);
    }
    if facts.grants.allows(&crate::authority::Permission::Exempt(
        rules.tier.to_string(),
    )) {
        return Check::Allowed(Allowance::Exempt);
    }
    if req.operation == Operation::Update
        && let Some(old) = &req.old_object
    {
        let before = object_violations(old, pod, &at);
        violations.retain(|v| !before.contains(v));
        if violations.is_empty() {
            return Check::Allowed(Allowance::PredatesUpdate);
        }
    }
    let name = object
        .metadata
        .name
        .as_deref()
        .or(object.metadata.generate_name.as_deref())
        .unwrap_or("");
    Check::Violations {
        tier: rules.tier.to_string(),
        object: format!("{} {namespace}/{name}", req.kind.kind),
        violations,
        allowed: allowed_text(&rules, policy),
    }
}

fn allowed_text(rules: &TierRules<'_>, policy: &PolicySnapshot) -> String {
    let mut s = format!("GPU classes {}", rules.describe_allowed(policy));
    if let Some(cap) = rules.max_priority_class {
        s.push_str(&format!("; PriorityClass at most {}", cap.name));
    }
    if rules.granted {
        s.push_str(" (with this namespace's grant)");
    }
    s
}

/// What a described Pod is checked against.
pub struct Where<'a> {
    pub namespace: &'a str,
    pub rules: &'a TierRules<'a>,
    pub policy: &'a PolicySnapshot,
    pub facts: &'a Facts<'a>,
    pub pcs: &'a dyn PriorityClassLookup,
}

fn object_violations(object: &DynamicObject, is_pod: bool, at: &Where<'_>) -> Vec<Violation> {
    let described = described_pods(object, is_pod);
    if is_pod && described.is_empty() {
        // A Pod that does not read as a Pod cannot be decided: never silently allowed.
        return vec![Violation {
            reason: Reason::Undecidable,
            path: "Pod".into(),
            what: "cannot be read as a Pod".into(),
        }];
    }
    described
        .iter()
        .flat_map(|d| pod_violations(d, at))
        .collect()
}

/// The violations of one GPU Pod (none for a Pod without GPUs). The Pod itself is held to the whole tier
/// invariant (it has been through `/mutate-pod`); a pod template to what it names itself (its Pods are
/// mutated and checked when they are created).
pub fn pod_violations(described: &DescribedPod, at: &Where<'_>) -> Vec<Violation> {
    let (pod, path, itself) = (&described.pod, described.path.as_str(), described.itself);
    let f = features::extract_with(
        pod,
        at.namespace,
        &at.policy.gpu_resources,
        at.facts.claim_templates,
    );
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut found: Vec<(Reason, String)> = Vec::new();
    if f.gpu_count == 0 {
        found.extend(undecidable_claims(spec, &f.unresolved_claims, itself, at));
    } else {
        found.extend(class_violation(pod, spec, at));
        if found.is_empty() {
            found.extend(bound_violation(spec, itself, at));
        }
        found.extend(priority_violation(spec, at));
        found.extend(fit_violation(&f, at));
    }
    found
        .into_iter()
        .map(|(reason, what)| Violation {
            reason,
            path: path.to_string(),
            what,
        })
        .collect()
}

/// A class the Pod names itself outside the tier (or a constraint on other identifying labels that allows no
/// class of the tier).
fn class_violation(pod: &Pod, spec: &PodSpec, at: &Where<'_>) -> Option<(Reason, String)> {
    let (rules, policy) = (at.rules, at.policy);
    let keys: Vec<&str> = policy.class_label_keys.iter().map(String::as_str).collect();
    let outside: Vec<String> = placement::named_classes(spec, &keys)
        .into_iter()
        .filter(|(k, val)| {
            !policy
                .class_by_label(k, val)
                .is_some_and(|c| rules.allows(&c.name))
        })
        .map(|(k, val)| match policy.class_by_label(k, val) {
            Some(c) => c.name.clone(),
            None => format!("{k}={val} (not a catalog class)"),
        })
        .collect();
    if !outside.is_empty() {
        return Some((
            Reason::ClassOutsideTier,
            format!("selects GPU class {}", outside.join(", ")),
        ));
    }
    let own = placement::own_constraint(pod, &policy.class_labels)?;
    if own.allowed.iter().any(|c| rules.allows(c)) {
        return None;
    }
    // Constrained by other identifying labels (GPU Feature Discovery, cloud, HAMi) to no class of the tier.
    let allows = if own.allowed.is_empty() {
        "no GPU class of the catalog".to_string()
    } else {
        own.allowed.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    Some((
        Reason::ClassOutsideTier,
        format!("is constrained by {} to {allows}", own.sources.join(", ")),
    ))
}

/// The tier invariant ([`tier_bound`]) on a tier that restricts classes: the whole of it for the Pod itself,
/// the node it names for a pod template.
fn bound_violation(spec: &PodSpec, itself: bool, at: &Where<'_>) -> Option<(Reason, String)> {
    if !tier_bound::restricts(at.rules, &at.policy.catalog) {
        return None;
    }
    let held = if itself {
        tier_bound::check(spec, at.rules, &at.policy.catalog, at.facts.nodes)
    } else {
        tier_bound::node_bound(spec, at.rules, at.facts.nodes)
    };
    let breach = held.err()?;
    let reason = match breach {
        Breach::Unbounded { .. } => Reason::NotBoundToTier,
        Breach::UnknownNode(_) | Breach::NodeOutside { .. } => Reason::NodeOutsideTier,
    };
    Some((reason, breach.describe()))
}

/// A Pod of a restricting tier with no GPU counted but DRA claims that could not be read: whether it asks for
/// GPUs cannot be told, so it must carry the tier bound itself (or wait until its claims can be read).
fn undecidable_claims(
    spec: &PodSpec,
    unresolved: &[String],
    itself: bool,
    at: &Where<'_>,
) -> Option<(Reason, String)> {
    if unresolved.is_empty()
        || !itself
        || !tier_bound::restricts(at.rules, &at.policy.catalog)
        || tier_bound::class_bound(spec, at.rules, &at.policy.catalog).is_ok()
    {
        return None;
    }
    Some((
        Reason::Undecidable,
        format!(
            "has DRA resource claims gpu-admission cannot read ({}): create their ResourceClaimTemplate or ResourceClaim first, so that it can tell whether they ask for GPUs",
            unresolved.join(", ")
        ),
    ))
}

/// A PriorityClass of the Pod's own above the tier's cap.
fn priority_violation(spec: &PodSpec, at: &Where<'_>) -> Option<(Reason, String)> {
    let own = spec
        .priority_class_name
        .as_deref()
        .filter(|c| !c.is_empty())?;
    let cap = at.rules.max_priority_class?;
    let facts = at.pcs.priority_class(own)?;
    (!facts.global_default && facts.value > cap.value).then(|| {
        (
            Reason::PriorityAboveCap,
            format!("asks for PriorityClass {own} ({})", facts.value),
        )
    })
}

/// A GPU need (memory per GPU, vendor) that no class of the tier meets.
fn fit_violation(f: &features::JobFeatures, at: &Where<'_>) -> Option<(Reason, String)> {
    let (rules, policy) = (at.rules, at.policy);
    let memory = f.gpu_memory_gib.or_else(|| {
        f.job_type
            .as_deref()
            .and_then(|jt| policy.job_type_default_memory_gib.get(jt).copied())
    });
    let vendor = f.gpu_vendor;
    let fits = policy.catalog.iter().any(|c| {
        rules.allows(&c.name)
            && memory.is_none_or(|m| c.memory_gib >= m)
            && (vendor == GpuVendor::Unknown || c.vendor == vendor as i32)
    });
    let tier_has_classes = policy.catalog.iter().any(|c| rules.allows(&c.name));
    if fits || !tier_has_classes {
        return None;
    }
    let mut need = Vec::new();
    if let Some(m) = memory {
        need.push(format!("{m} GiB per GPU"));
    }
    if vendor != GpuVendor::Unknown {
        need.push(format!(
            "{} GPUs",
            vendor
                .as_str_name()
                .trim_start_matches("GPU_VENDOR_")
                .to_lowercase()
        ));
    }
    Some((
        Reason::NoClassFits,
        format!(
            "needs {}, which no GPU class of the tier offers",
            need.join(" and ")
        ),
    ))
}

/// The `/validate-pod` decision: [`check`] with the PriorityClasses every webhook decides with (the cluster's,
/// else the policy's buckets), and its [`verdict`] under the policy's mode.
pub fn decide(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
) -> (Check, Verdict) {
    let pcs = policy
        .known_priority_classes(facts.priority_classes)
        .unwrap_or(&NoPriorityClasses);
    let check = check(req, policy, facts, pcs);
    let verdict = verdict(&check, policy.mode);
    (check, verdict)
}

impl Check {
    /// The metric's `outcome` for this check answered with `verdict`.
    pub fn outcome(&self, verdict: &Verdict) -> &'static str {
        match self {
            Check::NotOurs(_) => "skipped",
            Check::Allowed(_) => "allowed",
            Check::Violations { .. } if verdict.denied.is_some() => "denied",
            Check::Violations { .. } => "violation_admitted",
        }
    }
}

/// The answer for a check under an enforcement mode: Enforce denies, Warn admits with a warning, Audit (and a
/// scorer too old to say) admits silently.
pub fn verdict(check: &Check, mode: EnforcementMode) -> Verdict {
    let Check::Violations {
        tier,
        object,
        violations,
        allowed,
    } = check
    else {
        return Verdict::default();
    };
    let what: Vec<String> = violations
        .iter()
        .map(|v| {
            if v.path == "Pod" {
                v.what.clone()
            } else {
                format!("{}: {}", v.path, v.what)
            }
        })
        .collect();
    let message = format!(
        "gpu-admission: {object} is outside tier {tier}: {}. Tier {tier} allows {allowed}",
        what.join("; ")
    );
    match mode {
        EnforcementMode::Enforce => Verdict {
            denied: Some(message),
            warnings: Vec::new(),
        },
        EnforcementMode::Warn => Verdict {
            denied: None,
            warnings: vec![message],
        },
        EnforcementMode::Audit | EnforcementMode::Unspecified => Verdict::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::{Grants, Permission};
    use gpu_admission_proto::scorer::v1::{
        Enforcement, GetPolicyResponse, GpuClass, NamespaceGrant, PriorityAssignment,
        PriorityBucket, Tier,
    };
    use serde_json::{Value, json};
    use std::collections::HashMap;

    use crate::pod::gpu_resources::NoClaimTemplates;
    use crate::priority_class::PriorityClassFacts;
    use crate::tier_bound::NodeClass;

    const KEY: &str = "gpu.nvidia.com/class";

    fn class(name: &str, memory: f64) -> GpuClass {
        GpuClass {
            name: name.into(),
            vendor: GpuVendor::Nvidia as i32,
            memory_gib: memory,
            node_label_key: KEY.into(),
            node_label_value: name.into(),
            ..Default::default()
        }
    }

    fn bucket(name: &str, value: i32, min: f64) -> PriorityBucket {
        PriorityBucket {
            min_score: min,
            priority_class: Some(PriorityAssignment {
                name: name.into(),
                value,
                preemption_policy: String::new(),
            }),
        }
    }

    fn policy(mode: EnforcementMode) -> PolicySnapshot {
        PolicySnapshot::from_response(GetPolicyResponse {
            version: "v".into(),
            catalog: vec![class("H100-80GB", 80.0), class("L4-24GB", 24.0)],
            tiers: vec![Tier {
                name: "bronze".into(),
                allowed_classes: vec!["L4-24GB".into()],
                preferred_class: "L4-24GB".into(),
                max_priority_class: "gpu-default".into(),
                ..Default::default()
            }],
            priority_buckets: vec![
                bucket("gpu-ultra", 1_000_000, 90.0),
                bucket("gpu-default", 1000, 0.0),
            ],
            enforcement: Some(Enforcement {
                mode: mode as i32,
                admin_groups: vec!["gpu-admission:admins".into()],
                admin_users: vec![],
            }),
            namespace_grants: vec![NamespaceGrant {
                namespace: "research".into(),
                allowed_classes: vec!["H100-80GB".into()],
                max_priority_class: String::new(),
            }],
            job_type_default_memory_gib: HashMap::from([("train-llama".to_string(), 40.0)]),
            ..Default::default()
        })
    }

    fn tiers(ns: &str) -> Option<String> {
        matches!(ns, "batch" | "research").then(|| "bronze".to_string())
    }

    /// A GPU Pod as `/mutate-pod` leaves it in a bronze namespace (on L4 nodes), unless `extra` places it.
    fn pod_spec(extra: Value) -> Value {
        let mut spec = json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        if extra.get("nodeSelector").is_none() && extra.get("affinity").is_none() {
            spec["nodeSelector"] = json!({KEY: "L4-24GB"});
        }
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    }

    fn request(
        kind: (&str, &str),
        ns: &str,
        object: Value,
        groups: &[&str],
        op: &str,
        old: Value,
    ) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": kind.0, "version": "v1", "kind": kind.1},
            "resource": {"group": kind.0, "version": "v1", "resource": "x"},
            "namespace": ns, "operation": op, "userInfo": {"username": "alice", "groups": groups},
            "object": object, "oldObject": old
        }))
        .unwrap()
    }

    fn pod(ns: &str, annotations: Value, spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns, "annotations": annotations}, "spec": spec})
    }

    fn nodes(name: &str) -> NodeClass {
        match name {
            "l4-1" => NodeClass::Class("L4-24GB".into()),
            "h100-1" => NodeClass::Class("H100-80GB".into()),
            _ => NodeClass::Unknown,
        }
    }

    /// [`check`] with `tier_of`, the test Nodes, no PriorityClass cache, no claim templates and the powers
    /// the policy's deprecated admin lists give the requester.
    fn check_with(
        req: &AdmissionRequest<DynamicObject>,
        p: &PolicySnapshot,
        tier_of: &dyn Fn(&str) -> Option<String>,
    ) -> Check {
        check_granted(req, p, tier_of, &Grants::offline(p, &req.user_info))
    }

    fn check_granted(
        req: &AdmissionRequest<DynamicObject>,
        p: &PolicySnapshot,
        tier_of: &dyn Fn(&str) -> Option<String>,
        grants: &Grants,
    ) -> Check {
        let facts = Facts {
            tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &nodes,
            grants,
        };
        check(req, p, &facts, p)
    }

    fn run(req: &AdmissionRequest<DynamicObject>, mode: EnforcementMode) -> (Check, Verdict) {
        let p = policy(mode);
        let check = check_with(req, &p, &tiers);
        let verdict = verdict(&check, p.mode);
        (check, verdict)
    }

    fn reasons(c: &Check) -> Vec<Reason> {
        match c {
            Check::Violations { violations, .. } => violations.iter().map(|v| v.reason).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_pin_outside_the_tier_is_denied_warned_or_audited() {
        let req = request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({}),
                pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        let (c, v) = run(&req, EnforcementMode::Enforce);
        assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
        let msg = v.denied.unwrap();
        assert!(
            msg.contains("Pod batch/p is outside tier bronze: selects GPU class H100-80GB"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "allows GPU classes L4-24GB (24 GiB, nvidia); PriorityClass at most gpu-default"
            ),
            "{msg}"
        );
        let (_, v) = run(&req, EnforcementMode::Warn);
        assert!(v.denied.is_none() && v.warnings[0].contains("outside tier bronze"));
        let (_, v) = run(&req, EnforcementMode::Audit);
        assert_eq!(v, Verdict::default());
        // Every value of a multi-value In.
        let req = request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({}),
                pod_spec(
                    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]}]}]}}}}),
                ),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            reasons(&run(&req, EnforcementMode::Enforce).0),
            [Reason::ClassOutsideTier]
        );
    }

    #[test]
    fn admins_and_granted_namespaces_are_allowed() {
        let spec = pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}}));
        let req = request(
            ("", "Pod"),
            "batch",
            pod("batch", json!({}), spec.clone()),
            &["gpu-admission:admins"],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::Allowed(Allowance::Exempt)
        );
        // RBAC: `exempt tiers/bronze` exempts from bronze; the same power on another tier does not.
        let plain = request(
            ("", "Pod"),
            "batch",
            pod("batch", json!({}), spec.clone()),
            &[],
            "CREATE",
            Value::Null,
        );
        let p = policy(EnforcementMode::Enforce);
        let exempt = |tier: &str| Grants::new([Permission::Exempt(tier.into())], false);
        assert_eq!(
            check_granted(&plain, &p, &tiers, &exempt("bronze")),
            Check::Allowed(Allowance::Exempt)
        );
        assert!(matches!(
            check_granted(&plain, &p, &tiers, &exempt("gold")),
            Check::Violations { .. }
        ));
        let rules = Grants::new(
            [
                Permission::ChangeRules,
                Permission::SetTier("bronze".into()),
            ],
            false,
        );
        assert!(
            matches!(
                check_granted(&plain, &p, &tiers, &rules),
                Check::Violations { .. }
            ),
            "changing the rules or setting tiers is no exemption"
        );
        let req = request(
            ("", "Pod"),
            "research",
            pod("research", json!({}), spec),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::Allowed(Allowance::WithinTier)
        );
    }

    #[test]
    fn priority_above_the_cap_and_needs_no_class_meets() {
        let req = request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({"gpu.mem.gi": "70"}),
                pod_spec(json!({"priorityClassName": "gpu-ultra"})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        let (c, v) = run(&req, EnforcementMode::Enforce);
        assert_eq!(reasons(&c), [Reason::PriorityAboveCap, Reason::NoClassFits]);
        let msg = v.denied.unwrap();
        assert!(
            msg.contains("asks for PriorityClass gpu-ultra (1000000)")
                && msg.contains("needs 70 GiB per GPU and nvidia GPUs"),
            "{msg}"
        );
        // A job type's default memory counts when the Pod does not say.
        let req = request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({"app.kubernetes.io/job-type": "train-llama"}),
                pod_spec(json!({})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            reasons(&run(&req, EnforcementMode::Enforce).0),
            [Reason::NoClassFits]
        );
        // No GPU, no tier: nothing to say.
        let req = request(
            ("", "Pod"),
            "batch",
            pod(
                "batch",
                json!({}),
                json!({"nodeSelector": {KEY: "H100-80GB"}, "containers": [{"name": "c"}]}),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::Allowed(Allowance::WithinTier)
        );
        let req = request(
            ("", "Pod"),
            "web",
            pod(
                "web",
                json!({}),
                pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::NotOurs("namespace has no tier label")
        );
    }

    #[test]
    fn workload_templates_are_checked_on_create_and_new_violations_on_update() {
        let job = |class: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "batch"},
            "spec": {"template": {"spec": pod_spec(json!({"nodeSelector": {KEY: class}, "restartPolicy": "Never"}))}}})
        };
        let req = request(
            ("batch", "Job"),
            "batch",
            job("H100-80GB"),
            &[],
            "CREATE",
            Value::Null,
        );
        let (c, v) = run(&req, EnforcementMode::Enforce);
        assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
        assert!(v.denied.unwrap().contains(
            "Job batch/train is outside tier bronze: spec.template: selects GPU class H100-80GB"
        ));
        // An update that keeps an old violation (admitted in Warn) is allowed; one that adds it is not.
        let req = request(
            ("batch", "Job"),
            "batch",
            job("H100-80GB"),
            &[],
            "UPDATE",
            job("H100-80GB"),
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::Allowed(Allowance::PredatesUpdate)
        );
        let req = request(
            ("batch", "Job"),
            "batch",
            job("H100-80GB"),
            &[],
            "UPDATE",
            job("L4-24GB"),
        );
        assert_eq!(
            reasons(&run(&req, EnforcementMode::Enforce).0),
            [Reason::ClassOutsideTier]
        );
        let req = request(
            ("batch", "Job"),
            "batch",
            job("H100-80GB"),
            &[],
            "DELETE",
            Value::Null,
        );
        assert_eq!(
            run(&req, EnforcementMode::Enforce).0,
            Check::NotOurs("not a CREATE or UPDATE")
        );
    }

    #[test]
    fn an_unknown_tier_label_value_is_the_default_tier_never_no_rules() {
        let mut p = policy(EnforcementMode::Enforce);
        p.default_tier = "bronze".into();
        let req = request(
            ("", "Pod"),
            "shady",
            pod(
                "shady",
                json!({}),
                pod_spec(json!({"nodeSelector": {KEY: "H100-80GB"}})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        // `Bronze` (capitalised) is no tier of the policy: the default tier's rules hold.
        let check = check_with(&req, &p, &|_| Some("Bronze".to_string()));
        assert_eq!(reasons(&check), [Reason::ClassOutsideTier]);
        assert!(
            verdict(&check, p.mode)
                .denied
                .unwrap()
                .contains("outside tier bronze")
        );
        // Before the policy is known there are no rules to hold a Pod to.
        let unknown = PolicySnapshot::default();
        let check = check_fn(&req, &unknown);
        assert_eq!(check, Check::NotOurs("the policy is not known yet"));
    }

    #[test]
    fn the_pod_itself_must_hold_the_tier_bound_and_name_a_tier_node() {
        let req = |spec: Value, kind: (&str, &str), object: fn(Value) -> Value| {
            request(kind, "batch", object(spec), &[], "CREATE", Value::Null)
        };
        let as_pod = |spec: Value| pod("batch", json!({}), spec);
        let as_job = |spec: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "batch"},
                   "spec": {"template": {"spec": spec}}})
        };
        let not_in = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": KEY, "operator": "NotIn", "values": ["H100-80GB"]}]}]}}});
        let cases = [
            (
                json!({"nodeSelector": {}}),
                ("", "Pod"),
                as_pod as fn(Value) -> Value,
                vec![Reason::NotBoundToTier],
            ),
            (
                json!({"affinity": not_in.clone()}),
                ("", "Pod"),
                as_pod,
                vec![Reason::NotBoundToTier],
            ),
            (
                json!({"nodeName": "h100-1"}),
                ("", "Pod"),
                as_pod,
                vec![Reason::NodeOutsideTier],
            ),
            (
                json!({"nodeName": "unknown-1"}),
                ("", "Pod"),
                as_pod,
                vec![Reason::NodeOutsideTier],
            ),
            (json!({"nodeName": "l4-1"}), ("", "Pod"), as_pod, vec![]),
            // A template is not mutated: only what it names itself counts (its Pods are checked later).
            (
                json!({"nodeSelector": {}}),
                ("batch", "Job"),
                as_job,
                vec![],
            ),
            (
                json!({"nodeName": "h100-1"}),
                ("batch", "Job"),
                as_job,
                vec![Reason::NodeOutsideTier],
            ),
        ];
        let p = policy(EnforcementMode::Enforce);
        for (spec, kind, object, want) in cases {
            let c = check_with(&req(pod_spec(spec.clone()), kind, object), &p, &tiers);
            assert_eq!(reasons(&c), want, "{kind:?} {spec}");
        }
        let denied = verdict(
            &check_with(
                &req(pod_spec(json!({"nodeName": "h100-1"})), ("", "Pod"), as_pod),
                &p,
                &tiers,
            ),
            p.mode,
        );
        assert!(
            denied
                .denied
                .unwrap()
                .contains("names node h100-1 of GPU class H100-80GB")
        );
        // A grant widens the bound: research may use H100 nodes.
        let granted = request(
            ("", "Pod"),
            "research",
            pod(
                "research",
                json!({}),
                pod_spec(json!({"nodeName": "h100-1"})),
            ),
            &[],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            check_with(&granted, &p, &tiers),
            Check::Allowed(Allowance::WithinTier)
        );
        // An admin may.
        let admin = request(
            ("", "Pod"),
            "batch",
            as_pod(pod_spec(json!({"nodeName": "h100-1", "nodeSelector": {}}))),
            &["gpu-admission:admins"],
            "CREATE",
            Value::Null,
        );
        assert_eq!(
            check_with(&admin, &p, &tiers),
            Check::Allowed(Allowance::Exempt)
        );
    }

    #[test]
    fn a_claim_that_cannot_be_read_is_undecidable_until_bound() {
        let spec = |extra: Value| {
            let mut s = json!({"containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
                               "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpus"}]});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            s
        };
        let p = policy(EnforcementMode::Enforce);
        let req = |s: Value| {
            request(
                ("", "Pod"),
                "batch",
                pod("batch", json!({}), s),
                &[],
                "CREATE",
                Value::Null,
            )
        };
        assert_eq!(
            reasons(&check_with(&req(spec(json!({}))), &p, &tiers)),
            [Reason::Undecidable]
        );
        assert_eq!(
            check_with(
                &req(spec(json!({"nodeSelector": {KEY: "L4-24GB"}}))),
                &p,
                &tiers
            ),
            Check::Allowed(Allowance::WithinTier)
        );
    }

    #[test]
    fn a_pod_that_does_not_read_as_a_pod_is_undecidable() {
        let p = policy(EnforcementMode::Enforce);
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "batch"},
                         "spec": {"containers": "not a list"}});
        let req = request(("", "Pod"), "batch", bad, &[], "CREATE", Value::Null);
        assert_eq!(
            reasons(&check_with(&req, &p, &tiers)),
            [Reason::Undecidable]
        );
    }

    fn check_fn(req: &AdmissionRequest<DynamicObject>, p: &PolicySnapshot) -> Check {
        check_with(req, p, &|_| Some("Bronze".to_string()))
    }

    #[test]
    fn a_globally_defaulted_class_is_not_the_pods_choice() {
        let p = policy(EnforcementMode::Enforce);
        let rules = p.tier_rules("bronze", "batch").unwrap();
        let pcs = HashMap::from([(
            "standard".to_string(),
            PriorityClassFacts {
                name: "standard".into(),
                value: 5000,
                preemption_policy: None,
                global_default: true,
            },
        )]);
        let pod: Pod = serde_json::from_value(pod(
            "batch",
            json!({}),
            pod_spec(json!({"priorityClassName": "standard"})),
        ))
        .unwrap();
        let facts = Facts {
            tier_of: &tiers,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &nodes,
            grants: &crate::authority::Grants::none(),
        };
        let at = Where {
            namespace: "batch",
            rules: &rules,
            policy: &p,
            facts: &facts,
            pcs: &pcs,
        };
        let described = DescribedPod {
            path: "Pod".into(),
            pod,
            itself: true,
        };
        assert!(pod_violations(&described, &at).is_empty());
    }

    #[test]
    fn constraints_on_other_identifying_labels_that_allow_no_tier_class_are_violations() {
        let mut p = policy(EnforcementMode::Enforce);
        p.class_labels = vec![
            (
                "H100-80GB".into(),
                vec![
                    (KEY.into(), "H100-80GB".into()),
                    (
                        "nvidia.com/gpu.product".into(),
                        "NVIDIA-H100-80GB-HBM3".into(),
                    ),
                ],
            ),
            (
                "L4-24GB".into(),
                vec![
                    (KEY.into(), "L4-24GB".into()),
                    ("nvidia.com/gpu.product".into(), "NVIDIA-L4".into()),
                ],
            ),
        ];
        let check_of = |spec: Value, ann: Value| {
            let req = request(
                ("", "Pod"),
                "batch",
                pod("batch", ann, pod_spec(spec)),
                &[],
                "CREATE",
                Value::Null,
            );
            check_with(&req, &p, &tiers)
        };
        let c = check_of(
            json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}),
            json!({}),
        );
        assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
        let c = check_of(json!({}), json!({"nvidia.com/use-gputype": "H100"}));
        assert_eq!(reasons(&c), [Reason::ClassOutsideTier]);
        // Inside the tier by another label is no bound by itself: once mutation ANDs the tier's class in,
        // it is allowed.
        let c = check_of(
            json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}),
            json!({}),
        );
        assert_eq!(reasons(&c), [Reason::NotBoundToTier]);
        let c = check_of(
            json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4", KEY: "L4-24GB"}}),
            json!({}),
        );
        assert_eq!(c, Check::Allowed(Allowance::WithinTier));
        let c = check_of(json!({}), json!({"nvidia.com/nouse-gputype": "H100"}));
        assert_eq!(c, Check::Allowed(Allowance::WithinTier));
    }
}
