//! The state every request handler shares: scorer client, cluster caches, policy snapshot, metrics and the
//! readiness flags. Built once by [`crate::app::run`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::ClusterFacts;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;
use crate::scorer_client::Scorer;

/// Shared by every request.
pub struct AppState {
    pub scorer: Scorer,
    pub cluster: ClusterFacts,
    pub policy: Arc<PolicyCache>,
    pub metrics: Arc<Metrics>,
    /// Set once the TLS listener is bound.
    pub listening: AtomicBool,
    /// Set once the real certificate is served (at once from files; in automatic mode once the Secret's).
    pub certificate_served: Arc<AtomicBool>,
}

impl AppState {
    /// Ready = listening, the real certificate served and the kube caches synced. Never tied to the scorer
    /// (we fail open).
    pub fn is_ready(&self) -> bool {
        self.listening.load(Ordering::Acquire)
            && self.certificate_served.load(Ordering::Acquire)
            && self.cluster.is_synced()
    }
}
