//! `gpu-admission kueue export`: the policy's GPU quotas as Kueue objects, for teams that prefer
//! queueing to denial: one ResourceFlavor per catalog class (its class node label, its taint tolerated), one
//! ClusterQueue per tier with a quota (all in one cohort; per class of the tier: nominal quota = `min`,
//! borrowing limit = `max - min`, none when the class states no `max`; a tier below its nominal quota takes it
//! back from borrowers by preemption, `reclaimWithinCohort: Any`), the Cohort itself holding what
//! `quotas.capacity` states beyond the tiers' `min`s (Kueue lends only nominal quota: without it, a class no tier
//! guarantees could not be borrowed at all), and a LocalQueue `gpu-admission` in each namespace the tier's
//! quota names. Tiers' `total` limits have no per-flavor Kueue equivalent and are not exported
//! (gpu-admission's webhooks keep holding them).
//!
//! `kueue.x-k8s.io/v1beta2` (`cohortName`), checked live against Kueue v0.17.0 built from its module on
//! kube-apiserver 1.37.2 by `tests/tests/cluster_kueue.rs` (every ClusterQueue Active, admission on the
//! tier's flavors, queueing over quota, reclaim by preemption).
use gpu_admission_policy::gpu_resources::GpuResourceKind;
use gpu_admission_policy::quotas::{Limit, MilliGpus};
use gpu_admission_policy::{Policy, Vendor};
use serde_json::{Value, json};

/// The cohort every exported ClusterQueue belongs to.
pub const COHORT: &str = "gpu-admission";
const API: &str = "kueue.x-k8s.io/v1beta2";

/// A Kubernetes quantity of milli-GPUs: `16`, `500m`.
fn quantity(milli: MilliGpus) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// A class name as a ResourceFlavor name (a DNS subdomain: lower case).
pub fn flavor_name(class: &str) -> String {
    class.to_ascii_lowercase()
}

/// The whole-device resource of a vendor, as the policy's `gpuResources` name it.
pub(crate) fn device_resource(policy: &Policy, vendor: Vendor) -> Option<&str> {
    policy
        .gpu_resources
        .iter()
        .find(|r| r.vendor == vendor && r.kind == GpuResourceKind::Devices)
        .map(|r| r.name.as_str())
}

/// Per vendor, the flavors of `classes` (catalog indices) with their quota of the vendor's device resource:
/// Kueue's resource groups (every flavor of a group must cover the same resources).
fn resource_groups(policy: &Policy, classes: impl Iterator<Item = (usize, Value)>) -> Vec<Value> {
    let mut groups: Vec<(Vendor, Vec<Value>)> = Vec::new();
    for (k, quota) in classes {
        let class = &policy.classes[k];
        let Some(resource) = device_resource(policy, class.vendor) else {
            continue;
        };
        let mut r = json!({"name": resource});
        if let (Value::Object(r), Value::Object(q)) = (&mut r, quota) {
            r.extend(q);
        }
        let flavor = json!({"name": flavor_name(&class.name), "resources": [r]});
        match groups.iter_mut().find(|(v, _)| *v == class.vendor) {
            Some((_, flavors)) => flavors.push(flavor),
            None => groups.push((class.vendor, vec![flavor])),
        }
    }
    groups
        .into_iter()
        .filter_map(|(vendor, flavors)| {
            Some(
                json!({"coveredResources": [device_resource(policy, vendor)?], "flavors": flavors}),
            )
        })
        .collect()
}

/// The Cohort, when `quotas.capacity` states a class: it holds the capacity the tiers' `min`s leave, which
/// every ClusterQueue of the cohort may borrow up to its borrowing limit.
fn cohort(policy: &Policy) -> Option<Value> {
    let quotas = &policy.quotas;
    let pool = quotas.capacity.iter().enumerate().filter_map(|(k, cap)| {
        let guaranteed: MilliGpus = (0..policy.tiers.len())
            .filter_map(|t| quotas.tier(t)?.limits.class(k))
            .map(|l| l.min)
            .sum();
        let left = cap.as_ref()?.saturating_sub(guaranteed);
        Some((k, json!({"nominalQuota": quantity(left)})))
    });
    let groups = resource_groups(policy, pool);
    (quotas.any() && !groups.is_empty()).then(|| {
        json!({"apiVersion": API, "kind": "Cohort", "metadata": {"name": COHORT},
            "spec": {"resourceGroups": groups}})
    })
}

/// The Kueue objects of a policy's quotas, in order: ResourceFlavors, the Cohort, ClusterQueues, LocalQueues.
/// A ClusterQueue selects its tier's namespaces by the policy's tier label.
pub fn export(policy: &Policy) -> Vec<Value> {
    let tier_label = policy.tier_label.as_str();
    let mut out: Vec<Value> = policy
        .classes
        .iter()
        .map(|c| {
            let mut spec =
                json!({"nodeLabels": {c.node_label_key.as_str(): c.node_label_value.as_str()}});
            if let Some(taint) = &c.taint_key {
                spec["nodeTaints"] = json!([{"key": taint, "effect": "NoSchedule"}]);
                spec["tolerations"] =
                    json!([{"key": taint, "operator": "Exists", "effect": "NoSchedule"}]);
            }
            json!({"apiVersion": API, "kind": "ResourceFlavor",
                "metadata": {"name": flavor_name(&c.name)}, "spec": spec})
        })
        .collect();
    out.extend(cohort(policy));
    let mut local_queues = Vec::new();
    for (t, tier) in policy.tiers.iter().enumerate() {
        let Some(tq) = policy.quotas.tier(t) else {
            continue;
        };
        let name = format!("gpu-admission-{}", tier.name.to_ascii_lowercase());
        let quotas = (0..policy.classes.len())
            .filter(|&k| tier.allowed[k])
            .map(|k| {
                let limit = tq.limits.class(k).unwrap_or(Limit { min: 0, max: None });
                let mut q = json!({"nominalQuota": quantity(limit.min)});
                if let Some(max) = limit.max {
                    q["borrowingLimit"] = json!(quantity(max.saturating_sub(limit.min)));
                }
                (k, q)
            });
        let resource_groups = resource_groups(policy, quotas);
        out.push(
            json!({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"cohortName": COHORT,
                "namespaceSelector": {"matchLabels": {tier_label: tier.name.as_str()}},
                "preemption": {"reclaimWithinCohort": "Any"},
                "resourceGroups": resource_groups}}),
        );
        for n in &tq.namespaces {
            local_queues.push(json!({"apiVersion": API, "kind": "LocalQueue",
                "metadata": {"name": "gpu-admission", "namespace": n.namespace.as_str()},
                "spec": {"clusterQueue": name}}));
        }
    }
    out.extend(local_queues);
    out
}

/// [`export`] as one YAML stream.
pub fn export_yaml(policy: &Policy) -> Result<String, serde_yaml::Error> {
    super::yaml_stream(
        "# Kueue objects for the GPU quotas of this policy (gpu-admission kueue export). A Pod with Kueue's\n\
         # queue-name label is still held to its tier's classes and quotas by gpu-admission's webhooks.\n\
         # The ClusterQueues cover GPUs only: leave CPU and memory out of Kueue's accounting\n\
         # (resources.excludeResourcePrefixes in its configuration), else Jobs asking for them are inadmissible.\n",
        &export(policy),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        let text = format!(
            "{}\nquotas:\n  capacity: {{ L4-24GB: 40, H100-80GB: 10 }}\n  tiers:\n    - tier: bronze\n      classes: {{ L4-24GB: {{ min: 16, max: 32 }} }}\n      namespaces:\n        - {{ namespace: students, classes: {{ L4-24GB: {{ min: 8, max: 16 }} }} }}\n    - tier: gold\n      classes: {{ H100-80GB: {{ min: 8.5 }}, MI300X-192GB: {{ max: 4 }} }}\n",
            gpu_admission_policy::DEFAULT_POLICY_YAML
        );
        gpu_admission_policy::parse(&text, "p.yaml").unwrap()
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    #[test]
    fn flavors_queues_and_borrowing_limits_come_from_the_quotas() {
        let p = policy();
        let objects = export(&p);
        let flavors = objects
            .iter()
            .filter(|o| o["kind"] == "ResourceFlavor")
            .count();
        assert_eq!(flavors, p.classes.len());
        let l4 = find(&objects, "ResourceFlavor", "l4-24gb");
        assert_eq!(l4["spec"]["nodeLabels"]["gpu.nvidia.com/class"], "L4-24GB");
        let mi = find(&objects, "ResourceFlavor", "mi300x-192gb");
        assert_eq!(mi["spec"]["tolerations"][0]["key"], "amd.com/gpu");

        let bronze = find(&objects, "ClusterQueue", "gpu-admission-bronze");
        assert_eq!(bronze["spec"]["cohortName"], COHORT);
        // A tier below its nominal quota takes it back from borrowers (Kueue's default is Never).
        assert_eq!(bronze["spec"]["preemption"]["reclaimWithinCohort"], "Any");
        assert_eq!(
            bronze["spec"]["namespaceSelector"]["matchLabels"]["tenant.kubenexus.io/tier"],
            "bronze"
        );
        let group = &bronze["spec"]["resourceGroups"][0];
        assert_eq!(group["coveredResources"], json!(["nvidia.com/gpu"]));
        assert_eq!(
            group["flavors"],
            json!([{"name": "l4-24gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "16"}]}])
        );
        // Gold: a min without max borrows without limit; another vendor is its own group; classes without a
        // limit are nominal 0 (they only borrow).
        let gold = find(&objects, "ClusterQueue", "gpu-admission-gold");
        let groups = gold["spec"]["resourceGroups"].as_array().unwrap();
        assert_eq!(groups.len(), 2, "{groups:?}");
        let h100 = groups[0]["flavors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "h100-80gb")
            .unwrap();
        assert_eq!(h100["resources"][0]["nominalQuota"], "8500m");
        assert!(h100["resources"][0].get("borrowingLimit").is_none());
        let amd = &groups[1];
        assert_eq!(amd["coveredResources"], json!(["amd.com/gpu"]));
        assert_eq!(amd["flavors"][0]["resources"][0]["borrowingLimit"], "4");
        // The Cohort lends what the stated capacity holds beyond the tiers' mins: L4 40 - 16, H100 10 - 8.5
        // classes without a stated capacity have no pool.
        let cohort = find(&objects, "Cohort", COHORT);
        assert_eq!(
            cohort["spec"]["resourceGroups"],
            json!([{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1500m"}]},
                {"name": "l4-24gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "24"}]}]}])
        );
        // No ClusterQueue for a tier without a quota; a LocalQueue per namespace of a quota.
        assert!(
            objects
                .iter()
                .all(|o| o["metadata"]["name"] != "gpu-admission-silver")
        );
        let lq = find(&objects, "LocalQueue", "gpu-admission");
        assert_eq!(lq["metadata"]["namespace"], "students");
        assert_eq!(lq["spec"]["clusterQueue"], "gpu-admission-bronze");
        // It renders as YAML that parses back to the same objects.
        let yaml = export_yaml(&p).unwrap();
        let back: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &Value| !v.is_null())
            .collect();
        assert_eq!(back, objects);
    }

    #[test]
    fn a_policy_without_quotas_exports_only_flavors() {
        let p = gpu_admission_policy::embedded_default().unwrap();
        let objects = export(&p);
        assert!(objects.iter().all(|o| o["kind"] == "ResourceFlavor"));
    }

    #[test]
    fn without_a_stated_capacity_there_is_no_cohort_object() {
        let text = format!(
            "{}\nquotas:\n  tiers:\n    - tier: bronze\n      classes: {{ L4-24GB: {{ min: 2, max: 4 }} }}\n",
            gpu_admission_policy::DEFAULT_POLICY_YAML
        );
        let p = gpu_admission_policy::parse(&text, "p.yaml").unwrap();
        let objects = export(&p);
        assert!(objects.iter().all(|o| o["kind"] != "Cohort"));
        assert_eq!(
            objects
                .iter()
                .filter(|o| o["kind"] == "ClusterQueue")
                .count(),
            1
        );
    }
}
