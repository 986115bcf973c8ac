//! The second reading of a review whose first one hit serde_json's recursion limit: `metadata.managedFields`
//! (the apiserver's field-ownership bookkeeping, which no webhook reads, and which a client can nest as deep
//! as the body allows) is skipped without being parsed, and the object read again. Only such reviews pay for
//! it; everything the webhooks read still goes through the recursion limit.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// Was `e` serde_json's recursion limit?
pub(super) fn is_too_deep(e: &serde_json::Error) -> bool {
    e.to_string().contains("recursion limit exceeded")
}

/// The object's JSON text without `metadata.managedFields`, each other member copied as it is. Values are
/// skipped, not parsed (serde_json skips without a recursion limit).
fn without_managed_fields(object: &str) -> serde_json::Result<String> {
    let mut top: BTreeMap<String, &RawValue> = serde_json::from_str(object)?;
    let Some(metadata) = top.remove("metadata") else {
        return Ok(object.to_string());
    };
    let mut meta: BTreeMap<String, &RawValue> = serde_json::from_str(metadata.get())?;
    meta.remove("managedFields");
    let meta = serde_json::to_string(&meta)?;
    let rest = serde_json::to_string(&top)?;
    let comma = if top.is_empty() { "" } else { "," };
    Ok(format!("{{\"metadata\":{meta}{comma}{}", &rest[1..]))
}

/// Reads `object` as `T` with `metadata.managedFields` skipped.
pub(super) fn object<T: DeserializeOwned>(object: &RawValue) -> serde_json::Result<T> {
    let text = without_managed_fields(object.get())?;
    serde_json::from_str(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn deep(levels: usize) -> String {
        format!("{}1{}", "{\"f:a\":".repeat(levels), "}".repeat(levels))
    }

    #[test]
    fn deep_managed_fields_are_skipped_and_everything_else_kept() {
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","labels":{{"a":"b"}},"managedFields":[{{"manager":"x","fieldsType":"FieldsV1","fieldsV1":{}}}]}},"spec":{{"containers":[{{"name":"c"}}],"nodeName":"n1"}}}}"#,
            deep(500)
        );
        let e = serde_json::from_str::<Pod>(&text).unwrap_err();
        assert!(is_too_deep(&e), "{e}");
        let raw: Box<RawValue> = serde_json::from_str(&text).unwrap();
        let pod: Pod = object(&raw).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.labels.unwrap()["a"], "b");
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
        // Deep nesting where a value is read (a dynamic object's data) is still refused.
        let elsewhere = format!(r#"{{"metadata":{{}},"spec":{}}}"#, deep(500));
        let raw: Box<RawValue> = serde_json::from_str(&elsewhere).unwrap();
        assert!(object::<kube_core::DynamicObject>(&raw).is_err());
    }
}
