//! Which scorer learns a decided Pod's run, as pure functions. The cluster-wide scorer learns the
//! runs the cluster-wide instance decided; a run a namespace-restricted instance decided goes to the scorer
//! of the Pod's own namespace, and nowhere else:
//!
//! - the record's `gpu-admission.io/decided-by` says who decided: none or `cluster` is the cluster-wide
//!   instance ([`Learner::Cluster`]); `restricted:<namespaces>` a restricted instance, which is taken only when
//!   it names the Pod's own namespace ([`Learner::Team`] of that namespace); anything else is no decision of
//!   ours (never learned by anyone);
//! - a restricted record counts only in a namespace a cluster admin registered a restricted instance for (a
//!   `MutatingWebhookConfiguration` selecting it by name, `crate::registrations`); anywhere else the run is
//!   the cluster-wide scorer's (a tenant can write a record and a Lease in her namespace, never a
//!   registration, and the cluster-wide frontend decides such Pods again);
//! - a team's run is delivered only while that namespace's `gpu-admission-ns-lock` Lease is active (core's
//!   [`who_scores`] says the cluster-wide instance leaves the namespace to a restricted one), else it is
//!   skipped as `no_restricted_instance`: a record a tenant forged in a namespace without a restricted
//!   instance teaches no scorer, and the cluster-wide scorer never learns a team's run;
//! - the team's scorer is found by the Pod's namespace, never by anything the Pod says: an operator's
//!   per-namespace endpoint (`--team-scorer NS=URL`), else the template (`--team-scorer-template`, by default
//!   `http://gpu-admission-scorer.{namespace}.svc.cluster.local.:50051`, the Service `overlays/namespaced`
//!   installs, by its absolute DNS name).

use std::collections::BTreeMap;

use gpu_admission_core::ns_lock::{self, Instance, NsLock, WhoScores};
use time::OffsetDateTime;

/// Whose scorer learns a decided Pod's run, by its decision record and its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Learner {
    /// The cluster-wide scorer (`--scorer`).
    Cluster,
    /// The scorer of this namespace's restricted instance.
    Team(String),
}

/// The learner of a Pod in `namespace` whose record says `decided_by`; `None`: decided by no instance that
/// may teach a scorer this run (another namespace's, or a value no instance writes).
pub fn learner(decided_by: Option<&str>, namespace: &str) -> Option<Learner> {
    match decided_by {
        None => Some(Learner::Cluster),
        Some(by) if by == ns_lock::CLUSTER_WIDE => Some(Learner::Cluster),
        Some(by) => {
            let names = by.strip_prefix("restricted:")?;
            let own = names.split(',').any(|n| n == namespace);
            (own && !namespace.is_empty()).then(|| Learner::Team(namespace.to_string()))
        }
    }
}

/// Whether a team's run may be delivered now: its namespace's Lease is held and unexpired at `now` (the rule
/// the cluster-wide frontend leaves the namespace's scoring by).
pub fn team_active(namespace: &str, lock: Option<&NsLock>, now: OffsetDateTime) -> bool {
    matches!(
        ns_lock::who_scores(&Instance::ClusterWide, namespace, lock, now),
        WhoScores::Restricted { .. }
    )
}

/// Where the team scorers of restricted instances are reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamScorers {
    /// `http://HOST:PORT` with `{namespace}` in it.
    template: String,
    /// Per-namespace endpoints that override the template.
    endpoints: BTreeMap<String, String>,
}

/// The placeholder of [`TeamScorers`]'s template.
pub const NAMESPACE_PLACEHOLDER: &str = "{namespace}";

/// The default `--team-scorer-template`: the Service `overlays/namespaced` installs, by its absolute DNS name
/// (a name without the trailing dot goes through the resolver's search path, where another namespace's
/// Service could answer).
pub const DEFAULT_TEMPLATE: &str =
    "http://gpu-admission-scorer.{namespace}.svc.cluster.local.:50051";

impl TeamScorers {
    /// From `--team-scorer-template` (must contain `{namespace}`) and `--team-scorer NS=URL` pairs.
    pub fn new(template: &str, endpoints: &[String]) -> anyhow::Result<Self> {
        if !template.contains(NAMESPACE_PLACEHOLDER) {
            anyhow::bail!(
                "--team-scorer-template {template:?}: no {NAMESPACE_PLACEHOLDER} (every team would share one scorer)"
            );
        }
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let (ns, url) = e.split_once('=').ok_or_else(|| {
                    anyhow::anyhow!("--team-scorer {e:?}: expected NAMESPACE=http://HOST:PORT")
                })?;
                Ok((ns.trim().to_string(), url.trim().to_string()))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            template: template.to_string(),
            endpoints,
        })
    }

    /// The endpoint of `namespace`'s team scorer.
    pub fn endpoint(&self, namespace: &str) -> String {
        self.endpoints
            .get(namespace)
            .cloned()
            .unwrap_or_else(|| self.template.replace(NAMESPACE_PLACEHOLDER, namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-11-26 18:00:00 UTC);

    #[test]
    fn the_record_and_the_namespace_choose_the_learner() {
        assert_eq!(learner(None, "ml"), Some(Learner::Cluster));
        assert_eq!(learner(Some("cluster"), "ml"), Some(Learner::Cluster));
        assert_eq!(
            learner(Some("restricted:gpu-team"), "gpu-team"),
            Some(Learner::Team("gpu-team".into()))
        );
        assert_eq!(
            learner(Some("restricted:team-a,team-b"), "team-b"),
            Some(Learner::Team("team-b".into()))
        );
        // A record naming another namespace (forged, or copied from a team's Pod), or no instance at all,
        // teaches nobody: never the cluster-wide scorer, never another namespace's.
        for forged in [
            "restricted:gpu-team",
            "restricted:",
            "restricted:team-a,gpu",
            "restricted",
            "Cluster",
            "cluster ",
            "",
        ] {
            assert_eq!(learner(Some(forged), "team-b"), None, "{forged:?}");
        }
        assert_eq!(learner(Some("restricted:"), ""), None);
    }

    #[test]
    fn a_team_is_delivered_to_only_while_its_lease_holds() {
        let held = NsLock {
            holder: Some("frontend-1".into()),
            renewed: Some(datetime!(2026-11-26 17:59:55 UTC)),
            duration_secs: Some(15),
        };
        assert!(team_active("gpu-team", Some(&held), NOW));
        assert!(!team_active("gpu-team", None, NOW));
        let expired = NsLock {
            renewed: Some(datetime!(2026-11-26 17:59:40 UTC)),
            ..held.clone()
        };
        assert!(!team_active("gpu-team", Some(&expired), NOW));
        assert!(!team_active("gpu-team", Some(&NsLock::default()), NOW));
    }

    #[test]
    fn a_team_scorer_is_found_by_the_namespace() {
        let t = TeamScorers::new(DEFAULT_TEMPLATE, &["lab=http://10.0.0.7:50051".into()]).unwrap();
        assert_eq!(
            t.endpoint("gpu-team"),
            "http://gpu-admission-scorer.gpu-team.svc.cluster.local.:50051"
        );
        assert_eq!(t.endpoint("lab"), "http://10.0.0.7:50051");
        assert!(TeamScorers::new("http://scorer:50051", &[]).is_err());
        assert!(TeamScorers::new(DEFAULT_TEMPLATE, &["lab".into()]).is_err());
    }
}
