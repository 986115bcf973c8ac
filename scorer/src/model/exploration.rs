//! The budget of exploratory decisions.
//!
//! A decision "explores" when the information-gain bonus changed which class won. The share of
//! exploratory decisions among the last `explorationWindow` decisions stays at or under
//! `explorationCap`: an exploratory decision is allowed only if it keeps the share there. Old decisions
//! leave the window, so once the share falls back under the cap exploration resumes (the original
//! scheduler's counter only ever grew, so it stopped exploring for good).
//!
//! The window also keeps what this replica's decisions are expected to have **saved** against the classes
//! the prior alone would have chosen ([`ExplorationWindow::saved`]): a try is paid for only out of that
//! ([`super::value::affordable`]).
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Invariant: `explored` is the number of `true`s in `recent` (kept by every method; a snapshot's count is
/// recomputed when it is read, see [`WindowFields`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "WindowFields")]
pub struct ExplorationWindow {
    /// Most recent last; `true` = explored.
    recent: VecDeque<bool>,
    explored: usize,
    /// Over every decision recorded (not only the window's): the expected cost of the classes the prior
    /// alone would have chosen less that of the classes chosen, in runs' cost (finite).
    saved: f64,
}

/// The snapshot's fields, as written; the count of explored decisions is not trusted but recounted, and
/// savings that are not a finite number count as none.
#[derive(Deserialize)]
struct WindowFields {
    recent: VecDeque<bool>,
    #[serde(rename = "explored")]
    _explored: usize,
    #[serde(default)]
    saved: f64,
}

impl From<WindowFields> for ExplorationWindow {
    fn from(w: WindowFields) -> Self {
        let explored = w.recent.iter().filter(|&&e| e).count();
        Self {
            recent: w.recent,
            explored,
            saved: if w.saved.is_finite() { w.saved } else { 0.0 },
        }
    }
}

impl ExplorationWindow {
    /// Whether one more exploratory decision keeps the share within `cap` over the last `window`
    /// decisions (slots not filled yet count as non-exploratory).
    pub fn allows(&self, cap: f64, window: usize) -> bool {
        let window = window.max(1);
        // The decision about to be made pushes the oldest one out once the window is full.
        let keep = window - 1;
        // The explored decisions among the last `keep` ones: all of them but those among the older rest
        // (none or one once the window is full; more only just after the window was shortened).
        let older = self.recent.len().saturating_sub(keep);
        let explored_kept = self.explored - self.recent.iter().take(older).filter(|&&e| e).count();
        (explored_kept + 1) as f64 <= cap * window as f64 + 1e-9
    }

    /// The gate of this replica's next unkeyed decision: room for one more exploratory decision within
    /// `cap` over `window`, and what its decisions saved.
    pub fn gate(&self, cap: f64, window: usize) -> super::Gate {
        super::Gate::Window {
            room: self.allows(cap, window),
            saved: self.saved,
        }
    }

    /// Records a decision that is expected to save `saving` runs' cost against the prior's choice (negative:
    /// to cost more), keeping the last `window` ones.
    pub fn record(&mut self, explored: bool, saving: f64, window: usize) {
        if saving.is_finite() {
            self.saved += saving;
        }
        self.recent.push_back(explored);
        self.explored += usize::from(explored);
        while self.recent.len() > window.max(1) {
            if self.recent.pop_front() == Some(true) {
                self.explored -= 1;
            }
        }
    }

    /// Share of exploratory decisions over the last `window` decisions (slots not filled yet count as
    /// non-exploratory).
    pub fn share(&self, window: usize) -> f64 {
        self.explored as f64 / window.max(self.recent.len()).max(1) as f64
    }

    /// What this replica's recorded decisions are expected to have saved against the classes the prior alone
    /// would have chosen, in runs' cost.
    pub fn saved(&self) -> f64 {
        self.saved
    }

    pub fn len(&self) -> usize {
        self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }

    /// Rebuilds the counter after deserialising (the snapshot's count is not trusted).
    pub fn normalise(&mut self, window: usize) {
        while self.recent.len() > window.max(1) {
            self.recent.pop_front();
        }
        self.explored = self.recent.iter().filter(|&&e| e).count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_holds_then_recovers() {
        let (cap, window) = (0.1, 50);
        let mut w = ExplorationWindow::default();
        // Always wanting to explore: exactly cap x window decisions explore, then none.
        for i in 0..window {
            let e = w.allows(cap, window);
            assert_eq!(e, i < 5, "decision {i}");
            w.record(e, 0.0, window);
        }
        assert_eq!(w.share(window), cap);
        // Over any full window the share never exceeds the cap, and exploration keeps coming back.
        let mut later = 0;
        for _ in 0..10 * window {
            let e = w.allows(cap, window);
            w.record(e, 0.0, window);
            later += usize::from(e);
            assert!(w.share(window) <= cap + 1e-9, "share {}", w.share(window));
        }
        assert_eq!(
            later, 50,
            "exploration must recover once old decisions leave the window"
        );
    }

    #[test]
    fn recovers_after_exploit_only_stretch() {
        let (cap, window) = (0.2, 10);
        let mut w = ExplorationWindow::default();
        w.record(true, 0.0, window);
        w.record(true, 0.0, window);
        assert!(!w.allows(cap, window));
        for _ in 0..8 {
            w.record(false, 0.0, window);
        }
        // The next decision pushes the oldest explored one out of the window.
        assert!(w.allows(cap, window));
        w.record(false, 0.0, window);
        assert!(w.allows(cap, window));
    }

    #[test]
    fn zero_cap_never_explores() {
        let w = ExplorationWindow::default();
        assert!(!w.allows(0.0, 100));
    }

    /// `allows` as first written: counting the last `window - 1` decisions.
    fn allows_by_counting(w: &ExplorationWindow, cap: f64, window: usize) -> bool {
        let window = window.max(1);
        let kept = w
            .recent
            .iter()
            .rev()
            .take(window - 1)
            .filter(|&&e| e)
            .count();
        (kept + 1) as f64 <= cap * window as f64 + 1e-9
    }

    #[test]
    fn allows_agrees_with_counting_also_when_the_window_changes() {
        let mut w = ExplorationWindow::default();
        let mut x = 12345u64;
        for i in 0..3000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Windows shrink and grow now and then (policy reloads); the cap varies.
            let window = [1, 3, 10, 50, 0][(i / 97) % 5];
            let cap = [0.1, 0.3, 1.0][(i / 31) % 3];
            assert_eq!(
                w.allows(cap, window),
                allows_by_counting(&w, cap, window),
                "{i}"
            );
            w.record(x >> 62 == 0, 0.0, window);
        }
    }

    #[test]
    fn a_snapshot_counter_is_recounted_when_read() {
        let w: ExplorationWindow =
            serde_json::from_str(r#"{"recent":[true,false,true],"explored":0}"#).unwrap();
        assert_eq!(w.share(3), 2.0 / 3.0);
        assert_eq!(w.allows(0.5, 4), allows_by_counting(&w, 0.5, 4));
    }

    #[test]
    fn savings_add_up_over_every_decision_and_a_bad_snapshot_saves_nothing() {
        let mut w = ExplorationWindow::default();
        for saving in [0.5, 0.0, -0.25, f64::NAN, 0.25] {
            w.record(false, saving, 2);
        }
        // The window keeps 2 decisions; the savings keep all of them (a non-finite one adds nothing).
        assert_eq!((w.len(), w.saved()), (2, 0.5));
        let read: ExplorationWindow =
            serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(read, w);
        let old: ExplorationWindow =
            serde_json::from_str(r#"{"recent":[true],"explored":1}"#).unwrap();
        assert_eq!(old.saved(), 0.0);
    }

    #[test]
    fn normalise_fixes_a_tampered_counter() {
        let mut w: ExplorationWindow =
            serde_json::from_str(r#"{"recent":[true,false,true],"explored":99}"#).unwrap();
        w.normalise(2);
        assert_eq!(w.len(), 2);
        assert_eq!(w.share(2), 0.5);
    }
}
