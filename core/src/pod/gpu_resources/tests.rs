use super::*;
use serde_json::json;

#[test]
fn plain_integer_quantities_are_what_kube_quantity_reads() {
    for text in [
        "0",
        "1",
        "8",
        "00",
        "007",
        "10",
        "999999999999999",
        "1000000000000000",
        "1e3",
        "1k",
        "1.5",
        "-1",
        "+1",
        " 1",
        "",
    ] {
        let q = Quantity(text.to_string());
        let parsed: Result<ParsedQuantity, _> = (&q).try_into();
        let by_crate = parsed
            .ok()
            .and_then(|p| p.to_bytes_f64())
            .filter(|v| v.is_finite() && *v >= 0.0);
        assert_eq!(quantity_value(&q), by_crate, "{text:?}");
    }
}

fn ask(resources: serde_json::Value) -> GpuAsk {
    let spec: PodSpec =
        serde_json::from_value(json!({"containers": [{"name": "c", "resources": resources}]}))
            .unwrap();
    gpu_ask(&spec, "ns", &GpuResources::default(), &NoClaimTemplates)
}

#[test]
fn intel_millicores_next_to_i915_is_one_intel_gpu() {
    let a = ask(json!({"limits": {"gpu.intel.com/i915": 1, "gpu.intel.com/millicores": 500}}));
    assert_eq!(
        (a.count, a.vendor, a.shape.as_str()),
        (1, Some(Vendor::Intel), "devices+cores")
    );
    // memory.max is GPU memory in bytes, a share: no device of its own.
    let a = ask(json!({"limits": {"gpu.intel.com/xe": "2", "gpu.intel.com/memory.max": "8Gi"}}));
    assert_eq!(
        (a.count, a.vendor, a.memory_gib),
        (2, Some(Vendor::Intel), Some(8.0))
    );
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // Monitoring is access to every GPU of the node: a GPU.
    let a = ask(json!({"limits": {"gpu.intel.com/i915_monitoring": 1}}));
    assert_eq!((a.count, a.vendor), (1, Some(Vendor::Intel)));
}

#[test]
fn mig_slices_carry_their_memory() {
    let a = ask(json!({"limits": {"nvidia.com/mig-1g.10gb": 2}}));
    assert_eq!(
        (a.count, a.vendor, a.memory_gib, a.shape.as_str()),
        (2, Some(Vendor::Nvidia), Some(10.0), "mig")
    );
    let a = ask(json!({"limits": {"nvidia.com/mig-3g.40gb": "1"}}));
    assert_eq!((a.count, a.memory_gib), (1, Some(40.0)));
    // What the MIG pattern does not match is `gpu_admission_policy::gpu_resources`' test (`patterns`).
}

#[test]
fn every_name_under_a_gpu_vendors_domain_is_a_gpu() {
    for (name, vendor, shape) in [
        ("nvidia.com/mig-1g.10gb.shared", Some(Vendor::Nvidia), "mig"),
        ("nvidia.com/h100.shared", Some(Vendor::Nvidia), "shared"),
        ("nvidia.com/something-new", Some(Vendor::Nvidia), "devices"),
        ("amd.com/cpx_nps4", Some(Vendor::Amd), "devices"),
        (
            "gpu.intel.com/xe_monitoring",
            Some(Vendor::Intel),
            "devices",
        ),
        (
            "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
            Some(Vendor::Nvidia),
            "devices",
        ),
        (
            "deviceclass.resource.kubernetes.io/mig.nvidia.com",
            Some(Vendor::Nvidia),
            "devices",
        ),
    ] {
        let a = ask(json!({"limits": {name: 1}}));
        assert_eq!(
            (a.count, a.vendor, a.shape.as_str()),
            (1, vendor, shape),
            "{name}"
        );
    }
    let rules = GpuResources::default();
    assert_eq!(
        rules.gpu_device_class("mig.nvidia.com"),
        Some(GpuDeviceClass {
            vendor: Some(Vendor::Nvidia)
        })
    );
    assert_eq!(
        rules.gpu_device_class("compute-domain-daemon.nvidia.com"),
        None
    );
    assert_eq!(
        rules.gpu_device_class("l4-24gb.gpu-admission.io"),
        Some(GpuDeviceClass { vendor: None })
    );
    let p = gpu_admission_policy::embedded_default().unwrap();
    let rules = rules.with_catalog(&p);
    assert_eq!(
        rules.gpu_device_class("mi300x-192gb.gpu-admission.io"),
        Some(GpuDeviceClass {
            vendor: Some(Vendor::Amd)
        })
    );
}

#[test]
fn hami_memory_and_cores() {
    let a = ask(json!({"limits": {"nvidia.com/gpumem": 20000}}));
    assert_eq!(
        (a.count, a.vendor, a.shape.as_str()),
        (1, Some(Vendor::Nvidia), "memory")
    );
    let gib = a.memory_gib.unwrap();
    assert!((gib - 19.53).abs() < 0.01, "{gib}");
    let a = ask(
        json!({"limits": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": 30}}),
    );
    assert_eq!((a.count, a.shape.as_str()), (2, "devices+memory+cores"));
    let a = ask(json!({"limits": {"nvidia.com/gpu.shared": 1}}));
    assert_eq!((a.count, a.shape.as_str()), (1, "shared"));
}

#[test]
fn quantities_are_kubernetes_quantities() {
    assert_eq!(ask(json!({"limits": {"nvidia.com/gpu": "1000m"}})).count, 1);
    assert_eq!(ask(json!({"limits": {"nvidia.com/gpu": "2.0"}})).count, 2);
    let a = ask(json!({"limits": {"nvidia.com/gpu": "500m"}}));
    assert_eq!(a.count, 1);
    assert!(a.warnings[0].contains("counted as 1"), "{:?}", a.warnings);
    let a = ask(json!({"limits": {"nvidia.com/gpu": "2Ki"}}));
    assert_eq!(a.count, MAX_GPUS_PER_POD);
    assert!(
        a.warnings[0].contains("more GPUs than any node"),
        "{:?}",
        a.warnings
    );
    let a = ask(json!({"limits": {"nvidia.com/gpu": "1k"}}));
    assert_eq!(a.count, MAX_GPUS_PER_POD);
    assert_eq!(a.warnings.len(), 1);
    let a = ask(json!({"limits": {"nvidia.com/gpu": "99999999999999999999"}}));
    assert_eq!((a.count, a.warnings.len()), (MAX_GPUS_PER_POD, 1));
    let a = ask(json!({"limits": {"nvidia.com/gpu": "half", "amd.com/gpu": "1"}}));
    assert_eq!((a.count, a.vendor), (1, Some(Vendor::Amd)));
    assert!(
        a.warnings[0].contains("not a Kubernetes quantity"),
        "{:?}",
        a.warnings
    );
}

#[test]
fn not_gpus() {
    for r in [
        json!({"limits": {"example.com/gpu": 1}}),
        json!({"limits": {"nvidia.com/gpu": 0, "cpu": "2"}}),
        json!({"limits": {"gpu.intel.com/": 1, "nvidia.com/priority": 1}}),
        json!({"limits": {"nvidia.com/rdma_shared_device_a": 1, "amd.com/xilinx_u250": 1}}),
        json!({"limits": {"deviceclass.resource.kubernetes.io/sriov.example.com": 1}}),
    ] {
        let a = ask(r.clone());
        assert_eq!(
            (a.count, a.vendor, a.shape.as_str()),
            (0, None, "none"),
            "{r}"
        );
    }
}

#[test]
fn dra_claims_count_from_their_template() {
    let spec: PodSpec = serde_json::from_value(json!({
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}, {"name": "nic"}]}}],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                           {"name": "nic", "resourceClaimTemplateName": "nic"},
                           {"name": "unknown", "resourceClaimTemplateName": "elsewhere"}]
    }))
    .unwrap();
    let templates = |ns: &str, name: &str| -> Option<ResourceClaimTemplate> {
        let class = match (ns, name) {
            ("ns", "two-gpus") => "gpu.nvidia.com",
            ("ns", "nic") => "sriov.example.com",
            _ => return None,
        };
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": class, "count": 2}}]}}}}),
        )
        .ok()
    };
    let a = gpu_ask(&spec, "ns", &GpuResources::default(), &templates);
    assert_eq!(
        (a.count, a.vendor, a.shape.as_str()),
        (2, Some(Vendor::Nvidia), "dra")
    );
    assert_eq!(a.dra_claims, ["gpus", "nic", "unknown"]);
    // Unreadable templates are noted, not counted.
    let a = gpu_ask(&spec, "ns", &GpuResources::default(), &NoClaimTemplates);
    assert_eq!(a.count, 0);
}

/// What a Pod may be allocated, resource by resource: whole devices beside a MIG sidecar, a share, a plain
/// init container apart, a claim of allocation mode `All` and a `firstAvailable` list at its largest
/// alternative (the ask, for scoring, stays at the first).
#[test]
fn holdings_are_counted_resource_by_resource_at_the_largest_allocation() {
    let spec: PodSpec = serde_json::from_value(json!({
        "containers": [
            {"name": "train", "resources": {"limits": {"nvidia.com/gpu": 4}}},
            {"name": "slice", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
            {"name": "hami", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}}],
        "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 2}}}],
        "resourceClaims": [{"name": "all", "resourceClaimTemplateName": "all"},
                           {"name": "alt", "resourceClaimTemplateName": "alt"}]
    }))
    .unwrap();
    let templates = |_: &str, name: &str| -> Option<ResourceClaimTemplate> {
        let request = match name {
            "all" => json!({"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com",
                "allocationMode": "All"}}),
            _ => json!({"name": "r", "firstAvailable": [
                {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
                {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4},
                {"name": "nic", "deviceClassName": "sriov.example.com", "count": 8}]}),
        };
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}}}))
        .ok()
    };
    let a = gpu_ask(&spec, "ns", &GpuResources::default(), &templates);
    let h = &a.holdings;
    assert_eq!(h.running.len(), 3, "{h:?}");
    assert!(h.running.contains(&Holding::Devices(4)));
    assert!(h.running.contains(&Holding::Slices {
        count: 1,
        memory_gib: Some(10.0)
    }));
    assert!(
        h.running.iter().any(|x| matches!(
            x,
            Holding::Shares {
                count: 1,
                memory_gib: Some(_)
            }
        )),
        "{h:?}"
    );
    assert_eq!(h.init, vec![vec![Holding::Devices(2)]]);
    assert_eq!(h.claims, vec![Holding::AllOfNode, Holding::Devices(4)]);
    // The ask the scorer reads: 4 + 1 + 1 devices, the `All` claim at one, the list at its first.
    assert_eq!(a.count, 6 + 1 + 1);
}

#[test]
fn policy_rules_replace_the_default() {
    let rules = GpuResources::from_rules(&[GpuResourceRule {
        name: "example.com/gpu".into(),
        vendor: Vendor::Amd,
        kind: GpuResourceKind::Devices,
        memory_gib_per_unit: 0.0,
    }]);
    let spec: PodSpec = serde_json::from_value(json!({"containers": [{"name": "c", "resources":
        {"limits": {"example.com/gpu": 3, "nvidia.com/gpu": 1}}}]}))
    .unwrap();
    let a = gpu_ask(&spec, "ns", &rules, &NoClaimTemplates);
    assert_eq!((a.count, a.vendor), (3, Some(Vendor::Amd)));
    assert_eq!(GpuResources::from_rules(&[]), GpuResources::default());
}
