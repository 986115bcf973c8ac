//! The scoring policy: the one model of the policy crate (`gpu-admission-policy`), re-exported so that the
//! model reads `crate::policy::…`; the scorer adds nothing to it.
pub use gpu_admission_policy::*;
