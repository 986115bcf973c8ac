//! The part of the GPU quotas the kube-apiserver holds by itself, with every frontend down: one Kubernetes
//! ResourceQuota per namespace that has a share of its tier's quota (`quotas.tiers[].namespaces[]`), in the
//! tier its label says now ([`crate::policy::PolicySnapshot::tier_for`], the webhooks' own rule). The observer's
//! leader writes them (`observer/src/resource_quotas.rs`); `gpu-admission quota render` prints them for GitOps
//! installs.
//!
//! Each object is named [`NAME`], labelled [`MANAGED_BY`] and [`TIER_LABEL`] (the tier whose share it holds),
//! and holds, floored to whole devices (a ResourceQuota counts devices, not fractions):
//! - per catalog class with DRA devices, the share's class `max` (or its total `max` where the class states
//!   none) on `<class DeviceClass>.deviceclass.resource.k8s.io/devices` (the DeviceClass named by
//!   `gpu_admission_policy::device_classes`): Kubernetes charges a ResourceClaim's devices there at its
//!   CREATE (an `All` request as 32, a `firstAvailable` request as its largest alternative);
//! - where the share states a total `max`, that on `requests.<resource>` for the whole-device extended
//!   resource of each vendor of the catalog (`nvidia.com/gpu`, as `gpuResources` names it). A class `max` is
//!   not rendered there: the resource is the same for every class of the vendor, so it would refuse Pods of
//!   other classes the policy admits.
//!
//! Rendered at the policy's own `max`, so while the frontends run the apiserver refuses only what they
//! counted lower. What a ResourceQuota cannot express, which only the webhooks hold:
//! - tier-wide limits (a ResourceQuota is one namespace's; a tier without shares renders nothing);
//! - `min` and borrowing (a ResourceQuota only refuses);
//! - the total across resources (each resource above is limited on its own: a namespace may hold its total
//!   `max` of whole devices and again of each DRA class), and claims on other DeviceClasses (the vendor's
//!   `gpu.nvidia.com`, an admin's own);
//! - MIG slices by their memory (`nvidia.com/mig-<profile>` counts per slice, not within `nvidia.com/gpu`),
//!   time-sliced replicas and HAMi shares (other resources, not limited here);
//! - a relabel moving a namespace between tiers while no writer runs (the objects change when the observer's
//!   leader next renders them);
//! - GpuPolicyExceptions (an exception to the quota raises nothing here).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpu_admission_policy::Policy;
use gpu_admission_policy::device_classes::device_class_name;
use gpu_admission_policy::quotas::{Limits, MilliGpus};
use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::policy::{PolicySnapshot, TierScope};

/// The name of every rendered ResourceQuota (one per namespace).
pub const NAME: &str = "gpu-admission-quota";
/// The label marking the objects gpu-admission manages: the only ResourceQuotas it changes or deletes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "gpu-admission");
/// The label naming the tier whose namespace share the object holds.
pub const TIER_LABEL: &str = "gpu-admission.io/quota-tier";
/// The suffix Kubernetes' ResourceClaim quota evaluator charges a DeviceClass's devices under.
pub const DEVICE_CLASS_SUFFIX: &str = ".deviceclass.resource.k8s.io/devices";

/// Whole devices of a limit in milli-GPUs, rounded down.
fn whole(milli: MilliGpus) -> Quantity {
    Quantity((milli / 1000).to_string())
}

/// What a namespace share's limits hold as a ResourceQuota's `spec.hard` (empty: nothing it can express).
pub fn hard(policy: &Policy, share: &Limits) -> BTreeMap<String, Quantity> {
    let total = share.total.and_then(|l| l.max);
    let mut out = BTreeMap::new();
    for (k, class) in policy.classes.iter().enumerate() {
        if class.dra.is_none() {
            continue;
        }
        let max = share.class(k).and_then(|l| l.max);
        if let Some(m) = [max, total].into_iter().flatten().min() {
            let resource = format!("{}{DEVICE_CLASS_SUFFIX}", device_class_name(&class.name));
            out.insert(resource, whole(m));
        }
    }
    if let Some(t) = total {
        for class in &policy.classes {
            if let Some(r) = super::kueue::device_resource(policy, class.vendor) {
                out.insert(format!("requests.{r}"), whole(t));
            }
        }
    }
    out
}

/// The ResourceQuota of `namespace` held to `tier`'s share of it.
fn object(namespace: &str, tier: &str, hard: BTreeMap<String, Quantity>) -> ResourceQuota {
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some(NAME.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(
                [
                    (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
                    (TIER_LABEL.to_string(), tier.to_string()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    }
}

/// The ResourceQuotas of `namespaces` (each name with its tier label's value, `None` without one): one for
/// each namespace whose tier now has a share for it that something here can express, in namespace order.
pub fn render(
    policy: &Policy,
    namespaces: &BTreeMap<String, Option<String>>,
) -> Vec<ResourceQuota> {
    let snapshot = PolicySnapshot::from_policy(Arc::new(policy.clone()));
    let mut out = Vec::new();
    for (namespace, label) in namespaces {
        let tier = match snapshot.tier_for(label.as_deref()) {
            TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => t,
            TierScope::Ignored(_) | TierScope::Denied(_) => continue,
        };
        let Some(share) =
            crate::quota::tier_quota(policy, &tier).and_then(|q| q.namespace(namespace))
        else {
            continue;
        };
        let hard = hard(policy, &share.limits);
        if !hard.is_empty() {
            out.push(object(namespace, &tier, hard));
        }
    }
    out
}

/// Every namespace the quotas give a share to, labelled with that share's tier: the namespaces as a GitOps
/// install labels them (a namespace is in one tier's quota).
pub fn shares_as_labelled(policy: &Policy) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for (i, quota) in policy.quotas.tiers.iter().enumerate() {
        for share in quota.iter().flat_map(|q| &q.namespaces) {
            out.insert(share.namespace.clone(), Some(policy.tiers[i].name.clone()));
        }
    }
    out
}

/// The ResourceQuotas as one multi-document YAML stream (what `gpu-admission quota render` prints).
pub fn render_yaml(
    policy: &Policy,
    namespaces: &BTreeMap<String, Option<String>>,
) -> Result<String, serde_yaml::Error> {
    super::yaml_stream(
        "# Generated from the policy's namespace quotas by `gpu-admission quota render`: do not edit.\n",
        &render(policy, namespaces),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUOTAS: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { max: 8 } }
      total: { max: 10 }
      namespaces:
        - { namespace: students, classes: { L4-24GB: { max: 2.5 } }, total: { max: 2 } }
        - { namespace: labs, classes: { L4-24GB: { max: 3 } }, total: { max: 10 } }
    - tier: silver
      classes: { A100-80GB: { min: 2 } }
      namespaces:
        - { namespace: research, classes: { A100-80GB: { min: 1 } } }
";

    fn policy() -> Policy {
        let text = format!("{}{QUOTAS}", gpu_admission_policy::DEFAULT_POLICY_YAML);
        gpu_admission_policy::parse(&text, "p.yaml").unwrap()
    }

    fn labelled(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(n, t)| (n.to_string(), t.map(String::from)))
            .collect()
    }

    fn hard_of(q: &ResourceQuota) -> BTreeMap<&str, &str> {
        q.spec
            .as_ref()
            .unwrap()
            .hard
            .as_ref()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect()
    }

    /// A share's class `max` on its DeviceClass and its total on the whole-device resource, floored; the
    /// total also bounds every other DRA class; the share with only a `min` renders nothing.
    #[test]
    fn a_share_renders_its_maxes_as_whole_devices() {
        let p = policy();
        let rendered = render(
            &p,
            &labelled(&[
                ("students", Some("bronze")),
                ("labs", Some("bronze")),
                ("research", Some("silver")),
                ("other", Some("bronze")),
            ]),
        );
        let names: Vec<_> = rendered
            .iter()
            .map(|q| q.metadata.namespace.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["labs", "students"]);
        let students = hard_of(&rendered[1]);
        assert_eq!(
            students["l4-24gb.gpu-admission.io.deviceclass.resource.k8s.io/devices"],
            "2"
        );
        assert_eq!(
            students["h100-80gb.gpu-admission.io.deviceclass.resource.k8s.io/devices"],
            "2"
        );
        assert_eq!(students["requests.nvidia.com/gpu"], "2");
        let labs = hard_of(&rendered[0]);
        assert_eq!(
            labs["l4-24gb.gpu-admission.io.deviceclass.resource.k8s.io/devices"],
            "3"
        );
        assert_eq!(labs["requests.nvidia.com/gpu"], "10");
        let q = &rendered[1];
        assert_eq!(q.metadata.name.as_deref(), Some(NAME));
        let labels = q.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[MANAGED_BY.0], MANAGED_BY.1);
        assert_eq!(labels[TIER_LABEL], "bronze");
    }

    /// The tier is the label's now: a namespace relabelled out of its share's tier has no object; an
    /// unlabelled one is the default tier's (bronze) under `untieredNamespaces: DefaultTier`.
    #[test]
    fn the_label_now_decides_the_share() {
        let p = policy();
        assert!(render(&p, &labelled(&[("students", Some("silver"))])).is_empty());
        assert_eq!(render(&p, &labelled(&[("students", None)])).len(), 1);
        assert_eq!(
            render(&p, &labelled(&[("students", Some("Bronze"))])).len(),
            1
        );
    }

    #[test]
    fn the_shares_as_labelled_and_the_yaml() {
        let p = policy();
        let ns = shares_as_labelled(&p);
        assert_eq!(ns["students"].as_deref(), Some("bronze"));
        assert_eq!(ns["research"].as_deref(), Some("silver"));
        let yaml = render_yaml(&p, &ns).unwrap();
        assert_eq!(yaml.matches("kind: ResourceQuota").count(), 2);
        assert!(yaml.contains("apiVersion: v1\n"));
        let empty = gpu_admission_policy::embedded_default().unwrap();
        assert!(render(&empty, &shares_as_labelled(&empty)).is_empty());
    }
}
