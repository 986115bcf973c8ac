//! The admission webhooks. `review` is the AdmissionReview envelope every webhook shares (decode once, encode
//! once); each webhook is its own module with a pure decision function and a thin handler.

pub mod checkpoint_restore;
/// The properties the fuzz targets check, replayed by `cargo test` on a seed corpus.
pub mod fuzzing;
pub mod mutate_pod;
pub mod placement;
pub mod review;
pub mod validate_pod;
pub mod validate_policy;

// The mutating webhook's parts under their former paths.
pub use mutate_pod::{decide, features, handler, patch};
