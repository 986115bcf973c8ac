//! Which requests are scored, what the scorer is asked, and whether its answer can be trusted. Pure functions.

use gpu_admission_policy::GpuClass;
use gpu_admission_proto::limits;
use gpu_admission_proto::scorer::v1::{self as pb, ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use kube_core::admission::{AdmissionRequest, Operation};

use crate::placement::{self, OwnConstraint, PlacedBy};
use crate::pod::features::{self, JobFeatures, is_label_key, is_label_value};
use crate::pod::gpu_resources::{ClaimTemplates, NoClaimTemplates};
use crate::policy::{PolicySnapshot, TierRules, TierScope};

/// A Pod worth asking the scorer about.
#[derive(Debug)]
pub struct Candidate<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub tier: String,
    pub features: JobFeatures,
    /// The classes the Pod's own constraints allow, when it states any.
    pub own: Option<OwnConstraint>,
    /// Someone else places the Pod (`spec.nodeName`, Kueue): no placement of ours.
    pub placed_by: Option<PlacedBy>,
}

/// Why a request is allowed unchanged without asking the scorer (for logs, spans and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    NotCreate,
    NoObject,
    UnreadableGpuQuantity,
    NoGpu,
    NoNamespace,
    UntieredDenied,
    NoTier,
    AlreadyDecided,
    /// A restricted instance, and the namespace is not one of its own.
    NotOurNamespace,
    /// A live `GpuPolicyException` covers the Pod for the classes or the priority cap: its own constraints
    /// stand, and `/validate-pod` holds it to the tier as the exception relaxes it.
    Excepted,
}

impl Skip {
    /// In words, for logs and the CLI's table.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NotCreate => "not a CREATE",
            Skip::NoObject => "no object in the request",
            Skip::UnreadableGpuQuantity => "GPU quantity unreadable (answered by /validate-pod)",
            Skip::NoGpu => "no GPU requested",
            Skip::NoNamespace => "no namespace",
            Skip::UntieredDenied => "untiered namespace (denied by /validate-pod)",
            Skip::NoTier => "namespace has no tier label",
            Skip::AlreadyDecided => "already decided",
            Skip::NotOurNamespace => "outside this restricted instance's namespaces",
            Skip::Excepted => "covered by a GpuPolicyException (held by /validate-pod)",
        }
    }
}

/// Decides whether a Pod request is scored: CREATE of a Pod requesting GPUs in a namespace that carries a tier.
/// `tier_of` reads the namespace cache; the tier is [`PolicySnapshot::tier_for`]'s. Our own annotations are no reason to skip (anyone can write them):
/// whether a decided Pod needs anything is the patch's question (`patch::is_settled`).
pub fn triage<'a>(
    req: &'a AdmissionRequest<Pod>,
    tier_of: impl Fn(&str) -> Option<String>,
) -> Result<Candidate<'a>, Skip> {
    triage_with(req, tier_of, &PolicySnapshot::default(), &NoClaimTemplates)
}

/// [`triage`] with the policy's GPU resource list and identifying labels, and the ResourceClaimTemplates
/// the frontend can read.
pub fn triage_with<'a>(
    req: &'a AdmissionRequest<Pod>,
    tier_of: impl Fn(&str) -> Option<String>,
    policy: &PolicySnapshot,
    templates: &dyn ClaimTemplates,
) -> Result<Candidate<'a>, Skip> {
    if req.operation != Operation::Create {
        return Err(Skip::NotCreate);
    }
    let pod = req.object.as_ref().ok_or(Skip::NoObject)?;
    let namespace = req
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .filter(|n| !n.is_empty());
    let features = features::extract_with(
        pod,
        namespace.unwrap_or(""),
        &policy.gpu_resources,
        templates,
    );
    if features.gpu_count == 0 && !features.unreadable_gpu_quantities.is_empty() {
        // How many GPUs it asks for cannot be told: `/validate-pod` answers it (undecidable).
        return Err(Skip::UnreadableGpuQuantity);
    }
    if features.gpu_count == 0 {
        return Err(Skip::NoGpu);
    }
    let namespace = namespace.ok_or(Skip::NoNamespace)?;
    let tier = match policy.tier_for(tier_of(namespace).as_deref()) {
        TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
        // `/validate-pod` answers the Pod; mutation never rejects.
        TierScope::Denied(_) => return Err(Skip::UntieredDenied),
        TierScope::Ignored(_) => return Err(Skip::NoTier),
    };
    // The Pod's own node constraints, and the catalog class its DRA claims take devices of: a Pod claiming
    // H100 devices is scored among H100 nodes only, never pinned to another class where its claim cannot
    // be allocated.
    let claims = placement::claim_constraint(&features.dra_device_classes, &policy.gpu_resources);
    let own = match placement::own_constraint(pod, &policy.class_labels) {
        Some(own) => Some(own.and(claims)),
        None => claims,
    };
    Ok(Candidate {
        pod,
        namespace,
        tier,
        features,
        own,
        placed_by: PlacedBy::of(pod),
    })
}

/// The scorer request for a candidate, and the warnings of what had to change in it. A Pod whose own
/// constraints narrow its class is scored among the classes they allow: those inside its tier, or when none
/// is, all of them (the scorer then answers that the tier allows none). Classes in catalog order. The request
/// is brought inside the limits the scorer enforces (a 300-byte tenant annotation is cut, with a warning), so
/// that an odd value changes the request, never the decision.
pub fn score_request(
    uid: &str,
    c: &Candidate<'_>,
    policy: &PolicySnapshot,
) -> (ScoreRequest, Vec<String>) {
    request_for(
        uid,
        c,
        policy,
        policy.tier_rules(&c.tier, c.namespace).as_ref(),
    )
}

/// [`score_request`] with the candidate's tier rules already looked up.
pub(super) fn request_for(
    uid: &str,
    c: &Candidate<'_>,
    policy: &PolicySnapshot,
    rules: Option<&TierRules<'_>>,
) -> (ScoreRequest, Vec<String>) {
    let allowed: Vec<&str> = match &c.own {
        Some(own) => policy
            .catalog()
            .iter()
            .map(|class| class.name.as_str())
            .filter(|n| own.allowed.contains(*n))
            .collect(),
        None => Vec::new(),
    };
    let in_tier: Vec<&str> = allowed
        .iter()
        .copied()
        .filter(|n| rules.is_none_or(|r| r.allows(n)))
        .collect();
    let candidate_classes: Vec<String> = if in_tier.is_empty() { allowed } else { in_tier }
        .into_iter()
        .map(str::to_string)
        .collect();
    let f = &c.features;
    let mut request = ScoreRequest {
        request_id: uid.to_string(),
        namespace: c.namespace.to_string(),
        tenant: f.tenant.clone().unwrap_or_else(|| c.namespace.to_string()),
        tier: c.tier.clone(),
        job_type: f.job_type.clone().unwrap_or_default(),
        workload_class: pb::WorkloadClass::from(f.workload_class) as i32,
        gpu_count: f.gpu_count,
        gpu_vendor: gpu_admission_policy::wire::vendor_value(f.gpu_vendor),
        gpu_memory_gib: f.gpu_memory_gib,
        batch_size: f.batch_size,
        model_size_billion_params: f.model_size_billion_params,
        candidate_classes,
        colocated_job_types: Vec::new(),
        // Only the feasible candidates are read (the alternatives annotation): the others are not sent.
        feasible_candidates_only: true,
        // The workload (key, group size) is set by the handler: resolving it may read the owner.
        ..Default::default()
    };
    let warnings = fit_to_limits(&mut request);
    (request, warnings)
}

/// Brings `request` inside the limits the scorer enforces; the admission warnings of what changed.
pub fn fit_to_limits(request: &mut ScoreRequest) -> Vec<String> {
    limits::fit_score_request(request)
        .into_iter()
        .map(|v| format!("gpu-admission: the scorer's {v}"))
        .collect()
}

/// `answered` selects and tolerates what its catalog class `known` does.
fn same_labels(known: &GpuClass, answered: &pb::GpuClass) -> bool {
    known.node_label_key == answered.node_label_key
        && known.node_label_value == answered.node_label_value
        && known.taint_key.as_deref().unwrap_or_default() == answered.taint_key
}

/// Deterministic check of a scorer answer before anything of it reaches a Pod. An answer that fails is
/// treated like an unavailable scorer (pass-through), because a bad label or class would make the apiserver
/// reject the Pod or make it unschedulable.
pub fn validate_answer(a: &ScoreResponse, policy: &PolicySnapshot) -> Result<(), String> {
    if !a.priority_score.is_finite() || !(0.0..=100.0).contains(&a.priority_score) {
        return Err(format!(
            "priority score {} outside 0..=100",
            a.priority_score
        ));
    }
    // Every class must be one of the catalog we know, with the same node label: until the policy is known (or
    // right after the scorer reloaded another one, while ours is refreshed) nothing can be checked, so the Pod
    // passes through rather than be pinned to a class that may not exist.
    if policy.catalog().is_empty() && !a.accepted_classes.is_empty() {
        return Err("the scorer's policy is not known yet (GetPolicy pending)".into());
    }
    for c in &a.accepted_classes {
        if c.name.is_empty() {
            return Err("accepted class without a name".into());
        }
        let known = policy.checked_class(&c.name);
        // An answer repeating its catalog class's labels was checked with the policy; others are checked here.
        if !known.is_some_and(|(k, valid)| valid && same_labels(k, c)) {
            if !is_label_key(&c.node_label_key) || !is_label_value(&c.node_label_value) {
                return Err(format!(
                    "class {:?} has an invalid node label {:?}={:?}",
                    c.name, c.node_label_key, c.node_label_value
                ));
            }
            if !c.taint_key.is_empty() && !is_label_key(&c.taint_key) {
                return Err(format!(
                    "class {:?} has an invalid taint key {:?}",
                    c.name, c.taint_key
                ));
            }
        }
        match known.map(|(k, _)| k) {
            None => {
                return Err(format!(
                    "unknown GPU class {:?} (answer of policy {}, catalog of policy {})",
                    c.name, a.policy_version, policy.version
                ));
            }
            Some(known)
                if known.node_label_key != c.node_label_key
                    || known.node_label_value != c.node_label_value =>
            {
                return Err(format!(
                    "class {:?} selects {}={}, the catalog says {}={}",
                    c.name,
                    c.node_label_key,
                    c.node_label_value,
                    known.node_label_key,
                    known.node_label_value
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(pc) = &a.priority_class
        && !matches!(
            pc.preemption_policy.as_str(),
            "" | "PreemptLowerPriority" | "Never"
        )
    {
        return Err(format!(
            "unknown preemption policy {:?}",
            pc.preemption_policy
        ));
    }
    Ok(())
}

/// Keeps the answer to what the Pod's own constraints allow, so that no annotation or placement names a class
/// the Pod cannot run on (the scorer treats an empty candidate list as "any class": a Pod whose constraints
/// allow no catalog class comes back here as infeasible).
pub fn restrict_answer(answer: &mut ScoreResponse, own: Option<&OwnConstraint>) {
    let Some(own) = own else { return };
    let before = answer.accepted_classes.len();
    answer
        .accepted_classes
        .retain(|c| own.allowed.contains(&c.name));
    for c in answer.candidates.iter_mut() {
        if c.feasible && !own.allowed.contains(&c.gpu_class) {
            c.feasible = false;
            c.infeasible_reason = "not allowed by the Pod's own node constraints".into();
        }
    }
    if answer.accepted_classes.is_empty() && (before > 0 || answer.infeasible_reason.is_empty()) {
        answer.explored = false;
        answer.infeasible_reason = format!(
            "the Pod's own constraints ({}) allow {}",
            own.sources.join(", "),
            if own.allowed.is_empty() {
                "no GPU class of the catalog".to_string()
            } else {
                format!(
                    "only {}, not allowed for its tier",
                    own.allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::test_policy;
    use gpu_admission_proto::scorer::v1::{GpuVendor, PriorityAssignment};
    use serde_json::json;

    fn request(
        op: &str,
        namespace: Option<&str>,
        object: serde_json::Value,
    ) -> AdmissionRequest<Pod> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": op, "userInfo": {}, "object": object, "oldObject": null
        }))
        .unwrap()
    }

    fn gpu_pod(
        annotations: serde_json::Value,
        node_selector: serde_json::Value,
    ) -> serde_json::Value {
        json!({"metadata": {"name": "p", "annotations": annotations}, "spec": {"nodeSelector": node_selector,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
    }

    fn tiers(ns: &str) -> Option<String> {
        (ns == "ml").then(|| "gold".to_string())
    }

    const A100: &str = "{ name: A100-80GB, vendor: nvidia, memoryGiB: 80, relativeThroughput: 1.0, \
                        pricePerHour: 3.0, nodeLabelKey: gpu.nvidia.com/class, nodeLabelValue: A100-80GB }";

    fn policy() -> PolicySnapshot {
        test_policy(
            &[A100],
            &[
                "{ name: gold, allowedClasses: [A100-80GB], objective: fastest, priorityWeight: 1.0 }",
            ],
            &[
                "{ minScore: 90, name: gpu-ultra, value: 1000, preemptionPolicy: PreemptLowerPriority }",
                "{ minScore: 0, name: gpu-default, value: 100, preemptionPolicy: PreemptLowerPriority }",
            ],
            "",
        )
    }

    #[test]
    fn only_gpu_pod_creates_in_tiered_namespaces_are_scored() {
        let ok = request("CREATE", Some("ml"), gpu_pod(json!({}), json!(null)));
        let c = triage(&ok, tiers).unwrap();
        assert_eq!(
            (c.namespace, c.tier.as_str(), c.features.gpu_count),
            ("ml", "gold", 2)
        );

        let cases = [
            (
                request("UPDATE", Some("ml"), gpu_pod(json!({}), json!(null))),
                Skip::NotCreate,
            ),
            (
                request("CREATE", Some("web"), gpu_pod(json!({}), json!(null))),
                Skip::NoTier,
            ),
            (
                request("CREATE", None, gpu_pod(json!({}), json!(null))),
                Skip::NoNamespace,
            ),
            (
                request(
                    "CREATE",
                    Some("ml"),
                    json!({"metadata": {}, "spec": {"containers": [{"name": "c"}]}}),
                ),
                Skip::NoGpu,
            ),
            (
                request(
                    "CREATE",
                    Some("ml"),
                    json!({"metadata": {}, "spec": {"containers": [{"name": "c",
                        "resources": {"limits": {"nvidia.com/gpu": "one"}}}]}}),
                ),
                Skip::UnreadableGpuQuantity,
            ),
            (request("DELETE", Some("ml"), json!(null)), Skip::NotCreate),
            (request("CREATE", Some("ml"), json!(null)), Skip::NoObject),
        ];
        for (req, why) in cases {
            assert_eq!(triage(&req, tiers).unwrap_err(), why);
        }
    }

    #[test]
    fn score_request_carries_features_and_pinned_class() {
        let req = request(
            "CREATE",
            Some("ml"),
            gpu_pod(
                json!({"gpu.mem.gi": "40", "app.kubernetes.io/job-type": "train"}),
                json!(null),
            ),
        );
        let c = triage(&req, tiers).unwrap();
        let (s, fitted) = score_request("uid-1", &c, &policy());
        assert!(fitted.is_empty(), "{fitted:?}");
        assert_eq!(
            (
                s.request_id.as_str(),
                s.tenant.as_str(),
                s.tier.as_str(),
                s.job_type.as_str()
            ),
            ("uid-1", "ml", "gold", "train")
        );
        assert_eq!((s.gpu_count, s.gpu_memory_gib), (2, Some(40.0)));
        assert!(s.candidate_classes.is_empty());

        let req = request(
            "CREATE",
            Some("ml"),
            gpu_pod(json!({}), json!({"gpu.nvidia.com/class": "A100-80GB"})),
        );
        let (s, _) = score_request(
            "u",
            &triage_with(&req, tiers, &policy(), &NoClaimTemplates).unwrap(),
            &policy(),
        );
        assert_eq!(s.candidate_classes, ["A100-80GB"]);
    }

    #[test]
    fn policy_gpu_resources_drive_triage() {
        // Only a MIG slice: an NVIDIA job with 10 GiB per slice.
        let req = request(
            "CREATE",
            Some("ml"),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
                "resources": {"limits": {"nvidia.com/mig-1g.10gb": 2}}}]}}),
        );
        let c = triage_with(&req, tiers, &policy(), &NoClaimTemplates).unwrap();
        let (s, _) = score_request("u", &c, &policy());
        assert_eq!(
            (s.gpu_count, s.gpu_vendor, s.gpu_memory_gib),
            (2, GpuVendor::Nvidia as i32, Some(10.0))
        );
        assert_eq!(c.features.gpu_shape, "mig");
    }

    fn gfd_policy() -> PolicySnapshot {
        let class = |name: &str, product: &str| {
            format!(
                "{{ name: {name}, vendor: nvidia, memoryGiB: 80, relativeThroughput: 1.0, pricePerHour: 3.0, \
                 nodeLabelKey: gpu.nvidia.com/class, nodeLabelValue: {name}, \
                 nodeLabels: {{ nvidia.com/gpu.product: [{product}] }} }}"
            )
        };
        test_policy(
            &[
                &class("H100-80GB", "NVIDIA-H100-80GB-HBM3"),
                &class("A100-80GB", "NVIDIA-A100-SXM4-80GB"),
                &class("L4-24GB", "NVIDIA-L4"),
            ],
            &[
                "{ name: gold, allowedClasses: [H100-80GB, A100-80GB, L4-24GB], objective: fastest, \
               priorityWeight: 1.0 }",
            ],
            &[
                "{ minScore: 0, name: gpu-default, value: 100, preemptionPolicy: PreemptLowerPriority }",
            ],
            "",
        )
    }

    #[test]
    fn the_pods_own_constraints_are_the_candidates() {
        let p = gfd_policy();
        let score = |node_selector: serde_json::Value, affinity: serde_json::Value| {
            let mut pod = gpu_pod(json!({}), node_selector);
            pod["spec"]["affinity"] = affinity;
            let req = request("CREATE", Some("ml"), pod);
            let c = triage_with(&req, tiers, &p, &NoClaimTemplates).unwrap();
            (score_request("u", &c, &p).0.candidate_classes, c.own)
        };
        // GPU Feature Discovery's product label: A100-80GB only.
        let (cands, own) = score(
            json!({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
            json!(null),
        );
        assert_eq!(cands, ["A100-80GB"]);
        assert_eq!(
            own.unwrap().sources,
            ["nodeSelector nvidia.com/gpu.product"]
        );
        // A multi-value In: a choice between both (catalog order).
        let (cands, _) = score(
            json!(null),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In",
                    "values": ["A100-80GB", "H100-80GB"]}]}]}}}),
        );
        assert_eq!(cands, ["H100-80GB", "A100-80GB"]);
    }

    #[test]
    fn the_answer_never_names_a_class_the_pod_cannot_run_on() {
        let own = OwnConstraint {
            allowed: ["A100-80GB".to_string()].into(),
            sources: vec!["nodeSelector nvidia.com/gpu.product".into()],
        };
        let mut a = answer();
        restrict_answer(&mut a, Some(&own));
        assert_eq!(a.accepted_classes.len(), 1);
        // An unknown or empty class selector allows nothing: the answer becomes infeasible.
        let none = OwnConstraint {
            allowed: Default::default(),
            sources: vec!["nodeSelector gpu.nvidia.com/class".into()],
        };
        let mut a = answer();
        a.explored = true;
        restrict_answer(&mut a, Some(&none));
        assert!(a.accepted_classes.is_empty());
        assert!(!a.explored);
        assert!(
            a.infeasible_reason
                .contains("allow no GPU class of the catalog"),
            "{}",
            a.infeasible_reason
        );
    }

    #[test]
    fn over_long_values_are_fitted_to_the_scorer_limits_with_a_warning() {
        let tenant = "t".repeat(300);
        let req = request(
            "CREATE",
            Some("ml"),
            gpu_pod(json!({"scheduler.radix.ai/tenant": tenant}), json!(null)),
        );
        let (s, warnings) = score_request(
            &"u".repeat(300),
            &triage_with(&req, tiers, &policy(), &NoClaimTemplates).unwrap(),
            &policy(),
        );
        assert_eq!(limits::check_score_request(&s), Ok(()));
        assert_eq!(s.tenant, tenant[..limits::MAX_NAME_BYTES]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[1].contains("tenant is 300 bytes long; at most 253"),
            "{warnings:?}"
        );
    }

    fn answer() -> ScoreResponse {
        ScoreResponse {
            accepted_classes: policy().catalog().iter().map(Into::into).collect(),
            priority_score: 50.0,
            policy_version: "v1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn validation_rejects_bad_answers() {
        assert_eq!(validate_answer(&answer(), &policy()), Ok(()));
        assert!(
            validate_answer(&answer(), &PolicySnapshot::default())
                .unwrap_err()
                .contains("not known yet")
        );
        for bad in [f64::NAN, f64::INFINITY, -0.5, 100.01] {
            let mut a = answer();
            a.priority_score = bad;
            assert!(validate_answer(&a, &policy()).is_err(), "{bad}");
        }
        let mut a = answer();
        a.accepted_classes[0].name = "B200".into();
        assert!(
            validate_answer(&a, &policy())
                .unwrap_err()
                .contains("unknown GPU class")
        );
        // Another policy version: still only classes of the catalog we know (ours is refreshed meanwhile).
        a.policy_version = "v2".into();
        assert!(validate_answer(&a, &policy()).is_err());
        let mut a = answer();
        a.policy_version = "v2".into();
        assert_eq!(validate_answer(&a, &policy()), Ok(()));
        a.accepted_classes[0].node_label_value = "other-value".into();
        assert!(
            validate_answer(&a, &policy())
                .unwrap_err()
                .contains("the catalog says")
        );
        a.accepted_classes[0].node_label_value = "bad value".into();
        assert!(validate_answer(&a, &policy()).is_err());
        let mut a = answer();
        a.accepted_classes[0].node_label_key = "/x".into();
        assert!(validate_answer(&a, &policy()).is_err());
        let mut a = answer();
        a.priority_class = Some(PriorityAssignment {
            name: "p".into(),
            value: 1,
            preemption_policy: "Sometimes".into(),
        });
        assert!(validate_answer(&a, &policy()).is_err());
    }

    #[test]
    fn catalog_labels_checked_with_the_policy_still_bind_answers() {
        // A catalog of labels the policy's validation would refuse, as a snapshot could only hold by a bug.
        let policy_with = |key: &str, taint: &str| {
            let mut p = policy();
            let model = std::sync::Arc::make_mut(p.policy.as_mut().unwrap());
            model.classes[0].node_label_key = key.into();
            model.classes[0].taint_key = (!taint.is_empty()).then(|| taint.into());
            p
        };
        let answer_of = |p: &PolicySnapshot| ScoreResponse {
            accepted_classes: p.catalog().iter().map(Into::into).collect(),
            ..Default::default()
        };
        let good = policy_with("gpu.nvidia.com/class", "nvidia.com/gpu");
        assert_eq!(
            good.checked_class("A100-80GB")
                .map(|(c, ok)| (c.name.as_str(), ok)),
            Some(("A100-80GB", true))
        );
        assert_eq!(validate_answer(&answer_of(&good), &good), Ok(()));
        // A catalog whose labels are not label syntax: an answer repeating them is refused as before.
        for (key, taint, why) in [
            ("/x", "", "invalid node label"),
            ("gpu.nvidia.com/class", "bad taint", "invalid taint key"),
        ] {
            let bad = policy_with(key, taint);
            assert_eq!(
                bad.checked_class("A100-80GB")
                    .map(|(c, ok)| (c.name.as_str(), ok)),
                Some(("A100-80GB", false))
            );
            let err = validate_answer(&answer_of(&bad), &bad).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        // An answer whose taint differs from the catalog's is checked itself.
        let mut a = answer_of(&good);
        a.accepted_classes[0].taint_key = "Bad Taint".into();
        assert!(!same_labels(&good.catalog()[0], &a.accepted_classes[0]));
        assert!(
            validate_answer(&a, &good)
                .unwrap_err()
                .contains("invalid taint key")
        );
        a.accepted_classes[0].taint_key = "other.io/gpu".into();
        assert_eq!(validate_answer(&a, &good), Ok(()));
    }

    /// A Pod whose DRA claim takes devices of a catalog DeviceClass is scored among that class only (never
    /// pinned to another class of its tier where the claim cannot be allocated); a vendor class narrows
    /// nothing here; the Pod's own node constraints and its claims narrow together.
    #[test]
    fn a_claim_on_a_catalog_device_class_narrows_the_classes() {
        use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
        let policy = PolicySnapshot::from_policy(std::sync::Arc::new(
            gpu_admission_policy::parse(gpu_admission_policy::DEFAULT_POLICY_YAML, "default")
                .unwrap(),
        ));
        let templates = |_: &str, name: &str| -> Option<ResourceClaimTemplate> {
            let class = match name {
                "h100" => "h100-80gb.gpu-admission.io",
                "l4" => "l4-24gb.gpu-admission.io",
                "vendor" => "gpu.nvidia.com",
                _ => return None,
            };
            serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"spec": {"devices":
                {"requests": [{"name": "r", "exactly": {"deviceClassName": class}}]}}}}),
            )
            .ok()
        };
        let pod = |claims: &[&str], selector: serde_json::Value| {
            let claims: Vec<_> = claims
                .iter()
                .map(|t| json!({"name": t, "resourceClaimTemplateName": t}))
                .collect();
            json!({"metadata": {"name": "p"}, "spec": {"nodeSelector": selector, "resourceClaims": claims,
                "containers": [{"name": "c", "resources": {"claims": [{"name": "h100"}]}}]}})
        };
        let own = |claims: &[&str], selector: serde_json::Value| {
            let req = request("CREATE", Some("ml"), pod(claims, selector));
            triage_with(&req, tiers, &policy, &templates).unwrap().own
        };
        let h100 = own(&["h100"], json!({})).expect("narrowed by the claim");
        assert_eq!(h100.allowed, ["H100-80GB".to_string()].into());
        assert_eq!(h100.sources, ["DRA DeviceClass h100-80gb.gpu-admission.io"]);
        assert_eq!(own(&["vendor"], json!({})), None, "a vendor class");
        assert_eq!(own(&["h100", "vendor"], json!({})), None);
        assert!(own(&["h100", "l4"], json!({})).unwrap().allowed.is_empty());
        let both = own(&["h100"], json!({"gpu.nvidia.com/class": "A100-80GB"})).unwrap();
        assert!(both.allowed.is_empty(), "{both:?}");
        assert_eq!(both.sources.len(), 2);
    }
}
