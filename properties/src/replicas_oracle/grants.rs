//! One replica's own grants, as the frontend's `tier_ledger/grants.rs` keeps them, written here on its own:
//! per grant whether its write succeeded, what was drawn from it and each draw's entry, the Pods waiting for
//! its write; each namespace's newest grant; how many Pods each namespace reserved here lately (what the next
//! grant is sized on). Every rule is core's ([`grant::has_room`], and [`super`]'s use of [`grant::pods`],
//! [`grant::view`], [`grant::close_drawn`]); what is kept here is only the bookkeeping.
use std::collections::BTreeMap;

use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{ENTRY_TTL_MS, Entry, grant};

/// A grant this replica wrote, or is writing.
struct OwnGrant {
    grant: Entry,
    /// Whether a write holding it succeeded (until then nothing more is drawn from it).
    written: bool,
    /// Whether nothing more is drawn from it (found full, or its namespace at a `max`): closed at once.
    sealed: bool,
    /// What was drawn from it, per class and in total.
    drawn: Counted,
    /// Each Pod drawn from it, as its own reservation would be (what closing the grant writes).
    draws: Vec<Entry>,
    /// Pods of its namespace that wait for its write, to draw from it then.
    waiting: Vec<usize>,
}

/// Pods one namespace reserved here lately: in the current [`grant::DRAW_MS`] and the one before.
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

/// What drawing a Pod from its namespace's grant did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Draw {
    /// Admitted against this grant (its UID): nothing to write.
    Drew(String),
    /// The namespace's grant is being written: the Pod waits for that write, then is decided again.
    Waits,
    /// No grant of the namespace has room: reserved as without one.
    NoRoom,
}

/// One replica's grants.
#[derive(Default)]
pub(super) struct OwnGrants {
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
    pub(super) fn draws(&self, uid: &str) -> &[Entry] {
        self.by_uid.get(uid).map_or(&[], |g| &g.draws)
    }

    /// Draws Pod `i` (its reservation `pod`) from its namespace's grant; `room`: whether
    /// [`grant::has_room`] is asked (false only for [`super::Variant::Overdraw`]).
    pub(super) fn draw(
        &mut self,
        (i, pod): (usize, &Entry),
        counted: &Counted,
        now_ms: u64,
        room: bool,
    ) -> Draw {
        let Some((uid, g)) = (self.drawing.get(&pod.namespace))
            .and_then(|uid| Some(uid.clone()).zip(self.by_uid.get_mut(uid)))
        else {
            return Draw::NoRoom;
        };
        if !g.written {
            g.waiting.push(i);
            return Draw::Waits;
        }
        let fits = match room {
            true => grant::has_room(&g.grant, &g.drawn, counted, now_ms),
            false => now_ms.saturating_sub(g.grant.at_ms) < grant::DRAW_MS,
        };
        if g.sealed || !fits {
            g.sealed = true;
            return Draw::NoRoom;
        }
        add(&mut g.drawn, counted);
        g.draws.push(pod.clone());
        self.reserved(&pod.namespace, now_ms);
        Draw::Drew(uid)
    }

    /// Takes in a grant decided into the next write, with its first Pod drawn from it.
    pub(super) fn granted(&mut self, grant: Entry, first: Entry, counted: &Counted) {
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
    pub(super) fn reserved(&mut self, namespace: &str, now_ms: u64) {
        let r = self.recent.entry(namespace.to_string()).or_default();
        *r = r.at(now_ms);
        r.now += 1;
    }

    /// How many Pods to ask a grant of `namespace` for: twice what it reserved here in the last
    /// [`grant::DRAW_MS`] or the one before (0 for a namespace without a stream: one Pod's entry).
    pub(super) fn want(&self, namespace: &str, now_ms: u64) -> u32 {
        (self.recent.get(namespace)).map_or(0, |r| {
            let r = r.at(now_ms);
            r.now.max(r.before).saturating_mul(2)
        })
    }

    /// The grants written in `entries` (a successful write's): how many were not written before, and the
    /// Pods waiting for them (decided again, to draw from them).
    pub(super) fn written(&mut self, entries: &[Entry]) -> (usize, Vec<usize>) {
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

    /// Forgets every grant not written (its write went back): how many, and the Pods waiting for them.
    pub(super) fn drop_unwritten(&mut self) -> (usize, Vec<usize>) {
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

    /// Every Pod waiting for a grant's write (a replica that stops answers none of them).
    pub(super) fn take_waiting(&mut self) -> Vec<usize> {
        (self.by_uid.values_mut())
            .flat_map(|g| std::mem::take(&mut g.waiting))
            .collect()
    }

    /// What closing the grant `uid` writes in its place.
    /// Seals `namespace`'s written grants (it is at a `max` in this replica's own view): whether any was not.
    pub(super) fn seal(&mut self, namespace: &str) -> bool {
        let mut sealed = false;
        for g in (self.by_uid.values_mut()).filter(|g| g.grant.namespace == namespace && g.written)
        {
            sealed |= !g.sealed;
            g.sealed = true;
        }
        sealed
    }

    /// Whether the grant `uid` is sealed.
    pub(super) fn is_sealed(&self, uid: &str) -> bool {
        self.by_uid.get(uid).is_some_and(|g| g.sealed)
    }

    pub(super) fn closing(&self, uid: &str) -> Vec<Entry> {
        self.draws(uid).to_vec()
    }

    /// Forgets grants whose draws count no more in any way: past the draw window and an entry's life.
    pub(super) fn forget(&mut self, now_ms: u64) {
        let done = |g: &OwnGrant| {
            g.written && now_ms.saturating_sub(g.grant.at_ms) >= grant::DRAW_MS + ENTRY_TTL_MS
        };
        self.by_uid.retain(|_, g| !done(g));
        self.drawing.retain(|_, uid| self.by_uid.contains_key(uid));
        self.recent
            .retain(|_, r| now_ms.saturating_sub(r.since_ms) < 2 * grant::DRAW_MS);
    }
}
