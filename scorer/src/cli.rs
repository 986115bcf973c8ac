//! Command line and environment (flags win over env vars).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::server::Config;

/// gpu-admission scorer: scores GPU jobs against the GPU catalog of a policy and learns from observed runtimes.
#[derive(Debug, Clone, Parser)]
#[command(name = "scorer", version, about)]
pub struct Cli {
    /// gRPC listen address (port 0 = any free port; the real address is logged as `listening on ADDR`).
    #[arg(long, env = "SCORER_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Policy file (YAML), reloaded when it changes. Default: the embedded default policy.
    #[arg(long, env = "SCORER_POLICY")]
    pub policy: Option<PathBuf>,
    /// Learned-state snapshot file (JSON). Default: learned state is not persisted.
    #[arg(long, env = "SCORER_STATE")]
    pub state: Option<PathBuf>,
    /// Admin HTTP listen address serving GET /metrics and /healthz.
    #[arg(long, env = "SCORER_ADMIN_LISTEN", default_value = "0.0.0.0:9091")]
    pub admin_listen: SocketAddr,
    /// Seconds between learned-state snapshots (one more is written at shutdown).
    #[arg(long, env = "SCORER_SNAPSHOT_INTERVAL_SECS", default_value_t = 60)]
    pub snapshot_interval_secs: u64,
    /// Milliseconds between checks of the policy file for changes.
    #[arg(long, env = "SCORER_POLICY_POLL_MS", default_value_t = 1000)]
    pub policy_poll_ms: u64,
    /// Length in seconds of the learned-state epochs that decisions of a workload read (wall-clock aligned;
    /// what is learned during an epoch reaches them at the next one); 0 = the live state.
    #[arg(long, env = "SCORER_DECISION_EPOCH_SECS", default_value_t = 600)]
    pub decision_epoch_secs: u64,
    /// Validate the policy (file, or the embedded default), print its version and exit (1 if invalid).
    #[arg(long)]
    pub check_policy: bool,
}

impl Cli {
    pub fn server_config(&self) -> Config {
        Config {
            policy_path: self.policy.clone(),
            state_path: self.state.clone(),
            snapshot_interval: Duration::from_secs(self.snapshot_interval_secs.max(1)),
            policy_poll_interval: Duration::from_millis(self.policy_poll_ms.max(10)),
            decision_epoch: Duration::from_secs(self.decision_epoch_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let cli = Cli::try_parse_from(["scorer"]).unwrap();
        assert_eq!(cli.listen.to_string(), "0.0.0.0:50051");
        assert_eq!(cli.admin_listen.to_string(), "0.0.0.0:9091");
        assert!(cli.policy.is_none() && cli.state.is_none());
        let cli = Cli::try_parse_from([
            "scorer",
            "--listen",
            "127.0.0.1:0",
            "--policy",
            "/p.yaml",
            "--state",
            "/s.json",
            "--admin-listen",
            "127.0.0.1:0",
            "--snapshot-interval-secs",
            "5",
        ])
        .unwrap();
        let c = cli.server_config();
        assert_eq!(
            c.policy_path.as_deref(),
            Some(std::path::Path::new("/p.yaml"))
        );
        assert_eq!(c.snapshot_interval, Duration::from_secs(5));
        assert!(Cli::try_parse_from(["scorer", "--listen", "not-an-address"]).is_err());
    }
}
