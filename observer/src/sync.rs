//! Keeping the scorer replicas' learned states converged, as a pure plan: from what each replica exported
//! (and the copy the observer stores), which state is the most complete, which replicas must import it, and
//! whether the stored copy must be replaced. The I/O is in `convergence`.

/// What a learned state is, without its bytes: how many observations it holds and its digest (equal digests
/// answer the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub observations: u64,
    pub digest: String,
}

/// Where the most complete state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The replica at this index.
    Replica(usize),
    /// The observer's stored copy.
    GpuPolicyException,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The state every replica should hold; `None` when there is nothing (no replica answered, no copy).
    pub best: Option<Source>,
    /// Replicas (indexes) whose state differs from the best one.
    pub import_into: Vec<usize>,
    /// Whether the stored copy must be replaced by the best (a replica's) state.
    pub store: bool,
}

/// `replicas[i]` is `None` when replica `i` did not answer. The best state holds the most observations; among
/// equals, the one most replicas already hold (fewest imports), then a replica's over the stored copy, then the
/// smaller digest (so every observer picks the same one), then the first replica.
pub fn plan(replicas: &[Option<Summary>], stored: Option<&Summary>) -> Plan {
    let holders = |digest: &str| {
        replicas
            .iter()
            .flatten()
            .filter(|s| s.digest == digest)
            .count()
    };
    let candidates = replicas
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (Source::Replica(i), s)))
        .chain(stored.map(|s| (Source::GpuPolicyException, s)));
    let index = |src: &Source| match src {
        Source::Replica(i) => *i,
        Source::GpuPolicyException => usize::MAX,
    };
    let best = candidates.max_by(|(a_src, a), (b_src, b)| {
        a.observations
            .cmp(&b.observations)
            .then_with(|| holders(&a.digest).cmp(&holders(&b.digest)))
            .then_with(|| {
                matches!(a_src, Source::Replica(_)).cmp(&matches!(b_src, Source::Replica(_)))
            })
            .then_with(|| b.digest.cmp(&a.digest))
            .then_with(|| index(b_src).cmp(&index(a_src)))
    });
    let Some((source, best)) = best else {
        return Plan::default();
    };
    if best.observations == 0 {
        // Nothing learned anywhere: every replica starts from the same priors.
        return Plan::default();
    }
    let import_into = replicas
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().filter(|s| s.digest != best.digest).map(|_| i))
        .collect();
    let store =
        matches!(source, Source::Replica(_)) && stored.is_none_or(|s| s.digest != best.digest);
    Plan {
        best: Some(source),
        import_into,
        store,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(observations: u64, digest: &str) -> Option<Summary> {
        Some(Summary {
            observations,
            digest: digest.into(),
        })
    }

    #[test]
    fn the_replica_with_most_observations_is_imported_into_the_others_and_stored() {
        let p = plan(
            &[s(3, "a"), s(5, "b"), None, s(0, "z")],
            s(2, "old").as_ref(),
        );
        assert_eq!(
            p,
            Plan {
                best: Some(Source::Replica(1)),
                import_into: vec![0, 3],
                store: true
            }
        );
    }

    #[test]
    fn converged_replicas_need_nothing() {
        let p = plan(&[s(5, "b"), s(5, "b")], s(5, "b").as_ref());
        assert_eq!(p.import_into, Vec::<usize>::new());
        assert!(!p.store);
        assert_eq!(p.best, Some(Source::Replica(0)));
    }

    #[test]
    fn a_fresh_replica_set_gets_the_stored_copy() {
        let p = plan(&[s(0, "empty"), s(0, "empty")], s(40, "kept").as_ref());
        assert_eq!(
            p,
            Plan {
                best: Some(Source::GpuPolicyException),
                import_into: vec![0, 1],
                store: false
            }
        );
    }

    #[test]
    fn ties_go_to_the_state_most_replicas_hold_then_the_smaller_digest() {
        let p = plan(&[s(4, "x"), s(4, "y"), s(4, "y")], None);
        assert_eq!(p.best, Some(Source::Replica(1)));
        assert_eq!(p.import_into, vec![0]);
        let p = plan(&[s(4, "y"), s(4, "x")], None);
        assert_eq!(p.best, Some(Source::Replica(1)));
        assert_eq!(p.import_into, vec![0]);
        // The same state as the stored copy: the replica's is taken, nothing to store.
        let p = plan(&[s(4, "x")], s(4, "x").as_ref());
        assert_eq!((p.best, p.store), (Some(Source::Replica(0)), false));
    }

    #[test]
    fn nothing_learned_or_nobody_answering_is_no_plan() {
        assert_eq!(plan(&[None, None], None), Plan::default());
        assert_eq!(plan(&[s(0, "e"), s(0, "f")], None), Plan::default());
    }
}
