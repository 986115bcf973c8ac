//! The one test kit of gpu-admission, shared by the end-to-end tests (`tests/`), the frontend's own tests
//! (`webhook-frontend/tests/`) and `loadgen`:
//!
//! - [`binaries`]: the `scorer` and `webhook-frontend` binaries of the current build, built at most once per
//!   test run;
//! - [`process`]: a spawned binary whose log goes to a file, whose `listening on ADDR` lines give its ports,
//!   with signals (`pause`/`resume`/`terminate`), killed on drop, its log tail printed when a test fails;
//! - [`services`]: [`Scorer::builder`] / [`Webhook::builder`] start the real binaries on loopback;
//!   [`observer`]: the `observer` binary against a cluster;
//! - [`https`]: an HTTPS client trusting ONLY the webhook's CA bundle (a wrong certificate fails);
//! - [`review`]: the AdmissionReview builder, the apiserver's checks on the answer, patch application;
//! - [`faults`]: scorer doubles at the process boundary ([`faults::FaultProxy`] forwards, delays, hangs,
//!   corrupts or resets; [`faults::NonsenseScorer`] speaks gRPC but answers nonsense);
//! - [`corpus`]: the project's own fixtures (`tests/fixtures/`) and the external corpus, and Pod extraction
//!   from workloads;
//! - [`jaeger`]: a real Jaeger (built from its Go module by `tests/peers/jaeger.sh`) on free loopback
//!   ports, and its query API's traces;
//! - [`hostile`]: a peer on the webhook port that declares a large body and stalls;
//! - [`skip`]: how a suite says SKIP (once per test run) and why CI turns it into a failure;
//! - [`gpu`], [`names`]: reading a Pod's GPU request and the decision annotations.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use gpu_admission_testkit::{Scorer, Webhook};
//! let scorer = Scorer::builder().start().await?;
//! let webhook = Webhook::builder(&scorer.url())
//!     .no_kube()
//!     .namespace_tier("team-gold", "gold")
//!     .start()
//!     .await?;
//! let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
//!     "spec": {"containers": [{"name": "c", "image": "x",
//!         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
//! let outcome = webhook.admit_pod(&pod, "team-gold").await?;
//! assert!(outcome.allowed && outcome.patch.is_some());
//! # Ok(()) }
//! ```

pub mod binaries;
pub mod built_by_script;
pub mod corpus;
pub mod faults;
pub mod gpu;
pub mod hostile;
pub mod https;
pub mod jaeger;
pub mod observer;
pub mod ports;
pub mod process;
pub mod procfs;
pub mod review;
pub mod services;
pub mod skip;

pub use process::ChildProcess;
pub use review::{AdmissionOutcome, Operation};
pub use services::{Scorer, ScorerBuilder, Webhook, WebhookBuilder};

/// Names shared with the product, so tests never spell them twice: core's, under the names the tests use.
pub mod names {
    use gpu_admission_core::names::{decision, features};

    /// Namespace label carrying the tenant tier.
    pub const TIER_LABEL: &str = gpu_admission_core::names::DEFAULT_TIER_LABEL;
    /// Default node label key selecting a GPU class (the shipped policy's catalog).
    pub const CLASS_LABEL: &str = "gpu.nvidia.com/class";
    pub const ANN_PRIORITY_SCORE: &str = decision::ANN_PRIORITY_SCORE;
    pub const ANN_GPU_CLASS: &str = decision::ANN_GPU_CLASS;
    /// The idempotency marker: a Pod carrying it is allowed unchanged.
    pub const ANN_DECIDED_AT: &str = decision::ANN_DECIDED_AT;
    pub const ANN_POLICY_VERSION: &str = decision::ANN_POLICY_VERSION;
    pub const ANN_INFEASIBLE: &str = decision::ANN_INFEASIBLE_REASON;
    /// The four annotations written together on every mutation.
    pub const DECISION_ANNOTATIONS: [&str; 4] = [
        ANN_PRIORITY_SCORE,
        ANN_GPU_CLASS,
        ANN_DECIDED_AT,
        ANN_POLICY_VERSION,
    ];
    /// Who places the Pod: `gpu-admission`, `pod: <what constrains it>`, `node-name`, `kueue` or `none`.
    pub const ANN_PLACEMENT: &str = decision::ANN_PLACEMENT;
    /// A Kueue-managed Pod's class as we would choose it (Kueue's flavor places the Pod).
    pub const ANN_RECOMMENDED_CLASS: &str = decision::ANN_RECOMMENDED_CLASS;
    pub const ANN_ALTERNATIVES: &str = decision::ANN_ALTERNATIVES;
    pub const ANN_EXPLORED: &str = decision::ANN_EXPLORED;
    /// Label the webhook adds for pod anti-affinity.
    pub const JOB_TYPE_LABEL: &str = decision::LABEL_JOB_TYPE;
    pub const ANN_JOB_TYPE_SEED: &str = features::JOB_TYPE[1];
    pub const ANN_GPU_MEM_SEED: &str = features::GPU_MEMORY_GIB[1];
    pub const ANN_BATCH_SEED: &str = features::BATCH_SIZE[1];
    pub const ANN_TENANT_SEED: &str = features::TENANT[1];
    pub const ANN_JOB_TYPE: &str = features::JOB_TYPE[0];
    pub const ANN_GPU_MEM: &str = features::GPU_MEMORY_GIB[0];
    pub const ANN_WORKLOAD_CLASS: &str = features::WORKLOAD_CLASS;
}

/// How long tests wait for a process to print its `listening on` line (covers a cold start).
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The repository root (the workspace of this crate).
pub fn workspace_root() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}
