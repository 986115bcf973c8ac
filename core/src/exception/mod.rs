//! Exceptions as objects: a namespaced `GpuPolicyException` (`gpu-admission.io/v1alpha1`) relaxes one or
//! more of its namespace's tier rules for the workloads it names, until it expires. Pure functions:
//!
//! - [`Exception::from_object`] reads one (a watch cache in the frontend, a file in the CLI);
//! - [`covering`] answers which live exceptions of the namespace cover an object, from its owner chain
//!   ([`Owner`]: the object, its controlling owner reference, and that owner's own controller, which the
//!   edge reads: [`chain_query`], [`chain`]) and `now` (an expired exception never applies);
//! - [`Exception::widen`] gives the tier's rules as one exception relaxes them, which `/validate-pod` decides
//!   the object against again (`Allowance::Excepted` names the exception that cleared it) and which
//!   `/mutate-pod` leaves alone (a Pod an exception covers for classes or priority is not mutated);
//! - [`review`] decides a CREATE or UPDATE of an exception: the object's own validity and the creator's power.
//!
//! The spec:
//!
//! | field | meaning |
//! |---|---|
//! | `rules` | which rules it relaxes, one or more of `Classes`, `PriorityCap`, `Quota` ([`Rule`]) |
//! | `classes` | with `Classes`: GPU classes of the catalog allowed besides the tier's (required) |
//! | `maxPriorityClass` | with `PriorityCap`: the policy's priority bucket that caps instead of the tier's (required) |
//! | `workloads` | `{kind, name}` of the namespace's objects covered: `Deployment` (its ReplicaSets' Pods), `ReplicaSet`, `StatefulSet`, `DaemonSet`, `Job`, `CronJob` (its Jobs' Pods), `Pod` (a bare Pod by name) |
//! | `expiresAt` | RFC 3339; required, in the future at creation and at most [`MAX_LIFETIME_DAYS`] days ahead |
//!
//! An exception covers an object only through owner references, never labels (a tenant writes labels). One
//! exception must clear everything an object breaks: two exceptions are not combined.

pub mod review;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube_core::DynamicObject;
use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::policy::{PolicySnapshot, TierRules};
use crate::workload::{OwnerFacts, OwnerKind, OwnerQuery};

/// The CRD's API group.
pub const GROUP: &str = crate::authority::API_GROUP;
/// The CRD's version.
pub const VERSION: &str = "v1alpha1";
/// The CRD's kind.
pub const KIND: &str = "GpuPolicyException";
/// The CRD's resource (plural), as RBAC and webhook rules name it.
pub const PLURAL: &str = "gpupolicyexceptions";
/// The longest an exception may live, from the time it is created or updated.
pub const MAX_LIFETIME_DAYS: i64 = 90;

/// A tier rule an exception relaxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum Rule {
    /// The tier's GPU classes: the exception's `classes` are allowed too.
    Classes,
    /// The tier's priority cap: the exception's `maxPriorityClass` caps instead.
    PriorityCap,
    /// The GPU quota: the covered Pods are not held to it (they are still counted once they run).
    Quota,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Classes => "Classes",
            Rule::PriorityCap => "PriorityCap",
            Rule::Quota => "Quota",
        }
    }
}

/// A kind of object an exception names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum Kind {
    Pod,
    ReplicaSet,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
}

impl Kind {
    /// The kind of an owner reference or a request (`apiVersion` and `kind`); `None` for any other.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        Some(match (group, kind) {
            ("", "Pod") => Kind::Pod,
            ("apps", "ReplicaSet") => Kind::ReplicaSet,
            ("apps", "Deployment") => Kind::Deployment,
            ("apps", "StatefulSet") => Kind::StatefulSet,
            ("apps", "DaemonSet") => Kind::DaemonSet,
            ("batch", "Job") => Kind::Job,
            ("batch", "CronJob") => Kind::CronJob,
            _ => return None,
        })
    }
}

/// One object of an owner chain, or one an exception names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub struct Owner {
    pub kind: Kind,
    pub name: String,
}

impl Owner {
    fn of_ref(r: &OwnerReference) -> Option<Self> {
        Some(Owner {
            kind: Kind::of(&r.api_version, &r.kind)?,
            name: r.name.clone(),
        })
    }
}

/// The exception's `spec`, as stored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub classes: Vec<String>,
    #[serde(default)]
    pub max_priority_class: Option<String>,
    pub workloads: Vec<Owner>,
    pub expires_at: String,
    /// Why, for people (not read by any decision).
    #[serde(default)]
    pub reason: Option<String>,
}

/// The namespace and name of an exception: what an admission it allowed is logged, counted and reported by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExceptionRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ExceptionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{KIND} {}/{}", self.namespace, self.name)
    }
}

/// One exception as the decisions read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Exception {
    pub id: ExceptionRef,
    pub spec: Spec,
    pub expires_at: OffsetDateTime,
}

/// A stored exception as a watch lists it: its metadata and its spec unread (read by
/// [`Exception::from_stored`], so that one malformed object costs only itself).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct GpuPolicyException {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: serde_json::Value,
}

crate::resource::namespaced_resource!(GpuPolicyException, group: GROUP, version: VERSION, kind: KIND, plural: PLURAL);

impl Exception {
    /// Reads a stored object (any `apiVersion` of the group); `Err` says what is wrong with it.
    pub fn from_object(object: &DynamicObject) -> Result<Self, String> {
        let spec = object.data.get("spec").ok_or("no spec")?;
        Self::read(&object.metadata, spec)
    }

    /// [`Self::from_object`] of what a watch holds.
    pub fn from_stored(stored: &GpuPolicyException) -> Result<Self, String> {
        Self::read(&stored.metadata, &stored.spec)
    }

    fn read(metadata: &ObjectMeta, spec: &serde_json::Value) -> Result<Self, String> {
        let spec: Spec = serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}"))?;
        let expires_at = OffsetDateTime::parse(&spec.expires_at, &Rfc3339).map_err(|e| {
            format!(
                "spec.expiresAt {:?} is no RFC 3339 time: {e}",
                spec.expires_at
            )
        })?;
        let id = ExceptionRef {
            namespace: metadata.namespace.clone().unwrap_or_default(),
            name: metadata.name.clone().unwrap_or_default(),
        };
        Ok(Self {
            id,
            spec,
            expires_at,
        })
    }

    /// Still applies at `now` (an exception expiring at `now` no longer does).
    pub fn live(&self, now: OffsetDateTime) -> bool {
        now < self.expires_at
    }

    pub fn relaxes(&self, rule: Rule) -> bool {
        self.spec.rules.contains(&rule)
    }

    /// Names an object of the chain.
    pub fn covers(&self, chain: &[Owner]) -> bool {
        self.spec.workloads.iter().any(|w| chain.contains(w))
    }

    /// The tier's rules as this exception relaxes them: its classes (those of the catalog) added to the
    /// tier's, its priority bucket as the cap. The quota is not a tier rule: see [`Rule::Quota`].
    pub fn widen<'p>(&self, rules: &mut TierRules<'p>, policy: &'p PolicySnapshot) {
        if self.relaxes(Rule::Classes) {
            let known: BTreeSet<String> = self
                .spec
                .classes
                .iter()
                .filter(|c| policy.class(c).is_some())
                .cloned()
                .collect();
            rules.allowed.to_mut().extend(known);
        }
        if self.relaxes(Rule::PriorityCap)
            && let Some(cap) = self
                .spec
                .max_priority_class
                .as_deref()
                .and_then(|c| policy.priority_classes.get(c))
        {
            rules.max_priority_class = Some(cap);
        }
    }
}

/// The live exceptions of `namespace` among `exceptions` that cover an object with owner chain `chain` and
/// relax at least one of `rules`, by name.
pub fn covering<'e>(
    chain: &[Owner],
    exceptions: &'e [Exception],
    namespace: &str,
    now: OffsetDateTime,
    rules: &[Rule],
) -> Vec<&'e Exception> {
    let mut found: Vec<&Exception> = exceptions
        .iter()
        .filter(|e| e.id.namespace == namespace && e.live(now) && e.covers(chain))
        .filter(|e| rules.iter().any(|r| e.relaxes(*r)))
        .collect();
    found.sort_by(|a, b| a.id.name.cmp(&b.id.name));
    found
}

/// The identity of kube-controller-manager when it runs without a ServiceAccount per controller.
pub const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

/// Whether `creator` is the controller that creates the objects an owner of kind `owner` controls
/// (kube-controller-manager, or that controller's ServiceAccount in `kube-system`).
fn creates_for(creator: &str, owner: Kind) -> bool {
    let account = match owner {
        Kind::ReplicaSet => "replicaset-controller",
        Kind::Deployment => "deployment-controller",
        Kind::StatefulSet => "statefulset-controller",
        Kind::DaemonSet => "daemon-set-controller",
        Kind::Job => "job-controller",
        Kind::CronJob => "cronjob-controller",
        Kind::Pod => return false,
    };
    creator == CONTROLLER_MANAGER
        || creator
            .strip_prefix("system:serviceaccount:kube-system:")
            .is_some_and(|a| a == account)
}

/// An owner chain (of the object whose metadata is `meta`) as its creator can vouch for it: an object's
/// owner references are written by whoever creates it, so they count only when `creator` is the controller
/// of the first owner's kind (a ReplicaSet's Pods created by the ReplicaSet controller, a Deployment's
/// ReplicaSets by the Deployment controller). From anyone else (a tenant writing `ownerReferences` on a bare
/// Pod to ride a Deployment's exception) the chain is the object alone. The next hop is as trustworthy as the
/// owner's own creation, which was checked the same way when it was admitted.
pub fn as_created_by(
    mut chain: Vec<Owner>,
    meta: &ObjectMeta,
    creator: Option<&str>,
) -> Vec<Owner> {
    let Some(first) = controller(meta).and_then(Owner::of_ref) else {
        return chain;
    };
    if creator.is_some_and(|c| creates_for(c, first.kind)) {
        return chain;
    }
    if let Some(i) = chain.iter().position(|o| *o == first) {
        chain.truncate(i);
    }
    chain
}

/// The controlling owner reference: the one marked `controller`, else the only one.
fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    let refs = meta.owner_references.as_deref().unwrap_or(&[]);
    refs.iter()
        .find(|r| r.controller == Some(true))
        .or(match refs {
            [only] => Some(only),
            _ => None,
        })
}

/// The owner the edge reads for the chain's next hop: a Pod's (or any object's) controlling ReplicaSet or
/// Job, whose own controller is a Deployment or a CronJob.
pub fn chain_query(meta: &ObjectMeta, namespace: &str) -> Option<OwnerQuery> {
    let r = controller(meta)?;
    let kind = match Kind::of(&r.api_version, &r.kind)? {
        Kind::ReplicaSet => OwnerKind::ReplicaSet,
        Kind::Job => OwnerKind::Job,
        _ => return None,
    };
    Some(OwnerQuery {
        kind,
        namespace: namespace.to_string(),
        name: r.name.clone(),
        uid: r.uid.clone(),
    })
}

/// The owner chain of an object of kind `kind` (`apiVersion`, `kind`) named `name`: itself, its controlling
/// owner, and that owner's controller as `next` says (the edge's read of [`chain_query`], which checks the
/// owner's uid; `None` or unknown: the chain stops at the first hop).
pub fn chain(
    api_version: &str,
    kind: &str,
    name: &str,
    meta: &ObjectMeta,
    next: Option<&OwnerFacts>,
) -> Vec<Owner> {
    let mut out = Vec::new();
    if let Some(kind) = Kind::of(api_version, kind)
        && !name.is_empty()
    {
        out.push(Owner {
            kind,
            name: name.to_string(),
        });
    }
    let Some(first) = controller(meta).and_then(Owner::of_ref) else {
        return out;
    };
    out.push(first);
    if let Some(OwnerFacts::Known {
        controller: Some(c),
        ..
    }) = next
        && let Some(second) = Owner::of_ref(c)
    {
        out.push(second);
    }
    out
}

/// The object of an admission request: its `apiVersion`, kind, name and metadata.
fn request_object(
    req: &kube_core::admission::AdmissionRequest<DynamicObject>,
) -> Option<(String, &str, &str, &ObjectMeta)> {
    let object = req.object.as_ref()?;
    let api_version = match req.kind.group.as_str() {
        "" => req.kind.version.clone(),
        g => format!("{g}/{}", req.kind.version),
    };
    let name = object.metadata.name.as_deref().unwrap_or(&req.name);
    Some((api_version, &req.kind.kind, name, &object.metadata))
}

/// [`chain_query`] of a request's object.
pub fn request_query(
    req: &kube_core::admission::AdmissionRequest<DynamicObject>,
) -> Option<OwnerQuery> {
    let (_, _, _, meta) = request_object(req)?;
    chain_query(meta, req.namespace.as_deref()?)
}

/// [`chain`] of a request's object.
pub fn request_chain(
    req: &kube_core::admission::AdmissionRequest<DynamicObject>,
    next: Option<&OwnerFacts>,
) -> Vec<Owner> {
    request_object(req).map_or_else(Vec::new, |(v, kind, name, meta)| {
        chain(&v, kind, name, meta, next)
    })
}

#[cfg(test)]
mod tests;
