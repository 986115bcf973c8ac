//! A Pod as quota counting reads it, THE one definition of what that is: [`HeldPod`], what the quota watch
//! decodes and [`super::held::HeldPods`] keeps of a Pod that may hold GPUs, and [`WatchedPod`], the watch's
//! event (the Pod's name, namespace, uid and resourceVersion, how long it holds its quota, and its
//! [`HeldPod`]). Decoded from a Pod's JSON by one serde projection that reads only the fields counting reads
//! (the containers' GPU-capable resources and restart policies, the claims, the Node name, selector and
//! required node affinity, the claim statuses; the deletion time, grace period and phase): every other field
//! is skipped while an event is decoded, so a whole Pod is never built. A typed Pod goes through the same
//! projection ([`WatchedPod::of`]); counting reads a held Pod as the minimal Pod [`HeldPod::to_pod`] builds.
//! Sizes in docs/measurements/2026-11-30-frontend-envelope.md.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, Pod, PodResourceClaim, PodResourceClaimStatus,
    PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};

use super::demand::Lifetime;

/// A watched Pod: what the watch reads of its metadata, how long it holds its quota, and what counting reads
/// of it (`None`: it cannot hold GPUs whatever the policy says, or has no namespace).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchedPod {
    /// Its name, namespace, uid and resourceVersion (the watch resumes from the last event's).
    pub metadata: ObjectMeta,
    pub lifetime: Lifetime,
    pub held: Option<HeldPod>,
}

impl WatchedPod {
    /// A typed Pod as the watch decodes it (through the same projection).
    pub fn of(pod: &Pod) -> WatchedPod {
        serde_json::to_value(pod)
            .and_then(serde_json::from_value)
            .unwrap_or_default()
    }

    /// Whether it holds its quota at `now_ms` ([`super::demand::holds_quota`]).
    pub fn holds_quota(&self, now_ms: u64) -> bool {
        self.lifetime.holds_at(now_ms)
    }
}

/// What counting reads of a Pod that may hold GPUs, and all that is kept of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeldPod {
    pub namespace: String,
    /// Being deleted: when it stops holding its quota ([`Lifetime::holds_until_ms`]).
    pub holds_until_ms: Option<u64>,
    spec: HeldSpec,
    /// `status.resourceClaimStatuses`: the claims made from its templates.
    made_claims: Vec<PodResourceClaimStatus>,
}

/// The spec fields counting reads. Containers without a GPU-capable resource are left out (they hold
/// nothing whatever the rules say), and of the others only such resources.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeldSpec {
    #[serde(default, deserialize_with = "gpu_containers")]
    containers: Vec<HeldContainer>,
    #[serde(default, deserialize_with = "gpu_containers")]
    init_containers: Vec<HeldContainer>,
    #[serde(default, deserialize_with = "or_empty")]
    resource_claims: Vec<PodResourceClaim>,
    node_name: Option<String>,
    #[serde(default, deserialize_with = "pairs")]
    node_selector: Vec<(String, String)>,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    #[serde(
        default,
        rename = "affinity",
        deserialize_with = "required_node_affinity"
    )]
    required: Option<Box<NodeSelector>>,
}

/// A container's GPU-capable resources (neither CPU, memory, storage nor hugepages) and restart policy.
#[derive(Debug, Clone, Default, PartialEq)]
struct HeldContainer {
    name: String,
    restart_policy: Option<String>,
    limits: Vec<(String, Quantity)>,
    requests: Vec<(String, Quantity)>,
}

/// Resources no rule can make a GPU (what Kubernetes itself accounts).
fn native(resource: &str) -> bool {
    matches!(resource, "cpu" | "memory" | "ephemeral-storage" | "storage")
        || resource.starts_with("hugepages-")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Projection {
    #[serde(default)]
    metadata: Meta,
    spec: Option<HeldSpec>,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    phase: Option<String>,
    #[serde(default, deserialize_with = "or_empty")]
    resource_claim_statuses: Vec<PodResourceClaimStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerJson {
    #[serde(default)]
    name: String,
    resources: Option<ResourcesJson>,
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
struct ResourcesJson {
    #[serde(default, deserialize_with = "pairs")]
    limits: Vec<(String, Quantity)>,
    #[serde(default, deserialize_with = "pairs")]
    requests: Vec<(String, Quantity)>,
}

fn or_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A JSON object as its entries, in key order (a `Vec` costs a fraction of a `BTreeMap`'s node).
fn pairs<'de, D: Deserializer<'de>, V: Deserialize<'de>>(
    d: D,
) -> Result<Vec<(String, V)>, D::Error> {
    let map = Option::<BTreeMap<String, V>>::deserialize(d)?.unwrap_or_default();
    Ok(map.into_iter().collect())
}

fn gpu_containers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HeldContainer>, D::Error> {
    let gpu_capable = |rs: Vec<(String, Quantity)>| -> Vec<(String, Quantity)> {
        rs.into_iter().filter(|(k, _)| !native(k)).collect()
    };
    Ok(or_empty::<D, ContainerJson>(d)?
        .into_iter()
        .filter_map(|c| {
            let r = c.resources?;
            let (limits, requests) = (gpu_capable(r.limits), gpu_capable(r.requests));
            (!limits.is_empty() || !requests.is_empty()).then_some(HeldContainer {
                name: c.name,
                restart_policy: c.restart_policy,
                limits,
                requests,
            })
        })
        .collect())
}

fn required_node_affinity<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<NodeSelector>>, D::Error> {
    Ok(Option::<Affinity>::deserialize(d)?
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .map(Box::new))
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Projection {
            metadata: m,
            spec,
            status,
        } = Projection::deserialize(deserializer)?;
        let (phase, made_claims) =
            status.map_or((None, Vec::new()), |s| (s.phase, s.resource_claim_statuses));
        let lifetime = Lifetime::new(
            phase.as_deref(),
            m.deletion_timestamp.as_ref(),
            m.deletion_grace_period_seconds,
        );
        let held = match (&m.namespace, spec) {
            (Some(namespace), Some(spec))
                if !spec.resource_claims.is_empty()
                    || !spec.containers.is_empty()
                    || !spec.init_containers.is_empty() =>
            {
                Some(HeldPod {
                    namespace: namespace.clone(),
                    holds_until_ms: lifetime.holds_until_ms,
                    spec,
                    made_claims,
                })
            }
            _ => None,
        };
        Ok(WatchedPod {
            metadata: ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                ..ObjectMeta::default()
            },
            lifetime,
            held,
        })
    }
}

impl HeldPod {
    /// The Pod of UID `uid` counting reads: only what is held.
    pub fn to_pod(&self, uid: &str) -> Pod {
        let HeldPod {
            namespace,
            holds_until_ms: _,
            spec,
            made_claims,
        } = self;
        let HeldSpec {
            containers,
            init_containers,
            resource_claims,
            node_name,
            node_selector,
            required,
        } = spec;
        let container = |c: &HeldContainer| {
            let map =
                |rs: &[(String, Quantity)]| (!rs.is_empty()).then(|| rs.iter().cloned().collect());
            Container {
                name: c.name.clone(),
                restart_policy: c.restart_policy.clone(),
                resources: Some(ResourceRequirements {
                    limits: map(&c.limits),
                    requests: map(&c.requests),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }
        };
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                uid: Some(uid.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: containers.iter().map(container).collect(),
                init_containers: (!init_containers.is_empty())
                    .then(|| init_containers.iter().map(container).collect()),
                resource_claims: (!resource_claims.is_empty()).then(|| resource_claims.clone()),
                node_name: node_name.clone(),
                node_selector: (!node_selector.is_empty())
                    .then(|| node_selector.iter().cloned().collect()),
                affinity: required.as_ref().map(|r| Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some((**r).clone()),
                        ..NodeAffinity::default()
                    }),
                    ..Affinity::default()
                }),
                ..PodSpec::default()
            }),
            status: (!made_claims.is_empty()).then(|| PodStatus {
                resource_claim_statuses: Some(made_claims.clone()),
                ..PodStatus::default()
            }),
        }
    }
}

crate::resource::namespaced_resource!(WatchedPod, group: "", version: "v1", kind: "Pod", plural: "pods");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::gpu_resources::NoClaimTemplates;
    use crate::policy::PolicySnapshot;
    use crate::quota::demand;
    use crate::tier_bound::NoNodes;
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

    /// What `pod` counts in tier bronze of a policy with an L4 quota (no Nodes, no templates known).
    fn count_of(pod: &Pod) -> Option<demand::Counted> {
        let quotas =
            "\nquotas:\n  tiers:\n    - tier: bronze\n      classes: { L4-24GB: { max: 8 } }\n";
        let text = format!("{}{quotas}", gpu_admission_policy::DEFAULT_POLICY_YAML);
        let policy = gpu_admission_policy::parse(&text, "p.yaml").unwrap();
        let snapshot = PolicySnapshot::from_policy(std::sync::Arc::new(policy));
        demand::of_pod(
            pod,
            "team",
            "bronze",
            &snapshot,
            &NoNodes,
            &NoClaimTemplates,
        )
    }

    #[test]
    fn counting_reads_the_same_of_a_held_pod_as_of_the_whole_pod() {
        let whole: Pod = serde_json::from_value(stored_pod()).unwrap();
        let watched: WatchedPod = serde_json::from_value(stored_pod()).unwrap();
        assert_eq!(
            WatchedPod::of(&whole),
            watched,
            "a typed Pod projects the same"
        );
        let held = watched.held.as_ref().expect("a GPU Pod is kept");
        let counted = count_of(&whole).expect("it counts");
        assert_eq!(count_of(&held.to_pod("u-1")), Some(counted));
        for now in [0, u64::MAX] {
            assert_eq!(watched.holds_quota(now), demand::holds_quota(&whole, now));
        }
        assert_eq!(held.holds_until_ms, demand::holds_until_ms(&whole));
        assert_eq!(watched.metadata.resource_version.as_deref(), Some("42"));
        // The CPU and memory requests are not kept, nor anything else counting does not read.
        let kept = held.to_pod("u-1");
        let main = &kept.spec.as_ref().unwrap().containers[0];
        let limits = main.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits.keys().collect::<Vec<_>>(), ["nvidia.com/gpu"]);
        assert!(main.resources.as_ref().unwrap().requests.is_none());
        assert!(kept.metadata.annotations.is_none() && main.env.is_none());
        // What the ResourceClaim controller made from the template is kept: the claim is what counts.
        let statuses = kept
            .status
            .as_ref()
            .unwrap()
            .resource_claim_statuses
            .as_ref();
        assert_eq!(
            statuses.unwrap()[0].resource_claim_name.as_deref(),
            Some("train-0-gpu-x")
        );
    }

    /// A container without a GPU-capable resource holds nothing: it is left out, and the Pod counts the same.
    #[test]
    fn a_container_without_gpus_is_not_kept() {
        let mut p = stored_pod();
        p["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "resources": {"requests": {"cpu": "1"}}}));
        let whole: Pod = serde_json::from_value(p.clone()).unwrap();
        let held = serde_json::from_value::<WatchedPod>(p)
            .unwrap()
            .held
            .unwrap();
        let kept = held.to_pod("u-1");
        assert_eq!(kept.spec.as_ref().unwrap().containers.len(), 1);
        assert_eq!(count_of(&kept), count_of(&whole));
    }

    #[test]
    fn a_pod_without_spec_or_status_decodes() {
        let w: WatchedPod =
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}})).unwrap();
        assert_eq!(w.metadata.name.as_deref(), Some("p"));
        assert!(w.held.is_none() && w.holds_quota(0));
        let cpu: WatchedPod = serde_json::from_value(json!({"metadata": {"namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]},
            "status": {"phase": "Succeeded"}}))
        .unwrap();
        assert!(cpu.held.is_none() && !cpu.holds_quota(0));
    }
}
