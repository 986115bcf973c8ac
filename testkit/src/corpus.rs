//! Real-looking manifests and AdmissionReviews, in two tiers with the same layout (`manifests/*.{yaml,yml,json}`
//! and `admissionreviews/*.json`):
//!
//! - the **fixtures**, `tests/fixtures/`, written for this project and always present: every shape the
//!   suites need (vendors, init containers, workload kinds, v1 and v1beta1 reviews, bare requests, odd YAML);
//! - the **external corpus**, manifests collected from public projects, read in place from
//!   `$GPU_ADMISSION_CORPUS`, else `<repo>/../shared/corpus`. It is an additional tier: when missing, the
//!   suites run on the fixtures and say SKIP once ([`crate::skip`]); with `CI` set it is required.
//!
//! - [`tiers`]: the tiers present; [`manifest_files`], [`admission_reviews`]: every file of every tier;
//! - [`extract_pods`]: every Pod, and every pod template (`template` objects with `spec.containers`, found
//!   by a generic walk: Jobs, CronJobs, Deployments, DaemonSets, StatefulSets, ReplicaSets, PyTorchJob
//!   replica specs, Volcano tasks, Ray head/worker groups, JobSet replicated jobs, and manifests embedded as
//!   YAML strings under a `manifest` key, as Argo does) turned into a Pod.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize as _;
use serde_json::{Value, json};

/// One tier: a folder holding `manifests/` and `admissionreviews/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// `fixtures` or `corpus`.
    pub name: &'static str,
    pub dir: PathBuf,
}

/// The project's own fixtures, `tests/fixtures/`.
pub fn fixtures() -> Tier {
    Tier {
        name: "fixtures",
        dir: crate::workspace_root().join("tests/fixtures"),
    }
}

/// Where the external corpus is looked for: `$GPU_ADMISSION_CORPUS`, else `<repo>/../shared/corpus`.
pub fn external_dir() -> PathBuf {
    match std::env::var_os("GPU_ADMISSION_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => crate::workspace_root().join("../shared/corpus"),
    }
}

/// The external corpus when present. When missing: `None` after a SKIP line (once per test run), or a
/// panic when `CI` is set.
pub fn external() -> Option<Tier> {
    let dir = external_dir();
    if dir.join("manifests").is_dir() && dir.join("admissionreviews").is_dir() {
        return Some(Tier {
            name: "corpus",
            dir: dir.canonicalize().unwrap_or(dir),
        });
    }
    crate::skip::skip(
        "the external corpus tier",
        &format!(
            "{} has no manifests/ and admissionreviews/ (set GPU_ADMISSION_CORPUS); the fixtures in tests/fixtures run \
             instead",
            dir.display()
        ),
    );
    None
}

/// The fixtures, then the external corpus when present.
pub fn tiers() -> Vec<Tier> {
    let mut out = vec![fixtures()];
    out.extend(external());
    out
}

/// The external corpus root. Panics when it is missing; most callers want [`tiers`] or [`external`].
pub fn corpus_dir() -> PathBuf {
    match external() {
        Some(t) => t.dir,
        None => panic!(
            "the external corpus is missing: {} must hold manifests/ and admissionreviews/",
            external_dir().display()
        ),
    }
}

/// One manifest file, parsed.
#[derive(Debug, Clone)]
pub struct ManifestFile {
    pub path: PathBuf,
    /// File name, e.g. `nvidia-gpu-operator__gpu-pod.yaml`.
    pub name: String,
    /// Non-empty documents as JSON.
    pub documents: Vec<Value>,
}

/// A Pod taken from the corpus.
#[derive(Debug, Clone)]
pub struct CorpusPod {
    /// `file#doc/json/path` of the Pod or template it came from.
    pub source: String,
    /// The Pod as the apiserver would send it: resource quantities as strings, and (when it parses) round-
    /// tripped through `k8s_openapi`'s Pod, which drops fields the API does not know.
    pub pod: Value,
    /// The Pod as written in the file (quantities may be numbers, unknown fields kept).
    pub raw: Value,
    /// Whether `pod` parses as a `k8s_openapi` Pod.
    pub parses: bool,
    /// True for a top-level `kind: Pod`, false for a template.
    pub top_level: bool,
}

/// An AdmissionReview from the corpus.
#[derive(Debug, Clone)]
pub struct CorpusReview {
    pub file: String,
    /// Always a full review (bare requests wrapped into admission.k8s.io/v1).
    pub review: Value,
    /// True when the file held a bare AdmissionRequest.
    pub was_bare: bool,
}

fn files_in(dir: &Path, exts: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Parses multi-document YAML (JSON is YAML too) into JSON values, merge keys applied; empty and null
/// documents are skipped.
pub fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let mut y =
            serde_yaml::Value::deserialize(de).with_context(|| format!("YAML document {i}"))?;
        // Merge keys (`<<: *anchor`), which kubectl's YAML reader applies too.
        y.apply_merge()
            .with_context(|| format!("YAML document {i}: merge keys"))?;
        let v: Value = serde_yaml::from_value(y).with_context(|| format!("YAML document {i}"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// Every manifest file of every tier ([`tiers`]), parsed. Fails on a file it cannot parse.
pub fn manifest_files() -> anyhow::Result<Vec<ManifestFile>> {
    let mut out = Vec::new();
    for tier in tiers() {
        out.extend(tier.manifest_files()?);
    }
    Ok(out)
}

/// Every AdmissionReview of every tier ([`tiers`]); bare AdmissionRequests wrapped into admission.k8s.io/v1.
pub fn admission_reviews() -> anyhow::Result<Vec<CorpusReview>> {
    let mut out = Vec::new();
    for tier in tiers() {
        out.extend(tier.admission_reviews()?);
    }
    Ok(out)
}

impl Tier {
    /// Every manifest file of this tier, parsed. Fails on a file it cannot parse, and on an empty tier.
    pub fn manifest_files(&self) -> anyhow::Result<Vec<ManifestFile>> {
        let dir = self.dir.join("manifests");
        let mut out = Vec::new();
        for path in files_in(&dir, &["yaml", "yml", "json"])? {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let documents = if path.extension().is_some_and(|e| e == "json") {
                vec![
                    serde_json::from_str(&text)
                        .with_context(|| format!("parsing {}", path.display()))?,
                ]
            } else {
                parse_documents(&text).with_context(|| format!("parsing {}", path.display()))?
            };
            out.push(ManifestFile {
                name: path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                path,
                documents,
            });
        }
        if out.is_empty() {
            bail!("no manifest in {}", dir.display());
        }
        Ok(out)
    }

    /// Every AdmissionReview of this tier; bare AdmissionRequests wrapped into admission.k8s.io/v1.
    pub fn admission_reviews(&self) -> anyhow::Result<Vec<CorpusReview>> {
        let dir = self.dir.join("admissionreviews");
        let mut out = Vec::new();
        for path in files_in(&dir, &["json"])? {
            let text = std::fs::read_to_string(&path)?;
            let v: Value = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            let file = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let bare = v.get("request").is_none() && v.get("operation").is_some();
            let review = if bare {
                crate::review::wrap_request(v, "admission.k8s.io/v1")
            } else {
                v
            };
            out.push(CorpusReview {
                file,
                review,
                was_bare: bare,
            });
        }
        if out.is_empty() {
            bail!("no AdmissionReview in {}", dir.display());
        }
        Ok(out)
    }
}

/// Every Pod and pod template of `file`, as Pods named after the file and the path (DNS-1123 names).
pub fn extract_pods(file: &ManifestFile) -> Vec<CorpusPod> {
    let mut found = Vec::new();
    for (i, doc) in file.documents.iter().enumerate() {
        walk(doc, &format!("#{i}"), true, &mut found);
    }
    let stem = file
        .name
        .trim_end_matches(".yaml")
        .trim_end_matches(".yml")
        .trim_end_matches(".json");
    found
        .into_iter()
        .enumerate()
        .map(|(n, (path, raw, top_level))| {
            let mut raw = raw;
            let name = dns_name(stem, n);
            let meta = &mut raw["metadata"];
            if !meta.is_object() {
                *meta = json!({});
            }
            if !top_level || meta.get("name").and_then(Value::as_str).is_none() {
                meta["name"] = json!(name);
                if let Some(m) = meta.as_object_mut() {
                    m.remove("generateName");
                }
            }
            let mut pod = raw.clone();
            normalise_quantities(&mut pod);
            let (pod, parses) = match serde_json::from_value::<Pod>(pod.clone()) {
                Ok(p) => (serde_json::to_value(p).unwrap_or(pod), true),
                Err(_) => (pod, false),
            };
            CorpusPod {
                source: format!("{}{path}", file.name),
                pod,
                raw,
                parses,
                top_level,
            }
        })
        .collect()
}

/// Walks `v`; pushes (json path, Pod, top_level) for a `kind: Pod` document and every pod template.
fn walk(v: &Value, path: &str, top: bool, out: &mut Vec<(String, Value, bool)>) {
    match v {
        Value::Object(map) => {
            if map.get("kind").and_then(Value::as_str) == Some("Pod")
                && has_containers(v.get("spec"))
            {
                out.push((path.to_string(), v.clone(), top));
                return;
            }
            for (k, child) in map {
                let p = format!("{path}/{k}");
                if k == "template" && has_containers(child.get("spec")) {
                    let metadata = match child.get("metadata") {
                        Some(m) if m.is_object() => m.clone(),
                        _ => json!({}),
                    };
                    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                                     "spec": child["spec"].clone()});
                    out.push((p, pod, false));
                } else if let (true, Some(s)) = (k == "manifest", child.as_str()) {
                    // A manifest embedded as a YAML string (Argo resource templates); Argo's `{{param}}`
                    // placeholders are not YAML, so they are replaced by a plain word first.
                    if let Ok(docs) = parse_documents(&replace_placeholders(s)) {
                        for (i, d) in docs.iter().enumerate() {
                            walk(d, &format!("{p}#{i}"), false, out);
                        }
                    }
                } else {
                    walk(child, &p, false, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}/{i}"), false, out);
            }
        }
        _ => {}
    }
}

/// `{{anything}}` → `param` (template placeholders of Argo, Helm output leftovers).
fn replace_placeholders(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        match rest[i..].find("}}") {
            Some(j) => {
                out.push_str("param");
                rest = &rest[i + j + 2..];
            }
            None => {
                rest = &rest[i..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn has_containers(spec: Option<&Value>) -> bool {
    spec.and_then(|s| s.get("containers"))
        .is_some_and(Value::is_array)
}

/// `stem-n` lowercased, non-alphanumerics as `-`, at most 63 characters.
fn dns_name(stem: &str, n: usize) -> String {
    let suffix = format!("-{n}");
    let mut base: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(63 - suffix.len());
    let base = base.trim_matches('-').replace("--", "-");
    format!("{base}{suffix}")
}

/// Resource quantities written as YAML numbers become strings, as the apiserver serialises them.
pub fn normalise_quantities(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if matches!(k.as_str(), "requests" | "limits" | "overhead")
                    && let Some(q) = child.as_object_mut()
                {
                    for val in q.values_mut().filter(|v| v.is_number()) {
                        *val = json!(val.to_string());
                    }
                }
                normalise_quantities(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_quantities),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_templates_and_embedded_manifests() {
        let docs = parse_documents(
            "---\napiVersion: batch/v1\nkind: CronJob\nspec:\n  jobTemplate:\n    spec:\n      template:\n        \
             spec:\n          containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]\n---\n\
             kind: WorkflowTemplate\nspec:\n  resource:\n    manifest: |\n      kind: Pod\n      spec:\n        \
             containers: [{name: b}]\n---\n",
        )
        .unwrap();
        assert_eq!(docs.len(), 2);
        let file = ManifestFile {
            path: "x".into(),
            name: "My_File.yaml".into(),
            documents: docs,
        };
        let pods = extract_pods(&file);
        assert_eq!(pods.len(), 2);
        assert_eq!(
            pods[0].source,
            "My_File.yaml#0/spec/jobTemplate/spec/template"
        );
        assert_eq!(pods[0].pod["metadata"]["name"], "my-file-0");
        assert_eq!(
            pods[0].pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "1"
        );
        assert!(pods[0].parses);
        assert_eq!(pods[1].pod["spec"]["containers"][0]["name"], "b");
    }
}
