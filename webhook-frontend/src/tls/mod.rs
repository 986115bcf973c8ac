//! TLS for the webhook port: certificates from files (the Secret-mount layout `tls.crt` + `tls.key`),
//! hot-reloaded when they change, a generated dev CA + serving certificate (`--tls=self-signed`), or
//! certificates the frontend keeps in a Secret itself (`--tls=auto`: `auto_plan` decides, `auto_rotate`
//! talks to the API).

pub(crate) mod auto_plan;
pub(crate) mod auto_rotate;
pub(crate) mod certs;
pub(crate) mod reload;
pub(crate) mod self_signed;

use std::sync::Arc;

use rustls::ServerConfig;

/// ALPN protocols offered, best first.
pub(crate) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A rustls server config: TLS 1.3 and 1.2 only, ALPN h2 + http/1.1, certificate from `resolver`. With
/// `client_ca`, a client certificate is asked for and, when presented, must chain to that bundle (a
/// connection without one is accepted: the webhook paths refuse it, the probes' paths do not need one).
pub(crate) fn server_config(
    resolver: Arc<reload::ReloadingCertResolver>,
    client_ca: Option<&std::path::Path>,
) -> anyhow::Result<Arc<ServerConfig>> {
    use anyhow::Context;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading --client-ca-file {}", path.display()))?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                roots.add(cert.with_context(|| format!("parsing {}", path.display()))?)?;
            }
            anyhow::ensure!(
                !roots.is_empty(),
                "--client-ca-file {}: no certificate",
                path.display()
            );
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
