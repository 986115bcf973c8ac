//! The runtime observer: watches the GPU Pods gpu-admission decided until they terminate, and reports each
//! finished run (its main containers' runtime, the GPU class of the Node it ran on, the job types that ran
//! beside it) to every scorer replica with `Observe`, exactly once per Pod UID. The elected leader also keeps
//! the scorer replicas' learned states converged and stored (see README.md).
//!
//! - [`extract`]: Pod + Node labels + other runs → `ObserveRequest` or a skip reason (pure);
//! - [`history`]: runs per node, kept past their Pods for co-location;
//! - [`route`]: which scorer learns a run: the cluster-wide one, or a restricted instance's team scorer (pure);
//!   `registrations`: the namespaces a cluster admin registered a restricted instance for;
//! - [`sync`]: which learned state is the most complete and who must import it (pure);
//! - [`controller`]: the watch loop; [`convergence`]: the export/import rounds; [`replicas`]: the scorer
//!   replicas by DNS and the fan-out; [`store`]: the state ConfigMap; [`leader`]: the Lease;
//! - [`audit`]: the background audit's PolicyReports (`--policy-reports`);
//! - [`floor`]: the floor's parameter object kept in step with the policy (`--floor-params`);
//! - [`policy_source`]: the policy ConfigMap, watched and parsed once per change for the floor and the quotas;
//! - [`checkpoint_registration`]: the checkpoint-restore webhook's match condition kept in step with the
//!   stored CheckpointBackups (`--checkpoint-registration`);
//! - [`resource_quotas`]: the namespace shares of the GPU quotas as ResourceQuotas (`--resource-quotas`);
//! - [`watched`]: a store a watch keeps current (what those loops read instead of listing).

pub mod audit;
pub mod checkpoint_registration;
pub mod cli;
pub mod controller;
pub mod convergence;
pub mod extract;
pub mod floor;
pub mod history;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod policy_source;
pub(crate) mod registrations;
pub mod replicas;
pub mod resource_quotas;
pub mod route;
pub mod store;
pub mod sync;
pub mod watched;
