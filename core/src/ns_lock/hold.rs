//! Whether a restricted instance holds a namespace's Lease now: only while it can decide the namespace's Pods.
//! Its scorer must answer (released after [`HoldRule::max_fallbacks`] Score calls in a row fell back, or once
//! the first of them is [`HoldRule::max_failing`] old with no answer since; taken again at the first
//! answer), and the tier it decides with must be the namespace's label as lately read (released while it
//! cannot read the label, or the label names a tier its policy does not hold). While the Lease is released
//! the cluster-wide instance scores the namespace ([`super::who_scores`]), and replaces what this instance
//! still decides ([`super::take_over`]).

use time::{Duration, OffsetDateTime};

use crate::admission::mutate_pod::ScorerResult;

/// When a restricted instance gives its namespaces back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRule {
    /// Released after this many Score calls in a row fell back (timed out, unavailable, invalid, overloaded).
    pub max_fallbacks: u32,
    /// Released once the first of the fallbacks in a row is this old and no answer came since.
    pub max_failing: Duration,
    /// Released once the namespace's tier label was last read this long ago.
    pub max_tier_age: Duration,
}

impl Default for HoldRule {
    /// 3 fallbacks or 10 s of failing; the label read within 30 s (polled every 5 s).
    fn default() -> Self {
        Self {
            max_fallbacks: 3,
            max_failing: Duration::seconds(10),
            max_tier_age: Duration::seconds(30),
        }
    }
}

/// The instance's Score calls as the rule reads them: the fallbacks in a row and when the first of them came.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScorerRecord {
    fallbacks: u32,
    failing_since: Option<OffsetDateTime>,
}

impl ScorerRecord {
    /// One Score call's result at `now`: an answer clears the record; anything else is one more fallback.
    pub fn observe(&mut self, result: ScorerResult, now: OffsetDateTime) {
        if result == ScorerResult::Ok {
            *self = Self::default();
        } else {
            self.fallbacks = self.fallbacks.saturating_add(1);
            self.failing_since.get_or_insert(now);
        }
    }

    /// Score calls in a row that fell back.
    pub fn fallbacks(&self) -> u32 {
        self.fallbacks
    }
}

/// What the instance last read of one namespace's tier label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierRead {
    /// Never read (or the namespace could not be got).
    Unread,
    /// Read at `at`: the label's value (`None`: no label), and whether the instance's policy holds a tier of
    /// that name.
    Read {
        at: OffsetDateTime,
        label: Option<String>,
        in_policy: bool,
    },
}

/// Hold the Lease, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    Hold,
    Release(Release),
}

/// Why a restricted instance gives a namespace back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Its scorer fell back `fallbacks` times in a row, the first at `since`.
    ScorerFailing {
        fallbacks: u32,
        since: OffsetDateTime,
    },
    /// It has not read the namespace's tier label (at all, or for too long).
    TierUnread,
    /// The label names no tier its policy holds (or there is no label): it would decide by another tier
    /// than the cluster-wide instance's.
    TierUnknown { label: Option<String> },
}

impl Release {
    /// The metric's and the log's label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Release::ScorerFailing { .. } => "scorer_failing",
            Release::TierUnread => "tier_unread",
            Release::TierUnknown { .. } => "tier_unknown",
        }
    }
}

/// The one rule: whether the instance holds one namespace's Lease at `now`, given its Score calls and what
/// it read of the namespace's tier.
pub fn hold(rule: &HoldRule, scorer: &ScorerRecord, tier: &TierRead, now: OffsetDateTime) -> Hold {
    if let Some(since) = scorer.failing_since
        && (scorer.fallbacks >= rule.max_fallbacks || now - since >= rule.max_failing)
    {
        return Hold::Release(Release::ScorerFailing {
            fallbacks: scorer.fallbacks,
            since,
        });
    }
    match tier {
        TierRead::Unread => Hold::Release(Release::TierUnread),
        TierRead::Read { at, .. } if now - *at > rule.max_tier_age => {
            Hold::Release(Release::TierUnread)
        }
        TierRead::Read {
            label,
            in_policy: false,
            ..
        } => Hold::Release(Release::TierUnknown {
            label: label.clone(),
        }),
        TierRead::Read { .. } => Hold::Hold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-11-29 10:00:00 UTC);

    fn read(at: OffsetDateTime, label: &str, in_policy: bool) -> TierRead {
        TierRead::Read {
            at,
            label: Some(label.into()),
            in_policy,
        }
    }

    fn secs(s: i64) -> Duration {
        Duration::seconds(s)
    }

    #[test]
    fn released_after_the_stated_fallbacks_and_taken_back_at_the_first_answer() {
        let rule = HoldRule::default();
        let tier = read(T0, "bronze", true);
        let mut scorer = ScorerRecord::default();
        assert_eq!(hold(&rule, &scorer, &tier, T0), Hold::Hold);
        scorer.observe(ScorerResult::Timeout, T0);
        scorer.observe(ScorerResult::Unavailable, T0 + secs(1));
        assert_eq!(hold(&rule, &scorer, &tier, T0 + secs(1)), Hold::Hold);
        scorer.observe(ScorerResult::Overloaded, T0 + secs(2));
        assert_eq!(
            hold(&rule, &scorer, &tier, T0 + secs(2)),
            Hold::Release(Release::ScorerFailing {
                fallbacks: 3,
                since: T0
            })
        );
        scorer.observe(ScorerResult::Invalid, T0 + secs(3));
        assert_eq!(scorer.fallbacks(), 4);
        scorer.observe(ScorerResult::Ok, T0 + secs(4));
        assert_eq!(scorer, ScorerRecord::default());
        assert_eq!(hold(&rule, &scorer, &tier, T0 + secs(4)), Hold::Hold);
    }

    #[test]
    fn one_fallback_with_no_answer_since_is_released_after_the_stated_seconds() {
        let rule = HoldRule::default();
        let tier = read(T0, "bronze", true);
        let mut scorer = ScorerRecord::default();
        scorer.observe(ScorerResult::Timeout, T0);
        assert_eq!(hold(&rule, &scorer, &tier, T0 + secs(9)), Hold::Hold);
        assert!(matches!(
            hold(&rule, &scorer, &tier, T0 + secs(10)),
            Hold::Release(Release::ScorerFailing { fallbacks: 1, .. })
        ));
        // An answer in between starts the count again.
        scorer.observe(ScorerResult::Ok, T0 + secs(5));
        scorer.observe(ScorerResult::Timeout, T0 + secs(6));
        assert_eq!(hold(&rule, &scorer, &tier, T0 + secs(15)), Hold::Hold);
    }

    #[test]
    fn released_while_the_tier_label_is_unread_stale_or_unknown() {
        let rule = HoldRule::default();
        let scorer = ScorerRecord::default();
        assert_eq!(
            hold(&rule, &scorer, &TierRead::Unread, T0),
            Hold::Release(Release::TierUnread)
        );
        let tier = read(T0, "bronze", true);
        assert_eq!(hold(&rule, &scorer, &tier, T0 + secs(30)), Hold::Hold);
        assert_eq!(
            hold(&rule, &scorer, &tier, T0 + secs(31)),
            Hold::Release(Release::TierUnread)
        );
        assert_eq!(
            hold(&rule, &scorer, &read(T0, "platinum", false), T0),
            Hold::Release(Release::TierUnknown {
                label: Some("platinum".into())
            })
        );
        let unlabelled = TierRead::Read {
            at: T0,
            label: None,
            in_policy: false,
        };
        assert_eq!(
            hold(&rule, &scorer, &unlabelled, T0),
            Hold::Release(Release::TierUnknown { label: None })
        );
    }
}
