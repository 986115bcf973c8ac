//! The replicas oracle: several frontend replicas sharing one quota'd tier's ledger
//! (`quota::ledger`), each with its own Pod watch that delivers a stored Pod late, random sequences of what
//! they and the apiserver do, against a model of what the cluster truly holds written here on its own.
//!
//! **Modelled.** One tier (`bronze`, a `min` so Pods borrow, a `max` per class and in total), three
//! namespaces (`team-a` with a share of its own on the class, `team-b` with a share on the total, `team-c`
//! with none), two or three replicas, Pods of one class in three sizes, and bursts (a Job's 2 to 5 Pods of
//! one namespace, smaller), a simulated clock in ms that every replica reads as it is (the entries' `at_ms`
//! is the deciding replica's clock). The ledger is one object with a version counter and the entries of each
//! version. Each replica, as the frontend's `usage.rs`, `usage/reserve.rs` and `tier_ledger.rs` do, keeping
//! its own grants in core's `grant::own::OwnGrants` as the frontend does:
//! - knows a version of the ledger: the one its lagged **ledger watch** delivered (in order, or skipping to
//!   the newest as a relist does), its own last successful write, or a read after a conflict; versions only
//!   move forward;
//! - **decides** a Pod with core's rules only (`decide.rs`): `ledger::effective_usage` over its own Pod
//!   watch's usage and the entries it knows (its pending batch, else its known version) as `grant::view`
//!   reads them (its own grants as what it drew from them), then `quota::decide`. Over a `max`: its grants
//!   of the namespace are **sealed** and closed into the batch at once; then refused, unless the usage
//!   without other replicas' grants admits it (**held by grants**: decided again [`GRANT_POLL_MS`] later,
//!   never refused for them). Else **drawn** from its namespace's newest grant of
//!   this replica if that grant's write succeeded and `grant::has_room` (admitted, nothing written; a grant
//!   found without room is sealed); or, if
//!   that grant's write has not succeeded, **waits** for it (decided again when it succeeds or goes back);
//!   or its expired grants are closed into the batch (`grant::close_drawn`) and `ledger::plan_in` takes
//!   into it a **grant** of `grant::pods` Pods (`want`: twice what the replica reserved in the namespace in
//!   the last draw window or the one before), or the Pod's plain entry when that is 1 (a namespace's first
//!   Pod); `Limited`: refused;
//! - **writes** its batch in one update on the version it was decided on (group commit): while the write is in
//!   flight, new decisions build on its entries; the answer makes the next batch's base the written version
//!   and its grants drawable (the Pods waiting for them decided again), or, on a conflict, reads the newer
//!   version unless the ledger watch brought it, and decides every reservation of both batches again at once
//!   (the frontend's retry), the unwritten grants **sent back** with them; a ledger watch bringing a later
//!   version sends a batch not yet written back (its grants too) to be decided again;
//! - has a writer's **close timer**: at its first grant's draw window end, or at once for a sealed one (at
//!   least [`CLOSE_RETRY_MS`] after it last started waiting), with no write in flight, it closes its expired
//!   or sealed grants into the batch and
//!   writes it even with no reservation in it;
//! - may **stop** (a crash; one at least keeps running): its grants stay in the ledger until they expire,
//!   the Pods it admitted (drawn ones too) are still stored, those it had not answered are not admitted;
//! - has its own **Pod watch**: a stored Pod is counted from `stored + lag`, its going (finished, deleted)
//!   from `gone + lag`, each lag drawn per Pod and replica; the watch's `Seen` is core's.
//!
//! The apiserver: a write's outcome is decided when it starts (optimistic concurrency on the version), its
//! answer arrives later; an admitted Pod is stored, or its CREATE fails after admission (a **phantom**); a
//! stored Pod finishes or is deleted. Every step takes at most what it takes in the frontend: a batch is
//! written within [`FLUSH_MS`] of its oldest decision once no write is in flight, a write answers within
//! [`WRITE_MS`], an admitted Pod is stored within [`STORE_MS`]; a wait in the sequence lets them happen (and
//! the close timers, and the held Pods' polls) in time order. The ledger's rate limits are scaled down
//! ([`ORACLE_BOUNDS`]) so sequences reach them and compaction.
//!
//! **The lag.** The rule counts an entry for the other namespaces for [`ledger::OTHERS_WINDOW_MS`] from its
//! `at_ms`, the time it was **decided**, so what it needs is every watch delivering a Pod within that window
//! of its decision. The model draws each Pod watch lag so that it does ([`Variant::Faithful`]): the lag
//! after storage is below the window less the time from decision to storage (under 1.4 s here: a batch
//! waiting for the write in flight, its own write, the apiserver storing the Pod; for a drawn Pod, from its
//! draw). [`Variant::LagFromStorage`] lets the lag be anything below the window after storage, as
//! `OTHERS_WINDOW_MS`'s doc once worded it ("the delay within which every replica's watch delivers a stored
//! Pod"): that breaks a `max` (the ignored test `a_watch_lag_within_the_window_after_storage_breaks_a_max`
//! holds a 7-step trace), since an entry stops counting for the other namespaces a window after its decision
//! while a watch may still be before the Pod's delivery.
//!
//! **Invariants**, after every step and every forced event:
//! - **a `max` holds on what is held**: the Pods stored and not gone, in the tier and in each namespace's
//!   share, are within every `max` of the policy (per class and in total);
//! - **no held Pod is counted by nobody**: for every replica running, a held Pod is in its Pod watch, or the
//!   ledger's newest version counts it for the other namespaces by core's rule: its entry (plain, or a
//!   closed grant's draw), or the grant it was drawn from (for that grant's own replica, which reads the
//!   grant as its draws: its draw's entry), so any decision that can be written counts it.
//!
//! **Negative controls**, each must give a counterexample: [`Variant::BlindWrites`] (a write ignores the
//! version: the last writer wins), [`Variant::LateWatch`] (a Pod watch may lag three windows after storage),
//! [`Variant::Overdraw`] (a replica draws beyond its grant's room) and [`Variant::AdmitOverGrants`] (a Pod
//! over a `max` only by other replicas' grants is admitted: their grants do not count).
//! [`Variant::GrantAsEntry`] (a grant read as a plain entry by the other replicas) breaks a `max` only when
//! its replica stops between its draws and its close: the test holds such an 8-step trace.
//!
//! Not modelled: clock skew between replicas (every replica reads the one clock), relabels and policy
//! changes (the quota oracle has them), several tiers' ledgers, a write's failure other than a conflict,
//! the frontend's retry deadline (a reservation sent back, or held by grants, is decided again until it is
//! written, drawn or refused), names taken (`AlreadyExists`), grace periods (a Pod goes when it is deleted),
//! a replica restarting (one that stops stays stopped).
use std::collections::BTreeMap;

use gpu_admission_core::quota::Usage;
use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::{self, Bounds, Entry, Seen};
use gpu_admission_policy::Policy;
use gpu_admission_policy::quotas::MilliGpus;

mod checks;
mod decide;
mod replica;

pub use decide::GRANT_POLL_MS;
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
/// The writer's close timer waits at least this long each time (the frontend's `CLOSE_RETRY`).
pub const CLOSE_RETRY_MS: u64 = 250;

/// The clock at the start of a sequence (ms since the epoch); the trace counts from it.
const START_MS: u64 = 1_795_946_400_000;

const TIER: &str = "bronze";
const CLASS: &str = "L4-24GB";
const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const SIZES: [MilliGpus; 3] = [500, 1000, 2000];
/// A burst's Pods are smaller: grants of several Pods fit under the tier's `min` and `max`.
const BURST_SIZES: [MilliGpus; 3] = [250, 500, 1000];

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
    /// A replica draws from its written grant within its draw window whatever the grant's room (not
    /// [`ledger::grant::has_room`]): beyond the grant.
    Overdraw,
    /// A Pod over a `max` only by other replicas' grants is admitted (decided on the usage without them)
    /// instead of held: other replicas' grants do not count.
    AdmitOverGrants,
    /// Other replicas read a grant as a plain entry: it counts for the other namespaces only
    /// [`ledger::OTHERS_WINDOW_MS`] after its decision, while its replica draws from it for
    /// [`ledger::grant::DRAW_MS`] (the grant's draws are watched up to that much later).
    GrantAsEntry,
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
    /// Decided into a batch, or in a write in flight, or waiting for its grant's write.
    Reserved,
    /// Over a `max` only by other replicas' grants: replica `r` decides it again [`GRANT_POLL_MS`] after
    /// `since_ms`.
    Held { r: usize, since_ms: u64 },
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
    /// The replica and the grant (its UID) it was drawn from, or is the first Pod of.
    drawn: Option<(usize, String)>,
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
    /// Grants written (each of several Pods).
    pub grants: usize,
    /// Pods admitted against a written grant without a write.
    pub draws: usize,
    /// Pods that waited for their namespace's grant's write (decided again once it went).
    pub waited: usize,
    /// Grants sent back unwritten with their batch (a conflict, or a later version the watch brought).
    pub grants_back: usize,
    /// Grants closed past their draw window, written.
    pub closes: usize,
    /// Decisions over a `max` only by other replicas' grants (decided again later).
    pub held_by_grants: usize,
    /// Grants sealed by a decision over a `max` in their replica's view (closed at once).
    pub sealed: usize,
    /// Replicas stopped.
    pub stopped: usize,
}

impl Ran {
    /// `self` plus `other`, counter by counter.
    pub fn add(&mut self, other: &Ran) {
        let Ran {
            steps,
            admissions,
            conflicts,
            overtaken,
            phantoms,
            over_max,
            limited,
            through_ledger,
            grants,
            draws,
            waited,
            grants_back,
            closes,
            held_by_grants,
            sealed,
            stopped,
        } = *other;
        self.steps += steps;
        self.admissions += admissions;
        self.conflicts += conflicts;
        self.overtaken += overtaken;
        self.phantoms += phantoms;
        self.over_max += over_max;
        self.limited += limited;
        self.through_ledger += through_ledger;
        self.grants += grants;
        self.draws += draws;
        self.waited += waited;
        self.grants_back += grants_back;
        self.closes += closes;
        self.held_by_grants += held_by_grants;
        self.sealed += sealed;
        self.stopped += stopped;
    }
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
            replicas: (0..replicas).map(|r| Replica::new(r, START_MS)).collect(),
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
            Variant::Faithful
            | Variant::BlindWrites
            | Variant::Overdraw
            | Variant::AdmitOverGrants
            | Variant::GrantAsEntry => window.saturating_sub(since_decided),
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
            if rep.stopped {
                continue;
            }
            match &rep.in_flight {
                Some(w) => due.push((w.started_ms + WRITE_MS, Due::Answer(r))),
                None => {
                    let oldest = rep.waiting.iter().map(|i| self.pods[*i].decided_ms).min();
                    if let Some(t) = oldest {
                        due.push(((t + FLUSH_MS).max(self.now_ms), Due::Write(r)));
                    }
                    // The writer's timer: at the first grant's draw window end, at least
                    // `CLOSE_RETRY_MS` after it last started waiting.
                    let close = rep.next_close().or(rep.closes().then_some(self.now_ms));
                    if let Some(t) = close {
                        let t = t.max(rep.timer_from + CLOSE_RETRY_MS).max(self.now_ms);
                        due.push((t, Due::Close(r)));
                    }
                }
            }
        }
        for (i, p) in self.pods.iter().enumerate() {
            match p.state {
                State::Admitted { at_ms } => due.push((at_ms + STORE_MS, Due::Store(i))),
                State::Held { since_ms, .. } => due.push((since_ms + GRANT_POLL_MS, Due::Poll(i))),
                _ => {}
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
                Due::Close(r) => self.close_timer(r),
                Due::Poll(i) => self.poll_held(i)?,
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

    /// The first replica running from `r` on (a Pod goes to a replica that runs).
    fn running(&self, r: usize) -> usize {
        let n = self.replicas.len();
        (r..r + n)
            .map(|r| r % n)
            .find(|r| !self.replicas[*r].stopped)
            .unwrap_or(r)
    }

    /// A new Pod (its namespace and size from `arg`) decided by replica `r` (the next one running if `r`
    /// stopped).
    fn new_pod(&mut self, r: usize, arg: u8, sizes: &[MilliGpus; 3]) -> Result<String, String> {
        let r = self.running(r);
        let i = self.pods.len();
        self.pods.push(ModelPod {
            ns: usize::from(arg / 3) % NAMESPACES.len(),
            milli: sizes[usize::from(arg / 9) % sizes.len()],
            decided_ms: self.now_ms,
            state: State::Reserved,
            lags: Vec::new(),
            drawn: None,
        });
        let (ns, milli) = (NAMESPACES[self.pods[i].ns], self.pods[i].milli);
        let outcome = self.decide(r, i)?;
        Ok(format!(
            "r{r} decides pod-{i} ({ns}, {milli} milli-GPUs): {outcome}"
        ))
    }

    /// One step of the sequence (two op bytes); its line in the trace.
    fn step(&mut self, kind: u8, arg: u8) -> Result<String, String> {
        let r = usize::from(arg) % self.replicas.len();
        Ok(match kind % 16 {
            2 => {
                // A burst (a Job's Pods): 2 to 5 Pods of one namespace and size, one after the other.
                let lines: Vec<String> = (0..2 + (arg / 27) % 4)
                    .map(|_| self.new_pod(r, arg, &BURST_SIZES))
                    .collect::<Result<_, _>>()?;
                lines.join("; ")
            }
            0..=3 => self.new_pod(r, arg, &SIZES)?,
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
            10 if arg % 16 == 15 => {
                let r = usize::from(arg / 16) % self.replicas.len();
                match self.stop(r) {
                    true => format!("r{r} stops"),
                    false => format!("r{r} keeps running (the last one, or stopped)"),
                }
            }
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
    /// Replica `r`'s writer's timer: its grants past their draw window closed and written.
    Close(usize),
    /// Held Pod `i` is decided again.
    Poll(usize),
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
