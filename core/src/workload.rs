//! The controlling workload of a Pod: what "one decision per workload" groups by. Pure functions.
//!
//! Well-known group labels decide first, because the controllers put them on every Pod of the group and
//! the Pods' owner references often point at an intermediate object:
//! - LeaderWorkerSet: `leaderworkerset.sigs.k8s.io/name` + `group-index` (one group = one decision; its size
//!   from the `leaderworkerset.sigs.k8s.io/size` annotation);
//! - JobSet: `jobset.sigs.k8s.io/jobset-name` (its Pods belong to child Jobs);
//! - Kubeflow training jobs (PyTorchJob, TFJob, MPIJob, ...): `training.kubeflow.org/job-name`, the kind from
//!   the owner reference or the `training.kubeflow.org/operator-name` label;
//! - KubeRay: `ray.io/cluster` + `ray.io/group` (each worker group decides on its own: groups may ask for
//!   different GPUs on purpose).
//!
//! Otherwise the Pod's controlling owner reference is the first hop; for a Job or a ReplicaSet the owner
//! object itself is read ([`OwnerQuery`], answered by the cluster edge as [`OwnerFacts`]) for the next hop:
//! Job → JobSet (the JobSet is the workload) or CronJob (each Job run stays its own workload; the CronJob is
//! noted), ReplicaSet → Deployment. When the owner cannot be read the first hop is the workload.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The workload a Pod belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadRef {
    /// API group of the workload's kind (`batch`, `apps`, `kubeflow.org`; `core` for the core group).
    pub api_group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// A part of the workload that decides on its own (a LeaderWorkerSet group, a Ray worker group).
    pub part: Option<String>,
    /// Pods in the group, when known (Job parallelism, LeaderWorkerSet size, ReplicaSet replicas).
    pub group_size: Option<u32>,
    /// The Pod's index in the group, when its controller says (for logs).
    pub index: Option<String>,
    /// How the workload was found, nearest owner first (for logs), e.g. `["Job nightly-29012345",
    /// "CronJob nightly"]` or `["label jobset.sigs.k8s.io/jobset-name"]`.
    pub via: Vec<String>,
}

impl WorkloadRef {
    /// `group/Kind/namespace/name[/part]`, e.g. `batch/Job/ml/train-7` or
    /// `leaderworkerset.x-k8s.io/LeaderWorkerSet/ml/llama/group/3`: what the scorer groups decisions by.
    pub fn key(&self) -> String {
        let part = self.part.as_deref();
        let parts = [
            Some(self.api_group.as_str()),
            Some(self.kind.as_str()),
            Some(self.namespace.as_str()),
            Some(self.name.as_str()),
            part,
        ];
        let mut k = String::with_capacity(parts.iter().flatten().map(|p| p.len() + 1).sum());
        for (i, p) in parts.into_iter().flatten().enumerate() {
            if i > 0 {
                k.push('/');
            }
            k.push_str(p);
        }
        k
    }
}

/// An owner object the resolution needs read from the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerQuery {
    pub kind: OwnerKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    Job,
    ReplicaSet,
}

/// What the cluster says about an [`OwnerQuery`]'s object.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnerFacts {
    Known {
        /// The owner's own controller (a JobSet, CronJob or Deployment), if any.
        controller: Option<OwnerReference>,
        /// Pods the owner runs at once: a Job's parallelism (at most its completions), a ReplicaSet's replicas.
        group_size: Option<u32>,
    },
    /// Not readable in time (or gone, or another uid): the first hop is the workload.
    Unknown(String),
}

/// The controlling owner reference: the one marked `controller`, else the only one.
fn controller(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter()
        .find(|r| r.controller == Some(true))
        .or(match refs {
            [only] => Some(only),
            _ => None,
        })
}

fn api_group(api_version: &str) -> &str {
    match api_version.split_once('/') {
        Some((group, _)) if !group.is_empty() => group,
        _ => "core",
    }
}

fn pod_controller(pod: &Pod) -> Option<&OwnerReference> {
    controller(pod.metadata.owner_references.as_deref().unwrap_or(&[]))
}

/// Pods a Job runs at once (its group): its `parallelism` (default 1), at most its `completions`; `None` for
/// a Job that runs none.
pub fn job_group_size(parallelism: Option<i64>, completions: Option<i64>) -> Option<u32> {
    let parallelism = parallelism.unwrap_or(1);
    let size = match completions {
        Some(c) => parallelism.min(c),
        None => parallelism,
    };
    u32::try_from(size).ok().filter(|n| *n > 0)
}

/// The owner object to read for the next hop, when labels do not already name the workload.
pub fn owner_query(pod: &Pod, namespace: &str) -> Option<OwnerQuery> {
    if from_labels(pod, namespace).is_some() {
        return None;
    }
    let r = pod_controller(pod)?;
    let kind = match (api_group(&r.api_version), r.kind.as_str()) {
        ("batch", "Job") => OwnerKind::Job,
        ("apps", "ReplicaSet") => OwnerKind::ReplicaSet,
        _ => return None,
    };
    Some(OwnerQuery {
        kind,
        namespace: namespace.to_string(),
        name: r.name.clone(),
        uid: r.uid.clone(),
    })
}

fn non_empty<'a>(map: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    map.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// The Kubeflow kind of a training job: the owner reference's, else the operator label's.
fn kubeflow_kind(pod: &Pod, labels: &BTreeMap<String, String>) -> String {
    if let Some(r) = pod_controller(pod).filter(|r| api_group(&r.api_version) == "kubeflow.org") {
        return r.kind.clone();
    }
    let operator = non_empty(labels, crate::names::workload::KUBEFLOW_OPERATOR).unwrap_or("");
    let kind = match operator.trim_end_matches("-controller") {
        "pytorchjob" => "PyTorchJob",
        "tfjob" => "TFJob",
        "mpijob" | "mpi-operator" => "MPIJob",
        "xgboostjob" => "XGBoostJob",
        "paddlejob" => "PaddleJob",
        "jaxjob" => "JAXJob",
        _ => "TrainingJob",
    };
    kind.to_string()
}

/// The workload named by well-known group labels, if any.
fn from_labels(pod: &Pod, namespace: &str) -> Option<WorkloadRef> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let ann = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let w = |api_group: &str, kind: String, name: &str, via: &str| WorkloadRef {
        api_group: api_group.to_string(),
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        part: None,
        group_size: None,
        index: None,
        via: vec![["label ", via].concat()],
    };
    if let Some(name) = non_empty(labels, crate::names::workload::LWS_NAME) {
        let mut r = w(
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet".into(),
            name,
            crate::names::workload::LWS_NAME,
        );
        r.part = non_empty(labels, crate::names::workload::LWS_GROUP_INDEX)
            .map(|g| format!("group/{g}"));
        r.group_size = non_empty(ann, crate::names::workload::LWS_SIZE)
            .or(non_empty(labels, crate::names::workload::LWS_SIZE))
            .and_then(|s| s.parse().ok());
        r.index = non_empty(labels, crate::names::workload::LWS_WORKER_INDEX).map(str::to_string);
        return Some(r);
    }
    if let Some(name) = non_empty(labels, crate::names::workload::JOBSET_NAME) {
        return Some(w(
            "jobset.x-k8s.io",
            "JobSet".into(),
            name,
            crate::names::workload::JOBSET_NAME,
        ));
    }
    if let Some(name) = non_empty(labels, crate::names::workload::KUBEFLOW_JOB_NAME) {
        let mut r = w(
            "kubeflow.org",
            kubeflow_kind(pod, labels),
            name,
            crate::names::workload::KUBEFLOW_JOB_NAME,
        );
        r.index =
            non_empty(labels, crate::names::workload::KUBEFLOW_REPLICA_INDEX).map(str::to_string);
        return Some(r);
    }
    if let Some(name) = non_empty(labels, crate::names::workload::RAY_CLUSTER) {
        let mut r = w(
            "ray.io",
            "RayCluster".into(),
            name,
            crate::names::workload::RAY_CLUSTER,
        );
        r.part = non_empty(labels, crate::names::workload::RAY_GROUP).map(|g| format!("group/{g}"));
        return Some(r);
    }
    None
}

/// The Pod's workload, from its labels, its controlling owner reference and, for a Job or a ReplicaSet,
/// what the cluster says about that owner (`facts`, the answer to [`owner_query`]). `None` for a Pod with
/// no controller: it is its own workload.
pub fn resolve(pod: &Pod, namespace: &str, facts: Option<&OwnerFacts>) -> Option<WorkloadRef> {
    if let Some(w) = from_labels(pod, namespace) {
        return Some(w);
    }
    let first = pod_controller(pod)?;
    let group = api_group(&first.api_version);
    let mut w = WorkloadRef {
        api_group: group.to_string(),
        kind: first.kind.clone(),
        namespace: namespace.to_string(),
        name: first.name.clone(),
        part: None,
        group_size: None,
        index: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| non_empty(a, crate::names::workload::JOB_COMPLETION_INDEX))
            .map(str::to_string),
        via: vec![[first.kind.as_str(), " ", &first.name].concat()],
    };
    let next_hop = matches!(
        (group, first.kind.as_str()),
        ("batch", "Job") | ("apps", "ReplicaSet")
    );
    match facts {
        _ if !next_hop => {}
        Some(OwnerFacts::Known {
            controller,
            group_size,
        }) => {
            w.group_size = *group_size;
            if let Some(next) = controller {
                w.via.push([next.kind.as_str(), " ", &next.name].concat());
                let next_group = api_group(&next.api_version);
                let promote = matches!(
                    (next_group, next.kind.as_str()),
                    ("jobset.x-k8s.io", "JobSet") | ("apps", "Deployment")
                );
                if promote {
                    w.api_group = next_group.to_string();
                    w.kind = next.kind.clone();
                    w.name = next.name.clone();
                    if next.kind == "JobSet" {
                        w.group_size = None; // several Jobs: one Job's parallelism is not the group
                    }
                }
            }
        }
        Some(OwnerFacts::Unknown(why)) => w.via.push(["owner unknown: ", why].concat()),
        None => w.via.push("owner not read".into()),
    }
    Some(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        labels: serde_json::Value,
        annotations: serde_json::Value,
        owners: serde_json::Value,
    ) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels,
            "annotations": annotations, "ownerReferences": owners}}))
        .unwrap()
    }

    fn owner(api_version: &str, kind: &str, name: &str) -> serde_json::Value {
        json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": format!("uid-{name}"),
            "controller": true})
    }

    fn known(controller: Option<serde_json::Value>, size: Option<u32>) -> OwnerFacts {
        OwnerFacts::Known {
            controller: controller.map(|c| serde_json::from_value(c).unwrap()),
            group_size: size,
        }
    }

    #[test]
    fn indexed_job_pods_share_the_job_with_its_parallelism() {
        let p = pod(
            json!({"job-name": "train"}),
            json!({crate::names::workload::JOB_COMPLETION_INDEX: "7"}),
            json!([owner("batch/v1", "Job", "train")]),
        );
        assert_eq!(
            owner_query(&p, "ml"),
            Some(OwnerQuery {
                kind: OwnerKind::Job,
                namespace: "ml".into(),
                name: "train".into(),
                uid: "uid-train".into()
            })
        );
        let w = resolve(&p, "ml", Some(&known(None, Some(32)))).unwrap();
        assert_eq!(w.key(), "batch/Job/ml/train");
        assert_eq!((w.group_size, w.index.as_deref()), (Some(32), Some("7")));
        // Owner not readable: still the Job (first hop), size unknown, and the logs say why.
        let w = resolve(&p, "ml", Some(&OwnerFacts::Unknown("timeout".into()))).unwrap();
        assert_eq!(
            (w.key().as_str(), w.group_size),
            ("batch/Job/ml/train", None)
        );
        assert_eq!(w.via, ["Job train", "owner unknown: timeout"]);
    }

    #[test]
    fn cronjob_runs_stay_their_own_workload_jobset_and_deployment_take_over() {
        let p = pod(
            json!({}),
            json!({}),
            json!([owner("batch/v1", "Job", "nightly-29012345")]),
        );
        let w = resolve(
            &p,
            "ml",
            Some(&known(
                Some(owner("batch/v1beta1", "CronJob", "nightly")),
                Some(1),
            )),
        )
        .unwrap();
        assert_eq!(w.key(), "batch/Job/ml/nightly-29012345");
        assert_eq!(w.via, ["Job nightly-29012345", "CronJob nightly"]);

        let w = resolve(
            &p,
            "ml",
            Some(&known(
                Some(owner("jobset.x-k8s.io/v1alpha2", "JobSet", "js")),
                Some(4),
            )),
        )
        .unwrap();
        assert_eq!(
            (w.key().as_str(), w.group_size),
            ("jobset.x-k8s.io/JobSet/ml/js", None)
        );

        let p = pod(
            json!({}),
            json!({}),
            json!([owner("apps/v1", "ReplicaSet", "web-5d4f")]),
        );
        assert_eq!(owner_query(&p, "ml").unwrap().kind, OwnerKind::ReplicaSet);
        let w = resolve(
            &p,
            "ml",
            Some(&known(Some(owner("apps/v1", "Deployment", "web")), Some(3))),
        )
        .unwrap();
        assert_eq!(
            (w.key().as_str(), w.group_size),
            ("apps/Deployment/ml/web", Some(3))
        );
        // A bare ReplicaSet stays the workload.
        let w = resolve(&p, "ml", Some(&known(None, Some(2)))).unwrap();
        assert_eq!(w.key(), "apps/ReplicaSet/ml/web-5d4f");
    }

    #[test]
    fn group_labels_win_over_owner_references() {
        // LeaderWorkerSet: Pods are owned by StatefulSets; each group decides on its own.
        let p = pod(
            json!({crate::names::workload::LWS_NAME: "llama", crate::names::workload::LWS_GROUP_INDEX: "3", crate::names::workload::LWS_WORKER_INDEX: "1"}),
            json!({crate::names::workload::LWS_SIZE: "4"}),
            json!([owner("apps/v1", "StatefulSet", "llama-3")]),
        );
        assert_eq!(owner_query(&p, "ml"), None);
        let w = resolve(&p, "ml", None).unwrap();
        assert_eq!(
            w.key(),
            "leaderworkerset.x-k8s.io/LeaderWorkerSet/ml/llama/group/3"
        );
        assert_eq!((w.group_size, w.index.as_deref()), (Some(4), Some("1")));

        // JobSet Pods carry the JobSet's name: no owner read needed.
        let p = pod(
            json!({crate::names::workload::JOBSET_NAME: "js", "job-name": "js-workers-0"}),
            json!({}),
            json!([owner("batch/v1", "Job", "js-workers-0")]),
        );
        assert_eq!(owner_query(&p, "ml"), None);
        assert_eq!(
            resolve(&p, "ml", None).unwrap().key(),
            "jobset.x-k8s.io/JobSet/ml/js"
        );

        // Kubeflow: the kind from the owner reference, else from the operator label.
        let p = pod(
            json!({crate::names::workload::KUBEFLOW_JOB_NAME: "bert", crate::names::workload::KUBEFLOW_REPLICA_INDEX: "2"}),
            json!({}),
            json!([owner("kubeflow.org/v2beta1", "MPIJob", "bert")]),
        );
        let w = resolve(&p, "ml", None).unwrap();
        assert_eq!(
            (w.key().as_str(), w.index.as_deref()),
            ("kubeflow.org/MPIJob/ml/bert", Some("2"))
        );
        let p = pod(
            json!({crate::names::workload::KUBEFLOW_JOB_NAME: "gpt", crate::names::workload::KUBEFLOW_OPERATOR: "pytorchjob-controller"}),
            json!({}),
            json!(null),
        );
        assert_eq!(
            resolve(&p, "ml", None).unwrap().key(),
            "kubeflow.org/PyTorchJob/ml/gpt"
        );

        // Ray: one decision per worker group.
        let p = pod(
            json!({crate::names::workload::RAY_CLUSTER: "rc", crate::names::workload::RAY_GROUP: "gpu-workers"}),
            json!({}),
            json!([owner("ray.io/v1", "RayCluster", "rc")]),
        );
        assert_eq!(
            resolve(&p, "ml", None).unwrap().key(),
            "ray.io/RayCluster/ml/rc/group/gpu-workers"
        );
    }

    #[test]
    fn other_owners_and_bare_pods() {
        let p = pod(
            json!({}),
            json!({}),
            json!([owner("apps/v1", "StatefulSet", "db")]),
        );
        assert_eq!(owner_query(&p, "ml"), None);
        let w = resolve(&p, "ml", None).unwrap();
        assert_eq!(
            (w.key().as_str(), w.via.len()),
            ("apps/StatefulSet/ml/db", 1)
        );
        let p = pod(
            json!({}),
            json!({}),
            json!([owner("v1", "ReplicationController", "rc")]),
        );
        assert_eq!(
            resolve(&p, "ml", None).unwrap().key(),
            "core/ReplicationController/ml/rc"
        );
        // Several owners, none controlling: no controlling workload.
        let mut a = owner("batch/v1", "Job", "a");
        a["controller"] = json!(false);
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "u"});
        assert_eq!(
            resolve(&pod(json!({}), json!({}), json!([a, b])), "ml", None),
            None
        );
        assert_eq!(
            resolve(&pod(json!({}), json!({}), json!(null)), "ml", None),
            None
        );
        // Empty label values do not name a workload.
        let p = pod(
            json!({crate::names::workload::JOBSET_NAME: " "}),
            json!({}),
            json!(null),
        );
        assert_eq!(resolve(&p, "ml", None), None);
    }

    #[test]
    fn a_jobs_group_is_its_parallelism_capped_by_its_completions() {
        assert_eq!(job_group_size(None, None), Some(1));
        assert_eq!(job_group_size(Some(4), Some(2)), Some(2));
        assert_eq!(job_group_size(Some(4), None), Some(4));
        assert_eq!(job_group_size(Some(0), None), None);
        assert_eq!(job_group_size(Some(-3), Some(5)), None);
    }
}
