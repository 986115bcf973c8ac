use super::*;
use crate::{DEFAULT_POLICY_YAML, EMBEDDED_SOURCE, embedded_default};

fn errors(yaml: &str) -> PolicyError {
    parse(yaml, "/etc/scorer/policy.yaml").expect_err("policy should be refused")
}

fn has(e: &PolicyError, field: &str, reason_part: &str) -> bool {
    e.problems
        .iter()
        .any(|p| p.field == field && p.reason.contains(reason_part))
}

#[test]
fn the_embedded_default_is_valid_and_complete() {
    let p = embedded_default().unwrap();
    assert_eq!(p.source, EMBEDDED_SOURCE);
    for class in [
        "H100-80GB",
        "A100-80GB",
        "A100-40GB",
        "L4-24GB",
        "MI300X-192GB",
    ] {
        let c = &p.classes[p.class_index(class).unwrap()];
        assert_eq!(c.node_label_key, "gpu.nvidia.com/class");
        assert_eq!(c.node_label_value, class);
    }
    let mi = &p.classes[p.class_index("MI300X-192GB").unwrap()];
    assert_eq!(mi.taint_key.as_deref(), Some("amd.com/gpu"));
    for (tier, preferred) in [
        ("gold", "H100-80GB"),
        ("silver", "A100-80GB"),
        ("bronze", "L4-24GB"),
    ] {
        let t = &p.tiers[p.tier_index(tier).unwrap()];
        assert_eq!(t.preferred, p.class_index(preferred), "{tier}");
    }
    let names: Vec<_> = p
        .priority
        .buckets
        .iter()
        .map(|b| (b.min_score, b.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (90.0, "gpu-ultra"),
            (70.0, "gpu-high"),
            (50.0, "gpu-medium"),
            (0.0, "gpu-default")
        ]
    );
    // No version in the file: a content hash.
    assert_eq!(p.version.len(), 12);
    assert!(p.version.chars().all(|c| c.is_ascii_hexdigit()));
    let again = embedded_default().unwrap();
    assert_eq!(again.version, p.version);
}

#[test]
fn the_shipped_gpu_resources_are_the_built_in_default() {
    let p = embedded_default().unwrap();
    assert_eq!(p.gpu_resources, default_rules());
    // Omitting the list means the same list.
    let without: String = DEFAULT_POLICY_YAML
        .lines()
        .filter(|l| !l.starts_with("gpuResources:") && !l.starts_with("  - { name:"))
        .collect::<Vec<_>>()
        .join("\n");
    let p2 = parse(&without, "x").unwrap();
    assert_eq!(p2.gpu_resources, default_rules());
    let a100 = &p.classes[p.class_index("A100-80GB").unwrap()];
    assert!(a100.identifying_labels.contains(&(
        "nvidia.com/gpu.product".into(),
        "NVIDIA-A100-SXM4-80GB".into()
    )));
}

#[test]
fn gpu_resource_problems_are_named() {
    let list = "gpuResources:\n  - { name: nvidia.com/gpu, vendor: nvidia, kind: devices }\n  \
         - { name: nvidia.com/gpu, vendor: nvidia, kind: sharedDevices }\n  \
         - { name: example.com/tpu, vendor: google, kind: devices }\n  \
         - { name: \"nvidia.com/mig-*g.gb\", vendor: nvidia, kind: migSlices }\n  \
         - { name: \"nvidia.com/mig-{memoryGiB}-{memoryGiB}\", vendor: nvidia, kind: migSlices }\n  \
         - { name: nvidia.com/gpumem, vendor: nvidia, kind: memory, unit: KB }\n  \
         - { name: \"not a name\", vendor: amd, kind: cores }\n";
    let without: String = DEFAULT_POLICY_YAML
        .lines()
        .filter(|l| !l.starts_with("gpuResources:") && !l.starts_with("  - { name:"))
        .collect::<Vec<_>>()
        .join("\n");
    let e = errors(&format!("{without}\n{list}"));
    assert!(
        has(
            &e,
            "gpuResources[nvidia.com/gpu].name",
            "duplicate resource name"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "gpuResources[example.com/tpu].vendor",
            "unknown vendor `google`"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "gpuResources[nvidia.com/mig-*g.gb].name",
            "one `{memoryGiB}`"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "gpuResources[nvidia.com/mig-{memoryGiB}-{memoryGiB}].name",
            "migSlices pattern"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "gpuResources[nvidia.com/gpumem].unit",
            "unknown unit `KB`"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "gpuResources[not a name].name",
            "not an extended resource name"
        ),
        "{e}"
    );
    assert_eq!(e.problems.len(), 6, "{e}");
    // Labels of a class are label keys and values.
    let bad = DEFAULT_POLICY_YAML.replace("[NVIDIA-L4]", "[\"bad value\"]");
    assert!(has(
        &errors(&bad),
        "catalog[L4-24GB].nodeLabels[nvidia.com/gpu.product]",
        "not a valid"
    ));
}

#[test]
fn an_explicit_version_wins() {
    let p = parse(
        &format!("version: \"2026-11-22\"\n{DEFAULT_POLICY_YAML}"),
        "x",
    )
    .unwrap();
    assert_eq!(p.version, "2026-11-22");
}

#[test]
fn errors_name_file_field_and_reason() {
    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "    allowedClasses: [L4-24GB]",
        "    allowedClasses: [L4-24GB, T4-16GB]",
    ));
    assert!(
        has(
            &e,
            "tiers[bronze].allowedClasses[1]",
            "unknown GPU class `T4-16GB`"
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.starts_with("invalid policy /etc/scorer/policy.yaml: "),
        "{text}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace("    memoryGiB: 24\n", "    memoryGiB: -24\n"));
    assert!(
        has(
            &e,
            "catalog[L4-24GB].memoryGiB",
            "must be a finite number > 0, got -24"
        ),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace("name: A100-40GB", "name: A100-80GB"));
    assert!(
        has(&e, "catalog[A100-80GB].name", "duplicate GPU class"),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "{ minScore: 0, name: gpu-default",
        "{ minScore: 10, name: gpu-default",
    ));
    assert!(
        has(&e, "priority.buckets", "lowest bucket must have minScore 0"),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "value: 1000, preemptionPolicy: Never",
        "value: 1000, preemptionPolicy: Sometimes",
    ));
    assert!(
        has(
            &e,
            "priority.buckets[3].preemptionPolicy",
            "PreemptLowerPriority or Never"
        ),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace("  sizePoints: 20", "  sizePoints: 30"));
    assert!(has(&e, "priority", "must be 100, got 110"), "{e}");

    let e = errors(&DEFAULT_POLICY_YAML.replace("defaultTier: bronze", "defaultTier: copper"));
    assert!(has(&e, "defaultTier", "unknown tier `copper`"), "{e}");

    let e = errors(
        &DEFAULT_POLICY_YAML.replace("{ a: notebook, b: notebook", "{ a: notebook, b: jupyter"),
    );
    assert!(
        has(&e, "interference.pairs[10].b", "unknown job type `jupyter`"),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace("  explorationCap: 0.2", "  explorationCap: 1.5"));
    assert!(has(&e, "learning.explorationCap", "[0, 1]"), "{e}");

    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "    preferredClass: L4-24GB",
        "    preferredClass: H100-80GB",
    ));
    assert!(
        has(
            &e,
            "tiers[bronze].preferredClass",
            "not among the tier's allowedClasses"
        ),
        "{e}"
    );

    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "    workloadClass: batch\n    baseRuntimeSeconds: 5400",
        "    workloadClass: etl\n    baseRuntimeSeconds: 5400",
    ));
    assert!(
        has(
            &e,
            "jobTypes[batch-etl].workloadClass",
            "unknown workload class `etl`"
        ),
        "{e}"
    );
}

#[test]
fn enforcement_caps_fallback_and_grants() {
    let p = embedded_default().unwrap();
    assert_eq!(p.enforcement.mode, crate::EnforcementMode::Warn);
    let bronze = &p.tiers[p.tier_index("bronze").unwrap()];
    assert_eq!(bronze.max_priority_class.as_deref(), Some("gpu-default"));
    // Every shipped tier restricts classes: its Pods fall back to the tier, never unbound.
    assert_eq!(bronze.fallback, crate::Fallback::TierDefault);
    assert!(p.namespace_grants.is_empty());

    let granted = DEFAULT_POLICY_YAML
        .replace("namespaceGrants: []", "namespaceGrants:\n  - { namespace: llm-research, allowedClasses: [H100-80GB], maxPriorityClass: gpu-high }")
        .replace("  mode: Warn", "  mode: Enforce");
    let p = parse(&granted, "x").unwrap();
    assert_eq!(p.enforcement.mode, crate::EnforcementMode::Enforce);
    assert_eq!(p.namespace_grants[0].allowed_classes, ["H100-80GB"]);
    let tier_default =
        DEFAULT_POLICY_YAML.replacen("fallback: PassThrough", "fallback: TierDefault", 4);
    let p = parse(&tier_default, "x").unwrap();
    assert!(
        p.tiers
            .iter()
            .all(|t| t.fallback == crate::Fallback::TierDefault)
    );

    // Who is exempt is RBAC's (`exempt tiers/<tier>`): a policy naming admins is refused, not half read.
    for list in ["adminGroups: [gpu-admission:admins]", "adminUsers: [alice]"] {
        let admins =
            DEFAULT_POLICY_YAML.replace("  mode: Warn\n", &format!("  mode: Warn\n  {list}\n"));
        let e = parse(&admins, "x").unwrap_err().to_string();
        let field = list.split(':').next().unwrap();
        assert!(e.contains(&format!("unknown field `{field}`")), "{e}");
    }

    // Without the new sections a file still loads: Audit, no caps, PassThrough.
    let bare = DEFAULT_POLICY_YAML
        .replace("  mode: Warn\n", "  {}\n")
        .replace("    maxPriorityClass: gpu-default\n", "");
    let p = parse(&bare, "x").unwrap();
    assert_eq!(p.enforcement, crate::Enforcement::default());
    let bronze = &p.tiers[p.tier_index("bronze").unwrap()];
    assert_eq!(bronze.max_priority_class, None);

    let e = errors(
        &DEFAULT_POLICY_YAML
            .replace("maxPriorityClass: gpu-default", "maxPriorityClass: gpu-gold")
            .replace("namespaceGrants: []", "namespaceGrants:\n  - { namespace: Bad_NS, allowedClasses: [T4-16GB], maxPriorityClass: gpu-max }\n  - { namespace: empty }"),
    );
    assert!(
        has(
            &e,
            "tiers[bronze].maxPriorityClass",
            "unknown PriorityClass `gpu-gold`"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "namespaceGrants[Bad_NS].namespace",
            "not a valid namespace"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "namespaceGrants[Bad_NS].allowedClasses[0]",
            "unknown GPU class `T4-16GB`"
        ),
        "{e}"
    );
    assert!(
        has(
            &e,
            "namespaceGrants[Bad_NS].maxPriorityClass",
            "unknown PriorityClass `gpu-max`"
        ),
        "{e}"
    );
    assert!(has(&e, "namespaceGrants[empty]", "grants nothing"), "{e}");
    let e = errors(&DEFAULT_POLICY_YAML.replace("  mode: Warn", "  mode: Strict"));
    assert!(e.to_string().contains("unknown variant `Strict`"), "{e}");
}

#[test]
fn all_problems_are_reported_at_once() {
    let e = errors(
        &DEFAULT_POLICY_YAML
            .replace(
                "    relativeThroughput: 0.3\n",
                "    relativeThroughput: 0\n",
            )
            .replace("  tau: 0.2 ", "  tau: 0 "),
    );
    assert!(has(&e, "catalog[L4-24GB].relativeThroughput", "> 0"), "{e}");
    assert!(has(&e, "learning.tau", "> 0"), "{e}");
}

#[test]
fn syntax_and_unknown_fields_are_refused_with_a_location() {
    let e = errors("catalog: [unterminated");
    assert!(e.problems[0].field.starts_with("(line "), "{e}");
    let e = errors(&DEFAULT_POLICY_YAML.replace(
        "    pricePerHour: 0.50",
        "    pricePerHour: 0.50\n    colour: green",
    ));
    assert!(e.to_string().contains("unknown field `colour`"), "{e}");
    let e = errors(&DEFAULT_POLICY_YAML.replace("vendor: amd", "vendor: via"));
    assert!(e.to_string().contains("unknown variant `via`"), "{e}");
}

#[test]
fn load_file_reports_unreadable_files() {
    let e = load_file(Path::new("/nonexistent/policy.yaml")).unwrap_err();
    assert_eq!(e.file, "/nonexistent/policy.yaml");
    assert!(has(&e, "(file)", "cannot read"), "{e}");
}

#[test]
fn dra_devices_of_a_class_are_checked() {
    let p = embedded_default().unwrap();
    let l4 = &p.classes[p.class_index("L4-24GB").unwrap()];
    let dra = l4.dra.as_ref().unwrap();
    assert_eq!(
        (dra.driver.as_str(), dra.attribute.as_str()),
        ("gpu.nvidia.com", "productName")
    );
    let mi300 = &p.classes[p.class_index("MI300X-192GB").unwrap()];
    assert_eq!(mi300.dra.as_ref().unwrap().driver, "gpu.amd.com");
    let bad = DEFAULT_POLICY_YAML
        .replace(
            "dra: { productNames: [\"NVIDIA L4\"] }",
            "dra: { productNames: [\"NVIDIA L4'\", \"NVIDIA L40S\"], attribute: \"x.y\", driver: \"Bad\" }",
        )
        .replace("dra: { productNames: [\"NVIDIA H200\"] }", "dra: { productNames: [] }");
    let e = errors(&bad);
    for (field, reason) in [
        ("catalog[L4-24GB].dra.productNames", "without quotes"),
        ("catalog[L4-24GB].dra.attribute", "not an attribute name"),
        ("catalog[L4-24GB].dra.driver", "not a DRA driver name"),
        ("catalog[H200-141GB].dra.productNames", "at least one"),
    ] {
        assert!(has(&e, field, reason), "{field}: {e}");
    }
    // `NVIDIA L40S` is L40S-48GB's product: with the driver changed it is not a duplicate; same driver, it is.
    let dup = DEFAULT_POLICY_YAML.replace(
        "dra: { productNames: [\"NVIDIA L4\"] }",
        "dra: { productNames: [\"NVIDIA L4\", \"NVIDIA L40S\"] }",
    );
    assert!(has(
        &errors(&dup),
        "catalog[L4-24GB].dra.productNames",
        "a product of class L40S-48GB too"
    ));
}

/// The tier label is a policy field: the default label when absent (and the rules digest unchanged then),
/// the policy's own when given, refused when it is no label key.
#[test]
fn the_tier_label_is_the_policys() {
    let p = embedded_default().unwrap();
    assert_eq!(p.tier_label, crate::names::DEFAULT_TIER_LABEL);
    let own = format!("tierLabel: example.com/team-tier\n{DEFAULT_POLICY_YAML}");
    let q = parse(&own, "own.yaml").unwrap();
    assert_eq!(q.tier_label, "example.com/team-tier");
    assert_ne!(rules_digest(&own), rules_digest(DEFAULT_POLICY_YAML));
    let bad = format!("tierLabel: \"not a key\"\n{DEFAULT_POLICY_YAML}");
    assert!(has(
        &errors(&bad),
        "tierLabel",
        "not a valid Kubernetes label key"
    ));
}
