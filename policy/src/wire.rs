//! The policy as the gRPC wire (`gpuadmission.scorer.v1`) spells it: the one place a policy type is turned
//! into a message or back. `GetPolicy` carries the whole document (readers validate it with this crate).
use gpu_admission_proto::scorer::v1 as pb;

use crate::gpu_resources::{GpuResourceKind, GpuResourceRule};
use crate::{Bucket, EnforcementMode, GpuClass, Policy, Vendor, WorkloadClass};

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
    Vendor::ALL
        .into_iter()
        .find(|&known| pb::GpuVendor::from(known) as i32 == v)
}

/// A vendor as the wire carries it; `None` is `UNKNOWN`.
pub fn vendor_value(v: Option<Vendor>) -> i32 {
    v.map_or(pb::GpuVendor::Unknown, pb::GpuVendor::from) as i32
}

impl From<WorkloadClass> for pb::WorkloadClass {
    fn from(w: WorkloadClass) -> Self {
        match w {
            WorkloadClass::Training => pb::WorkloadClass::Training,
            WorkloadClass::Inference => pb::WorkloadClass::Inference,
            WorkloadClass::Batch => pb::WorkloadClass::Batch,
            WorkloadClass::Interactive => pb::WorkloadClass::Interactive,
            WorkloadClass::Unknown => pb::WorkloadClass::Unknown,
        }
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

/// `GetPolicy`'s answer: the policy document, which readers validate with this crate.
pub fn get_policy_response(policy: &Policy) -> pb::GetPolicyResponse {
    pb::GetPolicyResponse {
        version: policy.version.clone(),
        document: policy.document.clone(),
        source: policy.source.clone(),
    }
}

/// The policy a `GetPolicy` answer carries, validated here (an answer without a document is refused).
pub fn policy_of(response: &pb::GetPolicyResponse) -> Result<Policy, crate::PolicyError> {
    if response.document.is_empty() {
        return Err(crate::PolicyError::single(
            &response.source,
            "(file)",
            "the GetPolicy answer carries no policy document",
        ));
    }
    crate::parse(&response.document, &response.source)
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
