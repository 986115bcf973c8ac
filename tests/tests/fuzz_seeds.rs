//! The fuzz targets' properties (`gpu_admission_properties`, run by `fuzz/` under cargo-fuzz)
//! replayed on stable over the seed corpus: the hostile inputs of `fuzz/seeds/` with the answer each must
//! get, and every AdmissionReview and Pod of the project's fixtures. The scorer is the real one, in process
//! (its `Explain`: the answer `Score` would give, with nothing learned), on its embedded default policy. The
//! `check` target's property (`gpu-admission check` on any bytes) over its seeds and every fixture file.

use std::path::PathBuf;
use std::sync::Arc;

use gpu_admission_cli::evaluate::{TierFrom, Verdict};
use gpu_admission_cli::floor::FloorAnswer;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_properties::cli_check::{CheckOutcome, check_cli, cli_run};
use gpu_admission_properties::{MutateOutcome, check_mutate, check_validate};
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use gpu_admission_testkit::corpus;
use gpu_admission_testkit::review::{Operation, pod_review};
use scorer::model::Learned;
use scorer::policy::embedded_default;
use scorer::service::Core;

fn scorer() -> (Core, PolicySnapshot) {
    let policy = embedded_default().unwrap();
    let core = Core::in_process(policy.clone(), Learned::default());
    let policy = PolicySnapshot::from_policy(Arc::new(policy));
    (core, policy)
}

fn explain(core: &Core) -> impl FnMut(&ScoreRequest) -> Result<ScoreResponse, String> + '_ {
    |req| {
        core.explain(req)
            .map(|e| e.answer.unwrap_or_default())
            .map_err(|refusal| refusal.to_string())
    }
}

fn seed(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/mutate_pod")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn patched(outcome: &MutateOutcome) -> (usize, &[String]) {
    match outcome {
        MutateOutcome::Patched {
            ops,
            warnings,
            unchecked: 0,
        } => (*ops, warnings),
        other => panic!("expected a checked patch: {other:?}"),
    }
}

#[test]
fn hostile_inputs_get_their_answers() {
    let (core, policy) = scorer();
    let mut score = explain(&core);
    let mut mutate = |name: &str| check_mutate(&seed(name), &policy, &mut score);

    // Malformed uids: a 400 that says why.
    for (name, why) in [
        ("uid-empty.json", "request.uid is empty"),
        (
            "uid-300-bytes.json",
            "request.uid is 300 bytes long; at most 128",
        ),
    ] {
        match mutate(name) {
            MutateOutcome::BadRequest(msg) => assert!(msg.contains(why), "{name}: {msg}"),
            other => panic!("{name}: {other:?}"),
        }
    }

    // A tenant over the scorer's limit: decided (not passed through), with a warning.
    // Members the decoder skips (managedFields, spec.volumes, status), and the same names where they are
    // read (labels, annotations, nodeSelector): decided, and the patched object, read whole, is bound to its
    // tier (the property asserts it).
    let (ops, _) = patched(&mutate("pruned-members.json"));
    assert!(ops > 0);
    // The same for a container's skipped members (env, command, probes, mounts...), on a Pod whose only GPUs
    // are asked by a sidecar init container (its resources and restart policy are read): decided and bound.
    let (ops, _) = patched(&mutate("pruned-container-members.json"));
    assert!(ops > 0);
    // The same members holding what no valid Pod holds (a managedFields time that is not a time, an env that
    // is not a list, a status that is not an object): the apiserver never sends it, but the webhook still
    // decides it and the patched object, as the webhook reads it, is bound to its tier.
    let (ops, _) = patched(&mutate("pruned-invalid-members.json"));
    assert!(ops > 0);

    let outcome = mutate("tenant-300-bytes.json");
    let (ops, warnings) = patched(&outcome);
    assert!(ops > 0);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("tenant is 300 bytes long; at most 253")),
        "{warnings:?}"
    );

    // Nulls (and absences) where the patch adds members: the patch applies and the result is a Pod.
    for name in [
        "metadata-null.json",
        "metadata-missing.json",
        "annotations-null.json",
        "affinity-null.json",
        "node-affinity-null.json",
        "selector-terms-null.json",
    ] {
        let outcome = mutate(name);
        assert!(patched(&outcome).0 > 0, "{name}");
    }

    // Resources the policy's list does not name, under GPU vendors' domains (a time-sliced MIG slice renamed,
    // Intel's monitoring resource, an AMD partition), pinned to H200 in gold: a GPU Pod, decided, and the
    // patched Pod is bound to gold (the property asserts it).
    let (ops, _) = patched(&mutate("vendor-domain-resources.json"));
    assert!(ops > 0);

    // Deep nesting where the webhook does not look: answered like any Pod.
    assert!(patched(&mutate("options-deep.json")).0 > 0);
    // A deep unknown field of the Pod is skipped by the typed parse; the patch cannot be checked against a
    // `Value` (too deep for one), but it is produced.
    match mutate("object-unknown-field-deep.json") {
        MutateOutcome::Patched { ops, unchecked, .. } => assert!(ops > 0 && unchecked > 0),
        other => panic!("{other:?}"),
    }

    // A GPU quantity that is no Kubernetes quantity (`nvidia.com/gpu: "one"`): not scored (mutation never
    // rejects), and `/validate-pod` holds it undecidable, never "no GPU": a warning under the
    // embedded policy's Warn, a denial in Enforce.
    assert!(matches!(
        mutate("unreadable-gpu-quantity.json"),
        MutateOutcome::Unchanged { .. }
    ));
    let answer: serde_json::Value = serde_json::from_slice(
        &check_validate(&seed("unreadable-gpu-quantity.json"), &policy).unwrap(),
    )
    .unwrap();
    let warning = answer["response"]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        warning.contains(r#"nvidia.com/gpu="one""#)
            && warning.contains("how many GPUs it asks for cannot be told"),
        "{answer}"
    );

    // The validating webhook answers all of them (a 400 for the bad uids), without a panic.
    for entry in std::fs::read_dir(seed_dir()).unwrap() {
        let path = entry.unwrap().path();
        let body = std::fs::read(&path).unwrap();
        let answer = check_validate(&body, &policy);
        let name = path.file_name().unwrap().to_string_lossy();
        assert_eq!(
            answer.is_err(),
            name.starts_with("uid-"),
            "{name}: {answer:?}"
        );
    }
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/mutate_pod")
}

#[test]
fn every_fixture_review_and_pod_holds_the_properties() {
    let (core, policy) = scorer();
    let mut score = explain(&core);
    let mut bodies: Vec<(String, Vec<u8>)> = Vec::new();
    for r in corpus::fixtures().admission_reviews().unwrap() {
        bodies.push((r.file.clone(), serde_json::to_vec(&r.review).unwrap()));
    }
    for file in corpus::fixtures().manifest_files().unwrap() {
        for p in corpus::extract_pods(&file) {
            for ns in ["gold", "bronze", "platinum"] {
                let review = pod_review(&p.pod, ns, Operation::Create);
                bodies.push((
                    format!("{} in {ns}", p.source),
                    serde_json::to_vec(&review).unwrap(),
                ));
            }
        }
    }
    let mut counts = [0usize; 3];
    for (name, body) in &bodies {
        let outcome = check_mutate(body, &policy, &mut score);
        match outcome {
            MutateOutcome::BadRequest(msg) => panic!("{name}: 400 {msg}"),
            MutateOutcome::Unchanged { .. } => counts[0] += 1,
            MutateOutcome::Patched { unchecked, .. } => {
                assert_eq!(unchecked, 0, "{name}");
                counts[1] += 1
            }
        }
        check_validate(body, &policy).unwrap_or_else(|e| panic!("{name}: 400 {e}"));
        counts[2] += 1;
    }
    println!(
        "{} bodies: {} unchanged, {} patched (each patch applied and parsed)",
        counts[2], counts[0], counts[1]
    );
    assert!(
        counts[1] >= 10,
        "too few patched fixtures to mean much: {counts:?}"
    );
}

fn check_seed(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/check")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn checked(outcome: CheckOutcome) -> gpu_admission_cli::Checked {
    match outcome {
        CheckOutcome::Checked(c) => c,
        CheckOutcome::LoadError(e) => panic!("a load error: {e}"),
    }
}

/// The `check` target's seeds with the answer each must get, then every seed and every fixture file (manifests,
/// AdmissionReviews, DRA) through the same property: a verdict for each object or a load error, no panic, no
/// floor the interpreter failed on.
#[test]
fn check_seeds_and_fixtures_hold_the_cli_properties() {
    let mut run = cli_run();

    // Bytes that are no manifests: the load error `check` prints.
    match check_cli(&check_seed("not-yaml.yaml"), &mut run) {
        CheckOutcome::LoadError(e) => assert!(e.contains("YAML document 0"), "{e}"),
        other => panic!("{other:?}"),
    }
    match check_cli(b"kind: Pod\n\xff\xfe", &mut run) {
        CheckOutcome::LoadError(e) => assert!(e.starts_with("not UTF-8"), "{e}"),
        other => panic!("{other:?}"),
    }

    // The workload the floor's interpreter panicked on (cel-interpreter 0.10): undecidable for /validate-pod,
    // denied in Enforce; refused by the apiserver when decoded, so no floor answer.
    let c = checked(check_cli(
        &check_seed("workload-requests-a-number.yaml"),
        &mut run,
    ));
    let [e] = c.evaluations.as_slice() else {
        panic!("{c:?}")
    };
    assert_eq!(
        (e.object.as_str(), e.verdict, e.floor.as_ref()),
        ("Deployment ml/trainer", Verdict::Denied, None),
        "{e:?}"
    );

    // A Namespace of the input gives its tier: the Pod pinned to a gold class is admitted, and the floor alone
    // admits it too. The same Pod checked next, alone, is in an untiered namespace again.
    let c = checked(check_cli(
        &check_seed("tiered-namespace-and-pod.yaml"),
        &mut run,
    ));
    let [e] = c.evaluations.as_slice() else {
        panic!("{c:?}")
    };
    assert_eq!(
        (e.tier.as_deref(), e.tier_from, e.verdict),
        (Some("gold"), Some(TierFrom::Label), Verdict::Allowed)
    );
    assert_eq!(e.pods[0].floor, Some(FloorAnswer::Allowed));
    let pod_alone = String::from_utf8(check_seed("tiered-namespace-and-pod.yaml"))
        .unwrap()
        .split("---")
        .last()
        .unwrap()
        .to_string();
    let c = checked(check_cli(pod_alone.as_bytes(), &mut run));
    let e = &c.evaluations[0];
    assert_eq!(
        (e.tier.as_deref(), e.tier_from),
        (Some("bronze"), Some(TierFrom::Default))
    );

    // Every seed of the target, and every fixture file: the property holds.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let paths: Vec<PathBuf> = [
        "fuzz/seeds/check",
        "tests/fixtures/manifests",
        "tests/fixtures/admissionreviews",
        "tests/fixtures/dra",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let (mut objects, mut floor_answers, mut unreadable) = (0, 0, Vec::new());
    for file in gpu_admission_cli::load::files(&paths).unwrap() {
        let body = std::fs::read(&file).unwrap();
        match check_cli(&body, &mut run) {
            CheckOutcome::Checked(c) => {
                objects += c.evaluations.len();
                floor_answers += c
                    .evaluations
                    .iter()
                    .flat_map(|e| e.floor_answers())
                    .filter(|a| **a != FloorAnswer::NotMatched)
                    .count();
            }
            CheckOutcome::LoadError(_) => unreadable.push(file.file_name().unwrap().to_owned()),
        }
    }
    println!("{objects} objects checked, {floor_answers} floor answers");
    assert_eq!(
        unreadable,
        ["not-yaml.yaml"],
        "only the seed built not to load"
    );
    assert!(
        objects >= 40 && floor_answers >= 50,
        "too few to mean much: {objects} objects, {floor_answers} floor answers"
    );
}
