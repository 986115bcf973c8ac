//! A DeviceClass the policy does not name (neither a catalog class `<class>.gpu-admission.io` nor a
//! `gpuResources` rule), judged by what it selects: an admin's `h100.example.com` selecting H100s by CEL is a
//! GPU class whatever its name, and a claim on it, or a Pod asking for it as
//! `deviceclass.resource.kubernetes.io/h100.example.com` or through its `extendedResourceName`, is held to
//! the tier like one on the vendor's own class.
//!
//! The class's selectors are read with the claims' grammar ([`super::cel`]):
//! - every selector parses: the drivers they allow are those all of them name (`device.driver == 'D'`, an
//!   attribute or capacity of `D`); none named means any driver;
//! - no GPU driver among them (the vendors' drivers of `Vendor::facts`, the catalog classes' DRA drivers):
//!   not a GPU class;
//! - otherwise a GPU class, of the one vendor whose driver it names (else of unknown vendor), whose devices
//!   the caller narrows by the same selectors;
//! - a selector outside the grammar: undecidable (denied in `Enforce` where a tier restricts classes).

use std::collections::BTreeSet;

use gpu_admission_policy::Vendor;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};

use super::cel::{self, Selector};

/// What a DeviceClass selects.
#[derive(Debug, Clone, PartialEq)]
pub enum Selects {
    /// Only devices of drivers that publish no GPU.
    NotGpus,
    /// GPUs (perhaps among other devices): of `vendor` when its selectors name one GPU vendor's driver only,
    /// narrowed by `selectors`.
    Gpus {
        vendor: Option<Vendor>,
        selectors: Vec<Selector>,
    },
    /// A selector gpu-admission cannot decide: the CEL and why.
    Undecidable(String),
}

/// Does `class` name `resource` as its `spec.extendedResourceName` (a Pod asks for its devices by it)?
pub fn names_resource(class: &DeviceClass, resource: &str) -> bool {
    class
        .spec
        .as_ref()
        .and_then(|s| s.extended_resource_name.as_deref())
        == Some(resource)
}

/// The drivers a selector allows; `None` is any driver.
fn drivers(s: &Selector) -> Option<BTreeSet<&str>> {
    match s {
        Selector::Driver(d)
        | Selector::Product(d, _, _)
        | Selector::Memory(d, _, _)
        | Selector::Attribute(d, _) => Some(BTreeSet::from([d.as_str()])),
        Selector::And(a, b) => match (drivers(a), drivers(b)) {
            (Some(x), Some(y)) => Some(x.intersection(&y).copied().collect()),
            (x, None) | (None, x) => x,
        },
        Selector::Or(a, b) => {
            let mut x = drivers(a)?;
            x.extend(drivers(b)?);
            Some(x)
        }
    }
}

/// What `spec` selects; `gpu_drivers` are the drivers whose devices are GPUs.
pub fn judge(spec: &DeviceClassSpec, gpu_drivers: &[String]) -> Selects {
    let mut selectors = Vec::new();
    for text in spec
        .selectors
        .iter()
        .flatten()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.as_str()))
    {
        match cel::parse(text) {
            Ok(s) => selectors.push(s),
            Err(why) => return Selects::Undecidable(format!("{text:?} ({why})")),
        }
    }
    let allowed = selectors
        .iter()
        .filter_map(drivers)
        .reduce(|x, y| x.intersection(&y).copied().collect());
    let gpu = |d: &str| gpu_drivers.iter().any(|g| g == d);
    let vendor = match &allowed {
        Some(set) if !set.iter().any(|d| gpu(d)) => return Selects::NotGpus,
        Some(set) => {
            let vendors: BTreeSet<Option<Vendor>> = set
                .iter()
                .filter(|d| gpu(d))
                .map(|d| Vendor::ALL.into_iter().find(|v| v.facts().dra_driver == *d))
                .collect();
            match vendors.into_iter().collect::<Vec<_>>().as_slice() {
                [one] => *one,
                _ => None,
            }
        }
        None => None,
    };
    Selects::Gpus { vendor, selectors }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(selectors: &[&str]) -> DeviceClassSpec {
        let selectors: Vec<_> = selectors
            .iter()
            .map(|c| json!({"cel": {"expression": c}}))
            .collect();
        serde_json::from_value(json!({ "selectors": selectors })).unwrap()
    }

    fn drivers() -> Vec<String> {
        let mut d: Vec<String> = Vendor::ALL
            .iter()
            .map(|v| v.facts().dra_driver.to_string())
            .collect();
        d.push("gpu.example.com".into());
        d
    }

    #[test]
    fn a_class_is_judged_by_its_selectors_not_its_name() {
        let h100 = class(&[
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
        ]);
        match judge(&h100, &drivers()) {
            Selects::Gpus { vendor, selectors } => {
                assert_eq!(vendor, Some(Vendor::Nvidia));
                assert_eq!(selectors.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        // A product attribute names its driver: still an NVIDIA GPU class.
        let by_attribute = class(&["device.attributes['gpu.nvidia.com'].productName == 'X'"]);
        assert!(matches!(
            judge(&by_attribute, &drivers()),
            Selects::Gpus {
                vendor: Some(Vendor::Nvidia),
                ..
            }
        ));
        // A catalog class's own driver is a GPU driver too (vendor unknown).
        let own = class(&["device.driver == 'gpu.example.com'"]);
        assert!(matches!(
            judge(&own, &drivers()),
            Selects::Gpus { vendor: None, .. }
        ));
    }

    #[test]
    fn nics_are_not_gpus_and_no_selector_is_every_device() {
        let nic = class(&["device.driver == 'sriov.example.com'"]);
        assert_eq!(judge(&nic, &drivers()), Selects::NotGpus);
        // An IMEX channel of NVIDIA's ComputeDomain driver: not a GPU driver.
        let imex = class(&[
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'",
        ]);
        assert_eq!(judge(&imex, &drivers()), Selects::NotGpus);
        // No selector selects every device of every driver: GPUs of any vendor.
        assert_eq!(
            judge(&class(&[]), &drivers()),
            Selects::Gpus {
                vendor: None,
                selectors: Vec::new()
            }
        );
        // Either of two vendors: GPUs, vendor unknown.
        let either =
            class(&["device.driver == 'gpu.nvidia.com' || device.driver == 'gpu.amd.com'"]);
        assert!(matches!(
            judge(&either, &drivers()),
            Selects::Gpus { vendor: None, .. }
        ));
        // A selector that rules out every driver names none of them as GPU.
        let none = class(&[
            "device.driver == 'gpu.nvidia.com'",
            "device.driver == 'nic.example.com'",
        ]);
        assert_eq!(judge(&none, &drivers()), Selects::NotGpus);
    }

    #[test]
    fn a_selector_outside_the_grammar_is_undecidable() {
        let odd = class(&["device.attributes['gpu.nvidia.com'].index % 2 == 0"]);
        match judge(&odd, &drivers()) {
            Selects::Undecidable(why) => assert!(why.contains("index % 2"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
