//! Each webhook's decision, as a function of the request, the cluster facts, the policy and (for
//! `/mutate-pod`) the scorer's outcome.

pub mod checkpoint_restore;
pub mod mutate_pod;
pub mod validate_claim;
pub mod validate_namespace;
pub mod validate_pod;
pub mod validate_policy;
pub mod violation;
