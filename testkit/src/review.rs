//! AdmissionReview (admission.k8s.io/v1 and v1beta1) as the kube-apiserver sends it, and the checks the
//! apiserver applies to the answer.
//!
//! - [`pod_review`] / [`object_review`] wrap an object into a full review with a fresh uid;
//!   [`wrap_request`] wraps a bare `AdmissionRequest` (the kubewarden fixtures);
//! - [`check_response`] enforces the apiserver's rules: same apiVersion and kind, uid echoed, `allowed` a
//!   bool, `patchType == "JSONPatch"` exactly when a `patch` is present, `patch` a base64 STRING of a JSON
//!   array of RFC 6902 operations;
//! - [`AdmissionOutcome::apply`] applies the patch with `json_patch::patch`; [`AdmissionOutcome::apply_pod`]
//!   also parses the result as a `k8s_openapi` Pod.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail, ensure};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// The wire spelling (`CREATE`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    fn options_kind(self) -> Option<&'static str> {
        match self {
            Operation::Create => Some("CreateOptions"),
            Operation::Update => Some("UpdateOptions"),
            Operation::Delete => Some("DeleteOptions"),
            Operation::Connect => None,
        }
    }
}

/// A fresh request uid shaped like the apiserver's (a UUID).
pub fn new_uid() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let pid = std::process::id() as u64;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (nanos >> 32) as u32,
        (nanos >> 16) as u16,
        pid & 0xfff,
        n & 0xfff,
        (n << 20 ^ nanos) & 0xffff_ffff_ffff
    )
}

/// A v1 AdmissionReview for a Pod in `namespace` (the object's `metadata.namespace` is set to it).
/// UPDATE and DELETE carry the same Pod as `oldObject` (DELETE has `object: null`).
pub fn pod_review(pod: &Value, namespace: &str, op: Operation) -> Value {
    object_review(
        pod,
        namespace,
        op,
        json!({"group": "", "version": "v1", "kind": "Pod"}),
        json!({"group": "", "version": "v1", "resource": "pods"}),
    )
}

/// A v1 AdmissionReview for any object, its kind and resource taken from the object's `apiVersion` and
/// `kind` (a Pod when absent; the resource is the lowercased plural, as for every built-in workload kind).
pub fn review_of(obj: &Value, namespace: &str, op: Operation) -> Value {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("Pod");
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    object_review(
        obj,
        namespace,
        op,
        json!({"group": group, "version": version, "kind": kind}),
        json!({"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())}),
    )
}

/// `review` with another uid and envelope version (`admission.k8s.io/v1beta1` for old apiservers).
pub fn with_uid_and_version(mut review: Value, uid: &str, api_version: &str) -> Value {
    review["request"]["uid"] = json!(uid);
    review["apiVersion"] = json!(api_version);
    review
}

/// A v1 AdmissionReview for any namespaced object.
pub fn object_review(
    obj: &Value,
    namespace: &str,
    op: Operation,
    kind: Value,
    resource: Value,
) -> Value {
    let mut obj = obj.clone();
    if let Some(o) = obj.as_object_mut() {
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        meta["namespace"] = json!(namespace);
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let (object, old) = match op {
        Operation::Create | Operation::Connect => (obj, Value::Null),
        Operation::Update => (obj.clone(), obj),
        Operation::Delete => (Value::Null, obj),
    };
    let mut request = json!({
        "uid": new_uid(),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": name,
        "namespace": namespace,
        "operation": op.as_str(),
        "userInfo": {"username": "system:serviceaccount:e2e:tests", "uid": "e2e",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
    });
    if let Some(kind) = op.options_kind() {
        request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": kind});
    }
    wrap_request(request, "admission.k8s.io/v1")
}

/// Wraps a bare AdmissionRequest into an AdmissionReview of `api_version`; gives it a uid if it has none.
pub fn wrap_request(mut request: Value, api_version: &str) -> Value {
    if request
        .get("uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        request["uid"] = json!(new_uid());
    }
    json!({"apiVersion": api_version, "kind": "AdmissionReview", "request": request})
}

/// The request uid of a review (empty when absent).
pub fn uid_of(review: &Value) -> &str {
    review
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// A checked admission answer.
#[derive(Debug, Clone)]
pub struct AdmissionOutcome {
    /// The whole AdmissionReview returned.
    pub raw: Value,
    pub uid: String,
    pub allowed: bool,
    /// The decoded JSON Patch, when the answer carries one.
    pub patch: Option<json_patch::Patch>,
    /// The decoded patch as JSON (an array), for messages and assertions.
    pub patch_json: Option<Value>,
    /// `response.warnings` (pass-through reasons, malformed annotations...).
    pub warnings: Vec<String>,
    /// Wall-clock time of the HTTP exchange, filled by the sender.
    pub elapsed: std::time::Duration,
}

impl AdmissionOutcome {
    /// Applies the patch (if any) to `object`; returns `object` unchanged when there is no patch.
    pub fn apply(&self, object: &Value) -> anyhow::Result<Value> {
        let mut doc = object.clone();
        if let Some(p) = &self.patch {
            json_patch::patch(&mut doc, p).with_context(|| {
                format!(
                    "the patch does not apply: {}",
                    serde_json::to_string(&self.patch_json).unwrap_or_default()
                )
            })?;
        }
        Ok(doc)
    }

    /// Applies the patch and parses the result as a Pod; returns the JSON and the typed Pod.
    pub fn apply_pod(&self, pod: &Value) -> anyhow::Result<(Value, Pod)> {
        let doc = self.apply(pod)?;
        let typed: Pod = serde_json::from_value(doc.clone()).with_context(|| {
            format!(
                "the patched object is not a valid Pod; patch: {}",
                serde_json::to_string(&self.patch_json).unwrap_or_default()
            )
        })?;
        Ok((doc, typed))
    }

    /// The patch operations as a compact string (for assertion messages).
    pub fn patch_string(&self) -> String {
        self.patch_json
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "<no patch>".into())
    }
}

/// Checks `got` (the webhook's answer) against `sent` per the apiserver's rules and decodes the patch.
pub fn check_response(sent: &Value, got: &Value) -> anyhow::Result<AdmissionOutcome> {
    let ctx = || format!("answer: {got}");
    let sent_version = sent.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    ensure!(
        got.get("apiVersion").and_then(Value::as_str) == Some(sent_version),
        "apiVersion must be answered in kind ({sent_version}); {}",
        ctx()
    );
    ensure!(
        got.get("kind").and_then(Value::as_str) == Some("AdmissionReview"),
        "kind must be AdmissionReview; {}",
        ctx()
    );
    let resp = got
        .get("response")
        .filter(|r| r.is_object())
        .with_context(|| format!("no response object; {}", ctx()))?;
    let uid = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    ensure!(
        uid == uid_of(sent),
        "uid must be echoed: sent {:?}, got {uid:?}; {}",
        uid_of(sent),
        ctx()
    );
    let allowed = resp
        .get("allowed")
        .and_then(Value::as_bool)
        .with_context(|| format!("response.allowed must be a bool; {}", ctx()))?;
    let patch_type = resp.get("patchType").filter(|v| !v.is_null());
    let patch = resp.get("patch").filter(|v| !v.is_null());
    let (patch, patch_json) = match (patch, patch_type) {
        (None, None) => (None, None),
        (Some(p), Some(t)) => {
            ensure!(
                t == "JSONPatch",
                "patchType must be \"JSONPatch\", got {t}; {}",
                ctx()
            );
            let b64 = p.as_str().with_context(|| {
                format!(
                    "patch must be a base64 string (kube-rs#1781 writes a number array); {}",
                    ctx()
                )
            })?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .with_context(|| format!("patch is not standard base64; {}", ctx()))?;
            let json: Value = serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "decoded patch is not JSON: {}",
                    String::from_utf8_lossy(&bytes)
                )
            })?;
            ensure!(
                json.is_array(),
                "decoded patch must be a JSON array, got {json}"
            );
            let typed: json_patch::Patch = serde_json::from_value(json.clone())
                .with_context(|| format!("decoded patch is not RFC 6902: {json}"))?;
            (Some(typed), Some(json))
        }
        (Some(_), None) => bail!("patch without patchType; {}", ctx()),
        (None, Some(_)) => bail!("patchType without patch; {}", ctx()),
    };
    if patch.is_some() {
        ensure!(allowed, "a patch on a denied request; {}", ctx());
    }
    let warnings = match resp.get("warnings") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|w| {
                w.as_str()
                    .map(str::to_string)
                    .with_context(|| format!("warnings must be strings; {}", ctx()))
            })
            .collect::<anyhow::Result<_>>()?,
        Some(other) => bail!("warnings must be an array, got {other}"),
    };
    Ok(AdmissionOutcome {
        raw: got.clone(),
        uid: uid.to_string(),
        allowed,
        patch,
        patch_json,
        warnings,
        elapsed: std::time::Duration::ZERO,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(sent: &Value, patch: Option<&Value>) -> Value {
        let mut resp = json!({"uid": uid_of(sent), "allowed": true});
        if let Some(p) = patch {
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] = json!(
                base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(p).unwrap())
            );
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
    }

    #[test]
    fn accepts_a_good_patch_and_applies_it() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {"containers": [{"name": "c"}]}});
        let sent = pod_review(&pod, "ns", Operation::Create);
        let patch = json!([{"op": "add", "path": "/spec/nodeSelector", "value": {"a/b": "c"}}]);
        let out = check_response(&sent, &answer(&sent, Some(&patch))).unwrap();
        let (doc, typed) = out.apply_pod(&sent["request"]["object"]).unwrap();
        assert_eq!(doc["spec"]["nodeSelector"]["a/b"], "c");
        assert_eq!(typed.metadata.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn rejects_what_the_apiserver_rejects() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let sent = pod_review(&pod, "ns", Operation::Create);
        let mut wrong_uid = answer(&sent, None);
        wrong_uid["response"]["uid"] = json!("other");
        assert!(check_response(&sent, &wrong_uid).is_err());
        let mut array_patch = answer(&sent, None);
        array_patch["response"]["patchType"] = json!("JSONPatch");
        array_patch["response"]["patch"] = json!([91, 93]);
        assert!(check_response(&sent, &array_patch).is_err());
        let mut no_type = answer(&sent, Some(&json!([])));
        no_type["response"]["patchType"] = Value::Null;
        assert!(check_response(&sent, &no_type).is_err());
        let mut wrong_version = answer(&sent, None);
        wrong_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
        assert!(check_response(&sent, &wrong_version).is_err());
        assert!(check_response(&sent, &answer(&sent, None)).is_ok());
    }

    #[test]
    fn uids_are_unique() {
        assert_ne!(new_uid(), new_uid());
    }
}
