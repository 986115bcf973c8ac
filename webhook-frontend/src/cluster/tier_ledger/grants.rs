//! The grants this replica wrote in one tier's ledger ([`gpu_admission_core::quota::ledger::grant`]): what
//! it drew from each, which namespace draws from which, who waits for a grant's write to draw from it, and
//! how many Pods each namespace reserved here lately (what the next grant is sized on). No I/O.
use std::collections::BTreeMap;

use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{ENTRY_TTL_MS, Entry, grant};

use super::{Flushed, Waiting};

/// A grant this replica wrote, or is writing.
struct OwnGrant {
    grant: Entry,
    /// Whether its write succeeded (until then nothing more is drawn from it).
    written: bool,
    /// Whether nothing more is drawn from it (full, or its namespace at a `max`): closed at the next write.
    sealed: bool,
    /// What was drawn from it, per class and in total.
    drawn: Counted,
    /// Each Pod drawn from it, as its own reservation would be (what closing the grant writes).
    draws: Vec<Entry>,
    /// Reservations of its namespace that wait for its write, to draw from it then.
    waiting: Vec<Waiting>,
}

/// Pods one namespace reserved in this replica lately: in the current [`grant::DRAW_MS`] and the one
/// before.
#[derive(Default, Clone, Copy)]
struct Recent {
    since_ms: u64,
    now: u32,
    before: u32,
}

/// What drawing a Pod from its namespace's grant did.
pub(crate) enum Draw {
    /// Admitted against the grant: nothing to write.
    Drew,
    /// The namespace's grant is being written: decide again once it is (the receiver says when).
    Wait(tokio::sync::oneshot::Receiver<Flushed>),
    /// No grant of the namespace has room: reserve as without one.
    NoRoom,
}

#[derive(Default)]
pub(crate) struct OwnGrants {
    by_uid: BTreeMap<String, OwnGrant>,
    /// Each namespace's newest grant.
    drawing: BTreeMap<String, String>,
    recent: BTreeMap<String, Recent>,
}

fn add(to: &mut Counted, c: &Counted) {
    for (class, m) in &c.classes {
        let v = to.classes.entry(class.clone()).or_default();
        *v = v.saturating_add(*m);
    }
    to.total = to.total.saturating_add(c.total);
}

impl OwnGrants {
    /// What was drawn from the grant `uid` (none if it is not this replica's).
    pub(crate) fn draws(&self, uid: &str) -> &[Entry] {
        self.by_uid.get(uid).map_or(&[], |g| &g.draws)
    }

    /// Draws `pod` (a Pod's reservation: its UID, namespace and count) from its namespace's grant.
    pub(crate) fn draw(&mut self, pod: &Entry, counted: &Counted, now_ms: u64) -> Draw {
        let Some(g) = (self.drawing.get(&pod.namespace)).and_then(|uid| self.by_uid.get_mut(uid))
        else {
            return Draw::NoRoom;
        };
        if !g.written {
            let (tx, rx) = tokio::sync::oneshot::channel();
            g.waiting.push(tx);
            return Draw::Wait(rx);
        }
        if g.sealed || !grant::has_room(&g.grant, &g.drawn, counted, now_ms) {
            g.sealed = true;
            return Draw::NoRoom;
        }
        add(&mut g.drawn, counted);
        g.draws.push(pod.clone());
        self.reserved(&pod.namespace, now_ms);
        Draw::Drew
    }

    /// Takes in a grant decided into the next write, with its first Pod drawn from it.
    pub(crate) fn granted(&mut self, grant: Entry, first: Entry, counted: &Counted) {
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
    pub(crate) fn reserved(&mut self, namespace: &str, now_ms: u64) {
        if !self.recent.contains_key(namespace) {
            self.recent.insert(namespace.to_string(), Recent::default());
        }
        if let Some(r) = self.recent.get_mut(namespace) {
            *r = r.at(now_ms);
            r.now += 1;
        }
    }

    /// How many Pods to ask a grant of `namespace` for: twice what it reserved here in the last
    /// [`grant::DRAW_MS`] or the one before (0 for a namespace without a stream: one Pod's entry).
    pub(crate) fn want(&self, namespace: &str, now_ms: u64) -> u32 {
        (self.recent.get(namespace)).map_or(0, |r| {
            let r = r.at(now_ms);
            r.now.max(r.before).saturating_mul(2)
        })
    }

    /// The grants written in `entries` (a write's): their waiting reservations go back to draw from them.
    pub(crate) fn written(&mut self, entries: &[Entry]) -> Vec<Waiting> {
        let mut back = Vec::new();
        for e in entries.iter().filter(|e| e.is_grant()) {
            if let Some(g) = self.by_uid.get_mut(&e.uid)
                && !g.written
            {
                g.written = true;
                back.append(&mut g.waiting);
            }
        }
        back
    }

    /// Every grant not written: its write went back (its first Pod is decided again), so are its waiting
    /// reservations.
    pub(crate) fn drop_unwritten(&mut self) -> Vec<Waiting> {
        let mut back = Vec::new();
        self.by_uid.retain(|_, g| {
            if !g.written {
                back.append(&mut g.waiting);
            }
            g.written
        });
        self.drawing.retain(|_, uid| self.by_uid.contains_key(uid));
        back
    }

    /// Seals `namespace`'s grants: it is at a `max` in this replica's own view, so nothing more is drawn
    /// from them, and closing them gives their headroom back to the other replicas at once.
    pub(crate) fn seal(&mut self, namespace: &str) -> bool {
        let mut sealed = false;
        for g in (self.by_uid.values_mut()).filter(|g| g.grant.namespace == namespace && g.written)
        {
            sealed |= !g.sealed;
            g.sealed = true;
        }
        sealed
    }

    /// Whether the grant `uid` is sealed.
    pub(crate) fn is_sealed(&self, uid: &str) -> bool {
        self.by_uid.get(uid).is_some_and(|g| g.sealed)
    }

    /// What closing the grant `uid` writes in its place.
    pub(crate) fn closing(&self, uid: &str) -> Vec<Entry> {
        self.draws(uid).to_vec()
    }

    /// Forgets grants whose draws count no more in any way: past the draw window and an entry's life, so an
    /// unseen draw (a Pod never stored) has expired as its own entry would have.
    pub(crate) fn forget(&mut self, now_ms: u64) {
        let done = |g: &OwnGrant| {
            g.written && now_ms.saturating_sub(g.grant.at_ms) >= grant::DRAW_MS + ENTRY_TTL_MS
        };
        self.by_uid.retain(|_, g| !done(g));
        self.drawing.retain(|_, uid| self.by_uid.contains_key(uid));
        self.recent
            .retain(|_, r| now_ms.saturating_sub(r.since_ms) < 2 * grant::DRAW_MS);
    }
}

impl Recent {
    /// As of `now_ms`: the windows moved on.
    fn at(self, now_ms: u64) -> Recent {
        let elapsed = now_ms.saturating_sub(self.since_ms);
        match elapsed {
            e if e < grant::DRAW_MS => self,
            e if e < 2 * grant::DRAW_MS => Recent {
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

#[cfg(test)]
mod tests;
