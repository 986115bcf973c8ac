//! TLS both ways: the client config that verifies the webhook against a CA bundle, and the throwaway CA +
//! serving certificate of the built-in baseline endpoint (same shape as the frontend's `--self-signed`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// Client config trusting only the CA bundle at `ca` (PEM), offering `alpn`.
pub fn client_config(ca: &Path, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>> {
    let pem = std::fs::read(ca).with_context(|| format!("reading CA bundle {}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.context("parsing CA bundle")?)?;
    }
    if roots.is_empty() {
        bail!("no certificate in CA bundle {}", ca.display());
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(cfg))
}

/// Generates a CA and a serving certificate for localhost, 127.0.0.1 and ::1; writes DIR/ca.crt,
/// DIR/tls.crt and DIR/tls.key; returns the server config (ALPN h2 and http/1.1).
pub fn self_signed_server(dir: &Path) -> Result<Arc<rustls::ServerConfig>> {
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "loadgen baseline CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "loadgen baseline");
    let cert = params.signed_by(&key, &issuer)?;

    std::fs::write(dir.join("ca.crt"), ca_cert.pem())?;
    std::fs::write(dir.join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join("tls.key"), key.serialize_pem())?;

    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())?,
    )?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ca_verifies_as_a_client_root() {
        let dir = tempfile::tempdir().unwrap();
        let server = self_signed_server(dir.path()).unwrap();
        assert_eq!(server.alpn_protocols.len(), 2);
        let client = client_config(&dir.path().join("ca.crt"), b"http/1.1").unwrap();
        assert_eq!(client.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // A file without certificates is refused.
        std::fs::write(dir.path().join("empty.pem"), "").unwrap();
        assert!(client_config(&dir.path().join("empty.pem"), b"h2").is_err());
    }
}
