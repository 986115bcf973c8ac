//! Reading Pods (as JSON) the way the assertions need: GPU requests, annotations, the class a Pod is
//! pinned to, tolerations and affinity terms.

use serde_json::Value;

/// What a Pod asks for in GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuAsk {
    /// `nvidia`, `amd` or `intel`.
    pub vendor: &'static str,
    /// Largest count asked by one container (requests or limits), containers and init containers.
    pub count: f64,
}

fn quantity(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn vendor_of(resource: &str) -> Option<&'static str> {
    if resource == "nvidia.com/gpu" {
        Some("nvidia")
    } else if resource == "amd.com/gpu" {
        Some("amd")
    } else if resource.starts_with("gpu.intel.com/") {
        Some("intel")
    } else {
        None
    }
}

/// The Pod's GPU request (`nvidia.com/gpu`, `amd.com/gpu`, `gpu.intel.com/*` > 0 in requests or limits of
/// any container or init container), or `None` for a Pod that asks for no GPU.
pub fn gpu_ask(pod: &Value) -> Option<GpuAsk> {
    let mut best: Option<GpuAsk> = None;
    for list in ["containers", "initContainers"] {
        let Some(containers) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for c in containers {
            for kind in ["requests", "limits"] {
                let Some(res) = c
                    .pointer(&format!("/resources/{kind}"))
                    .and_then(Value::as_object)
                else {
                    continue;
                };
                for (name, q) in res {
                    if let (Some(vendor), Some(count)) = (vendor_of(name), quantity(q))
                        && count > 0.0
                        && best.as_ref().is_none_or(|b| count > b.count)
                    {
                        best = Some(GpuAsk { vendor, count });
                    }
                }
            }
        }
    }
    best
}

/// An annotation value.
pub fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// A label value.
pub fn label<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/labels")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Classes a Pod is pinned to through `label_key`: the nodeSelector value, plus the values of `In`
/// expressions on that key in required node affinity terms.
pub fn pinned_classes(pod: &Value, label_key: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = pod
        .pointer("/spec/nodeSelector")
        .and_then(|s| s.get(label_key))
        .and_then(Value::as_str)
    {
        out.push(v.to_string());
    }
    let terms = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    for term in terms.into_iter().flatten() {
        for e in term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if e.get("key").and_then(Value::as_str) == Some(label_key)
                && e.get("operator").and_then(Value::as_str) == Some("In")
            {
                for v in e
                    .get("values")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(v) = v.as_str()
                        && !out.iter().any(|o| o == v)
                    {
                        out.push(v.to_string());
                    }
                }
            }
        }
    }
    out
}

/// The array at `pointer`, or empty.
pub fn array_at<'a>(v: &'a Value, pointer: &str) -> Vec<&'a Value> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The Pod's tolerations.
pub fn tolerations(pod: &Value) -> Vec<&Value> {
    array_at(pod, "/spec/tolerations")
}

/// Adds `nvidia.com/gpu: count` to the limits of the first container (a GPU variant of any Pod).
pub fn add_nvidia_gpu(pod: &mut Value, count: u32) {
    if let Some(c) = pod
        .pointer_mut("/spec/containers/0")
        .and_then(Value::as_object_mut)
    {
        let res = c
            .entry("resources")
            .or_insert_with(|| serde_json::json!({}));
        if !res.is_object() {
            *res = serde_json::json!({});
        }
        let limits = res
            .as_object_mut()
            .expect("object")
            .entry("limits")
            .or_insert_with(|| serde_json::json!({}));
        if !limits.is_object() {
            *limits = serde_json::json!({});
        }
        limits["nvidia.com/gpu"] = serde_json::json!(count.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_gpu_asks_of_every_vendor_and_ignores_zero() {
        let pod = |res: Value| {
            json!({"spec": {"containers": [{"name": "a"}],
                                               "initContainers": [{"name": "i", "resources": res}]}})
        };
        assert_eq!(
            gpu_ask(&pod(json!({"limits": {"nvidia.com/gpu": 2}})))
                .unwrap()
                .count,
            2.0
        );
        assert_eq!(
            gpu_ask(&pod(json!({"requests": {"amd.com/gpu": "1"}})))
                .unwrap()
                .vendor,
            "amd"
        );
        assert_eq!(
            gpu_ask(&pod(json!({"limits": {"gpu.intel.com/i915": "1"}})))
                .unwrap()
                .vendor,
            "intel"
        );
        assert!(gpu_ask(&pod(json!({"limits": {"nvidia.com/gpu": 0}}))).is_none());
        assert!(gpu_ask(&pod(json!({"limits": {"example.com/gpu": 1}}))).is_none());
    }

    #[test]
    fn reads_pinned_classes_from_selector_and_affinity() {
        let pod = json!({"spec": {"nodeSelector": {"k": "A"}, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "k", "operator": "In", "values": ["A", "B"]}]}]}}}}});
        assert_eq!(pinned_classes(&pod, "k"), ["A", "B"]);
    }
}
