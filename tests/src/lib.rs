//! End-to-end tests of gpu-admission: the REAL `scorer` and `webhook-frontend` binaries as processes on
//! loopback, driven the way the kube-apiserver and operators drive them.
//!
//! Everything generic (processes, services, HTTPS, reviews, faults, fixtures and corpus, names) comes from
//! the test kit, `gpu_admission_testkit`, re-exported here so every `gpu_admission_tests::…` path works.
//! The modules particular to these tests:
//! - [`apiserver_metrics`]: the apiserver's account of its webhook calls and requests, from its `/metrics`;
//! - [`cluster`]: a real control plane on loopback (build/start/stop scripts in `tests/cluster/`);
//! - [`kwok`]: fake GPU Nodes that kwok keeps Ready and whose Pods it runs;
//! - [`kueue`]: Kueue's manager, CRDs and webhooks against a [`cluster::LocalCluster`] (`tests/peers/kueue.sh`);
//! - [`decision`]: what must hold for a Pod before/after admission (preserved fields, coherent decision).

pub use gpu_admission_testkit::*;

pub mod apiserver_metrics;
pub mod cluster;
pub mod decision;
pub mod kueue;
pub mod kwok;
