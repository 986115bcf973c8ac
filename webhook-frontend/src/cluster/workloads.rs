//! The owners of Pods (Jobs and ReplicaSets) as watch caches, for "one decision per workload" and for the
//! checkpoint restore (a Job's controlling CronJob): the frontend's only watch of each kind.
//!
//! A Pod's first hop (its owner reference) is in the Pod; the next one (Job → JobSet/CronJob, ReplicaSet →
//! Deployment) and the group size (Job parallelism, ReplicaSet replicas) are in the owner object. Both are
//! watched cluster-wide with their Pod templates and status dropped, so the caches stay small. A controller
//! creates Pods right after their owner, possibly before the watch delivered it: an owner the cache does
//! not hold (or holds with another uid) is read with one GET bounded by the caller's deadline. Nothing here
//! blocks admission longer than that bound, and every failure (RBAC, timeout, gone) is an
//! [`OwnerFacts::Unknown`]: the Pod's first hop is then its workload.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use k8s_openapi::api::core::v1::Pod;

use super::kube_cache::drive;
use gpu_admission_core::workload::{self, OwnerFacts, OwnerKind, OwnerQuery, WorkloadRef};

/// The longest an admission waits for an owner the caches do not hold yet.
pub(crate) const OWNER_READ_BUDGET: Duration = Duration::from_millis(50);

/// The Pod's workload: labels and owner references, the owner object read through `owners` (cache, else one
/// GET within `budget`); without `owners` (`--no-kube`) the first hop.
pub(crate) async fn resolve_workload(
    owners: Option<&WorkloadOwners>,
    pod: &Pod,
    namespace: &str,
    budget: Duration,
) -> Option<WorkloadRef> {
    // Which owner to read, only where owners can be read (not with --no-kube).
    let query = owners.and_then(|o| Some((o, workload::owner_query(pod, namespace)?)));
    let facts = match query {
        Some((owners, q)) => Some(owners.facts(&q, budget).await),
        None => None,
    };
    workload::resolve(pod, namespace, facts.as_ref())
}

pub(crate) struct WorkloadOwners {
    client: kube::Client,
    jobs: Store<Job>,
    replica_sets: Store<ReplicaSet>,
}

/// Keeps what the resolution reads (metadata's owner references and uid, the sizes); drops the rest.
fn slim_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
}

fn slim_job(job: &mut Job) {
    slim_meta(&mut job.metadata);
    if let Some(spec) = job.spec.as_mut() {
        spec.template = Default::default();
        spec.selector = None;
    }
    job.status = None;
}

fn slim_replica_set(rs: &mut ReplicaSet) {
    slim_meta(&mut rs.metadata);
    rs.spec.template = None;
    rs.spec.selector = Default::default();
    rs.status = None;
}

fn controller_of(meta: &ObjectMeta) -> Option<OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .cloned()
}

/// Pods a Job runs at once: its parallelism (default 1), at most its completions.
fn job_facts(job: &Job) -> OwnerFacts {
    let spec = job.spec.as_ref();
    OwnerFacts::Known {
        controller: controller_of(&job.metadata),
        group_size: workload::job_group_size(
            spec.and_then(|s| s.parallelism).map(i64::from),
            spec.and_then(|s| s.completions).map(i64::from),
        ),
    }
}

fn replica_set_facts(rs: &ReplicaSet) -> OwnerFacts {
    OwnerFacts::Known {
        controller: controller_of(&rs.metadata),
        group_size: rs
            .spec
            .replicas
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
    }
}

impl WorkloadOwners {
    /// Starts both watches in background tasks (a 403 or an error is logged and retried with backoff).
    pub(crate) fn start(client: kube::Client) -> Self {
        let (jobs, jobs_writer) = reflector::store();
        let (replica_sets, rs_writer) = reflector::store();
        let config = || watcher::Config::default().any_semantic();
        let job_stream = watcher(Api::<Job>::all(client.clone()), config())
            .default_backoff()
            .modify(slim_job)
            .reflect(jobs_writer);
        let rs_stream = watcher(Api::<ReplicaSet>::all(client.clone()), config())
            .default_backoff()
            .modify(slim_replica_set)
            .reflect(rs_writer);
        tokio::spawn(drive(job_stream, "jobs"));
        tokio::spawn(drive(rs_stream, "replicasets"));
        Self {
            client,
            jobs,
            replica_sets,
        }
    }

    /// The controlling owner of Job `namespace/name` with uid `uid` (the checkpoint restore asks whether a
    /// CronJob runs it), from the same cache as [`Self::facts`]; `Err` says why it is unknown.
    pub(crate) async fn job_controller(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        deadline: Duration,
    ) -> Result<Option<OwnerReference>, String> {
        let q = OwnerQuery {
            kind: OwnerKind::Job,
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        };
        match self.facts(&q, deadline).await {
            OwnerFacts::Known { controller, .. } => Ok(controller),
            OwnerFacts::Unknown(why) => Err(why),
        }
    }

    /// What the cluster says about `q`'s object: from the cache, else one GET within `deadline`.
    pub(crate) async fn facts(&self, q: &OwnerQuery, deadline: Duration) -> OwnerFacts {
        let uid_matches = |meta: &ObjectMeta| meta.uid.as_deref() == Some(q.uid.as_str());
        match q.kind {
            OwnerKind::Job => {
                if let Some(job) = self.jobs.get(&ObjectRef::new(&q.name).within(&q.namespace))
                    && uid_matches(&job.metadata)
                {
                    return job_facts(&job);
                }
                let api = Api::<Job>::namespaced(self.client.clone(), &q.namespace);
                match get(api, q, deadline).await {
                    Ok(job) => job_facts(&job),
                    Err(why) => OwnerFacts::Unknown(why),
                }
            }
            OwnerKind::ReplicaSet => {
                if let Some(rs) = self
                    .replica_sets
                    .get(&ObjectRef::new(&q.name).within(&q.namespace))
                    && uid_matches(&rs.metadata)
                {
                    return replica_set_facts(&rs);
                }
                let api = Api::<ReplicaSet>::namespaced(self.client.clone(), &q.namespace);
                match get(api, q, deadline).await {
                    Ok(rs) => replica_set_facts(&rs),
                    Err(why) => OwnerFacts::Unknown(why),
                }
            }
        }
    }
}

/// One GET of `q`'s object within `deadline`; an object with another uid than the Pod's reference is not it.
async fn get<K>(api: Api<K>, q: &OwnerQuery, deadline: Duration) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{:?} {}/{}", q.kind, q.namespace, q.name);
    match tokio::time::timeout(deadline, api.get_opt(&q.name)).await {
        Ok(Ok(Some(obj))) if obj.meta().uid.as_deref() == Some(q.uid.as_str()) => Ok(obj),
        Ok(Ok(Some(_))) => Err(format!(
            "{what} has another uid than the Pod's owner reference"
        )),
        Ok(Ok(None)) => Err(format!("{what} not found")),
        Ok(Err(err)) => Err(format!("reading {what}: {err}")),
        Err(_) => Err(format!(
            "reading {what}: no answer within {} ms",
            deadline.as_millis()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_and_controllers_from_the_objects() {
        let job: Job = serde_json::from_value(json!({"metadata": {"name": "j", "uid": "1",
            "ownerReferences": [{"apiVersion": "batch/v1beta1", "kind": "CronJob", "name": "c", "uid": "2", "controller": true}]},
            "spec": {"parallelism": 32, "completions": 64, "template": {}}})).unwrap();
        match job_facts(&job) {
            OwnerFacts::Known {
                controller,
                group_size,
            } => {
                assert_eq!(controller.unwrap().kind, "CronJob");
                assert_eq!(group_size, Some(32));
            }
            other => panic!("{other:?}"),
        }
        let job: Job = serde_json::from_value(json!({"metadata": {"name": "j"},
            "spec": {"parallelism": 8, "completions": 2, "template": {}}}))
        .unwrap();
        assert_eq!(
            job_facts(&job),
            OwnerFacts::Known {
                controller: None,
                group_size: Some(2)
            }
        );
        let mut rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "r", "labels": {"a": "b"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "3", "controller": true}]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {}}}})).unwrap();
        slim_replica_set(&mut rs);
        assert!(rs.spec.template.is_none() && rs.metadata.labels.is_none());
        match replica_set_facts(&rs) {
            OwnerFacts::Known {
                controller,
                group_size,
            } => {
                assert_eq!(controller.unwrap().name, "d");
                assert_eq!(group_size, None, "0 replicas is no group size");
            }
            other => panic!("{other:?}"),
        }
    }
}
