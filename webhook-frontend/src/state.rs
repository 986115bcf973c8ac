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
    /// CheckpointBackups and Jobs for `/mutate-pod-checkpoint`; `None` with `--no-kube`.
    pub checkpoints: Option<crate::cluster::checkpoints::CheckpointCaches>,
    /// Jobs and ReplicaSets, to resolve a Pod's workload; `None` with `--no-kube` (first hop only).
    pub workloads: Option<crate::cluster::workloads::WorkloadOwners>,
    pub metrics: Arc<Metrics>,
    /// Set once the TLS listener is bound.
    pub listening: AtomicBool,
    /// Set once the real certificate is served (at once from files; in automatic mode once the Secret's).
    pub certificate_served: Arc<AtomicBool>,
    /// The policy ConfigMap `/validate-policy` guards.
    pub policy_configmap: PolicyConfigMap,
}

/// Which ConfigMap holds the scorer's policy, and under which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfigMap {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl PolicyConfigMap {
    /// From `NAMESPACE/NAME` and the key.
    pub fn parse(namespaced_name: &str, key: &str) -> anyhow::Result<Self> {
        match namespaced_name.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !key.is_empty() => Ok(Self {
                namespace: ns.to_string(),
                name: name.to_string(),
                key: key.to_string(),
            }),
            _ => anyhow::bail!(
                "--policy-configmap {namespaced_name:?} (key {key:?}): expected NAMESPACE/NAME and a key"
            ),
        }
    }
}

impl AppState {
    /// The state before the listener is bound and before a certificate is served, without checkpoint caches
    /// (see [`AppState::with_checkpoints`]).
    pub fn new(
        scorer: Scorer,
        cluster: ClusterFacts,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
        policy_configmap: PolicyConfigMap,
    ) -> Self {
        Self {
            scorer,
            cluster,
            policy,
            checkpoints: None,
            workloads: None,
            metrics,
            listening: AtomicBool::new(false),
            certificate_served: Arc::new(AtomicBool::new(false)),
            policy_configmap,
        }
    }

    /// With the caches `/mutate-pod-checkpoint` reads.
    pub fn with_checkpoints(
        mut self,
        checkpoints: Option<crate::cluster::checkpoints::CheckpointCaches>,
    ) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// With the Job/ReplicaSet caches that resolve a Pod's controlling workload.
    pub fn with_workloads(
        mut self,
        workloads: Option<crate::cluster::workloads::WorkloadOwners>,
    ) -> Self {
        self.workloads = workloads;
        self
    }

    /// Shares the flag the TLS side sets once the real certificate is served.
    pub fn with_certificate_served(mut self, served: Arc<AtomicBool>) -> Self {
        self.certificate_served = served;
        self
    }

    /// Ready = listening, the real certificate served and the kube caches synced. Never tied to the scorer
    /// (we fail open).
    pub fn is_ready(&self) -> bool {
        self.listening.load(Ordering::Acquire)
            && self.certificate_served.load(Ordering::Acquire)
            && self.cluster.is_synced()
            && self.checkpoints.as_ref().is_none_or(|c| c.is_ready())
    }
}
