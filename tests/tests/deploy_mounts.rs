//! The kubelet's way of updating a mounted ConfigMap or Secret, replayed on the real binaries with the
//! paths and flags of the manifests. A volume mounted as a directory (as deploy/kustomize does, never
//! with subPath) holds `KEY -> ..data/KEY` symlinks, `..data` points at a timestamped folder, and an
//! update writes a new folder and atomically renames a fresh `..data` symlink over the old one; the
//! files are never rewritten in place. The scorer must reload its policy, and the webhook its serving
//! certificate, from such a swap without a restart (the Secret written by cert-manager, by the user
//! or by the frontend itself reaches the Pod this way in every certificate mode).
//!
//! Needs `openssl` (certificates); missing: a failure under CI, SKIP otherwise.

#[path = "deploy_support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpu_admission_tests::https::HttpsClient;
use gpu_admission_tests::{ChildProcess, Scorer};

/// How long a reload may take: the binaries poll their files (policy every 1 s, TLS every 2 s by
/// default, as deployed); the kubelet itself adds up to a minute in a cluster, which is not replayed.
const RELOAD_WAIT: Duration = Duration::from_secs(30);

/// A folder laid out like the kubelet's atomic writer does for a ConfigMap or Secret volume.
struct AtomicDir {
    dir: PathBuf,
    generation: u32,
}

impl AtomicDir {
    fn new(dir: &Path, files: &[(&str, &[u8])]) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let mut d = AtomicDir {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        d.update(files);
        d
    }

    /// Writes a new timestamped folder, swaps `..data` to it atomically, removes the old folder.
    fn update(&mut self, files: &[(&str, &[u8])]) {
        let old = (self.generation > 0).then(|| self.data_dir_name());
        self.generation += 1;
        let data = self.dir.join(self.data_dir_name());
        std::fs::create_dir(&data).unwrap();
        for (key, bytes) in files {
            std::fs::write(data.join(key), bytes).unwrap();
        }
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(self.data_dir_name(), &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        for (key, _) in files {
            let link = self.dir.join(key);
            if link.symlink_metadata().is_err() {
                std::os::unix::fs::symlink(format!("..data/{key}"), &link).unwrap();
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }

    fn data_dir_name(&self) -> String {
        format!("..2026_11_22_04_00_00.{:04}", self.generation)
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }
}

#[tokio::test]
async fn scorer_reloads_its_policy_when_the_configmap_volume_is_swapped() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = std::fs::read(
        support::repo_root().join("deploy/kustomize/base/policy/default-policy.yaml"),
    )
    .unwrap();
    // Mounted like the Deployment does: /etc/gpu-admission/policy/default-policy.yaml.
    let mut volume = AtomicDir::new(
        &tmp.path().join("policy"),
        &[("default-policy.yaml", &policy)],
    );
    let scorer = Scorer::builder()
        .policy(volume.path("default-policy.yaml"))
        .state(tmp.path().join("scorer-state.json"))
        .start()
        .await
        .expect("scorer starts on the mounted policy");
    let pid = scorer.process.pid();
    let before = scorer.fetch_policy().await.unwrap().version;

    let mut updated = b"version: deploy-configmap-swap\n".to_vec();
    updated.extend_from_slice(&policy);
    volume.update(&[("default-policy.yaml", &updated)]);

    let deadline = Instant::now() + RELOAD_WAIT;
    let mut now = before.clone();
    while now != "deploy-configmap-swap" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = scorer.fetch_policy().await.unwrap().version;
    }
    assert_eq!(
        now,
        "deploy-configmap-swap",
        "policy {before} not reloaded\n{}",
        scorer.process.log_tail(30)
    );
    assert_eq!(scorer.process.pid(), pid);
    println!("scorer: policy {before} -> {now} through a ..data swap, same process");
}

/// A CA and a serving certificate for 127.0.0.1 signed by it, made with openssl (EC P-256, PKCS#8
/// key, as cert-manager writes them with this install's Certificate). Returns (ca.crt, tls.crt, tls.key).
fn openssl_ca_and_leaf(dir: &Path, name: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let p = |f: &str| dir.join(format!("{name}-{f}")).display().to_string();
    let run = |args: &[&str]| {
        support::run(Command::new("openssl").args(args)).unwrap_or_else(|e| panic!("{e}"));
    };
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &p("ca.key"),
    ]);
    run(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &p("ca.key"),
        "-days",
        "2",
        "-subj",
        &format!("/CN={name}-ca"),
        "-out",
        &p("ca.crt"),
    ]);
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &p("tls.key"),
    ]);
    run(&[
        "req",
        "-new",
        "-key",
        &p("tls.key"),
        "-subj",
        "/CN=gpu-admission-webhook",
        "-out",
        &p("tls.csr"),
    ]);
    std::fs::write(
        p("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:gpu-admission-webhook.gpu-admission.svc\n\
         extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        &p("tls.csr"),
        "-CA",
        &p("ca.crt"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p("ext"),
        "-out",
        &p("tls.crt"),
    ]);
    let read = |f: &str| std::fs::read(p(f)).unwrap();
    (read("ca.crt"), read("tls.crt"), read("tls.key"))
}

async fn healthz_ok(addr: SocketAddr, ca: &[u8]) -> bool {
    let client = HttpsClient::from_ca_pem(addr, ca)
        .unwrap()
        .timeout(Duration::from_secs(5));
    matches!(client.get("/healthz").await, Ok(r) if r.status.is_success())
}

#[tokio::test]
async fn webhook_serves_a_rotated_certificate_when_the_secret_volume_is_swapped() {
    if !support::require_tool("openssl", "apt-get install openssl") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (ca1, crt1, key1) = openssl_ca_and_leaf(tmp.path(), "first");
    let (ca2, crt2, key2) = openssl_ca_and_leaf(tmp.path(), "second");
    // Mounted like the Deployment does: /etc/gpu-admission/tls/{tls.crt,tls.key} (+ ca.crt).
    let mut volume = AtomicDir::new(
        &tmp.path().join("tls"),
        &[("ca.crt", &ca1), ("tls.crt", &crt1), ("tls.key", &key1)],
    );
    let scorer = Scorer::builder().start().await.expect("scorer");
    let tls_dir = tmp.path().join("tls").display().to_string();
    let args: Vec<String> = [
        "--listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
        &format!("--scorer={}", scorer.url()),
        "--tls=files",
        &format!("--tls-dir={tls_dir}"),
        "--no-kube",
    ]
    .map(String::from)
    .to_vec();
    let envs = vec![(
        "KUBECONFIG".to_string(),
        tmp.path().join("none").display().to_string(),
    )];
    let mut webhook = ChildProcess::spawn(
        "webhook-secret-swap",
        gpu_admission_tests::binaries::webhook(),
        &args,
        &envs,
        tmp.path(),
    )
    .unwrap();
    let lines = webhook
        .wait_listening(2, gpu_admission_tests::START_TIMEOUT)
        .await
        .unwrap();
    let addr = lines
        .iter()
        .find(|(_, l)| !l.to_ascii_lowercase().contains("admin") && !l.contains("metrics"))
        .map(|(a, _)| *a)
        .expect("the HTTPS listener's line");
    assert!(
        healthz_ok(addr, &ca1).await,
        "first certificate not served\n{}",
        webhook.log_tail(30)
    );
    assert!(
        !healthz_ok(addr, &ca2).await,
        "a client trusting only the second CA must fail"
    );

    volume.update(&[("ca.crt", &ca2), ("tls.crt", &crt2), ("tls.key", &key2)]);
    let deadline = Instant::now() + RELOAD_WAIT;
    let t = Instant::now();
    while !healthz_ok(addr, &ca2).await && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        healthz_ok(addr, &ca2).await,
        "rotated certificate not served\n{}",
        webhook.log_tail(30)
    );
    assert!(
        !healthz_ok(addr, &ca1).await,
        "the old certificate is still served"
    );
    assert!(webhook.exited().is_none(), "the webhook restarted");
    println!(
        "webhook: rotated certificate served {:?} after the ..data swap, same process",
        t.elapsed()
    );
}
