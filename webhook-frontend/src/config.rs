//! Command line and environment (every flag has a `WEBHOOK_*` variable; the flag wins).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser};

use crate::tls::auto_plan::Lifetimes;
use crate::tls::auto_rotate::AutoTlsConfig;
use gpu_admission_core::names::DEFAULT_TIER_LABEL;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "webhook-frontend",
    version,
    about = "HTTPS mutating admission webhook: asks the gpu-admission scorer where and how urgently a GPU Pod runs",
    group(ArgGroup::new("tls").required(true).args(["tls_cert", "self_signed", "auto_tls_secret"]))
)]
pub struct Config {
    /// Address of the HTTPS admission server (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// gRPC address of the scorer.
    #[arg(long, env = "WEBHOOK_SCORER", default_value = "http://127.0.0.1:50051")]
    pub scorer: String,

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

    /// Namespace label holding the tier.
    #[arg(long, env = "WEBHOOK_TIER_LABEL", default_value = DEFAULT_TIER_LABEL)]
    pub tier_label: String,

    /// How often the CheckpointBackup API (migration.dcnlab.com/v1) is looked for again while it is not
    /// installed, in seconds.
    #[arg(long, env = "WEBHOOK_CHECKPOINT_DISCOVERY_SECS", default_value_t = 30)]
    pub checkpoint_discovery_secs: u64,

    /// Plain-HTTP admin server (GET /metrics, GET /healthz).
    #[arg(long, env = "WEBHOOK_ADMIN_LISTEN", default_value = "0.0.0.0:9092")]
    pub admin_listen: SocketAddr,

    /// How often the certificate files are checked for changes, in milliseconds.
    #[arg(long, env = "WEBHOOK_TLS_RELOAD_INTERVAL_MS", default_value_t = 2000)]
    pub tls_reload_interval_ms: u64,

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

    /// How often the scorer's policy (catalog, priority buckets) is fetched again, in seconds.
    #[arg(long, env = "WEBHOOK_POLICY_REFRESH_SECS", default_value_t = 30)]
    pub policy_refresh_secs: u64,

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
}

impl Config {
    /// The automatic-mode settings, when `--auto-tls-secret` is given (`namespace` is resolved later).
    pub fn auto_tls(&self) -> anyhow::Result<Option<(AutoTlsConfig, Option<String>)>> {
        let Some(secret) = self.auto_tls_secret.clone() else {
            if self.auto_tls_webhook_config.is_some() || self.auto_tls_namespace.is_some() {
                anyhow::bail!(
                    "--auto-tls-webhook-config and --auto-tls-namespace need --auto-tls-secret"
                );
            }
            return Ok(None);
        };
        if self.auto_tls_validity_days == 0
            || self.auto_tls_ca_validity_days <= self.auto_tls_validity_days
        {
            anyhow::bail!(
                "--auto-tls-validity-days must be at least 1 and below --auto-tls-ca-validity-days"
            );
        }
        let lifetimes = Lifetimes {
            serving: time::Duration::days(self.auto_tls_validity_days.into()),
            ca: time::Duration::days(self.auto_tls_ca_validity_days.into()),
            renew_before: self
                .auto_tls_renew_before_secs
                .map(|s| time::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX))),
        };
        Ok(Some((
            AutoTlsConfig {
                namespace: String::new(),
                secret,
                webhook_config: self.auto_tls_webhook_config.clone(),
                sans: self.sans.clone(),
                lifetimes,
                check_interval: Duration::from_secs(self.auto_tls_check_secs.max(1)),
            },
            self.auto_tls_namespace.clone(),
        )))
    }
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }
    pub fn connection_limits(&self) -> crate::connections::Limits {
        crate::connections::Limits {
            first_request: Duration::from_millis(self.header_read_timeout_ms.max(1)),
            idle: Duration::from_secs(self.idle_timeout_secs),
            max_connections: self.max_connections as usize,
        }
    }
    pub fn scorer_channel(&self) -> crate::scorer_client::ChannelLimits {
        crate::scorer_client::ChannelLimits {
            max_in_flight: self.scorer_max_in_flight as usize,
            connections: usize::from(self.scorer_connections),
        }
    }
    pub fn deadline_margin(&self) -> Duration {
        Duration::from_millis(self.deadline_margin_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_flags_parse() {
        let c = Config::try_parse_from([
            "webhook-frontend",
            "--listen",
            "127.0.0.1:0",
            "--scorer",
            "http://127.0.0.1:50051",
            "--self-signed",
            "/tmp/x",
            "--deadline-ms",
            "150",
            "--no-kube",
            "--namespace-tier",
            "ml=gold",
            "--namespace-tier",
            "batch=bronze",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        assert_eq!(c.namespace_tiers, ["ml=gold", "batch=bronze"]);
        assert_eq!(c.deadline(), Duration::from_millis(150));
        assert!(c.no_kube);

        let c = Config::try_parse_from(["webhook-frontend", "--tls-cert", "a", "--tls-key", "b"])
            .unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:8443");
        assert_eq!(c.admin_listen.to_string(), "0.0.0.0:9092");
        assert_eq!(c.deadline_ms, 200);
    }

    #[test]
    fn tls_source_is_required_and_exclusive() {
        assert!(Config::try_parse_from(["webhook-frontend"]).is_err());
        assert!(Config::try_parse_from(["webhook-frontend", "--tls-cert", "a"]).is_err());
        assert!(
            Config::try_parse_from([
                "webhook-frontend",
                "--tls-cert",
                "a",
                "--tls-key",
                "b",
                "--self-signed",
                "d"
            ])
            .is_err()
        );
        assert!(
            Config::try_parse_from([
                "webhook-frontend",
                "--self-signed",
                "d",
                "--namespace-tier",
                "a=b"
            ])
            .is_err()
        );
        for other in [["--self-signed", "d"], ["--tls-cert", "a"]] {
            let mut args = vec!["webhook-frontend", "--auto-tls-secret", "s"];
            args.extend(other);
            if other[0] == "--tls-cert" {
                args.extend(["--tls-key", "b"]);
            }
            assert!(Config::try_parse_from(args).is_err());
        }
        let stray = Config::try_parse_from([
            "webhook-frontend",
            "--self-signed",
            "d",
            "--auto-tls-webhook-config",
            "w",
        ]);
        assert!(stray.is_err() || stray.unwrap().auto_tls().is_err());
    }

    #[test]
    fn auto_tls_flags() {
        let c = Config::try_parse_from([
            "webhook-frontend",
            "--auto-tls-secret=gpu-admission-webhook-tls",
            "--auto-tls-webhook-config=gpu-admission",
            "--san=gpu-admission-webhook.gpu-admission.svc",
            "--auto-tls-renew-before-secs=60",
        ])
        .unwrap();
        let (auto, ns) = c.auto_tls().unwrap().unwrap();
        assert_eq!(ns, None);
        assert_eq!(auto.secret, "gpu-admission-webhook-tls");
        assert_eq!(auto.webhook_config.as_deref(), Some("gpu-admission"));
        assert_eq!(auto.sans, ["gpu-admission-webhook.gpu-admission.svc"]);
        assert_eq!(auto.lifetimes.serving, time::Duration::days(90));
        assert_eq!(
            auto.lifetimes.renew_before,
            Some(time::Duration::seconds(60))
        );
        assert_eq!(auto.check_interval, Duration::from_secs(30));
        let bad = Config::try_parse_from([
            "webhook-frontend",
            "--auto-tls-secret=s",
            "--auto-tls-validity-days=4000",
        ])
        .unwrap();
        assert!(bad.auto_tls().is_err());
        let files = Config::try_parse_from(["webhook-frontend", "--self-signed", "d"]).unwrap();
        assert!(files.auto_tls().unwrap().is_none());
    }
}
