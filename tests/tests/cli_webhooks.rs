//! `gpu-admission check` (the offline CLI, `cli/`) against the running webhooks: every Pod and workload of the
//! fixtures and of the external corpus (manifests and AdmissionReviews), under the default policy in Enforce,
//! through the CLI's library; then every review it built replayed, in the same order, to a real frontend
//! (`--no-kube`, the same namespace tiers) in front of a real scorer (the same policy file, nothing learned):
//! the same answer, byte for byte once parsed — allowed or denied, the message, the warnings and the JSON Patch
//! (only `decided-at`, a timestamp, may differ). Prints the CLI's table of verdicts
//! (`cargo test -p gpu-admission-tests --test cli_webhooks -- --nocapture`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context as _;
use base64::Engine as _;
use gpu_admission_cli::engine::Exchange;
use gpu_admission_cli::load::{self, Input, Tiers};
use gpu_admission_cli::review::User;
use gpu_admission_cli::{Run, RunSettings, report};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use gpu_admission_tests::{Scorer, Webhook, corpus};
use serde_json::Value;

const TIERS: [Option<&str>; 4] = [Some("gold"), Some("silver"), Some("bronze"), None];

/// The default policy with `enforcement.mode: Enforce`, written where both the CLI and the scorer read it.
fn enforce_policy(dir: &std::path::Path) -> PathBuf {
    let text = scorer::policy::DEFAULT_POLICY_YAML;
    let enforced = text.replace("  mode: Warn", "  mode: Enforce");
    assert_ne!(enforced, text, "the default policy's mode line moved");
    let path = dir.join("policy-enforce.yaml");
    std::fs::write(&path, enforced).unwrap();
    path
}

/// Every namespace the inputs name (objects without one are in `default`).
fn namespaces(inputs: &[Input]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for i in inputs {
        let ns = match i {
            Input::Object(s) => s.value["metadata"]["namespace"].as_str(),
            Input::Review(s) => s.value["request"]["namespace"].as_str(),
            _ => continue,
        };
        out.insert(
            ns.filter(|n| !n.is_empty())
                .unwrap_or("default")
                .to_string(),
        );
    }
    out
}

/// The decoded patch with every `decided-at` value blanked.
fn patch_of(response: &Value) -> Value {
    let Some(b64) = response["response"]["patch"].as_str() else {
        return Value::Null;
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64 patch");
    let mut patch: Value = serde_json::from_slice(&bytes).expect("JSON patch");
    for op in patch.as_array_mut().into_iter().flatten() {
        let path = op["path"].as_str().unwrap_or("");
        if path.ends_with(&ANN_DECIDED_AT.replace('/', "~1")) {
            op["value"] = Value::from("<decided-at>");
        } else if let Some(ann) = op["value"].as_object_mut()
            && ann.contains_key(ANN_DECIDED_AT)
        {
            ann.insert(ANN_DECIDED_AT.into(), Value::from("<decided-at>"));
        }
    }
    patch
}

/// The answer without the patch's encoding and timestamp.
fn comparable(response: &Value) -> Value {
    let mut r = response.clone();
    r["response"]["patch"] = patch_of(response);
    r
}

async fn replay(webhook: &Webhook, exchange: &Exchange) -> anyhow::Result<Value> {
    let resp = webhook
        .https()
        .post_json(exchange.webhook.route(), &exchange.review)
        .await?;
    anyhow::ensure!(resp.status.is_success(), "HTTP {}", resp.status);
    resp.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answers_as_the_running_webhooks() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = enforce_policy(dir.path());
    let mut paths = Vec::new();
    for tier in corpus::tiers() {
        paths.push(tier.dir.join("manifests"));
        paths.push(tier.dir.join("admissionreviews"));
    }
    let inputs = load::inputs(&load::files(&paths)?)?;
    let namespaces = namespaces(&inputs);
    let pairs: Vec<(String, &str)> = namespaces
        .iter()
        .enumerate()
        .filter_map(|(i, ns)| TIERS[i % TIERS.len()].map(|t| (ns.clone(), t)))
        .collect();
    let settings = RunSettings {
        policy: Some(policy.clone()),
        policy_key: None,
        mode: None,
        state: None,
        tiers: Tiers::parse(
            &pairs
                .iter()
                .map(|(ns, t)| format!("{ns}={t}"))
                .collect::<Vec<_>>(),
        )?,
        requester: User::default_requester(),
        no_kube: true,
        default_namespace: "default".into(),
        usage: None,
    };
    let checked = Run::new(&settings)?.check_inputs(&inputs);
    println!("{}", report::text(&checked.evaluations, checked.counts));

    let scorer = Scorer::builder().policy(&policy).start().await?;
    let webhook = pairs
        .iter()
        .fold(
            Webhook::builder(&scorer.url()).no_kube().deadline_ms(5000),
            |b, (ns, tier)| b.namespace_tier(ns, tier),
        )
        .start()
        .await?;

    let mut compared = 0;
    let mut mismatches = Vec::new();
    for ev in &checked.evaluations {
        for exchange in &ev.exchanges {
            let theirs = replay(&webhook, exchange)
                .await
                .with_context(|| format!("{} to {}", ev.object, exchange.webhook.route()))?;
            compared += 1;
            if comparable(&theirs) != comparable(&exchange.response) {
                mismatches.push(format!(
                    "{} ({}) {}:\n  cli:     {}\n  webhook: {}",
                    ev.object,
                    ev.source,
                    exchange.webhook.route(),
                    comparable(&exchange.response),
                    comparable(&theirs)
                ));
            }
        }
    }
    println!(
        "compared {compared} answers of {} objects with the running webhooks: {} differ",
        checked.evaluations.len(),
        mismatches.len()
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // The comparison covered what it must: decisions, denials and warnings, both webhooks.
    let c = checked.counts;
    assert!(c.denied > 0 && c.allowed > 0 && c.warned > 0, "{c:?}");
    let mutated = checked
        .evaluations
        .iter()
        .flat_map(|e| &e.pods)
        .filter(|p| p.outcome == "mutated")
        .count();
    assert!(mutated >= 10, "only {mutated} Pods mutated");
    assert!(compared > checked.evaluations.len());
    Ok(())
}
