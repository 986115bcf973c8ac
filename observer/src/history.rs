//! What ran where: the runs of decided GPU Pods per node, kept after their Pods are gone, so that a Pod
//! finishing now still sees the neighbours that ran beside it and were deleted meanwhile.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::jiff::Timestamp;

use crate::extract::Run;

#[derive(Debug, Default)]
pub struct RunHistory {
    by_node: HashMap<String, BTreeMap<String, Run>>,
}

impl RunHistory {
    /// Records (or updates) a run.
    pub fn record(&mut self, run: &Run) {
        if run.node.is_empty() {
            return;
        }
        self.by_node
            .entry(run.node.clone())
            .or_default()
            .insert(run.uid.clone(), run.clone());
    }

    /// The runs known on `node`.
    pub fn on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Run> + 'a {
        self.by_node.get(node).into_iter().flat_map(|m| m.values())
    }

    /// Every run kept.
    pub fn all(&self) -> impl Iterator<Item = &Run> {
        self.by_node.values().flat_map(|m| m.values())
    }

    /// How many runs are kept.
    pub fn len(&self) -> usize {
        self.by_node.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the finished runs nothing can overlap any more. `needed(uid)` says which runs still have to be
    /// reported; an open run is always needed. A finished run is kept while it ended after the earliest start of
    /// a needed run on its node (a run starting later, now or in the future, cannot overlap it).
    pub fn prune(&mut self, needed: impl Fn(&str) -> bool) {
        for runs in self.by_node.values_mut() {
            let earliest_needed: Option<Timestamp> = runs
                .values()
                .filter(|r| r.end.is_none() || needed(&r.uid))
                .map(|r| r.start)
                .min();
            runs.retain(|uid, r| match r.end {
                None => true,
                Some(_) if needed(uid) => true,
                Some(end) => earliest_needed.is_some_and(|s| end > s),
            });
        }
        self.by_node.retain(|_, runs| !runs.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(uid: &str, node: &str, start: &str, end: Option<&str>) -> Run {
        Run {
            uid: uid.into(),
            job_type: "train-llama".into(),
            node: node.into(),
            start: start.parse().unwrap(),
            end: end.map(|e| e.parse().unwrap()),
            learner: crate::route::Learner::Cluster,
        }
    }

    #[test]
    fn keeps_what_a_needed_or_open_run_can_still_overlap() {
        let mut h = RunHistory::default();
        h.record(&run("open", "n1", "2026-05-04T10:00:00Z", None));
        h.record(&run(
            "old",
            "n1",
            "2026-05-04T08:00:00Z",
            Some("2026-05-04T09:00:00Z"),
        ));
        h.record(&run(
            "shared",
            "n1",
            "2026-05-04T09:30:00Z",
            Some("2026-05-04T10:30:00Z"),
        ));
        h.record(&run(
            "pending",
            "n2",
            "2026-05-04T10:00:00Z",
            Some("2026-05-04T11:00:00Z"),
        ));
        h.record(&run(
            "beside",
            "n2",
            "2026-05-04T10:10:00Z",
            Some("2026-05-04T10:20:00Z"),
        ));
        h.record(&run(
            "lonely",
            "n3",
            "2026-05-04T10:10:00Z",
            Some("2026-05-04T10:20:00Z"),
        ));
        h.prune(|uid| uid == "pending");
        let mut kept: Vec<&str> = ["n1", "n2", "n3"]
            .iter()
            .flat_map(|n| h.on_node(n).map(|r| r.uid.as_str()))
            .collect();
        kept.sort();
        assert_eq!(kept, ["beside", "open", "pending", "shared"]);
        // Once reported, the pending run and its neighbour go.
        h.prune(|_| false);
        assert_eq!(h.on_node("n2").count(), 0);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn an_update_replaces_the_run() {
        let mut h = RunHistory::default();
        h.record(&run("a", "n1", "2026-05-04T10:00:00Z", None));
        h.record(&run(
            "a",
            "n1",
            "2026-05-04T10:00:00Z",
            Some("2026-05-04T11:00:00Z"),
        ));
        assert_eq!(h.len(), 1);
        assert!(h.on_node("n1").all(|r| r.end.is_some()));
        h.record(&run("unbound", "", "2026-05-04T10:00:00Z", None));
        assert_eq!(h.len(), 1);
    }
}
