//! The budget of exploratory decisions.
//!
//! A decision "explores" when the information-gain bonus changed which class won. The share of
//! exploratory decisions among the last `explorationWindow` decisions stays at or under
//! `explorationCap`: an exploratory decision is allowed only if it keeps the share there. Old decisions
//! leave the window, so once the share falls back under the cap exploration resumes (the original
//! scheduler's counter only ever grew, so it stopped exploring for good).
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplorationWindow {
    /// Most recent last; `true` = explored.
    recent: VecDeque<bool>,
    explored: usize,
}

impl ExplorationWindow {
    /// Whether one more exploratory decision keeps the share within `cap` over the last `window`
    /// decisions (slots not filled yet count as non-exploratory).
    pub fn allows(&self, cap: f64, window: usize) -> bool {
        let window = window.max(1);
        // The decision about to be made pushes the oldest one out once the window is full.
        let keep = window - 1;
        let explored_kept = self.recent.iter().rev().take(keep).filter(|&&e| e).count();
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

    #[test]
    fn normalise_fixes_a_tampered_counter() {
        let mut w: ExplorationWindow =
            serde_json::from_str(r#"{"recent":[true,false,true],"explored":99}"#).unwrap();
        w.normalise(2);
        assert_eq!(w.len(), 2);
        assert_eq!(w.share(2), 0.5);
    }
}
