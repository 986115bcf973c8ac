//! What every Score under one shared policy and one learned state computes alike, kept next to the cached
//! posterior ([`super::PosteriorCache`]): each class's contention factor, and the avoid-list of each job
//! type asked about.
//!
//! Built by [`super::Learned::refresh_shared`] for one `Arc<Policy>` (held here, so no other policy can take
//! its address); a caller scoring under another policy object gets the values computed afresh
//! ([`StateTables::for_policy`]). Any change of the learned statistics drops the tables
//! ([`super::Learned::invalidate`]). A run learned by [`super::learn`] keeps the avoid-lists it cannot
//! move ([`super::Learned::invalidate_touching`]): an avoid-list of `a` reads only the pairs `a` reads
//! (unordered pairs with `a` on either side, `a`'s directed ones: [`interference::avoid_list`] and
//! [`super::related::Related::of`]) and the names of the unlisted job types learned; not the runtimes,
//! the contention factors, the owners or the observation ids. The contention factors are computed again
//! with every new tables.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Learned;
use super::interference;
use crate::policy::Policy;

/// Most job types whose avoid-lists are kept; past that the kept ones are forgotten and the count
/// starts again (job types come from requests, so they are not bounded by the policy).
pub const MAX_AVOID_LISTS: usize = 512;

#[derive(Debug)]
pub struct StateTables {
    policy: Arc<Policy>,
    /// Each class's contention factor (catalog order).
    pub(super) contention: Vec<f64>,
    /// Avoid-lists by job type.
    avoid: Mutex<HashMap<String, Vec<String>>>,
}

/// Avoid-lists kept over a change that cannot move them, for the policy they were computed under.
#[derive(Debug, Clone)]
pub struct KeptLists {
    policy: Arc<Policy>,
    lists: HashMap<String, Vec<String>>,
}

impl KeptLists {
    /// These lists less those `touched` can move.
    pub(super) fn without(mut self, touched: &Touched) -> Self {
        if touched.all {
            self.lists.clear();
        } else {
            for name in &touched.job_types {
                self.lists.remove(name);
            }
        }
        self
    }
}

/// Whose avoid-lists a change of the learned state can move: every job type's (`all`: the unlisted job
/// types learned changed, or a pair was forgotten), or those of `job_types` (the readers of the pairs
/// recorded, [`Touched::pair`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Touched {
    pub(super) all: bool,
    pub(super) job_types: Vec<String>,
}

impl Touched {
    /// Every avoid-list.
    pub(super) fn everything(&mut self) {
        self.all = true;
    }

    /// A pair recorded: unordered, its two job types read it; directed, only the one that ran.
    pub(super) fn pair(&mut self, directed: bool, a: &str, b: &str) {
        let readers = if directed { &[a][..] } else { &[a, b][..] };
        for name in readers {
            if !self.job_types.iter().any(|n| n == name) {
                self.job_types.push(name.to_string());
            }
        }
    }
}

impl StateTables {
    /// The tables of `learned` (whose statistics they must describe) under `policy`, starting from the
    /// avoid-lists `kept` when they were computed under `policy` itself.
    pub(super) fn new(policy: Arc<Policy>, learned: &Learned, kept: Option<KeptLists>) -> Self {
        let avoid = kept
            .filter(|k| Arc::ptr_eq(&k.policy, &policy))
            .map_or_else(HashMap::new, |k| k.lists);
        Self {
            contention: learned.contention.factors(&policy),
            policy,
            avoid: Mutex::new(avoid),
        }
    }

    /// These tables when they were built for `policy` itself (the same object), else `None`.
    pub(super) fn for_policy<'a>(
        tables: Option<&'a Arc<Self>>,
        policy: &Policy,
    ) -> Option<&'a Self> {
        tables
            .filter(|t| std::ptr::eq(Arc::as_ptr(&t.policy), policy))
            .map(|t| t.as_ref())
    }

    /// The avoid-lists of `tables` that `touched` cannot move (taken, not copied, when no other state
    /// shares the tables).
    pub(super) fn kept(tables: Arc<Self>, touched: &Touched) -> KeptLists {
        let policy = tables.policy.clone();
        let lists = match Arc::try_unwrap(tables) {
            Ok(t) => t.avoid.into_inner().unwrap_or_else(|e| e.into_inner()),
            Err(shared) => shared
                .avoid
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        KeptLists { policy, lists }.without(touched)
    }

    /// The avoid-list of `job_type` ([`interference::avoid_list`] over `learned`, the state these tables
    /// describe), computed once per job type.
    pub(super) fn avoid_list(&self, learned: &Learned, job_type: &str) -> Vec<String> {
        let mut kept = self.avoid.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = kept.get(job_type) {
            return list.clone();
        }
        let list = interference::avoid_list(
            &self.policy,
            &learned.interference,
            learned.unlisted.seen.keys(),
            job_type,
        );
        if kept.len() >= MAX_AVOID_LISTS {
            kept.clear();
        }
        kept.insert(job_type.to_string(), list.clone());
        list
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Observation, learn, tenants};
    use super::*;
    use crate::policy::embedded_default;

    fn run(tenant: Option<&str>, job_type: &str, next_to: &[&str], id: u64) -> Observation {
        Observation {
            id: Some(format!("run-{id}")),
            job_type: job_type.into(),
            gpu_class: "L4-24GB".into(),
            gpu_count: 1,
            runtime_seconds: if next_to.is_empty() { 1_000.0 } else { 2_500.0 },
            colocated_job_types: next_to.iter().map(|s| s.to_string()).collect(),
            tenant: tenant.map(str::to_string),
            ..Observation::default()
        }
    }

    /// Puts a marker in place of the kept avoid-list of each of `job_types`: asked again, the tables answer
    /// the marker when they kept the list, a list computed again when they did not.
    fn plant(l: &Learned, p: &Policy, job_types: &[&str]) -> Vec<String> {
        let marker = vec!["kept-marker".to_string()];
        let tables = l.tables(p).expect("built by refresh_shared");
        let mut avoid = tables.avoid.lock().unwrap();
        for j in job_types {
            avoid.insert(j.to_string(), marker.clone());
        }
        marker
    }

    const LISTED: [&str; 4] = ["train-llama", "notebook", "batch-etl", "inference-llm"];

    #[test]
    fn a_run_moves_only_the_avoid_lists_of_the_job_types_whose_pairs_it_recorded() {
        let p = Arc::new(embedded_default().unwrap());
        let mut l = Learned::default();
        for (i, j) in LISTED.iter().enumerate() {
            learn(&p, &mut l, &run(None, j, &[], i as u64));
        }
        l.refresh_shared(&p);
        let marker = plant(&l, &p, &LISTED);
        // batch-etl next to notebook: the unordered pair is read by both.
        learn(&p, &mut l, &run(None, "batch-etl", &["notebook"], 10));
        l.refresh_shared(&p);
        for j in ["train-llama", "inference-llm"] {
            assert_eq!(l.avoid_list(&p, j), marker, "{j} kept");
        }
        for j in ["batch-etl", "notebook"] {
            assert_ne!(l.avoid_list(&p, j), marker, "{j} computed again");
        }
        // A run next to nobody, and a run on a share of a device: no list moves.
        let marker = plant(&l, &p, &LISTED);
        learn(&p, &mut l, &run(None, "notebook", &[], 11));
        let mut shared = run(None, "batch-etl", &[], 12);
        shared.gpu_shape = super::super::learn::GpuShape::Shared;
        learn(&p, &mut l, &shared);
        l.refresh_shared(&p);
        for j in LISTED {
            assert_eq!(l.avoid_list(&p, j), marker, "{j} kept");
        }
        // A job type no list had among its candidates: every list is computed again.
        learn(&p, &mut l, &run(None, "etl-custom", &[], 13));
        l.refresh_shared(&p);
        for j in LISTED {
            assert_ne!(l.avoid_list(&p, j), marker, "{j} computed again");
        }
        // Any other change of the statistics drops them all.
        let marker = plant(&l, &p, &LISTED);
        l.invalidate();
        l.refresh_shared(&p);
        for j in LISTED {
            assert_ne!(l.avoid_list(&p, j), marker, "{j} computed again");
        }
    }

    #[test]
    fn a_directed_pair_moves_the_avoid_list_of_the_job_type_that_ran_only() {
        let p = Arc::new(embedded_default().unwrap());
        let mut l = Learned::default();
        // team owns etl-custom (first reporter); gold's notebook next to it is a pair of two owners.
        learn(&p, &mut l, &run(Some("team"), "etl-custom", &[], 1));
        learn(&p, &mut l, &run(Some("gold"), "notebook", &[], 2));
        l.refresh_shared(&p);
        let names = ["notebook@gold", "etl-custom", "notebook", "batch-etl"];
        let marker = plant(&l, &p, &names);
        learn(
            &p,
            &mut l,
            &run(Some("gold"), "notebook", &["etl-custom"], 3),
        );
        assert!(!l.interference.directed.is_empty(), "{:?}", l.interference);
        l.refresh_shared(&p);
        assert_ne!(l.avoid_list(&p, "notebook@gold"), marker);
        for j in ["etl-custom", "notebook", "batch-etl"] {
            assert_eq!(l.avoid_list(&p, j), marker, "{j} kept");
        }
    }

    /// Every kept list is the one computed afresh, over a stream of runs of listed, unlisted and tenants'
    /// job types next to each other.
    #[test]
    fn kept_avoid_lists_are_those_computed_afresh() {
        let p = Arc::new(embedded_default().unwrap());
        let jobs = [
            "train-llama",
            "notebook",
            "batch-etl",
            "inference-llm",
            "etl-custom",
            "mystery",
        ];
        let tenant_names = [None, Some("team"), Some("gold")];
        let mut l = Learned::default();
        let mut x: u64 = 7;
        let mut next = |n: usize| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as usize % n
        };
        for id in 0..300 {
            let tenant = tenant_names[next(3)];
            let job = jobs[next(jobs.len())];
            let others: Vec<&str> = (0..next(3)).map(|_| jobs[next(jobs.len())]).collect();
            let mut o = run(tenant, job, &others, id);
            o.runtime_seconds *= 1.0 + next(100) as f64 / 50.0;
            learn(&p, &mut l, &o);
            l.refresh_shared(&p);
            let readers = l
                .unlisted
                .seen
                .keys()
                .cloned()
                .chain(jobs.iter().map(|j| j.to_string()))
                .chain(jobs.iter().flat_map(|j| {
                    ["team", "gold"].map(|t| format!("{j}{}{t}", tenants::SEPARATOR))
                }));
            for j in readers {
                let fresh =
                    interference::avoid_list(&p, &l.interference, l.unlisted.seen.keys(), &j);
                assert_eq!(l.avoid_list(&p, &j), fresh, "{j} after run {id}");
            }
        }
    }
}
