//! The budget of request-body bytes the frontend holds, claimed as the bytes arrive, and the fair share of
//! each requesting namespace, so that neither a peer that declares large bodies and sends them slowly (or
//! not at all) nor one namespace's flood of large reviews makes another tenant's reviews shed or slow (an
//! OOM kill would be worse: a window in which every `failurePolicy: Ignore` webhook admits unchecked).
//!
//! - **Claimed as read.** A request claims nothing when its headers arrive; each body frame claims its bytes
//!   when it is read ([`body::ClaimedBody`]). A declared `Content-Length` claims nothing.
//! - **Read deadline.** The whole body must arrive within `--body-read-timeout-ms` of its headers (2 s; the
//!   apiserver sends a review in milliseconds and waits 10 s at most): later, it is answered `408`.
//! - **Caps.** The bytes held over all connections (`--max-body-mib-in-flight`), per peer address
//!   (`--max-body-mib-per-peer`) and per connection (`--max-body-mib-per-connection`); each at least one
//!   maximum-size body.
//! - **Largest first.** A claim that would pass a cap sheds, inside that cap's scope, the largest claim that
//!   is still sheddable (being read, or waiting for its namespace's share) and at least twice the
//!   claimant's; only when there is none is the claimant itself shed, and never a small one
//!   ([`SMALL_BODY_BYTES`] at most: it overdraws instead). A shed request is answered `503` with
//!   `Retry-After: 1`.
//! - **Namespace share.** Once read and decoded, a review is decided only within its namespace's share
//!   (per peer address and namespace: `--max-reviews-per-namespace` reviews and `--max-body-mib-per-namespace`
//!   bytes being decided at once; one review always fits); beyond it the review waits, sheddable, for its
//!   namespace's earlier reviews, so a namespace's flood delays its own reviews first.
//!
//! Sheds are counted in `gpu_admission_requests_shed_total{reason}` and logged. The accounting below is pure
//! (no I/O, no clock); [`body`] is the HTTP side.

pub(crate) mod body;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;

use std::sync::Arc;

/// Largest AdmissionReview body accepted (the server's body limit, and the most one request claims here):
/// every review the apiserver can send. etcd stores objects up to 1.5 MiB (`--max-request-bytes`); the
/// apiserver's JSON escapes `<`, `>` and `&` as `\u003c` (six bytes for one), so one object can reach 9 MiB
/// in a review, and an UPDATE carries `oldObject` too: 18 MiB, plus the envelope. A body refused by the
/// server would make the apiserver fail open (`failurePolicy: Ignore`) or shut (`Fail`): either way our
/// answer would not count, so the limit is above what can be sent, and the caps bound the memory.
pub(crate) const BODY_LIMIT_BYTES: usize = 24 * 1024 * 1024;

/// A body of at most this many bytes is never shed for the budget: when nothing larger can be shed, it
/// overdraws. Reviews of plain Pods are a few KiB.
pub(crate) const SMALL_BODY_BYTES: usize = 64 * 1024;

/// The caps, in bytes and reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetLimits {
    /// Over all connections.
    pub total: usize,
    /// Per peer IP address.
    pub per_peer: usize,
    /// Per connection (HTTP/2 multiplexes many reviews on one).
    pub per_connection: usize,
    /// Bytes of the reviews being decided at once, per peer address and requesting namespace.
    pub per_namespace: usize,
    /// Reviews being decided at once, per peer address and requesting namespace.
    pub reviews_per_namespace: usize,
}

impl Default for BudgetLimits {
    fn default() -> Self {
        const MIB: usize = 1024 * 1024;
        Self {
            total: 48 * MIB,
            per_peer: 32 * MIB,
            per_connection: BODY_LIMIT_BYTES,
            per_namespace: BODY_LIMIT_BYTES,
            reviews_per_namespace: 32,
        }
    }
}

impl BudgetLimits {
    /// Every byte cap raised to one maximum-size body (so that any single review can be answered), the total
    /// to the per-peer cap, and at least one review per namespace.
    pub(crate) fn clamped(self) -> Self {
        let per_peer = self.per_peer.max(BODY_LIMIT_BYTES);
        Self {
            total: self.total.max(per_peer),
            per_peer,
            per_connection: self.per_connection.max(BODY_LIMIT_BYTES),
            per_namespace: self.per_namespace.max(BODY_LIMIT_BYTES),
            reviews_per_namespace: self.reviews_per_namespace.max(1),
        }
    }
}

/// Why a claim ended before its review was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Shed for a cap (the largest claimant in its scope).
    Shed,
    /// The body did not arrive within the read deadline.
    ReadDeadline,
    /// Waited for its namespace's share until its own deadline.
    NamespaceShare,
}

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::Shed => 1,
            Refusal::ReadDeadline => 2,
            Refusal::NamespaceShare => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Refusal::Shed),
            2 => Some(Refusal::ReadDeadline),
            3 => Some(Refusal::NamespaceShare),
            _ => None,
        }
    }
}

/// Where a claim comes from: the connection's peer address and the connection's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    pub(crate) peer: IpAddr,
    pub(crate) connection: u64,
}

/// The cap a claim would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Total,
    Peer(IpAddr),
    Connection(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The body is being read: sheddable.
    Reading,
    /// Read and decoded, waiting for its namespace's share: sheddable.
    Waiting,
    /// Being decided: held until it is answered, never shed.
    Deciding,
}

/// The refusal of one claim, read by its body and its handler; set by the ledger.
#[derive(Debug, Default)]
pub(crate) struct Signal(AtomicU8);

impl Signal {
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        Refusal::from_code(self.0.load(Ordering::Acquire))
    }

    pub(crate) fn refuse(&self, why: Refusal) {
        let _ = self
            .0
            .compare_exchange(0, why.code(), Ordering::AcqRel, Ordering::Acquire);
    }
}

struct Entry {
    bytes: usize,
    origin: Origin,
    stage: Stage,
    /// `(peer, namespace)` once decoded.
    namespace: Option<(IpAddr, String)>,
    signal: Arc<Signal>,
    /// Woken when the claim is shed or its namespace's share frees up.
    waker: Option<Waker>,
}

#[derive(Default)]
struct NamespaceShare {
    /// Being decided.
    reviews: usize,
    bytes: usize,
    /// Waiting for room.
    waiting: usize,
}

/// What the ledger holds; every change happens under its one lock.
#[derive(Default)]
struct State {
    used: usize,
    peers: Map<IpAddr, usize>,
    connections: Map<u64, usize>,
    /// Being decided, per `(peer, namespace)`.
    namespaces: Map<(IpAddr, String), NamespaceShare>,
    claims: Claims,
}

/// The maps of the ledger: a fast hasher (the keys are not chosen by whom they could hurt: an address, an
/// id, a namespace the apiserver names) for the cost of every request.
type Map<K, V> = foldhash::HashMap<K, V>;

/// The open claims by id: a slab (slot index and the slot's generation, so that a stale id never reaches
/// a later claim in the same slot).
#[derive(Default)]
struct Claims {
    slots: Vec<(u32, Option<Entry>)>,
    free: Vec<u32>,
    len: usize,
}

impl Claims {
    fn insert(&mut self, entry: Entry) -> u64 {
        self.len += 1;
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(entry);
        (u64::from(slot.0) << 32) | u64::from(index)
    }

    fn slot(&self, id: u64) -> Option<usize> {
        let index = (id & u64::from(u32::MAX)) as usize;
        let generation = (id >> 32) as u32;
        (self.slots.get(index)?.0 == generation).then_some(index)
    }

    fn get(&self, id: u64) -> Option<&Entry> {
        self.slots[self.slot(id)?].1.as_ref()
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Entry> {
        let index = self.slot(id)?;
        self.slots[index].1.as_mut()
    }

    fn remove(&mut self, id: u64) -> Option<Entry> {
        let index = self.slot(id)?;
        let entry = self.slots[index].1.take()?;
        self.free.push(index as u32);
        self.len -= 1;
        Some(entry)
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, (generation, entry))| {
                Some((
                    (u64::from(*generation) << 32) | index as u64,
                    entry.as_ref()?,
                ))
            })
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.slots
            .iter_mut()
            .filter_map(|(_, entry)| entry.as_mut())
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The bytes of request bodies the frontend holds, and who holds them.
pub(crate) struct Ledger {
    limits: BudgetLimits,
    state: Mutex<State>,
}

/// The claims a growing claim shed to make room.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Shedding {
    /// The bytes of each claim shed to make room (largest first).
    pub(crate) victims: Vec<usize>,
}

/// Whether a decoded review may be decided now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShareVerdict {
    /// Inside its namespace's share: decide it.
    Entered,
    /// Its namespace's share is full: wait for a wake-up, then ask again.
    Wait,
    /// Shed (or timed out) meanwhile.
    Refused(Refusal),
}

impl Ledger {
    pub(crate) fn new(limits: BudgetLimits) -> Self {
        Self {
            limits: limits.clamped(),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new claim of nothing, for a request whose headers were read.
    pub(crate) fn open(&self, origin: Origin) -> (u64, Arc<Signal>) {
        let signal = Arc::new(Signal::default());
        let mut s = self.lock();
        let id = s.claims.insert(Entry {
            bytes: 0,
            origin,
            stage: Stage::Reading,
            namespace: None,
            signal: signal.clone(),
            waker: None,
        });
        (id, signal)
    }

    /// `bytes` more arrived for claim `id`: claimed, after shedding larger claims where a cap needs room;
    /// `Err` when the claim itself is shed (it is then released).
    pub(crate) fn grow(&self, id: u64, bytes: usize) -> Result<Shedding, Refusal> {
        let mut s = self.lock();
        let Some(entry) = s.claims.get(id) else {
            return Err(Refusal::Shed);
        };
        if let Some(refused) = entry.signal.refusal() {
            return Err(refused);
        }
        let (origin, wanted) = (entry.origin, entry.bytes + bytes);
        if self.fits_at_once(&mut s, origin, bytes) {
            if let Some(entry) = s.claims.get_mut(id) {
                entry.bytes = wanted;
            }
            return Ok(Shedding::default());
        }
        let grown = self.make_room(&mut s, id, origin, bytes, wanted);
        // The lookup above may have left empty accounts behind.
        s.peers.retain(|_, held| *held > 0);
        s.connections.retain(|_, held| *held > 0);
        grown
    }

    /// The slow path of [`Ledger::grow`]: sheds claims (largest first) until every cap has room.
    fn make_room(
        &self,
        s: &mut State,
        id: u64,
        origin: Origin,
        bytes: usize,
        wanted: usize,
    ) -> Result<Shedding, Refusal> {
        let mut shedding = Shedding::default();
        while let Some(scope) = self.over_cap(s, origin, bytes) {
            match largest_sheddable(s, scope, id, wanted) {
                Some(victim) => {
                    let entry = remove(s, victim).expect("a listed claim");
                    entry.signal.refuse(Refusal::Shed);
                    if let Some(waker) = entry.waker {
                        waker.wake();
                    }
                    shedding.victims.push(entry.bytes);
                }
                None if wanted <= SMALL_BODY_BYTES => break,
                None => {
                    if let Some(entry) = remove(s, id) {
                        entry.signal.refuse(Refusal::Shed);
                    }
                    return Err(Refusal::Shed);
                }
            }
        }
        add(s, origin, bytes);
        if let Some(entry) = s.claims.get_mut(id) {
            entry.bytes = wanted;
        }
        Ok(shedding)
    }

    /// Claims `bytes` more from `origin` when every cap has room for them (the common case: one lookup per
    /// map); false, claiming nothing, otherwise.
    fn fits_at_once(&self, s: &mut State, origin: Origin, bytes: usize) -> bool {
        let l = &self.limits;
        if s.used + bytes > l.total {
            return false;
        }
        let peer = s.peers.entry(origin.peer).or_default();
        if *peer + bytes > l.per_peer {
            return false;
        }
        let connection = s.connections.entry(origin.connection).or_default();
        if *connection + bytes > l.per_connection {
            return false;
        }
        *connection += bytes;
        *peer += bytes;
        s.used += bytes;
        true
    }

    /// The first cap that `bytes` more from `origin` would pass.
    fn over_cap(&self, s: &State, origin: Origin, bytes: usize) -> Option<Scope> {
        let l = &self.limits;
        if s.used + bytes > l.total {
            return Some(Scope::Total);
        }
        if s.peers.get(&origin.peer).copied().unwrap_or(0) + bytes > l.per_peer {
            return Some(Scope::Peer(origin.peer));
        }
        if s.connections.get(&origin.connection).copied().unwrap_or(0) + bytes > l.per_connection {
            return Some(Scope::Connection(origin.connection));
        }
        None
    }

    /// Claim `id`'s review, of `namespace`, asks to be decided: it enters its namespace's share when it fits
    /// (one review always does), else it waits (woken through `waker` when the share frees up or it is shed).
    pub(crate) fn enter(&self, id: u64, namespace: &str, waker: &Waker) -> ShareVerdict {
        let mut s = self.lock();
        let l = self.limits;
        let Some(entry) = s.claims.get(id) else {
            return ShareVerdict::Refused(Refusal::Shed);
        };
        if let Some(refused) = entry.signal.refusal() {
            return ShareVerdict::Refused(refused);
        }
        let (key, bytes, was_waiting) = (
            (entry.origin.peer, namespace.to_string()),
            entry.bytes,
            entry.stage == Stage::Waiting,
        );
        let share = s.namespaces.entry(key.clone()).or_default();
        let fits = share.reviews == 0
            || (share.reviews < l.reviews_per_namespace && share.bytes + bytes <= l.per_namespace);
        if fits {
            share.reviews += 1;
            share.bytes += bytes;
        }
        if fits && was_waiting {
            share.waiting -= 1;
        } else if !fits && !was_waiting {
            share.waiting += 1;
        }
        let entry = s.claims.get_mut(id).expect("looked up above");
        entry.namespace = Some(key);
        if fits {
            entry.stage = Stage::Deciding;
            entry.waker = None;
            ShareVerdict::Entered
        } else {
            entry.stage = Stage::Waiting;
            entry.waker = Some(waker.clone());
            ShareVerdict::Wait
        }
    }

    /// Claim `id`'s body is waiting for bytes: woken through `waker` if it is shed meanwhile.
    pub(crate) fn park(&self, id: u64, waker: &Waker) {
        if let Some(entry) = self.lock().claims.get_mut(id) {
            entry.waker = Some(waker.clone());
        }
    }

    /// Ends claim `id` (answered, refused, or its request gone): its bytes and its namespace slot are free.
    pub(crate) fn release(&self, id: u64, why: Option<Refusal>) {
        let mut s = self.lock();
        let Some(entry) = remove(&mut s, id) else {
            return;
        };
        if let Some(why) = why {
            entry.signal.refuse(why);
        }
    }

    /// Bytes claimed now, over all connections.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.lock().used
    }
}

fn add(s: &mut State, origin: Origin, bytes: usize) {
    if bytes == 0 {
        return;
    }
    s.used += bytes;
    *s.peers.entry(origin.peer).or_default() += bytes;
    *s.connections.entry(origin.connection).or_default() += bytes;
}

/// Takes a claim out of every account; waiters of its namespace are woken when it was being decided.
fn remove(s: &mut State, id: u64) -> Option<Entry> {
    let entry = s.claims.remove(id)?;
    let bytes = entry.bytes;
    if bytes > 0 {
        s.used -= bytes;
        subtract(&mut s.peers, entry.origin.peer, bytes);
        subtract(&mut s.connections, entry.origin.connection, bytes);
    }
    let Some(key) = &entry.namespace else {
        return Some(entry);
    };
    // Taken out and put back only while in use: one lookup when the namespace's last review ends.
    let Some(mut share) = s.namespaces.remove(key) else {
        return Some(entry);
    };
    match entry.stage {
        Stage::Deciding => {
            share.reviews -= 1;
            share.bytes -= bytes;
        }
        Stage::Waiting => share.waiting -= 1,
        Stage::Reading => {}
    }
    let wake = entry.stage == Stage::Deciding && share.waiting > 0;
    if share.reviews > 0 || share.waiting > 0 {
        s.namespaces.insert(key.clone(), share);
    }
    if wake {
        for waiting in s.claims.values_mut() {
            if waiting.stage == Stage::Waiting
                && waiting.namespace.as_ref() == Some(key)
                && let Some(waker) = waiting.waker.take()
            {
                waker.wake();
            }
        }
    }
    Some(entry)
}

/// Takes `bytes` off `key`'s account; an account at zero is removed (one lookup then).
fn subtract<K: std::hash::Hash + Eq>(map: &mut Map<K, usize>, key: K, bytes: usize) {
    if let Some(held) = map.remove(&key)
        && held > bytes
    {
        map.insert(key, held - bytes);
    }
}

/// The largest claim in `scope`, other than `claimant`, that is still sheddable and at least twice `wanted`.
/// The margin keeps bodies of about one size that grow side by side (a burst of large reviews) from shedding
/// each other's leader in turn until none completes: among them the claimant sheds itself, and the first
/// ones finish.
fn largest_sheddable(s: &State, scope: Scope, claimant: u64, wanted: usize) -> Option<u64> {
    s.claims
        .iter()
        .filter(|(id, e)| {
            *id != claimant
                && e.stage != Stage::Deciding
                && e.bytes >= wanted.saturating_mul(2)
                && match scope {
                    Scope::Total => true,
                    Scope::Peer(peer) => e.origin.peer == peer,
                    Scope::Connection(c) => e.origin.connection == c,
                }
        })
        .max_by_key(|(_, e)| e.bytes)
        .map(|(id, _)| id)
}
