//! The observer's Prometheus metrics, served by the telemetry crate's admin server.
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// A watched resource's plural (`pods`, `deployments`, `namespaces`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: String,
}

/// A PolicyReport result's `result` and `rule` (the violation's reason, or `within_tier`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditResultLabels {
    pub result: &'static str,
    pub reason: &'static str,
}

/// The background audit's metrics (PolicyReports).
#[derive(Debug, Clone)]
pub struct AuditMetrics {
    /// Writes of PolicyReports: `applied` (created or changed), `unchanged` (not written), `deleted` (a
    /// namespace with nothing to report any more), `failed`.
    pub reports: Family<ResultLabel, Counter>,
    /// Results of the reports as they stand (all of them, those left out of the reports too), by result and
    /// reason.
    pub results: Family<AuditResultLabels, Gauge>,
    /// Results the reports as they stand left out for size.
    pub results_omitted: Gauge,
    /// Passes by result: `ok`, `failed`.
    pub audits: Family<ResultLabel, Counter>,
    pub duration_seconds: Histogram,
    /// Namespaces decided again by the passes (every one in a full pass, the changed ones otherwise).
    pub namespaces_audited: Counter,

    /// 1 while the PolicyReport API (wgpolicyk8s.io/v1alpha2) is served, on the leader with reports on.
    pub api_served: Gauge,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    /// Finished runs reported, by what the scorers answered: `learned` (at least one replica learned it) or
    /// `duplicate` (every answering replica had learned it already).
    pub reported: Family<ResultLabel, Counter>,
    /// Decided Pods not reported, by reason (`SkipReason::as_str`).
    pub skipped: Family<ReasonLabel, Counter>,
    /// `Observe` calls to one replica that failed (the observation reaches it later through state sync).
    pub delivery_failures: Counter,
    /// `Observe` refused by the scorer (invalid argument): never retried.
    pub rejected: Counter,
    /// Runs a scorer found implausibly fast for their job type (learned weighed down, at the bound).
    pub implausible: Counter,
    /// Learned-state convergence: `imported`, `kept` (the replica held something the state lacks), `failed`.
    pub state_imports: Family<ResultLabel, Counter>,
    /// Writes of the stored learned state: `ok`, `conflict`, `too_large`, `failed`.
    pub state_stores: Family<ResultLabel, Counter>,
    /// 1 while this replica holds the Lease.
    pub leader: Gauge,
    /// Scorer replicas found at the last convergence round, and how many answered.
    pub scorer_replicas: Gauge,
    pub scorer_replicas_answering: Gauge,
    /// Observations in the most complete learned state at the last round.
    pub best_state_observations: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// Finished runs waiting to be reported (no replica reachable, or not the leader).
    pub pending: Gauge,
    /// Seconds of the last convergence round.
    pub last_round_seconds: Gauge<f64, AtomicU64>,
    /// Rounds keeping the floor's parameters in step, by result.
    pub floor_syncs: Family<ResultLabel, Counter>,
    /// Rounds keeping the checkpoint-restore registration's condition in step, by result.
    pub checkpoint_registration_syncs: Family<ResultLabel, Counter>,
    /// Writes of the GPU ResourceQuotas (`--resource-quotas`), by result: `created`, `updated`, `deleted`,
    /// `conflict`, `failed`; `policy_refused` counts rounds that wrote nothing for an unusable policy.
    pub resource_quota_writes: Family<ResultLabel, Counter>,
    pub audit: AuditMetrics,
    /// Errors of the watches that feed stores (the audit's, the policy ConfigMap's, the namespaces', the
    /// CheckpointBackups'), by resource: each is retried with kube's backoff, its store kept as last seen.
    pub watch_errors: Family<ResourceLabel, Counter>,
}

impl Metrics {
    /// Creates and registers the metrics (exposed names: `observer_reported_total`, `observer_skipped_total`,
    /// `observer_delivery_failures_total`, `observer_rejected_total`, `observer_implausible_runs_total`,
    /// `observer_state_imports_total`,
    /// `observer_state_stores_total`, `observer_leader`, `observer_scorer_replicas`,
    /// `observer_scorer_replicas_answering`, `observer_best_state_observations`, `observer_pending`,
    /// `observer_last_round_seconds`, `observer_floor_syncs_total`,
    /// `observer_checkpoint_registration_syncs_total`; the audit's `observer_policy_reports_total`,
    /// `observer_policy_report_results`, `observer_policy_report_results_omitted`, `observer_audits_total`,
    /// `observer_audit_duration_seconds`, `observer_audit_namespaces_audited_total`,
    /// `observer_policy_report_api_served`; `observer_watch_errors_total`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            reported: Family::default(),
            skipped: Family::default(),
            delivery_failures: Counter::default(),
            rejected: Counter::default(),
            implausible: Counter::default(),
            state_imports: Family::default(),
            state_stores: Family::default(),
            leader: Gauge::default(),
            scorer_replicas: Gauge::default(),
            scorer_replicas_answering: Gauge::default(),
            best_state_observations: Gauge::default(),
            pending: Gauge::default(),
            last_round_seconds: Gauge::default(),
            floor_syncs: Family::default(),
            checkpoint_registration_syncs: Family::default(),
            resource_quota_writes: Family::default(),
            audit: AuditMetrics {
                reports: Family::default(),
                results: Family::default(),
                results_omitted: Gauge::default(),
                audits: Family::default(),
                duration_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
                api_served: Gauge::default(),
                namespaces_audited: Counter::default(),
            },
            watch_errors: Family::default(),
        };
        registry.register(
            "observer_reported",
            "Finished runs reported to the scorers, by result (learned, duplicate)",
            m.reported.clone(),
        );
        registry.register(
            "observer_skipped",
            "Decided GPU Pods whose runtime is not reported, by reason",
            m.skipped.clone(),
        );
        registry.register(
            "observer_delivery_failures",
            "Observe calls to one scorer replica that failed",
            m.delivery_failures.clone(),
        );
        registry.register(
            "observer_rejected",
            "Observations the scorer refused as invalid (not retried)",
            m.rejected.clone(),
        );
        registry.register(
            "observer_implausible_runs",
            "Finished runs the scorer found implausibly fast for their job type (weighed down, not trusted)",
            m.implausible.clone(),
        );
        registry.register(
            "observer_state_imports",
            "ImportState calls by result (imported, kept, failed)",
            m.state_imports.clone(),
        );
        registry.register(
            "observer_state_stores",
            "Writes of the stored learned state by result (ok, conflict, too_large, failed)",
            m.state_stores.clone(),
        );
        registry.register(
            "observer_leader",
            "1 while this replica holds the Lease",
            m.leader.clone(),
        );
        registry.register(
            "observer_scorer_replicas",
            "Scorer replicas found at the last convergence round",
            m.scorer_replicas.clone(),
        );
        registry.register(
            "observer_scorer_replicas_answering",
            "Scorer replicas that answered ExportState at the last convergence round",
            m.scorer_replicas_answering.clone(),
        );
        registry.register(
            "observer_best_state_observations",
            "Observations held by the most complete learned state at the last round",
            m.best_state_observations.clone(),
        );
        registry.register(
            "observer_pending",
            "Finished runs waiting to be reported",
            m.pending.clone(),
        );
        registry.register(
            "observer_last_round_seconds",
            "Duration of the last convergence round",
            m.last_round_seconds.clone(),
        );
        registry.register(
            "observer_floor_syncs",
            "Rounds keeping the floor's parameter object in step with the policy, by result (in_step, written, policy_refused, failed)",
            m.floor_syncs.clone(),
        );
        registry.register(
            "observer_checkpoint_registration_syncs",
            "Rounds keeping the checkpoint-restore webhook's match condition in step with the stored CheckpointBackups, by result (in_step, written, no_entry, failed)",
            m.checkpoint_registration_syncs.clone(),
        );
        registry.register(
            "observer_resource_quota_writes",
            "Writes of the GPU ResourceQuotas by result (created, updated, deleted, conflict, failed; policy_refused: a round that wrote nothing)",
            m.resource_quota_writes.clone(),
        );
        registry.register(
            "observer_watch_errors",
            "Errors of the watches that feed stores, by resource (retried with backoff; the store kept as last seen)",
            m.watch_errors.clone(),
        );
        m.audit.register(registry);
        m
    }

    pub fn skip(&self, reason: crate::extract::SkipReason) {
        self.skipped
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub fn watch_error(&self, resource: &str) {
        self.watch_errors
            .get_or_create(&ResourceLabel {
                resource: resource.to_string(),
            })
            .inc();
    }

    pub fn result(family: &Family<ResultLabel, Counter>, result: &'static str) {
        family.get_or_create(&ResultLabel { result }).inc();
    }
}

impl AuditMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "observer_policy_reports",
            "PolicyReport writes by result (applied, unchanged, deleted, failed)",
            self.reports.clone(),
        );
        registry.register(
            "observer_policy_report_results",
            "PolicyReport results of the reports as they stand by result (pass, fail, warn) and reason, those left out for size included",
            self.results.clone(),
        );
        registry.register(
            "observer_policy_report_results_omitted",
            "Results the PolicyReports as they stand left out for size",
            self.results_omitted.clone(),
        );
        registry.register(
            "observer_audits",
            "Background audit passes by result (ok, failed)",
            self.audits.clone(),
        );
        registry.register(
            "observer_audit_duration_seconds",
            "Duration of a background audit pass (reading the watched stores, deciding, writing the reports)",
            self.duration_seconds.clone(),
        );
        registry.register(
            "observer_audit_namespaces_audited",
            "Namespaces decided again by the audit's passes (all in a full pass, the changed ones otherwise)",
            self.namespaces_audited.clone(),
        );

        registry.register(
            "observer_policy_report_api_served",
            "1 while the PolicyReport API (wgpolicyk8s.io/v1alpha2) is served (leader, --policy-reports)",
            self.api_served.clone(),
        );
    }
}
