//! Shared by the `deploy_*` tests: finding outside tools (kubectl, kubernetes-validate, hadolint),
//! rendering every install mode of `deploy/kustomize`, and looking objects up in what was rendered.
#![allow(dead_code)] // each deploy_* test binary uses a different part of this module

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::Value;

/// The namespace every namespaced object of the install lives in.
pub const NAMESPACE: &str = "gpu-admission";

/// A CA certificate standing in for the one a user brings in the external certificate mode
/// (self-signed EC P-256, valid until 2126; only its bytes matter to these tests).
pub const TEST_EXTERNAL_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBmzCCAUGgAwIBAgIUJIUv89CIr1giUFSICl4pPeHLcMIwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXZGVwbG95LXRlc3QtZXh0ZXJuYWwtY2EwIBcNMjYxMTIyMDI1
OTU3WhgPMjEyNjEwMjkwMjU5NTdaMCIxIDAeBgNVBAMMF2RlcGxveS10ZXN0LWV4
dGVybmFsLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqca1s2FfEl7jQ3M0
ElSFBujUzVY6wKMw09fubx/qGbFh3mCOLwzPIKDxeyfWEjluIcxO9RjuUo7zv7X4
v4SB46NTMFEwHQYDVR0OBBYEFHeO9MqiOimvRnctnmVfGbRdlsE0MB8GA1UdIwQY
MBaAFHeO9MqiOimvRnctnmVfGbRdlsE0MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDSAAwRQIgZWfqqAv5JaAL9nSZ5OJWSELWrMIYD5HvHpJv/k/wzaICIQCP
y85jTu8OilUb9oy4QMPv4R59nP8CN6AtjQrhjADtJw==
-----END CERTIFICATE-----
";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate sits in the workspace root")
        .to_path_buf()
}

pub fn kustomize_dir() -> PathBuf {
    repo_root().join("deploy/kustomize")
}

/// True when CI runs us (`CI` set to anything but empty/false): missing tools are then failures.
pub fn in_ci() -> bool {
    gpu_admission_tests::skip::in_ci()
}

/// Finds an executable on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A tool from outside cargo. Missing: a failure in CI, a printed SKIP (returns false) elsewhere.
pub fn require_tool(name: &str, how_to_install: &str) -> bool {
    if which(name).is_some() {
        return true;
    }
    gpu_admission_tests::skip::skip(
        &format!("what needs {name}"),
        &format!("{name} is not installed ({how_to_install})"),
    );
    false
}

/// Runs a command and returns its stdout, or an error carrying its stderr.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `kubectl kustomize DIR`, offline.
pub fn kustomize(dir: &Path) -> anyhow::Result<String> {
    run(Command::new("kubectl").arg("kustomize").arg(dir))
}

/// Parses a multi-document YAML stream into JSON values (empty documents dropped).
pub fn parse_yaml_stream(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// One install mode rendered: its name (`default` = `deploy/kustomize`, else the overlay's folder name),
/// the YAML kustomize printed and the objects in it.
#[derive(Debug)]
pub struct Rendered {
    pub mode: String,
    pub yaml: String,
    pub objects: Vec<Value>,
}

impl Rendered {
    /// The one object of this kind and name (panics with the list of what exists otherwise).
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.find(kind, name).unwrap_or_else(|| {
            panic!(
                "{}: no {kind} {name}; objects: {:?}",
                self.mode,
                self.summary()
            )
        })
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    pub fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// "Kind/name" of every object, in order.
    pub fn summary(&self) -> Vec<String> {
        self.objects
            .iter()
            .map(|o| format!("{}/{}", str_at(o, "/kind"), str_at(o, "/metadata/name")))
            .collect()
    }

    /// Counts per kind, e.g. {"Deployment": 2, ...}.
    pub fn kinds(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.objects {
            *m.entry(str_at(o, "/kind").to_string()).or_insert(0) += 1;
        }
        m
    }
}

/// Every install mode: `default` (deploy/kustomize) and each folder of deploy/kustomize/overlays
/// that holds a kustomization.yaml, rendered from a temporary copy of deploy/kustomize in which the
/// external overlay has the CA certificate a user would put there. `None` when kubectl is missing
/// outside CI. Rendered once per test binary.
pub fn rendered_modes() -> Option<&'static [Rendered]> {
    static CELL: OnceLock<Option<Vec<Rendered>>> = OnceLock::new();
    CELL.get_or_init(|| {
        if !require_tool("kubectl", "its kustomize renders the install") {
            return None;
        }
        Some(render_all().expect("rendering deploy/kustomize"))
    })
    .as_deref()
}

/// The rendered mode of this name (panics when it does not exist).
pub fn mode(name: &str) -> Option<&'static Rendered> {
    let modes = rendered_modes()?;
    Some(
        modes
            .iter()
            .find(|r| r.mode == name)
            .unwrap_or_else(|| panic!("install mode {name} was not rendered")),
    )
}

fn render_all() -> anyhow::Result<Vec<Rendered>> {
    let tmp = tempfile::tempdir()?;
    let tree = tmp.path().join("kustomize");
    copy_dir(&kustomize_dir(), &tree)?;
    std::fs::write(tree.join("overlays/external/ca.crt"), TEST_EXTERNAL_CA)?;
    let mut dirs = vec![("default".to_string(), tree.clone())];
    let mut overlays: Vec<_> = std::fs::read_dir(tree.join("overlays"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        // Not an install mode of the cluster-wide installation: a team's namespace-restricted instance
        // beside it (rendered by `rendered_namespaced`, checked by deploy_namespaced.rs).
        .filter(|p| !p.ends_with(NAMESPACED))
        .collect();
    overlays.sort();
    for p in overlays {
        dirs.push((p.file_name().unwrap().to_string_lossy().into_owned(), p));
    }
    let mut out = Vec::new();
    for (mode, dir) in dirs {
        let yaml = kustomize(&dir).with_context(|| format!("mode {mode}"))?;
        let objects = parse_yaml_stream(&yaml)?;
        out.push(Rendered {
            mode,
            yaml,
            objects,
        });
    }
    Ok(out)
}

/// The folder of deploy/kustomize/overlays holding the namespace-restricted install.
pub const NAMESPACED: &str = "namespaced";

/// `deploy/kustomize/overlays/namespaced`, rendered (`None` when kubectl is missing outside CI).
pub fn rendered_namespaced() -> Option<Rendered> {
    if !require_tool("kubectl", "its kustomize renders the install") {
        return None;
    }
    let dir = kustomize_dir().join("overlays").join(NAMESPACED);
    let yaml = kustomize(&dir).expect("rendering overlays/namespaced");
    let objects = parse_yaml_stream(&yaml).expect("parsing overlays/namespaced");
    Some(Rendered {
        mode: NAMESPACED.into(),
        yaml,
        objects,
    })
}

pub fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The string at a JSON pointer, or "" when absent.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The array at a JSON pointer, or empty when absent.
pub fn arr_at<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The strings of the array at a JSON pointer.
pub fn strings_at(v: &Value, pointer: &str) -> Vec<String> {
    arr_at(v, pointer)
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// All `.rs` files under a folder of the repository, with their text.
pub fn rust_sources(rel: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root().join(rel), &mut out);
    out.sort();
    out
}

/// The value of `--flag=value` (or `--flag value`) in a container's args.
pub fn arg_value(args: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix(&eq) {
            Some(v.to_string())
        } else if a == flag {
            args.get(i + 1).cloned()
        } else {
            None
        }
    })
}
