//! What the audit reads, held by reflector stores that watches (kube::runtime) keep current: the audited
//! objects (Pods and each discovered workload resource), what decisions read (Namespaces' and Nodes' labels,
//! PriorityClasses, DRA claims and templates, GpuPolicyExceptions and the ReplicaSets' and Jobs' owners their
//! owner chains need) and which namespaces hold one of our reports. A pass reads these stores; nothing is
//! listed per pass.
//!
//! Each watch event also says which namespaces' results it may change ([`Changes`]): an audited object
//! marks its namespace's objects (a pass decides again only those whose resourceVersion changed), what
//! decisions read of a namespace (its labels, its claims and templates, exceptions, the owners of its Pods)
//! marks its facts (everything in it is decided again), a Node whose labels changed or a PriorityClass marks
//! every namespace, and a re-list (a watch that was lost and came back) marks every namespace, since what it
//! missed is not known. A lost watch is [`crate::watched`]'s: its store kept as last
//! seen, retried with backoff, logged and counted.
//!
//! What a store holds per object is trimmed on the way in (managed fields, last-applied annotations, the
//! status nothing reads), and an audited object is kept as its JSON ([`StoredObject`]): see
//! docs/measurements/2026-11-29-watches-not-lists.md for the sizes.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, TryStreamExt};
use gpu_admission_core::exception::GpuPolicyException;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, Event};
use tokio::task::AbortHandle;

use super::cluster::{Apis, api_resource};
use super::evaluate::Kind;
use super::report::{LABEL_MANAGED_BY, MANAGED_BY, REPORT_NAME};
use crate::metrics::Metrics;

/// The annotation `kubectl apply` keeps a whole copy of the object in: read by nothing here.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The namespaces whose results may have changed since the last pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dirty {
    /// Every object of every namespace (a re-list, a PriorityClass, the policy).
    pub all: bool,
    /// Nodes added, deleted or relabelled: the namespaces of the Pods bound to them are decided again
    /// ([`Stores::namespaces_on_nodes`]; a Pod's class is read from its Node by name only).
    pub nodes: HashSet<String>,
    /// Namespaces where audited objects came, went or changed (or whose report was deleted): the objects
    /// whose resourceVersion changed are decided again.
    pub namespaces: HashSet<String>,
    /// Namespaces where what decisions read changed (labels, claims, templates, exceptions, owners, or time
    /// for an exception's expiry or a grace period): every object in them is decided again.
    pub facts: HashSet<String>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        !self.all && self.namespaces.is_empty() && self.facts.is_empty() && self.nodes.is_empty()
    }

    fn merge(&mut self, other: Dirty) {
        self.all |= other.all;
        if self.all {
            self.namespaces.clear();
            self.facts.clear();
            self.nodes.clear();
        } else {
            self.namespaces.extend(other.namespaces);
            self.facts.extend(other.facts);
            self.nodes.extend(other.nodes);
        }
    }
}

/// [`Dirty`], shared by the watches that mark it and the audit that takes it.
#[derive(Debug, Clone, Default)]
pub struct Changes(Arc<Mutex<Dirty>>);

impl Changes {
    fn lock(&self) -> MutexGuard<'_, Dirty> {
        // A panic while holding this lock cannot leave a half-marked set worse than marked: keep going.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Objects of `namespace` changed.
    pub fn namespace(&self, namespace: &str) {
        let mut dirty = self.lock();
        if !dirty.all {
            dirty.namespaces.insert(namespace.to_string());
        }
    }

    /// What decisions read of `namespace` changed.
    pub fn facts(&self, namespace: &str) {
        let mut dirty = self.lock();
        if !dirty.all {
            dirty.facts.insert(namespace.to_string());
        }
    }

    /// Node `name` came, went or changed its labels.
    pub fn node(&self, name: &str) {
        let mut dirty = self.lock();
        if !dirty.all {
            dirty.nodes.insert(name.to_string());
        }
    }

    pub fn all(&self) {
        let mut dirty = self.lock();
        dirty.all = true;
        dirty.namespaces.clear();
        dirty.facts.clear();
        dirty.nodes.clear();
    }

    /// What changed since the last take; nothing is marked after it.
    pub fn take(&self) -> Dirty {
        std::mem::take(&mut *self.lock())
    }

    /// Marks again what a pass could not finish.
    pub fn restore(&self, undone: Dirty) {
        self.lock().merge(undone);
    }
}

/// What an event of one watched resource changes.
#[derive(Debug, Clone, Copy)]
enum Marks {
    /// The object's namespace's objects (Pods, workloads).
    ItsObjects,
    /// The object's namespace's facts (DRA objects, exceptions, owners).
    ItsNamespaceFacts,
    /// The Namespace itself, when its labels changed.
    NamespaceLabels,
    /// The Node, when it came, went or its labels changed (its Pods' class).
    NodeLabels,
    /// Every namespace (PriorityClasses).
    Everything,
    /// The namespace, when its report was deleted (not when written: the audit wrote it).
    ReportDeleted,
}

/// Marks what `event` changes; `before` finds an object as the store held it before the event (labels are
/// compared).
fn mark<K: kube::Resource>(
    event: &Event<K>,
    marks: Marks,
    before: &dyn Fn(&K) -> Option<Arc<K>>,
    changes: &Changes,
) {
    let (object, deleted) = match event {
        Event::Apply(o) => (o, false),
        Event::Delete(o) => (o, true),
        // A re-list: what happened while the watch was away is not known.
        Event::InitDone => return changes.all(),
        Event::Init | Event::InitApply(_) => return,
    };
    let meta = object.meta();
    let labels_changed =
        || deleted || before(object).is_none_or(|old| old.meta().labels != meta.labels);
    match marks {
        Marks::ItsObjects => {
            if let Some(ns) = &meta.namespace {
                changes.namespace(ns);
            }
        }
        Marks::ItsNamespaceFacts => {
            if let Some(ns) = &meta.namespace {
                changes.facts(ns);
            }
        }
        Marks::NamespaceLabels => {
            if let Some(name) = &meta.name
                && labels_changed()
            {
                changes.facts(name);
            }
        }
        Marks::NodeLabels => {
            if let Some(name) = &meta.name
                && labels_changed()
            {
                changes.node(name);
            }
        }
        Marks::Everything => changes.all(),
        Marks::ReportDeleted => {
            if deleted && let Some(ns) = &meta.namespace {
                changes.namespace(ns);
            }
        }
    }
}

/// The stores of one discovery's APIs; dropping it stops their watches.
pub struct Stores {
    /// The discovery they watch.
    pub apis: Apis,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub nodes: Store<PartialObjectMeta<Node>>,
    pub priority_classes: Store<PriorityClass>,
    /// With `resource.k8s.io/v1` served.
    pub claims: Option<(Store<ResourceClaimTemplate>, Store<ResourceClaim>)>,
    /// With the GpuPolicyException API served and readable: the exceptions, and the ReplicaSets' and Jobs'
    /// metadata their owner chains read.
    pub exceptions: Option<ExceptionStores>,
    /// One store per audited kind, in `apis.kinds` order.
    pub objects: Vec<(Kind, Store<StoredObject>)>,
    /// Our reports' metadata.
    pub reports: Store<PartialObjectMeta<DynamicObject>>,
    pub changes: Changes,
    tasks: Vec<AbortHandle>,
}

pub struct ExceptionStores {
    pub exceptions: Store<GpuPolicyException>,
    pub replica_sets: Store<PartialObjectMeta<ReplicaSet>>,
    pub jobs: Store<PartialObjectMeta<Job>>,
}

impl Drop for Stores {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Stores {
    /// Starts the watches of `apis` (on the current tokio runtime); every namespace starts marked.
    pub fn start(client: &kube::Client, apis: Apis, metrics: &Arc<Metrics>) -> Self {
        let mut w = Watches {
            changes: Changes::default(),
            metrics: metrics.clone(),
            tasks: Vec::new(),
        };
        w.changes.all();
        let config = || watcher::Config::default().any_semantic();
        let namespaces = w.metadata(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            config(),
            "namespaces",
            Marks::NamespaceLabels,
        );
        let nodes = w.metadata(
            Api::<PartialObjectMeta<Node>>::all(client.clone()),
            config(),
            "nodes",
            Marks::NodeLabels,
        );
        let priority_classes = w.full(
            Api::<PriorityClass>::all(client.clone()),
            config(),
            "priorityclasses",
            Marks::Everything,
            |_| {},
        );
        let claims = apis.dra.then(|| {
            let templates = w.full(
                Api::<ResourceClaimTemplate>::all(client.clone()),
                config(),
                "resourceclaimtemplates",
                Marks::ItsNamespaceFacts,
                slim_meta,
            );
            let claims = w.full(
                Api::<ResourceClaim>::all(client.clone()),
                config(),
                "resourceclaims",
                Marks::ItsNamespaceFacts,
                slim_meta,
            );
            (templates, claims)
        });
        let exceptions = apis.exceptions.then(|| ExceptionStores {
            exceptions: w.full(
                Api::<GpuPolicyException>::all(client.clone()),
                config(),
                "gpupolicyexceptions",
                Marks::ItsNamespaceFacts,
                slim_meta,
            ),
            replica_sets: w.metadata(
                Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()),
                config(),
                "replicasets",
                Marks::ItsNamespaceFacts,
            ),
            jobs: w.metadata(
                Api::<PartialObjectMeta<Job>>::all(client.clone()),
                config(),
                "jobs",
                Marks::ItsNamespaceFacts,
            ),
        });
        let objects = apis
            .kinds
            .iter()
            .map(|kind| (kind.clone(), w.objects(client, kind)))
            .collect();
        let reports = {
            let api =
                Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &apis.reports);
            let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
            let config = config()
                .labels(&selector)
                .fields(&format!("metadata.name={REPORT_NAME}"));
            let stream = watcher::watcher(api, config).modify(slim_partial);
            w.spawn(
                stream,
                apis.reports.clone(),
                "policyreports",
                Marks::ReportDeleted,
            )
        };
        Self {
            apis,
            namespaces,
            nodes,
            priority_classes,
            claims,
            exceptions,
            objects,
            reports,
            changes: w.changes,
            tasks: w.tasks,
        }
    }

    /// Whether every store has been filled by its first list (a pass waits until then).
    pub fn ready(&self) -> bool {
        use crate::watched::ready;
        ready(&self.namespaces)
            && ready(&self.nodes)
            && ready(&self.priority_classes)
            && ready(&self.reports)
            && self
                .claims
                .as_ref()
                .is_none_or(|(t, c)| ready(t) && ready(c))
            && self
                .exceptions
                .as_ref()
                .is_none_or(|e| ready(&e.exceptions) && ready(&e.replica_sets) && ready(&e.jobs))
            && self.objects.iter().all(|(_, s)| ready(s))
    }

    /// The namespaces of the stored Pods bound to one of `nodes`.
    pub fn namespaces_on_nodes(&self, nodes: &HashSet<String>) -> HashSet<String> {
        if nodes.is_empty() {
            return HashSet::new();
        }
        let mut namespaces = HashSet::new();
        for (_, store) in &self.objects {
            namespaces.extend(namespaces_on(
                nodes,
                store.state().iter().map(|o| o.as_ref()),
            ));
        }
        namespaces
    }

    /// The namespaces holding one of our reports now.
    pub fn report_namespaces(&self) -> HashSet<String> {
        self.reports
            .state()
            .iter()
            .filter_map(|r| r.metadata.namespace.clone())
            .collect()
    }
}

/// The namespaces of the Pods among `objects` bound to one of `nodes`.
fn namespaces_on<'a>(
    nodes: &HashSet<String>,
    objects: impl Iterator<Item = &'a StoredObject>,
) -> HashSet<String> {
    objects
        .filter(|o| o.node_name().is_some_and(|n| nodes.contains(n)))
        .filter_map(|o| o.metadata.namespace.clone())
        .collect()
}

/// The watches being started.
struct Watches {
    changes: Changes,
    metrics: Arc<Metrics>,
    tasks: Vec<AbortHandle>,
}

impl Watches {
    /// Runs `stream` into a new store, marking [`Changes`] before each event reaches it.
    fn spawn<K>(
        &mut self,
        stream: impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
        dyntype: K::DynamicType,
        resource: &str,
        marks: Marks,
    ) -> Store<K>
    where
        K: kube::Resource + Clone + Debug + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let changes = self.changes.clone();
        let (store, task) = crate::watched::spawn(
            stream,
            dyntype,
            resource,
            self.metrics.clone(),
            move |event, before| mark(event, marks, before, &changes),
        );
        self.tasks.push(task);
        store
    }

    /// A metadata watch (labels, owners) into a store.
    fn metadata<K>(
        &mut self,
        api: Api<PartialObjectMeta<K>>,
        config: watcher::Config,
        resource: &str,
        marks: Marks,
    ) -> Store<PartialObjectMeta<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned,
        K: Send + Sync + 'static,
    {
        let stream = watcher::watcher(api, config).modify(slim_partial);
        self.spawn(stream, (), resource, marks)
    }

    /// A watch of whole objects into a store, each trimmed by `slim` first.
    fn full<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        resource: &str,
        marks: Marks,
        slim: fn(&mut K),
    ) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned,
        K: Send + Sync + 'static,
    {
        let stream = watcher::watcher(api, config).modify(slim);
        self.spawn(stream, (), resource, marks)
    }

    /// The audited objects of `kind`, whole but for what nothing reads, as JSON.
    fn objects(&mut self, client: &kube::Client, kind: &Kind) -> Store<StoredObject> {
        let ar = api_resource(kind);
        let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
        let pods = kind.is_pod();
        let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
            .map_ok(move |event| map_event(event, |o| StoredObject::of(o, pods)));
        self.spawn(stream, ar, &kind.plural, Marks::ItsObjects)
    }
}

/// The same event, of `f`'s object.
fn map_event<A, B>(event: Event<A>, f: impl Fn(A) -> B) -> Event<B> {
    match event {
        Event::Apply(o) => Event::Apply(f(o)),
        Event::Delete(o) => Event::Delete(f(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(f(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// An audited object as its store keeps it: its name, namespace and resourceVersion, and its JSON, slimmed
/// ([`slim_object`]). A `serde_json::Value` costs about ten times its JSON (every JSON object a B-tree
/// node); a pass decodes only the objects of the namespaces it decides.
#[derive(Debug, Clone)]
pub struct StoredObject {
    metadata: ObjectMeta,
    json: Box<str>,
    /// A Pod's `spec.nodeName` (the Node its class is read from).
    node_name: Option<Box<str>>,
}

impl StoredObject {
    pub fn of(mut object: DynamicObject, pod: bool) -> Self {
        let node_name = pod
            .then(|| object.data["spec"]["nodeName"].as_str().map(Into::into))
            .flatten();
        slim_object(&mut object, pod);
        let json = serde_json::to_string(&object).unwrap_or_default().into();
        let metadata = ObjectMeta {
            name: object.metadata.name,
            namespace: object.metadata.namespace,
            resource_version: object.metadata.resource_version,
            ..ObjectMeta::default()
        };
        Self {
            metadata,
            json,
            node_name,
        }
    }

    /// A Pod's `spec.nodeName`.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    /// The object again (`None`, logged, if its JSON no longer reads, which its writing here rules out).
    pub fn object(&self) -> Option<DynamicObject> {
        serde_json::from_str(&self.json)
            .inspect_err(|err| tracing::warn!(%err, name = ?self.metadata.name, "a stored object does not read"))
            .ok()
    }
}

impl kube::Resource for StoredObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn slim_meta_of(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

fn slim_meta<K: kube::Resource>(object: &mut K) {
    slim_meta_of(object.meta_mut());
}

/// Labels, owners and uid are what a metadata store is read for.
fn slim_partial<K>(object: &mut PartialObjectMeta<K>) {
    object.metadata.managed_fields = None;
    object.metadata.annotations = None;
}

/// An audited object as decisions read it: a Pod keeps of its status the phase (running or not) and its
/// claims' names (its DRA GPUs); a workload keeps none of it.
pub fn slim_object(object: &mut DynamicObject, pod: bool) {
    slim_meta_of(&mut object.metadata);
    let Some(fields) = object.data.as_object_mut() else {
        return;
    };
    let status = fields.remove("status");
    if pod && let Some(serde_json::Value::Object(mut status)) = status {
        status.retain(|k, _| matches!(k.as_str(), "phase" | "resourceClaimStatuses"));
        fields.insert("status".into(), serde_json::Value::Object(status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::{self, ObjectRef};
    use serde_json::json;

    #[test]
    fn a_pod_keeps_its_phase_and_claims_and_a_workload_no_status() {
        let raw = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns",
                "annotations": {LAST_APPLIED: "{}", "keep": "me"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}],
                "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}});
        let mut pod: DynamicObject = serde_json::from_value(raw.clone()).unwrap();
        slim_object(&mut pod, true);
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(
            pod.metadata
                .annotations
                .as_ref()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["keep"]
        );
        assert_eq!(
            pod.data["status"],
            json!({"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]})
        );
        assert_eq!(pod.data["spec"], raw["spec"]);
        let mut workload: DynamicObject = serde_json::from_value(raw).unwrap();
        slim_object(&mut workload, false);
        assert!(workload.data.get("status").is_none());
    }

    #[test]
    fn a_stored_object_reads_back_as_slimmed() {
        let raw = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "managedFields": [{"manager": "m"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u", "controller": true}]},
            "spec": {"replicas": 2}, "status": {"replicas": 2}});
        let stored = StoredObject::of(serde_json::from_value(raw.clone()).unwrap(), false);
        assert_eq!(stored.metadata.name.as_deref(), Some("d"));
        assert_eq!(stored.metadata.namespace.as_deref(), Some("ns"));
        let mut slimmed: DynamicObject = serde_json::from_value(raw).unwrap();
        slim_object(&mut slimmed, false);
        assert_eq!(
            serde_json::to_value(stored.object().unwrap()).unwrap(),
            serde_json::to_value(slimmed).unwrap()
        );
    }

    #[test]
    fn a_node_marks_only_itself_and_only_its_pods_namespaces_are_decided() {
        let (before, mut writer) = reflector::store::<PartialObjectMeta<Node>>();
        let changes = Changes::default();
        let node = |class: &str| {
            let mut n = PartialObjectMeta::<Node>::default();
            n.metadata.name = Some("gpu-1".into());
            n.metadata.labels = Some([("class".to_string(), class.to_string())].into());
            n
        };
        let apply = |ev: Event<_>, writer: &mut reflector::store::Writer<_>| {
            mark(
                &ev,
                Marks::NodeLabels,
                &|o| before.get(&ObjectRef::from_obj(o)),
                &changes,
            );
            writer.apply_watcher_event(&ev);
        };
        apply(Event::Apply(node("L4")), &mut writer);
        let added = changes.take();
        assert!(!added.all, "a Node added does not re-decide everything");
        assert_eq!(added.nodes, HashSet::from(["gpu-1".to_string()]));
        apply(Event::Apply(node("L4")), &mut writer);
        assert!(changes.take().is_empty(), "same labels: nothing to audit");
        apply(Event::Apply(node("H100")), &mut writer);
        assert_eq!(changes.take().nodes, HashSet::from(["gpu-1".to_string()]));
        apply(Event::Delete(node("H100")), &mut writer);
        assert_eq!(changes.take().nodes, HashSet::from(["gpu-1".to_string()]));

        let pod = |ns: &str, node: Option<&str>| {
            let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
            if let Some(n) = node {
                spec["nodeName"] = json!(n);
            }
            let raw = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": ns}, "spec": spec});
            StoredObject::of(serde_json::from_value(raw).unwrap(), true)
        };
        let stored = [
            pod("on-it", Some("gpu-1")),
            pod("elsewhere", Some("gpu-2")),
            pod("pending", None),
        ];
        assert_eq!(
            namespaces_on(&HashSet::from(["gpu-1".to_string()]), stored.iter()),
            HashSet::from(["on-it".to_string()])
        );
        assert!(namespaces_on(&HashSet::from(["gpu-3".to_string()]), stored.iter()).is_empty());
    }

    fn namespace(name: &str, tier: Option<&str>) -> PartialObjectMeta<Namespace> {
        let mut ns = PartialObjectMeta::<Namespace>::default();
        ns.metadata.name = Some(name.into());
        ns.metadata.labels = tier.map(|t| [("tier".to_string(), t.to_string())].into());
        ns
    }

    #[test]
    fn a_namespace_is_marked_when_its_labels_change_only() {
        let (before, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        let changes = Changes::default();
        let apply = |ev: Event<_>, writer: &mut reflector::store::Writer<_>| {
            mark(
                &ev,
                Marks::NamespaceLabels,
                &|o| before.get(&ObjectRef::from_obj(o)),
                &changes,
            );
            writer.apply_watcher_event(&ev);
        };
        apply(Event::Apply(namespace("a", Some("gold"))), &mut writer);
        assert_eq!(changes.take().facts, HashSet::from(["a".to_string()]));
        apply(Event::Apply(namespace("a", Some("gold"))), &mut writer);
        assert!(changes.take().is_empty(), "same labels: nothing to audit");
        apply(Event::Apply(namespace("a", Some("silver"))), &mut writer);
        assert_eq!(changes.take().facts, HashSet::from(["a".to_string()]));
        apply(Event::Delete(namespace("a", Some("silver"))), &mut writer);
        assert_eq!(changes.take().facts, HashSet::from(["a".to_string()]));
        apply(Event::InitDone, &mut writer);
        assert!(changes.take().all, "a re-list marks everything");
    }

    #[test]
    fn a_report_is_marked_when_deleted_not_when_written() {
        let changes = Changes::default();
        let mut report = PartialObjectMeta::<Namespace>::default();
        report.metadata.namespace = Some("ns".into());
        mark(
            &Event::Apply(report.clone()),
            Marks::ReportDeleted,
            &|_| None,
            &changes,
        );
        assert!(changes.take().is_empty());
        mark(
            &Event::Delete(report),
            Marks::ReportDeleted,
            &|_| None,
            &changes,
        );
        assert_eq!(changes.take().namespaces, HashSet::from(["ns".to_string()]));
    }

    #[test]
    fn an_audited_object_marks_its_namespaces_objects_and_a_claim_its_facts() {
        let changes = Changes::default();
        let mut object = PartialObjectMeta::<Namespace>::default();
        object.metadata.namespace = Some("ns".into());
        let event = Event::Apply(object);
        mark(&event, Marks::ItsObjects, &|_| None, &changes);
        let dirty = changes.take();
        assert_eq!(dirty.namespaces, HashSet::from(["ns".to_string()]));
        assert!(
            dirty.facts.is_empty(),
            "the other objects keep their results"
        );
        mark(&event, Marks::ItsNamespaceFacts, &|_| None, &changes);
        let dirty = changes.take();
        assert_eq!(dirty.facts, HashSet::from(["ns".to_string()]));
        assert!(dirty.namespaces.is_empty());
    }

    #[test]
    fn marking_everything_absorbs_namespaces_and_restore_merges() {
        let changes = Changes::default();
        changes.namespace("a");
        let undone = changes.take();
        changes.namespace("b");
        changes.restore(undone);
        assert_eq!(
            changes.take().namespaces,
            HashSet::from(["a".to_string(), "b".to_string()])
        );
        changes.facts("c");
        let undone = changes.take();
        changes.facts("d");
        changes.restore(undone);
        assert_eq!(
            changes.take().facts,
            HashSet::from(["c".to_string(), "d".to_string()])
        );
        changes.namespace("a");
        changes.facts("c");
        changes.all();
        changes.namespace("b");
        changes.facts("d");
        assert_eq!(
            changes.take(),
            Dirty {
                all: true,
                ..Dirty::default()
            }
        );
    }
}
