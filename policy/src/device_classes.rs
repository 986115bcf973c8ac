//! DRA DeviceClasses rendered from the catalog: one per GPU class with `dra` devices, named
//! `<class name lowercased>.gpu-admission.io` (`H100-80GB` → `h100-80gb.gpu-admission.io`), selecting the
//! class's devices by CEL on the driver's product attribute. A claim on one of these classes can only be
//! allocated devices of that class; the webhooks (and the apiserver-side policy floor) use [`class_of`] to
//! tell which class a DeviceClass name stands for. Pure: the manifests are data; the CLI prints them.

use serde::Serialize;

use crate::model::{DraDevices, GpuClass, Policy};

/// The suffix of every DeviceClass rendered from the catalog.
pub const SUFFIX: &str = ".gpu-admission.io";

/// The product attribute when a class does not name one (NVIDIA's, AMD's and Intel's drivers publish it).
pub const DEFAULT_PRODUCT_ATTRIBUTE: &str = "productName";

/// The DeviceClass name of a catalog class: `<class name lowercased>.gpu-admission.io`.
pub fn device_class_name(class: &str) -> String {
    format!("{}{SUFFIX}", class.to_ascii_lowercase())
}

/// Whether a class name makes a valid DeviceClass name (its lowercased form is a DNS label).
pub fn is_valid_class_name(class: &str) -> bool {
    let l = class.to_ascii_lowercase();
    !l.is_empty()
        && l.len() + SUFFIX.len() <= 253
        && l.len() <= 63
        && l.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// The catalog index of the class a DeviceClass name stands for (only classes with `dra` devices have one).
pub fn class_of(policy: &Policy, device_class: &str) -> Option<usize> {
    let stem = device_class.strip_suffix(SUFFIX)?;
    policy
        .classes
        .iter()
        .position(|c| c.dra.is_some() && c.name.to_ascii_lowercase() == stem)
}

/// A CEL string literal (product names and attributes are validated to hold no quote or backslash).
fn literal(s: &str) -> String {
    format!("'{s}'")
}

/// The CEL selector of a class's devices: its driver, and its product attribute one of its product names.
pub fn selector(dra: &DraDevices) -> String {
    let names: Vec<String> = dra.product_names.iter().map(|n| literal(n)).collect();
    format!(
        "device.driver == {} && device.attributes[{}].{} in [{}]",
        literal(&dra.driver),
        literal(&dra.driver),
        dra.attribute,
        names.join(", ")
    )
}

/// Whether a product name or driver can be written as a CEL literal here: printable, no quote, no backslash.
pub fn is_plain_text(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.chars()
            .all(|c| !c.is_control() && c != '\'' && c != '"' && c != '\\')
}

/// Whether an attribute is a CEL identifier (`productName`).
pub fn is_attribute_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic())
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

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
pub fn render_yaml(policy: &Policy) -> String {
    let mut out = String::from(
        "# Generated from the policy's catalog by `gpu-admission dra device-classes`: do not edit.\n",
    );
    for dc in render(policy) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&dc).expect("a DeviceClass serialises"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_convention() {
        assert_eq!(device_class_name("L4-24GB"), "l4-24gb.gpu-admission.io");
        assert_eq!(device_class_name("H100-80GB"), "h100-80gb.gpu-admission.io");
        assert!(is_valid_class_name("MI300X-192GB"));
        assert!(!is_valid_class_name("A100_80GB"));
        assert!(!is_valid_class_name("-x"));
        assert!(!is_valid_class_name(""));
    }

    #[test]
    fn the_default_catalog_renders_one_class_each() {
        let p = crate::embedded_default().unwrap();
        let rendered = render(&p);
        assert_eq!(rendered.len(), p.classes.len());
        let h100 = p.class_index("H100-80GB").unwrap();
        assert_eq!(class_of(&p, "h100-80gb.gpu-admission.io"), Some(h100));
        assert_eq!(class_of(&p, "h100-80gb.example.com"), None);
        assert_eq!(class_of(&p, "gpu.nvidia.com"), None);
        let dc = render_class(&p.classes[h100]).unwrap();
        assert_eq!(dc.metadata.name, "h100-80gb.gpu-admission.io");
        assert_eq!(
            dc.spec.selectors[0].cel.expression,
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName in \
             ['NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe']"
        );
        let yaml = render_yaml(&p);
        assert_eq!(yaml.matches("kind: DeviceClass").count(), p.classes.len());
    }

    /// The shipped component is the default policy's rendering (regenerate it with
    /// `gpu-admission dra device-classes > deploy/kustomize/components/dra-device-classes/device-classes.yaml`).
    #[test]
    fn the_shipped_device_classes_are_the_default_catalogs() {
        let shipped = include_str!(
            "../../deploy/kustomize/components/dra-device-classes/device-classes.yaml"
        );
        assert_eq!(shipped, render_yaml(&crate::embedded_default().unwrap()));
    }
}
