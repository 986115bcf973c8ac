//! Server-side Score and Observe cost per call for a policy of 16 GPU classes × 64 job types (target
//! Score p99 ≤ 100 µs).
//!
//! `cargo run --release -p scorer --example score_bench [iterations] [families]`
//!
//! `families` (default 0): the job types declare a family by their name's first digit (`job-0*` …
//! `job-6*`: 7 families of about 10 job types), the shape the Sia truth of `loadgen learn` has.
//!
//! Times `Core::score` (request validation, the model, the proto response: everything the gRPC handler
//! does besides HTTP/2 and protobuf) with learned state for every (job type, class) pair, then
//! `Core::observe` (a new observation each call, a third of them co-located; the posterior rebuilt, the
//! per-job-type metrics updated), then a full gRPC round trip over loopback TCP for reference.
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::{self as pb, scorer_client::ScorerClient};
use scorer::metrics::Metrics;
use scorer::model::Learned;
use scorer::policy::watch::PolicyStore;
use scorer::service::Core;

const CLASSES: usize = 16;
const JOB_TYPES: usize = 64;

fn big_policy(families: bool) -> String {
    let mut y = String::from("defaultTier: bronze\ncatalog:\n");
    for c in 0..CLASSES {
        let vendor = if c % 5 == 4 { "amd" } else { "nvidia" };
        let memory = [24, 40, 48, 80, 141, 192][c % 6];
        writeln!(
            y,
            "  - {{ name: gpu-{c:02}, vendor: {vendor}, memoryGiB: {memory}, relativeThroughput: {:.2}, pricePerHour: {:.2} }}",
            0.3 + 0.15 * c as f64,
            0.5 + 0.4 * c as f64
        )
        .unwrap();
    }
    let all: Vec<String> = (0..CLASSES).map(|c| format!("gpu-{c:02}")).collect();
    let all = all.join(", ");
    y += "tiers:\n";
    for (tier, objective, weight) in [
        ("gold", "fastest", 0.9),
        ("silver", "fastest", 0.6),
        ("bronze", "cheapest", 0.2),
    ] {
        writeln!(y, "  - {{ name: {tier}, allowedClasses: [{all}], objective: {objective}, priorityWeight: {weight} }}").unwrap();
    }
    y += "workloadClasses:\n";
    for w in ["training", "inference", "batch", "interactive", "unknown"] {
        writeln!(y, "  {w}: {{ priorityWeight: 0.5, profile: {{ baseRuntimeSeconds: 3600, relativeStddev: 0.5 }} }}").unwrap();
    }
    y += "jobTypes:\n";
    let workloads = ["training", "inference", "batch", "interactive"];
    for j in 0..JOB_TYPES {
        let family = if families {
            format!(", family: \"job-{}*\"", j / 10)
        } else {
            String::new()
        };
        writeln!(
            y,
            "  - {{ name: job-{j:02}, workloadClass: {}, baseRuntimeSeconds: {}, relativeStddev: 0.4, throughputExponent: 0.8{family} }}",
            workloads[j % 4],
            600 + 300 * j
        )
        .unwrap();
    }
    y += "interference:\n  defaultSlowdown: 0.05\n  antiAffinityThreshold: 0.3\n  pairs:\n";
    for j in 0..JOB_TYPES {
        for k in (j..JOB_TYPES).step_by(7) {
            writeln!(
                y,
                "    - {{ a: job-{j:02}, b: job-{k:02}, slowdown: {:.2} }}",
                ((j * 31 + k * 17) % 60) as f64 / 100.0
            )
            .unwrap();
        }
    }
    y += "priority:\n  tierPoints: 50\n  workloadPoints: 30\n  sizePoints: 20\n";
    y +=
        "  sizeReference: { gpuCount: 8, memoryGiB: 80, modelSizeBillionParams: 70 }\n  buckets:\n";
    y += "    - { minScore: 90, name: gpu-ultra, value: 1000000, preemptionPolicy: PreemptLowerPriority }\n";
    y += "    - { minScore: 70, name: gpu-high, value: 100000, preemptionPolicy: PreemptLowerPriority }\n";
    y += "    - { minScore: 50, name: gpu-medium, value: 10000, preemptionPolicy: PreemptLowerPriority }\n";
    y += "    - { minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: Never }\n";
    y
}

fn requests() -> Vec<pb::ScoreRequest> {
    (0..1024)
        .map(|i| pb::ScoreRequest {
            request_id: format!("bench-{i}"),
            tier: ["gold", "silver", "bronze"][i % 3].into(),
            job_type: format!("job-{:02}", (i * 7) % JOB_TYPES),
            gpu_count: 1 + (i % 8) as u32,
            gpu_vendor: [pb::GpuVendor::Nvidia, pb::GpuVendor::Unknown][i % 2] as i32,
            gpu_memory_gib: Some([8.0, 16.0, 40.0, 70.0][i % 4]),
            model_size_billion_params: (i % 3 == 0).then_some(7.0),
            colocated_job_types: (0..(i % 4))
                .map(|k| format!("job-{:02}", (i + k * 13) % JOB_TYPES))
                .collect(),
            ..Default::default()
        })
        .collect()
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50), at(0.99), *samples.last().unwrap())
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let families = std::env::args().nth(2).is_some_and(|a| a != "0");
    let policy =
        scorer::policy::parse(&big_policy(families), "bench").expect("bench policy is valid");
    assert_eq!(
        (policy.classes.len(), policy.job_types.len()),
        (CLASSES, JOB_TYPES)
    );
    let core = Arc::new(Core::new(
        Arc::new(PolicyStore::new(Some(policy))),
        Learned::default(),
        Arc::new(Metrics::unregistered()),
    ));
    // Learned state for every (job type, class) pair and some interference.
    for j in 0..JOB_TYPES {
        for c in 0..CLASSES {
            core.observe(&pb::ObserveRequest {
                job_type: format!("job-{j:02}"),
                gpu_class: format!("gpu-{c:02}"),
                runtime_seconds: 1000.0 + (j * 37 + c * 11) as f64,
                colocated_job_types: if c % 4 == 0 {
                    vec![format!("job-{:02}", (j + 1) % JOB_TYPES)]
                } else {
                    vec![]
                },
                ..Default::default()
            })
            .unwrap();
        }
    }
    let reqs = requests();
    for r in reqs.iter().take(2000) {
        core.score(r).unwrap();
    }
    let mut samples = Vec::with_capacity(iterations);
    let mut feasible = 0usize;
    for i in 0..iterations {
        let r = &reqs[i % reqs.len()];
        let t = Instant::now();
        let answer = core.score(r).unwrap();
        samples.push(t.elapsed());
        feasible += usize::from(!answer.accepted_classes.is_empty());
    }
    let (p50, p99, max) = percentiles(samples);
    println!(
        "server-side Score ({CLASSES} classes x {JOB_TYPES} job types, {iterations} requests, {feasible} with a class): \
         p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6
    );

    // Observe: new ids, so every call learns (and rebuilds the posterior).
    let observations = (iterations / 20).max(1000);
    let mut samples = Vec::with_capacity(observations);
    for i in 0..observations {
        let req = pb::ObserveRequest {
            observation_id: format!("bench-observe-{i}"),
            job_type: format!("job-{:02}", (i * 5) % JOB_TYPES),
            gpu_class: format!("gpu-{:02}", (i * 3) % CLASSES),
            gpu_count: 1 + (i % 4) as u32,
            runtime_seconds: 900.0 + ((i * 7919) % 600) as f64,
            colocated_job_types: (0..(i % 3))
                .map(|k| format!("job-{:02}", (i + 1 + k * 11) % JOB_TYPES))
                .collect(),
            ..Default::default()
        };
        let t = Instant::now();
        core.observe(&req).unwrap();
        samples.push(t.elapsed());
    }
    let (p50, p99, max) = percentiles(samples);
    println!(
        "server-side Observe ({observations} new observations, 2 of 3 co-located): \
         p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6
    );

    // Full gRPC round trip over loopback, for reference.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dir = std::env::temp_dir().join(format!("score-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.yaml");
        std::fs::write(&path, big_policy(families)).unwrap();
        let config = scorer::server::Config { policy_path: Some(path), ..Default::default() };
        let running = scorer::server::start(config, listener, Arc::new(Metrics::unregistered())).await.unwrap();
        let mut client = ScorerClient::connect(format!("http://{}", running.addr)).await.unwrap();
        let n = (iterations / 10).max(1000);
        for r in reqs.iter().take(500) {
            client.score(r.clone()).await.unwrap();
        }
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            let r = reqs[i % reqs.len()].clone();
            let t = Instant::now();
            client.score(r).await.unwrap();
            samples.push(t.elapsed());
        }
        let (p50, p99, max) = percentiles(samples);
        println!(
            "gRPC round trip over loopback ({n} sequential requests): p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6
        );
        running.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    });
}
