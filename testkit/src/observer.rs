//! [`Observer`]: the real `observer` binary started against a cluster (KUBECONFIG) and a list of scorer
//! endpoints, its admin port read from its `listening on` line.
//!
//! ```text
//! observer --scorer URL[,URL...] --namespace NS --identity ID --admin-listen 127.0.0.1:0 [extra args]
//! ```
//! The binary comes from [`crate::binaries`], built once per test run with the others.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::process::ChildProcess;

/// Path of the `observer` binary, built with the other product binaries once per test run (see
/// [`crate::binaries`]; `GPU_ADMISSION_OBSERVER_BIN` with the other two overrides).
pub fn observer_binary() -> &'static Path {
    crate::binaries::observer()
}

/// Builder for an [`Observer`] process.
#[derive(Debug, Clone)]
pub struct ObserverBuilder {
    kubeconfig: PathBuf,
    scorers: Vec<String>,
    namespace: String,
    identity: String,
    extras: crate::process::Extras,
}

crate::process::process_extras!(ObserverBuilder);

impl ObserverBuilder {
    /// The Lease (and state ConfigMap) namespace (default `gpu-admission`).
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }

    /// Starts the observer and waits for its admin `listening on` line.
    pub async fn start(self) -> anyhow::Result<Observer> {
        let dir = tempfile::Builder::new()
            .prefix("gpu-adm-observer-")
            .tempdir()?;
        let mut args = vec![
            format!("--scorer={}", self.scorers.join(",")),
            format!("--namespace={}", self.namespace),
            format!("--identity={}", self.identity),
            "--admin-listen=127.0.0.1:0".to_string(),
        ];
        args.extend(self.extras.args.iter().cloned());
        let mut envs = vec![
            (
                "KUBECONFIG".to_string(),
                self.kubeconfig.display().to_string(),
            ),
            ("RUST_LOG".to_string(), "info".to_string()),
        ];
        envs.extend(self.extras.envs.iter().cloned());
        let mut process =
            ChildProcess::spawn(&self.identity, observer_binary(), &args, &envs, dir.path())?;
        let admin = process
            .wait_listening(1, crate::START_TIMEOUT)
            .await?
            .first()
            .map(|(a, _)| *a)
            .context("no admin address")?;
        Ok(Observer {
            process,
            admin,
            _dir: dir,
        })
    }
}

/// A running `observer` process. Killed on drop.
pub struct Observer {
    /// The child process (logs, signals).
    pub process: ChildProcess,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Observer {
    /// An observer of the cluster behind `kubeconfig`, reporting to `scorers` (`http://HOST:PORT`), named
    /// `identity` (its Lease identity and log file name).
    pub fn builder(kubeconfig: &Path, scorers: &[String], identity: &str) -> ObserverBuilder {
        ObserverBuilder {
            kubeconfig: kubeconfig.to_path_buf(),
            scorers: scorers.to_vec(),
            namespace: "gpu-admission".into(),
            identity: identity.into(),
            extras: Default::default(),
        }
    }

    /// `GET /metrics` on the admin port.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        crate::https::http_get_text(self.admin, "/metrics").await
    }

    /// The runs it reported so far: its JSON log lines `observation reported`, in order.
    pub fn reports(&self) -> Vec<serde_json::Value> {
        self.process
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == "observation reported")
            .collect()
    }
}

/// The value of the sample `name{labels}` (exactly as exposed, e.g. `observer_leader` or
/// `observer_reported_total{result="learned"}`) in an OpenMetrics text, 0 when absent.
pub fn metric_value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(sample)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

/// The sum of every sample whose line starts with `prefix` (e.g.
/// `gpu_admission_admissions_total{webhook="mutate-pod",`: all of its outcomes) in an OpenMetrics text.
pub fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
