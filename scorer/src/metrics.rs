//! The scorer's Prometheus metrics, served by the telemetry crate's admin server.
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Score, Observe or GetPolicy.
    pub rpc: &'static str,
    /// ok, infeasible (Score found no class), invalid_argument, unavailable (no policy).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// ok or rejected.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadLabels {
    /// decided (the workload's first request on this replica) or cached (its answer served again).
    pub answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Http2LimitLabels {
    /// max_concurrent_streams, max_pending_accept_reset_streams, max_local_error_reset_streams.
    pub setting: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobTypeLabels {
    pub job_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobClassLabels {
    pub job_type: String,
    pub gpu_class: String,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    /// Server-side time to score one request (the model, under the learned-state lock).
    pub score_duration: Histogram,
    pub requests: Family<RequestLabels, Counter>,
    pub policy_reloads: Family<ResultLabels, Counter>,
    /// Seconds since the learned state was last written (since start when never written).
    pub snapshot_age: Gauge<f64, AtomicU64>,
    pub explored_decisions: Counter,
    /// Score requests carrying a workload key, by how they were answered.
    pub workload_answers: Family<WorkloadLabels, Counter>,
    /// The HTTP/2 limits the gRPC server runs with.
    pub http2_limits: Family<Http2LimitLabels, Gauge>,
    /// Unlisted job types forgotten past the budget (least recently seen first).
    pub unlisted_evicted: Counter,
    /// Per job type learned: observations, whether its runs contradict its prior, its GPU-scaling
    /// exponent, and per class the estimated speedup over the catalog's slowest class.
    pub job_type_observations: Family<JobTypeLabels, Gauge>,
    pub job_type_contradicted: Family<JobTypeLabels, Gauge>,
    pub job_type_gpu_scaling: Family<JobTypeLabels, Gauge<f64, AtomicU64>>,
    pub job_type_speedup: Family<JobClassLabels, Gauge<f64, AtomicU64>>,
}

impl Metrics {
    /// Creates the metrics and registers them (names as exposed: `scorer_score_duration_seconds`,
    /// `scorer_requests_total`, `scorer_policy_reloads_total`, `scorer_state_snapshot_age_seconds`,
    /// `scorer_explored_decisions_total`, `scorer_workload_answers_total`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            // 1 µs .. ~1 s.
            score_duration: Histogram::new(exponential_buckets(1e-6, 2.0, 21)),
            requests: Family::default(),
            policy_reloads: Family::default(),
            snapshot_age: Gauge::default(),
            explored_decisions: Counter::default(),
            workload_answers: Family::default(),
            http2_limits: Family::default(),
            unlisted_evicted: Counter::default(),
            job_type_observations: Family::default(),
            job_type_contradicted: Family::default(),
            job_type_gpu_scaling: Family::default(),
            job_type_speedup: Family::default(),
        };
        registry.register(
            "scorer_score_duration_seconds",
            "Server-side duration of scoring one request",
            m.score_duration.clone(),
        );
        // prometheus-client appends `_total` to counters.
        registry.register(
            "scorer_requests",
            "gRPC requests by RPC and result",
            m.requests.clone(),
        );
        registry.register(
            "scorer_policy_reloads",
            "Policy file reloads by result (rejected = invalid file, previous policy kept)",
            m.policy_reloads.clone(),
        );
        registry.register(
            "scorer_state_snapshot_age_seconds",
            "Seconds since the learned state was last snapshotted",
            m.snapshot_age.clone(),
        );
        registry.register(
            "scorer_explored_decisions",
            "Decisions where the information gain changed the chosen GPU class",
            m.explored_decisions.clone(),
        );
        registry.register(
            "scorer_workload_answers",
            "Score requests of a workload (workload_key set) by answer: decided once per workload, then cached",
            m.workload_answers.clone(),
        );
        registry.register(
            "scorer_http2_limit",
            "HTTP/2 limits of the gRPC server, per connection, by setting",
            m.http2_limits.clone(),
        );
        registry.register(
            "scorer_unlisted_job_types_evicted",
            "Job types the policy does not list forgotten past the learning budget (least recently seen first)",
            m.unlisted_evicted.clone(),
        );
        registry.register(
            "scorer_job_type_observations",
            "Runs learned per job type (listed or not), over every class",
            m.job_type_observations.clone(),
        );
        registry.register(
            "scorer_job_type_prior_contradicted",
            "1 when a job type's runs contradict its prior (it is then learned under a wider one)",
            m.job_type_contradicted.clone(),
        );
        registry.register(
            "scorer_job_type_gpu_scaling_exponent",
            "A job type's GPU-scaling exponent s (runtime on g GPUs = runtime on one / g^s), learned from its runs at several GPU counts",
            m.job_type_gpu_scaling.clone(),
        );
        registry.register(
            "scorer_job_type_speedup",
            "Estimated speedup of a job type on a GPU class over the catalog's slowest class",
            m.job_type_speedup.clone(),
        );
        m
    }

    /// Updates the metrics of a job type after it was learned.
    pub fn job_type_learned(&self, job_type: &str, s: &crate::model::JobTypeSummary) {
        let label = JobTypeLabels {
            job_type: job_type.to_string(),
        };
        self.job_type_observations
            .get_or_create(&label)
            .set(i64::try_from(s.observations).unwrap_or(i64::MAX));
        self.job_type_contradicted
            .get_or_create(&label)
            .set(i64::from(s.contradicted));
        self.job_type_gpu_scaling
            .get_or_create(&label)
            .set(s.gpu_scaling_exponent);
        for (class, speedup) in &s.speedups {
            self.job_type_speedup
                .get_or_create(&JobClassLabels {
                    job_type: job_type.to_string(),
                    gpu_class: class.clone(),
                })
                .set(*speedup);
        }
    }

    /// Drops the metrics of an evicted job type and counts the eviction.
    pub fn job_type_evicted(&self, job_type: &str, classes: &[String]) {
        self.unlisted_evicted.inc();
        let label = JobTypeLabels {
            job_type: job_type.to_string(),
        };
        self.job_type_observations.remove(&label);
        self.job_type_contradicted.remove(&label);
        self.job_type_gpu_scaling.remove(&label);
        for class in classes {
            self.job_type_speedup.remove(&JobClassLabels {
                job_type: job_type.to_string(),
                gpu_class: class.clone(),
            });
        }
    }

    pub fn workload_answer(&self, answer: &'static str) {
        self.workload_answers
            .get_or_create(&WorkloadLabels { answer })
            .inc();
    }

    /// The HTTP/2 limits in force, as `(setting, value)` pairs (see `server::Http2Limits::settings`).
    pub fn record_http2_limits(&self, settings: &[(&'static str, i64)]) {
        for &(setting, value) in settings {
            self.http2_limits
                .get_or_create(&Http2LimitLabels { setting })
                .set(value);
        }
    }

    /// Metrics registered nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    pub fn request(&self, rpc: &'static str, result: &'static str) {
        self.requests
            .get_or_create(&RequestLabels { rpc, result })
            .inc();
    }

    pub fn policy_reload(&self, result: &'static str) {
        self.policy_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_exposed() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.request("Score", "ok");
        m.policy_reload("rejected");
        m.explored_decisions.inc();
        m.workload_answer("cached");
        m.score_duration.observe(0.00002);
        m.record_http2_limits(&[("max_pending_accept_reset_streams", 1024)]);
        m.job_type_learned(
            "train-new",
            &crate::model::JobTypeSummary {
                observations: 3,
                speedups: vec![("L4-24GB".into(), 1.0), ("H100-80GB".into(), 4.5)],
                contradicted: true,
                gpu_scaling_exponent: 0.5,
            },
        );
        m.job_type_evicted("gone", &[]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for needle in [
            "scorer_requests_total{rpc=\"Score\",result=\"ok\"} 1",
            "scorer_policy_reloads_total{result=\"rejected\"} 1",
            "scorer_explored_decisions_total 1",
            "scorer_workload_answers_total{answer=\"cached\"} 1",
            "scorer_score_duration_seconds_count 1",
            "# TYPE scorer_state_snapshot_age_seconds gauge",
            "scorer_http2_limit{setting=\"max_pending_accept_reset_streams\"} 1024",
            "scorer_unlisted_job_types_evicted_total 1",
            "scorer_job_type_observations{job_type=\"train-new\"} 3",
            "scorer_job_type_prior_contradicted{job_type=\"train-new\"} 1",
            "scorer_job_type_gpu_scaling_exponent{job_type=\"train-new\"} 0.5",
            "scorer_job_type_speedup{job_type=\"train-new\",gpu_class=\"H100-80GB\"} 4.5",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }
}
