//! The scorer over a real TCP socket: the "must show" cases, health, reflection (v1 and
//! v1alpha), policy reload through a ConfigMap-style symlink swap, and state persistence.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpu_admission_proto::scorer::v1::{self as pb, scorer_client::ScorerClient};
use prost::Message;
use scorer::metrics::Metrics;
use scorer::policy::DEFAULT_POLICY_YAML;
use scorer::server::{self, Config, Running, SERVICE_NAME};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

async fn start(config: Config) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    server::start(config, listener, Arc::new(Metrics::unregistered()))
        .await
        .unwrap()
}

async fn channel(running: &Running) -> Channel {
    Channel::from_shared(format!("http://{}", running.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn job(tier: &str, job_type: &str, memory: f64) -> pb::ScoreRequest {
    pb::ScoreRequest {
        request_id: format!("{tier}-{job_type}"),
        namespace: "ml".into(),
        tier: tier.into(),
        job_type: job_type.into(),
        gpu_count: 1,
        gpu_vendor: pb::GpuVendor::Nvidia as i32,
        gpu_memory_gib: Some(memory),
        ..Default::default()
    }
}

#[tokio::test]
async fn default_policy_must_show_cases() {
    let running = start(Config::default()).await;
    let mut client = ScorerClient::new(channel(&running).await);

    let mut gold = job("gold", "train-llama", 70.0);
    gold.workload_class = pb::WorkloadClass::Training as i32;
    let r = client.score(gold).await.unwrap().into_inner();
    assert_eq!(r.request_id, "gold-train-llama");
    let best = &r.accepted_classes[0];
    assert_eq!(best.name, "H100-80GB");
    assert_eq!(
        (best.node_label_key.as_str(), best.node_label_value.as_str()),
        ("gpu.nvidia.com/class", "H100-80GB")
    );
    assert_eq!(best.taint_key, "nvidia.com/gpu");
    assert!(r.infeasible_reason.is_empty());
    assert_eq!(r.candidates.len(), 7);
    assert!(
        r.candidates[0].feasible
            && r.candidates[0].cost > 0.0
            && r.candidates[0].runtime_mean_seconds > 0.0
    );
    let pc = r.priority_class.unwrap();
    assert!((0.0..=100.0).contains(&r.priority_score));
    assert!(!pc.name.is_empty());
    assert!(r.avoid_job_types.contains(&"train-llama".to_string()));
    assert_eq!(r.policy_version.len(), 12);

    let r = client
        .score(job("bronze", "train-llama", 70.0))
        .await
        .unwrap()
        .into_inner();
    assert!(r.accepted_classes.is_empty());
    assert!(
        r.infeasible_reason
            .contains("L4-24GB: needs 70 GiB of GPU memory per GPU, class has 24 GiB"),
        "{}",
        r.infeasible_reason
    );
    assert!(
        r.priority_class.is_some(),
        "priority is assigned even without a class"
    );
    assert!(
        r.candidates
            .iter()
            .all(|c| !c.feasible && !c.infeasible_reason.is_empty())
    );

    let mut bronze = job("bronze", "inference-llm", 16.0);
    bronze.workload_class = pb::WorkloadClass::Inference as i32;
    let r = client.score(bronze).await.unwrap().into_inner();
    assert_eq!(r.accepted_classes[0].name, "L4-24GB");

    // Bad input is refused, not scored.
    let e = client
        .score(job("gold", "train-llama", f64::NAN))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // GetPolicy and Observe.
    let p = client
        .get_policy(pb::GetPolicyRequest {})
        .await
        .unwrap()
        .into_inner();
    let policy = gpu_admission_policy::wire::policy_of(&p).unwrap();
    assert_eq!(policy.priority.buckets.len(), 4);
    let o = client
        .observe(pb::ObserveRequest {
            job_type: "train-llama".into(),
            gpu_class: "H100-80GB".into(),
            runtime_seconds: 30_000.0,
            colocated_job_types: vec![],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(o.observations, 1);
    assert!(o.runtime_mean_seconds < 43_200.0);
    running.shutdown().await.unwrap();
}

async fn health(ch: Channel, service: &str) -> ServingStatus {
    let r = HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap();
    ServingStatus::try_from(r.into_inner().status).unwrap()
}

#[tokio::test]
async fn health_is_serving_with_a_policy() {
    let running = start(Config::default()).await;
    let ch = channel(&running).await;
    assert_eq!(health(ch.clone(), "").await, ServingStatus::Serving);
    assert_eq!(health(ch, SERVICE_NAME).await, ServingStatus::Serving);
    running.shutdown().await.unwrap();
}

/// A ConfigMap-style volume: `policy.yaml -> ..data/policy.yaml`, `..data -> ..N`, swapped atomically.
struct ConfigMapDir {
    root: tempfile::TempDir,
    generation: u32,
}

impl ConfigMapDir {
    fn new(content: &str) -> Self {
        let mut d = Self {
            root: tempfile::tempdir().unwrap(),
            generation: 0,
        };
        d.update(content);
        std::os::unix::fs::symlink("..data/policy.yaml", d.path()).unwrap();
        d
    }

    fn update(&mut self, content: &str) {
        self.generation += 1;
        let gen_dir = format!("..gen_{}", self.generation);
        std::fs::create_dir(self.root.path().join(&gen_dir)).unwrap();
        std::fs::write(self.root.path().join(&gen_dir).join("policy.yaml"), content).unwrap();
        let tmp = self.root.path().join("..data_tmp");
        std::os::unix::fs::symlink(&gen_dir, &tmp).unwrap();
        std::fs::rename(&tmp, self.root.path().join("..data")).unwrap();
    }

    fn path(&self) -> PathBuf {
        self.root.path().join("policy.yaml")
    }
}

fn policy_config(path: &Path) -> Config {
    Config {
        policy_path: Some(path.to_path_buf()),
        policy_poll_interval: Duration::from_millis(20),
        ..Config::default()
    }
}

/// Polls until `check` holds (bounded, so a broken watcher fails the test instead of hanging it).
async fn eventually<F: std::future::Future<Output = bool>>(
    mut check: impl FnMut() -> F,
    what: &str,
) {
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test]
async fn invalid_policy_at_start_is_not_serving_until_fixed() {
    let mut dir = ConfigMapDir::new("catalog: [");
    let running = start(policy_config(&dir.path())).await;
    let ch = channel(&running).await;
    assert_eq!(health(ch.clone(), "").await, ServingStatus::NotServing);
    assert_eq!(
        health(ch.clone(), SERVICE_NAME).await,
        ServingStatus::NotServing
    );
    let e = ScorerClient::new(ch.clone())
        .score(job("gold", "train-llama", 70.0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);

    dir.update(DEFAULT_POLICY_YAML);
    eventually(
        || {
            let ch = ch.clone();
            async move { health(ch, SERVICE_NAME).await == ServingStatus::Serving }
        },
        "SERVING",
    )
    .await;
    assert_eq!(health(ch.clone(), "").await, ServingStatus::Serving);
    let r = ScorerClient::new(ch)
        .score(job("gold", "train-llama", 70.0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.accepted_classes[0].name, "H100-80GB");
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn policy_reload_good_bad_good_over_grpc() {
    let v = |version: &str| format!("version: {version}\n{DEFAULT_POLICY_YAML}");
    let mut dir = ConfigMapDir::new(&v("good-1"));
    let running = start(policy_config(&dir.path())).await;
    let ch = channel(&running).await;
    let mut client = ScorerClient::new(ch.clone());
    let version = |mut c: ScorerClient<Channel>| async move {
        c.get_policy(pb::GetPolicyRequest {})
            .await
            .unwrap()
            .into_inner()
            .version
    };
    assert_eq!(version(client.clone()).await, "good-1");

    // A bad file (negative memory) never replaces the good one; requests keep succeeding meanwhile.
    dir.update(&v("bad-2").replace("    memoryGiB: 80\n", "    memoryGiB: -80\n"));
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = client
            .score(job("gold", "train-llama", 70.0))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.policy_version, "good-1");
    }
    assert_eq!(
        health(ch.clone(), SERVICE_NAME).await,
        ServingStatus::Serving
    );

    // A good file replaces it, with its changes in effect: bronze now allows A100-80GB.
    let changed = v("good-3").replace(
        "    allowedClasses: [L4-24GB]\n",
        "    allowedClasses: [L4-24GB, A100-80GB]\n",
    );
    dir.update(&changed);
    eventually(
        || version(client.clone()).then_eq("good-3"),
        "policy good-3",
    )
    .await;
    let r = client
        .score(job("bronze", "train-llama", 70.0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.accepted_classes[0].name, "A100-80GB");
    running.shutdown().await.unwrap();
}

trait ThenEq {
    fn then_eq(self, expected: &'static str) -> impl std::future::Future<Output = bool>;
}

impl<F: std::future::Future<Output = String>> ThenEq for F {
    async fn then_eq(self, expected: &'static str) -> bool {
        self.await == expected
    }
}

#[tokio::test]
async fn learned_state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let config = Config {
        state_path: Some(state.clone()),
        ..Config::default()
    };
    let obs = pb::ObserveRequest {
        job_type: "train-bert".into(),
        gpu_class: "A100-80GB".into(),
        runtime_seconds: 12_000.0,
        colocated_job_types: vec![],
        ..Default::default()
    };

    let running = start(config.clone()).await;
    let mut client = ScorerClient::new(channel(&running).await);
    assert_eq!(
        client
            .observe(obs.clone())
            .await
            .unwrap()
            .into_inner()
            .observations,
        1
    );
    running.shutdown().await.unwrap();
    assert!(state.exists(), "snapshot written at shutdown");

    let running = start(config.clone()).await;
    let mut client = ScorerClient::new(channel(&running).await);
    assert_eq!(
        client
            .observe(obs.clone())
            .await
            .unwrap()
            .into_inner()
            .observations,
        2
    );
    running.shutdown().await.unwrap();

    // A corrupt snapshot is reported and ignored, never fatal.
    std::fs::write(&state, b"{\"format\": 12").unwrap();
    let running = start(config).await;
    let mut client = ScorerClient::new(channel(&running).await);
    assert_eq!(
        client.observe(obs).await.unwrap().into_inner().observations,
        1
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn learned_state_is_snapshotted_periodically() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let config = Config {
        state_path: Some(state.clone()),
        snapshot_interval: Duration::from_millis(20),
        ..Config::default()
    };
    let running = start(config).await;
    let mut client = ScorerClient::new(channel(&running).await);
    client
        .observe(pb::ObserveRequest {
            job_type: "notebook".into(),
            gpu_class: "L4-24GB".into(),
            runtime_seconds: 5_000.0,
            colocated_job_types: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    // Without any shutdown, a periodic snapshot holds the observation.
    eventually(
        || {
            let state = state.clone();
            async move {
                scorer::state::load(&state)
                    .ok()
                    .flatten()
                    .is_some_and(|l| l.runtimes.get("notebook", "L4-24GB").count == 1)
            }
        },
        "a periodic snapshot with the observation",
    )
    .await;
    running.shutdown().await.unwrap();
}

fn run(id: &str, job_type: &str, class: &str, gpus: u32, runtime: f64) -> pb::ObserveRequest {
    pb::ObserveRequest {
        job_type: job_type.into(),
        gpu_class: class.into(),
        runtime_seconds: runtime,
        observation_id: id.into(),
        gpu_count: gpus,
        ..Default::default()
    }
}

#[tokio::test]
async fn observe_deduplicates_by_observation_id() {
    let running = start(Config::default()).await;
    let mut client = ScorerClient::new(channel(&running).await);
    let first = client
        .observe(run("uid-1", "train-bert", "A100-80GB", 2, 6_000.0))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.duplicate);
    assert_eq!(first.observations, 1);
    let again = client
        .observe(run("uid-1", "train-bert", "A100-80GB", 2, 6_000.0))
        .await
        .unwrap()
        .into_inner();
    assert!(again.duplicate);
    assert_eq!(again.observations, 1);
    assert_eq!(again.runtime_mean_seconds, first.runtime_mean_seconds);
    let state = client
        .export_state(pb::ExportStateRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state.observations, 1);
    running.shutdown().await.unwrap();
}

/// Explain answers what Score answers, without spending anything: the exploration budget, the
/// learned state and its digest stay as they were.
#[tokio::test]
async fn explain_is_score_without_side_effects() {
    let running = start(Config::default()).await;
    let mut client = ScorerClient::new(channel(&running).await);
    for i in 0..5 {
        client
            .observe(run(
                &format!("u{i}"),
                "train-bert",
                "H100-80GB",
                1,
                20_000.0,
            ))
            .await
            .unwrap();
    }
    let mut req = job("gold", "train-bert", 30.0);
    req.colocated_job_types = vec!["train-resnet".into()];
    let before = running.core.snapshot();
    let e = client.explain(req.clone()).await.unwrap().into_inner();
    assert_eq!(running.core.snapshot(), before, "Explain changed the state");
    assert_eq!(running.core.snapshot().exploration.len(), 0);
    let answer = e.answer.clone().unwrap();
    let scored = client.score(req).await.unwrap().into_inner();
    assert_eq!(answer, scored);
    assert_eq!(
        running.core.snapshot().exploration.len(),
        1,
        "Score spends budget"
    );
    // H100 was observed 2.6x slower than its prior for train-bert: the table says so.
    let h100 = e
        .candidates
        .iter()
        .find(|c| c.gpu_class == "H100-80GB")
        .unwrap();
    assert_eq!(h100.observations, 5);
    assert!(
        h100.runtime_mean_seconds > 2.0 * h100.prior_runtime_seconds,
        "{h100:?}"
    );
    assert!(h100.interference_slowdown > 0.0 && h100.interference_penalty > 0.0);
    assert_eq!(answer.accepted_classes[0].name, e.candidates[0].gpu_class);
    assert!(
        ["lowest-cost", "exploration", "exploration-declined"].contains(&e.rule.as_str()),
        "{}",
        e.rule
    );
    assert!(
        e.reason.contains(&e.candidates[0].gpu_class),
        "{}",
        e.reason
    );
    let l4 = e
        .candidates
        .iter()
        .find(|c| c.gpu_class == "L4-24GB")
        .unwrap();
    assert!(
        !l4.feasible && l4.infeasible_reasons[0].contains("30 GiB"),
        "{l4:?}"
    );
    let h200 = e
        .candidates
        .iter()
        .find(|c| c.gpu_class == "H200-141GB")
        .unwrap();
    assert!(
        !h200.feasible && h200.infeasible_reasons[0].contains("tier"),
        "{h200:?}"
    );
    assert_eq!(e.observations, 5);
    assert_eq!(e.state_digest.len(), 32);
    running.shutdown().await.unwrap();
}

/// Two replicas: after the same observations (in different orders) they have equal digests and answer
/// identically; Import adopts a superset and refuses a state that misses observations.
#[tokio::test]
async fn replicas_agree_and_import_adopts_only_supersets() {
    let a = start(Config::default()).await;
    let b = start(Config::default()).await;
    let mut ca = ScorerClient::new(channel(&a).await);
    let mut cb = ScorerClient::new(channel(&b).await);
    let runs: Vec<_> = (0..12)
        .map(|i| {
            let class = ["A100-80GB", "L40S-48GB", "H100-80GB"][i % 3];
            run(
                &format!("pod-{i}"),
                "inference-llm",
                class,
                1 + (i % 2) as u32,
                1_000.0 + 50.0 * i as f64,
            )
        })
        .collect();
    for r in &runs {
        ca.observe(r.clone()).await.unwrap();
    }
    for r in runs.iter().rev() {
        cb.observe(r.clone()).await.unwrap();
    }
    let sa = ca
        .export_state(pb::ExportStateRequest {})
        .await
        .unwrap()
        .into_inner();
    let sb = cb
        .export_state(pb::ExportStateRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(sa.digest, sb.digest);
    assert_eq!(sa.observations, 12);
    for i in 0..20 {
        let mut req = job("gold", "inference-llm", 16.0);
        req.request_id = format!("req-{i}");
        let (x, y) = (
            ca.score(req.clone()).await.unwrap().into_inner(),
            cb.score(req).await.unwrap().into_inner(),
        );
        assert_eq!(x, y);
    }

    // A new replica adopts the state and answers like the others.
    let c = start(Config::default()).await;
    let mut cc = ScorerClient::new(channel(&c).await);
    let imported = cc.import_state(sa.clone()).await.unwrap().into_inner();
    assert!(imported.applied);
    assert_eq!(
        (imported.observations, imported.digest.as_str()),
        (12, sa.digest.as_str())
    );
    let req = job("silver", "inference-llm", 16.0);
    assert_eq!(
        cc.explain(req.clone()).await.unwrap().into_inner().answer,
        ca.explain(req).await.unwrap().into_inner().answer
    );
    // A learns one more; importing B's (older) state into A is refused, A keeps its own.
    ca.observe(run("pod-99", "inference-llm", "A100-80GB", 1, 900.0))
        .await
        .unwrap();
    let kept = ca.import_state(sb).await.unwrap().into_inner();
    assert!(!kept.applied);
    assert_eq!(kept.observations, 13);
    // Garbage is an invalid argument.
    let e = ca
        .import_state(pb::LearnedState {
            snapshot: b"nope".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    for r in [a, b, c] {
        r.shutdown().await.unwrap();
    }
}

mod reflection {
    use super::*;

    fn decode_files(files: Vec<Vec<u8>>) -> Vec<prost_types::FileDescriptorProto> {
        files
            .iter()
            .map(|b| prost_types::FileDescriptorProto::decode(b.as_slice()).unwrap())
            .collect()
    }

    fn assert_scorer_file(files: &[prost_types::FileDescriptorProto]) {
        let f = files
            .iter()
            .find(|f| f.package() == "gpuadmission.scorer.v1")
            .expect("scorer file");
        let methods: Vec<_> = f.service[0].method.iter().map(|m| m.name()).collect();
        assert_eq!(f.service[0].name(), "Scorer");
        assert_eq!(
            methods,
            [
                "Score",
                "ScoreCalls",
                "Observe",
                "GetPolicy",
                "Explain",
                "ExportState",
                "ImportState",
                "ValidatePolicy"
            ]
        );
        assert!(f.message_type.iter().any(|m| m.name() == "ScoreRequest"));
    }

    #[tokio::test]
    async fn v1_lists_and_resolves() {
        use tonic_reflection::pb::v1::{
            ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        };
        let running = start(Config::default()).await;
        let mut client = ServerReflectionClient::new(channel(&running).await);
        let requests = [
            MessageRequest::ListServices(String::new()),
            MessageRequest::FileContainingSymbol(SERVICE_NAME.into()),
            MessageRequest::FileContainingSymbol("gpuadmission.scorer.v1.ScoreRequest".into()),
        ]
        .map(|m| ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        });
        let mut responses = client
            .server_reflection_info(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        match responses
            .next()
            .await
            .unwrap()
            .unwrap()
            .message_response
            .unwrap()
        {
            MessageResponse::ListServicesResponse(l) => {
                let names: Vec<_> = l.service.iter().map(|s| s.name.as_str()).collect();
                assert!(names.contains(&SERVICE_NAME), "{names:?}");
                assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        for _ in 0..2 {
            match responses
                .next()
                .await
                .unwrap()
                .unwrap()
                .message_response
                .unwrap()
            {
                MessageResponse::FileDescriptorResponse(f) => {
                    assert_scorer_file(&decode_files(f.file_descriptor_proto))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        running.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn v1alpha_lists_and_resolves() {
        use tonic_reflection::pb::v1alpha::{
            ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
            server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        };
        let running = start(Config::default()).await;
        let mut client = ServerReflectionClient::new(channel(&running).await);
        let requests = [
            MessageRequest::ListServices(String::new()),
            MessageRequest::FileContainingSymbol(SERVICE_NAME.into()),
        ]
        .map(|m| ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        });
        let mut responses = client
            .server_reflection_info(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner();
        match responses
            .next()
            .await
            .unwrap()
            .unwrap()
            .message_response
            .unwrap()
        {
            MessageResponse::ListServicesResponse(l) => {
                assert!(l.service.iter().any(|s| s.name == SERVICE_NAME), "{l:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        match responses
            .next()
            .await
            .unwrap()
            .unwrap()
            .message_response
            .unwrap()
        {
            MessageResponse::FileDescriptorResponse(f) => {
                assert_scorer_file(&decode_files(f.file_descriptor_proto))
            }
            other => panic!("unexpected {other:?}"),
        }
        running.shutdown().await.unwrap();
    }
}

/// `ScoreCalls`: each call answered with its id, as `Score` answers it (an invalid request is that call's
/// error, not the stream's end); a shutdown ends the open stream cleanly instead of waiting for the caller.
#[tokio::test]
async fn score_calls_answer_each_call_and_end_on_shutdown() {
    let running = start(Config::default()).await;
    let mut client = ScorerClient::new(channel(&running).await);
    let unary = client
        .score(job("gold", "train-llama", 70.0))
        .await
        .unwrap()
        .into_inner();

    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut answers = client
        .score_calls(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let call = |id, request| pb::ScoreCall {
        id,
        request: Some(request),
        ..Default::default()
    };
    let invalid = pb::ScoreRequest {
        gpu_memory_gib: Some(f64::NAN),
        ..job("gold", "train-llama", 70.0)
    };
    tx.send(call(7, job("gold", "train-llama", 70.0)))
        .await
        .unwrap();
    tx.send(call(8, invalid)).await.unwrap();
    tx.send(call(9, job("bronze", "train-llama", 70.0)))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(answers.message().await.unwrap().expect("an answer"));
    }
    assert_eq!(got.iter().map(|a| a.id).collect::<Vec<_>>(), [7, 8, 9]);
    use pb::score_answer::Result as R;
    match &got[0].result {
        Some(R::Response(r)) => {
            assert_eq!(r.request_id, unary.request_id);
            assert_eq!(r.accepted_classes, unary.accepted_classes);
            assert_eq!(r.priority_score, unary.priority_score);
        }
        other => panic!("{other:?}"),
    }
    match &got[1].result {
        Some(R::Error(e)) => assert_eq!(e.code, tonic::Code::InvalidArgument as i32, "{e:?}"),
        other => panic!("{other:?}"),
    }
    match &got[2].result {
        Some(R::Response(r)) => assert!(r.accepted_classes.is_empty()),
        other => panic!("{other:?}"),
    }

    // The caller keeps its side open; the shutdown ends the stream and the server still stops promptly.
    let stopped = tokio::time::timeout(Duration::from_secs(5), running.shutdown()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
    let end = tokio::time::timeout(Duration::from_secs(5), answers.message()).await;
    assert!(matches!(end, Ok(Ok(None)) | Ok(Err(_))), "{end:?}");
    drop(tx);
}
