//! The limits of `gpu_admission_proto::limits` as the scorer enforces them over a real socket: a client that
//! does not fit its request first (the frontend does) gets `INVALID_ARGUMENT` naming the field, and the same
//! request fitted with the shared function is scored.
use std::sync::Arc;

use gpu_admission_proto::limits::{self, MAX_LIST_ENTRIES, MAX_NAME_BYTES};
use gpu_admission_proto::scorer::v1::{self as pb, scorer_client::ScorerClient};
use scorer::metrics::Metrics;
use scorer::server::{self, Config};
use tonic::Code;
use tonic::transport::Channel;

fn job() -> pb::ScoreRequest {
    pb::ScoreRequest {
        request_id: "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
        namespace: "ml".into(),
        tenant: "team-a".into(),
        tier: "gold".into(),
        job_type: "train-llama".into(),
        gpu_count: 1,
        gpu_vendor: pb::GpuVendor::Nvidia as i32,
        gpu_memory_gib: Some(40.0),
        ..Default::default()
    }
}

#[tokio::test]
async fn over_long_values_are_invalid_arguments_until_fitted() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = server::start(
        Config::default(),
        listener,
        Arc::new(Metrics::unregistered()),
    )
    .await
    .unwrap();
    let channel = Channel::from_shared(format!("http://{}", running.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = ScorerClient::new(channel);
    assert!(client.score(job()).await.is_ok());

    let spoilt: [(&str, pb::ScoreRequest); 5] = [
        (
            "tenant",
            pb::ScoreRequest {
                tenant: "t".repeat(300),
                ..job()
            },
        ),
        (
            "request_id",
            pb::ScoreRequest {
                request_id: "u".repeat(MAX_NAME_BYTES + 1),
                ..job()
            },
        ),
        (
            "namespace",
            pb::ScoreRequest {
                namespace: "n".repeat(MAX_NAME_BYTES + 1),
                ..job()
            },
        ),
        (
            "colocated_job_types",
            pb::ScoreRequest {
                colocated_job_types: vec!["train-llama".into(); MAX_LIST_ENTRIES + 1],
                ..job()
            },
        ),
        (
            "gpu_memory_gib",
            pb::ScoreRequest {
                gpu_memory_gib: Some(-1.0),
                ..job()
            },
        ),
    ];
    for (field, request) in spoilt {
        for explain in [false, true] {
            let status = if explain {
                client.explain(request.clone()).await.unwrap_err()
            } else {
                client.score(request.clone()).await.unwrap_err()
            };
            assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
            assert!(
                status.message().starts_with(field),
                "{field}: {}",
                status.message()
            );
        }
        let mut fitted = request;
        assert_eq!(limits::fit_score_request(&mut fitted)[0].field, field);
        assert!(client.score(fitted).await.is_ok(), "{field} fitted");
    }

    let observe = pb::ObserveRequest {
        job_type: "train-llama".into(),
        gpu_class: "H100-80GB".into(),
        runtime_seconds: 3600.0,
        observation_id: "o".repeat(MAX_NAME_BYTES + 1),
        ..Default::default()
    };
    let status = client.observe(observe).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("observation_id"),
        "{}",
        status.message()
    );
}
