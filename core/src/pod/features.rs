//! Pure extraction of a job's features from a Pod: what the scorer needs to know.
//!
//! Nothing here does I/O or fails: a value we cannot read is skipped and reported as a warning string
//! (which ends up in the AdmissionResponse `warnings`), never as an error.

use std::collections::BTreeMap;

use gpu_admission_policy::{Vendor, WorkloadClass};
use k8s_openapi::api::core::v1::Pod;

use crate::pod::gpu_resources::{self, ClaimTemplates, GpuResources, NoClaimTemplates};

/// Everything the admission decision knows about the job, taken from the Pod alone.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFeatures {
    /// Number of GPUs the Pod needs (Kubernetes effective-request rules); 0 = not a GPU Pod.
    pub gpu_count: u32,
    /// `None`: not a GPU Pod, or no resource of it says.
    pub gpu_vendor: Option<Vendor>,
    /// How the GPUs are asked for (`devices`, `mig`, `devices+memory`, `dra`, …; `none`).
    pub gpu_shape: String,
    pub job_type: Option<String>,
    pub workload_class: WorkloadClass,
    pub gpu_memory_gib: Option<f64>,
    pub batch_size: Option<u32>,
    pub model_size_billion_params: Option<f64>,
    pub tenant: Option<String>,
    /// Names of DRA resource claims (`spec.resourceClaims`); those from a readable template of a GPU
    /// DeviceClass are counted in `gpu_count`.
    pub dra_claims: Vec<String>,
    /// The GPU DeviceClasses it takes devices from (implicit extended resources, readable claims).
    pub dra_device_classes: Vec<String>,
    /// Those asked for by a container resource with no claim, judged by the cluster's class (see
    /// `gpu_resources::GpuAsk::implicit_device_classes`).
    pub implicit_device_classes: Vec<String>,
    /// The DRA claims whose template or claim the caller could not read (they may ask for GPUs).
    pub unresolved_claims: Vec<String>,
    /// GPU resources whose quantity is not a Kubernetes quantity (`container "c": nvidia.com/gpu="one"`):
    /// how many GPUs the Pod asks for cannot be told.
    pub unreadable_gpu_quantities: Vec<String>,
    /// Values that were present but unreadable, as short human-readable sentences.
    pub warnings: Vec<String>,
}

/// The first annotation among `keys` that is present, with its key.
fn first_annotation<'a>(
    annotations: &'a BTreeMap<String, String>,
    keys: &[&'static str],
) -> Option<(&'static str, &'a str)> {
    keys.iter()
        .find_map(|k| annotations.get(*k).map(|v| (*k, v.trim())))
}

fn parse_positive_f64(key: &str, value: &str, warnings: &mut Vec<String>) -> Option<f64> {
    match value.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Some(f),
        _ => {
            warnings.push(format!(
                "annotation {key}={value:?} ignored: not a positive number"
            ));
            None
        }
    }
}

fn parse_workload_class(value: &str) -> Option<WorkloadClass> {
    match value.to_ascii_lowercase().as_str() {
        "training" | "train" => Some(WorkloadClass::Training),
        "inference" | "serving" => Some(WorkloadClass::Inference),
        "batch" => Some(WorkloadClass::Batch),
        "interactive" | "notebook" => Some(WorkloadClass::Interactive),
        _ => None,
    }
}

pub use gpu_admission_policy::names::{is_label_key, is_label_value};

/// Extracts the job features of a Pod with the built-in GPU resource list and no ResourceClaimTemplates.
pub fn extract(pod: &Pod) -> JobFeatures {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    extract_with(pod, namespace, &GpuResources::default(), &NoClaimTemplates)
}

/// Extracts the job features of a Pod of `namespace` (the request's: a new Pod's own may be empty): GPUs
/// counted by the policy's `rules`, DRA claims resolved through `templates`. Never fails: unreadable values
/// are skipped with a warning.
pub fn extract_with(
    pod: &Pod,
    namespace: &str,
    rules: &GpuResources,
    templates: &dyn ClaimTemplates,
) -> JobFeatures {
    let ask = match &pod.spec {
        Some(spec) => gpu_resources::gpu_ask(spec, namespace, rules, templates),
        None => gpu_resources::GpuAsk {
            shape: "none".into(),
            ..Default::default()
        },
    };
    let mut warnings = ask.warnings;

    let empty = BTreeMap::new();
    let ann = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);

    let job_type = match first_annotation(ann, &crate::names::features::JOB_TYPE)
        .or_else(|| first_annotation(labels, &crate::names::features::JOB_TYPE[1..]))
    {
        Some((_, v)) if is_label_value(v) => Some(v.to_string()),
        Some((k, v)) => {
            warnings.push(format!(
                "annotation {k}={v:?} ignored: a job type must be a valid label value"
            ));
            None
        }
        None => None,
    };
    // The Pod's own statement wins; else what its GPU resources carry (a MIG slice's or HAMi's memory).
    let gpu_memory_gib = first_annotation(ann, &crate::names::features::GPU_MEMORY_GIB)
        .and_then(|(k, v)| parse_positive_f64(k, v, &mut warnings))
        .or(ask.memory_gib);
    let batch_size =
        first_annotation(ann, &crate::names::features::BATCH_SIZE).and_then(|(k, v)| {
            match v.parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    warnings.push(format!(
                        "annotation {k}={v:?} ignored: not a positive integer"
                    ));
                    None
                }
            }
        });
    let model_size_billion_params = first_annotation(ann, &[crate::names::features::MODEL_SIZE_B])
        .and_then(|(k, v)| parse_positive_f64(k, v, &mut warnings));
    let workload_class = match first_annotation(ann, &[crate::names::features::WORKLOAD_CLASS]) {
        Some((k, v)) => parse_workload_class(v).unwrap_or_else(|| {
            warnings.push(format!(
                "annotation {k}={v:?} ignored: expected training, inference, batch or interactive"
            ));
            WorkloadClass::Unknown
        }),
        None => WorkloadClass::Unknown,
    };
    let tenant = first_annotation(ann, &crate::names::features::TENANT)
        .filter(|(_, v)| !v.is_empty())
        .map(|(_, v)| v.to_string());

    JobFeatures {
        gpu_count: ask.count,
        gpu_vendor: ask.vendor,
        gpu_shape: ask.shape,
        job_type,
        workload_class,
        gpu_memory_gib,
        batch_size,
        model_size_billion_params,
        tenant,
        dra_claims: ask.dra_claims,
        dra_device_classes: ask.dra_device_classes,
        implicit_device_classes: ask.implicit_device_classes,
        unresolved_claims: ask.unresolved_claims,
        unreadable_gpu_quantities: ask.unreadable_quantities,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn gpu_pod(resources: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": resources}]}}),
        )
    }

    #[test]
    fn gpu_count_from_limits_only_and_requests_only() {
        let f = extract(&gpu_pod(json!({"limits": {"nvidia.com/gpu": 2}})));
        assert_eq!((f.gpu_count, f.gpu_vendor), (2, Some(Vendor::Nvidia)));
        let f = extract(&gpu_pod(json!({"requests": {"amd.com/gpu": "1"}})));
        assert_eq!((f.gpu_count, f.gpu_vendor), (1, Some(Vendor::Amd)));
        let f = extract(&gpu_pod(
            json!({"requests": {"gpu.intel.com/i915": "8"}, "limits": {"gpu.intel.com/i915": "8"}}),
        ));
        assert_eq!((f.gpu_count, f.gpu_vendor), (8, Some(Vendor::Intel)));
    }

    #[test]
    fn non_gpu_extended_resources_and_zero_are_not_gpus() {
        for r in [
            json!({"limits": {"example.com/gpu": 1}}),
            json!({"limits": {"nvidia.com/gpu": 0, "cpu": "2"}}),
            json!({"limits": {"gpu.intel.com/": 1}}),
        ] {
            let f = extract(&gpu_pod(r.clone()));
            assert_eq!((f.gpu_count, f.gpu_vendor), (0, None), "{r}");
        }
    }

    #[test]
    fn init_containers_use_effective_request_rules() {
        let p = pod(json!({"metadata": {}, "spec": {
        "initContainers": [
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
        ]}}));
        // app (2) + sidecar (1) = 3 < plain init container (4)
        assert_eq!(extract(&p).gpu_count, 4);
    }

    #[test]
    fn unreadable_quantity_is_a_warning_not_a_failure() {
        let f = extract(&gpu_pod(
            json!({"limits": {"nvidia.com/gpu": "half", "amd.com/gpu": "1"}}),
        ));
        assert_eq!(f.gpu_count, 1);
        assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
        assert!(f.warnings[0].contains("nvidia.com/gpu"));
        assert_eq!(
            f.unreadable_gpu_quantities,
            [r#"container "c": nvidia.com/gpu="half""#]
        );
        // Only GPU resources count: an unreadable CPU quantity is the apiserver's business.
        let f = extract(&gpu_pod(json!({"limits": {"cpu": "lots"}})));
        assert!(f.unreadable_gpu_quantities.is_empty());
    }

    #[test]
    fn annotations_seed_keys_and_own_keys() {
        let p = pod(json!({"metadata": {"annotations": {
            "app.kubernetes.io/job-type": "train-llama",
            "gpu.mem.gi": "40",
            "ml.batch_size": "256",
            "scheduler.radix.ai/tenant": "team-a",
            "gpu-admission.io/workload-class": "Training",
            "gpu-admission.io/model-size-b": "7"
        }}, "spec": {"containers": []}}));
        let f = extract(&p);
        assert_eq!(f.job_type.as_deref(), Some("train-llama"));
        assert_eq!(f.gpu_memory_gib, Some(40.0));
        assert_eq!(f.batch_size, Some(256));
        assert_eq!(f.tenant.as_deref(), Some("team-a"));
        assert_eq!(f.workload_class, WorkloadClass::Training);
        assert_eq!(f.model_size_billion_params, Some(7.0));
        assert!(f.warnings.is_empty());

        let p = pod(json!({"metadata": {"annotations": {
            "app.kubernetes.io/job-type": "seed", "gpu-admission.io/job-type": "ours",
            "gpu.mem.gi": "10", "gpu-admission.io/gpu-memory-gib": "80"
        }}}));
        let f = extract(&p);
        assert_eq!(f.job_type.as_deref(), Some("ours"));
        assert_eq!(f.gpu_memory_gib, Some(80.0));
    }

    #[test]
    fn malformed_annotations_are_ignored_with_warnings() {
        let p = pod(json!({"metadata": {"annotations": {
            "gpu.mem.gi": "lots", "ml.batch_size": "-3", "gpu-admission.io/model-size-b": "NaN",
            "gpu-admission.io/workload-class": "party", "app.kubernetes.io/job-type": "bad value/with slash"
        }}}));
        let f = extract(&p);
        assert_eq!(
            (
                f.gpu_memory_gib,
                f.batch_size,
                f.model_size_billion_params,
                f.job_type
            ),
            (None, None, None, None)
        );
        assert_eq!(f.workload_class, WorkloadClass::Unknown);
        assert_eq!(f.warnings.len(), 5, "{:?}", f.warnings);
    }

    #[test]
    fn dra_claims_are_noted() {
        let p = pod(
            json!({"metadata": {}, "spec": {"containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}}),
        );
        let f = extract(&p);
        assert_eq!(f.dra_claims, ["gpu"]);
        assert_eq!(f.gpu_count, 0);
    }

    #[test]
    fn label_keys() {
        for ok in ["gpu.nvidia.com/class", "class", "a.b/c-d"] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in ["", "/x", "A.b/c", "a/", "a/b/c", "x y"] {
            assert!(!is_label_key(bad), "{bad}");
        }
    }

    #[test]
    fn label_value_rules() {
        assert!(is_label_value("train-llama_v2.1"));
        for bad in ["", "-x", "x-", "a/b", &"x".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }
}
