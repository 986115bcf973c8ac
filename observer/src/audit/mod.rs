//! The background audit (`--policy-reports`): on the leader, every GPU Pod that runs and every workload
//! holding pod templates in a tier namespace is decided again with core's `/validate-pod` decision, and
//! each namespace's results are written to its `wgpolicyk8s.io/v1alpha2` PolicyReport `gpu-admission`.
//!
//! When: as soon as this replica leads, whenever the scorer's policy version changes (checked every
//! `--audit-poll-secs`), and every `--audit-interval-secs` (what changed in the cluster shows within one
//! interval). Only a report whose content changed is written.
//!
//! Without the PolicyReport CRD the audit logs that once and asks discovery again at every poll; the rest
//! of the observer is not affected. See deploy/README.md ("PolicyReports").
//!
//! - [`evaluate`]: one object → its results (pure, core's decision);
//! - [`quota`]: the running Pods past a GPU quota's `max`, replayed in creation order (pure);
//! - [`report`]: a namespace's results → its bounded PolicyReport (pure);
//! - [`cluster`]: discovery, the lists, the facts, the writes.

pub mod cluster;
pub mod evaluate;
pub mod quota;
pub mod report;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_admission_core::facts::Facts;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::workload::OwnerQuery;
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::metrics::{AuditResultLabels, Metrics};
use crate::replicas::{Replicas, get_policy};
use cluster::{Apis, ClusterFacts, GroupResource};
use evaluate::{ExceptionFacts, Finding, Kind};
use report::Limits;

#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// Workload resources audited besides Pods.
    pub resources: Vec<GroupResource>,
    pub interval: Duration,
    /// How often the policy version and the PolicyReport API are checked.
    pub poll: Duration,
    pub limits: Limits,
}

/// What the leader remembers between audits (forgotten when it stops leading).
#[derive(Default)]
struct State {
    apis: Option<Apis>,
    /// Whether the PolicyReport API was served at the last discovery (to log changes only).
    served: Option<bool>,
    last_version: Option<String>,
    last_audit: Option<Instant>,
    /// Namespace → digest of the report last written there.
    written: HashMap<String, String>,
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
            if state.last_audit.is_some() {
                tracing::info!("not leading: background audit stopped");
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

/// One poll: discovery, the policy, and an audit when one is due.
async fn step(
    client: &kube::Client,
    replicas: &Replicas,
    metrics: &Metrics,
    config: &AuditConfig,
    state: &mut State,
) {
    let interval_due = state
        .last_audit
        .is_none_or(|t| t.elapsed() >= config.interval);
    if state.apis.is_none() || interval_due {
        match cluster::discover(client, &config.resources).await {
            Ok(apis) => note_discovery(state, apis, metrics),
            Err(err) => {
                tracing::warn!(%err, "discovery failed; the audit waits");
                return;
            }
        }
    }
    let Some(apis) = state.apis.clone() else {
        return;
    };
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
    if !interval_due && !version_changed {
        return;
    }
    let started = Instant::now();
    let outcome = audit(client, &apis, &policy, config, state, metrics).await;
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
            state.last_audit = Some(Instant::now());
        }
        Err(err) => {
            Metrics::result(&metrics.audit.audits, "failed");
            tracing::warn!(error = %format!("{err:#}"), "audit failed; retried at the next poll");
            if is_not_found(&err) {
                // The CRD went away: find out at the next poll.
                state.apis = None;
            }
        }
    }
}

fn is_not_found(err: &anyhow::Error) -> bool {
    matches!(err.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404)
}

fn note_discovery(state: &mut State, apis: Option<Apis>, metrics: &Metrics) {
    let served = apis.is_some();
    metrics.audit.api_served.set(i64::from(served));
    if state.served != Some(served) {
        match &apis {
            Some(a) => tracing::info!(
                kinds = ?a.kinds.iter().map(|k| format!("{}.{}", k.plural, k.group)).collect::<Vec<_>>(),
                not_served = ?a.missing, dra = a.dra,
                "PolicyReport API (wgpolicyk8s.io/v1alpha2) served: background audit on"),
            None => tracing::warn!(
                "PolicyReport API (wgpolicyk8s.io/v1alpha2) not served: no PolicyReports until its CRD is installed \
                 (deploy/kustomize/components/policy-reports); asking discovery again at every poll"
            ),
        }
    }
    state.served = Some(served);
    if !served {
        state.written.clear();
    }
    state.apis = apis;
}

/// What one audit did.
#[derive(Debug, Default)]
#[allow(dead_code)] // read through Debug in the log line
struct Summary {
    objects: usize,
    results: usize,
    omitted: usize,
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

async fn audit(
    client: &kube::Client,
    apis: &Apis,
    policy: &PolicySnapshot,
    config: &AuditConfig,
    state: &mut State,
    metrics: &Metrics,
) -> anyhow::Result<Summary> {
    let cf = ClusterFacts::read(client, policy.tier_label(), apis.dra).await?;
    let mut summary = Summary::default();
    let mut by_namespace: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    let mut quota_pods = Vec::new();
    for kind in &apis.kinds {
        cluster::list_objects(client, kind, &cf.tiers, |items| {
            let audited: Vec<&DynamicObject> = items
                .iter()
                .filter(|o| audited(o, kind, &apis.kinds))
                .collect();
            summary.objects += audited.len();
            for f in evaluate_page(&audited, kind, policy, &cf, &mut quota_pods) {
                by_namespace
                    .entry(f.resource.namespace.clone())
                    .or_default()
                    .push(f);
            }
        })
        .await?;
    }
    for f in quota::findings(quota_pods, policy) {
        by_namespace
            .entry(f.resource.namespace.clone())
            .or_default()
            .push(f);
    }
    count_results(&by_namespace, metrics);
    let existing = cluster::our_reports(client, &apis.reports).await?;
    let now = Timestamp::now();
    for (namespace, findings) in by_namespace.iter_mut() {
        summary.results += findings.len();
        let built = report::build(
            namespace,
            std::mem::take(findings),
            &policy.version,
            config.limits,
            now,
        );
        summary.omitted += built.omitted;
        if existing.contains(namespace) && state.written.get(namespace) == Some(&built.digest) {
            summary.unchanged += 1;
            Metrics::result(&metrics.audit.reports, "unchanged");
            continue;
        }
        match cluster::apply_report(client, &apis.reports, &built.report).await {
            Ok(()) => {
                summary.applied += 1;
                Metrics::result(&metrics.audit.reports, "applied");
                state.written.insert(namespace.clone(), built.digest);
            }
            Err(err) => {
                summary.failed += 1;
                Metrics::result(&metrics.audit.reports, "failed");
                tracing::warn!(%namespace, %err, "writing the PolicyReport failed");
                state.written.remove(namespace);
                if matches!(&err, kube::Error::Api(s) if s.code == 404) {
                    return Err(err.into());
                }
            }
        }
    }
    metrics.audit.results_omitted.set(summary.omitted as i64);
    let stale: HashSet<&String> = existing
        .iter()
        .filter(|ns| !by_namespace.contains_key(*ns))
        .collect();
    for namespace in stale {
        match cluster::delete_report(client, &apis.reports, namespace).await {
            Ok(()) => {
                summary.deleted += 1;
                Metrics::result(&metrics.audit.reports, "deleted");
                state.written.remove(namespace);
            }
            Err(err) => {
                summary.failed += 1;
                Metrics::result(&metrics.audit.reports, "failed");
                tracing::warn!(%namespace, %err, "deleting a stale PolicyReport failed");
            }
        }
    }
    Ok(summary)
}

/// The results of a page of objects, decided with the facts read at the start of the audit; its quota'd
/// Pods are added to `quota_pods` (their results need every Pod: [`quota::findings`]).
fn evaluate_page(
    objects: &[&DynamicObject],
    kind: &Kind,
    policy: &PolicySnapshot,
    cf: &ClusterFacts,
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

/// The results gauge: every (result, reason) of this audit, zero for those seen before and gone now.
fn count_results(by_namespace: &BTreeMap<String, Vec<Finding>>, metrics: &Metrics) {
    let mut counts: HashMap<AuditResultLabels, i64> = HashMap::new();
    for f in by_namespace.values().flatten() {
        *counts
            .entry(AuditResultLabels {
                result: f.outcome.as_str(),
                reason: f.rule,
            })
            .or_default() += 1;
    }
    metrics.audit.results.clear();
    for (labels, n) in counts {
        metrics.audit.results.get_or_create(&labels).set(n);
    }
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
