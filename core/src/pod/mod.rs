//! What a Pod asks for: its job features (read from annotations and resources), its GPU resources, and the
//! Pods an object describes (a Pod itself, or the pod templates of any workload).

pub mod features;
pub mod gpu_resources;
pub(crate) mod pod_group;
pub mod templates;
