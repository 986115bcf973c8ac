//! Start-up wiring: TLS, scorer channel, policy cache, cluster caches, admin server, the HTTPS server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;

use crate::admission::Webhooks;
use crate::cluster::checkpoints::CheckpointCaches;
use crate::cluster::namespace_tiers::NamespaceTiers;
use crate::cluster::workloads::WorkloadOwners;
use crate::cluster::{ClusterFacts, kube_cache};
use crate::config::{ClusterSource, Config, TlsMode};
use crate::metrics::Metrics;
use crate::policy::PolicyCache;
use crate::restricted;
use crate::scorer_client::Scorer;
use crate::server;
use crate::tls::{self, auto_rotate, reload};
use gpu_admission_core::ns_lock::Instance;
use gpu_admission_policy::watch::FileWatcher;
use gpu_admission_telemetry::shutdown::Shutdown;

/// Runs the webhook until SIGTERM/SIGINT, then drains.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));

    // Cluster facts first: a broken Kubernetes configuration fails the start before anything runs.
    let (cluster, client) = start_cluster(&config.cluster).await?;
    let access_client = client.clone();
    let certificate_served = Arc::new(AtomicBool::new(false));
    let resolver = serve_certificates(&config.tls, client, &metrics, &certificate_served).await?;
    let tls_config = tls::server_config(resolver, config.server.client_ca_file.as_deref())?;

    let scorer = Scorer::new(
        &config.scorer.endpoint,
        config.scorer.deadline,
        config.scorer.deadline_margin,
        config.scorer.channel,
    )?;
    let policy = start_policy(&config, &scorer, &metrics);

    let mut webhooks = Webhooks::new(
        scorer,
        cluster.facts,
        policy,
        metrics.clone(),
        config.policy_configmap.clone(),
    )
    .with_checkpoints(cluster.checkpoints)
    .with_workloads(cluster.workloads)
    .with_quota_usage(access_client.clone())
    .with_exceptions(access_client.clone())
    .with_instance(config.instance.clone(), access_client.clone())
    .with_access(access_client.clone())
    .with_body_budget(config.server.body_budget, config.server.body_read_timeout);
    let holding = match &config.instance {
        Instance::Restricted(_) => {
            let holding = Arc::new(restricted::Holding::new(
                config.hold_rule,
                webhooks.cluster(),
                webhooks.policy(),
            ));
            webhooks = webhooks.with_holding(holding.clone());
            Some(holding)
        }
        Instance::ClusterWide => None,
    };
    let readiness = Arc::new(
        webhooks
            .readiness()
            .with_certificate_served(certificate_served),
    );
    let shutdown = Shutdown::install()?;
    let leases = match (&config.instance, holding) {
        (Instance::Restricted(namespaces), Some(holding)) => {
            // With --no-kube the API is used for the Leases and the namespaces' tier labels only.
            let client = match &access_client {
                Some(client) => client.clone(),
                None => kube_cache::client().await?,
            };
            let leases = restricted::Leases {
                client,
                readiness: readiness.clone(),
                holding,
                metrics: metrics.clone(),
            };
            Some(tokio::spawn(restricted::hold_until(
                leases,
                namespaces.iter().cloned().collect(),
                shutdown.wait(),
            )))
        }
        _ => None,
    };

    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("binding {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    readiness.set_listening();
    // The contract line (tests read the port from it); printed before the admin server logs its own address.
    eprintln!("webhook-frontend listening on {addr}");
    let no_kube = !matches!(config.cluster, ClusterSource::Kube { .. });
    tracing::info!(%addr, scorer = %config.scorer.endpoint, no_kube, "admission server started");
    if let Some(host) = gpu_admission_core::names::relative_dns_host(&config.scorer.endpoint) {
        tracing::warn!(%host, "the scorer's host is not an absolute DNS name (no trailing dot): it is looked up through the search path first, where another namespace's name can answer; use e.g. gpu-admission-scorer.gpu-admission.svc.cluster.local.");
    }

    let admin = gpu_admission_telemetry::admin::serve(
        config.admin_listen,
        Arc::new(registry),
        shutdown.wait(),
    )
    .await?;
    tracing::info!(%admin, "admin server started");

    server::serve(
        listener,
        tls_config,
        server::router(webhooks, readiness, config.server.client_ca_file.is_some()),
        config.server.limits,
        metrics,
        config.server.drain_timeout,
        shutdown.wait(),
    )
    .await;
    // The Leases were released when the signal came; wait for that to be done (it takes at most 5 s each).
    if let Some(leases) = leases
        && tokio::time::timeout(Duration::from_secs(15), leases)
            .await
            .is_err()
    {
        tracing::warn!("releasing the namespaces' Leases did not finish");
    }
    Ok(())
}

/// The policy the webhooks enforce: loaded before anything is served (from the file, else the last good
/// copy), then kept fresh from the file and compared with the scorer's (adopted from it only when neither
/// validates).
fn start_policy(config: &Config, scorer: &Scorer, metrics: &Metrics) -> Arc<PolicyCache> {
    let policy = Arc::new(PolicyCache::default());
    let sources = config.policy.clone();
    let mut watcher = sources.file.clone().map(FileWatcher::new);
    if !policy.load_at_start(&sources, &mut watcher, &metrics.policy) {
        tracing::error!(
            "no valid policy yet: not ready until the policy file validates or the scorer has one"
        );
    }
    if let Some(watcher) = watcher {
        tokio::spawn(
            policy
                .clone()
                .watch_file(watcher, sources, metrics.policy.clone()),
        );
    }
    tokio::spawn(policy.clone().compare_with_scorer(
        scorer.clone(),
        config.scorer.policy_refresh,
        metrics.policy.clone(),
    ));
    policy
}

/// The cluster's watch caches, or the flags' facts with `--no-kube`.
struct Cluster {
    facts: ClusterFacts,
    checkpoints: Option<CheckpointCaches>,
    workloads: Option<WorkloadOwners>,
}

/// Starts the watch caches (with a cluster), and returns the client it made for the TLS side to reuse.
async fn start_cluster(source: &ClusterSource) -> anyhow::Result<(Cluster, Option<kube::Client>)> {
    match source {
        ClusterSource::Kube {
            checkpoint_discovery,
        } => {
            let kube = kube_cache::client().await?;
            let cluster = Cluster {
                checkpoints: Some(CheckpointCaches::start(kube.clone(), *checkpoint_discovery)),
                workloads: Some(WorkloadOwners::start(kube.clone())),
                facts: ClusterFacts::Kube(kube_cache::KubeCaches::start(kube.clone())),
            };
            Ok((cluster, Some(kube)))
        }
        ClusterSource::Namespaces { namespaces } => {
            // Only these Namespaces, by name: no watch cache of the cluster, and no client for the rest.
            let tiers = Arc::new(NamespaceTiers::new(namespaces.clone()));
            tokio::spawn(tiers.clone().read_forever(kube_cache::client().await?));
            let cluster = Cluster {
                facts: ClusterFacts::Read(tiers),
                checkpoints: None,
                workloads: None,
            };
            Ok((cluster, None))
        }
        ClusterSource::Static { tiers } => {
            let cluster = Cluster {
                facts: ClusterFacts::Static {
                    tiers: tiers.clone(),
                },
                checkpoints: None,
                workloads: None,
            };
            Ok((cluster, None))
        }
    }
}

/// TLS: files (Secret layout), a generated dev CA + serving certificate (both watched for changes), or
/// automatic mode (a Secret kept through the API; a throwaway certificate until it is served).
async fn serve_certificates(
    mode: &TlsMode,
    client: Option<kube::Client>,
    metrics: &Arc<Metrics>,
    certificate_served: &Arc<AtomicBool>,
) -> anyhow::Result<Arc<reload::ReloadingCertResolver>> {
    Ok(match mode {
        TlsMode::Auto {
            settings,
            namespace,
        } => {
            let client = match client {
                Some(client) => client,
                None => kube_cache::client().await?,
            };
            let mut auto = settings.clone();
            auto.namespace = auto_rotate::namespace(namespace.as_deref(), &client);
            tracing::info!(secret = %auto.secret, namespace = %auto.namespace,
                webhook_config = ?auto.webhook_config, "automatic certificates");
            let resolver = Arc::new(reload::ReloadingCertResolver::new(
                auto_rotate::AutoTls::placeholder(&auto.sans)?,
            ));
            tokio::spawn(
                auto_rotate::AutoTls::new(
                    client,
                    auto,
                    resolver.clone(),
                    metrics.clone(),
                    certificate_served.clone(),
                )
                .run(),
            );
            resolver
        }
        TlsMode::SelfSigned {
            dir,
            sans,
            reload_interval,
        } => {
            let g = tls::self_signed::generate(dir, sans)?;
            tracing::info!(ca = %g.ca_cert.display(), "generated a dev CA and serving certificate");
            let files = reload::CertFiles {
                cert: g.cert,
                key: g.key,
            };
            watched_files(files, *reload_interval, metrics, certificate_served)?
        }
        TlsMode::Files {
            files,
            reload_interval,
        } => watched_files(files.clone(), *reload_interval, metrics, certificate_served)?,
    })
}

/// Serves certificate files, reloaded when they change: a Secret's, or the generated dev ones.
fn watched_files(
    files: reload::CertFiles,
    reload_interval: Duration,
    metrics: &Arc<Metrics>,
    certificate_served: &AtomicBool,
) -> anyhow::Result<Arc<reload::ReloadingCertResolver>> {
    let (resolver, hash) = reload::load_initial(&files)?;
    certificate_served.store(true, Ordering::Release);
    tokio::spawn(reload::watch(
        resolver.clone(),
        files,
        hash,
        reload_interval,
        metrics.clone(),
    ));
    Ok(resolver)
}
