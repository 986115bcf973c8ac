//! `/validate-policy`: a CREATE/UPDATE of the scorer's policy ConfigMap (matched by namespace and name, never
//! by labels a user could remove) is checked by the scorer itself (`ValidatePolicy`: the scorer owns the
//! schema; nothing of it is re-implemented here). Denied with every problem (file, field, reason); allowed
//! with a warning when the scorer cannot be asked (the scorer still refuses a bad file when it reloads, and
//! keeps the policy it has).
//!
//! The rules are RBAC's: only who may `update policies` (gpu-admission.io) may create or delete the
//! ConfigMap, or change any rule (the policy crate's `rule_fields` of the old and the new text differ).
//! Who may `update jobtypes/<name>` may change that job type's priors, and nothing else. A forbidden change
//! is denied in every mode.

use crate::admission::ValidationOutcome;
use gpu_admission_policy::TextChange;
use gpu_admission_policy::wire::validation;
use gpu_admission_proto::scorer::v1::ValidatePolicyResponse;
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

use crate::authority::{Grants, Permission};
use crate::review::Verdict;

/// Which ConfigMap holds the scorer's policy, and under which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfigMap {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl PolicyConfigMap {
    /// From `NAMESPACE/NAME` and the key.
    pub fn parse(namespaced_name: &str, key: &str) -> Result<Self, String> {
        match namespaced_name.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !key.is_empty() => Ok(Self {
                namespace: ns.to_string(),
                name: name.to_string(),
                key: key.to_string(),
            }),
            _ => Err(format!(
                "--policy-configmap {namespaced_name:?} (key {key:?}): expected NAMESPACE/NAME and a key"
            )),
        }
    }
}

/// What to do with a request, before the scorer is asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Triage<'a> {
    /// Not the policy ConfigMap, or not a CREATE/UPDATE: allowed.
    NotOurs(&'static str),
    /// The policy ConfigMap without the key the scorer reads.
    MissingKey,
    /// The policy text to check, how to name it in problems, and the text it replaces (UPDATE).
    Check {
        file: String,
        text: &'a str,
        old: Option<&'a str>,
    },
    /// The policy ConfigMap is deleted.
    Delete,
}

/// Picks the policy text out of a request. Pure.
pub fn triage<'a>(req: &'a AdmissionRequest<DynamicObject>, cm: &PolicyConfigMap) -> Triage<'a> {
    if !(req.kind.group.is_empty() && req.kind.kind == "ConfigMap") {
        return Triage::NotOurs("not a ConfigMap");
    }
    if !matches!(
        req.operation,
        Operation::Create | Operation::Update | Operation::Delete
    ) {
        return Triage::NotOurs("not a CREATE, UPDATE or DELETE");
    }
    let Some(object) = req.object.as_ref().or(req.old_object.as_ref()) else {
        return Triage::NotOurs("no object in the request");
    };
    let namespace = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref());
    let name = object.metadata.name.as_deref().or(Some(req.name.as_str()));
    if namespace != Some(cm.namespace.as_str()) || name != Some(cm.name.as_str()) {
        return Triage::NotOurs("another ConfigMap");
    }
    if req.operation == Operation::Delete {
        return Triage::Delete;
    }
    let text_of = |o: &'a DynamicObject| {
        o.data
            .get("data")
            .and_then(|d| d.get(&cm.key))
            .and_then(|t| t.as_str())
    };
    match text_of(object) {
        Some(text) => Triage::Check {
            file: format!("ConfigMap {}/{} key {}", cm.namespace, cm.name, cm.key),
            text,
            old: req.old_object.as_ref().and_then(text_of),
        },
        None => Triage::MissingKey,
    }
}

/// Who asks, and the powers RBAC granted for [`Change::needs`] (with [`Permission::ChangeRules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester<'a> {
    pub user: &'a str,
    pub grants: &'a Grants,
}

/// What a request does to the policy, as far as authority goes. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Not the policy ConfigMap: nothing to authorise.
    None,
    /// Deletes the policy.
    Delete,
    /// Creates it, or replaces a ConfigMap without the key: no old text to compare.
    Replace,
    /// Changes a rule (the texts' rules digests differ).
    Rules,
    /// One of the texts does not parse: the rules cannot be compared.
    Unreadable,
    /// Changes only these job types' priors (empty: changes nothing a power guards).
    JobTypes(Vec<String>),
}

impl Change {
    /// What the request changes, from its texts: the policy crate's [`text_change`] (a rule, else the
    /// job types whose entries differ; each text parsed once).
    ///
    /// [`text_change`]: gpu_admission_policy::text_change
    pub fn of(triage: &Triage<'_>) -> Self {
        match triage {
            Triage::NotOurs(_) => Change::None,
            Triage::Delete => Change::Delete,
            Triage::MissingKey | Triage::Check { old: None, .. } => Change::Replace,
            Triage::Check {
                text,
                old: Some(old),
                ..
            } => match gpu_admission_policy::text_change(old, text) {
                Some(TextChange::Rules) => Change::Rules,
                Some(TextChange::JobTypes(names)) => Change::JobTypes(names.into_iter().collect()),
                None => Change::Unreadable,
            },
        }
    }

    /// The powers that allow it: `update policies` allows every change; a job type's priors are also
    /// allowed by `update jobtypes/<name>`, each of them.
    pub fn needs(&self) -> Vec<Permission> {
        match self {
            Change::None => Vec::new(),
            Change::JobTypes(names) => names
                .iter()
                .map(|n| Permission::TuneJobType(n.clone()))
                .collect(),
            _ => vec![Permission::ChangeRules],
        }
    }
}

/// What a requester without the powers for `change` does: `Some(what)` when forbidden.
fn forbidden_change(change: &Change, grants: &Grants) -> Option<String> {
    if grants.allows(&Permission::ChangeRules) {
        return None;
    }
    match change {
        Change::None => None,
        Change::Delete => Some("deletes the policy".into()),
        Change::Replace => Some("creates or replaces the policy".into()),
        Change::Rules => Some("changes the rules (everything but a job type's priors: catalog, tiers, buckets, GPU resources, quotas, enforcement, version, workload classes, interference, learning, a job type's defaultMemoryGiB, family and owner)".into()),
        Change::Unreadable => Some("may change the rules, and they could not be compared (a text that does not parse)".into()),
        Change::JobTypes(names) => {
            let missing: Vec<String> = names
                .iter()
                .map(|n| Permission::TuneJobType(n.clone()))
                .filter(|p| !grants.allows(p))
                .map(|p| p.describe())
                .collect();
            (!missing.is_empty()).then(|| {
                let more = missing.len().saturating_sub(4);
                let shown = missing[..missing.len().min(4)].join(", ");
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                format!("changes job types' priors without the power: needs {shown}{more} (or update policies)")
            })
        }
    }
}

/// The verdict for the scorer's answer. Pure.
pub fn verdict(answer: &ValidatePolicyResponse, cm: &PolicyConfigMap) -> Verdict {
    if answer.valid {
        return Verdict::default();
    }
    let problems: Vec<String> = answer
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.reason))
        .collect();
    let file = answer
        .problems
        .first()
        .map(|p| p.file.as_str())
        .unwrap_or("the policy");
    Verdict {
        denied: Some(format!(
            "gpu-admission: invalid policy in {file} ({} problem{}): {}. The scorer would refuse it and keep the policy it has (ConfigMap {}/{}).",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems.join("; "),
            cm.namespace,
            cm.name
        )),
        warnings: Vec::new(),
    }
}

/// The `/validate-policy` decision: who may change what ([`Change`], against the requester's RBAC grants:
/// denied in every enforcement mode, since `Warn` and `Audit` relax what Pods may do, never who may change
/// the rules), then the policy's validation ([`decide`]): the policy crate's, exactly what a reload of the
/// scorer or the frontend applies, made here (no scorer is asked).
pub fn decide_change(
    triage: &Triage<'_>,
    change: &Change,
    requester: Requester<'_>,
    cm: &PolicyConfigMap,
) -> (ValidationOutcome, Verdict) {
    let Some(what) = forbidden_change(change, requester.grants) else {
        let checked = match triage {
            Triage::Check { file, text, .. } => Some(validation(text, file)),
            _ => None,
        };
        return decide(triage, checked.as_ref(), cm);
    };
    let message = format!(
        "gpu-admission: {} {what} in ConfigMap {}/{}: changing the rules needs {}{} in Kubernetes RBAC (the ClusterRole gpu-admission-policy-editor); a job type's priors (workloadClass, baseRuntimeSeconds, relativeStddev, throughputExponent) need update jobtypes/<name> (gpu-admission.io) for that job type",
        requester.user,
        cm.namespace,
        cm.name,
        Permission::ChangeRules.describe(),
        requester.grants.why_missing(&Permission::ChangeRules)
    );
    (
        ValidationOutcome::Denied,
        Verdict {
            denied: Some(message),
            warnings: Vec::new(),
        },
    )
}

/// The decision for a request whose policy text, if any, was validated: `checked` is that validation (a
/// text that was not validated is refused). Pure.
fn decide(
    triage: &Triage<'_>,
    checked: Option<&ValidatePolicyResponse>,
    cm: &PolicyConfigMap,
) -> (ValidationOutcome, Verdict) {
    let denied = |message: String| {
        (
            ValidationOutcome::Denied,
            Verdict {
                denied: Some(message),
                warnings: Vec::new(),
            },
        )
    };
    match (triage, checked) {
        (Triage::NotOurs(_), _) => (ValidationOutcome::Skipped, Verdict::default()),
        (Triage::Delete, _) => (ValidationOutcome::Allowed, Verdict::default()),
        (Triage::MissingKey, _) => denied(format!(
            "gpu-admission: ConfigMap {}/{} must hold the policy under key {} (the scorer reads that file)",
            cm.namespace, cm.name, cm.key
        )),
        (Triage::Check { .. }, Some(answer)) => (
            if answer.valid {
                ValidationOutcome::Allowed
            } else {
                ValidationOutcome::Denied
            },
            verdict(answer, cm),
        ),
        (Triage::Check { .. }, None) => {
            denied("gpu-admission: the policy was not validated".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_proto::scorer::v1::PolicyProblem;
    use serde_json::json;

    fn cm() -> PolicyConfigMap {
        PolicyConfigMap::parse("gpu-admission/gpu-admission-policy", "default-policy.yaml").unwrap()
    }

    fn request(
        op: &str,
        kind: &str,
        ns: &str,
        name: &str,
        data: serde_json::Value,
    ) -> AdmissionRequest<DynamicObject> {
        serde_json::from_value(json!({
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": ns, "name": name, "operation": op, "userInfo": {},
            "object": {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, "data": data},
            "oldObject": null
        }))
        .unwrap()
    }

    #[test]
    fn only_the_policy_configmap_is_checked() {
        let text = json!({"default-policy.yaml": "catalog: []"});
        let req = request(
            "UPDATE",
            "ConfigMap",
            "gpu-admission",
            "gpu-admission-policy",
            text.clone(),
        );
        assert_eq!(
            triage(&req, &cm()),
            Triage::Check {
                file: "ConfigMap gpu-admission/gpu-admission-policy key default-policy.yaml".into(),
                text: "catalog: []",
                old: None,
            }
        );
        let other = request(
            "UPDATE",
            "ConfigMap",
            "gpu-admission",
            "other",
            text.clone(),
        );
        assert_eq!(triage(&other, &cm()), Triage::NotOurs("another ConfigMap"));
        let other_ns = request(
            "CREATE",
            "ConfigMap",
            "default",
            "gpu-admission-policy",
            text.clone(),
        );
        assert_eq!(
            triage(&other_ns, &cm()),
            Triage::NotOurs("another ConfigMap")
        );
        let delete = request(
            "DELETE",
            "ConfigMap",
            "gpu-admission",
            "gpu-admission-policy",
            text,
        );
        assert_eq!(triage(&delete, &cm()), Triage::Delete);
        let no_key = request(
            "CREATE",
            "ConfigMap",
            "gpu-admission",
            "gpu-admission-policy",
            json!({"x": "y"}),
        );
        assert_eq!(triage(&no_key, &cm()), Triage::MissingKey);
        assert!(PolicyConfigMap::parse("no-slash", "k").is_err());
    }

    #[test]
    fn every_problem_is_in_the_denial() {
        let bad = ValidatePolicyResponse {
            valid: false,
            version: String::new(),
            problems: vec![
                PolicyProblem {
                    file: "ConfigMap x".into(),
                    field: "tiers[bronze].maxPriorityClass".into(),
                    reason: "unknown PriorityClass `gpu-gold`".into(),
                },
                PolicyProblem {
                    file: "ConfigMap x".into(),
                    field: "learning.tau".into(),
                    reason: "must be > 0".into(),
                },
            ],
            rules_digest: String::new(),
        };
        let v = verdict(&bad, &cm());
        let msg = v.denied.unwrap();
        assert!(msg.contains("ConfigMap x (2 problems)"), "{msg}");
        assert!(
            msg.contains("tiers[bronze].maxPriorityClass: unknown PriorityClass `gpu-gold`"),
            "{msg}"
        );
        assert!(msg.contains("learning.tau: must be > 0"), "{msg}");
        let ok = ValidatePolicyResponse {
            valid: true,
            ..Default::default()
        };
        assert_eq!(verdict(&ok, &cm()), Verdict::default());
    }

    #[test]
    fn only_those_rbac_allows_change_the_rules() {
        let base = gpu_admission_policy::DEFAULT_POLICY_YAML;
        let prior = base.replacen("baseRuntimeSeconds: 86400", "baseRuntimeSeconds: 90000", 1);
        let learning = base.replace("  seed: 0 ", "  seed: 7 ");
        let memory = base.replacen("defaultMemoryGiB: 40", "defaultMemoryGiB: 500", 1);
        let owner = base.replacen(
            "defaultMemoryGiB: 40\n",
            "defaultMemoryGiB: 40\n    owner: llm-prod\n",
            1,
        );
        let rules = base.replace("  mode: Warn", "  mode: Enforce");
        assert!(
            prior != base && learning != base && memory != base && owner != base && rules != base
        );
        fn update<'a>(new: &'a str, old: &'a str) -> Triage<'a> {
            Triage::Check {
                file: "f".into(),
                text: new,
                old: Some(old),
            }
        }
        let create = Triage::Check {
            file: "f".into(),
            text: base,
            old: None,
        };
        let nothing = Grants::none();
        let llama = Grants::new([Permission::TuneJobType("train-llama".into())]);
        let bert = Grants::new([Permission::TuneJobType("train-bert".into())]);
        let all = Grants::new([Permission::ChangeRules]);
        let run = |t: &Triage<'_>, grants: &Grants| {
            let change = Change::of(t);
            let who = Requester {
                user: "alice",
                grants,
            };
            decide_change(t, &change, who, &cm())
        };
        // A job type's priors: its `update jobtypes/<name>`, or `update policies`; nobody else.
        let prior_change = update(&prior, base);
        assert_eq!(
            Change::of(&prior_change),
            Change::JobTypes(vec!["train-llama".into()])
        );
        assert_eq!(run(&prior_change, &llama).0, ValidationOutcome::Allowed);
        assert_eq!(run(&prior_change, &all).0, ValidationOutcome::Allowed);
        let (o, v) = run(&prior_change, &bert);
        assert_eq!(o, ValidationOutcome::Denied);
        assert!(
            v.denied.unwrap().contains("update jobtypes/train-llama"),
            "names the power"
        );
        assert_eq!(run(&prior_change, &nothing).0, ValidationOutcome::Denied);
        // The text unchanged needs no power.
        assert_eq!(
            run(&update(base, base), &nothing).0,
            ValidationOutcome::Allowed
        );
        // Learning, a job type's defaultMemoryGiB (it denies) and owner (whose runs the scorer learns as
        // the job type's), the mode: rules, for `update policies` only.
        for text in [&learning, &memory, &owner, &rules] {
            let t = update(text, base);
            assert_eq!(Change::of(&t), Change::Rules);
            let (o, v) = run(&t, &llama);
            assert_eq!(o, ValidationOutcome::Denied);
            let denied = v.denied.unwrap();
            assert!(denied.contains("alice changes the rules"), "{denied}");
            assert!(
                denied.contains("update policies (gpu-admission.io)"),
                "{denied}"
            );
            assert_eq!(run(&t, &all).0, ValidationOutcome::Allowed);
        }
        // Creating, deleting, or rules that cannot be compared (the replaced text does not parse).
        assert_eq!(run(&create, &llama).0, ValidationOutcome::Denied);
        assert_eq!(run(&create, &all).0, ValidationOutcome::Allowed);
        assert_eq!(run(&Triage::Delete, &llama).0, ValidationOutcome::Denied);
        assert_eq!(run(&Triage::Delete, &all).0, ValidationOutcome::Allowed);
        assert_eq!(
            run(&update(base, "tiers: ["), &llama).0,
            ValidationOutcome::Denied
        );
        // An invalid text is refused whoever sends it: no path admits a text that was not validated.
        let (o, v) = run(&update("tiers: [", base), &all);
        assert_eq!(o, ValidationOutcome::Denied);
        assert!(v.denied.unwrap().contains("invalid policy"));
    }
}
