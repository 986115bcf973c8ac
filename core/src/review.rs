//! AdmissionReview in (kube-core's request types), AdmissionReview out (serialised here): the envelope every
//! webhook shares. `decode` reads a Pod review (the mutating webhook's fast path), `decode_object` a review of
//! any kind (the validating webhooks); `encode` answers allowed with an optional patch, `encode_verdict`
//! answers allowed or denied.
//!
//! Decoding is lenient where the webhooks do not look and strict where they do: `request.options` (which no
//! webhook reads) is skipped unparsed, so a deeply nested value there never costs the answer, while
//! everything that is read goes through serde_json's recursion limit. The uid
//! is echoed to the apiserver, so a review whose uid is not a sane identifier is a 400 (see [`check_uid`]).
//!
//! The response is serialised by hand because kube-core's `AdmissionResponse` writes `patch` as an array of
//! numbers (a known kube-rs limitation); the apiserver wants a base64 string. A `admission.k8s.io/v1beta1` review is
//! answered as v1beta1, anything else as v1.

use base64_simd::STANDARD as BASE64;
use k8s_openapi::api::core::v1::Pod;
use kube_core::admission::{AdmissionRequest, Operation};
use kube_core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use gpu_admission_policy::EnforcementMode;

mod deep;
mod patch;
mod prune;

use prune::ReviewObject;

pub use patch::Patch;
pub(crate) use patch::{JsonOut, WriteJson, to_json};

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
/// The apiserver truncates longer warnings; we keep ours short and printable.
pub(crate) const MAX_WARNING_CHARS: usize = 240;
const MAX_WARNINGS: usize = 16;
/// Longest `request.uid` answered. The apiserver sends a UUID (36 characters); anything from 1 to 128
/// printable ASCII characters (no space) is accepted, so that other well-behaved callers still work.
pub const MAX_UID_BYTES: usize = 128;

/// The AdmissionReview envelope. kube-core's own `AdmissionReview` flattens its `TypeMeta`, which makes serde
/// buffer the whole document before parsing it again; this envelope reads the same fields in one pass
/// (unknown fields such as `kind` are skipped without being parsed).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<R> {
    #[serde(default)]
    api_version: String,
    request: Option<R>,
}

/// kube-core's `AdmissionRequest`, field for field, except `options`: the create/update/delete options, which
/// no webhook reads, are skipped unparsed (without a recursion limit, and without building a JSON value per
/// admission); the request's `options` is `None`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "T: ReviewObject<'de>"))]
struct RequestIn<T> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: k8s_openapi::api::authentication::v1::UserInfo,
    #[serde(default, deserialize_with = "prune::read_boxed")]
    object: Option<Box<T>>,
    #[serde(default, deserialize_with = "prune::read_boxed")]
    old_object: Option<Box<T>>,
    #[serde(default)]
    dry_run: bool,
}

impl<T: kube_core::Resource> RequestIn<T> {
    /// Boxed at once: the request (two objects) is not copied again on its way to the webhook.
    fn into_request(self) -> Box<AdmissionRequest<T>> {
        Box::new(AdmissionRequest {
            types: TypeMeta::default(),
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            request_kind: self.request_kind,
            request_resource: self.request_resource,
            request_sub_resource: self.request_sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            object: self.object.map(|o| *o),
            old_object: self.old_object.map(|o| *o),
            dry_run: self.dry_run,
            options: None,
        })
    }
}

impl RequestIn<Box<RawValue>> {
    /// The objects read as `T` with `metadata.managedFields` skipped (see [`deep`]).
    fn read_objects<T: DeserializeOwned>(self) -> serde_json::Result<RequestIn<T>> {
        let read = |o: Option<Box<Box<RawValue>>>| {
            o.as_deref()
                .map(|raw| deep::object::<T>(raw).map(Box::new))
                .transpose()
        };
        Ok(RequestIn {
            object: read(self.object)?,
            old_object: read(self.old_object)?,
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            request_kind: self.request_kind,
            request_resource: self.request_resource,
            request_sub_resource: self.request_sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            dry_run: self.dry_run,
        })
    }
}

/// A review as read: the apiVersion to answer with, and its request (if any).
type Review<T> = (&'static str, Option<Box<AdmissionRequest<T>>>);

/// Reads a review in one typed pass; a review too deep for that is read again with `managedFields` skipped.
fn parse_review<T: kube_core::Resource + DeserializeOwned + for<'de> ReviewObject<'de>>(
    body: &[u8],
) -> Result<Review<T>, serde_json::Error> {
    let review: Envelope<RequestIn<T>> = match from_body(body) {
        Ok(review) => review,
        Err(e) if deep::is_too_deep(&e) => {
            let raw: Envelope<RequestIn<Box<RawValue>>> = from_body(body)?;
            Envelope {
                api_version: raw.api_version,
                request: raw.request.map(RequestIn::read_objects).transpose()?,
            }
        }
        Err(e) => return Err(e),
    };
    Ok((
        answer_version(&review.api_version),
        review.request.map(RequestIn::into_request),
    ))
}

/// Parses a body: its UTF-8 checked once, as a whole (parsing bytes checks every string on its own, which cost
/// more than a tenth of reading a Pod review); a body that is not UTF-8 is parsed as bytes, for the error that
/// says where.
fn from_body<'de, T: Deserialize<'de>>(body: &'de [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

/// A string, or `None` for any other JSON value (skipped without a recursion limit).
struct Lenient(Option<String>);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_unit<E>(self) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The last resort: only `apiVersion` and `request.uid`, everything else skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UidOnly {
    #[serde(default)]
    api_version: Option<Lenient>,
    #[serde(default)]
    request: Option<UidRequest>,
}

#[derive(Deserialize)]
struct UidRequest {
    #[serde(default)]
    uid: Option<Lenient>,
}

/// The answer version and the (checked) uid of a review nothing else of which could be read.
fn uid_only(body: &[u8], why: &serde_json::Error) -> Result<(&'static str, String), BadRequest> {
    let review: UidOnly = serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            BadRequest(format!("malformed JSON in AdmissionReview body: {e}"))
        } else {
            BadRequest(format!("not an AdmissionReview: {e}"))
        }
    })?;
    let uid = review
        .request
        .and_then(|r| r.uid)
        .and_then(|u| u.0)
        .ok_or_else(|| BadRequest(format!("not an AdmissionReview with request.uid: {why}")))?;
    check_uid(&uid)?;
    let api_version = review.api_version.and_then(|v| v.0);
    Ok((answer_version(api_version.as_deref().unwrap_or(V1)), uid))
}

/// A uid we can echo: 1 to [`MAX_UID_BYTES`] printable ASCII characters, no space. Anything else is not from
/// an apiserver, and echoing it would only carry the caller's bytes into our answer and logs.
pub fn check_uid(uid: &str) -> Result<(), BadRequest> {
    if uid.is_empty() {
        return Err(BadRequest("request.uid is empty".into()));
    }
    if uid.len() > MAX_UID_BYTES {
        return Err(BadRequest(format!(
            "request.uid is {} bytes long; at most {MAX_UID_BYTES} (the apiserver sends a UUID)",
            uid.len()
        )));
    }
    if !uid.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BadRequest(
            "request.uid holds characters other than printable ASCII (the apiserver sends a UUID)"
                .into(),
        ));
    }
    Ok(())
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

fn is_pod_request<T: kube_core::Resource>(r: &AdmissionRequest<T>) -> bool {
    r.kind.group.is_empty()
        && r.kind.kind == "Pod"
        && r.sub_resource.as_deref().unwrap_or("").is_empty()
}

/// Decodes a request body. The common case (a Pod review) costs one typed parse; other shapes fall back to a
/// dynamic parse, then to reading the uid alone.
pub fn decode(body: &[u8]) -> Result<Incoming, BadRequest> {
    let pod_err = match parse_review::<Pod>(body) {
        Ok((api_version, request)) => {
            let request = request.ok_or_else(no_request)?;
            check_uid(&request.uid)?;
            let uid = request.uid.clone();
            let content = if is_pod_request(&request) {
                Content::Pod(request)
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
    if let Ok((api_version, request)) = parse_review::<DynamicObject>(body) {
        let request = request.ok_or_else(no_request)?;
        check_uid(&request.uid)?;
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
    let (api_version, uid) = uid_only(body, &pod_err)?;
    Ok(Incoming {
        api_version,
        uid,
        content: Content::Unreadable(format!("the AdmissionReview could not be read: {pod_err}")),
    })
}

fn no_request() -> BadRequest {
    BadRequest("AdmissionReview has no request".into())
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
    let err = match parse_review::<DynamicObject>(body) {
        Ok((api_version, request)) => {
            let request = request.ok_or_else(no_request)?;
            check_uid(&request.uid)?;
            return Ok(IncomingObject {
                api_version,
                uid: request.uid.clone(),
                request: Ok(request),
            });
        }
        Err(e) => e,
    };
    let (api_version, uid) = uid_only(body, &err)?;
    Ok(IncomingObject {
        api_version,
        uid,
        request: Err(format!("the AdmissionReview could not be read: {err}")),
    })
}

/// A validating webhook's answer to a review it could not read (a well-formed review always reads: this is
/// a hostile or broken one): denied under `Enforce`, with why; otherwise allowed with a warning that says
/// what was not checked (`what`).
pub fn unreadable_verdict(why: &str, what: &str, mode: EnforcementMode) -> Verdict {
    if mode == EnforcementMode::Enforce {
        Verdict {
            denied: Some(format!(
                "gpu-admission: {why}; it cannot be checked, so it is denied (policy mode Enforce)"
            )),
            warnings: Vec::new(),
        }
    } else {
        Verdict {
            denied: None,
            warnings: vec![format!("gpu-admission: {why}; {what}")],
        }
    }
}

impl Verdict {
    /// The one answer to a violation under an enforcement mode: `Enforce` denies with `message`, `Warn`
    /// admits with it as a warning, `Audit` admits silently (the caller counts and logs it).
    pub fn for_mode(mode: EnforcementMode, message: String) -> Verdict {
        let mut verdict = Verdict::default();
        verdict.answer(mode, message);
        verdict
    }

    /// Adds the answer to a violation under `mode` to this verdict (see [`Verdict::for_mode`]).
    pub fn answer(&mut self, mode: EnforcementMode, message: String) {
        match mode {
            EnforcementMode::Enforce => self.denied = Some(message),
            EnforcementMode::Warn => self.warnings.push(message),
            EnforcementMode::Audit => {}
        }
    }
}

/// `group/version/Kind` (`version/Kind` for the core group), for logs and messages.
pub fn gvk_text(gvk: &kube_core::GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{}/{}", gvk.version, gvk.kind)
    } else {
        format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind)
    }
}

/// Our answer: always `allowed` (mutation is never the reason a Pod is rejected), with a patch or not.
#[derive(Debug, Default)]
pub struct Answer {
    pub patch: Patch,
    pub warnings: Vec<String>,
}

/// A validating webhook's answer: denied with a message, or allowed (with warnings when any).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// `Some(message)` denies the request; the apiserver shows the message to the client.
    pub denied: Option<String>,
    pub warnings: Vec<String>,
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
    let patch = (!answer.patch.is_empty()).then(|| answer.patch.as_bytes());
    encode_response(
        api_version,
        Response {
            uid,
            allowed: true,
            denied: None,
            patch,
            warnings: &answer.warnings,
        },
    )
}

/// Serialises a validating webhook's AdmissionReview response: allowed, or denied with `status.code` 403 and
/// the message (never a patch).
pub fn encode_verdict(api_version: &str, uid: &str, verdict: &Verdict) -> Vec<u8> {
    encode_response(
        api_version,
        Response {
            uid,
            allowed: verdict.denied.is_none(),
            denied: verdict.denied.as_deref(),
            patch: None,
            warnings: &verdict.warnings,
        },
    )
}

/// What an AdmissionReview response says.
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    /// The denial's message (`status` 403 Forbidden).
    denied: Option<&'a str>,
    /// The JSON Patch, serialised (sent base64-encoded).
    patch: Option<&'a [u8]>,
    warnings: &'a [String],
}

/// Writes the response straight into one buffer, in the field order serde gave it before (`apiVersion`,
/// `kind`, `response`: `uid`, `allowed`, `status`, `patchType`, `patch`, `warnings`): the patch is
/// base64-encoded in place (its alphabet needs no JSON escaping) instead of being built as a string and
/// escaped again.
fn encode_response(api_version: &str, r: Response<'_>) -> Vec<u8> {
    let patch_len = r.patch.map_or(0, |p| BASE64.encoded_length(p.len()));
    let mut out = Vec::with_capacity(160 + r.uid.len() + patch_len);
    // Strings are written as the patch writes them (one escaping rule).
    out.extend_from_slice(b"{\"apiVersion\":");
    patch::write_str(&mut out, api_version);
    out.extend_from_slice(b",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    patch::write_str(&mut out, r.uid);
    out.extend_from_slice(if r.allowed {
        b",\"allowed\":true"
    } else {
        b",\"allowed\":false"
    });
    if let Some(message) = r.denied {
        out.extend_from_slice(b",\"status\":{\"code\":403,\"reason\":\"Forbidden\",\"message\":");
        patch::write_str(&mut out, message);
        out.push(b'}');
    }
    if let Some(patch) = r.patch {
        out.extend_from_slice(b",\"patchType\":\"JSONPatch\",\"patch\":\"");
        // Appended into the spare capacity (nothing zeroed first).
        BASE64.encode_append(patch, &mut out);
        out.push(b'"');
    }
    if !r.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":[");
        for (i, w) in r.warnings.iter().take(MAX_WARNINGS).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            patch::write_str(&mut out, &clean_warning(w));
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
    out
}

/// Parses the apiserver's `?timeout=` value, a Go duration such as `10s`, `500ms`, `1m30s`, `1.5s`.
pub fn parse_go_duration(s: &str) -> Option<std::time::Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    (total.is_finite() && total < 1e9).then(|| std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(
            parse_go_duration("10s"),
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(
            parse_go_duration("500ms"),
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(
            parse_go_duration("1m30s"),
            Some(std::time::Duration::from_secs(90))
        );
        assert_eq!(
            parse_go_duration("1.5s"),
            Some(std::time::Duration::from_millis(1500))
        );
        for bad in ["", "10", "s", "10x", "-1s", "1e400s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
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

    /// `body` with `"__HOLE__"` replaced by `depth` nested arrays (too deep for a `Value`).
    fn with_deep_hole(body: &[u8], depth: usize) -> Vec<u8> {
        let text = String::from_utf8(body.to_vec()).unwrap();
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        text.replace("\"__HOLE__\"", &deep).into_bytes()
    }

    #[test]
    fn malformed_uids_are_bad_requests_with_a_reason() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        for (uid, why) in [
            (json!(""), "request.uid is empty"),
            (json!("u".repeat(MAX_UID_BYTES + 1)), "at most 128"),
            (json!("u".repeat(300)), "300 bytes long"),
            (json!("a b"), "printable ASCII"),
            (json!("line\nbreak"), "printable ASCII"),
            (json!("ü"), "printable ASCII"),
            (json!(7), "request.uid"),
        ] {
            let mut r: Value =
                serde_json::from_slice(&review(V1, pod_kind(), pod.clone())).unwrap();
            r["request"]["uid"] = uid.clone();
            let body = serde_json::to_vec(&r).unwrap();
            let e = decode(&body).unwrap_err().0;
            assert!(e.contains(why), "{uid}: {e}");
            let e = decode_object(&body).unwrap_err().0;
            assert!(e.contains(why), "{uid}: {e}");
            // Also when nothing else of the review can be read.
            r["request"]["operation"] = json!(7);
            let body = serde_json::to_vec(&r).unwrap();
            assert!(decode(&body).unwrap_err().0.contains(why), "{uid}");
            assert!(decode_object(&body).unwrap_err().0.contains(why), "{uid}");
        }
        // The longest accepted uid, and a real apiserver's.
        for uid in [
            "u".repeat(MAX_UID_BYTES),
            "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
        ] {
            let mut r: Value =
                serde_json::from_slice(&review(V1, pod_kind(), pod.clone())).unwrap();
            r["request"]["uid"] = json!(uid);
            assert_eq!(decode(&serde_json::to_vec(&r).unwrap()).unwrap().uid, uid);
        }
    }

    #[test]
    fn deep_nesting_where_no_webhook_looks_is_not_a_bad_request() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "x-unknown": "__HOLE__"});
        let mut r: Value = serde_json::from_slice(&review(V1, pod_kind(), pod)).unwrap();
        r["request"]["options"] =
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "deep": "__HOLE__"});
        r["unused"] = json!("__HOLE__");
        let body = with_deep_hole(&serde_json::to_vec(&r).unwrap(), 10_000);
        assert!(
            serde_json::from_slice::<Value>(&body).is_err(),
            "too deep for a Value"
        );
        let inc = decode(&body).unwrap();
        assert_eq!(inc.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        let Content::Pod(req) = inc.content else {
            panic!("{:?}", inc.content)
        };
        // The options (read by no webhook) are skipped; the Pod is read.
        assert!(req.options.is_none());
        assert_eq!(req.object.unwrap().metadata.name.as_deref(), Some("p"));

        // validate-*: a deep object of another kind is unreadable (answered with a warning), not a 400.
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"deep": "__HOLE__"}});
        let body = with_deep_hole(
            &review(
                V1,
                json!({"group": "batch", "version": "v1", "kind": "Job"}),
                job,
            ),
            10_000,
        );
        let inc = decode_object(&body).unwrap();
        assert_eq!(inc.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert!(inc.request.unwrap_err().contains("recursion limit"));
        // Within the recursion limit, the object is read whole.
        let body = with_deep_hole(
            &review(
                V1,
                json!({"group": "batch", "version": "v1", "kind": "Job"}),
                json!({"metadata": {"name": "j"}, "spec": {"deep": "__HOLE__"}}),
            ),
            100,
        );
        assert!(decode_object(&body).unwrap().request.is_ok());
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
        let mut patch = Patch::default();
        patch.add(
            jsonptr::Pointer::from_static("/metadata/labels"),
            &json!({"a": "b"}),
        );
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
        let decoded = BASE64.decode_to_vec(r["patch"].as_str().unwrap()).unwrap();
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
