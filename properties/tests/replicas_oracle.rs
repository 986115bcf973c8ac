//! The replicas oracle ([`gpu_admission_properties::replicas_oracle`]) over random sequences: 300 sequences
//! of 80 steps in `cargo test`, as many as `REPLICAS_ORACLE_SEQUENCES` says in CI. Prints the count of
//! sequences, steps, admissions, write conflicts, batches overtaken by the ledger watch, phantoms, decisions
//! over a `max`, refused by a rate limit and counting another namespace's Pod through the ledger only,
//! grants written, draws, Pods waiting for a grant's write, grants sent back unwritten, grants closed,
//! decisions held by other replicas' grants, replicas stopped, and counterexamples (0, or the test fails
//! with the first one's trace). The negative controls run the same sequences through a model broken on
//! purpose, and must fail.
use gpu_admission_properties::op_stream;
use gpu_admission_properties::replicas_oracle::{Checks, Ran, Variant, run, run_with};

const STEPS: usize = 80;

/// A sequence's op bytes.
fn ops(seed: u64) -> Vec<u8> {
    op_stream(seed, 1 + STEPS * 2)
}

fn sequences() -> u64 {
    std::env::var("REPLICAS_ORACLE_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

#[test]
fn replicas_sharing_a_ledger_never_hold_over_a_max() {
    let sequences = sequences();
    let mut sum = Ran::default();
    for seed in 0..sequences {
        match run(&ops(seed)) {
            Ok(ran) => sum.add(&ran),
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    // The sequences reach what the rules are for: replicas racing on a version, Pods never created, and
    // decisions counting another namespace's Pod through the ledger only.
    assert!(
        sum.conflicts > 0 && sum.phantoms > 0 && sum.over_max > 0 && sum.through_ledger > 0,
        "{sum:?}"
    );
    // And grants: written, drawn from, closed, holding another replica's Pods back.
    assert!(
        sum.grants > 0
            && sum.draws > 0
            && sum.closes > 0
            && sum.held_by_grants > 0
            && sum.sealed > 0,
        "{sum:?}"
    );
    println!(
        "replicas oracle: {sequences} sequences, {} steps, {} admissions, {} conflicts, {} batches overtaken, \
         {} phantoms, {} over a max, {} rate-limited, {} counting another namespace's Pod through the ledger \
         only, {} grants written, {} draws, {} waits for a grant's write, {} grants sent back, {} closes, {} \
         held by grants, {} grants sealed, {} replicas stopped, 0 counterexamples",
        sum.steps,
        sum.admissions,
        sum.conflicts,
        sum.overtaken,
        sum.phantoms,
        sum.over_max,
        sum.limited,
        sum.through_ledger,
        sum.grants,
        sum.draws,
        sum.waited,
        sum.grants_back,
        sum.closes,
        sum.held_by_grants,
        sum.sealed,
        sum.stopped
    );
}

/// The first seed below `sequences()` whose sequence breaks an invariant under `variant`.
fn first_counterexample(variant: Variant, checks: Checks) -> Option<(u64, String)> {
    (0..sequences())
        .find_map(|seed| (run_with(variant, checks, &ops(seed)).err()).map(|e| (seed, e)))
}

/// `variant` breaks both invariants within the sequences the model passes: the oracle can fail.
fn fails(variant: Variant) {
    for checks in [Checks::All, Checks::MaxOnly] {
        let (seed, e) = first_counterexample(variant, checks)
            .unwrap_or_else(|| panic!("{variant:?}: no counterexample checking {checks:?}"));
        let first = e.lines().next().unwrap_or("");
        println!(
            "replicas oracle, negative control {variant:?} checking {checks:?}: counterexample at seed {seed} \
             (as it must): {first}"
        );
        if checks == Checks::MaxOnly {
            assert!(first.contains("over its"), "{e}");
        }
    }
}

#[test]
fn writes_without_the_version_check_break_a_max() {
    fails(Variant::BlindWrites);
}

#[test]
fn a_pod_watch_late_beyond_the_window_breaks_a_max() {
    fails(Variant::LateWatch);
}

#[test]
fn draws_beyond_a_grant_break_a_max() {
    fails(Variant::Overdraw);
}

#[test]
fn admitting_over_other_replicas_grants_breaks_a_max() {
    fails(Variant::AdmitOverGrants);
}

/// Why a grant counts for the other namespaces `grant::DRAW_MS` longer than a plain entry, found
/// by a search over sequences biased to bursts and stops (the 300 sequences do not reach it: a grant's close
/// rewrites it into its draws' entries about a second after its decision, or at once when sealed, long before
/// the window ends), in 8 steps: r0 decides a burst of three 250-milli Pods of team-c at t=0, pod-0 as its own
/// entry and pod-1 as the first Pod of a grant of 2; pod-2 waits for the grant's write and is drawn from it at
/// t=300. That draw takes the grant's last room, but no draw finds it full and team-c is at no `max`, so it is
/// not sealed: its close waits for the timer at t=1000, and r0 stops at t=509. The grant stays in the ledger;
/// pod-2 is stored at t=1299, and r1's watch has not delivered it by t=5009 (its lag is within the window of
/// the draw: by t=5300). r1 holds team-a's 2000 and team-b's 500 milli-GPUs (decided at t=509, written after
/// a conflict), and at t=5009 decides team-b's 1000: read as a plain entry ([`Variant::GrantAsEntry`]), the
/// grant stopped counting for team-b at t=5000, so r1 counts 3000 milli-GPUs and admits, and the tier holds
/// 4250, over its `max` of 4000, once that Pod is stored; as core reads it, the grant counts until t=6000
/// (the Pod is held by it until r1's watch delivers pod-2, then refused over the `max`) and the same
/// sequence holds.
#[test]
fn a_grant_read_as_a_plain_entry_breaks_a_max_when_its_replica_stops() {
    let ops = [0, 2, 34, 13, 127, 10, 15, 0, 19, 0, 3, 15, 4, 0, 13, 15, 1];
    if let Err(e) = run_with(Variant::Faithful, Checks::All, &ops) {
        panic!("the faithful model breaks on the grant's trace: {e}");
    }
    let e = run_with(Variant::GrantAsEntry, Checks::MaxOnly, &ops)
        .expect_err("a grant read as a plain entry must break a max here");
    assert!(e.starts_with("step 7: tier bronze holds 4250"), "{e}");
}

/// A counterexample against the ledger's rules, every Pod watch lag within the window **after storage**
/// ([`Variant::LagFromStorage`]), found by this oracle and reduced to its 7 steps: r1 decides a Pod of
/// team-a (2 GPUs) at t=0, writes it at t=300, the apiserver stores it at t=1299 (under a second after
/// admission); r0's Pod watch delivers it at t≈6300 (a lag under 5 s after storage). At t=5500 r0 decides
/// 2.5 GPUs of team-b: the team-a entry is 5.5 s old, so it no longer counts for another namespace
/// (`OTHERS_WINDOW_MS` from its `at_ms`, the decision), and r0's watch has not delivered the Pod: r0 admits,
/// and the tier holds 4.5 GPUs over its `max` of 4 once they are stored. The window is counted from the
/// decision, so what the bound needs is decision → storage → every watch within it, not the watch alone.
#[test]
#[ignore = "counterexample: the ledger's window counts from the decision, a watch's lag from storage"]
fn a_watch_lag_within_the_window_after_storage_breaks_a_max() {
    let ops = [
        238, 243, 73, 79, 155, 67, 102, 112, 84, 95, 44, 39, 56, 100, 40,
    ];
    if let Err(e) = run_with(Variant::LagFromStorage, Checks::MaxOnly, &ops) {
        panic!("{e}");
    }
}
