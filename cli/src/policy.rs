//! The policy a run decides with: a policy file as the scorer reads it, or the policy ConfigMap as deployed
//! (`kubectl get configmap gpu-admission-policy -o yaml`), validated by the scorer's own validation; the
//! embedded default when none is given. `policy validate` prints the verdict, `policy diff` compares two
//! policies section by section (the per-object part is [`crate::diff`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};
use gpu_admission_core::policy::PolicySnapshot;
use scorer::policy::{DEFAULT_POLICY_YAML, EMBEDDED_SOURCE, EnforcementMode, Policy};
use serde_json::Value;

/// The key of the policy ConfigMap the scorer reads (the services' `--policy-key` default).
pub const CONFIGMAP_KEY: &str = "default-policy.yaml";

/// A policy's text and the name problems are reported under.
#[derive(Debug, Clone)]
pub struct PolicyText {
    pub text: String,
    pub file: String,
}

/// Reads `path` (the embedded default when `None`): a policy file, or a ConfigMap holding one under `key`
/// (default [`CONFIGMAP_KEY`], else its only key).
pub fn read(path: Option<&Path>, key: Option<&str>) -> anyhow::Result<PolicyText> {
    let Some(path) = path else {
        return Ok(PolicyText {
            text: DEFAULT_POLICY_YAML.to_string(),
            file: EMBEDDED_SOURCE.to_string(),
        });
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value = serde_yaml::from_str(&text).unwrap_or(Value::Null);
    if doc["kind"] != "ConfigMap" {
        return Ok(PolicyText {
            text,
            file: path.display().to_string(),
        });
    }
    let data = doc["data"].as_object().cloned().unwrap_or_default();
    let chosen = match key {
        Some(k) => k.to_string(),
        None if data.contains_key(CONFIGMAP_KEY) => CONFIGMAP_KEY.to_string(),
        None if data.len() == 1 => data.keys().next().cloned().unwrap_or_default(),
        None => bail!(
            "{}: a ConfigMap with keys {:?}; say which holds the policy with --policy-key",
            path.display(),
            data.keys().collect::<Vec<_>>()
        ),
    };
    match data.get(&chosen).and_then(Value::as_str) {
        Some(t) => Ok(PolicyText {
            text: t.to_string(),
            file: format!("{} key {chosen}", path.display()),
        }),
        None => bail!("{}: the ConfigMap has no key {chosen}", path.display()),
    }
}

/// The policy the scorer would load from `text` (its own validation), or every problem in one error.
pub fn parse(p: &PolicyText) -> anyhow::Result<Policy> {
    scorer::policy::parse(&p.text, &p.file).map_err(|e| {
        let mut msg = format!("invalid policy {} ({} problems)", e.file, e.problems.len());
        for problem in &e.problems {
            let _ = write!(msg, "\n  {}: {}", problem.field, problem.reason);
        }
        anyhow::anyhow!(msg)
    })
}

/// `Enforce`, `Warn` or `Audit` (any case).
pub fn parse_mode(s: &str) -> anyhow::Result<EnforcementMode> {
    match s.to_ascii_lowercase().as_str() {
        "enforce" => Ok(EnforcementMode::Enforce),
        "warn" => Ok(EnforcementMode::Warn),
        "audit" => Ok(EnforcementMode::Audit),
        _ => bail!("--mode {s:?}: expected Enforce, Warn or Audit"),
    }
}

/// One line per tier: allowed classes, preferred class, priority cap, fallback.
fn tier_lines(p: &Policy) -> Vec<(String, String)> {
    let class = |i: usize| p.classes[i].name.as_str();
    p.tiers
        .iter()
        .map(|t| {
            let allowed: Vec<&str> = (0..p.classes.len())
                .filter(|&i| t.allowed[i])
                .map(class)
                .collect();
            let line = format!(
                "classes {}; preferred {}; PriorityClass at most {}; fallback {:?}",
                allowed.join(", "),
                t.preferred.map_or("-", class),
                t.max_priority_class.as_deref().unwrap_or("-"),
                t.fallback
            );
            (t.name.clone(), line)
        })
        .collect()
}

/// What a policy holds, in a few lines (`policy validate`).
pub fn summary(view: &PolicySnapshot) -> String {
    let mut out = format!(
        "version {}; mode {}; default tier {}\n",
        view.version,
        view.mode.as_str(),
        view.default_tier().unwrap_or("-")
    );
    let classes: Vec<&str> = view.catalog().iter().map(|c| c.name.as_str()).collect();
    let _ = writeln!(out, "catalog: {}", classes.join(", "));
    let Some(p) = &view.policy else {
        return out;
    };
    for (tier, line) in tier_lines(p) {
        let _ = writeln!(out, "tier {tier}: {line}");
    }
    for g in &p.namespace_grants {
        let _ = writeln!(
            out,
            "grant {}: classes {}; PriorityClass at most {}",
            g.namespace,
            g.allowed_classes.join(", "),
            g.max_priority_class.as_deref().unwrap_or("-")
        );
    }
    out
}

/// The rule fields that differ between two policies, one line each (empty when none does): every field that
/// decides what a tier gets, compared as the policy crate's schema has it (`gpu_admission_policy::diff`).
pub fn section_changes(old: &PolicySnapshot, new: &PolicySnapshot) -> Vec<String> {
    match (&old.policy, &new.policy) {
        (Some(old), Some(new)) => gpu_admission_policy::diff::rule_changes(old, new)
            .iter()
            .map(ToString::to_string)
            .collect(),
        _ => vec!["(a policy without its document: not compared)".to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(text: &str) -> PolicySnapshot {
        let policy = parse(&PolicyText {
            text: text.into(),
            file: "p".into(),
        })
        .unwrap();
        crate::engine::snapshot_of(policy)
    }

    #[test]
    fn reads_files_configmaps_and_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let cm = dir.path().join("cm.yaml");
        let mut doc = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpu-admission-policy"}, "data": {}});
        doc["data"][CONFIGMAP_KEY] = DEFAULT_POLICY_YAML.into();
        std::fs::write(&cm, serde_yaml::to_string(&doc).unwrap()).unwrap();
        let read_cm = read(Some(&cm), None).unwrap();
        assert_eq!(read_cm.text, DEFAULT_POLICY_YAML);
        assert!(read_cm.file.ends_with("key default-policy.yaml"));
        assert!(read(Some(&cm), Some("other")).is_err());
        assert_eq!(read(None, None).unwrap().file, EMBEDDED_SOURCE);

        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, "catalog: []\ntiers: []\n").unwrap();
        let err = parse(&read(Some(&bad), None).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("invalid policy"), "{err}");
    }

    #[test]
    fn section_changes_name_what_moved() {
        let old = snapshot(DEFAULT_POLICY_YAML);
        assert!(section_changes(&old, &old).is_empty());
        let new = snapshot(&DEFAULT_POLICY_YAML.replace("  mode: Warn", "  mode: Enforce"));
        assert_eq!(
            section_changes(&old, &new),
            ["enforcement.mode: Warn -> Enforce"]
        );
        assert!(summary(&new).starts_with("version "));
        assert!(summary(&new).contains("tier bronze: classes "));
    }
}
