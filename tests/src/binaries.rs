//! Builds the real `scorer` and `webhook-frontend` binaries once per test process.
//!
//! `cargo test -p gpu-admission-tests` does not build other packages' binaries, so the first call runs
//! `$CARGO build -p scorer -p webhook-frontend --bins` with the same profile and target directory as the
//! running test executable, then returns paths inside `target/<profile>/`. The build result (or its error)
//! is memoised in a [`OnceLock`], so every test in the process shares one build.
//!
//! Environment overrides (e.g. to test release or container-built binaries):
//! - `GPU_ADMISSION_SCORER_BIN`, `GPU_ADMISSION_WEBHOOK_BIN`: use these files, build nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Paths of the two product binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub scorer: PathBuf,
    pub webhook: PathBuf,
}

static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();

/// Returns the binaries, building them on the first call. Panics (failing the test) with cargo's output
/// when the build fails.
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

/// `target/<profile>` of the running test executable (`target/<profile>/deps/<test>-<hash>`).
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let deps = exe.parent().ok_or("test executable has no parent folder")?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().ok_or("deps folder has no parent")?
    } else {
        deps
    };
    Ok(dir.to_path_buf())
}

fn build() -> Result<Binaries, String> {
    if let (Ok(s), Ok(w)) = (
        std::env::var("GPU_ADMISSION_SCORER_BIN"),
        std::env::var("GPU_ADMISSION_WEBHOOK_BIN"),
    ) {
        return Ok(Binaries {
            scorer: s.into(),
            webhook: w.into(),
        });
    }
    let profile_dir = profile_dir()?;
    let target_dir = profile_dir
        .parent()
        .ok_or("profile folder has no parent")?
        .to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("profile folder name")?
        .to_string();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("workspace root")?
        .to_path_buf();

    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&workspace)
        .args(["build", "-p", "scorer", "-p", "webhook-frontend", "--bins"])
        .arg("--target-dir")
        .arg(&target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let started = std::time::Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("running {}: {e}", env!("CARGO")))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} exited with {}:\n{}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!(
        "harness: built scorer + webhook-frontend ({profile}) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let exe = |name: &str| {
        let p = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{} missing after a successful build", p.display()))
        }
    };
    Ok(Binaries {
        scorer: exe("scorer")?,
        webhook: exe("webhook-frontend")?,
    })
}
