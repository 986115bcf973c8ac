//! Command line and environment (every flag has a `WEBHOOK_*` variable; the flag wins).
//!
//! [`Args`] is what clap parses: one group of flags per part of the frontend, flattened. [`Config`] is what
//! the frontend runs with: built from `Args` by one conversion ([`Config::try_from`]) that parses, clamps and
//! checks everything, so that nothing after it reads a raw flag.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args as ClapArgs, Parser};

use gpu_admission_core::admission::validate_policy::PolicyConfigMap;
use gpu_admission_core::names::DEFAULT_TIER_LABEL;

use crate::cluster::parse_namespace_tiers;
use crate::connections::Limits;
use crate::scorer_client::{CallMode, ChannelLimits};
use crate::tls::auto_plan::Lifetimes;
use crate::tls::auto_rotate::AutoTlsConfig;
use crate::tls::reload::CertFiles;

/// The command line, as parsed: see [`Config`] for what the frontend runs with.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "webhook-frontend",
    version,
    about = "HTTPS mutating admission webhook: asks the gpu-admission scorer where and how urgently a GPU Pod runs",
    group(ArgGroup::new("tls").required(true).args(["tls_cert", "self_signed", "auto_tls_secret"]))
)]
pub struct Args {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub scorer: ScorerArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// The HTTPS admission server: its address, connection limits and drain.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Admission server")]
pub struct ServerArgs {
    /// Address of the HTTPS admission server (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Time a new connection has for the TLS handshake, the HTTP/1-or-HTTP/2 detection and its first request's
    /// headers, and an HTTP/1 request for its headers once its first bytes arrived, in milliseconds.
    #[arg(long, env = "WEBHOOK_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,

    /// A keep-alive connection without a request for this long is closed (HTTP/2: GOAWAY), in seconds. Keep
    /// it above the apiserver's idle interval (90 s), so that the apiserver is the one that closes.
    #[arg(long, env = "WEBHOOK_IDLE_TIMEOUT_SECS", default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_secs: u64,

    /// Connections open at most on the webhook port; at the cap the oldest idle one is closed to make room.
    /// Keep it below the file-descriptor limit (`ulimit -n`).
    #[arg(long, env = "WEBHOOK_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish, in seconds.
    #[arg(long, env = "WEBHOOK_DRAIN_TIMEOUT_SECS", default_value_t = 20)]
    pub drain_timeout_secs: u64,

    /// Request-body bytes held at once (MiB), over all connections, claimed as they arrive; a body that
    /// needs room beyond it sheds the largest claim still being read (503), never a small review (raised to
    /// the per-peer cap when lower).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_IN_FLIGHT", default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_body_mib_in_flight: u32,

    /// Request-body bytes held at once (MiB) per peer IP address (raised to one maximum-size body, 24 MiB).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_PEER", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_body_mib_per_peer: u32,

    /// Request-body bytes held at once (MiB) per connection (raised to one maximum-size body, 24 MiB).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_CONNECTION", default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_body_mib_per_connection: u32,

    /// The whole request body must arrive within this of its headers, in milliseconds (408 otherwise).
    #[arg(long, env = "WEBHOOK_BODY_READ_TIMEOUT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_ms: u64,

    /// Reviews of one namespace (per peer address) decided at once; more wait for their namespace's earlier
    /// reviews, up to half the apiserver's timeout (then 503).
    #[arg(long, env = "WEBHOOK_MAX_REVIEWS_PER_NAMESPACE", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_reviews_per_namespace: u32,

    /// Body bytes of one namespace's reviews (per peer address) decided at once (MiB; one review always
    /// fits); more wait like above.
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_NAMESPACE", default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_body_mib_per_namespace: u32,

    /// PEM CA bundle of the kube-apiserver's webhook client certificates (its `--admission-control-config-file`
    /// kubeconfig): the webhook paths then answer only callers presenting a certificate it signed (401
    /// otherwise); `/healthz` and `/readyz` stay open for the kubelet's probes. Use a CA that signs nothing
    /// else.
    #[arg(long, env = "WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
}

/// Where the serving certificate comes from: files, a generated dev CA, or a Secret kept through the API.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// PEM certificate chain (the Secret's tls.crt); reloaded when it changes.
    #[arg(
        long,
        env = "WEBHOOK_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "self_signed"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key (the Secret's tls.key).
    #[arg(long, env = "WEBHOOK_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// How often the certificate files are checked for changes, in milliseconds.
    #[arg(long, env = "WEBHOOK_TLS_RELOAD_INTERVAL_MS", default_value_t = 2000)]
    pub tls_reload_interval_ms: u64,

    /// Dev mode: generate a CA and a serving certificate into DIR (DIR/ca.crt, DIR/tls.crt, DIR/tls.key).
    #[arg(
        long = "self-signed",
        value_name = "DIR",
        env = "WEBHOOK_SELF_SIGNED_DIR"
    )]
    pub self_signed: Option<PathBuf>,

    /// Automatic mode: keep a CA + serving certificate in Secret NAME (keys ca.crt, ca.key, tls.crt, tls.key)
    /// of our namespace: create it if missing, renew it before expiry, serve it (read through the API).
    #[arg(long, value_name = "NAME", env = "WEBHOOK_AUTO_TLS_SECRET")]
    pub auto_tls_secret: Option<String>,

    /// Automatic mode: namespace of the Secret (default: env POD_NAMESPACE, else the service account's
    /// namespace, else the kubeconfig context's).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "WEBHOOK_AUTO_TLS_NAMESPACE",
        requires = "auto_tls_secret"
    )]
    pub auto_tls_namespace: Option<String>,

    /// Automatic mode: patch the CA into clientConfig.caBundle of every webhook of this
    /// MutatingWebhookConfiguration (again whenever it differs).
    #[arg(
        long,
        value_name = "NAME",
        env = "WEBHOOK_AUTO_TLS_WEBHOOK_CONFIG",
        requires = "auto_tls_secret"
    )]
    pub auto_tls_webhook_config: Option<String>,

    /// Automatic mode: lifetime of a serving certificate, in days.
    #[arg(long, env = "WEBHOOK_AUTO_TLS_VALIDITY_DAYS", default_value_t = 90)]
    pub auto_tls_validity_days: u32,

    /// Automatic mode: lifetime of a new CA, in days (must exceed the serving lifetime).
    #[arg(
        long,
        env = "WEBHOOK_AUTO_TLS_CA_VALIDITY_DAYS",
        default_value_t = 3650
    )]
    pub auto_tls_ca_validity_days: u32,

    /// Automatic mode: renew when less than this many seconds are left (default: a third of the lifetime).
    #[arg(long, env = "WEBHOOK_AUTO_TLS_RENEW_BEFORE_SECS")]
    pub auto_tls_renew_before_secs: Option<u64>,

    /// Automatic mode: how often the Secret and the caBundle are read again, in seconds.
    #[arg(long, env = "WEBHOOK_AUTO_TLS_CHECK_SECS", default_value_t = 30)]
    pub auto_tls_check_secs: u64,

    /// Extra subject alternative names of the generated serving certificate (DNS names or IPs).
    #[arg(long = "san", env = "WEBHOOK_SAN", value_delimiter = ',')]
    pub sans: Vec<String>,
}

/// The scorer: its address, the budget of a call, the channel's limits, the policy fetch.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Scorer")]
pub struct ScorerArgs {
    /// gRPC address of the scorer.
    #[arg(long, env = "WEBHOOK_SCORER", default_value = "http://127.0.0.1:50051")]
    pub scorer: String,

    /// Budget of one scorer call, in milliseconds (lowered further by the apiserver's ?timeout= minus the margin).
    #[arg(long, env = "WEBHOOK_DEADLINE_MS", default_value_t = 200)]
    pub deadline_ms: u64,

    /// Kept free from the apiserver's ?timeout= for answering, in milliseconds.
    #[arg(long, env = "WEBHOOK_DEADLINE_MARGIN_MS", default_value_t = 50)]
    pub deadline_margin_ms: u64,

    /// Score calls in flight at once; an admission beyond it is passed through at once ("scorer overloaded"),
    /// never queued past its deadline.
    #[arg(long, env = "WEBHOOK_SCORER_MAX_IN_FLIGHT", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub scorer_max_in_flight: u32,

    /// HTTP/2 connections to the scorer, used in turn.
    #[arg(long, env = "WEBHOOK_SCORER_CONNECTIONS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub scorer_connections: u16,

    /// How Score calls travel: as messages on one long-lived stream per connection, or one unary call each.
    #[arg(long, env = "WEBHOOK_SCORER_CALLS", value_enum, default_value_t = CallMode::Stream)]
    pub scorer_calls: CallMode,

    /// How often the scorer's policy version is compared with the frontend's, in seconds.
    #[arg(long, env = "WEBHOOK_POLICY_REFRESH_SECS", default_value_t = 30)]
    pub policy_refresh_secs: u64,
}

/// Cluster facts: the Kubernetes API, or static namespace tiers.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Run without the Kubernetes API: tiers from --namespace-tier, PriorityClasses from the policy's buckets.
    #[arg(long, env = "WEBHOOK_NO_KUBE")]
    pub no_kube: bool,

    /// NAMESPACE=TIER (repeatable; comma-separated in the environment variable). Only with --no-kube.
    #[arg(
        long = "namespace-tier",
        env = "WEBHOOK_NAMESPACE_TIER",
        value_delimiter = ',',
        requires = "no_kube"
    )]
    pub namespace_tiers: Vec<String>,

    /// Namespace-restricted mode: score the Pods of these namespaces only (comma-separated) and hold the
    /// Lease `gpu-admission-ns-lock` in each while it can decide them (its scorer answers, its tier is the
    /// label's), so that the cluster-wide instance leaves their scoring to this one. The tier stays the
    /// cluster-wide installation's. With --no-kube the Kubernetes API is used for these Leases and for
    /// reading these Namespaces' tier labels by name only.
    #[arg(
        long = "restrict-to-namespaces",
        env = "WEBHOOK_RESTRICT_TO_NAMESPACES",
        value_delimiter = ','
    )]
    pub restrict_to_namespaces: Vec<String>,

    /// A restricted instance gives its namespaces' Leases back after this many Score calls in a row fell
    /// back (the cluster-wide scorer takes them over), and takes them again at the first answer.
    #[arg(
        long = "release-after-fallbacks",
        env = "WEBHOOK_RELEASE_AFTER_FALLBACKS",
        default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub release_after_fallbacks: u32,

    /// ... or once its first fallback in a row is this many seconds old with no answer since.
    #[arg(
        long = "release-after-failing-secs",
        env = "WEBHOOK_RELEASE_AFTER_FAILING_SECS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub release_after_failing_secs: u32,

    /// Namespace label holding the tier.
    #[arg(long, env = "WEBHOOK_TIER_LABEL", default_value = DEFAULT_TIER_LABEL)]
    pub tier_label: String,

    /// How often the CheckpointBackup API (migration.dcnlab.com/v1) is looked for again while it is not
    /// installed, in seconds.
    #[arg(long, env = "WEBHOOK_CHECKPOINT_DISCOVERY_SECS", default_value_t = 30)]
    pub checkpoint_discovery_secs: u64,
}

/// The policy the webhooks enforce, and its ConfigMap, which `/validate-policy` checks.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Policy")]
pub struct PolicyArgs {
    /// The policy file (YAML) the webhooks enforce: the same file the scorer reads (the policy ConfigMap,
    /// mounted), reloaded when it changes. Default: the embedded default policy.
    #[arg(long, env = "WEBHOOK_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,

    /// Where this replica keeps a copy of the last policy file that validated, enforced when the file does not
    /// validate at start (an emptyDir keeps it across container restarts).
    #[arg(long, env = "WEBHOOK_POLICY_LAST_GOOD")]
    pub policy_last_good: Option<PathBuf>,

    /// Milliseconds between reads of the policy file.
    #[arg(long, env = "WEBHOOK_POLICY_POLL_MS", default_value_t = 1000)]
    pub policy_poll_ms: u64,

    /// The scorer's policy ConfigMap (`NAMESPACE/NAME`): its CREATE/UPDATE is checked by `/validate-policy`.
    #[arg(
        long,
        env = "WEBHOOK_POLICY_CONFIGMAP",
        default_value = "gpu-admission/gpu-admission-policy"
    )]
    pub policy_configmap: String,

    /// The key of the policy ConfigMap the scorer reads as its policy file.
    #[arg(
        long,
        env = "WEBHOOK_POLICY_CONFIGMAP_KEY",
        default_value = "default-policy.yaml"
    )]
    pub policy_configmap_key: String,
}

/// The admin server (metrics, health).
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Admin")]
pub struct AdminArgs {
    /// Plain-HTTP admin server (GET /metrics, GET /healthz).
    #[arg(long, env = "WEBHOOK_ADMIN_LISTEN", default_value = "0.0.0.0:9092")]
    pub admin_listen: SocketAddr,
}

/// What the frontend runs with: every flag parsed, clamped and checked by [`Config::try_from`].
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub tls: TlsMode,
    pub scorer: ScorerConfig,
    pub cluster: ClusterSource,
    pub policy_configmap: PolicyConfigMap,
    /// Where the policy the webhooks enforce is read.
    pub policy: crate::policy::PolicySources,
    /// Plain-HTTP admin server (GET /metrics, GET /healthz).
    pub admin_listen: SocketAddr,
    /// Cluster-wide, or restricted to `--restrict-to-namespaces`.
    pub instance: gpu_admission_core::ns_lock::Instance,
    /// When a restricted instance gives its namespaces back.
    pub hold_rule: gpu_admission_core::ns_lock::hold::HoldRule,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub limits: Limits,
    /// The body caps and the namespaces' shares.
    pub body_budget: crate::body_budget::BudgetLimits,
    /// The whole body must arrive within this of its headers.
    pub body_read_timeout: Duration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish.
    pub drain_timeout: Duration,
    /// Webhook callers must present a client certificate signed by this CA bundle.
    pub client_ca_file: Option<PathBuf>,
}

/// The three ways of getting a serving certificate.
#[derive(Debug, Clone)]
pub enum TlsMode {
    /// `--tls-cert` and `--tls-key` (a Secret's files), reloaded when they change.
    Files {
        files: CertFiles,
        reload_interval: Duration,
    },
    /// `--self-signed DIR`: a dev CA and serving certificate generated into `dir`, then served like files.
    SelfSigned {
        dir: PathBuf,
        sans: Vec<String>,
        reload_interval: Duration,
    },
    /// `--auto-tls-secret NAME`: a CA + serving certificate kept in a Secret through the API.
    /// `settings.namespace` is empty here: it is resolved with the Kubernetes client, from `namespace` first.
    Auto {
        settings: AutoTlsConfig,
        namespace: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct ScorerConfig {
    /// gRPC address of the scorer.
    pub endpoint: String,
    /// Budget of one scorer call (lowered further by the apiserver's `?timeout=` minus the margin).
    pub deadline: Duration,
    /// Kept free from the apiserver's `?timeout=` for answering.
    pub deadline_margin: Duration,
    pub channel: ChannelLimits,
    /// How often the scorer's policy version is compared with the frontend's.
    pub policy_refresh: Duration,
}

/// Where namespace tiers, PriorityClasses, CheckpointBackups and workload owners come from.
#[derive(Debug, Clone)]
pub enum ClusterSource {
    /// The Kubernetes API (watch caches).
    Kube {
        /// Namespace label holding the tier.
        tier_label: String,
        /// How often the CheckpointBackup API is looked for again while it is not installed.
        checkpoint_discovery: Duration,
    },
    /// `--no-kube`: tiers from `--namespace-tier`, PriorityClasses from the policy's buckets.
    Static { tiers: HashMap<String, String> },
    /// `--no-kube --restrict-to-namespaces`: the tier labels of those namespaces read by name, nothing else
    /// of the cluster; PriorityClasses from the policy's buckets.
    Namespaces {
        namespaces: Vec<String>,
        tier_label: String,
    },
}

/// The floors below which an interval is raised rather than refused (as small values always were).
const MIN_TLS_RELOAD_INTERVAL: Duration = Duration::from_millis(100);
const MIN_FIRST_REQUEST: Duration = Duration::from_millis(1);
const MIN_POLL_INTERVAL: Duration = Duration::from_secs(1);

impl TryFrom<Args> for Config {
    type Error = anyhow::Error;

    /// The one place flags are checked and turned into types: a bad combination or value is refused here,
    /// with the flags it concerns named, before anything starts.
    fn try_from(args: Args) -> anyhow::Result<Self> {
        let Args {
            server,
            tls,
            scorer,
            cluster,
            policy,
            admin,
        } = args;
        let instance =
            gpu_admission_core::ns_lock::Instance::from_namespaces(&cluster.restrict_to_namespaces);
        let hold_rule = gpu_admission_core::ns_lock::hold::HoldRule {
            max_fallbacks: cluster.release_after_fallbacks,
            max_failing: time::Duration::seconds(cluster.release_after_failing_secs.into()),
            ..Default::default()
        };
        Ok(Self {
            instance,
            hold_rule,
            server: server.into(),
            tls: tls.try_into()?,
            scorer: scorer.into(),
            cluster: cluster.try_into()?,
            policy_configmap: PolicyConfigMap::parse(
                &policy.policy_configmap,
                &policy.policy_configmap_key,
            )
            .map_err(anyhow::Error::msg)?,
            policy: crate::policy::PolicySources {
                file: policy.policy_file,
                last_good: policy.policy_last_good,
                poll_interval: Duration::from_millis(policy.policy_poll_ms.max(10)),
            },
            admin_listen: admin.admin_listen,
        })
    }
}

fn mib(n: u32) -> usize {
    n as usize * 1024 * 1024
}

impl From<ServerArgs> for ServerConfig {
    fn from(args: ServerArgs) -> Self {
        Self {
            listen: args.listen,
            limits: Limits {
                first_request: Duration::from_millis(args.header_read_timeout_ms)
                    .max(MIN_FIRST_REQUEST),
                idle: Duration::from_secs(args.idle_timeout_secs),
                max_connections: args.max_connections as usize,
            },
            drain_timeout: Duration::from_secs(args.drain_timeout_secs),
            body_budget: crate::body_budget::BudgetLimits {
                total: mib(args.max_body_mib_in_flight),
                per_peer: mib(args.max_body_mib_per_peer),
                per_connection: mib(args.max_body_mib_per_connection),
                per_namespace: mib(args.max_body_mib_per_namespace),
                reviews_per_namespace: args.max_reviews_per_namespace as usize,
            }
            .clamped(),
            body_read_timeout: Duration::from_millis(args.body_read_timeout_ms),
            client_ca_file: args.client_ca_file,
        }
    }
}

impl TryFrom<TlsArgs> for TlsMode {
    type Error = anyhow::Error;

    fn try_from(args: TlsArgs) -> anyhow::Result<Self> {
        let reload_interval =
            Duration::from_millis(args.tls_reload_interval_ms).max(MIN_TLS_RELOAD_INTERVAL);
        if args.auto_tls_secret.is_none()
            && (args.auto_tls_webhook_config.is_some() || args.auto_tls_namespace.is_some())
        {
            anyhow::bail!(
                "--auto-tls-webhook-config and --auto-tls-namespace need --auto-tls-secret"
            );
        }
        match (
            args.auto_tls_secret,
            args.self_signed,
            args.tls_cert,
            args.tls_key,
        ) {
            (None, None, Some(cert), Some(key)) => Ok(Self::Files {
                files: CertFiles { cert, key },
                reload_interval,
            }),
            (None, Some(dir), None, None) => Ok(Self::SelfSigned {
                dir,
                sans: args.sans,
                reload_interval,
            }),
            (Some(secret), None, None, None) => Ok(Self::Auto {
                settings: AutoTlsConfig {
                    namespace: String::new(),
                    secret,
                    webhook_config: args.auto_tls_webhook_config,
                    sans: args.sans,
                    lifetimes: lifetimes(
                        args.auto_tls_validity_days,
                        args.auto_tls_ca_validity_days,
                        args.auto_tls_renew_before_secs,
                    )?,
                    check_interval: Duration::from_secs(args.auto_tls_check_secs)
                        .max(MIN_POLL_INTERVAL),
                },
                namespace: args.auto_tls_namespace,
            }),
            _ => anyhow::bail!(
                "TLS needs --tls-cert and --tls-key, --self-signed DIR, or --auto-tls-secret NAME"
            ),
        }
    }
}

/// The automatic mode's certificate lifetimes: a serving certificate of at least a day, outlived by its CA,
/// renewed before it expires.
fn lifetimes(
    validity_days: u32,
    ca_validity_days: u32,
    renew_before_secs: Option<u64>,
) -> anyhow::Result<Lifetimes> {
    if validity_days == 0 || ca_validity_days <= validity_days {
        anyhow::bail!(
            "--auto-tls-validity-days must be at least 1 and below --auto-tls-ca-validity-days"
        );
    }
    let serving = time::Duration::days(validity_days.into());
    let renew_before = match renew_before_secs {
        None => None,
        Some(secs) => match i64::try_from(secs).map(time::Duration::seconds) {
            Ok(window) if window < serving => Some(window),
            // A window as long as the lifetime would issue a new certificate at every check.
            _ => anyhow::bail!(
                "--auto-tls-renew-before-secs {secs} must be below the serving lifetime \
                 (--auto-tls-validity-days {validity_days} = {} s)",
                serving.whole_seconds()
            ),
        },
    };
    Ok(Lifetimes {
        serving,
        ca: time::Duration::days(ca_validity_days.into()),
        renew_before,
    })
}

impl From<ScorerArgs> for ScorerConfig {
    fn from(args: ScorerArgs) -> Self {
        Self {
            endpoint: args.scorer,
            deadline: Duration::from_millis(args.deadline_ms),
            deadline_margin: Duration::from_millis(args.deadline_margin_ms),
            channel: ChannelLimits {
                max_in_flight: args.scorer_max_in_flight as usize,
                connections: usize::from(args.scorer_connections),
                calls: args.scorer_calls,
            },
            policy_refresh: Duration::from_secs(args.policy_refresh_secs).max(MIN_POLL_INTERVAL),
        }
    }
}

impl TryFrom<ClusterArgs> for ClusterSource {
    type Error = anyhow::Error;

    fn try_from(args: ClusterArgs) -> anyhow::Result<Self> {
        let restricted: Vec<String> = args
            .restrict_to_namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if args.no_kube && !restricted.is_empty() {
            if !args.namespace_tiers.is_empty() {
                anyhow::bail!(
                    "--namespace-tier with --restrict-to-namespaces: a restricted instance reads its namespaces' \
                     tier labels from the cluster (a stated tier goes stale when the namespace is relabelled)"
                );
            }
            return Ok(Self::Namespaces {
                namespaces: restricted,
                tier_label: args.tier_label,
            });
        }
        if args.no_kube {
            return Ok(Self::Static {
                tiers: parse_namespace_tiers(&args.namespace_tiers)?,
            });
        }
        Ok(Self::Kube {
            tier_label: args.tier_label,
            checkpoint_discovery: Duration::from_secs(args.checkpoint_discovery_secs)
                .max(MIN_POLL_INTERVAL),
        })
    }
}

#[cfg(test)]
mod tests;
