//! The watch loop: Nodes (their labels, remembered after a Node is deleted) and decided Pods (label
//! `gpu-admission.io/job-type`), fed through the pure `extract` functions. Both replicas keep the same
//! caches; only the Lease holder reports.
//!
//! Per Pod, in the leader's term: each finished run is reported once (then remembered as done until the Pod is
//! deleted), each skipped Pod is counted once by reason. A finished run waits in `pending` while no scorer
//! answers, while the policy is unknown, while its Node has not been seen (for a short grace), and on the
//! follower (so that a new leader reports what finished while the old one was dying; the scorer drops what was
//! already learned).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpu_admission_core::ns_lock::{LEASE_NAME, NsLock};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::convergence::SharedLog;
use crate::extract::{self, DecidedJob, Progress, Run, SkipReason};
use crate::history::RunHistory;
use crate::metrics::Metrics;
use crate::names;
use crate::registrations::Registrations;
use crate::replicas::Replicas;
use crate::route::{Learner, TeamScorers};
use delivery::{Deliveries, DeliveryContext, LoopState};

mod delivery;

#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// How often pending runs are retried and the policy facts are refreshed.
    pub tick: Duration,
    pub policy_refresh: Duration,
    /// How long a finished run waits for its Node to be seen before it is skipped as `node_unknown`.
    pub node_grace: Duration,
    /// How long a follower keeps a finished run whose Pod is gone (the leader normally reported it).
    pub gone_retention: Duration,
    /// How long a restricted instance's finished run waits for its namespace's Lease to be active (a
    /// restarting instance takes it again) before it is skipped as `no_restricted_instance`.
    pub instance_grace: Duration,
}

/// Where runs are reported: the cluster-wide scorer replicas, and the scorer of each namespace-restricted
/// instance ([`route`]).
#[derive(Debug)]
pub struct Scorers {
    pub cluster: Arc<Replicas>,
    pub teams: TeamScorers,
    /// Per-call budget of a team scorer's RPCs.
    pub timeout: Duration,
}

#[derive(Debug)]
struct Pending {
    job: DecidedJob,
    run: Run,
    pod: String,
    since: Instant,
    gone_since: Option<Instant>,
}

/// Everything the loop knows; no I/O.
#[derive(Debug, Default)]
struct Tracker {
    /// Node name → labels; kept after the Node is deleted.
    nodes: HashMap<String, BTreeMap<String, String>>,
    history: RunHistory,
    pending: HashMap<String, Pending>,
    /// UIDs reported or skipped during this replica's leadership, until their Pod is deleted.
    done: HashSet<String>,
    /// UIDs listed during a re-list of Pods (`Init` .. `InitDone`).
    relisted: Option<HashSet<String>>,
    /// Whether this replica leads: only the leader counts skips (once per Pod: the Pod becomes done).
    leader: bool,
    /// Namespace → its `gpu-admission-ns-lock` Lease (restricted instances).
    locks: HashMap<String, NsLock>,
    /// The Leases listed during a re-list (`Init` .. `InitDone`).
    relisted_locks: Option<HashMap<String, NsLock>>,
    /// The namespaces a cluster admin registered a restricted instance for.
    registrations: Registrations,
}

/// Which outcome `on_pod` reached, for the caller's bookkeeping.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    Skipped(SkipReason),
}

impl Tracker {
    fn on_pod(&mut self, pod: &Pod, deleted: bool, now: Instant) -> Seen {
        let Some(job) = extract::decided_job(pod) else {
            return Seen::Nothing;
        };
        if let Some(seen) = &mut self.relisted {
            seen.insert(job.uid.clone());
        }
        let progress = extract::progress(pod, &job, deleted);
        match &progress {
            Progress::Running(run) | Progress::Finished(run) => self.history.record(run),
            Progress::Skip(_) => {
                let end = extract::stopped_at(pod, Timestamp::now());
                self.close_open_run(&job.uid, end);
            }
            Progress::NotStarted => {}
        }
        if self.done.contains(&job.uid) {
            if deleted {
                self.done.remove(&job.uid);
            }
            return Seen::Nothing;
        }
        match progress {
            Progress::Finished(run) => {
                let pending = self.pending.entry(job.uid.clone()).or_insert(Pending {
                    job,
                    run,
                    pod: pod_name(pod),
                    since: now,
                    gone_since: None,
                });
                if deleted {
                    pending.gone_since.get_or_insert(now);
                }
                Seen::Nothing
            }
            Progress::Skip(reason) => {
                self.pending.remove(&job.uid);
                if !self.leader {
                    return Seen::Nothing;
                }
                // Later updates of the same Pod (conditions, its deletion) must not count it again.
                if !deleted {
                    self.done.insert(job.uid);
                }
                Seen::Skipped(reason)
            }
            Progress::NotStarted | Progress::Running(_) => Seen::Nothing,
        }
    }

    /// A run that ended without being reported (deleted, evicted): it shared its node until `end`.
    fn close_open_run(&mut self, uid: &str, end: Timestamp) {
        let open: Vec<Run> = self
            .history_open_runs()
            .filter(|r| r.uid == uid)
            .cloned()
            .collect();
        for mut run in open {
            run.end = Some(end.max(run.start));
            self.history.record(&run);
        }
    }

    fn history_open_runs(&self) -> impl Iterator<Item = &Run> {
        self.history.all().filter(|r| r.end.is_none())
    }

    /// End of a re-list: Pods that were tracked but are no longer listed were deleted during the gap.
    fn relist_done(&mut self, now: Instant) -> Vec<SkipReason> {
        let Some(seen) = self.relisted.take() else {
            return vec![];
        };
        let vanished_open: Vec<String> = self
            .history_open_runs()
            .filter(|r| !seen.contains(&r.uid))
            .map(|r| r.uid.clone())
            .collect();
        let mut skipped = Vec::new();
        for uid in vanished_open {
            self.close_open_run(&uid, Timestamp::now());
            if self.leader && !self.done.contains(&uid) {
                skipped.push(SkipReason::DeletedBeforeFinishing);
            }
        }
        for (uid, p) in &mut self.pending {
            if !seen.contains(uid) {
                p.gone_since.get_or_insert(now);
            }
        }
        self.done.retain(|uid| seen.contains(uid));
        skipped
    }

    /// One event of the Lease watch.
    fn on_lease(&mut self, event: Event<Lease>) {
        let entry = |l: &Lease| {
            let ns = l.metadata.namespace.clone().unwrap_or_default();
            (ns, NsLock::of_lease(l))
        };
        match event {
            Event::Apply(l) => {
                let (ns, lock) = entry(&l);
                self.locks.insert(ns, lock);
            }
            Event::Delete(l) => {
                self.locks.remove(&entry(&l).0);
            }
            Event::Init => self.relisted_locks = Some(HashMap::new()),
            Event::InitApply(l) => {
                let (ns, lock) = entry(&l);
                self.relisted_locks
                    .get_or_insert_with(HashMap::new)
                    .insert(ns, lock);
            }
            Event::InitDone => self.locks = self.relisted_locks.take().unwrap_or_default(),
        }
    }

    /// A restricted record where no registration names the namespace is no team's decision: the run is the
    /// cluster-wide scorer's to learn (once the registrations are listed).
    fn reroute_unregistered(&mut self) {
        for p in self.pending.values_mut() {
            if let Learner::Team(ns) = &p.job.learner
                && self.registrations.registered(ns) == Some(false)
            {
                p.job.learner = Learner::Cluster;
            }
        }
    }

    fn prune(&mut self, now: Instant, gone_retention: Duration) {
        self.pending.retain(|_, p| {
            p.gone_since
                .is_none_or(|g| now.duration_since(g) < gone_retention)
        });
        let pending = &self.pending;
        self.history.prune(|uid| pending.contains_key(uid));
    }
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Runs the loop until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    scorers: Scorers,
    log: SharedLog,
    metrics: Arc<Metrics>,
    mut leader: watch::Receiver<bool>,
    config: ControllerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let nodes = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff();
    let pods = watcher(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(names::LABEL_JOB_TYPE),
    )
    .default_backoff();
    // The restricted instances' Leases, by name in every namespace (as the cluster-wide frontend watches them),
    // and the registrations that make a namespace's Lease count.
    let leases = watcher(
        Api::<Lease>::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}")),
    )
    .default_backoff();
    let registrations = watcher(
        Api::<MutatingWebhookConfiguration>::all(client),
        watcher::Config::default(),
    )
    .default_backoff();
    let mut leases = std::pin::pin!(leases);
    let mut registrations = std::pin::pin!(registrations);
    let mut nodes = std::pin::pin!(nodes);
    let mut pods = std::pin::pin!(pods);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut loop_state = LoopState {
        policy: HashMap::new(),
        teams: HashMap::new(),
        is_leader: *leader.borrow(),
    };
    let mut deliveries = Deliveries::default();
    let ctx = DeliveryContext {
        log,
        metrics: metrics.clone(),
        config: config.clone(),
    };
    let mut t = Tracker {
        leader: loop_state.is_leader,
        ..Tracker::default()
    };
    let mut nodes_ready = false;
    let mut tick = tokio::time::interval(config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            ev = nodes.next() => match ev {
                Some(Ok(Event::Apply(n) | Event::InitApply(n))) => {
                    if let Some(name) = n.metadata.name {
                        t.nodes.insert(name, n.metadata.labels.unwrap_or_default());
                    }
                }
                Some(Ok(Event::InitDone)) => {
                    if !nodes_ready {
                        tracing::info!(nodes = t.nodes.len(), "node cache ready");
                    }
                    nodes_ready = true;
                }
                // Deleted Nodes keep their labels: Pods that ran there are still reported with their class.
                Some(Ok(Event::Delete(_) | Event::Init)) => {}
                Some(Err(err)) => tracing::warn!(%err, "node watch"),
                None => anyhow::bail!("node watch ended"),
            },
            ev = leases.next() => match ev {
                Some(Ok(event)) => t.on_lease(event),
                Some(Err(err)) => tracing::warn!(%err, "lease watch"),
                None => anyhow::bail!("lease watch ended"),
            },
            ev = registrations.next() => match ev {
                Some(Ok(event)) => t.registrations.on_event(event),
                Some(Err(err)) => tracing::warn!(%err, "mutatingwebhookconfiguration watch"),
                None => anyhow::bail!("mutatingwebhookconfiguration watch ended"),
            },
            ev = pods.next(), if nodes_ready => {
                let now = Instant::now();
                let mut skipped = Vec::new();
                match ev {
                    Some(Ok(Event::Apply(p) | Event::InitApply(p))) => skipped.extend(skip_of(t.on_pod(&p, false, now))),
                    Some(Ok(Event::Delete(p))) => skipped.extend(skip_of(t.on_pod(&p, true, now))),
                    Some(Ok(Event::Init)) => t.relisted = Some(HashSet::new()),
                    Some(Ok(Event::InitDone)) => {
                        skipped.extend(t.relist_done(now));
                        tracing::info!(pending = t.pending.len(), "pod cache ready");
                    }
                    Some(Err(err)) => tracing::warn!(%err, "pod watch"),
                    None => anyhow::bail!("pod watch ended"),
                }
                if loop_state.is_leader {
                    for reason in skipped {
                        metrics.skip(reason);
                    }
                    deliveries.start(&mut t, &mut loop_state, &scorers, &ctx);
                }
            },
            changed = leader.changed() => {
                if changed.is_err() {
                    anyhow::bail!("leader election stopped");
                }
                loop_state.is_leader = *leader.borrow_and_update();
                t.leader = loop_state.is_leader;
                metrics.leader.set(i64::from(loop_state.is_leader));
                tracing::info!(leader = loop_state.is_leader, pending = t.pending.len(), "leadership changed");
                if loop_state.is_leader && nodes_ready {
                    deliveries.start(&mut t, &mut loop_state, &scorers, &ctx);
                }
            },
            Some(round) = deliveries.next(), if deliveries.busy() => {
                deliveries.finish(&mut t, &mut loop_state, round);
                metrics.pending.set(t.pending.len() as i64);
            },
            _ = tick.tick() => {
                if loop_state.is_leader && nodes_ready {
                    deliveries.start(&mut t, &mut loop_state, &scorers, &ctx);
                }
                t.prune(Instant::now(), config.gone_retention);
                metrics.pending.set(t.pending.len() as i64);
            },
        }
    }
}

fn skip_of(seen: Seen) -> Option<SkipReason> {
    match seen {
        Seen::Skipped(r) => Some(r),
        Seen::Nothing => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, phase: &str, state: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid,
                "labels": {"gpu-admission.io/job-type": "train-llama"},
                "annotations": {"gpu-admission.io/decided-at": "2026-05-04T09:59:58Z"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                "image": "x", "imageID": "", "state": state}]}
        }))
        .unwrap()
    }

    fn finished(uid: &str) -> Pod {
        pod(
            uid,
            "Succeeded",
            json!({"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": "2026-05-04T10:00:00Z", "finishedAt": "2026-05-04T10:10:00Z"}}),
        )
    }

    #[test]
    fn a_restricted_record_counts_only_in_a_registered_namespace() {
        let mut t = Tracker::default();
        t.nodes.insert("n1".into(), BTreeMap::new());
        let signed = |uid: &str| {
            let mut p = finished(uid);
            let a = p.metadata.annotations.as_mut().unwrap();
            a.insert(names::ANN_DECIDED_BY.into(), "restricted:ns".into());
            p
        };
        t.on_pod(&signed("a"), false, Instant::now());
        assert_eq!(t.pending["a"].job.learner, Learner::Team("ns".into()));
        // Not listed yet: left to wait (a team's run is not sent to the cluster by a slow start).
        t.reroute_unregistered();
        assert_eq!(t.pending["a"].job.learner, Learner::Team("ns".into()));
        // Listed, and no registration names "ns": the cluster-wide scorer learns it.
        t.registrations.on_event(Event::Init);
        t.registrations.on_event(Event::InitDone);
        t.reroute_unregistered();
        assert_eq!(t.pending["a"].job.learner, Learner::Cluster);
    }

    #[test]
    fn a_finished_pod_waits_once_and_a_done_one_never_again_until_deleted() {
        let mut t = Tracker::default();
        t.nodes.insert("n1".into(), BTreeMap::new());
        let now = Instant::now();
        let running = pod(
            "a",
            "Running",
            json!({"running": {"startedAt": "2026-05-04T10:00:00Z"}}),
        );
        assert_eq!(t.on_pod(&running, false, now), Seen::Nothing);
        assert!(t.pending.is_empty());
        t.on_pod(&finished("a"), false, now);
        t.on_pod(&finished("a"), false, now);
        assert_eq!(t.pending.len(), 1);
        // Reported:
        t.pending.remove("a");
        t.done.insert("a".into());
        t.on_pod(&finished("a"), false, now);
        assert!(t.pending.is_empty(), "a done Pod is not pending again");
        t.on_pod(&finished("a"), true, now);
        assert!(t.pending.is_empty() && !t.done.contains("a"));
    }

    #[test]
    fn the_lease_watch_keeps_each_namespaces_lease_and_a_relist_replaces_them() {
        let lease = |ns: &str, holder: &str| -> Lease {
            serde_json::from_value(json!({"metadata": {"name": LEASE_NAME, "namespace": ns},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                         "renewTime": "2026-11-26T18:00:00Z"}}))
            .unwrap()
        };
        let mut t = Tracker::default();
        t.on_lease(Event::Apply(lease("team-a", "a-1")));
        t.on_lease(Event::Apply(lease("team-b", "b-1")));
        t.on_lease(Event::Apply(lease("team-a", "a-2")));
        assert_eq!(t.locks["team-a"].holder.as_deref(), Some("a-2"));
        t.on_lease(Event::Delete(lease("team-b", "b-1")));
        assert!(!t.locks.contains_key("team-b"));
        // A re-list: what was not listed again is gone once it is done, not before.
        t.on_lease(Event::Init);
        t.on_lease(Event::InitApply(lease("team-c", "c-1")));
        assert!(t.locks.contains_key("team-a"));
        t.on_lease(Event::InitDone);
        assert_eq!(t.locks.keys().collect::<Vec<_>>(), ["team-c"]);
    }

    #[test]
    fn a_follower_keeps_a_deleted_finished_run_for_the_retention_only() {
        let mut t = Tracker::default();
        let now = Instant::now();
        t.on_pod(&finished("a"), true, now);
        assert!(t.pending["a"].gone_since.is_some());
        t.prune(now + Duration::from_secs(10), Duration::from_secs(60));
        assert_eq!(t.pending.len(), 1);
        t.prune(now + Duration::from_secs(61), Duration::from_secs(60));
        assert!(t.pending.is_empty());
    }

    #[test]
    fn a_pod_that_vanished_during_a_relist_was_deleted_before_finishing() {
        let mut t = Tracker {
            leader: true,
            ..Tracker::default()
        };
        t.nodes.insert("n1".into(), BTreeMap::new());
        let now = Instant::now();
        t.on_pod(
            &pod(
                "gone",
                "Running",
                json!({"running": {"startedAt": "2026-05-04T10:00:00Z"}}),
            ),
            false,
            now,
        );
        t.on_pod(
            &pod(
                "stays",
                "Running",
                json!({"running": {"startedAt": "2026-05-04T10:00:00Z"}}),
            ),
            false,
            now,
        );
        t.relisted = Some(HashSet::new());
        t.on_pod(
            &pod(
                "stays",
                "Running",
                json!({"running": {"startedAt": "2026-05-04T10:00:00Z"}}),
            ),
            false,
            now,
        );
        assert_eq!(t.relist_done(now), [SkipReason::DeletedBeforeFinishing]);
        let open: Vec<&str> = t.history_open_runs().map(|r| r.uid.as_str()).collect();
        assert_eq!(open, ["stays"]);
    }

    #[test]
    fn an_evicted_pod_is_skipped_and_its_run_closed() {
        let mut t = Tracker::default();
        t.nodes.insert("n1".into(), BTreeMap::new());
        let now = Instant::now();
        t.on_pod(
            &pod(
                "e",
                "Running",
                json!({"running": {"startedAt": "2026-05-04T10:00:00Z"}}),
            ),
            false,
            now,
        );
        let mut evicted = pod("e", "Failed", json!({}));
        evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        assert_eq!(
            t.on_pod(&evicted, false, now),
            Seen::Nothing,
            "a follower counts nothing"
        );
        t.leader = true;
        assert_eq!(
            t.on_pod(&evicted, false, now),
            Seen::Skipped(SkipReason::Evicted)
        );
        assert!(t.history.on_node("n1").all(|r| r.end.is_some()));
        // Its later updates and its deletion are not counted again; the deletion forgets it.
        assert_eq!(t.on_pod(&evicted, false, now), Seen::Nothing);
        assert_eq!(t.on_pod(&evicted, true, now), Seen::Nothing);
        assert!(t.done.is_empty());
    }
}
