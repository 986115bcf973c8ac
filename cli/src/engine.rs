//! The webhooks, offline: each review goes through exactly what the frontend runs for it — `review::decode`,
//! `mutate_pod::admit` over offline ports (the workload from the owner given, the scorer's `Score` — its
//! `Core`, in process, on a fresh learned state or a snapshot), `review::encode`; `review::decode_object`, `validate_pod::admit` over offline ports (the usage snapshot as
//! the quota's),
//! `review::encode_verdict` — as a frontend without a cluster decides (`--no-kube`: tiers given, PriorityClasses
//! from the policy's buckets). Each call is kept as an [`Exchange`] (the review and the AdmissionReview answered),
//! which the tests replay against the running webhooks.

use std::sync::{Arc, Mutex};

use futures_executor::block_on;
use gpu_admission_core::admission::mutate_claim;
use gpu_admission_core::admission::mutate_pod::{
    self, Admitted, MutatePorts, Outcome, ScorerOutcome,
};
use gpu_admission_core::admission::validate_pod::{
    self, Allowance, Check, QuotaStep, QuotaUnavailable, Reason, Reservation, ValidatePorts,
    Validated,
};
use gpu_admission_core::authority::{Grants, Permission};
use gpu_admission_core::dra::device_class::names_resource;
use gpu_admission_core::exception::{self, Exception, Owner};
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::{self, Usage};
use gpu_admission_core::review::{self, Answer, Content, Verdict};
use gpu_admission_core::tier_bound::NoNodes;
use gpu_admission_core::workload::{self, OwnerFacts, WorkloadRef};
use gpu_admission_proto::scorer::v1::ScoreRequest;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube_core::admission::AdmissionRequest;
use scorer::model::Learned;
use scorer::policy::Policy;
use scorer::service::Core;
use serde_json::Value;
use std::collections::BTreeMap;
use time::OffsetDateTime;

use crate::load::Tiers;
use crate::review::User;

/// The policy's view as the frontend holds it (derived from the same validated policy).
pub fn snapshot_of(policy: Policy) -> PolicySnapshot {
    PolicySnapshot::from_policy(Arc::new(policy))
}

/// Which webhook answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookPath {
    MutatePod,
    MutateClaim,
    ValidatePod,
}

impl WebhookPath {
    /// The route, `/mutate-pod` or `/validate-pod`.
    pub fn route(self) -> &'static str {
        match self {
            WebhookPath::MutatePod => "/mutate-pod",
            WebhookPath::MutateClaim => "/mutate-claim",
            WebhookPath::ValidatePod => "/validate-pod",
        }
    }
}

/// One review and the AdmissionReview a webhook answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub webhook: WebhookPath,
    pub review: Value,
    pub response: Value,
}

/// What `/mutate-pod` did with a Pod.
#[derive(Debug)]
pub struct Mutation {
    /// The metric's outcome (`mutated`, `tier_default`, `passed_through`, `skipped`).
    pub outcome: &'static str,
    /// Why a skipped Pod was not ours (`no GPU request`, `already decided`, …).
    pub skipped: Option<&'static str>,
    pub answer: Answer,
}

/// What `/validate-pod` answered, and why it let an object through without a word.
#[derive(Debug)]
pub struct Validation {
    pub verdict: Verdict,
    /// `not ours: namespace has no tier label`, `admin`, …
    pub note: Option<String>,
    /// What could not be decided (`Reason::Undecidable`: a Pod that does not read as one, a GPU quantity that
    /// is no quantity, a claim that cannot be read), whatever the mode answered.
    pub undecidable: Vec<String>,
}

/// The run's settings besides the policy.
#[derive(Debug, Clone)]
pub struct Options {
    pub tiers: Tiers,
    pub requester: User,
    /// Decide workloads as a frontend without a cluster does: the first owner only, the group size unknown.
    pub no_kube: bool,
    /// The namespace of objects that name none.
    pub default_namespace: String,
    /// The `decided-at` stamp of every decision instead of the clock's: answers that can be compared byte for
    /// byte from run to run (the golden answers test).
    pub decided_at: Option<OffsetDateTime>,
    /// The DRA claims and claim templates among the inputs, which Pods' claims are counted with.
    pub claims: ClaimObjects,
    /// A GPU quota usage snapshot: Pods are decided against it, and those admitted are added (`None`: quotas
    /// are not checked).
    pub usage: Option<Usage>,
    /// The GpuPolicyExceptions among the inputs, which `/validate-pod` and `/mutate-pod` apply as the
    /// frontend applies its watch's (expiry against `decided_at`, else the clock).
    pub exceptions: Vec<Exception>,
}

/// Keeps every readable GpuPolicyException of `inputs` (in `default_namespace` when it names none) in `into`;
/// an unreadable one is skipped, as the frontend's watch skips it.
pub fn learn_exceptions(
    into: &mut Vec<Exception>,
    inputs: &[crate::load::Input],
    default_namespace: &str,
) {
    for i in inputs {
        let (crate::load::Input::Object(src) | crate::load::Input::Ignored(src)) = i else {
            continue;
        };
        let v = &src.value;
        let ours = v["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with("gpu-admission.io/"));
        if !ours || v["kind"].as_str() != Some(exception::KIND) {
            continue;
        }
        let Ok(mut object) = serde_json::from_value::<kube_core::DynamicObject>(v.clone()) else {
            continue;
        };
        if object
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("")
            .is_empty()
        {
            object.metadata.namespace = Some(default_namespace.to_string());
        }
        if let Ok(e) = Exception::from_object(&object) {
            into.retain(|known| known.id != e.id);
            into.push(e);
        }
    }
}

/// The ResourceClaimTemplates, ResourceClaims and PodGroups among the inputs, by (namespace, name), and the
/// DeviceClasses by name: what a Pod's DRA claims and class-backed resources are read from, as the frontend
/// reads them from its watch caches.
#[derive(Debug, Clone, Default)]
pub struct ClaimObjects {
    templates: BTreeMap<(String, String), ResourceClaimTemplate>,
    claims: BTreeMap<(String, String), ResourceClaim>,
    classes: BTreeMap<String, DeviceClass>,
    pod_groups: BTreeMap<(String, String), PodGroup>,
}

impl ClaimObjects {
    /// Keeps every claim and claim template of `inputs` (in `default_namespace` when they name none).
    pub fn learn(&mut self, inputs: &[crate::load::Input], default_namespace: &str) {
        for i in inputs {
            // A PodGroup (or DeviceClass) describes no Pod: it is among the ignored inputs.
            let (crate::load::Input::Object(src) | crate::load::Input::Ignored(src)) = i else {
                continue;
            };
            let v = &src.value;
            let key = (
                v["metadata"]["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(default_namespace)
                    .to_string(),
                v["metadata"]["name"].as_str().unwrap_or("").to_string(),
            );
            let group = v["apiVersion"].as_str().unwrap_or("");
            if group == "scheduling.k8s.io/v1beta1" && v["kind"] == "PodGroup" {
                if let Ok(g) = serde_json::from_value(v.clone()) {
                    self.pod_groups.insert(key, g);
                }
                continue;
            }
            if !group.starts_with("resource.k8s.io/") {
                continue;
            }
            match v["kind"].as_str() {
                Some("ResourceClaimTemplate") => {
                    if let Ok(t) = serde_json::from_value(v.clone()) {
                        self.templates.insert(key, t);
                    }
                }
                Some("ResourceClaim") => {
                    if let Ok(c) = serde_json::from_value(v.clone()) {
                        self.claims.insert(key, c);
                    }
                }
                Some("DeviceClass") => {
                    if let Ok(c) = serde_json::from_value(v.clone()) {
                        self.classes.insert(key.1, c);
                    }
                }
                _ => {}
            }
        }
    }
}

impl ClaimObjects {
    /// The DeviceClasses among the inputs.
    pub fn device_classes(&self) -> Vec<DeviceClass> {
        self.classes.values().cloned().collect()
    }
}

impl ClaimTemplates for ClaimObjects {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate> {
        self.templates
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        self.claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn device_class(&self, name: &str) -> Option<DeviceClass> {
        self.classes.get(name).cloned()
    }

    fn device_class_for_resource(&self, resource: &str) -> Option<DeviceClass> {
        self.classes
            .values()
            .find(|c| names_resource(c, resource))
            .cloned()
    }

    fn pod_group(&self, namespace: &str, name: &str) -> Option<PodGroup> {
        self.pod_groups
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

/// The webhooks over one policy and one scorer state.
pub struct Engine {
    core: Core,
    policy: PolicySnapshot,
    pub options: Options,
    /// The floor rendered from the policy (`None`: the policy has a tier the floor cannot carry).
    pub floor: Option<crate::floor::Floor>,
    /// The usage the Pods checked so far hold (from [`Options::usage`]).
    usage: Mutex<Option<Usage>>,
}

/// The HTTP 400 a webhook answers for a body that is no AdmissionReview.
#[derive(Debug, Clone)]
pub struct BadRequest(pub String);

impl Engine {
    pub fn new(policy: Policy, learned: Learned, options: Options) -> Self {
        let view = snapshot_of(policy.clone());
        let floor =
            crate::floor::Floor::with_device_classes(&policy, &options.claims.device_classes())
                .ok();
        let core = Core::in_process(policy, learned);
        let policy = view;
        Engine {
            core,
            policy,
            usage: Mutex::new(options.usage.clone()),
            options,
            floor,
        }
    }

    pub fn policy(&self) -> &PolicySnapshot {
        &self.policy
    }

    /// Renders the floor again when the DeviceClasses among the inputs changed: its parameters hold what the
    /// observer would write for them.
    pub(crate) fn refresh_floor(&mut self) {
        let classes = self.options.claims.device_classes();
        if self.floor.as_ref().map(|f| f.device_classes()) == Some(classes.as_slice()) {
            return;
        }
        if let Some(policy) = self.policy.policy.as_deref() {
            self.floor = crate::floor::Floor::with_device_classes(policy, &classes).ok();
        }
    }

    fn tier_of(&self, namespace: &str) -> Option<String> {
        self.options.tiers.tier_of(namespace)
    }

    /// `/mutate-pod` for one review; `owner` is what the cluster would say about the Pod's owner.
    pub fn mutate(
        &self,
        review: &Value,
        owner: Option<&OwnerFacts>,
    ) -> Result<(Mutation, Exchange), BadRequest> {
        let body = serde_json::to_vec(review).unwrap_or_default();
        let incoming = review::decode(&body).map_err(|b| BadRequest(b.0))?;
        let mutation = match &incoming.content {
            Content::OtherKind { .. } => Mutation {
                outcome: Outcome::Skipped.as_str(),
                skipped: Some("not a Pod"),
                answer: Answer::default(),
            },
            Content::Unreadable(why) => Mutation {
                outcome: Outcome::Skipped.as_str(),
                skipped: Some("unreadable review"),
                answer: Answer {
                    patch: Default::default(),
                    warnings: vec![format!("gpu-admission: {why}; admitted unchanged")],
                },
            },
            Content::Pod(req) => self.decide_pod(&incoming.uid, req, owner),
        };
        let response = review::encode(incoming.api_version, &incoming.uid, &mutation.answer);
        let exchange = Exchange {
            webhook: WebhookPath::MutatePod,
            review: review.clone(),
            response: serde_json::from_slice(&response).unwrap_or_default(),
        };
        Ok((mutation, exchange))
    }

    /// Core's `admit` over the offline ports: the given tiers, the owner the caller knows, the scorer in
    /// process.
    fn decide_pod(
        &self,
        uid: &str,
        req: &AdmissionRequest<Pod>,
        owner: Option<&OwnerFacts>,
    ) -> Mutation {
        let tier_of = |ns: &str| self.tier_of(ns);
        // Offline there is no RBAC to ask: the requester holds what `--grant` says, anyone else nothing.
        let grants = self.options.requester.grants_for(&req.user_info);
        let ports = Offline {
            facts: Facts {
                tier_of: &tier_of,
                priority_classes: None,
                claim_templates: &self.options.claims,
                // Offline there are no Nodes: a `spec.nodeName` is an unknown node.
                nodes: &NoNodes,
                grants: &grants,
            },
            owner: if self.options.no_kube { None } else { owner },
            core: &self.core,
            decided_at: self.options.decided_at,
            usage: &self.usage,
            exceptions: &self.options.exceptions,
        };
        let mutated = block_on(mutate_pod::admit(uid, req, &self.policy, &ports));
        Mutation {
            outcome: mutated.outcome().as_str(),
            skipped: match &mutated.admitted {
                Admitted::Skipped(skip) => Some(skip.as_str()),
                _ => None,
            },
            answer: mutated.answer,
        }
    }

    /// `/mutate-claim` for one review: core's `mutate_claim::admit` over the given tiers and grants.
    pub fn mutate_claim(&self, review: &Value) -> Result<(Answer, Exchange), BadRequest> {
        let body = serde_json::to_vec(review).unwrap_or_default();
        let incoming = review::decode_object(&body).map_err(|b| BadRequest(b.0))?;
        let answer = match &incoming.request {
            Err(why) => Answer {
                patch: Default::default(),
                warnings: vec![format!("gpu-admission: {why}; admitted unchanged")],
            },
            Ok(req) => {
                let tier_of = |ns: &str| self.tier_of(ns);
                let grants = self.options.requester.grants_for(&req.user_info);
                let facts = Facts {
                    tier_of: &tier_of,
                    priority_classes: None,
                    claim_templates: &self.options.claims,
                    nodes: &NoNodes,
                    grants: &grants,
                };
                mutate_claim::admit(req, &self.policy, &facts).1
            }
        };
        let response = review::encode(incoming.api_version, &incoming.uid, &answer);
        let exchange = Exchange {
            webhook: WebhookPath::MutateClaim,
            review: review.clone(),
            response: serde_json::from_slice(&response).unwrap_or_default(),
        };
        Ok((answer, exchange))
    }

    /// `/validate-pod` for one review.
    pub fn validate(&self, review: &Value) -> Result<(Validation, Exchange), BadRequest> {
        self.validate_owned(review, None)
    }

    /// [`Self::validate`] of a Pod whose owner the caller knows (`owner`: what the cluster would say about
    /// it), as its exceptions' owner chain reads it.
    pub fn validate_owned(
        &self,
        review: &Value,
        owner: Option<&OwnerFacts>,
    ) -> Result<(Validation, Exchange), BadRequest> {
        let owner = if self.options.no_kube { None } else { owner };
        let body = serde_json::to_vec(review).unwrap_or_default();
        let incoming = review::decode_object(&body).map_err(|b| BadRequest(b.0))?;
        let validation = match &incoming.request {
            Err(why) => Validation {
                verdict: review::unreadable_verdict(why, "not validated", self.policy.mode),
                note: Some("unreadable review".into()),
                undecidable: vec![format!("the review cannot be read: {why}")],
            },
            Ok(req) => {
                let ports = OfflineValidate {
                    engine: self,
                    owner,
                };
                let validated = block_on(validate_pod::admit(req, &self.policy, &ports));
                validation_of(validated)
            }
        };
        let response =
            review::encode_verdict(incoming.api_version, &incoming.uid, &validation.verdict);
        let exchange = Exchange {
            webhook: WebhookPath::ValidatePod,
            review: review.clone(),
            response: serde_json::from_slice(&response).unwrap_or_default(),
        };
        Ok((validation, exchange))
    }
}

/// What the CLI reports of a `/validate-pod` answer: the verdict, why it let an object through without a word
/// (the quota record among it), and what could not be decided.
fn validation_of(validated: Validated) -> Validation {
    let note = match &validated.check {
        Check::NotOurs(why) => Some(format!("not ours: {why}")),
        Check::Allowed(why) if *why != Allowance::WithinTier => Some(why.describe()),
        _ => None,
    };
    let quota_note = match &validated.quota {
        Some(QuotaStep::NeverFits { message, .. }) => Some(message.clone()),
        Some(QuotaStep::Decided { decision, .. }) => Some(format!(
            "{}: {}",
            quota::QUOTA_ANNOTATION,
            decision.record()
        )),
        _ => None,
    };
    let note = match (note, quota_note) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let undecidable = match &validated.check {
        Check::Violations { violations, .. } => violations
            .iter()
            .filter(|v| v.reason == Reason::Undecidable)
            .map(|v| match v.path.as_str() {
                "Pod" => v.what.clone(),
                path => format!("{path}: {}", v.what),
            })
            .collect(),
        _ => Vec::new(),
    };
    Validation {
        verdict: validated.verdict,
        note,
        undecidable,
    }
}

/// The ports of `/validate-pod` offline: the given tiers, the claims among the inputs, no Nodes, the usage
/// snapshot (with `--usage`) as the quota's usage, an admitted Pod added to it.
struct OfflineValidate<'e> {
    engine: &'e Engine,
    owner: Option<&'e OwnerFacts>,
}

impl ValidatePorts for OfflineValidate<'_> {
    fn with_facts<R>(&self, grants: &Grants, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        let tier_of = |ns: &str| self.engine.tier_of(ns);
        f(&Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &self.engine.options.claims,
            nodes: &NoNodes,
            grants,
        })
    }

    /// Offline there is no RBAC to ask: the requester holds what `--grant` says.
    async fn grants(&self, user: &UserInfo, _wanted: &[Permission]) -> Grants {
        self.engine.options.requester.grants_for(user)
    }

    fn holds_quotas(&self) -> bool {
        self.engine.lock_usage().is_some()
    }

    async fn owner_chain(&self, req: &AdmissionRequest<kube_core::DynamicObject>) -> Vec<Owner> {
        exception::request_chain(req, self.owner)
    }

    fn exceptions(&self, namespace: &str) -> Vec<Exception> {
        let all = &self.engine.options.exceptions;
        all.iter()
            .filter(|e| e.id.namespace == namespace)
            .cloned()
            .collect()
    }

    fn now(&self) -> OffsetDateTime {
        self.engine
            .options
            .decided_at
            .unwrap_or_else(OffsetDateTime::now_utc)
    }

    async fn reserve(
        &self,
        ask: &quota::Ask,
        _pod: &quota::ledger::Reserving<'_>,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> Result<Option<quota::Decision>, QuotaUnavailable> {
        let mut usage = self.engine.lock_usage();
        let Some(usage) = usage.as_mut() else {
            return Ok(None);
        };
        Ok(match decide(usage) {
            Reservation::NoQuota => None,
            Reservation::Refused(d) => Some(d),
            Reservation::Reserve(d) => {
                if keep {
                    usage.add(&ask.0, &ask.1, &ask.2, 1);
                }
                Some(d)
            }
        })
    }
}

impl Engine {
    fn lock_usage(&self) -> std::sync::MutexGuard<'_, Option<Usage>> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The ports of `/mutate-pod` offline.
struct Offline<'r> {
    facts: Facts<'r>,
    owner: Option<&'r OwnerFacts>,
    core: &'r Core,
    decided_at: Option<OffsetDateTime>,
    /// The usage snapshot (with `--usage`): the quota step's record and borrowing class.
    usage: &'r Mutex<Option<Usage>>,
    /// The GpuPolicyExceptions among the inputs.
    exceptions: &'r [Exception],
}

impl MutatePorts for Offline<'_> {
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        f(&self.facts)
    }

    async fn workload(&self, pod: &Pod, namespace: &str) -> Option<WorkloadRef> {
        workload::resolve(pod, namespace, self.owner)
    }

    fn exceptions(&self, namespace: &str) -> Vec<Exception> {
        let all = self.exceptions.iter();
        all.filter(|e| e.id.namespace == namespace)
            .cloned()
            .collect()
    }

    async fn owner_chain(&self, pod: &Pod, name: &str) -> Vec<Owner> {
        exception::chain("v1", "Pod", name, &pod.metadata, self.owner)
    }

    /// The scorer in process, its refusal read as the frontend's client reads a gRPC status.
    async fn score(&self, request: ScoreRequest) -> ScorerOutcome {
        match self.core.score(&request) {
            Ok(answer) => ScorerOutcome::Answered(Box::new(answer)),
            Err(refusal) => {
                let s = tonic::Status::from(refusal);
                let detail = format!("{:?}: {}", s.code(), s.message());
                ScorerOutcome::of_failed_call(s.code() as i32, detail, 0)
            }
        }
    }

    fn now(&self) -> OffsetDateTime {
        self.decided_at.unwrap_or_else(OffsetDateTime::now_utc)
    }

    fn holds_quotas(&self) -> bool {
        self.usage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn quota_usage(&self, _tier: &str, _namespace: &str) -> Option<Usage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
