//! `gpu-admission check` on any bytes, as one file of manifests: the CLI's own library (`load`'s documents and
//! their sorting, then `Run`: both webhooks and the floor's CEL evaluated offline, then the report) never
//! panics, and either says why the bytes are no manifests (the error `check` prints, exit 2) or gives every
//! object that describes Pods a verdict, with the message a denial carries and an answer of the floor that is
//! one (never [`FloorAnswer::Undecidable`]: a fault of the interpreter, caught).

pub use gpu_admission_cli::Run;
use gpu_admission_cli::evaluate::Verdict;
use gpu_admission_cli::floor::FloorAnswer;
use gpu_admission_cli::load::{self, Input};
use gpu_admission_cli::{Checked, RunSettings, report};

/// What `check` makes of the bytes.
#[derive(Debug)]
pub enum CheckOutcome {
    /// No manifests: not UTF-8, or not YAML (JSON is YAML); the message `check` prints.
    LoadError(String),
    /// The documents were read; every object that describes Pods (or an AdmissionReview) has its evaluation.
    Checked(Checked),
}

/// The run the properties check with: the embedded default policy in `Enforce` (the floor's validations
/// apply), nothing learned, no tier given (a Namespace of the input gives its own; any other namespace is
/// untiered: the policy's default tier).
pub fn cli_run() -> Run {
    let settings = RunSettings {
        mode: Some("Enforce".into()),
        ..RunSettings::default()
    };
    Run::new(&settings).expect("the embedded default policy")
}

/// `check` on `data` as one file, with `run` (left as it was: each input is checked alone). Panics when a
/// property does not hold.
pub fn check_cli(data: &[u8], run: &mut Run) -> CheckOutcome {
    let text = match std::str::from_utf8(data) {
        Ok(t) => t,
        Err(e) => return CheckOutcome::LoadError(format!("not UTF-8: {e}")),
    };
    let documents = match load::parse_documents(text) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("{e:#}");
            assert!(!message.is_empty(), "a load error says why");
            return CheckOutcome::LoadError(message);
        }
    };
    let mut inputs = Vec::new();
    for (i, doc) in documents {
        load::classify(doc, format!("input#{i}"), &mut inputs);
    }
    let checked = run.check_alone(&inputs);
    let decided = inputs
        .iter()
        .filter(|i| matches!(i, Input::Object(_) | Input::Review(_)))
        .count();
    let ignored = inputs
        .iter()
        .filter(|i| matches!(i, Input::Ignored(_)))
        .count();
    assert_eq!(
        checked.evaluations.len(),
        decided,
        "every object that describes Pods gets a verdict"
    );
    let c = checked.counts;
    assert_eq!(
        (c.allowed + c.warned + c.denied + c.errors, c.ignored),
        (decided, ignored),
        "the counts add up"
    );
    for e in &checked.evaluations {
        if matches!(e.verdict, Verdict::Denied | Verdict::Error) {
            assert!(
                e.message.as_ref().is_some_and(|m| !m.is_empty()),
                "{} is {} without a message",
                e.object,
                e.verdict.as_str()
            );
        }
        for answer in e.floor_answers() {
            assert!(
                !matches!(answer, FloorAnswer::Undecidable(_)),
                "{}: the floor could not be evaluated: {}",
                e.object,
                answer.describe()
            );
        }
    }
    let text = report::text(&checked.evaluations, checked.counts);
    assert!(text.ends_with(&format!("{}\n", checked.counts.line())));
    let json = report::json(&checked.evaluations, checked.counts, "fuzz", "Enforce");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("the JSON report parses");
    assert_eq!(
        parsed["objects"].as_array().map(Vec::len),
        Some(decided),
        "{json}"
    );
    CheckOutcome::Checked(checked)
}
