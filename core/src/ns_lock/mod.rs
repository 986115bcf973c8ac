//! Who scores a namespace's Pods. A namespace-restricted instance (a team's own frontend and
//! scorer, `--restrict-to-namespaces`) holds the `coordination.k8s.io/v1` Lease [`LEASE_NAME`] in each of its
//! namespaces while it can decide them ([`hold`]); the cluster-wide instance watches those Leases and leaves
//! **scoring** of a namespace with an active, unexpired Lease to it, as long as a cluster admin registered a
//! restricted instance for the namespace ([`registration`]), and decides again what the restricted instance
//! left on a fallback or outside the namespace's current tier ([`take_over`]). Only scoring: the tier bound
//! and the priority cap are still added by the cluster-wide `/mutate-pod` when a Pod comes without them, and
//! every `/validate-*` stays the cluster-wide installation's whatever a Lease says.

pub mod hold;
pub mod registration;
pub mod take_over;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use time::OffsetDateTime;

/// What a restricted instance's name (`decided-by`) starts with.
pub const RESTRICTED_PREFIX: &str = "restricted:";

/// The name of the Lease a restricted instance holds in each of its namespaces.
pub const LEASE_NAME: &str = "gpu-admission-ns-lock";

/// What one `gpu-admission-ns-lock` Lease says (its `spec`, as the watch delivered it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NsLock {
    /// `spec.holderIdentity`; none or empty once released.
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renewed: Option<OffsetDateTime>,
    /// `spec.leaseDurationSeconds`.
    pub duration_secs: Option<i32>,
}

impl NsLock {
    /// A Lease's spec as this rule reads it (the frontend's watch and the observer's read Leases alike).
    pub fn of_lease(lease: &k8s_openapi::api::coordination::v1::Lease) -> Self {
        let spec = lease.spec.as_ref();
        NsLock {
            holder: spec.and_then(|s| s.holder_identity.clone()),
            renewed: spec
                .and_then(|s| s.renew_time.as_ref())
                .and_then(|t| OffsetDateTime::from_unix_timestamp_nanos(t.0.as_nanosecond()).ok()),
            duration_secs: spec.and_then(|s| s.lease_duration_seconds),
        }
    }

    /// Until when the Lease holds: renewed + duration, for a Lease with a holder and a positive duration.
    /// `None`: released, never renewed or malformed, which holds nothing.
    pub fn expires(&self) -> Option<OffsetDateTime> {
        self.holder.as_deref().filter(|h| !h.is_empty())?;
        let secs = self.duration_secs.filter(|d| *d > 0)?;
        self.renewed?
            .checked_add(time::Duration::seconds(secs.into()))
    }
}

/// Which Pods this instance scores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instance {
    /// Every namespace, but those another instance holds the Lease of.
    ClusterWide,
    /// Only these namespaces (`--restrict-to-namespaces`).
    Restricted(BTreeSet<String>),
}

impl Instance {
    /// From `--restrict-to-namespaces` (empty: cluster-wide).
    pub fn from_namespaces<I: IntoIterator<Item = S>, S: AsRef<str>>(namespaces: I) -> Self {
        let set: BTreeSet<String> = namespaces
            .into_iter()
            .map(|n| n.as_ref().trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if set.is_empty() {
            Instance::ClusterWide
        } else {
            Instance::Restricted(set)
        }
    }

    /// The name this instance signs its decision records with (`gpu-admission.io/decided-by`):
    /// `cluster`, or `restricted:` and its namespaces, sorted, comma-separated. The observer learns only
    /// from Pods its own instance decided.
    pub fn name(&self) -> String {
        match self {
            Instance::ClusterWide => CLUSTER_WIDE.to_string(),
            Instance::Restricted(ns) => {
                format!(
                    "{RESTRICTED_PREFIX}{}",
                    ns.iter().cloned().collect::<Vec<_>>().join(",")
                )
            }
        }
    }
}

/// The operation signing a decision record with the instance's name
/// ([`ANN_DECIDED_BY`](crate::names::decision::ANN_DECIDED_BY)), appended to a patch that wrote the record
/// (so `metadata.annotations` exists). A restricted instance writes its name. The cluster-wide instance's
/// records carry none (what a record without one means), so it removes one the Pod as submitted brought: a
/// `decided-by` a user wrote would otherwise send the run to a restricted instance's scorer, or to none, and
/// keep it from the cluster's learning.
pub fn signature(instance: &Instance, pod: Option<&Pod>) -> Option<json_patch::PatchOperation> {
    const PATH: &str = "/metadata/annotations/gpu-admission.io~1decided-by";
    let signed = pod
        .and_then(|p| p.metadata.annotations.as_ref())
        .is_some_and(|a| a.contains_key(crate::names::decision::ANN_DECIDED_BY));
    let op = match instance {
        Instance::Restricted(_) => {
            serde_json::json!({"op": "add", "path": PATH, "value": instance.name()})
        }
        Instance::ClusterWide if signed => serde_json::json!({"op": "remove", "path": PATH}),
        Instance::ClusterWide => return None,
    };
    serde_json::from_value(op).ok()
}

/// The record's name of the cluster-wide instance (also what a record without `decided-by` means).
pub const CLUSTER_WIDE: &str = "cluster";

/// Who scores a Pod of one namespace, as this instance sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhoScores {
    /// This instance.
    Here,
    /// The restricted instance `holder` (its Lease holds until `until`): this cluster-wide instance does not
    /// score, it only holds the Pod to its tier (bound and priority cap).
    Restricted {
        holder: String,
        until: OffsetDateTime,
    },
    /// A restricted instance asked about a namespace outside its own: not its business at all.
    NotOurs,
}

/// The one rule: a restricted instance scores its own namespaces and nothing else; the cluster-wide one
/// scores every namespace but one whose Lease (`lock`) has a holder and has not expired at `now`.
pub fn who_scores(
    instance: &Instance,
    namespace: &str,
    lock: Option<&NsLock>,
    now: OffsetDateTime,
) -> WhoScores {
    match instance {
        Instance::Restricted(own) if own.contains(namespace) => WhoScores::Here,
        Instance::Restricted(_) => WhoScores::NotOurs,
        Instance::ClusterWide => match lock.and_then(|l| Some((l, l.expires()?))) {
            Some((l, until)) if until > now => WhoScores::Restricted {
                holder: l.holder.clone().unwrap_or_default(),
                until,
            },
            _ => WhoScores::Here,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn lock(holder: Option<&str>, renewed: Option<OffsetDateTime>, secs: Option<i32>) -> NsLock {
        NsLock {
            holder: holder.map(str::to_string),
            renewed,
            duration_secs: secs,
        }
    }

    const NOW: OffsetDateTime = datetime!(2026-11-26 18:00:00 UTC);

    #[test]
    fn cluster_wide_leaves_a_namespace_with_an_active_lease() {
        let held = lock(
            Some("team-a-0"),
            Some(datetime!(2026-11-26 17:59:55 UTC)),
            Some(15),
        );
        assert_eq!(
            who_scores(&Instance::ClusterWide, "team-a", Some(&held), NOW),
            WhoScores::Restricted {
                holder: "team-a-0".into(),
                until: datetime!(2026-11-26 18:00:10 UTC)
            }
        );
        assert_eq!(
            who_scores(&Instance::ClusterWide, "team-a", None, NOW),
            WhoScores::Here
        );
    }

    #[test]
    fn an_expired_released_or_malformed_lease_holds_nothing() {
        let cases = [
            // expired a second ago, and exactly now
            lock(
                Some("a"),
                Some(datetime!(2026-11-26 17:59:44 UTC)),
                Some(15),
            ),
            lock(
                Some("a"),
                Some(datetime!(2026-11-26 17:59:45 UTC)),
                Some(15),
            ),
            // released by kube-lease-manager: no holder, no renewTime, no duration
            lock(None, None, None),
            lock(Some(""), Some(NOW), Some(15)),
            lock(Some("a"), None, Some(15)),
            lock(Some("a"), Some(NOW), None),
            lock(Some("a"), Some(NOW), Some(0)),
            lock(Some("a"), Some(NOW), Some(-5)),
        ];
        for l in cases {
            assert_eq!(
                who_scores(&Instance::ClusterWide, "team-a", Some(&l), NOW),
                WhoScores::Here,
                "{l:?}"
            );
        }
    }

    #[test]
    fn a_restricted_instance_scores_its_own_namespaces_only() {
        let team = Instance::from_namespaces(["team-a", " team-b", ""]);
        let held = lock(Some("someone"), Some(NOW), Some(15));
        assert_eq!(who_scores(&team, "team-b", None, NOW), WhoScores::Here);
        // its own namespace even when another holds the Lease (the cluster-wide instance decides that part)
        assert_eq!(
            who_scores(&team, "team-a", Some(&held), NOW),
            WhoScores::Here
        );
        assert_eq!(who_scores(&team, "ml", None, NOW), WhoScores::NotOurs);
        assert_eq!(
            who_scores(&team, "ml", Some(&held), NOW),
            WhoScores::NotOurs
        );
    }

    #[test]
    fn a_restricted_instance_signs_and_the_cluster_wide_one_removes_a_forged_signature() {
        use crate::names::decision::ANN_DECIDED_BY;
        let unsigned = serde_json::json!({"metadata": {"annotations": {"team": "a"}}});
        let forged =
            serde_json::json!({"metadata": {"annotations": {ANN_DECIDED_BY: "restricted:team-b"}}});
        let pod = |v: &serde_json::Value| -> Pod { serde_json::from_value(v.clone()).unwrap() };
        assert!(signature(&Instance::ClusterWide, None).is_none());
        assert!(signature(&Instance::ClusterWide, Some(&pod(&unsigned))).is_none());
        let team = Instance::from_namespaces(["team-a"]);
        for submitted in [&unsigned, &forged] {
            let op = signature(&team, Some(&pod(submitted))).unwrap();
            let mut patched = submitted.clone();
            json_patch::patch(&mut patched, &[op]).unwrap();
            assert_eq!(
                patched["metadata"]["annotations"][ANN_DECIDED_BY],
                "restricted:team-a"
            );
        }
        // A Pod its author signed: the cluster-wide record leaves no signature.
        let op = signature(&Instance::ClusterWide, Some(&pod(&forged))).unwrap();
        let mut patched = forged.clone();
        json_patch::patch(&mut patched, &[op]).unwrap();
        assert_eq!(patched["metadata"]["annotations"], serde_json::json!({}));
    }

    #[test]
    fn a_lease_as_the_rule_reads_it() {
        use k8s_openapi::api::coordination::v1::Lease;
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": LEASE_NAME, "namespace": "team-a"},
            "spec": {"holderIdentity": "team-a-frontend-1", "leaseDurationSeconds": 15,
                     "renewTime": "2026-11-26T18:00:00.250000Z"}
        }))
        .unwrap();
        let lock = NsLock::of_lease(&lease);
        assert_eq!(lock.holder.as_deref(), Some("team-a-frontend-1"));
        assert_eq!(lock.duration_secs, Some(15));
        assert_eq!(lock.expires(), Some(datetime!(2026-11-26 18:00:15.25 UTC)));
        let released: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": LEASE_NAME, "namespace": "team-a"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(NsLock::of_lease(&released).expires(), None);
    }

    #[test]
    fn instance_names() {
        assert_eq!(
            Instance::from_namespaces(Vec::<String>::new()),
            Instance::ClusterWide
        );
        assert_eq!(Instance::ClusterWide.name(), "cluster");
        assert_eq!(
            Instance::from_namespaces(["team-b", "team-a", "team-b"]).name(),
            "restricted:team-a,team-b"
        );
    }
}
