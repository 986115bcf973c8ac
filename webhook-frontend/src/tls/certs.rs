//! Loading a PEM certificate chain and private key into a rustls `CertifiedKey`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::sign::CertifiedKey;

/// Parses PEM `tls.crt` (leaf first, then intermediates) and `tls.key` (PKCS#8, PKCS#1 or SEC1), and checks
/// that the key belongs to the leaf certificate.
pub(crate) fn certified_key_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> anyhow::Result<CertifiedKey> {
    let chain = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .context("reading PEM certificates")?;
    if chain.is_empty() {
        bail!("no CERTIFICATE block in the certificate file");
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .context("reading PEM private key")?
        .context("no PRIVATE KEY block in the key file")?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .context("certificate and key do not form a usable pair")
}

/// Reads both files and returns the key and the raw bytes (for change detection).
pub(crate) fn load(cert: &Path, key: &Path) -> anyhow::Result<(Arc<CertifiedKey>, Vec<u8>)> {
    let cert_pem = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
    let ck = certified_key_from_pem(&cert_pem, &key_pem)
        .with_context(|| format!("loading {} / {}", cert.display(), key.display()))?;
    let mut both = cert_pem;
    both.extend_from_slice(&key_pem);
    Ok((Arc::new(ck), both))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_and_mismatched_pem() {
        assert!(certified_key_from_pem(b"", b"").is_err());
        let a = rcgen::generate_simple_self_signed(vec!["a".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".into()]).unwrap();
        let ok = certified_key_from_pem(
            a.cert.pem().as_bytes(),
            a.signing_key.serialize_pem().as_bytes(),
        );
        assert!(ok.is_ok(), "{ok:?}");
        let mismatched = certified_key_from_pem(
            a.cert.pem().as_bytes(),
            b.signing_key.serialize_pem().as_bytes(),
        );
        assert!(mismatched.is_err());
    }
}
