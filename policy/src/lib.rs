//! The one policy model every part of gpu-admission reads: the file operators write ([`schema`]), its
//! validation into the indexed [`Policy`] with field paths ([`validate`]), the GPU resource rules
//! ([`gpu_resources`]), the rules digest, and reloading a policy file ([`watch`]).
//!
//! The scorer scores with it, the webhook frontend enforces it (it reads the same file, so it holds a policy
//! without the scorer), the CLI and the observer evaluate with it. Pure: no gRPC, no Kubernetes client.
pub mod device_classes;
pub mod diff;
pub mod gpu_resources;
mod model;
pub mod names;
pub mod quotas;
pub mod schema;
mod scope;
pub mod validate;
pub mod watch;
pub mod wire;

pub use model::{
    Bucket, DraDevices, Enforcement, GpuClass, JobType, NamespaceGrant, Policy, PriorityRules,
    Tier, WorkloadClass,
};
pub use schema::{
    EnforcementMode, Fallback, LearningSpec, Objective, RuntimeProfile, SizeReference,
    UntieredNamespaces, Vendor, VendorFacts,
};
pub use scope::Scope;
pub use validate::{
    JOB_TYPE_PRIOR_FIELDS, PolicyError, Problem, TextChange, changed_job_types, load_file, parse,
    rule_fields, rules_digest, text_change,
};

/// The embedded default policy: the same file the kustomize ConfigMap ships.
pub const DEFAULT_POLICY_YAML: &str =
    include_str!("../../deploy/kustomize/base/policy/default-policy.yaml");

/// Where the embedded default policy says it came from in errors and logs.
pub const EMBEDDED_SOURCE: &str = "<embedded default-policy.yaml>";

/// Loads the embedded default policy (checked by a unit test, so this cannot fail in a release).
pub fn embedded_default() -> Result<Policy, PolicyError> {
    parse(DEFAULT_POLICY_YAML, EMBEDDED_SOURCE)
}
