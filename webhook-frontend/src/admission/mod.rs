//! The admission webhooks: one [`pipeline`] (span, decode once, metrics, encode, the 400 answer) that each
//! webhook plugs into through [`pipeline::Webhook`]. Each webhook module holds only the state it reads and
//! does the I/O (caches, the scorer call, logs); what it decides is `gpu_admission_core::admission`'s.

mod checkpoint_restore;
mod mutate_claim;
mod mutate_pod;
mod pipeline;
mod validate_exception;
mod validate_namespace;
mod validate_pod;
mod validate_policy;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use gpu_admission_core::admission::validate_policy::PolicyConfigMap;
use gpu_admission_core::ns_lock::Instance;

use crate::body_budget::body::BodyBudget;
use crate::body_budget::{BudgetLimits, Ledger};
use crate::cluster::ClusterFacts;
use crate::cluster::access::AccessReviews;
use crate::cluster::checkpoints::CheckpointCaches;
use crate::cluster::exceptions::ExceptionCache;
use crate::cluster::ns_locks::NsLocks;
use crate::cluster::usage::QuotaUsage;
use crate::cluster::workloads::WorkloadOwners;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;
use crate::readiness::Readiness;
use crate::scorer_client::Scorer;
use checkpoint_restore::CheckpointRestore;
use mutate_claim::MutateClaim;
use mutate_pod::MutatePod;
use pipeline::handle;
use validate_exception::ValidateException;
use validate_namespace::ValidateNamespace;
use validate_pod::ValidatePod;
use validate_policy::ValidatePolicy;

/// What the webhooks are built from; each takes only its part (see [`Webhooks::routes`]).
pub struct Webhooks {
    scorer: Scorer,
    cluster: Arc<ClusterFacts>,
    policy: Arc<PolicyCache>,
    metrics: Arc<Metrics>,
    policy_configmap: PolicyConfigMap,
    checkpoints: Option<Arc<CheckpointCaches>>,
    workloads: Option<Arc<WorkloadOwners>>,
    /// The GpuPolicyExceptions; `None` with `--no-kube` (no exception applies).
    exceptions: Option<Arc<ExceptionCache>>,
    access: Arc<AccessReviews>,
    /// GPU quota usage; `None` with `--no-kube`.
    quota: Option<Arc<QuotaUsage>>,
    /// The caps on request-body bytes and on each namespace's share (see [`crate::body_budget`]).
    body_budget: BudgetLimits,
    /// The whole body must arrive within this of the request's headers.
    body_read_timeout: Duration,
    /// Cluster-wide or namespace-restricted.
    instance: Instance,
    /// The restricted instances' Leases (the cluster-wide instance with a cluster only).
    ns_locks: Option<Arc<NsLocks>>,
    /// A restricted instance's account of what its Leases are held by.
    holding: Option<Arc<crate::restricted::Holding>>,
}

/// The default read deadline of a request body: far below the apiserver's 10 s, far above the milliseconds
/// it takes to send a review.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(2);

impl Webhooks {
    /// Without the checkpoint and workload caches (`--no-kube`; see the `with_` methods).
    pub fn new(
        scorer: Scorer,
        cluster: ClusterFacts,
        policy: Arc<PolicyCache>,
        metrics: Arc<Metrics>,
        policy_configmap: PolicyConfigMap,
    ) -> Self {
        Self {
            scorer,
            cluster: Arc::new(cluster),
            policy,
            metrics,
            policy_configmap,
            checkpoints: None,
            workloads: None,
            exceptions: None,
            access: Arc::new(AccessReviews::new(None)),
            quota: None,
            body_budget: BudgetLimits::default(),
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            instance: Instance::ClusterWide,
            ns_locks: None,
            holding: None,
        }
    }

    /// The cluster facts the webhooks read (a restricted instance's Leases are held by them too).
    pub(crate) fn cluster(&self) -> Arc<ClusterFacts> {
        self.cluster.clone()
    }

    /// The policy the webhooks enforce.
    pub(crate) fn policy(&self) -> Arc<PolicyCache> {
        self.policy.clone()
    }

    /// A restricted instance: its Score calls are counted for the Leases it holds.
    pub(crate) fn with_holding(mut self, holding: Arc<crate::restricted::Holding>) -> Self {
        self.holding = Some(holding);
        self
    }

    /// As `instance`; a cluster-wide instance with a cluster watches the restricted instances' Leases.
    pub(crate) fn with_instance(
        mut self,
        instance: Instance,
        client: Option<kube::Client>,
    ) -> Self {
        if instance == Instance::ClusterWide {
            self.ns_locks = client.map(|c| Arc::new(NsLocks::start(c)));
        }
        self.instance = instance;
        self
    }

    /// With other body caps and namespace shares, and another body read deadline.
    pub(crate) fn with_body_budget(mut self, limits: BudgetLimits, read_timeout: Duration) -> Self {
        self.body_budget = limits;
        self.body_read_timeout = read_timeout;
        self
    }

    /// With SubjectAccessReviews through `client` (without one nothing is granted).
    pub(crate) fn with_access(mut self, client: Option<kube::Client>) -> Self {
        self.access = Arc::new(AccessReviews::new(client));
        self
    }

    /// With the Pod watch counting GPU quota usage (started only with a cluster).
    pub(crate) fn with_quota_usage(mut self, client: Option<kube::Client>) -> Self {
        self.quota = client.map(|c| {
            QuotaUsage::start(
                c,
                self.cluster.clone(),
                self.policy.clone(),
                self.metrics.clone(),
            )
        });
        self
    }

    /// With the CheckpointBackup cache `/mutate-pod-checkpoint` reads.
    pub(crate) fn with_checkpoints(mut self, checkpoints: Option<CheckpointCaches>) -> Self {
        self.checkpoints = checkpoints.map(Arc::new);
        self
    }

    /// With the Job/ReplicaSet caches that resolve a Pod's controlling workload.
    pub(crate) fn with_workloads(mut self, workloads: Option<WorkloadOwners>) -> Self {
        self.workloads = workloads.map(Arc::new);
        self
    }

    /// With the GpuPolicyException watch (started only with a cluster).
    pub(crate) fn with_exceptions(mut self, client: Option<kube::Client>) -> Self {
        self.exceptions = client.map(|c| Arc::new(ExceptionCache::start(c)));
        self
    }

    /// The readiness of these webhooks' caches, with the listener and certificate flags unset.
    pub fn readiness(&self) -> Readiness {
        Readiness::new(
            self.cluster.clone(),
            self.checkpoints.clone(),
            self.quota.clone(),
            self.policy.clone(),
        )
    }

    /// The metrics these webhooks record into.
    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// One route per webhook, each with its own state.
    pub(crate) fn routes(self) -> Router {
        let budget = Arc::new(BodyBudget::new(
            Ledger::new(self.body_budget),
            self.body_read_timeout,
            self.metrics.clone(),
        ));
        let mutate = MutatePod {
            scorer: self.scorer.clone(),
            cluster: self.cluster.clone(),
            policy: self.policy.clone(),
            workloads: self.workloads.clone(),
            exceptions: self.exceptions.clone(),
            answers: Default::default(),
            metrics: self.metrics.clone(),
            access: self.access.clone(),
            quota: self.quota.clone(),
            instance: self.instance,
            ns_locks: self.ns_locks,
            hold: self.holding,
        };
        let claim = MutateClaim {
            cluster: self.cluster.clone(),
            policy: self.policy.clone(),
            access: self.access.clone(),
            metrics: self.metrics.clone(),
        };
        let namespace = ValidateNamespace {
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
            access: self.access.clone(),
        };
        let exception = ValidateException {
            cluster: self.cluster.clone(),
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
            access: self.access.clone(),
        };
        let validate = ValidatePod {
            exceptions: self.exceptions,
            workloads: self.workloads.clone(),
            quota: self.quota,
            access: self.access.clone(),
            cluster: self.cluster,
            policy: self.policy.clone(),
            metrics: self.metrics.clone(),
        };
        let policy = ValidatePolicy {
            access: self.access,
            configmap: self.policy_configmap,
            metrics: self.metrics.clone(),
        };
        let restore = CheckpointRestore {
            checkpoints: self.checkpoints,
            workloads: self.workloads,
            metrics: self.metrics,
        };
        Router::new()
            .route(
                "/mutate-pod",
                post(handle::<MutatePod>).with_state(Arc::new(mutate)),
            )
            .route(
                "/mutate-claim",
                post(handle::<MutateClaim>).with_state(Arc::new(claim)),
            )
            .route(
                "/mutate-pod-checkpoint",
                post(handle::<CheckpointRestore>).with_state(Arc::new(restore)),
            )
            .route(
                "/validate-pod",
                post(handle::<ValidatePod>).with_state(Arc::new(validate)),
            )
            .route(
                "/validate-namespace",
                post(handle::<ValidateNamespace>).with_state(Arc::new(namespace)),
            )
            .route(
                "/validate-exception",
                post(handle::<ValidateException>).with_state(Arc::new(exception)),
            )
            .route(
                "/validate-policy",
                post(handle::<ValidatePolicy>).with_state(Arc::new(policy)),
            )
            .route_layer(axum::middleware::from_fn_with_state(
                budget,
                crate::body_budget::body::claim,
            ))
    }
}
