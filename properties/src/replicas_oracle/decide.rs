//! A replica's decision of a Pod, as the frontend's `usage/reserve.rs` `attempt` makes it, with core's rules
//! only: [`ledger::effective_usage`] over its own Pod watch and its entries as [`grant::view`] reads them,
//! [`quota::decide`]; refused over a `max` unless it stands better without other replicas' grants
//! ([`grant::refusal`]: then held, decided again [`GRANT_POLL_MS`] later); else drawn from its namespace's written grant with room
//! ([`grant::has_room`]), or waiting for that grant's write, or taken into the batch
//! ([`ledger::plan_in`]) as a grant [`grant::pods`] sizes (its expired grants closed in the same batch,
//! [`grant::close_drawn`]) or as its own entry.
use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{self, Entry, Planned, Seen, grant};
use gpu_admission_core::quota::{self, Standing, Usage};

use super::{NAMESPACES, ORACLE_BOUNDS, State, TIER, Variant, World, seen, uid};
use gpu_admission_core::quota::ledger::grant::Refusal;
use gpu_admission_core::quota::ledger::grant::own::Draw;

/// How often a Pod other replicas' grants keep over a `max` is decided again (the frontend's poll).
pub const GRANT_POLL_MS: u64 = 100;

impl World {
    /// Replica `r`'s usage for a decision about Pod `i`: its Pod watch and the entries `keep` keeps of what
    /// it reads.
    fn usage_for(&self, r: usize, i: usize, keep: impl Fn(&Entry) -> bool) -> Usage {
        let now = self.now_ms;
        let plain = |e: &Entry| {
            let mut e = e.clone();
            e.granted_to = None;
            e
        };
        let entries: Vec<Entry> = (self.replicas[r].view())
            .map(|e| match self.variant {
                Variant::GrantAsEntry => plain(e),
                _ => e.clone(),
            })
            .filter(|e| keep(e))
            .collect();
        let seen = |u: &str| seen(&self.pods, r, now, u);
        let ns = NAMESPACES[self.pods[i].ns];
        ledger::effective_usage(&self.watched(r), &entries, seen, now, (TIER, ns))
    }

    /// Pod `i`'s standing over `usage`, `None` over a `max` (refused) or with no quota.
    fn standing(&self, i: usize, usage: &Usage) -> Option<Standing> {
        let (ns, counted) = (NAMESPACES[self.pods[i].ns], self.pods[i].counted());
        quota::decide(&self.policy, TIER, ns, &counted, usage)
            .map(|d| d.standing)
            .filter(|s| *s != Standing::OverMax)
    }

    /// Whether a held Pod of another namespace counts for replica `r` through the ledger only.
    fn through_ledger(&self, r: usize, i: usize) -> bool {
        let (now, rep) = (self.now_ms, &self.replicas[r]);
        (self.pods.iter().enumerate()).any(|(j, p)| {
            p.ns != self.pods[i].ns
                && p.held(now)
                && p.seen_by(r, now) == Seen::No
                && (rep.known().iter())
                    .any(|e| e.uid == uid(j) && now - e.at_ms < ledger::OTHERS_WINDOW_MS)
        })
    }

    /// Replica `r` decides Pod `i` (its namespace, its size) at now with core's rules: drawn, waiting for
    /// its grant's write, into its batch, held by other replicas' grants, or refused.
    pub(super) fn decide(&mut self, r: usize, i: usize) -> Result<&'static str, String> {
        let now = self.now_ms;
        self.pods[i].drawn = None;
        let rep = &mut self.replicas[r];
        rep.grants.forget(now);
        rep.pending();
        let mut usage = self.usage_for(r, i, |_| true);
        self.ran.through_ledger += usize::from(self.through_ledger(r, i));
        let ns = NAMESPACES[self.pods[i].ns];
        if quota::decide(&self.policy, TIER, ns, &self.pods[i].counted(), &usage).is_none() {
            return Err(format!("no quota applies to {ns}"));
        }
        if self.standing(i, &usage).is_none() {
            // At a `max` in its view: the replica's grants of the namespace go back at once (the frontend's
            // seal).
            let rep = &mut self.replicas[r];
            if rep.grants.seal(ns) {
                rep.close_drawn(now);
                self.ran.sealed += 1;
            }
            // Core's rule: a Pod that stands better without other replicas' grants is held, not refused.
            let (mut without, rep) = (None, &self.replicas[r]);
            let refusal = grant::refusal(Standing::OverMax, &rep.me, rep.view(), |keep| {
                let usage = self.usage_for(r, i, keep);
                let standing = self.standing(i, &usage);
                without = Some(usage);
                standing
            });
            match (refusal, without) {
                // AdmitOverGrants (a negative control) admits over the usage without them instead.
                (Refusal::HeldByGrants, Some(without))
                    if self.variant == Variant::AdmitOverGrants =>
                {
                    usage = without;
                }
                (Refusal::HeldByGrants, _) => {
                    self.ran.held_by_grants += 1;
                    self.pods[i].state = State::Held { r, since_ms: now };
                    return Ok("held by other replicas' grants");
                }
                (Refusal::Refused, _) => {
                    self.ran.over_max += 1;
                    self.pods[i].state = State::Refused;
                    return Ok("over max");
                }
            }
        }
        let counted = self.pods[i].counted();
        let entry = Entry::new(&uid(i), TIER, ns, &counted, now);
        let room = self.variant != Variant::Overdraw;
        let rep = &mut self.replicas[r];
        // Overdraw (a negative control) draws within the window whatever the grant's room.
        let fits = |g: &Entry, drawn: &Counted| match room {
            true => grant::has_room(g, drawn, &counted, now),
            false => now.saturating_sub(g.at_ms) < grant::DRAW_MS,
        };
        match rep.grants.draw((&entry, &counted), now, fits, i) {
            Draw::Drew(grant) => {
                self.ran.draws += 1;
                self.pods[i].drawn = Some((r, grant));
                self.pods[i].decided_ms = now;
                self.admit(vec![i]);
                Ok("drawn from its grant")
            }
            Draw::Waits => {
                self.ran.waited += 1;
                self.pods[i].state = State::Reserved;
                Ok("waits for its grant's write")
            }
            Draw::NoRoom => {
                let want = rep.grants.want(ns, now);
                let standing_of = |u: &Usage| self.standing(i, u);
                let pods = grant::pods(&usage, (TIER, ns, &counted), want, standing_of);
                self.plan_reservation(r, (i, entry), pods, &counted)
            }
        }
    }

    /// Takes Pod `i`'s reservation into replica `r`'s batch: a grant of `pods` Pods of its size with it
    /// drawn from it, or its own entry when `pods` is 1; `r`'s grants past their draw window closed in the
    /// same batch.
    fn plan_reservation(
        &mut self,
        r: usize,
        (i, entry): (usize, Entry),
        pods: u32,
        counted: &Counted,
    ) -> Result<&'static str, String> {
        let now = self.now_ms;
        let rep = &mut self.replicas[r];
        rep.close_drawn(now);
        let ns = entry.namespace.clone();
        let reserving = match pods {
            1 => entry.clone(),
            _ => {
                let uid = format!("grant-{}-{}", rep.me, rep.grants_made);
                rep.grants_made += 1;
                Entry::grant(&uid, (TIER, &ns, counted), pods, &rep.me, now)
            }
        };
        let seen = |u: &str| seen(&self.pods, r, now, u);
        match ledger::plan_in(
            rep.pending(),
            reserving.clone(),
            false,
            seen,
            now,
            &ORACLE_BOUNDS,
        ) {
            Planned::Written => {}
            Planned::Limited(_) => {
                self.ran.limited += 1;
                self.pods[i].state = State::Refused;
                return Ok("limited");
            }
            Planned::NameTaken => return Err("a unique name taken".into()),
        }
        let outcome = if reserving.is_grant() {
            self.pods[i].drawn = Some((r, reserving.uid.clone()));
            rep.grants.granted(reserving, entry, counted);
            "reserved, as the first Pod of a grant"
        } else {
            "reserved"
        };
        rep.grants.reserved(&ns, now);
        rep.waiting.push(i);
        rep.timer_from = now;
        self.pods[i].decided_ms = now;
        self.pods[i].state = State::Reserved;
        Ok(outcome)
    }

    /// Pods sent back to replica `r`: each decided again at once.
    pub(super) fn decide_again(&mut self, r: usize, back: Vec<usize>) -> Result<(), String> {
        for i in back {
            let outcome = self.decide(r, i)?;
            self.trace
                .push(format!("    r{r} decides pod-{i} again: {outcome}"));
        }
        Ok(())
    }

    /// Held Pod `i` is decided again by the replica holding it (not answered if that replica stopped).
    pub(super) fn poll_held(&mut self, i: usize) -> Result<(), String> {
        let State::Held { r, .. } = self.pods[i].state else {
            return Ok(());
        };
        self.decide_again(r, vec![i])
    }
}
