//! `POST /mutate-pod-checkpoint`: Pods of a Job start from the checkpoint images of a matching
//! CheckpointBackup (`migration.dcnlab.com/v1`, the stateful-migration operator's resource), so a migrated or
//! restarted job resumes instead of starting over. The rules are
//! [`gpu_admission_core::admission::checkpoint_restore`]; here the namespace's backups from the watch cache,
//! the Job's controller when a CronJob backup could match, metrics and logs. Any Pod, GPU or not; always
//! allowed; without the CRD (or with `--no-kube`) every Pod is allowed unchanged.

use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::admission::checkpoint_restore::{self as restore, JobFacts, RestoreInput};
use gpu_admission_core::review::{self, Answer, BadRequest, Content, Incoming};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, Operation};

use super::pipeline::{Body, Call, Reply, Webhook, operation_label};
use crate::cluster::checkpoints::CheckpointCaches;
use crate::cluster::workloads::WorkloadOwners;
use crate::metrics::{CheckpointOutcome, Metrics};

/// Budget of the one GET of a Job the watch has not delivered yet: well inside the registration's
/// `timeoutSeconds` (2), so a slow API never turns into the apiserver giving up on us.
const JOB_LOOKUP_DEADLINE: Duration = Duration::from_millis(500);

/// What `/mutate-pod-checkpoint` reads; both `None` with `--no-kube`.
pub(crate) struct CheckpointRestore {
    pub(crate) checkpoints: Option<Arc<CheckpointCaches>>,
    pub(crate) workloads: Option<Arc<WorkloadOwners>>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Webhook for CheckpointRestore {
    const NAME: &'static str = "mutate-pod-checkpoint";
    type Review = Incoming;

    fn decode(body: &[u8]) -> Result<Incoming, BadRequest> {
        review::decode(body)
    }

    async fn admit(&self, incoming: &Incoming, _call: &Call) -> Reply {
        let (operation, (outcome, answer)) = match &incoming.content {
            Content::Pod(req) => (operation_label(&req.operation), self.restore(req).await),
            Content::OtherKind { .. } | Content::Unreadable(_) => {
                ("unknown", (CheckpointOutcome::skipped, Answer::default()))
            }
        };
        Reply {
            outcome: outcome.as_str(),
            operation,
            body: Body::Answer(answer),
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl CheckpointRestore {
    async fn restore(&self, req: &AdmissionRequest<Pod>) -> (CheckpointOutcome, Answer) {
        let skipped = (CheckpointOutcome::skipped, Answer::default());
        let (Operation::Create, Some(pod)) = (&req.operation, &req.object) else {
            return skipped;
        };
        let Some(job) = restore::controlling_job(pod) else {
            return skipped;
        };
        let Some(caches) = &self.checkpoints else {
            return skipped; // --no-kube
        };
        let namespace = req
            .namespace
            .as_deref()
            .or(pod.metadata.namespace.as_deref())
            .unwrap_or("");
        // None: the CRD is not installed (logged once by the cache) or not listed yet.
        let Some(backups) = caches.backups_for(namespace) else {
            return (CheckpointOutcome::not_installed, Answer::default());
        };
        let controller = if !backups.iter().any(|b| restore::names_cron_job(b)) {
            Ok(None) // not needed: no CronJob backup could match
        } else if let Some(owners) = &self.workloads {
            owners
                .job_controller(namespace, &job.name, &job.uid, JOB_LOOKUP_DEADLINE)
                .await
        } else {
            Err("the frontend runs without its Job cache".to_string())
        };
        let controller = match &controller {
            Ok(c) => Ok(c.as_ref()),
            Err(why) => {
                tracing::warn!(uid = req.uid, namespace, job = %job.name, %why, "checkpoint restore: the Job's controller is unknown");
                Err(why.as_str())
            }
        };
        let input = RestoreInput {
            pod,
            namespace,
            job: JobFacts {
                name: &job.name,
                controller,
            },
            backups: &backups,
        };
        let Some(r) = restore::decide(&input) else {
            return skipped;
        };
        self.metrics
            .record_checkpoint_images(r.restored.len(), r.misses.iter().map(|(_, m)| *m));
        let pod_name = pod
            .metadata
            .name
            .as_deref()
            .or(pod.metadata.generate_name.as_deref())
            .unwrap_or("");
        let outcome = if r.restored.is_empty() {
            tracing::debug!(uid = req.uid, namespace, pod = pod_name, job = %job.name, backup = ?r.backup, misses = ?r.misses,
                "checkpoint restore: no image restored");
            CheckpointOutcome::unchanged
        } else {
            let images: Vec<String> = r
                .restored
                .iter()
                .map(|i| format!("{}: {} -> {}", i.container, i.original, i.image))
                .collect();
            tracing::info!(uid = req.uid, namespace, pod = pod_name, job = %job.name, backup = ?r.backup, ?images,
                misses = ?r.misses, "checkpoint restore: Pod starts from its checkpoint images");
            CheckpointOutcome::restored
        };
        let answer = Answer {
            patch: review::Patch::from_operations(&r.patch),
            warnings: r.warnings,
        };
        (outcome, answer)
    }
}
