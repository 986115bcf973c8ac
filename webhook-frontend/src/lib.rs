//! gpu-admission webhook frontend: an HTTPS mutating admission webhook that asks the scorer (over gRPC) which
//! GPU class and priority a GPU Pod gets, and answers the kube-apiserver with a JSON Patch, or admits the Pod
//! unchanged when anything goes wrong (fail open).
//!
//! Where things are: `config` (CLI/env), `app` (start-up wiring), `state` (what every handler shares),
//! `server` (HTTPS, routes), `connections` (timeouts and cap of the webhook port), `tls/` (certificates, reload, dev CA), `admission/` (the shared AdmissionReview
//! envelope `review`, and one module per webhook: `mutate_pod`, `validate_pod`, `validate_policy`),
//! `scorer_client` (gRPC), `policy` (the scorer's policy snapshot: catalog, tiers, buckets, enforcement),
//! `priority_class` (PriorityClass facts), `cluster/` (namespace tiers, PriorityClasses), `metrics`.

pub mod admission;
pub mod app;
pub mod cluster;
pub mod config;
pub mod connections;
pub mod metrics;
pub mod policy;
pub mod priority_class;
pub mod scorer_client;
pub mod server;
pub mod state;
pub mod tls;
