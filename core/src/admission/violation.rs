//! What the tier checks of `/validate-pod` find, whatever the object (a Pod, a pod template, a DRA claim):
//! one [`Violation`] per thing wrong, its [`Reason`], and [`Where`] the object is checked against.

use crate::facts::Facts;
use crate::policy::{PolicySnapshot, TierRules};
use crate::priority_class::PriorityClassLookup;

/// What is wrong (the metric's `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A class selector naming a class outside the tier (or no catalog class at all).
    ClassOutsideTier,
    /// A DRA DeviceClass (a claim's request, or an extended resource backed by a class) that could allocate
    /// devices outside the tier.
    DeviceClassOutsideTier,
    /// A `priorityClassName` above the tier's `maxPriorityClass`.
    PriorityAboveCap,
    /// A GPU need (memory per GPU, vendor) that no class of the tier meets.
    NoClassFits,
    /// A Pod without a positive constraint to the tier's classes on every way of scheduling it (see
    /// [`crate::tier_bound`]).
    NotBoundToTier,
    /// `spec.nodeName` names a Node outside the tier, or one the frontend does not know.
    NodeOutsideTier,
    /// Whether (or how many) GPUs the Pod asks for cannot be told: a DRA claim the frontend cannot read, a GPU
    /// resource whose quantity is no Kubernetes quantity.
    Undecidable,
    /// A GPU Pod, or a Pod naming a PriorityClass, in a namespace without a tier under
    /// `untieredNamespaces: Deny`.
    UntieredNamespace,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ClassOutsideTier => "class_outside_tier",
            Reason::DeviceClassOutsideTier => "device_class_outside_tier",
            Reason::PriorityAboveCap => "priority_above_cap",
            Reason::NoClassFits => "no_class_fits",
            Reason::NotBoundToTier => "not_bound_to_tier",
            Reason::NodeOutsideTier => "node_outside_tier",
            Reason::Undecidable => "undecidable",
            Reason::UntieredNamespace => "untiered_namespace",
        }
    }
}

/// One violation of one described Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: Reason,
    /// Where the Pod is described (`Pod`, `spec.template`, …).
    pub path: String,
    /// What is wrong, as a clause: `pins GPU class H100-80GB`.
    pub what: String,
}

/// What a described Pod is checked against.
pub struct Where<'a> {
    pub namespace: &'a str,
    pub rules: &'a TierRules<'a>,
    pub policy: &'a PolicySnapshot,
    pub facts: &'a Facts<'a>,
    pub pcs: &'a dyn PriorityClassLookup,
}
