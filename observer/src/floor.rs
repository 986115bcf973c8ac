//! The floor's parameter object kept in step with the policy (`--floor-params`): every `--floor-interval-secs`
//! the leader takes the policy ConfigMap as watched from the apiserver (not a mounted volume, whose updates
//! lag by up to a minute) and validated with the policy crate as the scorer and the frontend do
//! ([`crate::policy_source`], shared with the GPU ResourceQuotas), lists the
//! cluster's DeviceClasses (none when the apiserver serves no `resource.k8s.io/v1`), and writes core's
//! [`gpu_admission_core::render::floor::params_with_device_classes`] into the parameter object (a
//! `FloorParameters`: [`gpu_admission_core::render::floor::parameters`]) when they differ
//! (the class-backed extended resources that are GPUs, and per tier those outside it), creating it
//! when it is missing (a missing parameter object denies GPU Pods in the apiserver). A policy that does not
//! validate changes nothing: the floor keeps the last good parameters, as the services keep their last good
//! policy. Only the leader writes; writes carry the resourceVersion read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpu_admission_core::exception::{Exception, GpuPolicyException};
use gpu_admission_core::render::floor::parameters::FloorParameters;
use gpu_admission_policy::Policy;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::api::{Api, ListParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::metrics::{Metrics, ResultLabel};
use crate::policy_source::PolicySource;

/// Where the parameters are written (in the observer's namespace) and how often.
#[derive(Debug, Clone)]
pub struct FloorConfig {
    pub namespace: String,
    /// The parameter object the floor's bindings name.
    pub params_name: String,
    pub interval: Duration,
}

/// What one round does with the parameter object (pure: [`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The parameters already say what the policy says.
    InStep,
    /// Write these data (create the object when it is missing).
    Write(BTreeMap<String, String>),
    /// The policy cannot be read or does not validate, or the floor cannot carry it: the parameters stay.
    Keep(String),
}

impl Plan {
    /// The metric's `result` for this plan.
    pub fn result(&self) -> &'static str {
        match self {
            Plan::InStep => "in_step",
            Plan::Write(_) => "written",
            Plan::Keep(_) => "policy_refused",
        }
    }
}

/// The policy text of the policy ConfigMap (`key`, else its only key).
pub fn policy_text<'c>(cm: &'c ConfigMap, key: &str) -> Option<&'c str> {
    let data = cm.data.as_ref()?;
    data.get(key)
        .or_else(|| (data.len() == 1).then(|| data.values().next()).flatten())
        .map(String::as_str)
}

/// What the parameters must become for the policy (or why there is none: [`crate::policy_source::parse`]),
/// the cluster's DeviceClasses `classes` and its GpuPolicyExceptions at `now` (the live ones:
/// [`gpu_admission_core::render::floor::exception_params`]), given the parameter object's current data.
pub fn plan(
    policy: &Result<Policy, String>,
    current: Option<&BTreeMap<String, String>>,
    classes: &[DeviceClass],
    (exceptions, now): (&[Exception], OffsetDateTime),
) -> Plan {
    let policy = match policy {
        Ok(p) => p,
        Err(why) => return Plan::Keep(why.clone()),
    };
    let params = gpu_admission_core::render::floor::params_with_device_classes(policy, classes)
        .map(|mut data| {
            data.extend(gpu_admission_core::render::floor::exception_params(
                policy, exceptions, now,
            ));
            data
        });
    match params {
        Ok(data) if current == Some(&data) => Plan::InStep,
        Ok(data) => Plan::Write(data),
        Err(e) => Plan::Keep(e.to_string()),
    }
}

/// The cluster's DeviceClasses; none when the apiserver does not serve them (404).
async fn device_classes(api: &Api<DeviceClass>) -> Result<Vec<DeviceClass>, kube::Error> {
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The cluster's GpuPolicyExceptions that read; none while the CRD is not installed (404) or listing it is
/// forbidden (403), which is logged.
pub(crate) async fn exceptions(client: &kube::Client) -> Result<Vec<Exception>, kube::Error> {
    let api: Api<GpuPolicyException> = Api::all(client.clone());
    match api.list(&Default::default()).await {
        Ok(list) => Ok(list
            .items
            .iter()
            .filter_map(|s| Exception::from_stored(s).ok())
            .collect()),
        Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => {
            tracing::debug!(
                code = status.code,
                "GpuPolicyExceptions not listed: none in the floor"
            );
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// One round: the policy as watched, the parameter object, the DeviceClasses and the exceptions; the
/// parameters written when they differ. The result label (`waiting` until the policy's watch has listed).
async fn round(
    client: &kube::Client,
    (api, policy): (&Api<FloorParameters>, &PolicySource),
    classes: &Api<DeviceClass>,
    config: &FloorConfig,
) -> Result<&'static str, kube::Error> {
    let Some(policy) = policy.read() else {
        return Ok("waiting");
    };
    let classes = device_classes(classes).await?;
    let exceptions = exceptions(client).await?;
    let current = api.get_opt(&config.params_name).await?;
    let plan = plan(
        &policy.policy,
        current.as_ref().map(|c| &c.data),
        &classes,
        (&exceptions, OffsetDateTime::now_utc()),
    );
    let result = plan.result();
    let name = &config.params_name;
    match (plan, current) {
        (Plan::InStep, _) => {}
        (Plan::Keep(why), _) => {
            tracing::warn!(%why, "the floor keeps its parameters: the policy is not usable")
        }
        (Plan::Write(data), Some(mut stored)) => {
            stored.data = data;
            api.replace(name, &PostParams::default(), &stored).await?;
            tracing::info!(parameters = %name, "floor parameters updated");
        }
        (Plan::Write(data), None) => {
            let object = FloorParameters::new(name, &config.namespace, data);
            api.create(&PostParams::default(), &object).await?;
            tracing::warn!(parameters = %name, "floor parameters were missing: created");
        }
    }
    Ok(result)
}

/// Keeps the parameters in step while this replica leads.
pub async fn run(
    client: kube::Client,
    config: FloorConfig,
    policy: Arc<PolicySource>,
    syncs: Family<ResultLabel, Counter>,
    leader: watch::Receiver<bool>,
) {
    let api: Api<FloorParameters> = Api::namespaced(client.clone(), &config.namespace);
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let (client, config) = (&client, &config);
    crate::leader::every_interval_while_leading(leader, config.interval, || async {
        let result = round(client, (&api, &policy), &classes, config)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(%err, "keeping the floor's parameters in step failed");
                "failed"
            });
        Metrics::result(&syncs, result);
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: (&[Exception], OffsetDateTime) = (&[], OffsetDateTime::UNIX_EPOCH);

    /// The plan of a policy text as the policy ConfigMap's watch reads it.
    fn planned(
        text: Option<&str>,
        source: &str,
        current: Option<&BTreeMap<String, String>>,
        classes: &[DeviceClass],
        exceptions: (&[Exception], OffsetDateTime),
    ) -> Plan {
        let policy = crate::policy_source::parse(text, source);
        plan(&policy, current, classes, exceptions)
    }

    /// A live exception of `batch` widens its namespace's classes and cap in the parameters; once expired,
    /// the next round writes them without it.
    #[test]
    fn live_exceptions_are_in_the_parameters_and_expired_ones_leave() {
        let text = gpu_admission_policy::DEFAULT_POLICY_YAML;
        let object: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
            "metadata": {"name": "train-h100", "namespace": "batch"},
            "spec": {"rules": ["Classes", "PriorityCap"], "classes": ["H100-80GB"],
                     "maxPriorityClass": "gpu-ultra",
                     "workloads": [{"kind": "Deployment", "name": "train"}],
                     "expiresAt": "2026-12-01T00:00:00Z"}
        }))
        .unwrap();
        let e = [Exception::from_object(&object).unwrap()];
        let live = time::macros::datetime!(2026-11-29 12:00 UTC);
        let Plan::Write(with) = planned(Some(text), "test", None, &[], (&e, live)) else {
            panic!("written")
        };
        assert_eq!(with["except.batch"], "\ngpu.nvidia.com/class=H100-80GB\n");
        assert_eq!(with["except.batch.cap"], "1000000");
        let expired = time::macros::datetime!(2026-12-01 00:00 UTC);
        let Plan::Write(without) = planned(Some(text), "test", Some(&with), &[], (&e, expired))
        else {
            panic!("rewritten once expired")
        };
        assert!(!without.contains_key("except.batch") && !without.contains_key("except.batch.cap"));
        assert_eq!(
            planned(Some(text), "test", Some(&without), &[], NONE),
            Plan::InStep
        );
    }

    #[test]
    fn writes_the_policys_parameters_and_nothing_when_in_step() {
        let text = gpu_admission_policy::DEFAULT_POLICY_YAML;
        let Plan::Write(data) = planned(Some(text), "test", None, &[], NONE) else {
            panic!("a missing parameter object is written")
        };
        assert_eq!(data["tier.bronze.cap"], "1000");
        assert_eq!(
            planned(Some(text), "test", Some(&data), &[], NONE),
            Plan::InStep
        );
        let mut stale = data.clone();
        stale.insert("tier.bronze.cap".into(), "1000000".into());
        assert_eq!(
            planned(Some(text), "test", Some(&stale), &[], NONE),
            Plan::Write(data)
        );
    }

    /// A DeviceClass created or changed moves the parameters: an admin's class selecting H100s by its
    /// `extendedResourceName` is a GPU resource, outside bronze.
    #[test]
    fn the_clusters_device_classes_move_the_parameters() {
        let text = gpu_admission_policy::DEFAULT_POLICY_YAML;
        let Plan::Write(without) = planned(Some(text), "test", None, &[], NONE) else {
            panic!("written")
        };
        let h100: DeviceClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "h100.example.com"},
            "spec": {"extendedResourceName": "example.com/h100", "selectors": [{"cel": {"expression":
                "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}
        }))
        .unwrap();
        let classes = [h100];
        let Plan::Write(with) = planned(Some(text), "test", Some(&without), &classes, NONE) else {
            panic!("a new DeviceClass moves the parameters")
        };
        assert!(with["tier.bronze.deviceClasses.outside"].contains("\nexample.com/h100\n"));
        assert!(!with["tier.gold.deviceClasses.outside"].contains("example.com/h100"));
        assert!(with["deviceClasses.gpuResources"].contains("\nexample.com/h100\n"));
        assert_eq!(
            planned(Some(text), "test", Some(&with), &classes, NONE),
            Plan::InStep
        );
    }

    #[test]
    fn a_policy_that_does_not_validate_or_is_missing_changes_nothing() {
        let broken = gpu_admission_policy::DEFAULT_POLICY_YAML
            .replace("defaultTier: bronze", "defaultTier: tin");
        let kept = planned(Some(&broken), "cm", None, &[], NONE);
        assert_eq!(kept.result(), "policy_refused");
        assert_eq!(
            planned(None, "cm", None, &[], NONE).result(),
            "policy_refused"
        );
    }

    #[test]
    fn the_policy_is_the_named_key_or_the_only_one() {
        let cm = |keys: &[&str]| ConfigMap {
            data: Some(
                keys.iter()
                    .map(|k| (k.to_string(), format!("text of {k}")))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        assert_eq!(
            policy_text(&cm(&["p.yaml"]), "default-policy.yaml"),
            Some("text of p.yaml")
        );
        assert_eq!(
            policy_text(&cm(&["a", "default-policy.yaml"]), "default-policy.yaml"),
            Some("text of default-policy.yaml")
        );
        assert_eq!(policy_text(&cm(&["a", "b"]), "default-policy.yaml"), None);
    }
}
