//! The oracle's invariants after every step ([`super`] says what they are): the truth is the model's Pods,
//! the limits are read from the policy.
use gpu_admission_core::quota::ledger::{self, Entry, Seen};
use gpu_admission_core::quota::{self, Usage};
use gpu_admission_policy::quotas::{Limits, MilliGpus};

use super::{CLASS, Checks, NAMESPACES, TIER, World, uid};

impl World {
    /// The invariants at now.
    pub(super) fn check(&self) -> Result<(), String> {
        self.check_max()?;
        match self.checks {
            Checks::All => self.check_counted(),
            Checks::MaxOnly => Ok(()),
        }
    }

    /// What the held Pods take, in the tier and in each namespace's share, is within every `max`.
    fn check_max(&self) -> Result<(), String> {
        let tq = quota::tier_quota(&self.policy, TIER).ok_or("no quota for the tier")?;
        let class = self.policy.class_index(CLASS).ok_or("no class")?;
        let mut held = [0; NAMESPACES.len()];
        for p in self.pods.iter().filter(|p| p.held(self.now_ms)) {
            held[p.ns] += p.milli;
        }
        // One class: what a scope holds of it is its total too.
        let over = |limits: &Limits, holds: MilliGpus| {
            [limits.class(class), limits.total]
                .into_iter()
                .flatten()
                .filter_map(|l| l.max)
                .find(|max| holds > *max)
        };
        let tier: MilliGpus = held.iter().sum();
        if let Some(max) = over(&tq.limits, tier) {
            return Err(format!(
                "tier {TIER} holds {tier} milli-GPUs, over its max {max} ({held:?} per namespace)"
            ));
        }
        for (n, ns) in NAMESPACES.iter().enumerate() {
            if let Some(max) = tq.namespace(ns).and_then(|q| over(&q.limits, held[n])) {
                return Err(format!(
                    "{ns} holds {} milli-GPUs, over its share's max {max}",
                    held[n]
                ));
            }
        }
        Ok(())
    }

    /// Every held Pod is, for every replica running, in its Pod watch, or counted by the newest ledger for
    /// the other namespaces (core's rule, [`counts_for_others`]): its entry, or the grant it was drawn from
    /// (for the grant's own replica, which reads the grant as its draws: its draw's entry).
    fn check_counted(&self) -> Result<(), String> {
        let now = self.now_ms;
        let newest = &self.ledger[self.ledger.len() - 1];
        let in_newest = |uid: &str| newest.iter().find(|e| e.uid == uid);
        for (i, p) in self.pods.iter().enumerate().filter(|(_, p)| p.held(now)) {
            let uid = uid(i);
            if in_newest(&uid).is_some_and(|e| counts_for_others(e, now)) {
                continue;
            }
            let grant = (p.drawn.as_ref()).and_then(|(o, g)| Some(*o).zip(in_newest(g)));
            for (r, rep) in self.replicas.iter().enumerate() {
                if rep.stopped || matches!(p.seen_by(r, now), Seen::Since { .. }) {
                    continue;
                }
                let counted = grant.is_some_and(|(o, g)| match o == r {
                    false => counts_for_others(g, now),
                    true => (rep.grants.draws(&g.uid).iter())
                        .any(|d| d.uid == uid && counts_for_others(d, now)),
                });
                if !counted {
                    return Err(format!(
                        "pod-{i} is held, replica r{r}'s watch has not counted it and the ledger no longer \
                         counts it for the other namespaces"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Whether `e` counts, by core's rule ([`ledger::effective_usage`]), for a decision about a namespace of its
/// tier other than its own (none of the model's).
fn counts_for_others(e: &Entry, now_ms: u64) -> bool {
    let usage = ledger::effective_usage(
        &Usage::default(),
        [e],
        |_| Seen::No,
        now_ms,
        (TIER, "another-namespace"),
    );
    usage.tier(TIER, None) > 0
}
