//! DRA (`resource.k8s.io/v1`): the ResourceClaimTemplates and ResourceClaims a Pod's `spec.resourceClaims`
//! name, so that GPUs asked for through a claim count like any other (a claim of a GPU DeviceClass makes a
//! GPU Pod, held to its tier), and the DeviceClasses, so that a class the policy does not name is judged by
//! what it selects (`gpu_admission_core::dra::device_class`), and an extended resource a class names
//! (`extendedResourceName`) is known as that class's devices; and the PodGroups (`scheduling.k8s.io/v1beta1`,
//! 1.37 with the workload gates), whose claims made from a template are what a Pod sharing the entry is
//! allocated (`gpu_admission_core::pod::pod_group`). On a Kubernetes without DRA or PodGroups the caches are simply "not served"; a claim the
//! caches cannot read stays unresolved, and `/validate-pod` denies such a Pod under `Enforce` unless it is
//! bound to its tier by itself.

use std::time::Duration;

use gpu_admission_core::dra::device_class::names_resource;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::runtime::reflector::ObjectRef;

use super::optional_api::{OptionalApi, OptionalCache};

const GROUP_VERSION: &str = "resource.k8s.io/v1";
/// How often a cluster without DRA is asked again.
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

pub(crate) struct DraCaches {
    templates: OptionalCache<ResourceClaimTemplate>,
    claims: OptionalCache<ResourceClaim>,
    classes: OptionalCache<DeviceClass>,
    pod_groups: OptionalCache<PodGroup>,
}

impl DraCaches {
    pub(crate) fn start(client: kube::Client) -> Self {
        let api = |plural, kind| OptionalApi {
            group_version: GROUP_VERSION,
            plural,
            kind,
            provider: "DRA API",
            meanwhile: "GPUs asked for through DRA claims are not counted",
        };
        Self {
            templates: OptionalCache::start(
                client.clone(),
                api("resourceclaimtemplates", "ResourceClaimTemplate"),
                DISCOVERY_INTERVAL,
            ),
            claims: OptionalCache::start(
                client.clone(),
                api("resourceclaims", "ResourceClaim"),
                DISCOVERY_INTERVAL,
            ),
            classes: OptionalCache::start(
                client.clone(),
                api("deviceclasses", "DeviceClass"),
                DISCOVERY_INTERVAL,
            ),
            pod_groups: OptionalCache::start(
                client,
                OptionalApi {
                    group_version: "scheduling.k8s.io/v1beta1",
                    plural: "podgroups",
                    kind: "PodGroup",
                    provider: "workload API",
                    meanwhile: "a Pod's claim entries are read as its own, never as its PodGroup's claims",
                },
                DISCOVERY_INTERVAL,
            ),
        }
    }

    /// The namespaces whose claims or templates changed, and whether a DeviceClass did, since last asked
    /// (the one reader: the quota usage, which counts those namespaces' Pods again).
    pub(crate) fn take_changes(&self) -> (std::collections::BTreeSet<String>, bool) {
        let (mut namespaces, mut cluster) = self.templates.changes().take();
        let (claims, c) = self.claims.changes().take();
        let (_, classes) = self.classes.changes().take();
        let (groups, _) = self.pod_groups.changes().take();
        namespaces.extend(claims);
        namespaces.extend(groups);
        cluster |= c || classes;
        (namespaces, cluster)
    }

    /// Listed, or known not to be served.
    pub(crate) fn is_ready(&self) -> bool {
        self.templates.is_ready()
            && self.claims.is_ready()
            && self.classes.is_ready()
            && self.pod_groups.is_ready()
    }
}

impl ClaimTemplates for DraCaches {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate> {
        let store = self.templates.synced_store()?;
        store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|t| (*t).clone())
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        let store = self.claims.synced_store()?;
        store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|c| (*c).clone())
    }

    fn device_class(&self, name: &str) -> Option<DeviceClass> {
        let store = self.classes.synced_store()?;
        store.get(&ObjectRef::new(name)).map(|c| (*c).clone())
    }

    fn device_class_for_resource(&self, resource: &str) -> Option<DeviceClass> {
        let store = self.classes.synced_store()?;
        store
            .state()
            .into_iter()
            .find(|c| names_resource(c, resource))
            .map(|c| (*c).clone())
    }

    fn pod_group(&self, namespace: &str, name: &str) -> Option<PodGroup> {
        let store = self.pod_groups.synced_store()?;
        store
            .get(&ObjectRef::new(name).within(namespace))
            .map(|g| (*g).clone())
    }
}
