//! Dev mode (`--tls=self-signed`, `--tls-dir DIR`): a CA and a separate serving certificate signed by it.
//!
//! rustls-based clients refuse a self-signed certificate used directly as the server certificate (it is a CA
//! certificate, not an end-entity one), so the CA goes to `DIR/ca.crt` for clients to trust and the serving
//! pair to `DIR/tls.crt` + `DIR/tls.key` (the same layout as a mounted Secret, so the reloader watches it).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// Paths written by [`generate`].
#[derive(Debug, Clone)]
pub(crate) struct GeneratedFiles {
    pub(crate) ca_cert: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Subject alternative names always present on the serving certificate.
pub(crate) const DEFAULT_SANS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Generates a fresh CA and serving certificate (SANs: [`DEFAULT_SANS`] + `extra_sans`) into `dir`.
pub(crate) fn generate(dir: &Path, extra_sans: &[String]) -> anyhow::Result<GeneratedFiles> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let now = OffsetDateTime::now_utc();
    let ca = CertifiedIssuer::self_signed(
        ca_params(
            "gpu-admission webhook dev CA",
            now - Duration::hours(1),
            now + Duration::days(3650),
        )?,
        KeyPair::generate()?,
    )?;
    let key = KeyPair::generate()?;
    let cert = serving_params(
        serving_sans(extra_sans),
        now - Duration::hours(1),
        now + Duration::days(365),
    )?
    .signed_by(&key, &ca)?;

    let files = GeneratedFiles {
        ca_cert: dir.join("ca.crt"),
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    write(&files.ca_cert, ca.pem().as_bytes(), false)?;
    // Key before certificate: a reader that sees the new certificate also sees its key.
    write(&files.key, key.serialize_pem().as_bytes(), true)?;
    write(&files.cert, cert.pem().as_bytes(), false)?;
    Ok(files)
}

/// [`DEFAULT_SANS`] followed by the non-empty, not yet listed `extra` names.
pub(crate) fn serving_sans(extra: &[String]) -> Vec<String> {
    let mut sans: Vec<String> = DEFAULT_SANS.iter().map(|s| s.to_string()).collect();
    for s in extra {
        let s = s.trim();
        if !s.is_empty() && !sans.iter().any(|x| x == s) {
            sans.push(s.to_string());
        }
    }
    sans
}

/// Parameters of a CA certificate (path length 0: it signs serving certificates only).
pub(crate) fn ca_params(
    common_name: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before;
    params.not_after = not_after;
    Ok(params)
}

/// Parameters of an end-entity serving certificate (serverAuth) for `sans` (DNS names or IPs).
pub(crate) fn serving_params(
    sans: Vec<String>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(sans).context("invalid --san")?;
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "gpu-admission-webhook");
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    Ok(params)
}

/// Writes atomically (temp file + rename); private keys are created 0600.
fn write(path: &Path, data: &[u8], private: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let _ = private;
    let mut f = opts
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn writes_a_ca_and_a_serving_pair_that_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(dir.path(), &["webhook.gpu-admission.svc".into()]).unwrap();
        let ck = super::super::certs::load(&files.cert, &files.key)
            .unwrap()
            .0;
        // The serving certificate verifies against the CA for every SAN.
        let ca_pem = std::fs::read(&files.ca_cert).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut &ca_pem[..]) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .unwrap();
        for name in ["localhost", "127.0.0.1", "::1", "webhook.gpu-admission.svc"] {
            let server_name = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(
                    &ck.cert[0],
                    &[],
                    &server_name,
                    &[],
                    rustls::pki_types::UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("example.com").unwrap();
        assert!(
            verifier
                .verify_server_cert(
                    &ck.cert[0],
                    &[],
                    &other,
                    &[],
                    rustls::pki_types::UnixTime::now()
                )
                .is_err()
        );
    }
}
