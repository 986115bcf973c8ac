//! Certificates from files (Secret layout, `..data` symlink swap) are reloaded for new connections, while an
//! established connection keeps working.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// Writes a serving pair signed by `ca` into `dir/<version>/` and points `dir/..data` at it, as the kubelet
/// does for Secret volumes (tls.crt and tls.key are symlinks through `..data`).
fn write_version(dir: &Path, version: &str, ca: &CertifiedIssuer<'_, KeyPair>) -> Vec<u8> {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::ExplicitNoCa;
    let cert = params.signed_by(&key, ca).unwrap();
    let vdir = dir.join(version);
    std::fs::create_dir_all(&vdir).unwrap();
    std::fs::write(vdir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(vdir.join("tls.key"), key.serialize_pem()).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(f)).is_err() {
            symlink(format!("..data/{f}"), dir.join(f)).unwrap();
        }
    }
    cert.der().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_update_is_served_to_new_connections_without_dropping_old_ones() {
    let (_double, scorer) = start_scorer(Mode::Good).await;
    let dir = tempfile::tempdir().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let ca_path = dir.path().join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    let first = write_version(&secret, "v1", &ca);

    let wh = start_webhook(
        &[
            "--tls=files",
            "--tls-dir",
            secret.to_str().unwrap(),
            "--tls-poll-ms",
            "100",
            "--scorer",
            &scorer,
            "--no-kube",
        ],
        &ca_path,
    )
    .await;
    let mut old = connect(wh.addr, &ca_path, false).await;
    assert_eq!(old.server_cert.as_ref(), &first[..]);
    assert_eq!(
        request(&mut old, "GET", "/healthz", Vec::new()).await.0,
        200
    );

    let second = write_version(&secret, "v2", &ca);
    assert_ne!(first, second);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = connect(wh.addr, &ca_path, false).await;
        if c.server_cert.as_ref() == &second[..] {
            break;
        }
        assert!(Instant::now() < deadline, "new certificate never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The connection opened before the swap still works.
    assert_eq!(
        request(&mut old, "GET", "/healthz", Vec::new()).await.0,
        200
    );

    // A broken update (key of another pair) is refused; the current certificate stays.
    std::fs::write(
        secret.join("v2").join("tls.key"),
        KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c = connect(wh.addr, &ca_path, false).await;
    assert_eq!(c.server_cert.as_ref(), &second[..]);
    assert!(
        wh.stderr_text().contains("cannot be loaded"),
        "{}",
        wh.stderr_text()
    );
}
