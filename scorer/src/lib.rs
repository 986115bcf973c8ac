//! gpu-admission scorer: scores GPU jobs against a policy's GPU catalog and learns from observed runtimes.
//!
//! - [`policy`]: the policy file (schema, validation, hot reload);
//! - [`model`]: the pure scoring model (feasibility, estimates, cost, exploration, priority, interference);
//! - [`decisions`]: one decision per workload (seeded by the workload, pinned learned-state epochs, cache);
//! - [`service`]: the application core (`Core`), proto <-> model (`convert`), the tonic adapter (`grpc`);
//! - [`server`]: tonic server with health, reflection, policy watcher, snapshots, graceful drain;
//! - [`state`]: atomic snapshots of the learned state;
//! - [`metrics`]: Prometheus metrics; [`cli`]: flags and env vars.
pub mod cli;
pub(crate) mod decisions;
pub mod metrics;
pub mod model;
pub mod policy;
pub mod server;
pub mod service;
pub mod state;
