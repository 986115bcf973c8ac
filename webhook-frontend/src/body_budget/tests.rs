//! The ledger's accounting: claims as bytes arrive, the caps, largest-first shedding, small reviews never
//! shed, and the namespaces' shares.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicUsize;
use std::task::Wake;

use super::*;

const MIB: usize = 1024 * 1024;

fn origin(peer: u8, connection: u64) -> Origin {
    Origin {
        peer: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
        connection,
    }
}

fn ledger() -> Ledger {
    Ledger::new(BudgetLimits {
        total: 48 * MIB,
        per_peer: 32 * MIB,
        per_connection: 24 * MIB,
        per_namespace: 24 * MIB,
        reviews_per_namespace: 2,
    })
}

/// Counts its wake-ups.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn waker() -> (Arc<Wakes>, Waker) {
    let wakes = Arc::new(Wakes::default());
    (wakes.clone(), Waker::from(wakes))
}

/// A claim of `bytes` read from `origin`.
fn read(l: &Ledger, origin: Origin, bytes: usize) -> (u64, Arc<Signal>) {
    let (id, signal) = l.open(origin);
    l.grow(id, bytes).expect("room for the claim");
    (id, signal)
}

fn accounts_are_empty(l: &Ledger) -> bool {
    let s = l.lock();
    s.used == 0
        && s.peers.is_empty()
        && s.connections.is_empty()
        && s.namespaces.is_empty()
        && s.claims.is_empty()
}

#[test]
fn requests_that_declare_bodies_and_send_nothing_hold_nothing() {
    let l = ledger();
    // The two silent requests: open claims, no frame ever read.
    let _silent = [l.open(origin(66, 1)), l.open(origin(66, 2))];
    assert_eq!(l.used(), 0);
    let (id, _) = read(&l, origin(1, 3), 4096);
    assert_eq!(l.used(), 4096);
    l.release(id, None);
    assert_eq!(l.used(), 0);
}

#[test]
fn bytes_are_claimed_frame_by_frame_and_released_with_every_account() {
    let l = ledger();
    let (id, _) = l.open(origin(1, 1));
    for _ in 0..16 {
        assert_eq!(l.grow(id, 64 * 1024), Ok(Shedding::default()));
    }
    assert_eq!(l.used(), MIB);
    let (_, waker) = waker();
    assert_eq!(l.enter(id, "team-a", &waker), ShareVerdict::Entered);
    l.release(id, None);
    assert!(accounts_are_empty(&l));
}

#[test]
fn a_small_review_sheds_the_largest_claim_being_read() {
    let l = ledger();
    let (a, a_signal) = read(&l, origin(1, 1), 24 * MIB);
    let (b, b_signal) = read(&l, origin(2, 2), 20 * MIB);
    let (c, c_signal) = read(&l, origin(3, 3), 4 * MIB);
    assert_eq!(l.used(), 48 * MIB);
    let (wakes, waker) = waker();
    l.park(a, &waker);
    // A plain review needs 4 KiB: the 24 MiB claim goes, the others stay.
    let (small, small_signal) = l.open(origin(4, 4));
    let shed = l.grow(small, 4096).expect("the small review is claimed");
    assert_eq!(shed.victims, vec![24 * MIB]);
    assert_eq!(a_signal.refusal(), Some(Refusal::Shed));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the shed body is woken");
    assert_eq!(b_signal.refusal(), None);
    assert_eq!(c_signal.refusal(), None);
    assert_eq!(small_signal.refusal(), None);
    assert_eq!(l.used(), 24 * MIB + 4096);
    // The shed body's later frames are refused; its release changes nothing.
    assert_eq!(l.grow(a, 1), Err(Refusal::Shed));
    l.release(a, None);
    assert_eq!(l.used(), 24 * MIB + 4096);
    for id in [b, c, small] {
        l.release(id, None);
    }
    assert!(accounts_are_empty(&l));
}

#[test]
fn the_claimant_is_shed_when_it_is_the_largest_in_its_scope() {
    let l = ledger();
    let (a, a_signal) = read(&l, origin(1, 1), 10 * MIB);
    let (big, big_signal) = read(&l, origin(1, 2), 22 * MIB);
    // One more MiB from the same peer passes its 32 MiB cap: the claimant is the largest.
    assert_eq!(l.grow(big, MIB), Err(Refusal::Shed));
    assert_eq!(big_signal.refusal(), Some(Refusal::Shed));
    assert_eq!(a_signal.refusal(), None);
    assert_eq!(l.used(), 10 * MIB);
    l.release(a, None);
    assert!(accounts_are_empty(&l));
}

#[test]
fn the_connection_cap_sheds_the_largest_claim_of_that_connection() {
    let l = ledger();
    let (a, a_signal) = read(&l, origin(1, 7), 20 * MIB);
    let (b, b_signal) = read(&l, origin(1, 7), 4 * MIB);
    let (other, other_signal) = read(&l, origin(2, 8), 20 * MIB);
    let shed = l.grow(b, MIB).expect("b grows once a is shed");
    assert_eq!(shed.victims, vec![20 * MIB]);
    assert_eq!(a_signal.refusal(), Some(Refusal::Shed));
    assert_eq!(b_signal.refusal(), None);
    assert_eq!(
        other_signal.refusal(),
        None,
        "a larger claim of another connection is not this cap's business"
    );
    for id in [a, b, other] {
        l.release(id, None);
    }
    assert!(accounts_are_empty(&l));
}

#[test]
fn bodies_of_about_one_size_shed_the_claimant_not_the_leader() {
    let l = ledger();
    let (leader, leader_signal) = read(&l, origin(1, 1), 18 * MIB);
    let (second, second_signal) = read(&l, origin(1, 2), 12 * MIB);
    // Past the peer's 32 MiB: the leader is not twice the claimant's 12 + 3 MiB, so the claimant goes.
    assert_eq!(l.grow(second, 3 * MIB), Err(Refusal::Shed));
    assert_eq!(second_signal.refusal(), Some(Refusal::Shed));
    assert_eq!(leader_signal.refusal(), None);
    l.release(leader, None);
    assert!(accounts_are_empty(&l));
}

#[test]
fn a_small_review_overdraws_rather_than_being_shed() {
    let l = ledger();
    let (_, waker) = waker();
    let (a, _) = read(&l, origin(1, 1), 24 * MIB);
    let (b, _) = read(&l, origin(2, 2), 24 * MIB);
    // Both being decided: nothing can be shed.
    assert_eq!(l.enter(a, "x", &waker), ShareVerdict::Entered);
    assert_eq!(l.enter(b, "y", &waker), ShareVerdict::Entered);
    let (small, signal) = l.open(origin(3, 3));
    assert!(l.grow(small, 8 * 1024).is_ok());
    assert_eq!(signal.refusal(), None);
    assert_eq!(l.used(), 48 * MIB + 8 * 1024);
    // A large one is refused in the same place.
    let (large, _) = l.open(origin(4, 4));
    assert_eq!(l.grow(large, MIB), Err(Refusal::Shed));
    for id in [a, b, small] {
        l.release(id, None);
    }
    assert!(accounts_are_empty(&l));
}

#[test]
fn a_namespace_past_its_share_waits_for_its_own_reviews_only() {
    let l = ledger();
    let (_, waker1) = waker();
    let ids: Vec<u64> = (0..3).map(|i| read(&l, origin(1, i), 4096).0).collect();
    assert_eq!(l.enter(ids[0], "flood", &waker1), ShareVerdict::Entered);
    assert_eq!(l.enter(ids[1], "flood", &waker1), ShareVerdict::Entered);
    let (wakes, waker3) = waker();
    assert_eq!(l.enter(ids[2], "flood", &waker3), ShareVerdict::Wait);
    // Another namespace through the same apiserver is decided at once.
    let (other, _) = read(&l, origin(1, 9), 4096);
    assert_eq!(l.enter(other, "quiet", &waker1), ShareVerdict::Entered);
    l.release(other, None);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    // One of the flood's reviews answered: the waiting one is woken and enters.
    l.release(ids[0], None);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(l.enter(ids[2], "flood", &waker3), ShareVerdict::Entered);
    l.release(ids[1], None);
    l.release(ids[2], None);
    assert!(accounts_are_empty(&l));
}

#[test]
fn a_namespace_share_counts_bytes_and_one_review_always_fits() {
    let l = ledger();
    let (_, waker) = waker();
    let (a, _) = read(&l, origin(1, 1), 20 * MIB);
    let (b, b_signal) = read(&l, origin(2, 2), 8 * MIB);
    // Per peer and namespace: the same namespace from another peer is another share.
    assert_eq!(l.enter(a, "big", &waker), ShareVerdict::Entered);
    assert_eq!(l.enter(b, "big", &waker), ShareVerdict::Entered);
    let (c, c_signal) = read(&l, origin(1, 3), 8 * MIB);
    assert_eq!(l.enter(c, "big", &waker), ShareVerdict::Wait);
    // A waiting review is still sheddable: a small review that needs room takes it, the largest one that
    // is not being decided.
    let (small, _) = read(&l, origin(3, 4), 4096);
    let (e, _) = read(&l, origin(4, 5), 4 * MIB);
    let (f, _) = read(&l, origin(5, 6), 8 * MIB - 4096);
    assert_eq!(l.used(), 48 * MIB);
    let shed = l.grow(small, 4096).expect("the small review grows");
    assert_eq!(shed.victims, vec![8 * MIB]);
    assert_eq!(c_signal.refusal(), Some(Refusal::Shed));
    assert_eq!(b_signal.refusal(), None);
    assert_eq!(
        l.enter(c, "big", &waker),
        ShareVerdict::Refused(Refusal::Shed)
    );
    for id in [a, b, small, e, f] {
        l.release(id, None);
    }
    assert!(accounts_are_empty(&l));
}

#[test]
fn caps_are_raised_to_one_maximum_size_body() {
    let l = BudgetLimits {
        total: 1,
        per_peer: 1,
        per_connection: 1,
        per_namespace: 1,
        reviews_per_namespace: 0,
    }
    .clamped();
    assert_eq!(
        l,
        BudgetLimits {
            total: BODY_LIMIT_BYTES,
            per_peer: BODY_LIMIT_BYTES,
            per_connection: BODY_LIMIT_BYTES,
            per_namespace: BODY_LIMIT_BYTES,
            reviews_per_namespace: 1,
        }
    );
}
