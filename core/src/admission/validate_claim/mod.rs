//! ResourceClaims and ResourceClaimTemplates (`resource.k8s.io`) of tier namespaces against their tier: the
//! GPU classes each request (each `firstAvailable` alternative too) could be allocated devices of. Called
//! by `/validate-pod`'s decision (`validate_pod::check`, which resolves the tier, the exemption and UPDATE
//! the same way as for Pods), so `gpu-admission check` and the tests decide claims with the same function.
//!
//! - a catalog DeviceClass (`<class>.gpu-admission.io`, `gpu_admission_policy::device_classes`): devices of
//!   that class only (its selectors can only narrow it);
//! - a GPU vendor's DeviceClass (`gpu.nvidia.com`, `mig.nvidia.com`…: the policy's `gpuResources`): the
//!   vendor's catalog classes and any GPU the catalog does not know, narrowed by selectors of the grammar of
//!   [`crate::dra::cel`]; a selector outside it cannot be decided, a violation (denied in `Enforce`), never admitted
//!   unbounded. A product name the catalog does not know is a GPU outside every class; a memory bound
//!   `>= Q` / `> Q` rules out the classes with less memory (with 10 % slack for what drivers publish), an
//!   upper bound rules out none (partitions of any class can be small);
//! - any other DeviceClass (a NIC, an IMEX channel): not a GPU, no violation.
//!
//! A tier that allows every catalog class has nothing a claim could breach: no violation at all. Claims are
//! validated when created or updated, and their spec is immutable, so a claim cannot become a GPU claim
//! after its Pod was admitted.

use std::collections::BTreeSet;

use gpu_admission_policy::device_classes;
use k8s_openapi::api::resource::v1::ResourceClaimSpec;
use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;

use super::violation::{Reason, Violation, Where};
use crate::dra::cel::{self, Compare, Selector};
use crate::dra::device_class::Selects;
use crate::tier_bound;

/// Which claim object a review holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    Claim,
    Template,
}

/// A ResourceClaim or ResourceClaimTemplate of `resource.k8s.io` (any version), not a sub-resource.
pub fn claim_kind(req: &AdmissionRequest<DynamicObject>) -> Option<ClaimKind> {
    if req.kind.group != "resource.k8s.io"
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    match req.kind.kind.as_str() {
        "ResourceClaim" => Some(ClaimKind::Claim),
        "ResourceClaimTemplate" => Some(ClaimKind::Template),
        _ => None,
    }
}

/// The claim spec of the object, `None` when it does not read as a `resource.k8s.io/v1` one: every request
/// says what it asks for in `exactly` or `firstAvailable` (an older version's request, `deviceClassName` at
/// its top, is not read as asking for nothing; the registration has the apiserver convert to v1).
fn claim_spec(object: &DynamicObject, kind: ClaimKind) -> Option<ResourceClaimSpec> {
    let spec = match kind {
        ClaimKind::Claim => object.data.get("spec")?,
        ClaimKind::Template => object.data.get("spec")?.get("spec")?,
    };
    let spec: ResourceClaimSpec = serde_json::from_value(spec.clone()).ok()?;
    let requests = spec
        .devices
        .iter()
        .flat_map(|d| d.requests.iter().flatten());
    requests
        .clone()
        .all(|r| r.exactly.is_some() || r.first_available.as_ref().is_some_and(|f| !f.is_empty()))
        .then_some(spec)
}

/// What a request's devices can be: catalog classes (indices), and whether a GPU the catalog does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reach {
    classes: BTreeSet<usize>,
    other: bool,
}

impl Reach {
    fn and(self, o: Reach) -> Reach {
        Reach {
            classes: self.classes.intersection(&o.classes).copied().collect(),
            other: self.other && o.other,
        }
    }

    fn or(mut self, o: Reach) -> Reach {
        self.classes.extend(o.classes);
        Reach {
            classes: self.classes,
            other: self.other || o.other,
        }
    }
}

/// What `selector` can match among `universe` (a vendor's catalog classes), by the catalog's DRA devices.
fn reach(
    selector: &Selector,
    universe: &BTreeSet<usize>,
    policy: &gpu_admission_policy::Policy,
) -> Result<Reach, String> {
    let classes = |keep: &dyn Fn(&gpu_admission_policy::GpuClass) -> bool| -> BTreeSet<usize> {
        universe
            .iter()
            .copied()
            .filter(|i| keep(&policy.classes[*i]))
            .collect()
    };
    let dra = |c: &gpu_admission_policy::GpuClass| c.dra.clone();
    Ok(match selector {
        // A device-type or numeric attribute narrows the driver's devices, not their product.
        Selector::Driver(d) | Selector::Attribute(d, _) => Reach {
            classes: classes(&|c| dra(c).is_some_and(|x| &x.driver == d)),
            other: true,
        },
        Selector::Product(d, attribute, names) => {
            let product_attribute = policy
                .classes
                .iter()
                .any(|c| dra(c).is_some_and(|x| &x.driver == d && &x.attribute == attribute));
            if !product_attribute {
                return Err(format!(
                    "attribute {attribute} of driver {d} is not a product attribute of the catalog"
                ));
            }
            let known = |n: &String| {
                policy
                    .classes
                    .iter()
                    .any(|c| dra(c).is_some_and(|x| &x.driver == d && x.product_names.contains(n)))
            };
            Reach {
                classes: classes(&|c| {
                    dra(c).is_some_and(|x| {
                        &x.driver == d && names.iter().any(|n| x.product_names.contains(n))
                    })
                }),
                other: !names.iter().all(known),
            }
        }
        Selector::Memory(_, cmp, gib) => Reach {
            classes: match cmp {
                Compare::AtLeast | Compare::Above => classes(&|c| c.memory_gib * 1.1 >= *gib),
                Compare::AtMost | Compare::Below | Compare::Equal => universe.clone(),
            },
            other: true,
        },
        Selector::And(a, b) => reach(a, universe, policy)?.and(reach(b, universe, policy)?),
        Selector::Or(a, b) => reach(a, universe, policy)?.or(reach(b, universe, policy)?),
    })
}

/// One request (or `firstAvailable` alternative): how messages name it (`request gpu`), its DeviceClass and
/// CEL selectors.
struct Ask<'a> {
    label: String,
    device_class: &'a str,
    selectors: Vec<&'a str>,
}

/// The CEL expressions of a request's selectors.
fn cels(s: &Option<Vec<k8s_openapi::api::resource::v1::DeviceSelector>>) -> Vec<&str> {
    s.iter()
        .flatten()
        .filter_map(|s| s.cel.as_ref().map(|c| c.expression.as_str()))
        .collect()
}

fn asks(spec: &ResourceClaimSpec) -> Vec<Ask<'_>> {
    let mut out = Vec::new();
    for r in spec
        .devices
        .iter()
        .flat_map(|d| d.requests.iter().flatten())
    {
        if let Some(e) = &r.exactly {
            out.push(Ask {
                label: format!("request {}", r.name),
                device_class: &e.device_class_name,
                selectors: cels(&e.selectors),
            });
        }
        for s in r.first_available.iter().flatten() {
            out.push(Ask {
                label: format!("request {}/{}", r.name, s.name),
                device_class: &s.device_class_name,
                selectors: cels(&s.selectors),
            });
        }
    }
    out
}

/// The violations of a claim or template: requests that could be allocated GPUs outside the tier, and
/// selectors that cannot be decided.
pub fn violations(object: &DynamicObject, kind: ClaimKind, at: &Where<'_>) -> Vec<Violation> {
    let path = match kind {
        ClaimKind::Claim => "spec.devices",
        ClaimKind::Template => "spec.spec.devices",
    };
    let violation = |reason, what: String| Violation {
        reason,
        path: path.to_string(),
        what,
    };
    let Some(spec) = claim_spec(object, kind) else {
        return vec![violation(
            Reason::Undecidable,
            "cannot be read as a resource.k8s.io/v1 claim (every request says `exactly` or `firstAvailable`)".into(),
        )];
    };
    let (rules, snapshot) = (at.rules, at.policy);
    if !tier_bound::restricts(rules, snapshot.catalog()) {
        return Vec::new();
    }
    let Some(policy) = snapshot.policy.as_deref() else {
        // No policy, no tier rules: `validate_pod::check` never gets here; never an allowance all the same.
        return vec![violation(
            Reason::Undecidable,
            "the policy is not known".into(),
        )];
    };
    asks(&spec)
        .iter()
        .filter_map(|ask| request_violation(ask, at, policy))
        .map(|(reason, what)| violation(reason, what))
        .collect()
}

/// The DeviceClasses a Pod asks devices of by extended resource, with no claim (see
/// `GpuAsk::implicit_device_classes`), held like a claim's requests: at the Pod, as the claim the scheduler
/// makes for them exists only once the Pod is bound.
pub fn implicit_class_violations(classes: &[String], at: &Where<'_>) -> Vec<(Reason, String)> {
    let Some(policy) = at.policy.policy.as_deref() else {
        return Vec::new();
    };
    if !tier_bound::restricts(at.rules, at.policy.catalog()) {
        return Vec::new();
    }
    classes
        .iter()
        .filter_map(|class| {
            let ask = Ask {
                label: "an extended resource backed by a DeviceClass".to_string(),
                device_class: class,
                selectors: Vec::new(),
            };
            request_violation(&ask, at, policy)
        })
        .collect()
}

/// What a request's DeviceClass can allocate before its own selectors narrow it: the classes of the catalog
/// (indices) it reaches, or `None` for no GPU. The cluster's class of that name, when the cluster holds one,
/// is judged by its selectors whatever its name (a name the policy calls `notGpu`, or a catalog class's, is
/// chosen by whoever may create DeviceClasses); a class the cluster does not hold is taken at its name.
fn class_reach(
    device_class: &str,
    at: &Where<'_>,
    policy: &gpu_admission_policy::Policy,
) -> Option<Result<(BTreeSet<usize>, Reach), String>> {
    let resources = &at.policy.gpu_resources;
    let (vendor, selectors) = match at.facts.claim_templates.device_class(device_class) {
        Some(class) => match resources.judge(&class) {
            Selects::NotGpus => return None,
            Selects::Undecidable(why) => {
                return Some(Err(format!(
                    "DeviceClass {device_class} selects devices by a CEL selector gpu-admission cannot decide: {why}"
                )));
            }
            Selects::Gpus { vendor, selectors } => (vendor, selectors),
        },
        None => {
            if let Some(i) = device_classes::class_of(policy, device_class) {
                let only = Reach {
                    classes: [i].into(),
                    other: false,
                };
                return Some(Ok((only.classes.clone(), only)));
            }
            (resources.gpu_device_class(device_class)?.vendor, Vec::new())
        }
    };
    let universe: BTreeSet<usize> = (0..policy.classes.len())
        .filter(|i| vendor.is_none_or(|v| policy.classes[*i].vendor == v))
        .collect();
    let mut reached = Reach {
        classes: universe.clone(),
        other: true,
    };
    for s in &selectors {
        match reach(s, &universe, policy) {
            Ok(r) => reached = reached.and(r),
            Err(why) => {
                return Some(Err(format!(
                    "DeviceClass {device_class} selects devices gpu-admission cannot tell apart: {why}"
                )));
            }
        }
    }
    Some(Ok((universe, reached)))
}

/// A request (or `firstAvailable` alternative, or implicit extended resource) that could be allocated GPUs
/// outside the tier, or whose selectors cannot be decided.
fn request_violation(
    ask: &Ask<'_>,
    at: &Where<'_>,
    policy: &gpu_admission_policy::Policy,
) -> Option<(Reason, String)> {
    let (universe, mut reached) = match class_reach(ask.device_class, at, policy)? {
        Ok(r) => r,
        Err(why) => return Some((Reason::Undecidable, format!("{}: {why}", ask.label))),
    };
    // A catalog class's devices are all of one class: its request's selectors can only narrow them.
    let narrows = reached.other || reached.classes.len() > 1;
    for text in ask.selectors.iter().filter(|_| narrows) {
        match cel::parse(text).and_then(|s| reach(&s, &universe, policy)) {
            Ok(r) => reached = reached.and(r),
            Err(why) => {
                return Some((
                    Reason::Undecidable,
                    format!(
                        "{} selects {} devices by a CEL selector gpu-admission cannot decide: {text:?} ({why}); \
                         it decides device.driver ==, the product attribute == or in [...], memory comparisons, \
                         && || and parentheses",
                        ask.label, ask.device_class
                    ),
                ));
            }
        }
    }
    let outside: Vec<&str> = reached
        .classes
        .iter()
        .map(|i| policy.classes[*i].name.as_str())
        .filter(|c| !at.rules.allows(c))
        .collect();
    if !reached.other && outside.is_empty() {
        return None;
    }
    let mut could = outside.join(", ");
    if reached.other {
        if !could.is_empty() {
            could.push_str(" and ");
        }
        could.push_str("GPUs of no catalog class");
    }
    Some((
        Reason::DeviceClassOutsideTier,
        format!(
            "{} ({}) could be allocated devices of {could}",
            ask.label, ask.device_class
        ),
    ))
}

/// A claim or claim template CREATE asking for a GPU DeviceClass (as [`asks_for_gpus`] tells one) with
/// `adminAccess: true`: devices other tenants' Pods may be using, which needs the requester's
/// [`crate::authority::Permission::AdminAccess`] in every enforcement mode (`validate_pod::admit`). A claim's
/// spec is immutable, so only its creation asks.
pub fn asks_gpu_admin_access(
    req: &AdmissionRequest<DynamicObject>,
    policy: &crate::policy::PolicySnapshot,
    cluster: &dyn crate::pod::gpu_resources::ClaimTemplates,
) -> bool {
    let (Some(kind), Some(object)) = (claim_kind(req), req.object.as_ref()) else {
        return false;
    };
    if req.operation != kube_core::admission::Operation::Create {
        return false;
    }
    claim_spec(object, kind).is_some_and(|spec| {
        spec.devices
            .iter()
            .flat_map(|d| d.requests.iter().flatten())
            .filter_map(|r| r.exactly.as_ref())
            .any(|e| {
                e.admin_access == Some(true)
                    && policy
                        .gpu_resources
                        .device_class_gpus(&e.device_class_name, cluster)
                        .is_some()
            })
    })
}

/// Does a claim ask for GPUs at all (any request on a GPU DeviceClass)? For namespaces without a tier under
/// `untieredNamespaces: Deny`.
pub fn asks_for_gpus(
    object: &DynamicObject,
    kind: ClaimKind,
    at_policy: &crate::policy::PolicySnapshot,
    cluster: &dyn crate::pod::gpu_resources::ClaimTemplates,
) -> bool {
    match claim_spec(object, kind) {
        None => true,
        Some(spec) => asks(&spec).iter().any(|a| {
            at_policy
                .gpu_resources
                .device_class_gpus(a.device_class, cluster)
                .is_some()
        }),
    }
}

/// The DeviceClasses of the tier's classes, for the denial message.
pub fn allowed_device_classes(
    rules: &crate::policy::TierRules<'_>,
    snapshot: &crate::policy::PolicySnapshot,
) -> String {
    let Some(policy) = snapshot.policy.as_deref() else {
        return String::new();
    };
    let names: Vec<String> = policy
        .classes
        .iter()
        .filter(|c| c.dra.is_some() && rules.allows(&c.name))
        .map(|c| device_classes::device_class_name(&c.name))
        .collect();
    if names.is_empty() {
        "no DeviceClass".to_string()
    } else {
        names.join(", ")
    }
}

pub mod place;

#[cfg(test)]
mod tests;
