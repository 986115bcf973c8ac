//! AdmissionReview in (kube-core's request types), AdmissionReview out (serialised here): the envelope every
//! webhook shares. `decode` reads a Pod review (the mutating webhook's fast path), `decode_object` a review of
//! any kind (the validating webhooks); `encode` answers allowed with an optional patch, `encode_verdict`
//! answers allowed or denied.
//!
//! The response is serialised by hand because kube-core's `AdmissionResponse` writes `patch` as an array of
//! numbers (kube-rs issue 1781); the apiserver wants a base64 string. A `admission.k8s.io/v1beta1` review is
//! answered as v1beta1, anything else as v1.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde::{Deserialize, Serialize};

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
/// The apiserver truncates longer warnings; we keep ours short and printable.
const MAX_WARNING_CHARS: usize = 240;
const MAX_WARNINGS: usize = 16;

/// The AdmissionReview envelope around kube-core's `AdmissionRequest`. kube-core's own `AdmissionReview`
/// flattens its `TypeMeta`, which makes serde buffer the whole document before parsing it again; this
/// envelope reads the same fields in one pass (unknown fields such as `kind` are ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<T: kube::Resource> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    request: Option<AdmissionRequest<T>>,
}

/// A review we can answer (we know its uid).
#[derive(Debug)]
pub struct Incoming {
    /// The apiVersion to answer with: [`V1`] or [`V1BETA1`].
    pub api_version: &'static str,
    pub uid: String,
    pub content: Content,
}

/// What the review asks about.
#[derive(Debug)]
pub enum Content {
    /// A request whose object is (or is absent but declared as) a Pod.
    Pod(Box<AdmissionRequest<Pod>>),
    /// A request about another kind (or a sub-resource): allowed unchanged.
    OtherKind { kind: String, operation: String },
    /// A request we could read the uid of, but nothing else (bad envelope, or a Pod object that does not parse).
    Unreadable(String),
}

/// A body we cannot answer with an AdmissionReview (no uid): HTTP 400 with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

fn answer_version(v: &str) -> &'static str {
    if v == V1BETA1 { V1BETA1 } else { V1 }
}

fn is_pod_request<T: kube::Resource>(r: &AdmissionRequest<T>) -> bool {
    r.kind.group.is_empty()
        && r.kind.kind == "Pod"
        && r.sub_resource.as_deref().unwrap_or("").is_empty()
}

/// Decodes a request body. The common case (a Pod review) costs one typed parse; other shapes fall back to a
/// dynamic parse, then to plain JSON to find the uid.
pub fn decode(body: &[u8]) -> Result<Incoming, BadRequest> {
    let pod_err = match serde_json::from_slice::<Envelope<Pod>>(body) {
        Ok(review) => {
            let api_version = answer_version(&review.api_version);
            let request = review
                .request
                .ok_or_else(|| BadRequest("AdmissionReview has no request".into()))?;
            let uid = request.uid.clone();
            let content = if is_pod_request(&request) {
                Content::Pod(Box::new(request))
            } else {
                Content::OtherKind {
                    kind: gvk_text(&request.kind),
                    operation: format!("{:?}", request.operation),
                }
            };
            return Ok(Incoming {
                api_version,
                uid,
                content,
            });
        }
        Err(e) => e,
    };
    if let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        let api_version = answer_version(&review.types.api_version);
        let request = review
            .request
            .ok_or_else(|| BadRequest("AdmissionReview has no request".into()))?;
        let content = if is_pod_request(&request) {
            Content::Unreadable(format!("the Pod could not be read: {pod_err}"))
        } else {
            Content::OtherKind {
                kind: gvk_text(&request.kind),
                operation: format!("{:?}", request.operation),
            }
        };
        return Ok(Incoming {
            api_version,
            uid: request.uid,
            content,
        });
    }
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| BadRequest(format!("malformed JSON in AdmissionReview body: {e}")))?;
    let uid = value.pointer("/request/uid").and_then(|u| u.as_str());
    match uid {
        Some(uid) if !uid.is_empty() => Ok(Incoming {
            api_version: answer_version(
                value
                    .get("apiVersion")
                    .and_then(|v| v.as_str())
                    .unwrap_or(V1),
            ),
            uid: uid.to_string(),
            content: Content::Unreadable(format!(
                "the AdmissionReview could not be read: {pod_err}"
            )),
        }),
        _ => Err(BadRequest(format!(
            "not an AdmissionReview with request.uid: {pod_err}"
        ))),
    }
}

/// A review of any kind, for the validating webhooks.
#[derive(Debug)]
pub struct IncomingObject {
    /// The apiVersion to answer with: [`V1`] or [`V1BETA1`].
    pub api_version: &'static str,
    pub uid: String,
    /// The request, or why it could not be read (the review is still answered: allowed, with a warning).
    pub request: Result<Box<AdmissionRequest<DynamicObject>>, String>,
}

/// Decodes a request body of any kind.
pub fn decode_object(body: &[u8]) -> Result<IncomingObject, BadRequest> {
    let err = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(review) => {
            let request = review
                .request
                .ok_or_else(|| BadRequest("AdmissionReview has no request".into()))?;
            return Ok(IncomingObject {
                api_version: answer_version(&review.types.api_version),
                uid: request.uid.clone(),
                request: Ok(Box::new(request)),
            });
        }
        Err(e) => e,
    };
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| BadRequest(format!("malformed JSON in AdmissionReview body: {e}")))?;
    match value.pointer("/request/uid").and_then(|u| u.as_str()) {
        Some(uid) if !uid.is_empty() => Ok(IncomingObject {
            api_version: answer_version(
                value
                    .get("apiVersion")
                    .and_then(|v| v.as_str())
                    .unwrap_or(V1),
            ),
            uid: uid.to_string(),
            request: Err(format!("the AdmissionReview could not be read: {err}")),
        }),
        _ => Err(BadRequest(format!(
            "not an AdmissionReview with request.uid: {err}"
        ))),
    }
}

/// `group/version/Kind` (`version/Kind` for the core group), for logs and messages.
pub fn gvk_text(gvk: &kube::core::GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}/{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
    }
}

/// Our answer: always `allowed` (mutation is never the reason a Pod is rejected), with a patch or not.
#[derive(Debug, Default)]
pub struct Answer {
    pub patch: Vec<PatchOperation>,
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

/// A validating webhook's answer: denied with a message, or allowed (with warnings when any).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// `Some(message)` denies the request; the apiserver shows the message to the client.
    pub denied: Option<String>,
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
struct StatusOut<'a> {
    code: u16,
    reason: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// A warning the apiserver will relay as is: one line, printable, bounded length.
fn clean_warning(w: &str) -> String {
    let mut out: String = w
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.chars().count() > MAX_WARNING_CHARS {
        out = out.chars().take(MAX_WARNING_CHARS - 1).collect::<String>() + "…";
    }
    out
}

/// Serialises the AdmissionReview response: uid echoed, `patchType: JSONPatch` + base64 `patch` when there is
/// a patch, warnings when any.
pub fn encode(api_version: &str, uid: &str, answer: &Answer) -> Vec<u8> {
    let patch = (!answer.patch.is_empty()).then(|| {
        let json = serde_json::to_vec(&answer.patch).expect("a JSON patch always serialises");
        BASE64.encode(json)
    });
    encode_response(
        api_version,
        ResponseOut {
            uid,
            allowed: true,
            status: None,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: clean_warnings(&answer.warnings),
        },
    )
}

/// Serialises a validating webhook's AdmissionReview response: allowed, or denied with `status.code` 403 and
/// the message (never a patch).
pub fn encode_verdict(api_version: &str, uid: &str, verdict: &Verdict) -> Vec<u8> {
    encode_response(
        api_version,
        ResponseOut {
            uid,
            allowed: verdict.denied.is_none(),
            status: verdict.denied.as_deref().map(|message| StatusOut {
                code: 403,
                reason: "Forbidden",
                message,
            }),
            patch_type: None,
            patch: None,
            warnings: clean_warnings(&verdict.warnings),
        },
    )
}

fn clean_warnings(warnings: &[String]) -> Vec<String> {
    warnings
        .iter()
        .take(MAX_WARNINGS)
        .map(|w| clean_warning(w))
        .collect()
}

fn encode_response(api_version: &str, response: ResponseOut<'_>) -> Vec<u8> {
    let review = ReviewOut {
        api_version,
        kind: "AdmissionReview",
        response,
    };
    serde_json::to_vec(&review).expect("an AdmissionReview response always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn review(api_version: &str, kind: Value, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": api_version, "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": kind, "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ml", "operation": "CREATE", "userInfo": {"username": "alice"},
                "object": object, "oldObject": null, "dryRun": false
            }
        }))
        .unwrap()
    }

    fn pod_kind() -> Value {
        json!({"group": "", "version": "v1", "kind": "Pod"})
    }

    #[test]
    fn pod_review_decodes() {
        let body = review(
            V1,
            pod_kind(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}),
        );
        let inc = decode(&body).unwrap();
        assert_eq!(
            (inc.api_version, inc.uid.as_str()),
            (V1, "705ab4f5-6393-11e8-b7cc-42010a800002")
        );
        let Content::Pod(req) = inc.content else {
            panic!("{:?}", inc.content)
        };
        assert_eq!(req.object.unwrap().metadata.name.as_deref(), Some("p"));
    }

    #[test]
    fn v1beta1_is_answered_in_kind() {
        let body = review(V1BETA1, pod_kind(), json!({"metadata": {}}));
        assert_eq!(decode(&body).unwrap().api_version, V1BETA1);
        let out: Value = serde_json::from_slice(&encode(V1BETA1, "u", &Answer::default())).unwrap();
        assert_eq!(out["apiVersion"], V1BETA1);
    }

    #[test]
    fn other_kinds_are_recognised() {
        let body = review(
            V1,
            json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}),
        );
        let inc = decode(&body).unwrap();
        assert!(
            matches!(inc.content, Content::OtherKind { ref kind, .. } if kind == "apps/v1/Deployment"),
            "{:?}",
            inc.content
        );
    }

    #[test]
    fn unreadable_pod_keeps_the_uid() {
        // An annotation value that is a number: not a valid Pod, but the review must still be answered.
        let body = review(
            V1,
            pod_kind(),
            json!({"metadata": {"annotations": {"sleep": 4}}}),
        );
        let inc = decode(&body).unwrap();
        assert_eq!(inc.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert!(
            matches!(inc.content, Content::Unreadable(_)),
            "{:?}",
            inc.content
        );

        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"operationValue"}}"#;
        let inc = decode(body).unwrap();
        assert!(matches!(inc.content, Content::Unreadable(_)));
    }

    #[test]
    fn any_kind_decodes_and_a_verdict_denies_with_a_message() {
        let body = review(
            V1,
            json!({"group": "batch", "version": "v1", "kind": "Job"}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {}}}),
        );
        let inc = decode_object(&body).unwrap();
        let req = inc.request.unwrap();
        assert_eq!(gvk_text(&req.kind), "batch/v1/Job");
        assert_eq!(req.object.unwrap().data["spec"]["template"], json!({}));
        assert!(decode_object(b"{").is_err());
        let bad = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":7}}"#;
        assert!(decode_object(bad).unwrap().request.is_err());

        let denied = Verdict {
            denied: Some("tier bronze allows L4-24GB".into()),
            warnings: vec![],
        };
        let out: Value = serde_json::from_slice(&encode_verdict(V1, "u", &denied)).unwrap();
        let r = &out["response"];
        assert_eq!(
            (r["allowed"].as_bool(), r["status"]["code"].as_u64()),
            (Some(false), Some(403))
        );
        assert_eq!(r["status"]["message"], "tier bronze allows L4-24GB");
        assert!(r.get("patch").is_none());
        let warned = Verdict {
            denied: None,
            warnings: vec!["w".into()],
        };
        let out: Value = serde_json::from_slice(&encode_verdict(V1, "u", &warned)).unwrap();
        assert_eq!(out["response"]["allowed"], true);
        assert!(out["response"].get("status").is_none());
        assert_eq!(out["response"]["warnings"][0], "w");
    }

    #[test]
    fn garbage_is_a_bad_request() {
        assert!(
            decode(b"{not json")
                .unwrap_err()
                .0
                .contains("malformed JSON")
        );
        assert!(decode(b"[]").is_err());
        assert!(
            decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).is_err()
        );
        assert!(decode(b"").is_err());
    }

    #[test]
    fn response_carries_base64_patch_and_echoes_uid() {
        let patch: Vec<PatchOperation> = serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]),
        )
        .unwrap();
        let answer = Answer {
            patch,
            warnings: vec!["line one\nline two".into(), "x".repeat(1000)],
        };
        let out: Value = serde_json::from_slice(&encode(V1, "the-uid", &answer)).unwrap();
        assert_eq!(out["kind"], "AdmissionReview");
        let r = &out["response"];
        assert_eq!(
            (
                r["uid"].as_str(),
                r["allowed"].as_bool(),
                r["patchType"].as_str()
            ),
            (Some("the-uid"), Some(true), Some("JSONPatch"))
        );
        let decoded = BASE64.decode(r["patch"].as_str().unwrap()).unwrap();
        let ops: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(ops[0]["path"], "/metadata/labels");
        assert_eq!(r["warnings"][0], "line one line two");
        assert!(r["warnings"][1].as_str().unwrap().chars().count() <= MAX_WARNING_CHARS);

        let out: Value = serde_json::from_slice(&encode(V1, "u", &Answer::default())).unwrap();
        assert!(
            out["response"].get("patch").is_none() && out["response"].get("patchType").is_none()
        );
        assert!(out["response"].get("warnings").is_none());
    }
}
