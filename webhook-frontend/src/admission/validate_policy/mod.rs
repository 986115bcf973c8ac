//! `POST /validate-policy`: a CREATE/UPDATE of the scorer's policy ConfigMap is checked by the scorer itself
//! (`ValidatePolicy`: the scorer owns the schema; nothing of it is re-implemented here). Denied with every
//! problem (file, field, reason); allowed with a warning when the scorer cannot be asked (the scorer still
//! refuses a bad file when it reloads, and keeps the policy it has).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpu_admission_proto::scorer::v1::ValidatePolicyResponse;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};

use crate::admission::review::{self, Verdict};
use crate::state::{AppState, PolicyConfigMap};

/// Time the scorer gets to check a policy (well inside the apiserver's webhook timeout).
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(3);

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

pub async fn validate_policy(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let start = Instant::now();
    let incoming = match review::decode_object(&body) {
        Ok(i) => i,
        Err(bad) => {
            tracing::info!(error = %bad, "validate-policy: rejecting a body that is not an AdmissionReview");
            state
                .metrics
                .record_validation("validate-policy", "bad_request", start);
            return (StatusCode::BAD_REQUEST, format!("bad request: {bad}\n")).into_response();
        }
    };
    let cm = &state.policy_configmap;
    let (outcome, verdict) = match &incoming.request {
        Err(why) => (
            "unreadable",
            Verdict {
                denied: None,
                warnings: vec![format!(
                    "gpu-admission: {why}; the policy was not validated"
                )],
            },
        ),
        Ok(req) => match triage(req, cm) {
            Triage::NotOurs(_) => ("skipped", Verdict::default()),
            Triage::MissingKey => (
                "denied",
                Verdict {
                    denied: Some(format!(
                        "gpu-admission: ConfigMap {}/{} must hold the policy under key {} (the scorer reads that file)",
                        cm.namespace, cm.name, cm.key
                    )),
                    warnings: Vec::new(),
                },
            ),
            Triage::Check { file, text } => {
                match state
                    .scorer
                    .validate_policy(&file, text, VALIDATE_TIMEOUT)
                    .await
                {
                    Ok(answer) => {
                        let v = verdict(&answer, cm);
                        tracing::info!(uid = incoming.uid, user = ?req.user_info.username, valid = answer.valid, problems = answer.problems.len(), "policy ConfigMap checked");
                        if answer.valid {
                            // The scorer reloads the file once the kubelet updates it; fetch soon after.
                            state.policy.request_refresh();
                        }
                        (if answer.valid { "allowed" } else { "denied" }, v)
                    }
                    Err(err) => {
                        tracing::warn!(uid = incoming.uid, error = %format!("{err:#}"), "scorer unreachable; policy ConfigMap allowed unchecked");
                        (
                            "scorer_unavailable",
                            Verdict {
                                denied: None,
                                warnings: vec![format!(
                                    "gpu-admission: the scorer could not check this policy ({err:#}); it will refuse it on reload if it is invalid"
                                )],
                            },
                        )
                    }
                }
            }
        },
    };
    state
        .metrics
        .record_validation("validate-policy", outcome, start);
    let body = review::encode_verdict(incoming.api_version, &incoming.uid, &verdict);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
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
