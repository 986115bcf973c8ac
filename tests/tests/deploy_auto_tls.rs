//! Certificate mode "automatic" (`deploy/kustomize/components/automatic`) against a real kube-apiserver
//! on loopback: the real `webhook-frontend` binary with `--tls=auto`, `--tls-secret` and
//! `--tls-webhook-config`, as the overlay runs it.
//!
//! - first start, acting as the webhook's ServiceAccount with exactly the RBAC of deploy/kustomize (base +
//!   components/automatic): the frontend creates the Secret (ca.crt, tls.crt, tls.key), patches the caBundle of
//!   BOTH webhooks of the configuration (found by name), turns ready, and an HTTPS request verified
//!   against the caBundle read back from the API succeeds; a caBundle someone resets is patched back;
//! - two frontends started at the same time end with ONE Secret, one issuance between them, and a
//!   caBundle that verifies the (same) certificate both serve;
//! - a Secret whose serving certificate enters its renewal window (a third of its lifetime left) while
//!   two frontends run is renewed once, under the same CA, and a new connection to either gets the new
//!   certificate from the same process (no restart).
//!
//! The apiserver comes from `tests/cluster/build.sh` (cached); without it: SKIP (a failure
//! when `CI` is set), like the cluster tier.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use gpu_admission_tests::cluster::LocalCluster;
use gpu_admission_tests::https::{HttpsClient, http_get_text};
use gpu_admission_tests::{ChildProcess, Scorer, binaries};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize as _;
use serde_json::json;

/// The two webhook entries of every test configuration (url clientConfig, no caBundle yet).
const WEBHOOKS: [&str; 2] = ["pods.gpu-admission.io", "pods-second.gpu-admission.io"];
/// How long a frontend may take to create, patch and serve (polling every second).
const SETTLE: Duration = Duration::from_secs(45);
/// The scorer every frontend of the test fetches its policy from.
static SCORER_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[tokio::test]
async fn automatic_certificates_against_a_real_apiserver() {
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("starting the local apiserver")
    else {
        return;
    };
    let _ = binaries::webhook();
    // A frontend is ready once it holds a policy: every frontend of this test asks this scorer.
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    SCORER_URL.set(scorer.url()).expect("set once");
    first_start_creates_the_secret_and_patches_the_ca_bundle(&cluster)
        .await
        .expect("first start");
    racing_replicas_end_with_one_secret(&cluster)
        .await
        .expect("racing replicas");
    a_certificate_near_expiry_is_renewed_without_restart(&cluster)
        .await
        .expect("renewal");
}

async fn first_start_creates_the_secret_and_patches_the_ca_bundle(
    cluster: &LocalCluster,
) -> anyhow::Result<()> {
    // The names and RBAC of deploy/kustomize (base + components/automatic), and the frontend acting as its
    // ServiceAccount: a call outside that RBAC fails the test.
    let (ns, secret, config) = (
        "gpu-admission",
        "gpu-admission-webhook-tls",
        "gpu-admission",
    );
    cluster.create_namespace(ns, None).await?;
    create_webhook_config(cluster, config).await?;
    apply_rbac(cluster).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = service_account_kubeconfig(cluster, dir.path(), ns, "gpu-admission-webhook")?;
    // The identity is really restricted: listing Secrets is not granted.
    let sa = gpu_admission_tests::cluster::client_for(&kubeconfig).await?;
    match Api::<Secret>::namespaced(sa, ns)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.is_forbidden() => {}
        other => bail!("the ServiceAccount identity may list Secrets: {other:?}"),
    }
    // No namespace in --tls-secret: the namespace comes from the (kubeconfig's) default namespace.
    let mut fe = Frontend::start(&kubeconfig, dir.path(), "first", None, secret, config).await?;

    let (data, ca) = wait_settled(cluster, ns, secret, config, &mut [&mut fe]).await?;
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(
            data.contains_key(key),
            "Secret lacks {key}: {:?}",
            data.keys()
        );
    }
    let readyz = HttpsClient::from_ca_pem(fe.addr, &ca)?
        .get("/readyz")
        .await?;
    assert_eq!(readyz.status, 200, "{:?}", readyz.body);
    assert_eq!(served_leaf(fe.addr, &ca).await?, leaf(&data["tls.crt"])?);
    let metrics = http_get_text(fe.admin()?, "/metrics").await?;
    for line in [
        "gpu_admission_tls_certificates_issued_total{new_ca=\"true\"} 1",
        "gpu_admission_tls_ca_bundle_patches_total 1",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }

    // Someone resets the second webhook's caBundle: it is patched back, by name.
    let api = Api::<MutatingWebhookConfiguration>::all(cluster.client());
    let reset = json!({"webhooks": [{"name": WEBHOOKS[1], "clientConfig": {"caBundle":
        base64::engine::general_purpose::STANDARD.encode(b"not a CA")}}]});
    api.patch(config, &PatchParams::default(), &Patch::Strategic(&reset))
        .await?;
    wait_for("the reset caBundle to be patched back", SETTLE, || async {
        Ok(ca_bundles(cluster, config).await?.iter().all(|b| *b == ca))
    })
    .await?;
    // ... and nothing else of the configuration changed.
    let mwc = api.get(config).await?;
    let urls: Vec<_> = mwc
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            (
                w.name.clone(),
                w.client_config.url.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        urls,
        WEBHOOKS
            .iter()
            .map(|n| (n.to_string(), format!("https://127.0.0.1:9/{n}")))
            .collect::<Vec<_>>()
    );
    Ok(())
}

async fn racing_replicas_end_with_one_secret(cluster: &LocalCluster) -> anyhow::Result<()> {
    let (ns, secret, config) = (
        "auto-race",
        "gpu-admission-webhook-tls",
        "gpu-admission-race",
    );
    cluster.create_namespace(ns, None).await?;
    create_webhook_config(cluster, config).await?;
    let dir = tempfile::tempdir()?;
    // Both processes are spawned before either is waited for.
    let kc = cluster.kubeconfig();
    let a = Frontend::spawn(kc, dir.path(), "race-a", Some(ns), secret, config)?;
    let b = Frontend::spawn(kc, dir.path(), "race-b", Some(ns), secret, config)?;
    let (mut a, mut b) = (a.listening().await?, b.listening().await?);
    let (data, ca) = wait_settled(cluster, ns, secret, config, &mut [&mut a, &mut b]).await?;

    let secrets = Api::<Secret>::namespaced(cluster.client(), ns)
        .list(&ListParams::default())
        .await?;
    let names: Vec<_> = secrets
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    assert_eq!(names, [secret], "exactly one Secret");
    let want = leaf(&data["tls.crt"])?;
    for fe in [&a, &b] {
        assert_eq!(
            served_leaf(fe.addr, &ca).await?,
            want,
            "{} serves another certificate",
            fe.process.name()
        );
    }
    // One of them issued; the other found the winner's Secret (AlreadyExists → re-read).
    let mut issued = 0;
    for fe in [&a, &b] {
        let m = http_get_text(fe.admin()?, "/metrics").await?;
        issued += counter(
            &m,
            "gpu_admission_tls_certificates_issued_total{new_ca=\"true\"}",
        );
    }
    assert_eq!(issued, 1, "exactly one replica issued the certificate");
    Ok(())
}

async fn a_certificate_near_expiry_is_renewed_without_restart(
    cluster: &LocalCluster,
) -> anyhow::Result<()> {
    let (ns, secret, config) = (
        "auto-renew",
        "gpu-admission-webhook-tls",
        "gpu-admission-renew",
    );
    cluster.create_namespace(ns, None).await?;
    create_webhook_config(cluster, config).await?;
    // A CA and a serving certificate that lived 100 s and has 90 s left: the renewal window (a third of
    // the 190 s lifetime) opens 27 s from now, while the frontend runs.
    let old = near_expiry_material(Duration::from_secs(100), Duration::from_secs(90))?;
    let data: BTreeMap<String, k8s_openapi::ByteString> = old
        .iter()
        .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.clone())))
        .collect();
    let obj: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "namespace": ns}, "type": "kubernetes.io/tls"}))?;
    let obj = Secret {
        data: Some(data),
        ..obj
    };
    Api::<Secret>::namespaced(cluster.client(), ns)
        .create(&PostParams::default(), &obj)
        .await?;
    let old_ca = old["ca.crt"].clone();
    let old_leaf = leaf(&old["tls.crt"])?;

    // Two replicas: both serve the old certificate, both reach the renewal window within a second of
    // each other; exactly one writes the renewal (the other reads it, or gets a Conflict and re-reads) and
    // both end up serving it.
    let dir = tempfile::tempdir()?;
    let kc = cluster.kubeconfig();
    let a = Frontend::spawn(kc, dir.path(), "renew-a", Some(ns), secret, config)?;
    let b = Frontend::spawn(kc, dir.path(), "renew-b", Some(ns), secret, config)?;
    let (mut a, mut b) = (a.listening().await?, b.listening().await?);
    let (_, ca) = wait_settled(cluster, ns, secret, config, &mut [&mut a, &mut b]).await?;
    assert_eq!(ca, old_ca, "the caBundle is the pre-created CA");
    for fe in [&a, &b] {
        assert_eq!(
            served_leaf(fe.addr, &ca).await?,
            old_leaf,
            "{}: the still-valid certificate is served first",
            fe.process.name()
        );
    }
    let pids = (a.process.pid(), b.process.pid());

    let started = Instant::now();
    for fe in [&a, &b] {
        wait_for(
            "a renewed certificate on a new connection",
            Duration::from_secs(90),
            || async { Ok(served_leaf(fe.addr, &ca).await? != old_leaf) },
        )
        .await?;
    }
    eprintln!(
        "renewed certificate served by both {:.1}s after the first check",
        started.elapsed().as_secs_f64()
    );
    let now = read_secret(cluster, ns, secret)
        .await?
        .context("Secret gone")?;
    assert_eq!(now["ca.crt"], old_ca, "the CA is kept across the renewal");
    assert!(
        ca_bundles(cluster, config)
            .await?
            .iter()
            .all(|b| *b == old_ca)
    );
    let mut issued = 0;
    for fe in [&mut a, &mut b] {
        assert!(
            fe.process.exited().is_none(),
            "{} restarted",
            fe.process.name()
        );
        assert_eq!(served_leaf(fe.addr, &ca).await?, leaf(&now["tls.crt"])?);
        let m = http_get_text(fe.admin()?, "/metrics").await?;
        issued += counter(
            &m,
            "gpu_admission_tls_certificates_issued_total{new_ca=\"false\"}",
        );
        assert_eq!(
            counter(
                &m,
                "gpu_admission_tls_certificates_issued_total{new_ca=\"true\"}"
            ),
            0,
            "{m}"
        );
        assert!(
            counter(&m, "gpu_admission_tls_reloads_total{result=\"ok\"}") >= 2,
            "{m}"
        );
    }
    assert_eq!((a.process.pid(), b.process.pid()), pids);
    assert_eq!(issued, 1, "exactly one replica wrote the renewal");
    Ok(())
}

// ------------------------------------------------------------------------------------------------------
// helpers

/// A running `webhook-frontend` in automatic mode, fetching its policy from [`SCORER_URL`].
struct Frontend {
    process: ChildProcess,
    addr: SocketAddr,
}

struct Spawned(ChildProcess);

impl Frontend {
    fn spawn(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        ns: Option<&str>,
        secret: &str,
        config: &str,
    ) -> anyhow::Result<Spawned> {
        let mut args: Vec<String> = [
            "--listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
            "--tls=auto",
            "--tls-poll-ms=1000",
        ]
        .map(String::from)
        .to_vec();
        let scorer = SCORER_URL
            .get()
            .map_or("http://127.0.0.1:9", String::as_str);
        args.push(format!("--scorer={scorer}"));
        match ns {
            Some(ns) => args.push(format!("--tls-secret={ns}/{secret}")),
            None => args.push(format!("--tls-secret={secret}")),
        }
        args.push(format!("--tls-webhook-config={config}"));
        args.push("--san=gpu-admission-webhook.gpu-admission.svc".into());
        let envs = vec![
            ("KUBECONFIG".to_string(), kubeconfig.display().to_string()),
            ("RUST_LOG".to_string(), "info".to_string()),
        ];
        Ok(Spawned(ChildProcess::spawn(
            name,
            binaries::webhook(),
            &args,
            &envs,
            dir,
        )?))
    }

    async fn start(
        kubeconfig: &Path,
        dir: &Path,
        name: &str,
        ns: Option<&str>,
        secret: &str,
        config: &str,
    ) -> anyhow::Result<Frontend> {
        Self::spawn(kubeconfig, dir, name, ns, secret, config)?
            .listening()
            .await
    }

    fn admin(&self) -> anyhow::Result<SocketAddr> {
        gpu_admission_tests::process::listening_lines(&self.process.log())
            .into_iter()
            .find(|(_, l)| l.contains("admin"))
            .map(|(a, _)| a)
            .context("no admin `listening on` line")
    }
}

impl Spawned {
    async fn listening(mut self) -> anyhow::Result<Frontend> {
        let lines = self
            .0
            .wait_listening(2, gpu_admission_tests::START_TIMEOUT)
            .await?;
        let addr = lines
            .iter()
            .find(|(_, l)| l.contains("webhook-frontend listening on"))
            .map(|(a, _)| *a)
            .context("no `webhook-frontend listening on` line")?;
        Ok(Frontend {
            process: self.0,
            addr,
        })
    }
}

/// Creates the webhook's RBAC exactly as deploy/kustomize ships it: base/webhook/rbac.yaml and
/// components/automatic/rbac.yaml.
async fn apply_rbac(cluster: &LocalCluster) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize");
    let pp = PostParams::default();
    for file in ["base/webhook/rbac.yaml", "components/automatic/rbac.yaml"] {
        let text = std::fs::read_to_string(root.join(file))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_json::to_value(serde_yaml::Value::deserialize(doc)?)?;
            let ns = v["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            let c = cluster.client();
            match v["kind"].as_str() {
                Some("ClusterRole") => {
                    Api::<ClusterRole>::all(c)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                Some("ClusterRoleBinding") => {
                    Api::<ClusterRoleBinding>::all(c)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                Some("Role") => {
                    Api::<Role>::namespaced(c, &ns)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                Some("RoleBinding") => {
                    Api::<RoleBinding>::namespaced(c, &ns)
                        .create(&pp, &serde_json::from_value(v)?)
                        .await?;
                }
                other => bail!("{file}: unexpected kind {other:?}"),
            }
        }
    }
    Ok(())
}

/// The admin kubeconfig acting as ServiceAccount `ns/name` (impersonation), default namespace `ns`.
fn service_account_kubeconfig(
    cluster: &LocalCluster,
    dir: &Path,
    ns: &str,
    name: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let mut kc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(cluster.kubeconfig())?)?;
    let user = kc["users"][0]["user"]
        .as_mapping_mut()
        .context("kubeconfig user")?;
    user.insert(
        "as".into(),
        format!("system:serviceaccount:{ns}:{name}").into(),
    );
    user.insert(
        "as-groups".into(),
        serde_yaml::to_value([
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{ns}"),
            "system:authenticated",
        ])?,
    );
    kc["contexts"][0]["context"]
        .as_mapping_mut()
        .context("kubeconfig context")?
        .insert("namespace".into(), ns.into());
    let path = dir.join("kubeconfig-service-account");
    std::fs::write(&path, serde_yaml::to_string(&kc)?)?;
    Ok(path)
}

async fn create_webhook_config(cluster: &LocalCluster, name: &str) -> anyhow::Result<()> {
    let hooks: Vec<_> = WEBHOOKS
        .iter()
        .map(|n| {
            json!({
                "name": n,
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("https://127.0.0.1:9/{n}")},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                // Calls nothing during these tests: no namespace carries this label.
                "namespaceSelector": {"matchLabels": {"gpu-admission.io/auto-tls-test": "never"}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": 5
            })
        })
        .collect();
    let mwc: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name}, "webhooks": hooks}))?;
    Api::<MutatingWebhookConfiguration>::all(cluster.client())
        .create(&PostParams::default(), &mwc)
        .await
        .with_context(|| format!("creating MutatingWebhookConfiguration {name}"))?;
    Ok(())
}

async fn read_secret(
    cluster: &LocalCluster,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<BTreeMap<String, Vec<u8>>>> {
    Ok(Api::<Secret>::namespaced(cluster.client(), ns)
        .get_opt(name)
        .await?
        .map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect()
        }))
}

/// The caBundle of every webhook entry (empty when unset).
async fn ca_bundles(cluster: &LocalCluster, name: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let mwc = Api::<MutatingWebhookConfiguration>::all(cluster.client())
        .get(name)
        .await?;
    Ok(mwc
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
        .collect())
}

/// Waits until the Secret exists, every caBundle equals its ca.crt, and each frontend answers /readyz 200
/// over a connection verified against that caBundle. Returns the Secret's data and the caBundle.
async fn wait_settled(
    cluster: &LocalCluster,
    ns: &str,
    secret: &str,
    config: &str,
    frontends: &mut [&mut Frontend],
) -> anyhow::Result<(BTreeMap<String, Vec<u8>>, Vec<u8>)> {
    let deadline = Instant::now() + SETTLE;
    let mut last = String::new();
    loop {
        for fe in frontends.iter_mut() {
            if let Some(status) = fe.process.exited() {
                bail!(
                    "{} exited ({status})\n{}",
                    fe.process.name(),
                    fe.process.log_tail(40)
                );
            }
        }
        match settled(cluster, ns, secret, config, frontends).await {
            Ok(Some(done)) => return Ok(done),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = frontends.iter().map(|f| f.process.log_tail(30)).collect();
            bail!(
                "not settled within {SETTLE:?} (last error: {last}); caBundles {:?}\n{}",
                ca_bundles(cluster, config)
                    .await
                    .map(|v| v.iter().map(Vec::len).collect::<Vec<_>>()),
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn settled(
    cluster: &LocalCluster,
    ns: &str,
    secret: &str,
    config: &str,
    frontends: &[&mut Frontend],
) -> anyhow::Result<Option<(BTreeMap<String, Vec<u8>>, Vec<u8>)>> {
    let Some(data) = read_secret(cluster, ns, secret).await? else {
        return Ok(None);
    };
    let Some(ca) = data.get("ca.crt").cloned() else {
        return Ok(None);
    };
    let bundles = ca_bundles(cluster, config).await?;
    if bundles.len() != WEBHOOKS.len() || bundles.iter().any(|b| *b != ca) {
        return Ok(None);
    }
    for fe in frontends {
        let r = HttpsClient::from_ca_pem(fe.addr, &ca)?
            .timeout(Duration::from_secs(3))
            .get("/readyz")
            .await?;
        if r.status != 200 {
            return Ok(None);
        }
    }
    Ok(Some((data, ca)))
}

/// The leaf certificate the server at `addr` presents on a new connection verified against `ca_pem`
/// (server name 127.0.0.1).
async fn served_leaf(addr: SocketAddr, ca_pem: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &ca_pem[..]) {
        roots.add(c?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp),
    )
    .await
    .context("TLS handshake timed out")?
    .context("TLS handshake verified against the caBundle")?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .context("no peer certificate")?;
    Ok(certs[0].to_vec())
}

/// DER of the first certificate of a PEM document.
fn leaf(pem: &[u8]) -> anyhow::Result<Vec<u8>> {
    let der: CertificateDer<'static> = rustls_pemfile::certs(&mut &pem[..])
        .next()
        .context("no certificate")??;
    Ok(der.to_vec())
}

/// The value of a counter sample line `name{labels} N` (0 when absent).
fn counter(metrics: &str, sample: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample))
        .and_then(|rest| rest.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// ca.crt/ca.key (a CA valid for years) and tls.crt/tls.key (a serving certificate for 127.0.0.1 and the
/// default SANs that started `age` ago and expires in `left`), the layout the frontend keeps.
fn near_expiry_material(
    age: Duration,
    left: Duration,
) -> anyhow::Result<BTreeMap<&'static str, Vec<u8>>> {
    let unix_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let now = rcgen::date_time_ymd(1970, 1, 1) + unix_now;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "pre-created test CA");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = now - Duration::from_secs(3600);
    ca_params.not_after = now + Duration::from_secs(10 * 365 * 86400);
    let ca_key = rcgen::KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let sans: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "gpu-admission-webhook.gpu-admission.svc",
    ]
    .map(String::from)
    .to_vec();
    let mut params = rcgen::CertificateParams::new(sans)?;
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - age;
    params.not_after = now + left;
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    Ok(BTreeMap::from([
        ("ca.crt", ca.pem().into_bytes()),
        ("ca.key", ca_key_pem.into_bytes()),
        ("tls.crt", cert.pem().into_bytes()),
        ("tls.key", key.serialize_pem().into_bytes()),
    ]))
}
