//! gpu-admission webhook frontend: an HTTPS mutating admission webhook that asks the scorer (over gRPC) which
//! GPU class and priority a GPU Pod gets, and answers the kube-apiserver with a JSON Patch, or admits the Pod
//! unchanged when anything goes wrong (fail open).
//!
//! The decisions are `gpu_admission_core`'s; this crate is the I/O around them. Where things are: `config`
//! (CLI/env), `app` (start-up wiring), `server` (HTTPS, routes), `connections` (timeouts and cap of the webhook
//! port), `tls/` (certificates, reload, dev CA), `admission/` (the one request pipeline and one module per
//! webhook), `readiness` (`/readyz`), `scorer_client` (gRPC), `policy` (the policy snapshot kept fresh from the
//! scorer), `cluster/` (watch caches: namespace tiers, PriorityClasses, workloads, CheckpointBackups),
//! `metrics`.

pub mod admission;
pub mod app;
pub mod body_budget;
pub mod cluster;
pub mod config;
pub mod connections;
pub mod metrics;
pub mod policy;
pub mod readiness;
pub(crate) mod restricted;
pub mod scorer_client;
pub mod server;
pub mod tls;
pub(crate) mod workload_answers;
