//! Command line and environment (every flag has a variable, `WEBHOOK_*` or, for the groups every service
//! shares, `GPU_ADMISSION_*`; the flag wins). The knobs rarely tuned are hidden from `--help`
//! (webhook-frontend/README.md lists them).
//!
//! [`Args`] is what clap parses: one group of flags per part of the frontend, flattened. [`Config`] is what
//! the frontend runs with: built from `Args` by one conversion ([`Config::try_from`]) that parses, clamps and
//! checks everything, so that nothing after it reads a raw flag.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser};

use gpu_admission_core::admission::validate_policy::PolicyConfigMap;

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
    about = "HTTPS mutating admission webhook: asks the gpu-admission scorer where and how urgently a GPU Pod runs"
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
    #[arg(
        long,
        env = "WEBHOOK_HEADER_READ_TIMEOUT_MS",
        default_value_t = 10_000,
        hide = true
    )]
    pub header_read_timeout_ms: u64,

    /// A keep-alive connection without a request for this long is closed (HTTP/2: GOAWAY), in seconds. Keep
    /// it above the apiserver's idle interval (90 s), so that the apiserver is the one that closes.
    #[arg(long, env = "WEBHOOK_IDLE_TIMEOUT_SECS", default_value_t = 180, value_parser = clap::value_parser!(u64).range(1..), hide = true)]
    pub idle_timeout_secs: u64,

    /// A connection this old is closed gracefully (HTTP/2: GOAWAY, what is in flight finishes), less a random
    /// tenth; `0`: never. The apiserver sends every webhook call over one HTTP/2 connection, so that a
    /// Service spreads the calls over the replicas only as the apiserver connects again.
    #[arg(
        long,
        env = "WEBHOOK_MAX_CONNECTION_AGE_SECS",
        default_value_t = 300,
        hide = true
    )]
    pub max_connection_age_secs: u64,

    /// A connection that has served this many requests is closed gracefully (HTTP/2: GOAWAY); `0`: never.
    #[arg(
        long,
        env = "WEBHOOK_MAX_CONNECTION_REQUESTS",
        default_value_t = 10_000,
        hide = true
    )]
    pub max_connection_requests: u64,

    /// Connections open at most on the webhook port; at the cap the oldest idle one is closed to make room.
    /// Each holds two file descriptors (the second for the lingering close): keep twice this below the
    /// file-descriptor limit (`ulimit -n`).
    #[arg(long, env = "WEBHOOK_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_connections: u32,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish, in seconds.
    #[arg(
        long,
        env = "WEBHOOK_DRAIN_TIMEOUT_SECS",
        default_value_t = 20,
        hide = true
    )]
    pub drain_timeout_secs: u64,

    /// Request-body bytes held at once (MiB), over all connections, claimed as they arrive; a body that
    /// needs room beyond it sheds the largest claim still being read (503), never a small review (raised to
    /// the per-peer cap when lower).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_IN_FLIGHT", default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_body_mib_in_flight: u32,

    /// Request-body bytes held at once (MiB) per peer IP address (raised to one maximum-size body, 24 MiB).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_PEER", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_body_mib_per_peer: u32,

    /// Request-body bytes held at once (MiB) per connection (raised to one maximum-size body, 24 MiB).
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_CONNECTION", default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_body_mib_per_connection: u32,

    /// The whole request body must arrive within this of its headers, in milliseconds (408 otherwise).
    #[arg(long, env = "WEBHOOK_BODY_READ_TIMEOUT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..), hide = true)]
    pub body_read_timeout_ms: u64,

    /// Reviews of one namespace (per peer address) decided at once; more wait for their namespace's earlier
    /// reviews, up to half the apiserver's timeout (then 503).
    #[arg(long, env = "WEBHOOK_MAX_REVIEWS_PER_NAMESPACE", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_reviews_per_namespace: u32,

    /// Body bytes of one namespace's reviews (per peer address) decided at once (MiB; one review always
    /// fits); more wait like above.
    #[arg(long, env = "WEBHOOK_MAX_BODY_MIB_PER_NAMESPACE", default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub max_body_mib_per_namespace: u32,

    /// PEM CA bundle of the kube-apiserver's webhook client certificates (its `--admission-control-config-file`
    /// kubeconfig): the webhook paths then answer only callers presenting a certificate it signed (401
    /// otherwise); `/healthz` and `/readyz` stay open for the kubelet's probes. Use a CA that signs nothing
    /// else.
    #[arg(long, env = "WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
}

/// Where the serving certificate comes from (`--tls`), and that mode's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsSource {
    /// `--tls-dir`'s `tls.crt` and `tls.key` (a mounted Secret), reloaded when they change.
    Files,
    /// Dev: a CA and a serving certificate generated into `--tls-dir` (`ca.crt`, `tls.crt`, `tls.key`).
    SelfSigned,
    /// A CA + serving certificate kept in Secret `--tls-secret` through the API: created when missing,
    /// renewed before expiry, its CA patched into `--tls-webhook-config`.
    Auto,
}

/// The serving certificate: one mode flag, then the mode's settings.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// Where the serving certificate comes from.
    #[arg(long, value_enum, env = "WEBHOOK_TLS")]
    pub tls: TlsSource,

    /// `files`: the directory holding `tls.crt` and `tls.key` (a mounted Secret); `self-signed`: where the
    /// dev CA and serving certificate are written (`DIR/ca.crt` is the CA to trust).
    #[arg(long, value_name = "DIR", env = "WEBHOOK_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,

    /// `auto`: the Secret that keeps the CA and the serving certificate (keys ca.crt, ca.key, tls.crt,
    /// tls.key). Without a namespace: env POD_NAMESPACE, else the service account's, else the kubeconfig's.
    #[arg(long, value_name = "[NAMESPACE/]NAME", env = "WEBHOOK_TLS_SECRET")]
    pub tls_secret: Option<String>,

    /// `auto`: patch the CA into clientConfig.caBundle of every webhook of this MutatingWebhookConfiguration
    /// (again whenever it differs).
    #[arg(long, value_name = "NAME", env = "WEBHOOK_TLS_WEBHOOK_CONFIG")]
    pub tls_webhook_config: Option<String>,

    /// `self-signed`, `auto`: extra subject alternative names of the generated serving certificate (DNS names
    /// or IPs).
    #[arg(long = "san", env = "WEBHOOK_SAN", value_delimiter = ',')]
    pub sans: Vec<String>,

    /// How often the certificate is looked at again, in milliseconds: the files (default 2000), or the
    /// Secret and the caBundle (`auto`, default 30000).
    #[arg(long, value_name = "MS", env = "WEBHOOK_TLS_POLL_MS", hide = true)]
    pub tls_poll_ms: Option<u64>,

    /// `auto`: lifetime of a serving certificate, in days.
    #[arg(
        long,
        env = "WEBHOOK_TLS_VALIDITY_DAYS",
        default_value_t = 90,
        hide = true
    )]
    pub tls_validity_days: u32,

    /// `auto`: lifetime of a new CA, in days (must exceed the serving lifetime).
    #[arg(
        long,
        env = "WEBHOOK_TLS_CA_VALIDITY_DAYS",
        default_value_t = 3650,
        hide = true
    )]
    pub tls_ca_validity_days: u32,

    /// `auto`: renew when less than this many seconds are left (default: a third of the lifetime).
    #[arg(long, env = "WEBHOOK_TLS_RENEW_BEFORE_SECS", hide = true)]
    pub tls_renew_before_secs: Option<u64>,
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
    #[arg(
        long,
        env = "WEBHOOK_DEADLINE_MARGIN_MS",
        default_value_t = 50,
        hide = true
    )]
    pub deadline_margin_ms: u64,

    /// Score calls in flight at once; an admission beyond it is passed through at once ("scorer overloaded"),
    /// never queued past its deadline.
    #[arg(long, env = "WEBHOOK_SCORER_MAX_IN_FLIGHT", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), hide = true)]
    pub scorer_max_in_flight: u32,

    /// HTTP/2 connections to the scorer, used in turn.
    #[arg(long, env = "WEBHOOK_SCORER_CONNECTIONS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64), hide = true)]
    pub scorer_connections: u16,

    /// How Score calls travel: as messages on one long-lived stream per connection, or one unary call each.
    #[arg(long, env = "WEBHOOK_SCORER_CALLS", value_enum, default_value_t = CallMode::Stream, hide = true)]
    pub scorer_calls: CallMode,

    /// How often the scorer's policy version is compared with the frontend's, in seconds.
    #[arg(
        long,
        env = "WEBHOOK_POLICY_REFRESH_SECS",
        default_value_t = 30,
        hide = true
    )]
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
        value_parser = clap::value_parser!(u32).range(1..),
        hide = true
    )]
    pub release_after_fallbacks: u32,

    /// ... or once its first fallback in a row is this many seconds old with no answer since.
    #[arg(
        long = "release-after-failing-secs",
        env = "WEBHOOK_RELEASE_AFTER_FAILING_SECS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..),
        hide = true
    )]
    pub release_after_failing_secs: u32,

    /// How often the CheckpointBackup API (migration.dcnlab.com/v1) is looked for again while it is not
    /// installed, in seconds.
    #[arg(
        long,
        env = "WEBHOOK_CHECKPOINT_DISCOVERY_SECS",
        default_value_t = 30,
        hide = true
    )]
    pub checkpoint_discovery_secs: u64,
}

/// The policy the webhooks enforce (the file), and its ConfigMap, which `/validate-policy` checks: the
/// groups every service shares, and the frontend's last good copy.
#[derive(Debug, Clone, ClapArgs)]
#[command(next_help_heading = "Policy")]
pub struct PolicyArgs {
    #[command(flatten)]
    pub file: gpu_admission_flags::PolicyFile,

    #[command(flatten)]
    pub configmap: gpu_admission_flags::PolicyConfigMap,

    /// Where this replica keeps a copy of the last policy file that validated, enforced when the file does not
    /// validate at start (an emptyDir keeps it across container restarts).
    #[arg(long, env = "WEBHOOK_POLICY_LAST_GOOD")]
    pub policy_last_good: Option<PathBuf>,
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
    /// `--tls=files`: `--tls-dir`'s `tls.crt` and `tls.key` (a Secret's files), reloaded when they change.
    Files {
        files: CertFiles,
        reload_interval: Duration,
    },
    /// `--tls=self-signed`: a dev CA and serving certificate generated into `dir`, then served like files.
    SelfSigned {
        dir: PathBuf,
        sans: Vec<String>,
        reload_interval: Duration,
    },
    /// `--tls=auto`: a CA + serving certificate kept in a Secret through the API. `settings.namespace` is
    /// empty here: it is resolved with the Kubernetes client, from `namespace` (`--tls-secret NS/NAME`) first.
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
        /// How often the CheckpointBackup API is looked for again while it is not installed.
        checkpoint_discovery: Duration,
    },
    /// `--no-kube`: tiers from `--namespace-tier`, PriorityClasses from the policy's buckets.
    Static { tiers: HashMap<String, String> },
    /// `--no-kube --restrict-to-namespaces`: the tier labels of those namespaces read by name, nothing else
    /// of the cluster; PriorityClasses from the policy's buckets.
    Namespaces { namespaces: Vec<String> },
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
                &policy.configmap.policy_configmap,
                &policy.configmap.policy_key,
            )
            .map_err(anyhow::Error::msg)?,
            policy: crate::policy::PolicySources {
                poll_interval: policy.file.poll_interval(),
                file: policy.file.policy_file,
                last_good: policy.policy_last_good,
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
                max_age: (args.max_connection_age_secs > 0)
                    .then(|| Duration::from_secs(args.max_connection_age_secs)),
                max_requests: (args.max_connection_requests > 0)
                    .then_some(args.max_connection_requests),
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

    /// The mode's settings, each refused when given to another mode (a stray flag is a mistake to name).
    fn try_from(args: TlsArgs) -> anyhow::Result<Self> {
        let auto_only = [
            ("--tls-secret", args.tls_secret.is_some()),
            ("--tls-webhook-config", args.tls_webhook_config.is_some()),
            (
                "--tls-renew-before-secs",
                args.tls_renew_before_secs.is_some(),
            ),
        ];
        if args.tls != TlsSource::Auto
            && let Some((flag, _)) = auto_only.iter().find(|(_, set)| *set)
        {
            anyhow::bail!("{flag} is a setting of --tls=auto");
        }
        let dir = |mode: &str| match args.tls_dir.clone() {
            Some(dir) => Ok(dir),
            None => Err(anyhow::anyhow!("--tls={mode} needs --tls-dir DIR")),
        };
        let files_poll =
            Duration::from_millis(args.tls_poll_ms.unwrap_or(2000)).max(MIN_TLS_RELOAD_INTERVAL);
        match args.tls {
            TlsSource::Files if !args.sans.is_empty() => {
                anyhow::bail!(
                    "--san names the SANs of a generated certificate: not with --tls=files"
                )
            }
            TlsSource::Files => {
                let dir = dir("files")?;
                Ok(Self::Files {
                    files: CertFiles {
                        cert: dir.join("tls.crt"),
                        key: dir.join("tls.key"),
                    },
                    reload_interval: files_poll,
                })
            }
            TlsSource::SelfSigned => Ok(Self::SelfSigned {
                dir: dir("self-signed")?,
                sans: args.sans,
                reload_interval: files_poll,
            }),
            TlsSource::Auto => {
                if args.tls_dir.is_some() {
                    anyhow::bail!("--tls-dir is a setting of --tls=files and --tls=self-signed");
                }
                let Some(secret) = args.tls_secret else {
                    anyhow::bail!("--tls=auto needs --tls-secret [NAMESPACE/]NAME");
                };
                let (namespace, secret) = match secret.split_once('/') {
                    Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
                        (Some(ns.to_string()), name.to_string())
                    }
                    None if !secret.is_empty() => (None, secret),
                    _ => anyhow::bail!("--tls-secret {secret:?}: expected [NAMESPACE/]NAME"),
                };
                Ok(Self::Auto {
                    settings: AutoTlsConfig {
                        namespace: String::new(),
                        secret,
                        webhook_config: args.tls_webhook_config,
                        sans: args.sans,
                        lifetimes: lifetimes(
                            args.tls_validity_days,
                            args.tls_ca_validity_days,
                            args.tls_renew_before_secs,
                        )?,
                        check_interval: Duration::from_millis(args.tls_poll_ms.unwrap_or(30_000))
                            .max(MIN_POLL_INTERVAL),
                    },
                    namespace,
                })
            }
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
        anyhow::bail!("--tls-validity-days must be at least 1 and below --tls-ca-validity-days");
    }
    let serving = time::Duration::days(validity_days.into());
    let renew_before = match renew_before_secs {
        None => None,
        Some(secs) => match i64::try_from(secs).map(time::Duration::seconds) {
            Ok(window) if window < serving => Some(window),
            // A window as long as the lifetime would issue a new certificate at every check.
            _ => anyhow::bail!(
                "--tls-renew-before-secs {secs} must be below the serving lifetime \
                 (--tls-validity-days {validity_days} = {} s)",
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
            });
        }
        if args.no_kube {
            return Ok(Self::Static {
                tiers: parse_namespace_tiers(&args.namespace_tiers)?,
            });
        }
        Ok(Self::Kube {
            checkpoint_discovery: Duration::from_secs(args.checkpoint_discovery_secs)
                .max(MIN_POLL_INTERVAL),
        })
    }
}

#[cfg(test)]
mod tests;
