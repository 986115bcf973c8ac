//! `/readyz`: ready once the TLS listener is bound, the real certificate served, the caches synced (the
//! quota Pod watch too while the policy states quotas: until it has listed, a quota'd Pod is undecidable, so a
//! replica that has not listed takes no traffic; a rollout keeps the listed replicas serving) and a
//! policy held (the policy file, the last good copy or the scorer's document validated: see
//! [`crate::policy`]). The scorer is not waited for: a replica holding a policy enforces it with or without a
//! scorer. Without a policy nothing can be held to a tier, so a replica that never had one takes no traffic;
//! once it has one it keeps it (and stays ready) across invalid edits of the file and scorer outages.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::ClusterFacts;
use crate::cluster::checkpoints::CheckpointCaches;
use crate::cluster::usage::QuotaUsage;
use crate::policy::PolicyCache;

pub struct Readiness {
    listening: AtomicBool,
    /// Set by the TLS side once the real certificate is served (at once from files; in automatic mode once
    /// the Secret's).
    certificate_served: Arc<AtomicBool>,
    cluster: Arc<ClusterFacts>,
    checkpoints: Option<Arc<CheckpointCaches>>,
    quota: Option<Arc<QuotaUsage>>,
    policy: Arc<PolicyCache>,
}

impl Readiness {
    pub(crate) fn new(
        cluster: Arc<ClusterFacts>,
        checkpoints: Option<Arc<CheckpointCaches>>,
        quota: Option<Arc<QuotaUsage>>,
        policy: Arc<PolicyCache>,
    ) -> Self {
        Self {
            listening: AtomicBool::new(false),
            certificate_served: Arc::new(AtomicBool::new(false)),
            cluster,
            checkpoints,
            quota,
            policy,
        }
    }

    /// Shares the flag the TLS side sets once the real certificate is served.
    pub(crate) fn with_certificate_served(mut self, served: Arc<AtomicBool>) -> Self {
        self.certificate_served = served;
        self
    }

    /// The TLS listener is bound.
    pub(crate) fn set_listening(&self) {
        self.listening.store(true, Ordering::Release);
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.listening.load(Ordering::Acquire)
            && self.certificate_served.load(Ordering::Acquire)
            && self.cluster.is_synced()
            && self.checkpoints.as_ref().is_none_or(|c| c.is_ready())
            && self.policy.is_known()
            && self.quota.as_ref().is_none_or(|q| {
                q.is_synced()
                    || !self
                        .policy
                        .snapshot()
                        .policy
                        .as_ref()
                        .is_some_and(|p| p.quotas.any())
            })
    }
}
