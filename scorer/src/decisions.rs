//! One decision per workload: every Pod of a workload (the request's `workload_key`) gets the same answer.
//!
//! Three things make it hold:
//!
//! 1. **Seeded by the workload.** A keyed decision draws its exploration gate and its posterior sample from
//!    [`workload_seed`] = H(policy `learning.seed`, policy version, learned-state epoch digest, key), never
//!    from the request (whose id differs per Pod). Different workloads are sampled independently.
//! 2. **Epoch pinning.** Keyed decisions read the learned state as it stood when the current epoch began
//!    (epochs are wall-clock aligned: `unix_seconds / epoch_len`, default 600 s). Every write of the live
//!    state (Observe, ImportState) first pins the state it is about to change when the epoch has turned
//!    ([`DecisionState::before_write`]); a keyed Score in a new epoch without a write since pins the live
//!    state, which is then the same. What is learned during an epoch reaches keyed decisions at the next one.
//! 3. **A bounded, time-limited cache** of answers per (key + what the Pod asks, policy version):
//!    [`DECISION_TTL`] (10 minutes)
//!    after the first Pod was decided, at most [`MAX_WORKLOADS`] keys (expired entries go first, then the
//!    oldest). A workload whose Pods straddle an epoch boundary keeps its first answer on this replica.
//!
//! **Several scorer replicas.** Each replica has its own cache and pinned state; they agree because a keyed
//! decision is a pure function of (key, policy version, pinned state, the first Pod's features) and the
//! observer keeps the replicas' learned states converged: two replicas pin the same state unless an
//! observation reached them on different sides of an epoch boundary (a window as long as the observer's
//! fan-out, once per epoch), or a workload's Pods straddle a boundary across replicas while the state changed.
//! Keyed decisions are gated by their seeded draw alone (`draw < explorationCap`), not by this replica's
//! exploration window, which differs between replicas; they are still recorded in the window (once per
//! workload), so unkeyed decisions keep the window's cap. A member that asks something else than the others (a
//! leader with fewer GPUs, another vendor) is decided for itself with the workload's seed and pinned state: it
//! gets the same class whenever that class fits it, and never a class it cannot run on.
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1 as pb;

use crate::model::Learned;
use crate::policy::Policy;

/// How long a workload's answer is kept (per replica).
pub const DECISION_TTL: Duration = Duration::from_secs(600);
/// At most this many workloads are remembered (about 10 000 small answers: a few MiB).
pub const MAX_WORKLOADS: usize = 10_000;
/// Default length of a learned-state epoch.
pub const DEFAULT_EPOCH: Duration = Duration::from_secs(600);

/// The epoch `unix_seconds` falls in; `None` when pinning is off (`epoch_len` 0: keyed decisions read the
/// live state and agree between replicas only while their states are equal).
pub fn epoch_of(unix_seconds: u64, epoch_len: Duration) -> Option<u64> {
    let len = epoch_len.as_secs();
    (len > 0).then(|| unix_seconds / len)
}

/// The seed of a keyed decision: the same on every replica for the same policy, pinned state and key.
pub fn workload_seed(policy: &Policy, state_digest: &str, key: &str) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"workload\0");
    h.update(policy.learning.seed.to_le_bytes());
    h.update(policy.version.as_bytes());
    h.update(b"\0");
    h.update(state_digest.as_bytes());
    h.update(b"\0");
    h.update(key.as_bytes());
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}

struct Cached {
    answer: pb::ScoreResponse,
    decided: Instant,
}

/// The pinned learned state and the per-workload answers of one replica.
pub struct DecisionState {
    epoch_len: Duration,
    pinned: Option<(u64, Learned)>,
    cache: HashMap<(String, String), Cached>,
    /// Keys in insertion order (oldest first), for eviction; stale entries are skipped.
    order: VecDeque<((String, String), Instant)>,
}

impl std::fmt::Debug for DecisionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionState")
            .field("epoch_len", &self.epoch_len)
            .field("pinned_epoch", &self.pinned.as_ref().map(|p| p.0))
            .field("workloads", &self.cache.len())
            .finish()
    }
}

impl DecisionState {
    pub fn new(epoch_len: Duration) -> Self {
        Self {
            epoch_len,
            pinned: None,
            cache: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Call before changing the live state: pins it first when the epoch has turned since the last pin.
    pub fn before_write(&mut self, live: &Learned, unix_seconds: u64) {
        if let Some(epoch) = epoch_of(unix_seconds, self.epoch_len)
            && self.pinned.as_ref().is_none_or(|(e, _)| *e != epoch)
        {
            self.pinned = Some((epoch, live.clone()));
        }
    }

    /// The state keyed decisions read now: the pinned one (pinned from `live` when the epoch has turned and
    /// nothing was written since), refreshed for `policy`; `live` itself when pinning is off.
    pub fn decision_state<'a>(
        &'a mut self,
        live: &'a Learned,
        policy: &Policy,
        unix_seconds: u64,
    ) -> &'a Learned {
        let Some(epoch) = epoch_of(unix_seconds, self.epoch_len) else {
            return live;
        };
        if self.pinned.as_ref().is_none_or(|(e, _)| *e != epoch) {
            self.pinned = Some((epoch, live.clone()));
        }
        let (_, pinned) = self.pinned.as_mut().expect("pinned above");
        pinned.refresh(policy);
        pinned
    }

    /// The answer already given for `key` under `policy_version`, if still fresh.
    pub fn cached(
        &self,
        key: &str,
        policy_version: &str,
        now: Instant,
    ) -> Option<&pb::ScoreResponse> {
        let c = self
            .cache
            .get(&(key.to_string(), policy_version.to_string()))?;
        (now.duration_since(c.decided) < DECISION_TTL).then_some(&c.answer)
    }

    /// Remembers `answer` for `key`, evicting expired entries, then the oldest, beyond [`MAX_WORKLOADS`].
    pub fn remember(
        &mut self,
        key: &str,
        policy_version: &str,
        answer: pb::ScoreResponse,
        now: Instant,
    ) {
        let k = (key.to_string(), policy_version.to_string());
        while let Some((old, at)) = self.order.front() {
            let stale = self.cache.get(old).is_none_or(|c| c.decided != *at);
            let expired = now.duration_since(*at) >= DECISION_TTL;
            let full = self.cache.len() >= MAX_WORKLOADS && !self.cache.contains_key(&k);
            if !(stale || expired || full) {
                break;
            }
            let (old, at) = self.order.pop_front().expect("front exists");
            if self.cache.get(&old).is_some_and(|c| c.decided == at) {
                self.cache.remove(&old);
            }
        }
        self.order.push_back((k.clone(), now));
        self.cache.insert(
            k,
            Cached {
                answer,
                decided: now,
            },
        );
    }

    /// Workloads kept (the tests' view).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.cache.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    fn answer(class: &str) -> pb::ScoreResponse {
        pb::ScoreResponse {
            accepted_classes: vec![pb::GpuClass {
                name: class.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn epochs_are_wall_clock_aligned_and_zero_turns_pinning_off() {
        let ten = Duration::from_secs(600);
        assert_eq!(epoch_of(0, ten), Some(0));
        assert_eq!(epoch_of(599, ten), Some(0));
        assert_eq!(epoch_of(600, ten), Some(1));
        assert_eq!(epoch_of(12_345, Duration::ZERO), None);
    }

    #[test]
    fn seeds_depend_on_key_policy_and_state_only() {
        let p = embedded_default().unwrap();
        let a = workload_seed(&p, "d1", "batch/Job/ml/a");
        assert_eq!(a, workload_seed(&p, "d1", "batch/Job/ml/a"));
        assert_ne!(a, workload_seed(&p, "d1", "batch/Job/ml/b"));
        assert_ne!(a, workload_seed(&p, "d2", "batch/Job/ml/a"));
        let mut other = p.clone();
        other.version = "other".into();
        assert_ne!(a, workload_seed(&other, "d1", "batch/Job/ml/a"));
    }

    #[test]
    fn a_write_in_a_new_epoch_pins_the_state_before_it() {
        let p = embedded_default().unwrap();
        let mut d = DecisionState::new(Duration::from_secs(600));
        let mut live = Learned::default();
        d.before_write(&live, 1_200); // epoch 2 begins: pins the empty state
        live.observations = 5; // the write
        assert_eq!(d.decision_state(&live, &p, 1_300).observations, 0);
        d.before_write(&live, 1_700); // same epoch: nothing pinned again
        live.observations = 6;
        assert_eq!(d.decision_state(&live, &p, 1_799).observations, 0);
        // Next epoch, no write since: the live state is what the epoch began with.
        assert_eq!(d.decision_state(&live, &p, 1_800).observations, 6);
        // Pinning off: the live state.
        let mut off = DecisionState::new(Duration::ZERO);
        off.before_write(&live, 1_800);
        live.observations = 7;
        assert_eq!(off.decision_state(&live, &p, 1_801).observations, 7);
    }

    #[test]
    fn answers_expire_after_the_ttl_and_per_policy_version() {
        let mut d = DecisionState::new(DEFAULT_EPOCH);
        let t0 = Instant::now();
        d.remember("k", "v1", answer("A"), t0);
        assert_eq!(
            d.cached("k", "v1", t0 + Duration::from_secs(599))
                .unwrap()
                .accepted_classes[0]
                .name,
            "A"
        );
        assert!(d.cached("k", "v2", t0).is_none());
        assert!(d.cached("k", "v1", t0 + DECISION_TTL).is_none());
        // Re-decided after expiry: the new answer, and the old order entry is skipped as stale.
        d.remember("k", "v1", answer("B"), t0 + DECISION_TTL);
        assert_eq!(
            d.cached("k", "v1", t0 + DECISION_TTL)
                .unwrap()
                .accepted_classes[0]
                .name,
            "B"
        );
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn at_most_max_workloads_oldest_evicted_first() {
        let mut d = DecisionState::new(DEFAULT_EPOCH);
        let t0 = Instant::now();
        for i in 0..MAX_WORKLOADS + 5 {
            d.remember(
                &format!("k{i}"),
                "v",
                answer("A"),
                t0 + Duration::from_millis(i as u64),
            );
        }
        assert_eq!(d.len(), MAX_WORKLOADS);
        let now = t0 + Duration::from_secs(1);
        assert!(d.cached("k0", "v", now).is_none());
        assert!(d.cached("k4", "v", now).is_none());
        assert!(d.cached("k5", "v", now).is_some());
        assert!(
            d.cached(&format!("k{}", MAX_WORKLOADS + 4), "v", now)
                .is_some()
        );
    }
}
