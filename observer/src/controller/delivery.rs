//! Delivering pending runs to the scorers that learn them, off the watch loop. Each learner (the cluster-wide
//! scorer, each team's scorer) has at most one round in flight, running beside the loop within one call budget
//! (`Scorers::timeout`): a scorer that does not answer, or answers slowly (a tenant's own, or a fake behind a
//! team Lease), keeps its own runs waiting and never delays another learner's runs nor the loop's handling of
//! Pod, Node, Lease and registration events. A round carries owned copies of what it reports; what it did
//! (runs reported or skipped, the policy facts fetched) is applied to the tracker when it comes back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};

use super::{ControllerConfig, Scorers, Tracker};
use crate::convergence::SharedLog;
use crate::extract::{self, DecidedJob, PolicyFacts, Run, SkipReason};
use crate::metrics::{Metrics, ResultLabel};
use crate::replicas::{Delivery, Replicas, observe_everywhere, policy_facts};
use crate::route::{self, Learner};

pub(super) struct LoopState {
    /// Each learner's policy facts (its scorer's catalog) and when they were fetched.
    pub(super) policy: HashMap<Learner, (PolicyFacts, Instant)>,
    /// The team scorers' endpoints, made once per namespace.
    pub(super) teams: HashMap<String, Arc<Replicas>>,
    pub(super) is_leader: bool,
}

/// What every round needs besides its runs.
pub(super) struct DeliveryContext {
    pub(super) log: SharedLog,
    pub(super) metrics: Arc<Metrics>,
    pub(super) config: ControllerConfig,
}

/// The rounds in flight, at most one per learner.
#[derive(Default)]
pub(super) struct Deliveries {
    rounds: FuturesUnordered<BoxFuture<'static, Round>>,
    /// The learners with a round in flight, and the runs those rounds carry.
    learners: HashSet<Learner>,
    uids: HashSet<String>,
}

/// One pending run as a round carries it: what `extract::observation` reads, owned.
struct Item {
    uid: String,
    pod: String,
    job: DecidedJob,
    run: Run,
    node: Option<BTreeMap<String, String>>,
    /// The runs kept on its Node (co-location).
    others: Vec<Run>,
    since: Instant,
}

/// One learner's round.
pub(super) struct Round {
    learner: Learner,
    replicas: Arc<Replicas>,
    /// Its pending runs, in the order they finished.
    items: Vec<Item>,
    /// Its scorer's policy facts as last fetched.
    policy: Option<(PolicyFacts, Instant)>,
    /// Filled as the round goes: what survives its budget running out.
    outcome: Outcome,
}

/// What a round found out, applied to the tracker when it comes back.
#[derive(Default)]
struct Outcome {
    /// Policy facts fetched in this round.
    policy: Option<(PolicyFacts, Instant)>,
    /// Runs reported or skipped: done.
    done: Vec<String>,
}

impl Deliveries {
    /// Whether a round is in flight (the loop then waits for one beside its events).
    pub(super) fn busy(&self) -> bool {
        !self.rounds.is_empty()
    }

    /// The next round to come back.
    pub(super) async fn next(&mut self) -> Option<Round> {
        self.rounds.next().await
    }

    /// Starts a round for every learner with pending runs and none in flight (leader only), to the scorer
    /// that learns them: runs of one learner in the order they finished. A team's runs whose namespace has no
    /// active restricted instance are skipped once their grace is over.
    pub(super) fn start(
        &mut self,
        t: &mut Tracker,
        s: &mut LoopState,
        scorers: &Scorers,
        ctx: &DeliveryContext,
    ) {
        if t.pending.is_empty() {
            return;
        }
        let mut order: Vec<(Instant, String)> = t
            .pending
            .iter()
            .filter(|(uid, _)| !self.uids.contains(*uid))
            .map(|(uid, p)| (p.since, uid.clone()))
            .collect();
        order.sort();
        t.reroute_unregistered();
        let mut learners: Vec<Learner> = order
            .iter()
            .map(|(_, uid)| t.pending[uid].job.learner.clone())
            .filter(|l| !self.learners.contains(l))
            .collect();
        learners.sort();
        learners.dedup();
        for learner in learners {
            let uids: Vec<String> = order
                .iter()
                .filter(|(_, uid)| t.pending[uid].job.learner == learner)
                .map(|(_, uid)| uid.clone())
                .collect();
            if let Learner::Team(ns) = &learner
                && !route::team_active(ns, t.locks.get(ns), time::OffsetDateTime::now_utc())
            {
                skip_inactive_team(t, uids, ctx);
                continue;
            }
            let replicas = match &learner {
                Learner::Cluster => scorers.cluster.clone(),
                Learner::Team(ns) => match team_replicas(s, scorers, ns) {
                    Some(r) => r,
                    None => continue,
                },
            };
            let items = uids.iter().map(|uid| item(t, uid)).collect();
            self.uids.extend(uids);
            self.learners.insert(learner.clone());
            let policy = s.policy.get(&learner).cloned();
            let round = Round {
                learner,
                replicas,
                items,
                policy,
                outcome: Outcome::default(),
            };
            let (log, metrics, config) = (ctx.log.clone(), ctx.metrics.clone(), ctx.config.clone());
            let budget = scorers.timeout;
            self.rounds.push(Box::pin(async move {
                let mut round = round;
                let delivered = deliver_to(&mut round, &log, &metrics, &config);
                if tokio::time::timeout(budget, delivered).await.is_err() {
                    tracing::warn!(
                        learner = ?round.learner,
                        budget_ms = budget.as_millis() as u64,
                        "the learner's scorer did not take its runs within the budget; the rest wait"
                    );
                }
                round
            }));
        }
        ctx.metrics.pending.set(t.pending.len() as i64);
    }

    /// Applies what a round did: its done runs leave `pending`, its policy facts are kept.
    pub(super) fn finish(&mut self, t: &mut Tracker, s: &mut LoopState, round: Round) {
        self.learners.remove(&round.learner);
        for item in &round.items {
            self.uids.remove(&item.uid);
        }
        if let Some(policy) = round.outcome.policy {
            s.policy.insert(round.learner, policy);
        }
        for uid in round.outcome.done {
            t.pending.remove(&uid);
            t.done.insert(uid);
        }
    }
}

/// The owned copy of pending run `uid`.
fn item(t: &Tracker, uid: &str) -> Item {
    let p = &t.pending[uid];
    Item {
        uid: uid.to_string(),
        pod: p.pod.clone(),
        job: p.job.clone(),
        run: p.run.clone(),
        node: t.nodes.get(&p.run.node).cloned(),
        others: t.history.on_node(&p.run.node).cloned().collect(),
        since: p.since,
    }
}

/// A team's runs while its namespace has no active restricted instance: skipped once past their grace.
fn skip_inactive_team(t: &mut Tracker, uids: Vec<String>, ctx: &DeliveryContext) {
    for uid in uids {
        if t.pending[&uid].since.elapsed() >= ctx.config.instance_grace {
            let p = t.pending.remove(&uid).expect("pending");
            let reason = SkipReason::NoRestrictedInstance;
            tracing::info!(pod = %p.pod, reason = reason.as_str(), "not reported");
            ctx.metrics.skip(reason);
            t.done.insert(uid);
        }
    }
}

/// The replicas of `namespace`'s team scorer (its endpoint from `TeamScorers`); `None` when the endpoint is
/// not a usable URL (logged; its runs wait).
fn team_replicas(s: &mut LoopState, scorers: &Scorers, namespace: &str) -> Option<Arc<Replicas>> {
    if let Some(r) = s.teams.get(namespace) {
        return Some(r.clone());
    }
    let endpoint = scorers.teams.endpoint(namespace);
    match Replicas::new(std::slice::from_ref(&endpoint), scorers.timeout) {
        Ok(r) => {
            let r = Arc::new(r);
            s.teams.insert(namespace.to_string(), r.clone());
            Some(r)
        }
        Err(err) => {
            tracing::warn!(%namespace, %endpoint, %err, "team scorer endpoint unusable; its runs wait");
            None
        }
    }
}

/// Reports the pending runs of one round's learner to its scorer replicas, recording into the round what
/// is done.
async fn deliver_to(
    round: &mut Round,
    log: &SharedLog,
    metrics: &Metrics,
    config: &ControllerConfig,
) {
    let learner = &round.learner;
    let resolved = round.replicas.resolve().await;
    let due = round
        .policy
        .as_ref()
        .is_none_or(|(_, fetched)| fetched.elapsed() >= config.policy_refresh);
    if due && let Some(p) = policy_facts(&resolved).await {
        round.outcome.policy = Some((p.clone(), Instant::now()));
        round.policy = Some((p, Instant::now()));
    }
    let Some((policy, _)) = &round.policy else {
        tracing::warn!(
            ?learner,
            pending = round.items.len(),
            "no scorer answers GetPolicy; runs wait"
        );
        return;
    };
    for p in &round.items {
        let outcome = extract::observation(&p.job, &p.run, p.node.as_ref(), policy, &p.others);
        let req = match outcome {
            Err(SkipReason::NodeUnknown) if p.since.elapsed() < config.node_grace => continue,
            Err(reason) => {
                tracing::info!(pod = %p.pod, reason = reason.as_str(), "not reported");
                metrics.skip(reason);
                round.outcome.done.push(p.uid.clone());
                continue;
            }
            Ok(req) => req,
        };
        match observe_everywhere(&resolved, &req, metrics).await {
            Delivery::Unreachable => {
                tracing::warn!(
                    ?learner,
                    pending = round.items.len(),
                    "no scorer replica answered Observe; runs wait"
                );
                return;
            }
            Delivery::Rejected(why) => {
                tracing::warn!(pod = %p.pod, %why, "scorer refused the observation");
                metrics.rejected.inc();
            }
            d @ (Delivery::Learned | Delivery::Duplicate) => {
                let result = if d == Delivery::Learned {
                    "learned"
                } else {
                    "duplicate"
                };
                tracing::info!(pod = %p.pod, id = %req.observation_id, job_type = %req.job_type,
                    gpu_class = %req.gpu_class, runtime_seconds = req.runtime_seconds,
                    colocated = ?req.colocated_job_types, ?learner, result, "observation reported");
                metrics
                    .reported
                    .get_or_create(&ResultLabel { result })
                    .inc();
                // The replay log feeds the cluster-wide replicas' convergence only.
                if *learner == Learner::Cluster {
                    log.lock().expect("not poisoned").push(req);
                }
            }
        }
        round.outcome.done.push(p.uid.clone());
    }
}
