//! `POST /validate-exception`: creating or changing a GpuPolicyException needs `exempt tiers/<tier>` over
//! the tier of its namespace (on top of RBAC on `gpupolicyexceptions`, the apiserver's own check), and a
//! valid, bounded object; decided by [`gpu_admission_core::exception::review::check`]; here the
//! SubjectAccessReview, the logs and metrics.

use std::sync::Arc;

use gpu_admission_core::authority::Grants;
use gpu_admission_core::exception::review::{self, Check};
use gpu_admission_core::review::{BadRequest, IncomingObject};
use time::OffsetDateTime;

use super::pipeline::{Body, Call, Reply, Webhook, not_validated, operation_label};
use crate::cluster::ClusterFacts;
use crate::cluster::access::AccessReviews;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;

/// What `/validate-exception` reads: the namespaces' tiers and the policy.
pub(crate) struct ValidateException {
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) access: Arc<AccessReviews>,
}

impl Webhook for ValidateException {
    const NAME: &'static str = "validate-exception";
    type Review = IncomingObject;

    fn decode(body: &[u8]) -> Result<IncomingObject, BadRequest> {
        gpu_admission_core::review::decode_object(body)
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
        let tier_of = |ns: &str| self.cluster.namespace_tier(ns, policy.tier_label());
        let grants = match review::needed_power(req, &policy, &tier_of) {
            Some(power) => self.access.grants(&req.user_info, &[power]).await,
            None => Grants::none(),
        };
        let check = review::check(req, &policy, &tier_of, &grants, OffsetDateTime::now_utc());
        let user = req
            .user_info
            .username
            .as_deref()
            .unwrap_or("an unnamed user");
        let verdict = review::verdict(&check, user);
        let outcome = match &check {
            Check::NotOurs(_) => "skipped",
            Check::Allowed { exception, tier } => {
                tracing::info!(
                    uid = incoming.uid,
                    user,
                    exception_namespace = exception.namespace,
                    exception = exception.name,
                    tier,
                    operation = operation_label(&req.operation),
                    "GpuPolicyException created or changed (RBAC: exempt over its tier)"
                );
                "allowed"
            }
            Check::Invalid {
                exception,
                problems,
            } => {
                tracing::warn!(
                    uid = incoming.uid,
                    user,
                    exception_namespace = exception.namespace,
                    exception = exception.name,
                    problems = problems.join("; "),
                    "GpuPolicyException refused: not valid"
                );
                "denied"
            }
            Check::Forbidden {
                exception,
                missing,
                why,
            } => {
                tracing::warn!(uid = incoming.uid, user, exception_namespace = exception.namespace, exception = exception.name, missing = %missing.describe(), why, "GpuPolicyException refused: the requester lacks the power over its tier");
                "denied"
            }
        };
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
