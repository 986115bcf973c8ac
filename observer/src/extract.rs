//! THE observation as pure functions: Pod (+ its Node's labels, the catalog, the other runs on that node) →
//! an `ObserveRequest` or the reason it is skipped. No I/O here; the controller feeds these from watch caches.
//!
//! Rules (each one is a test below):
//! - ours = the Pod carries the frontend's `decided-at` annotation and `job-type` label and asks for GPUs;
//! - a run lasts from the first MAIN container's `startedAt` to the last one's `finishedAt` (init containers,
//!   including sidecars, are not the job); only a `Succeeded` Pod is a finished run;
//! - skipped, by reason: evicted (kubelet `status.reason=Evicted`, or a `DisruptionTarget` condition other
//!   than preemption), preempted (`Preempting`, or `DisruptionTarget` by the scheduler), OOM-killed (any main
//!   container's current or last termination), deleted before finishing, failed otherwise, no usable times;
//! - the GPU class comes from the Node the Pod ran on, through the catalog's label keys (never from our own
//!   annotation: that is what we asked for, not where it ran);
//! - co-located job types: the other decided GPU Pods on the same node whose runs overlap this one;
//! - provenance: a run is reported only where its decision record says it may run ([`Record`]): on the class
//!   our placement named (`placement: gpu-admission`), else (the Pod's own constraint, Kueue, another
//!   placement inside our tier bound) on one of the in-tier classes the scorer weighed; a Pod whose record
//!   names neither is skipped (`not_where_decided`).

use std::collections::BTreeMap;

use gpu_admission_policy::{GpuClass, WorkloadClass};
use gpu_admission_proto::scorer::v1::{self as pb, GpuShape, ObserveRequest};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::names;
use crate::route::{self, Learner};

/// A decided GPU Pod, as far as the observer cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedJob {
    pub uid: String,
    pub job_type: String,
    pub gpu_count: u32,
    /// Read from the Pod like the webhook reads it: the prior of a job type the policy does not list.
    pub workload_class: WorkloadClass,
    /// The Pod's namespace: the tenant whose run it is (the scorer learns per tenant, with bounded influence).
    pub namespace: String,
    /// What of a GPU it asked for: whole devices, MIG slices or a share (only whole devices teach a class).
    pub gpu_shape: GpuShape,
    /// Where its decision record says it may run.
    pub record: Record,
    /// Whose scorer learns its run (the record's `decided-by` and the namespace, [`crate::route`]).
    pub learner: Learner,
}

/// Where a decision record says its Pod may run (the frontend's `placement`, `gpu-class`, `alternatives`,
/// `recommended-class` annotations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Our placement pinned the Pod to `class`.
    pub pinned: bool,
    /// The class the record names (`gpu-class`, else `recommended-class`).
    pub class: Option<String>,
    /// The in-tier classes the scorer weighed (`alternatives`).
    pub in_tier: Vec<String>,
}

impl Record {
    fn of(annotations: &BTreeMap<String, String>) -> Self {
        let get = |k: &str| annotations.get(k).filter(|v| !v.is_empty());
        let class = get(names::ANN_GPU_CLASS)
            .or_else(|| get(names::ANN_RECOMMENDED_CLASS))
            .cloned();
        let placement = get(names::ANN_PLACEMENT).map(String::as_str);
        let pinned = match placement {
            Some(p) => p == names::PLACEMENT_OURS,
            // An older record (or one that gave way to the annotation limit): its class, if any.
            None => get(names::ANN_GPU_CLASS).is_some(),
        };
        let in_tier = get(names::ANN_ALTERNATIVES)
            .map(|a| {
                a.split(',')
                    .filter_map(|c| c.split_once('=').map_or(Some(c), |(n, _)| Some(n)))
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Self {
            pinned,
            class,
            in_tier,
        }
    }

    /// Whether a run on `class` is where this record says the Pod may run.
    pub fn allows(&self, class: &str) -> bool {
        let named = self.class.as_deref() == Some(class);
        named || (!self.pinned && self.in_tier.iter().any(|c| c == class))
    }
}

/// The shape of the GPUs a Pod asks for, from the kinds of request its features name (`devices`, `mig`,
/// `shared`, `memory`, `cores`, `dra`, joined by `+`): any MIG slice makes it a slice, any share a share.
pub fn gpu_shape(kinds: &str) -> GpuShape {
    let has = |k: &str| kinds.split('+').any(|x| x == k);
    if has("mig") {
        GpuShape::MigSlice
    } else if has("shared") || has("memory") || has("cores") {
        GpuShape::Shared
    } else {
        GpuShape::Whole
    }
}

/// What a decided Pod's main containers did on a node: `end` is `None` while any of them still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub uid: String,
    pub job_type: String,
    pub node: String,
    pub start: Timestamp,
    pub end: Option<Timestamp>,
    /// Whose scorer learns it: co-located runs count only among runs one scorer learns.
    pub learner: Learner,
}

impl Run {
    /// Whether the two runs shared time (an open end counts as still running).
    pub fn overlaps(&self, other: &Run) -> bool {
        let before =
            |a_end: Option<Timestamp>, b_start: Timestamp| a_end.is_some_and(|e| e <= b_start);
        !before(self.end, other.start) && !before(other.end, self.start)
    }
}

/// Why a decided Pod's runtime is not reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    Evicted,
    Preempted,
    OomKilled,
    /// Failed for any other reason (non-zero exit, deadline exceeded, ...).
    Failed,
    DeletedBeforeFinishing,
    /// `Succeeded`, but without a start and a later finish on every main container.
    NoUsableTimes,
    /// The Node it ran on is not known (deleted before the observer ever saw it).
    NodeUnknown,
    /// The Node carries no label of any catalog class.
    NodeWithoutClass,
    /// The Node's class is not where the decision record says the Pod may run.
    NotWhereDecided,
    /// Decided by a namespace-restricted instance whose namespace holds no active Lease now (the instance is
    /// gone, or the record was forged where none runs): no scorer learns it ([`crate::route`]).
    NoRestrictedInstance,
}

impl SkipReason {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Evicted => "evicted",
            Self::Preempted => "preempted",
            Self::OomKilled => "oom_killed",
            Self::Failed => "failed",
            Self::DeletedBeforeFinishing => "deleted_before_finishing",
            Self::NoUsableTimes => "no_usable_times",
            Self::NodeUnknown => "node_unknown",
            Self::NodeWithoutClass => "node_without_class",
            Self::NotWhereDecided => "not_where_decided",
            Self::NoRestrictedInstance => "no_restricted_instance",
        }
    }
}

/// Where a decided Pod stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// No main container has started yet (or the Pod is not bound).
    NotStarted,
    /// Started, not finished: its run is open (it counts as co-located for others).
    Running(Run),
    /// Succeeded with a complete run: to be reported.
    Finished(Run),
    /// Terminal (or deleted) without a runtime worth learning.
    Skip(SkipReason),
}

/// The decided GPU job a Pod is, or `None` when gpu-admission did not decide it (no `decided-at`, no job-type
/// label, no UID, or no GPU), or its `decided-by` names no instance that may teach a scorer its run
/// ([`route::learner`]: a restricted instance's record teaches the scorer of the Pod's own namespace only).
pub fn decided_job(pod: &Pod) -> Option<DecidedJob> {
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref()?;
    annotations.get(names::ANN_DECIDED_AT)?;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let learner = route::learner(
        annotations.get(names::ANN_DECIDED_BY).map(String::as_str),
        &namespace,
    )?;
    let job_type = meta.labels.as_ref()?.get(names::LABEL_JOB_TYPE)?.clone();
    let uid = meta.uid.clone()?;
    let features = gpu_admission_core::pod::features::extract(pod);
    (features.gpu_count > 0 && !job_type.is_empty()).then_some(DecidedJob {
        uid,
        job_type,
        gpu_count: features.gpu_count,
        workload_class: features.workload_class,
        namespace,
        gpu_shape: gpu_shape(&features.gpu_shape),
        record: Record::of(annotations),
        learner,
    })
}

/// Where the decided Pod stands; `deleted` = the watch reported it gone (its last known state is `pod`).
pub fn progress(pod: &Pod, job: &DecidedJob, deleted: bool) -> Progress {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
    let main: Vec<&ContainerStatus> = status
        .and_then(|s| s.container_statuses.as_ref())
        .map(|v| v.iter().collect())
        .unwrap_or_default();

    if let Some(reason) = disruption(pod) {
        return Progress::Skip(reason);
    }
    let oom = |c: &&ContainerStatus| {
        [c.state.as_ref(), c.last_state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|s| s.terminated.as_ref())
            .any(|t| t.reason.as_deref() == Some(names::REASON_OOM_KILLED))
    };
    if main.iter().any(oom) {
        return Progress::Skip(SkipReason::OomKilled);
    }
    let being_deleted = deleted || pod.metadata.deletion_timestamp.is_some();
    if phase == "Failed" {
        return Progress::Skip(SkipReason::Failed);
    }
    if being_deleted && phase != "Succeeded" {
        return Progress::Skip(SkipReason::DeletedBeforeFinishing);
    }
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let run = |start, end| Run {
        uid: job.uid.clone(),
        job_type: job.job_type.clone(),
        node: node.clone(),
        start,
        end,
        learner: job.learner.clone(),
    };
    if phase == "Succeeded" {
        let expected = pod.spec.as_ref().map_or(0, |s| s.containers.len());
        let times: Option<Vec<(Timestamp, Timestamp)>> = main
            .iter()
            .map(|c| {
                let t = c.state.as_ref()?.terminated.as_ref()?;
                Some((t.started_at.as_ref()?.0, t.finished_at.as_ref()?.0))
            })
            .collect();
        return match times {
            Some(times) if !times.is_empty() && times.len() == expected && !node.is_empty() => {
                let start = times.iter().map(|t| t.0).min().expect("not empty");
                let end = times.iter().map(|t| t.1).max().expect("not empty");
                if end > start {
                    Progress::Finished(run(start, Some(end)))
                } else {
                    Progress::Skip(SkipReason::NoUsableTimes)
                }
            }
            _ => Progress::Skip(SkipReason::NoUsableTimes),
        };
    }
    // Pending or Running: open from the earliest main-container start, if any has started.
    let started = main
        .iter()
        .filter_map(|c| {
            let s = c.state.as_ref()?;
            s.running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .or_else(|| s.terminated.as_ref().and_then(|t| t.started_at.as_ref()))
                .map(|t| t.0)
        })
        .min();
    match started {
        Some(start) if !node.is_empty() => Progress::Running(run(start, None)),
        _ => Progress::NotStarted,
    }
}

/// When a run that will not be reported stopped sharing its node: the last main container's `finishedAt` when
/// every one has terminated, else the Pod's deletion time, else `now`.
pub fn stopped_at(pod: &Pod, now: Timestamp) -> Timestamp {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let finished: Option<Vec<Timestamp>> = statuses
        .iter()
        .map(|c| {
            let t = c.state.as_ref()?.terminated.as_ref()?;
            t.finished_at.as_ref().map(|f| f.0)
        })
        .collect();
    match finished {
        Some(f) if !f.is_empty() => f.into_iter().max().expect("not empty"),
        _ => pod
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or(now, |d| d.0),
    }
}

/// Eviction or preemption, by the kubelet's `status.reason` or the control plane's `DisruptionTarget`.
fn disruption(pod: &Pod) -> Option<SkipReason> {
    let status = pod.status.as_ref()?;
    match status.reason.as_deref() {
        Some(names::STATUS_REASON_EVICTED) => return Some(SkipReason::Evicted),
        Some(names::STATUS_REASON_PREEMPTING) => return Some(SkipReason::Preempted),
        _ => {}
    }
    let target = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == names::CONDITION_DISRUPTION_TARGET && c.status == "True")?;
    let preempted = target
        .reason
        .as_deref()
        .is_some_and(|r| names::PREEMPTION_REASONS.contains(&r));
    Some(if preempted {
        SkipReason::Preempted
    } else {
        SkipReason::Evicted
    })
}

/// The catalog class a Node's labels select: the first class whose label key carries its value.
pub fn class_of_node<'c>(
    node_labels: &BTreeMap<String, String>,
    catalog: &'c [GpuClass],
) -> Option<&'c str> {
    catalog
        .iter()
        .find(|c| {
            !c.node_label_key.is_empty()
                && node_labels.get(&c.node_label_key) == Some(&c.node_label_value)
        })
        .map(|c| c.name.as_str())
}

/// The scorer's policy facts the observation needs.
#[derive(Debug, Clone, Default)]
pub struct PolicyFacts {
    pub catalog: Vec<GpuClass>,
}

/// The `Observe` request for a finished run; `node_labels` is `None` when the Node is unknown; `others` are
/// the runs the observer knows of (any node; this run itself is ignored).
pub fn observation<'r>(
    job: &DecidedJob,
    run: &Run,
    node_labels: Option<&BTreeMap<String, String>>,
    policy: &PolicyFacts,
    others: impl IntoIterator<Item = &'r Run>,
) -> Result<ObserveRequest, SkipReason> {
    let end = run.end.ok_or(SkipReason::NoUsableTimes)?;
    let labels = node_labels.ok_or(SkipReason::NodeUnknown)?;
    let class = class_of_node(labels, &policy.catalog).ok_or(SkipReason::NodeWithoutClass)?;
    if !job.record.allows(class) {
        return Err(SkipReason::NotWhereDecided);
    }
    let mut colocated: Vec<String> = others
        .into_iter()
        .filter(|o| o.uid != run.uid && o.node == run.node && o.overlaps(run))
        .filter(|o| o.learner == run.learner)
        .map(|o| o.job_type.clone())
        .collect();
    colocated.sort();
    colocated.dedup();
    Ok(ObserveRequest {
        job_type: job.job_type.clone(),
        gpu_class: class.to_string(),
        runtime_seconds: end.duration_since(run.start).as_secs_f64(),
        colocated_job_types: colocated,
        observation_id: job.uid.clone(),
        gpu_count: job.gpu_count,
        // Job types the policy does not list are learned too (under this class's prior, in a bounded budget).
        workload_class: pb::WorkloadClass::from(job.workload_class) as i32,
        namespace: job.namespace.clone(),
        tier: String::new(),
        gpu_shape: job.gpu_shape as i32,
    })
}

#[cfg(test)]
mod tests;
