//! A claim held to its tier by what it asks, as a Pod is by its node selector: each request (each
//! `firstAvailable` alternative) on a DeviceClass that could allocate GPUs outside the tier gets one more CEL
//! selector naming the products of the tier's classes it can reach, so that NVIDIA's quickstart
//! (`deviceClassName: gpu.nvidia.com`, no selector) runs unchanged in every tier, on that tier's classes.
//! A request no class of the tier can satisfy (it pins a class outside the tier, or selects by a CEL
//! selector that cannot be decided) is left as it is: validation refuses it with the tier's message.
//! `/mutate-claim` calls [`placing_operations`] through `mutate_claim::admit`.

use json_patch::{AddOperation, PatchOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::resource::v1::DeviceSelector;
use serde_json::json;

use super::{Ask, ClaimKind, Reach, Where, claim_spec, class_reach, request_violation};
use crate::dra::cel;

/// One request the tier's selector was added to: how messages name it, and the classes it may now get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub label: String,
    pub classes: Vec<String>,
}

/// The JSON-patch operations that hold `object`'s requests to the tier, and what they did. Empty when every
/// request already is within the tier or none can be.
pub fn placing_operations(
    object: &kube_core::DynamicObject,
    kind: ClaimKind,
    at: &Where<'_>,
) -> (Vec<PatchOperation>, Vec<Placed>) {
    let (Some(spec), Some(policy)) = (claim_spec(object, kind), at.policy.policy.as_deref()) else {
        return (Vec::new(), Vec::new());
    };
    let root = match kind {
        ClaimKind::Claim => "/spec/devices/requests",
        ClaimKind::Template => "/spec/spec/devices/requests",
    };
    let mut ops = Vec::new();
    let mut placed = Vec::new();
    let requests = spec
        .devices
        .iter()
        .flat_map(|d| d.requests.iter().flatten());
    for (i, r) in requests.enumerate() {
        type Alternative<'s> = (String, String, &'s str, &'s Option<Vec<DeviceSelector>>);
        let mut alternatives: Vec<Alternative<'_>> = Vec::new();
        if let Some(e) = &r.exactly {
            let label = format!("request {}", r.name);
            alternatives.push((
                format!("{root}/{i}/exactly"),
                label,
                &e.device_class_name,
                &e.selectors,
            ));
        }
        for (j, s) in r.first_available.iter().flatten().enumerate() {
            alternatives.push((
                format!("{root}/{i}/firstAvailable/{j}"),
                format!("request {}/{}", r.name, s.name),
                &s.device_class_name,
                &s.selectors,
            ));
        }
        for (path, label, device_class, selectors) in alternatives {
            let ask = Ask {
                label: label.clone(),
                device_class,
                selectors: super::cels(selectors),
            };
            let Some(classes) = tier_classes_within(&ask, at, policy) else {
                continue;
            };
            let expression = classes
                .iter()
                .filter_map(|c| policy.classes[*c].dra.as_ref())
                .map(|dra| format!("({})", gpu_admission_policy::device_classes::selector(dra)))
                .collect::<Vec<_>>()
                .join(" || ");
            let selector = json!({"cel": {"expression": expression}});
            let (at_path, value) = match selectors {
                Some(_) => (format!("{path}/selectors/-"), selector),
                None => (format!("{path}/selectors"), json!([selector])),
            };
            ops.push(PatchOperation::Add(AddOperation {
                path: PointerBuf::parse(&at_path).expect("a JSON pointer built from indices"),
                value,
            }));
            placed.push(Placed {
                label,
                classes: classes
                    .iter()
                    .map(|c| policy.classes[*c].name.clone())
                    .collect(),
            });
        }
    }
    (ops, placed)
}

/// For a request that could be allocated devices outside the tier: the tier's catalog classes (with DRA
/// devices) it could be allocated, when there are any and its selectors can be decided; `None` for a request
/// within the tier already, or one no class of the tier can hold.
fn tier_classes_within(
    ask: &Ask<'_>,
    at: &Where<'_>,
    policy: &gpu_admission_policy::Policy,
) -> Option<Vec<usize>> {
    request_violation(ask, at, policy)?;
    let (universe, mut reached) = class_reach(ask.device_class, at, policy)?.ok()?;
    for text in &ask.selectors {
        let s = cel::parse(text).ok()?;
        reached = reached.and(super::reach(&s, &universe, policy).ok()?);
    }
    let Reach { classes, .. } = reached;
    let within: Vec<usize> = classes
        .into_iter()
        .filter(|c| at.rules.allows(&policy.classes[*c].name))
        .filter(|c| policy.classes[*c].dra.is_some())
        .collect();
    (!within.is_empty()).then_some(within)
}
