//! `observer` binary: parse the CLI, set telemetry up, elect a leader, watch and report until SIGTERM/SIGINT.
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use gpu_admission_telemetry::runtime::Service;
use gpu_admission_telemetry::shutdown::Shutdown;
use observer::cli::Cli;
use observer::controller::{self, ControllerConfig, Scorers};
use observer::convergence::{Convergence, RecentLog};
use observer::leader::{self, LeaseConfig};
use observer::metrics::Metrics;
use observer::replicas::Replicas;
use observer::store::StateStore;

/// jemalloc (configured in the workspace Cargo.toml), as the frontend and the scorer: what an audit pass
/// allocates goes back to the system after it. At 50,000 Pods the leader peaked at 454 MiB with it and
/// 573-581 MiB with glibc malloc (docs/measurements/2026-11-30-envelope-held.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    Service::new("observer").run(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    gpu_admission_telemetry::admin::serve(cli.admin_listen, Arc::new(registry), async {
        let _ = admin_stopped.await;
    })
    .await?;

    let client = kube::Client::try_default().await?;
    let namespace = cli.namespace();
    let replicas = Arc::new(Replicas::new(
        &cli.scorers,
        Duration::from_millis(cli.scorer_timeout_ms.max(1)),
    )?);
    let teams = observer::route::TeamScorers::new(&cli.team_scorer_template, &cli.team_scorers)?;
    let log = Arc::new(Mutex::new(RecentLog::new(cli.replay_log)));
    let lease = LeaseConfig {
        namespace: namespace.clone(),
        name: cli.lease.clone(),
        identity: cli.identity(),
        duration: Cli::secs(cli.lease_duration_secs),
        grace: Cli::secs(cli.lease_grace_secs),
    };
    tracing::info!(identity = %lease.identity, lease = %lease.name, %namespace, scorers = ?cli.scorers,
        "observer starting");
    for host in cli
        .scorers
        .iter()
        .chain([&cli.team_scorer_template])
        .chain(&cli.team_scorers)
        .filter_map(|s| gpu_admission_core::names::relative_dns_host(s))
    {
        tracing::warn!(%host, "a scorer host is not an absolute DNS name (no trailing dot): it is looked up through the search path first, where another namespace's name can answer; use e.g. gpu-admission-scorer-replicas.gpu-admission.svc.cluster.local.");
    }
    let (leader_rx, lease_task) = leader::elect(client.clone(), &lease).await?;

    let store = cli
        .state_configmap
        .as_deref()
        .map(|name| StateStore::new(client.clone(), &namespace, name));
    let convergence = Convergence::new(
        replicas.clone(),
        store,
        Cli::secs(cli.store_interval_secs),
        log.clone(),
        metrics.clone(),
    );
    let sync = tokio::spawn(converge_while_leading(
        convergence,
        leader_rx.clone(),
        Cli::secs(cli.sync_interval_secs),
    ));

    let audit = cli.policy_reports.then(|| {
        tokio::spawn(observer::audit::run(
            client.clone(),
            replicas.clone(),
            metrics.clone(),
            leader_rx.clone(),
            cli.audit(),
        ))
    });

    let policy_configmap = gpu_admission_core::admission::validate_policy::PolicyConfigMap::parse(
        &cli.policy.policy_configmap,
        &cli.policy.policy_key,
    )
    .map_err(anyhow::Error::msg)?;
    // One watch and one parse of the policy ConfigMap for the floor and the ResourceQuotas.
    let policy_source = (cli.resource_quotas || cli.floor_params.is_some()).then(|| {
        observer::policy_source::PolicySource::start(&client, policy_configmap, metrics.clone())
    });
    let quotas = policy_source
        .clone()
        .filter(|_| cli.resource_quotas)
        .map(|policy| {
            tokio::spawn(observer::resource_quotas::run(
                client.clone(),
                observer::resource_quotas::QuotaConfig {
                    interval: Cli::secs(cli.quota_interval_secs),
                },
                policy,
                metrics.clone(),
                leader_rx.clone(),
            ))
        });
    let floor = cli
        .floor_params
        .clone()
        .zip(policy_source)
        .map(|(params, policy)| {
            tokio::spawn(observer::floor::run(
                client.clone(),
                observer::floor::FloorConfig {
                    namespace: namespace.clone(),
                    params_name: params,
                    interval: Cli::secs(cli.floor_interval_secs),
                },
                policy,
                metrics.floor_syncs.clone(),
                leader_rx.clone(),
            ))
        });

    let checkpoint_registration = cli.checkpoint_registration.clone().map(|name| {
        tokio::spawn(observer::checkpoint_registration::run(
            client.clone(),
            name,
            Cli::secs(cli.checkpoint_interval_secs),
            metrics.clone(),
            leader_rx.clone(),
        ))
    });

    let config = ControllerConfig {
        tick: Duration::from_secs(1),
        policy_refresh: Duration::from_secs(30),
        node_grace: Duration::from_secs(60),
        gone_retention: Duration::from_secs(15 * 60),
        instance_grace: Duration::from_secs(60),
    };
    let scorers = Scorers {
        cluster: replicas,
        teams,
        timeout: Duration::from_millis(cli.scorer_timeout_ms.max(1)),
    };
    let shutdown = Shutdown::install()?;
    let result = controller::run(
        client,
        scorers,
        log,
        metrics,
        leader_rx,
        config,
        shutdown.wait(),
    )
    .await;
    sync.abort();
    if let Some(audit) = audit {
        audit.abort();
    }
    for task in [floor, checkpoint_registration, quotas]
        .into_iter()
        .flatten()
    {
        task.abort();
    }
    let _ = admin_stop.send(());
    // The last Lease receiver is gone: the lease task releases the Lease, so the other replica takes over at
    // once instead of after the Lease expires.
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => tracing::info!("Lease released"),
        Ok(Ok(Err(err))) => tracing::warn!(%err, "releasing the Lease failed"),
        Ok(Err(err)) => tracing::warn!(%err, "lease task failed"),
        Err(_) => tracing::warn!("releasing the Lease timed out"),
    }
    result
}

/// The convergence rounds, while this replica holds the Lease.
async fn converge_while_leading(
    mut convergence: Convergence,
    mut leader: tokio::sync::watch::Receiver<bool>,
    interval: Duration,
) {
    loop {
        if !*leader.borrow_and_update() {
            if leader.changed().await.is_err() {
                return;
            }
            continue;
        }
        convergence.load_stored().await;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while *leader.borrow() {
            tokio::select! {
                _ = tick.tick() => {
                    let report = convergence.round().await;
                    if report.imported + report.kept + report.replayed > 0 || report.stored {
                        tracing::info!(?report, "convergence round");
                    }
                }
                changed = leader.changed() => if changed.is_err() { return },
            }
        }
    }
}
