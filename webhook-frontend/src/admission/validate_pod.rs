//! `POST /validate-pod`: Pods and the pod templates of workloads (any kind) in tier namespaces, checked
//! against their tier by [`gpu_admission_core::admission::validate_pod::decide`]; here the caches, the
//! violation metrics and logs.

use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::admission::validate_pod::{self, Allowance, Check};
use gpu_admission_core::authority::Grants;

use crate::cluster::access::AccessReviews;
use gpu_admission_core::policy::mode_name;
use gpu_admission_core::review::{self, BadRequest, IncomingObject};

use super::pipeline::{Body, Call, Reply, Webhook, not_validated, operation_label};
use crate::cluster::ClusterFacts;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;

/// What `/validate-pod` reads: no scorer (the check is local, so it holds when the scorer is down).
pub(crate) struct ValidatePod {
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) access: Arc<AccessReviews>,
    pub(crate) metrics: Arc<Metrics>,
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
        Reply {
            outcome: check.outcome(&verdict),
            operation: operation_label(&req.operation),
            body: Body::Verdict(verdict),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn record(&self, _operation: &'static str, outcome: &'static str, elapsed: Duration) {
        self.metrics.record_validation(Self::NAME, outcome, elapsed);
    }
}
