//! Command line (every flag is also an environment variable). The policy ConfigMap's flags are the group
//! every service shares (`gpu_admission_flags::PolicyConfigMap`); the knobs rarely tuned are hidden from
//! `--help` (observer/README.md lists them).
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "observer",
    version,
    about = "Reports the runtimes of the GPU Pods gpu-admission decided to every scorer replica, and keeps \
             the replicas' learned states converged"
)]
pub struct Cli {
    /// Scorer gRPC endpoints, http://HOST:PORT (repeat or comma-separate). Each host is resolved through DNS
    /// on every round and every address is one replica: give a headless Service's name.
    #[arg(
        long = "scorer",
        env = "OBSERVER_SCORERS",
        value_delimiter = ',',
        required = true
    )]
    pub scorers: Vec<String>,
    /// Where the scorer of a namespace-restricted instance is reached (its decided Pods' runs go there, never
    /// to --scorer): `{namespace}` is replaced by the Pod's namespace. The default is the Service
    /// deploy/kustomize/overlays/namespaced installs, by its absolute DNS name.
    #[arg(long, env = "OBSERVER_TEAM_SCORER_TEMPLATE", default_value = crate::route::DEFAULT_TEMPLATE)]
    pub team_scorer_template: String,
    /// A restricted instance's scorer that is not where the template says, NAMESPACE=http://HOST:PORT (repeat
    /// or comma-separate).
    #[arg(
        long = "team-scorer",
        env = "OBSERVER_TEAM_SCORERS",
        value_delimiter = ','
    )]
    pub team_scorers: Vec<String>,
    /// Namespace of the Lease and of the state ConfigMap (default: the Pod's own namespace from the
    /// service-account mount, else `default`).
    #[arg(long, env = "OBSERVER_NAMESPACE")]
    pub namespace: Option<String>,
    /// Name of the coordination.k8s.io/v1 Lease the replicas elect their leader with.
    #[arg(long, env = "OBSERVER_LEASE", default_value = crate::names::DEFAULT_LEASE)]
    pub lease: String,
    /// This replica's identity in the Lease (default: the host name, i.e. the Pod name, plus the process id).
    #[arg(long, env = "OBSERVER_IDENTITY")]
    pub identity: Option<String>,
    /// Seconds a leader's Lease lasts without renewal.
    #[arg(
        long,
        env = "OBSERVER_LEASE_DURATION_SECS",
        default_value_t = 15,
        hide = true
    )]
    pub lease_duration_secs: u64,
    /// Seconds before the Lease's expiry that a leader renews it.
    #[arg(
        long,
        env = "OBSERVER_LEASE_GRACE_SECS",
        default_value_t = 5,
        hide = true
    )]
    pub lease_grace_secs: u64,
    /// ConfigMap (shipped empty) where the leader keeps the most complete learned state; none = not kept.
    #[arg(long, env = "OBSERVER_STATE_CONFIGMAP")]
    pub state_configmap: Option<String>,
    /// Seconds between writes of that ConfigMap (what losing every scorer replica at once can lose).
    #[arg(
        long,
        env = "OBSERVER_STORE_INTERVAL_SECS",
        default_value_t = 30,
        hide = true
    )]
    pub store_interval_secs: u64,
    /// Seconds between convergence rounds (ExportState everywhere, ImportState where behind).
    #[arg(
        long,
        env = "OBSERVER_SYNC_INTERVAL_SECS",
        default_value_t = 5,
        hide = true
    )]
    pub sync_interval_secs: u64,
    /// Per-call budget of every scorer RPC.
    #[arg(
        long,
        env = "OBSERVER_SCORER_TIMEOUT_MS",
        default_value_t = 5000,
        hide = true
    )]
    pub scorer_timeout_ms: u64,
    /// Observations kept for replays to replicas that diverged.
    #[arg(
        long,
        env = "OBSERVER_REPLAY_LOG",
        default_value_t = 10_000,
        hide = true
    )]
    pub replay_log: usize,
    #[arg(long, env = "OBSERVER_ADMIN_LISTEN", default_value = "0.0.0.0:9093")]
    pub admin_listen: SocketAddr,
    /// Write wgpolicyk8s.io/v1alpha2 PolicyReports from a background audit of what runs (leader only; needs
    /// the CRD and the RBAC of deploy/kustomize/components/policy-reports, which sets this flag).
    #[arg(long, env = "OBSERVER_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// Seconds between slow audits of what time alone changes, and discoveries (a policy version change
    /// audits everything at once).
    #[arg(
        long,
        env = "OBSERVER_AUDIT_INTERVAL_SECS",
        default_value_t = 300,
        hide = true
    )]
    pub audit_interval_secs: u64,
    /// Seconds between checks of the policy version and of the PolicyReport API (when its CRD is missing).
    #[arg(
        long,
        env = "OBSERVER_AUDIT_POLL_SECS",
        default_value_t = 15,
        hide = true
    )]
    pub audit_poll_secs: u64,
    /// Workload resources audited besides Pods, GROUP/RESOURCE (repeat or comma-separate); the default is
    /// what the shipped ValidatingWebhookConfiguration sends to /validate-pod. Each needs list RBAC.
    #[arg(
        long = "audit-resource",
        env = "OBSERVER_AUDIT_RESOURCES",
        value_delimiter = ',',
        default_value = "apps/deployments,apps/statefulsets,apps/daemonsets,apps/replicasets,batch/jobs,batch/cronjobs"
    )]
    pub audit_resources: Vec<crate::audit::cluster::GroupResource>,
    /// Results kept per PolicyReport (failures first); the rest are counted in its summary and annotation.
    #[arg(
        long,
        env = "OBSERVER_REPORT_MAX_RESULTS",
        default_value_t = 500,
        hide = true
    )]
    pub report_max_results: usize,
    /// The floor's parameter object (a FloorParameters in --namespace) the leader keeps in step with the policy,
    /// creating it when missing; none = not kept.
    #[arg(long, env = "OBSERVER_FLOOR_PARAMS")]
    pub floor_params: Option<String>,
    /// The policy ConfigMap the floor's parameters are derived from (the group every service shares).
    #[command(flatten)]
    pub policy: gpu_admission_flags::PolicyConfigMap,
    /// Seconds between reads of the policy ConfigMap for the floor's parameters.
    #[arg(
        long,
        env = "OBSERVER_FLOOR_INTERVAL_SECS",
        default_value_t = 2,
        hide = true
    )]
    pub floor_interval_secs: u64,
    /// The MutatingWebhookConfiguration whose `checkpoint-restore.gpu-admission.io` entry the leader narrows
    /// to the Pods of Jobs a stored CheckpointBackup may restore; none = the entry sends every Job's Pods.
    #[arg(long, env = "OBSERVER_CHECKPOINT_REGISTRATION")]
    pub checkpoint_registration: Option<String>,
    /// Seconds between listings of the CheckpointBackups for that entry.
    #[arg(
        long,
        env = "OBSERVER_CHECKPOINT_INTERVAL_SECS",
        default_value_t = 5,
        hide = true
    )]
    pub checkpoint_interval_secs: u64,
    /// Keep each namespace share of the policy's GPU quotas as a ResourceQuota `gpu-admission-quota` in its
    /// namespace (leader only; what the apiserver holds with every frontend down; deploy/README.md).
    #[arg(long, env = "OBSERVER_RESOURCE_QUOTAS")]
    pub resource_quotas: bool,
    /// Seconds between rounds keeping those ResourceQuotas in step with the policy and the tier labels.
    #[arg(
        long,
        env = "OBSERVER_QUOTA_INTERVAL_SECS",
        default_value_t = 2,
        hide = true
    )]
    pub quota_interval_secs: u64,
}

impl Cli {
    pub fn namespace(&self) -> String {
        self.namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "default".into())
        })
    }

    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "observer".into());
            format!("{host}-{}", std::process::id())
        })
    }

    /// The background audit's settings.
    pub fn audit(&self) -> crate::audit::AuditConfig {
        crate::audit::AuditConfig {
            resources: self.audit_resources.clone(),
            interval: Self::secs(self.audit_interval_secs),
            poll: Self::secs(self.audit_poll_secs),
            limits: crate::audit::report::Limits {
                max_results: self.report_max_results.max(1),
                // etcd refuses objects above 1.5 MiB; the rest of a report is small.
                max_bytes: 1 << 20,
            },
        }
    }

    pub fn secs(s: u64) -> Duration {
        Duration::from_secs(s.max(1))
    }
}
