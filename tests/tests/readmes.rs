//! Docs that cannot drift (issue 34): every route the frontend serves, every flag of the three services,
//! every metric they register and every source file of the crates listed here is named in its README (or,
//! for metrics, in telemetry/README.md, the operators' reference). A new flag, route, metric or file fails
//! this test until its README says what it is.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every `.rs` file below `dir` (relative to the repository), as paths relative to `dir`'s crate.
fn sources(crate_dir: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let base = root().join(crate_dir);
    let mut files = Vec::new();
    walk(&base.join("src"), &mut files);
    let mut out: Vec<String> = files
        .iter()
        .map(|p| p.strip_prefix(&base).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

/// The quoted strings following `needle` in `text` (e.g. the paths of `.route("`).
fn quoted_after(text: &str, needle: &str) -> Vec<String> {
    text.match_indices(needle)
        .filter_map(|(i, _)| {
            let rest = text[i + needle.len()..].trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

#[test]
fn every_route_the_frontend_serves_is_in_its_readme() {
    let readme = read("webhook-frontend/README.md");
    let mut routes = BTreeSet::new();
    for f in sources("webhook-frontend") {
        let text = read(&format!("webhook-frontend/{f}"));
        routes.extend(quoted_after(&text, ".route("));
    }
    assert!(routes.len() >= 7, "routes found: {routes:?}");
    let missing: Vec<_> = routes
        .iter()
        .filter(|r| !readme.contains(&format!("`{r}")) && !readme.contains(&format!("POST {r}")))
        .collect();
    assert!(
        missing.is_empty(),
        "routes not in webhook-frontend/README.md: {missing:?}"
    );
}

#[test]
fn every_flag_of_the_services_is_in_their_readmes() {
    let binaries = [
        (
            gpu_admission_tests::binaries::webhook(),
            "webhook-frontend/README.md",
        ),
        (gpu_admission_tests::binaries::scorer(), "scorer/README.md"),
        (
            gpu_admission_tests::binaries::observer(),
            "observer/README.md",
        ),
    ];
    let mut missing = Vec::new();
    for (bin, readme_path) in binaries {
        let out = Command::new(bin)
            .arg("--help")
            .output()
            .expect("--help runs");
        let help = String::from_utf8_lossy(&out.stdout);
        let readme = read(readme_path);
        let flags: BTreeSet<String> = help
            .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=')
            .filter(|w| w.starts_with("--") && w.len() > 3)
            .map(|w| {
                w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                    .to_string()
            })
            .filter(|w| w != "--help" && w != "--version")
            .collect();
        assert!(!flags.is_empty(), "{}: no flags in --help", bin.display());
        missing.extend(
            flags
                .into_iter()
                .filter(|f| !readme.contains(f.as_str()))
                .map(|f| format!("{readme_path}: {f}")),
        );
    }
    assert!(
        missing.is_empty(),
        "flags not in their README: {missing:#?}"
    );
}

#[test]
fn every_metric_is_in_a_readme() {
    let docs = format!(
        "{}{}{}{}",
        read("telemetry/README.md"),
        read("webhook-frontend/README.md"),
        read("scorer/README.md"),
        read("observer/README.md")
    );
    let mut missing = Vec::new();
    for (crate_dir, prefix) in [
        ("webhook-frontend", "gpu_admission_"),
        ("scorer", ""),
        ("observer", ""),
    ] {
        for f in sources(crate_dir) {
            let text = read(&format!("{crate_dir}/{f}"));
            for needle in ["register(", "register_with_unit("] {
                for name in quoted_after(&text, needle) {
                    let full = format!("{prefix}{name}");
                    if !docs.contains(&full) {
                        missing.push(format!("{crate_dir}: {full}"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "metrics no README names: {missing:#?}");
}

#[test]
fn every_source_file_is_in_its_crates_readme() {
    let mut missing = Vec::new();
    for crate_dir in [
        "webhook-frontend",
        "policy",
        "telemetry",
        "core",
        "observer",
        "scorer",
        "loadgen",
        "cli",
    ] {
        let readme = read(&format!("{crate_dir}/README.md"));
        for f in sources(crate_dir) {
            let name = Path::new(&f)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string();
            let dir = Path::new(&f).parent().unwrap().display().to_string();
            // Tests, and the crate's entry points (what the README as a whole describes).
            let not_listed = name == "tests.rs"
                || name.ends_with("_tests.rs")
                || f == "src/lib.rs"
                || f == "src/main.rs";
            // A directory is named as `src/x/` or `x/`; its `mod.rs` goes with it.
            let dir_named = readme.contains(&format!("`{dir}/`"))
                || readme.contains(&format!("`{}/`", dir.trim_start_matches("src/")));
            let named = readme.contains(&format!("`{f}`"))
                || readme.contains(&format!("`{}`", f.trim_start_matches("src/")))
                || (dir_named && (name == "mod.rs" || readme.contains(&name)));
            if !not_listed && !named {
                missing.push(format!("{crate_dir}/{f}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "source files no README names: {missing:#?}"
    );
}

/// The CLI install line the READMEs give (`cargo install --path cli --locked`, issue 39) names the package
/// cargo knows at that path, and it holds the binary the READMEs then run; the binary the test run built
/// (`cargo build --workspace --bins`, no second compilation) answers `--help` with the commands they name.
#[test]
fn the_cli_install_line_names_cargos_package_and_binary() {
    let metadata = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        metadata.status.success(),
        "{}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    for readme in ["README.md", "cli/README.md"] {
        let text = read(readme);
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("cargo install --path "))
            .unwrap_or_else(|| panic!("{readme}: no `cargo install --path` line"));
        let mut words = line.split_whitespace().skip(3);
        let path = words.next().unwrap();
        assert_eq!(words.next(), Some("--locked"), "{readme}: {line}");
        let manifest = root().join(path).join("Cargo.toml").canonicalize().unwrap();
        let package = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| Path::new(p["manifest_path"].as_str().unwrap()) == manifest)
            .unwrap_or_else(|| panic!("{readme}: no package at {path}"));
        let bins: Vec<&str> = package["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"][0] == "bin")
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(bins, ["gpu-admission"], "{readme}: {path}");
        assert!(text.contains("gpu-admission --help"), "{readme}");
    }
    gpu_admission_tests::binaries::binaries();
    let bin = gpu_admission_tests::binaries::profile_dir()
        .unwrap()
        .join("gpu-admission");
    let out = Command::new(&bin)
        .arg("--help")
        .output()
        .expect("--help runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {help}", bin.display());
    for command in ["check", "test", "policy", "floor", "dra", "quota", "kueue"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} not in:\n{help}"
        );
    }
}

/// The README's disk figure is the one `.ci/run` compares its measured peak with at its end (issue 39): one
/// `peak disk use: N GiB` in README.md, read by `.ci/run` with that very phrase.
#[test]
fn the_readmes_disk_figure_is_the_one_ci_run_checks() {
    const PHRASE: &str = "peak disk use: ";
    let readme = read("README.md");
    let figures: Vec<f64> = readme
        .match_indices(PHRASE)
        .map(|(i, _)| {
            let rest = &readme[i + PHRASE.len()..];
            let number = rest.split(" GiB").next().unwrap();
            number
                .parse()
                .unwrap_or_else(|_| panic!("README.md: {PHRASE}{number}: not a number of GiB"))
        })
        .collect();
    assert_eq!(
        figures.len(),
        1,
        "README.md: one `{PHRASE}N GiB`: {figures:?}"
    );
    assert!((1.0..100.0).contains(&figures[0]), "{figures:?}");
    let ci = read(".ci/run");
    assert!(
        ci.contains(&format!("'{PHRASE}[0-9.]* GiB'")),
        ".ci/run does not read the README's `{PHRASE}N GiB`"
    );
}
