//! The replicas oracle: several frontend replicas sharing one quota'd tier's ledger
//! (`quota::ledger`), each with its own Pod watch that delivers a stored Pod late, random sequences of what
//! they and the apiserver do, against a model of what the cluster truly holds written here on its own.
//!
//! **Modelled.** One tier (`bronze`, a `min` so Pods borrow, a `max` per class and in total), three
//! namespaces (`team-a` with a share of its own on the class, `team-b` with a share on the total, `team-c`
//! with none), two or three replicas, Pods of one class in three sizes, a simulated clock in ms that every
//! replica reads as it is (the entries' `at_ms` is the deciding replica's clock). The ledger is one object
//! with a version counter and the entries of each version. Each replica, as the frontend's `usage.rs` and
//! `tier_ledger.rs` do:
//! - knows a version of the ledger: the one its lagged **ledger watch** delivered (in order, or skipping to
//!   the newest as a relist does), its own last successful write, or a read after a conflict; versions only
//!   move forward;
//! - **decides** a Pod with core's rules only: `ledger::effective_usage` over its own Pod watch's usage and
//!   the entries it knows (its pending batch, else its known version), then `quota::decide` (`OverMax`:
//!   refused), then `ledger::plan_in` into its pending batch (`Limited`: refused);
//! - **writes** its batch in one update on the version it was decided on (group commit): while the write is in
//!   flight, new decisions build on its entries; the answer makes the next batch's base the written version,
//!   or, on a conflict, reads the newer version unless the ledger watch brought it, and decides every
//!   reservation of both batches again at once (the frontend's retry); a ledger watch bringing a later
//!   version sends a batch not yet written back to be decided again;
//! - has its own **Pod watch**: a stored Pod is counted from `stored + lag`, its going (finished, deleted)
//!   from `gone + lag`, each lag drawn per Pod and replica; the watch's `Seen` is core's.
//!
//! The apiserver: a write's outcome is decided when it starts (optimistic concurrency on the version), its
//! answer arrives later; an admitted Pod is stored, or its CREATE fails after admission (a **phantom**); a
//! stored Pod finishes or is deleted. Every step takes at most what it takes in the frontend: a batch is
//! written within [`FLUSH_MS`] of its oldest decision once no write is in flight, a write answers within
//! [`WRITE_MS`], an admitted Pod is stored within [`STORE_MS`]; a wait in the sequence lets them happen in
//! time order. The ledger's rate limits are scaled down ([`ORACLE_BOUNDS`]) so sequences reach them and
//! compaction.
//!
//! **The lag.** The rule counts an entry for the other namespaces for [`ledger::OTHERS_WINDOW_MS`] from its
//! `at_ms`, the time it was **decided**, so what it needs is every watch delivering a Pod within that window
//! of its decision. The model draws each Pod watch lag so that it does ([`Variant::Faithful`]): the lag
//! after storage is below the window less the time from decision to storage (under 1.4 s here: a batch
//! waiting for the write in flight, its own write, the apiserver storing the Pod). [`Variant::LagFromStorage`]
//! lets the lag be anything below the window after storage, as `OTHERS_WINDOW_MS`'s doc words it ("the delay
//! within which every replica's watch delivers a stored Pod"): that breaks a `max` (the ignored test
//! `a_watch_lag_within_the_window_after_storage_breaks_a_max` holds a 7-step trace), since an entry stops
//! counting for the other namespaces a window after its decision while a watch may still be before the
//! Pod's delivery.
//!
//! **Invariants**, after every step and every forced event:
//! - **a `max` holds on what is held**: the Pods stored and not gone, in the tier and in each namespace's
//!   share, are within every `max` of the policy (per class and in total);
//! - **no held Pod is counted by nobody**: for every replica, a held Pod is in its Pod watch, or its entry is
//!   in the ledger's newest version and younger than the window (so any decision that can be written counts
//!   it).
//!
//! **Negative controls**: [`Variant::BlindWrites`] (a write ignores the version: the last writer wins) and
//! [`Variant::LateWatch`] (a Pod watch may lag three windows after storage) must each give a counterexample.
//!
//! Not modelled: clock skew between replicas (every replica reads the one clock), relabels and policy
//! changes (the quota oracle has them), several tiers' ledgers, a write's failure other than a conflict,
//! the frontend's retry deadline (a reservation sent back is decided again until it is written or refused),
//! names taken (`AlreadyExists`), grace periods (a Pod goes when it is deleted).
use std::collections::BTreeMap;

use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{self, Bounds, Entry, Planned, Seen};
use gpu_admission_core::quota::{self, Standing, Usage};
use gpu_admission_policy::Policy;
use gpu_admission_policy::quotas::MilliGpus;

mod checks;
mod replica;

use replica::Replica;

/// The ledger's rate limits in the oracle: the frontend's rule with numbers an 80-step sequence reaches.
pub const ORACLE_BOUNDS: Bounds = Bounds {
    in_flight: 3,
    phantoms: 3,
    compact_at: 6,
};

/// A batch with reservations is written at most this long after its oldest decision (no write in flight).
pub const FLUSH_MS: u64 = 100;
/// A write's answer arrives at most this long after it started.
pub const WRITE_MS: u64 = 200;
/// An admitted Pod is stored at most this long after its admission (unless its CREATE fails).
pub const STORE_MS: u64 = 999;

/// The clock at the start of a sequence (ms since the epoch); the trace counts from it.
const START_MS: u64 = 1_795_946_400_000;

const TIER: &str = "bronze";
const CLASS: &str = "L4-24GB";
const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const SIZES: [MilliGpus; 3] = [500, 1000, 2000];

const POLICY: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 2, max: 4 } }
      total: { max: 4 }
      namespaces:
        - { namespace: team-a, classes: { L4-24GB: { min: 1, max: 2 } } }
        - { namespace: team-b, total: { max: 3 } }
";

/// Which model runs: the frontend's, or one broken on purpose (the negative controls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The frontend's rules, every Pod watch delivering a Pod within the window of its decision.
    Faithful,
    /// A write ignores the version it was decided on: the last writer wins.
    BlindWrites,
    /// A Pod watch may deliver a stored Pod up to three windows after it was stored.
    LateWatch,
    /// A Pod watch delivers a stored Pod within the window after its **storage** (not its decision).
    LagFromStorage,
}

/// Which invariants a run checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// Both: a `max` holds, no held Pod is counted by nobody.
    All,
    /// A `max` holds only (a negative control's overshoot, past the moment a Pod is counted by nobody).
    MaxOnly,
}

/// Where a Pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Decided into a batch, or in a write in flight.
    Reserved,
    /// Refused (over a `max`, or by its namespace's rate limit).
    Refused,
    /// Its reservation is written: the apiserver stores it next.
    Admitted { at_ms: u64 },
    /// Its CREATE failed after admission: its entry is a phantom.
    Phantom,
    /// Stored (and gone since, if `gone_ms`).
    Stored { at_ms: u64, gone_ms: Option<u64> },
}

/// One Pod of the model.
struct ModelPod {
    ns: usize,
    milli: MilliGpus,
    /// When its reservation was last decided.
    decided_ms: u64,
    state: State,
    /// Per replica: the lag of its Pod watch delivering the Pod stored, and gone.
    lags: Vec<(u64, u64)>,
}

impl ModelPod {
    fn counted(&self) -> Counted {
        Counted {
            classes: BTreeMap::from([(CLASS.to_string(), self.milli)]),
            total: self.milli,
        }
    }

    /// Whether it holds GPUs now (stored, not gone).
    fn held(&self, now_ms: u64) -> bool {
        matches!(self.state, State::Stored { at_ms, gone_ms } if at_ms <= now_ms && gone_ms.is_none_or(|g| now_ms < g))
    }

    /// What replica `r`'s Pod watch knows of it at `now_ms`.
    fn seen_by(&self, r: usize, now_ms: u64) -> Seen {
        let State::Stored { at_ms, gone_ms } = self.state else {
            return Seen::No;
        };
        let (stored_lag, gone_lag) = self.lags[r];
        let counted = at_ms + stored_lag;
        if now_ms < counted {
            return Seen::No;
        }
        match gone_ms {
            Some(g) if now_ms >= (g + gone_lag).max(counted) => Seen::Gone,
            _ => Seen::Since { at_ms: counted },
        }
    }
}

fn uid(i: usize) -> String {
    format!("pod-{i}")
}

fn index(uid: &str) -> Option<usize> {
    uid.strip_prefix("pod-")?.parse().ok()
}

/// What Pod `uid` is to replica `r`'s watch.
fn seen(pods: &[ModelPod], r: usize, now_ms: u64, uid: &str) -> Seen {
    index(uid)
        .and_then(|i| pods.get(i))
        .map_or(Seen::No, |p| p.seen_by(r, now_ms))
}

/// What a sequence ran through.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ran {
    pub steps: usize,
    /// Reservations written (Pods admitted).
    pub admissions: usize,
    /// Writes refused on their version (each sends its reservations back to be decided again).
    pub conflicts: usize,
    /// Batches sent back before their write by a later version the ledger watch brought.
    pub overtaken: usize,
    /// Admitted Pods whose CREATE failed after admission.
    pub phantoms: usize,
    /// Decisions over a `max`.
    pub over_max: usize,
    /// Decisions refused by their namespace's rate limit.
    pub limited: usize,
    /// Decisions that counted a held Pod of another namespace through the ledger only (the deciding
    /// replica's watch had not delivered it yet): the cross-replica rule at work.
    pub through_ledger: usize,
}

/// What went wrong, with the step and the trace so far.
pub type Counterexample = String;

/// The world: the ledger's versions, the replicas, the Pods, the clock.
struct World {
    variant: Variant,
    checks: Checks,
    policy: Policy,
    now_ms: u64,
    /// Every version of the ledger (0: no object yet), the newest last.
    ledger: Vec<Vec<Entry>>,
    replicas: Vec<Replica>,
    pods: Vec<ModelPod>,
    /// xorshift64 state: the Pod watches' lags.
    rng: u64,
    ran: Ran,
    trace: Vec<String>,
}

impl World {
    fn new(variant: Variant, checks: Checks, replicas: usize, seed: u64) -> Self {
        let text = format!("{}{POLICY}", gpu_admission_policy::DEFAULT_POLICY_YAML);
        let policy = gpu_admission_policy::parse(&text, "oracle.yaml").expect("oracle policy");
        World {
            variant,
            checks,
            policy,
            now_ms: START_MS,
            ledger: vec![Vec::new()],
            replicas: (0..replicas).map(|_| Replica::default()).collect(),
            pods: Vec::new(),
            rng: seed | 1,
            ran: Ran::default(),
            trace: Vec::new(),
        }
    }

    fn next_random(&mut self) -> u64 {
        let x = &mut self.rng;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A lag below `bound`: none, the longest, or any, a third of the time each.
    fn lag(&mut self, bound: u64) -> u64 {
        let bound = bound.max(1);
        match self.next_random() % 3 {
            0 => 0,
            1 => bound - 1,
            _ => self.next_random() % bound,
        }
    }

    fn latest(&self) -> u64 {
        self.ledger.len() as u64 - 1
    }

    /// Replica `r`'s Pod watch's usage: the Pods it counts now.
    fn watched(&self, r: usize) -> Usage {
        let mut usage = Usage::default();
        for p in &self.pods {
            if matches!(p.seen_by(r, self.now_ms), Seen::Since { .. }) {
                usage.add(TIER, NAMESPACES[p.ns], &p.counted(), 1);
            }
        }
        usage
    }

    /// Replica `r` decides Pod `i` (its namespace, its size) at now with core's rules: into its batch, or
    /// refused.
    fn decide(&mut self, r: usize, i: usize) -> Result<&'static str, String> {
        let now = self.now_ms;
        let watched = self.watched(r);
        let pods = &self.pods;
        let seen = |u: &str| seen(pods, r, now, u);
        let (ns, counted) = (NAMESPACES[pods[i].ns], pods[i].counted());
        let rep = &mut self.replicas[r];
        let usage = ledger::effective_usage(&watched, rep.known(), seen, now, (TIER, ns));
        let through_ledger = (pods.iter().enumerate()).any(|(j, p)| {
            p.ns != pods[i].ns
                && p.held(now)
                && p.seen_by(r, now) == Seen::No
                && (rep.known().iter())
                    .any(|e| e.uid == uid(j) && now - e.at_ms < ledger::OTHERS_WINDOW_MS)
        });
        self.ran.through_ledger += usize::from(through_ledger);
        let decision = quota::decide(&self.policy, TIER, ns, &counted, &usage)
            .ok_or_else(|| format!("no quota applies to {ns}"))?;
        let outcome = if decision.standing == Standing::OverMax {
            self.ran.over_max += 1;
            "over max"
        } else {
            let entry = Entry::new(&uid(i), TIER, ns, &counted, now);
            match ledger::plan_in(rep.pending(), entry, false, seen, now, &ORACLE_BOUNDS) {
                Planned::Written => {
                    rep.waiting.push(i);
                    self.pods[i].decided_ms = now;
                    self.pods[i].state = State::Reserved;
                    return Ok(decision.standing.as_str());
                }
                Planned::Limited(_) => {
                    self.ran.limited += 1;
                    "limited"
                }
                Planned::NameTaken => return Err("a unique name taken".into()),
            }
        };
        self.pods[i].state = State::Refused;
        Ok(outcome)
    }

    /// Pods sent back to replica `r`: each decided again at once.
    fn decide_again(&mut self, r: usize, back: Vec<usize>) -> Result<(), String> {
        for i in back {
            let outcome = self.decide(r, i)?;
            self.trace
                .push(format!("    r{r} decides pod-{i} again: {outcome}"));
        }
        Ok(())
    }

    /// Pods whose reservation is written: admitted now.
    fn admit(&mut self, written: Vec<usize>) {
        for i in written {
            self.pods[i].state = State::Admitted { at_ms: self.now_ms };
            self.ran.admissions += 1;
        }
    }

    /// The apiserver stores admitted Pod `i` now; each replica's Pod watch will deliver it after its lag.
    fn store(&mut self, i: usize) {
        let window = ledger::OTHERS_WINDOW_MS;
        let since_decided = self.now_ms - self.pods[i].decided_ms;
        let bound = match self.variant {
            Variant::Faithful | Variant::BlindWrites => window.saturating_sub(since_decided),
            Variant::LagFromStorage => window,
            Variant::LateWatch => 3 * window,
        };
        let lags = (0..self.replicas.len())
            .map(|_| (self.lag(bound), self.lag(window)))
            .collect();
        let p = &mut self.pods[i];
        p.lags = lags;
        p.state = State::Stored {
            at_ms: self.now_ms,
            gone_ms: None,
        };
    }

    /// The next event due by `until_ms` the frontend or the apiserver makes happen on its own: (when, what).
    fn next_due(&self, until_ms: u64) -> Option<(u64, Due)> {
        let mut due: Vec<(u64, Due)> = Vec::new();
        for (r, rep) in self.replicas.iter().enumerate() {
            match &rep.in_flight {
                Some(w) => due.push((w.started_ms + WRITE_MS, Due::Answer(r))),
                None => {
                    let oldest = rep.waiting.iter().map(|i| self.pods[*i].decided_ms).min();
                    if let Some(t) = oldest {
                        due.push(((t + FLUSH_MS).max(self.now_ms), Due::Write(r)));
                    }
                }
            }
        }
        for (i, p) in self.pods.iter().enumerate() {
            if let State::Admitted { at_ms } = p.state {
                due.push((at_ms + STORE_MS, Due::Store(i)));
            }
        }
        due.into_iter()
            .filter(|(t, _)| *t <= until_ms)
            .min_by_key(|(t, _)| *t)
    }

    /// Lets `ms` pass, the events due meanwhile happening in time order, each followed by the checks.
    fn wait(&mut self, ms: u64) -> Result<(), String> {
        let until = self.now_ms + ms;
        while let Some((at, due)) = self.next_due(until) {
            self.now_ms = self.now_ms.max(at);
            let offset = self.now_ms + ms - until;
            self.trace.push(format!("  +{offset} ms: {due:?}"));
            match due {
                Due::Answer(r) => self.answer(r)?,
                Due::Write(r) => self.start_write(r),
                Due::Store(i) => self.store(i),
            }
            self.check()?;
        }
        self.now_ms = until;
        Ok(())
    }

    /// The `n`-th Pod (modulo their number) in a state `pick` accepts.
    fn pick(&self, n: u8, pick: impl Fn(&ModelPod) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.pods.len())
            .filter(|i| pick(&self.pods[*i]))
            .collect();
        (!candidates.is_empty()).then(|| candidates[usize::from(n) % candidates.len()])
    }

    /// One step of the sequence (two op bytes); its line in the trace.
    fn step(&mut self, kind: u8, arg: u8) -> Result<String, String> {
        let r = usize::from(arg) % self.replicas.len();
        Ok(match kind % 16 {
            0..=3 => {
                let i = self.pods.len();
                self.pods.push(ModelPod {
                    ns: usize::from(arg / 3) % NAMESPACES.len(),
                    milli: SIZES[usize::from(arg / 9) % SIZES.len()],
                    decided_ms: self.now_ms,
                    state: State::Reserved,
                    lags: Vec::new(),
                });
                let (ns, milli) = (NAMESPACES[self.pods[i].ns], self.pods[i].milli);
                let outcome = self.decide(r, i)?;
                format!("r{r} decides pod-{i} ({ns}, {milli} milli-GPUs): {outcome}")
            }
            4 | 5 => {
                self.start_write(r);
                format!("r{r} writes its batch")
            }
            6 | 7 => {
                self.answer(r)?;
                format!("r{r} gets its write's answer")
            }
            8 => {
                let to = self.deliver_ledger(r, (arg / 3).is_multiple_of(2))?;
                format!("r{r}'s ledger watch delivers {to:?}")
            }
            9 => match self.pick(arg, |p| matches!(p.state, State::Admitted { .. })) {
                Some(i) => {
                    self.store(i);
                    format!("pod-{i} stored")
                }
                None => "nothing to store".into(),
            },
            10 => match self.pick(arg, |p| matches!(p.state, State::Admitted { .. })) {
                Some(i) => {
                    self.pods[i].state = State::Phantom;
                    self.ran.phantoms += 1;
                    format!("pod-{i}'s CREATE fails after admission")
                }
                None => "no CREATE to fail".into(),
            },
            11 | 12 => {
                let now = self.now_ms;
                match self.pick(arg, |p| p.held(now)) {
                    Some(i) => {
                        if let State::Stored { gone_ms, .. } = &mut self.pods[i].state {
                            *gone_ms = Some(now);
                        }
                        let how = ["finishes", "is deleted"][usize::from(arg / 7) % 2];
                        format!("pod-{i} {how}")
                    }
                    None => "nothing to finish".into(),
                }
            }
            13 | 14 => {
                let ms = u64::from(arg) * 4 + 1;
                self.wait(ms)?;
                format!("wait {ms} ms")
            }
            _ => {
                let ms = u64::from(arg % 30) * 1000 + 500;
                self.wait(ms)?;
                format!("wait {ms} ms")
            }
        })
    }
}

/// An event the frontend or the apiserver makes happen on its own when time passes.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// Replica `r`'s write in flight answers.
    Answer(usize),
    /// Replica `r` writes its batch.
    Write(usize),
    /// Admitted Pod `i` is stored.
    Store(usize),
}

/// Runs the sequence `ops` encodes under the frontend's rules ([`Variant::Faithful`]).
pub fn run(ops: &[u8]) -> Result<Ran, Counterexample> {
    run_variant(Variant::Faithful, ops)
}

/// Runs the sequence `ops` encodes (the first byte: 2 or 3 replicas; then two bytes a step) under
/// `variant`; the counterexample with its trace when an invariant breaks, what it ran through otherwise.
pub fn run_variant(variant: Variant, ops: &[u8]) -> Result<Ran, Counterexample> {
    run_with(variant, Checks::All, ops)
}

/// [`run_variant`] checking `checks` only.
pub fn run_with(variant: Variant, checks: Checks, ops: &[u8]) -> Result<Ran, Counterexample> {
    let Some((first, steps)) = ops.split_first() else {
        return Ok(Ran::default());
    };
    let seed = ops.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut w = World::new(variant, checks, 2 + usize::from(first % 2), seed);
    w.trace.push(format!("{} replicas", w.replicas.len()));
    for (step, op) in steps.chunks_exact(2).enumerate() {
        let (at, t) = (w.trace.len(), w.now_ms - START_MS);
        let result = w.step(op[0], op[1]).and_then(|line| {
            w.trace.insert(at, format!("t={t} {line}"));
            w.check()
        });
        if let Err(e) = result {
            return Err(format!(
                "step {step}: {e}\ntrace:\n  {}",
                w.trace.join("\n  ")
            ));
        }
        w.ran.steps += 1;
    }
    Ok(w.ran)
}
