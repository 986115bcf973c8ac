//! Kubernetes names the observer reads or owns.
//!
//! The decision's own names are core's (re-exported, never spelled twice): the observer watches what
//! the frontend's patch builder writes.

pub use gpu_admission_core::names::decision::{
    ANN_ALTERNATIVES, ANN_DECIDED_AT, ANN_DECIDED_BY, ANN_GPU_CLASS, ANN_PLACEMENT,
    ANN_RECOMMENDED_CLASS, LABEL_JOB_TYPE,
};

/// The decision record's `placement` when our placement pinned the Pod to its `gpu-class`.
pub const PLACEMENT_OURS: &str = "gpu-admission";

/// Default name of the `coordination.k8s.io/v1` Lease the observer replicas elect their leader with.
pub const DEFAULT_LEASE: &str = "gpu-admission-observer";

/// Key of the ConfigMap `binaryData` entry holding the freshest learned state (the scorer's opaque snapshot).
pub const STATE_KEY: &str = "learned-state";
/// Annotations on that ConfigMap: how many observations the stored state holds, and its digest.
pub const ANN_STATE_OBSERVATIONS: &str = "gpu-admission.io/observations";
pub const ANN_STATE_DIGEST: &str = "gpu-admission.io/digest";

/// Pod condition type the control plane sets when it is about to disrupt a Pod (Kubernetes 1.26+), and its
/// reasons that mean "preempted" (anything else means evicted or deleted by the system).
pub const CONDITION_DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const PREEMPTION_REASONS: [&str; 2] = ["PreemptionByScheduler", "PreemptionByKubeScheduler"];
/// `status.reason` the kubelet sets on a Pod it evicted (node pressure) or preempted (critical Pods).
pub const STATUS_REASON_EVICTED: &str = "Evicted";
pub const STATUS_REASON_PREEMPTING: &str = "Preempting";
/// Container termination reason of an out-of-memory kill.
pub const REASON_OOM_KILLED: &str = "OOMKilled";
