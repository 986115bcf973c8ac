//! Kueue (`sigs.k8s.io/kueue`, the job queueing controller `gpu-admission kueue export` writes for) running for
//! real against a [`LocalCluster`]: built from its Go module by `tests/peers/kueue.sh` (cached outside the
//! clone, like the control plane), its CRDs applied server-side, its manager started as a process and its own
//! webhooks registered with the apiserver by URL (127.0.0.1) and a CA of ours.
//!
//! - [`kueue_dir`] runs the build script (cached → instant; cold ≈ 11 min). When the machine cannot build it:
//!   a failure when env `CI` is set, else a SKIP (`Ok(None)`);
//! - [`Kueue::start`]: CRDs, manager (leader election off, its own certificate management off, webhook on
//!   127.0.0.1, only the `batch/job` integration, `VisibilityOnDemand` off: it needs an APIService; CPU,
//!   memory, ephemeral storage and Pods excluded from its accounting: the exported queues cover GPUs only), webhooks;
//!   ready once a server-side dry run of a ResourceFlavor passes its webhook. Killed and its webhook
//!   registrations removed on drop.
//!
//! With its certificate management off Kueue reads the metrics server's certificate from a path it
//! hard-codes, `/etc/kueue/metrics/certs/tls.{crt,key}` (`cmd/kueue/main.go`; no flag or configuration moves
//! it); [`Kueue::start`] writes a self-signed pair there when none is present (root; where it cannot, a SKIP,
//! a failure under `CI`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::cluster::{KubectlAnswer, LocalCluster, kubectl};
use crate::ports::ClaimedPorts;
use crate::process::ChildProcess;

/// The Kueue version `tests/peers/kueue.sh` builds.
pub const VERSION: &str = "0.17.0";
/// The label a Job names its LocalQueue with.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Where Kueue reads its metrics certificate when its own certificate management is off (hard-coded).
const METRICS_CERT_DIR: &str = "/etc/kueue/metrics/certs";
/// The names our copies of Kueue's webhook configurations are registered under.
const REGISTRATION: &str = "kueue-e2e";

/// The folder holding `bin/kueue`, `crd/` and `webhook/manifests.yaml`, building it if needed
/// (`GPU_ADMISSION_KUEUE_DIR` names a prebuilt one). `Ok(None)` = skip (not in CI, cannot build here).
pub fn kueue_dir() -> anyhow::Result<Option<PathBuf>> {
    crate::built_by_script::run(&crate::built_by_script::Script {
        prebuilt_env: "GPU_ADMISSION_KUEUE_DIR",
        script: "tests/peers/kueue.sh",
        what: "Kueue",
        suite: "the Kueue tests",
        built: |dir| dir.join("bin/kueue").is_file(),
    })
}

/// The Kueue manager running against a [`LocalCluster`]. Killed on drop, its webhook registrations removed.
pub struct Kueue {
    process: ChildProcess,
    kubeconfig: PathBuf,
    _claimed: ClaimedPorts,
    _dir: tempfile::TempDir,
}

impl Kueue {
    /// Applies Kueue's CRDs, starts the manager and registers its webhooks; returns once they answer.
    /// `Ok(None)` = skipped (see [`kueue_dir`]).
    pub async fn start(cluster: &LocalCluster) -> anyhow::Result<Option<Self>> {
        let Some(home) = kueue_dir()? else {
            return Ok(None);
        };
        let kc = cluster.kubeconfig();
        let crds = home.join("crd");
        kubectl_ok(
            kc,
            &["apply", "--server-side", "-f", &crds.to_string_lossy()],
        )
        .context("applying Kueue's CRDs")?;
        kubectl_ok(
            kc,
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=60s",
            ],
        )?;
        cluster.create_namespace("kueue-system", None).await?;
        if let Err(e) = ensure_metrics_certificate() {
            crate::skip::skip("the Kueue tests", &format!("{e:#}"));
            return Ok(None);
        }

        let dir = tempfile::Builder::new()
            .prefix("gpu-adm-kueue-")
            .tempdir()?;
        let serving = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
        let cert_dir = dir.path().join("certs");
        std::fs::create_dir_all(&cert_dir)?;
        std::fs::write(cert_dir.join("tls.crt"), serving.cert.pem())?;
        std::fs::write(
            cert_dir.join("tls.key"),
            serving.signing_key.serialize_pem(),
        )?;
        let claimed = ClaimedPorts::claim(3)?;
        let &[webhook_port, health_port, metrics_port] = claimed.ports() else {
            unreachable!("three ports claimed")
        };
        let config = json!({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": format!("127.0.0.1:{health_port}")},
            "metrics": {"bindAddress": format!("127.0.0.1:{metrics_port}")},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
            "leaderElection": {"leaderElect": false},
            "internalCertManagement": {"enable": false},
            "integrations": {"frameworks": ["batch/job"]},
            // The exported ClusterQueues cover GPUs only; a Pod set asking for a resource no resource group
            // covers is inadmissible ("resource memory unavailable in ClusterQueue"), so Kueue counts only GPUs.
            "resources": {"excludeResourcePrefixes": ["cpu", "memory", "ephemeral-storage", "pods"]},
        });
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, serde_yaml::to_string(&config)?)?;
        let process = ChildProcess::spawn(
            "kueue",
            &home.join("bin/kueue"),
            &[
                format!("--config={}", config_path.display()),
                "--feature-gates=VisibilityOnDemand=false".to_string(),
            ],
            &[("KUBECONFIG".to_string(), kc.to_string_lossy().into_owned())],
            dir.path(),
        )?;
        let kueue = Self {
            process,
            kubeconfig: kc.to_path_buf(),
            _claimed: claimed,
            _dir: dir,
        };
        let (mutating, validating) = registrations(
            &home.join("webhook/manifests.yaml"),
            &format!("https://127.0.0.1:{webhook_port}"),
            serving.cert.pem().as_bytes(),
        )?;
        Api::<MutatingWebhookConfiguration>::all(cluster.client())
            .create(&PostParams::default(), &serde_json::from_value(mutating)?)
            .await
            .context("registering Kueue's mutating webhooks")?;
        Api::<ValidatingWebhookConfiguration>::all(cluster.client())
            .create(&PostParams::default(), &serde_json::from_value(validating)?)
            .await
            .context("registering Kueue's validating webhooks")?;
        kueue.wait_ready(Duration::from_secs(90))?;
        Ok(Some(kueue))
    }

    /// Ready: a server-side dry run of a ResourceFlavor passes Kueue's webhooks (the apiserver reaches the
    /// manager, which holds its caches).
    fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let probe = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: e2e-probe}\n";
        let started = Instant::now();
        loop {
            let answer = kubectl(
                &self.kubeconfig,
                None,
                &[],
                &["apply", "--server-side", "--dry-run=server", "-f", "-"],
                probe,
            );
            if answer.ok {
                eprintln!("kueue: ready in {:.1}s", started.elapsed().as_secs_f64());
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "Kueue's webhooks never answered within {timeout:?}: {}\n{}",
                    answer.stderr,
                    self.process.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The manager's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The last `n` lines of the manager's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}

impl Drop for Kueue {
    fn drop(&mut self) {
        // Kueue's webhooks fail closed: once its manager is gone, Jobs could not be created.
        for kind in [
            "mutatingwebhookconfiguration",
            "validatingwebhookconfiguration",
        ] {
            let _ = kubectl(
                &self.kubeconfig,
                None,
                &[],
                &[
                    "delete",
                    kind,
                    REGISTRATION,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                "",
            );
        }
        self.process.kill();
    }
}

fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<KubectlAnswer> {
    let answer = kubectl(kubeconfig, None, &[], args, "");
    if !answer.ok {
        bail!("kubectl {}: {}", args.join(" "), answer.stderr);
    }
    Ok(answer)
}

/// Kueue's webhook configurations from its module, each hook pointed at `base` + its path with `ca_pem`, only
/// the hooks the manager serves here: its own API's and batch/v1 Jobs' (the other integrations are off, and
/// their hooks, failing closed, would refuse what they match).
fn registrations(manifests: &Path, base: &str, ca_pem: &[u8]) -> anyhow::Result<(Value, Value)> {
    let text = std::fs::read_to_string(manifests)?;
    let mut configs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).map_err(anyhow::Error::from))
        .collect::<anyhow::Result<Vec<Value>>>()?;
    configs.retain(|c| !c.is_null());
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut out = Vec::new();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let mut config = configs
            .iter()
            .find(|c| c["kind"] == kind)
            .cloned()
            .with_context(|| format!("no {kind} in {}", manifests.display()))?;
        let hooks: Vec<Value> = config["webhooks"]
            .as_array()
            .context("webhooks")?
            .iter()
            .filter_map(|h| {
                let path = h["clientConfig"]["service"]["path"].as_str()?;
                let served = path.contains("-kueue-x-k8s-io-") || path.ends_with("-batch-v1-job");
                served.then(|| {
                    let mut h = h.clone();
                    h["clientConfig"] = json!({"url": format!("{base}{path}"), "caBundle": ca});
                    h
                })
            })
            .collect();
        if hooks.is_empty() {
            bail!(
                "{kind} of {} has no hook for Kueue's API or Jobs",
                manifests.display()
            );
        }
        config["metadata"] = json!({"name": REGISTRATION});
        config["webhooks"] = json!(hooks);
        out.push(config);
    }
    let validating = out.pop().unwrap_or_default();
    let mutating = out.pop().unwrap_or_default();
    Ok((mutating, validating))
}

/// A self-signed pair at [`METRICS_CERT_DIR`] unless one is there (Kueue exits without it).
fn ensure_metrics_certificate() -> anyhow::Result<()> {
    let dir = Path::new(METRICS_CERT_DIR);
    if dir.join("tls.crt").is_file() && dir.join("tls.key").is_file() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| {
        format!("creating {METRICS_CERT_DIR} (Kueue hard-codes its metrics certificate there)")
    })?;
    let pair = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
    // Written under temp names and renamed: two test processes may do this at once.
    for (name, pem) in [
        ("tls.key", pair.signing_key.serialize_pem()),
        ("tls.crt", pair.cert.pem()),
    ] {
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, pem)?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}
