//! The grants one replica wrote in one tier's ledger ([`OwnGrants`]): what it drew from each, which
//! namespace draws from which, who waits (`W`: the frontend's reservations, the replicas oracle's Pods) for a
//! grant's write to draw from it, which grants are sealed, and how many Pods each namespace reserved in the
//! replica lately (what the next grant is sized on). Pure bookkeeping: the frontend and the replicas oracle
//! keep the same.
use std::collections::BTreeMap;

use super::super::{ENTRY_TTL_MS, Entry};
use super::DRAW_MS;
use crate::quota::demand::Counted;

/// A grant this replica wrote, or is writing.
struct OwnGrant<W> {
    grant: Entry,
    /// Whether a write holding it succeeded (until then nothing more is drawn from it).
    written: bool,
    /// Whether nothing more is drawn from it (found full, or its namespace at a `max`): closed at once.
    sealed: bool,
    /// What was drawn from it, per class and in total.
    drawn: Counted,
    /// Each Pod drawn from it, as its own reservation would be (what closing the grant writes).
    draws: Vec<Entry>,
    /// Reservations of its namespace that wait for its write, to draw from it then.
    waiting: Vec<W>,
}

/// Pods one namespace reserved in this replica lately: in the current [`DRAW_MS`] and the one before.
#[derive(Default, Clone, Copy)]
struct Recent {
    since_ms: u64,
    now: u32,
    before: u32,
}

impl Recent {
    /// As of `now_ms`: the windows moved on.
    fn at(self, now_ms: u64) -> Recent {
        match now_ms.saturating_sub(self.since_ms) {
            e if e < DRAW_MS => self,
            e if e < 2 * DRAW_MS => Recent {
                since_ms: now_ms,
                now: 0,
                before: self.now,
            },
            _ => Recent {
                since_ms: now_ms,
                now: 0,
                before: 0,
            },
        }
    }
}

/// What drawing a Pod from its namespace's grant did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Draw {
    /// Admitted against this grant (its UID): nothing to write.
    Drew(String),
    /// The namespace's grant is being written: the waiter was kept, to be given back once it is.
    Waits,
    /// No grant of the namespace has room: reserve as without one.
    NoRoom,
}

/// One replica's grants in one tier's ledger.
pub struct OwnGrants<W> {
    by_uid: BTreeMap<String, OwnGrant<W>>,
    /// Each namespace's newest grant.
    drawing: BTreeMap<String, String>,
    recent: BTreeMap<String, Recent>,
}

impl<W> Default for OwnGrants<W> {
    fn default() -> Self {
        Self {
            by_uid: BTreeMap::new(),
            drawing: BTreeMap::new(),
            recent: BTreeMap::new(),
        }
    }
}

fn add(to: &mut Counted, c: &Counted) {
    for (class, m) in &c.classes {
        let v = to.classes.entry(class.clone()).or_default();
        *v = v.saturating_add(*m);
    }
    to.total = to.total.saturating_add(c.total);
}

impl<W> OwnGrants<W> {
    /// What was drawn from the grant `uid` (none if it is not this replica's).
    pub fn draws(&self, uid: &str) -> &[Entry] {
        self.by_uid.get(uid).map_or(&[], |g| &g.draws)
    }

    /// Draws `pod` (a Pod's reservation: its UID, namespace and count) from its namespace's grant if `fits`
    /// (the grant, what was drawn from it) says it has room ([`super::has_room`]); a grant being written keeps
    /// `waiter`; a grant without room is sealed.
    pub fn draw(
        &mut self,
        (pod, counted): (&Entry, &Counted),
        now_ms: u64,
        fits: impl FnOnce(&Entry, &Counted) -> bool,
        waiter: W,
    ) -> Draw {
        let Some((uid, g)) = (self.drawing.get(&pod.namespace))
            .and_then(|uid| Some(uid.clone()).zip(self.by_uid.get_mut(uid)))
        else {
            return Draw::NoRoom;
        };
        if !g.written {
            g.waiting.push(waiter);
            return Draw::Waits;
        }
        if g.sealed || !fits(&g.grant, &g.drawn) {
            g.sealed = true;
            return Draw::NoRoom;
        }
        add(&mut g.drawn, counted);
        g.draws.push(pod.clone());
        self.reserved(&pod.namespace, now_ms);
        Draw::Drew(uid)
    }

    /// Takes in a grant decided into the next write, with its first Pod drawn from it.
    pub fn granted(&mut self, grant: Entry, first: Entry, counted: &Counted) {
        self.drawing
            .insert(grant.namespace.clone(), grant.uid.clone());
        self.by_uid.insert(
            grant.uid.clone(),
            OwnGrant {
                grant,
                written: false,
                sealed: false,
                drawn: counted.clone(),
                draws: vec![first],
                waiting: Vec::new(),
            },
        );
    }

    /// Counts a Pod of `namespace` reserved here at `now_ms` (drawn, or written on its own).
    pub fn reserved(&mut self, namespace: &str, now_ms: u64) {
        if !self.recent.contains_key(namespace) {
            self.recent.insert(namespace.to_string(), Recent::default());
        }
        if let Some(r) = self.recent.get_mut(namespace) {
            *r = r.at(now_ms);
            r.now += 1;
        }
    }

    /// How many Pods to ask a grant of `namespace` for: twice what it reserved here in the last
    /// [`DRAW_MS`] or the one before (0 for a namespace without a stream: one Pod's entry).
    pub fn want(&self, namespace: &str, now_ms: u64) -> u32 {
        (self.recent.get(namespace)).map_or(0, |r| {
            let r = r.at(now_ms);
            r.now.max(r.before).saturating_mul(2)
        })
    }

    /// The grants written in `entries` (a successful write's): how many were not written before, and the
    /// waiters they kept (to be decided again, to draw from them).
    pub fn written(&mut self, entries: &[Entry]) -> (usize, Vec<W>) {
        let (mut newly, mut back) = (0, Vec::new());
        for e in entries.iter().filter(|e| e.is_grant()) {
            if let Some(g) = self.by_uid.get_mut(&e.uid)
                && !g.written
            {
                g.written = true;
                newly += 1;
                back.append(&mut g.waiting);
            }
        }
        (newly, back)
    }

    /// Forgets every grant not written (its write went back, its first Pod decided again): how many, and
    /// their waiters.
    pub fn drop_unwritten(&mut self) -> (usize, Vec<W>) {
        let (mut dropped, mut back) = (0, Vec::new());
        self.by_uid.retain(|_, g| {
            if !g.written {
                dropped += 1;
                back.append(&mut g.waiting);
            }
            g.written
        });
        self.drawing.retain(|_, uid| self.by_uid.contains_key(uid));
        (dropped, back)
    }

    /// Every waiter of every grant (a replica that stops answers none of them).
    pub fn take_waiting(&mut self) -> Vec<W> {
        (self.by_uid.values_mut())
            .flat_map(|g| std::mem::take(&mut g.waiting))
            .collect()
    }

    /// Seals `namespace`'s written grants (it is at a `max` in this replica's own view: nothing more is
    /// drawn from them, and closing them gives their headroom back to the other replicas at once); whether
    /// any was not sealed yet.
    pub fn seal(&mut self, namespace: &str) -> bool {
        let mut sealed = false;
        for g in (self.by_uid.values_mut()).filter(|g| g.grant.namespace == namespace && g.written)
        {
            sealed |= !g.sealed;
            g.sealed = true;
        }
        sealed
    }

    /// Whether the grant `uid` is sealed.
    pub fn is_sealed(&self, uid: &str) -> bool {
        self.by_uid.get(uid).is_some_and(|g| g.sealed)
    }

    /// What closing the grant `uid` writes in its place ([`super::close_drawn`]).
    pub fn closing(&self, uid: &str) -> Vec<Entry> {
        self.draws(uid).to_vec()
    }

    /// Forgets grants whose draws count no more in any way: past the draw window and an entry's life, so an
    /// unseen draw (a Pod never stored) has expired as its own entry would have.
    pub fn forget(&mut self, now_ms: u64) {
        let done = |g: &OwnGrant<W>| {
            g.written && now_ms.saturating_sub(g.grant.at_ms) >= DRAW_MS + ENTRY_TTL_MS
        };
        self.by_uid.retain(|_, g| !done(g));
        self.drawing.retain(|_, uid| self.by_uid.contains_key(uid));
        self.recent
            .retain(|_, r| now_ms.saturating_sub(r.since_ms) < 2 * DRAW_MS);
    }
}

#[cfg(test)]
mod tests;
