//! A CI-sized `loadgen learn` on both truths: the cluster truth (26 job types, a third of their priors wrong,
//! close calls, unlisted and late job types, heavy tails) and the Sia truth (measured throughputs of 23 job
//! types on 5 GPU classes, spec-sheet priors): the real loadgen binary drives a real scorer process; the
//! learning scorer's regret must fall from the first 10 % of decisions to the last 25 % and end below the
//! priors alone, and its exploration share stay under the policy's cap, on each truth. (Decision quality, not timing; the
//! full benchmark is 5 seeds × 2 000 jobs, see loadgen/README.md.)
use std::path::PathBuf;
use std::process::Command;

/// The directory holding the `scorer` binary next to loadgen's, built if missing.
fn bin_dir() -> PathBuf {
    let loadgen = PathBuf::from(env!("CARGO_BIN_EXE_loadgen"));
    let dir = loadgen.parent().unwrap().to_path_buf();
    if !dir.join("scorer").is_file() {
        let profile_release = dir.ends_with("release");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-p", "scorer"]);
        if profile_release {
            cargo.arg("--release");
        }
        assert!(cargo.status().unwrap().success(), "building the scorer");
    }
    dir
}

#[test]
fn regret_falls_as_the_scorer_learns() {
    let work = tempfile::tempdir().unwrap();
    let json = work.path().join("learn.json");
    let svg = work.path().join("learn.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "learn",
            "--truth",
            "cluster,sia",
            "--seed",
            "3",
            "--decisions",
            "1500",
        ])
        .arg("--bin-dir")
        .arg(bin_dir())
        .arg("--work-dir")
        .arg(work.path().join("run"))
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for (k, truth) in ["cluster", "sia"].iter().enumerate() {
        check(&out["runs"][k], truth, &stdout);
    }
    assert!(out["summary_by_truth"]["sia"].is_object(), "{stdout}");
    assert!(
        std::fs::read_to_string(work.path().join("learn-sia-seed3.svg"))
            .unwrap()
            .contains("<svg")
    );
}

/// The trend on one truth's run.
fn check(r: &serde_json::Value, truth: &str, stdout: &str) {
    assert_eq!(r["truth"], truth);
    // Every job type is learned, the unlisted ones too.
    assert_eq!(r["refused_observations"], 0, "{stdout}");
    let first = r["first_10pct"]["scorer"].as_f64().unwrap();
    let last = r["last_25pct"]["scorer"].as_f64().unwrap();
    assert!(
        last < first,
        "regret did not fall: first 10% {first}, last 25% {last}\n{stdout}"
    );
    // Learning beats the priors alone at the end.
    let prior = r["last_25pct"]["prior_only"].as_f64().unwrap();
    assert!(
        last < prior,
        "last 25%: scorer {last}, prior-only {prior}\n{stdout}"
    );
    let e = &r["exploration"];
    assert!(
        e["share"].as_f64().unwrap() <= e["cap"].as_f64().unwrap(),
        "{stdout}"
    );
    assert!(
        e["share"].as_f64().unwrap() > 0.0,
        "never explored\n{stdout}"
    );
    assert_eq!(
        r["decisions"].as_u64().unwrap() + r["infeasible"].as_u64().unwrap(),
        1500
    );
    // The recall's split by the pairs' co-located runs adds up to the pairs and the hits.
    let a = &r["avoid_list"];
    let by_runs = a["by_runs"].as_array().unwrap();
    let sum = |i: usize| -> u64 { by_runs.iter().map(|b| b[i].as_u64().unwrap()).sum() };
    assert_eq!(sum(0), a["truly_harmful"].as_u64().unwrap(), "{stdout}");
    assert_eq!(sum(1), a["correct"].as_u64().unwrap(), "{stdout}");
}
