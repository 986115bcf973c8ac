//! gRPC client of `gpuadmission.scorer.v1.Scorer/Score`: one tonic channel (one HTTP/2 connection) per worker.

use std::sync::Arc;

use anyhow::{Context, Result};
use gpu_admission_proto::scorer::v1::ScoreRequest;
use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient;
use tonic::transport::{Channel, Endpoint};

use super::{ErrorKind, Outcome};
use crate::workload::{UID_LEN, write_uid};

pub struct ScorerTarget {
    endpoint: Endpoint,
    requests: Vec<ScoreRequest>,
    run_id: u32,
}

impl ScorerTarget {
    /// `url` like `http://127.0.0.1:50051`.
    pub fn new(url: &str, requests: Vec<ScoreRequest>, run_id: u32) -> Result<Self> {
        anyhow::ensure!(
            !requests.is_empty(),
            "the workload has no GPU Pod in a tiered namespace to score"
        );
        let endpoint = Endpoint::from_shared(url.to_string())
            .with_context(|| format!("bad scorer URL {url}"))?
            .tcp_nodelay(true);
        Ok(Self {
            endpoint,
            requests,
            run_id,
        })
    }
}

pub struct Conn {
    target: Arc<ScorerTarget>,
    client: ScorerClient<Channel>,
    uid: [u8; UID_LEN],
}

impl Conn {
    pub async fn open(target: Arc<ScorerTarget>) -> Result<Self> {
        // `connect` (not lazy) so that every worker has its own connection, established before the clock starts.
        let channel = target
            .endpoint
            .connect()
            .await
            .context("connecting to the scorer")?;
        Ok(Self {
            client: ScorerClient::new(channel),
            target,
            uid: [0; UID_LEN],
        })
    }

    pub async fn call(&mut self, seq: u64) -> Outcome {
        let t = &self.target;
        write_uid(&mut self.uid, t.run_id, seq);
        let mut req = t.requests[(seq % t.requests.len() as u64) as usize].clone();
        req.request_id = String::from_utf8_lossy(&self.uid).into_owned();
        match self.client.score(req).await {
            Ok(resp) => {
                let resp = resp.into_inner();
                if resp.request_id != String::from_utf8_lossy(&self.uid)
                    && !resp.request_id.is_empty()
                {
                    Outcome::Error(ErrorKind::BadResponse)
                } else if resp.accepted_classes.is_empty() {
                    Outcome::Infeasible
                } else {
                    Outcome::Scored
                }
            }
            Err(_) => Outcome::Error(ErrorKind::Grpc),
        }
    }
}
