//! Start-up wiring: TLS, scorer channel, policy cache, cluster caches, admin server, the HTTPS server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use anyhow::Context;
use prometheus_client::registry::Registry;

use crate::cluster::{ClusterFacts, kube_cache, parse_namespace_tiers};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::PolicyCache;
use crate::scorer_client::Scorer;
use crate::server;
use crate::tls::{self, auto_rotate, reload};
use gpu_admission_telemetry::shutdown::Shutdown;

/// Kept here for code written against the old path; the state lives in [`crate::state`].
pub use crate::state::AppState;

/// Runs the webhook until SIGTERM/SIGINT, then drains.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));

    // Cluster facts first: a broken Kubernetes configuration fails the start before anything runs.
    let auto_tls = config.auto_tls()?;
    let client = if config.no_kube && auto_tls.is_none() {
        None
    } else {
        Some(kube_cache::client().await?)
    };
    let checkpoints = match (&client, config.no_kube) {
        (Some(client), false) => Some(crate::cluster::checkpoints::CheckpointCaches::start(
            client.clone(),
            Duration::from_secs(config.checkpoint_discovery_secs.max(1)),
        )),
        _ => None,
    };
    let workloads = match (&client, config.no_kube) {
        (Some(client), false) => Some(crate::cluster::workloads::WorkloadOwners::start(
            client.clone(),
        )),
        _ => None,
    };
    let cluster = match (&client, config.no_kube) {
        (Some(client), false) => ClusterFacts::Kube(kube_cache::KubeCaches::start(
            client.clone(),
            config.tier_label.clone(),
        )),
        _ => ClusterFacts::Static {
            tiers: parse_namespace_tiers(&config.namespace_tiers)?,
        },
    };

    // TLS: files (Secret layout), a generated dev CA + serving certificate (both watched for changes), or
    // automatic mode (a Secret kept through the API; a throwaway certificate until it is served).
    let certificate_served = Arc::new(AtomicBool::new(false));
    let resolver = if let (Some((mut auto, ns_flag)), Some(client)) = (auto_tls, client) {
        auto.namespace = auto_rotate::namespace(ns_flag.as_deref(), &client);
        tracing::info!(secret = %auto.secret, namespace = %auto.namespace,
            webhook_config = ?auto.webhook_config, "automatic certificates");
        let resolver = Arc::new(reload::ReloadingCertResolver::new(
            auto_rotate::AutoTls::placeholder(&config.sans)?,
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
    } else {
        let files = match (&config.self_signed, &config.tls_cert, &config.tls_key) {
            (Some(dir), _, _) => {
                let g = tls::self_signed::generate(dir, &config.sans)?;
                tracing::info!(ca = %g.ca_cert.display(), "generated a dev CA and serving certificate");
                reload::CertFiles {
                    cert: g.cert,
                    key: g.key,
                }
            }
            (None, Some(cert), Some(key)) => reload::CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => anyhow::bail!(
                "TLS needs --tls-cert and --tls-key, --self-signed DIR, or --auto-tls-secret NAME"
            ),
        };
        let (resolver, hash) = reload::load_initial(&files)?;
        certificate_served.store(true, Ordering::Release);
        tokio::spawn(reload::watch(
            resolver.clone(),
            files,
            hash,
            Duration::from_millis(config.tls_reload_interval_ms.max(100)),
            metrics.clone(),
        ));
        resolver
    };
    let tls_config = tls::server_config(resolver)?;

    let scorer = Scorer::new(
        &config.scorer,
        config.deadline(),
        config.deadline_margin(),
        config.scorer_channel(),
    )?;
    let policy = Arc::new(PolicyCache::default());
    tokio::spawn(policy.clone().keep_fresh(
        scorer.clone(),
        Duration::from_secs(config.policy_refresh_secs.max(1)),
    ));

    let state = Arc::new(
        AppState::new(
            scorer,
            cluster,
            policy,
            metrics,
            crate::state::PolicyConfigMap::parse(
                &config.policy_configmap,
                &config.policy_configmap_key,
            )?,
        )
        .with_checkpoints(checkpoints)
        .with_workloads(workloads)
        .with_certificate_served(certificate_served),
    );
    let shutdown = Shutdown::install()?;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    state.listening.store(true, Ordering::Release);
    // The contract line (tests read the port from it); printed before the admin server logs its own address.
    eprintln!("webhook-frontend listening on {addr}");
    tracing::info!(%addr, scorer = %config.scorer, no_kube = config.no_kube, "admission server started");

    let admin = gpu_admission_telemetry::admin::serve(
        config.admin_listen,
        Arc::new(registry),
        shutdown.wait(),
    )
    .await?;
    tracing::info!(%admin, "admin server started");

    let metrics = state.metrics.clone();
    server::serve(
        listener,
        tls_config,
        server::router(state),
        config.connection_limits(),
        metrics,
        Duration::from_secs(config.drain_timeout_secs),
        shutdown.wait(),
    )
    .await;
    Ok(())
}
