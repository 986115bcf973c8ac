//! The real `scorer`, `webhook-frontend` and `observer` binaries of the current build, built at most once per
//! test run.
//!
//! `cargo test -p gpu-admission-tests` does not build other packages' binaries. The first test process of a
//! run that needs them runs `$CARGO build --workspace --bins` with the profile and the
//! target directory of the running test executable (so `CARGO_TARGET_DIR`, `build.target-dir` and
//! `--release` are all honoured), under a file lock in that target directory; it then leaves a marker named
//! after the run (see [`crate::skip::run_id`]) so the other test processes of the same run use the binaries
//! without asking cargo again. `bash .ci/run` builds them up front, which makes that one nested build a
//! no-op (it drops the variables cargo set for the test: [`is_set_by_cargo_for_the_test`]).
//!
//! Environment overrides (e.g. to test release or container-built binaries):
//! `GPU_ADMISSION_SCORER_BIN`, `GPU_ADMISSION_WEBHOOK_BIN`, `GPU_ADMISSION_OBSERVER_BIN`: use these files,
//! build nothing (all three must be set).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Paths of the product binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub scorer: PathBuf,
    pub webhook: PathBuf,
    pub observer: PathBuf,
}

static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();

/// Returns the binaries, building them on the first call of the run. Panics (failing the test) with
/// cargo's output when the build fails.
pub fn binaries() -> &'static Binaries {
    match BINARIES.get_or_init(build) {
        Ok(b) => b,
        Err(e) => panic!("building the product binaries failed:\n{e}"),
    }
}

/// Path of the `scorer` binary.
pub fn scorer() -> &'static Path {
    &binaries().scorer
}

/// Path of the `webhook-frontend` binary.
pub fn webhook() -> &'static Path {
    &binaries().webhook
}

/// Path of the `observer` binary.
pub fn observer() -> &'static Path {
    &binaries().observer
}

/// `<target>/<profile>` of the running executable (`<target>/<profile>/deps/<test>-<hash>` for tests).
pub fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe.parent().ok_or("executable has no parent folder")?;
    let dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().ok_or("deps folder has no parent")?
    } else {
        dir
    };
    Ok(dir.to_path_buf())
}

fn build() -> Result<Binaries, String> {
    if let (Ok(s), Ok(w), Ok(o)) = (
        std::env::var("GPU_ADMISSION_SCORER_BIN"),
        std::env::var("GPU_ADMISSION_WEBHOOK_BIN"),
        std::env::var("GPU_ADMISSION_OBSERVER_BIN"),
    ) {
        return Ok(Binaries {
            scorer: s.into(),
            webhook: w.into(),
            observer: o.into(),
        });
    }
    let profile_dir = profile_dir()?;
    let exe = |name: &str| profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let bins = Binaries {
        scorer: exe("scorer"),
        webhook: exe("webhook-frontend"),
        observer: exe("observer"),
    };

    let lock_path = profile_dir.join(".gpu-admission-testkit.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("creating {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    let marker = crate::skip::run_id()
        .map(|run| profile_dir.join(format!(".gpu-admission-testkit-built-{run}")));
    let built_this_run = marker.as_ref().is_some_and(|m| m.is_file());
    if !(built_this_run
        && [&bins.scorer, &bins.webhook, &bins.observer]
            .iter()
            .all(|p| p.is_file()))
    {
        cargo_build(&profile_dir)?;
        clear_markers(&profile_dir);
        if let Some(m) = &marker {
            let _ = std::fs::write(m, b"");
        }
    }
    drop(lock);
    for p in [&bins.scorer, &bins.webhook, &bins.observer] {
        if !p.is_file() {
            return Err(format!("{} missing after a successful build", p.display()));
        }
    }
    Ok(bins)
}

/// `$CARGO build --workspace --bins` into the target dir and profile of `profile_dir`. The whole workspace, not
/// just the three binaries: cargo unifies dependency features over the packages of one command, so a narrower
/// selection than `.ci/run`'s and `demo.sh`'s own `--workspace --bins` would rebuild shared dependencies.
fn cargo_build(profile_dir: &Path) -> Result<(), String> {
    let mut cmd = cargo_build_command(profile_dir)?;
    let started = std::time::Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("running {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} exited with {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let profile = profile_dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    eprintln!(
        "testkit: scorer + webhook-frontend + observer ({profile}) up to date after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The nested build's command, without the variables cargo set for the running test.
fn cargo_build_command(profile_dir: &Path) -> Result<Command, String> {
    let target_dir = profile_dir.parent().ok_or("profile folder has no parent")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("profile folder name")?;
    let cargo = std::env::var("CARGO")
        .ok()
        .or_else(|| option_env!("CARGO").map(String::from))
        .unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(crate::workspace_root())
        .args(["build", "--workspace", "--bins"])
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_set_by_cargo_for_the_test) {
            cmd.env_remove(name);
        }
    }
    Ok(cmd)
}

/// Variables cargo sets for the test it runs (its package's name, manifest dir, …), not the user's settings.
/// Build scripts watch some of them (ring's says `rerun-if-env-changed=CARGO_PKG_NAME`): a nested build that
/// inherited them rebuilt ring, rustls and every binary above them, and the next plain `cargo build` (the
/// demo's) rebuilt them back, 45 s each on the CI machine.
fn is_set_by_cargo_for_the_test(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// Removes the markers of earlier runs.
fn clear_markers(profile_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(profile_dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(".gpu-admission-testkit-built-")
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_build_does_not_inherit_what_cargo_set_for_the_test() {
        // cargo sets these for every test it runs; the assertion below needs them present to mean anything.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let cmd = cargo_build_command(Path::new("/tmp/target/debug")).unwrap();
        let removed: Vec<_> = cmd
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION", "CARGO_MANIFEST_DIR"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} not removed: {removed:?}"
            );
        }
        for kept in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "PATH",
        ] {
            assert!(!is_set_by_cargo_for_the_test(kept), "{kept}");
        }
        assert!(
            cmd.get_args().any(|a| a == "/tmp/target"),
            "{:?}",
            cmd.get_args().collect::<Vec<_>>()
        );
    }
}
