//! The namespace shares of the GPU quotas as ResourceQuotas the kube-apiserver enforces by itself
//! (`--resource-quotas`): every `--quota-interval-secs` the leader takes the policy ConfigMap as watched and
//! parsed for the floor too ([`crate::policy_source`]), the namespaces' tier labels from a metadata watch's
//! store, lists the ResourceQuotas it manages (by label), renders core's
//! [`gpu_admission_core::render::resource_quotas`] and writes the difference ([`plan`]): it creates what is
//! missing, updates what differs and deletes its own object where the namespace no longer has a share (a
//! relabel into another tier, a share removed from the policy). It only ever changes or deletes objects named
//! `gpu-admission-quota` and labelled `app.kubernetes.io/managed-by: gpu-admission`; another ResourceQuota of
//! that name is left alone (its create fails and is counted). Writes carry the resourceVersion read; a policy
//! that does not validate changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::render::resource_quotas::{self, MANAGED_BY, NAME};
use gpu_admission_policy::Policy;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::watch;

use crate::metrics::{Metrics, ResultLabel};
use crate::policy_source::PolicySource;

/// How often.
#[derive(Debug, Clone)]
pub struct QuotaConfig {
    pub interval: Duration,
}

/// One write of a round.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Create(ResourceQuota),
    /// The rendered object, carrying the stored one's resourceVersion.
    Update(ResourceQuota),
    /// Ours in a namespace that no longer has a share: namespace and the resourceVersion read.
    Delete {
        namespace: String,
        resource_version: Option<String>,
    },
}

impl Write {
    /// The metric's `result` when the write succeeds.
    fn result(&self) -> &'static str {
        match self {
            Write::Create(_) => "created",
            Write::Update(_) => "updated",
            Write::Delete { .. } => "deleted",
        }
    }
}

/// Whether `q` is a ResourceQuota gpu-admission manages (the only ones a plan writes over or deletes).
pub fn is_ours(q: &ResourceQuota) -> bool {
    q.metadata.name.as_deref() == Some(NAME)
        && q.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY.0))
            .map(String::as_str)
            == Some(MANAGED_BY.1)
}

/// The writes that make the stored objects `current` what `policy` renders for `namespaces` (name → tier
/// label value).
pub fn plan(
    policy: &Policy,
    namespaces: &BTreeMap<String, Option<String>>,
    current: &[ResourceQuota],
) -> Vec<Write> {
    let desired = resource_quotas::render(policy, namespaces);
    let ours: BTreeMap<&str, &ResourceQuota> = current
        .iter()
        .filter(|q| is_ours(q))
        .filter_map(|q| Some((q.metadata.namespace.as_deref()?, q)))
        .collect();
    let wanted: BTreeSet<String> = desired
        .iter()
        .filter_map(|q| q.metadata.namespace.clone())
        .collect();
    let mut writes = Vec::new();
    for (ns, have) in &ours {
        if !wanted.contains(*ns) {
            writes.push(Write::Delete {
                namespace: ns.to_string(),
                resource_version: have.metadata.resource_version.clone(),
            });
        }
    }
    for mut want in desired {
        let ns = want.metadata.namespace.clone().unwrap_or_default();
        match ours.get(ns.as_str()) {
            None => writes.push(Write::Create(want)),
            Some(have)
                if have.spec == want.spec && have.metadata.labels == want.metadata.labels => {}
            Some(have) => {
                want.metadata.resource_version = have.metadata.resource_version.clone();
                writes.push(Write::Update(want));
            }
        }
    }
    writes
}

/// The namespaces (not being deleted) with their tier label's value.
fn namespaces(
    store: &Store<PartialObjectMeta<Namespace>>,
    label: &str,
) -> BTreeMap<String, Option<String>> {
    store
        .state()
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let tier = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(label))
                .cloned();
            Some((n.metadata.name.clone()?, tier))
        })
        .collect()
}

/// Carries out one write; the metric's result.
async fn apply(client: &kube::Client, write: Write) -> &'static str {
    let ok = write.result();
    let outcome = match write {
        Write::Create(q) => {
            let ns = q.metadata.namespace.clone().unwrap_or_default();
            let api: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
            api.create(&PostParams::default(), &q).await.map(drop)
        }
        Write::Update(q) => {
            let ns = q.metadata.namespace.clone().unwrap_or_default();
            let api: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
            api.replace(NAME, &PostParams::default(), &q)
                .await
                .map(drop)
        }
        Write::Delete {
            namespace,
            resource_version,
        } => {
            let api: Api<ResourceQuota> = Api::namespaced(client.clone(), &namespace);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version,
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(NAME, &dp).await.map(drop)
        }
    };
    match outcome {
        Ok(()) => ok,
        Err(kube::Error::Api(e)) if e.code == 409 => "conflict",
        Err(err) => {
            tracing::warn!(%err, "writing a GPU ResourceQuota failed");
            "failed"
        }
    }
}

/// One round: the policy and the namespaces as watched, our objects listed, the difference written
/// (nothing until both watches have listed once).
async fn round(
    client: &kube::Client,
    (policy, namespace_store): (&PolicySource, &Store<PartialObjectMeta<Namespace>>),
    writes: &Family<ResultLabel, Counter>,
) -> Result<(), kube::Error> {
    let Some(read) = policy
        .read()
        .filter(|_| crate::watched::ready(namespace_store))
    else {
        tracing::debug!("GPU ResourceQuotas wait for the policy's and the namespaces' watches");
        return Ok(());
    };
    let policy = match &read.policy {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(%why, "GPU ResourceQuotas kept: the policy is not usable");
            Metrics::result(writes, "policy_refused");
            return Ok(());
        }
    };
    let namespaces = namespaces(namespace_store, &policy.tier_label);
    let all: Api<ResourceQuota> = Api::all(client.clone());
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let current = all.list(&ListParams::default().labels(&selector)).await?;
    for write in plan(policy, &namespaces, &current.items) {
        Metrics::result(writes, apply(client, write).await);
    }
    Ok(())
}

/// Keeps the ResourceQuotas in step while this replica leads.
pub async fn run(
    client: kube::Client,
    config: QuotaConfig,
    policy: Arc<PolicySource>,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
) {
    let api = Api::<PartialObjectMeta<Namespace>>::all(client.clone());
    let (namespace_store, watch) = crate::watched::spawn(
        watcher(api, watcher::Config::default().any_semantic()),
        (),
        "namespaces",
        metrics.clone(),
        |_, _| {},
    );
    let stores = (policy.as_ref(), &namespace_store);
    let (client, writes) = (&client, &metrics.resource_quota_writes);
    crate::leader::every_interval_while_leading(leader, config.interval, || async {
        if let Err(err) = round(client, stores, writes).await {
            tracing::warn!(%err, "keeping the GPU ResourceQuotas in step failed");
            Metrics::result(writes, "failed");
        }
    })
    .await;
    watch.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text() -> String {
        format!(
            "{}{}",
            gpu_admission_policy::DEFAULT_POLICY_YAML,
            "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { max: 8 } }
      namespaces:
        - { namespace: students, classes: { L4-24GB: { max: 2 } }, total: { max: 2 } }
"
        )
    }

    fn ns(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(n, t)| (n.to_string(), Some(t.to_string())))
            .collect()
    }

    fn stored(q: &ResourceQuota, rv: &str) -> ResourceQuota {
        let mut q = q.clone();
        q.metadata.resource_version = Some(rv.into());
        q
    }

    /// Created when missing, nothing when in step, updated with the resourceVersion read when the policy
    /// moves, deleted with it when the namespace is relabelled out of its share's tier.
    #[test]
    fn creates_keeps_updates_and_deletes_its_own() {
        let t = text();
        let p = crate::policy_source::parse(Some(&t), "cm").unwrap();
        let bronze = ns(&[("students", "bronze"), ("other", "bronze")]);
        let [Write::Create(q)] = &plan(&p, &bronze, &[])[..] else {
            panic!("one create")
        };
        let have = stored(q, "7");
        assert_eq!(
            plan(&p, &bronze, std::slice::from_ref(&have)),
            [] as [Write; 0]
        );
        let moved = t.replace("max: 2 } }, total", "max: 1 } }, total");
        let [Write::Update(u)] = &plan(
            &crate::policy_source::parse(Some(&moved), "cm").unwrap(),
            &bronze,
            std::slice::from_ref(&have),
        )[..] else {
            panic!("one update")
        };
        assert_eq!(u.metadata.resource_version.as_deref(), Some("7"));
        let hard = u.spec.as_ref().unwrap().hard.as_ref().unwrap();
        assert_eq!(
            hard["l4-24gb.gpu-admission.io.deviceclass.resource.k8s.io/devices"].0,
            "1"
        );
        let silver = ns(&[("students", "silver")]);
        assert_eq!(
            plan(&p, &silver, &[have]),
            [Write::Delete {
                namespace: "students".into(),
                resource_version: Some("7".into())
            }]
        );
    }

    /// A ResourceQuota of the same name without our label, or ours under another name, is never touched.
    #[test]
    fn never_touches_what_it_does_not_manage() {
        let p = crate::policy_source::parse(Some(&text()), "cm").unwrap();
        let silver = ns(&[("students", "silver")]);
        let bronze = ns(&[("students", "bronze")]);
        let [Write::Create(q)] = &plan(&p, &bronze, &[])[..] else {
            panic!("one create")
        };
        let mut foreign = stored(q, "3");
        foreign.metadata.labels = None;
        assert_eq!(plan(&p, &silver, &[foreign]), [] as [Write; 0]);
        let mut renamed = stored(q, "3");
        renamed.metadata.name = Some("team-gpus".into());
        assert_eq!(plan(&p, &silver, &[renamed]), [] as [Write; 0]);
    }

    #[test]
    fn a_policy_that_does_not_validate_or_is_missing_writes_nothing() {
        let broken = text().replace("defaultTier: bronze", "defaultTier: tin");
        assert!(crate::policy_source::parse(Some(&broken), "cm").is_err());
        assert!(crate::policy_source::parse(None, "cm").is_err());
    }
}
