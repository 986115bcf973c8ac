//! CheckpointBackups (`migration.dcnlab.com/v1`, the stateful-migration operator's custom resource) as a
//! watch cache for the checkpoint-restore webhook.
//!
//! - [`CheckpointBackup`] reads exactly the fields the restore uses; every other field of the operator's
//!   objects (schedule, podRef, registry, stopPod, status.phase, conditions, checkpointFiles, ...) is accepted
//!   and ignored, so real objects always deserialize.
//! - The CRD may be missing (the operator is not installed, or not yet): [`CheckpointCaches`] then answers "not
//!   installed", logs that once, and looks for the API group again in the background every
//!   `discovery_interval`; once the group is served it starts a watch. When the CRD is deleted later the watch
//!   fails with 404 and the cache goes back to "not installed". A 403 (RBAC) is handled the same way, with its
//!   own log line, so a missing grant never makes the frontend unready.
//! - The Jobs behind Pods (is a CronJob their controller?) come from the frontend's one Job cache,
//!   [`crate::cluster::workloads::WorkloadOwners::job_controller`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use gpu_admission_core::admission::checkpoint_restore::backup::{
    CheckpointBackup, GROUP, KIND, PLURAL, VERSION,
};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// Where CheckpointBackups stand in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrdState {
    /// Discovery has not answered yet.
    Unknown = 0,
    /// The API group is not served: restores are off.
    NotInstalled = 1,
    /// Served; the first listing is under way.
    Syncing = 2,
    /// Served and cached.
    Synced = 3,
}

impl CrdState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => CrdState::NotInstalled,
            2 => CrdState::Syncing,
            3 => CrdState::Synced,
            _ => CrdState::Unknown,
        }
    }
}

/// What the restore needs from the cluster besides the Jobs' controllers (which
/// [`crate::cluster::workloads::WorkloadOwners`] answers from its Job cache): the CheckpointBackups.
pub(crate) struct CheckpointCaches {
    backups: Arc<RwLock<Option<Store<CheckpointBackup>>>>,
    state: Arc<AtomicU8>,
}

impl CheckpointCaches {
    /// Starts the CheckpointBackup discovery/watch loop in a background task.
    pub(crate) fn start(client: kube::Client, discovery_interval: Duration) -> Self {
        let backups = Arc::new(RwLock::new(None));
        let state = Arc::new(AtomicU8::new(CrdState::Unknown as u8));
        tokio::spawn(keep_backups(
            client,
            backups.clone(),
            state.clone(),
            discovery_interval,
        ));
        Self { backups, state }
    }

    pub(crate) fn crd_state(&self) -> CrdState {
        CrdState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Ready when the CheckpointBackups are listed, or known to be absent (or forbidden).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self.crd_state(), CrdState::NotInstalled | CrdState::Synced)
    }

    /// The cached CheckpointBackups whose `resourceRef` points into `namespace`, or `None` when the CRD is
    /// not installed (or its first listing is not complete).
    pub(crate) fn backups_for(&self, namespace: &str) -> Option<Vec<Arc<CheckpointBackup>>> {
        if self.crd_state() != CrdState::Synced {
            return None;
        }
        let store = self.backups.read().ok()?.clone()?;
        Some(store.state_filter(|b| b.target_namespace() == Some(namespace)))
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// Is `migration.dcnlab.com/v1` served with `checkpointbackups`? `Ok(false)` when the group is not served.
async fn crd_served(client: &kube::Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == PLURAL)),
        Err(err) if is_not_found(&err) => Ok(false),
        Err(err) => Err(err),
    }
}

fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 403)
}

/// Why a watch of CheckpointBackups ended.
enum WatchEnd {
    /// 404: the CRD was deleted (or discovery was stale).
    NotFound,
    /// 403: RBAC does not let us list them.
    Forbidden,
}

/// Discovery → watch → (404 / 403) → discovery ..., forever. Each condition ("not installed", "forbidden",
/// a discovery error) is logged when it starts, not on every retry.
async fn keep_backups(
    client: kube::Client,
    slot: Arc<RwLock<Option<Store<CheckpointBackup>>>>,
    state: Arc<AtomicU8>,
    discovery_interval: Duration,
) {
    let mut last: Option<String> = None;
    loop {
        let condition = match crd_served(&client).await {
            Ok(true) => {
                state.store(CrdState::Syncing as u8, Ordering::Release);
                let (reader, writer) = reflector::store();
                if let Ok(mut s) = slot.write() {
                    *s = Some(reader.clone());
                }
                let synced = Arc::new(AtomicBool::new(false));
                let (ready_state, ready_flag) = (state.clone(), synced.clone());
                let ready = tokio::spawn(async move {
                    if reader.wait_until_ready().await.is_ok() {
                        ready_flag.store(true, Ordering::Release);
                        let _ = ready_state.compare_exchange(
                            CrdState::Syncing as u8,
                            CrdState::Synced as u8,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                        tracing::info!(
                            backups = reader.len(),
                            "{KIND} cache synced: checkpoint restore enabled"
                        );
                    }
                });
                let end = watch_backups(&client, writer).await;
                ready.abort();
                if let Ok(mut s) = slot.write() {
                    *s = None;
                }
                if synced.load(Ordering::Acquire) {
                    last = None; // it worked for a while: whatever comes next is news
                }
                match end {
                    WatchEnd::NotFound => "not installed".to_string(),
                    WatchEnd::Forbidden => "forbidden".to_string(),
                }
            }
            Ok(false) => "not installed".to_string(),
            Err(err) => format!("discovery of {GROUP}/{VERSION} failed: {err}"),
        };
        state.store(CrdState::NotInstalled as u8, Ordering::Release);
        if last.as_deref() != Some(condition.as_str()) {
            let retry_secs = discovery_interval.as_secs_f64();
            match condition.as_str() {
                "not installed" => tracing::info!(
                    retry_secs,
                    "{KIND} CRD ({PLURAL}.{GROUP}) not installed: Pods are admitted without restore; \
                     looking for it again in the background"
                ),
                "forbidden" => tracing::warn!(
                    retry_secs,
                    "listing {PLURAL}.{GROUP} is forbidden (grant list and watch): Pods are admitted without \
                     restore"
                ),
                other => tracing::warn!(retry_secs, "{other}; Pods are admitted without restore"),
            }
            last = Some(condition);
        }
        tokio::time::sleep(discovery_interval).await;
    }
}

/// Keeps the store filled until the API answers 404 or 403.
async fn watch_backups(
    client: &kube::Client,
    writer: reflector::store::Writer<CheckpointBackup>,
) -> WatchEnd {
    let stream = watcher(
        Api::<CheckpointBackup>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let err = match event {
            Ok(_) => continue,
            Err(watcher::Error::InitialListFailed(err) | watcher::Error::WatchStartFailed(err)) => {
                err
            }
            Err(other) => {
                tracing::warn!(err = %other, resource = PLURAL, "watch error (retrying with backoff)");
                continue;
            }
        };
        if is_not_found(&err) {
            return WatchEnd::NotFound;
        }
        if is_forbidden(&err) {
            return WatchEnd::Forbidden;
        }
        tracing::warn!(%err, resource = PLURAL, "watch error (retrying with backoff)");
    }
    WatchEnd::NotFound // the stream never ends on its own
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
