//! The checkpoint-restore webhook's `matchConditions` kept in step with the stored CheckpointBackups
//! (`--checkpoint-registration`): while this replica leads, every `--checkpoint-interval-secs` it lists the
//! backups and, where the registration's condition says something else, writes core's
//! [`gpu_admission_core::admission::checkpoint_restore::registration::expression`] with a strategic merge
//! patch of that one condition (the registration's other fields stay as their owner applied them, so a
//! GitOps re-apply of the shipped registration neither removes it nor fights it). No backup: no Pod of a Job
//! costs the apiserver a round trip to `/mutate-pod-checkpoint`.
//!
//! Without the CRD (404) there is nothing to restore and the condition sends no Pod. A listing that fails
//! otherwise (403, a timeout) changes nothing: the registration keeps what it had, at worst the shipped
//! behaviour of sending every Pod of a Job. A CRD removed after its watch started leaves the backups as last
//! seen (the watch retries): the condition may then send Pods that no backup restores, never fewer. A backup
//! created reaches the condition within one interval plus the apiserver's registration cache; the operator
//! pushes a backup's images well after creating it, and only pushed images are restored. RBAC: `list` and
//! `watch` on `checkpointbackups`, `get`/`patch` on this one MutatingWebhookConfiguration (by
//! `resourceNames`).

use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::admission::checkpoint_restore::backup::CheckpointBackup;
use gpu_admission_core::admission::checkpoint_restore::registration;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::metrics::Metrics;

/// The field manager of the observer's patch.
const MANAGER: &str = "gpu-admission-observer";

/// What one round does (pure: [`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The condition already says this.
    InStep,
    /// Set the condition to this expression.
    Write(String),
    /// The registration has no checkpoint-restore entry (or does not exist): nothing to keep.
    NoEntry,
}

impl Plan {
    /// The metric's `result`.
    pub fn result(&self) -> &'static str {
        match self {
            Plan::InStep => "in_step",
            Plan::Write(_) => "written",
            Plan::NoEntry => "no_entry",
        }
    }
}

/// What the condition must become for the stored `backups`, given the stored registration (as JSON).
pub fn plan(backups: &[CheckpointBackup], stored: Option<&serde_json::Value>) -> Plan {
    let Some(stored) = stored.filter(|s| registration::has_webhook(s)) else {
        return Plan::NoEntry;
    };
    let wanted = registration::expression(backups);
    if registration::current_expression(stored) == Some(wanted.as_str()) {
        Plan::InStep
    } else {
        Plan::Write(wanted)
    }
}

/// The stored backups: a watch's store once it has listed, listed until then (a list that finds the CRD
/// starts the watch); none while the CRD is not installed (404).
struct Backups {
    api: Api<CheckpointBackup>,
    metrics: Arc<Metrics>,
    watched: Option<(Store<CheckpointBackup>, AbortHandle)>,
}

impl Backups {
    async fn read(&mut self) -> Result<Vec<CheckpointBackup>, kube::Error> {
        if let Some((store, _)) = &self.watched
            && crate::watched::ready(store)
        {
            return Ok(store.state().iter().map(|b| (**b).clone()).collect());
        }
        match self.api.list(&ListParams::default()).await {
            Ok(list) => {
                self.watched.get_or_insert_with(|| {
                    crate::watched::spawn(
                        watcher(self.api.clone(), watcher::Config::default().any_semantic()),
                        (),
                        "checkpointbackups",
                        self.metrics.clone(),
                        |_, _| {},
                    )
                });
                Ok(list.items)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Backups {
    fn drop(&mut self) {
        if let Some((_, watch)) = &self.watched {
            watch.abort();
        }
    }
}

async fn round(
    backups: &mut Backups,
    registrations: &Api<MutatingWebhookConfiguration>,
    name: &str,
) -> Result<&'static str, kube::Error> {
    let backups = backups.read().await?;
    let stored = registrations
        .get_opt(name)
        .await?
        .map(|r| serde_json::to_value(r).unwrap_or_default());
    let plan = plan(&backups, stored.as_ref());
    let result = plan.result();
    match plan {
        Plan::InStep => {}
        Plan::NoEntry => tracing::debug!(
            registration = name,
            webhook = registration::WEBHOOK,
            "no checkpoint-restore entry to keep"
        ),
        Plan::Write(expression) => {
            registrations
                .patch(
                    name,
                    &PatchParams {
                        field_manager: Some(MANAGER.to_string()),
                        ..PatchParams::default()
                    },
                    &Patch::Strategic(registration::patch(&expression)),
                )
                .await?;
            tracing::info!(
                registration = name,
                backups = backups.len(),
                expression_bytes = expression.len(),
                "checkpoint-restore registration narrowed to the stored backups"
            );
        }
    }
    Ok(result)
}

/// Keeps the condition in step while this replica leads.
pub async fn run(
    client: kube::Client,
    name: String,
    interval: Duration,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
) {
    let backups = tokio::sync::Mutex::new(Backups {
        api: Api::all(client.clone()),
        metrics: metrics.clone(),
        watched: None,
    });
    let registrations: Api<MutatingWebhookConfiguration> = Api::all(client);
    let (name, syncs, backups) = (&name, &metrics.checkpoint_registration_syncs, &backups);
    crate::leader::every_interval_while_leading(leader, interval, || async {
        let result = round(&mut *backups.lock().await, &registrations, name)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(%err, registration = %name, "keeping the checkpoint-restore registration in step failed");
                "failed"
            });
        Metrics::result(syncs, result);
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job_backup(namespace: &str, job: &str) -> CheckpointBackup {
        serde_json::from_value(json!({
            "metadata": {"name": job, "namespace": namespace},
            "spec": {"resourceRef": {"apiVersion": "batch/v1", "kind": "Job", "name": job}}
        }))
        .unwrap()
    }

    /// The shipped registration (no condition) is narrowed; once written, the next round is in step; a new
    /// backup widens it; a registration without the entry is left alone.
    #[test]
    fn the_condition_follows_the_backups() {
        let shipped = json!({"webhooks": [{"name": "pods.gpu-admission.io"}, {"name": registration::WEBHOOK}]});
        assert_eq!(plan(&[], Some(&shipped)), Plan::Write("false".into()));
        let narrowed = json!({"webhooks": [{"name": registration::WEBHOOK,
            "matchConditions": [registration::condition("false")]}]});
        assert_eq!(plan(&[], Some(&narrowed)), Plan::InStep);
        let b = [job_backup("ml", "train")];
        let Plan::Write(e) = plan(&b, Some(&narrowed)) else {
            panic!("a new backup must widen the condition")
        };
        assert!(e.contains("'ml/train'"), "{e}");
        let foreign = json!({"webhooks": [{"name": "pods.gpu-admission.io"}]});
        assert_eq!(plan(&b, Some(&foreign)), Plan::NoEntry);
        assert_eq!(plan(&b, None), Plan::NoEntry);
    }
}
