//! `POST /validate-pod`: Pods and the pod templates of workloads (any kind) in tier namespaces, checked
//! against their tier by [`gpu_admission_core::admission::validate_pod::decide`]; here the caches, the
//! violation metrics and logs.

use std::sync::Arc;

use gpu_admission_core::admission::validate_pod::{self, Allowance, Check};
use gpu_admission_core::authority::Grants;

use crate::cluster::access::AccessReviews;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::policy::mode_name;
use gpu_admission_core::quota;
use gpu_admission_core::review::{self, BadRequest, IncomingObject, Verdict};
use gpu_admission_proto::scorer::v1::EnforcementMode;

use super::pipeline::{Body, Call, Reply, Webhook, not_validated, operation_label};
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
}

impl Webhook for ValidatePod {
    const NAME: &'static str = "validate-pod";
    type Review = IncomingObject;

    fn decode(body: &[u8]) -> Result<IncomingObject, BadRequest> {
        review::decode_object(body)
    }

    async fn admit(&self, incoming: &IncomingObject, _call: &Call) -> Reply {
        let policy = self.policy.snapshot();
        let req = match &incoming.request {
            Err(why) => {
                let uid = &incoming.uid;
                return not_validated(Self::NAME, uid, why, "not validated", policy.mode);
            }
            Ok(req) => req,
        };
        let decide = |grants: &Grants| {
            self.cluster.with_facts(&policy, grants, |facts| {
                validate_pod::decide(req, &policy, facts)
            })
        };
        let (mut check, mut verdict) = decide(&Grants::none());
        // Only an object outside its tier asks whether its requester may run outside it.
        if let Check::Violations { .. } = &check {
            let namespace = req.namespace.as_deref().unwrap_or_default();
            let tier = self.cluster.namespace_tier(namespace);
            let grants = self
                .access
                .exemption(&req.user_info, tier, namespace, &policy)
                .await;
            (check, verdict) = decide(&grants);
        }
        match &check {
            Check::Allowed(Allowance::Exempt) => {
                tracing::info!(uid = incoming.uid, user = ?req.user_info.username, kind = %review::gvk_text(&req.kind), "validate-pod: a request outside its tier allowed (RBAC: exempt)");
            }
            Check::Violations {
                tier,
                object,
                violations,
                ..
            } => {
                let mode = mode_name(policy.mode);
                for v in violations {
                    self.metrics.record_violation(tier, v.reason.as_str(), mode);
                    tracing::warn!(uid = incoming.uid, object, tier, reason = v.reason.as_str(), path = v.path, what = v.what, mode, user = ?req.user_info.username, "tier violation");
                }
            }
            _ => {}
        }
        let mut outcome = check.outcome(&verdict);
        if verdict.denied.is_none()
            && let Some(quota) = &self.quota
        {
            self.quota(quota, req, &policy, &mut verdict, &mut outcome)
                .await;
        }
        Reply {
            outcome,
            operation: operation_label(&req.operation),
            body: Body::Verdict(verdict),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl ValidatePod {
    /// The quota of a Pod CREATE the tier check admits: over a `max` is denied in Enforce, warned in Warn;
    /// what is admitted is reserved until the watch sees it (see [`QuotaUsage`]).
    async fn quota(
        &self,
        quota: &QuotaUsage,
        req: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        policy: &PolicySnapshot,
        verdict: &mut Verdict,
        outcome: &mut &'static str,
    ) {
        // A policy without quotas pays nothing here.
        let Some(p) = policy.policy.as_deref().filter(|p| p.quotas.any()) else {
            return;
        };
        let never = self.cluster.with_facts(policy, &Grants::none(), |facts| {
            quota::workload_answer(req, policy, facts, verdict)
        });
        if let Some(message) = never {
            let mode = mode_name(policy.mode);
            let tier = self
                .cluster
                .namespace_tier(req.namespace.as_deref().unwrap_or_default());
            self.metrics
                .record_violation(tier.as_deref().unwrap_or(""), "over_quota", mode);
            tracing::warn!(uid = %req.uid, mode, "workload over quota: {message}");
            *outcome = if verdict.denied.is_some() {
                "denied"
            } else {
                "violation_admitted"
            };
            return;
        }
        let Some(ask) = self.cluster.with_facts(policy, &Grants::none(), |facts| {
            quota::of_request(req, policy, facts)
        }) else {
            return;
        };
        let enforce = policy.mode == EnforcementMode::Enforce;
        if !quota.is_synced() {
            if enforce {
                verdict.denied = Some(quota::NOT_COUNTED_YET.to_string());
                *outcome = "denied";
            }
            return;
        }
        // The apiserver assigns the UID before validating admission; without one (not an apiserver) the
        // ledger cannot tell this Pod from the watch's, so it is written under the request's UID.
        let uid = req
            .object
            .as_ref()
            .and_then(|o| o.metadata.uid.as_deref())
            .unwrap_or(&req.uid);
        // Written to the ledger only when admitted: what `quota::answer` would deny holds no GPU.
        let denies = |d: &quota::Decision| {
            enforce
                && self.cluster.with_facts(policy, &Grants::none(), |facts| {
                    let mut scratch = Verdict::default();
                    quota::answer(d, req, p, facts, policy.mode, &mut scratch).is_some()
                })
        };
        let decision = match quota.admit(p, &ask, uid, denies, !req.dry_run).await {
            Ok(Some(d)) => d,
            Ok(None) => return,
            Err(e) => {
                let message =
                    format!("gpu-admission: the GPU quota could not be reserved ({e}); retry");
                tracing::warn!(uid = %req.uid, "quota not decided: {message}");
                self.metrics
                    .record_violation(&ask.0, "quota_undecided", mode_name(policy.mode));
                if enforce {
                    verdict.denied = Some(message);
                    *outcome = "denied";
                } else {
                    verdict.warnings.push(message);
                }
                return;
            }
        };
        let (tier, namespace, _) = &ask;
        tracing::info!(uid = %req.uid, tier, namespace, quota = %decision.record(), "quota");
        let answered = self.cluster.with_facts(policy, &Grants::none(), |facts| {
            quota::answer(&decision, req, p, facts, policy.mode, verdict)
        });
        if let Some((why, message)) = answered {
            let (mode, reason) = (mode_name(policy.mode), why.as_str());
            self.metrics.record_violation(tier, reason, mode);
            tracing::warn!(uid = %req.uid, tier, namespace, mode, reason, "quota: {message}");
            *outcome = if verdict.denied.is_some() {
                "denied"
            } else {
                "violation_admitted"
            };
        }
    }
}
