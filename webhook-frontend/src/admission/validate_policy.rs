//! `POST /validate-policy`: the policy ConfigMap's text is validated here, with the policy crate's validation
//! (exactly what a reload of the scorer or of this frontend applies; no scorer needed);
//! [`gpu_admission_core::admission::validate_policy`] picks the text and answers.

use std::sync::Arc;

use gpu_admission_core::admission::validate_policy::{
    self, Change, PolicyConfigMap, Requester, Triage,
};
use gpu_admission_core::review::{self, BadRequest, IncomingObject};

use super::pipeline::{Body, Call, Reply, Webhook, not_validated, operation_label};
use crate::cluster::access::AccessReviews;
use crate::metrics::Metrics;
use gpu_admission_core::authority::Permission;

/// At most this many `update jobtypes/<name>` reviews per request.
const MAX_JOB_TYPE_REVIEWS: usize = 16;

/// What `/validate-policy` reads.
pub(crate) struct ValidatePolicy {
    pub(crate) access: Arc<AccessReviews>,
    /// The ConfigMap it guards.
    pub(crate) configmap: PolicyConfigMap,
    pub(crate) metrics: Arc<Metrics>,
}

impl Webhook for ValidatePolicy {
    const NAME: &'static str = "validate-policy";
    type Review = IncomingObject;

    fn decode(body: &[u8]) -> Result<IncomingObject, BadRequest> {
        review::decode_object(body)
    }

    async fn admit(&self, incoming: &IncomingObject, _call: &Call) -> Reply {
        let req = match &incoming.request {
            Err(why) => {
                // Who may change the rules is guarded in every mode: what cannot be read is refused.
                let what = "the policy was not validated";
                let mode = gpu_admission_policy::EnforcementMode::Enforce;
                return not_validated(Self::NAME, &incoming.uid, why, what, mode);
            }
            Ok(req) => req,
        };
        let cm = &self.configmap;
        let triage = validate_policy::triage(req, cm);
        let change = Change::of(&triage);
        // `update policies` allows every change; the change's own powers (a job type's) are asked beside it.
        // A change of more job types than MAX_JOB_TYPE_REVIEWS asks `update policies` only (a bound on the
        // SubjectAccessReviews one request makes).
        let mut wanted = change.needs();
        wanted.truncate(MAX_JOB_TYPE_REVIEWS);
        if !wanted.is_empty() && !wanted.contains(&Permission::ChangeRules) {
            wanted.push(Permission::ChangeRules);
        }
        let grants = self.access.grants(&req.user_info, &wanted).await;
        let requester = Requester {
            user: req
                .user_info
                .username
                .as_deref()
                .unwrap_or("an unnamed user"),
            grants: &grants,
        };
        let (outcome, verdict) = validate_policy::decide_change(&triage, &change, requester, cm);
        if !matches!(triage, Triage::NotOurs(_)) {
            tracing::info!(uid = incoming.uid, user = ?req.user_info.username, outcome = outcome.as_str(), "policy ConfigMap checked");
        }
        if let Some(message) = &verdict.denied {
            tracing::warn!(uid = incoming.uid, user = requester.user, ?change, %message, "policy ConfigMap change denied");
        }
        Reply {
            outcome: outcome.as_str(),
            operation: operation_label(&req.operation),
            body: Body::Verdict(verdict),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
