//! The policy read back from `GetPolicy`'s per-field copy (fields 2-12), for the one release those fields
//! are kept: a scorer that predates the document, and policies tests spell as a message. Everything a
//! webhook decides with is there (catalog, tiers, buckets, enforcement, grants, GPU resources, job types'
//! default memory); what only the scorer's model reads (priors, priority points, learning weights) is not
//! on that copy and takes neutral values. Deleted with fields 2-12.

use gpu_admission_proto::scorer::v1 as pb;
use ndarray::Array2;

use crate::gpu_resources::{GpuResourceKind, GpuResourceRule, default_rules};
use crate::model::{NameIndex, PriorityRules};
use crate::schema::{LearningSpec, RuntimeProfile, SizeReference};
use crate::wire::vendor;
use crate::{
    Bucket, Enforcement, EnforcementMode, Fallback, GpuClass, JobType, NamespaceGrant, Objective,
    Policy, Tier, UntieredNamespaces, WorkloadClass,
};

/// A neutral prior: only the scorer's model reads it, and a policy of this copy is never scored with.
const PROFILE: RuntimeProfile = RuntimeProfile {
    base_runtime_seconds: 3600.0,
    relative_stddev: 0.5,
    throughput_exponent: 1.0,
};

fn index<'a>(names: impl Iterator<Item = &'a String>) -> NameIndex {
    names.enumerate().map(|(i, n)| (n.clone(), i)).collect()
}

fn none_if_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn class(c: &pb::GpuClass, labels: &[pb::ClassLabels]) -> GpuClass {
    GpuClass {
        name: c.name.clone(),
        vendor: vendor(c.vendor).unwrap_or(crate::Vendor::Nvidia),
        memory_gib: c.memory_gib,
        relative_throughput: c.relative_throughput,
        price_per_hour: c.price_per_hour,
        gpus_per_node: 0,
        node_label_key: c.node_label_key.clone(),
        node_label_value: c.node_label_value.clone(),
        taint_key: none_if_empty(&c.taint_key),
        identifying_labels: labels
            .iter()
            .filter(|l| l.class == c.name)
            .flat_map(|l| l.labels.iter().map(|n| (n.key.clone(), n.value.clone())))
            .collect(),
        // The per-field copy carries no DRA devices: such a class has no DeviceClass.
        dra: None,
    }
}

// A field added to `Tier` later is not on this copy: it takes its default.
#[allow(clippy::needless_update)]
fn tier(t: &pb::Tier, classes: &NameIndex, n: usize) -> Tier {
    let mut allowed = vec![false; n];
    for i in t.allowed_classes.iter().filter_map(|c| classes.get(c)) {
        allowed[*i] = true;
    }
    Tier {
        name: t.name.clone(),
        allowed,
        preferred: classes.get(&t.preferred_class).copied(),
        objective: match t.objective.as_str() {
            "fastest" => Objective::Fastest,
            _ => Objective::Cheapest,
        },
        priority_weight: t.priority_weight,
        max_priority_class: none_if_empty(&t.max_priority_class),
        fallback: match t.fallback() {
            pb::TierFallback::TierDefault => Fallback::TierDefault,
            _ => Fallback::PassThrough,
        },
        ..Tier::default()
    }
}

fn resource(r: &pb::GpuResourceRule) -> Option<GpuResourceRule> {
    let kind = match r.kind() {
        pb::GpuResourceKind::Devices => GpuResourceKind::Devices,
        pb::GpuResourceKind::SharedDevices => GpuResourceKind::SharedDevices,
        pb::GpuResourceKind::MigSlices => GpuResourceKind::MigSlices,
        pb::GpuResourceKind::Memory => GpuResourceKind::Memory,
        pb::GpuResourceKind::Cores => GpuResourceKind::Cores,
        pb::GpuResourceKind::DraDeviceClass => GpuResourceKind::DraDeviceClass,
        pb::GpuResourceKind::NotGpu => GpuResourceKind::NotGpu,
        pb::GpuResourceKind::Unspecified => return None,
    };
    Some(GpuResourceRule {
        name: r.name.clone(),
        vendor: vendor(r.vendor)?,
        kind,
        memory_gib_per_unit: r.memory_gib_per_unit,
    })
}

fn enforcement(e: Option<&pb::Enforcement>) -> Enforcement {
    let Some(e) = e else {
        return Enforcement::default();
    };
    Enforcement {
        mode: match e.mode() {
            pb::EnforcementMode::Enforce => EnforcementMode::Enforce,
            pb::EnforcementMode::Warn => EnforcementMode::Warn,
            // A scorer that predates enforcement: nothing is denied.
            pb::EnforcementMode::Audit | pb::EnforcementMode::Unspecified => EnforcementMode::Audit,
        },
        admin_groups: e.admin_groups.clone(),
        admin_users: e.admin_users.clone(),
    }
}

/// The policy of a `GetPolicy` answer's per-field copy. A `default_tier` naming no tier (a scorer that
/// predates it) leaves untiered namespaces outside the rules, as such a scorer did.
pub fn policy_from_fields(r: &pb::GetPolicyResponse) -> Policy {
    let classes: Vec<GpuClass> = r
        .catalog
        .iter()
        .map(|c| class(c, &r.class_labels))
        .collect();
    let class_index = index(classes.iter().map(|c| &c.name));
    let tiers: Vec<Tier> = r
        .tiers
        .iter()
        .map(|t| tier(t, &class_index, classes.len()))
        .collect();
    let tier_index = index(tiers.iter().map(|t| &t.name));
    let default_tier = tier_index.get(&r.default_tier).copied();
    // The listed job types, and any the default-memory map names besides.
    let mut names: Vec<&String> = r.job_types.iter().collect();
    let mut extra: Vec<&String> = r
        .job_type_default_memory_gib
        .keys()
        .filter(|n| !r.job_types.contains(n))
        .collect();
    extra.sort();
    names.extend(extra);
    let job_types: Vec<JobType> = names
        .into_iter()
        .map(|name| JobType {
            name: name.clone(),
            workload_class: WorkloadClass::Unknown,
            profile: PROFILE,
            default_memory_gib: r.job_type_default_memory_gib.get(name).copied(),
            family: None,
            owner: None,
        })
        .collect();
    let job_index = index(job_types.iter().map(|j| &j.name));
    let mut buckets: Vec<Bucket> = r
        .priority_buckets
        .iter()
        .filter_map(|b| {
            let pc = b.priority_class.as_ref()?;
            Some(Bucket {
                min_score: b.min_score,
                name: pc.name.clone(),
                value: pc.value,
                preemption_policy: pc.preemption_policy.clone(),
            })
        })
        .collect();
    buckets.sort_by(|a, b| b.min_score.total_cmp(&a.min_score));
    let gpu_resources: Vec<GpuResourceRule> = r.gpu_resources.iter().filter_map(resource).collect();
    let n = job_types.len();
    Policy {
        version: r.version.clone(),
        source: r.source.clone(),
        document: String::new(),
        classes,
        tiers,
        default_tier: default_tier.unwrap_or(0),
        untiered_namespaces: match default_tier {
            Some(_) => UntieredNamespaces::DefaultTier,
            None => UntieredNamespaces::Ignore,
        },
        workload: WorkloadClass::ALL.map(|_| (0.5, PROFILE)),
        job_types,
        interference_prior: Array2::ones((n, n)),
        default_slowdown: 1.0,
        anti_affinity_threshold: r.anti_affinity_threshold,
        priority: PriorityRules {
            tier_points: 0.0,
            workload_points: 0.0,
            size_points: 0.0,
            size_reference: SizeReference {
                gpu_count: 1.0,
                memory_gib: 1.0,
                model_size_billion_params: 1.0,
            },
            buckets,
        },
        learning: LearningSpec::default(),
        enforcement: enforcement(r.enforcement.as_ref()),
        namespace_grants: r
            .namespace_grants
            .iter()
            .map(|g| NamespaceGrant {
                namespace: g.namespace.clone(),
                allowed_classes: g.allowed_classes.clone(),
                max_priority_class: none_if_empty(&g.max_priority_class),
            })
            .collect(),
        gpu_resources: if gpu_resources.is_empty() {
            default_rules()
        } else {
            gpu_resources
        },
        // The wire's per-field copy never carried quotas: none (they need the document).
        quotas: Default::default(),
        class_index,
        tier_index,
        job_index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy of the shipped policy reads back as the same rules the document gives.
    #[test]
    fn the_shipped_policys_copy_reads_back_as_its_rules() {
        let policy = crate::embedded_default().unwrap();
        let response = crate::wire::get_policy_response(&policy);
        let copy = policy_from_fields(&response);
        // Everything the copy carries comes back: its own copy is the same, but for the document.
        let again = crate::wire::get_policy_response(&copy);
        assert_eq!(
            pb::GetPolicyResponse {
                document: String::new(),
                ..response
            },
            again
        );
        assert_eq!(copy.default_tier, policy.default_tier);
        assert_eq!(copy.untiered_namespaces, UntieredNamespaces::DefaultTier);
        assert_eq!(copy.gpu_resources, policy.gpu_resources);
        for (a, b) in copy.classes.iter().zip(&policy.classes) {
            assert_eq!(a.identifying_labels, b.identifying_labels, "{}", a.name);
        }
    }

    #[test]
    fn a_copy_without_a_default_tier_leaves_untiered_namespaces_alone() {
        let policy = crate::embedded_default().unwrap();
        let mut response = crate::wire::get_policy_response(&policy);
        response.default_tier.clear();
        let copy = policy_from_fields(&response);
        assert_eq!(copy.untiered_namespaces, UntieredNamespaces::Ignore);
    }
}
