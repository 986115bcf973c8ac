//! SIGTERM / SIGINT → a shutdown signal every server waits on.

use tokio::sync::watch;

#[derive(Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Installs the signal handlers (fails only if the OS refuses them).
    pub fn install() -> anyhow::Result<Self> {
        let (tx, rx) = watch::channel(false);
        #[cfg(unix)]
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            #[cfg(unix)]
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: draining"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            let _ = tx.send(true);
            // Keep the sender alive so receivers never see a closed channel as a signal.
            std::future::pending::<()>().await;
        });
        Ok(Self { rx })
    }

    /// Resolves once a signal arrived.
    pub fn wait(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}
