//! The floor shipped in `deploy/kustomize/base/floor.yaml` is `gpu-admission floor render` of the shipped
//! policy, byte for byte (regenerate it with
//! `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`), and the placing floor
//! of `deploy/kustomize/components/placing-floor` is `floor render --placing`'s.

use std::path::Path;

#[test]
fn the_shipped_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/base/floor.yaml"),
    )
    .expect("deploy/kustomize/base/floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_yaml(&policy).unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/base/floor.yaml is not the render of the default policy: run \
         `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`"
    );
}

#[test]
fn the_shipped_placing_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/kustomize/components/placing-floor/placing-floor.yaml"),
    )
    .expect("deploy/kustomize/components/placing-floor/placing-floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_placing_yaml(&policy).unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/components/placing-floor/placing-floor.yaml is not the render of the default \
         policy: run `cargo run -p gpu-admission-cli -- floor render --placing > \
         deploy/kustomize/components/placing-floor/placing-floor.yaml`"
    );
}

/// The inputs, and for every workload among them variants of it whose Pod template pins each class of the
/// default policy's catalog (by `nodeSelector`, and with an `In` of two classes by required node affinity) or
/// names each of its PriorityClasses (with and without `preemptionPolicy: Never`): the fixtures hold few
/// templates outside a tier, and these are what the floor's workload policy denies.
fn with_pinned_templates(
    inputs: Vec<gpu_admission_cli::load::Input>,
) -> Vec<gpu_admission_cli::load::Input> {
    use gpu_admission_cli::load::{Input, Source};
    use serde_json::{Value, json};
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let mut out = Vec::new();
    for input in &inputs {
        let Input::Object(src) = input else { continue };
        let pointer = if src.value["spec"]["jobTemplate"].is_object() {
            "/spec/jobTemplate/spec/template/spec"
        } else {
            "/spec/template/spec"
        };
        if src.value["kind"] == "Pod" || src.value.pointer(pointer).is_none() {
            continue;
        }
        let variant = |edit: &dyn Fn(&mut Value), what: &str| {
            let mut value = src.value.clone();
            edit(value.pointer_mut(pointer).expect("a template spec"));
            Input::Object(Source {
                origin: format!("{} ({what})", src.origin),
                value,
            })
        };
        for (i, c) in policy.classes.iter().enumerate() {
            let (key, val) = (&c.node_label_key, &c.node_label_value);
            out.push(variant(
                &|spec| spec["nodeSelector"] = json!({key: val}),
                "pinned",
            ));
            let other = &policy.classes[(i + 1) % policy.classes.len()].node_label_value;
            out.push(variant(
                &|spec| {
                    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": key, "operator": "In", "values": [val, other]}]}]}}})
                },
                "affinity",
            ));
        }
        for b in &policy.priority.buckets {
            out.push(variant(
                &|spec| spec["priorityClassName"] = json!(b.name),
                "priority",
            ));
            out.push(variant(
                &|spec| {
                    spec["priorityClassName"] = json!(b.name);
                    spec["preemptionPolicy"] = json!("Never");
                },
                "priority, Never",
            ));
        }
    }
    out.extend(inputs);
    out
}

/// What the floor answered for workloads (their Pod templates).
#[derive(Debug, Default)]
struct Templates {
    /// Admitted by `/validate-pod`.
    admitted: usize,
    /// Admitted and matched by the floor's workload policy.
    matched: usize,
    /// Denied by the floor.
    denied: usize,
    /// Denied by the floor and by `/validate-pod`.
    denied_by_both: usize,
}

impl Templates {
    fn record(&mut self, admitted: bool, answer: &gpu_admission_cli::floor::FloorAnswer) {
        let matched = *answer != gpu_admission_cli::floor::FloorAnswer::NotMatched;
        self.admitted += usize::from(admitted);
        self.matched += usize::from(admitted && matched);
        self.denied += usize::from(answer.denies());
        self.denied_by_both += usize::from(!admitted && answer.denies());
    }
}

/// The differential check of the floor against the webhooks: every Pod of the project's fixtures, the fuzz
/// seeds and the DRA fixtures (Pods and the Pods of workload templates), in namespaces of every tier and
/// untiered, under the default policy in Enforce, through `/mutate-pod` and `/validate-pod` as the frontend
/// decides them; for each Pod the webhooks admit, the floor's rendered CEL (evaluated by the CLI's `Floor`) on
/// the mutated Pod must admit it too, and for each workload `/validate-pod` admits, the floor's workload
/// policy on the workload as submitted (never mutated) must admit it: with gpu-admission up, the floor changes
/// no decision. The two shapes
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
    let inputs = with_pinned_templates(inputs);
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
    let mut templates = Templates::default();
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
            if let Some(answer) = &ev.floor {
                templates.record(ev.object_admitted, answer);
                if ev.object_admitted && answer.denies() {
                    counterexamples.push(format!(
                        "{tier:?} {} (its Pod templates) {}: {}",
                        ev.object,
                        ev.source,
                        answer.describe()
                    ));
                }
            }
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
    println!(
        "{} workloads admitted by /validate-pod checked against the floor ({} matched by it), {} denied \
         by the floor alone, {} denied by both",
        templates.admitted, templates.matched, templates.denied, templates.denied_by_both
    );
    assert!(
        templates.matched >= 100 && templates.denied >= 100,
        "the floor checked too few workloads: {templates:?}"
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

/// A Deployment whose container's `requests` is a number (`fuzz/seeds/check/workload-requests-a-number.yaml`)
/// made the floor's interpreter panic, and `gpu-admission check` with it (cel-interpreter 0.10: `todo!` on
/// iterating over a number). The apiserver refuses it when it decodes it, so the floor never sees it: `check`
/// answers what /validate-pod does (undecidable: denied in Enforce), with no floor answer; the floor asked
/// anyway answers an error of the CEL, not a crash.
#[test]
fn a_workload_the_interpreter_panicked_on_gets_a_verdict() {
    use gpu_admission_cli::floor::{Floor, FloorAnswer};
    use gpu_admission_cli::load;
    use serde_json::json;

    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/check/workload-requests-a-number.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["check", "--mode", "Enforce", "--namespace", "ml=gold", "-f"])
        .arg(&seed)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Deployment ml/trainer  gold  denied") && !stdout.contains("floor alone"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let inputs = load::inputs(&[seed]).unwrap();
    let [load::Input::Object(deployment)] = inputs.as_slice() else {
        panic!("{inputs:?}")
    };
    let policy = gpu_admission_policy::embedded_default().unwrap();
    let floor = Floor::new(&policy).unwrap();
    let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
    let answer = floor.workload(&request, &deployment.value, ("ml", Some("gold")), false);
    assert!(
        matches!(&answer, FloorAnswer::Error(e) if e.contains("iterable")),
        "{answer:?}"
    );
}
