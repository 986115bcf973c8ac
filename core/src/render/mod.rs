//! Every object generated from the policy, in one place:
//! - [`floor`]: the apiserver's floor (ValidatingAdmissionPolicies and their bindings, the parameter
//!   ConfigMap's data, the placing floor's MutatingAdmissionPolicy, the manifest-based files);
//! - [`device_classes`]: the catalog's DRA DeviceClasses;
//! - [`kueue`]: the GPU quotas as Kueue ResourceFlavors, a Cohort, ClusterQueues and LocalQueues;
//! - [`resource_quotas`]: the namespace shares of the GPU quotas as Kubernetes ResourceQuotas (what the
//!   apiserver holds with every frontend down).
//!
//! Pure: each renderer returns objects; [`yaml_stream`] writes them as one multi-document YAML stream, and the
//! CLI and the observer do the I/O.

pub mod device_classes;
pub mod floor;
pub mod kueue;
pub mod resource_quotas;

use serde::Serialize;

/// `objects` as one YAML stream: `header` (comment lines) first, then each object as a `---` document.
pub fn yaml_stream<T: Serialize>(header: &str, objects: &[T]) -> Result<String, serde_yaml::Error> {
    let mut out = String::from(header);
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(object)?);
    }
    Ok(out)
}
