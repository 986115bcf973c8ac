//! TLS for the webhook port: certificates from files (the Secret-mount layout `tls.crt` + `tls.key`),
//! hot-reloaded when they change, a generated dev CA + serving certificate (`--self-signed DIR`), or
//! certificates the frontend keeps in a Secret itself (`--auto-tls-secret`: `auto_plan` decides, `auto_rotate`
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

/// A rustls server config: TLS 1.3 and 1.2 only, ALPN h2 + http/1.1, certificate from `resolver`.
pub(crate) fn server_config(
    resolver: Arc<reload::ReloadingCertResolver>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
