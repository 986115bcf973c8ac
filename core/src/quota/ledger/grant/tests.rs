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
