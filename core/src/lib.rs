//! gpu-admission's domain as pure functions: what every webhook decides, from the object, the cluster facts,
//! the policy and the scorer's outcome, with no I/O. The webhook frontend gathers the facts and calls these;
//! the fuzz targets, the tests, loadgen and the observer call the very same functions.
//!
//! - [`names`]: every annotation and label we read or write;
//! - [`review`]: the AdmissionReview envelope (decode once, encode once);
//! - [`pod`]: a Pod's job features and GPU resources;
//! - [`dra`]: DRA device selectors (the CEL grammar gpu-admission decides) and DeviceClasses judged by what
//!   they select;
//! - [`placement`]: the GPU classes a Pod's own node constraints allow, and who else places it;
//! - [`workload`]: the workload a Pod belongs to (one decision per workload);
//! - [`policy`], [`priority_class`]: the policy as the webhooks view it, the tier rules, and the
//!   PriorityClass facts decisions look up;
//! - [`authority`]: the powers over the tier rules, as Kubernetes RBAC grants them (SubjectAccessReview);
//! - [`admission`]: one module per webhook, each with its decision function;
//! - [`quota`]: GPU quotas counted on what namespaces hold;
//! - [`render`]: every object generated from the policy (the apiserver's floor, the catalog's DeviceClasses,
//!   the Kueue objects);
//! - [`resource`]: what is shared by the Kubernetes objects we read ourselves (the order of resource versions).

pub mod admission;
pub mod authority;
pub mod dra;
pub mod exception;
pub mod facts;
pub mod names;
pub mod ns_lock;
pub mod placement;
pub mod pod;
pub mod policy;
pub mod priority_class;
pub mod quota;
pub mod render;
pub mod resource;
pub mod review;
pub mod tier_bound;
pub mod workload;
