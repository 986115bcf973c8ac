//! The quota decision, case by case, over the shipped default policy with a quotas section.
use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::demand::{self, Counted};
use super::*;
use crate::pod::gpu_resources::NoClaimTemplates;
use crate::policy::PolicySnapshot;
use crate::tier_bound::{NoNodes, NodeClass, Nodes};

const QUOTAS: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 16, max: 32 } }
      namespaces:
        - { namespace: students, classes: { L4-24GB: { min: 8, max: 12 } } }
    - tier: silver
      classes: { A100-80GB: { min: 4, max: 8 } }
      total: { min: 6, max: 10 }
";

fn policy() -> Arc<Policy> {
    let text = format!("{}{QUOTAS}", gpu_admission_policy::DEFAULT_POLICY_YAML);
    Arc::new(gpu_admission_policy::parse(&text, "p.yaml").unwrap())
}

fn usage(entries: &[(&str, &str, &str, MilliGpus)]) -> Usage {
    let mut u = Usage::default();
    for &(tier, ns, class, milli) in entries {
        let c = Counted {
            classes: [(class.to_string(), milli)].into(),
            total: milli,
        };
        u.add(tier, ns, &c, 1);
    }
    u
}

fn gpus(class: &str, n: u64) -> Counted {
    Counted {
        classes: [(class.to_string(), n * 1000)].into(),
        total: n * 1000,
    }
}

#[test]
fn within_min_borrowing_and_over_max_with_the_record() {
    let p = policy();
    let u = usage(&[("bronze", "batch", "L4-24GB", 10_000)]);
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 4), &u).unwrap();
    assert_eq!(d.standing, Standing::WithinMin);
    assert_eq!(d.record(), "bronze L4-24GB 10/32 (min 16): within-min");
    assert_eq!(d.borrowing_class, None);

    let u = usage(&[("bronze", "batch", "L4-24GB", 14_000)]);
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 4), &u).unwrap();
    assert_eq!(d.standing, Standing::Borrowing);
    assert_eq!(d.record(), "bronze L4-24GB 14/32 (min 16): borrowed");
    assert_eq!(d.borrowing_class, Some(("gpu-borrowed".to_string(), 100)));
    assert_eq!(d.denial(), None);

    let u = usage(&[("bronze", "batch", "L4-24GB", 30_000)]);
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 4), &u).unwrap();
    assert_eq!(d.standing, Standing::OverMax);
    assert_eq!(d.record(), "bronze L4-24GB 30/32 (min 16): over-max");
    assert_eq!(
        d.denial().unwrap(),
        "tier bronze holds 30 of its 32 L4-24GB GPUs; this Pod asks for 4: 2 is free; ask for at most that, \
         delete Pods of the quota, or ask the policy's admins for a larger max"
    );
    // Exactly at max is within it.
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 2), &u).unwrap();
    assert_eq!(d.standing, Standing::Borrowing);
}

#[test]
fn a_namespace_share_decides_before_its_tier_and_counts_in_it() {
    let p = policy();
    // students holds 12 of its 12; the tier holds 12 + 4 of 32.
    let u = usage(&[
        ("bronze", "students", "L4-24GB", 12_000),
        ("bronze", "batch", "L4-24GB", 4_000),
    ]);
    let d = decide(&p, "bronze", "students", &gpus("L4-24GB", 1), &u).unwrap();
    assert_eq!(d.standing, Standing::OverMax);
    assert_eq!(
        d.record(),
        "bronze/students L4-24GB 12/12 (min 8): over-max"
    );
    assert!(d.denial().unwrap().starts_with(
        "namespace students holds 12 of its 12 L4-24GB GPUs; this Pod asks for 1: none is free"
    ));
    // A namespace share without a min borrows by its tier's min alone.
    let text = format!(
        "{}{}",
        gpu_admission_policy::DEFAULT_POLICY_YAML,
        QUOTAS.replace(
            "{ namespace: students, classes: { L4-24GB: { min: 8, max: 12 } } }",
            "{ namespace: students, classes: { L4-24GB: { max: 12 } } }"
        )
    );
    let shared = gpu_admission_policy::parse(&text, "p.yaml").unwrap();
    let d = decide(
        &shared,
        "bronze",
        "students",
        &gpus("L4-24GB", 1),
        &Usage::default(),
    )
    .unwrap();
    assert_eq!(d.standing, Standing::WithinMin, "{d:?}");
    // The other namespace is held to the tier alone: 16 + 1 of 32, beyond the tier's min 16.
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &u).unwrap();
    assert_eq!(d.standing, Standing::Borrowing);
    assert_eq!(d.applied.len(), 1);
}

#[test]
fn other_tiers_usage_does_not_count_and_unquoted_tiers_get_no_decision() {
    let p = policy();
    let u = usage(&[("gold", "llm", "L4-24GB", 100_000)]);
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &u).unwrap();
    assert_eq!(d.standing, Standing::WithinMin);
    assert_eq!(decide(&p, "gold", "llm", &gpus("L4-24GB", 1), &u), None);
    assert_eq!(decide(&p, "bronze", "batch", &Counted::default(), &u), None);
}

#[test]
fn the_total_decides_borrowing_only_where_a_class_states_no_limit() {
    let p = policy();
    // silver: A100-80GB min 4 max 8, total min 6 max 10. An A100 Pod borrows by the class's min.
    let u = usage(&[("silver", "r", "A100-80GB", 3_000)]);
    let d = decide(&p, "silver", "r", &gpus("A100-80GB", 1), &u).unwrap();
    assert_eq!(d.standing, Standing::WithinMin, "{d:?}");
    // An L4 Pod (no class limit) borrows by the total's min: 3 + 4 > 6.
    let d = decide(&p, "silver", "r", &gpus("L4-24GB", 4), &u).unwrap();
    assert_eq!(d.standing, Standing::Borrowing);
    assert_eq!(d.record(), "silver total 3/10 (min 6): borrowed");
    // The total's max holds for every class: 3 + 8 > 10.
    let d = decide(&p, "silver", "r", &gpus("L4-24GB", 8), &u).unwrap();
    assert_eq!(d.standing, Standing::OverMax);
    assert!(
        d.denial()
            .unwrap()
            .starts_with("tier silver holds 3 of its 10 GPUs across classes")
    );
}

#[test]
fn usage_add_and_remove_are_inverse() {
    let mut u = Usage::default();
    let c = gpus("L4-24GB", 2);
    u.add("bronze", "a", &c, 1);
    u.add("bronze", "a", &c, 1);
    assert_eq!(u.namespaces["a"].classes["L4-24GB"], 4_000);
    u.add("bronze", "a", &c, -1);
    u.add("bronze", "a", &c, -1);
    assert_eq!(u, Usage::default());
}

#[test]
fn a_workload_that_can_never_fit_is_named() {
    let p = policy();
    let one = gpus("L4-24GB", 1);
    assert_eq!(never_fits(&p, "bronze", "batch", &one, 32), None);
    assert_eq!(
        never_fits(&p, "bronze", "batch", &one, 33).unwrap(),
        "33 Pods of 1 GPUs each need 33 L4-24GB, above the tier's max 32 of tier bronze: the workload can \
         never run whole"
    );
    assert!(
        never_fits(&p, "bronze", "students", &one, 13)
            .unwrap()
            .contains("namespace's max 12")
    );
}

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

struct OneNode;
impl Nodes for OneNode {
    fn class_of(&self, node: &str) -> NodeClass {
        match node {
            "l4-1" => NodeClass::Class("L4-24GB".into()),
            _ => NodeClass::Unknown,
        }
    }
}

#[test]
fn a_pod_counts_in_whole_gpu_equivalents_against_its_classes() {
    let snap = PolicySnapshot::from_policy(policy());
    let count = |p: &Pod, tier: &str, nodes: &dyn Nodes| {
        demand::of_pod(p, "ns", tier, &snap, nodes, &NoClaimTemplates)
    };
    // Two whole devices, pinned to L4 by the class label.
    let whole = pod(
        json!({"spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}),
    );
    assert_eq!(count(&whole, "bronze", &NoNodes), Some(gpus("L4-24GB", 2)));
    // A MIG slice of 10 GiB on an A100-80GB: 10/80 of a device.
    let mig = pod(
        json!({"spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"},
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}}),
    );
    let c = count(&mig, "silver", &NoNodes).unwrap();
    assert_eq!(c.classes["A100-80GB"], 125);
    assert_eq!(c.total, 125);
    // No constraint: counted against every class of the tier, once in the total.
    let open = pod(json!({"spec": {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}));
    let c = count(&open, "silver", &NoNodes).unwrap();
    let expected: BTreeSet<&str> = [
        "A100-80GB",
        "A100-40GB",
        "MI300X-192GB",
        "L40S-48GB",
        "L4-24GB",
    ]
    .into();
    assert_eq!(
        c.classes
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        expected
    );
    assert_eq!(c.total, 1000);
    // Bound to a Node of a class: that class only, whatever its constraint says.
    let bound = pod(json!({"spec": {"nodeName": "l4-1",
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}));
    assert_eq!(count(&bound, "silver", &OneNode), Some(gpus("L4-24GB", 1)));
    // No GPU: nothing to count.
    let cpu = pod(json!({"spec": {"containers": [{"name": "c"}]}}));
    assert_eq!(count(&cpu, "bronze", &NoNodes), None);
}

#[test]
fn a_workload_whose_replicas_never_fit_is_answered_at_creation() {
    use crate::authority::Grants;
    use crate::facts::Facts;
    use crate::review::Verdict;
    use gpu_admission_policy::EnforcementMode;
    use kube_core::admission::AdmissionRequest;

    let mut snap = PolicySnapshot::from_policy(policy());
    snap.mode = EnforcementMode::Enforce;
    let job = |parallelism: u32| -> AdmissionRequest<kube_core::DynamicObject> {
        serde_json::from_value(json!({"uid": "u", "operation": "CREATE", "namespace": "batch", "name": "wide",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
            "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "userInfo": {"username": "alice"}, "dryRun": false,
            "object": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wide", "namespace": "batch"},
                "spec": {"parallelism": parallelism, "template": {"spec": {"restartPolicy": "Never",
                    "nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}}))
        .unwrap()
    };
    let tier_of = |_: &str| Some("bronze".to_string());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let mut v = Verdict::default();
    assert_eq!(workload_answer(&job(16), &snap, &facts, &mut v), None);
    assert_eq!(v, Verdict::default());
    let (tier, m) = workload_answer(&job(17), &snap, &facts, &mut v).unwrap();
    assert_eq!(tier, "bronze");
    assert_eq!(
        m,
        "gpu-admission: Job batch/wide (spec.template): 17 Pods of 2 GPUs each need 34 L4-24GB, above the \
         tier's max 32 of tier bronze: the workload can never run whole"
    );
    assert_eq!(v.denied.as_deref(), Some(m.as_str()));
    // A Pod is not a workload: its quota is decided against usage instead.
    let mut pod_req = job(17);
    pod_req.kind.group = String::new();
    pod_req.kind.kind = "Pod".into();
    assert_eq!(
        workload_answer(&pod_req, &snap, &facts, &mut Verdict::default()),
        None
    );
}

#[test]
fn a_borrower_gets_the_borrowers_class_and_every_quota_pod_the_record() {
    use crate::priority_class::PriorityClassFacts;
    let p = policy();
    let borrowed = PriorityClassFacts {
        name: "gpu-borrowed".into(),
        value: 100,
        preemption_policy: Some("Never".into()),
        global_default: false,
    };
    let apply = |pod: serde_json::Value, ops: Vec<json_patch::PatchOperation>| {
        let mut pod = pod;
        json_patch::patch(&mut pod, &ops).unwrap();
        pod
    };
    let decided = json!({"metadata": {"annotations": {"gpu-admission.io/gpu-class": "L4-24GB"}},
        "spec": {"priorityClassName": "gpu-default", "priority": 1000, "preemptionPolicy": "Never"}});
    let u = usage(&[("bronze", "batch", "L4-24GB", 20_000)]);
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &u).unwrap();
    let pod = apply(decided.clone(), mutation_ops(&decided, &d, Some(&borrowed)));
    assert_eq!(pod["spec"]["priorityClassName"], "gpu-borrowed");
    assert_eq!(pod["spec"]["priority"], 100);
    assert_eq!(pod["spec"]["preemptionPolicy"], "Never");
    assert_eq!(
        pod["metadata"]["annotations"]["gpu-admission.io/quota"],
        "bronze L4-24GB 20/32 (min 16): borrowed"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["gpu-admission.io/gpu-class"],
        "L4-24GB"
    );
    // Without the class in the cluster, only the record (the apiserver would refuse an unknown class).
    let pod = apply(decided.clone(), mutation_ops(&decided, &d, None));
    assert_eq!(pod["spec"]["priorityClassName"], "gpu-default");
    // Within min: the tier's priority is kept; a Pod without annotations gets the map.
    let bare = json!({"metadata": {}, "spec": {}});
    let d = decide(
        &p,
        "bronze",
        "batch",
        &gpus("L4-24GB", 1),
        &Usage::default(),
    )
    .unwrap();
    let pod = apply(bare.clone(), mutation_ops(&bare, &d, Some(&borrowed)));
    assert!(pod["spec"].get("priorityClassName").is_none());
    assert_eq!(
        pod["metadata"]["annotations"]["gpu-admission.io/quota"],
        "bronze L4-24GB 0/32 (min 16): within-min"
    );
    // A borrower already below the borrowers' class is not raised.
    let low = json!({"metadata": {}, "spec": {"priority": 10}});
    let d = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &u).unwrap();
    let pod = apply(low.clone(), mutation_ops(&low, &d, Some(&borrowed)));
    assert_eq!(pod["spec"]["priority"], 10);
}

#[test]
fn a_borrower_above_the_borrowers_class_is_answered_and_one_within_min_is_not() {
    use crate::authority::Grants;
    use crate::facts::Facts;
    use crate::priority_class::PriorityClassFacts;
    use crate::review::Verdict;
    use gpu_admission_policy::EnforcementMode;
    use kube_core::admission::AdmissionRequest;
    let p = policy();
    let classes: std::collections::HashMap<String, PriorityClassFacts> = [(
        "gpu-borrowed".to_string(),
        PriorityClassFacts {
            name: "gpu-borrowed".into(),
            value: 100,
            preemption_policy: Some("Never".into()),
            global_default: false,
        },
    )]
    .into();
    // A cluster without the borrowers' class: the scheduler knows no such class, nothing is answered.
    let lacking: std::collections::HashMap<String, PriorityClassFacts> = Default::default();
    let tier_of = |_: &str| Some("bronze".to_string());
    let grants = Grants::none();
    let facts = |with_class: bool| Facts {
        tier_of: &tier_of,
        priority_classes: Some(if with_class { &classes } else { &lacking }),
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    let pod_req = |priority: Option<i64>| -> AdmissionRequest<kube_core::DynamicObject> {
        let mut spec = json!({"containers": [{"name": "c", "image": "x"}]});
        if let Some(v) = priority {
            spec["priority"] = json!(v);
        }
        serde_json::from_value(json!({"uid": "u", "operation": "CREATE", "namespace": "batch", "name": "p",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "userInfo": {"username": "alice"}, "dryRun": false,
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}}))
        .unwrap()
    };
    let u = usage(&[("bronze", "batch", "L4-24GB", 20_000)]);
    let borrower = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &u).unwrap();
    let within = decide(
        &p,
        "bronze",
        "batch",
        &gpus("L4-24GB", 1),
        &Usage::default(),
    )
    .unwrap();
    let run = |d: &Decision, priority: Option<i64>, with_class: bool, mode| {
        let mut snapshot = PolicySnapshot::from_policy(p.clone());
        snapshot.mode = mode;
        let mut v = Verdict::default();
        let a = answer(d, &pod_req(priority), &snapshot, &facts(with_class), &mut v);
        (a, v)
    };
    // Mutated against an older usage: still at the tier's priority, now borrowing.
    let (a, v) = run(&borrower, Some(1000), true, EnforcementMode::Enforce);
    let (why, m) = a.unwrap();
    assert_eq!(why, QuotaViolation::BorrowingAboveClass);
    assert!(
        m.contains("gpu-borrowed (100)") && m.contains(": borrowed"),
        "{m}"
    );
    assert_eq!(v.denied.as_deref(), Some(m.as_str()));
    let (_, v) = run(&borrower, Some(1000), true, EnforcementMode::Warn);
    assert!(v.denied.is_none() && v.warnings.len() == 1);
    // At or below the borrowers' class, within min, or no such class in the cluster: nothing to answer.
    for (d, priority, with_class) in [
        (&borrower, Some(100), true),
        (&borrower, None, true),
        (&within, Some(1000), true),
        (&borrower, Some(1000), false),
    ] {
        let (a, v) = run(d, priority, with_class, EnforcementMode::Enforce);
        assert!(a.is_none() && v.denied.is_none(), "{a:?}");
    }
    // Over a max: that answer first.
    let full = usage(&[("bronze", "batch", "L4-24GB", 32_000)]);
    let over = decide(&p, "bronze", "batch", &gpus("L4-24GB", 1), &full).unwrap();
    let (a, _) = run(&over, Some(1000), true, EnforcementMode::Enforce);
    assert_eq!(a.unwrap().0, QuotaViolation::OverMax);
}

#[test]
fn the_pods_past_a_max_are_the_ones_admitted_after_it_was_full() {
    let p = policy();
    let pod = |key: &'static str, ns: &str, n: u64| {
        (
            key,
            "bronze".to_string(),
            ns.to_string(),
            gpus("L4-24GB", n),
        )
    };
    // bronze's L4-24GB max is 32: 30 fit, the next 4 cross it, and everything after is over too.
    let over = over_max(
        &p,
        [
            pod("first", "batch", 30),
            pod("crossing", "batch", 4),
            pod("after", "batch", 1),
        ],
    );
    let keys: Vec<_> = over.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["crossing", "after"]);
    assert_eq!(
        over[0].1.record(),
        "bronze L4-24GB 30/32 (min 16): over-max"
    );
    assert!(over_max(&p, [pod("a", "batch", 16), pod("b", "batch", 16)]).is_empty());
}

/// What a Pod may be allocated is what counts: whole A100s beside a MIG sidecar count the whole devices plus
/// the slice (not the slice's memory applied to every device); a HAMi share is a whole device on a class that
/// does not enforce shares; a claim of allocation mode `All` counts every device of one Node of the class.
#[test]
fn a_pod_counts_what_it_may_be_allocated_resource_by_resource() {
    let snap = PolicySnapshot::from_policy(policy());
    let count = |p: &Pod, templates: &dyn crate::pod::gpu_resources::ClaimTemplates| {
        demand::of_pod(p, "ns", "silver", &snap, &NoNodes, templates).map(|c| c.total)
    };
    let a100 = |containers: serde_json::Value| {
        pod(
            json!({"spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"},
            "containers": containers}}),
        )
    };
    let sidecar = a100(json!([
        {"name": "train", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "probe", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]));
    assert_eq!(count(&sidecar, &NoClaimTemplates), Some(4_125));
    let policy = policy();
    let k = policy.class_index("A100-80GB").unwrap();
    assert!(!policy.quotas.enforces_shares(k));
    let share = a100(json!([{"name": "c", "resources": {"limits":
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}}}]));
    assert_eq!(count(&share, &NoClaimTemplates), Some(1_000));
    // The same share where the policy says the class's nodes enforce it: 8 of 80 GiB.
    let text = format!(
        "{}{}",
        gpu_admission_policy::DEFAULT_POLICY_YAML,
        QUOTAS.replace("quotas:\n", "quotas:\n  sharesEnforced: [A100-80GB]\n")
    );
    let enforced = PolicySnapshot::from_policy(Arc::new(
        gpu_admission_policy::parse(&text, "p.yaml").unwrap(),
    ));
    let c = demand::of_pod(
        &share,
        "ns",
        "silver",
        &enforced,
        &NoNodes,
        &NoClaimTemplates,
    );
    assert_eq!(c.map(|c| c.total), Some(100));
    // A claim of allocation mode `All`: the class's gpusPerNode (8 in the default catalog).
    let all = |_: &str, _: &str| -> Option<k8s_openapi::api::resource::v1::ResourceClaimTemplate> {
        serde_json::from_value(
            json!({"metadata": {"name": "all"}, "spec": {"spec": {"devices":
            {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com",
            "allocationMode": "All"}}]}}}}),
        )
        .ok()
    };
    let with_claim = pod(
        json!({"spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"},
        "containers": [{"name": "c"}],
        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "all"}]}}),
    );
    assert_eq!(count(&with_claim, &all), Some(8_000));
}

/// A stored Pod whose template the ResourceClaim controller has turned into a claim counts that claim (what
/// the scheduler allocates), not the template as it is now: a template deleted, or re-created smaller, after
/// the claim was made moves nothing; before the claim exists, or when it cannot be read, the template counts.
#[test]
fn a_pod_counts_the_claim_made_from_its_template_not_the_template() {
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
    struct Cluster {
        template: Option<u32>,
        claim: Option<u32>,
    }
    let spec = |count: u32| {
        json!({"devices": {"requests": [{"name": "r", "exactly":
        {"deviceClassName": "a100-80gb.gpu-admission.io", "count": count}}]}})
    };
    impl crate::pod::gpu_resources::ClaimTemplates for (Cluster, serde_json::Value, serde_json::Value) {
        fn template(&self, _: &str, name: &str) -> Option<ResourceClaimTemplate> {
            (name == "one").then_some(())?;
            self.0.template?;
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"spec": self.1}}))
                .ok()
        }
        fn claim(&self, _: &str, name: &str) -> Option<ResourceClaim> {
            (name == "trainer-g-x7k2p").then_some(())?;
            self.0.claim?;
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": self.2})).ok()
        }
    }
    let snap = PolicySnapshot::from_policy(policy());
    let trainer = |made: bool| {
        let status = if made {
            json!({"resourceClaimStatuses": [{"name": "g", "resourceClaimName": "trainer-g-x7k2p"}]})
        } else {
            json!({})
        };
        pod(
            json!({"spec": {"nodeSelector": {"gpu.nvidia.com/class": "A100-80GB"},
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one"}]},
            "status": status}),
        )
    };
    let count = |made: bool, template: Option<u32>, claim: Option<u32>| {
        let cluster = (
            Cluster { template, claim },
            spec(template.unwrap_or(0)),
            spec(claim.unwrap_or(0)),
        );
        demand::of_pod(&trainer(made), "ns", "silver", &snap, &NoNodes, &cluster).map(|c| c.total)
    };
    // Not made yet: the template.
    assert_eq!(count(false, Some(1), None), Some(1_000));
    // Made as 4 from a template since re-created as 1, or deleted: the claim's 4.
    assert_eq!(count(true, Some(1), Some(4)), Some(4_000));
    assert_eq!(count(true, None, Some(4)), Some(4_000));
    // Made, but the claim not (yet) in the cluster's cache: the template still counts.
    assert_eq!(count(true, Some(1), None), Some(1_000));
}

/// A Pod being deleted holds its quota until its deletion time plus its grace period, as ResourceQuota
/// counts it; a finished one holds nothing.
#[test]
fn a_pod_being_deleted_holds_its_quota_until_its_grace_period_has_passed() {
    let deleted = pod(
        json!({"metadata": {"deletionTimestamp": "2026-11-29T10:00:00Z",
        "deletionGracePeriodSeconds": 3600}, "spec": {"containers": [{"name": "c"}]}}),
    );
    let at = 1_795_946_400_000u64; // 2026-11-29T10:00:00Z
    assert_eq!(demand::holds_until_ms(&deleted), Some(at + 3_600_000));
    assert!(demand::holds_quota(&deleted, at + 3_599_000));
    assert!(!demand::holds_quota(&deleted, at + 3_600_001));
    let running = pod(json!({"spec": {"containers": [{"name": "c"}]}}));
    assert!(demand::holds_quota(&running, u64::MAX));
    let done =
        pod(json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Succeeded"}}));
    assert!(!demand::holds_quota(&done, 0));
}
