//! The floor shipped in `deploy/kustomize/base/floor.yaml` is `gpu-admission floor render` of the shipped
//! policy, byte for byte (regenerate it with
//! `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`).

use std::path::Path;

#[test]
fn the_shipped_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/base/floor.yaml"),
    )
    .expect("deploy/kustomize/base/floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_yaml(
        &policy,
        gpu_admission_core::names::DEFAULT_TIER_LABEL,
    )
    .unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/base/floor.yaml is not the render of the default policy: run \
         `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`"
    );
}

/// The differential check of the floor against the webhooks: every Pod of the project's fixtures, the fuzz
/// seeds and the DRA fixtures (Pods and the Pods of workload templates), in namespaces of every tier and
/// untiered, under the default policy in Enforce, through `/mutate-pod` and `/validate-pod` as the frontend
/// decides them; for each Pod the webhooks admit, the floor's rendered CEL (evaluated by the CLI's `Floor`) on
/// the mutated Pod must admit it too: with gpu-admission up, the floor changes no decision. The two shapes
/// deploy/README.md names (a Pod placed by `spec.nodeName` alone, DRA claims in a restricting tier) are
/// counted apart, and must be the only differences.
#[test]
fn the_floor_never_denies_what_the_webhooks_admit() {
    use gpu_admission_cli::evaluate::Verdict;
    use gpu_admission_cli::floor::FloorAnswer;
    use gpu_admission_cli::load::{self, Input, Tiers};
    use gpu_admission_cli::review::User;
    use gpu_admission_cli::{Run, RunSettings};

    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let paths: Vec<std::path::PathBuf> = [
        "../tests/fixtures/manifests",
        "../tests/fixtures/admissionreviews",
        "../tests/fixtures/dra",
        "../fuzz/seeds/mutate_pod",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .collect();
    let inputs: Vec<Input> = load::files(&paths)
        .unwrap()
        .into_iter()
        .filter_map(|file| load::inputs(&[file]).ok())
        .flatten()
        .collect();
    let namespaces: std::collections::BTreeSet<String> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Object(s) => s.value["metadata"]["namespace"].as_str(),
            Input::Review(s) => s.value["request"]["namespace"].as_str(),
            _ => None,
        })
        .map(|n| if n.is_empty() { "default" } else { n }.to_string())
        .chain(["default".to_string()])
        .collect();
    let (mut admitted, mut floor_denied_alone, mut known) = (0, 0, Vec::new());
    let mut evaluated = 0;
    let mut counterexamples = Vec::new();
    for tier in [Some("gold"), Some("silver"), Some("bronze"), None] {
        let tiers: Vec<String> = match tier {
            Some(t) => namespaces.iter().map(|n| format!("{n}={t}")).collect(),
            None => Vec::new(),
        };
        let settings = RunSettings {
            policy: None,
            policy_key: None,
            mode: Some("Enforce".into()),
            state: None,
            tiers: Tiers::parse(&tiers).unwrap(),
            requester: User::default_requester(),
            no_kube: true,
            default_namespace: "default".into(),
            usage: None,
        };
        let checked = Run::new(&settings).unwrap().check_inputs(&inputs);
        for ev in &checked.evaluations {
            for pod in &ev.pods {
                if pod.floor.as_ref().is_some_and(FloorAnswer::denies) {
                    floor_denied_alone += 1;
                }
                if !matches!(ev.verdict, Verdict::Allowed | Verdict::Warned) {
                    continue;
                }
                let Some(answer) = &pod.floor_after_mutation else {
                    panic!("{}: the default policy renders a floor", ev.object)
                };
                admitted += 1;
                if *answer != FloorAnswer::NotMatched {
                    evaluated += 1;
                }
                if !answer.denies() {
                    continue;
                }
                let case = format!(
                    "{tier:?} {} ({}) {}: {}",
                    ev.object,
                    pod.path,
                    ev.source,
                    answer.describe()
                );
                if pod.placement.as_deref() == Some("node-name") || ev.source.contains("/dra/") {
                    known.push(case);
                } else {
                    counterexamples.push(case);
                }
            }
        }
    }
    println!(
        "{admitted} admitted Pods checked against the floor ({evaluated} matched by it), \
         {floor_denied_alone} denied by the floor alone"
    );
    assert!(
        evaluated >= 50,
        "the floor evaluated only {evaluated} admitted Pods"
    );
    for k in &known {
        println!("known difference (deploy/README.md): {k}");
    }
    assert!(
        admitted >= 100,
        "only {admitted} admitted Pods: the fixtures were not found"
    );
    assert!(
        floor_denied_alone >= 20,
        "the floor alone denied only {floor_denied_alone}: it checks nothing"
    );
    assert!(
        counterexamples.is_empty(),
        "the floor denies {} Pods the webhooks admit:\n{}",
        counterexamples.len(),
        counterexamples.join("\n")
    );
}
