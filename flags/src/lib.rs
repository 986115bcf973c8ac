//! The command-line groups the three services share, defined once and flattened into each service's flags
//! (`#[command(flatten)]`), so that a flag is spelled, read and defaulted the same way everywhere, with one
//! environment variable (`GPU_ADMISSION_*`) whichever process reads it.
//!
//! The policy is one ConfigMap (`gpu-admission/gpu-admission-policy`, key `default-policy.yaml`). A process
//! reads it one of two ways, one group each:
//! - [`PolicyFile`] (`--policy-file`): the ConfigMap mounted as a file, polled for changes (the scorer, the
//!   frontend);
//! - [`PolicyConfigMap`] (`--policy-configmap`, `--policy-key`): the ConfigMap itself, named for the API (the
//!   frontend's `/validate-policy` checks its writes; the observer reads it for the floor's parameters).
//!   Core's `PolicyConfigMap::parse` checks it.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// The default policy ConfigMap, `NAMESPACE/NAME`.
pub const DEFAULT_POLICY_CONFIGMAP: &str = "gpu-admission/gpu-admission-policy";
/// The key of the policy ConfigMap that holds the policy.
pub const DEFAULT_POLICY_KEY: &str = "default-policy.yaml";

/// The policy read from a file: the policy ConfigMap mounted.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[command(next_help_heading = "Policy")]
pub struct PolicyFile {
    /// The policy file (YAML): the policy ConfigMap, mounted; reloaded when it changes, an invalid change
    /// never replaces a valid policy. Default: the embedded default policy.
    #[arg(long, value_name = "PATH", env = "GPU_ADMISSION_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,

    /// Milliseconds between reads of the policy file (a ConfigMap volume swaps a symlink, which a poll follows).
    #[arg(
        long,
        value_name = "MS",
        env = "GPU_ADMISSION_POLICY_POLL_MS",
        default_value_t = 1000,
        hide = true
    )]
    pub policy_poll_ms: u64,
}

impl PolicyFile {
    /// How often the file is read again (at least every 10 ms).
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.policy_poll_ms.max(10))
    }
}

/// The policy ConfigMap itself, named for the Kubernetes API.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[command(next_help_heading = "Policy")]
pub struct PolicyConfigMap {
    /// The policy ConfigMap, `NAMESPACE/NAME`.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        env = "GPU_ADMISSION_POLICY_CONFIGMAP",
        default_value = DEFAULT_POLICY_CONFIGMAP
    )]
    pub policy_configmap: String,

    /// The key of the policy ConfigMap that holds the policy (the file name of `--policy-file`).
    #[arg(
        long,
        value_name = "KEY",
        env = "GPU_ADMISSION_POLICY_KEY",
        default_value = DEFAULT_POLICY_KEY,
        hide = true
    )]
    pub policy_key: String,
}

/// Every long flag of a command, with whether `--help` shows it: what the READMEs' flag tables are tested
/// against.
pub fn long_flags(command: &clap::Command) -> Vec<(String, bool)> {
    command
        .get_arguments()
        .filter_map(|a| Some((format!("--{}", a.get_long()?), !a.is_hide_set())))
        .filter(|(f, _)| f != "--help" && f != "--version")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Both {
        #[command(flatten)]
        file: PolicyFile,
        #[command(flatten)]
        configmap: PolicyConfigMap,
    }

    #[test]
    fn defaults_and_values() {
        let b = Both::try_parse_from(["x"]).unwrap();
        assert_eq!(b.file.policy_file, None);
        assert_eq!(b.file.poll_interval(), Duration::from_secs(1));
        assert_eq!(
            b.configmap.policy_configmap,
            "gpu-admission/gpu-admission-policy"
        );
        assert_eq!(b.configmap.policy_key, "default-policy.yaml");
        let b = Both::try_parse_from([
            "x",
            "--policy-file=/p.yaml",
            "--policy-poll-ms=0",
            "--policy-configmap=team/p",
        ])
        .unwrap();
        assert_eq!(b.file.policy_file, Some(PathBuf::from("/p.yaml")));
        assert_eq!(b.file.poll_interval(), Duration::from_millis(10));
        assert_eq!(b.configmap.policy_configmap, "team/p");
    }

    #[test]
    fn hidden_knobs_are_listed_but_not_shown() {
        use clap::CommandFactory;
        let flags = long_flags(&Both::command());
        assert!(flags.contains(&("--policy-file".into(), true)));
        assert!(flags.contains(&("--policy-poll-ms".into(), false)));
        assert!(flags.contains(&("--policy-key".into(), false)));
        assert_eq!(flags.len(), 4, "{flags:?}");
    }
}
