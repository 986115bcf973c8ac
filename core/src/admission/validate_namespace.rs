//! `/validate-namespace`: the tier label of a Namespace is a rule. Setting it to a tier, or taking a namespace
//! out of one, needs `update tiers/<tier>` in Kubernetes RBAC ([`crate::authority`]; a user who may label her
//! namespace would otherwise raise it to any tier, or remove it and leave every tier check behind). A
//! forbidden change is denied in every enforcement mode: `Warn` and `Audit` relax what Pods may do, never who
//! may change a namespace's tier. Pure: the answers of the apiserver come in as [`Grants`].
//!
//! The same holds for DRA admin access: a Namespace labelled [`ADMIN_ACCESS_LABEL`]` = "true"` is where the
//! apiserver admits ResourceClaims with `adminAccess: true`, which are allocated devices other Pods are using
//! (GA and always on since Kubernetes 1.36). Setting that label needs [`Permission::AdminAccess`]; removing
//! it takes a power away and needs none.

use crate::admission::ValidationOutcome;
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

use crate::authority::{Grants, Permission};
use crate::review::Verdict;

/// Every path of the Namespace API that persists its labels, as an admission rule names it: the object, and
/// the subresources whose update strategies keep metadata changes (`status` resets only the spec, `finalize`
/// only the status; kube-apiserver 1.34 to 1.37 serve no other Namespace subresource that updates). A tier
/// label set through any of them is the same change: `/validate-namespace`'s registration and the floor's
/// Namespace policy match all three.
pub const NAMESPACE_RESOURCES: [&str; 3] =
    ["namespaces", "namespaces/status", "namespaces/finalize"];

/// The Namespace label under which the apiserver admits claims with `adminAccess: true` (value `"true"`).
pub const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access";

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
    /// The tier label changed, by someone without the power it needs.
    Forbidden {
        namespace: String,
        user: String,
        from: Option<String>,
        to: Option<String>,
        /// The first power the requester lacks.
        missing: Permission,
        /// The subresource written through (`status`, `finalize`), if not the Namespace itself.
        subresource: Option<String>,
        /// Why the power is missing, when RBAC granted it only through a `*` ([`Grants::why_missing`]).
        why: String,
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

/// A Namespace CREATE or UPDATE (through any subresource).
fn namespace_write(req: &AdmissionRequest<DynamicObject>) -> Result<(), &'static str> {
    if !(req.kind.group.is_empty() && req.kind.kind == "Namespace") {
        return Err("not a Namespace");
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err("not a CREATE or UPDATE");
    }
    Ok(())
}

/// The request sets [`ADMIN_ACCESS_LABEL`] to `"true"` (it was not before).
fn grants_admin_access(req: &AdmissionRequest<DynamicObject>) -> bool {
    namespace_write(req).is_ok()
        && tier_of(req.object.as_ref(), ADMIN_ACCESS_LABEL) == Some("true")
        && tier_of(req.old_object.as_ref(), ADMIN_ACCESS_LABEL) != Some("true")
}

/// The tier label's value before and after the request, when it changes (a Namespace CREATE/UPDATE).
fn change<'r>(
    req: &'r AdmissionRequest<DynamicObject>,
    tier_label: &str,
) -> Result<(Option<&'r str>, Option<&'r str>), &'static str> {
    namespace_write(req)?;
    let from = tier_of(req.old_object.as_ref(), tier_label);
    let to = tier_of(req.object.as_ref(), tier_label);
    if from == to {
        return Err("the tier label is unchanged");
    }
    Ok((from, to))
}

/// The powers a request needs: `update tiers/<old>` to take a namespace out of its tier, `update
/// tiers/<new>` to put it in one, `use adminaccess` to set [`ADMIN_ACCESS_LABEL`]. What the edge asks the
/// apiserver before [`check`].
pub fn permissions(req: &AdmissionRequest<DynamicObject>, tier_label: &str) -> Vec<Permission> {
    let mut needed: Vec<Permission> = match change(req, tier_label) {
        Ok((from, to)) => [from, to]
            .into_iter()
            .flatten()
            .map(|t| Permission::SetTier(t.to_string()))
            .collect(),
        Err(_) => Vec::new(),
    };
    if grants_admin_access(req) {
        needed.push(Permission::AdminAccess);
    }
    needed
}

/// Did the request set, change or remove the tier label, and may the requester?
pub fn check(req: &AdmissionRequest<DynamicObject>, grants: &Grants, tier_label: &str) -> Check {
    let (from, to) = match change(req, tier_label) {
        Ok(change) => change,
        Err(_) if grants_admin_access(req) => {
            let tier = tier_of(req.object.as_ref(), tier_label);
            (tier, tier)
        }
        Err(why) => return Check::NotOurs(why),
    };
    let missing = permissions(req, tier_label)
        .into_iter()
        .find(|p| !grants.allows(p));
    let (from, to) = (from.map(str::to_string), to.map(str::to_string));
    let Some(missing) = missing else {
        return Check::Allowed { from, to };
    };
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
        why: grants.why_missing(&missing),
        missing,
        subresource: req.sub_resource.clone().filter(|s| !s.is_empty()),
    }
}

/// The answer for a check: a forbidden change is denied, whatever the enforcement mode.
pub fn verdict(check: &Check, tier_label: &str) -> Verdict {
    let Check::Forbidden {
        namespace,
        user,
        from,
        to,
        missing,
        subresource,
        why,
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
    let through = subresource
        .as_deref()
        .map(|s| format!(" (through its {s} subresource)"))
        .unwrap_or_default();
    if *missing == Permission::AdminAccess {
        return Verdict {
            denied: Some(format!(
                "gpu-admission: {user} sets {ADMIN_ACCESS_LABEL}=true on namespace {namespace}{through}: DRA admin \
                 access (ResourceClaims with adminAccess: true, allocated devices other tenants' Pods are using) needs \
                 {}{why} in Kubernetes RBAC (the ClusterRole gpu-admission-device-admin)",
                missing.describe()
            )),
            warnings: Vec::new(),
        };
    }
    Verdict {
        denied: Some(format!(
            "gpu-admission: {user} {change} on namespace {namespace}{through}: setting, changing or removing the tier label {tier_label} needs {}{why} in Kubernetes RBAC (ask a cluster admin for a RoleBinding to the ClusterRole gpu-admission-tier-setter, or one limited to that tier)",
            missing.describe()
        )),
        warnings: Vec::new(),
    }
}

impl Check {
    /// The metric's `outcome` for this check answered with `verdict`.
    pub fn outcome(&self, verdict: &Verdict) -> ValidationOutcome {
        match self {
            Check::NotOurs(_) => ValidationOutcome::Skipped,
            Check::Allowed { .. } => ValidationOutcome::Allowed,
            Check::Forbidden { .. } if verdict.denied.is_some() => ValidationOutcome::Denied,
            Check::Forbidden { .. } => ValidationOutcome::ViolationAdmitted,
        }
    }
}

/// The `/validate-namespace` decision: [`check`] and its [`verdict`].
pub fn decide(
    req: &AdmissionRequest<DynamicObject>,
    grants: &Grants,
    tier_label: &str,
) -> (Check, Verdict) {
    let check = check(req, grants, tier_label);
    let verdict = verdict(&check, tier_label);
    (check, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const TIER: &str = "tenant.kubenexus.io/tier";

    fn ns(tier: Option<&str>) -> Value {
        let labels = match tier {
            Some(t) => json!({TIER: t, "team": "a"}),
            None => json!({"team": "a"}),
        };
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}})
    }

    fn request(op: &str, new: Value, old: Value) -> AdmissionRequest<DynamicObject> {
        through(None, op, new, old)
    }

    /// A request as the apiserver sends it for `subresource` (`None`: the Namespace itself).
    fn through(
        subresource: Option<&str>,
        op: &str,
        new: Value,
        old: Value,
    ) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "subResource": subresource,
            "requestSubResource": subresource,
            "name": "team-a", "operation": op,
            "userInfo": {"username": "alice", "groups": []},
            "object": new, "oldObject": old
        }))
        .unwrap()
    }

    fn set(tiers: &[&str]) -> Grants {
        Grants::new(tiers.iter().map(|t| Permission::SetTier(t.to_string())))
    }

    #[test]
    fn setting_changing_or_removing_a_tier_needs_update_on_each_tier_involved() {
        let cases = [
            (
                "CREATE",
                ns(Some("platinum")),
                Value::Null,
                "sets it to platinum",
                vec!["platinum"],
            ),
            (
                "UPDATE",
                ns(Some("platinum")),
                ns(Some("bronze")),
                "changes it from bronze to platinum",
                vec!["bronze", "platinum"],
            ),
            (
                "UPDATE",
                ns(None),
                ns(Some("bronze")),
                "removes it (was bronze)",
                vec!["bronze"],
            ),
        ];
        for (op, new, old, said, needed) in cases {
            let req = request(op, new, old);
            let asked: Vec<Permission> = needed
                .iter()
                .map(|t| Permission::SetTier(t.to_string()))
                .collect();
            assert_eq!(permissions(&req, TIER), asked, "{op} {said}");
            let (c, v) = decide(&req, &Grants::none(), TIER);
            let denied = v.denied.clone().unwrap_or_default();
            assert!(denied.contains(said), "{op}: {denied}");
            assert!(denied.contains("needs update tiers/"), "{denied}");
            assert_eq!(c.outcome(&v), ValidationOutcome::Denied);
            // One of two tiers is not enough.
            if needed.len() == 2 {
                let (c, _) = decide(&req, &set(&needed[..1]), TIER);
                assert!(matches!(c, Check::Forbidden { .. }), "{c:?}");
            }
            let (c, v) = decide(&req, &set(&needed), TIER);
            assert!(matches!(c, Check::Allowed { .. }), "{c:?}");
            assert!(v.denied.is_none());
        }
        // A tier lead for bronze may hand out bronze, not gold.
        let lead = set(&["bronze"]);
        let (c, _) = decide(
            &request("CREATE", ns(Some("bronze")), Value::Null),
            &lead,
            TIER,
        );
        assert!(matches!(c, Check::Allowed { .. }));
        let (c, _) = decide(
            &request("CREATE", ns(Some("gold")), Value::Null),
            &lead,
            TIER,
        );
        assert!(matches!(c, Check::Forbidden { .. }));
        // Other labels, and a namespace without a tier, are anyone's.
        let mut relabelled = ns(Some("bronze"));
        relabelled["metadata"]["labels"]["team"] = json!("b");
        let req = request("UPDATE", relabelled, ns(Some("bronze")));
        assert!(permissions(&req, TIER).is_empty());
        let (c, _) = decide(&req, &Grants::none(), TIER);
        assert_eq!(c, Check::NotOurs("the tier label is unchanged"));
        let (c, _) = decide(
            &request("CREATE", ns(None), Value::Null),
            &Grants::none(),
            TIER,
        );
        assert_eq!(c, Check::NotOurs("the tier label is unchanged"));
    }

    /// Setting DRA admin access on a namespace needs `use adminaccess`, through the Namespace and its
    /// subresources; removing it, or keeping it, needs nothing.
    #[test]
    fn setting_dra_admin_access_needs_its_own_power() {
        let with = |tier: Option<&str>, admin: Option<&str>| {
            let mut n = ns(tier);
            if let Some(v) = admin {
                n["metadata"]["labels"][ADMIN_ACCESS_LABEL] = json!(v);
            }
            n
        };
        for sub in [None, Some("status"), Some("finalize")] {
            let req = through(
                sub,
                "UPDATE",
                with(Some("bronze"), Some("true")),
                with(Some("bronze"), None),
            );
            assert_eq!(
                permissions(&req, TIER),
                [Permission::AdminAccess],
                "{sub:?}"
            );
            let (c, v) = decide(&req, &set(&["bronze", "gold"]), TIER);
            let denied = v.denied.clone().unwrap_or_default();
            assert_eq!(c.outcome(&v), ValidationOutcome::Denied, "{sub:?}");
            assert!(
                denied
                    .contains("sets resource.kubernetes.io/admin-access=true on namespace team-a")
                    && denied.contains("needs use adminaccess (gpu-admission.io)"),
                "{denied}"
            );
            let (c, _) = decide(&req, &Grants::new([Permission::AdminAccess]), TIER);
            assert!(matches!(c, Check::Allowed { .. }), "{sub:?}: {c:?}");
        }
        // On a namespace without a tier, at its creation, and together with a tier: each power asked.
        let req = request("CREATE", with(None, Some("true")), Value::Null);
        assert_eq!(permissions(&req, TIER), [Permission::AdminAccess]);
        assert!(decide(&req, &Grants::none(), TIER).1.denied.is_some());
        let req = request("CREATE", with(Some("gold"), Some("true")), Value::Null);
        assert_eq!(
            permissions(&req, TIER),
            [Permission::SetTier("gold".into()), Permission::AdminAccess]
        );
        let (c, _) = decide(&req, &set(&["gold"]), TIER);
        assert!(
            matches!(
                c,
                Check::Forbidden {
                    missing: Permission::AdminAccess,
                    ..
                }
            ),
            "{c:?}"
        );
        // Removing it, another value, or leaving it as it was: no power.
        for (new, old) in [
            (with(None, None), with(None, Some("true"))),
            (with(None, Some("false")), with(None, None)),
            (with(None, Some("true")), with(None, Some("true"))),
        ] {
            let req = request("UPDATE", new, old);
            assert!(permissions(&req, TIER).is_empty());
            assert!(matches!(
                decide(&req, &Grants::none(), TIER).0,
                Check::NotOurs(_)
            ));
        }
    }

    /// A tier label change by one RBAC grants `update tiers/*` only through a `*` is denied, and says why.
    #[test]
    fn a_wildcard_grant_does_not_set_a_tier_and_the_message_says_why() {
        use crate::authority::{Answer, Wildcard};
        let req = request("CREATE", ns(Some("gold")), Value::Null);
        let argo = Grants::from_answers([(
            Permission::SetTier("gold".into()),
            Answer::ThroughWildcard(Wildcard::Verb),
        )]);
        let (c, v) = decide(&req, &argo, TIER);
        assert_eq!(c.outcome(&v), ValidationOutcome::Denied);
        let denied = v.denied.unwrap_or_default();
        assert!(
            denied.contains("needs update tiers/gold (gpu-admission.io) (RBAC grants it to this requester only through a rule with verbs [\"*\"]"),
            "{denied}"
        );
    }

    /// A tier label written through a subresource is the same change as through the Namespace: each
    /// subresource of [`NAMESPACE_RESOURCES`] needs the same powers, and the message says which path it took.
    #[test]
    fn a_tier_label_written_through_a_subresource_needs_the_same_powers() {
        let subresources: Vec<&str> = NAMESPACE_RESOURCES
            .iter()
            .filter_map(|r| r.strip_prefix("namespaces/"))
            .collect();
        assert_eq!(subresources, ["status", "finalize"]);
        for sub in subresources {
            let req = through(
                Some(sub),
                "UPDATE",
                ns(Some("platinum")),
                ns(Some("bronze")),
            );
            assert_eq!(
                permissions(&req, TIER),
                [
                    Permission::SetTier("bronze".into()),
                    Permission::SetTier("platinum".into())
                ],
                "{sub}"
            );
            let (c, v) = decide(&req, &set(&["bronze"]), TIER);
            let denied = v.denied.clone().unwrap_or_default();
            assert!(
                matches!(&c, Check::Forbidden { missing: Permission::SetTier(t), subresource: Some(s), .. }
                    if t == "platinum" && s == sub),
                "{sub}: {c:?}"
            );
            assert!(
                denied.contains(&format!("(through its {sub} subresource)"))
                    && denied.contains("needs update tiers/platinum"),
                "{sub}: {denied}"
            );
            assert_eq!(c.outcome(&v), ValidationOutcome::Denied);
            let (c, v) = decide(&req, &set(&["bronze", "platinum"]), TIER);
            assert!(matches!(c, Check::Allowed { .. }), "{sub}: {c:?}");
            assert!(v.denied.is_none());
            // Removing the label through the subresource is taking the namespace out of its tier.
            let req = through(Some(sub), "UPDATE", ns(None), ns(Some("gold")));
            let (_, v) = decide(&req, &Grants::none(), TIER);
            assert!(
                v.denied
                    .is_some_and(|d| d.contains("removes it (was gold)")),
                "{sub}"
            );
        }
    }
}
