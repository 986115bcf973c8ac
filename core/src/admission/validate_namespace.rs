//! `/validate-namespace`: the tier label of a Namespace is a rule, and the rules are the admins'. Only the
//! policy's `adminGroups`/`adminUsers` may set, change or remove it (a user who may label her namespace would
//! otherwise raise it to any tier, or remove it and leave every tier check behind). A forbidden change is
//! answered under the policy's mode, like a tier violation. Pure.

use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

use crate::policy::PolicySnapshot;
use crate::review::Verdict;
use gpu_admission_proto::scorer::v1::EnforcementMode;

/// The result of checking one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Not a Namespace CREATE/UPDATE, or the tier label is unchanged: allowed without a word.
    NotOurs(&'static str),
    /// The tier label changed, by an admin.
    Allowed {
        from: Option<String>,
        to: Option<String>,
    },
    /// The tier label changed, by someone who is not an admin.
    Forbidden {
        namespace: String,
        user: String,
        from: Option<String>,
        to: Option<String>,
    },
}

fn tier_of<'a>(object: Option<&'a DynamicObject>, tier_label: &str) -> Option<&'a str> {
    object?
        .metadata
        .labels
        .as_ref()?
        .get(tier_label)
        .map(String::as_str)
}

/// Did the request set, change or remove the tier label, and may the requester?
pub fn check(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    tier_label: &str,
) -> Check {
    if !(req.kind.group.is_empty() && req.kind.kind == "Namespace") {
        return Check::NotOurs("not a Namespace");
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Check::NotOurs("not a CREATE or UPDATE");
    }
    let from = tier_of(req.old_object.as_ref(), tier_label);
    let to = tier_of(req.object.as_ref(), tier_label);
    if from == to {
        return Check::NotOurs("the tier label is unchanged");
    }
    let (from, to) = (from.map(str::to_string), to.map(str::to_string));
    let admin = policy.is_admin(
        req.user_info.username.as_deref(),
        req.user_info.groups.as_deref().unwrap_or(&[]),
    );
    if admin {
        return Check::Allowed { from, to };
    }
    let namespace = req
        .object
        .as_ref()
        .or(req.old_object.as_ref())
        .and_then(|o| o.metadata.name.clone())
        .unwrap_or_else(|| req.name.clone());
    Check::Forbidden {
        namespace,
        user: req
            .user_info
            .username
            .clone()
            .unwrap_or_else(|| "an unnamed user".into()),
        from,
        to,
    }
}

/// The answer for a check under the policy's mode: Enforce denies, Warn admits with a warning, Audit admits.
pub fn verdict(check: &Check, tier_label: &str, mode: EnforcementMode) -> Verdict {
    let Check::Forbidden {
        namespace,
        user,
        from,
        to,
    } = check
    else {
        return Verdict::default();
    };
    let change = match (from, to) {
        (None, Some(t)) => format!("sets it to {t}"),
        (Some(f), Some(t)) => format!("changes it from {f} to {t}"),
        (Some(f), None) => format!("removes it (was {f})"),
        (None, None) => "changes it".to_string(),
    };
    let message = format!(
        "gpu-admission: {user} {change} on namespace {namespace}: only the policy's admins (enforcement.adminGroups / adminUsers) may set, change or remove the tier label {tier_label}"
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

impl Check {
    /// The metric's `outcome` for this check answered with `verdict`.
    pub fn outcome(&self, verdict: &Verdict) -> &'static str {
        match self {
            Check::NotOurs(_) => "skipped",
            Check::Allowed { .. } => "allowed",
            Check::Forbidden { .. } if verdict.denied.is_some() => "denied",
            Check::Forbidden { .. } => "violation_admitted",
        }
    }
}

/// The `/validate-namespace` decision: [`check`] and its [`verdict`] under the policy's mode.
pub fn decide(
    req: &AdmissionRequest<DynamicObject>,
    policy: &PolicySnapshot,
    tier_label: &str,
) -> (Check, Verdict) {
    let check = check(req, policy, tier_label);
    let verdict = verdict(&check, tier_label, policy.mode);
    (check, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const TIER: &str = "tenant.kubenexus.io/tier";

    fn policy(mode: EnforcementMode) -> PolicySnapshot {
        let mut policy = PolicySnapshot::default();
        policy.mode = mode;
        policy.admin_groups = vec!["gpu-admission:admins".into()];
        policy
    }

    fn ns(tier: Option<&str>) -> Value {
        let labels = match tier {
            Some(t) => json!({TIER: t, "team": "a"}),
            None => json!({"team": "a"}),
        };
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}})
    }

    fn request(
        op: &str,
        new: Value,
        old: Value,
        groups: &[&str],
    ) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "team-a", "operation": op,
            "userInfo": {"username": "alice", "groups": groups},
            "object": new, "oldObject": old
        }))
        .unwrap()
    }

    #[test]
    fn only_admins_set_change_or_remove_the_tier_label() {
        let p = policy(EnforcementMode::Enforce);
        let cases = [
            (
                "CREATE",
                ns(Some("platinum")),
                Value::Null,
                "sets it to platinum",
            ),
            (
                "UPDATE",
                ns(Some("platinum")),
                ns(Some("bronze")),
                "changes it from bronze to platinum",
            ),
            (
                "UPDATE",
                ns(None),
                ns(Some("bronze")),
                "removes it (was bronze)",
            ),
        ];
        for (op, new, old, said) in cases {
            let (c, v) = decide(&request(op, new.clone(), old.clone(), &[]), &p, TIER);
            let denied = v.denied.unwrap_or_default();
            assert!(denied.contains(said), "{op}: {denied}");
            assert_eq!(
                c.outcome(&Verdict {
                    denied: Some(denied),
                    warnings: vec![]
                }),
                "denied"
            );
            let (c, v) = decide(&request(op, new, old, &["gpu-admission:admins"]), &p, TIER);
            assert!(matches!(c, Check::Allowed { .. }), "{c:?}");
            assert!(v.denied.is_none());
        }
        // Other labels, and a namespace without a tier, are anyone's.
        let mut relabelled = ns(Some("bronze"));
        relabelled["metadata"]["labels"]["team"] = json!("b");
        let (c, _) = decide(
            &request("UPDATE", relabelled, ns(Some("bronze")), &[]),
            &p,
            TIER,
        );
        assert_eq!(c, Check::NotOurs("the tier label is unchanged"));
        let (c, _) = decide(&request("CREATE", ns(None), Value::Null, &[]), &p, TIER);
        assert_eq!(c, Check::NotOurs("the tier label is unchanged"));
        // Warn warns.
        let (_, v) = decide(
            &request("UPDATE", ns(Some("gold")), ns(Some("bronze")), &[]),
            &policy(EnforcementMode::Warn),
            TIER,
        );
        assert!(v.denied.is_none() && v.warnings[0].contains("only the policy's admins"));
    }
}
