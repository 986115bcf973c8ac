//! A rustls certificate resolver whose key is swapped when `tls.crt`/`tls.key` change on disk.
//!
//! A Kubernetes Secret update replaces the `..data` symlink atomically, so the files are polled (by content
//! hash, through the symlinks) every few seconds. A new handshake picks the new certificate; established
//! connections keep theirs and are never dropped. A broken pair (e.g. certificate written, key not yet) is
//! logged and counted, and the previous certificate stays in use until a good pair appears.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

use super::certs;
use crate::metrics::{Metrics, ReloadResult};

pub(crate) struct ReloadingCertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for ReloadingCertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCertResolver")
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ReloadingCertResolver {
    pub(crate) fn new(initial: Arc<CertifiedKey>) -> Self {
        Self {
            current: RwLock::new(initial),
        }
    }

    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Serves `key` to every new handshake (established connections keep theirs).
    pub(crate) fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
    }
}

/// The certificate files being served.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Loads the files once (an error here is fatal at start-up) and returns the resolver plus the content hash.
pub(crate) fn load_initial(
    files: &CertFiles,
) -> anyhow::Result<(Arc<ReloadingCertResolver>, [u8; 32])> {
    let (key, bytes) = certs::load(&files.cert, &files.key)?;
    Ok((
        Arc::new(ReloadingCertResolver::new(key)),
        Sha256::digest(&bytes).into(),
    ))
}

/// Polls the files every `interval` and swaps the resolver's key when their content changes. Runs until the
/// task is dropped.
pub(crate) async fn watch(
    resolver: Arc<ReloadingCertResolver>,
    files: CertFiles,
    mut last_hash: [u8; 32],
    interval: Duration,
    metrics: Arc<Metrics>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (cert, key) = (files.cert.clone(), files.key.clone());
        let read = tokio::task::spawn_blocking(move || {
            let mut bytes = std::fs::read(&cert)?;
            bytes.extend(std::fs::read(&key)?);
            Ok::<_, std::io::Error>(bytes)
        })
        .await;
        let bytes = match read {
            Ok(Ok(b)) => b,
            Ok(Err(err)) => {
                tracing::debug!(%err, "certificate files not readable right now");
                continue;
            }
            Err(_) => continue,
        };
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        if hash == last_hash {
            continue;
        }
        last_hash = hash;
        match certs::load(&files.cert, &files.key) {
            Ok((new_key, _)) => {
                resolver.set(new_key);
                metrics.record_tls_reload(ReloadResult::ok);
                tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
            }
            Err(err) => {
                metrics.record_tls_reload(ReloadResult::error);
                tracing::warn!(error = %format!("{err:#}"), "certificate files changed but cannot be loaded; keeping the previous certificate");
            }
        }
    }
}
