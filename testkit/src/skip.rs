//! How a suite says it cannot run on this machine.
//!
//! Outside CI a missing tool or the missing external corpus is a SKIP: one line on stderr, written past the
//! test harness's output capture so it shows in a plain `cargo test`, and printed once per test run (not
//! once per test process). With `CI` set, every SKIP is a failure instead: CI installs everything, so a
//! skipped suite there is a broken set-up.

use std::io::Write as _;
use std::path::PathBuf;

/// Whether `CI` is set (to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Skips `what` because of `reason`: panics under CI, else prints `SKIP what: reason` once per test run.
/// The caller returns right after.
pub fn skip(what: &str, reason: &str) {
    assert!(
        !in_ci(),
        "CI is set, so {what} must run, but it would be skipped: {reason}"
    );
    if first_time_this_run(&format!("{what}: {reason}")) {
        let _ = writeln!(std::io::stderr(), "SKIP {what}: {reason}");
    }
}

/// Whether `program` can be run (found on PATH, or a path that exists); SKIPs `what` when not.
pub fn require_tool(program: &str, what: &str, install: &str) -> bool {
    let found = std::process::Command::new(program)
        .arg("--help")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip(what, &format!("`{program}` is not installed ({install})"));
    }
    found
}

/// An id of this test run: `cargo test` (or nextest) is the parent of every test process, so its pid and
/// start time name the run. `None` where /proc is not available.
pub fn run_id() -> Option<String> {
    let ppid = std::os::unix::process::parent_id();
    let stat = std::fs::read_to_string(format!("/proc/{ppid}/stat")).ok()?;
    // Field 22 (starttime) counted after the parenthesised command name, which may contain spaces.
    let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
    Some(format!("{ppid}-{start}"))
}

/// True for the first caller with this `key` in this test run (always true when the run has no id).
fn first_time_this_run(key: &str) -> bool {
    let Some(run) = run_id() else { return true };
    let dir: PathBuf = std::env::temp_dir().join(format!("gpu-admission-skips-{run}"));
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(120)
        .collect();
    let hash = key.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(format!("{name}-{hash:016x}")))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_has_an_id_and_each_key_counts_once() {
        let id = run_id().expect("/proc on Linux");
        assert!(id.contains('-'), "{id}");
        let key = format!("unit test key {}", std::process::id());
        assert!(first_time_this_run(&key));
        assert!(!first_time_this_run(&key));
        assert!(first_time_this_run(&format!("{key} other")));
    }
}
