//! Claims and templates against their tier, through `/validate-pod`'s decision, on the shipped policy.
use std::sync::Arc;

use gpu_admission_policy::EnforcementMode;
use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;
use serde_json::{Value, json};

use crate::admission::validate_pod::{self, Check, Reason};
use crate::authority::Grants;
use crate::facts::Facts;
use crate::pod::gpu_resources::NoClaimTemplates;
use crate::policy::PolicySnapshot;
use crate::tier_bound::NoNodes;

fn snapshot() -> PolicySnapshot {
    let mut p =
        PolicySnapshot::from_policy(Arc::new(gpu_admission_policy::embedded_default().unwrap()));
    p.mode = EnforcementMode::Enforce;
    p
}

/// A request on `class` with these CEL selectors, as a claim (`template: false`) or a template.
fn review(ns: &str, template: bool, requests: Value, op: &str) -> AdmissionRequest<DynamicObject> {
    let spec = json!({"devices": {"requests": requests}});
    let (kind, object) = if template {
        (
            "ResourceClaimTemplate",
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": ns}, "spec": {"spec": spec}}),
        )
    } else {
        (
            "ResourceClaim",
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": ns}, "spec": spec}),
        )
    };
    serde_json::from_value(json!({
        "uid": "u", "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "x"},
        "namespace": ns, "operation": op, "userInfo": {"username": "alice"},
        "object": object, "oldObject": null
    }))
    .unwrap()
}

fn exactly(class: &str, cels: &[&str]) -> Value {
    let selectors: Vec<Value> = cels
        .iter()
        .map(|c| json!({"cel": {"expression": c}}))
        .collect();
    json!([{"name": "gpu", "exactly": {"deviceClassName": class, "selectors": selectors}}])
}

fn decide(req: &AdmissionRequest<DynamicObject>) -> (Check, Option<String>) {
    decide_in(&snapshot(), req)
}

fn decide_in(p: &PolicySnapshot, req: &AdmissionRequest<DynamicObject>) -> (Check, Option<String>) {
    let tier_of = |ns: &str| Some(ns.to_string());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let (check, verdict) = validate_pod::decide(req, p, &facts);
    (check, verdict.denied)
}

fn reasons(c: &Check) -> Vec<Reason> {
    match c {
        Check::Violations { violations, .. } => violations.iter().map(|v| v.reason).collect(),
        _ => Vec::new(),
    }
}

const PRODUCT: &str = "device.attributes['gpu.nvidia.com'].productName";

#[test]
fn a_bronze_claim_that_could_get_h100_is_denied_naming_the_allowed_classes() {
    for template in [false, true] {
        for requests in [
            exactly("gpu.nvidia.com", &[]),
            exactly("h100-80gb.gpu-admission.io", &[]),
            exactly(
                "gpu.nvidia.com",
                &[&format!("{PRODUCT} == 'NVIDIA H100 80GB HBM3'")],
            ),
            exactly(
                "mig.nvidia.com",
                &[&format!(
                    "{PRODUCT} in ['NVIDIA L4', 'NVIDIA H100 80GB HBM3']"
                )],
            ),
            // Memory at most 24 GiB: a MIG slice of an H100 is that small too.
            exactly(
                "mig.nvidia.com",
                &["device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('24Gi')) <= 0"],
            ),
            // A product the catalog does not know is a GPU of no class.
            exactly(
                "gpu.nvidia.com",
                &[&format!("{PRODUCT} == 'NVIDIA H100 NVL'")],
            ),
            // Any other name under NVIDIA's domain is a GPU DeviceClass.
            exactly("vgpu.nvidia.com", &[]),
            // A firstAvailable alternative counts like any request.
            json!([{"name": "gpu", "firstAvailable": [
                {"name": "l4", "deviceClassName": "l4-24gb.gpu-admission.io"},
                {"name": "any", "deviceClassName": "gpu.nvidia.com"}]}]),
        ] {
            let req = review("bronze", template, requests.clone(), "CREATE");
            let (check, denied) = decide(&req);
            assert_eq!(
                reasons(&check),
                [Reason::DeviceClassOutsideTier],
                "{requests}"
            );
            let denied = denied.expect("denied in Enforce");
            assert!(
                denied.contains("L4-24GB")
                    && denied.contains("DeviceClasses l4-24gb.gpu-admission.io"),
                "{denied}"
            );
        }
    }
}

#[test]
fn claims_within_the_tier_are_allowed() {
    for (tier, requests) in [
        ("bronze", exactly("l4-24gb.gpu-admission.io", &[])),
        // A catalog class's own selectors only narrow it.
        (
            "bronze",
            exactly(
                "l4-24gb.gpu-admission.io",
                &["device.attributes['x'].y.startsWith('z')"],
            ),
        ),
        (
            "bronze",
            exactly("gpu.nvidia.com", &[&format!("{PRODUCT} == 'NVIDIA L4'")]),
        ),
        (
            "bronze",
            exactly(
                "gpu.nvidia.com",
                &[
                    "device.driver == 'gpu.nvidia.com'",
                    &format!("({PRODUCT} == 'NVIDIA L4' || {PRODUCT} in ['NVIDIA L4'])"),
                ],
            ),
        ),
        // At least 60 GiB on NVIDIA: the H200, H100 and A100-80GB, all gold; and the product pins it.
        (
            "gold",
            exactly(
                "gpu.nvidia.com",
                &[&format!(
                    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('60Gi')) >= 0 && {PRODUCT} in ['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB']"
                )],
            ),
        ),
        ("gold", exactly("h100-80gb.gpu-admission.io", &[])),
        // Not GPUs: a NIC, NVIDIA's IMEX channels.
        ("bronze", exactly("sriov.example.com", &["anything at all"])),
        (
            "bronze",
            exactly("compute-domain-default-channel.nvidia.com", &[]),
        ),
        // Platinum allows every NVIDIA class? No: but a tier allowing every class has nothing to breach.
    ] {
        let req = review(tier, false, requests.clone(), "CREATE");
        let (check, denied) = decide(&req);
        assert_eq!(denied, None, "{tier}: {requests}");
        assert!(
            matches!(check, Check::Allowed(_)),
            "{tier}: {requests}: {check:?}"
        );
    }
}

#[test]
fn selectors_outside_the_grammar_are_undecidable_and_denied() {
    for cel in [
        format!("{PRODUCT}.startsWith('NVIDIA L')"),
        format!("{PRODUCT} != 'NVIDIA H100 80GB HBM3'"),
        "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'".to_string(),
        "true".to_string(),
    ] {
        let req = review("bronze", true, exactly("gpu.nvidia.com", &[&cel]), "CREATE");
        let (check, denied) = decide(&req);
        assert_eq!(reasons(&check), [Reason::Undecidable], "{cel}");
        assert!(denied.unwrap().contains("cannot decide"), "{cel}");
    }
    // A v1beta1-shaped request (deviceClassName at its top) asks for nothing a v1 reader sees: undecidable.
    let beta = review(
        "bronze",
        false,
        json!([{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]),
        "CREATE",
    );
    assert_eq!(reasons(&decide(&beta).0), [Reason::Undecidable]);
    // Not a claim at all.
    let mut req = review("bronze", false, json!([]), "CREATE");
    req.object.as_mut().unwrap().data["spec"] = json!({"devices": "nope"});
    assert_eq!(reasons(&decide(&req).0), [Reason::Undecidable]);
}

#[test]
fn memory_lower_bounds_rule_out_smaller_classes_and_nothing_else() {
    // At least 40 GiB with a product pin to L4 or L40S: only the L40S (48 GiB) is left, outside bronze.
    let cel = format!(
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0 && {PRODUCT} in ['NVIDIA L4', 'NVIDIA L40S']"
    );
    let (check, denied) = decide(&review(
        "bronze",
        false,
        exactly("gpu.nvidia.com", &[&cel]),
        "CREATE",
    ));
    assert_eq!(reasons(&check), [Reason::DeviceClassOutsideTier]);
    let denied = denied.unwrap();
    assert!(
        denied.contains("devices of L40S-48GB") && !denied.contains("devices of L4-24GB,"),
        "{denied}"
    );
    // The same in silver (L40S allowed): allowed.
    let (_, denied) = decide(&review(
        "silver",
        false,
        exactly("gpu.nvidia.com", &[&cel]),
        "CREATE",
    ));
    assert_eq!(denied, None);
}

#[test]
fn each_rendered_device_class_selector_reaches_exactly_its_class() {
    let p = gpu_admission_policy::embedded_default().unwrap();
    let all: std::collections::BTreeSet<usize> = (0..p.classes.len()).collect();
    for (i, c) in p.classes.iter().enumerate() {
        let text = gpu_admission_policy::device_classes::selector(c.dra.as_ref().unwrap());
        let parsed = super::cel::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let r = super::reach(&parsed, &all, &p).unwrap();
        assert_eq!((r.classes, r.other), ([i].into(), false), "{text}");
    }
}

#[test]
fn untiered_namespaces_under_deny_refuse_gpu_claims_only() {
    let mut policy = gpu_admission_policy::embedded_default().unwrap();
    policy.untiered_namespaces = crate::policy::UntieredNamespaces::Deny;
    let mut p = PolicySnapshot::from_policy(Arc::new(policy));
    p.mode = EnforcementMode::Enforce;
    let no_tier = |_: &str| None;
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &no_tier,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let gpu = review(
        "scratch",
        true,
        exactly("l4-24gb.gpu-admission.io", &[]),
        "CREATE",
    );
    let (check, verdict) = validate_pod::decide(&gpu, &p, &facts);
    assert_eq!(reasons(&check), [Reason::UntieredNamespace]);
    assert!(verdict.denied.is_some());
    let nic = review(
        "scratch",
        false,
        exactly("sriov.example.com", &[]),
        "CREATE",
    );
    let (check, verdict) = validate_pod::decide(&nic, &p, &facts);
    assert!(matches!(check, Check::NotOurs(_)), "{check:?}");
    assert!(verdict.denied.is_none());
}

#[test]
fn a_requester_rbac_lets_run_outside_the_tier_is_allowed_only_there() {
    let p = snapshot();
    let tier_of = |ns: &str| Some(ns.to_string());
    let req = review(
        "bronze",
        false,
        exactly("h100-80gb.gpu-admission.io", &[]),
        "CREATE",
    );
    let decide_with = |grants: &Grants| {
        let facts = Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &NoNodes,
            grants,
        };
        validate_pod::decide(&req, &p, &facts).0
    };
    use crate::authority::Permission;
    let exempt_bronze = Grants::new([Permission::Exempt("bronze".into())]);
    assert_eq!(
        decide_with(&exempt_bronze),
        Check::Allowed(validate_pod::Allowance::Exempt)
    );
    let exempt_gold = Grants::new([Permission::Exempt("gold".into())]);
    assert_eq!(
        reasons(&decide_with(&exempt_gold)),
        [Reason::DeviceClassOutsideTier]
    );
}

/// A device as a driver publishes it: its driver, product name, memory (GiB) and, when the catalog knows its
/// product, its class.
struct Device {
    driver: &'static str,
    product: String,
    memory: f64,
    class: Option<String>,
}

/// What a selector matches on one device, evaluated concretely (a missing attribute is no match).
fn matches(s: &super::cel::Selector, d: &Device) -> bool {
    use super::cel::{Compare, Selector};
    match s {
        Selector::Driver(x) => d.driver == x,
        // The device type or an index: some device of the driver may carry it.
        Selector::Attribute(x, _) => d.driver == x,
        Selector::Product(x, attribute, names) => {
            d.driver == x && attribute == "productName" && names.contains(&d.product)
        }
        Selector::Memory(x, cmp, q) => {
            d.driver == x
                && match cmp {
                    Compare::AtLeast => d.memory >= *q,
                    Compare::Above => d.memory > *q,
                    Compare::AtMost => d.memory <= *q,
                    Compare::Below => d.memory < *q,
                    Compare::Equal => d.memory == *q,
                }
        }
        Selector::And(a, b) => matches(a, d) && matches(b, d),
        Selector::Or(a, b) => matches(a, d) || matches(b, d),
    }
}

/// Soundness of the claim check against concrete devices: whatever selector of the grammar a claim on
/// `gpu.nvidia.com` carries, when the check finds no violation in a tier, every NVIDIA device the selector
/// matches (whole GPUs of every catalog class, their partitions, GPUs the catalog does not know) is of a
/// class of the tier. Random selectors from a fixed seed (a property, not a timing).
#[test]
fn an_admitted_claim_matches_only_devices_of_its_tier() {
    let policy = gpu_admission_policy::embedded_default().unwrap();
    let mut devices = Vec::new();
    for c in &policy.classes {
        let Some(dra) = &c.dra else { continue };
        for product in &dra.product_names {
            let mut memories = vec![c.memory_gib, c.memory_gib * 0.94];
            memories.extend(
                [5.0, 10.0, 20.0, 40.0]
                    .iter()
                    .filter(|m| **m <= c.memory_gib),
            );
            for memory in memories {
                devices.push(Device {
                    driver: if c.vendor == gpu_admission_policy::Vendor::Amd {
                        "gpu.amd.com"
                    } else {
                        "gpu.nvidia.com"
                    },
                    product: product.clone(),
                    memory,
                    class: Some(c.name.clone()),
                });
            }
        }
    }
    for (product, memory) in [
        ("NVIDIA H100 NVL", 94.0),
        ("Tesla T4", 16.0),
        ("NVIDIA B200", 180.0),
    ] {
        devices.push(Device {
            driver: "gpu.nvidia.com",
            product: product.into(),
            memory,
            class: None,
        });
    }
    let products: Vec<String> = devices
        .iter()
        .map(|d| d.product.clone())
        .chain(["NVIDIA L4 (unknown)".to_string()])
        .collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    fn atom(next: &mut dyn FnMut(usize) -> usize, products: &[String]) -> String {
        let driver = ["gpu.nvidia.com", "gpu.amd.com"][next(2)];
        match next(4) {
            0 => format!("device.driver == '{driver}'"),
            1 => format!(
                "device.attributes['{driver}'].productName == '{}'",
                products[next(products.len())]
            ),
            2 => {
                let names: Vec<String> = (0..1 + next(3))
                    .map(|_| format!("'{}'", products[next(products.len())]))
                    .collect();
                format!(
                    "device.attributes['{driver}'].productName in [{}]",
                    names.join(", ")
                )
            }
            _ => format!(
                "device.capacity['{driver}'].memory.compareTo(quantity('{}Gi')) {} 0",
                [8, 20, 24, 40, 48, 80, 100, 150][next(8)],
                [">=", ">", "<=", "<", "=="][next(5)]
            ),
        }
    }
    fn expr(next: &mut dyn FnMut(usize) -> usize, products: &[String], depth: u32) -> String {
        if depth == 0 || next(3) == 0 {
            return atom(next, products);
        }
        let op = ["&&", "||"][next(2)];
        format!(
            "({} {op} {})",
            expr(next, products, depth - 1),
            expr(next, products, depth - 1)
        )
    }
    let (mut admitted, mut checked) = (0, 0);
    let snapshot = snapshot();
    for _ in 0..3000 {
        let cel = expr(&mut next, &products, 3);
        let parsed = super::cel::parse(&cel).unwrap_or_else(|e| panic!("{cel}: {e}"));
        for tier in ["bronze", "silver", "gold"] {
            let req = review(tier, false, exactly("gpu.nvidia.com", &[&cel]), "CREATE");
            if decide_in(&snapshot, &req).1.is_some() {
                continue;
            }
            admitted += 1;
            let allowed = policy.tiers[policy.tier_index(tier).unwrap()]
                .allowed
                .clone();
            for d in devices.iter().filter(|d| d.driver == "gpu.nvidia.com") {
                if matches(&parsed, d) {
                    checked += 1;
                    let class = d.class.as_deref().and_then(|c| policy.class_index(c));
                    assert!(
                        class.is_some_and(|i| allowed[i]),
                        "{tier} admitted {cel:?}, which matches {} ({:?}, {} GiB)",
                        d.product,
                        d.class,
                        d.memory
                    );
                }
            }
        }
    }
    // The property is not vacuous: some claims were admitted and matched devices.
    println!("{admitted} claims admitted, {checked} device matches checked");
    assert!(
        admitted > 50 && checked > 50,
        "{admitted} admitted, {checked} device matches"
    );
}

/// The cluster's DeviceClasses, as the frontend's watch holds them.
struct Classes(Vec<k8s_openapi::api::resource::v1::DeviceClass>);

impl crate::pod::gpu_resources::ClaimTemplates for Classes {
    fn template(
        &self,
        _: &str,
        _: &str,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaimTemplate> {
        None
    }

    fn device_class(&self, name: &str) -> Option<k8s_openapi::api::resource::v1::DeviceClass> {
        self.0
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    fn device_class_for_resource(
        &self,
        resource: &str,
    ) -> Option<k8s_openapi::api::resource::v1::DeviceClass> {
        self.0
            .iter()
            .find(|c| crate::dra::device_class::names_resource(c, resource))
            .cloned()
    }
}

/// Admin-made classes the policy does not name: H100s and L4s by product, NICs, one the grammar cannot read.
fn cluster_classes() -> Classes {
    let class = |name: &str, cel: &str, resource: Option<&str>| {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": cel}}], "extendedResourceName": resource}
        }))
        .unwrap()
    };
    Classes(vec![
        class(
            "h100.example.com",
            &format!("device.driver == 'gpu.nvidia.com' && {PRODUCT} == 'NVIDIA H100 80GB HBM3'"),
            Some("example.com/h100"),
        ),
        class(
            "l4.example.com",
            &format!("{PRODUCT} == 'NVIDIA L4'"),
            Some("example.com/l4"),
        ),
        class(
            "nic.example.com",
            "device.driver == 'sriov.example.com'",
            None,
        ),
        class(
            "odd.example.com",
            "device.attributes['gpu.nvidia.com'].index % 2 == 0",
            None,
        ),
    ])
}

fn decide_with(
    classes: &Classes,
    req: &AdmissionRequest<DynamicObject>,
) -> (Check, Option<String>) {
    let tier_of = |ns: &str| Some(ns.to_string());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: classes,
        nodes: &NoNodes,
        grants: &grants,
    };
    let (check, verdict) = validate_pod::decide(req, &snapshot(), &facts);
    (check, verdict.denied)
}

/// A DeviceClass is a GPU class by what it selects: an admin's class selecting H100s holds bronze's claims
/// to the tier like the vendor's own class; a NIC class does not; a selector outside the grammar is
/// undecidable.
#[test]
fn a_cluster_device_class_is_judged_by_what_it_selects() {
    let classes = cluster_classes();
    let (check, denied) = decide_with(
        &classes,
        &review("bronze", false, exactly("h100.example.com", &[]), "CREATE"),
    );
    assert_eq!(reasons(&check), [Reason::DeviceClassOutsideTier]);
    let denied = denied.unwrap();
    assert!(
        denied.contains("could be allocated devices of H100-80GB")
            && denied.contains("l4-24gb.gpu-admission.io"),
        "{denied}"
    );
    // Gold may use H100s through the same class.
    let (check, denied) = decide_with(
        &classes,
        &review("gold", true, exactly("h100.example.com", &[]), "CREATE"),
    );
    assert!(matches!(check, Check::Allowed(_)), "{check:?} {denied:?}");
    // Bronze's L4s through an admin class: within the tier.
    let (check, _) = decide_with(
        &classes,
        &review("bronze", false, exactly("l4.example.com", &[]), "CREATE"),
    );
    assert!(matches!(check, Check::Allowed(_)), "{check:?}");
    let (check, _) = decide_with(
        &classes,
        &review("bronze", false, exactly("nic.example.com", &[]), "CREATE"),
    );
    assert!(matches!(check, Check::Allowed(_)), "{check:?}");
    let (check, denied) = decide_with(
        &classes,
        &review("bronze", false, exactly("odd.example.com", &[]), "CREATE"),
    );
    assert_eq!(reasons(&check), [Reason::Undecidable]);
    assert!(denied.unwrap().contains("index % 2"));
    // Without the cluster's classes (DRA not served), an unknown name is no GPU class, as before.
    let (check, _) = decide(&review(
        "bronze",
        false,
        exactly("h100.example.com", &[]),
        "CREATE",
    ));
    assert!(matches!(check, Check::Allowed(_)), "{check:?}");
}

fn pod_review(ns: &str, resources: Value, node_selector: Value) -> AdmissionRequest<DynamicObject> {
    serde_json::from_value(json!({
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns, "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
            "spec": {"nodeSelector": node_selector,
                     "containers": [{"name": "c", "resources": {"limits": resources}}]}},
        "oldObject": null
    }))
    .unwrap()
}

/// A Pod asking for an admin class's devices with no claim (`deviceclass.resource.kubernetes.io/<class>`,
/// or the class's `extendedResourceName`) is decided at its CREATE, not first at PreBind: bronze asking for
/// H100s this way is denied with the tier's DeviceClasses named; bronze's L4s this way are admitted.
#[test]
fn a_pod_asking_for_a_class_by_extended_resource_is_held_at_its_create() {
    let classes = cluster_classes();
    let l4 = json!({"gpu.nvidia.com/class": "L4-24GB"});
    for resource in [
        "deviceclass.resource.kubernetes.io/h100.example.com",
        "example.com/h100",
    ] {
        let (check, denied) = decide_with(
            &classes,
            &pod_review("bronze", json!({resource: 1}), l4.clone()),
        );
        assert_eq!(
            reasons(&check),
            [Reason::DeviceClassOutsideTier],
            "{resource}"
        );
        let denied = denied.unwrap();
        assert!(
            denied.contains("h100.example.com")
                && denied.contains("DeviceClasses l4-24gb.gpu-admission.io"),
            "{denied}"
        );
    }
    for resource in [
        "deviceclass.resource.kubernetes.io/l4.example.com",
        "example.com/l4",
    ] {
        let (check, denied) = decide_with(
            &classes,
            &pod_review("bronze", json!({resource: 1}), l4.clone()),
        );
        assert!(
            matches!(check, Check::Allowed(_)),
            "{resource}: {check:?} {denied:?}"
        );
        // The same Pod without its tier bound is a GPU Pod now, held to the bound like any other.
        let (check, _) = decide_with(
            &classes,
            &pod_review("bronze", json!({resource: 1}), json!(null)),
        );
        assert_eq!(reasons(&check), [Reason::NotBoundToTier], "{resource}");
    }
    // A NIC class's extended resource is not a GPU.
    let nic = pod_review(
        "bronze",
        json!({"deviceclass.resource.kubernetes.io/nic.example.com": 1}),
        json!(null),
    );
    assert!(matches!(decide_with(&classes, &nic).0, Check::Allowed(_)));
}

/// NVIDIA's quickstart claim (`gpu.nvidia.com`, no selector) is held to each tier by `/mutate-claim`: one
/// selector naming the tier's products, after which `/validate-pod` admits it; a request that pins a class
/// outside the tier is left as asked (and refused by validation); a catalog class within the tier needs
/// nothing.
#[test]
fn the_quickstart_claim_is_held_to_each_tier_and_then_admitted() {
    use crate::admission::mutate_claim::{self, Outcome, Unchanged};
    let p = snapshot();
    let tier_of = |ns: &str| Some(ns.to_string());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let placed = |ns: &str, template: bool, requests: Value| {
        let req = review(ns, template, requests, "CREATE");
        let (outcome, answer) = mutate_claim::admit(&req, &p, &facts);
        let mut object = serde_json::to_value(req.object.as_ref().unwrap()).unwrap();
        let ops: json_patch::Patch =
            serde_json::from_slice(answer.patch.as_bytes()).unwrap_or_default();
        json_patch::patch(&mut object, &ops).unwrap();
        let mut after = req.clone();
        after.object = Some(serde_json::from_value(object).unwrap());
        (outcome, answer.warnings, decide_in(&p, &after).1)
    };
    let quickstart = json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]);
    // Unplaced, bronze's quickstart claim is refused.
    assert!(
        decide(&review("bronze", false, quickstart.clone(), "CREATE"))
            .1
            .is_some()
    );
    for (tier, template) in [("bronze", false), ("bronze", true), ("gold", false)] {
        let (outcome, warnings, denied) = placed(tier, template, quickstart.clone());
        let Outcome::Placed { placed, .. } = &outcome else {
            panic!("{tier}: {outcome:?}");
        };
        assert_eq!(denied, None, "{tier}: placed, then admitted");
        let rules = p.tier_rules(tier, tier).unwrap();
        assert!(
            placed[0].classes.iter().all(|c| rules.allows(c)),
            "{placed:?}"
        );
        assert!(
            warnings[0].contains(&format!("held to tier {tier}")),
            "{warnings:?}"
        );
    }
    // The tier's product names, L4 only, for bronze.
    let (outcome, ..) = placed("bronze", false, quickstart.clone());
    assert!(matches!(&outcome, Outcome::Placed { placed, .. } if placed[0].classes == ["L4-24GB"]));
    // A firstAvailable alternative on the vendor class is held too; its label names the alternative.
    let prioritized = json!([{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2}]}]);
    let (outcome, _, denied) = placed("bronze", false, prioritized);
    assert!(
        matches!(&outcome, Outcome::Placed { placed, .. } if placed[0].label == "request gpu/big")
    );
    assert_eq!(denied, None);
    // Pinned outside the tier: nothing bronze may have, left as asked and refused.
    let h100 = exactly("h100-80gb.gpu-admission.io", &[]);
    let (outcome, _, denied) = placed("bronze", false, h100);
    assert_eq!(outcome, Outcome::Unchanged(Unchanged::NothingToPlace));
    assert!(denied.is_some());
    // A catalog class of the tier: nothing to add.
    let (outcome, _, denied) = placed("bronze", false, exactly("l4-24gb.gpu-admission.io", &[]));
    assert_eq!(outcome, Outcome::Unchanged(Unchanged::NothingToPlace));
    assert_eq!(denied, None);
}

/// NVIDIA's dra-driver-gpu chart's DeviceClasses, as the GPU Operator renders them
/// (`nvidia-gpu-operator__gpucluster-dra-driver-full-spec.yaml` of the shared corpus).
fn nvidia_chart_classes() -> Vec<k8s_openapi::api::resource::v1::DeviceClass> {
    let class = |name: &str, cel: &str| {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": cel}}]}
        }))
        .unwrap()
    };
    let gpu = |ty: &str| {
        format!(
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{ty}'"
        )
    };
    vec![
        class("gpu.nvidia.com", &gpu("gpu")),
        class("mig.nvidia.com", &gpu("mig")),
        class("vfio.gpu.nvidia.com", &gpu("vfio")),
        class(
            "compute-domain-daemon.nvidia.com",
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
        ),
        class(
            "compute-domain-default-channel.nvidia.com",
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
        ),
    ]
}

/// With the vendor's real classes in the cluster, judged by their selectors: a claim on `gpu.nvidia.com`
/// narrowed to L4 by product is bronze's; unnarrowed it could reach every NVIDIA class (outside bronze, not
/// undecidable); gold may take H100s through it; the ComputeDomain classes are no GPUs.
#[test]
fn the_vendors_real_classes_are_read_not_undecidable() {
    let classes = Classes(nvidia_chart_classes());
    let l4 = format!("{PRODUCT} == 'NVIDIA L4'");
    for class in ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"] {
        let (check, denied) = decide_with(
            &classes,
            &review("bronze", false, exactly(class, &[&l4]), "CREATE"),
        );
        assert!(
            matches!(check, Check::Allowed(_)),
            "{class}: {check:?} {denied:?}"
        );
        let (check, _) = decide_with(
            &classes,
            &review("bronze", true, exactly(class, &[]), "CREATE"),
        );
        assert_eq!(reasons(&check), [Reason::DeviceClassOutsideTier], "{class}");
    }
    let h100 = format!("{PRODUCT} == 'NVIDIA H100 80GB HBM3'");
    let (check, denied) = decide_with(
        &classes,
        &review("gold", false, exactly("gpu.nvidia.com", &[&h100]), "CREATE"),
    );
    assert!(matches!(check, Check::Allowed(_)), "{check:?} {denied:?}");
    for class in [
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    ] {
        let (check, _) = decide_with(
            &classes,
            &review("bronze", false, exactly(class, &[]), "CREATE"),
        );
        assert!(matches!(check, Check::Allowed(_)), "{class}: {check:?}");
    }
}

/// A class the cluster holds is judged by what it selects before its name: one named like NVIDIA's
/// ComputeDomain class (which the policy's rules call `notGpu`) but selecting H100s holds bronze's claims
/// and Pods to the tier; a catalog-named class selecting H100s is no L4 class for bronze. Only a class the
/// cluster does not hold is taken at its name.
#[test]
fn a_cluster_class_is_judged_before_its_name() {
    let h100 = format!("device.driver == 'gpu.nvidia.com' && {PRODUCT} == 'NVIDIA H100 80GB HBM3'");
    let class = |name: &str, resource: Option<&str>| {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": h100}}], "extendedResourceName": resource}
        }))
        .unwrap()
    };
    let classes = Classes(vec![
        class("compute-domain-daemon.nvidia.com", Some("example.com/cd")),
        class("l4-24gb.gpu-admission.io", None),
    ]);
    for name in [
        "compute-domain-daemon.nvidia.com",
        "l4-24gb.gpu-admission.io",
    ] {
        let (check, denied) = decide_with(
            &classes,
            &review("bronze", false, exactly(name, &[]), "CREATE"),
        );
        assert_eq!(reasons(&check), [Reason::DeviceClassOutsideTier], "{name}");
        assert!(denied.unwrap().contains("H100-80GB"), "{name}");
    }
    let l4 = json!({"gpu.nvidia.com/class": "L4-24GB"});
    for resource in [
        "deviceclass.resource.kubernetes.io/compute-domain-daemon.nvidia.com",
        "example.com/cd",
    ] {
        let (check, _) = decide_with(
            &classes,
            &pod_review("bronze", json!({resource: 1}), l4.clone()),
        );
        assert_eq!(
            reasons(&check),
            [Reason::DeviceClassOutsideTier],
            "{resource}"
        );
    }
    // Not held by the cluster: by name, as before (the ComputeDomain class is no GPU, the catalog's is L4).
    let none = Classes(Vec::new());
    for name in [
        "compute-domain-daemon.nvidia.com",
        "l4-24gb.gpu-admission.io",
    ] {
        let (check, _) = decide_with(
            &none,
            &review("bronze", false, exactly(name, &[]), "CREATE"),
        );
        assert!(matches!(check, Check::Allowed(_)), "{name}: {check:?}");
    }
}
