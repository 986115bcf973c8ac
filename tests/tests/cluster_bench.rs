//! `cluster-bench` at a small size, so that it does not rot: both parts on the real control plane (A: etcd +
//! kube-apiserver; B: + scheduler, controllers and kwok with 50 fake GPU Nodes), 200 Pods per run, 8
//! namespaces per arm, 4 clients, one round. Judged on what the benchmark must show whatever the timing: its
//! tables printed, every Pod created and stored in every run, no webhook called for the skipped namespaces and
//! both Pod webhooks called once per Pod in the webhooked ones, every GPU Pod decided, and in B every Pod
//! bound, none outside its tier's classes, none whose placement the oracle finds reaching outside them. No
//! timing is asserted.
//!
//! Part C (the peers' form) at a tiny size too: 20 Pods per run, 4 clients, 1 replica behind the balancer,
//! the three kinds, one with/without pair each: every Pod stored, both Pod webhooks and the floor's Pod
//! policy called for each Pod with the registrations installed, none of ours without, its tables printed.

use std::process::Command;

use serde_json::Value;

const PODS: u64 = 200;

/// Runs `cluster-bench` with `args` (debug builds on a shared 2-core machine: the tests' scorer budget of
/// 1,000 ms, not the product's 200) and asserts it succeeded: its stdout and its JSON report. `None` where
/// the control plane is not built.
fn bench(args: &[&str]) -> Option<(String, Value)> {
    gpu_admission_tests::cluster::control_plane_bin()
        .expect("the control plane builds or is skipped")?;
    let bins = gpu_admission_tests::binaries::binaries();
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cluster-bench"))
        .args(args)
        .args(["--deadline-ms", "1000", "--json"])
        .arg(&json_path)
        .env("GPU_ADMISSION_SCORER_BIN", &bins.scorer)
        .env("GPU_ADMISSION_WEBHOOK_BIN", &bins.webhook)
        .env("GPU_ADMISSION_OBSERVER_BIN", &bins.observer)
        .output()
        .expect("cluster-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    assert!(
        out.status.success(),
        "cluster-bench {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    Some((stdout, report))
}

#[test]
fn the_cluster_benchmark_runs_small_and_holds_its_invariants() {
    let pods = PODS.to_string();
    let Some((stdout, report)) = bench(&[
        "--nodes",
        "50",
        "--namespaces",
        "8",
        "--clients",
        "4",
        "--rounds",
        "1",
        "--pods",
        &pods,
        "--cpu-pods",
        "40",
        "--audit-interval-secs",
        "5",
        "--bind-timeout-secs",
        "120",
    ]) else {
        return;
    };
    for heading in [
        "### A. Cost of scope",
        "| **median** | GPU |",
        "| **median** | CPU-only |",
        "Where the difference goes",
        "### B. Scale with kwok: 50 Nodes, 200 GPU Pods",
        "| bound outside the tier's classes | **0** |",
        "| kwok |",
        "| frontend |",
    ] {
        assert!(stdout.contains(heading), "no `{heading}` in the output");
    }

    let runs = report["scope"]["runs"].as_array().expect("part A's runs");
    assert_eq!(runs.len(), 4, "GPU and CPU-only, webhooked and skipped");
    for run in runs {
        let what = format!("{} {}", run["shape"], run["arm"]);
        assert_eq!(run["created"]["pods"], PODS, "{what}");
        assert_eq!(run["created"]["failed"], 0, "{what}");
        let calls = |hook: &str| {
            run["webhook_calls"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["webhook"] == hook)
                .map_or(0, |c| c["calls"].as_u64().unwrap())
        };
        if run["arm"] == "skipped" {
            assert_eq!(run["webhook_calls"], Value::Array(vec![]), "{what}");
            assert_eq!(run["decided"], 0, "{what}");
        } else {
            assert_eq!(calls("pods.gpu-admission.io"), PODS, "{what}");
            assert_eq!(calls("pods.validate.gpu-admission.io"), PODS, "{what}");
        }
        if run["arm"] == "webhooked" && run["shape"] == "gpu" {
            assert_eq!(run["decided"], PODS, "{what}: every GPU Pod decided");
        }
        let processes: Vec<&str> = run["usage"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|u| u["process"].as_str())
            .collect();
        assert_eq!(
            processes,
            ["apiserver", "etcd", "frontend", "scorer", "cluster-bench"],
            "{what}"
        );
    }
    let scale = &report["scale"];
    assert_eq!(scale["nodes"], 50);
    assert_eq!(scale["created"]["pods"], PODS);
    assert_eq!(scale["bound"], PODS, "every Pod bound");
    assert_eq!(scale["decided"], PODS, "every Pod decided");
    assert_eq!(scale["out_of_tier"], 0);
    assert_eq!(scale["oracle_escapes"], 0);
    let per_class: u64 = scale["per_class"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(per_class, PODS);
    assert_eq!(scale["cpu_created"]["pods"], 40);
    assert_eq!(scale["cpu_created"]["failed"], 0);
    // Two passes finished after every Pod was bound, the last over that state.
    assert!(
        scale["audit"]["passes"].as_u64().unwrap() >= 2,
        "{}",
        scale["audit"]
    );
    let processes: Vec<&str> = (scale["usage"].as_array().unwrap().iter())
        .map(|u| u["process"].as_str().unwrap())
        .collect();
    assert!(processes.contains(&"observer"), "{processes:?}");
}

#[test]
fn the_peer_form_runs_tiny_and_holds_its_invariants() {
    const PEER_PODS: u64 = 20;
    let pods = PEER_PODS.to_string();
    let Some((stdout, report)) = bench(&[
        "--part",
        "peer",
        "--peer-clients",
        "4",
        "--peer-replicas",
        "1",
        "--peer-rounds",
        "1",
        "--peer-nodes",
        "4",
        "--peer-namespaces",
        "2",
        "--peer-pods",
        &pods,
    ]) else {
        return;
    };
    for heading in [
        "### C. Admission cost in the peers' form",
        "| 4 | 1 | quota'd GPU |",
        "Whose time",
    ] {
        assert!(stdout.contains(heading), "no `{heading}` in the output");
    }
    let runs = report["peer"]["runs"].as_array().expect("part C's runs");
    assert_eq!(runs.len(), 6, "three kinds, with and without");
    for run in runs {
        let what = format!("{} {}", run["kind"], run["arm"]);
        assert_eq!(run["load"]["pods"], PEER_PODS, "{what}");
        assert_eq!(run["load"]["failed"], 0, "{what}");
        let served: u64 = (run["per_replica"].as_array().unwrap().iter())
            .map(|n| n.as_u64().unwrap())
            .sum();
        if run["arm"] == "with" {
            assert!(
                served >= 2 * PEER_PODS,
                "{what}: the frontend served {served}"
            );
        } else {
            assert_eq!(run["decided"], 0, "{what}");
            assert_eq!(served, 0, "{what}: the frontend served {served}");
        }
    }
    let cells = report["peer"]["cells"].as_array().expect("part C's cells");
    assert_eq!(cells.len(), 3);
    for cell in cells {
        for hook in ["pods.gpu-admission.io", "pods.validate.gpu-admission.io"] {
            assert_eq!(
                cell["webhooks"][hook]["calls"], PEER_PODS,
                "{}: {hook}",
                cell["kind"]
            );
        }
        // The ValidatingAdmissionPolicy plugin runs for every CREATE, the probe's dry run included.
        let plugin = |arm: usize| cell["policy_plugin"][arm]["calls"].as_u64().unwrap();
        assert!(plugin(0) >= PEER_PODS, "{}: {}", cell["kind"], plugin(0));
        assert!(plugin(1) >= PEER_PODS, "{}: {}", cell["kind"], plugin(1));
    }
}

#[test]
fn the_envelope_held_runs_small_and_holds_its_invariants() {
    const HELD_PODS: u64 = 200;
    const ADMITTED: u64 = 20;
    let (pods, admitted) = (HELD_PODS.to_string(), ADMITTED.to_string());
    let Some((stdout, report)) = bench(&[
        "--part",
        "held",
        "--nodes",
        "20",
        "--namespaces",
        "8",
        "--pods",
        &pods,
        "--cpu-pods",
        "40",
        "--held-admissions",
        &admitted,
        "--clients",
        "4",
        "--audit-interval-secs",
        "5",
    ]) else {
        return;
    };
    assert!(stdout.contains("### D. The envelope held: 20 Nodes, 200 GPU"));
    let held = &report["held"];
    assert_eq!(held["prefilled"]["pods"], HELD_PODS);
    assert_eq!(held["prefilled"]["failed"], 0);
    // 8 namespaces over the shipped policy's tiers: silver's hold some of the prefilled GPU Pods, all counted
    // by the frontend (the run waits for its usage to equal them, then them and the admitted).
    let quota_tier = held["quota_tier_gpus"].as_u64().unwrap();
    assert!(quota_tier > 0 && quota_tier < HELD_PODS, "{held}");
    assert_eq!(held["admitted"]["pods"], ADMITTED);
    assert_eq!(held["admitted"]["failed"], 0, "no quota'd Pod refused");
    assert_eq!(held["admitted_decided"], ADMITTED);
    assert_eq!(
        held["quota_tier_used_after"].as_f64(),
        Some((quota_tier + ADMITTED) as f64)
    );
    assert!(held["audit"]["passes"].as_u64().unwrap() >= 2, "{held}");
    let passes = held["pass_seconds"].as_array().unwrap();
    assert!(passes.iter().any(|p| p.as_f64().unwrap() > 0.0), "{held}");
    let processes: Vec<&str> = (held["usage"].as_array().unwrap().iter())
        .map(|u| u["process"].as_str().unwrap())
        .collect();
    for p in ["apiserver", "frontend", "observer"] {
        assert!(processes.contains(&p), "{processes:?}");
    }
}
