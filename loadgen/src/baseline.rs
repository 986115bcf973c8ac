//! The physical limit to compare with: a do-nothing admission endpoint (rustls + axum, same TLS set-up as
//! the frontend: a generated CA and serving certificate, ALPN h2 and http/1.1). It reads the review's uid
//! and answers `allowed: true` with it, nothing else. `--baseline` runs it as a child process
//! (`loadgen baseline-server`) so that it is measured exactly like the frontend.

use std::borrow::Cow;

use anyhow::Result;
use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cli::BaselineServerArgs;

/// Serves until killed. Multi-threaded runtime with one worker per core, like a default `#[tokio::main]`.
pub fn serve(args: BaselineServerArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let acceptor = TlsAcceptor::from(crate::tls::self_signed_server(&args.self_signed)?);
        let listener = TcpListener::bind(args.listen).await?;
        eprintln!(
            "loadgen baseline-server listening on {}",
            listener.local_addr()?
        );
        let app = router();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                    .await;
            });
        }
    })
}

fn router() -> Router {
    Router::new()
        .route("/mutate-pod", post(admit))
        .route("/healthz", get(|| async { "ok" }))
}

#[derive(serde::Deserialize)]
struct ReviewIn<'a> {
    #[serde(borrow, rename = "apiVersion")]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

#[derive(serde::Deserialize)]
struct RequestIn<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
}

/// Allows everything: `{"response": {"uid": <uid>, "allowed": true}}`.
async fn admit(body: Bytes) -> Response {
    match serde_json::from_slice::<ReviewIn>(&body) {
        Ok(ReviewIn {
            api_version,
            request: Some(req),
        }) => {
            let out = serde_json::json!({
                "apiVersion": api_version.as_deref().unwrap_or("admission.k8s.io/v1"),
                "kind": "AdmissionReview",
                "response": {"uid": req.uid, "allowed": true}
            });
            (
                [(header::CONTENT_TYPE, "application/json")],
                out.to_string(),
            )
                .into_response()
        }
        _ => (StatusCode::BAD_REQUEST, "not an AdmissionReview").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn allows_with_the_uid_and_nothing_else() {
        let resp = admit(Bytes::from_static(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","object":{"kind":"Pod"}}}"#,
        ))
        .await;
        assert_eq!(resp.status(), StatusCode::OK);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["response"],
            serde_json::json!({"uid": "u-1", "allowed": true})
        );
        let bad = admit(Bytes::from_static(b"{}")).await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }
}
