//! Where the patch adds: the constant JSON Pointers (checked when compiled), written into the patch as they are.

use jsonptr::Pointer;

pub(super) const METADATA: &Pointer = Pointer::from_static("/metadata");
pub(super) const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");
pub(super) const LABELS: &Pointer = Pointer::from_static("/metadata/labels");
pub(super) const SPEC: &Pointer = Pointer::from_static("/spec");
pub(super) const PRIORITY_CLASS_NAME: &Pointer = Pointer::from_static("/spec/priorityClassName");
pub(super) const PRIORITY: &Pointer = Pointer::from_static("/spec/priority");
pub(super) const PREEMPTION_POLICY: &Pointer = Pointer::from_static("/spec/preemptionPolicy");
pub(super) const NODE_SELECTOR: &Pointer = Pointer::from_static("/spec/nodeSelector");
pub(super) const TOLERATIONS: &Pointer = Pointer::from_static("/spec/tolerations");
pub(super) const AFFINITY: &Pointer = Pointer::from_static("/spec/affinity");
pub(super) const NODE_AFFINITY: &Pointer = Pointer::from_static("/spec/affinity/nodeAffinity");
pub(super) const REQUIRED_NODE_AFFINITY: &Pointer = Pointer::from_static(
    "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
);
pub(super) const NODE_SELECTOR_TERMS: &Pointer = Pointer::from_static(
    "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
);
pub(super) const PREFERRED_NODE_AFFINITY: &Pointer = Pointer::from_static(
    "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
);
pub(super) const POD_ANTI_AFFINITY: &Pointer =
    Pointer::from_static("/spec/affinity/podAntiAffinity");
pub(super) const PREFERRED_POD_ANTI_AFFINITY: &Pointer = Pointer::from_static(
    "/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution",
);
