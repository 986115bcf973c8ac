//! The quota ledger: what every frontend replica has admitted and no Pod watch may have seen yet, kept per
//! quota'd tier in one small object ([`object`]) all replicas write with optimistic concurrency (a hard
//! overshoot bound). A tier's reservations are written to its own ledger only: one tier's burst never waits
//! on another tier's writes, nor makes them conflict.
//!
//! A replica decides a quota'd Pod against `watched usage + the ledgers' entries its own watch has not
//! counted` (every tier's ledger as it last read or wrote it: a namespace relabelled since its reservations
//! carries them to its new tier), and admits it only if it can write its tier's ledger with the Pod's entry
//! on top of the version it read (a conflict: read again, decide again). So two replicas never both spend
//! the same headroom: every admission of a tier is ordered by its ledger's versions, and each sees every
//! admission before it, through its watch or through the ledger. An entry is pruned once its Pod has been
//! counted by the writer's watch for [`SEEN_GRACE_MS`] (every replica's watch has then had that long to see
//! it too), as soon as the writer's watch saw its Pod go (deleted or finished: a replica that never saw it
//! would count a Pod that is gone), or after [`ENTRY_TTL_MS`] (a Pod another admission step refused after
//! us, never created). Keyed by the Pod's UID, which the apiserver assigns before validating admission runs.
//!
//! A namespace admitting Pods in a stream gets, instead of one entry per Pod, a **grant** ([`grant`]):
//! several Pods' worth written once, against which the replica that wrote it admits the namespace's next
//! Pods without a write for a second, counted whole by every other replica meanwhile.
//!
//! The one bound the split into tiers loosens: a namespace relabelled while reservations of its old tier are
//! in flight. Another replica's write to the new tier does not conflict with them, so for up to
//! [`OTHERS_WINDOW_MS`] (until the watch counts their Pods) the new tier may admit as if they were not there,
//! and end above its `max` by what the namespace had in flight at the relabel, as it ends above it by what
//! the namespace holds: a relabel moves both, and is the platform's act (`/validate-namespace`).
//!
//! Tenants share the ledger, so a reservation whose Pod never came (a **phantom**: unseen after
//! [`OTHERS_WINDOW_MS`]) charges only the namespace that made it; [`plan`] is the rule for every write:
//! - it counts against its own namespace until it expires ([`ENTRY_TTL_MS`]), against the rest of its tier
//!   (the totals other namespaces share) only within [`OTHERS_WINDOW_MS`], the time a healthy watch needs to
//!   deliver a stored Pod; within that window the namespace's own `max` already bounds what its reservations
//!   take from the tier;
//! - a CREATE of a namespace/name the watch already holds (refused `AlreadyExists` after us) writes nothing;
//! - reservations are **rate-limited per namespace** ([`Bounds`]): a namespace holding its limit of
//!   reservations in flight (unseen, younger than the window) or of phantoms gets its own quota'd admissions
//!   refused with a message saying why and for how long, whatever the other namespaces hold; entries already
//!   seen (kept for the other replicas' grace) do not count, so a Job of a thousand Pods is not slowed;
//! - there is **no total** that namespaces share: past [`Bounds::compact_at`] entries, phantoms (which count
//!   for no other namespace) are dropped, from the namespace holding most first, instead of refusing anyone.
//!   What remains is bounded by the ledger's write rate (one write per reservation) × [`ENTRY_TTL_MS`].
use std::collections::BTreeMap;

use gpu_admission_policy::quotas::MilliGpus;
use serde::{Deserialize, Serialize};

use super::Usage;
use super::demand::Counted;

pub mod grant;
pub mod object;

/// How long an entry whose Pod the writer's watch counts stays, for the other replicas' watches.
pub const SEEN_GRACE_MS: u64 = 10_000;
/// How long an entry whose Pod never came stays, counted against its own namespace.
pub const ENTRY_TTL_MS: u64 = 15_000;
/// How long an entry counts against the namespaces it does not belong to (their tier's totals): the delay
/// from a reservation's decision (its `at_ms`) to every replica's watch delivering its stored Pod (the
/// write, the rest of the admission, the apiserver storing the Pod, the watch: measured well under a second
/// on a busy test control plane). The cross-replica overshoot bound assumes it: a watch within it counted
/// from the Pod's storage rather than its decision can break a `max` (`properties/src/replicas_oracle.rs`).
/// An entry still unseen after it is a phantom.
pub const OTHERS_WINDOW_MS: u64 = 5_000;

// An entry counts for its own namespace at least as long as for the others ([`Entry::counts_for`]).
const _: () = assert!(OTHERS_WINDOW_MS < ENTRY_TTL_MS);

/// The per-namespace rate limits of reservations, and the ledger's size past which phantoms are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Reservations of one namespace in flight (unseen, younger than [`OTHERS_WINDOW_MS`]) at most.
    pub in_flight: usize,
    /// Phantoms of one namespace (unseen after [`OTHERS_WINDOW_MS`], kept until [`ENTRY_TTL_MS`]) at most.
    pub phantoms: usize,
    /// Entries past which phantoms are dropped (4,000 entries are ≈ 400 kB of the object's 1 MiB).
    pub compact_at: usize,
}

/// The frontend's bounds: 200 in flight is ~6 s of the 31 admissions/s two replicas sustain (a namespace
/// creating Pods faster than its watch sees them); 20 phantoms in 15 s leave room for a controller's retries
/// after another admission step refused its Pods.
pub const BOUNDS: Bounds = Bounds {
    in_flight: 200,
    phantoms: 20,
    compact_at: 4_000,
};

/// The Pod a reservation is for: its UID (the ledger's key) and its name (a name the watch already holds is
/// refused `AlreadyExists` after admission, so it reserves nothing).
#[derive(Debug, Clone, Copy)]
pub struct Reserving<'a> {
    pub uid: &'a str,
    pub name: &'a str,
}

/// One admitted quota'd Pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub uid: String,
    pub tier: String,
    pub namespace: String,
    /// Milli-GPUs per class it is counted against.
    #[serde(default)]
    pub classes: BTreeMap<String, MilliGpus>,
    pub total: MilliGpus,
    /// When it was admitted, in milliseconds since the Unix epoch (the writer's clock).
    pub at_ms: u64,
    /// A grant ([`grant`]): the replica that admits Pods of the namespace against it. `None`: one Pod's
    /// reservation, keyed by its UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_to: Option<String>,
}

impl Entry {
    pub fn new(uid: &str, tier: &str, namespace: &str, counted: &Counted, at_ms: u64) -> Self {
        Self {
            uid: uid.to_string(),
            tier: tier.to_string(),
            namespace: namespace.to_string(),
            classes: counted.classes.clone(),
            total: counted.total,
            at_ms,
            granted_to: None,
        }
    }

    #[cfg(test)]
    fn counted(&self) -> Counted {
        Counted {
            classes: self.classes.clone(),
            total: self.total,
        }
    }

    /// Adds its count to `usage`, in `tier`.
    fn add_to(&self, usage: &mut Usage, tier: &str) {
        usage.add_parts(tier, &self.namespace, &self.classes, self.total, 1);
    }

    fn age(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.at_ms)
    }

    /// Whether it counts for a decision about `namespace`: its own namespace's until it expires, another's
    /// only within [`OTHERS_WINDOW_MS`] (the age first: most entries of a burst are younger than that, and
    /// then no name is compared).
    fn counts_for(&self, namespace: &str, now_ms: u64) -> bool {
        if self.is_grant() {
            return grant::counts_for(self.at_ms, now_ms);
        }
        let age = self.age(now_ms);
        age < OTHERS_WINDOW_MS || (age < ENTRY_TTL_MS && self.namespace == namespace)
    }
}

/// What a replica's Pod watch knows of a UID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Never seen: the entry counts.
    No,
    /// Counted by the watch from this time: the entry does not count again.
    Since { at_ms: u64 },
    /// Seen, and gone since (deleted or finished): the entry is done.
    Gone,
}

/// The usage to decide a Pod of `namespace` in `tier` against: `watched` plus every entry the watch has not
/// seen that counts for that namespace ([`Entry::counts_for`]), in the tier the watch counts the entry's
/// namespace in now (a namespace relabelled since the reservation: its new tier), else the tier of the
/// namespace's newest entry (the label as last decided). Only what [`super::decide`] reads is held: the
/// namespace itself and the namespaces counted in `tier` (a copy of every namespace's usage, and the entries
/// of every other tier, per decision cost more than the rest of it on a cluster of hundreds of namespaces).
pub fn effective_usage<'a>(
    watched: &Usage,
    entries: impl IntoIterator<Item = &'a Entry>,
    seen: impl Fn(&str) -> Seen,
    now_ms: u64,
    (tier, namespace): (&str, &str),
) -> Usage {
    let read = |ns: &str, counted_in: &str| ns == namespace || counted_in == tier;
    let mut usage = Usage {
        namespaces: (watched.namespaces.iter())
            .filter(|(ns, u)| read(ns, &u.tier))
            .map(|(ns, u)| (ns.clone(), u.clone()))
            .collect(),
    };
    // Entries of namespaces the watch does not count: each in the tier of its namespace's newest entry.
    let mut unwatched: Vec<&Entry> = Vec::new();
    for e in entries {
        if !e.counts_for(namespace, now_ms) || seen(&e.uid) != Seen::No {
            continue;
        }
        match watched.namespaces.get(&e.namespace) {
            Some(n) if read(&e.namespace, &n.tier) => e.add_to(&mut usage, &n.tier),
            Some(_) => {}
            None => unwatched.push(e),
        }
    }
    unwatched.sort_by(|a, b| a.namespace.cmp(&b.namespace).then(a.at_ms.cmp(&b.at_ms)));
    for same in unwatched.chunk_by(|a, b| a.namespace == b.namespace) {
        let counted_in = &same[same.len() - 1].tier;
        if read(&same[0].namespace, counted_in) {
            for e in same {
                e.add_to(&mut usage, counted_in);
            }
        }
    }
    usage
}

/// Whether any entry of another tier's ledger, whose entries are all of `namespaces` (or fewer), can count in
/// [`effective_usage`] for a Pod of `namespace` in `tier`: only an entry of `namespace` itself, of a
/// namespace the watch counts in `tier` now (relabelled), or of one the watch does not count (its newest
/// entry decides its tier). When none can, the decision need not walk that ledger's entries: a burst in
/// another tier costs a lookup per namespace of it, not one per entry.
pub fn ledger_may_count<'a>(
    watched: &Usage,
    namespaces: impl IntoIterator<Item = &'a str>,
    (tier, namespace): (&str, &str),
) -> bool {
    (namespaces.into_iter())
        .any(|m| m == namespace || watched.namespaces.get(m).is_none_or(|n| n.tier == tier))
}

/// The entries worth keeping: unexpired, and not counted by the writer's watch for [`SEEN_GRACE_MS`]; a
/// grant while it counts.
pub fn prune(entries: &mut Vec<Entry>, seen: impl Fn(&str) -> Seen, now_ms: u64) {
    entries.retain(|e| {
        if e.is_grant() {
            return grant::counts_for(e.at_ms, now_ms);
        }
        e.age(now_ms) < ENTRY_TTL_MS
            && match seen(&e.uid) {
                Seen::No => true,
                Seen::Since { at_ms } => now_ms.saturating_sub(at_ms) < SEEN_GRACE_MS,
                Seen::Gone => false,
            }
    });
}

/// Which per-namespace limit a reservation hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    /// Reservations whose Pods the watch has not seen yet ([`Bounds::in_flight`]).
    InFlight,
    /// Reservations whose Pods were never stored ([`Bounds::phantoms`]).
    Phantoms,
}

/// A namespace refused a reservation by its own rate limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub namespace: String,
    pub limit: RateLimit,
    /// The namespace's reservations of that kind (at least the limit).
    pub count: usize,
    /// When enough of them are done for one more, in ms.
    pub retry_after_ms: u64,
}

impl std::fmt::Display for Limited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let retry = self.retry_after_ms.div_ceil(1000).max(1);
        match self.limit {
            RateLimit::InFlight => write!(
                f,
                "namespace {} has {} admitted GPU Pods the quota's watch has not seen stored yet, its limit; \
                 its quota'd Pods are refused for {retry} s: create them more slowly, or retry then",
                self.namespace, self.count
            ),
            RateLimit::Phantoms => write!(
                f,
                "namespace {} made {} GPU reservations in the last {} s whose Pods were never stored (their \
                 CREATEs failed after this admission: a name already taken, another admission step's denial, a \
                 ResourceQuota), its limit; its quota'd Pods are refused for {retry} s: fix what refuses those \
                 CREATEs, or retry then",
                self.namespace,
                self.count,
                ENTRY_TTL_MS / 1000
            ),
        }
    }
}

/// Whether `namespace` may make one more reservation over `entries` (already pruned): `None`, or the limit
/// it holds. Only its own entries count: no other namespace's reservations make it wait.
pub fn limited(
    entries: &[Entry],
    namespace: &str,
    seen: impl Fn(&str) -> Seen,
    now_ms: u64,
    bounds: &Bounds,
) -> Option<Limited> {
    let (mut in_flight, mut phantoms): (Vec<u64>, Vec<u64>) = entries
        .iter()
        .filter(|e| e.namespace == namespace && !e.is_grant() && seen(&e.uid) == Seen::No)
        .map(|e| e.age(now_ms))
        .partition(|age| *age < OTHERS_WINDOW_MS);
    // The reservations to wait for: the oldest beyond the limit leave it first.
    let over = |ages: &mut Vec<u64>, limit: usize, leaves_at: u64, kind: RateLimit| {
        if ages.len() < limit {
            return None;
        }
        ages.sort_unstable_by(|a, b| b.cmp(a));
        let waits_for = ages[ages.len() - limit];
        Some(Limited {
            namespace: namespace.to_string(),
            limit: kind,
            count: ages.len(),
            retry_after_ms: leaves_at.saturating_sub(waits_for),
        })
    };
    over(
        &mut phantoms,
        bounds.phantoms,
        ENTRY_TTL_MS,
        RateLimit::Phantoms,
    )
    .or_else(|| {
        over(
            &mut in_flight,
            bounds.in_flight,
            OTHERS_WINDOW_MS,
            RateLimit::InFlight,
        )
    })
}

/// What to do with the reservation of an admitted Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The watch holds a Pod of that namespace and name: the apiserver refuses the CREATE `AlreadyExists`
    /// after admission, so nothing is written.
    NameTaken,
    /// The namespace is over its own rate limit: the Pod is undecidable.
    Limited(Limited),
    /// Write these entries (pruned, the Pod's on top, phantoms dropped past [`Bounds::compact_at`]).
    Write(Vec<Entry>),
}

/// THE reservation rule: the write that reserves `entry` on top of `entries` (the ledger as read), for a Pod
/// whose namespace/name the watch holds or not (`name_taken`). [`plan_in`] on a copy.
pub fn plan(
    entries: &[Entry],
    entry: Entry,
    name_taken: bool,
    seen: impl Fn(&str) -> Seen,
    now_ms: u64,
    bounds: &Bounds,
) -> Plan {
    if name_taken {
        return Plan::NameTaken;
    }
    let mut kept = entries.to_vec();
    match plan_in(&mut kept, entry, false, seen, now_ms, bounds) {
        Planned::Written => Plan::Write(kept),
        Planned::NameTaken => Plan::NameTaken,
        Planned::Limited(l) => Plan::Limited(l),
    }
}

/// What [`plan_in`] did with the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// They are the write [`plan`] gives.
    Written,
    /// As [`Plan::NameTaken`]: left as they were.
    NameTaken,
    /// As [`Plan::Limited`]: only pruned (what any next write prunes too).
    Limited(Limited),
}

/// [`plan`] on the entries themselves, with no copy of them: the frontend's batch of reservations not yet
/// written takes each new one in place (a copy per reservation of a ledger holding thousands of entries cost
/// more than the rest of the decision).
pub fn plan_in(
    entries: &mut Vec<Entry>,
    entry: Entry,
    name_taken: bool,
    seen: impl Fn(&str) -> Seen,
    now_ms: u64,
    bounds: &Bounds,
) -> Planned {
    if name_taken {
        return Planned::NameTaken;
    }
    prune(entries, &seen, now_ms);
    if let Some(l) = limited(entries, &entry.namespace, &seen, now_ms, bounds) {
        return Planned::Limited(l);
    }
    entries.push(entry);
    compact(entries, &seen, now_ms, bounds.compact_at);
    Planned::Written
}

/// Drops phantoms past `at` entries, the oldest of the namespace holding most first: they count for no
/// other namespace, so no one else's decision changes; entries in flight or seen are kept whatever the size.
fn compact(entries: &mut Vec<Entry>, seen: impl Fn(&str) -> Seen, now_ms: u64, at: usize) {
    let excess = entries.len().saturating_sub(at);
    if excess == 0 {
        return;
    }
    let mut by_namespace: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if !e.is_grant() && seen(&e.uid) == Seen::No && e.age(now_ms) >= OTHERS_WINDOW_MS {
            by_namespace
                .entry(e.namespace.clone())
                .or_default()
                .push((e.at_ms, i));
        }
    }
    for phantoms in by_namespace.values_mut() {
        // Newest first: the oldest is popped first.
        phantoms.sort_unstable_by(|a, b| b.cmp(a));
    }
    let mut dropped = vec![false; entries.len()];
    for _ in 0..excess {
        let Some(most) = by_namespace
            .values_mut()
            .filter(|p| !p.is_empty())
            .max_by_key(|p| p.len())
        else {
            break;
        };
        if let Some((_, i)) = most.pop() {
            dropped[i] = true;
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !dropped[i - 1]
    });
}

#[cfg(test)]
mod tests;
