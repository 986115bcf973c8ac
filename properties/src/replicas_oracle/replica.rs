//! One replica's side of the ledger, as the frontend's `tier_ledger.rs` keeps it: the version it knows, the
//! batch of reservations not yet written and the version they build on, the write in flight, its own grants
//! ([`super::grants`]); and the writes, answers, ledger watch deliveries and the writer's close timer that
//! move them ([`super`] says how).
use gpu_admission_core::quota::ledger::{Entry, grant};

use super::{State, Variant, World};
use gpu_admission_core::quota::ledger::grant::own::OwnGrants;

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
    /// How many of the replica's grants it closes.
    closing: usize,
}

/// One replica's ledger state.
pub(super) struct Replica {
    /// Its name: what its grants are granted to.
    pub(super) me: String,
    /// The version it knows and its entries.
    known: (u64, Vec<Entry>),
    /// The reservations decided and not written yet: the base and the entries the next write carries.
    batch: Option<(Base, Vec<Entry>)>,
    /// The Pods whose reservations the batch carries.
    pub(super) waiting: Vec<usize>,
    /// How many of its grants the batch closes (written even if no reservation waits for it).
    closing: usize,
    pub(super) in_flight: Option<InFlight>,
    /// The last version its ledger watch delivered.
    watched: u64,
    pub(super) grants: OwnGrants<usize>,
    /// Grants it made (their UIDs' counter).
    pub(super) grants_made: usize,
    /// When its writer last started waiting (its close timer waits at least [`super::CLOSE_RETRY_MS`]).
    pub(super) timer_from: u64,
    /// Whether it stopped (crashed): it decides, writes and answers nothing more.
    pub(super) stopped: bool,
}

impl Replica {
    pub(super) fn new(r: usize, now_ms: u64) -> Self {
        Replica {
            me: format!("r{r}"),
            known: (0, Vec::new()),
            batch: None,
            waiting: Vec::new(),
            closing: 0,
            in_flight: None,
            watched: 0,
            grants: OwnGrants::default(),
            grants_made: 0,
            timer_from: now_ms,
            stopped: false,
        }
    }

    /// What a decision reads: the batch, else the version known.
    pub(super) fn known(&self) -> &[Entry] {
        self.batch.as_ref().map_or(&self.known.1, |(_, e)| e)
    }

    /// What a decision reads with its own grants as what it drew from them ([`grant::view`]).
    pub(super) fn view(&self) -> impl Iterator<Item = &Entry> {
        grant::view(self.known(), &self.me, |uid| self.grants.draws(uid))
    }

    /// The entries a reservation is taken into: the batch, made from the version known if there is none.
    pub(super) fn pending(&mut self) -> &mut Vec<Entry> {
        let known = &self.known;
        &mut self
            .batch
            .get_or_insert_with(|| (Base::Known(known.0), known.1.clone()))
            .1
    }

    /// Closes its grants past their draw window, or sealed, at `now_ms` in the next write
    /// ([`grant::close_drawn`]).
    pub(super) fn close_drawn(&mut self, now_ms: u64) {
        let mut entries = std::mem::take(self.pending());
        let me = self.me.clone();
        let mine = |entries: &[Entry]| entries.iter().filter(|e| e.is_grant_to(&me)).count();
        let before = mine(&entries);
        let grants = &self.grants;
        let rules = (
            |uid: &str| grants.closing(uid),
            |uid: &str| grants.is_sealed(uid),
        );
        grant::close_drawn(&mut entries, &self.me, rules, now_ms);
        self.closing += before - mine(&entries);
        *self.pending() = entries;
    }

    /// When its first grant in what a decision reads is to be closed: at the end of its draw window, or at
    /// once when sealed.
    pub(super) fn next_close(&self) -> Option<u64> {
        (self.known().iter())
            .filter(|e| e.is_grant_to(&self.me))
            .map(|e| match self.grants.is_sealed(&e.uid) {
                true => 0,
                false => e.at_ms.saturating_add(grant::DRAW_MS),
            })
            .min()
    }

    /// Whether its batch closes grants (and is written for that alone).
    pub(super) fn closes(&self) -> bool {
        self.closing > 0
    }

    /// The batch's reservations and its unwritten grants' waiting Pods, sent back: (grants dropped, Pods).
    fn send_back(&mut self) -> (usize, Vec<usize>) {
        self.batch = None;
        self.closing = 0;
        let mut back = std::mem::take(&mut self.waiting);
        let (dropped, mut waiting) = self.grants.drop_unwritten();
        back.append(&mut waiting);
        (dropped, back)
    }

    /// Sends a batch not written yet back (none while a write is in flight, whose answer settles it).
    fn overtaken(&mut self) -> (usize, Vec<usize>) {
        if !matches!(self.batch, Some((Base::Known(_), _))) {
            return (0, Vec::new());
        }
        self.send_back()
    }

    /// Stops: every Pod it has not answered yet (its batch's, its write's, those waiting for a grant's
    /// write), never answered.
    pub(super) fn stop(&mut self) -> Vec<usize> {
        self.stopped = true;
        let mut lost = self.send_back().1;
        lost.extend(self.in_flight.take().into_iter().flat_map(|w| w.waiting));
        lost.extend(self.grants.take_waiting());
        lost
    }
}

impl World {
    /// Replica `r` writes its batch on the version it was decided on, if it has reservations or grants to
    /// close and no write in flight: the apiserver stores it if that version is the newest (any version for
    /// [`Variant::BlindWrites`]), else refuses it (a conflict, learnt with the answer).
    pub(super) fn start_write(&mut self, r: usize) {
        let latest = self.latest();
        let rep = &mut self.replicas[r];
        if rep.in_flight.is_some() || rep.stopped {
            return;
        }
        if rep.waiting.is_empty() && !rep.closes() {
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
            closing: std::mem::take(&mut rep.closing),
        });
    }

    /// Replica `r`'s write in flight answers: written (its Pods admitted, its grants drawn from and their
    /// waiting Pods decided again; the next batch builds on the version it made, or goes back with its
    /// grants if the ledger watch already brought a later one), or a conflict (the newer version read unless
    /// the watch brought one after the write's base; every reservation of the write and of the batch built
    /// on it, and the Pods waiting for their grants, decided again).
    pub(super) fn answer(&mut self, r: usize) -> Result<(), String> {
        let (latest, now) = (self.latest(), self.now_ms);
        let rep = &mut self.replicas[r];
        let Some(write) = rep.in_flight.take() else {
            return Ok(());
        };
        rep.timer_from = now;
        let (dropped, back) = match write.made {
            Some(made) => {
                let (newly, mut back) = rep.grants.written(&write.entries);
                self.ran.grants += newly;
                self.ran.closes += write.closing;
                let mut dropped = 0;
                if rep.known.0 > made {
                    if let Some((Base::AfterWrite, _)) = rep.batch {
                        let (d, mut more) = rep.send_back();
                        back.append(&mut more);
                        dropped = d;
                    }
                } else {
                    if let Some((base @ Base::AfterWrite, _)) = &mut rep.batch {
                        *base = Base::Known(made);
                    }
                    rep.known = (made, write.entries);
                }
                self.admit(write.waiting);
                (dropped, back)
            }
            None => {
                if rep.known.0 <= write.base {
                    rep.known = (latest, self.ledger[latest as usize].clone());
                }
                let (dropped, mut more) = rep.send_back();
                let mut back = write.waiting;
                back.append(&mut more);
                (dropped, back)
            }
        };
        self.ran.grants_back += dropped;
        self.decide_again(r, back)
    }

    /// Replica `r`'s ledger watch delivers the next version (`newest`: skips to the newest, as a relist
    /// does), taken if later than the one known; a batch not written yet goes back with its grants. The
    /// version delivered.
    pub(super) fn deliver_ledger(&mut self, r: usize, newest: bool) -> Result<u64, String> {
        let latest = self.latest();
        let rep = &mut self.replicas[r];
        if rep.watched >= latest || rep.stopped {
            return Ok(rep.watched);
        }
        rep.watched = if newest { latest } else { rep.watched + 1 };
        let at = rep.watched;
        if at <= rep.known.0 {
            return Ok(at);
        }
        rep.known = (at, self.ledger[at as usize].clone());
        let (dropped, back) = rep.overtaken();
        self.ran.grants_back += dropped;
        if !back.is_empty() {
            self.ran.overtaken += 1;
        }
        self.decide_again(r, back)?;
        Ok(at)
    }

    /// Replica `r`'s writer's timer: its grants past their draw window closed, in a write of their own.
    pub(super) fn close_timer(&mut self, r: usize) {
        let now = self.now_ms;
        let rep = &mut self.replicas[r];
        if rep.in_flight.is_some() || rep.stopped {
            return;
        }
        rep.timer_from = now;
        rep.close_drawn(now);
        self.start_write(r);
    }

    /// Replica `r` stops (a crash): its grants stay in the ledger until they expire, the Pods it admitted are
    /// stored, those it had not answered yet are not admitted. Refused if it is the last one running.
    pub(super) fn stop(&mut self, r: usize) -> bool {
        let running = self.replicas.iter().filter(|rep| !rep.stopped).count();
        if running < 2 || self.replicas[r].stopped {
            return false;
        }
        for i in self.replicas[r].stop() {
            self.pods[i].state = State::Refused;
        }
        for p in &mut self.pods {
            if matches!(p.state, State::Held { r: held, .. } if held == r) {
                p.state = State::Refused;
            }
        }
        self.ran.stopped += 1;
        true
    }
}
