//! `POST /validate-pod`: Pods and the pod templates of workloads (any kind) in tier namespaces, checked
//! against their tier by [`gpu_admission_core::admission::validate_pod::decide`]; here the caches, the
//! violation metrics and logs.

use std::sync::Arc;

use gpu_admission_core::admission::validate_pod::{
    self, Allowance, Check, QuotaStep, QuotaUnavailable, Reservation, ValidatePorts, Validated,
};
use gpu_admission_core::authority::{Grants, Permission};
use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::{self, Usage};
use gpu_admission_core::review::{self, BadRequest, IncomingObject};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use crate::cluster::access::AccessReviews;
use crate::cluster::exceptions::{self, ExceptionCache};
use crate::cluster::workloads::WorkloadOwners;
use gpu_admission_core::exception::{Exception, Owner};
use time::OffsetDateTime;

use super::pipeline::{
    Body, Call, Reply, Webhook, not_validated, operation_label, reservation_deadline,
};
use crate::cluster::ClusterFacts;
use crate::cluster::usage::QuotaUsage;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;

/// What `/validate-pod` reads: no scorer (the check is local, so it holds when the scorer is down).
pub(crate) struct ValidatePod {
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) access: Arc<AccessReviews>,
    pub(crate) metrics: Arc<Metrics>,
    /// GPU quota usage; `None` with `--no-kube` (no quota is held then).
    pub(crate) quota: Option<Arc<QuotaUsage>>,
    /// The GpuPolicyExceptions; `None` with `--no-kube` (no exception applies).
    pub(crate) exceptions: Option<Arc<ExceptionCache>>,
    /// Jobs and ReplicaSets, the second hop of an owner chain; `None` with `--no-kube`.
    pub(crate) workloads: Option<Arc<WorkloadOwners>>,
}

impl Webhook for ValidatePod {
    const NAME: &'static str = "validate-pod";
    type Review = IncomingObject;

    fn decode(body: &[u8]) -> Result<IncomingObject, BadRequest> {
        review::decode_object(body)
    }

    async fn admit(&self, incoming: &IncomingObject, call: &Call) -> Reply {
        let policy = self.policy.snapshot();
        let req = match &incoming.request {
            Err(why) => {
                let uid = &incoming.uid;
                return not_validated(Self::NAME, uid, why, "not validated", policy.mode);
            }
            Ok(req) => req,
        };
        let ports = Ports {
            hook: self,
            policy: &policy,
            reserve_until: reservation_deadline(call),
        };
        let validated = validate_pod::admit(req, &policy, &ports).await;
        self.report(&incoming.uid, req, &validated, policy.mode.as_str());
        Reply {
            outcome: validated.outcome().as_str(),
            operation: operation_label(&req.operation),
            body: Body::Verdict(validated.verdict),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl ValidatePod {
    /// The logs and violation metrics of how a request was answered.
    fn report(
        &self,
        uid: &str,
        req: &AdmissionRequest<DynamicObject>,
        validated: &Validated,
        mode: &'static str,
    ) {
        match &validated.check {
            Check::Allowed(Allowance::Exempt) => {
                tracing::info!(uid, user = ?req.user_info.username, kind = %review::gvk_text(&req.kind), "validate-pod: a request outside its tier allowed (RBAC: exempt)");
            }
            Check::Allowed(Allowance::Excepted(e)) => {
                self.metrics.record_excepted(&e.namespace, &e.name, "tier");
                tracing::info!(uid, user = ?req.user_info.username, kind = %review::gvk_text(&req.kind), name = req.name, exception_namespace = e.namespace, exception = e.name, "validate-pod: a request outside its tier allowed by a GpuPolicyException");
            }
            Check::Violations {
                tier,
                object,
                violations,
                ..
            } => {
                for v in violations {
                    self.metrics.record_violation(tier, v.reason.as_str(), mode);
                    tracing::warn!(uid, object, tier, reason = v.reason.as_str(), path = v.path, what = v.what, mode, user = ?req.user_info.username, "tier violation");
                }
            }
            _ => {}
        }
        let Some(step) = &validated.quota else {
            return;
        };
        if let QuotaStep::Excepted(e) = step {
            self.metrics.record_excepted(&e.namespace, &e.name, "quota");
            tracing::info!(
                uid,
                name = req.name,
                exception_namespace = e.namespace,
                exception = e.name,
                "validate-pod: not held to the GPU quota (a GpuPolicyException relaxes it)"
            );
        }
        if let QuotaStep::Decided {
            tier,
            namespace,
            decision,
            ..
        } = step
        {
            tracing::info!(uid, tier, namespace, quota = %decision.record(), "quota");
        }
        if let Some((tier, why, message)) = step.violation() {
            self.metrics.record_violation(tier, why.as_str(), mode);
            tracing::warn!(uid, tier, mode, reason = why.as_str(), "quota: {message}");
        }
    }
}

/// What `/validate-pod` reads for one request: the watch caches, the SubjectAccessReviews and the quota
/// usage with its ledger.
struct Ports<'r> {
    hook: &'r ValidatePod,
    policy: &'r PolicySnapshot,
    /// Until when a reservation retries a ledger other replicas keep writing first.
    reserve_until: std::time::Instant,
}

impl ValidatePorts for Ports<'_> {
    fn with_facts<R>(&self, grants: &Grants, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        self.hook.cluster.with_facts(self.policy, grants, f)
    }

    async fn grants(&self, user: &UserInfo, wanted: &[Permission]) -> Grants {
        self.hook.access.grants(user, wanted).await
    }

    fn holds_quotas(&self) -> bool {
        self.hook.quota.is_some()
    }

    fn exceptions(&self, namespace: &str) -> Vec<Exception> {
        self.hook
            .exceptions
            .as_ref()
            .map_or_else(Vec::new, |c| c.of_namespace(namespace))
    }

    async fn owner_chain(&self, req: &AdmissionRequest<DynamicObject>) -> Vec<Owner> {
        let (Some(object), Some(namespace)) = (&req.object, req.namespace.as_deref()) else {
            return Vec::new();
        };
        let api_version = match req.kind.group.as_str() {
            "" => req.kind.version.clone(),
            g => format!("{g}/{}", req.kind.version),
        };
        let name = object.metadata.name.as_deref().unwrap_or(&req.name);
        let what = (api_version.as_str(), req.kind.kind.as_str(), name);
        exceptions::owner_chain(
            self.hook.workloads.as_deref(),
            what,
            &object.metadata,
            namespace,
        )
        .await
    }

    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    fn pods_served_by(
        &self,
        namespace: &str,
        claim: &quota::ClaimRef,
    ) -> Vec<k8s_openapi::api::core::v1::Pod> {
        self.hook
            .quota
            .as_ref()
            .map_or_else(Vec::new, |q| q.pods_served_by(namespace, claim))
    }

    async fn reserve(
        &self,
        ask: &quota::Ask,
        pod: &quota::ledger::Reserving<'_>,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> Result<Option<quota::Decision>, QuotaUnavailable> {
        let Some(usage) = &self.hook.quota else {
            return Ok(None);
        };
        usage
            .reserve(ask, pod, keep, self.reserve_until, decide)
            .await
    }
}
