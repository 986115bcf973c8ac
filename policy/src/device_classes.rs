//! The catalog's DRA DeviceClass names: one per GPU class with `dra` devices, named
//! `<class name lowercased>.gpu-admission.io` (`H100-80GB` → `h100-80gb.gpu-admission.io`), selecting the
//! class's devices by CEL on the driver's product attribute ([`selector`]). A claim on one of these classes can only
//! be allocated devices of that class; the webhooks and the floor use [`class_of`] to tell which class a
//! DeviceClass name stands for. The DeviceClass objects themselves are rendered by core's `render::device_classes`.

use crate::model::{DraDevices, Policy};

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
    fn class_of_reads_only_the_catalog_convention() {
        let p = crate::embedded_default().unwrap();
        let h100 = p.class_index("H100-80GB").unwrap();
        assert_eq!(class_of(&p, "h100-80gb.gpu-admission.io"), Some(h100));
        assert_eq!(class_of(&p, "h100-80gb.example.com"), None);
        assert_eq!(class_of(&p, "gpu.nvidia.com"), None);
    }
}
