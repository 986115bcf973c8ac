//! The priority cap for Pods `/mutate-pod` does not score (no GPU, or already decided): a Pod of a tier
//! namespace whose own PriorityClass is beyond its tier's cap ([`TierRules::priority_beyond_cap`]) gets the
//! cap's class instead, with its `priority` and `preemptionPolicy`, and a warning. Nothing else is touched:
//! no placement, no record. Under `Enforce` the Pod is left as it is for `/validate-pod` to deny, with a
//! message saying what the tier allows (lowering it would hide the refusal); under `Warn` and `Audit`, where
//! validation only warns or counts, lowering it is what holds the cap. Mutation never rejects: an untiered
//! namespace under `Deny` is `/validate-pod`'s too.
//!
//! [`TierRules::priority_beyond_cap`]: crate::policy::TierRules::priority_beyond_cap

use gpu_admission_policy::EnforcementMode;
use k8s_openapi::api::core::v1::Pod;
use kube_core::admission::{AdmissionRequest, Operation};

use super::patch::set_priority_class;
use crate::facts::Facts;
use crate::policy::PolicySnapshot;
use crate::review::{Answer, Patch};

/// A Pod whose priority was lowered to its tier's cap.
#[derive(Debug)]
pub struct Capped {
    /// The tier it is held to.
    pub tier: String,
    /// The class it named, and the cap it got.
    pub own: String,
    pub cap: String,
    /// The patch (priority fields only) and the warning.
    pub answer: Answer,
}

/// The cap for a CREATE of a Pod in a namespace held to a tier ([`PolicySnapshot::tier_for`]) outside
/// `Enforce`, unless RBAC lets the requester run outside the tier (`exempt tiers/<tier>`) or the cap's PriorityClass is not known (nothing above the cap is ever assigned;
/// `/validate-pod` answers such a Pod). `None`: nothing to change.
pub fn cap_priority(
    req: &AdmissionRequest<Pod>,
    facts: &Facts<'_>,
    policy: &PolicySnapshot,
) -> Option<Capped> {
    if req.operation != Operation::Create || policy.mode == EnforcementMode::Enforce {
        return None;
    }
    let pod = req.object.as_ref()?;
    let spec = pod.spec.as_ref()?;
    let namespace = req
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .filter(|n| !n.is_empty())?;
    let scope = policy.tier_for((facts.tier_of)(namespace).as_deref());
    let rules = policy.tier_rules(scope.tier()?, namespace)?;
    let pcs = policy.known_priority_classes(facts.priority_classes)?;
    let beyond = rules.priority_beyond_cap(spec, pcs)?;
    let cap = pcs.priority_class(&rules.max_priority_class?.name)?;
    if facts.grants.allows(&crate::authority::Permission::Exempt(
        rules.tier.to_string(),
    )) {
        return None;
    }
    let mut patch = Patch::default();
    set_priority_class(&mut patch, &cap);
    let warning = format!(
        "gpu-admission: PriorityClass {} is beyond the cap of tier {}; lowered to {}",
        beyond.class, rules.tier, cap.name
    );
    Some(Capped {
        tier: rules.tier.to_string(),
        own: beyond.class,
        cap: cap.name,
        answer: Answer {
            patch,
            warnings: vec![warning],
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pod::gpu_resources::NoClaimTemplates;
    use crate::priority_class::PriorityClassFacts;
    use crate::tier_bound::NodeClass;

    fn policy() -> PolicySnapshot {
        let mut p = crate::policy::test_policy(
            &[
                "{ name: L4-24GB, vendor: nvidia, memoryGiB: 24, relativeThroughput: 1.0, pricePerHour: 1.0 }",
            ],
            &[
                "{ name: bronze, allowedClasses: [L4-24GB], objective: cheapest, priorityWeight: 1.0, \
               maxPriorityClass: gpu-default }",
            ],
            &[
                "{ minScore: 90, name: gpu-ultra, value: 1000000, preemptionPolicy: PreemptLowerPriority }",
                "{ minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: Never }",
            ],
            "",
        );
        p.priority_classes.insert(
            "system-node-critical".into(),
            PriorityClassFacts {
                name: "system-node-critical".into(),
                value: 2_000_001_000,
                preemption_policy: None,
                global_default: false,
            },
        );
        p
    }

    fn request(ns: &str, class: &str) -> AdmissionRequest<Pod> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE", "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": "p"}, "spec": {
                "priorityClassName": class, "priority": 1_000_000,
                "nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c"}]}}
        }))
        .unwrap()
    }

    fn capped(ns: &str, class: &str, label: Option<&str>) -> Option<Capped> {
        capped_in(&policy(), ns, class, label)
    }

    fn capped_in(p: &PolicySnapshot, ns: &str, class: &str, label: Option<&str>) -> Option<Capped> {
        let tier_of = |_: &str| label.map(str::to_string);
        let nodes = |_: &str| NodeClass::Unknown;
        let req = request(ns, class);
        let grants = crate::authority::Grants::none();
        let facts = Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &nodes,
            grants: &grants,
        };
        cap_priority(&req, &facts, p)
    }

    #[test]
    fn a_cpu_pod_above_its_tiers_cap_gets_the_cap_and_nothing_else() {
        for class in ["gpu-ultra", "system-node-critical"] {
            // Labelled bronze, unlabelled, `""`, an unknown value: all held to bronze.
            for label in [Some("bronze"), None, Some(""), Some("Bronze")] {
                let c = capped("batch", class, label).expect("capped");
                assert_eq!((c.tier.as_str(), c.cap.as_str()), ("bronze", "gpu-default"));
                let ops = serde_json::to_value(c.answer.patch.operations()).unwrap();
                assert_eq!(
                    ops,
                    json!([
                        {"op": "add", "path": "/spec/priorityClassName", "value": "gpu-default"},
                        {"op": "add", "path": "/spec/priority", "value": 1000},
                        {"op": "add", "path": "/spec/preemptionPolicy", "value": "Never"},
                    ])
                );
                assert!(c.answer.warnings[0].contains("lowered to gpu-default"));
            }
        }
        assert!(capped("batch", "gpu-default", Some("bronze")).is_none());
        // Enforce: left for /validate-pod to deny.
        let mut p = policy();
        p.mode = EnforcementMode::Enforce;
        assert!(capped_in(&p, "batch", "gpu-ultra", Some("bronze")).is_none());
        // Ignore: an untiered namespace is outside every rule; a tier namespace still is not.
        let mut model = (**policy().policy.as_ref().unwrap()).clone();
        model.untiered_namespaces = crate::policy::UntieredNamespaces::Ignore;
        let p = PolicySnapshot::from_policy(std::sync::Arc::new(model));
        assert!(capped_in(&p, "batch", "gpu-ultra", None).is_none());
        assert!(capped_in(&p, "batch", "gpu-ultra", Some("bronze")).is_some());
    }
}
