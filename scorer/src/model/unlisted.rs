//! Job types the policy does not list, learned under a budget.
//!
//! Teams invent job types every week; a job type the policy does not list is learned like a listed one, under
//! its workload class's profile as the prior (from `Observe`'s `workload_class`, else `unknown`). At most
//! [`BUDGET`] of them are kept: learning one more evicts the one seen least recently (by the sequence number
//! of its last observation, so replicas that learned the same observations evict the same one), with its
//! runtime statistics and its pairs. The caller counts evictions (`scorer_unlisted_job_types_evicted_total`).
//!
//! **Per tenant**: the one evicted is the least recently seen of the tenant (namespace) that holds the
//! most of them, so a tenant that invents job types by the hundred evicts its own, never another tenant's
//! while it holds more than that tenant does.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::WorkloadClass;

/// Most unlisted job types learned at once.
pub const BUDGET: usize = 512;

/// One unlisted job type: its workload class and when it was last observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Index of the workload class (`WorkloadClass::index`).
    #[serde(rename = "w")]
    pub workload: u8,
    /// The learned state's observation count when it was last observed.
    #[serde(rename = "s")]
    pub last: u64,
}

impl Seen {
    pub fn workload_class(self) -> WorkloadClass {
        WorkloadClass::ALL
            .get(usize::from(self.workload))
            .copied()
            .unwrap_or(WorkloadClass::Unknown)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnlistedJobTypes {
    pub seen: BTreeMap<String, Seen>,
}

impl UnlistedJobTypes {
    /// Records an observation of `name` at sequence number `seq`; returns the job type evicted to make
    /// room, if any: the least recently seen of those of the tenant holding the most (`tenant_of` names a
    /// job type's tenant; `None` for runs without a namespace, counted as one more tenant). A workload
    /// class of `None` keeps the one known (else `unknown`).
    pub fn touch(
        &mut self,
        name: &str,
        workload: Option<WorkloadClass>,
        seq: u64,
        tenant_of: impl Fn(&str) -> Option<String>,
    ) -> Option<String> {
        if let Some(s) = self.seen.get_mut(name) {
            s.last = seq;
            if let Some(w) = workload {
                s.workload = w.index() as u8;
            }
            return None;
        }
        let evicted = (self.seen.len() >= BUDGET)
            .then(|| self.victim(tenant_of))
            .flatten();
        if let Some(old) = &evicted {
            self.seen.remove(old);
        }
        let w = workload.unwrap_or(WorkloadClass::Unknown);
        self.seen.insert(
            name.to_string(),
            Seen {
                workload: w.index() as u8,
                last: seq,
            },
        );
        evicted
    }

    /// The least recently seen job type of the tenant that holds the most.
    fn victim(&self, tenant_of: impl Fn(&str) -> Option<String>) -> Option<String> {
        let mut held: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for name in self.seen.keys() {
            *held.entry(tenant_of(name)).or_default() += 1;
        }
        let most = held.values().copied().max()?;
        self.seen
            .iter()
            .filter(|(n, _)| held[&tenant_of(n)] == most)
            .min_by_key(|(n, s)| (s.last, n.as_str()))
            .map(|(n, _)| n.clone())
    }

    pub fn get(&self, name: &str) -> Option<Seen> {
        self.seen.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_seen_is_evicted_past_the_budget() {
        let mut u = UnlistedJobTypes::default();
        for i in 0..BUDGET {
            assert_eq!(u.touch(&format!("job-{i}"), None, i as u64, |_| None), None);
        }
        // job-0 seen again: job-1 is now the least recently seen.
        assert_eq!(
            u.touch("job-0", Some(WorkloadClass::Training), 10_000, |_| None),
            None
        );
        assert_eq!(
            u.touch("new", None, 10_001, |_| None).as_deref(),
            Some("job-1"),
            "evicts the least recently seen"
        );
        assert_eq!(u.len(), BUDGET);
        assert_eq!(
            u.get("job-0").unwrap().workload_class(),
            WorkloadClass::Training
        );
        assert_eq!(
            u.get("new").unwrap().workload_class(),
            WorkloadClass::Unknown
        );
        assert!(u.get("job-1").is_none());
    }

    #[test]
    fn a_tenant_inventing_job_types_evicts_its_own() {
        let tenant = |n: &str| {
            Some(
                if n.starts_with("flood-") {
                    "students"
                } else {
                    "llm-prod"
                }
                .to_string(),
            )
        };
        let mut u = UnlistedJobTypes::default();
        // llm-prod's 10 job types, seen first (least recently of all).
        for i in 0..10 {
            u.touch(&format!("prod-{i}"), None, i, tenant);
        }
        // The students invent 3 x the budget.
        let mut evicted = Vec::new();
        for i in 0..3 * BUDGET as u64 {
            evicted.extend(u.touch(&format!("flood-{i}"), None, 100 + i, tenant));
        }
        assert_eq!(u.len(), BUDGET);
        assert!(
            evicted.iter().all(|e| e.starts_with("flood-")),
            "{evicted:?}"
        );
        assert!((0..10).all(|i| u.get(&format!("prod-{i}")).is_some()));
        // Without tenants, the least recently seen goes, whoever's it is (as before).
        let mut v = UnlistedJobTypes::default();
        for i in 0..BUDGET as u64 {
            v.touch(&format!("a-{i}"), None, i, |_| None);
        }
        assert_eq!(v.touch("b", None, 9_999, |_| None).as_deref(), Some("a-0"));
    }
}
