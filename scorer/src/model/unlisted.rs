//! Job types the policy does not list, learned under a budget.
//!
//! Teams invent job types every week; a job type the policy does not list is learned like a listed one, under
//! its workload class's profile as the prior (from `Observe`'s `workload_class`, else `unknown`). At most
//! [`BUDGET`] of them are kept: learning one more evicts the one seen least recently (by the sequence number
//! of its last observation, so replicas that learned the same observations evict the same one), with its
//! runtime statistics and its pairs. The caller counts evictions (`scorer_unlisted_job_types_evicted_total`).
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
    /// room, if any. A workload class of `None` keeps the one known (else `unknown`).
    pub fn touch(
        &mut self,
        name: &str,
        workload: Option<WorkloadClass>,
        seq: u64,
    ) -> Option<String> {
        if let Some(s) = self.seen.get_mut(name) {
            s.last = seq;
            if let Some(w) = workload {
                s.workload = w.index() as u8;
            }
            return None;
        }
        let evicted = (self.seen.len() >= BUDGET)
            .then(|| {
                self.seen
                    .iter()
                    .min_by_key(|(n, s)| (s.last, n.as_str()))
                    .map(|(n, _)| n.clone())
            })
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
            assert_eq!(u.touch(&format!("job-{i}"), None, i as u64), None);
        }
        // job-0 seen again: job-1 is now the least recently seen.
        assert_eq!(
            u.touch("job-0", Some(WorkloadClass::Training), 10_000),
            None
        );
        assert_eq!(
            u.touch("new", None, 10_001).as_deref(),
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
}
