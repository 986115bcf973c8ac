//! CheckpointBackup (`migration.dcnlab.com/v1`, the stateful-migration operator's custom resource) as the
//! restore reads it: exactly the fields the restore uses; every other field of the operator's objects
//! (schedule, podRef, registry, stopPod, status.phase, conditions, checkpointFiles, ...) is accepted and
//! ignored, so real objects always deserialize.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "migration.dcnlab.com";
pub const VERSION: &str = "v1";
pub const GROUP_VERSION: &str = "migration.dcnlab.com/v1";
pub const KIND: &str = "CheckpointBackup";
pub const PLURAL: &str = "checkpointbackups";

/// A CheckpointBackup as the stateful-migration operator defines it (only the fields used here).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CheckpointBackup {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CheckpointBackupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CheckpointBackupStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointBackupSpec {
    #[serde(default)]
    pub resource_ref: ResourceRef,
    /// Checkpoint images named by the user, per container; `null` reads as empty.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub containers: Vec<BackupContainer>,
}

/// The workload the backup belongs to (`kind` `Job` or `CronJob`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    /// When absent: the backup's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct BackupContainer {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointBackupStatus {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub built_images: Vec<BuiltImage>,
}

/// An image the operator built from a checkpoint; only a pushed one can be pulled on another node.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuiltImage {
    #[serde(default)]
    pub container_name: String,
    #[serde(default)]
    pub image_name: String,
    /// RFC 3339 (the operator writes a `metav1.Time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_time: Option<String>,
    #[serde(default)]
    pub pushed: bool,
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

impl CheckpointBackup {
    /// The namespace whose Pods this backup may restore: its own, and only its own. A `resourceRef.namespace`
    /// naming another namespace makes the backup apply nowhere: whoever can write a backup in one namespace
    /// must never choose the images of another namespace's Pods.
    pub fn target_namespace(&self) -> Option<&str> {
        let own = self
            .metadata
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())?;
        match self.spec.resource_ref.namespace.as_deref() {
            None | Some("") => Some(own),
            Some(named) if named == own => Some(own),
            Some(_) => None,
        }
    }
}

crate::resource::namespaced_resource!(CheckpointBackup, group: GROUP, version: VERSION, kind: KIND, plural: PLURAL);
