//! Which requests are scored, what the scorer is asked, and whether its answer can be trusted. Pure functions.

use gpu_admission_proto::limits;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};

use super::features::{self, JobFeatures, is_label_value};
use crate::admission::placement;
use crate::policy::PolicySnapshot;

/// A Pod worth asking the scorer about.
#[derive(Debug)]
pub struct Candidate<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub tier: String,
    pub features: JobFeatures,
}

/// Why a request is allowed unchanged without asking the scorer (for logs, spans and metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub &'static str);

/// Decides whether a Pod request is scored: CREATE of a Pod requesting GPUs in a namespace that carries a tier.
/// `tier_of` reads the namespace cache. Our own annotations are no reason to skip (anyone can write them):
/// whether a decided Pod needs anything is the patch's question (`patch::is_settled`).
pub fn triage<'a>(
    req: &'a AdmissionRequest<Pod>,
    tier_of: impl Fn(&str) -> Option<String>,
) -> Result<Candidate<'a>, Skip> {
    if req.operation != Operation::Create {
        return Err(Skip("not a CREATE"));
    }
    let pod = req
        .object
        .as_ref()
        .ok_or(Skip("no object in the request"))?;
    let features = features::extract(pod);
    if features.gpu_count == 0 {
        return Err(Skip("no GPU requested"));
    }
    let namespace = req
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .filter(|n| !n.is_empty())
        .ok_or(Skip("no namespace"))?;
    let tier = tier_of(namespace).ok_or(Skip("namespace has no tier label"))?;
    Ok(Candidate {
        pod,
        namespace,
        tier,
        features,
    })
}

/// The scorer request for a candidate, and the warnings of what had to change in it. A Pod that already names
/// classes of the catalog is scored for those classes only (every value of every term; those inside its tier
/// when the tier is known). The request is brought inside the limits the scorer enforces (a 300-byte tenant
/// annotation is cut, with a warning), so that an odd value changes the request, never the decision.
pub fn score_request(
    uid: &str,
    c: &Candidate<'_>,
    policy: &PolicySnapshot,
) -> (ScoreRequest, Vec<String>) {
    let keys: Vec<&str> = policy.class_label_keys.iter().map(String::as_str).collect();
    let rules = policy.tier_rules(&c.tier, c.namespace);
    let candidate_classes: Vec<String> = c
        .pod
        .spec
        .as_ref()
        .map(|s| placement::named_classes(s, &keys))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| policy.class_by_label(k, v))
        .filter(|class| rules.as_ref().is_none_or(|r| r.allows(&class.name)))
        .map(|class| class.name.clone())
        .collect();
    let f = &c.features;
    let mut request = ScoreRequest {
        request_id: uid.to_string(),
        namespace: c.namespace.to_string(),
        tenant: f.tenant.clone().unwrap_or_else(|| c.namespace.to_string()),
        tier: c.tier.clone(),
        job_type: f.job_type.clone().unwrap_or_default(),
        workload_class: f.workload_class as i32,
        gpu_count: f.gpu_count,
        gpu_vendor: f.gpu_vendor as i32,
        gpu_memory_gib: f.gpu_memory_gib,
        batch_size: f.batch_size,
        model_size_billion_params: f.model_size_billion_params,
        candidate_classes,
        colocated_job_types: Vec::new(),
    };
    let warnings = limits::fit_score_request(&mut request)
        .into_iter()
        .map(|v| format!("gpu-admission: the scorer's {v}"))
        .collect();
    (request, warnings)
}

/// `true` for a valid qualified label key (`[prefix/]name`, DNS-subdomain prefix, name ≤ 63).
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                let b = part.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    prefix_ok && is_label_value(name)
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
    if policy.catalog.is_empty() && !a.accepted_classes.is_empty() {
        return Err("the scorer's policy is not known yet (GetPolicy pending)".into());
    }
    for c in &a.accepted_classes {
        if c.name.is_empty() {
            return Err("accepted class without a name".into());
        }
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
        match policy.class(&c.name) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_proto::scorer::v1::{
        GetPolicyResponse, GpuClass, PriorityAssignment, PriorityBucket,
    };
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

    fn policy() -> PolicySnapshot {
        PolicySnapshot::from_response(GetPolicyResponse {
            version: "v1".into(),
            catalog: vec![GpuClass {
                name: "A100-80GB".into(),
                node_label_key: "gpu.nvidia.com/class".into(),
                node_label_value: "A100-80GB".into(),
                ..Default::default()
            }],
            priority_buckets: vec![PriorityBucket {
                min_score: 90.0,
                priority_class: Some(PriorityAssignment {
                    name: "gpu-ultra".into(),
                    value: 1000,
                    preemption_policy: "".into(),
                }),
            }],
            ..Default::default()
        })
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
                "not a CREATE",
            ),
            (
                request("CREATE", Some("web"), gpu_pod(json!({}), json!(null))),
                "namespace has no tier label",
            ),
            (
                request("CREATE", None, gpu_pod(json!({}), json!(null))),
                "no namespace",
            ),
            (
                request(
                    "CREATE",
                    Some("ml"),
                    json!({"metadata": {}, "spec": {"containers": [{"name": "c"}]}}),
                ),
                "no GPU requested",
            ),
            (request("DELETE", Some("ml"), json!(null)), "not a CREATE"),
            (
                request("CREATE", Some("ml"), json!(null)),
                "no object in the request",
            ),
        ];
        for (req, why) in cases {
            assert_eq!(triage(&req, tiers).unwrap_err(), Skip(why));
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
        let (s, _) = score_request("u", &triage(&req, tiers).unwrap(), &policy());
        assert_eq!(s.candidate_classes, ["A100-80GB"]);
    }

    #[test]
    fn over_long_values_are_fitted_to_the_scorer_limits_with_a_warning() {
        let tenant = "t".repeat(300);
        let req = request(
            "CREATE",
            Some("ml"),
            gpu_pod(json!({"scheduler.radix.ai/tenant": tenant}), json!(null)),
        );
        let (s, warnings) =
            score_request(&"u".repeat(300), &triage(&req, tiers).unwrap(), &policy());
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
            accepted_classes: policy().catalog.clone(),
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
    fn label_keys() {
        for ok in ["gpu.nvidia.com/class", "class", "a.b/c-d"] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in ["", "/x", "A.b/c", "a/", "a/b/c", "x y"] {
            assert!(!is_label_key(bad), "{bad}");
        }
    }
}
