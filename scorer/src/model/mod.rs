//! The scoring model: pure functions of (policy, learned state, request, seed), no I/O.
//!
//! [`score`] checks feasibility, estimates each class's runtime ([`posterior`]: a hierarchical model
//! that shares what was learned across job types and classes), weighs it by the tier's objective and
//! the cost function ([`objective`]), explores by Thompson sampling within the exploration budget
//! ([`exploration`], [`sampling`]), and computes the job's priority ([`priority`]) and avoid-list
//! ([`interference`]). [`observe`] feeds an observed runtime back into [`Learned`], once per
//! observation id ([`observed`]).
//!
//! Exploration: every decision draws, from a seed derived from the request and the observations learned,
//! one posterior sample of each class's runtime. The class whose *sampled* cost is lowest is the one
//! Thompson sampling would try; it is chosen over the lowest expected cost only when exploring it pays
//! ([`value`]: the expected saving over the job type's future runs beats the expected extra cost of
//! this run), the window's budget allows it (the operator's `explorationCap`, a hard limit) and, for keyed
//! decisions, the decision's seeded draw is below the cap (and once at least one observation arrived:
//! without an observer, exploring teaches nothing). So exploration goes where a class may plausibly be
//! better and knowing it is worth a run, its share stays ≤ the cap, and the same request on the same
//! state gets the same answer. The steps of one decision are in [`decide`], its explanation in
//! [`explain`].
pub(crate) mod contention;
mod decide;
pub(crate) mod estimate;
mod explain;
pub(crate) mod exploration;
pub(crate) mod feasibility;
pub(crate) mod interference;
pub(crate) mod learn;
pub(crate) mod objective;
pub(crate) mod observed;
pub(crate) mod posterior;
pub(crate) mod priority;
mod related;
pub(crate) mod sampling;
pub(crate) mod scaling;
mod tables;
pub(crate) mod tenants;
pub(crate) mod unlisted;
pub(crate) mod value;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::policy::{Bucket, Policy, Vendor, WorkloadClass};
use estimate::{Gaussian, RuntimeTable};
use exploration::ExplorationWindow;
use feasibility::Infeasible;
use interference::InterferenceTable;
pub use learn::{JobTypeSummary, Observation, ObserveOutcome, learn, observe, summary};
use posterior::Posterior;
use tables::StateTables;

/// A job to score, in the model's terms (already validated: numbers are finite and non-negative).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRequest {
    pub tier: String,
    pub job_type: String,
    /// `None` = not said: the job type's class, else unknown.
    pub workload_class: Option<WorkloadClass>,
    pub gpu_count: u32,
    /// `None` = any vendor.
    pub vendor: Option<Vendor>,
    pub memory_gib: Option<f64>,
    pub model_size_billion_params: Option<f64>,
    pub candidate_classes: Vec<String>,
    pub colocated_job_types: Vec<String>,
    /// The namespace asking (the tenant): where it learned a job type under its own name ([`tenants`]),
    /// its own estimates are read.
    pub tenant: Option<String>,
}

/// Everything the scorer has learned; snapshotted by [`crate::state`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    pub runtimes: RuntimeTable,
    pub interference: InterferenceTable,
    /// How much more co-location hurts per GPU class.
    #[serde(default)]
    pub contention: contention::ContentionTable,
    /// This replica's recent decisions (not shared between replicas: each spends its own budget).
    pub exploration: ExplorationWindow,
    /// Ids of the observations learned.
    #[serde(default)]
    pub observed: observed::ObservedIds,
    /// Distinct observations learned (also those whose ids were forgotten).
    #[serde(default)]
    pub observations: u64,
    /// Job types the policy does not list that were learned (under a budget).
    #[serde(default)]
    pub unlisted: unlisted::UnlistedJobTypes,
    /// Which tenant (namespace) a job type's runs are learned from; other tenants' runs are learned under
    /// their own name ([`tenants`]).
    #[serde(default, skip_serializing_if = "tenants::Owners::is_empty")]
    pub owners: tenants::Owners,
    /// The posterior of the current policy, rebuilt after every change (never serialised).
    #[serde(skip)]
    pub posterior: PosteriorCache,
}

/// A cached [`Posterior`] and state digest, and the tables of the shared policy the posterior was last made
/// sure of ([`Learned::refresh_shared`], [`tables`]). They do not take part in comparisons of learned states.
///
/// The digest is computed when first read ([`Learned::digest`]) and kept until the next change. The
/// avoid-lists of the tables outlive a change that cannot move them ([`Learned::invalidate_touching`]):
/// `kept` holds them until the tables are built again.
#[derive(Clone, Default)]
pub struct PosteriorCache {
    posterior: Option<Arc<Posterior>>,
    digest: std::sync::OnceLock<Arc<str>>,
    tables: Option<Arc<StateTables>>,
    kept: Option<tables::KeptLists>,
}

impl PartialEq for PosteriorCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for PosteriorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.posterior.is_some() {
            "PosteriorCache(cached)"
        } else {
            "PosteriorCache(empty)"
        })
    }
}

impl Learned {
    /// The posterior for `policy`: the cached one when it was computed for this policy.
    pub fn posterior(&self, policy: &Policy) -> Arc<Posterior> {
        match &self.posterior.posterior {
            Some(p) if p.fingerprint == posterior::fingerprint(policy) => p.clone(),
            _ => Arc::new(Posterior::compute(
                policy,
                &self.runtimes,
                &self.unlisted,
                &self.owners,
            )),
        }
    }

    /// Makes sure the cached posterior is the one of `policy` (after a change or a policy reload), and
    /// returns it. The tables are kept when they were built for `policy` itself (they describe this state),
    /// else dropped: while tables are kept, the cached posterior is that of their policy.
    pub fn refresh(&mut self, policy: &Policy) -> Arc<Posterior> {
        let fresh = self.posterior(policy);
        self.posterior.posterior = Some(fresh.clone());
        if self.tables(policy).is_none() {
            self.posterior.tables = None;
        }
        fresh
    }

    /// [`Learned::refresh`] for the policy in force: when the cached posterior was last made sure of for
    /// this very policy (the same `Arc`: a policy is not changed once shared), its fingerprint is not hashed
    /// again. Any change of the learned statistics drops the cache ([`Learned::invalidate`]).
    pub fn refresh_shared(&mut self, policy: &Arc<Policy>) -> Arc<Posterior> {
        if let Some(post) = &self.posterior.posterior
            && self.tables(policy).is_some()
        {
            return post.clone();
        }
        let fresh = self.refresh(policy);
        let kept = self.posterior.kept.take();
        self.posterior.tables = Some(Arc::new(StateTables::new(policy.clone(), self, kept)));
        fresh
    }

    /// The tables [`Learned::refresh_shared`] built for `policy` itself, if it did.
    fn tables(&self, policy: &Policy) -> Option<&StateTables> {
        StateTables::for_policy(self.posterior.tables.as_ref(), policy)
    }

    /// Each class's contention factor (catalog order) under `policy`.
    pub(crate) fn contention_factors(&self, policy: &Policy) -> std::borrow::Cow<'_, [f64]> {
        match self.tables(policy) {
            Some(t) => std::borrow::Cow::Borrowed(&t.contention),
            None => std::borrow::Cow::Owned(self.contention.factors(policy)),
        }
    }

    /// The avoid-list of `job_type` under `policy` ([`interference::avoid_list`]).
    pub(crate) fn avoid_list(&self, policy: &Policy, job_type: &str) -> Vec<String> {
        match self.tables(policy) {
            Some(t) => t.avoid_list(self, job_type),
            None => interference::avoid_list(
                policy,
                &self.interference,
                self.unlisted.seen.keys(),
                job_type,
            ),
        }
    }

    /// Drops the caches (after the learned statistics changed).
    pub fn invalidate(&mut self) {
        self.posterior = PosteriorCache::default();
    }

    /// Drops the caches after a change that can move only the avoid-lists `touched` names
    /// ([`tables::Touched`]): the others are kept for the next tables of the same policy.
    pub(crate) fn invalidate_touching(&mut self, touched: &tables::Touched) {
        let kept = match self.posterior.tables.take() {
            Some(t) => Some(StateTables::kept(t, touched)),
            None => self.posterior.kept.take().map(|k| k.without(touched)),
        };
        self.posterior = PosteriorCache {
            kept,
            ..PosteriorCache::default()
        };
    }

    /// Drops the cached digest after a change that moves nothing else the caches hold.
    pub(crate) fn forget_digest(&mut self) {
        self.posterior.digest = std::sync::OnceLock::new();
    }

    /// Digest of what was learned (statistics, observation ids; not this replica's exploration
    /// window): equal digests mean equal answers under the same policy and budget. Computed when first
    /// read after a change, then kept until the next one.
    pub fn digest(&self) -> Arc<str> {
        self.posterior
            .digest
            .get_or_init(|| self.content_digest())
            .clone()
    }

    /// [`Learned::digest`], computed.
    fn content_digest(&self) -> Arc<str> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let tables = serde_json::to_vec(&(
            &self.runtimes,
            &self.interference,
            &self.unlisted,
            &self.contention,
        ))
        .expect("plain maps of integers serialise");
        h.update(&tables);
        if !self.owners.is_empty() {
            h.update(serde_json::to_vec(&self.owners).expect("a map of names serialises"));
        }
        h.update(self.observed.fingerprint().to_le_bytes());
        h.update(self.observations.to_le_bytes());
        hex::encode(&h.finalize()[..16]).into()
    }
}

/// How the scorer weighed one class.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Index into `policy.classes`.
    pub class: usize,
    pub infeasible: Vec<Infeasible>,
    pub runtime: Gaussian,
    /// The runtime the catalog alone predicts (seconds).
    pub prior_mean: f64,
    /// Observations of this job type on this class.
    pub observations: u64,
    /// Expected relative slowdown from the co-located job types on this class (their class-neutral
    /// slowdowns × the class's contention factor).
    pub slowdown: f64,
    pub information_gain: f64,
    pub interference_penalty: f64,
    /// 0 when infeasible.
    pub cost: f64,
    /// Cost of this decision's posterior draw (what exploration ranks on); 0 when infeasible.
    pub sampled_cost: f64,
}

impl Candidate {
    pub fn feasible(&self) -> bool {
        self.infeasible.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The tier actually applied (the policy's default when the request's is empty or unknown).
    pub tier: String,
    pub workload_class: WorkloadClass,
    /// Feasible classes first (best first), then infeasible ones in catalog order.
    pub candidates: Vec<Candidate>,
    /// How many leading `candidates` are feasible.
    pub feasible: usize,
    pub priority_score: f64,
    pub priority_class: Bucket,
    pub avoid_job_types: Vec<String>,
    pub explored: bool,
    /// What the answer's class is expected to save against the class the prior alone would have chosen,
    /// in runs' cost (negative: a try dearer than that); 0 without a feasible class.
    pub saving: f64,
    /// Set when no class is feasible.
    pub infeasible_reason: Option<String>,
    /// Which rule picked the answer.
    pub why: Why,
}

/// The rule that picked a decision's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    LowestCost,
    Exploration,
    /// The posterior draw favoured another class, but the decision's draw or the budget did not allow
    /// exploring, or exploring it does not pay ([`value`]).
    ExplorationDeclined,
    TiePreferredClass,
    TieCatalogOrder,
    SingleFeasibleClass,
    NoFeasibleClass,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::LowestCost => "lowest-cost",
            Rule::Exploration => "exploration",
            Rule::ExplorationDeclined => "exploration-declined",
            Rule::TiePreferredClass => "tie-preferred-class",
            Rule::TieCatalogOrder => "tie-catalog-order",
            Rule::SingleFeasibleClass => "single-feasible-class",
            Rule::NoFeasibleClass => "no-feasible-class",
        }
    }
}

/// The feasible classes in answer order, and how the first was picked.
pub(crate) struct Choice {
    pub ranked: Vec<usize>,
    /// What the first ranked class is expected to save against the prior's choice ([`Decision::saving`]).
    pub saving: f64,
    /// A try that paid was not made: the replica could not afford it ([`value::affordable`]).
    pub unaffordable: bool,
    /// The class of lowest cost, and the class of lowest sampled cost (or, when `by_value`, the class with
    /// an alternative reading that exploring pays most for).
    pub exploit: Option<usize>,
    pub sampled: Option<usize>,
    /// Whether this decision's draw and the budget allowed exploring.
    pub allowed: bool,
    /// The tier's preferred class (ties).
    pub preferred: Option<usize>,
    /// The value-of-information verdict on the sampled class (when it is not the lowest-cost one).
    pub verdict: Option<value::Verdict>,
    pub explored: bool,
    /// When `sampled` was proposed by its value because the draw's class did not pay (not by the draw):
    /// which alternative reading of its estimate made it pay.
    pub by_value: Option<AlternativeKind>,
}

/// Why a class's estimate has a second reading besides the posterior's Gaussian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlternativeKind {
    /// No job type of the job's family has run on it: the family's offset there may be wrong.
    FamilyUntried,
    /// The job type's only run there was far slower than expected: it may have straggled.
    Straggled,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Why {
    pub rule: Rule,
    /// The numbers of the rule's sentence ([`Why::reason`]).
    reason: explain::Reason,
    /// The class of lowest cost, and the class of lowest sampled cost (indices into `policy.classes`).
    pub exploit: Option<usize>,
    pub sampled: Option<usize>,
    /// Whether this decision's draw and the budget allowed exploring.
    pub exploration_allowed: bool,
}

impl Why {
    /// The rule in one sentence, with the numbers (written on demand: only Explain answers carry it).
    pub fn reason(&self, policy: &Policy) -> String {
        self.reason.sentence(policy)
    }
}

impl Decision {
    pub fn accepted(&self) -> &[Candidate] {
        &self.candidates[..self.feasible]
    }
}

/// The current runtime estimate of a known or unknown `job_type` on `gpus` GPUs of class `class`.
pub fn runtime_estimate(
    policy: &Policy,
    learned: &Learned,
    job_type: &str,
    gpus: u32,
    class: usize,
) -> Gaussian {
    let workload = policy
        .job_index(job_type)
        .map_or(WorkloadClass::Unknown, |j| {
            policy.job_types[j].workload_class
        });
    let post = learned.posterior(policy);
    let who = post.job(policy, job_type, workload);
    post.estimate_on(policy, who, class, gpus).seconds()
}

/// What lets a decision explore, besides its posterior draw favouring another class than the lowest cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gate {
    /// This replica's exploration window (`room`: it has room for one more exploratory decision) and what
    /// its decisions saved against the prior's choices (`saved`, [`value::affordable`]): the decision
    /// explores whenever its Thompson draw says so and the try is affordable, so a job type explores as
    /// often as another class is plausibly its best, and the operator's cap bounds the share (unkeyed
    /// decisions).
    Window { room: bool, saved: f64 },
    /// Also the decision's own seeded draw below `explorationCap` (the same on every replica: keyed
    /// decisions, with `true`, see [`crate::decisions`]).
    SeededDraw(bool),
}

/// Scores `req` with [`Gate::SeededDraw`]`(budget_allows)`; see [`score_gated`].
pub fn score(
    policy: &Policy,
    learned: &Learned,
    req: &JobRequest,
    budget_allows: bool,
    seed: u64,
) -> Decision {
    score_gated(policy, learned, req, Gate::SeededDraw(budget_allows), seed)
}

pub use decide::{score_gated, score_with};

#[cfg(test)]
mod tests;
