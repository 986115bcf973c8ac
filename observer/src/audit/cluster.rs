//! The audit's I/O: which APIs are served (discovery), what runs (paged lists of Pods and workloads in tier
//! namespaces), the facts decisions read (Namespaces' tier labels, Nodes, PriorityClasses, DRA claims), and
//! writing and deleting reports (server-side apply).

use std::collections::{BTreeMap, HashMap, HashSet};

use gpu_admission_core::exception::Exception;
use gpu_admission_core::names::EXEMPT_NAMESPACES;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use gpu_admission_core::priority_class::PriorityClassFacts;
use gpu_admission_core::tier_bound::{NodeClass, node_class};
use gpu_admission_core::workload::{OwnerFacts, OwnerKind, OwnerQuery};
use gpu_admission_policy::GpuClass;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::oneshot;
use serde::de::DeserializeOwned;

use super::evaluate::Kind;
use super::report::{self, LABEL_MANAGED_BY, MANAGED_BY, REPORT_NAME};

/// Objects per list page.
const PAGE: u32 = 500;
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

/// The APIs one audit uses, found by discovery.
#[derive(Debug, Clone)]
pub struct Apis {
    pub reports: ApiResource,
    /// Pods first, then each served workload resource at its most stable version.
    pub kinds: Vec<Kind>,
    /// Workload resources asked for but not served (logged).
    pub missing: Vec<String>,
    /// `resource.k8s.io/v1` is served: DRA claims are read.
    pub dra: bool,
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
    }))
}

fn api_resource(kind: &Kind) -> ApiResource {
    ApiResource {
        group: kind.group.clone(),
        version: kind.version.clone(),
        api_version: kind.api_version(),
        kind: kind.kind.clone(),
        plural: kind.plural.clone(),
    }
}

/// Every object of `api`, page by page (`visit` sees each page's items).
async fn list_paged<K>(
    api: &Api<K>,
    selector: Option<&str>,
    mut visit: impl FnMut(Vec<K>),
) -> kube::Result<()>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    if let Some(s) = selector {
        params = params.labels(s);
    }
    loop {
        let page = api.list(&params).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        visit(page.items);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// What decisions read from the cluster, read once per audit.
#[derive(Default)]
pub struct ClusterFacts {
    /// Every namespace the webhooks select (all but [`EXEMPT_NAMESPACES`]) → its tier label's value as it
    /// is (`None`: no label); which tier that is is `PolicySnapshot::tier_for`'s answer.
    pub tiers: HashMap<String, Option<String>>,
    nodes: HashMap<String, Option<BTreeMap<String, String>>>,
    pub priority_classes: HashMap<String, PriorityClassFacts>,
    templates: HashMap<(String, String), ResourceClaimTemplate>,
    claims: HashMap<(String, String), ResourceClaim>,
    /// The GpuPolicyExceptions that read (none while the CRD is missing or listing it is forbidden).
    pub exceptions: Vec<Exception>,
    /// Each ReplicaSet's and Job's uid and controlling owner, in namespaces with a live exception (what an
    /// exception's owner chain needs beyond the object itself).
    owners: HashMap<OwnerKey, ListedOwner>,
}

/// A ReplicaSet or Job by kind, namespace and name.
type OwnerKey = (OwnerKind, String, String);
/// What the audit listed of it: its uid and its controlling owner.
type ListedOwner = (Option<String>, Option<OwnerReference>);

impl ClusterFacts {
    pub async fn read(client: &kube::Client, tier_label: &str, dra: bool) -> kube::Result<Self> {
        let mut facts = Self::default();
        let namespaces = Api::<Namespace>::all(client.clone());
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = namespaces.list_metadata(&params).await?;
            for ns in page.items {
                let tier = ns
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(tier_label))
                    .cloned();
                if let Some(name) = ns.metadata.name
                    && !EXEMPT_NAMESPACES.contains(&name.as_str())
                {
                    facts.tiers.insert(name, tier);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        let nodes = Api::<Node>::all(client.clone());
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = nodes.list_metadata(&params).await?;
            for n in page.items {
                if let Some(name) = n.metadata.name {
                    facts.nodes.insert(name, n.metadata.labels);
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        list_paged(&Api::<PriorityClass>::all(client.clone()), None, |items| {
            for pc in items.iter().filter_map(PriorityClassFacts::of_cluster) {
                facts.priority_classes.insert(pc.name.clone(), pc);
            }
        })
        .await?;
        if dra {
            list_paged(
                &Api::<ResourceClaimTemplate>::all(client.clone()),
                None,
                |items| {
                    for t in items {
                        facts.templates.insert(key(&t.metadata), t);
                    }
                },
            )
            .await?;
            list_paged(&Api::<ResourceClaim>::all(client.clone()), None, |items| {
                for c in items {
                    facts.claims.insert(key(&c.metadata), c);
                }
            })
            .await?;
        }
        facts.exceptions = crate::floor::exceptions(client).await?;
        facts.read_owners(client).await?;
        Ok(facts)
    }

    /// The ReplicaSets' and Jobs' owners in namespaces with a live exception (none listed otherwise).
    async fn read_owners(&mut self, client: &kube::Client) -> kube::Result<()> {
        let now = time::OffsetDateTime::now_utc();
        let namespaces: HashSet<String> = self
            .exceptions
            .iter()
            .filter(|e| e.live(now))
            .map(|e| e.id.namespace.clone())
            .collect();
        for ns in namespaces {
            let mut note = |kind: OwnerKind, meta: ObjectMeta| {
                let controller = meta
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|r| r.controller == Some(true))
                    .cloned();
                if let Some(name) = meta.name {
                    self.owners
                        .insert((kind, ns.clone(), name), (meta.uid, controller));
                }
            };
            let rs = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
            for r in rs.list_metadata(&ListParams::default()).await?.items {
                note(OwnerKind::ReplicaSet, r.metadata);
            }
            let jobs = Api::<Job>::namespaced(client.clone(), &ns);
            for j in jobs.list_metadata(&ListParams::default()).await?.items {
                note(OwnerKind::Job, j.metadata);
            }
        }
        Ok(())
    }

    /// What the cluster said of `q`'s object when the audit started; unknown when it was not listed or its uid
    /// differs.
    pub fn owner(&self, q: &OwnerQuery) -> Option<OwnerFacts> {
        let (uid, controller) = self
            .owners
            .get(&(q.kind, q.namespace.clone(), q.name.clone()))?;
        (uid.as_deref() == Some(q.uid.as_str())).then(|| OwnerFacts::Known {
            controller: controller.clone(),
            group_size: None,
        })
    }

    /// A Node's class as `/validate-pod` sees it (unknown when the Node does not exist).
    pub fn node_class(&self, name: &str, catalog: &[GpuClass]) -> NodeClass {
        match self.nodes.get(name) {
            None => NodeClass::Unknown,
            Some(labels) => node_class(labels.as_ref(), catalog),
        }
    }
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl ClaimTemplates for ClusterFacts {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate> {
        self.templates
            .get(&(namespace.into(), name.into()))
            .cloned()
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.claims.get(&(namespace.into(), name.into())).cloned()
    }
}

/// Every object of `kind` in the `namespaces` given, page by page.
pub async fn list_objects(
    client: &kube::Client,
    kind: &Kind,
    namespaces: &HashMap<String, Option<String>>,
    visit: impl FnMut(Vec<DynamicObject>),
) -> kube::Result<()> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &api_resource(kind));
    let mut visit = visit;
    list_paged(&api, None, |items| {
        visit(
            items
                .into_iter()
                .filter(|o| {
                    o.metadata
                        .namespace
                        .as_ref()
                        .is_some_and(|n| namespaces.contains_key(n))
                })
                .collect(),
        )
    })
    .await
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

/// The namespaces holding one of our reports now.
pub async fn our_reports(
    client: &kube::Client,
    reports: &ApiResource,
) -> kube::Result<HashSet<String>> {
    let api = Api::<DynamicObject>::all_with(client.clone(), reports);
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
    let mut found = HashSet::new();
    list_paged(&api, Some(&selector), |items| {
        for r in items {
            if r.metadata.name.as_deref() == Some(REPORT_NAME)
                && let Some(ns) = r.metadata.namespace
            {
                found.insert(ns);
            }
        }
    })
    .await?;
    Ok(found)
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
