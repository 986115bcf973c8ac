//! The benchmark as a whole: start what `--spawn`/`--baseline` ask for, run the plan against each target
//! (sweep / open / closed), then the fault runs, and write the table, the JSON and the SVG.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{BenchArgs, Fault, HttpVersion, Mode, TargetSel};
use crate::drivers::{ErrorKind, Target, scorer::ScorerTarget, webhook::WebhookTarget};
use crate::procfs::{self, Watch};
use crate::report::{self, RunResult, json::Meta, summary};
use crate::schedule::{self, Pacing, Plan};
use crate::spawn::{self, Service};
use crate::{abuse, faults, workload};
use gpu_admission_testkit::faults::FaultProxy;

/// Runs the whole benchmark; returns the process exit code (0, or 2 when a run could not run or the
/// webhook answered something it never may: a rejection, a non-200, a wrong uid).
pub async fn run(args: BenchArgs) -> Result<i32> {
    let workload = match &args.replay {
        Some(dir) => workload::replay(dir, args.seed)?,
        None => workload::generate(args.seed, args.pods.max(1))?,
    };
    let run_id: u32 = rand::random();
    let _tmp;
    let work_dir: PathBuf = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            let t = tempfile::Builder::new().prefix("loadgen-").tempdir()?;
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    if !args.faults.is_empty() && !args.spawn {
        bail!("--fault needs --spawn (loadgen stops, kills or slows the scorer it started)");
    }
    let sel = args.target.unwrap_or(
        if args.spawn || (args.webhook.is_some() && args.scorer.is_some()) {
            TargetSel::All
        } else if args.scorer.is_some() && args.webhook.is_none() {
            TargetSel::Scorer
        } else {
            TargetSel::Webhook
        },
    );
    let want_webhook = matches!(sel, TargetSel::Webhook | TargetSel::All);
    let want_scorer = matches!(sel, TargetSel::Scorer | TargetSel::All);

    // Services.
    let mut scorer_svc: Option<Service> = None;
    let mut frontend_svc: Option<Service> = None;
    let bins = if args.spawn {
        Some(spawn::bin_dir(args.bin_dir.as_deref())?)
    } else {
        None
    };
    if let Some(bins) = &bins {
        let s = spawn::start_scorer(bins, &work_dir).await?;
        eprintln!(
            "spawned scorer on {} (pid {}, log {})",
            s.addr,
            s.pid().unwrap_or(0),
            s.log.display()
        );
        if want_webhook {
            let f = spawn::start_frontend(
                bins,
                "webhook-frontend",
                &format!("http://{}", s.addr),
                &work_dir.join("tls-frontend"),
                args.deadline_ms,
                work_dir.join("webhook-frontend.log"),
                &args.frontend_args,
            )
            .await?;
            eprintln!(
                "spawned webhook-frontend on {} (pid {}, log {})",
                f.addr,
                f.pid().unwrap_or(0),
                f.log.display()
            );
            frontend_svc = Some(f);
        }
        scorer_svc = Some(s);
    }
    let baseline_svc = if args.baseline {
        let b = spawn::start_baseline(
            &work_dir.join("tls-baseline"),
            work_dir.join("baseline.log"),
        )
        .await?;
        eprintln!(
            "spawned baseline endpoint on {} (pid {})",
            b.addr,
            b.pid().unwrap_or(0)
        );
        Some(b)
    } else {
        None
    };

    // Targets.
    let reviews: Vec<_> = workload.items.iter().map(|i| i.review.clone()).collect();
    let mut targets: Vec<(String, Target)> = Vec::new();
    if want_webhook {
        let (url, ca) = match &frontend_svc {
            Some(f) => (
                format!("https://{}/mutate-pod", f.addr),
                work_dir.join("tls-frontend/ca.crt"),
            ),
            None => match (&args.webhook, &args.ca) {
                (Some(u), Some(c)) => (u.clone(), c.clone()),
                (Some(_), None) => bail!(
                    "--webhook needs --ca (the CA bundle its certificate is verified against)"
                ),
                _ => (String::new(), PathBuf::new()),
            },
        };
        if !url.is_empty() {
            let t = WebhookTarget::new(&url, &ca, args.http, reviews.clone(), run_id).await?;
            targets.push(("webhook".into(), Target::Webhook(t.into())));
        }
    }
    if let Some(b) = &baseline_svc {
        let url = format!("https://{}/mutate-pod", b.addr);
        let t = WebhookTarget::new(
            &url,
            &work_dir.join("tls-baseline/ca.crt"),
            args.http,
            reviews.clone(),
            run_id,
        )
        .await?;
        targets.push(("baseline".into(), Target::Webhook(t.into())));
    }
    if want_scorer {
        let url = scorer_svc
            .as_ref()
            .map(|s| format!("http://{}", s.addr))
            .or_else(|| args.scorer.clone());
        if let Some(url) = url {
            let t = ScorerTarget::new(&url, workload.score_requests(), run_id)?;
            targets.push(("scorer".into(), Target::Scorer(t.into())));
        }
    }
    if targets.is_empty() {
        bail!("nothing to load: pass --spawn, or --webhook URL --ca PATH, and/or --scorer URL");
    }

    if let Some(prio) = args.rt_priority {
        for s in [&scorer_svc, &frontend_svc, &baseline_svc]
            .into_iter()
            .flatten()
        {
            if let Some(pid) = s.pid() {
                faults::set_realtime(pid, prio)?;
            }
        }
        faults::set_realtime(std::process::id(), prio + 1)?;
        eprintln!(
            "real-time scheduling: services SCHED_FIFO {prio}, loadgen {}",
            prio + 1
        );
    }

    // Processes to watch, and their idle memory.
    let mut watched: Vec<(String, u32)> = Vec::new();
    for s in [&scorer_svc, &frontend_svc, &baseline_svc]
        .into_iter()
        .flatten()
    {
        if let Some(pid) = s.pid() {
            watched.push((s.name.clone(), pid));
        }
    }
    for w in &args.watch_pids {
        let (name, pid) = w.split_once('=').context("--watch-pid takes NAME=PID")?;
        watched.push((
            name.to_string(),
            pid.parse().context("--watch-pid takes NAME=PID")?,
        ));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss: Vec<(String, u64)> = watched
        .iter()
        .map(|(n, p)| (n.clone(), procfs::rss_kib(*p).unwrap_or(0)))
        .collect();

    let http = match args.http {
        HttpVersion::Http1 => "http/1.1",
        HttpVersion::H2 => "h2",
    };
    eprintln!(
        "workload: {} (mean request {} bytes); {} connections over {http}; warmup {:?}, measured {:?} per run",
        workload.source,
        workload.mean_body_bytes(),
        args.connections,
        args.warmup,
        args.duration
    );

    let loadavg_start = report::json::loadavg();
    let mode = args.mode.unwrap_or(if args.rate.is_some() {
        Mode::Open
    } else {
        Mode::Sweep
    });
    let mut runs: Vec<RunResult> = Vec::new();
    let mut failed_runs = 0;
    let plan = |pacing, connections| Plan {
        pacing,
        connections,
        client_threads: usize::from(args.client_threads),
        warmup: args.warmup,
        duration: args.duration,
    };
    let plan_targets: &[(String, Target)] = if args.scenarios_only { &[] } else { &targets };
    for (name, target) in plan_targets {
        let pids = pids_for(name, &watched);
        match mode {
            Mode::Open => {
                let rate = args.rate.unwrap_or(args.rates[0]);
                match run_one(
                    format!("{name} open {rate:.0}/s"),
                    name,
                    target,
                    plan(Pacing::Open { rate }, args.connections),
                    &pids,
                    |_| {},
                )
                .await
                {
                    Ok(r) => runs.push(r),
                    Err(e) => {
                        failed_runs += 1;
                        eprintln!("{name} open {rate}/s failed: {e:#}");
                    }
                }
            }
            Mode::Closed | Mode::Sweep => {
                if mode == Mode::Sweep {
                    for &rate in &args.rates {
                        match run_one(
                            format!("{name} open {rate:.0}/s"),
                            name,
                            target,
                            plan(Pacing::Open { rate }, args.connections),
                            &pids,
                            |_| {},
                        )
                        .await
                        {
                            Ok(mut r) => {
                                r.saturated = r.achieved_rps < 0.95 * rate
                                    || r.latency_ms.p99
                                        > args.saturation_p99.as_secs_f64() * 1000.0
                                    || r.outcomes.errors * 100 > r.requests;
                                let stop = r.saturated;
                                runs.push(r);
                                if stop {
                                    break;
                                }
                            }
                            Err(e) => {
                                failed_runs += 1;
                                eprintln!("{name} open {rate}/s failed: {e:#}");
                                break;
                            }
                        }
                    }
                }
                let label = format!("{name} closed {}conn", args.connections);
                match run_one(
                    label.clone(),
                    name,
                    target,
                    plan(Pacing::Closed, args.connections),
                    &pids,
                    |_| {},
                )
                .await
                {
                    Ok(r) => runs.push(r),
                    Err(e) => {
                        failed_runs += 1;
                        eprintln!("{label} failed: {e:#}");
                    }
                }
            }
        }
    }

    // Faults, killed last (the scorer is restarted after it, which may take a moment).
    let mut fault_list = args.faults.clone();
    fault_list.sort_by_key(|f| match f {
        Fault::Slow(_) => 0,
        Fault::Hung => 1,
        Fault::Killed => 2,
    });
    if let (Some(bins), Some(scorer)) = (&bins, scorer_svc.as_mut()) {
        // Enough connections that answers at the deadline do not starve the open loop of free connections.
        let needed =
            (args.fault_rate * (args.deadline_ms as f64 + 100.0) / 1000.0 * 2.0).ceil() as usize;
        let conns = args.connections.max(needed);
        let fault_plan = plan(
            Pacing::Open {
                rate: args.fault_rate,
            },
            conns,
        );
        for fault in fault_list {
            let label = format!("webhook open {:.0}/s scorer {fault}", args.fault_rate);
            match run_fault(
                fault,
                &label,
                bins,
                scorer,
                frontend_svc.as_ref(),
                &reviews,
                run_id,
                &args,
                &work_dir,
                fault_plan,
            )
            .await
            {
                Ok(mut r) => {
                    r.fault = Some(fault.to_string());
                    runs.push(r);
                }
                Err(e) => {
                    failed_runs += 1;
                    eprintln!("{label} failed: {e:#}");
                }
            }
        }
    }

    // Burst and idle-connection scenarios against the webhook.
    let (bursts, idle) = match targets.iter().find(|(n, _)| n == "webhook").map(|(_, t)| t) {
        Some(Target::Webhook(webhook)) if args.burst.is_some() || args.idle_conns.is_some() => {
            let (url, ca) = webhook_url_and_ca(&args, frontend_svc.as_ref(), &work_dir)?;
            let mut bursts = Vec::new();
            if let Some(n) = args.burst {
                for h2 in [true, false] {
                    let http = if h2 {
                        HttpVersion::H2
                    } else {
                        HttpVersion::Http1
                    };
                    let label = if h2 {
                        format!("webhook burst {n} over 1 h2 conn")
                    } else {
                        format!(
                            "webhook burst {n} over {} http/1.1",
                            abuse::BURST_H1_CONNECTIONS
                        )
                    };
                    let t = WebhookTarget::new(&url, &ca, http, reviews.clone(), run_id).await?;
                    match abuse::burst(label.clone(), t.into(), n, args.burst_rounds, h2).await {
                        Ok(b) => {
                            eprintln!(
                                "{label}: {} requests, passed {} {:?}, errors {}",
                                b.requests, b.passed_through, b.pass_reasons, b.errors
                            );
                            bursts.push(b);
                        }
                        Err(e) => {
                            failed_runs += 1;
                            eprintln!("{label} failed: {e:#}");
                        }
                    }
                }
            }
            let idle = match args.idle_conns {
                Some(n) => {
                    let one_byte = args.one_byte_conns.unwrap_or(n / 10);
                    let pid = frontend_svc.as_ref().and_then(Service::pid).or_else(|| {
                        watched
                            .iter()
                            .find(|(name, _)| name.starts_with("webhook"))
                            .map(|(_, p)| *p)
                    });
                    match abuse::idle_connections(
                        webhook.clone(),
                        n,
                        one_byte,
                        args.idle_wait,
                        args.idle_settle,
                        pid,
                    )
                    .await
                    {
                        Ok(r) => Some(r),
                        Err(e) => {
                            failed_runs += 1;
                            eprintln!("idle-connection run failed: {e:#}");
                            None
                        }
                    }
                }
                None => None,
            };
            (bursts, idle)
        }
        _ => (Vec::new(), None),
    };

    // Reports.
    let meta = Meta::collect(&workload, http.to_string(), args.deadline_ms, loadavg_start);
    let mut s = summary::summarize(&runs, &idle_rss, args.deadline_ms);
    if args.no_targets {
        s.checks.clear();
    }
    print!("{}", report::table::render(&meta, &runs, &s));
    print!("{}", abuse::render(&bursts, idle.as_ref()));
    if let Some(path) = &args.json
        && (!bursts.is_empty() || idle.is_some())
    {
        let scenarios = path.with_extension("scenarios.json");
        std::fs::write(
            &scenarios,
            serde_json::to_vec_pretty(
                &serde_json::json!({ "bursts": bursts, "idle_connections": idle }),
            )?,
        )?;
        eprintln!("wrote {}", scenarios.display());
    }
    if let Some(path) = &args.json {
        report::json::write(
            path,
            &report::json::Report {
                meta: &meta,
                summary: &s,
                runs: &runs,
            },
        )?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "gpu-admission latency by percentile — {} CPUs — {}",
            meta.cpus,
            &meta.date[..meta.date.len().min(16)]
        );
        report::svg::write(path, &runs, &title)?;
        eprintln!("wrote {}", path.display());
    }
    if args.work_dir.is_some() {
        eprintln!(
            "service logs and certificates kept in {}",
            work_dir.display()
        );
    }
    let wrong_answers: u64 = runs
        .iter()
        .filter(|r| r.fault.is_none())
        .flat_map(|r| r.outcomes.error_kinds.iter())
        .filter(|(k, _)| {
            matches!(
                k,
                ErrorKind::Rejected | ErrorKind::BadResponse | ErrorKind::HttpStatus
            )
        })
        .map(|(_, n)| n)
        .sum();
    if wrong_answers > 0 {
        eprintln!(
            "{wrong_answers} answers were wrong (rejected Pod, non-200 or wrong uid): see the errors column"
        );
    }
    Ok(if failed_runs > 0 || wrong_answers > 0 {
        2
    } else {
        0
    })
}

/// The webhook's URL and CA bundle: the spawned frontend's, or `--webhook` / `--ca`.
fn webhook_url_and_ca(
    args: &BenchArgs,
    frontend: Option<&Service>,
    work_dir: &std::path::Path,
) -> Result<(String, PathBuf)> {
    Ok(match frontend {
        Some(f) => (
            format!("https://{}/mutate-pod", f.addr),
            work_dir.join("tls-frontend/ca.crt"),
        ),
        None => (
            args.webhook.clone().context("--webhook URL")?,
            args.ca.clone().context("--ca PATH")?,
        ),
    })
}

/// The processes that matter for a target: the webhook needs the frontend and the scorer.
fn pids_for(target: &str, watched: &[(String, u32)]) -> Vec<(String, u32)> {
    watched
        .iter()
        .filter(|(n, _)| match target {
            "webhook" => n != "baseline",
            "baseline" => n == "baseline",
            "scorer" => n == "scorer",
            _ => true,
        })
        .cloned()
        .collect()
}

async fn run_one(
    label: String,
    target_name: &str,
    target: &Target,
    plan: Plan,
    pids: &[(String, u32)],
    on_start: impl FnOnce(Instant),
) -> Result<RunResult> {
    let total = plan.warmup + plan.duration;
    let bar = (total >= Duration::from_secs(3)).then(|| {
        let pb = ProgressBar::new(total.as_millis() as u64);
        pb.set_style(
            ProgressStyle::with_template("{msg:40} [{bar:40}] {elapsed}/{duration}")
                .expect("static progress template")
                .progress_chars("=> "),
        );
        pb.set_message(label.clone());
        pb
    });
    let watch = Watch::start(pids);
    let ticker = bar.clone().map(|pb| {
        tokio::spawn(async move {
            let t0 = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                pb.set_position(t0.elapsed().as_millis() as u64);
            }
        })
    });
    let measured = schedule::run(target, &plan, on_start).await;
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let (usage, me) = watch.finish();
    let m = measured?;
    let (mode, rate) = match plan.pacing {
        Pacing::Open { rate } => ("open", Some(rate)),
        Pacing::Closed => ("closed", None),
    };
    let mut r = RunResult::from_recorder(
        label,
        target_name,
        mode,
        rate,
        plan.connections,
        m.window,
        &m.recorder,
        m.window_start,
        usage,
        &me,
    );
    if let Pacing::Closed = plan.pacing {
        // Client-bound = every client thread nearly busy all the time.
        let threads = plan.client_threads.clamp(1, plan.connections.max(1)) as f64;
        r.client_bound = me.cpu_cores >= report::CLIENT_BOUND_CORES * threads;
    }
    eprintln!(
        "{:<40} {:>7.0}/s  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  (send lag p99 {}) mutated {} passed {} skipped {} scored {} errors {}",
        r.name,
        r.achieved_rps,
        r.latency_ms.p50,
        r.latency_ms.p99,
        r.latency_ms.max,
        r.send_lag_ms
            .as_ref()
            .map_or("-".to_string(), |p| format!("{:.3} ms", p.p99)),
        r.outcomes.mutated,
        r.outcomes.passed_through,
        r.outcomes.skipped,
        r.outcomes.scored,
        r.outcomes.errors
    );
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
async fn run_fault(
    fault: Fault,
    label: &str,
    bins: &std::path::Path,
    scorer: &mut Service,
    frontend: Option<&Service>,
    reviews: &[workload::ReviewTemplate],
    run_id: u32,
    args: &BenchArgs,
    work_dir: &std::path::Path,
    plan: Plan,
) -> Result<RunResult> {
    let scorer_pid = scorer.pid().context("the scorer is not running")?;
    let webhook_target = |addr: std::net::SocketAddr, ca: PathBuf| async move {
        WebhookTarget::new(
            &format!("https://{addr}/mutate-pod"),
            &ca,
            args.http,
            reviews.to_vec(),
            run_id,
        )
        .await
        .map(|t| Target::Webhook(t.into()))
    };
    match fault {
        Fault::Hung => {
            let f = frontend.context("no frontend")?;
            let target = webhook_target(f.addr, work_dir.join("tls-frontend/ca.crt")).await?;
            let pids = vec![("webhook-frontend".to_string(), f.pid().unwrap_or(0))];
            faults::signal(scorer_pid, "STOP")?;
            let r = run_one(label.to_string(), "webhook", &target, plan, &pids, |_| {}).await;
            faults::signal(scorer_pid, "CONT")?;
            r
        }
        Fault::Killed => {
            let f = frontend.context("no frontend")?;
            let target = webhook_target(f.addr, work_dir.join("tls-frontend/ca.crt")).await?;
            let pids = vec![("webhook-frontend".to_string(), f.pid().unwrap_or(0))];
            let kill_after = plan.warmup + plan.duration / 3;
            let r = run_one(
                label.to_string(),
                "webhook",
                &target,
                plan,
                &pids,
                move |start| {
                    tokio::spawn(async move {
                        tokio::time::sleep_until((start + kill_after).into()).await;
                        let _ = faults::signal(scorer_pid, "KILL");
                    });
                },
            )
            .await;
            match scorer.restart().await {
                Ok(()) => {
                    if let (Some(prio), Some(pid)) = (args.rt_priority, scorer.pid()) {
                        faults::set_realtime(pid, prio)?;
                    }
                    eprintln!("scorer restarted on {} after the killed run", scorer.addr)
                }
                Err(e) => eprintln!("scorer could not be restarted after the killed run: {e:#}"),
            }
            r
        }
        Fault::Slow(delay) => {
            let proxy = FaultProxy::start_delayed(scorer.addr, delay).await?;
            let tls = work_dir.join("tls-frontend-slow");
            let f = spawn::start_frontend(
                bins,
                "webhook-frontend-slow",
                &proxy.url(),
                &tls,
                args.deadline_ms,
                work_dir.join("webhook-frontend-slow.log"),
                &args.frontend_args,
            )
            .await?;
            if let (Some(prio), Some(pid)) = (args.rt_priority, f.pid()) {
                faults::set_realtime(pid, prio)?;
            }
            let target = webhook_target(f.addr, tls.join("ca.crt")).await?;
            let pids = vec![
                ("webhook-frontend-slow".to_string(), f.pid().unwrap_or(0)),
                ("scorer".to_string(), scorer_pid),
            ];
            let r = run_one(label.to_string(), "webhook", &target, plan, &pids, |_| {}).await;
            drop(proxy);
            r
        }
    }
}
