//! [`Scorer`] and [`Webhook`]: the real binaries started as their `--help` documents, on loopback
//! with ephemeral ports (`--listen 127.0.0.1:0`), their ports read from the `listening on` log line.
//!
//! ```text
//! scorer           --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 [--policy-file F] [--state F]
//! webhook-frontend --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --scorer URL --tls=self-signed --tls-dir DIR
//!                  [--deadline-ms N] [--no-kube --namespace-tier NS=TIER ...]   (KUBECONFIG env for kube)
//! ```
//! Each service owns a temp dir (logs, certificates) removed on drop, after the process is killed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_proto::scorer::v1::{
    GetPolicyRequest, GetPolicyResponse, scorer_client::ScorerClient,
};
use serde_json::Value;

use crate::https::HttpsClient;
use crate::process::{ChildProcess, TAIL_LINES};
use crate::review::{AdmissionOutcome, Operation, check_response, pod_review};

/// Waits for the main (non-admin) `listening on` address.
async fn main_addr(p: &mut ChildProcess, timeout: Duration) -> anyhow::Result<SocketAddr> {
    p.wait_serving_addr(timeout).await
}

/// The admin address, if the process printed it.
fn admin_addr_of(p: &ChildProcess) -> Option<SocketAddr> {
    p.admin_addr()
}

// ----------------------------------------------------------------------------------------------------------
// scorer

/// Builder for a [`Scorer`] process.
#[derive(Debug, Default, Clone)]
pub struct ScorerBuilder {
    policy: Option<PathBuf>,
    state: Option<PathBuf>,
    /// `--listen` (default `127.0.0.1:0`): a fixed address restarts a scorer where its clients call it.
    listen: Option<SocketAddr>,
    /// Do not wait for a `GetPolicy` answer (a scorer started on a policy file it refuses has none).
    no_policy_wait: bool,
    extras: crate::process::Extras,
    name: Option<String>,
}

crate::process::process_extras!(ScorerBuilder);

impl ScorerBuilder {
    /// `--policy-file PATH` (default: the embedded policy).
    pub fn policy(mut self, path: impl AsRef<Path>) -> Self {
        self.policy = Some(path.as_ref().to_path_buf());
        self
    }
    /// `--state PATH` (default: no persistence).
    pub fn state(mut self, path: impl AsRef<Path>) -> Self {
        self.state = Some(path.as_ref().to_path_buf());
        self
    }
    /// Log file name (default `scorer`).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// `--listen ADDR` (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }
    /// Returns once the scorer listens, without waiting for a policy (it may refuse its policy file).
    pub fn no_policy_wait(mut self) -> Self {
        self.no_policy_wait = true;
        self
    }

    /// Starts the scorer, waits for its `listening on` line, then (unless told not to) for a successful
    /// `GetPolicy`.
    pub async fn start(self) -> anyhow::Result<Scorer> {
        let dir = tempfile::Builder::new()
            .prefix("gpu-adm-scorer-")
            .tempdir()?;
        let listen = self
            .listen
            .map_or("127.0.0.1:0".to_string(), |a| a.to_string());
        let mut args: Vec<String> = vec![
            "--listen".into(),
            listen,
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
        ];
        if let Some(p) = &self.policy {
            args.extend(["--policy-file".into(), p.display().to_string()]);
        }
        if let Some(s) = &self.state {
            args.extend(["--state".into(), s.display().to_string()]);
        }
        args.extend(self.extras.args.iter().cloned());
        let name = self.name.clone().unwrap_or_else(|| "scorer".into());
        let mut process = ChildProcess::spawn(
            &name,
            crate::binaries::scorer(),
            &args,
            &self.extras.envs,
            dir.path(),
        )?;
        let addr = main_addr(&mut process, crate::START_TIMEOUT).await?;
        let mut scorer = Scorer {
            addr,
            process,
            dir,
            policy: None,
        };
        if self.no_policy_wait {
            return Ok(scorer);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match scorer.fetch_policy().await {
                Ok(p) => {
                    let policy = PolicySnapshot::from_response(&p)
                        .context("the scorer's GetPolicy document does not validate")?;
                    scorer.policy = Some((p, policy));
                    return Ok(scorer);
                }
                Err(e) if Instant::now() > deadline => {
                    bail!(
                        "scorer GetPolicy failed: {e:#}\n{}",
                        scorer.process.log_tail(TAIL_LINES)
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// A running `scorer` process. Killed on drop.
pub struct Scorer {
    addr: SocketAddr,
    /// The child process (pause/resume/kill, logs).
    pub process: ChildProcess,
    dir: tempfile::TempDir,
    /// What `GetPolicy` answered at start, and the webhooks' view of it.
    policy: Option<(GetPolicyResponse, PolicySnapshot)>,
}

impl Scorer {
    /// A builder with the defaults above.
    pub fn builder() -> ScorerBuilder {
        ScorerBuilder::default()
    }

    /// The gRPC address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for the webhook's `--scorer`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The admin (`/metrics`) address, when the scorer printed it.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        admin_addr_of(&self.process)
    }

    /// The scorer's temp dir (logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh gRPC client.
    pub async fn client(&self) -> anyhow::Result<ScorerClient<tonic::transport::Channel>> {
        let ch = tonic::transport::Endpoint::from_shared(self.url())?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(5))
            .connect()
            .await?;
        Ok(ScorerClient::new(ch))
    }

    /// Calls `GetPolicy` now.
    pub async fn fetch_policy(&self) -> anyhow::Result<GetPolicyResponse> {
        Ok(self
            .client()
            .await?
            .get_policy(GetPolicyRequest {})
            .await?
            .into_inner())
    }

    /// The policy fetched at start (not with [`ScorerBuilder::no_policy_wait`]), as the webhooks view it.
    pub fn policy(&self) -> &PolicySnapshot {
        &self.policy.as_ref().expect("fetched at start").1
    }

    /// What `GetPolicy` answered at start (to serve the same policy from a double).
    pub fn policy_response(&self) -> &GetPolicyResponse {
        &self.policy.as_ref().expect("fetched at start").0
    }
}

// ----------------------------------------------------------------------------------------------------------
// webhook

/// Builder for a [`Webhook`] process.
#[derive(Debug, Clone)]
pub struct WebhookBuilder {
    scorer: String,
    no_kube: bool,
    tiers: Vec<(String, String)>,
    deadline_ms: Option<u64>,
    kubeconfig: Option<PathBuf>,
    extras: crate::process::Extras,
    wait_ready: bool,
    wait_policy: bool,
    name: Option<String>,
    policy: WebhookPolicy,
}

/// Where a test webhook reads its policy (`--policy-file`).
#[derive(Debug, Clone)]
enum WebhookPolicy {
    /// The scorer's own policy file, as a Deployment mounts one ConfigMap into both: the document of the
    /// scorer's `GetPolicy`, written to a file of the webhook's; the embedded default when the scorer does
    /// not answer.
    SameAsScorer,
    /// This file.
    File(PathBuf),
}

/// Scorer budget of the webhooks tests start, unless a test sets its own: wider than the product's 200 ms so
/// that a loaded 2-core machine running debug builds cannot turn an expected decision into a pass-through.
pub const TEST_DEADLINE_MS: u64 = 1000;

crate::process::process_extras!(WebhookBuilder);

impl WebhookBuilder {
    /// `--no-kube`: tiers from `--namespace-tier`, PriorityClasses from the scorer's policy.
    pub fn no_kube(mut self) -> Self {
        self.no_kube = true;
        self
    }
    /// `--namespace-tier NS=TIER` (repeatable; implies nothing about `--no-kube`).
    pub fn namespace_tier(mut self, ns: &str, tier: &str) -> Self {
        self.tiers.push((ns.into(), tier.into()));
        self
    }
    /// `--deadline-ms N` (the product's default is 200; the tests' default is [`TEST_DEADLINE_MS`]).
    pub fn deadline_ms(mut self, ms: u64) -> Self {
        self.deadline_ms = Some(ms);
        self
    }
    /// Run against a cluster: `KUBECONFIG=path`.
    pub fn kubeconfig(mut self, path: impl AsRef<Path>) -> Self {
        self.kubeconfig = Some(path.as_ref().to_path_buf());
        self
    }
    /// Whether `start` waits for the webhook to log `policy loaded` (default true): a webhook holds its policy
    /// before it listens unless its policy file does not validate; tests of that case turn it off.
    pub fn wait_policy(mut self, on: bool) -> Self {
        self.wait_policy = on;
        self
    }
    /// Whether `start` waits for `GET /readyz` = 200 (default true; never with `wait_policy(false)`: the
    /// webhook is ready only once it holds a policy).
    pub fn wait_ready(mut self, on: bool) -> Self {
        self.wait_ready = on;
        self
    }
    /// Log file name (default `webhook-frontend`).
    pub fn name(mut self, n: impl Into<String>) -> Self {
        self.name = Some(n.into());
        self
    }
    /// `--policy-file PATH` (default: the file the scorer reads, as its `GetPolicy` document says).
    pub fn policy_file(mut self, path: impl AsRef<Path>) -> Self {
        self.policy = WebhookPolicy::File(path.as_ref().to_path_buf());
        self
    }

    /// The `--policy-file` argument: `None` for the embedded default.
    async fn policy_file_arg(&self, dir: &Path) -> anyhow::Result<Option<PathBuf>> {
        match &self.policy {
            WebhookPolicy::File(path) => Ok(Some(path.clone())),
            WebhookPolicy::SameAsScorer => {
                let fetched = tokio::time::timeout(Duration::from_secs(3), async {
                    let mut client = ScorerClient::connect(self.scorer.clone()).await.ok()?;
                    client.get_policy(GetPolicyRequest {}).await.ok()
                })
                .await
                .ok()
                .flatten();
                match fetched.map(|r| r.into_inner().document) {
                    Some(document) if !document.is_empty() => {
                        let path = dir.join("policy.yaml");
                        std::fs::write(&path, document)?;
                        Ok(Some(path))
                    }
                    _ => Ok(None),
                }
            }
        }
    }

    /// Starts the webhook with `--tls=self-signed --tls-dir <tempdir>/tls`, waits for `listening on`, the CA bundle and
    /// (by default) readiness.
    pub async fn start(self) -> anyhow::Result<Webhook> {
        let dir = tempfile::Builder::new()
            .prefix("gpu-adm-webhook-")
            .tempdir()?;
        let tls_dir = dir.path().join("tls");
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--scorer".into(),
            self.scorer.clone(),
            "--tls=self-signed".into(),
            "--tls-dir".into(),
            tls_dir.display().to_string(),
        ];
        let deadline_ms = self.deadline_ms.unwrap_or(TEST_DEADLINE_MS);
        args.extend(["--deadline-ms".into(), deadline_ms.to_string()]);
        if let Some(file) = self.policy_file_arg(dir.path()).await? {
            args.extend(["--policy-file".into(), file.display().to_string()]);
        }
        if self.no_kube {
            args.push("--no-kube".into());
        }
        for (ns, tier) in &self.tiers {
            args.extend(["--namespace-tier".into(), format!("{ns}={tier}")]);
        }
        args.extend(self.extras.args.iter().cloned());
        let mut envs = self.extras.envs.clone();
        match &self.kubeconfig {
            Some(k) => envs.push(("KUBECONFIG".into(), k.display().to_string())),
            // Never let a developer's own cluster leak into a test.
            None => envs.push((
                "KUBECONFIG".into(),
                dir.path().join("no-kubeconfig").display().to_string(),
            )),
        }
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| "webhook-frontend".into());
        let mut process =
            ChildProcess::spawn(&name, crate::binaries::webhook(), &args, &envs, dir.path())?;
        let addr = main_addr(&mut process, crate::START_TIMEOUT).await?;
        let ca = tls_dir.join("ca.crt");
        if !ca.is_file() {
            bail!(
                "{} missing after `listening on`\n{}",
                ca.display(),
                process.log_tail(TAIL_LINES)
            );
        }
        let https = HttpsClient::new(addr, &ca)?;
        let webhook = Webhook {
            addr,
            process,
            dir,
            ca,
            https,
        };
        let mut webhook = webhook;
        // Ready means holding a policy: a webhook whose policy file does not validate is not waited for.
        if self.wait_ready && self.wait_policy {
            webhook.wait_ready(Duration::from_secs(30)).await?;
        }
        if self.wait_policy {
            webhook
                .process
                .wait_for_log("policy loaded", Duration::from_secs(30))
                .await?;
        }
        Ok(webhook)
    }
}

/// A running `webhook-frontend` process. Killed on drop.
pub struct Webhook {
    addr: SocketAddr,
    /// The child process (logs, signals).
    pub process: ChildProcess,
    dir: tempfile::TempDir,
    ca: PathBuf,
    https: HttpsClient,
}

impl Webhook {
    /// A builder for a webhook talking to `scorer_url` (e.g. [`Scorer::url`]).
    pub fn builder(scorer_url: &str) -> WebhookBuilder {
        WebhookBuilder {
            scorer: scorer_url.into(),
            no_kube: false,
            tiers: vec![],
            deadline_ms: None,
            kubeconfig: None,
            extras: Default::default(),
            wait_ready: true,
            wait_policy: true,
            name: None,
            policy: WebhookPolicy::SameAsScorer,
        }
    }

    /// The TLS address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT/mutate-pod`, for a MutatingWebhookConfiguration `clientConfig.url`.
    pub fn mutate_url(&self) -> String {
        format!("https://{}/mutate-pod", self.addr)
    }

    /// The CA bundle written by `--tls=self-signed` (`DIR/ca.crt`).
    pub fn ca_path(&self) -> &Path {
        &self.ca
    }

    /// The CA bundle's PEM bytes (base64 them for a `caBundle`).
    pub fn ca_pem(&self) -> anyhow::Result<Vec<u8>> {
        Ok(std::fs::read(&self.ca)?)
    }

    /// The webhook's temp dir (logs, `tls/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// An HTTPS client trusting only the webhook's CA.
    pub fn https(&self) -> &HttpsClient {
        &self.https
    }

    /// The admin (`/metrics`) address, when the webhook printed it.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        admin_addr_of(&self.process)
    }

    /// Polls `GET /readyz` until 200.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.https.get("/readyz").await {
                Ok(r) if r.status.is_success() => return Ok(()),
                Ok(r) => format!("status {}", r.status),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "webhook not ready within {timeout:?} (last: {last})\n{}",
                    self.process.log_tail(TAIL_LINES)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// POSTs a whole AdmissionReview to `/mutate-pod`, requires HTTP 200, and checks the answer by the
    /// apiserver's rules ([`check_response`]). `elapsed` is the round-trip time including TLS set-up.
    pub async fn review(&self, review: &Value) -> anyhow::Result<AdmissionOutcome> {
        let started = Instant::now();
        let resp = self.https.post_json("/mutate-pod", review).await?;
        let elapsed = started.elapsed();
        if resp.status != http::StatusCode::OK {
            bail!(
                "POST /mutate-pod answered {}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            );
        }
        let mut out = check_response(review, &resp.json()?)?;
        out.elapsed = elapsed;
        Ok(out)
    }

    /// Sends `pod` as a CREATE in `namespace`.
    pub async fn admit_pod(
        &self,
        pod: &Value,
        namespace: &str,
    ) -> anyhow::Result<AdmissionOutcome> {
        self.admit(pod, namespace, Operation::Create).await
    }

    /// Sends `pod` with any operation.
    pub async fn admit(
        &self,
        pod: &Value,
        namespace: &str,
        op: Operation,
    ) -> anyhow::Result<AdmissionOutcome> {
        self.review(&pod_review(pod, namespace, op))
            .await
            .with_context(|| format!("admitting {} in {namespace}", pod_name(pod)))
    }

    /// `GET /metrics` on the admin port (plain HTTP), as text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let addr = self
            .admin_addr()
            .context("the webhook printed no admin `listening on` line")?;
        crate::https::http_get_text(addr, "/metrics").await
    }

    /// Polls `/metrics` every 500 ms until a line starts with `line` (a series and its value); fails after
    /// `timeout` showing the lines that contain `about`. Returns how long it took.
    pub async fn wait_for_metric_line(
        &self,
        line: &str,
        about: &str,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            let text = self.metrics().await?;
            if text.lines().any(|l| l.starts_with(line)) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                let seen: Vec<&str> = text.lines().filter(|l| l.contains(about)).collect();
                bail!("no `{line}` within {timeout:?} in\n{}", seen.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn pod_name(pod: &Value) -> String {
    pod.pointer("/metadata/name")
        .or_else(|| pod.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string()
}

/// A real scorer with its embedded policy and a cluster-less webhook in front of it, `tiers` given as
/// `(namespace, tier)` pairs: the usual set-up of the suites that need no apiserver.
pub async fn scorer_and_webhook(tiers: &[(&str, &str)]) -> anyhow::Result<(Scorer, Webhook)> {
    let scorer = Scorer::builder().start().await?;
    let webhook = tiers
        .iter()
        .fold(
            Webhook::builder(&scorer.url()).no_kube(),
            |b, (ns, tier)| b.namespace_tier(ns, tier),
        )
        .start()
        .await?;
    Ok((scorer, webhook))
}
