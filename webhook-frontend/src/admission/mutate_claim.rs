//! `POST /mutate-claim`: a ResourceClaim or ResourceClaimTemplate CREATE in a tier namespace held to its
//! tier by what it asks (the tier's product selector added to each request that could otherwise get GPUs
//! outside it), decided by [`gpu_admission_core::admission::mutate_claim::admit`]; here the exemption's
//! SubjectAccessReview, the logs and metrics. Never refuses: an unreadable review is answered unchanged with
//! a warning, and `/validate-pod` decides what mutation could not hold.

use std::sync::Arc;

use gpu_admission_core::admission::mutate_claim::{self, Outcome};
use gpu_admission_core::review::{self, Answer, BadRequest, IncomingObject};

use super::pipeline::{Body, Call, Reply, Webhook, operation_label};
use crate::cluster::ClusterFacts;
use crate::cluster::access::AccessReviews;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;

/// What `/mutate-claim` reads: the namespaces' tiers, the cluster's DeviceClasses and the policy.
pub(crate) struct MutateClaim {
    pub(crate) cluster: Arc<ClusterFacts>,
    pub(crate) policy: Arc<PolicyCache>,
    pub(crate) access: Arc<AccessReviews>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Webhook for MutateClaim {
    const NAME: &'static str = "mutate-claim";
    type Review = IncomingObject;

    fn decode(body: &[u8]) -> Result<IncomingObject, BadRequest> {
        review::decode_object(body)
    }

    async fn admit(&self, incoming: &IncomingObject, _call: &Call) -> Reply {
        let policy = self.policy.snapshot();
        let req = match &incoming.request {
            Err(why) => {
                tracing::warn!(webhook = Self::NAME, uid = incoming.uid, %why, "unreadable review; admitted unchanged");
                let answer = Answer {
                    patch: Default::default(),
                    warnings: vec![format!("gpu-admission: {why}; admitted unchanged")],
                };
                return Reply {
                    outcome: "unreadable",
                    operation: "unknown",
                    body: Body::Answer(answer),
                };
            }
            Ok(req) => req,
        };
        let grants = match req.namespace.as_deref() {
            Some(ns) => {
                let label = self.cluster.namespace_tier(ns, policy.tier_label());
                (self.access.exemption(&req.user_info, label, ns, &policy)).await
            }
            None => gpu_admission_core::authority::Grants::none(),
        };
        let (outcome, answer) = self.cluster.with_facts(&policy, &grants, |facts| {
            mutate_claim::admit(req, &policy, facts)
        });
        if let Outcome::Placed { tier, placed } = &outcome {
            tracing::info!(
                uid = incoming.uid,
                namespace = req.namespace,
                kind = req.kind.kind,
                tier,
                ?placed,
                "claim held to its tier"
            );
        }
        Reply {
            outcome: outcome.as_str(),
            operation: operation_label(&req.operation),
            body: Body::Answer(answer),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
