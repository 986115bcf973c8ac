//! The budget of exploratory decisions.
//!
//! A decision "explores" when the information-gain bonus changed which class won. The share of
//! exploratory decisions among the last `explorationWindow` decisions stays at or under
//! `explorationCap`: an exploratory decision is allowed only if it keeps the share there. Old decisions
//! leave the window, so once the share falls back under the cap exploration resumes (the original
//! scheduler's counter only ever grew, so it stopped exploring for good).
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
}

/// The snapshot's fields, as written; the count of explored decisions is not trusted but recounted.
#[derive(Deserialize)]
struct WindowFields {
    recent: VecDeque<bool>,
    #[serde(rename = "explored")]
    _explored: usize,
}

impl From<WindowFields> for ExplorationWindow {
    fn from(w: WindowFields) -> Self {
        let explored = w.recent.iter().filter(|&&e| e).count();
        Self {
            recent: w.recent,
            explored,
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

    /// Records a decision, keeping the last `window` ones.
    pub fn record(&mut self, explored: bool, window: usize) {
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
            w.record(e, window);
        }
        assert_eq!(w.share(window), cap);
        // Over any full window the share never exceeds the cap, and exploration keeps coming back.
        let mut later = 0;
        for _ in 0..10 * window {
            let e = w.allows(cap, window);
            w.record(e, window);
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
        w.record(true, window);
        w.record(true, window);
        assert!(!w.allows(cap, window));
        for _ in 0..8 {
            w.record(false, window);
        }
        // The next decision pushes the oldest explored one out of the window.
        assert!(w.allows(cap, window));
        w.record(false, window);
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
            w.record(x >> 62 == 0, window);
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
    fn normalise_fixes_a_tampered_counter() {
        let mut w: ExplorationWindow =
            serde_json::from_str(r#"{"recent":[true,false,true],"explored":99}"#).unwrap();
        w.normalise(2);
        assert_eq!(w.len(), 2);
        assert_eq!(w.share(2), 0.5);
    }
}
