//! The cluster's DeviceClasses in the floor's parameters. A Pod may ask for a DeviceClass's devices with no
//! claim, by an extended resource: `deviceclass.resource.kubernetes.io/<class>`, or the class's own
//! `spec.extendedResourceName` (`example.com/h100`). Which of these are GPUs, and which tier may use them,
//! depends on what each class of the cluster selects, which no render knows: the observer lists the cluster's
//! DeviceClasses and writes [`params`] of them beside the policy's, decided by the webhooks' own functions
//! (core's `gpu_ask` of a Pod asking that one resource, and `validate_claim::implicit_class_violations` for
//! each scope):
//!
//! - [`GPU_RESOURCES`]: every such resource `/validate-pod` counts as GPUs (the floor then holds the Pod to its
//!   tier's classes like any GPU Pod);
//! - `<scope>`[`OUTSIDE_SUFFIX`]: those the scope (a tier, or a tier widened by a namespace grant) may not use:
//!   a class the policy does not name that could allocate devices of a class outside it, or whose selectors
//!   cannot be decided. The floor denies a Pod asking one of them in `Enforce`, as `/validate-pod` does.
//!
//! Lists are `\n`-delimited, as every list of the parameters; with no DeviceClass known (the render, a
//! cluster without DRA) they are empty.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpu_admission_policy::Policy;
use gpu_admission_policy::gpu_resources::DEVICE_CLASS_RESOURCE_PREFIX;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::admission::validate_claim::implicit_class_violations;
use crate::admission::violation::Where;
use crate::facts::Facts;
use crate::pod::gpu_resources::{ClaimTemplates, gpu_ask};
use crate::policy::PolicySnapshot;

/// The parameter key listing the class-backed resources counted as GPUs.
pub const GPU_RESOURCES: &str = "deviceClasses.gpuResources";
/// The suffix of a scope's parameter key listing the class-backed resources outside it.
pub const OUTSIDE_SUFFIX: &str = ".deviceClasses.outside";

/// The cluster's DeviceClasses, as the webhooks read them.
struct Cluster<'a>(&'a [DeviceClass]);

impl ClaimTemplates for Cluster<'_> {
    fn template(&self, _: &str, _: &str) -> Option<ResourceClaimTemplate> {
        None
    }

    fn device_class(&self, name: &str) -> Option<DeviceClass> {
        self.0
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    fn device_class_for_resource(&self, resource: &str) -> Option<DeviceClass> {
        self.0
            .iter()
            .find(|c| crate::dra::device_class::names_resource(c, resource))
            .cloned()
    }
}

/// The resources a Pod may ask the class's devices by.
fn resources(class: &DeviceClass) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(name) = &class.metadata.name {
        out.push(format!("{DEVICE_CLASS_RESOURCE_PREFIX}{name}"));
    }
    if let Some(r) = class
        .spec
        .as_ref()
        .and_then(|s| s.extended_resource_name.clone())
    {
        out.push(r);
    }
    out
}

/// A Pod spec of one container asking one device of `resource`.
fn asking(resource: &str) -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some([(resource.to_string(), Quantity("1".into()))].into()),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }],
        ..PodSpec::default()
    }
}

fn list(items: &[String]) -> String {
    super::list(items.iter().map(String::as_str))
}

/// The scopes of the parameters: each tier's (`tier.<t>`) and each grant's (`grant.<namespace>.<t>`), with
/// a namespace that has that scope (`""`: one with no grant).
fn scopes(policy: &Policy) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for t in &policy.tiers {
        out.push((format!("tier.{}", t.name), t.name.clone(), String::new()));
        for g in &policy.namespace_grants {
            let key = format!("grant.{}.{}", g.namespace, t.name);
            out.push((key, t.name.clone(), g.namespace.clone()));
        }
    }
    out
}

/// The parameter entries of the cluster's DeviceClasses `classes` under `policy` (every key present, lists
/// empty when no class is known).
pub fn params(policy: &Policy, classes: &[DeviceClass]) -> BTreeMap<String, String> {
    let snapshot = PolicySnapshot::from_policy(Arc::new(policy.clone()));
    let cluster = Cluster(classes);
    let mut gpu: Vec<String> = Vec::new();
    // Each resource counted as GPUs with the classes it asks devices of that the policy does not name.
    let mut implicit: Vec<(String, Vec<String>)> = Vec::new();
    for r in classes.iter().flat_map(resources) {
        let ask = gpu_ask(&asking(&r), "", &snapshot.gpu_resources, &cluster);
        if ask.count == 0 || gpu.contains(&r) {
            continue;
        }
        gpu.push(r.clone());
        if !ask.implicit_device_classes.is_empty() {
            implicit.push((r, ask.implicit_device_classes));
        }
    }
    gpu.sort();
    let mut data = BTreeMap::from([(GPU_RESOURCES.to_string(), list(&gpu))]);
    let tier_of = |_: &str| None;
    let grants = crate::authority::Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &cluster,
        nodes: &crate::tier_bound::NoNodes,
        grants: &grants,
    };
    for (key, tier, namespace) in scopes(policy) {
        let Some(rules) = snapshot.tier_rules(&tier, &namespace) else {
            continue;
        };
        let at = Where {
            namespace: &namespace,
            rules: &rules,
            policy: &snapshot,
            facts: &facts,
            pcs: &snapshot,
        };
        let mut outside: Vec<String> = implicit
            .iter()
            .filter(|(_, classes)| !implicit_class_violations(classes, &at).is_empty())
            .map(|(r, _)| r.clone())
            .collect();
        outside.sort();
        data.insert(format!("{key}{OUTSIDE_SUFFIX}"), list(&outside));
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, cel: &str, resource: Option<&str>) -> DeviceClass {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": cel}}], "extendedResourceName": resource}
        }))
        .unwrap()
    }

    fn entries(data: &BTreeMap<String, String>, key: &str) -> Vec<String> {
        data[key]
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// The webhooks' judgement of each class, as parameters: GPU resources by what the classes select, and
    /// per scope those outside it (bronze: the H100 class and the undecidable one; gold: the undecidable one).
    #[test]
    fn the_cluster_classes_are_written_as_the_webhooks_judge_them() {
        let policy = gpu_admission_policy::embedded_default().unwrap();
        let product = "device.attributes['gpu.nvidia.com'].productName";
        let classes = [
            class(
                "h100.example.com",
                &format!(
                    "device.driver == 'gpu.nvidia.com' && {product} == 'NVIDIA H100 80GB HBM3'"
                ),
                Some("example.com/h100"),
            ),
            class(
                "l4.example.com",
                &format!("{product} == 'NVIDIA L4'"),
                Some("example.com/l4"),
            ),
            class(
                "nic.example.com",
                "device.driver == 'sriov.example.com'",
                Some("example.com/nic"),
            ),
            class(
                "odd.example.com",
                "device.attributes['gpu.nvidia.com'].index % 2 == 0",
                None,
            ),
            class(
                "gpu.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
                None,
            ),
        ];
        let data = params(&policy, &classes);
        let prefix = |c: &str| format!("{DEVICE_CLASS_RESOURCE_PREFIX}{c}");
        assert_eq!(
            entries(&data, GPU_RESOURCES),
            [
                prefix("gpu.nvidia.com"),
                prefix("h100.example.com"),
                prefix("l4.example.com"),
                prefix("odd.example.com"),
                "example.com/h100".into(),
                "example.com/l4".into(),
            ]
        );
        assert_eq!(
            entries(&data, &format!("tier.bronze{OUTSIDE_SUFFIX}")),
            [
                prefix("h100.example.com"),
                prefix("odd.example.com"),
                "example.com/h100".into()
            ]
        );
        assert_eq!(
            entries(&data, &format!("tier.gold{OUTSIDE_SUFFIX}")),
            [prefix("odd.example.com")]
        );
        // No class known: every key, every list empty.
        let none = params(&policy, &[]);
        assert_eq!(
            none.len(),
            1 + policy.tiers.len() * (1 + policy.namespace_grants.len())
        );
        assert!(none.values().all(|v| v == "\n"));
    }
}
