//! The ids of the observations already learned, so that an observation reported twice (an observer
//! restarting, a leader change, a retry) is learned once.
//!
//! De-duplication needs a window that covers re-delivery, not every id ever seen: ids are kept as 64-bit
//! digests (the first 8 bytes of their sha256) in arrival order, the last [`CAPACITY`] (10 000) of them.
//! That covers every way the observer re-sends: a leader change re-sends the runs of Pods that finished
//! in the last 15 minutes, and a replica that diverged gets the observer's replay log, 10 000
//! observations by default (`--replay-log`). An id re-sent after 10 000 newer observations would be
//! learned again. (A chance collision of two digests drops one run in ~2·10¹⁵.) The window is part of the
//! learned state: snapshots and `ExportState` carry it (16 hex digits an id; 160 kB of JSON, ~85 kB
//! compressed, whatever the number of observations). Format v2 kept 100 000 128-bit digests: read back,
//! the last 10 000 are kept by their first 64 bits.
use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Most ids remembered.
pub const CAPACITY: usize = 10_000;

/// The digest an id is remembered by.
pub fn id_digest(id: &str) -> u64 {
    let h = Sha256::digest(id.as_bytes());
    u64::from_be_bytes(h[..8].try_into().expect("8 bytes"))
}

#[derive(Debug, Clone, Default)]
pub struct ObservedIds {
    /// Oldest first.
    order: VecDeque<u64>,
    set: HashSet<u64>,
    /// Wrapping sum of the remembered digests: an order-independent fingerprint of the set.
    sum: u64,
}

impl PartialEq for ObservedIds {
    fn eq(&self, other: &Self) -> bool {
        self.set == other.set
    }
}

impl ObservedIds {
    pub fn contains(&self, id: &str) -> bool {
        self.set.contains(&id_digest(id))
    }

    /// Remembers `id`; false when it was already known.
    pub fn insert(&mut self, id: &str) -> bool {
        self.insert_digest(id_digest(id))
    }

    fn insert_digest(&mut self, d: u64) -> bool {
        if !self.set.insert(d) {
            return false;
        }
        self.order.push_back(d);
        self.sum = self.sum.wrapping_add(d);
        while self.order.len() > CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
                self.sum = self.sum.wrapping_sub(old);
            }
        }
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether every id remembered here is remembered by `other` too.
    pub fn is_subset(&self, other: &ObservedIds) -> bool {
        self.set.is_subset(&other.set)
    }

    /// Order-independent fingerprint of the remembered ids.
    pub fn fingerprint(&self) -> u64 {
        self.sum
    }
}

impl Serialize for ObservedIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hex: Vec<String> = self.order.iter().map(|d| format!("{d:016x}")).collect();
        hex.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ObservedIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let hex = Vec::<String>::deserialize(d)?;
        let mut ids = ObservedIds::default();
        for h in hex {
            // 16 hex digits, or format v2's 32 (a 128-bit digest whose first 64 bits are today's).
            let v = if h.len() == 32 {
                u128::from_str_radix(&h, 16)
                    .map(|v| (v >> 64) as u64)
                    .map_err(serde::de::Error::custom)?
            } else {
                u64::from_str_radix(&h, 16).map_err(serde::de::Error::custom)?
            };
            ids.insert_digest(v);
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_once_and_forgets_the_oldest_past_capacity() {
        let mut ids = ObservedIds::default();
        assert!(ids.insert("pod-a"));
        assert!(!ids.insert("pod-a"));
        assert!(ids.contains("pod-a"));
        for i in 0..CAPACITY {
            ids.insert(&format!("p{i}"));
        }
        assert_eq!(ids.len(), CAPACITY);
        assert!(!ids.contains("pod-a"), "the oldest id is forgotten");
        assert!(ids.contains("p0") && ids.contains(&format!("p{}", CAPACITY - 1)));
    }

    #[test]
    fn serde_round_trip_and_order_independent_fingerprint() {
        let mut a = ObservedIds::default();
        let mut b = ObservedIds::default();
        for id in ["x", "y", "z"] {
            a.insert(id);
        }
        for id in ["z", "x", "y"] {
            b.insert(id);
        }
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(a, b);
        let back: ObservedIds = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.fingerprint(), a.fingerprint());
        let mut small = ObservedIds::default();
        small.insert("y");
        assert!(small.is_subset(&a) && !a.is_subset(&small));
    }
}
