//! The leader's convergence rounds: every replica exports its learned state, the most complete one (see
//! `sync::plan`) is imported into every replica that differs, and stored in the observer's ConfigMap. A
//! replica that keeps its own state (it holds an observation the best state lacks: the two missed different
//! deliveries) gets the recent observations replayed, which the scorer takes once each; the next round then
//! finds one state holding everything.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::{ExportStateRequest, LearnedState, ObserveRequest};

use crate::metrics::Metrics;
use crate::replicas::{Replicas, observe_everywhere};
use crate::store::StateStore;
use crate::sync::{Source, Summary, plan};

/// The observations delivered lately, oldest first, for replays.
#[derive(Debug)]
pub struct RecentLog {
    entries: VecDeque<ObserveRequest>,
    capacity: usize,
}

impl RecentLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity,
        }
    }

    pub fn push(&mut self, req: ObserveRequest) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        if self.capacity > 0 {
            self.entries.push_back(req);
        }
    }

    pub fn snapshot(&self) -> Vec<ObserveRequest> {
        self.entries.iter().cloned().collect()
    }
}

pub type SharedLog = Arc<Mutex<RecentLog>>;

pub struct Convergence {
    pub replicas: Arc<Replicas>,
    pub store: Option<StateStore>,
    pub store_interval: Duration,
    pub log: SharedLog,
    pub metrics: Arc<Metrics>,
    stored: Option<LearnedState>,
    last_store: Option<Instant>,
}

/// What one round did (logged; the tests read the metrics).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    pub replicas: usize,
    pub answering: usize,
    pub best_observations: u64,
    pub imported: usize,
    pub kept: usize,
    pub replayed: usize,
    pub stored: bool,
}

impl Convergence {
    pub fn new(
        replicas: Arc<Replicas>,
        store: Option<StateStore>,
        store_interval: Duration,
        log: SharedLog,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            replicas,
            store,
            store_interval,
            log,
            metrics,
            stored: None,
            last_store: None,
        }
    }

    /// Reads the stored copy (at the start of a leadership term: another observer may have written it).
    pub async fn load_stored(&mut self) {
        let Some(store) = &self.store else { return };
        match store.load().await {
            Ok(s) => {
                if let Some(s) = &s {
                    tracing::info!(
                        observations = s.observations,
                        digest = %s.digest,
                        "stored learned state loaded"
                    );
                }
                self.stored = s;
            }
            Err(err) => tracing::warn!(%err, "cannot read the stored learned state"),
        }
    }

    pub async fn round(&mut self) -> RoundReport {
        let started = Instant::now();
        let replicas = self.replicas.resolve().await;
        let exports: Vec<Option<LearnedState>> =
            futures::future::join_all(replicas.iter().map(|r| {
                let mut c = r.client.clone();
                async move {
                    match c.export_state(ExportStateRequest {}).await {
                        Ok(s) => Some(s.into_inner()),
                        Err(status) => {
                            tracing::warn!(replica = %r.addr, %status, "ExportState failed");
                            None
                        }
                    }
                }
            }))
            .await;
        let summary = |s: &LearnedState| Summary {
            observations: s.observations,
            digest: s.digest.clone(),
        };
        let summaries: Vec<Option<Summary>> =
            exports.iter().map(|e| e.as_ref().map(summary)).collect();
        let stored_summary = self.stored.as_ref().map(summary);
        let p = plan(&summaries, stored_summary.as_ref());
        let mut report = RoundReport {
            replicas: replicas.len(),
            answering: summaries.iter().flatten().count(),
            ..Default::default()
        };
        let best = match p.best {
            Some(Source::Replica(i)) => exports[i].clone(),
            Some(Source::GpuPolicyException) => self.stored.clone(),
            None => None,
        };
        if let Some(best) = best {
            report.best_observations = best.observations;
            let mut diverged = false;
            for i in &p.import_into {
                let r = &replicas[*i];
                match r.client.clone().import_state(best.clone()).await {
                    Ok(resp) if resp.get_ref().applied => {
                        report.imported += 1;
                        Metrics::result(&self.metrics.state_imports, "imported");
                        tracing::info!(replica = %r.addr, observations = best.observations,
                            "replica imported the most complete learned state");
                    }
                    Ok(resp) => {
                        report.kept += 1;
                        diverged = true;
                        Metrics::result(&self.metrics.state_imports, "kept");
                        tracing::info!(replica = %r.addr, its_observations = resp.get_ref().observations,
                            "replica kept its own state (it holds observations the best one lacks)");
                    }
                    Err(status) => {
                        Metrics::result(&self.metrics.state_imports, "failed");
                        tracing::warn!(replica = %r.addr, %status, "ImportState failed");
                    }
                }
            }
            if diverged {
                let entries = self.log.lock().expect("not poisoned").snapshot();
                for req in &entries {
                    observe_everywhere(&replicas, req, &self.metrics).await;
                }
                report.replayed = entries.len();
            }
            if p.store {
                report.stored = self.store_if_due(&best).await;
            }
        }
        self.metrics.scorer_replicas.set(report.replicas as i64);
        self.metrics
            .scorer_replicas_answering
            .set(report.answering as i64);
        self.metrics
            .best_state_observations
            .set(report.best_observations as i64);
        self.metrics
            .last_round_seconds
            .set(started.elapsed().as_secs_f64());
        report
    }

    async fn store_if_due(&mut self, best: &LearnedState) -> bool {
        let Some(store) = &self.store else {
            return false;
        };
        if self
            .last_store
            .is_some_and(|t| t.elapsed() < self.store_interval)
        {
            return false;
        }
        self.last_store = Some(Instant::now());
        match store.save(best).await {
            Ok(()) => {
                Metrics::result(&self.metrics.state_stores, "ok");
                self.stored = Some(best.clone());
                true
            }
            Err(err) => {
                Metrics::result(&self.metrics.state_stores, err.metric_label());
                tracing::warn!(%err, "storing the learned state failed");
                if matches!(err, crate::store::StoreError::Conflict) {
                    // Someone else wrote it: read theirs on the next round.
                    self.last_store = None;
                    self.stored = None;
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_latest_entries() {
        let mut log = RecentLog::new(2);
        for id in ["a", "b", "c"] {
            log.push(ObserveRequest {
                observation_id: id.into(),
                ..Default::default()
            });
        }
        let ids: Vec<String> = log
            .snapshot()
            .into_iter()
            .map(|r| r.observation_id)
            .collect();
        assert_eq!(ids, ["b", "c"]);
    }
}
