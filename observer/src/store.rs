//! The observer's copy of the most complete learned state, in a ConfigMap it owns (`binaryData`), so that
//! losing every scorer replica at once loses at most the last store interval. The ConfigMap is shipped empty by
//! the install (the observer may only get and update that one object); writes carry the resourceVersion read,
//! so two observers never overwrite each other blindly.

use std::collections::BTreeMap;

use gpu_admission_proto::scorer::v1::LearnedState;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use crate::names;

/// Largest snapshot stored: a ConfigMap holds at most 1 MiB in total (etcd's request limit is larger, the
/// apiserver's object limit is not); the rest is left to metadata.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024 - 32 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("snapshot of {0} bytes exceeds the ConfigMap limit ({MAX_SNAPSHOT_BYTES})")]
    TooLarge(usize),
    #[error("ConfigMap changed since it was read")]
    Conflict,
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl StoreError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::TooLarge(_) => "too_large",
            Self::Conflict => "conflict",
            Self::Kube(_) => "failed",
        }
    }
}

pub struct StateStore {
    api: Api<ConfigMap>,
    name: String,
}

impl StateStore {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    /// The stored state, `None` when the ConfigMap holds none yet.
    pub async fn load(&self) -> Result<Option<LearnedState>, StoreError> {
        let cm = self.api.get(&self.name).await?;
        Ok(state_of(&cm))
    }

    /// Replaces the stored state.
    pub async fn save(&self, state: &LearnedState) -> Result<(), StoreError> {
        if state.snapshot.len() > MAX_SNAPSHOT_BYTES {
            return Err(StoreError::TooLarge(state.snapshot.len()));
        }
        let mut cm = self.api.get(&self.name).await?;
        cm.binary_data
            .get_or_insert_with(BTreeMap::new)
            .insert(names::STATE_KEY.into(), ByteString(state.snapshot.clone()));
        let ann = cm.metadata.annotations.get_or_insert_with(BTreeMap::new);
        ann.insert(
            names::ANN_STATE_OBSERVATIONS.into(),
            state.observations.to_string(),
        );
        ann.insert(names::ANN_STATE_DIGEST.into(), state.digest.clone());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &cm)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(StoreError::Conflict),
            Err(e) => Err(e.into()),
        }
    }
}

/// The learned state a ConfigMap holds (its snapshot with the summary annotations).
pub fn state_of(cm: &ConfigMap) -> Option<LearnedState> {
    let snapshot = cm.binary_data.as_ref()?.get(names::STATE_KEY)?.0.clone();
    let ann = cm.metadata.annotations.as_ref()?;
    Some(LearnedState {
        snapshot,
        observations: ann.get(names::ANN_STATE_OBSERVATIONS)?.parse().ok()?,
        digest: ann.get(names::ANN_STATE_DIGEST)?.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_state_back_from_the_configmap_and_nothing_from_an_empty_one() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpu-admission-learned-state", "namespace": "gpu-admission",
                "annotations": {"gpu-admission.io/observations": "42", "gpu-admission.io/digest": "ab12"}},
            "binaryData": {"learned-state": "AAEC/w=="}
        }))
        .unwrap();
        assert_eq!(
            state_of(&cm),
            Some(LearnedState {
                snapshot: vec![0, 1, 2, 255],
                observations: 42,
                digest: "ab12".into()
            })
        );
        let empty: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
        .unwrap();
        assert_eq!(state_of(&empty), None);
    }
}
