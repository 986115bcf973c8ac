//! `gpu-admission test DIR`: every `gpu-admission-test.yaml` under DIR is a test — a policy, the tiers of the
//! namespaces, the objects, and what each object must get — run like `check` and compared:
//!
//! ```yaml
//! name: bronze in Enforce
//! policy: policy.yaml            # relative to this file; default: the embedded default policy
//! mode: Enforce                  # optional: override the policy's enforcement mode
//! namespaces: {students: bronze, llm-prod: gold}
//! user: alice                    # optional requester (default an ordinary user), with groups:
//! groups: [ml-leads]
//! grants: [exempt tiers/bronze]  # what RBAC grants the requester in gpu-admission.io (default none)
//! resources: [manifests.yaml]    # files or directories, relative to this file
//! results:
//!   - object: Job students/train # as `check` names it: Kind namespace/name
//!     pod: spec.template         # which Pod of the object (needed only when it describes several)
//!     verdict: denied            # allowed | warned | denied
//!     message: outside tier      # a part of the denial message or of a warning
//!     gpuClass: L4-24GB          # the gpu-class annotation ("-" = none)
//!     priorityClass: gpu-default
//!     outcome: mutated           # mutated | tier_default | passed_through | skipped
//!     placedOn: [L4-24GB]        # the classes the patched Pod can land on
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::evaluate::{Evaluation, PodDecision};
use crate::load::Tiers;
use crate::review::User;
use crate::{Run, RunSettings};

/// The file name a test is found by.
pub const TEST_FILE: &str = "gpu-admission-test.yaml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    name: String,
    #[serde(default)]
    policy: Option<PathBuf>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    namespaces: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    grants: Vec<String>,
    resources: Vec<PathBuf>,
    results: Vec<Expected>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expected {
    object: String,
    #[serde(default)]
    pod: Option<String>,
    verdict: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    gpu_class: Option<String>,
    #[serde(default)]
    priority_class: Option<String>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    placed_on: Option<Vec<String>>,
}

/// Every test file under `dir`, in path order.
pub fn find(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = crate::load::files(&[dir.to_path_buf()])?
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == TEST_FILE))
        .collect();
    found.sort();
    if found.is_empty() {
        bail!("no {TEST_FILE} under {}", dir.display());
    }
    Ok(found)
}

/// The outcome of one test file: a line per expected result, and the counts.
#[derive(Debug, Default)]
pub struct Outcome {
    pub passed: usize,
    pub failed: usize,
    pub report: String,
}

/// Runs one test file.
pub fn run_file(path: &Path) -> anyhow::Result<Outcome> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let test: TestFile =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let pairs: Vec<String> = test
        .namespaces
        .iter()
        .map(|(ns, tier)| format!("{ns}={tier}"))
        .collect();
    let grants =
        crate::parse_grants(&test.grants).with_context(|| format!("parsing {}", path.display()))?;
    let requester = match &test.user {
        Some(u) => User {
            username: u.clone(),
            groups: test.groups.clone(),
            grants,
        },
        None => User {
            groups: [User::default_requester().groups, test.groups.clone()].concat(),
            grants,
            ..User::default_requester()
        },
    };
    let settings = RunSettings {
        policy: test.policy.as_ref().map(|p| base.join(p)),
        policy_key: None,
        mode: test.mode.clone(),
        state: None,
        tiers: Tiers::parse(&pairs)?,
        requester,
        no_kube: false,
        default_namespace: "default".into(),
        usage: None,
    };
    let resources: Vec<PathBuf> = test.resources.iter().map(|r| base.join(r)).collect();
    let run = Run::new(&settings)?.check(&resources)?;
    let mut out = Outcome::default();
    let _ = writeln!(out.report, "{}: {}", path.display(), test.name);
    for expected in &test.results {
        match compare(expected, &run.evaluations) {
            Ok(()) => {
                out.passed += 1;
                let _ = writeln!(out.report, "  PASS {}", label(expected));
            }
            Err(why) => {
                out.failed += 1;
                let _ = writeln!(out.report, "  FAIL {}: {why}", label(expected));
            }
        }
    }
    Ok(out)
}

fn label(e: &Expected) -> String {
    match &e.pod {
        Some(p) => format!("{} [{p}]", e.object),
        None => e.object.clone(),
    }
}

/// Where an expectation and the evaluation differ, in words.
fn compare(e: &Expected, evaluations: &[Evaluation]) -> Result<(), String> {
    let Some(ev) = evaluations.iter().find(|ev| ev.object == e.object) else {
        let names: Vec<&str> = evaluations.iter().map(|ev| ev.object.as_str()).collect();
        return Err(format!("no such object; the input has {names:?}"));
    };
    let mut wrong = Vec::new();
    if ev.verdict.as_str() != e.verdict {
        wrong.push(format!(
            "verdict {}, expected {}",
            ev.verdict.as_str(),
            e.verdict
        ));
    }
    if let Some(m) = &e.message {
        let seen = ev
            .message
            .iter()
            .chain(&ev.warnings)
            .any(|s| s.contains(m.as_str()));
        if !seen {
            wrong.push(format!(
                "no message contains {m:?} (denied: {:?}, warnings: {:?})",
                ev.message, ev.warnings
            ));
        }
    }
    let wants_pod = e.gpu_class.is_some()
        || e.priority_class.is_some()
        || e.outcome.is_some()
        || e.placed_on.is_some();
    if wants_pod {
        let pod = pick_pod(e, ev)?;
        let got = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let mut check = |what: &str, want: &Option<String>, got: String| {
            if let Some(w) = want
                && *w != got
            {
                wrong.push(format!("{what} {got}, expected {w}"));
            }
        };
        check("gpuClass", &e.gpu_class, got(&pod.gpu_class));
        check("priorityClass", &e.priority_class, got(&pod.priority_class));
        check("outcome", &e.outcome, pod.outcome.to_string());
        if let Some(want) = &e.placed_on
            && *want != pod.classes
        {
            wrong.push(format!("placedOn {:?}, expected {want:?}", pod.classes));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

fn pick_pod<'e>(e: &Expected, ev: &'e Evaluation) -> Result<&'e PodDecision, String> {
    let paths: Vec<&str> = ev.pods.iter().map(|p| p.path.as_str()).collect();
    match (&e.pod, ev.pods.as_slice()) {
        (Some(path), pods) => pods
            .iter()
            .find(|p| p.path == *path)
            .ok_or_else(|| format!("no Pod at {path}; the object has {paths:?}")),
        (None, [only]) => Ok(only),
        (None, _) => Err(format!(
            "the object describes {} Pods {paths:?}: say which with `pod:`",
            paths.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn examples() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policy-tests")
    }

    #[test]
    fn the_examples_pass_and_a_wrong_expectation_fails() {
        for file in find(&examples()).unwrap() {
            let outcome = run_file(&file).unwrap();
            assert!(
                outcome.failed == 0 && outcome.passed > 0,
                "{}",
                outcome.report
            );
        }
        let tmp = tempfile::tempdir().unwrap();
        let src = examples().join("tiers-in-enforce");
        std::fs::copy(
            src.join("manifests.yaml"),
            tmp.path().join("manifests.yaml"),
        )
        .unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = std::fs::read_to_string(src.join(TEST_FILE))
            .unwrap()
            .replace("policy: ../../..", &format!("policy: {}", root.display()))
            .replacen("verdict: denied", "verdict: allowed", 1);
        std::fs::write(tmp.path().join(TEST_FILE), text).unwrap();
        let outcome = run_file(&tmp.path().join(TEST_FILE)).unwrap();
        assert_eq!(outcome.failed, 1, "{}", outcome.report);
        assert!(
            outcome
                .report
                .contains("FAIL Pod students/llama-hobby: verdict denied, expected allowed"),
            "{}",
            outcome.report
        );
    }
}
