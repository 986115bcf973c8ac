//! gpu-admission webhook frontend: an HTTPS mutating admission webhook that asks the scorer (over gRPC) which
//! GPU class and priority a GPU Pod gets, and answers the kube-apiserver with a JSON Patch, or admits the Pod
//! unchanged when anything goes wrong (fail open).

pub mod admission;
pub mod policy;
