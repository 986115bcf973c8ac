//! What every binary's `main` does around its own work: build the Tokio runtime, install telemetry, run, and
//! turn the outcome into an exit code with the error reported once.

use std::future::Future;
use std::process::ExitCode;

/// A service binary's start-up: `Service::new("scorer").run(run(cli))`.
#[derive(Debug, Clone, Copy)]
pub struct Service {
    name: &'static str,
    worker_threads_env: Option<&'static str>,
}

impl Service {
    /// `name` is the default `service.name` of exported spans and the prefix of start-up errors.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            worker_threads_env: None,
        }
    }

    /// Reads the number of Tokio worker threads from environment variable `var` (unset or empty: one per
    /// core; `1`: a current-thread runtime, which saves cross-thread wake-ups on a small shared machine).
    pub fn worker_threads_env(mut self, var: &'static str) -> Self {
        self.worker_threads_env = Some(var);
        self
    }

    /// Builds the runtime, installs telemetry (kept until `main` has finished), runs `main` on the runtime and
    /// returns its exit code; a failure is logged and printed to stderr, once.
    pub fn run(self, main: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
        let name = self.name;
        let runtime = match self.runtime() {
            Ok(runtime) => runtime,
            Err(err) => {
                eprintln!("{name}: error: {err}");
                return ExitCode::FAILURE;
            }
        };
        runtime.block_on(async move {
            let _telemetry = match crate::init(name) {
                Ok(guard) => guard,
                Err(err) => {
                    eprintln!("{name}: telemetry set-up failed: {err:#}");
                    return ExitCode::FAILURE;
                }
            };
            match main.await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(error = %format!("{err:#}"), "{name} failed");
                    eprintln!("{name}: error: {err:#}");
                    ExitCode::FAILURE
                }
            }
        })
    }

    fn runtime(&self) -> Result<tokio::runtime::Runtime, String> {
        let threads = match self.worker_threads_env {
            Some(var) => worker_threads(var, std::env::var(var))?,
            None => None,
        };
        let mut builder = match threads {
            Some(1) => tokio::runtime::Builder::new_current_thread(),
            Some(n) => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(n);
                builder
            }
            None => tokio::runtime::Builder::new_multi_thread(),
        };
        builder
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))
    }
}

/// The worker threads asked for in `var` (whose value is `value`): `None` = the default, one per core.
fn worker_threads(
    var: &str,
    value: Result<String, std::env::VarError>,
) -> Result<Option<usize>, String> {
    match value {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!("{var}={v:?}: expected a number of threads ≥ 1")),
        },
        Err(e) => Err(format!("{var}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::env::VarError;

    use super::worker_threads;

    #[test]
    fn worker_threads_from_the_environment() {
        let var = "X_WORKER_THREADS";
        assert_eq!(worker_threads(var, Err(VarError::NotPresent)), Ok(None));
        assert_eq!(worker_threads(var, Ok(" ".into())), Ok(None));
        assert_eq!(worker_threads(var, Ok(" 3 ".into())), Ok(Some(3)));
        assert_eq!(worker_threads(var, Ok("1".into())), Ok(Some(1)));
        for bad in ["0", "-1", "two"] {
            let err = worker_threads(var, Ok(bad.into())).unwrap_err();
            assert!(
                err.starts_with("X_WORKER_THREADS=") && err.contains("≥ 1"),
                "{err}"
            );
        }
    }
}
