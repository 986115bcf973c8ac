//! Claims a Pod shares with its PodGroup (`scheduling.k8s.io/v1beta1`, served on 1.37 with the
//! `GenericWorkload` and `DRAWorkloadResourceClaims` gates and `--runtime-config=scheduling.k8s.io/v1beta1=true`).
//!
//! A Pod of a group (`spec.schedulingGroup.podGroupName`) consumes a claim of the group by an entry of its own
//! `spec.resourceClaims` equal to one of the group's `spec.resourceClaims` (same name, same
//! `resourceClaimName` or `resourceClaimTemplateName`). An entry naming a ResourceClaim is that claim either
//! way; an entry naming a template resolves to the one ResourceClaim the ResourceClaim controller made from it
//! *for the group* (`podgroup.status.resourceClaimStatuses`), which may be older than the template as it is
//! now. A Workload reaches Pods only through the PodGroups made from its `podGroupTemplates`, so the group is
//! the one object to read.

use k8s_openapi::api::core::v1::{PodResourceClaim, PodSpec};
use k8s_openapi::api::resource::v1::ResourceClaimSpec;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use super::gpu_resources::ClaimTemplates;

/// What a Pod's claim entry is allocated from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EntryClaim {
    /// The claim spec read (the template's, the named claim's, or the group's claim).
    Spec(ResourceClaimSpec),
    /// Its template or claim (or the claim the group's status names) could not be read: undecidable.
    Unresolved,
    /// An entry naming nothing.
    Nothing,
}

/// The claim spec `entry` of the Pod whose spec is `spec` is allocated from, in `namespace`: the group's
/// claim for an entry the Pod shares with its PodGroup once the ResourceClaim controller has made it, else
/// its own template or named claim.
pub(crate) fn entry_claim(
    spec: &PodSpec,
    entry: &PodResourceClaim,
    namespace: &str,
    cluster: &dyn ClaimTemplates,
) -> EntryClaim {
    let own = || {
        match (
            entry.resource_claim_template_name.as_deref(),
            entry.resource_claim_name.as_deref(),
        ) {
            (Some(t), _) => cluster
                .template(namespace, t)
                .map(|t| t.spec.and_then(|s| s.spec).unwrap_or_default()),
            (None, Some(c)) => cluster
                .claim(namespace, c)
                .map(|c| c.spec.unwrap_or_default()),
            (None, None) => return Some(None),
        }
        .map(Some)
    };
    let shared = entry
        .resource_claim_template_name
        .is_some()
        .then(|| group_claim_name(spec, entry, namespace, cluster))
        .flatten();
    let read = match shared {
        Some(name) => cluster
            .claim(namespace, &name)
            .map(|c| Some(c.spec.unwrap_or_default())),
        None => own(),
    };
    match read {
        Some(Some(s)) => EntryClaim::Spec(s),
        Some(None) => EntryClaim::Nothing,
        None => EntryClaim::Unresolved,
    }
}

/// The ResourceClaim the Pod's group made for `entry`, when the Pod belongs to a group the cluster holds,
/// the group has an equal entry and its status names the claim made for it. `None` otherwise: the entry is
/// the Pod's own, or the group's claim is not made yet (the controller will make it from the template as it
/// is then, what the Pod is judged by).
fn group_claim_name(
    spec: &PodSpec,
    entry: &PodResourceClaim,
    namespace: &str,
    cluster: &dyn ClaimTemplates,
) -> Option<String> {
    let group_name = spec.scheduling_group.as_ref()?.pod_group_name.as_deref()?;
    let group = cluster.pod_group(namespace, group_name)?;
    shares(&group, entry).then_some(())?;
    group
        .status
        .iter()
        .flat_map(|s| s.resource_claim_statuses.iter().flatten())
        .find(|s| s.name == entry.name)
        .and_then(|s| s.resource_claim_name.clone())
}

/// Whether `group` has an entry equal to the Pod's `entry` (name, claim and template).
fn shares(group: &PodGroup, entry: &PodResourceClaim) -> bool {
    group.spec.resource_claims.iter().flatten().any(|g| {
        g.name == entry.name
            && g.resource_claim_name == entry.resource_claim_name
            && g.resource_claim_template_name == entry.resource_claim_template_name
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
    use serde_json::json;

    /// A cluster of one template `t` (class `l4`), one claim `group-made` (class `h100`), and one group.
    struct Cluster(Option<serde_json::Value>);

    fn spec_of(class: &str) -> serde_json::Value {
        json!({"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": class}}]}})
    }

    impl ClaimTemplates for Cluster {
        fn template(&self, _: &str, name: &str) -> Option<ResourceClaimTemplate> {
            (name == "t").then(|| {
                serde_json::from_value(
                    json!({"metadata": {"name": "t"}, "spec": {"spec": spec_of("l4")}}),
                )
                .unwrap()
            })
        }
        fn claim(&self, _: &str, name: &str) -> Option<ResourceClaim> {
            (name == "group-made").then(|| {
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec_of("h100")}))
                    .unwrap()
            })
        }
        fn pod_group(&self, _: &str, name: &str) -> Option<PodGroup> {
            let g = self.0.clone()?;
            (name == "g").then(|| serde_json::from_value(g).unwrap())
        }
    }

    fn group(entry: serde_json::Value, made: Option<&str>) -> serde_json::Value {
        json!({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
            "resourceClaims": [entry]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": made}]}})
    }

    fn class_of(cluster: &Cluster, in_group: bool, entry: serde_json::Value) -> Option<String> {
        let mut pod = json!({"containers": [], "resourceClaims": [entry.clone()]});
        if in_group {
            pod["schedulingGroup"] = json!({"podGroupName": "g"});
        }
        let spec: PodSpec = serde_json::from_value(pod).unwrap();
        let entry: PodResourceClaim = serde_json::from_value(entry).unwrap();
        match entry_claim(&spec, &entry, "ns", cluster) {
            EntryClaim::Spec(s) => Some(
                s.devices.unwrap().requests.unwrap()[0]
                    .exactly
                    .clone()?
                    .device_class_name,
            ),
            EntryClaim::Unresolved => Some("unresolved".into()),
            EntryClaim::Nothing => None,
        }
    }

    #[test]
    fn a_template_entry_shared_with_its_group_is_the_claim_the_group_made() {
        let entry = json!({"name": "gpu", "resourceClaimTemplateName": "t"});
        let made = Cluster(Some(group(entry.clone(), Some("group-made"))));
        assert_eq!(
            class_of(&made, true, entry.clone()).as_deref(),
            Some("h100")
        );
        // Not in the group: its own claim from the template.
        assert_eq!(class_of(&made, false, entry.clone()).as_deref(), Some("l4"));
        // The group's claim not made yet, or no group known: the template.
        let pending = Cluster(Some(group(entry.clone(), None)));
        assert_eq!(
            class_of(&pending, true, entry.clone()).as_deref(),
            Some("l4")
        );
        assert_eq!(
            class_of(&Cluster(None), true, entry.clone()).as_deref(),
            Some("l4")
        );
    }

    #[test]
    fn an_entry_the_group_does_not_share_is_the_pods_own() {
        let theirs = json!({"name": "gpu", "resourceClaimTemplateName": "other"});
        let cluster = Cluster(Some(group(theirs, Some("group-made"))));
        let entry = json!({"name": "gpu", "resourceClaimTemplateName": "t"});
        assert_eq!(class_of(&cluster, true, entry).as_deref(), Some("l4"));
    }

    #[test]
    fn a_group_claim_the_cluster_does_not_hold_is_unresolved() {
        let entry = json!({"name": "gpu", "resourceClaimTemplateName": "t"});
        let cluster = Cluster(Some(group(entry.clone(), Some("gone"))));
        assert_eq!(
            class_of(&cluster, true, entry).as_deref(),
            Some("unresolved")
        );
    }
}
