//! One replica's side of the ledger, as the frontend's `tier_ledger.rs` keeps it: the version it knows, the
//! batch of reservations not yet written and the version they build on, the write in flight; and the
//! writes, answers and ledger watch deliveries that move them ([`super`] says how).
use gpu_admission_core::quota::ledger::Entry;

use super::{Variant, World};

/// Which ledger version a batch was decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    /// This version (0: no object yet).
    Known(u64),
    /// The one the write in flight makes: the batch built on its entries.
    AfterWrite,
}

/// A write the apiserver has decided and whose answer has not arrived.
pub(super) struct InFlight {
    pub(super) started_ms: u64,
    /// The version it was made on.
    base: u64,
    /// The version it made (`None`: a conflict), and its entries.
    made: Option<u64>,
    entries: Vec<Entry>,
    /// The Pods whose reservations it carries.
    waiting: Vec<usize>,
}

/// One replica's ledger state.
#[derive(Default)]
pub(super) struct Replica {
    /// The version it knows and its entries.
    known: (u64, Vec<Entry>),
    /// The reservations decided and not written yet: the base and the entries the next write carries.
    batch: Option<(Base, Vec<Entry>)>,
    /// The Pods whose reservations the batch carries.
    pub(super) waiting: Vec<usize>,
    pub(super) in_flight: Option<InFlight>,
    /// The last version its ledger watch delivered.
    watched: u64,
}

impl Replica {
    /// What a decision reads: the batch, else the version known.
    pub(super) fn known(&self) -> &[Entry] {
        self.batch.as_ref().map_or(&self.known.1, |(_, e)| e)
    }

    /// The entries a reservation is taken into: the batch, made from the version known if there is none.
    pub(super) fn pending(&mut self) -> &mut Vec<Entry> {
        let known = &self.known;
        &mut self
            .batch
            .get_or_insert_with(|| (Base::Known(known.0), known.1.clone()))
            .1
    }

    /// Sends a batch not written yet back (none while a write is in flight, whose answer settles it).
    fn overtaken(&mut self) -> Vec<usize> {
        if !matches!(self.batch, Some((Base::Known(_), _))) {
            return Vec::new();
        }
        self.batch = None;
        std::mem::take(&mut self.waiting)
    }
}

impl World {
    /// Replica `r` writes its batch on the version it was decided on, if it has reservations and no write in
    /// flight: the apiserver stores it if that version is the newest (any version for
    /// [`Variant::BlindWrites`]), else refuses it (a conflict, learnt with the answer).
    pub(super) fn start_write(&mut self, r: usize) {
        let latest = self.latest();
        let rep = &mut self.replicas[r];
        if rep.in_flight.is_some() {
            return;
        }
        if rep.waiting.is_empty() {
            if matches!(rep.batch, Some((Base::Known(_), _))) {
                rep.batch = None;
            }
            return;
        }
        let Some((Base::Known(base), entries)) = rep.batch.clone() else {
            return;
        };
        rep.batch = Some((Base::AfterWrite, entries.clone()));
        let made = (base == latest || self.variant == Variant::BlindWrites).then(|| {
            self.ledger.push(entries.clone());
            latest + 1
        });
        if made.is_none() {
            self.ran.conflicts += 1;
        }
        rep.in_flight = Some(InFlight {
            started_ms: self.now_ms,
            base,
            made,
            entries,
            waiting: std::mem::take(&mut rep.waiting),
        });
    }

    /// Replica `r`'s write in flight answers: written (its Pods admitted; the next batch builds on the
    /// version it made, or goes back if the ledger watch already brought a later one), or a conflict (the
    /// newer version read unless the watch brought one after the write's base; every reservation of the
    /// write and of the batch built on it decided again).
    pub(super) fn answer(&mut self, r: usize) -> Result<(), String> {
        let latest = self.latest();
        let rep = &mut self.replicas[r];
        let Some(write) = rep.in_flight.take() else {
            return Ok(());
        };
        let back = match write.made {
            Some(made) if rep.known.0 > made => {
                let back = match rep.batch {
                    Some((Base::AfterWrite, _)) => {
                        rep.batch = None;
                        std::mem::take(&mut rep.waiting)
                    }
                    _ => Vec::new(),
                };
                self.admit(write.waiting);
                back
            }
            Some(made) => {
                if let Some((base @ Base::AfterWrite, _)) = &mut rep.batch {
                    *base = Base::Known(made);
                }
                rep.known = (made, write.entries);
                self.admit(write.waiting);
                Vec::new()
            }
            None => {
                if rep.known.0 <= write.base {
                    rep.known = (latest, self.ledger[latest as usize].clone());
                }
                rep.batch = None;
                let mut back = write.waiting;
                back.append(&mut rep.waiting);
                back
            }
        };
        self.decide_again(r, back)
    }

    /// Replica `r`'s ledger watch delivers the next version (`newest`: skips to the newest, as a relist
    /// does), taken if later than the one known; a batch not written yet goes back. The version delivered.
    pub(super) fn deliver_ledger(&mut self, r: usize, newest: bool) -> Result<u64, String> {
        let latest = self.latest();
        let rep = &mut self.replicas[r];
        if rep.watched >= latest {
            return Ok(rep.watched);
        }
        rep.watched = if newest { latest } else { rep.watched + 1 };
        let at = rep.watched;
        if at <= rep.known.0 {
            return Ok(at);
        }
        rep.known = (at, self.ledger[at as usize].clone());
        let back = rep.overtaken();
        if !back.is_empty() {
            self.ran.overtaken += 1;
        }
        self.decide_again(r, back)?;
        Ok(at)
    }
}
