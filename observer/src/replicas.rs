//! The scorer replicas, found by name on every round: each configured endpoint's host is resolved through DNS
//! and every address it resolves to is one replica (a headless Service resolves to the ready Pods). Channels
//! are cached per address and connect lazily.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_proto::scorer::v1::scorer_client::ScorerClient;
use gpu_admission_proto::scorer::v1::{GetPolicyRequest, GetPolicyResponse, ObserveRequest};
use tonic::transport::{Channel, Endpoint};

use crate::extract::PolicyFacts;
use crate::metrics::Metrics;

/// One scorer replica.
#[derive(Clone, Debug)]
pub struct Replica {
    pub addr: SocketAddr,
    pub client: ScorerClient<Channel>,
}

#[derive(Debug)]
pub struct Replicas {
    /// `host:port` authorities, resolved on every call of [`Replicas::resolve`].
    authorities: Vec<String>,
    timeout: Duration,
    channels: Mutex<HashMap<SocketAddr, Channel>>,
}

impl Replicas {
    /// `endpoints` are `http://HOST:PORT` URLs (plain-text gRPC, as inside the cluster).
    pub fn new(endpoints: &[String], timeout: Duration) -> anyhow::Result<Self> {
        let authorities = endpoints
            .iter()
            .map(|e| {
                let a = e.strip_prefix("http://").ok_or_else(|| {
                    anyhow::anyhow!("scorer endpoint {e:?}: expected http://HOST:PORT")
                })?;
                let a = a.trim_end_matches('/');
                if !a.contains(':') {
                    anyhow::bail!("scorer endpoint {e:?}: no port");
                }
                Ok(a.to_string())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if authorities.is_empty() {
            anyhow::bail!("at least one scorer endpoint is needed");
        }
        Ok(Self {
            authorities,
            timeout,
            channels: Mutex::new(HashMap::new()),
        })
    }

    /// Every replica the endpoints resolve to now, sorted by address. An endpoint that does not resolve is
    /// logged and left out.
    pub async fn resolve(&self) -> Vec<Replica> {
        let mut addrs = Vec::new();
        for a in &self.authorities {
            match tokio::net::lookup_host(a.as_str()).await {
                Ok(found) => addrs.extend(found),
                Err(err) => tracing::warn!(endpoint = %a, %err, "scorer endpoint does not resolve"),
            }
        }
        addrs.sort();
        addrs.dedup();
        let mut channels = self.channels.lock().expect("not poisoned");
        channels.retain(|a, _| addrs.contains(a));
        addrs
            .into_iter()
            .map(|addr| {
                let channel = channels
                    .entry(addr)
                    .or_insert_with(|| {
                        Endpoint::from_shared(format!("http://{addr}"))
                            .expect("a socket address is a valid URI")
                            .connect_timeout(self.timeout)
                            .timeout(self.timeout)
                            .connect_lazy()
                    })
                    .clone();
                Replica {
                    addr,
                    client: ScorerClient::new(channel).max_decoding_message_size(64 << 20),
                }
            })
            .collect()
    }
}

/// The policy from the first replica that answers `GetPolicy`.
pub async fn get_policy(replicas: &[Replica]) -> Option<GetPolicyResponse> {
    for r in replicas {
        match r.client.clone().get_policy(GetPolicyRequest {}).await {
            Ok(p) => return Some(p.into_inner()),
            Err(status) => tracing::warn!(replica = %r.addr, %status, "GetPolicy failed"),
        }
    }
    None
}

/// The policy facts (catalog) from the first replica that answers `GetPolicy` (with a policy that
/// validates here).
pub async fn policy_facts(replicas: &[Replica]) -> Option<PolicyFacts> {
    let answer = get_policy(replicas).await?;
    match PolicySnapshot::from_response(&answer) {
        Ok(policy) => Some(PolicyFacts {
            catalog: policy.catalog().to_vec(),
        }),
        Err(err) => {
            tracing::warn!(%err, "the scorer's policy document does not validate here");
            None
        }
    }
}

/// What the replicas made of one observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// At least one replica learned it.
    Learned,
    /// Every replica that answered had learned it already.
    Duplicate,
    /// Refused as invalid by every replica that answered (never retried).
    Rejected(String),
    /// No replica answered: retry later.
    Unreachable,
}

/// Sends `req` to every replica at once. Replicas that miss it catch up through the state convergence.
pub async fn observe_everywhere(
    replicas: &[Replica],
    req: &ObserveRequest,
    metrics: &Metrics,
) -> Delivery {
    let calls = replicas.iter().map(|r| {
        let mut client = r.client.clone();
        let req = req.clone();
        async move { (r.addr, client.observe(req).await) }
    });
    let (mut learned, mut duplicate, mut rejected) = (false, false, None);
    let mut implausible = false;
    for (addr, result) in futures::future::join_all(calls).await {
        match result {
            Ok(resp) if resp.get_ref().duplicate => duplicate = true,
            Ok(resp) => {
                learned = true;
                implausible |= resp.get_ref().implausible;
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                rejected = Some(status.message().to_string());
            }
            Err(status) => {
                metrics.delivery_failures.inc();
                tracing::warn!(replica = %addr, %status, id = %req.observation_id, "Observe failed");
            }
        }
    }
    if implausible {
        metrics.implausible.inc();
        tracing::info!(id = %req.observation_id, job_type = %req.job_type, gpu_class = %req.gpu_class,
            runtime_seconds = req.runtime_seconds, "implausibly fast run: learned weighed down");
    }
    match (learned, duplicate, rejected) {
        (true, _, _) => Delivery::Learned,
        (false, true, _) => Delivery::Duplicate,
        (false, false, Some(why)) => Delivery::Rejected(why),
        (false, false, None) => Delivery::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints_resolve_to_one_replica_per_address() {
        let r = Replicas::new(
            &[
                "http://127.0.0.1:50051".into(),
                "http://127.0.0.1:50052/".into(),
                "http://127.0.0.1:50051".into(),
            ],
            Duration::from_secs(1),
        )
        .unwrap();
        let addrs: Vec<String> = r
            .resolve()
            .await
            .iter()
            .map(|r| r.addr.to_string())
            .collect();
        assert_eq!(addrs, ["127.0.0.1:50051", "127.0.0.1:50052"]);
        assert!(Replicas::new(&["127.0.0.1:1".into()], Duration::from_secs(1)).is_err());
        assert!(Replicas::new(&["http://scorer".into()], Duration::from_secs(1)).is_err());
        assert!(Replicas::new(&[], Duration::from_secs(1)).is_err());
    }
}
