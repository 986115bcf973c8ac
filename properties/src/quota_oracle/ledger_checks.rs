//! The oracle's checks of the quota ledger after every step ([`super`] says what they are).
use std::collections::BTreeMap;

use gpu_admission_core::quota::ledger::{self, Entry};
use gpu_admission_policy::quotas::MilliGpus;

use super::{NAMESPACES, ORACLE_BOUNDS, World};

impl World {
    /// The ledgers' invariants: each holds its tier's reservations only, what one namespace's reservations
    /// take from another, and whose the rate limit is.
    pub(super) fn check_ledger(&self) -> Result<(), String> {
        let now = self.now_ms;
        let seen = |u: &str| self.seen_of(u);
        let held = self.held.usage();
        if let Some((tier, e)) = (self.ledgers.iter())
            .find_map(|(tier, es)| Some(tier).zip(es.iter().find(|e| e.tier != *tier)))
        {
            return Err(format!("tier {tier}'s ledger holds {e:?}"));
        }
        let entries: Vec<Entry> = self.ledgers.values().flatten().cloned().collect();
        for b in NAMESPACES {
            let tier = self.labels[b];
            let with = ledger::effective_usage(held, &entries, seen, now, (tier, b));
            for a in NAMESPACES.into_iter().filter(|a| *a != b) {
                let without = |keep: &dyn Fn(&Entry) -> bool| {
                    let kept: Vec<Entry> = entries.iter().filter(|e| keep(e)).cloned().collect();
                    ledger::effective_usage(held, &kept, seen, now, (tier, b))
                };
                let took = with
                    .tier(tier, None)
                    .saturating_sub(without(&|e| e.namespace != a).tier(tier, None));
                // What the namespace reserved under, per tier (a relabel by the platform moves earlier
                // reservations to the new tier along with the namespace).
                let mut shares: BTreeMap<&str, MilliGpus> = BTreeMap::new();
                for (_, _, t, share) in self
                    .reserved
                    .iter()
                    .filter(|(n, at, ..)| *n == a && now - at < ledger::OTHERS_WINDOW_MS)
                {
                    let s = shares.entry(t).or_default();
                    *s = (*s).max(*share);
                }
                let share: MilliGpus = shares.values().fold(0, |a, b| a.saturating_add(*b));
                if took > share {
                    return Err(format!(
                        "{a}'s reservations take {took} milli-GPUs from tier {tier} as {b} sees it, its share is {share}"
                    ));
                }
                let young =
                    without(&|e| e.namespace != a || now - e.at_ms < ledger::OTHERS_WINDOW_MS);
                if young != with {
                    return Err(format!(
                        "{a}'s reservations older than the watch window change what {b} is decided against"
                    ));
                }
            }
            // Its next reservation is written to its tier's ledger, whose entries its limit reads.
            let mut pruned = self.ledgers.get(tier).cloned().unwrap_or_default();
            ledger::prune(&mut pruned, seen, now);
            let own: Vec<Entry> = pruned
                .iter()
                .filter(|e| e.namespace == b)
                .cloned()
                .collect();
            let limited = ledger::limited(&pruned, b, seen, now, &ORACLE_BOUNDS);
            if limited != ledger::limited(&own, b, seen, now, &ORACLE_BOUNDS) {
                return Err(format!(
                    "{b}'s rate limit depends on other namespaces' reservations: {limited:?}"
                ));
            }
        }
        Ok(())
    }
}
