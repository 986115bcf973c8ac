//! The background audit (`--policy-reports`): on the leader, every GPU Pod that runs and every workload
//! holding pod templates in a tier namespace is decided again with core's `/validate-pod` decision, and
//! each namespace's results are written to its `wgpolicyk8s.io/v1alpha2` PolicyReport `gpu-admission`.
//!
//! What it reads: reflector stores that watches keep current ([`stores`]), started when this replica leads
//! and dropped when it stops; a pass lists nothing. When: every `--audit-poll-secs` a pass decides again
//! the namespaces whose objects, labels, exceptions or claims changed since the last pass, and every
//! namespace when the scorer's policy version changed, after a watch re-listed, and every
//! `--audit-interval-secs`. That slow full pass is what time alone changes: an exception that expired, a
//! deleted Pod past its grace period, no longer held to its quota; it also rediscovers the APIs. Only a
//! report whose content changed is written.
//!
//! Without the PolicyReport CRD the audit logs that once and asks discovery again at every poll; the rest
//! of the observer is not affected. See deploy/README.md ("PolicyReports").
//!
//! - [`evaluate`]: one object → its results (pure, core's decision);
//! - [`quota`]: the running Pods past a GPU quota's `max`, replayed in creation order (pure);
//! - [`report`]: a namespace's results → its bounded PolicyReport (pure);
//! - [`stores`]: the watches, their stores, and which namespaces changed;
//! - [`cluster`]: discovery, the facts as the stores hold them, the writes.

pub mod cluster;
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
use evaluate::{ExceptionFacts, Finding, Kind};
use report::Limits;
use stores::{Dirty, Stores};

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
}

/// A namespace's report as last written: its digest, and its results for the metrics.
struct Written {
    digest: String,
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
    if full_due || version_changed {
        stores.changes.all();
    }
    let dirty = stores.changes.take();
    if dirty.is_empty() {
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
            if dirty.all {
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
    objects: usize,
    results: usize,
    applied: usize,
    unchanged: usize,
    deleted: usize,
    failed: usize,
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

/// The namespaces a pass decides again: every one known (selected, or holding a report) when `dirty.all`;
/// else the marked ones and, when the policy holds GPU quotas, every namespace of their tiers (a tier's
/// `max` counts the Pods of all its namespaces).
fn scope(
    dirty: &Dirty,
    cf: &ClusterFacts<'_>,
    policy: &PolicySnapshot,
    reported: impl Iterator<Item = String>,
) -> HashSet<String> {
    if dirty.all {
        return cf.tiers.keys().cloned().chain(reported).collect();
    }
    let mut scope = dirty.namespaces.clone();
    if policy.policy.as_ref().is_some_and(|p| p.quotas.any()) {
        let tier = |ns: &str| {
            cf.tiers
                .get(ns)
                .and_then(|label| policy.tier_for(label.as_deref()).tier().map(str::to_string))
        };
        let tiers: HashSet<String> = dirty.namespaces.iter().filter_map(|ns| tier(ns)).collect();
        scope.extend(
            cf.tiers
                .keys()
                .filter(|ns| tier(ns).is_some_and(|t| tiers.contains(&t)))
                .cloned(),
        );
    }
    scope
}

/// One pass over `dirty`'s namespaces: their objects as the stores hold them decided again, their reports
/// written when changed, deleted when nothing is left to report.
async fn audit(
    client: &kube::Client,
    policy: &PolicySnapshot,
    config: &AuditConfig,
    state: &mut State,
    metrics: &Metrics,
    dirty: &Dirty,
) -> anyhow::Result<Summary> {
    let Some(stores) = state.stores.as_ref() else {
        return Ok(Summary::default());
    };
    let apis = stores.apis.clone();
    let cf = ClusterFacts::read(stores, policy.tier_label());
    let existing = stores.report_namespaces();
    let scope = scope(dirty, &cf, policy, existing.iter().cloned());
    metrics.audit.namespaces_audited.inc_by(scope.len() as u64);
    let mut summary = Summary {
        full: dirty.all,
        namespaces: scope.len(),
        ..Summary::default()
    };
    let mut by_namespace: BTreeMap<String, Vec<Finding>> =
        scope.iter().map(|ns| (ns.clone(), Vec::new())).collect();
    let mut quota_pods = Vec::new();
    for (kind, store) in &stores.objects {
        let stored = store.state_filter(|o| {
            o.meta()
                .namespace
                .as_ref()
                .is_some_and(|ns| scope.contains(ns) && cf.tiers.contains_key(ns))
        });
        // Decoded a page at a time: a decoded object costs about ten times its stored JSON.
        for page in stored.chunks(DECODE_PAGE) {
            let objects: Vec<DynamicObject> = page
                .iter()
                .filter_map(|o| o.object())
                .filter(|o| audited(o, kind, &apis.kinds))
                .collect();
            let objects: Vec<&DynamicObject> = objects.iter().collect();
            summary.objects += objects.len();
            for f in evaluate_page(&objects, kind, policy, &cf, &mut quota_pods) {
                by_namespace
                    .entry(f.resource.namespace.clone())
                    .or_default()
                    .push(f);
            }
        }
    }
    for f in quota::findings(quota_pods, policy) {
        by_namespace
            .entry(f.resource.namespace.clone())
            .or_default()
            .push(f);
    }
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
    publish_results(&state.reports, metrics);
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

/// The results of a page of objects, decided with the facts read at the start of the pass; its quota'd
/// Pods are added to `quota_pods` (their results need every Pod: [`quota::findings`]).
fn evaluate_page(
    objects: &[&DynamicObject],
    kind: &Kind,
    policy: &PolicySnapshot,
    cf: &ClusterFacts<'_>,
    quota_pods: &mut Vec<quota::QuotaPod>,
) -> Vec<Finding> {
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
    if kind.group.is_empty()
        && kind.kind == "Pod"
        && policy.policy.as_ref().is_some_and(|p| p.quotas.any())
    {
        // One clock for the pass: a terminating Pod's grace period is read against it.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        quota_pods.extend(
            objects
                .iter()
                .filter_map(|o| quota::counted(o, policy, &facts, now_ms)),
        );
    }
    let owner = |q: &OwnerQuery| cf.owner(q);
    let exceptions = ExceptionFacts {
        exceptions: &cf.exceptions,
        owner: &owner,
        now: OffsetDateTime::now_utc(),
    };
    objects
        .iter()
        .flat_map(|o| evaluate::evaluate(o, kind, policy, (&facts, &exceptions)))
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

/// The results gauges: every (result, reason) of the reports as they stand, zero for those gone.
fn publish_results(reports: &HashMap<String, Written>, metrics: &Metrics) {
    let mut counts: HashMap<&AuditResultLabels, i64> = HashMap::new();
    for (labels, n) in reports.values().flat_map(|w| &w.results) {
        *counts.entry(labels).or_default() += n;
    }
    metrics.audit.results.clear();
    for (labels, n) in counts {
        metrics.audit.results.get_or_create(labels).set(n);
    }
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
