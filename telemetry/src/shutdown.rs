//! SIGTERM / SIGINT → one shutdown signal every server of a binary waits on, logged once.

use std::future::Future;

use tokio::sync::watch;

/// The process's shutdown request. Clone it freely; every [`Shutdown::wait`] resolves once a signal arrived.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Installs the SIGTERM and SIGINT handlers (from then on these signals no longer end the process at once)
    /// and logs the first one that arrives. Fails only if the OS refuses the handlers. Needs a Tokio runtime.
    pub fn install() -> anyhow::Result<Self> {
        let (tx, rx) = watch::channel(false);
        // Both handlers are registered before this returns: a signal arriving before the task first runs is
        // still caught (`tokio::signal::ctrl_c` would only register when first polled).
        #[cfg(unix)]
        let (mut term, mut int) = {
            use tokio::signal::unix::{SignalKind, signal};
            (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            )
        };
        tokio::spawn(async move {
            #[cfg(unix)]
            let signal = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            #[cfg(not(unix))]
            let signal = {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            };
            tracing::info!(signal, "{signal} received: shutting down");
            let _ = tx.send(true);
            // Keep the sender alive so that receivers never take a closed channel for a signal.
            std::future::pending::<()>().await;
        });
        Ok(Self { rx })
    }

    /// Resolves once a signal arrived (at once if one already did).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }

    /// Whether a signal arrived.
    pub fn requested(&self) -> bool {
        *self.rx.borrow()
    }
}

#[cfg(test)]
mod tests {
    //! The test binary re-runs itself as a child that installs the handlers and waits; the parent sends it a
    //! real SIGTERM or SIGINT.

    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::Shutdown;

    /// The child: what a binary does.
    #[test]
    #[ignore = "child process of a_signal_resolves_every_waiter_once"]
    fn shutdown_child() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let _telemetry = crate::init("shutdown-selftest").unwrap();
            let shutdown = Shutdown::install().unwrap();
            let (first, second) = (shutdown.wait(), shutdown.clone().wait());
            assert!(!shutdown.requested());
            println!("ready");
            tokio::time::timeout(Duration::from_secs(20), async {
                first.await;
                second.await;
            })
            .await
            .expect("signal within 20 s");
            assert!(shutdown.requested());
            // A waiter created after the signal resolves at once.
            shutdown.wait().await;
            println!("stopped");
        });
    }

    fn signal_child(signal: &str) -> String {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shutdown::tests::shutdown_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RUST_LOG", "info")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("ready") {
            line.clear();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "child ended before it was ready"
            );
        }
        let kill = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "child failed: {rest}\n{stderr}");
        assert!(rest.contains("stopped"), "{rest}\n{stderr}");
        stderr
    }

    #[test]
    fn a_signal_resolves_every_waiter_once() {
        for signal in ["TERM", "INT"] {
            let stderr = signal_child(signal);
            let logged = format!("SIG{signal} received: shutting down");
            assert_eq!(stderr.matches(&logged).count(), 1, "{stderr}");
        }
    }
}
