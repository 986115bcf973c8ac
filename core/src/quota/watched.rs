//! A Pod as a quota watch decodes it ([`WatchedPod`]): only the fields [`super::held::slim`] keeps and the
//! watch itself reads (its name, namespace, uid and resourceVersion; its deletion time and grace period; the
//! containers' names, resources and restart policies; its claims, Node name, selector and affinity; its
//! phase and claim statuses). serde skips every other field while an event is decoded, so a whole Pod (its
//! managed fields, env, volumes, probes, status) is never built. Sizes in
//! docs/measurements/2026-11-29-watches-not-lists.md.
use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, Pod, PodResourceClaim, PodResourceClaimStatus, PodSpec, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};

/// A watched Pod holding only what quota counting reads; deserialized from a whole Pod's JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedPod(pub Pod);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Projection {
    #[serde(default)]
    metadata: Meta,
    spec: Option<Spec>,
    status: Option<Status>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    /// The watch resumes from the last event's.
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    containers: Vec<ContainerResources>,
    init_containers: Option<Vec<ContainerResources>>,
    resource_claims: Option<Vec<PodResourceClaim>>,
    node_name: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<Affinity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerResources {
    #[serde(default)]
    name: String,
    resources: Option<ResourceRequirements>,
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    phase: Option<String>,
    resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

impl From<ContainerResources> for Container {
    fn from(c: ContainerResources) -> Self {
        Container {
            name: c.name,
            resources: c.resources,
            restart_policy: c.restart_policy,
            ..Container::default()
        }
    }
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Projection {
            metadata: m,
            spec,
            status,
        } = Projection::deserialize(deserializer)?;
        Ok(WatchedPod(Pod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                deletion_timestamp: m.deletion_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                ..ObjectMeta::default()
            },
            spec: spec.map(|s| PodSpec {
                containers: s.containers.into_iter().map(Container::from).collect(),
                init_containers: s
                    .init_containers
                    .map(|cs| cs.into_iter().map(Container::from).collect()),
                resource_claims: s.resource_claims,
                node_name: s.node_name,
                node_selector: s.node_selector,
                affinity: s.affinity,
                ..PodSpec::default()
            }),
            status: status.map(|s| PodStatus {
                phase: s.phase,
                resource_claim_statuses: s.resource_claim_statuses,
                ..PodStatus::default()
            }),
        }))
    }
}

impl kube_core::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::demand;
    use crate::quota::held::slim;
    use serde_json::json;

    /// A stored GPU Pod as the apiserver serves it: managed fields, env, volumes, a full status.
    fn stored_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "train-0", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "train"}, "annotations": {"note": "x".repeat(500)},
                "creationTimestamp": "2026-11-29T10:00:00Z",
                "deletionTimestamp": "2026-11-29T11:00:00Z", "deletionGracePeriodSeconds": 30,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j"}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}}]
            },
            "spec": {
                "nodeName": "gpu-1", "nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "gpu.nvidia.com/class", "operator": "In", "values": ["L4-24GB"]}]}]}}},
                "initContainers": [{"name": "fetch", "image": "busybox", "restartPolicy": "Always",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "containers": [{"name": "main", "image": "trainer:1", "command": ["python", "train.py"],
                    "env": [{"name": "EPOCHS", "value": "10"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "8Gi"},
                                  "requests": {"cpu": "2"}}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "hostIP": "10.1.0.1",
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-0-gpu-x"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "trainer:1", "imageID": "sha256:1",
                    "ready": true, "restartCount": 0, "started": true, "state": {"running": {}}}]
            }
        })
    }

    #[test]
    fn counting_reads_the_same_of_a_watched_pod_as_of_the_whole_pod() {
        let whole: Pod = serde_json::from_value(stored_pod()).unwrap();
        let watched: WatchedPod = serde_json::from_value(stored_pod()).unwrap();
        assert_eq!(slim(&watched.0), slim(&whole));
        assert!(slim(&whole).is_some(), "a GPU Pod is kept");
        for now in [0, u64::MAX] {
            assert_eq!(
                demand::holds_quota(&watched.0, now),
                demand::holds_quota(&whole, now)
            );
        }
        assert_eq!(watched.0.metadata.resource_version.as_deref(), Some("42"));
        assert!(watched.0.metadata.managed_fields.is_none());
        assert!(watched.0.metadata.annotations.is_none());
        let spec = watched.0.spec.as_ref().unwrap();
        assert!(spec.volumes.is_none() && spec.tolerations.is_none());
        assert!(spec.containers[0].env.is_none() && spec.containers[0].image.is_none());
    }

    #[test]
    fn a_pod_without_spec_or_status_decodes() {
        let w: WatchedPod =
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}})).unwrap();
        assert_eq!(w.0.metadata.name.as_deref(), Some("p"));
        assert!(w.0.spec.is_none() && w.0.status.is_none());
        assert!(slim(&w.0).is_none());
    }
}
