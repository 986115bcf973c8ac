//! Headroom granted to one replica (escrow), so a burst of one namespace is not one ledger write per round
//! trip behind the tier's one object: a replica writes a **grant** (an [`Entry`] of several Pods' worth,
//! [`Entry::granted_to`] itself) on top of the version it decided on, as any reservation, then admits that
//! namespace's Pods against it for [`DRAW_MS`] without writing (**draws**), each still decided against the
//! whole usage.
//!
//! Why no replica overshoots a `max` (nor a `min`'s guarantee) through a grant:
//! - every other replica counts the whole grant, for every namespace, for [`DRAW_MS`] + [`OTHERS_WINDOW_MS`]
//!   ([`counts_for`]): its draws are admitted within [`DRAW_MS`], and each watch sees their Pods within
//!   [`OTHERS_WINDOW_MS`] after (the bound plain entries already assume);
//! - its own replica counts, instead of the grant, what it drew ([`view`]); it draws only what the grant has
//!   room for ([`has_room`]), so no other replica's decision counted less than what was drawn;
//! - a grant is sized against the usage it is decided on ([`pods`]): at most half of the Pods that still keep
//!   the first one's standing (never across a `min` or over a `max`), at most what the replica drew in the
//!   namespace lately, doubled ([`MAX_PODS`] at most). A namespace with no burst gets one Pod's entry, as before
//!   grants: only a namespace already admitting Pods in a stream reserves ahead of them.
//!
//! What a grant costs the others: while its Pods are stored and watched and the grant still counts, they are
//! counted twice, erring high by at most the grant for at most [`DRAW_MS`] + [`OTHERS_WINDOW_MS`]. The
//! replica **closes** its grants past their draw window, or sealed (full, or its namespace at a `max`), in its
//! next write ([`close_drawn`]): each becomes the entries of its draws, which count exactly as plain entries
//! do (once, until the watch sees them).
use super::{Entry, OTHERS_WINDOW_MS};

pub mod own;
use crate::quota::demand::Counted;
use crate::quota::{Standing, Usage};

/// How long a replica admits Pods against a grant after writing it (its own clock, the one `at_ms` reads).
pub const DRAW_MS: u64 = 1_000;
/// The most Pods of one size a grant holds.
pub const MAX_PODS: u32 = 64;

impl Entry {
    /// A grant of `pods` Pods of `counted`'s size in `namespace` to `replica`, written at `at_ms`.
    pub fn grant(
        uid: &str,
        (tier, namespace, counted): (&str, &str, &Counted),
        pods: u32,
        replica: &str,
        at_ms: u64,
    ) -> Self {
        let mut e = Entry::new(uid, tier, namespace, &counted.times(pods), at_ms);
        e.granted_to = Some(replica.to_string());
        e
    }

    /// Whether it is a grant.
    pub fn is_grant(&self) -> bool {
        self.granted_to.is_some()
    }

    /// Whether it is a grant to `replica`.
    pub fn is_grant_to(&self, replica: &str) -> bool {
        self.granted_to.as_deref() == Some(replica)
    }
}

/// Whether a grant written at `at_ms` still counts at `now_ms`, for every namespace.
pub(super) fn counts_for(at_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(at_ms) < DRAW_MS + OTHERS_WINDOW_MS
}

/// Whether `replica` may still draw from `grant` at `now_ms` `counted` on top of `drawn` (what it drew from
/// it so far): within [`DRAW_MS`], in every class of the Pod's count and in total.
pub fn has_room(grant: &Entry, drawn: &Counted, counted: &Counted, now_ms: u64) -> bool {
    let fits = |held: Option<&u64>, drawn: u64, asks: u64| {
        held.is_some_and(|h| drawn.saturating_add(asks) <= *h)
    };
    now_ms.saturating_sub(grant.at_ms) < DRAW_MS
        && fits(Some(&grant.total), drawn.total, counted.total)
        && counted.classes.iter().all(|(c, asks)| {
            fits(
                grant.classes.get(c),
                drawn.classes.get(c).copied().unwrap_or(0),
                *asks,
            )
        })
}

/// How many Pods of `counted`'s size to grant `namespace` in `tier` over `usage` (the usage its first Pod is
/// decided on, which `standing_of` reserves: `None` is not reserved): `want` at most ([`MAX_PODS`] at most),
/// and at most half of the Pods that keep the first one's standing. 1: no grant, one Pod's entry.
pub fn pods(
    usage: &Usage,
    (tier, namespace, counted): (&str, &str, &Counted),
    want: u32,
    standing_of: impl Fn(&Usage) -> Option<Standing>,
) -> u32 {
    let want = want.min(MAX_PODS);
    if want <= 1 || counted.total == 0 {
        return 1;
    }
    let Some(first) = standing_of(usage) else {
        return 1;
    };
    // The most Pods (up to twice `want`) whose last still has `first`'s standing: standings only rise with
    // the usage, so a binary search.
    let keeps = |n: u32| {
        let mut more = usage.clone();
        more.add(tier, namespace, &counted.times(n - 1), 1);
        standing_of(&more) == Some(first)
    };
    let (mut fits, mut over) = (1, 2 * want + 1);
    while over - fits > 1 {
        let mid = fits + (over - fits) / 2;
        if keeps(mid) {
            fits = mid;
        } else {
            over = mid;
        }
    }
    (fits / 2).clamp(1, want)
}

/// The entries `replica` decides on: each of its own grants in `entries` replaced by what it drew from it
/// (`draws` of the grant's UID), every other entry as it is.
pub fn view<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    replica: &'a str,
    draws: impl Fn(&str) -> &'a [Entry],
) -> impl Iterator<Item = &'a Entry> {
    entries.into_iter().flat_map(move |e| {
        let (own, drawn): (Option<&Entry>, &[Entry]) = match e.is_grant_to(replica) {
            true => (None, draws(&e.uid)),
            false => (Some(e), &[]),
        };
        own.into_iter().chain(drawn)
    })
}

/// Closes `replica`'s grants in `entries` past their draw window at `now_ms`, or **sealed** (its replica
/// draws no more from them: full, or the namespace at its `max` in its own view): each becomes the entries of
/// its draws (`draws` of its UID), which then count as any reservation's. Whether any was closed.
pub fn close_drawn(
    entries: &mut Vec<Entry>,
    replica: &str,
    (draws, sealed): (impl Fn(&str) -> Vec<Entry>, impl Fn(&str) -> bool),
    now_ms: u64,
) -> bool {
    let closing = |e: &Entry| {
        e.is_grant_to(replica) && (now_ms.saturating_sub(e.at_ms) >= DRAW_MS || sealed(&e.uid))
    };
    let closed: Vec<String> = (entries.iter().filter(|e| closing(e)))
        .map(|e| e.uid.clone())
        .collect();
    if closed.is_empty() {
        return false;
    }
    entries.retain(|e| !closing(e));
    for uid in closed {
        entries.extend(draws(&uid));
    }
    true
}

/// What a Pod refused over a usage that counts other replicas' grants comes to ([`refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Refused: it stands no better without those grants (or none is counted).
    Refused,
    /// Held: it stands better without them, so it is decided again (about 100 ms later) until they close,
    /// rather than refused.
    HeldByGrants,
}

/// **The one rule for a refusal over other replicas' grants**: a Pod refused at `refused` while the entries
/// it was decided over (`entries`, `replica`'s view of them: [`view`]) count grants to other replicas is not
/// refused if, decided again without those grants, it stands better (a strictly lower [`Standing`]: refused
/// over a `max`, any standing within it): it is [`Refusal::HeldByGrants`]. `without` decides it again over the
/// usage of the entries the filter it is given keeps (every entry but other replicas' grants) and says its
/// standing there (`None`: none, e.g. no quota applies; never better).
///
/// Why: a grant is headroom its own replica draws from and every other replica counts whole (so none
/// overshoots a `max` through it), yet the others may not use it; much of it may never be drawn, and it
/// closes within [`DRAW_MS`] + [`OTHERS_WINDOW_MS`], or sooner, sealed, down to what was drawn. Refusing a Pod
/// for headroom that is only promised would refuse what the cluster has room for; holding it until the grant
/// closes decides it over what is actually held. A Pod that stands no better without them is refused at once.
///
/// `without` is called only when `entries` hold a grant to another replica: without one, the usage without
/// them is the same usage, and the Pod stands the same.
pub fn refusal<'a>(
    refused: Standing,
    replica: &str,
    entries: impl IntoIterator<Item = &'a Entry>,
    without: impl FnOnce(&dyn Fn(&Entry) -> bool) -> Option<Standing>,
) -> Refusal {
    let others = |e: &Entry| e.is_grant() && !e.is_grant_to(replica);
    if !entries.into_iter().any(others) {
        return Refusal::Refused;
    }
    match without(&|e| !others(e)) {
        Some(s) if s < refused => Refusal::HeldByGrants,
        _ => Refusal::Refused,
    }
}

#[cfg(test)]
mod tests;
