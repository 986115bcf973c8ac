//! The frontend's per-reservation work on the quota ledger, for counting with callgrind: the usage a Pod is
//! decided against (`ledger::effective_usage`) and the reservation taken in place (`ledger::plan_in`), as
//! `/validate-pod` does under the ledger batch's lock, `R` times (environment; default 200).
//!
//! The state is a burst in progress: `ENTRIES` (argument; default 2,000) ledger entries of 50 namespaces aged
//! 0-4 s, half counted by the watch and half in flight, and 300 watched namespaces in 4 tiers. Bounds are
//! high enough that nothing is refused. By default every decision walks every entry; with `SPLIT=1` the
//! entries are one ledger per tier and a decision walks another tier's only when one of its namespaces can
//! count there, as the frontend does. The count per reservation is the difference between `R=200` and
//! `R=0` divided by 200:
//!
//! ```sh
//! cargo build --release -p gpu-admission-core --example ledger_cost
//! R=0   valgrind --tool=callgrind target/release/examples/ledger_cost 2000
//! R=200 valgrind --tool=callgrind target/release/examples/ledger_cost 2000
//! ```
use std::collections::{BTreeMap, BTreeSet};

use gpu_admission_core::quota::Usage;
use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{self, Bounds, Entry, Planned, Seen};

const TIERS: [&str; 4] = ["gold", "silver", "bronze", "spot"];
const NOW_MS: u64 = 1_000_000;

fn tier_index(tier: &str) -> usize {
    TIERS.iter().position(|t| *t == tier).expect("one of TIERS")
}

fn counted(gpus: u64) -> Counted {
    Counted {
        classes: BTreeMap::from([("nvidia-a100".to_string(), gpus * 1000)]),
        total: gpus * 1000,
    }
}

fn main() {
    let entries: usize = (std::env::args().nth(1))
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000);
    let rounds: usize = (std::env::var("R").ok())
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let mut watched = Usage::default();
    for n in 0..300 {
        watched.add(TIERS[n % 4], &format!("team-{n}"), &counted(1), 1);
    }
    // As the frontend's watch keeps what it saw of each UID.
    let mut seen = foldhash::HashMap::default();
    let mut ledger: Vec<Entry> = (0..entries)
        .map(|i| {
            let uid = format!("uid-{i}");
            let at_ms = NOW_MS - (i as u64 * 4_000 / entries as u64);
            if i % 2 == 0 {
                seen.insert(uid.clone(), Seen::Since { at_ms });
            }
            let n = i % 50;
            Entry::new(&uid, TIERS[n % 4], &format!("team-{n}"), &counted(1), at_ms)
        })
        .collect();
    let seen = |uid: &str| seen.get(uid).copied().unwrap_or(Seen::No);
    let bounds = Bounds {
        in_flight: usize::MAX,
        phantoms: usize::MAX,
        compact_at: usize::MAX,
    };
    let mut held = 0;
    if std::env::var("SPLIT").is_ok_and(|v| v == "1") {
        // One ledger per tier, as stored; a decision walks another tier's only if one of its namespaces can
        // count there (`ledger::ledger_may_count`), as the frontend does.
        let mut ledgers: BTreeMap<&str, (Vec<Entry>, BTreeSet<String>)> = BTreeMap::new();
        for e in ledger.drain(..) {
            let (entries, namespaces) = ledgers.entry(TIERS[tier_index(&e.tier)]).or_default();
            namespaces.insert(e.namespace.clone());
            entries.push(e);
        }
        for r in 0..rounds {
            let namespace = format!("team-{}", r % 50);
            let tier = TIERS[r % 50 % 4];
            let scope = (tier, namespace.as_str());
            let read = (ledgers.iter())
                .filter(|(t, (_, namespaces))| {
                    **t == tier
                        || ledger::ledger_may_count(
                            &watched,
                            namespaces.iter().map(String::as_str),
                            scope,
                        )
                })
                .flat_map(|(_, (entries, _))| entries);
            let usage = ledger::effective_usage(&watched, read, seen, NOW_MS, scope);
            held += usage.namespace(&namespace, None);
            let entry = Entry::new(&format!("new-{r}"), tier, &namespace, &counted(1), NOW_MS);
            let (mine, namespaces) = ledgers.entry(tier).or_default();
            namespaces.insert(namespace.clone());
            let planned = ledger::plan_in(mine, entry, false, seen, NOW_MS, &bounds);
            assert_eq!(planned, Planned::Written);
        }
    } else {
        for r in 0..rounds {
            let namespace = format!("team-{}", r % 50);
            let tier = TIERS[r % 50 % 4];
            let usage =
                ledger::effective_usage(&watched, &ledger, seen, NOW_MS, (tier, &namespace));
            held += usage.namespace(&namespace, None);
            let entry = Entry::new(&format!("new-{r}"), tier, &namespace, &counted(1), NOW_MS);
            let planned = ledger::plan_in(&mut ledger, entry, false, seen, NOW_MS, &bounds);
            assert_eq!(planned, Planned::Written);
        }
    }
    println!("{rounds} reservations on {entries} entries; {held} milli-GPUs read");
}
