//! `gpu-admission check` warns on stderr about input it would otherwise answer quietly, and says so
//! in its exit code (3 when nothing is denied): a tier the policy does not have (with the tier that applies
//! instead), a Pod that cannot be read as one, a GPU quantity that is no Kubernetes quantity. The binary as a
//! user runs it.

use std::path::Path;
use std::process::{Command, Output};

fn check(args: &[&str]) -> Output {
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/warnings/undecidable.yaml");
    Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .arg("check")
        .arg("-f")
        .arg(&input)
        .args(args)
        .output()
        .expect("gpu-admission runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn unknown_tier_unreadable_pod_and_quantity_are_warned_with_exit_3() {
    let out = check(&["--namespace", "default=diamond", "--mode", "Warn"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    for expected in [
        "gpu-admission: warning: --namespace default=diamond: the policy has no tier \"diamond\" (its tiers: platinum, gold, silver, bronze); namespace default is held to the default tier bronze instead",
        "gpu-admission: warning: Pod default/bad-containers (",
        "undecidable, /validate-pod denies it in Enforce: cannot be read as a Pod",
        r#"gpu-admission: warning: Pod default/one ("#,
        r#"asks for GPUs with a quantity that is no Kubernetes quantity (container "c": nvidia.com/gpu="one")"#,
    ] {
        assert!(stderr.contains(expected), "{expected}\nnot in:\n{stderr}");
    }
    // The table holds the tier that applies, and the unreadable Pod is decided, not "ignored".
    assert!(
        stdout.contains("4 objects: 1 allowed, 3 warned, 0 denied, 0 errors; 0 ignored"),
        "{stdout}"
    );
    assert!(!stdout.contains("diamond"), "{stdout}");
    // ... and says what decided it: the namespace is untiered, held to the policy's default tier.
    assert!(
        stdout.contains("Pod default/bad-containers  bronze (default)  warned"),
        "{stdout}"
    );
    // The denial names the real reason: memory, not the vendor the tier's class has.
    assert!(
        stdout.contains("needs 200 GiB of GPU memory per GPU, more than any GPU class of the tier has (at most 24 GiB)")
            && !stdout.contains("nvidia GPUs;"),
        "{stdout}"
    );
}

#[test]
fn in_enforce_the_undecidable_are_denied_exit_1() {
    let out = check(&["--namespace", "default=bronze", "--mode", "Enforce"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // Labelled bronze: the tier alone.
    assert!(
        stdout.contains("Pod default/bad-containers  bronze  denied")
            && stdout.contains("Pod default/one             bronze  denied"),
        "{stdout}"
    );
    assert!(!stderr.contains("no tier"), "{stderr}");
}

#[test]
fn a_known_tier_and_decidable_input_exit_0_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\n\
         spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["check", "--namespace", "ml=gold", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stderr), "");
}
