//! gpu-admission scorer: scores GPU jobs against a policy's GPU catalog and learns from observed runtimes.
//!
//! - [`policy`]: the policy file (schema, validation, hot reload);
//! - [`model`]: the pure scoring model (feasibility, estimates, cost, exploration, priority, interference);
pub mod model;
pub mod policy;
