//! `/validate-policy`: a CREATE/UPDATE of the scorer's policy ConfigMap is checked by the scorer itself
//! (`ValidatePolicy`: the scorer owns the schema; nothing of it is re-implemented here). Denied with every
//! problem (file, field, reason); allowed with a warning when the scorer cannot be asked (the scorer still
//! refuses a bad file when it reloads, and keeps the policy it has).

use gpu_admission_proto::scorer::v1::ValidatePolicyResponse;
use kube_core::DynamicObject;
use kube_core::admission::{AdmissionRequest, Operation};

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
    /// The policy text to check, and how to name it in problems.
    Check { file: String, text: &'a str },
}

/// Picks the policy text out of a request. Pure.
pub fn triage<'a>(req: &'a AdmissionRequest<DynamicObject>, cm: &PolicyConfigMap) -> Triage<'a> {
    if !(req.kind.group.is_empty() && req.kind.kind == "ConfigMap") {
        return Triage::NotOurs("not a ConfigMap");
    }
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Triage::NotOurs("not a CREATE or UPDATE");
    }
    let Some(object) = &req.object else {
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
    match object
        .data
        .get("data")
        .and_then(|d| d.get(&cm.key))
        .and_then(|t| t.as_str())
    {
        Some(text) => Triage::Check {
            file: format!("ConfigMap {}/{} key {}", cm.namespace, cm.name, cm.key),
            text,
        },
        None => Triage::MissingKey,
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

/// How a policy check ended (the metric's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Skipped,
    Allowed,
    Denied,
    /// The scorer could not be asked: allowed, with a warning.
    ScorerUnavailable,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Skipped => "skipped",
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ScorerUnavailable => "scorer_unavailable",
        }
    }
}

/// The decision for a request whose policy text, if any, the scorer was asked about: `checked` is the
/// scorer's answer, or why it could not be asked (then the ConfigMap is allowed with a warning: the scorer
/// still refuses a bad file when it reloads, and keeps the policy it has). Pure.
pub fn decide(
    triage: &Triage<'_>,
    checked: Option<Result<&ValidatePolicyResponse, &str>>,
    cm: &PolicyConfigMap,
) -> (Outcome, Verdict) {
    match (triage, checked) {
        (Triage::NotOurs(_), _) => (Outcome::Skipped, Verdict::default()),
        (Triage::MissingKey, _) => (
            Outcome::Denied,
            Verdict {
                denied: Some(format!(
                    "gpu-admission: ConfigMap {}/{} must hold the policy under key {} (the scorer reads that file)",
                    cm.namespace, cm.name, cm.key
                )),
                warnings: Vec::new(),
            },
        ),
        (Triage::Check { .. }, Some(Ok(answer))) => (
            if answer.valid {
                Outcome::Allowed
            } else {
                Outcome::Denied
            },
            verdict(answer, cm),
        ),
        (Triage::Check { .. }, Some(Err(why))) => (
            Outcome::ScorerUnavailable,
            Verdict {
                denied: None,
                warnings: vec![format!(
                    "gpu-admission: the scorer could not check this policy ({why}); it will refuse it on reload if it is invalid"
                )],
            },
        ),
        (Triage::Check { .. }, None) => (
            Outcome::ScorerUnavailable,
            Verdict {
                denied: None,
                warnings: vec![
                    "gpu-admission: the policy was not checked; the scorer will refuse it on reload if it is invalid"
                        .into(),
                ],
            },
        ),
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
                text: "catalog: []"
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
        assert_eq!(
            triage(&delete, &cm()),
            Triage::NotOurs("not a CREATE or UPDATE")
        );
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
}
