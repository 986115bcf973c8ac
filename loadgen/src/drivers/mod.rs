//! The clients: one keep-alive connection per worker, to the webhook (HTTPS) or to the scorer (gRPC).
//! A call returns what the answer meant ([`Outcome`]); the caller measures time around it.

pub mod scorer;
pub mod webhook;

use std::sync::Arc;

use anyhow::Result;

/// What one request came back as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Webhook: allowed with a JSON Patch.
    Mutated,
    /// Webhook: allowed without a patch, with a warning saying the scorer could not be used.
    PassedThrough,
    /// Webhook: allowed without a patch, nothing to do (no GPU, no tier, already decided, not a CREATE).
    Skipped,
    /// Scorer: answered with at least one acceptable GPU class.
    Scored,
    /// Scorer: answered, no feasible class.
    Infeasible,
    /// Anything a client must not see: transport error, non-200, rejected Pod, wrong uid, bad body, gRPC error.
    Error(ErrorKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    Connect,
    Transport,
    HttpStatus,
    /// allowed:false: the webhook must never be the reason a Pod is rejected.
    Rejected,
    /// Not an AdmissionReview response, or another request's uid.
    BadResponse,
    Grpc,
    /// Scheduled but never answered before the run's grace period ended.
    Unfinished,
}

/// A service to put load on.
#[derive(Clone)]
pub enum Target {
    Webhook(Arc<webhook::WebhookTarget>),
    Scorer(Arc<scorer::ScorerTarget>),
}

/// One worker's connection.
pub enum Conn {
    Webhook(webhook::Conn),
    Scorer(scorer::Conn),
}

impl Target {
    pub async fn connect(&self) -> Result<Conn> {
        Ok(match self {
            Target::Webhook(t) => Conn::Webhook(webhook::Conn::open(t.clone()).await?),
            Target::Scorer(t) => Conn::Scorer(scorer::Conn::open(t.clone()).await?),
        })
    }
}

impl Conn {
    /// Sends request number `seq` (which workload item, which uid) and waits for its answer.
    pub async fn call(&mut self, seq: u64) -> Outcome {
        match self {
            Conn::Webhook(c) => c.call(seq).await,
            Conn::Scorer(c) => c.call(seq).await,
        }
    }
}
