//! `/readyz`: ready once the TLS listener is bound, the real certificate served and the caches synced. Never
//! tied to the scorer (mutation fails open).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::ClusterFacts;
use crate::cluster::checkpoints::CheckpointCaches;

pub struct Readiness {
    listening: AtomicBool,
    /// Set by the TLS side once the real certificate is served (at once from files; in automatic mode once
    /// the Secret's).
    certificate_served: Arc<AtomicBool>,
    cluster: Arc<ClusterFacts>,
    checkpoints: Option<Arc<CheckpointCaches>>,
}

impl Readiness {
    pub(crate) fn new(
        cluster: Arc<ClusterFacts>,
        checkpoints: Option<Arc<CheckpointCaches>>,
    ) -> Self {
        Self {
            listening: AtomicBool::new(false),
            certificate_served: Arc::new(AtomicBool::new(false)),
            cluster,
            checkpoints,
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
    }
}
