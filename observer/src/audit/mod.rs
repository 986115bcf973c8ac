//! The background audit (`--policy-reports`): on the leader, every GPU Pod that runs and every workload
//! holding pod templates in a tier namespace is decided again with core's `/validate-pod` decision, and
//! each namespace's results are written to its `wgpolicyk8s.io/v1alpha2` PolicyReport `gpu-admission`.
//!
//! What it reads: reflector stores that watches keep current ([`stores`]), started when this replica leads
//! and dropped when it stops; a pass lists nothing. When: every `--audit-poll-secs` a pass looks at the
//! namespaces whose objects, labels, exceptions or claims changed since the last pass. It decides again
//! the objects whose resourceVersion changed, or all of a namespace's when what its decisions read changed;
//! the others keep their results ([`decided`]), and a quota'd tier's `max` is replayed from what each of
//! its Pods was counted. A Node added, deleted or relabelled re-decides the namespaces of the Pods bound to
//! it (a Pod's class is read from its Node by name). Everything is decided again when the scorer's policy
//! version changed, after a watch re-listed, and when a PriorityClass changed. Every `--audit-interval-secs` a
//! slow pass decides again what time alone changes: the namespaces holding an exception (it may have
//! expired) or a deleted Pod within its grace period (it may no longer count against its quota); it also
//! rediscovers the APIs. Only a report whose content changed is written.
//!
//! Without the PolicyReport CRD the audit logs that once and asks discovery again at every poll; the rest
//! of the observer is not affected. See deploy/README.md ("PolicyReports").
//!
//! - [`evaluate`]: one object → its results (pure, core's decision);
//! - [`decided`]: each object's results kept between passes (pure);
//! - [`quota`]: the running Pods past a GPU quota's `max`, replayed in creation order (pure);
//! - [`report`]: a namespace's results → its bounded PolicyReport (pure);
//! - [`stores`]: the watches, their stores, and which namespaces changed;
//! - [`cluster`]: discovery, the facts as the stores hold them, the writes.

pub mod cluster;
pub mod decided;
pub mod evaluate;
pub mod quota;
pub mod report;
pub mod stores;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::workload::OwnerQuery;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::core::DynamicObject;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::metrics::{AuditResultLabels, Metrics};
use crate::replicas::{Replicas, get_policy};
use cluster::{Apis, ClusterFacts, GroupResource};
use decided::{Decided, DecidedObject, ObjectKey};
use evaluate::{ExceptionFacts, Finding, Kind};
use report::Limits;
use stores::{Dirty, StoredObject, Stores};

#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// Workload resources audited besides Pods.
    pub resources: Vec<GroupResource>,
    /// Between full passes (and discoveries).
    pub interval: Duration,
    /// Between passes over what changed (and checks of the policy version).
    pub poll: Duration,
    pub limits: Limits,
}

/// What the leader remembers between passes (forgotten when it stops leading).
#[derive(Default)]
struct State {
    /// The watches of the APIs discovery found (none while the PolicyReport API is not served).
    stores: Option<Stores>,
    /// Whether the PolicyReport API was served at the last discovery (to log changes only).
    served: Option<bool>,
    last_version: Option<String>,
    /// When the last full pass ended.
    last_full: Option<Instant>,
    /// Namespace → what its report holds now.
    reports: HashMap<String, Written>,
    /// The (result, reason) gauges last set.
    published: HashSet<AuditResultLabels>,
    /// What the passes decided of each object.
    decided: Decided,
}

/// A namespace's report as last written: its digest, and its results for the metrics.
struct Written {
    digest: [u8; 32],
    results: HashMap<AuditResultLabels, i64>,
    omitted: usize,
}

/// Runs the audit while this replica leads, until the leader election stops.
pub async fn run(
    client: kube::Client,
    replicas: Arc<Replicas>,
    metrics: Arc<Metrics>,
    mut leader: watch::Receiver<bool>,
    config: AuditConfig,
) {
    let mut state = State::default();
    let mut tick = tokio::time::interval(config.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = leader.changed() => if changed.is_err() { return },
        }
        if !*leader.borrow_and_update() {
            if state.last_full.is_some() {
                tracing::info!("not leading: background audit and its watches stopped");
            }
            // The reports' gauges are the leader's: a replica that stops leading shows none.
            metrics.audit.results.clear();
            metrics.audit.results_omitted.set(0);
            metrics.audit.api_served.set(0);
            state = State {
                served: state.served,
                ..State::default()
            };
            continue;
        }
        step(&client, &replicas, &metrics, &config, &mut state).await;
    }
}

/// One poll: discovery when due, the policy, and a pass over what changed.
async fn step(
    client: &kube::Client,
    replicas: &Replicas,
    metrics: &Arc<Metrics>,
    config: &AuditConfig,
    state: &mut State,
) {
    let full_due = state
        .last_full
        .is_none_or(|t| t.elapsed() >= config.interval);
    if state.stores.is_none() || full_due {
        match cluster::discover(client, &config.resources).await {
            Ok(apis) => note_discovery(client, state, apis, metrics),
            Err(err) => {
                tracing::warn!(%err, "discovery failed; the audit waits");
                return;
            }
        }
    }
    let Some(stores) = state.stores.as_ref() else {
        return;
    };
    if !stores.ready() {
        tracing::debug!("the audit's stores are not filled yet; the audit waits");
        return;
    }
    let Some(response) = get_policy(&replicas.resolve().await).await else {
        tracing::warn!("no scorer answers GetPolicy; the audit waits");
        return;
    };
    let policy = match PolicySnapshot::from_response(&response) {
        Ok(policy) => policy,
        Err(err) => {
            tracing::warn!(%err, "the scorer's policy document does not validate here; the audit waits");
            return;
        }
    };
    let version_changed = state.last_version.as_deref() != Some(policy.version.as_str());
    if version_changed {
        stores.changes.all();
    } else if full_due {
        for ns in time_sensitive(stores, &state.decided) {
            stores.changes.facts(&ns);
        }
    }
    let mut dirty = stores.changes.take();
    let on_changed_nodes = stores.namespaces_on_nodes(&std::mem::take(&mut dirty.nodes));
    dirty.facts.extend(on_changed_nodes);
    // A slow pass runs even when nothing is marked: its end says the audit is caught up at that time (what
    // `observer_audit_duration_seconds_count` counts), on a quiet cluster too.
    if dirty.is_empty() && !full_due {
        return;
    }
    let started = Instant::now();
    let outcome = audit(client, &policy, config, state, metrics, &dirty).await;
    metrics
        .audit
        .duration_seconds
        .observe(started.elapsed().as_secs_f64());
    match outcome {
        Ok(summary) => {
            Metrics::result(&metrics.audit.audits, "ok");
            tracing::info!(version = %policy.version, policy_changed = version_changed && state.last_version.is_some(),
                ?summary, seconds = started.elapsed().as_secs_f64(), "audit done");
            state.last_version = Some(policy.version.clone());
            if full_due || dirty.all {
                state.last_full = Some(Instant::now());
            }
        }
        Err(err) => {
            Metrics::result(&metrics.audit.audits, "failed");
            tracing::warn!(error = %format!("{err:#}"), "audit failed; retried at the next poll");
            if let Some(stores) = &state.stores {
                stores.changes.restore(dirty);
            }
            if is_not_found(&err) {
                // The CRD went away: find out at the next poll.
                state.stores = None;
            }
        }
    }
}

/// The namespaces whose results time alone may change, decided again at every slow pass: those holding
/// a GpuPolicyException (it may have expired) or a deleted Pod within its grace period (it may have
/// stopped counting against its quota).
fn time_sensitive(stores: &Stores, decided: &Decided) -> HashSet<String> {
    let mut namespaces: HashSet<String> = (stores.exceptions.iter())
        .flat_map(|e| e.exceptions.state())
        .filter_map(|e| e.metadata.namespace.clone())
        .collect();
    namespaces.extend(decided.volatile_namespaces().map(str::to_string));
    namespaces
}

fn is_not_found(err: &anyhow::Error) -> bool {
    matches!(err.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404)
}

/// Keeps the watches of the APIs found; new ones when what is served changed.
fn note_discovery(
    client: &kube::Client,
    state: &mut State,
    apis: Option<Apis>,
    metrics: &Arc<Metrics>,
) {
    let served = apis.is_some();
    metrics.audit.api_served.set(i64::from(served));
    if state.served != Some(served) {
        match &apis {
            Some(a) => tracing::info!(
                kinds = ?a.kinds.iter().map(|k| format!("{}.{}", k.plural, k.group)).collect::<Vec<_>>(),
                not_served = ?a.missing, dra = a.dra, exceptions = a.exceptions,
                "PolicyReport API (wgpolicyk8s.io/v1alpha2) served: background audit on"),
            None => tracing::warn!(
                "PolicyReport API (wgpolicyk8s.io/v1alpha2) not served: no PolicyReports until its CRD is installed \
                 (deploy/kustomize/components/policy-reports); asking discovery again at every poll"
            ),
        }
    }
    state.served = Some(served);
    let Some(apis) = apis else {
        state.stores = None;
        state.reports.clear();
        return;
    };
    if state.stores.as_ref().is_some_and(|s| s.apis == apis) {
        return;
    }
    if state.stores.is_some() {
        tracing::info!(kinds = ?apis.kinds.iter().map(|k| format!("{}.{}", k.plural, k.group)).collect::<Vec<_>>(),
            dra = apis.dra, exceptions = apis.exceptions, "the APIs served changed: the audit's watches start again");
    }
    state.stores = Some(Stores::start(client, apis, metrics));
}

/// What one pass did.
#[derive(Debug, Default)]
#[allow(dead_code)] // read through Debug in the log line
struct Summary {
    full: bool,
    namespaces: usize,
    /// Objects decided (new or changed since the last pass, or in a namespace whose facts changed).
    objects: usize,
    /// Objects whose earlier results stood.
    reused: usize,
    results: usize,
    applied: usize,
    unchanged: usize,
    deleted: usize,
    failed: usize,
    /// Seconds deciding and building the reports, then writing them.
    decide_seconds: f64,
    write_seconds: f64,
}

/// Whether the audit decides `object`: a Pod that still runs (not Succeeded or Failed), a workload not
/// controlled by another audited workload (a Deployment's ReplicaSet, a CronJob's Job: their owner is
/// reported, and the Pods are).
pub fn audited(object: &DynamicObject, kind: &Kind, kinds: &[Kind]) -> bool {
    if kind.kind == "Pod" && kind.group.is_empty() {
        let phase = object
            .data
            .pointer("/status/phase")
            .and_then(|p| p.as_str());
        return !matches!(phase, Some("Succeeded" | "Failed"));
    }
    let controller = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    !controller.is_some_and(|o| {
        let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        kinds.iter().any(|k| k.kind == o.kind && k.group == group)
    })
}

/// The namespaces whose objects a pass looks at: every one known (selected, or holding a report) when
/// `dirty.all`; else the marked ones and, when the policy holds GPU quotas, every namespace of their tiers
/// that no pass has decided yet (a tier's `max` counts the Pods of all its namespaces, replayed from what
/// earlier passes decided of them: [`Decided::quota_pods`]).
fn scope(
    dirty: &Dirty,
    cf: &ClusterFacts<'_>,
    quota_tier: &dyn Fn(&str) -> Option<String>,
    decided: &Decided,
    reported: impl Iterator<Item = String>,
) -> HashSet<String> {
    if dirty.all {
        return cf.tiers.keys().cloned().chain(reported).collect();
    }
    let mut scope: HashSet<String> = dirty.namespaces.union(&dirty.facts).cloned().collect();
    let tiers: HashSet<String> = scope.iter().filter_map(|ns| quota_tier(ns)).collect();
    scope.extend(
        (cf.tiers.keys())
            .filter(|ns| {
                !decided.contains(ns) && quota_tier(ns).is_some_and(|t| tiers.contains(&t))
            })
            .cloned(),
    );
    scope
}

/// One pass over `dirty`'s namespaces: their objects as the stores hold them decided again where they
/// changed, their tiers' quotas replayed, and the reports whose content changed written (deleted when
/// nothing is left to report).
async fn audit(
    client: &kube::Client,
    policy: &PolicySnapshot,
    config: &AuditConfig,
    state: &mut State,
    metrics: &Metrics,
    dirty: &Dirty,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let Some(stores) = state.stores.as_ref() else {
        return Ok(Summary::default());
    };
    let apis = stores.apis.clone();
    let cf = ClusterFacts::read(stores, policy.tier_label());
    let existing = stores.report_namespaces();
    if dirty.all {
        state.decided.clear();
    }
    for ns in &dirty.facts {
        state.decided.forget(ns);
    }
    let quotas = policy.policy.as_ref().is_some_and(|p| p.quotas.any());
    let quota_tier = |ns: &str| {
        let label = cf.tiers.get(ns)?;
        (quotas.then(|| policy.tier_for(label.as_deref()).tier().map(str::to_string))).flatten()
    };
    let scope = scope(
        dirty,
        &cf,
        &quota_tier,
        &state.decided,
        existing.iter().cloned(),
    );
    metrics.audit.namespaces_audited.inc_by(scope.len() as u64);
    let mut summary = Summary {
        full: dirty.all,
        namespaces: scope.len(),
        ..Summary::default()
    };
    let mut now_decided: HashMap<String, HashMap<ObjectKey, DecidedObject>> = scope
        .iter()
        .map(|ns| (ns.clone(), HashMap::new()))
        .collect();
    for (index, (kind, store)) in stores.objects.iter().enumerate() {
        let stored = store.state_filter(|o| {
            o.meta()
                .namespace
                .as_ref()
                .is_some_and(|ns| scope.contains(ns) && cf.tiers.contains_key(ns))
        });
        let mut changed = Vec::new();
        for o in stored {
            let (Some(ns), Some(name)) = (&o.meta().namespace, &o.meta().name) else {
                continue;
            };
            let key = (index, name.clone());
            let rv = o.meta().resource_version.as_deref();
            match state.decided.take_reusable(ns, &key, rv) {
                Some(d) => {
                    summary.reused += 1;
                    now_decided.entry(ns.clone()).or_default().insert(key, d);
                }
                None => changed.push(o),
            }
        }
        // Decoded a page at a time: a decoded object costs about ten times its stored JSON.
        for page in changed.chunks(DECODE_PAGE) {
            for (ns, key, d) in decide_page(page, (index, kind), &apis.kinds, policy, &cf) {
                summary.objects += 1;
                now_decided.entry(ns).or_default().insert(key, d);
            }
        }
    }
    for (ns, objects) in now_decided {
        state.decided.set_objects(ns, objects);
    }
    let mut rebuilt = scope.clone();
    if quotas {
        let tiers: HashSet<String> = scope.iter().filter_map(|ns| quota_tier(ns)).collect();
        let members: HashSet<String> = (cf.tiers.keys())
            .filter(|ns| quota_tier(ns).is_some_and(|t| tiers.contains(&t)))
            .cloned()
            .collect();
        let findings = quota::findings(state.decided.quota_pods(&members), policy);
        rebuilt.extend(state.decided.set_quota(&members, findings));
    }
    state.decided.retain(|ns| cf.tiers.contains_key(ns));
    let by_namespace: BTreeMap<String, Vec<Finding>> = (rebuilt.into_iter())
        .map(|ns| {
            let findings = state.decided.findings(&ns);
            (ns, findings)
        })
        .collect();
    drop(cf);
    let writes = plan_writes(
        by_namespace,
        &existing,
        state,
        policy,
        config,
        metrics,
        &mut summary,
    );
    summary.decide_seconds = started.elapsed().as_secs_f64();
    let writing = Instant::now();
    let outcomes = futures::stream::iter(writes)
        .map(|write| async {
            let result = match &write {
                Write::Delete { namespace } => {
                    cluster::delete_report(client, &apis.reports, namespace).await
                }
                Write::Apply { report, .. } => {
                    cluster::apply_report(client, &apis.reports, report).await
                }
            };
            (write, result)
        })
        .buffer_unordered(CONCURRENT_REPORT_WRITES)
        .collect::<Vec<_>>()
        .await;
    summary.write_seconds = writing.elapsed().as_secs_f64();
    let mut retry = Dirty::default();
    let mut api_gone = None;
    for (write, result) in outcomes {
        let namespace = write.namespace().to_string();
        match (write, result) {
            (Write::Delete { .. }, Ok(())) => {
                summary.deleted += 1;
                Metrics::result(&metrics.audit.reports, "deleted");
            }
            (Write::Apply { written, .. }, Ok(())) => {
                summary.applied += 1;
                Metrics::result(&metrics.audit.reports, "applied");
                state.reports.insert(namespace, written);
            }
            (write, Err(err)) => {
                summary.failed += 1;
                Metrics::result(&metrics.audit.reports, "failed");
                tracing::warn!(%namespace, %err, what = write.what(), "a PolicyReport write failed");
                state.reports.remove(&namespace);
                if matches!(write, Write::Apply { .. })
                    && matches!(&err, kube::Error::Api(s) if s.code == 404)
                {
                    api_gone = Some(err);
                }
                retry.namespaces.insert(namespace);
            }
        }
    }
    if let Some(err) = api_gone {
        return Err(err.into());
    }
    if let Some(stores) = &state.stores {
        stores.changes.restore(retry);
    }
    publish_results(&state.reports, &mut state.published, metrics);
    Ok(summary)
}

/// Objects decoded and decided at a time in a pass.
const DECODE_PAGE: usize = 256;
/// PolicyReport writes in flight at once (each a round trip to the apiserver, most of a pass's time when
/// every namespace changed).
const CONCURRENT_REPORT_WRITES: usize = 16;

/// A write a pass makes to one namespace's report.
enum Write {
    Delete {
        namespace: String,
    },
    Apply {
        namespace: String,
        report: serde_json::Value,
        written: Written,
    },
}

impl Write {
    fn namespace(&self) -> &str {
        match self {
            Write::Delete { namespace } | Write::Apply { namespace, .. } => namespace,
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Write::Delete { .. } => "delete",
            Write::Apply { .. } => "apply",
        }
    }
}

/// The writes a pass's findings call for: a report whose content changed is applied, one left without
/// results deleted (if it exists), an unchanged one left alone (counted in `summary`).
fn plan_writes(
    by_namespace: BTreeMap<String, Vec<Finding>>,
    existing: &HashSet<String>,
    state: &mut State,
    policy: &PolicySnapshot,
    config: &AuditConfig,
    metrics: &Metrics,
    summary: &mut Summary,
) -> Vec<Write> {
    let now = Timestamp::now();
    let mut writes = Vec::new();
    for (namespace, findings) in by_namespace {
        if findings.is_empty() {
            state.reports.remove(&namespace);
            if existing.contains(&namespace) {
                writes.push(Write::Delete { namespace });
            }
            continue;
        }
        summary.results += findings.len();
        let results = result_counts(&findings);
        let built = report::build(&namespace, findings, &policy.version, config.limits, now);
        if existing.contains(&namespace)
            && state
                .reports
                .get(&namespace)
                .is_some_and(|w| w.digest == built.digest)
        {
            summary.unchanged += 1;
            Metrics::result(&metrics.audit.reports, "unchanged");
            continue;
        }
        writes.push(Write::Apply {
            namespace,
            report: built.report,
            written: Written {
                digest: built.digest,
                results,
                omitted: built.omitted,
            },
        });
    }
    writes
}

/// A page of changed objects of one kind (its index among the audited kinds, and the kind), decided with
/// the facts read at the start of the pass: each object's results and what it counts against its tier's
/// quota (an object not audited, a finished Pod, is kept as decided with neither).
fn decide_page(
    page: &[Arc<StoredObject>],
    (index, kind): (usize, &Kind),
    kinds: &[Kind],
    policy: &PolicySnapshot,
    cf: &ClusterFacts<'_>,
) -> Vec<(String, ObjectKey, DecidedObject)> {
    let tier_of = |ns: &str| cf.tiers.get(ns).cloned().flatten();
    let nodes = |n: &str| cf.node_class(n, policy.catalog());
    // A stored object has no requester to ask about: nothing is exempt from the report.
    let grants = gpu_admission_core::authority::Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: Some(&cf.priority_classes),
        claim_templates: cf,
        nodes: &nodes,
        grants: &grants,
    };
    let quotas = kind.is_pod() && policy.policy.as_ref().is_some_and(|p| p.quotas.any());
    // One clock for the page: a terminating Pod's grace period is read against it.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let owner = |q: &OwnerQuery| cf.owner(q);
    let exceptions = ExceptionFacts {
        exceptions: &cf.exceptions,
        owner: &owner,
        now: OffsetDateTime::now_utc(),
    };
    (page.iter())
        .filter_map(|stored| {
            let meta = stored.meta();
            let (ns, name) = (meta.namespace.clone()?, meta.name.clone()?);
            let mut decided = DecidedObject {
                resource_version: meta.resource_version.clone().unwrap_or_default(),
                findings: Vec::new(),
                quota: None,
                volatile: false,
            };
            if let Some(o) = stored.object().filter(|o| audited(o, kind, kinds)) {
                decided.findings = evaluate::evaluate(&o, kind, policy, (&facts, &exceptions));
                decided.quota = quotas
                    .then(|| quota::counted(&o, policy, &facts, now_ms))
                    .flatten();
                decided.volatile = o.metadata.deletion_timestamp.is_some();
            }
            Some((ns, (index, name), decided))
        })
        .collect()
}

/// One namespace's results by (result, reason).
fn result_counts(findings: &[Finding]) -> HashMap<AuditResultLabels, i64> {
    let mut counts = HashMap::new();
    for f in findings {
        *counts
            .entry(AuditResultLabels {
                result: f.outcome.as_str(),
                reason: f.rule,
            })
            .or_default() += 1;
    }
    counts
}

/// The results gauges: every (result, reason) of the reports as they stand; one no report holds any more
/// is removed after the others are set, so a scrape never sees the family empty mid-update.
fn publish_results(
    reports: &HashMap<String, Written>,
    published: &mut HashSet<AuditResultLabels>,
    metrics: &Metrics,
) {
    let mut counts: HashMap<&AuditResultLabels, i64> = HashMap::new();
    for (labels, n) in reports.values().flat_map(|w| &w.results) {
        *counts.entry(labels).or_default() += n;
    }
    for (labels, n) in &counts {
        metrics.audit.results.get_or_create(labels).set(*n);
    }
    published.retain(|labels| {
        let kept = counts.contains_key(labels);
        if !kept {
            metrics.audit.results.remove(labels);
        }
        kept
    });
    published.extend(counts.into_keys().cloned());
    let omitted: usize = reports.values().map(|w| w.omitted).sum();
    metrics.audit.results_omitted.set(omitted as i64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds() -> Vec<Kind> {
        let k = |g: &str, kind: &str, plural: &str| Kind {
            group: g.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        vec![
            Kind::pods(),
            k("apps", "Deployment", "deployments"),
            k("apps", "ReplicaSet", "replicasets"),
            k("batch", "Job", "jobs"),
        ]
    }

    fn object(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn results_gauges_follow_the_reports_and_drop_what_none_holds() {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::register(&mut registry);
        let labels = |result, reason| AuditResultLabels { result, reason };
        let written = |results: &[(AuditResultLabels, i64)], omitted| Written {
            digest: [0; 32],
            results: results.iter().cloned().collect(),
            omitted,
        };
        let warn = labels("warn", "class_outside_tier");
        let pass = labels("pass", "within_tier");
        let mut published = HashSet::new();
        let mut reports = HashMap::from([
            ("a".to_string(), written(&[(warn.clone(), 2)], 1)),
            (
                "b".to_string(),
                written(&[(warn.clone(), 1), (pass.clone(), 3)], 0),
            ),
        ]);
        publish_results(&reports, &mut published, &metrics);
        let text = || {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
            out
        };
        let value = |t: &str, sample: &str| {
            t.lines().find_map(|l| {
                l.strip_prefix(sample)?
                    .strip_prefix(' ')?
                    .parse::<i64>()
                    .ok()
            })
        };
        let warn_line =
            r#"observer_policy_report_results{result="warn",reason="class_outside_tier"}"#;
        let pass_line = r#"observer_policy_report_results{result="pass",reason="within_tier"}"#;
        let t = text();
        assert_eq!(value(&t, warn_line), Some(3));
        assert_eq!(value(&t, pass_line), Some(3));
        assert_eq!(value(&t, "observer_policy_report_results_omitted"), Some(1));

        reports.remove("b");
        publish_results(&reports, &mut published, &metrics);
        let t = text();
        assert_eq!(value(&t, warn_line), Some(2));
        assert_eq!(
            value(&t, pass_line),
            None,
            "no report holds a pass any more:\n{t}"
        );
        assert_eq!(published, HashSet::from([warn]));
    }

    #[test]
    fn running_pods_and_top_level_workloads_are_audited() {
        let ks = kinds();
        let pod = |phase: &str| {
            object(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": phase}}),
            )
        };
        assert!(audited(&pod("Running"), &ks[0], &ks));
        assert!(audited(&pod("Pending"), &ks[0], &ks));
        assert!(!audited(&pod("Succeeded"), &ks[0], &ks));
        assert!(!audited(&pod("Failed"), &ks[0], &ks));
        let owned = |api: &str, kind: &str| {
            object(
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs",
                "ownerReferences": [{"apiVersion": api, "kind": kind, "name": "o", "uid": "u", "controller": true}]}}),
            )
        };
        // A Deployment's ReplicaSet: the Deployment is reported.
        assert!(!audited(&owned("apps/v1", "Deployment"), &ks[2], &ks));
        // Owned by something the audit does not list (an operator's CR): reported itself.
        assert!(audited(&owned("example.com/v1", "Trainer"), &ks[2], &ks));
        let plain = object(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
        );
        assert!(audited(&plain, &ks[1], &ks));
    }
}
