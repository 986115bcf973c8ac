//! `policy diff OLD NEW -f MANIFESTS`: the same manifests checked under both policies, and per object what a
//! user would see change (verdict, message, GPU class, where the Pods may land, PriorityClass, outcome).
//! Both runs decide without exploration (`explorationCap` 0), so that a change shown is the policy's, not
//! another draw of the model's sampling.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::evaluate::{Evaluation, PodDecision};
use crate::load::Input;
use crate::{Run, RunSettings};

/// What changed for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectChange {
    pub object: String,
    pub changes: Vec<String>,
}

fn field(changes: &mut Vec<String>, what: &str, old: &str, new: &str) {
    if old != new {
        changes.push(format!("{what}: {old} -> {new}"));
    }
}

fn pod_changes(changes: &mut Vec<String>, old: &PodDecision, new: &PodDecision) {
    let dash = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
    let at = if old.path == "Pod" {
        String::new()
    } else {
        format!("{} ", old.path)
    };
    field(changes, &format!("{at}outcome"), old.outcome, new.outcome);
    field(
        changes,
        &format!("{at}gpu class"),
        &dash(&old.gpu_class),
        &dash(&new.gpu_class),
    );
    field(
        changes,
        &format!("{at}placed on"),
        &old.classes.join(","),
        &new.classes.join(","),
    );
    field(
        changes,
        &format!("{at}PriorityClass"),
        &dash(&old.priority_class),
        &dash(&new.priority_class),
    );
}

/// The changes between two evaluations of the same object.
pub fn changes(old: &Evaluation, new: &Evaluation) -> Vec<String> {
    let mut out = Vec::new();
    field(
        &mut out,
        "verdict",
        old.verdict.as_str(),
        new.verdict.as_str(),
    );
    let message = |e: &Evaluation| -> String {
        e.message
            .iter()
            .chain(&e.warnings)
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let (m_old, m_new) = (message(old), message(new));
    if m_old != m_new {
        out.push(format!("message: {m_new}"));
    }
    for (o, n) in old.pods.iter().zip(&new.pods) {
        pod_changes(&mut out, o, n);
    }
    out
}

/// A policy change: the sections that differ, and the objects whose answers change.
#[derive(Debug, Clone)]
pub struct PolicyDiff {
    pub sections: Vec<String>,
    pub objects: Vec<ObjectChange>,
    /// How many objects were checked.
    pub checked: usize,
}

/// Checks `paths` under `old` and `new` (the other settings shared) and lists the objects that change.
pub fn diff(
    settings: &RunSettings,
    old: PathBuf,
    new: PathBuf,
    paths: &[PathBuf],
) -> anyhow::Result<PolicyDiff> {
    let inputs: Vec<Input> = crate::load::inputs(&crate::load::files(paths)?)?;
    let run = |policy: PathBuf| {
        let s = RunSettings {
            policy: Some(policy),
            ..settings.clone()
        };
        Run::with_policy(&s, |p| p.learning.exploration_cap = 0.0)
    };
    let (old_run, new_run) = (run(old)?, run(new)?);
    let sections = crate::policy::section_changes(old_run.engine.policy(), new_run.engine.policy());
    let before = old_run.check_inputs(&inputs).evaluations;
    let after = new_run.check_inputs(&inputs).evaluations;
    let objects = before
        .iter()
        .zip(&after)
        .map(|(o, n)| ObjectChange {
            object: format!("{} ({})", o.object, o.source),
            changes: changes(o, n),
        })
        .filter(|c| !c.changes.is_empty())
        .collect();
    Ok(PolicyDiff {
        sections,
        objects,
        checked: before.len(),
    })
}

/// The diff as text.
pub fn text(d: &PolicyDiff) -> String {
    let mut out = String::from("policy:\n");
    if d.sections.is_empty() {
        out.push_str("  no rule changed\n");
    }
    for s in &d.sections {
        let _ = writeln!(out, "  {s}");
    }
    let _ = writeln!(out, "objects: {} of {} change", d.objects.len(), d.checked);
    for o in &d.objects {
        let _ = writeln!(out, "  {}", o.object);
        for c in &o.changes {
            let _ = writeln!(out, "    {c}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_tier_losing_its_preferred_class_moves_its_pods() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let old = root.join("deploy/kustomize/base/policy/default-policy.yaml");
        let text = std::fs::read_to_string(&old).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let new = tmp.path().join("new.yaml");
        std::fs::write(
            &new,
            text.replace(
                "allowedClasses: [H100-80GB, MI300X-192GB, A100-80GB,",
                "allowedClasses: [MI300X-192GB, A100-80GB,",
            )
            .replace("preferredClass: H100-80GB", "preferredClass: A100-80GB"),
        )
        .unwrap();
        let settings = RunSettings::default();
        let manifests = [root.join("examples/policy-tests/tiers-in-enforce/manifests.yaml")];
        let d = diff(&settings, old.clone(), new, &manifests).unwrap();
        assert_eq!(d.sections.len(), 2, "{:?}", d.sections);
        assert!(d.sections[0].starts_with("tiers[gold].allowedClasses: [\"H100-80GB\""));
        assert_eq!(
            d.sections[1],
            "tiers[gold].preferredClass: H100-80GB -> A100-80GB"
        );
        assert_eq!(d.checked, 8);
        let serving = d
            .objects
            .iter()
            .find(|o| o.object.starts_with("Deployment llm-prod/llama-serving"))
            .expect("the gold Deployment changes");
        assert!(
            serving
                .changes
                .contains(&"spec.template gpu class: H100-80GB -> A100-80GB".to_string()),
            "{serving:?}"
        );
        // Bronze objects are untouched.
        assert_eq!(d.objects.len(), 1, "{:?}", d.objects);
        let same = diff(&settings, old.clone(), old, &manifests).unwrap();
        assert!(same.sections.is_empty() && same.objects.is_empty());
    }
}
