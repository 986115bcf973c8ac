//! The policy the webhooks decide with: read by the frontend itself, from the same file the scorer reads
//! (the policy ConfigMap, mounted), validated with the same crate, so that a frontend holds and enforces it
//! with or without a scorer.
//!
//! Where a policy comes from, in order:
//! 1. the policy file (`--policy-file`; without it the embedded default policy, as the scorer), polled like
//!    the scorer polls it (a ConfigMap volume swaps a symlink, which a path poll follows);
//! 2. when the file does not validate at start: the last good policy this replica wrote beside it
//!    (`--policy-last-good`, an `emptyDir` in the shipped Deployment, so it survives container restarts);
//! 3. when neither validates: the document of the scorer's `GetPolicy` (the scorer's last good policy),
//!    validated here again.
//!
//! A policy once held is kept until a valid newer file replaces it: an invalid edit never leaves the
//! webhooks without rules. The scorer's `GetPolicy` is also polled to compare versions: when the scorer
//! scores with another version than the frontend enforces, a metric says for how long and a log line says
//! so once each way.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_policy::watch::{FileWatcher, PolicyStore, ReloadOutcome};
use gpu_admission_policy::{Policy, wire};

use crate::metrics::{PolicyMetrics, PolicySource};

/// Where the frontend reads its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySources {
    /// The policy file; `None`: the embedded default policy.
    pub file: Option<PathBuf>,
    /// Where the last good policy is kept across restarts of the process; `None`: nowhere.
    pub last_good: Option<PathBuf>,
    /// How often the file is read again.
    pub poll_interval: Duration,
}

/// The current [`PolicySnapshot`], and how it compares with the scorer's.
#[derive(Debug, Default)]
pub struct PolicyCache {
    current: RwLock<Arc<PolicySnapshot>>,
    /// Since when the scorer's version differs from ours (`None` while they agree or it is unknown).
    disagreeing_since: RwLock<Option<Instant>>,
    refresh: tokio::sync::Notify,
}

impl PolicyCache {
    pub(crate) fn snapshot(&self) -> Arc<PolicySnapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A policy is held (it is kept until a newer valid one replaces it).
    pub(crate) fn is_known(&self) -> bool {
        !self.snapshot().version.is_empty()
    }

    pub fn set(&self, snapshot: PolicySnapshot) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    fn install(&self, policy: Arc<Policy>, source: PolicySource, metrics: &PolicyMetrics) {
        tracing::info!(version = %policy.version, file = %policy.source, ?source, "policy loaded");
        metrics.loaded(source, &policy.version);
        self.set(PolicySnapshot::from_policy(policy));
    }

    /// Asks the scorer comparison to run now (e.g. an answer named another policy version).
    pub(crate) fn request_refresh(&self) {
        self.refresh.notify_one();
    }

    /// Loads the first valid source (file, then the last good copy); `false` when neither validates.
    pub(crate) fn load_at_start(
        &self,
        sources: &PolicySources,
        watcher: &mut Option<FileWatcher>,
        metrics: &PolicyMetrics,
    ) -> bool {
        let Some(w) = watcher else {
            let policy = gpu_admission_policy::embedded_default()
                .expect("the embedded default policy is valid (a unit test checks it)");
            self.install(Arc::new(policy), PolicySource::embedded, metrics);
            return true;
        };
        match w.check(&PolicyStore::default()) {
            ReloadOutcome::Loaded(policy) => {
                save_last_good(sources.last_good.as_deref(), &policy);
                self.install(policy, PolicySource::file, metrics);
                return true;
            }
            ReloadOutcome::Rejected(err) => {
                metrics.rejected(PolicySource::file);
                tracing::error!(error = %err, "policy file refused at start");
            }
            ReloadOutcome::Unchanged => {}
        }
        let Some(path) = sources.last_good.as_deref() else {
            return false;
        };
        match gpu_admission_policy::load_file(path) {
            Ok(policy) => {
                tracing::warn!(version = %policy.version, path = %path.display(), "enforcing the last good policy until the policy file validates");
                self.install(Arc::new(policy), PolicySource::last_good, metrics);
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, "no last good policy either");
                false
            }
        }
    }

    /// Polls the file until the process ends: a valid change replaces the policy, an invalid one is
    /// reported and changes nothing.
    pub(crate) async fn watch_file(
        self: Arc<Self>,
        mut watcher: FileWatcher,
        sources: PolicySources,
        metrics: Arc<PolicyMetrics>,
    ) {
        let mut tick = tokio::time::interval(sources.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match watcher.check(&PolicyStore::default()) {
                ReloadOutcome::Unchanged => {}
                ReloadOutcome::Loaded(policy) => {
                    save_last_good(sources.last_good.as_deref(), &policy);
                    self.install(policy, PolicySource::file, &metrics);
                    self.request_refresh();
                }
                ReloadOutcome::Rejected(err) => {
                    metrics.rejected(PolicySource::file);
                    tracing::error!(error = %err, held = %self.snapshot().version, "policy file refused; the policy held stays in force");
                }
            }
        }
    }

    /// Polls the scorer's `GetPolicy` every `interval` (or when asked): compares its version with ours, and
    /// adopts its document when this replica holds no policy at all. Never returns.
    pub(crate) async fn compare_with_scorer(
        self: Arc<Self>,
        scorer: crate::scorer_client::Scorer,
        interval: Duration,
        metrics: Arc<PolicyMetrics>,
    ) {
        let mut backoff = Duration::from_millis(250);
        loop {
            let wait = match scorer.get_policy(Duration::from_secs(2)).await {
                Ok(resp) => {
                    backoff = Duration::from_millis(250);
                    self.adopt_if_none(&resp, &metrics);
                    self.note_scorer_version(&resp.version, &metrics);
                    interval
                }
                Err(err) => {
                    tracing::debug!(error = %format!("{err:#}"), "cannot fetch the scorer's policy");
                    self.note_scorer_version("", &metrics);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    backoff.min(interval)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.refresh.notified() => {}
            }
        }
    }

    fn adopt_if_none(
        &self,
        resp: &gpu_admission_proto::scorer::v1::GetPolicyResponse,
        metrics: &PolicyMetrics,
    ) {
        if self.is_known() {
            return;
        }
        match wire::policy_of(resp) {
            Ok(policy) => {
                tracing::warn!(version = %policy.version, "no valid policy file nor last good copy: enforcing the scorer's policy");
                self.install(Arc::new(policy), PolicySource::scorer, metrics);
            }
            Err(err) => {
                metrics.rejected(PolicySource::scorer);
                tracing::error!(error = %err, "the scorer's policy document does not validate here");
            }
        }
    }

    /// Records the scorer's version (empty: unreachable) against ours.
    fn note_scorer_version(&self, scorer_version: &str, metrics: &PolicyMetrics) {
        let ours = self.snapshot().version.clone();
        let mut since = self
            .disagreeing_since
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let differs = !scorer_version.is_empty() && scorer_version != ours;
        match (differs, *since) {
            (true, None) => {
                tracing::warn!(frontend = %ours, scorer = %scorer_version, "the scorer scores with another policy version than this frontend enforces");
                *since = Some(Instant::now());
            }
            (false, Some(start)) if !scorer_version.is_empty() => {
                tracing::info!(version = %ours, after_seconds = start.elapsed().as_secs_f64(), "the scorer and this frontend agree on the policy version again");
                *since = None;
            }
            _ => {}
        }
        metrics.set_disagreement(since.map_or(0.0, |s| s.elapsed().as_secs_f64()));
    }
}

/// Writes the last good policy atomically (a temporary file renamed over it); a failure is logged only.
fn save_last_good(path: Option<&Path>, policy: &Policy) {
    let Some(path) = path else { return };
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, &policy.document).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(err) = written {
        tracing::warn!(error = %err, path = %path.display(), "cannot keep the last good policy");
    }
}

#[cfg(test)]
mod tests;
