use gpu_admission_core::quota::demand::Counted;
use tokio::sync::oneshot;

use super::*;

fn one_gpu() -> Counted {
    Counted {
        classes: [("L4-24GB".to_string(), 1000)].into(),
        total: 1000,
    }
}

fn entries(uids: &[&str], tier: &str) -> Vec<Entry> {
    (uids.iter())
        .map(|u| Entry::new(u, tier, "team-a", &one_gpu(), 0))
        .collect()
}

fn version(v: &str, uids: &[&str]) -> LedgerVersion {
    LedgerVersion {
        resource_version: Some(v.to_string()),
        entries: entries(uids, "gold"),
    }
}

fn tier(v: &str, uids: &[&str], name: &str) -> TierLedger {
    let mut t = TierLedger::new();
    t.ledger = LedgerVersion {
        resource_version: Some(v.to_string()),
        entries: entries(uids, name),
    };
    t.recount_namespaces();
    t
}

/// Decides one reservation of `uid` into `t`'s next write; its answer arrives on the receiver.
fn reserve(t: &mut TierLedger, uid: &str) -> oneshot::Receiver<Flushed> {
    let e = entries(&[uid], "gold").remove(0);
    t.pending().push(e);
    let (tx, rx) = oneshot::channel();
    t.batch.waiting.push(tx);
    rx
}

fn version_of(t: &TierLedger) -> Option<&str> {
    t.ledger.resource_version.as_deref()
}

#[test]
fn a_decision_reads_every_tier_s_ledger_and_reserves_in_its_own() {
    let mut ledgers = BTreeMap::from([
        ("gold".to_string(), tier("7", &["g1"], "gold")),
        ("silver".to_string(), tier("3", &["s1"], "silver")),
    ]);
    let gold = ledgers.get_mut("gold").unwrap();
    let _answer = reserve(gold, "g2");
    // Silver's team-a is counted in gold now (relabelled), so a gold decision reads silver's ledger too.
    let mut watched = Usage::default();
    watched.add("gold", "team-a", &one_gpu(), 1);
    let uids: Vec<&str> = (entries_for(&ledgers, &watched, ("gold", "team-b"), "r1"))
        .map(|e| e.uid.as_str())
        .collect();
    assert_eq!(uids, ["g1", "g2", "s1"]);
    // Gold's batch builds on the version it read; silver's ledger is untouched and has no batch.
    assert!(matches!(
        &ledgers["gold"].batch.next,
        Some((Base::Known(Some(v)), e)) if v == "7" && e.len() == 2
    ));
    assert!(ledgers["silver"].batch.next.is_none());
    assert_eq!(ledgers["silver"].known().len(), 1);
}

#[test]
fn another_tier_s_ledger_is_read_only_when_its_namespaces_can_count() {
    let mut ledgers = BTreeMap::from([
        ("gold".to_string(), tier("7", &["g1"], "gold")),
        ("silver".to_string(), tier("3", &["s1"], "silver")),
    ]);
    // Silver's only namespace, team-a, is counted in silver: a gold decision of team-b skips its ledger.
    let mut watched = Usage::default();
    watched.add("silver", "team-a", &one_gpu(), 1);
    let read = |ledgers: &BTreeMap<String, TierLedger>, scope| -> Vec<String> {
        (entries_for(ledgers, &watched, scope, "r1"))
            .map(|e| e.uid.clone())
            .collect()
    };
    assert_eq!(read(&ledgers, ("gold", "team-b")), ["g1"]);
    // Team-a's own decision reads it (its namespace may have been relabelled since).
    assert_eq!(read(&ledgers, ("gold", "team-a")), ["g1", "s1"]);
    // A reservation of team-b in silver's batch makes silver's ledger one a gold team-b decision reads.
    let silver = ledgers.get_mut("silver").unwrap();
    let _answer = reserve(silver, "s2");
    silver.reserved_in("team-b");
    assert_eq!(read(&ledgers, ("gold", "team-b")), ["g1", "s1", "s2"]);
    // After a watched version of silver holding team-a's entries only, it is skipped again.
    let silver = ledgers.get_mut("silver").unwrap();
    let mut later = version("4", &[]);
    later.entries = entries(&["s1"], "silver");
    silver.watched("4", later);
    assert_eq!(read(&ledgers, ("gold", "team-b")), ["g1"]);
}

#[test]
fn a_later_version_from_the_watch_sends_back_a_batch_decided_on_an_earlier_one() {
    let mut t = tier("7", &["g1"], "gold");
    let _answer = reserve(&mut t, "g2");
    let back = t.watched("8", version("8", &["g1", "other"]));
    assert_eq!(back.len(), 1, "the batch's write would conflict");
    assert_eq!(version_of(&t), Some("8"));
    assert!(t.batch.next.is_none() && t.batch.waiting.is_empty());
    let uids: Vec<&str> = t.known().iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(
        uids,
        ["g1", "other"],
        "decided again on the watched entries"
    );
}

#[test]
fn an_earlier_or_equal_version_from_the_watch_changes_nothing() {
    let mut t = tier("10", &["g1"], "gold");
    let _answer = reserve(&mut t, "g2");
    assert!(t.watched("9", version("9", &[])).is_empty());
    assert!(t.watched("10", version("10", &[])).is_empty());
    assert_eq!(version_of(&t), Some("10"));
    assert_eq!(t.ledger.entries.len(), 1);
    assert_eq!(t.batch.waiting.len(), 1, "the batch is still to be written");
}

#[test]
fn a_ledger_deleted_under_the_watch_is_created_by_the_next_write() {
    let mut t = tier("7", &["g1"], "gold");
    let back = t.watched("9", LedgerVersion::default());
    assert!(back.is_empty());
    assert_eq!(version_of(&t), None);
    let _answer = reserve(&mut t, "g2");
    let (base, carried, _) = t.take_batch().expect("a batch to write");
    assert_eq!(base, None, "written as a create");
    assert_eq!(carried.len(), 1);
}

#[test]
fn a_write_answered_after_the_watch_brought_a_later_one_does_not_take_the_ledger_back() {
    let mut t = tier("7", &["g1"], "gold");
    let _first = reserve(&mut t, "g2");
    let (base, _, waiting) = t.take_batch().expect("a batch to write");
    assert_eq!(base.as_deref(), Some("7"));
    // Built on the write in flight.
    let _second = reserve(&mut t, "g3");
    // Another replica wrote on top of it before its answer arrived here.
    assert!(t.watched("9", version("9", &["g1", "g2", "x"])).is_empty());
    let (mine, later) = t.written(Ok(version("8", &["g1", "g2"])), None);
    assert!(matches!(mine, Flushed::Written));
    assert_eq!(waiting.len(), 1);
    assert_eq!(later.map(|l| l.len()), Some(1), "g3 is decided again");
    assert_eq!(version_of(&t), Some("9"));
    assert!(t.batch.next.is_none());
}

#[test]
fn a_write_answered_before_the_watch_brings_it_builds_the_next_batch_on_it() {
    let mut t = tier("7", &["g1"], "gold");
    let _first = reserve(&mut t, "g2");
    t.take_batch().expect("a batch to write");
    let _second = reserve(&mut t, "g3");
    let (mine, later) = t.written(Ok(version("8", &["g1", "g2"])), None);
    assert!(matches!(mine, Flushed::Written) && later.is_none());
    assert!(matches!(&t.batch.next, Some((Base::Known(Some(v)), _)) if v == "8"));
    // The watch bringing that same write afterwards changes nothing.
    assert!(t.watched("8", version("8", &["g1", "g2"])).is_empty());
    assert_eq!(t.batch.waiting.len(), 1);
}

#[test]
fn a_conflict_whose_winner_the_watch_brought_keeps_it_and_a_stale_read_does_not_replace_it() {
    let mut t = tier("7", &["g1"], "gold");
    let _first = reserve(&mut t, "g2");
    let (base, _, _) = t.take_batch().expect("a batch to write");
    assert!(!t.knows_later_than(&base));
    t.watched("9", version("9", &["g1", "x"]));
    assert!(t.knows_later_than(&base), "no read needed");
    let (mine, later) = t.written(Err(LedgerError::Conflict), Some(Ok(version("8", &[]))));
    assert!(matches!(mine, Flushed::Retry));
    assert_eq!(later.map(|l| l.len()), Some(0));
    assert_eq!(version_of(&t), Some("9"));
    assert_eq!(t.ledger.entries.len(), 2);
}

#[test]
fn versions_that_cannot_be_ordered_are_left_to_reads_and_writes() {
    let mut t = tier("a7", &["g1"], "gold");
    assert!(t.watched("a9", version("a9", &[])).is_empty());
    assert_eq!(
        version_of(&t),
        Some("a7"),
        "the watch cannot tell it is later"
    );
    assert!(
        !t.knows_later_than(&Some("a5".into())),
        "a conflict reads the ledger"
    );
    let _answer = reserve(&mut t, "g2");
    t.take_batch().expect("a batch to write");
    t.written(Ok(version("a8", &["g1", "g2"])), None);
    assert_eq!(version_of(&t), Some("a8"));
}
