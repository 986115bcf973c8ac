//! An HTTPS client that trusts ONLY one CA bundle (the webhook's `ca.crt`), like the kube-apiserver does
//! with a webhook's `caBundle`: a server certificate not signed by that CA, or without the dialled host in
//! its SANs, fails the handshake.
//!
//! One TCP + TLS connection per request (HTTP/1.1 by default, or HTTP/2 via ALPN with
//! [`HttpsClient::http2`]), which is what the apiserver's first call to a webhook looks like; or one
//! [`Connection`] for several requests ([`HttpsClient::connect`]).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A response: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body parsed as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "response body is not JSON (status {}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// HTTPS client for one server address.
#[derive(Clone)]
pub struct HttpsClient {
    addr: SocketAddr,
    server_name: ServerName<'static>,
    tls: TlsConnector,
    http2: bool,
    timeout: Duration,
}

impl HttpsClient {
    /// A client for `addr` trusting only the PEM certificates in `ca_pem`; the TLS server name is the IP.
    pub fn new(addr: SocketAddr, ca_pem: &Path) -> anyhow::Result<Self> {
        let pem = std::fs::read(ca_pem).with_context(|| format!("reading {}", ca_pem.display()))?;
        Self::from_ca_pem(addr, &pem)
    }

    /// Like [`HttpsClient::new`] with the CA bundle in memory.
    pub fn from_ca_pem(addr: SocketAddr, ca_pem: &[u8]) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(cert.context("parsing CA PEM")?)?;
            n += 1;
        }
        if n == 0 {
            bail!("no certificate in the CA bundle");
        }
        Ok(Self::with_roots(addr, roots, false))
    }

    fn with_roots(addr: SocketAddr, roots: rustls::RootCertStore, http2: bool) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Self {
            addr,
            server_name: ServerName::IpAddress(addr.ip().into()),
            tls: TlsConnector::from(Arc::new(config)),
            http2,
            timeout: Duration::from_secs(10),
        }
    }

    /// Dial a DNS name (e.g. `localhost`) instead of the IP for SNI and certificate verification.
    pub fn server_name(mut self, name: &str) -> anyhow::Result<Self> {
        self.server_name = ServerName::try_from(name.to_string())?;
        Ok(self)
    }

    /// Negotiate HTTP/2 (ALPN `h2`) instead of HTTP/1.1.
    pub fn http2(mut self, on: bool) -> Self {
        let mut config = (*self.tls.config().clone()).clone();
        config.alpn_protocols = if on {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        self.tls = TlsConnector::from(Arc::new(config));
        self.http2 = on;
        self
    }

    /// Whole-request timeout (default 10 s).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The server address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> anyhow::Result<Response> {
        self.send(http::Method::GET, path, None, Bytes::new()).await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<Response> {
        self.post(path, "application/json", serde_json::to_vec(body)?.into())
            .await
    }

    /// `POST path` with any body and content type.
    pub async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> anyhow::Result<Response> {
        self.send(http::Method::POST, path, Some(content_type), body)
            .await
    }

    /// One request on a fresh connection.
    pub async fn send(
        &self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Response> {
        tokio::time::timeout(
            self.timeout,
            self.send_inner(method, path, content_type, body),
        )
        .await
        .with_context(|| {
            format!(
                "HTTPS request to {}{path} timed out after {:?}",
                self.addr, self.timeout
            )
        })?
    }

    async fn send_inner(
        &self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Response> {
        self.connect()
            .await?
            .send(method, path, content_type, body)
            .await
    }

    /// Offers these ALPN protocols in this order (e.g. `["h2", "http/1.1"]`, as the apiserver's Go client
    /// does); the server picks one, see [`Connection::alpn`].
    pub fn alpn(mut self, protocols: &[&str]) -> Self {
        let mut config = (*self.tls.config().clone()).clone();
        config.alpn_protocols = protocols.iter().map(|p| p.as_bytes().to_vec()).collect();
        self.tls = TlsConnector::from(Arc::new(config));
        self
    }

    /// Opens one TCP + TLS connection for several requests (HTTP/2 when `h2` was negotiated).
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        let tcp = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connecting to {}", self.addr))?;
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .with_context(|| format!("TLS handshake with {}", self.addr))?;
        let (_, session) = tls.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let server_cert = session
            .peer_certificates()
            .and_then(|c| c.first())
            .context("the server sent no certificate")?
            .clone()
            .into_owned();
        let io = hyper_util::rt::TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(b"h2") {
            let (sender, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await?;
            tokio::spawn(conn);
            Sender::H2(sender)
        } else {
            let (sender, conn) = hyper::client::conn::http1::handshake(io).await?;
            tokio::spawn(conn);
            Sender::H1(sender)
        };
        Ok(Connection {
            sender,
            alpn,
            server_cert,
            authority: self.addr.to_string(),
        })
    }
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// One open HTTPS connection ([`HttpsClient::connect`]).
pub struct Connection {
    sender: Sender,
    /// The negotiated ALPN protocol (`h2`, `http/1.1`), if any.
    pub alpn: Option<Vec<u8>>,
    /// The certificate the server presented.
    pub server_cert: CertificateDer<'static>,
    authority: String,
}

impl Connection {
    /// One request on this connection. A connection the server closed is an `Err` (e.g. after a 413 sent
    /// before the whole body was read, which HTTP/1.1 allows).
    pub async fn send(
        &mut self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Response> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header(http::header::ACCEPT, "application/json");
        if matches!(self.sender, Sender::H1(_)) {
            req = req.header(http::header::HOST, &self.authority);
        }
        if let Some(ct) = content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let req = req.body(Full::new(body))?;
        let resp = match &mut self.sender {
            Sender::H2(s) => s.send_request(req).await?,
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// `GET http://addr/path` over plain HTTP/1.1 (admin ports: `/metrics`, `/healthz`); the body as text.
/// Fails on a non-2xx status.
pub async fn http_get_text(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let r = http_get(addr, path).await?;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    if !r.status.is_success() {
        bail!("GET {addr}{path} answered {}: {text}", r.status);
    }
    Ok(text)
}

/// `GET http://addr/path` over plain HTTP/1.1: status, headers and body, whatever the status.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<Response> {
    let fut = async {
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let req = http::Request::get(format!("http://{addr}{path}"))
            .header(http::header::HOST, addr.to_string())
            .body(Full::new(Bytes::new()))?;
        let resp = sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        anyhow::Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .with_context(|| format!("GET {addr}{path} timed out"))?
}
