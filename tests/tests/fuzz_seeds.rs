//! The fuzz targets' properties (`gpu_admission_properties`, run by `fuzz/` under cargo-fuzz)
//! replayed on stable over the seed corpus: the hostile inputs of `fuzz/seeds/` with the answer each must
//! get, and every AdmissionReview and Pod of the project's fixtures. The scorer is the real one, in process
//! (its `Explain`: the answer `Score` would give, with nothing learned), on its embedded default policy.

use std::path::PathBuf;
use std::sync::Arc;

use gpu_admission_core::policy::PolicySnapshot;
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
