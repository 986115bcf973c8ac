//! HTTPS client of `POST /mutate-pod`: hyper 1 client connections over tokio-rustls, verified against the
//! CA bundle, kept alive, one per worker; the answer is classified from the AdmissionReview response.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{ErrorKind, Outcome};
use crate::cli::HttpVersion;
use crate::workload::{ReviewTemplate, UID_LEN, write_uid};

/// Where and how to reach the webhook; shared by all workers.
pub struct WebhookTarget {
    addr: SocketAddr,
    server_name: ServerName<'static>,
    /// `https://host:port/mutate-pod?timeout=10s` (h2 takes the absolute form).
    uri: Uri,
    /// `host:port` for the HTTP/1.1 Host header.
    authority: String,
    /// `/mutate-pod?timeout=10s` for HTTP/1.1.
    path: Uri,
    connector: TlsConnector,
    http: HttpVersion,
    reviews: Vec<ReviewTemplate>,
    /// Distinguishes this loadgen run's uids from another's.
    run_id: u32,
}

impl WebhookTarget {
    /// `url` like `https://127.0.0.1:8443/mutate-pod`; the apiserver's `?timeout=10s` is added if absent.
    pub async fn new(
        url: &str,
        ca: &Path,
        http: HttpVersion,
        reviews: Vec<ReviewTemplate>,
        run_id: u32,
    ) -> Result<Self> {
        let mut url = url.to_string();
        if !url.contains("timeout=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("timeout=10s");
        }
        let uri: Uri = url
            .parse()
            .with_context(|| format!("bad webhook URL {url}"))?;
        anyhow::ensure!(
            uri.scheme_str() == Some("https"),
            "the webhook URL must be https://"
        );
        let host = uri
            .host()
            .context("webhook URL without host")?
            .trim_matches(['[', ']'])
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await?
            .next()
            .with_context(|| format!("cannot resolve {host}"))?;
        let alpn: &[u8] = match http {
            HttpVersion::Http1 => b"http/1.1",
            HttpVersion::H2 => b"h2",
        };
        let connector = TlsConnector::from(crate::tls::client_config(ca, alpn)?);
        let authority = uri
            .authority()
            .context("webhook URL without authority")?
            .to_string();
        let path: Uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse()?;
        Ok(Self {
            addr,
            server_name: ServerName::try_from(host)?,
            uri,
            authority,
            path,
            connector,
            http,
            reviews,
            run_id,
        })
    }
}

impl WebhookTarget {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A TLS connection (CA-verified) on which no HTTP is spoken: an idle client.
    pub async fn connect_tls_only(&self) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        Ok(self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await?)
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One keep-alive connection; reconnects (counted as an error of the failed request) when it breaks.
pub struct Conn {
    target: Arc<WebhookTarget>,
    sender: Option<Sender>,
    uid: [u8; UID_LEN],
}

impl Conn {
    pub async fn open(target: Arc<WebhookTarget>) -> Result<Self> {
        let sender = Some(connect(&target).await?);
        Ok(Self {
            target,
            sender,
            uid: [0; UID_LEN],
        })
    }

    pub async fn call(&mut self, seq: u64) -> Outcome {
        self.call_with_reason(seq).await.0
    }

    /// Like [`Conn::call`], with the reason of a pass-through as the frontend's warning states it.
    pub async fn call_with_reason(&mut self, seq: u64) -> (Outcome, Option<PassReason>) {
        let t = &self.target;
        write_uid(&mut self.uid, t.run_id, seq);
        let body = t.reviews[(seq % t.reviews.len() as u64) as usize].body(&self.uid);
        match self.send(body).await {
            Ok((status, _)) if status != http::StatusCode::OK => {
                (Outcome::Error(ErrorKind::HttpStatus), None)
            }
            Ok((_, bytes)) => {
                let outcome = classify(&bytes, &self.uid);
                let reason = (outcome == Outcome::PassedThrough)
                    .then(|| pass_through_reason(&bytes))
                    .flatten();
                (outcome, reason)
            }
            Err(kind) => (Outcome::Error(kind), None),
        }
    }

    /// Another handle on the same HTTP/2 connection (streams multiplexed on it); `None` for HTTP/1.1 or
    /// when the connection is gone.
    pub fn share_h2(&self) -> Option<Conn> {
        match &self.sender {
            Some(Sender::H2(s)) => Some(Conn {
                target: self.target.clone(),
                sender: Some(Sender::H2(s.clone())),
                uid: [0; UID_LEN],
            }),
            _ => None,
        }
    }

    /// POSTs one AdmissionReview body and returns the status and the whole answer. A broken connection is
    /// dropped (the next call reconnects).
    pub async fn send(&mut self, body: Bytes) -> Result<(http::StatusCode, Bytes), ErrorKind> {
        let t = &self.target;
        let sender = match &mut self.sender {
            Some(s) => s,
            None => match connect(t).await {
                Ok(s) => self.sender.insert(s),
                Err(_) => return Err(ErrorKind::Connect),
            },
        };
        let result = match sender {
            Sender::H1(s) => {
                let req = Request::post(t.path.clone())
                    .header(header::HOST, t.authority.as_str())
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::ACCEPT, "application/json")
                    .body(Full::new(body))
                    .expect("static request parts are valid");
                match s.ready().await {
                    Ok(()) => s.send_request(req).await,
                    Err(e) => Err(e),
                }
            }
            Sender::H2(s) => {
                let req = Request::post(t.uri.clone())
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::ACCEPT, "application/json")
                    .body(Full::new(body))
                    .expect("static request parts are valid");
                match s.ready().await {
                    Ok(()) => s.send_request(req).await,
                    Err(e) => Err(e),
                }
            }
        };
        let resp = match result {
            Ok(r) => r,
            Err(_) => {
                self.sender = None;
                return Err(ErrorKind::Transport);
            }
        };
        let status = resp.status();
        match resp.into_body().collect().await {
            Ok(b) => Ok((status, b.to_bytes())),
            Err(_) => {
                self.sender = None;
                Err(ErrorKind::Transport)
            }
        }
    }
}

async fn connect(t: &WebhookTarget) -> Result<Sender> {
    let tcp = TcpStream::connect(t.addr).await?;
    tcp.set_nodelay(true)?;
    let tls = t.connector.connect(t.server_name.clone(), tcp).await?;
    let io = TokioIo::new(tls);
    Ok(match t.http {
        HttpVersion::Http1 => {
            let (sender, conn) = http1::handshake(io).await?;
            tokio::spawn(conn);
            Sender::H1(sender)
        }
        HttpVersion::H2 => {
            let (sender, conn) = http2::handshake(TokioExecutor::new(), io).await?;
            tokio::spawn(conn);
            Sender::H2(sender)
        }
    })
}

#[derive(serde::Deserialize)]
struct ReviewOut<'a> {
    #[serde(borrow)]
    response: Option<ResponseOut<'a>>,
}

#[derive(serde::Deserialize)]
struct ResponseOut<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    allowed: bool,
    #[serde(default, borrow)]
    patch: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    warnings: Option<Vec<Cow<'a, str>>>,
}

/// Reads what the webhook decided: patch present → mutated; no patch and a warning about the scorer /
/// pass-through → passed through; no patch otherwise → skipped. A wrong uid or allowed:false is an error.
pub fn classify(body: &[u8], uid: &[u8]) -> Outcome {
    let Ok(review) = serde_json::from_slice::<ReviewOut>(body) else {
        return Outcome::Error(ErrorKind::BadResponse);
    };
    let Some(resp) = review.response else {
        return Outcome::Error(ErrorKind::BadResponse);
    };
    if resp.uid.as_bytes() != uid {
        return Outcome::Error(ErrorKind::BadResponse);
    }
    if !resp.allowed {
        return Outcome::Error(ErrorKind::Rejected);
    }
    if resp.patch.as_deref().is_some_and(|p| !p.is_empty()) {
        return Outcome::Mutated;
    }
    if resp
        .warnings
        .iter()
        .flatten()
        .any(|w| is_pass_through_warning(w))
    {
        return Outcome::PassedThrough;
    }
    Outcome::Skipped
}

/// Why the frontend passed a Pod through, from its warning `gpu-admission: scorer <reason> (...)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PassReason {
    /// "timed out": no answer within the deadline.
    Timeout,
    /// "unavailable": no connection, refused, reset, GOAWAY.
    Unavailable,
    /// "answered invalidly".
    Invalid,
    /// "overloaded": the frontend's bound on scorer calls in flight was reached.
    Overloaded,
    /// A pass-through warning in other words.
    Other,
}

impl PassReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PassReason::Timeout => "timeout",
            PassReason::Unavailable => "unavailable",
            PassReason::Invalid => "invalid",
            PassReason::Overloaded => "overloaded",
            PassReason::Other => "other",
        }
    }
}

/// The reason of a pass-through answer (`None` when the answer has no pass-through warning).
pub fn pass_through_reason(body: &[u8]) -> Option<PassReason> {
    let review = serde_json::from_slice::<ReviewOut>(body).ok()?;
    let warnings = review.response?.warnings?;
    let w = warnings.iter().find(|w| is_pass_through_warning(w))?;
    let w = w.to_ascii_lowercase();
    Some(if w.contains("scorer timed out") {
        PassReason::Timeout
    } else if w.contains("scorer unavailable") {
        PassReason::Unavailable
    } else if w.contains("scorer answered invalidly") {
        PassReason::Invalid
    } else if w.contains("scorer overloaded") {
        PassReason::Overloaded
    } else {
        PassReason::Other
    })
}

/// Whether a warning reports that the scorer could not be used, so the Pod was admitted unchanged.
/// The frontend writes `gpu-admission: scorer timed out|unavailable|answered invalidly (...); Pod admitted
/// unchanged` (webhook-frontend/src/admission/handler.rs); "pass-through" wordings are accepted too.
fn is_pass_through_warning(w: &str) -> bool {
    let w = w.to_ascii_lowercase();
    (w.contains("scorer") && w.contains("admitted unchanged"))
        || ["pass-through", "passthrough", "passed through"]
            .iter()
            .any(|k| w.contains(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &[u8] = b"0000abcd-0000-4000-8000-00000000004d";

    fn review(resp: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{resp}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn classifies_webhook_answers() {
        let uid = std::str::from_utf8(UID).unwrap();
        let mutated = review(&format!(
            r#"{{"uid":"{uid}","allowed":true,"patchType":"JSONPatch","patch":"W10="}}"#
        ));
        assert_eq!(classify(&mutated, UID), Outcome::Mutated);
        let passed = review(&format!(
            r#"{{"uid":"{uid}","allowed":true,"warnings":["gpu-admission: scorer timed out (no answer within 200 ms); Pod admitted unchanged"]}}"#
        ));
        assert_eq!(classify(&passed, UID), Outcome::PassedThrough);
        assert_eq!(pass_through_reason(&passed), Some(PassReason::Timeout));
        let overloaded = review(&format!(
            r#"{{"uid":"{uid}","allowed":true,"warnings":["gpu-admission: scorer overloaded (1024 scorer calls already in flight); Pod admitted unchanged"]}}"#
        ));
        assert_eq!(
            pass_through_reason(&overloaded),
            Some(PassReason::Overloaded)
        );
        let unavailable = review(&format!(
            r#"{{"uid":"{uid}","allowed":true,"warnings":["gpu-admission: scorer unavailable (Unknown: transport error); Pod admitted unchanged"]}}"#
        ));
        assert_eq!(
            pass_through_reason(&unavailable),
            Some(PassReason::Unavailable)
        );
        let skipped = review(&format!(r#"{{"uid":"{uid}","allowed":true}}"#));
        assert_eq!(pass_through_reason(&skipped), None);
        assert_eq!(classify(&skipped, UID), Outcome::Skipped);
        let skipped_with_warning = review(&format!(
            r#"{{"uid":"{uid}","allowed":true,"warnings":["gpu-admission: ignored annotation gpu.mem.gi=\"lots\""]}}"#
        ));
        assert_eq!(classify(&skipped_with_warning, UID), Outcome::Skipped);
        let rejected = review(&format!(r#"{{"uid":"{uid}","allowed":false}}"#));
        assert_eq!(
            classify(&rejected, UID),
            Outcome::Error(ErrorKind::Rejected)
        );
        let other_uid = review(r#"{"uid":"someone-else","allowed":true}"#);
        assert_eq!(
            classify(&other_uid, UID),
            Outcome::Error(ErrorKind::BadResponse)
        );
        assert_eq!(
            classify(b"not json", UID),
            Outcome::Error(ErrorKind::BadResponse)
        );
        assert_eq!(classify(b"{}", UID), Outcome::Error(ErrorKind::BadResponse));
    }
}
