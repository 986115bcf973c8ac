//! Part C's bystanders (`--peer-bystander`): what one tenant's burst does to another tenant's admissions.
//! While a cell's burst runs, two more clients of another user ([`BYSTANDER`]: the apiserver's flow control
//! queues it apart from the burst's user) each create one-GPU Pods one at a time: one in a namespace
//! of the first quota'd tier that the burst does not use (the burst's quota'd Pods share its quota ledger),
//! one in a namespace of the second quota'd tier (its own ledger). Each also runs alone first, for the same
//! cell's quiet latency. A GPU burst (no quotas) moves both only through what everything shares (the
//! apiserver, the frontends, the machine); a quota'd burst moves the same-tier bystander also through the
//! ledger, and the other-tier bystander should move no more than under a GPU burst.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::ensure;
use gpu_admission_tests::cluster::LocalCluster;
use serde::Serialize;

use crate::install::clients_as;
use crate::peer_load::{Load, Until, create_timed, create_until};
#[cfg(doc)]
use crate::pods::delete_all;
use crate::pods::{Shape, create_namespaces};

/// Where a bystander admits, against the burst's tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Relation {
    /// The burst's quota'd tier (its quota ledger), another namespace.
    SameTier,
    /// Another quota'd tier (its own quota ledger).
    OtherTier,
}

impl Relation {
    pub fn name(self) -> &'static str {
        match self {
            Relation::SameTier => "same tier",
            Relation::OtherTier => "other tier",
        }
    }
}

/// One bystander's latencies in one run: alone, then during the burst.
#[derive(Debug, Clone, Serialize)]
pub struct Bystander {
    pub relation: Relation,
    pub quiet: Load,
    pub during: Load,
}

/// Pods each bystander creates alone before a burst.
const QUIET_PODS: usize = 40;

/// The bystanders' user: another tenant than the burst's.
pub const BYSTANDER: &str = "bench-bystander";

/// The bystanders' namespaces, one per [`Relation`], and their client.
pub struct Bystanders {
    namespaces: Vec<(Relation, (String, String))>,
    client: kube::Client,
}

impl Bystanders {
    /// Creates a namespace in `tiers[0]` (the burst's) and one in `tiers[1]`.
    pub async fn create(cluster: &LocalCluster, tiers: &[String]) -> anyhow::Result<Self> {
        ensure!(
            tiers.len() >= 2,
            "--peer-bystander needs two quota'd tiers (--peer-quota-tiers 2 or 3)"
        );
        let mut namespaces = Vec::new();
        for (relation, tier) in [
            (Relation::SameTier, &tiers[0]),
            (Relation::OtherTier, &tiers[1]),
        ] {
            let prefix = format!("peer-by-{}", relation.name().replace(' ', "-"));
            let ns = create_namespaces(cluster, &prefix, 1, std::slice::from_ref(tier)).await?;
            namespaces.extend(ns.into_iter().map(|n| (relation, n)));
        }
        cluster.bind_tenant(BYSTANDER).await?;
        let client = clients_as(cluster, BYSTANDER, 1).await?.remove(0);
        Ok(Self { namespaces, client })
    }

    /// Each bystander alone, [`QUIET_PODS`] Pods one at a time (both at once).
    pub async fn quiet(&self, run: &str) -> Vec<Load> {
        let client = &self.client;
        let tasks: Vec<_> = (self.namespaces.iter())
            .map(|(relation, ns)| {
                let (client, ns) = (client.clone(), ns.clone());
                let run = format!("q{}{run}", short(*relation));
                tokio::spawn(async move {
                    create_timed(&[client], &[ns], QUIET_PODS, &run, Shape::Gpu).await
                })
            })
            .collect();
        let mut loads = Vec::new();
        for t in tasks {
            loads.push(t.await.expect("a bystander panicked"));
        }
        loads
    }

    /// Starts every bystander creating Pods one at a time until [`Running::stop`].
    pub fn start(&self, run: &str) -> Running {
        let client = &self.client;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (self.namespaces.iter())
            .map(|(relation, ns)| {
                let (client, ns, stop) = (client.clone(), ns.clone(), stop.clone());
                let run = format!("d{}{run}", short(*relation));
                tokio::spawn(async move {
                    let until = Until::Stopped(stop);
                    create_until(&[client], &[ns], until, &run, Shape::Gpu).await
                })
            })
            .collect();
        Running { stop, tasks }
    }

    /// `quiet` and `during` paired with their relations.
    pub fn results(&self, quiet: Vec<Load>, during: Vec<Load>) -> Vec<Bystander> {
        (self.namespaces.iter().zip(quiet.into_iter().zip(during)))
            .map(|((relation, _), (quiet, during))| Bystander {
                relation: *relation,
                quiet,
                during,
            })
            .collect()
    }

    /// The bystanders' namespaces (their Pods are deleted with the burst's: [`delete_all`] waits for every
    /// benchmark Pod of the cluster).
    pub fn namespaces(&self) -> impl Iterator<Item = &(String, String)> {
        self.namespaces.iter().map(|(_, ns)| ns)
    }
}

fn short(relation: Relation) -> &'static str {
    match relation {
        Relation::SameTier => "s",
        Relation::OtherTier => "o",
    }
}

/// Bystanders creating Pods.
pub struct Running {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Load>>,
}

impl Running {
    /// Stops them (each finishes the Pod in flight) and returns their loads.
    pub async fn stop(self) -> Vec<Load> {
        self.stop.store(true, Ordering::Relaxed);
        let mut loads = Vec::new();
        for t in self.tasks {
            loads.push(t.await.expect("a bystander panicked"));
        }
        loads
    }
}
