//! What the tests run from other projects' Go modules (the control plane, Jaeger, Kueue) comes from one build
//! script each (`tests/cluster/build.sh`, `tests/peers/*.sh`: cached outside the clone, so instant once
//! built) that prints what it built on its last line. One way to run them: an environment variable naming a
//! prebuilt path wins; a machine that cannot build is a SKIP, a failure when `CI` is set.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;

/// One build script and how to tell that it worked.
pub struct Script<'a> {
    /// The variable naming a prebuilt path instead (`GPU_ADMISSION_K8S_BIN`, …).
    pub prebuilt_env: &'a str,
    /// The script, relative to the workspace root.
    pub script: &'a str,
    /// What it builds, for messages ("the control plane", "Jaeger", …).
    pub what: &'a str,
    /// The suite that is skipped without it.
    pub suite: &'a str,
    /// Whether the printed path holds what it should.
    pub built: fn(&Path) -> bool,
}

/// The path the script printed, building if needed. `Ok(None)` = skip (not in CI, cannot build here).
pub fn run(s: &Script<'_>) -> anyhow::Result<Option<PathBuf>> {
    if let Some(path) = std::env::var_os(s.prebuilt_env) {
        return Ok(Some(path.into()));
    }
    let script = crate::workspace_root().join(s.script);
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().map(str::trim).unwrap_or("");
    if out.status.success() && (s.built)(Path::new(path)) {
        if started.elapsed().as_secs() > 5 {
            eprintln!(
                "{}: built in {:.0}s",
                s.what,
                started.elapsed().as_secs_f64()
            );
        }
        return Ok(Some(path.into()));
    }
    crate::skip::skip(
        s.suite,
        &format!(
            "this machine cannot build {}: {} failed ({}):\n{stdout}\n{}",
            s.what,
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    );
    Ok(None)
}
