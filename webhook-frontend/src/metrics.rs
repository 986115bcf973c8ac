//! The webhook's Prometheus metrics (served by `gpu_admission_telemetry::admin` on the admin port).

use gpu_admission_core::admission::mutate_pod::ScorerResult;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why the server closed (or refused) a connection on the webhook port.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum ConnectionClose {
    /// TLS handshake, protocol detection and first request not done within the first-request timeout.
    first_request_timeout,
    /// Bytes of an HTTP/1 request that did not become a request's headers within the same timeout.
    request_header_timeout,
    /// No request for the idle timeout (closed gracefully).
    idle_timeout,
    /// Closed (gracefully, it was idle) to make room for a new connection at the cap.
    shed,
    /// Refused at the cap: every open connection was busy.
    rejected,
    /// Served `--max-connection-requests` requests (closed gracefully: GOAWAY).
    max_requests,
    /// Lived `--max-connection-age-secs` (closed gracefully: GOAWAY).
    max_age,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConnectionCloseLabels {
    pub(crate) reason: ConnectionClose,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum ReloadResult {
    ok,
    error,
}

/// How a `/mutate-pod-checkpoint` request ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub(crate) enum CheckpointOutcome {
    /// At least one container image was restored from a CheckpointBackup.
    restored,
    /// A Pod of a Job, no image restored (see the misses).
    unchanged,
    /// Not a CREATE of a Job's Pod, or `--no-kube`.
    skipped,
    /// The CheckpointBackup CRD is not installed (or not listed yet).
    not_installed,
}

impl CheckpointOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckpointOutcome::restored => "restored",
            CheckpointOutcome::unchanged => "unchanged",
            CheckpointOutcome::skipped => "skipped",
            CheckpointOutcome::not_installed => "not_installed",
        }
    }
}

/// Why a container of a Job's Pod kept its image.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum CheckpointMiss {
    no_backup,
    no_container_match,
    unpushed_image_only,
}

impl From<gpu_admission_core::admission::checkpoint_restore::Miss> for CheckpointMiss {
    fn from(m: gpu_admission_core::admission::checkpoint_restore::Miss) -> Self {
        use gpu_admission_core::admission::checkpoint_restore::Miss;
        match m {
            Miss::NoBackup => CheckpointMiss::no_backup,
            Miss::NoContainerMatch => CheckpointMiss::no_container_match,
            Miss::UnpushedImageOnly => CheckpointMiss::unpushed_image_only,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CheckpointMissLabels {
    pub(crate) reason: CheckpointMiss,
}

/// The one admission family: every webhook, recorded by the pipeline.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AdmissionLabels {
    /// The webhook's path without the slash (`mutate-pod`, `validate-pod`, …).
    pub(crate) webhook: &'static str,
    /// CREATE, UPDATE, DELETE, CONNECT, or "unknown" when the review could not be read.
    pub(crate) operation: &'static str,
    /// The webhook's outcome (`mutated`, `allowed`, `denied`, `skipped`, …), or `bad_request` (HTTP 400),
    /// `body_too_large` (HTTP 413).
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct WebhookLabels {
    pub(crate) webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BodySizeLabels {
    /// `small` (under [`SMALL_BODY_BYTES`]) or `large`: whether small reviews wait behind large ones.
    pub(crate) size: &'static str,
}

/// The size under which a body is `small` in [`Metrics::record_body_arrival`].
pub(crate) const SMALL_BODY_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    /// [`gpu_admission_core::admission::mutate_pod::ScorerOutcome::result`].
    pub(crate) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct IssuedLabels {
    /// "true" when a new CA was created with the serving certificate.
    pub(crate) new_ca: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    pub(crate) result: ReloadResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabels {
    pub(crate) reason: &'static str,
}

/// One admission a GpuPolicyException allowed: the exception, and what it relaxed (`tier`: classes or the
/// priority cap; `quota`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ExceptedLabels {
    pub(crate) exception_namespace: String,
    pub(crate) exception: String,
    pub(crate) relaxed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ViolationLabels {
    pub(crate) tier: String,
    /// class_outside_tier, priority_above_cap, no_class_fits.
    pub(crate) reason: &'static str,
    /// The enforcement mode that answered it, as the policy file spells it: Enforce, Warn or Audit.
    pub(crate) mode: &'static str,
}

/// One GPU quota figure: `kind` is `used` (counted from the Pod watch), `min` or `max`;
/// `tenant_namespace` is empty for the tier's own figures; `class` is empty for the total across classes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QuotaLabels {
    pub(crate) tier: String,
    pub(crate) tenant_namespace: String,
    pub(crate) class: String,
    pub(crate) kind: &'static str,
}

/// How one write of the quota ledger went.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum LedgerWrite {
    /// Written: the Pod is admitted against its quota.
    written,
    /// Another replica wrote first: decided again on its version, which the ledger watch had brought.
    conflict,
    /// Another replica wrote first and the watch had not brought its version yet: read, then decided again.
    conflict_read,
    /// Not written: the watch brought another replica's write before this batch's own, so its reservations
    /// were decided again without a write that would have conflicted (counted once per batch).
    overtaken,
    /// The API failed or the ledger stayed contended: the Pod was undecidable.
    failed,
    /// Not written: the namespace is over its own rate limit of reservations (in flight or never stored);
    /// its Pod was undecidable, no other namespace's.
    limited,
    /// Not written: the watch already holds a Pod of that namespace and name, so the apiserver refuses the
    /// CREATE after admission (`AlreadyExists`) and nothing is reserved.
    name_taken,
    /// Not written: admitted against the headroom this replica was granted for the namespace in an earlier
    /// write (counted once per Pod).
    drawn,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LedgerWriteLabels {
    /// The tier whose ledger it is (a quota'd tier of the policy: bounded).
    pub(crate) tier: String,
    pub(crate) result: LedgerWrite,
}

/// Why a request was answered 503 before its body was read.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum ShedReason {
    /// The in-flight body budget needed room and this request's body was the largest claim.
    body_budget,
    /// The body did not arrive within the read deadline (answered 408).
    body_read_deadline,
    /// The review waited for its namespace's share until half the apiserver's timeout.
    namespace_share,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ShedLabels {
    pub(crate) reason: ShedReason,
}

/// Where the policy the frontend holds came from.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum PolicySource {
    /// The policy file.
    file,
    /// The copy of the last good file this replica kept.
    last_good,
    /// The scorer's `GetPolicy` document.
    scorer,
    /// The embedded default policy (no `--policy-file`).
    embedded,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLoadLabels {
    pub(crate) source: PolicySource,
    pub(crate) result: ReloadResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyVersionLabels {
    pub(crate) version: String,
    pub(crate) source: PolicySource,
}

/// The policy the frontend holds: loads, the version in force, and how long the scorer has disagreed.
#[derive(Debug, Default)]
pub struct PolicyMetrics {
    loads: Family<PolicyLoadLabels, Counter>,
    held: Family<PolicyVersionLabels, Gauge>,
    disagreement: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl PolicyMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "policy_loads",
            "Policies the frontend read, by source (file, last_good, scorer, embedded) and result",
            self.loads.clone(),
        );
        r.register(
            "policy_held",
            "1 for the policy version the frontend enforces, labelled with where it came from",
            self.held.clone(),
        );
        r.register_with_unit(
            "policy_scorer_disagreement",
            "How long the scorer has scored with another policy version than the frontend enforces (0 while \
             they agree)",
            prometheus_client::registry::Unit::Seconds,
            self.disagreement.clone(),
        );
    }

    pub(crate) fn loaded(&self, source: PolicySource, version: &str) {
        self.loads
            .get_or_create(&PolicyLoadLabels {
                source,
                result: ReloadResult::ok,
            })
            .inc();
        self.held.clear();
        self.held
            .get_or_create(&PolicyVersionLabels {
                version: version.to_string(),
                source,
            })
            .set(1);
    }

    pub(crate) fn rejected(&self, source: PolicySource) {
        self.loads
            .get_or_create(&PolicyLoadLabels {
                source,
                result: ReloadResult::error,
            })
            .inc();
    }

    pub(crate) fn set_disagreement(&self, seconds: f64) {
        self.disagreement.set(seconds);
    }
}

/// 50 µs .. ~3.3 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00005, 2.0, 17))
}

/// All metrics of the webhook frontend.
#[derive(Debug)]
pub struct Metrics {
    /// Requests answered 503 before their body was read, by reason.
    pub(crate) shed: Family<ShedLabels, Counter>,
    /// The policy the frontend holds.
    pub(crate) policy: std::sync::Arc<PolicyMetrics>,
    /// Every webhook's answered requests, by webhook, operation and outcome.
    pub(crate) admissions: Family<AdmissionLabels, Counter>,
    /// Time to answer, by webhook (from the body's last byte).
    pub(crate) admission_duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    /// Time from a webhook request's head to its body's last byte, by the body's size.
    pub(crate) body_arrival: Family<BodySizeLabels, Histogram, fn() -> Histogram>,
    pub(crate) scorer_call_duration: Histogram,
    pub(crate) scorer_calls: Family<CallLabels, Counter>,
    pub(crate) tls_reloads: Family<ReloadLabels, Counter>,
    /// Automatic mode: certificates this replica wrote into the Secret, by whether a new CA came with it.
    pub(crate) tls_certificates_issued: Family<IssuedLabels, Counter>,
    /// Automatic mode: patches of the webhook configuration's caBundle by this replica.
    pub(crate) tls_ca_bundle_patches: Counter,
    /// Container images replaced by a checkpoint image.
    pub(crate) checkpoint_images_restored: Counter,
    /// Containers of Jobs' Pods that kept their image, by reason.
    pub(crate) checkpoint_misses: Family<CheckpointMissLabels, Counter>,
    /// Tier violations seen by `validate-pod`, whatever the mode answered.
    pub(crate) violations: Family<ViolationLabels, Counter>,
    /// Admissions a GpuPolicyException allowed, by exception.
    pub(crate) excepted: Family<ExceptedLabels, Counter>,
    /// GPU quota usage and limits, in GPUs (see [`QuotaLabels`]); refreshed from the Pod watch.
    pub(crate) quota_gpus: Family<QuotaLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Writes of the quota ledger by result.
    pub(crate) quota_ledger_writes: Family<LedgerWriteLabels, Counter>,
    /// How long each write of the quota ledger took (the API's answer, whatever it was).
    pub(crate) quota_ledger_write_duration: Histogram,
    /// Reservations each write of the quota ledger carried (the group commit's batch).
    pub(crate) quota_ledger_batch: Histogram,
    /// Connections open on the webhook port (TLS handshakes included).
    pub(crate) connections_open: Gauge,
    /// Connections the server closed or refused, by reason.
    pub(crate) connections_closed: Family<ConnectionCloseLabels, Counter>,
    /// Failed accepts on the webhook port (e.g. out of file descriptors), each followed by a backoff.
    pub(crate) accept_errors: Counter,
    /// Webhook requests refused for want of a verified client certificate (`--client-ca-file`).
    pub(crate) unauthenticated_requests: Counter,
    /// Pods of a workload answered with the scorer's answer for an earlier Pod of it (no Score call).
    pub(crate) workload_answers_reused: Counter,
    /// Pods a restricted instance recorded that the cluster-wide instance decided again, by reason.
    pub(crate) restricted_take_overs: Family<ReasonLabels, Counter>,
    /// Times a restricted instance gave a namespace's Lease back, by reason.
    pub(crate) restricted_releases: Family<ReasonLabels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them (names get the `gpu_admission_` prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            shed: Family::default(),
            policy: Default::default(),
            admissions: Family::default(),
            admission_duration: Family::new_with_constructor(duration_histogram),
            body_arrival: Family::new_with_constructor(duration_histogram),
            scorer_call_duration: Histogram::new(exponential_buckets(0.00005, 2.0, 17)),
            scorer_calls: Family::default(),
            tls_reloads: Family::default(),
            tls_certificates_issued: Family::default(),
            tls_ca_bundle_patches: Counter::default(),
            checkpoint_images_restored: Counter::default(),
            checkpoint_misses: Family::default(),
            violations: Family::default(),
            excepted: Family::default(),
            quota_gpus: Family::default(),
            quota_ledger_writes: Family::default(),
            // 1 ms .. ~65 s.
            quota_ledger_write_duration: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            // 1 .. 4,096 reservations.
            quota_ledger_batch: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            connections_open: Gauge::default(),
            connections_closed: Family::default(),
            accept_errors: Counter::default(),
            unauthenticated_requests: Counter::default(),
            workload_answers_reused: Counter::default(),
            restricted_take_overs: Family::default(),
            restricted_releases: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("gpu_admission");
        m.policy.register(r);
        r.register(
            "requests_shed",
            "Requests refused before they were decided, by reason (body_budget: shed as the largest claim \
             when a body cap needed room, 503; body_read_deadline: the body did not arrive in time, 408; \
             namespace_share: waited too long for its namespace's share, 503)",
            m.shed.clone(),
        );
        r.register(
            "admissions",
            "Admission requests answered, by webhook, operation and outcome (every webhook, bad requests included)",
            m.admissions.clone(),
        );
        r.register_with_unit(
            "admission_duration",
            "Time to answer an admission request, by webhook, from its body's last byte",
            prometheus_client::registry::Unit::Seconds,
            m.admission_duration.clone(),
        );
        r.register_with_unit(
            "body_arrival",
            "Time from a webhook request's head to its body's last byte (the transfer, and the reading under the body budget), by size (small: under 64 KiB)",
            prometheus_client::registry::Unit::Seconds,
            m.body_arrival.clone(),
        );
        r.register_with_unit(
            "scorer_call_duration",
            "Time of the Score call to the scorer, whatever its result",
            prometheus_client::registry::Unit::Seconds,
            m.scorer_call_duration.clone(),
        );
        r.register(
            "scorer_calls",
            "Score calls by result",
            m.scorer_calls.clone(),
        );
        r.register(
            "tls_reloads",
            "Reloads of the serving certificate by result",
            m.tls_reloads.clone(),
        );
        r.register(
            "tls_certificates_issued",
            "Automatic mode: serving certificates written into the Secret by this replica",
            m.tls_certificates_issued.clone(),
        );
        r.register(
            "tls_ca_bundle_patches",
            "Automatic mode: caBundle patches of the webhook configuration by this replica",
            m.tls_ca_bundle_patches.clone(),
        );
        r.register(
            "checkpoint_images_restored",
            "Container images of Jobs' Pods replaced by a CheckpointBackup's image",
            m.checkpoint_images_restored.clone(),
        );
        r.register(
            "checkpoint_restore_misses",
            "Containers of Jobs' Pods that kept their image, by reason (no_backup counts every container of a Pod \
             no CheckpointBackup refers to)",
            m.checkpoint_misses.clone(),
        );
        r.register(
            "policy_violations",
            "Tier violations by tier, reason and the enforcement mode that answered them",
            m.violations.clone(),
        );
        r.register(
            "exception_admissions",
            "Admissions a GpuPolicyException allowed, by the exception (namespace, name) and what it relaxed \
             (tier: classes or priority cap; quota)",
            m.excepted.clone(),
        );
        r.register(
            "quota_gpus",
            "GPU quotas in GPUs by tier, tenant_namespace (empty: the tier's), class (empty: the total) and kind \
             (used, min, max)",
            m.quota_gpus.clone(),
        );
        r.register(
            "quota_ledger_writes",
            "Writes of the GPU quota ledgers by tier and result, each carrying every reservation decided since the last (written, conflict: another replica wrote first, failed, limited: the namespace over its own rate limit of reservations, name_taken)",
            m.quota_ledger_writes.clone(),
        );
        r.register(
            "quota_ledger_write_duration_seconds",
            "Seconds each write of the GPU quota ledger took, whatever the API answered",
            m.quota_ledger_write_duration.clone(),
        );
        r.register(
            "quota_ledger_batch_reservations",
            "Reservations each write of the GPU quota ledger carried (decided since the last write)",
            m.quota_ledger_batch.clone(),
        );
        r.register(
            "connections_open",
            "Connections open on the webhook port, TLS handshakes included",
            m.connections_open.clone(),
        );
        r.register(
            "connections_closed",
            "Connections on the webhook port closed or refused by the server, by reason",
            m.connections_closed.clone(),
        );
        r.register(
            "accept_errors",
            "Failed accepts on the webhook port (e.g. out of file descriptors)",
            m.accept_errors.clone(),
        );
        r.register(
            "unauthenticated_requests",
            "Webhook requests refused (401) for want of a client certificate signed by --client-ca-file",
            m.unauthenticated_requests.clone(),
        );
        r.register(
            "workload_answers_reused",
            "Pods of a workload answered with the scorer's answer for an earlier Pod of the same workload, without a Score call",
            m.workload_answers_reused.clone(),
        );
        r.register(
            "restricted_take_overs",
            "Pods a namespace-restricted instance recorded that this cluster-wide instance decided again, by \
             reason (not_held: no restricted instance holds the namespace's Lease; fell_back: the record says \
             its scorer did not answer; outside_tier: outside the namespace's current tier)",
            m.restricted_take_overs.clone(),
        );
        r.register(
            "restricted_releases",
            "Times this namespace-restricted instance gave a namespace's Lease back while running, by reason \
             (scorer_failing, tier_unread, tier_unknown)",
            m.restricted_releases.clone(),
        );
        m
    }

    pub(crate) fn record_connection_closed(&self, reason: ConnectionClose) {
        self.connections_closed
            .get_or_create(&ConnectionCloseLabels { reason })
            .inc();
    }

    pub(crate) fn record_checkpoint_images<M: Into<CheckpointMiss>>(
        &self,
        restored: usize,
        misses: impl IntoIterator<Item = M>,
    ) {
        self.checkpoint_images_restored.inc_by(restored as u64);
        for m in misses {
            self.checkpoint_misses
                .get_or_create(&CheckpointMissLabels { reason: m.into() })
                .inc();
        }
    }

    pub(crate) fn record_shed(&self, reason: ShedReason) {
        self.shed.get_or_create(&ShedLabels { reason }).inc();
    }

    /// One write of the quota ledger carrying `reservations`, answered after `seconds`.
    pub(crate) fn record_ledger_batch(&self, reservations: usize, seconds: f64) {
        self.quota_ledger_batch.observe(reservations as f64);
        self.quota_ledger_write_duration.observe(seconds);
    }

    /// One write of `tier`'s quota ledger.
    pub(crate) fn record_ledger_write(&self, tier: &str, result: LedgerWrite) {
        let labels = LedgerWriteLabels {
            tier: tier.to_string(),
            result,
        };
        self.quota_ledger_writes.get_or_create(&labels).inc();
    }

    pub(crate) fn record_violation(&self, tier: &str, reason: &'static str, mode: &'static str) {
        self.violations
            .get_or_create(&ViolationLabels {
                tier: tier.to_string(),
                reason,
                mode,
            })
            .inc();
    }

    /// One admission the GpuPolicyException `namespace/name` allowed, relaxing `relaxed`.
    pub(crate) fn record_excepted(&self, namespace: &str, name: &str, relaxed: &'static str) {
        self.excepted
            .get_or_create(&ExceptedLabels {
                exception_namespace: namespace.to_string(),
                exception: name.to_string(),
                relaxed,
            })
            .inc();
    }

    /// One answered admission request of any webhook (the pipeline records it).
    pub(crate) fn record_admission(
        &self,
        webhook: &'static str,
        operation: &'static str,
        outcome: &'static str,
        elapsed: std::time::Duration,
    ) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                webhook,
                operation,
                outcome,
            })
            .inc();
        self.admission_duration
            .get_or_create(&WebhookLabels { webhook })
            .observe(elapsed.as_secs_f64());
    }

    /// A body read whole, `bytes` long, `seconds` after its request's head.
    pub(crate) fn record_body_arrival(&self, bytes: usize, seconds: f64) {
        let size = if bytes < SMALL_BODY_BYTES {
            "small"
        } else {
            "large"
        };
        self.body_arrival
            .get_or_create(&BodySizeLabels { size })
            .observe(seconds);
    }

    pub(crate) fn record_scorer_call(&self, result: ScorerResult, seconds: f64) {
        self.scorer_calls
            .get_or_create(&CallLabels {
                result: result.as_str(),
            })
            .inc();
        self.scorer_call_duration.observe(seconds);
    }

    pub(crate) fn record_tls_reload(&self, result: ReloadResult) {
        self.tls_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    pub(crate) fn record_certificate_issued(&self, new_ca: bool) {
        let new_ca = if new_ca { "true" } else { "false" };
        self.tls_certificates_issued
            .get_or_create(&IssuedLabels { new_ca })
            .inc();
    }

    pub(crate) fn record_ca_bundle_patch(&self) {
        self.tls_ca_bundle_patches.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.record_admission(
            "mutate-pod",
            "CREATE",
            "mutated",
            std::time::Duration::from_millis(1),
        );
        m.record_scorer_call(ScorerResult::Timeout, 0.2);
        m.record_tls_reload(ReloadResult::ok);
        m.record_certificate_issued(true);
        m.record_ca_bundle_patch();
        m.record_checkpoint_images(2, [CheckpointMiss::unpushed_image_only]);
        m.record_violation("bronze", "class_outside_tier", "Warn");
        m.record_excepted("batch", "train-h100", "tier");
        m.record_connection_closed(ConnectionClose::idle_timeout);
        m.connections_open.set(3);
        m.accept_errors.inc();
        m.scorer_calls
            .get_or_create(&CallLabels {
                result: "overloaded",
            })
            .inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for needle in [
            "gpu_admission_admissions_total{webhook=\"mutate-pod\",operation=\"CREATE\",outcome=\"mutated\"} 1",
            "gpu_admission_admission_duration_seconds_count{webhook=\"mutate-pod\"} 1",
            "gpu_admission_scorer_call_duration_seconds_count 1",
            "gpu_admission_scorer_calls_total{result=\"timeout\"} 1",
            "gpu_admission_tls_reloads_total{result=\"ok\"} 1",
            "gpu_admission_tls_certificates_issued_total{new_ca=\"true\"} 1",
            "gpu_admission_tls_ca_bundle_patches_total 1",
            "gpu_admission_checkpoint_images_restored_total 2",
            "gpu_admission_checkpoint_restore_misses_total{reason=\"unpushed_image_only\"} 1",
            "gpu_admission_policy_violations_total{tier=\"bronze\",reason=\"class_outside_tier\",mode=\"Warn\"} 1",
            "gpu_admission_connections_closed_total{reason=\"idle_timeout\"} 1",
            "gpu_admission_exception_admissions_total{exception_namespace=\"batch\",exception=\"train-h100\",relaxed=\"tier\"} 1",
            "gpu_admission_connections_open 3",
            "gpu_admission_accept_errors_total 1",
            "gpu_admission_scorer_calls_total{result=\"overloaded\"} 1",
        ] {
            assert!(text.contains(needle), "{needle} missing in\n{text}");
        }
    }
}
