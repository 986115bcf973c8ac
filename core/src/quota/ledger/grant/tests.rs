use super::*;
use crate::quota::ledger::{self, Bounds, Planned, Seen, effective_usage, plan_in};

const CLASS: &str = "L4-24GB";

fn gpus(n: u64) -> Counted {
    Counted {
        classes: [(CLASS.to_string(), n * 1000)].into(),
        total: n * 1000,
    }
}

fn unseen(_: &str) -> Seen {
    Seen::No
}

/// A tier of `max` GPUs whose first `min` are within its guarantee.
fn standing(min: u64, max: u64) -> impl Fn(&Usage) -> Option<Standing> {
    move |u: &Usage| {
        let after = u.tier("bronze", None) + 1000;
        match after {
            a if a > max * 1000 => None,
            a if a > min * 1000 => Some(Standing::Borrowing),
            _ => Some(Standing::WithinMin),
        }
    }
}

#[test]
fn a_namespace_without_a_stream_gets_one_pod_s_entry() {
    let ask = ("bronze", "team-a", &gpus(1));
    assert_eq!(pods(&Usage::default(), ask, 1, standing(0, 100)), 1);
    assert_eq!(pods(&Usage::default(), ask, 0, standing(0, 100)), 1);
}

#[test]
fn a_grant_is_at_most_half_of_what_keeps_the_first_pod_s_standing() {
    let ask = ("bronze", "team-a", &gpus(1));
    // Ten fit under the max: five are granted.
    assert_eq!(pods(&Usage::default(), ask, 64, standing(0, 10)), 5);
    // Four are within the min: two, so the grant never reaches across it.
    assert_eq!(pods(&Usage::default(), ask, 64, standing(4, 10)), 2);
    // Past the min, borrowing up to the max.
    let mut usage = Usage::default();
    usage.add("bronze", "team-b", &gpus(6), 1);
    assert_eq!(pods(&usage, ask, 64, standing(4, 10)), 2);
    // One left: no grant.
    usage.add("bronze", "team-b", &gpus(3), 1);
    assert_eq!(pods(&usage, ask, 64, standing(4, 10)), 1);
    // What the replica drew lately, doubled, bounds it; so does MAX_PODS.
    assert_eq!(pods(&Usage::default(), ask, 3, standing(0, 1_000)), 3);
    assert_eq!(
        pods(&Usage::default(), ask, 10_000, standing(0, 1_000)),
        MAX_PODS
    );
}

#[test]
fn a_replica_draws_only_what_its_grant_has_room_for_within_its_window() {
    let g = Entry::grant("g", ("bronze", "team-a", &gpus(2)), 3, "r1", 1_000);
    assert_eq!(g.total, 6_000);
    assert!(has_room(&g, &gpus(5), &gpus(1), 1_000 + DRAW_MS - 1));
    assert!(!has_room(&g, &gpus(5), &gpus(2), 1_000));
    assert!(!has_room(
        &g,
        &Counted::default(),
        &gpus(1),
        1_000 + DRAW_MS
    ));
    // A class the grant does not hold.
    let other = Counted {
        classes: [("H100-80GB".to_string(), 1000)].into(),
        total: 1000,
    };
    assert!(!has_room(&g, &Counted::default(), &other, 1_000));
}

/// Every other replica counts the whole grant for every namespace of the tier until its draws are watched;
/// its own replica counts what it drew instead.
#[test]
fn others_count_the_whole_grant_its_replica_what_it_drew() {
    let g = Entry::grant("g", ("bronze", "team-a", &gpus(1)), 8, "r1", 0);
    let drawn = vec![Entry::new("pod-1", "bronze", "team-a", &gpus(1), 10)];
    let entries = [g];
    let tier_at = |replica: &'static str, now: u64| {
        let draws = |_: &str| drawn.as_slice();
        let seen = view(&entries, replica, draws);
        effective_usage(&Usage::default(), seen, unseen, now, ("bronze", "team-b"))
            .tier("bronze", None)
    };
    assert_eq!(tier_at("r2", 0), 8_000);
    assert_eq!(tier_at("r2", DRAW_MS + OTHERS_WINDOW_MS - 1), 8_000);
    assert_eq!(tier_at("r2", DRAW_MS + OTHERS_WINDOW_MS), 0);
    assert_eq!(tier_at("r1", 0), 1_000);
}

#[test]
fn a_grant_is_kept_while_it_counts_and_is_neither_limited_nor_compacted() {
    let tight = Bounds {
        in_flight: 1,
        phantoms: 1,
        compact_at: 1,
    };
    let mut entries = vec![Entry::grant(
        "g",
        ("bronze", "team-a", &gpus(1)),
        4,
        "r1",
        0,
    )];
    // Past the watch window a plain entry would be a phantom; a grant is not, and takes no slot.
    let now = OTHERS_WINDOW_MS + 1;
    let pod = Entry::new("pod", "bronze", "team-a", &gpus(1), now);
    assert_eq!(
        plan_in(&mut entries, pod, false, unseen, now, &tight),
        Planned::Written
    );
    assert_eq!(entries.len(), 2);
    ledger::prune(&mut entries, unseen, DRAW_MS + OTHERS_WINDOW_MS);
    assert_eq!(
        entries.iter().map(|e| e.uid.as_str()).collect::<Vec<_>>(),
        ["pod"]
    );
}

#[test]
fn closing_a_grant_past_its_window_writes_its_draws_in_its_place() {
    let mine = Entry::grant("g1", ("bronze", "team-a", &gpus(1)), 4, "r1", 0);
    let young = Entry::grant("g2", ("bronze", "team-a", &gpus(1)), 4, "r1", DRAW_MS);
    let theirs = Entry::grant("g3", ("bronze", "team-b", &gpus(1)), 4, "r2", 0);
    let draw = Entry::new("pod-1", "bronze", "team-a", &gpus(1), 5);
    let mut entries = vec![mine, young, theirs];
    let draws = |uid: &str| match uid {
        "g1" => vec![draw.clone()],
        _ => Vec::new(),
    };
    let open = |_: &str| false;
    assert!(close_drawn(&mut entries, "r1", (draws, open), DRAW_MS));
    let uids: Vec<&str> = entries.iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(uids, ["g2", "g3", "pod-1"]);
    assert!(!close_drawn(&mut entries, "r1", (draws, open), DRAW_MS));
    // A sealed grant closes within its window.
    assert!(close_drawn(
        &mut entries,
        "r1",
        (draws, |uid: &str| uid == "g2"),
        DRAW_MS
    ));
    let uids: Vec<&str> = entries.iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(uids, ["g3", "pod-1"]);
}

/// A plain entry is written as it was before grants; a grant names its replica.
#[test]
fn only_a_grant_carries_its_replica() {
    let plain = serde_json::to_value(Entry::new("u", "bronze", "team-a", &gpus(1), 1)).unwrap();
    assert!(plain.get("grantedTo").is_none());
    let g = Entry::grant("g", ("bronze", "team-a", &gpus(1)), 2, "r1", 1);
    let json = serde_json::to_value(&g).unwrap();
    assert_eq!(json["grantedTo"], "r1");
    assert_eq!(serde_json::from_value::<Entry>(json).unwrap(), g);
}

/// `standing(min, max)` with a Pod over the `max` at [`Standing::OverMax`]: the decision a refusal is.
fn decided(min: u64, max: u64) -> impl Fn(&Usage) -> Standing {
    let standing = standing(min, max);
    move |u: &Usage| standing(u).unwrap_or(Standing::OverMax)
}

/// Replica `replica`'s decision of a 1-GPU Pod of team-a over `entries` at 0, refused or not, and what
/// [`refusal`] makes of it with `without` deciding it again over the entries its filter keeps; how many
/// times `without` was called.
fn refusal_over(entries: &[Entry], (min, max): (u64, u64)) -> (Standing, Refusal, usize) {
    let usage_of = |keep: &dyn Fn(&Entry) -> bool| {
        let kept = entries.iter().filter(|e| keep(e));
        effective_usage(&Usage::default(), kept, unseen, 0, ("bronze", "team-a"))
    };
    let refused = decided(min, max)(&usage_of(&|_| true));
    let mut called = 0;
    let refusal = refusal(refused, "r1", entries, |keep| {
        called += 1;
        Some(decided(min, max)(&usage_of(keep)))
    });
    (refused, refusal, called)
}

#[test]
fn a_pod_that_stands_better_without_other_replicas_grants_is_held() {
    let theirs = Entry::grant("g", ("bronze", "team-b", &gpus(1)), 3, "r2", 0);
    let plain = Entry::new("pod-0", "bronze", "team-a", &gpus(1), 0);
    // Over the max of 4 only by r2's grant of 3: admitted without it.
    let entries = [theirs.clone(), plain.clone()];
    assert_eq!(
        refusal_over(&entries, (0, 4)),
        (Standing::OverMax, Refusal::HeldByGrants, 1)
    );
    // Refused while borrowing (say, for its PriorityClass), within the min of 2 without the grant.
    assert_eq!(
        refusal_over(&entries, (2, 100)),
        (Standing::Borrowing, Refusal::HeldByGrants, 1)
    );
    // What the filter keeps: every entry but other replicas' grants.
    let mine = Entry::grant("g1", ("bronze", "team-a", &gpus(1)), 2, "r1", 0);
    let mut kept = Vec::new();
    let held = refusal(Standing::OverMax, "r1", [&theirs, &plain, &mine], |keep| {
        kept = [&theirs, &plain, &mine].map(keep).to_vec();
        Some(Standing::WithinMin)
    });
    assert_eq!(
        (held, kept),
        (Refusal::HeldByGrants, vec![false, true, true])
    );
}

#[test]
fn a_pod_that_stands_the_same_without_them_is_refused() {
    let theirs = Entry::grant("g", ("bronze", "team-b", &gpus(1)), 1, "r2", 0);
    let plain = Entry::new("pod-0", "bronze", "team-a", &gpus(4), 0);
    // Over the max of 4 with or without r2's grant.
    let entries = [theirs, plain];
    assert_eq!(
        refusal_over(&entries, (0, 4)),
        (Standing::OverMax, Refusal::Refused, 1)
    );
    // Refused while borrowing, borrowing without it too.
    assert_eq!(
        refusal_over(&entries, (1, 100)),
        (Standing::Borrowing, Refusal::Refused, 1)
    );
    // No standing without them (no quota applies): never better.
    let none = refusal(Standing::OverMax, "r1", &entries, |_| None);
    assert_eq!(none, Refusal::Refused);
}

#[test]
fn with_no_other_replica_s_grant_a_refusal_is_not_decided_again() {
    // Plain entries and the replica's own grant put the Pod over the max of 4: nothing to wait for.
    let entries = [
        Entry::new("pod-0", "bronze", "team-a", &gpus(2), 0),
        Entry::grant("g1", ("bronze", "team-b", &gpus(1)), 3, "r1", 0),
    ];
    assert_eq!(
        refusal_over(&entries, (0, 4)),
        (Standing::OverMax, Refusal::Refused, 0)
    );
    assert_eq!(
        refusal_over(&[], (0, 0)),
        (Standing::OverMax, Refusal::Refused, 0)
    );
}
