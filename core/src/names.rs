//! The name of every annotation and label gpu-admission reads or writes, spelled once. The observer, the
//! tests and loadgen use these, never their own copies.

/// What a decided Pod carries: the decision record (`metadata.annotations`) and the job-type label.
pub mod decision {
    pub const ANN_PRIORITY_SCORE: &str = "gpu-admission.io/priority-score";
    pub const ANN_GPU_CLASS: &str = "gpu-admission.io/gpu-class";
    pub const ANN_DECIDED_AT: &str = "gpu-admission.io/decided-at";
    pub const ANN_POLICY_VERSION: &str = "gpu-admission.io/policy-version";
    /// The digest of the learned state the scorer decided with (its `ScoreResponse.state_digest`).
    pub const ANN_STATE_DIGEST: &str = "gpu-admission.io/state-digest";
    /// The instance that decided: `restricted:<its namespaces>` (none: the cluster-wide one).
    pub const ANN_DECIDED_BY: &str = "gpu-admission.io/decided-by";
    pub const ANN_INFEASIBLE_REASON: &str = "gpu-admission.io/infeasible-reason";
    /// Who places the Pod: `gpu-admission` (our class constraint), `pod: <what>` (the Pod's own constraint, kept),
    /// `node-name` or `kueue` (placed by someone else: no placement of ours, no `gpu-class`).
    pub const ANN_PLACEMENT: &str = "gpu-admission.io/placement";
    /// The feasible classes the scorer weighed, best first, each with its merit (lowest cost / its cost, so the
    /// cheapest is 1): `H100-80GB=1,A100-80GB=0.77`.
    pub const ANN_ALTERNATIVES: &str = "gpu-admission.io/alternatives";
    /// `true` when the class was picked for what running there teaches the model rather than for its cost.
    pub const ANN_EXPLORED: &str = "gpu-admission.io/explored";
    /// For a Pod Kueue places: the class we would have chosen (Kueue's flavor decides).
    pub const ANN_RECOMMENDED_CLASS: &str = "gpu-admission.io/recommended-class";
    /// Set instead of a score when the scorer could not answer and the tier's default placement was applied.
    pub const ANN_FALLBACK: &str = "gpu-admission.io/fallback";
    /// Set by the placing floor (the apiserver's MutatingAdmissionPolicy) when it placed a Pod on its tier's
    /// classes (the value: the tier): that class constraint is the floor's, not the Pod's own choice.
    pub const ANN_FLOOR_PLACED: &str = "gpu-admission.io/floor-placed";
    pub const LABEL_JOB_TYPE: &str = "gpu-admission.io/job-type";
    pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
}

/// Annotation keys a Pod describes its job with, in priority order (our own `gpu-admission.io/*` key wins over
/// the seed key).
pub mod features {
    pub const JOB_TYPE: [&str; 2] = ["gpu-admission.io/job-type", "app.kubernetes.io/job-type"];
    pub const GPU_MEMORY_GIB: [&str; 2] = ["gpu-admission.io/gpu-memory-gib", "gpu.mem.gi"];
    pub const BATCH_SIZE: [&str; 2] = ["gpu-admission.io/batch-size", "ml.batch_size"];
    pub const TENANT: [&str; 2] = ["gpu-admission.io/tenant", "scheduler.radix.ai/tenant"];
    pub const WORKLOAD_CLASS: &str = "gpu-admission.io/workload-class";
    pub const MODEL_SIZE_B: &str = "gpu-admission.io/model-size-b";
}

/// The host of `address` (`http://host:port` or `host:port`) when the resolver would look it up through the
/// DNS search path: a name that is not absolute (no trailing dot), not an IP address and not `localhost`.
/// Inside a Pod (`ndots: 5`) such a name is tried under every search domain first, and
/// `scorer.gpu-admission.svc` tried as `scorer.gpu-admission.svc.svc.cluster.local` is a name a tenant's
/// namespace called `svc` can answer (a headless Service `gpu-admission` with a Pod hostname `scorer`).
/// The shipped manifests address the scorer by absolute name; the services warn about any other.
pub fn relative_dns_host(address: &str) -> Option<&str> {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        // An IPv6 literal.
        Some(_) => return None,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let absolute = host.ends_with('.');
    let literal = host.parse::<std::net::IpAddr>().is_ok();
    (!host.is_empty() && !absolute && !literal && host != "localhost").then_some(host)
}

/// The namespaces no webhook registration selects and no audit reports on (the shipped
/// `namespaceSelector`: `kubernetes.io/metadata.name NotIn [...]`): the cluster's own and gpu-admission's own.
/// Every other namespace is held to a tier ([`crate::policy::PolicySnapshot::tier_for`]).
pub const EXEMPT_NAMESPACES: [&str; 4] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "gpu-admission",
];

/// The namespace label that carries the tier when the policy names none (the policy's `tierLabel`).
pub use gpu_admission_policy::names::DEFAULT_TIER_LABEL;

/// Other placement systems' names: Kueue's queue label and admission gate, HAMi's GPU type annotations.
pub mod placement {
    pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
    pub const KUEUE_ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";
    /// HAMi's annotations naming GPU types a Pod may (`use`) or may not (`nouse`) run on, comma-separated
    /// substrings of the GPU type (e.g. `A100,H100`).
    pub const HAMI_USE_GPU_TYPE: &str = "nvidia.com/use-gputype";
    pub const HAMI_NOUSE_GPU_TYPE: &str = "nvidia.com/nouse-gputype";
}

/// The labels and annotations workload controllers put on their Pods (the workload key reads them).
pub mod workload {
    pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
    pub const LWS_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
    pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
    pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
    pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
    pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
    pub const KUBEFLOW_OPERATOR: &str = "training.kubeflow.org/operator-name";
    pub const KUBEFLOW_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
    pub const RAY_CLUSTER: &str = "ray.io/cluster";
    pub const RAY_GROUP: &str = "ray.io/group";
    pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
}

/// What a checkpoint restore writes on the Pod.
pub mod checkpoint {
    /// `<namespace>/<name>` of the CheckpointBackup the Pod's images came from.
    pub const ANN_RESTORED_FROM: &str = "gpu-admission.io/restored-from";
    /// The images the restore replaced: `container=image` pairs joined by `,` (container names and image
    /// references contain neither character).
    pub const ANN_ORIGINAL_IMAGES: &str = "gpu-admission.io/original-images";
}

#[cfg(test)]
mod dns_tests {
    use super::relative_dns_host;

    #[test]
    fn only_names_the_search_path_would_expand_are_relative() {
        for relative in [
            "http://gpu-admission-scorer:50051",
            "http://gpu-admission-scorer-replicas.gpu-admission.svc:50051",
            "scorer.gpu-admission.svc.cluster.local:50051",
        ] {
            assert!(relative_dns_host(relative).is_some(), "{relative}");
        }
        for absolute in [
            "http://gpu-admission-scorer.gpu-admission.svc.cluster.local.:50051",
            "http://127.0.0.1:50051",
            "http://[::1]:50051",
            "localhost:50051",
            "10.0.0.7:50051",
        ] {
            assert_eq!(relative_dns_host(absolute), None, "{absolute}");
        }
    }
}
