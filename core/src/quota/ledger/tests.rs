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
    let Plan::Limited(l) = plan(&entries, entry("new", 1, now), false, unseen, now, &SMALL) else {
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

/// A ledger of another tier is skipped only when none of its namespaces can count, and then skipping it
/// changes nothing effective_usage gives.
#[test]
fn another_tier_s_ledger_is_walked_only_when_one_of_its_namespaces_can_count() {
    let mut watched = Usage::default();
    watched.add("bronze", "team-a", &entry("held-a", 1, 0).counted(), 1);
    watched.add("silver", "team-b", &entry("held-b", 1, 0).counted(), 1);
    let bronze = [
        entry_in("team-a", "r1", 2, 0),
        entry_in("team-a", "r2", 1, 0),
    ];
    let namespaces = || ["team-a"].into_iter();
    let mine = [entry_in("team-b", "s1", 1, 0)];
    // A silver decision of team-b: bronze's team-a is counted in bronze, so its entries cannot count.
    let scope = ("silver", "team-b");
    assert!(!ledger_may_count(&watched, namespaces(), scope));
    let with = effective_usage(&watched, mine.iter().chain(&bronze), unseen, 1, scope);
    let without = effective_usage(&watched, &mine, unseen, 1, scope);
    assert_eq!(with, without);
    // The decided namespace itself (relabelled from bronze), a namespace the watch now counts in silver, and
    // a namespace the watch does not count: walked.
    assert!(ledger_may_count(
        &watched,
        namespaces(),
        ("silver", "team-a")
    ));
    let mut moved = Usage::default();
    moved.add("silver", "team-a", &entry("held-a", 1, 0).counted(), 1);
    assert!(ledger_may_count(&moved, namespaces(), scope));
    assert!(ledger_may_count(&watched, ["team-c"], scope));
}
