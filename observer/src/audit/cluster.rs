//! The audit's I/O but its watches ([`super::stores`]): which APIs are served (discovery), the facts
//! decisions read, as the stores hold them (Namespaces' tier labels, Nodes, PriorityClasses, DRA claims,
//! exceptions and owners), and writing and deleting reports (server-side apply).

use std::collections::{BTreeMap, HashMap};

use gpu_admission_core::exception::{Exception, GpuPolicyException};
use gpu_admission_core::names::EXEMPT_NAMESPACES;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use gpu_admission_core::priority_class::PriorityClassFacts;
use gpu_admission_core::tier_bound::{NodeClass, node_class};
use gpu_admission_core::workload::{OwnerFacts, OwnerKind, OwnerQuery};
use gpu_admission_policy::GpuClass;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::oneshot;
use kube::runtime::reflector::ObjectRef;

use super::evaluate::Kind;
use super::report::{self, REPORT_NAME};
use super::stores::Stores;

/// The field manager of our server-side applies.
const FIELD_MANAGER: &str = "gpu-admission-observer";
const DRA_GROUP_VERSION: &str = "resource.k8s.io/v1";

/// A workload resource to audit, as given on the command line: `group/plural` (`apps/deployments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub plural: String,
}

impl std::str::FromStr for GroupResource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().split_once('/') {
            Some((g, r)) if !g.is_empty() && !r.is_empty() && !r.contains('/') => Ok(Self {
                group: g.to_string(),
                plural: r.to_string(),
            }),
            _ => Err(format!(
                "{s:?}: expected GROUP/RESOURCE, e.g. apps/deployments"
            )),
        }
    }
}

/// The APIs the audit watches, found by discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apis {
    pub reports: ApiResource,
    /// Pods first, then each served workload resource at its most stable version.
    pub kinds: Vec<Kind>,
    /// Workload resources asked for but not served (logged).
    pub missing: Vec<String>,
    /// `resource.k8s.io/v1` is served: DRA claims are read.
    pub dra: bool,
    /// GpuPolicyExceptions are served and readable: they are read.
    pub exceptions: bool,
}

/// Discovery: `Ok(None)` when the PolicyReport API is not served (the CRD is not installed).
pub async fn discover(
    client: &kube::Client,
    wanted: &[GroupResource],
) -> anyhow::Result<Option<Apis>> {
    let gvk = GroupVersionKind::gvk(report::GROUP, report::VERSION, report::KIND);
    let reports = match oneshot::pinned_kind(client, &gvk).await {
        Ok((ar, _)) => ar,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(kube::Error::Discovery(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut kinds = vec![Kind::pods()];
    let mut missing = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for w in wanted {
        groups.entry(&w.group).or_default().push(&w.plural);
    }
    for (group, plurals) in groups {
        let served = match oneshot::group(client, group).await {
            Ok(g) => g.resources_by_stability(),
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(kube::Error::Discovery(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for plural in plurals {
            match served.iter().find(|(ar, _)| ar.plural == plural) {
                Some((ar, _)) => kinds.push(Kind {
                    group: ar.group.clone(),
                    version: ar.version.clone(),
                    kind: ar.kind.clone(),
                    plural: ar.plural.clone(),
                }),
                None => missing.push(format!("{group}/{plural}")),
            }
        }
    }
    let dra = oneshot::pinned_group(client, &DRA_GROUP_VERSION.parse()?)
        .await
        .is_ok();
    Ok(Some(Apis {
        reports,
        kinds,
        missing,
        dra,
        exceptions: exceptions_readable(client).await?,
    }))
}

pub(crate) fn api_resource(kind: &Kind) -> ApiResource {
    ApiResource {
        group: kind.group.clone(),
        version: kind.version.clone(),
        api_version: kind.api_version(),
        kind: kind.kind.clone(),
        plural: kind.plural.clone(),
    }
}

/// Whether the GpuPolicyException API is served and readable here (one list of at most one object): its
/// watch and the owners' watches are started only then, as the floor reads none while it is not.
async fn exceptions_readable(client: &kube::Client) -> kube::Result<bool> {
    let api = Api::<GpuPolicyException>::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What one pass's decisions read, from the stores as they are when the pass starts.
pub struct ClusterFacts<'s> {
    stores: &'s Stores,
    /// Every namespace the webhooks select (all but [`EXEMPT_NAMESPACES`]) → its tier label's value as it
    /// is (`None`: no label); which tier that is is `PolicySnapshot::tier_for`'s answer.
    pub tiers: HashMap<String, Option<String>>,
    pub priority_classes: HashMap<String, PriorityClassFacts>,
    /// The GpuPolicyExceptions that read (none while the API is not served or readable).
    pub exceptions: Vec<Exception>,
}

impl<'s> ClusterFacts<'s> {
    pub fn read(stores: &'s Stores, tier_label: &str) -> Self {
        let tiers = stores
            .namespaces
            .state()
            .iter()
            .filter_map(|ns| {
                let name = ns.metadata.name.clone()?;
                let tier = ns.metadata.labels.as_ref().and_then(|l| l.get(tier_label));
                (!EXEMPT_NAMESPACES.contains(&name.as_str())).then(|| (name, tier.cloned()))
            })
            .collect();
        let priority_classes = stores
            .priority_classes
            .state()
            .iter()
            .filter_map(|pc| PriorityClassFacts::of_cluster(pc))
            .map(|pc| (pc.name.clone(), pc))
            .collect();
        let exceptions = stores.exceptions.as_ref().map_or_else(Vec::new, |e| {
            e.exceptions
                .state()
                .iter()
                .filter_map(|s| Exception::from_stored(s).ok())
                .collect()
        });
        Self {
            stores,
            tiers,
            priority_classes,
            exceptions,
        }
    }

    /// What the cluster says of `q`'s object; unknown when it is not in the store or its uid differs.
    pub fn owner(&self, q: &OwnerQuery) -> Option<OwnerFacts> {
        let stores = self.stores.exceptions.as_ref()?;
        let meta = match q.kind {
            OwnerKind::ReplicaSet => stores
                .replica_sets
                .get(&ObjectRef::new(&q.name).within(&q.namespace))
                .map(|o| o.metadata.clone()),
            OwnerKind::Job => stores
                .jobs
                .get(&ObjectRef::new(&q.name).within(&q.namespace))
                .map(|o| o.metadata.clone()),
        }?;
        (meta.uid.as_deref() == Some(q.uid.as_str())).then(|| OwnerFacts::Known {
            controller: meta
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .cloned(),
            group_size: None,
        })
    }

    /// A Node's class as `/validate-pod` sees it (unknown when the Node does not exist).
    pub fn node_class(&self, name: &str, catalog: &[GpuClass]) -> NodeClass {
        match self.stores.nodes.get(&ObjectRef::new(name)) {
            None => NodeClass::Unknown,
            Some(node) => node_class(node.metadata.labels.as_ref(), catalog),
        }
    }
}

impl ClaimTemplates for ClusterFacts<'_> {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate> {
        let (templates, _) = self.stores.claims.as_ref()?;
        templates
            .get(&ObjectRef::new(name).within(namespace))
            .map(|t| (*t).clone())
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        let (_, claims) = self.stores.claims.as_ref()?;
        claims
            .get(&ObjectRef::new(name).within(namespace))
            .map(|c| (*c).clone())
    }
}

/// Writes (server-side apply, forced: the observer owns these reports) one namespace's report.
pub async fn apply_report(
    client: &kube::Client,
    reports: &ApiResource,
    report: &serde_json::Value,
) -> kube::Result<()> {
    let namespace = report["metadata"]["namespace"].as_str().unwrap_or_default();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, reports);
    api.patch(
        REPORT_NAME,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(report),
    )
    .await?;
    Ok(())
}

pub async fn delete_report(
    client: &kube::Client,
    reports: &ApiResource,
    namespace: &str,
) -> kube::Result<()> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, reports);
    match api.delete(REPORT_NAME, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
