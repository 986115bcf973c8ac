//! The catalog's DRA DeviceClasses as objects: one per GPU class with `dra` devices, named and selecting as
//! `gpu_admission_policy::device_classes` states (`<class lowercased>.gpu-admission.io`, CEL on the driver's
//! product attribute). `gpu-admission dra device-classes` prints them; the shipped component
//! `deploy/kustomize/components/dra-device-classes` is the default policy's rendering.

use gpu_admission_policy::device_classes::{device_class_name, selector};
use gpu_admission_policy::{GpuClass, Policy};
use serde::Serialize;

/// A `resource.k8s.io/v1` DeviceClass manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClass {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub metadata: Metadata,
    pub spec: DeviceClassSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metadata {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceClassSpec {
    pub selectors: Vec<Selector>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Selector {
    pub cel: Cel,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cel {
    pub expression: String,
}

/// The label every rendered DeviceClass carries: the catalog class it stands for.
pub const CLASS_LABEL: &str = "gpu-admission.io/gpu-class";

/// The DeviceClass of one catalog class, `None` when the class has no `dra` devices.
pub fn render_class(class: &GpuClass) -> Option<DeviceClass> {
    let dra = class.dra.as_ref()?;
    Some(DeviceClass {
        api_version: "resource.k8s.io/v1",
        kind: "DeviceClass",
        metadata: Metadata {
            name: device_class_name(&class.name),
            labels: [
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "gpu-admission".to_string(),
                ),
                (CLASS_LABEL.to_string(), class.name.clone()),
            ]
            .into(),
        },
        spec: DeviceClassSpec {
            selectors: vec![Selector {
                cel: Cel {
                    expression: selector(dra),
                },
            }],
        },
    })
}

/// Every catalog class's DeviceClass, in catalog order.
pub fn render(policy: &Policy) -> Vec<DeviceClass> {
    policy.classes.iter().filter_map(render_class).collect()
}

/// The DeviceClasses as one multi-document YAML stream (what `gpu-admission dra device-classes` prints).
pub fn render_yaml(policy: &Policy) -> Result<String, serde_yaml::Error> {
    super::yaml_stream(
        "# Generated from the policy's catalog by `gpu-admission dra device-classes`: do not edit.\n",
        &render(policy),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_catalog_renders_one_class_each() {
        let p = gpu_admission_policy::embedded_default().unwrap();
        let rendered = render(&p);
        assert_eq!(rendered.len(), p.classes.len());
        let h100 = p.class_index("H100-80GB").unwrap();
        let dc = render_class(&p.classes[h100]).unwrap();
        assert_eq!(dc.metadata.name, "h100-80gb.gpu-admission.io");
        assert_eq!(
            dc.spec.selectors[0].cel.expression,
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName in \
             ['NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe']"
        );
        let yaml = render_yaml(&p).unwrap();
        assert_eq!(yaml.matches("kind: DeviceClass").count(), p.classes.len());
    }

    /// The shipped component is the default policy's rendering (regenerate it with
    /// `gpu-admission dra device-classes > deploy/kustomize/components/dra-device-classes/device-classes.yaml`).
    #[test]
    fn the_shipped_device_classes_are_the_default_catalogs() {
        let shipped = include_str!(
            "../../../deploy/kustomize/components/dra-device-classes/device-classes.yaml"
        );
        let default = gpu_admission_policy::embedded_default().unwrap();
        assert_eq!(shipped, render_yaml(&default).unwrap());
    }
}
