//! Command line and environment (flags win over env vars). The policy file's flags are the group every
//! service shares (`gpu_admission_flags::PolicyFile`); the knobs rarely tuned are hidden from `--help`
//! (scorer/README.md lists them).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::server::{Config, Http2Limits};

/// gpu-admission scorer: scores GPU jobs against the GPU catalog of a policy and learns from observed runtimes.
#[derive(Debug, Clone, Parser)]
#[command(name = "scorer", version, about)]
pub struct Cli {
    /// gRPC listen address (port 0 = any free port; the real address is logged as `listening on ADDR`).
    #[arg(long, env = "SCORER_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub policy: gpu_admission_flags::PolicyFile,
    /// Learned-state snapshot file (JSON). Default: learned state is not persisted.
    #[arg(long, env = "SCORER_STATE")]
    pub state: Option<PathBuf>,
    /// Admin HTTP listen address serving GET /metrics and /healthz.
    #[arg(long, env = "SCORER_ADMIN_LISTEN", default_value = "0.0.0.0:9091")]
    pub admin_listen: SocketAddr,
    /// Seconds between learned-state snapshots (one more is written at shutdown).
    #[arg(
        long,
        env = "SCORER_SNAPSHOT_INTERVAL_SECS",
        default_value_t = 60,
        hide = true
    )]
    pub snapshot_interval_secs: u64,
    /// Length in seconds of the learned-state epochs that decisions of a workload read (wall-clock aligned;
    /// what is learned during an epoch reaches them at the next one); 0 = the live state.
    #[arg(
        long,
        env = "SCORER_DECISION_EPOCH_SECS",
        default_value_t = 600,
        hide = true
    )]
    pub decision_epoch_secs: u64,
    /// HTTP/2 streams a client may have open at once on one connection (it queues beyond them).
    #[arg(long, env = "SCORER_MAX_CONCURRENT_STREAMS", default_value_t = Http2Limits::default().max_concurrent_streams, hide = true)]
    pub max_concurrent_streams: u32,
    /// Streams a client may reset before the server accepted them, per connection, before the connection is
    /// closed as an attack (GOAWAY ENHANCE_YOUR_CALM). Keep it at least --max-concurrent-streams: a client
    /// that cancels every call in flight at its deadline is not an attacker.
    #[arg(long, env = "SCORER_MAX_PENDING_ACCEPT_RESET_STREAMS", default_value_t = Http2Limits::default().max_pending_accept_reset_streams, hide = true)]
    pub max_pending_accept_reset_streams: usize,
    /// Streams the server may reset for a client's protocol errors, per connection, before closing it.
    #[arg(long, env = "SCORER_MAX_LOCAL_ERROR_RESET_STREAMS", default_value_t = Http2Limits::default().max_local_error_reset_streams, hide = true)]
    pub max_local_error_reset_streams: usize,
    /// Validate the policy (file, or the embedded default), print its version and exit (1 if invalid).
    #[arg(long)]
    pub check_policy: bool,
}

impl Cli {
    pub fn server_config(&self) -> Config {
        Config {
            policy_path: self.policy.policy_file.clone(),
            state_path: self.state.clone(),
            snapshot_interval: Duration::from_secs(self.snapshot_interval_secs.max(1)),
            policy_poll_interval: self.policy.poll_interval(),
            decision_epoch: Duration::from_secs(self.decision_epoch_secs),
            http2: Http2Limits {
                max_concurrent_streams: self.max_concurrent_streams.max(1),
                max_pending_accept_reset_streams: self.max_pending_accept_reset_streams,
                max_local_error_reset_streams: self.max_local_error_reset_streams,
            },
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
        assert!(cli.policy.policy_file.is_none() && cli.state.is_none());
        let cli = Cli::try_parse_from([
            "scorer",
            "--listen",
            "127.0.0.1:0",
            "--policy-file",
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
        assert_eq!(c.http2, Http2Limits::default());
        let c = Cli::try_parse_from(["scorer", "--max-pending-accept-reset-streams", "64"])
            .unwrap()
            .server_config();
        assert_eq!(c.http2.max_pending_accept_reset_streams, 64);
        assert!(Cli::try_parse_from(["scorer", "--listen", "not-an-address"]).is_err());
    }
}
