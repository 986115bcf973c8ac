//! The validated policy: every name it references exists, every number is in range, names are indexed.
use ndarray::Array2;

use crate::gpu_resources::GpuResourceRule;
use crate::schema::{
    EnforcementMode, Fallback, LearningSpec, Objective, RuntimeProfile, SizeReference,
    UntieredNamespaces, Vendor,
};

/// Workload classes the scorer's model distinguishes (the wire's `WorkloadClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadClass {
    Training,
    Inference,
    Batch,
    Interactive,
    Unknown,
}

impl WorkloadClass {
    pub const ALL: [WorkloadClass; 5] = [
        WorkloadClass::Training,
        WorkloadClass::Inference,
        WorkloadClass::Batch,
        WorkloadClass::Interactive,
        WorkloadClass::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadClass::Training => "training",
            WorkloadClass::Inference => "inference",
            WorkloadClass::Batch => "batch",
            WorkloadClass::Interactive => "interactive",
            WorkloadClass::Unknown => "unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == name)
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A validated GPU class.
#[derive(Debug, Clone)]
pub struct GpuClass {
    pub name: String,
    pub vendor: Vendor,
    pub memory_gib: f64,
    pub relative_throughput: f64,
    pub price_per_hour: f64,
    pub gpus_per_node: u32,
    pub node_label_key: String,
    pub node_label_value: String,
    pub taint_key: Option<String>,
    /// Other node labels identifying the class (key, value), in file order.
    pub identifying_labels: Vec<(String, String)>,
    /// Its devices as a DRA driver publishes them (`None`: the class has no DeviceClass).
    pub dra: Option<DraDevices>,
}

/// A class's DRA devices: every device of `driver` whose string attribute `attribute` is one of
/// `product_names` (see [`crate::device_classes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraDevices {
    pub driver: String,
    pub attribute: String,
    pub product_names: Vec<String>,
}

/// A validated tier; class references are indices into [`Policy::classes`].
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    /// Indexed like the catalog.
    pub allowed: Vec<bool>,
    pub preferred: Option<usize>,
    pub objective: Objective,
    pub priority_weight: f64,
    /// Name of the highest bucket a Pod of this tier may get (a bucket of [`PriorityRules::buckets`]).
    pub max_priority_class: Option<String>,
    pub fallback: Fallback,
}

/// An empty tier (no class allowed), what the readers of an older copy start from: a field added later
/// takes its value here.
impl Default for Tier {
    fn default() -> Self {
        Self {
            name: String::new(),
            allowed: Vec::new(),
            preferred: None,
            objective: Objective::Cheapest,
            priority_weight: 0.0,
            max_priority_class: None,
            fallback: Fallback::default(),
        }
    }
}

/// How violations are answered (used by the admission webhooks only; who is exempt is RBAC's, not the
/// policy's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enforcement {
    pub mode: EnforcementMode,
}

/// A validated namespace grant; class names are catalog names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceGrant {
    pub namespace: String,
    pub allowed_classes: Vec<String>,
    pub max_priority_class: Option<String>,
}

#[derive(Debug, Clone)]
pub struct JobType {
    pub name: String,
    pub workload_class: WorkloadClass,
    pub profile: RuntimeProfile,
    pub default_memory_gib: Option<f64>,
    /// A name pattern of the job types that share this one's deviations from the catalog (`jobTypes[].family`).
    pub family: Option<String>,
    /// The namespace whose runs are learned as this job type's (`jobTypes[].owner`); `None`: the first to
    /// report it.
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub min_score: f64,
    pub name: String,
    pub value: i32,
    pub preemption_policy: String,
}

#[derive(Debug, Clone)]
pub struct PriorityRules {
    pub tier_points: f64,
    pub workload_points: f64,
    pub size_points: f64,
    pub size_reference: SizeReference,
    /// Sorted by `min_score`, highest first; the last one has `min_score <= 0`.
    pub buckets: Vec<Bucket>,
}

/// Name -> index of the catalog, the tiers or the job types. foldhash rather than SipHash: every Score looks
/// names up, the keys come from the policy file, and nothing iterates these maps (so their order is moot).
pub(crate) type NameIndex = foldhash::HashMap<String, usize>;

/// A policy that passed validation: every name it references exists, every number is in range.
#[derive(Debug, Clone)]
pub struct Policy {
    pub version: String,
    /// File path (or [`crate::EMBEDDED_SOURCE`]).
    pub source: String,
    /// The text this policy was validated from (what `GetPolicy` carries as its document).
    pub document: String,
    pub classes: Vec<GpuClass>,
    pub tiers: Vec<Tier>,
    pub default_tier: usize,
    /// The namespace label that carries the tier (`tierLabel`, else the default label).
    pub tier_label: String,
    /// What a namespace without a tier of this policy is held to.
    pub untiered_namespaces: UntieredNamespaces,
    pub(crate) workload: [(f64, RuntimeProfile); 5],
    pub job_types: Vec<JobType>,
    /// Prior slowdown between job types (indexed like `job_types`; symmetric).
    pub interference_prior: Array2<f64>,
    pub default_slowdown: f64,
    pub anti_affinity_threshold: f64,
    pub priority: PriorityRules,
    pub learning: LearningSpec,
    pub enforcement: Enforcement,
    pub namespace_grants: Vec<NamespaceGrant>,
    /// Which Pod resources ask for GPUs (the frontend counts them; carried by GetPolicy).
    pub gpu_resources: Vec<GpuResourceRule>,
    /// Elastic GPU quotas per tier and namespace (empty when the policy has none).
    pub quotas: crate::quotas::Quotas,
    pub(crate) class_index: NameIndex,
    pub(crate) tier_index: NameIndex,
    pub(crate) job_index: NameIndex,
}

impl Policy {
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.class_index.get(name).copied()
    }

    pub fn tier_index(&self, name: &str) -> Option<usize> {
        self.tier_index.get(name).copied()
    }

    pub fn job_index(&self, name: &str) -> Option<usize> {
        self.job_index.get(name).copied()
    }

    /// Priority weight of a workload class (0..1).
    pub fn workload_weight(&self, class: WorkloadClass) -> f64 {
        self.workload[class.index()].0
    }

    /// Runtime profile for job types the policy does not know.
    pub fn workload_profile(&self, class: WorkloadClass) -> RuntimeProfile {
        self.workload[class.index()].1
    }
}
