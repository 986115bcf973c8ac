//! The quota ledger: what every frontend replica has admitted and no Pod watch may have seen yet, kept in
//! one small object all replicas write with optimistic concurrency (a hard overshoot bound).
//!
//! A replica decides a quota'd Pod against `watched usage + the ledger's entries its own watch has not
//! counted`, and admits it only if it can write the ledger with the Pod's entry on top of the version it
//! read (a conflict: read again, decide again). So two replicas never both spend the same headroom: every
//! admission is ordered by the ledger's versions, and each sees every admission before it, through its watch
//! or through the ledger. An entry is pruned once its Pod has been counted by the writer's watch for
//! [`SEEN_GRACE_MS`] (every replica's watch has then had that long to see it too), as soon as the writer's
//! watch saw its Pod go (deleted or finished: a replica that never saw it would count a Pod that is gone), or
//! after [`ENTRY_TTL_MS`] (a Pod another admission step refused after us, never created). Keyed by the Pod's
//! UID, which the apiserver assigns before validating admission runs.
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

/// How long an entry whose Pod the writer's watch counts stays, for the other replicas' watches.
pub const SEEN_GRACE_MS: u64 = 10_000;
/// How long an entry whose Pod never came stays, counted against its own namespace.
pub const ENTRY_TTL_MS: u64 = 15_000;
/// How long an entry counts against the namespaces it does not belong to (their tier's totals): the delay
/// within which every replica's watch delivers a stored Pod (measured well under a second on a busy test
/// control plane; the cross-replica overshoot bound assumes it). An entry still unseen after it is a phantom.
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
pub fn effective_usage(
    watched: &Usage,
    entries: &[Entry],
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

/// The entries worth keeping: unexpired, and not counted by the writer's watch for [`SEEN_GRACE_MS`].
pub fn prune(entries: &mut Vec<Entry>, seen: impl Fn(&str) -> Seen, now_ms: u64) {
    entries.retain(|e| {
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
        .filter(|e| e.namespace == namespace && seen(&e.uid) == Seen::No)
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
        if seen(&e.uid) == Seen::No && e.age(now_ms) >= OTHERS_WINDOW_MS {
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
mod tests {
    use super::*;

    fn entry_in(namespace: &str, uid: &str, gpus: u64, at_ms: u64) -> Entry {
        let counted = Counted {
            classes: [("L4-24GB".to_string(), gpus * 1000)].into(),
            total: gpus * 1000,
        };
        Entry::new(uid, "bronze", namespace, &counted, at_ms)
    }

    fn entry(uid: &str, gpus: u64, at_ms: u64) -> Entry {
        entry_in("team-a", uid, gpus, at_ms)
    }

    const SMALL: Bounds = Bounds {
        in_flight: 3,
        phantoms: 2,
        compact_at: 6,
    };

    fn unseen(_: &str) -> Seen {
        Seen::No
    }

    #[test]
    fn unseen_entries_count_once_seen_ones_are_the_watch_s() {
        let mut watched = Usage::default();
        let seen_pod = entry("seen", 2, 0);
        watched.add("bronze", "team-a", &seen_pod.counted(), 1);
        let entries = vec![seen_pod, entry("unseen", 1, 0), entry("old", 4, 0)];
        let seen = |uid: &str| match uid {
            "seen" => Seen::Since { at_ms: 100 },
            _ => Seen::No,
        };
        let usage = effective_usage(&watched, &entries[..2], seen, 1_000, ("bronze", "team-a"));
        assert_eq!(usage.namespaces["team-a"].total, 3_000);
        // An expired entry no longer counts.
        let usage = effective_usage(&watched, &entries, seen, ENTRY_TTL_MS, ("bronze", "team-a"));
        assert_eq!(usage.namespaces["team-a"].total, 2_000);
    }

    /// A phantom (an entry whose Pod never came) takes from other namespaces of its tier only within the
    /// watch's delivery window; from its own namespace until it expires.
    #[test]
    fn a_phantom_charges_other_namespaces_only_within_the_watch_window() {
        let entries = vec![entry("phantom", 8, 0)];
        let held = |at: u64, ns: &str| {
            effective_usage(&Usage::default(), &entries, unseen, at, ("bronze", ns))
                .namespaces
                .get("team-a")
                .map_or(0, |n| n.total)
        };
        assert_eq!(held(OTHERS_WINDOW_MS - 1, "team-b"), 8_000);
        assert_eq!(held(OTHERS_WINDOW_MS, "team-b"), 0);
        assert_eq!(held(OTHERS_WINDOW_MS, "team-a"), 8_000);
        assert_eq!(held(ENTRY_TTL_MS, "team-a"), 0);
    }

    /// An entry written before its namespace was relabelled counts in the tier the watch counts the
    /// namespace in now, and does not move the namespace's held Pods back to the old tier.
    #[test]
    fn an_entry_counts_in_its_namespace_s_tier_now() {
        let mut watched = Usage::default();
        watched.add("silver", "team-a", &entry("held", 2, 0).counted(), 1);
        let usage = effective_usage(
            &watched,
            &[entry("r", 1, 0)],
            unseen,
            1,
            ("silver", "team-b"),
        );
        assert_eq!(usage.namespaces["team-a"].tier, "silver");
        assert_eq!(usage.namespaces["team-a"].total, 3_000);
        assert_eq!(usage.tier("silver", None), 3_000);
        let usage = effective_usage(
            &watched,
            &[entry("r", 1, 0)],
            unseen,
            1,
            ("bronze", "team-b"),
        );
        assert_eq!(usage.tier("bronze", None), 0);
        // Not held by the watch: in the tier of its newest reservation, whatever the order of the entries.
        let mut newer = entry("newer", 1, 5);
        newer.tier = "silver".into();
        for entries in [
            vec![entry("r", 1, 0), newer.clone()],
            vec![newer, entry("r", 1, 0)],
        ] {
            let in_tier = |tier| {
                effective_usage(&Usage::default(), &entries, unseen, 6, (tier, "team-b"))
                    .tier(tier, None)
            };
            assert_eq!((in_tier("silver"), in_tier("bronze")), (2_000, 0));
        }
    }

    /// A decision reads its namespace and its tier: another tier's namespaces and entries are not copied, and
    /// what is held of the decided scope is what counting everything would give.
    #[test]
    fn only_the_decided_namespace_and_its_tier_are_held() {
        let mut watched = Usage::default();
        let two = entry("held", 2, 0).counted();
        watched.add("bronze", "team-a", &two, 1);
        watched.add("gold", "team-g", &two, 1);
        let mut gold = entry_in("team-g", "g1", 4, 0);
        gold.tier = "gold".into();
        let entries = vec![
            entry_in("team-a", "a1", 1, 0),
            gold,
            entry_in("team-b", "b1", 3, 0),
        ];
        let bronze = effective_usage(&watched, &entries, unseen, 1, ("bronze", "team-b"));
        assert_eq!(
            bronze.namespaces.keys().collect::<Vec<_>>(),
            ["team-a", "team-b"]
        );
        assert_eq!(
            (
                bronze.tier("bronze", None),
                bronze.namespace("team-b", None)
            ),
            (6_000, 3_000)
        );
        let gold = effective_usage(&watched, &entries, unseen, 1, ("gold", "team-g"));
        assert_eq!(gold.namespaces.keys().collect::<Vec<_>>(), ["team-g"]);
        assert_eq!(gold.tier("gold", None), 6_000);
    }

    #[test]
    fn pruning_keeps_seen_entries_for_the_other_replicas_grace_and_drops_expired_ones() {
        let mut entries = vec![
            entry("seen-now", 1, 0),
            entry("seen-long-ago", 1, 0),
            entry("unseen", 1, 0),
            entry("never-came", 1, 0),
        ];
        let now = ENTRY_TTL_MS - 1;
        let seen = |uid: &str| match uid {
            "seen-now" => Seen::Since { at_ms: now - 1 },
            "seen-long-ago" => Seen::Since {
                at_ms: now - SEEN_GRACE_MS,
            },
            _ => Seen::No,
        };
        prune(&mut entries, seen, now);
        let kept: Vec<_> = entries.iter().map(|e| e.uid.as_str()).collect();
        assert_eq!(kept, ["seen-now", "unseen", "never-came"]);
        prune(&mut entries, seen, ENTRY_TTL_MS);
        assert!(entries.is_empty(), "{entries:?}");
        // A Pod seen and gone: its entry is done at once, whatever its age.
        let mut entries = vec![entry("gone", 1, now)];
        prune(&mut entries, |_| Seen::Gone, now);
        assert!(entries.is_empty());
    }

    /// A namespace whose reservations never became Pods is refused its own reservations, saying for how
    /// long; another namespace of the same tier writes as if it had none.
    #[test]
    fn phantoms_limit_only_the_namespace_that_made_them() {
        let now = 20_000;
        let entries = vec![
            entry("p1", 1, now - 12_000),
            entry("p2", 1, now - 6_000),
            entry("flying", 1, now - 100),
        ];
        let plan_for = |ns: &str| {
            plan(
                &entries,
                entry_in(ns, "new", 1, now),
                false,
                unseen,
                now,
                &SMALL,
            )
        };
        let Plan::Limited(l) = plan_for("team-a") else {
            panic!("team-a at its phantom limit: {:?}", plan_for("team-a"));
        };
        assert_eq!((l.limit, l.count), (RateLimit::Phantoms, 2));
        // The oldest expires at 15 s of age: 3 s from now.
        assert_eq!(l.retry_after_ms, 3_000);
        assert!(l.to_string().contains("refused for 3 s"), "{l}");
        let Plan::Write(written) = plan_for("team-b") else {
            panic!("team-b is not limited: {:?}", plan_for("team-b"));
        };
        assert_eq!(written.len(), 4);
        // Once the oldest phantom expires, team-a may reserve again.
        let later = plan(
            &entries,
            entry("new", 1, now + 3_000),
            false,
            unseen,
            now + 3_000,
            &SMALL,
        );
        assert!(matches!(later, Plan::Write(_)), "{later:?}");
    }

    #[test]
    fn reservations_in_flight_are_limited_per_namespace_and_seen_ones_do_not_count() {
        let now = 50_000;
        let entries: Vec<Entry> = (0..3)
            .map(|i| entry(&format!("f{i}"), 1, now - 1_000 * i))
            .collect();
        let Plan::Limited(l) = plan(&entries, entry("new", 1, now), false, unseen, now, &SMALL)
        else {
            panic!("team-a holds 3 in flight");
        };
        assert_eq!(
            (l.limit, l.count, l.retry_after_ms),
            (RateLimit::InFlight, 3, 3_000)
        );
        let other = plan(
            &entries,
            entry_in("team-b", "new", 1, now),
            false,
            unseen,
            now,
            &SMALL,
        );
        assert!(matches!(other, Plan::Write(_)), "{other:?}");
        // Seen by the watch (kept for the other replicas' grace): a Job is not slowed.
        let seen = |_: &str| Seen::Since { at_ms: now };
        let seen_plan = plan(&entries, entry("new", 1, now), false, seen, now, &SMALL);
        assert!(
            matches!(seen_plan, Plan::Write(ref w) if w.len() == 4),
            "{seen_plan:?}"
        );
        // The shipped bounds are the same rule with larger numbers.
        assert!(limited(&entries, "team-a", unseen, now, &BOUNDS).is_none());
    }

    #[test]
    fn a_name_the_watch_holds_writes_nothing() {
        let p = plan(&[], entry("new", 1, 0), true, unseen, 0, &SMALL);
        assert_eq!(p, Plan::NameTaken);
    }

    /// No total that namespaces share: past `compact_at`, the phantoms of the namespace holding most are
    /// dropped (they count for no one else) and the writer is never refused for what others hold.
    #[test]
    fn a_full_ledger_drops_phantoms_of_the_largest_holder_never_refuses_another_namespace() {
        let now = 100_000;
        let old = now - OTHERS_WINDOW_MS;
        let mut entries = vec![
            entry_in("ns-1", "a1", 1, old - 2),
            entry_in("ns-1", "a2", 1, old - 1),
            entry_in("ns-2", "b1", 1, old - 3),
            entry_in("ns-3", "c1", 1, now - 1),
            entry_in("ns-3", "c2", 1, now - 1),
            entry_in("ns-4", "d1", 1, now - 1),
        ];
        let Plan::Write(w) = plan(
            &entries,
            entry_in("team-b", "new", 1, now),
            false,
            unseen,
            now,
            &SMALL,
        ) else {
            panic!("team-b holds nothing");
        };
        let uids: Vec<_> = w.iter().map(|e| e.uid.as_str()).collect();
        // ns-1 holds two phantoms, ns-2 one: ns-1's oldest goes.
        assert_eq!(uids, ["a2", "b1", "c1", "c2", "d1", "new"]);
        // Only entries in flight: nothing to drop, the writer still writes.
        entries.retain(|e| e.at_ms == now - 1);
        entries.extend((0..4).map(|i| entry_in(&format!("x-{i}"), &format!("x{i}"), 1, now)));
        let Plan::Write(w) = plan(
            &entries,
            entry_in("team-b", "new", 1, now),
            false,
            unseen,
            now,
            &SMALL,
        ) else {
            panic!("team-b holds nothing");
        };
        assert_eq!(w.len(), 8);
    }
}
