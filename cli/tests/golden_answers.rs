//! Golden answers: every Pod and workload of the project's fixtures (manifests, AdmissionReviews, DRA) and of
//! the fuzz seeds goes through `/mutate-pod` and `/validate-pod` exactly as the frontend decides them (the CLI's
//! engine: `review::decode`, `plan`, the scorer's `Score` in process, `decide`, `review::encode`), with a fixed
//! `decided-at`, and every AdmissionReview answered must equal the committed one in `golden/answers.json` —
//! the base64 JSON Patch byte for byte, the warnings and messages word for word. A change of behaviour, or of
//! the patch's bytes, fails here; when it is meant, bless the new answers with
//! `GPU_ADMISSION_BLESS=1 cargo test -p gpu-admission-cli --test golden_answers` and review the diff.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpu_admission_cli::load::{self, Input, Tiers};
use gpu_admission_cli::review::User;
use gpu_admission_cli::{Run, RunSettings};
use serde_json::{Value, json};
use time::OffsetDateTime;

const TIERS: [Option<&str>; 4] = [Some("gold"), Some("silver"), Some("bronze"), None];

/// The repository, as a relative path: the CLI derives each review's uid from its source's path, and the uid
/// seeds the scorer's decision, so the answers must not depend on where the clone is.
fn repo() -> PathBuf {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    PathBuf::from("..")
}

fn golden_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/answers.json")
}

/// Every namespace the inputs name, each given a tier in turn (and some none).
fn tiers(inputs: &[Input]) -> Vec<String> {
    let mut namespaces = BTreeSet::new();
    for i in inputs {
        let ns = match i {
            Input::Object(s) => s.value["metadata"]["namespace"].as_str(),
            Input::Review(s) => s.value["request"]["namespace"].as_str(),
            _ => continue,
        };
        namespaces.insert(ns.filter(|n| !n.is_empty()).unwrap_or("default"));
    }
    namespaces
        .iter()
        .enumerate()
        .filter_map(|(i, ns)| TIERS[i % TIERS.len()].map(|t| format!("{ns}={t}")))
        .collect()
}

/// Every answer of the run, in order, as `{source, object, webhook, response}`.
fn answers() -> Vec<Value> {
    let root = repo();
    let paths: Vec<PathBuf> = [
        "tests/fixtures/manifests",
        "tests/fixtures/admissionreviews",
        "tests/fixtures/dra",
        "fuzz/seeds/mutate_pod",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    // One file at a time: some fuzz seeds are built not to parse (their answer is the fuzz targets' business).
    let inputs: Vec<Input> = load::files(&paths)
        .unwrap()
        .into_iter()
        .filter_map(|file| load::inputs(&[file]).ok())
        .flatten()
        .collect();
    let settings = RunSettings {
        policy: None,
        policy_key: None,
        mode: Some("Enforce".into()),
        state: None,
        tiers: Tiers::parse(&tiers(&inputs)).unwrap(),
        requester: User::default_requester(),
        no_kube: true,
        default_namespace: "default".into(),
        usage: None,
    };
    let mut run = Run::new(&settings).unwrap();
    run.engine.options.decided_at =
        Some(OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap());
    let checked = run.check_inputs(&inputs);
    let mut out = Vec::new();
    for ev in &checked.evaluations {
        // The source relative to the repository, so the file reads the same from any clone.
        let source = ev.source.strip_prefix("../").unwrap_or(&ev.source);
        for ex in &ev.exchanges {
            out.push(json!({
                "source": source,
                "object": ev.object,
                "webhook": ex.webhook.route(),
                "response": ex.response,
            }));
        }
    }
    out
}

#[test]
fn every_fixture_is_answered_as_committed() {
    let now = answers();
    assert!(
        now.len() >= 50,
        "only {} answers: the fixtures were not found",
        now.len()
    );
    let mutated = now
        .iter()
        .filter(|a| a["response"]["response"]["patch"].is_string())
        .count();
    assert!(mutated >= 20, "only {mutated} answers carry a patch");
    let path = golden_file();
    if std::env::var_os("GPU_ADMISSION_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = serde_json::to_string_pretty(&now).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        eprintln!("blessed {} answers into {}", now.len(), path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with GPU_ADMISSION_BLESS=1",
            path.display()
        )
    });
    let golden: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut differences = Vec::new();
    for (i, (was, is)) in golden.iter().zip(&now).enumerate() {
        if was != is {
            differences.push(format!(
                "#{i} {} ({} {}):\n  committed {}\n  now       {}",
                is["source"], is["object"], is["webhook"], was["response"], is["response"]
            ));
        }
    }
    assert!(
        differences.is_empty() && golden.len() == now.len(),
        "{} of {} answers differ from {} ({} committed, {} now):\n{}",
        differences.len(),
        now.len(),
        path.display(),
        golden.len(),
        now.len(),
        differences.join("\n")
    );
}
