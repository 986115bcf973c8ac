//! GPU quotas in the PolicyReports: the running Pods of quota'd tiers, replayed in creation order
//! by core's [`quota::over_max`] — each decided against what the Pods created before it hold, as
//! `/validate-pod` decides — and a result for each Pod past a `max` (admitted in Warn or Audit, or before the
//! `max` was lowered), with `/validate-pod`'s message. Nothing here is a rule of its own.

use std::collections::BTreeMap;

use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::{self, QUOTA_ANNOTATION, QuotaViolation, demand::Counted};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;

use super::evaluate::{Finding, Outcome, Resource};

/// A quota'd Pod of the audit, in the order it was created.
#[derive(Debug, Clone)]
pub struct QuotaPod {
    /// `metadata.creationTimestamp` (RFC 3339, which sorts as time) and the name: the order of admission.
    order: (String, String),
    resource: Resource,
    tier: String,
    namespace: String,
    counted: Counted,
}

/// What a listed Pod counts against its tier's quota (`None`: no GPU, no quota, not a Pod we read, or a Pod
/// that no longer holds its quota at `now_ms`, the pass's one clock: finished, or deleted and past its grace period).
pub fn counted(
    object: &DynamicObject,
    policy: &PolicySnapshot,
    facts: &Facts<'_>,
    now_ms: u64,
) -> Option<QuotaPod> {
    let namespace = object.metadata.namespace.as_deref()?;
    let pod: Pod = serde_json::from_value(serde_json::to_value(object).ok()?).ok()?;
    if !quota::demand::holds_quota(&pod, now_ms) {
        return None;
    }
    let (tier, namespace, counted) = quota::of_pod_in(&pod, namespace, policy, facts)?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let created = object
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    Some(QuotaPod {
        order: (created, name.clone()),
        resource: Resource {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: namespace.clone(),
            name,
            uid: object.metadata.uid.clone().unwrap_or_default(),
        },
        tier,
        namespace,
        counted,
    })
}

/// One result per Pod past a `max`, under the policy's mode (fail in Enforce and Audit, warn in Warn).
pub fn findings(mut pods: Vec<QuotaPod>, policy: &PolicySnapshot) -> Vec<Finding> {
    let Some(p) = policy.policy.as_deref() else {
        return Vec::new();
    };
    pods.sort_by(|a, b| a.order.cmp(&b.order));
    let replay = pods
        .into_iter()
        .map(|c| (c.resource, c.tier, c.namespace, c.counted));
    quota::over_max(p, replay)
        .into_iter()
        .map(|(resource, decision)| {
            let properties = BTreeMap::from([
                ("mode".to_string(), policy.mode.as_str().to_string()),
                ("policyVersion".to_string(), policy.version.clone()),
                (QUOTA_ANNOTATION.to_string(), decision.record()),
            ]);
            Finding {
                outcome: Outcome::of_violation(policy.mode),
                rule: QuotaViolation::OverMax.as_str(),
                message: decision.over_max_message().unwrap_or_default(),
                resource,
                properties,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use gpu_admission_core::authority::Grants;
    use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
    use gpu_admission_core::tier_bound::NoNodes;
    use gpu_admission_policy::EnforcementMode;
    use serde_json::json;

    fn snapshot(mode: EnforcementMode) -> PolicySnapshot {
        let text = format!(
            "{}\nquotas:\n  tiers:\n    - tier: bronze\n      classes: {{ L4-24GB: {{ max: 8 }} }}\n      namespaces:\n        - {{ namespace: team, classes: {{ L4-24GB: {{ max: 2 }} }} }}\n",
            gpu_admission_policy::DEFAULT_POLICY_YAML
        );
        let mut s = PolicySnapshot::from_policy(Arc::new(
            gpu_admission_policy::parse(&text, "p.yaml").unwrap(),
        ));
        s.mode = mode;
        s
    }

    fn pod(name: &str, created: &str, gpus: u32) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                "creationTimestamp": created},
            "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
                "containers": [{"name": "c", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}))
        .unwrap()
    }

    #[test]
    fn the_pods_created_after_the_max_was_full_are_reported_under_the_mode() {
        let tier_of = |ns: &str| (ns == "team").then(|| "bronze".to_string());
        let grants = Grants::none();
        let facts = Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &NoNodes,
            grants: &grants,
        };
        let pods = [
            pod("late", "2026-11-26T10:00:02Z", 1),
            pod("first", "2026-11-26T10:00:00Z", 2),
            pod("cpu", "2026-11-26T10:00:01Z", 0),
        ];
        for (mode, outcome) in [
            (EnforcementMode::Warn, Outcome::Warn),
            (EnforcementMode::Enforce, Outcome::Fail),
        ] {
            let policy = snapshot(mode);
            let counted: Vec<_> = pods
                .iter()
                .filter_map(|p| counted(p, &policy, &facts, 0))
                .collect();
            assert_eq!(counted.len(), 2, "the CPU Pod counts nothing");
            let found = findings(counted, &policy);
            assert_eq!(found.len(), 1, "{found:?}");
            let f = &found[0];
            assert_eq!((f.resource.name.as_str(), f.outcome), ("late", outcome));
            assert_eq!(f.rule, "over_quota");
            assert!(
                f.message
                    .contains("namespace team holds 2 of its 2 L4-24GB GPUs"),
                "{}",
                f.message
            );
            assert!(f.properties[QUOTA_ANNOTATION].ends_with("over-max"));
        }
    }
}
