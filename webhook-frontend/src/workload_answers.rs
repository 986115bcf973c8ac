//! The scorer's answers for the Pods of a workload, kept so that the next Pods of the same workload cost no
//! Score call: a 1,000-Pod Job asks the scorer once per frontend replica, not 1,000 times.
//!
//! The decision stays the scorer's. It decides once per workload and answers every later Pod of it from its
//! own cache (`scorer::decisions`: keyed by the workload key, what the Pod asks and the policy version, kept
//! 10 minutes); this is a copy of those answers, keyed the same way (plus the group size, which decides how
//! many classes the answer keeps), kept for a shorter time ([`TTL`]), at most [`MAX_ENTRIES`] of them (expired
//! entries first, then the oldest), under core's `AnswerKey` (what the Pod asks, compared whole, never as a
//! digest that could collide). Only answers that passed the frontend's checks are kept; a Pod without a
//! workload key (a bare Pod, or one whose owner is unknown) is always sent to the scorer.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpu_admission_core::admission::mutate_pod::AnswerKey as Key;
use gpu_admission_proto::scorer::v1::ScoreResponse;

/// How long an answer is reused: well inside the scorer's own 10 minutes, so that a frontend never answers
/// with a decision the scorer has already forgotten for long.
pub(crate) const TTL: Duration = Duration::from_secs(60);
/// At most this many answers (a few KiB each).
pub(crate) const MAX_ENTRIES: usize = 4096;

/// The answers, by workload.
#[derive(Default)]
pub(crate) struct WorkloadAnswers {
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<Key, (ScoreResponse, Instant)>,
    /// Keys by insertion time, oldest first.
    order: VecDeque<(Key, Instant)>,
}

impl WorkloadAnswers {
    /// The answer an earlier Pod of this workload got, for the request `request_id` of key `key`.
    pub(crate) fn get(&self, key: &Key, request_id: &str, now: Instant) -> Option<ScoreResponse> {
        let entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (answer, at) = entries.by_key.get(key)?;
        if now.duration_since(*at) >= TTL {
            return None;
        }
        let mut answer = answer.clone();
        answer.request_id = request_id.to_string();
        Some(answer)
    }

    /// Keeps the scorer's answer (one that passed the frontend's checks) under `key`.
    pub(crate) fn keep(&self, key: Key, answer: ScoreResponse, now: Instant) {
        let mut entries = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Entries { by_key, order } = &mut *entries;
        while let Some((oldest, at)) = order.front() {
            let expired = now.duration_since(*at) >= TTL;
            if !expired && by_key.len() < MAX_ENTRIES {
                break;
            }
            // Only the entry this queue slot was written for (a key kept again has a newer slot).
            if by_key.get(oldest).is_some_and(|(_, kept)| kept == at) {
                by_key.remove(oldest);
            }
            order.pop_front();
        }
        by_key.insert(key.clone(), (answer, now));
        order.push_back((key, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_proto::scorer::v1::ScoreRequest;

    impl WorkloadAnswers {
        fn keep_for(&self, req: &ScoreRequest, version: &str, answer: &ScoreResponse, at: Instant) {
            if let Some(key) = Key::of(&mut req.clone(), version) {
                self.keep(key, answer.clone(), at);
            }
        }
        fn get_for(&self, req: &ScoreRequest, version: &str, at: Instant) -> Option<ScoreResponse> {
            self.get(&Key::of(&mut req.clone(), version)?, &req.request_id, at)
        }
    }

    fn request(key: &str, id: &str, gpus: u32, group_size: Option<u32>) -> ScoreRequest {
        ScoreRequest {
            request_id: id.into(),
            workload_key: key.into(),
            gpu_count: gpus,
            group_size,
            ..Default::default()
        }
    }

    fn answer(class: &str) -> ScoreResponse {
        ScoreResponse {
            request_id: "first".into(),
            policy_version: "v1".into(),
            priority_score: 0.5,
            avoid_job_types: vec![class.to_string()],
            ..Default::default()
        }
    }

    #[test]
    fn a_later_pod_of_the_workload_gets_the_answer_with_its_own_request_id() {
        let cache = WorkloadAnswers::default();
        let t0 = Instant::now();
        cache.keep_for(
            &request("batch/Job/ml/a", "first", 8, Some(4)),
            "v1",
            &answer("x"),
            t0,
        );
        let got = cache
            .get_for(&request("batch/Job/ml/a", "second", 8, Some(4)), "v1", t0)
            .expect("reused");
        assert_eq!(got.request_id, "second");
        assert_eq!(got.avoid_job_types, ["x"]);
    }

    #[test]
    fn not_reused_for_another_ask_size_policy_workload_or_after_the_ttl() {
        let cache = WorkloadAnswers::default();
        let t0 = Instant::now();
        cache.keep_for(
            &request("batch/Job/ml/a", "1", 8, Some(4)),
            "v1",
            &answer("x"),
            t0,
        );
        for (req, version, at) in [
            (request("batch/Job/ml/a", "2", 4, Some(4)), "v1", t0),
            (request("batch/Job/ml/a", "2", 8, None), "v1", t0),
            (request("batch/Job/ml/a", "2", 8, Some(4)), "v2", t0),
            (request("batch/Job/ml/b", "2", 8, Some(4)), "v1", t0),
            (request("batch/Job/ml/a", "2", 8, Some(4)), "v1", t0 + TTL),
        ] {
            assert!(
                cache.get_for(&req, version, at).is_none(),
                "{req:?} {version}"
            );
        }
    }

    #[test]
    fn a_pod_without_a_workload_key_is_never_kept() {
        let cache = WorkloadAnswers::default();
        let t0 = Instant::now();
        cache.keep_for(&request("", "1", 8, None), "v1", &answer("x"), t0);
        assert!(
            cache
                .get_for(&request("", "2", 8, None), "v1", t0)
                .is_none()
        );
        assert!(cache.inner.lock().unwrap().by_key.is_empty());
    }

    #[test]
    fn bounded_oldest_first() {
        let cache = WorkloadAnswers::default();
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            let at = t0 + Duration::from_millis(i as u64);
            cache.keep_for(
                &request(&format!("k{i}"), "1", 1, Some(2)),
                "v1",
                &answer("x"),
                at,
            );
        }
        let later = t0 + Duration::from_secs(1);
        assert_eq!(cache.inner.lock().unwrap().by_key.len(), MAX_ENTRIES);
        assert!(
            cache
                .get_for(&request("k0", "2", 1, Some(2)), "v1", later)
                .is_none()
        );
        let newest = format!("k{}", MAX_ENTRIES + 9);
        assert!(
            cache
                .get_for(&request(&newest, "2", 1, Some(2)), "v1", later)
                .is_some()
        );
    }
}
