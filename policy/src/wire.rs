//! The policy as the gRPC wire (`gpuadmission.scorer.v1`) spells it: the one place a policy type is turned
//! into a message or back. `GetPolicy` carries the whole document (readers validate it with this crate);
//! the older per-field copy ([`get_policy_response`]'s fields 2-12) is kept one release for readers that
//! predate the document.
use gpu_admission_proto::scorer::v1 as pb;

use crate::gpu_resources::{GpuResourceKind, GpuResourceRule};
use crate::{Bucket, EnforcementMode, Fallback, GpuClass, Policy, Vendor, WorkloadClass};

impl From<Vendor> for pb::GpuVendor {
    fn from(v: Vendor) -> Self {
        match v {
            Vendor::Nvidia => pb::GpuVendor::Nvidia,
            Vendor::Amd => pb::GpuVendor::Amd,
            Vendor::Intel => pb::GpuVendor::Intel,
        }
    }
}

/// A wire vendor; unknown (or unset) is `None`.
pub fn vendor(v: i32) -> Option<Vendor> {
    match pb::GpuVendor::try_from(v).unwrap_or(pb::GpuVendor::Unknown) {
        pb::GpuVendor::Nvidia => Some(Vendor::Nvidia),
        pb::GpuVendor::Amd => Some(Vendor::Amd),
        pb::GpuVendor::Intel => Some(Vendor::Intel),
        pb::GpuVendor::Unknown => None,
    }
}

/// A wire workload class; unknown (or unset) means "not said".
pub fn workload_class(v: i32) -> Option<WorkloadClass> {
    match pb::WorkloadClass::try_from(v).unwrap_or(pb::WorkloadClass::Unknown) {
        pb::WorkloadClass::Training => Some(WorkloadClass::Training),
        pb::WorkloadClass::Inference => Some(WorkloadClass::Inference),
        pb::WorkloadClass::Batch => Some(WorkloadClass::Batch),
        pb::WorkloadClass::Interactive => Some(WorkloadClass::Interactive),
        pb::WorkloadClass::Unknown => None,
    }
}

impl From<GpuResourceKind> for pb::GpuResourceKind {
    fn from(k: GpuResourceKind) -> Self {
        match k {
            GpuResourceKind::Devices => pb::GpuResourceKind::Devices,
            GpuResourceKind::SharedDevices => pb::GpuResourceKind::SharedDevices,
            GpuResourceKind::MigSlices => pb::GpuResourceKind::MigSlices,
            GpuResourceKind::Memory => pb::GpuResourceKind::Memory,
            GpuResourceKind::Cores => pb::GpuResourceKind::Cores,
            GpuResourceKind::DraDeviceClass => pb::GpuResourceKind::DraDeviceClass,
            GpuResourceKind::NotGpu => pb::GpuResourceKind::NotGpu,
        }
    }
}

impl From<&GpuResourceRule> for pb::GpuResourceRule {
    fn from(r: &GpuResourceRule) -> Self {
        pb::GpuResourceRule {
            name: r.name.clone(),
            vendor: pb::GpuVendor::from(r.vendor) as i32,
            kind: pb::GpuResourceKind::from(r.kind) as i32,
            memory_gib_per_unit: r.memory_gib_per_unit,
        }
    }
}

impl From<&GpuClass> for pb::GpuClass {
    fn from(c: &GpuClass) -> Self {
        pb::GpuClass {
            name: c.name.clone(),
            vendor: pb::GpuVendor::from(c.vendor) as i32,
            memory_gib: c.memory_gib,
            node_label_key: c.node_label_key.clone(),
            node_label_value: c.node_label_value.clone(),
            relative_throughput: c.relative_throughput,
            price_per_hour: c.price_per_hour,
            taint_key: c.taint_key.clone().unwrap_or_default(),
        }
    }
}

impl From<&Bucket> for pb::PriorityAssignment {
    fn from(b: &Bucket) -> Self {
        pb::PriorityAssignment {
            name: b.name.clone(),
            value: b.value,
            preemption_policy: b.preemption_policy.clone(),
        }
    }
}

impl From<EnforcementMode> for pb::EnforcementMode {
    fn from(m: EnforcementMode) -> Self {
        match m {
            EnforcementMode::Enforce => pb::EnforcementMode::Enforce,
            EnforcementMode::Warn => pb::EnforcementMode::Warn,
            EnforcementMode::Audit => pb::EnforcementMode::Audit,
        }
    }
}

/// `GetPolicy`'s answer: the document, and the per-field copy older readers use.
pub fn get_policy_response(policy: &Policy) -> pb::GetPolicyResponse {
    let class_name = |i: usize| policy.classes[i].name.clone();
    pb::GetPolicyResponse {
        version: policy.version.clone(),
        document: policy.document.clone(),
        source: policy.source.clone(),
        default_tier: policy.tiers[policy.default_tier].name.clone(),
        catalog: policy.classes.iter().map(pb::GpuClass::from).collect(),
        tiers: policy
            .tiers
            .iter()
            .map(|t| pb::Tier {
                name: t.name.clone(),
                allowed_classes: (0..policy.classes.len())
                    .filter(|&i| t.allowed[i])
                    .map(class_name)
                    .collect(),
                preferred_class: t.preferred.map(class_name).unwrap_or_default(),
                objective: t.objective.as_str().to_string(),
                priority_weight: t.priority_weight,
                max_priority_class: t.max_priority_class.clone().unwrap_or_default(),
                fallback: match t.fallback {
                    Fallback::PassThrough => pb::TierFallback::PassThrough,
                    Fallback::TierDefault => pb::TierFallback::TierDefault,
                } as i32,
            })
            .collect(),
        priority_buckets: policy
            .priority
            .buckets
            .iter()
            .map(|b| pb::PriorityBucket {
                min_score: b.min_score,
                priority_class: Some(b.into()),
            })
            .collect(),
        job_types: policy.job_types.iter().map(|j| j.name.clone()).collect(),
        anti_affinity_threshold: policy.anti_affinity_threshold,
        enforcement: Some(pb::Enforcement {
            mode: pb::EnforcementMode::from(policy.enforcement.mode) as i32,
            admin_groups: policy.enforcement.admin_groups.clone(),
            admin_users: policy.enforcement.admin_users.clone(),
        }),
        namespace_grants: policy
            .namespace_grants
            .iter()
            .map(|g| pb::NamespaceGrant {
                namespace: g.namespace.clone(),
                allowed_classes: g.allowed_classes.clone(),
                max_priority_class: g.max_priority_class.clone().unwrap_or_default(),
            })
            .collect(),
        job_type_default_memory_gib: policy
            .job_types
            .iter()
            .filter_map(|j| j.default_memory_gib.map(|m| (j.name.clone(), m)))
            .collect(),
        gpu_resources: policy.gpu_resources.iter().map(Into::into).collect(),
        class_labels: policy
            .classes
            .iter()
            .filter(|c| !c.identifying_labels.is_empty())
            .map(|c| pb::ClassLabels {
                class: c.name.clone(),
                labels: c
                    .identifying_labels
                    .iter()
                    .map(|(key, value)| pb::NodeLabel {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The policy a `GetPolicy` answer carries, validated here; `None` from a scorer that predates the document.
pub fn policy_of(response: &pb::GetPolicyResponse) -> Option<Result<Policy, crate::PolicyError>> {
    (!response.document.is_empty()).then(|| crate::parse(&response.document, &response.source))
}

/// `ValidatePolicy`'s verdict on a policy text: exactly the validation a reload applies (the scorer answers
/// it; the frontend's `/validate-policy` computes it itself).
pub fn validation(text: &str, file: &str) -> pb::ValidatePolicyResponse {
    let file = if file.is_empty() { "<policy>" } else { file };
    let rules_digest = crate::rules_digest(text).unwrap_or_default();
    match crate::parse(text, file) {
        Ok(p) => pb::ValidatePolicyResponse {
            valid: true,
            version: p.version,
            problems: Vec::new(),
            rules_digest,
        },
        Err(e) => pb::ValidatePolicyResponse {
            valid: false,
            version: String::new(),
            rules_digest,
            problems: e
                .problems
                .into_iter()
                .map(|p| pb::PolicyProblem {
                    file: e.file.clone(),
                    field: p.field,
                    reason: p.reason,
                })
                .collect(),
        },
    }
}
