//! What the cluster tells every decision: the ports' view of namespaces, PriorityClasses, DRA claims, Nodes
//! and the requester's RBAC grants (watch caches in the frontend, files in the CLI).

use crate::pod::gpu_resources::ClaimTemplates;
use crate::priority_class::PriorityClassLookup;
use crate::tier_bound::Nodes;

/// What the cluster tells every decision (watch caches, or flags with `--no-kube`).
pub struct Facts<'f> {
    /// The value of a namespace's tier label, as it is (`""` included); `None` for no label, or a namespace
    /// not (yet) known. Which tier that holds the namespace to is [`PolicySnapshot::tier_for`]'s answer.
    ///
    /// [`PolicySnapshot::tier_for`]: crate::policy::PolicySnapshot::tier_for
    pub tier_of: &'f dyn Fn(&str) -> Option<String>,
    /// The cluster's PriorityClasses; `None` with `--no-kube` (the policy's buckets answer then).
    pub priority_classes: Option<&'f dyn PriorityClassLookup>,
    /// The ResourceClaimTemplates (and ResourceClaims) DRA claims are counted with.
    pub claim_templates: &'f dyn ClaimTemplates,
    /// The Nodes a `spec.nodeName` is checked against.
    pub nodes: &'f dyn Nodes,
    /// The powers the review's requester holds (asked of the apiserver by the edge; none when it could not
    /// be asked): `exempt tiers/<tier>` runs one's own workloads outside the tier.
    pub grants: &'f crate::authority::Grants,
}
