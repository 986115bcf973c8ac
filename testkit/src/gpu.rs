//! Reading Pods (as JSON) the way the assertions need: GPU requests, annotations, the class a Pod is
//! pinned to, tolerations and affinity terms.

use serde_json::Value;

/// What a Pod asks for in GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuAsk {
    /// `nvidia`, `amd` or `intel`.
    pub vendor: &'static str,
    /// Largest device count asked by one container (requests or limits), containers and init containers; a
    /// container asking only for a share (HAMi memory or cores, Intel millicores) counts one.
    pub count: f64,
    /// GPU memory per device the resources carry (a MIG slice's, HAMi's `nvidia.com/gpumem` in MiB), GiB.
    pub memory_gib: Option<f64>,
    /// How the GPUs are asked for: `devices`, `shared`, `mig`, `memory`, `cores` joined by `+` in that order.
    pub shape: String,
}

/// A quantity as a number: plain, or with a Kubernetes suffix (`m`, `k`, `M`, `G`, `Ki`, `Mi`, `Gi`).
fn quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64(),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let suffixes: [(&str, f64); 7] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("m", 0.001),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
    ];
    for (suffix, factor) in suffixes {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    s.parse().ok()
}

/// How one resource name counts. This is the test oracle's own statement of the policy's default
/// `gpuResources` list, written independently of the frontend's `gpu_resources` module on purpose, so that
/// a mistake in one of them shows as a disagreement: NVIDIA whole, shared and MIG devices and HAMi memory/
/// cores, AMD devices, Intel devices, monitoring and shares; and every other name under `nvidia.com/`,
/// `amd.com/` and `gpu.intel.com/` a device (`….shared` a shared one), but the listed non-GPUs.
fn resource_kind(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "nvidia.com/gpu" => Some(("nvidia", "devices")),
        "nvidia.com/gpu.shared" => Some(("nvidia", "shared")),
        "nvidia.com/gpumem" => Some(("nvidia", "memory")),
        "nvidia.com/gpucores" | "nvidia.com/gpumem-percentage" => Some(("nvidia", "cores")),
        "nvidia.com/priority" => None,
        "amd.com/gpu" => Some(("amd", "devices")),
        "gpu.intel.com/i915" | "gpu.intel.com/xe" => Some(("intel", "devices")),
        "gpu.intel.com/i915_monitoring" | "gpu.intel.com/xe_monitoring" => {
            Some(("intel", "devices"))
        }
        "gpu.intel.com/millicores" | "gpu.intel.com/tiles" => Some(("intel", "cores")),
        "gpu.intel.com/memory.max" => Some(("intel", "memory")),
        n if mig_memory_gib(n).is_some() => Some(("nvidia", "mig")),
        n => {
            let (domain, rest) = n.split_once('/')?;
            let name_chars = !rest.is_empty()
                && rest
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
            let vendor = match domain {
                "nvidia.com" => "nvidia",
                "amd.com" => "amd",
                "gpu.intel.com" => "intel",
                _ => return None,
            };
            let rdma = rest.strip_prefix("rdma_shared_device_").is_some_and(|r| {
                !r.is_empty()
                    && r.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            });
            if !name_chars
                || (vendor == "nvidia" && rdma)
                || (vendor == "amd" && rest.len() > "xilinx".len() && rest.starts_with("xilinx"))
            {
                return None;
            }
            let shared =
                vendor == "nvidia" && rest.len() > ".shared".len() && rest.ends_with(".shared");
            Some((vendor, if shared { "shared" } else { "devices" }))
        }
    }
}

/// `nvidia.com/mig-<compute>g.<memory>gb` → the slice memory in GiB.
fn mig_memory_gib(name: &str) -> Option<f64> {
    let rest = name.strip_prefix("nvidia.com/mig-")?;
    let (compute, memory) = rest.split_once("g.")?;
    let memory = memory.strip_suffix(".shared").unwrap_or(memory);
    let memory = memory.strip_suffix("gb")?;
    let alnum = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    (alnum(compute) && digits(memory))
        .then(|| memory.parse().ok())
        .flatten()
}

const SHAPE_ORDER: [&str; 5] = ["devices", "shared", "mig", "memory", "cores"];

/// The Pod's GPU request (the resources of [`resource_kind`] > 0 in requests or limits of any container or
/// init container), or `None` for a Pod that asks for no GPU. DRA claims are not resolved here.
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
            let mut per_name: Vec<(&str, &'static str, &'static str, f64)> = Vec::new();
            for kind in ["requests", "limits"] {
                let Some(res) = c
                    .pointer(&format!("/resources/{kind}"))
                    .and_then(Value::as_object)
                else {
                    continue;
                };
                for (name, q) in res {
                    if let (Some((vendor, k)), Some(n)) = (resource_kind(name), quantity(q))
                        && n > 0.0
                    {
                        match per_name.iter_mut().find(|e| e.0 == name) {
                            Some(e) => e.3 = e.3.max(n),
                            None => per_name.push((name, vendor, k, n)),
                        }
                    }
                }
            }
            let Some(vendor) = per_name.first().map(|e| e.1) else {
                continue;
            };
            let devices: f64 = per_name
                .iter()
                .filter(|e| matches!(e.2, "devices" | "shared" | "mig"))
                .map(|e| e.3.ceil())
                .sum();
            let count = if devices > 0.0 { devices } else { 1.0 };
            let memory_gib = per_name
                .iter()
                .filter_map(|e| match e.2 {
                    "mig" => mig_memory_gib(e.0),
                    "memory" if e.0 == "gpu.intel.com/memory.max" => Some(e.3 / 1073741824.0),
                    "memory" => Some(e.3 / 1024.0),
                    _ => None,
                })
                .reduce(f64::max);
            let shape = SHAPE_ORDER
                .iter()
                .filter(|k| per_name.iter().any(|e| e.2 == **k))
                .copied()
                .collect::<Vec<_>>()
                .join("+");
            if best.as_ref().is_none_or(|b| count > b.count) {
                best = Some(GpuAsk {
                    vendor,
                    count,
                    memory_gib,
                    shape,
                });
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
        // Every name under a GPU vendor's domain is a GPU, but the listed non-GPUs.
        let a = gpu_ask(&pod(
            json!({"limits": {"nvidia.com/mig-1g.10gb.shared": 1}}),
        ))
        .unwrap();
        assert_eq!((a.vendor, a.memory_gib), ("nvidia", Some(10.0)));
        for (name, vendor) in [
            ("gpu.intel.com/i915_monitoring", "intel"),
            ("amd.com/cpx_nps4", "amd"),
            ("nvidia.com/h100_renamed", "nvidia"),
        ] {
            assert_eq!(
                gpu_ask(&pod(json!({"limits": {name: 1}}))).unwrap().vendor,
                vendor
            );
        }
        for name in [
            "nvidia.com/priority",
            "nvidia.com/rdma_shared_device_a",
            "amd.com/xilinx_u250",
        ] {
            assert!(
                gpu_ask(&pod(json!({"limits": {name: 1}}))).is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn reads_pinned_classes_from_selector_and_affinity() {
        let pod = json!({"spec": {"nodeSelector": {"k": "A"}, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "k", "operator": "In", "values": ["A", "B"]}]}]}}}}});
        assert_eq!(pinned_classes(&pod, "k"), ["A", "B"]);
    }

    #[test]
    fn restates_the_gpu_resource_rule() {
        let pod = |res: Value| json!({"spec": {"containers": [{"name": "a", "resources": res}]}});
        let a = gpu_ask(&pod(
            json!({"limits": {"gpu.intel.com/i915": 1, "gpu.intel.com/millicores": 500}}),
        ))
        .unwrap();
        assert_eq!(
            (a.vendor, a.count, a.shape.as_str()),
            ("intel", 1.0, "devices+cores")
        );
        let a = gpu_ask(&pod(json!({"limits": {"nvidia.com/mig-1g.10gb": 2}}))).unwrap();
        assert_eq!(
            (a.vendor, a.count, a.memory_gib),
            ("nvidia", 2.0, Some(10.0))
        );
        let a = gpu_ask(&pod(json!({"limits": {"nvidia.com/gpumem": 20000}}))).unwrap();
        assert_eq!((a.count, a.shape.as_str()), (1.0, "memory"));
        assert!((a.memory_gib.unwrap() - 19.53).abs() < 0.01);
        assert_eq!(
            gpu_ask(&pod(json!({"limits": {"nvidia.com/gpu": "1000m"}})))
                .unwrap()
                .count,
            1.0
        );
        let a = gpu_ask(&pod(json!({"limits": {"gpu.intel.com/memory.max": "1Gi"}}))).unwrap();
        assert_eq!((a.count, a.memory_gib), (1.0, Some(1.0)));
    }
}
