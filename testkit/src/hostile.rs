//! Hostile peers on a webhook port, shared by the frontend's process-level test
//! (`webhook-frontend/tests/hostile.rs`) and the control-plane one (`tests/tests/cluster_hostile.rs`): a
//! request that declares the body limit and sends `sent` bytes of it, then nothing, renewed as soon as it is
//! answered; what the attackers were answered is counted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The declared length of every attacking request: the frontend's body limit.
pub const DECLARED: usize = 25_165_824;

/// A TLS connector trusting only `ca` (PEM), speaking HTTP/1.1.
pub fn connector(ca: &Path) -> TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).expect("the webhook's CA bundle");
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a CA certificate");
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// What the attackers saw.
#[derive(Default)]
pub struct AttackCounts {
    pub requests: AtomicUsize,
    pub timeouts_408: AtomicUsize,
    pub shed_503: AtomicUsize,
    pub other: AtomicUsize,
}

impl AttackCounts {
    /// (answered 408, answered 503, answered otherwise).
    pub fn answers(&self) -> (usize, usize, usize) {
        (
            self.timeouts_408.load(Ordering::Relaxed),
            self.shed_503.load(Ordering::Relaxed),
            self.other.load(Ordering::Relaxed),
        )
    }
}

/// One attacker on `addr` (TLS trusting `ca`), renewed until `stop`: `POST /validate-pod` declaring
/// [`DECLARED`] bytes that sends `sent` bytes of the body and then nothing; the status it gets back is
/// counted.
pub async fn attacker(
    addr: SocketAddr,
    ca: PathBuf,
    sent: usize,
    stop: Arc<AtomicBool>,
    counts: Arc<AttackCounts>,
) {
    let connector = connector(&ca);
    let junk = vec![b' '; sent];
    while !stop.load(Ordering::Relaxed) {
        let Ok(tcp) = TcpStream::connect(addr).await else {
            continue;
        };
        let name = ServerName::try_from("localhost").expect("a server name");
        let Ok(mut tls) = connector.connect(name, tcp).await else {
            continue;
        };
        let head = format!(
            "POST /validate-pod?timeout=10s HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {DECLARED}\r\n\r\n"
        );
        if tls.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        counts.requests.fetch_add(1, Ordering::Relaxed);
        // Send part of the body, then stall; a shed request may stop reading early, so it never blocks.
        let _ = tokio::time::timeout(Duration::from_secs(5), tls.write_all(&junk)).await;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_secs(30), tls.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
            if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&answer);
        let counter = if text.starts_with("HTTP/1.1 408") {
            &counts.timeouts_408
        } else if text.starts_with("HTTP/1.1 503") {
            &counts.shed_503
        } else {
            &counts.other
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
