//! gpu-admission webhook frontend: an HTTPS mutating admission webhook that asks the scorer (over gRPC) which
//! GPU class and priority a GPU Pod gets, and answers the kube-apiserver with a JSON Patch, or admits the Pod
//! unchanged when anything goes wrong (fail open).
//!
//! Where things are: `config` (CLI/env), `server` (HTTPS, routes), `tls/` (certificates, reload, dev CA),
//! `admission/` (`review` decode/encode, `features`, `decide`, `patch`, `handler`), `scorer_client` (gRPC),
//! `policy` (the scorer's catalog and buckets), `cluster/` (namespace tiers, PriorityClasses), `metrics`.

pub mod admission;
pub mod app;
pub mod cluster;
pub mod config;
pub mod metrics;
pub mod policy;
pub mod scorer_client;
pub mod server;
pub mod shutdown;
pub mod tls;
