//! `POST /validate-namespace`: setting, changing or removing a Namespace's tier label needs `update
//! tiers/<tier>` in RBAC; decided by [`gpu_admission_core::admission::validate_namespace::decide`]; here the
//! SubjectAccessReviews, the logs and metrics.

use std::sync::Arc;

use gpu_admission_core::admission::validate_namespace::{self, Check};
use gpu_admission_core::review::{self, BadRequest, IncomingObject};

use super::pipeline::{Body, Call, Reply, Webhook, not_validated, operation_label};
use crate::cluster::access::AccessReviews;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;

/// What `/validate-namespace` reads: the policy (its tier label and mode) and RBAC.
pub(crate) struct ValidateNamespace {
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) access: Arc<AccessReviews>,
}

impl Webhook for ValidateNamespace {
    const NAME: &'static str = "validate-namespace";
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
        let tier_label = policy.tier_label();
        let needed = validate_namespace::permissions(req, tier_label);
        let grants = self.access.grants(&req.user_info, &needed).await;
        let (check, verdict) = validate_namespace::decide(req, &grants, tier_label);
        match &check {
            Check::Allowed { from, to } => {
                tracing::info!(uid = incoming.uid, user = ?req.user_info.username, namespace = req.name, subresource = ?req.sub_resource, ?from, ?to, "tier label changed (RBAC allows it)");
            }
            Check::Forbidden {
                namespace,
                user,
                from,
                to,
                missing,
                subresource,
                why,
            } => {
                tracing::warn!(
                    missing = %missing.describe(),
                    why,
                    ?subresource,
                    uid = incoming.uid,
                    user,
                    namespace,
                    ?from,
                    ?to,
                    denied = verdict.denied.is_some(),
                    "tier label change without the RBAC it needs"
                );
            }
            Check::NotOurs(_) => {}
        }
        Reply {
            outcome: check.outcome(&verdict).as_str(),
            operation: operation_label(&req.operation),
            body: Body::Verdict(verdict),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
