//! The policy file's shape (YAML, camelCase keys), as written by operators.
//!
//! These types are only the parsed text; [`crate::validate`] checks them and builds the indexed
//! [`crate::Policy`] everyone reads.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole policy file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFile {
    /// Free-form version; when absent the first 12 hex digits of the file's sha256.
    #[serde(default)]
    pub version: Option<String>,
    /// Node label key selecting a GPU class (classes may override it).
    #[serde(default = "default_node_label_key")]
    pub node_label_key: String,
    /// The namespace label that carries the tier, read by every process (the webhooks, the observer's audit,
    /// the floor, the CLI); [`crate::names::DEFAULT_TIER_LABEL`] when absent (left out of the rules digest
    /// then, so a policy without it keeps its digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_label: Option<String>,
    /// Tier used when a request names none, or one the policy does not know.
    pub default_tier: String,
    /// What a namespace without a tier is held to: one with no tier label, an empty value, a value naming
    /// no tier, or one the webhooks do not know yet (`DefaultTier` when absent).
    #[serde(default)]
    pub untiered_namespaces: UntieredNamespaces,
    pub catalog: Vec<GpuClassSpec>,
    pub tiers: Vec<TierSpec>,
    pub workload_classes: BTreeMap<String, WorkloadClassSpec>,
    #[serde(default)]
    pub job_types: Vec<JobTypeSpec>,
    #[serde(default)]
    pub interference: InterferenceSpec,
    pub priority: PrioritySpec,
    #[serde(default)]
    pub learning: LearningSpec,
    /// How the admission webhooks answer tier violations, and who is exempt.
    #[serde(default)]
    pub enforcement: EnforcementSpec,
    /// Exceptions for whole namespaces, granted by whoever may edit this file.
    #[serde(default)]
    pub namespace_grants: Vec<NamespaceGrantSpec>,
    /// Which Pod resource names (and DRA DeviceClasses) ask for GPUs and how they count; the built-in default
    /// list ([`crate::gpu_resources::default_rules`]) when absent.
    #[serde(default)]
    pub gpu_resources: Option<Vec<GpuResourceSpec>>,
    /// Elastic GPU quotas per tier and namespace (none when absent; left out of the rules digest then, so a
    /// policy without quotas keeps its digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<crate::quotas::QuotasSpec>,
}

/// One resource name that asks for GPUs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuResourceSpec {
    /// The resource name (or DeviceClass name), or a pattern: `*` = `[a-z0-9]+`, `**` = `[A-Za-z0-9._-]+`, and
    /// for `migSlices` `{memoryGiB}` = the slice memory. An exact name wins over every pattern; patterns are
    /// tried in list order.
    pub name: String,
    /// `nvidia`, `amd` or `intel` (a string, so that an unknown vendor is reported with its field).
    pub vendor: String,
    pub kind: GpuResourceKind,
    /// `memory` only: the quantity's unit, `MiB` (default), `GiB` or `bytes`.
    #[serde(default)]
    pub unit: Option<String>,
}

/// How one resource name counts as GPUs.
/// Ordered as a Pod's shape names them (`devices+memory+cores`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GpuResourceKind {
    /// Whole devices.
    Devices,
    /// Shared / time-sliced replicas, one device each.
    SharedDevices,
    /// MIG slices, one device each, with the memory the name carries.
    MigSlices,
    /// GPU memory per device; no device count (one device when alone).
    Memory,
    /// A share of a device's compute; no device count (one device when alone).
    Cores,
    /// A DRA DeviceClass whose devices are GPUs.
    DraDeviceClass,
    /// Not a GPU, though under a GPU vendor's domain (a monitoring-free helper, a NIC, an IMEX channel): an
    /// exception to the vendor's catch-all pattern. A resource name or a DeviceClass name.
    NotGpu,
}

/// What the webhooks do with a namespace that has no tier of the policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum UntieredNamespaces {
    /// Held to `defaultTier`, as if labelled with it.
    #[default]
    DefaultTier,
    /// Its GPU Pods and Pods naming a PriorityClass are violations (denied in `Enforce`).
    Deny,
    /// Outside every rule (the behaviour before this setting).
    Ignore,
}

/// How tier violations are answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum EnforcementMode {
    /// Denied.
    Enforce,
    /// Admitted with an admission warning.
    Warn,
    /// Admitted silently (counted and logged).
    #[default]
    Audit,
}

impl EnforcementMode {
    /// As the policy file spells it: the metric label and log field operators match against their policy.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementMode::Enforce => "Enforce",
            EnforcementMode::Warn => "Warn",
            EnforcementMode::Audit => "Audit",
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnforcementSpec {
    #[serde(default)]
    pub mode: EnforcementMode,
}

/// An exception for one namespace: it covers every Pod of the namespace, whoever (or whichever controller)
/// creates it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceGrantSpec {
    pub namespace: String,
    /// GPU classes allowed in addition to the tier's.
    #[serde(default)]
    pub allowed_classes: Vec<String>,
    /// Replaces the tier's `maxPriorityClass` when higher.
    #[serde(default)]
    pub max_priority_class: Option<String>,
}

/// What the mutating webhook does for a tier when the scorer cannot answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum Fallback {
    /// Admit the Pod unchanged.
    #[default]
    PassThrough,
    /// The tier's allowed classes (preferred first), no priority change.
    TierDefault,
}

pub fn default_node_label_key() -> String {
    "gpu.nvidia.com/class".to_string()
}

/// A GPU vendor. Everything the project knows of one is in [`Vendor::facts`]: a new vendor is a variant
/// here, its row there, its entry in [`Vendor::ALL`] and its wire value (`crate::wire`); the compiler names
/// the matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
}

/// One vendor's names, as its device plugin and DRA driver publish them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorFacts {
    /// As the policy spells it (`vendor: nvidia`).
    pub name: &'static str,
    /// The extended-resource domain of its device plugins: `<domain>/<anything>` is its GPU unless the
    /// policy's `gpuResources` call it `notGpu`.
    pub resource_domain: &'static str,
    /// Its DRA driver: the name it publishes ResourceSlices and its generic DeviceClass under.
    pub dra_driver: &'static str,
}

impl Vendor {
    /// Every vendor (kept complete by the `match` in [`Vendor::facts`] and the test beside it).
    pub const ALL: [Vendor; 3] = [Vendor::Nvidia, Vendor::Amd, Vendor::Intel];

    /// THE vendor table.
    pub const fn facts(self) -> VendorFacts {
        match self {
            Vendor::Nvidia => VendorFacts {
                name: "nvidia",
                resource_domain: "nvidia.com",
                dra_driver: "gpu.nvidia.com",
            },
            Vendor::Amd => VendorFacts {
                name: "amd",
                resource_domain: "amd.com",
                dra_driver: "gpu.amd.com",
            },
            Vendor::Intel => VendorFacts {
                name: "intel",
                resource_domain: "gpu.intel.com",
                dra_driver: "gpu.intel.com",
            },
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// The vendor a policy name (`nvidia`) stands for.
    pub fn named(name: &str) -> Option<Vendor> {
        Vendor::ALL.into_iter().find(|v| v.as_str() == name)
    }

    /// Every vendor's name, for messages: `nvidia, amd or intel`.
    pub fn names() -> String {
        let names: Vec<&str> = Vendor::ALL.iter().map(|v| v.as_str()).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuClassSpec {
    pub name: String,
    pub vendor: Vendor,
    #[serde(rename = "memoryGiB")]
    pub memory_gib: f64,
    /// Relative throughput (A100-80GB = 1.0).
    pub relative_throughput: f64,
    pub price_per_hour: f64,
    /// GPUs per node: a Pod asking for more can never fit on one node of this class.
    #[serde(default = "default_gpus_per_node")]
    pub gpus_per_node: u32,
    /// Overrides the policy's `nodeLabelKey`.
    #[serde(default)]
    pub node_label_key: Option<String>,
    /// Defaults to the class name.
    #[serde(default)]
    pub node_label_value: Option<String>,
    #[serde(default)]
    pub taint_key: Option<String>,
    /// Other node labels that identify the class (GPU Feature Discovery `nvidia.com/gpu.product`, cloud and
    /// Karpenter labels): key → the values nodes of this class carry.
    #[serde(default)]
    pub node_labels: BTreeMap<String, Vec<String>>,
    /// How the vendor's DRA driver describes this class's devices: what its DeviceClass
    /// (`<name lowercased>.gpu-admission.io`) selects and what a claim's selectors are judged against.
    #[serde(default)]
    pub dra: Option<DraDevicesSpec>,
}

/// A catalog class's devices as a DRA driver publishes them in ResourceSlices.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DraDevicesSpec {
    /// The driver publishing the devices; default the vendor's (`gpu.nvidia.com`, `gpu.amd.com`,
    /// `gpu.intel.com`).
    #[serde(default)]
    pub driver: Option<String>,
    /// The string attribute naming the product; default `productName`.
    #[serde(default)]
    pub attribute: Option<String>,
    /// The attribute's values on devices of this class (whole GPUs and their partitions alike).
    pub product_names: Vec<String>,
}

fn default_gpus_per_node() -> u32 {
    8
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Minimise the expected runtime.
    Fastest,
    /// Minimise the expected runtime times the class's price.
    Cheapest,
}

impl Objective {
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::Fastest => "fastest",
            Objective::Cheapest => "cheapest",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierSpec {
    pub name: String,
    pub allowed_classes: Vec<String>,
    pub preferred_class: Option<String>,
    pub objective: Objective,
    /// 0..1: the tier's share of the priority score.
    pub priority_weight: f64,
    /// The highest PriorityClass (a bucket name) a Pod of this tier may get or ask for.
    #[serde(default)]
    pub max_priority_class: Option<String>,
    #[serde(default)]
    pub fallback: Fallback,
}

/// A prior runtime profile.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeProfile {
    /// Expected runtime in seconds on a class of relative throughput 1.0.
    pub base_runtime_seconds: f64,
    /// Prior standard deviation as a fraction of the prior mean.
    pub relative_stddev: f64,
    /// How much of a class's throughput the job turns into speed (1 = all, 0 = none).
    #[serde(default = "one")]
    pub throughput_exponent: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadClassSpec {
    /// 0..1: the workload class's share of the priority score.
    pub priority_weight: f64,
    /// Profile of job types the policy does not know.
    pub profile: RuntimeProfile,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobTypeSpec {
    pub name: String,
    pub workload_class: String,
    pub base_runtime_seconds: f64,
    pub relative_stddev: f64,
    #[serde(default = "one")]
    pub throughput_exponent: f64,
    /// GPU memory per GPU assumed when a request does not say.
    #[serde(default, rename = "defaultMemoryGiB")]
    pub default_memory_gib: Option<f64>,
    /// The job type's family: a name pattern (`*` = `[a-z0-9]+`, `**` = `[A-Za-z0-9._-]+`) its own name
    /// matches; the job types whose names match it (listed or not) share their deviations from the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// The namespace whose runs the scorer learns as this job type's; another namespace's runs of it are
    /// learned under that namespace's own name. Without it, whichever namespace reports the job type first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterferenceSpec {
    /// Slowdown of pairs the matrix does not list.
    #[serde(default)]
    pub default_slowdown: f64,
    pub anti_affinity_threshold: f64,
    #[serde(default)]
    pub pairs: Vec<InterferencePair>,
}

impl Default for InterferenceSpec {
    fn default() -> Self {
        Self {
            default_slowdown: 0.0,
            anti_affinity_threshold: 0.3,
            pairs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InterferencePair {
    pub a: String,
    pub b: String,
    /// Expected relative slowdown (0.3 = 30 % longer) when both share a node.
    pub slowdown: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrioritySpec {
    pub tier_points: f64,
    pub workload_points: f64,
    pub size_points: f64,
    pub size_reference: SizeReference,
    pub buckets: Vec<BucketSpec>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SizeReference {
    pub gpu_count: f64,
    #[serde(rename = "memoryGiB")]
    pub memory_gib: f64,
    pub model_size_billion_params: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BucketSpec {
    pub min_score: f64,
    pub name: String,
    pub value: i32,
    pub preemption_policy: String,
}

/// Weights of the cost function and of exploration.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LearningSpec {
    /// Weight of σ (risk aversion).
    pub lambda: f64,
    /// Weight of the information gain (curiosity).
    pub beta: f64,
    /// Weight of the interference slowdown.
    pub gamma: f64,
    /// Observation noise relative to the job's reference runtime, for IG.
    pub tau: f64,
    /// The prior counts as this many observations.
    pub prior_strength: f64,
    /// Largest share of exploratory decisions within the window.
    pub exploration_cap: f64,
    /// Number of recent decisions the exploratory share is measured over.
    pub exploration_window: u32,
    /// Mixed into every decision's seed: the same seed and learned state give the same answers.
    #[serde(default)]
    pub seed: u64,
    /// How runtime shrinks with the GPU count: a job on g GPUs runs in (its 1-GPU runtime) / g^s. The
    /// prior mean of every job type's own exponent, which its runs at several GPU counts teach.
    #[serde(default = "default_gpu_scaling_exponent")]
    pub gpu_scaling_exponent: f64,
    /// Prior σ of a job type's own GPU-scaling exponent around `gpuScalingExponent`.
    #[serde(default = "default_gpu_scaling_stddev")]
    pub gpu_scaling_stddev: f64,
    /// Prior σ (natural log) of how far a class's real speed is from its catalog throughput: shared by every
    /// job type (one offset per class) and by the job types of one workload class (one per pair).
    #[serde(default = "default_shared_stddev")]
    pub class_offset_stddev: f64,
    /// Prior σ of how far a workload class's and a job type's throughput exponent are from the catalog's.
    #[serde(default = "default_shared_stddev")]
    pub exponent_stddev: f64,
    /// Prior σ (natural log) of what is particular to one job type on one class.
    #[serde(default = "default_shared_stddev")]
    pub cell_stddev: f64,
    /// Share of runs held to straggle (take a heavy-tailed factor longer than the job type on the class
    /// would): a class whose only run of a job type was far slower than expected may be retried.
    #[serde(default = "default_straggler_share")]
    pub straggler_share: f64,
    /// Tail index α of a straggling run's factor f ≥ 1 (Pareto: P(f > x) = x^−α).
    #[serde(default = "default_straggler_tail")]
    pub straggler_tail: f64,
}

fn default_straggler_share() -> f64 {
    0.03
}

fn default_straggler_tail() -> f64 {
    2.5
}

fn default_gpu_scaling_exponent() -> f64 {
    0.9
}

fn default_gpu_scaling_stddev() -> f64 {
    0.25
}

fn default_shared_stddev() -> f64 {
    0.3
}

impl Default for LearningSpec {
    fn default() -> Self {
        Self {
            lambda: 0.1,
            beta: 0.02,
            gamma: 1.0,
            tau: 0.2,
            prior_strength: 4.0,
            exploration_cap: 0.2,
            exploration_window: 200,
            seed: 0,
            gpu_scaling_exponent: default_gpu_scaling_exponent(),
            gpu_scaling_stddev: default_gpu_scaling_stddev(),
            class_offset_stddev: default_shared_stddev(),
            exponent_stddev: default_shared_stddev(),
            cell_stddev: default_shared_stddev(),
            straggler_share: default_straggler_share(),
            straggler_tail: default_straggler_tail(),
        }
    }
}

#[cfg(test)]
mod vendor_tests {
    use super::Vendor;

    /// `Vendor::ALL` lists each vendor once, and names and domains tell them apart.
    #[test]
    fn the_vendor_table_is_complete_and_unambiguous() {
        let listed = |v: Vendor| match v {
            // A new variant does not compile here until it is matched, and fails below until it is listed.
            Vendor::Nvidia | Vendor::Amd | Vendor::Intel => Vendor::ALL.contains(&v),
        };
        assert!(Vendor::ALL.into_iter().all(listed));
        for (i, v) in Vendor::ALL.into_iter().enumerate() {
            assert_eq!(Vendor::named(v.as_str()), Some(v));
            for w in &Vendor::ALL[i + 1..] {
                assert_ne!(v, *w);
                assert_ne!(v.facts().resource_domain, w.facts().resource_domain);
                assert_ne!(v.facts().dra_driver, w.facts().dra_driver);
            }
        }
        assert_eq!(Vendor::names(), "nvidia, amd or intel");
        assert_eq!(Vendor::named("Nvidia"), None);
    }
}
