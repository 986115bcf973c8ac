//! One tier's quota ledger as this replica knows it ([`TierLedger`]): the version last read, written or
//! brought by the ledger watch, the reservations decided on it and not yet written, who waits for their
//! write, and the namespaces of its entries (a decision in another tier walks them only when one of those
//! can count there: [`entries_for`]). No I/O: [`super::usage`] reads, writes and watches, and hands each
//! result here.
//!
//! Versions only move forward ([`resource_version_order`]): a write's answer or a read that arrives after
//! the watch brought a later version does not take the ledger back. A version later than the one a batch
//! was decided on sends the batch back to be decided again before it is written (its write would conflict),
//! and a conflict needs no read when the watch already brought the version that beat it.
//!
//! The grants this replica wrote are kept as core's [`OwnGrants`]: a decision reads each of them as what was
//! drawn from it ([`TierLedger::view`]), and a batch sent back takes the grants it was writing with it.
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpu_admission_core::quota::Usage;
use gpu_admission_core::quota::ledger::{self, Entry, grant};
use gpu_admission_core::resource::resource_version_order;

use super::quota_ledger::{LedgerError, LedgerVersion};

use gpu_admission_core::quota::ledger::grant::own::OwnGrants;

/// Which ledger version reservations waiting to be written were decided on.
#[derive(Debug, Clone)]
pub(crate) enum Base {
    /// This stored version (`None`: no ledger object yet).
    Known(Option<String>),
    /// The one the write in flight makes: they built on its entries.
    AfterWrite,
}

/// What a waiting reservation learns from the writer.
#[derive(Debug, Clone)]
pub(crate) enum Flushed {
    Written,
    /// The ledger changed meanwhile: decide again.
    Retry,
    Failed(String),
}

pub(crate) type Waiting = tokio::sync::oneshot::Sender<Flushed>;

/// Reservations decided and not yet written: the entries the next write carries (the ledger they were
/// decided on with theirs added) and who waits for it.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) next: Option<(Base, Vec<Entry>)>,
    pub(crate) waiting: Vec<Waiting>,
    /// Whether it closes grants: written even if no reservation waits for it.
    closes: bool,
}

/// One tier's ledger in this replica: as last known, the reservations not yet written, and the wake-up of
/// its writer ([`super::usage::QuotaUsage`]'s `write_batches`).
pub(crate) struct TierLedger {
    ledger: LedgerVersion,
    pub(crate) batch: Batch,
    pub(crate) flush: Arc<tokio::sync::Notify>,
    /// Whether its writer runs (started at the tier's first reservation in this replica).
    pub(crate) writing: bool,
    /// Every namespace of the entries a decision reads of it ([`Self::known`]; more after a batch goes
    /// back): whether another tier's decision must walk them ([`entries_for`]).
    namespaces: BTreeSet<String>,
    /// The grants this replica wrote or is writing in it.
    pub(crate) grants: OwnGrants<Waiting>,
}

/// Whether version `a` is known to come after `b` (`None`: no object).
fn after(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => resource_version_order(a, b) == Some(Ordering::Greater),
        _ => false,
    }
}

impl TierLedger {
    pub(crate) fn new() -> Self {
        Self {
            ledger: LedgerVersion::default(),
            batch: Batch::default(),
            flush: Arc::default(),
            writing: false,
            namespaces: BTreeSet::new(),
            grants: OwnGrants::default(),
        }
    }

    /// Takes `namespace`'s reservation in (its entry is in [`Self::pending`]).
    pub(crate) fn reserved_in(&mut self, namespace: &str) {
        if !self.namespaces.contains(namespace) {
            self.namespaces.insert(namespace.to_string());
        }
    }

    /// The namespaces of [`Self::known`] again, after it changed as a whole.
    fn recount_namespaces(&mut self) {
        self.namespaces = self.known().iter().map(|e| e.namespace.clone()).collect();
    }

    /// The entries a reservation is decided on and taken into: the reservations not yet written, else the
    /// ledger as last known (copied once per batch, each reservation then taken in place).
    pub(crate) fn pending(&mut self) -> &mut Vec<Entry> {
        let ledger = &self.ledger;
        let (_, entries) = self.batch.next.get_or_insert_with(|| {
            (
                Base::Known(ledger.resource_version.clone()),
                ledger.entries.clone(),
            )
        });
        entries
    }

    /// What a decision reads of it: the reservations not yet written, else the ledger as last known.
    pub(crate) fn known(&self) -> &[Entry] {
        self.batch
            .next
            .as_ref()
            .map_or(&self.ledger.entries, |(_, e)| e)
    }

    /// What a decision of replica `me` reads of it: [`Self::known`], with each of its own grants as what it
    /// drew from it.
    pub(crate) fn view<'a>(&'a self, me: &'a str) -> impl Iterator<Item = &'a Entry> {
        grant::view(self.known(), me, |uid| self.grants.draws(uid))
    }

    /// Closes `me`'s grants past their draw window in the next write ([`grant::close_drawn`]), which then
    /// goes even if no reservation waits for it.
    pub(crate) fn close_drawn(&mut self, me: &str, now_ms: u64) {
        let mut entries = std::mem::take(self.pending());
        let grants = &self.grants;
        let rules = (
            |uid: &str| grants.closing(uid),
            |uid: &str| grants.is_sealed(uid),
        );
        let closed = grant::close_drawn(&mut entries, me, rules, now_ms);
        *self.pending() = entries;
        self.batch.closes |= closed;
    }

    /// When `me`'s first grant in what a decision reads is to be closed: at the end of its draw window, or
    /// at once when sealed.
    pub(crate) fn next_close(&self, me: &str) -> Option<u64> {
        (self.known().iter())
            .filter(|e| e.is_grant_to(me))
            .map(|e| match self.grants.is_sealed(&e.uid) {
                true => 0,
                false => e.at_ms.saturating_add(grant::DRAW_MS),
            })
            .min()
    }

    /// Whether this replica knows a version later than `base` (the one a write was made on).
    pub(crate) fn knows_later_than(&self, base: &Option<String>) -> bool {
        after(&self.ledger.resource_version, base)
    }

    /// What the next write carries: the version its entries were decided on, the entries, who waits.
    pub(crate) fn take_batch(&mut self) -> Option<(Option<String>, Vec<Entry>, Vec<Waiting>)> {
        let batch = &mut self.batch;
        if batch.waiting.is_empty() && !batch.closes {
            if matches!(batch.next, Some((Base::Known(_), _))) {
                batch.next = None;
            }
            return None;
        }
        let (Base::Known(base), entries) = batch.next.clone()? else {
            return None; // only while a write is in flight, which is the writer's own
        };
        batch.next = Some((Base::AfterWrite, entries.clone()));
        batch.closes = false;
        Some((base, entries, std::mem::take(&mut batch.waiting)))
    }

    /// The reservations of a batch decided on an earlier version than the one now known, to be decided
    /// again (none while a write is in flight: its answer settles what was built on it).
    fn overtaken_batch(&mut self) -> Vec<Waiting> {
        if !matches!(self.batch.next, Some((Base::Known(_), _))) {
            return Vec::new();
        }
        self.batch.next = None;
        let mut back = std::mem::take(&mut self.batch.waiting);
        back.append(&mut self.grants.drop_unwritten().1);
        back
    }

    /// The ledger object as the watch brought it at version `at` (`now`: its version and entries, or no
    /// object after a delete), taken if later than the one known; the reservations sent back by it.
    pub(crate) fn watched(&mut self, at: &str, now: LedgerVersion) -> Vec<Waiting> {
        let later = match &self.ledger.resource_version {
            None => now.resource_version.is_some(),
            Some(known) => match resource_version_order(at, known) {
                Some(Ordering::Greater) => true,
                // The object known is deleted.
                Some(Ordering::Equal) => now.resource_version.is_none(),
                _ => false,
            },
        };
        if !later {
            return Vec::new();
        }
        self.ledger = now;
        let back = self.overtaken_batch();
        self.recount_namespaces();
        back
    }

    /// Takes a write's result in (`fresh`: the ledger read after a conflict, when the watch had not brought
    /// a later version yet): what its reservations learn, and the reservations built on it that must be
    /// decided again.
    pub(crate) fn written(
        &mut self,
        result: Result<LedgerVersion, LedgerError>,
        fresh: Option<Result<LedgerVersion, LedgerError>>,
    ) -> (Flushed, Option<Vec<Waiting>>) {
        let taken = self.take_written(result, fresh);
        self.recount_namespaces();
        taken
    }

    fn take_written(
        &mut self,
        result: Result<LedgerVersion, LedgerError>,
        fresh: Option<Result<LedgerVersion, LedgerError>>,
    ) -> (Flushed, Option<Vec<Waiting>>) {
        match result {
            Ok(written) => {
                let (_, mut drawing) = self.grants.written(&written.entries);
                if after(&self.ledger.resource_version, &written.resource_version) {
                    // The watch brought another replica's write on top of this one: what was built on this
                    // one would conflict.
                    if let Some((Base::AfterWrite, _)) = self.batch.next {
                        self.batch.next = None;
                        drawing.append(&mut self.batch.waiting);
                        drawing.append(&mut self.grants.drop_unwritten().1);
                        return (Flushed::Written, Some(drawing));
                    }
                    return (Flushed::Written, (!drawing.is_empty()).then_some(drawing));
                }
                if let Some((base @ Base::AfterWrite, _)) = &mut self.batch.next {
                    *base = Base::Known(written.resource_version.clone());
                }
                self.ledger = written;
                (Flushed::Written, (!drawing.is_empty()).then_some(drawing))
            }
            Err(e) => {
                if let Some(Ok(fresh)) = fresh
                    && !after(&self.ledger.resource_version, &fresh.resource_version)
                {
                    self.ledger = fresh;
                }
                self.batch.next = None;
                let mine = match e {
                    LedgerError::Conflict => Flushed::Retry,
                    e => Flushed::Failed(e.to_string()),
                };
                let mut back = std::mem::take(&mut self.batch.waiting);
                back.append(&mut self.grants.drop_unwritten().1);
                (mine, Some(back))
            }
        }
    }
}

/// The entries a decision of replica `me` of a Pod of `namespace` in `tier` reads ([`TierLedger::view`]):
/// every entry of `tier`'s ledger, and of another tier's only when one of its namespaces can count there
/// ([`ledger::ledger_may_count`]: a namespace relabelled since its reservations carries them to its new
/// tier; otherwise another tier's burst is not walked).
pub(crate) fn entries_for<'a>(
    ledgers: &'a BTreeMap<String, TierLedger>,
    watched: &'a Usage,
    (tier, namespace): (&'a str, &'a str),
    me: &'a str,
) -> impl Iterator<Item = &'a Entry> {
    (ledgers.iter())
        .filter(move |(t, l)| {
            *t == tier
                || ledger::ledger_may_count(
                    watched,
                    l.namespaces.iter().map(String::as_str),
                    (tier, namespace),
                )
        })
        .flat_map(move |(_, l)| l.view(me))
}

#[cfg(test)]
mod tests;
