//! A quota'd Pod's reservation in this replica ([`QuotaUsage::reserve`]): decided under the ledgers' lock,
//! then drawn from its namespace's grant, or taken into the tier's next write (a grant, or the Pod's own
//! entry), and answered once written. A Pod that stands better without other replicas' grants is not refused
//! (core's `grant::refusal`): it is decided again until they close, or answered undecidable at its deadline.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpu_admission_core::admission::validate_pod::{QuotaUnavailable, Reservation};
use gpu_admission_core::quota::demand::Counted;
use gpu_admission_core::quota::ledger::grant::Refusal;
use gpu_admission_core::quota::ledger::grant::own::Draw;
use gpu_admission_core::quota::ledger::{self, Entry, Planned, Reserving, Seen, grant};
use gpu_admission_core::quota::{self, Decision, Standing, Usage};
use tokio::sync::{Notify, oneshot};

use super::super::quota_ledger::LedgerError;
use super::super::tier_ledger::{Flushed, TierLedger, entries_for};
use super::{QuotaUsage, key, not_reserved, now_ms};
use crate::metrics::LedgerWrite;

/// How often a Pod another replica's grant keeps over a `max` is decided again.
const GRANT_POLL: Duration = Duration::from_millis(100);

/// The quota step's offer: what the Pod would be decided as over a usage.
type Decide<'a> = &'a (dyn Fn(&Usage) -> Reservation + Sync);

/// What one attempt at a reservation came to.
enum Attempt {
    /// Decided: no quota, refused, reserved without a write (drawn, a name taken), or a dry run's answer.
    Decided(Option<Decision>),
    /// `decision` waits for a write (its own reservation's, or its namespace's grant's); decided again
    /// unless written.
    Waits {
        decision: Decision,
        answered: oneshot::Receiver<Flushed>,
        flush: Option<Arc<Notify>>,
    },
    /// Refused only for the headroom of other replicas' grants ([`grant::refusal`]): decided again once they
    /// close.
    HeldByGrants,
}

impl QuotaUsage {
    /// Offers the usage and the ledger to `decide` (core's quota step); when it reserves and `keep` is true
    /// (not a dry run), admits `pod` once it is drawn from its namespace's grant, or its entry (or a grant
    /// it is drawn from) is written on top of the ledger version it was decided on (a conflict: offer
    /// again). A Pod whose namespace/name the watch already holds is decided but reserves nothing (the
    /// apiserver refuses its CREATE after admission). A write another replica beat, or a refusal only other
    /// replicas' grants cause, is decided and offered again until `until` (at least once): with replicas
    /// writing continuously each round has one winner, so a count of attempts would refuse a steady share of
    /// a burst. An error: the Pod is undecidable.
    pub(crate) async fn reserve(
        &self,
        ask: &quota::Ask,
        pod: &Reserving<'_>,
        keep: bool,
        until: Instant,
        decide: Decide<'_>,
    ) -> Result<Option<Decision>, QuotaUnavailable> {
        if !self.is_synced() {
            return Err(QuotaUnavailable::NotCountedYet);
        }
        let tier = ask.0.as_str();
        loop {
            match self.attempt(ask, pod, keep, decide)? {
                Attempt::Decided(d) => return Ok(d),
                Attempt::HeldByGrants if Instant::now() + GRANT_POLL < until => {
                    tokio::time::sleep(GRANT_POLL).await;
                }
                Attempt::HeldByGrants => {
                    self.metrics.record_ledger_write(tier, LedgerWrite::failed);
                    return Err(not_reserved(LedgerError::HeldByGrants));
                }
                Attempt::Waits {
                    decision,
                    answered,
                    flush,
                } => {
                    if let Some(flush) = flush {
                        flush.notify_one();
                    }
                    match answered.await {
                        Ok(Flushed::Written) => return Ok(Some(decision)),
                        Ok(Flushed::Retry) if Instant::now() < until => {}
                        Ok(Flushed::Retry) => break,
                        Ok(Flushed::Failed(why)) => {
                            return Err(QuotaUnavailable::NotReserved(why));
                        }
                        Err(_) => {
                            return Err(not_reserved(LedgerError::Api(
                                "the ledger writer stopped".into(),
                            )));
                        }
                    }
                }
            }
        }
        self.metrics.record_ledger_write(tier, LedgerWrite::failed);
        Err(not_reserved(LedgerError::Contended))
    }

    /// One decision of the Pod under the ledgers' lock, and what it reserves.
    fn attempt(
        &self,
        (tier, namespace, counted): &quota::Ask,
        pod: &Reserving<'_>,
        keep: bool,
        decide: Decide<'_>,
    ) -> Result<Attempt, QuotaUnavailable> {
        let (tier, namespace) = (tier.as_str(), namespace.as_str());
        let mut guard = self.lock_ledgers();
        let ledgers = &mut *guard;
        let (me, now) = (self.replica.as_str(), now_ms());
        if keep {
            let mine = self.tier_ledger(ledgers, tier);
            mine.grants.forget(now);
            mine.pending();
        }
        let s = self.fresh_state();
        let seen = |u: &str| s.seen(u);
        let usage_of = |keep: &dyn Fn(&Entry) -> bool| {
            let entries = entries_for(ledgers, s.held.usage(), (tier, namespace), me);
            let held = s.held.usage();
            ledger::effective_usage(
                held,
                entries.filter(|e| keep(e)),
                seen,
                now,
                (tier, namespace),
            )
        };
        let usage = usage_of(&|_| true);
        let decision = match decide(&usage) {
            Reservation::NoQuota => return Ok(Attempt::Decided(None)),
            Reservation::Refused(d) => {
                // Core's rule: a Pod that stands better without other replicas' grants is held, not refused.
                let entries = entries_for(ledgers, s.held.usage(), (tier, namespace), me);
                let refusal = grant::refusal(d.standing, me, entries, |keep| {
                    decide(&usage_of(keep)).decision().map(|w| w.standing)
                });
                // At a `max` in this replica's own view: its grants of the namespace go back to the others.
                if keep && d.standing == Standing::OverMax {
                    let mine = self.tier_ledger(ledgers, tier);
                    if mine.grants.seal(namespace) {
                        mine.close_drawn(me, now);
                        mine.flush.notify_one();
                    }
                }
                return Ok(match refusal {
                    Refusal::HeldByGrants => Attempt::HeldByGrants,
                    Refusal::Refused => Attempt::Decided(Some(d)),
                });
            }
            Reservation::Reserve(d) if !keep => return Ok(Attempt::Decided(Some(d))),
            Reservation::Reserve(d) => d,
        };
        if s.names.contains(&key(namespace, pod.name)) {
            self.metrics
                .record_ledger_write(tier, LedgerWrite::name_taken);
            return Ok(Attempt::Decided(Some(decision)));
        }
        let entry = Entry::new(pod.uid, tier, namespace, counted, now);
        let mine = self.tier_ledger(ledgers, tier);
        let (waiter, answered) = oneshot::channel();
        let fits = |g: &Entry, drawn: &Counted| grant::has_room(g, drawn, counted, now);
        match mine.grants.draw((&entry, counted), now, fits, waiter) {
            Draw::Drew(_) => {
                self.metrics.record_ledger_write(tier, LedgerWrite::drawn);
                Ok(Attempt::Decided(Some(decision)))
            }
            Draw::Waits => Ok(Attempt::Waits {
                decision,
                answered,
                flush: None,
            }),
            Draw::NoRoom => {
                let pods = grant::pods(
                    &usage,
                    (tier, namespace, counted),
                    mine.grants.want(namespace, now),
                    |u| match decide(u) {
                        Reservation::Reserve(d) => Some(d.standing),
                        _ => None,
                    },
                );
                let answered = self.plan_reservation(mine, entry, pods, counted, &seen, now)?;
                Ok(Attempt::Waits {
                    decision,
                    answered,
                    flush: Some(mine.flush.clone()),
                })
            }
        }
    }

    /// Takes `pod`'s reservation into `mine`'s next write: a grant of `pods` Pods of its size with `pod`
    /// drawn from it, or `pod`'s own entry when `pods` is 1; this replica's grants past their draw window are
    /// closed in the same write. The receiver says how the write went.
    fn plan_reservation(
        &self,
        mine: &mut TierLedger,
        pod: Entry,
        pods: u32,
        counted: &Counted,
        seen: &dyn Fn(&str) -> Seen,
        now: u64,
    ) -> Result<oneshot::Receiver<Flushed>, QuotaUnavailable> {
        let me = self.replica.as_str();
        let (tier, namespace) = (pod.tier.clone(), pod.namespace.clone());
        mine.close_drawn(me, now);
        let reserving = match pods {
            1 => pod.clone(),
            _ => {
                let n = self.grants_made.fetch_add(1, Ordering::Relaxed);
                let uid = format!("grant-{me}-{n}");
                Entry::grant(&uid, (&tier, &namespace, counted), pods, me, now)
            }
        };
        let bounds = &ledger::BOUNDS;
        match ledger::plan_in(mine.pending(), reserving.clone(), false, seen, now, bounds) {
            // A name the watch holds was answered before: not asked here.
            Planned::Written | Planned::NameTaken => {}
            Planned::Limited(limited) => {
                self.metrics
                    .record_ledger_write(&tier, LedgerWrite::limited);
                return Err(not_reserved(LedgerError::Limited(limited)));
            }
        }
        if reserving.is_grant() {
            mine.grants.granted(reserving, pod, counted);
        }
        mine.grants.reserved(&namespace, now);
        mine.reserved_in(&namespace);
        let (tx, rx) = oneshot::channel();
        mine.batch.waiting.push(tx);
        Ok(rx)
    }

    /// `tier`'s ledger in `ledgers` (as the watch brought it, or new: its first write creates it, or
    /// conflicts and reads it), with its writer in this replica started at the first reservation here (a
    /// tier only watched, or removed from the policy, has none).
    pub(super) fn tier_ledger<'a>(
        &self,
        ledgers: &'a mut BTreeMap<String, TierLedger>,
        tier: &str,
    ) -> &'a mut TierLedger {
        let t = (ledgers.entry(tier.to_string())).or_insert_with(TierLedger::new);
        if !t.writing
            && let Some(me) = self.me.upgrade()
        {
            t.writing = true;
            tokio::spawn(me.write_batches(tier.to_string(), t.flush.clone()));
        }
        t
    }
}
