//! What every Score under one shared policy and one learned state computes alike, kept next to the cached
//! posterior ([`super::PosteriorCache`]): each class's contention factor, and the avoid-list of each job
//! type asked about.
//!
//! Valid exactly as long as the posterior cache: built by [`super::Learned::refresh_shared`] for one
//! `Arc<Policy>` (held here, so no other policy can take its address), dropped with the rest of the cache
//! by any change of the learned statistics ([`super::Learned::invalidate`]) or a refresh for another policy.
//! A caller scoring under another policy object gets the values computed afresh ([`StateTables::for_policy`]).
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

impl StateTables {
    /// The tables of `learned` (whose statistics they must describe) under `policy`.
    pub(super) fn new(policy: Arc<Policy>, learned: &Learned) -> Self {
        Self {
            contention: learned.contention.factors(&policy),
            policy,
            avoid: Mutex::new(HashMap::new()),
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
