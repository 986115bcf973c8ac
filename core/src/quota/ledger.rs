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
//! Tenants share the ledger, so an entry whose Pod never came (a phantom) is bounded in what it takes from
//! others: it counts against its own namespace for [`ENTRY_TTL_MS`], but against the rest of its tier (the
//! totals other namespaces share) only for [`OTHERS_WINDOW_MS`], the time a healthy watch needs to deliver a
//! stored Pod; a CREATE of a namespace/name the watch already holds (refused `AlreadyExists` after us) writes
//! no entry at all (the frontend checks); and one namespace holds at most [`MAX_ENTRIES_PER_NAMESPACE`]
//! entries the writer's watch has not seen (beyond, its own quota'd Pods are undecidable, no one else's;
//! entries already seen, kept for the other replicas' grace, do not count, so a Job of a thousand Pods is not
//! slowed), so filling the ledger takes twenty namespaces admitting quota'd Pods faster than the watches see
//! them.
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
/// control plane; the cross-replica overshoot bound assumes it).
pub const OTHERS_WINDOW_MS: u64 = 5_000;
/// Entries a ledger holds at most: beyond, admissions of quota'd Pods wait for pruning (denied in Enforce,
/// the ledger's size bounded whatever the rate). 4,000 entries are ≈ 400 kB of the object's 1 MiB.
pub const MAX_ENTRIES: usize = 4_000;
/// Entries the writer's watch has not seen that one namespace holds at most.
pub const MAX_ENTRIES_PER_NAMESPACE: usize = MAX_ENTRIES / 20;

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

    fn counted(&self) -> Counted {
        Counted {
            classes: self.classes.clone(),
            total: self.total,
        }
    }

    fn expired(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.at_ms) >= ENTRY_TTL_MS
    }

    /// Whether it counts for a decision about `namespace`: its own namespace's until it expires, another's
    /// only within [`OTHERS_WINDOW_MS`].
    fn counts_for(&self, namespace: &str, now_ms: u64) -> bool {
        let age = now_ms.saturating_sub(self.at_ms);
        if self.namespace == namespace {
            age < ENTRY_TTL_MS
        } else {
            age < OTHERS_WINDOW_MS
        }
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

/// The usage to decide a Pod of `namespace` against: `watched` plus every entry the watch has not seen that
/// counts for that namespace ([`Entry::counts_for`]).
pub fn effective_usage(
    watched: &Usage,
    entries: &[Entry],
    seen: impl Fn(&str) -> Seen,
    now_ms: u64,
    namespace: &str,
) -> Usage {
    let mut usage = watched.clone();
    for e in entries
        .iter()
        .filter(|e| e.counts_for(namespace, now_ms) && seen(&e.uid) == Seen::No)
    {
        usage.add(&e.tier, &e.namespace, &e.counted(), 1);
    }
    usage
}

/// The entries worth keeping: unexpired, and not counted by the writer's watch for [`SEEN_GRACE_MS`].
pub fn prune(entries: &mut Vec<Entry>, seen: impl Fn(&str) -> Seen, now_ms: u64) {
    entries.retain(|e| {
        !e.expired(now_ms)
            && match seen(&e.uid) {
                Seen::No => true,
                Seen::Since { at_ms } => now_ms.saturating_sub(at_ms) < SEEN_GRACE_MS,
                Seen::Gone => false,
            }
    });
}

/// Why an entry cannot be added to `entries` (already pruned): the ledger is full, or the namespace holds its
/// share of entries the watch has not `seen`.
pub fn room_for(
    entries: &[Entry],
    namespace: &str,
    seen: impl Fn(&str) -> Seen,
) -> Result<(), Full> {
    if entries.len() >= MAX_ENTRIES {
        return Err(Full::Ledger);
    }
    let unseen = entries
        .iter()
        .filter(|e| e.namespace == namespace && seen(&e.uid) == Seen::No)
        .count();
    if unseen >= MAX_ENTRIES_PER_NAMESPACE {
        return Err(Full::Namespace);
    }
    Ok(())
}

/// Which bound a full ledger hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Ledger,
    Namespace,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(uid: &str, gpus: u64, at_ms: u64) -> Entry {
        let counted = Counted {
            classes: [("L4-24GB".to_string(), gpus * 1000)].into(),
            total: gpus * 1000,
        };
        Entry::new(uid, "bronze", "team-a", &counted, at_ms)
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
        let usage = effective_usage(&watched, &entries[..2], seen, 1_000, "team-a");
        assert_eq!(usage.namespaces["team-a"].total, 3_000);
        // An expired entry no longer counts.
        let usage = effective_usage(&watched, &entries, seen, ENTRY_TTL_MS, "team-a");
        assert_eq!(usage.namespaces["team-a"].total, 2_000);
    }

    /// A phantom (an entry whose Pod never came) takes from other namespaces of its tier only within the
    /// watch's delivery window; from its own namespace until it expires.
    #[test]
    fn a_phantom_charges_other_namespaces_only_within_the_watch_window() {
        let entries = vec![entry("phantom", 8, 0)];
        let unseen = |_: &str| Seen::No;
        let held = |at: u64, ns: &str| {
            effective_usage(&Usage::default(), &entries, unseen, at, ns)
                .namespaces
                .get("team-a")
                .map_or(0, |n| n.total)
        };
        assert_eq!(held(OTHERS_WINDOW_MS - 1, "team-b"), 8_000);
        assert_eq!(held(OTHERS_WINDOW_MS, "team-b"), 0);
        assert_eq!(held(OTHERS_WINDOW_MS, "team-a"), 8_000);
        assert_eq!(held(ENTRY_TTL_MS, "team-a"), 0);
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

    #[test]
    fn one_namespace_fills_only_its_share_of_the_ledger() {
        let mut entries: Vec<Entry> = (0..MAX_ENTRIES_PER_NAMESPACE)
            .map(|i| entry(&format!("a-{i}"), 1, 0))
            .collect();
        let unseen = |_: &str| Seen::No;
        assert_eq!(room_for(&entries, "team-a", unseen), Err(Full::Namespace));
        assert_eq!(room_for(&entries, "team-b", unseen), Ok(()));
        // Entries the watch has seen (kept for the other replicas' grace) leave the namespace its share.
        let seen = |_: &str| Seen::Since { at_ms: 0 };
        assert_eq!(room_for(&entries, "team-a", seen), Ok(()));
        for e in &mut entries {
            e.namespace = format!("ns-{}", e.uid);
        }
        entries.extend((0..MAX_ENTRIES - MAX_ENTRIES_PER_NAMESPACE).map(|i| {
            let mut e = entry(&format!("b-{i}"), 1, 0);
            e.namespace = format!("other-{i}");
            e
        }));
        assert_eq!(room_for(&entries, "team-b", unseen), Err(Full::Ledger));
    }
}
