//! The scorer's policy as last fetched with `GetPolicy`: the GPU catalog (to validate answers and to recognise
//! a Pod that already names a class) and the priority buckets (the PriorityClasses of `--no-kube` mode).

use std::collections::HashMap;

use gpu_admission_proto::scorer::v1::{GetPolicyResponse, GpuClass};

use crate::admission::patch::{PriorityClassFacts, PriorityClassLookup};

/// An immutable view of one policy version; swapped whole when a newer one is fetched.
#[derive(Debug, Default, Clone)]
pub struct PolicySnapshot {
    pub version: String,
    pub catalog: Vec<GpuClass>,
    /// Distinct node label keys of the catalog (e.g. `gpu.nvidia.com/class`).
    pub class_label_keys: Vec<String>,
    /// PriorityClasses named by the buckets, by name.
    pub priority_classes: HashMap<String, PriorityClassFacts>,
}

impl PolicySnapshot {
    pub fn from_response(p: GetPolicyResponse) -> Self {
        let mut class_label_keys: Vec<String> = Vec::new();
        for c in &p.catalog {
            if !c.node_label_key.is_empty() && !class_label_keys.contains(&c.node_label_key) {
                class_label_keys.push(c.node_label_key.clone());
            }
        }
        let priority_classes = p
            .priority_buckets
            .iter()
            .filter_map(|b| b.priority_class.as_ref())
            .filter(|pc| !pc.name.is_empty())
            .map(|pc| {
                let policy =
                    (!pc.preemption_policy.is_empty()).then(|| pc.preemption_policy.clone());
                (
                    pc.name.clone(),
                    PriorityClassFacts {
                        name: pc.name.clone(),
                        value: pc.value,
                        preemption_policy: policy,
                        global_default: false,
                    },
                )
            })
            .collect();
        Self {
            version: p.version,
            catalog: p.catalog,
            class_label_keys,
            priority_classes,
        }
    }

    pub fn class(&self, name: &str) -> Option<&GpuClass> {
        self.catalog.iter().find(|c| c.name == name)
    }

    /// The catalog class selected by node label `key=value`.
    pub fn class_by_label(&self, key: &str, value: &str) -> Option<&GpuClass> {
        self.catalog
            .iter()
            .find(|c| c.node_label_key == key && c.node_label_value == value)
    }
}

impl PriorityClassLookup for PolicySnapshot {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        self.priority_classes.get(name).cloned()
    }
}

/// The current [`PolicySnapshot`], refreshed in the background from the scorer's `GetPolicy`.
#[derive(Debug, Default)]
pub struct PolicyCache {
    current: std::sync::RwLock<std::sync::Arc<PolicySnapshot>>,
    refresh: tokio::sync::Notify,
}

impl PolicyCache {
    pub fn snapshot(&self) -> std::sync::Arc<PolicySnapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set(&self, snapshot: PolicySnapshot) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(snapshot);
    }

    /// Asks the refresher to fetch now (e.g. an answer named another policy version).
    pub fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Fetches the policy at start (retrying with backoff until the scorer answers), then every `interval`
    /// or when [`Self::request_refresh`] is called. Never returns.
    pub async fn keep_fresh(
        self: std::sync::Arc<Self>,
        scorer: crate::scorer_client::Scorer,
        interval: std::time::Duration,
    ) {
        use std::time::Duration;
        let mut backoff = Duration::from_millis(250);
        loop {
            match scorer.get_policy(Duration::from_secs(2)).await {
                Ok(resp) => {
                    let snap = PolicySnapshot::from_response(resp);
                    if snap.version != self.snapshot().version {
                        tracing::info!(
                            version = %snap.version,
                            classes = snap.catalog.len(),
                            priority_classes = snap.priority_classes.len(),
                            "scorer policy loaded"
                        );
                    }
                    self.set(snap);
                    backoff = Duration::from_millis(250);
                    tokio::select! {
                        _ = tokio::time::sleep(interval) => {}
                        _ = self.refresh.notified() => {}
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), retry_in_ms = backoff.as_millis() as u64, "cannot fetch the scorer policy yet");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.refresh.notified() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
