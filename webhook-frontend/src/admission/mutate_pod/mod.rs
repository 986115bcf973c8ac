//! `POST /mutate-pod`: read the Pod's features, ask the scorer, build the JSON Patch.
//! `handler` does the I/O; `decide` (triage, score request, answer checks) and `patch` are pure.

pub mod decide;
pub mod features;
pub mod gpu_resources;
pub mod handler;
pub mod patch;
pub mod workload;
