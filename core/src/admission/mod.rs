//! Each webhook's decision, as a function of the request, the cluster facts, the policy and (for
//! `/mutate-pod`) the scorer's outcome.

pub mod checkpoint_restore;
pub mod mutate_claim;
pub mod mutate_pod;
pub mod validate_claim;
pub mod validate_namespace;
pub mod validate_pod;
pub mod validate_policy;
pub mod violation;

/// How a validating webhook answered a request (the metric's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValidationOutcome {
    /// Not held to a tier.
    Skipped,
    /// Nothing wrong, or the requester may do it.
    Allowed,
    Denied,
    /// A violation admitted under Warn or Audit.
    ViolationAdmitted,
}

impl ValidationOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationOutcome::Skipped => "skipped",
            ValidationOutcome::Allowed => "allowed",
            ValidationOutcome::Denied => "denied",
            ValidationOutcome::ViolationAdmitted => "violation_admitted",
        }
    }
}
