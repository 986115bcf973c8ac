//! CheckpointBackups (`migration.dcnlab.com/v1`, the stateful-migration operator's custom resource) as a
//! watch cache for the checkpoint-restore webhook.
//!
//! - [`CheckpointBackup`] reads exactly the fields the restore uses; every other field of the operator's
//!   objects (schedule, podRef, registry, stopPod, status.phase, conditions, checkpointFiles, ...) is accepted
//!   and ignored, so real objects always deserialize.
//! - The CRD may be missing (the operator is not installed, or not yet): the cache is an
//!   [`OptionalCache`], which looks for it in the background and answers "not installed" meanwhile.
//! - The Jobs behind Pods (is a CronJob their controller?) come from the frontend's one Job cache,
//!   [`crate::cluster::workloads::WorkloadOwners::job_controller`].

use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::admission::checkpoint_restore::backup::{
    CheckpointBackup, GROUP_VERSION, KIND, PLURAL,
};

use super::optional_api::{OptionalApi, OptionalCache};

/// What the restore needs from the cluster besides the Jobs' controllers (which
/// [`crate::cluster::workloads::WorkloadOwners`] answers from its Job cache): the CheckpointBackups.
pub(crate) struct CheckpointCaches {
    backups: OptionalCache<CheckpointBackup>,
}

impl CheckpointCaches {
    /// Starts the CheckpointBackup discovery/watch loop in a background task.
    pub(crate) fn start(client: kube::Client, discovery_interval: Duration) -> Self {
        let api = OptionalApi {
            group_version: GROUP_VERSION,
            plural: PLURAL,
            kind: KIND,
            provider: "CRD",
            meanwhile: "Pods are admitted without restore",
        };
        Self {
            backups: OptionalCache::start(client, api, discovery_interval),
        }
    }

    /// Ready when the CheckpointBackups are listed, or known to be absent (or forbidden).
    pub(crate) fn is_ready(&self) -> bool {
        self.backups.is_ready()
    }

    /// The cached CheckpointBackups whose `resourceRef` points into `namespace`, or `None` when the CRD is
    /// not installed (or its first listing is not complete).
    pub(crate) fn backups_for(&self, namespace: &str) -> Option<Vec<Arc<CheckpointBackup>>> {
        let store = self.backups.synced_store()?;
        Some(store.state_filter(|b| b.target_namespace() == Some(namespace)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_operators_objects_deserialize() {
        // Shaped like the operator's own objects, with the fields this crate ignores.
        let b: CheckpointBackup = serde_json::from_value(json!({
            "apiVersion": "migration.dcnlab.com/v1", "kind": "CheckpointBackup",
            "metadata": {"name": "train-ckpt", "namespace": "ml", "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {
                "schedule": "*/5 * * * *",
                "podRef": {"name": "train-abcde", "namespace": "ml"},
                "resourceRef": {"apiVersion": "batch/v1", "kind": "Job", "name": "train"},
                "registry": {"url": "registry.example", "secretRef": {"name": "push"}},
                "stopPod": false,
                "containers": [{"name": "main", "image": "registry.example/ckpt/main:1"}]
            },
            "status": {
                "phase": "Completed",
                "conditions": [{"type": "Ready", "status": "True"}],
                "checkpointFiles": [{"containerName": "main", "filePath": "/var/lib/kubelet/checkpoints/x.tar"}],
                "builtImages": [{"containerName": "main", "imageName": "registry.example/ckpt/main:2",
                                 "buildTime": "2026-11-20T10:05:00Z", "pushed": true}]
            }
        }))
        .unwrap();
        assert_eq!(b.spec.resource_ref.kind, "Job");
        assert_eq!(b.spec.resource_ref.namespace, None);
        assert_eq!(b.spec.containers[0].image, "registry.example/ckpt/main:1");
        let built = &b.status.as_ref().unwrap().built_images[0];
        assert!(built.pushed);
        assert_eq!(built.build_time.as_deref(), Some("2026-11-20T10:05:00Z"));

        // Sparse and null fields read as empty.
        let b: CheckpointBackup = serde_json::from_value(json!({
            "metadata": {"name": "x"},
            "spec": {"resourceRef": {"kind": "CronJob", "name": "nightly", "namespace": "ml"}, "containers": null},
            "status": {"builtImages": null}
        }))
        .unwrap();
        assert!(b.spec.containers.is_empty());
        assert!(b.status.unwrap().built_images.is_empty());
        assert_eq!(
            <CheckpointBackup as kube::Resource>::url_path(&(), Some("ml")),
            "/apis/migration.dcnlab.com/v1/namespaces/ml/checkpointbackups"
        );
    }
}
