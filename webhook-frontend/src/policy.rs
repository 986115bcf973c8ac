//! The policy snapshot the webhooks decide with, kept fresh from the scorer's `GetPolicy`.

use gpu_admission_core::policy::PolicySnapshot;

/// The current [`PolicySnapshot`], refreshed in the background from the scorer's `GetPolicy`.
#[derive(Debug, Default)]
pub struct PolicyCache {
    current: std::sync::RwLock<std::sync::Arc<PolicySnapshot>>,
    refresh: tokio::sync::Notify,
}

impl PolicyCache {
    pub(crate) fn snapshot(&self) -> std::sync::Arc<PolicySnapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A policy has been fetched (it is kept until a newer one replaces it).
    pub(crate) fn is_known(&self) -> bool {
        !self.snapshot().version.is_empty()
    }

    pub fn set(&self, snapshot: PolicySnapshot) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(snapshot);
    }

    /// Asks the refresher to fetch now (e.g. an answer named another policy version).
    pub(crate) fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Fetches the policy at start (retrying with backoff until the scorer answers), then every `interval`
    /// or when [`Self::request_refresh`] is called. Never returns.
    pub(crate) async fn keep_fresh(
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
