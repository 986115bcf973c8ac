//! Exceptions: which cover what, when; what `/validate-pod` and `/validate-exception` answer with them.
use super::*;
use crate::admission::validate_pod::{self, Allowance, Check, QuotaStep, ValidatePorts};
use crate::authority::{Grants, Permission};
use crate::facts::Facts;
use crate::pod::gpu_resources::NoClaimTemplates;
use crate::tier_bound::NodeClass;
use gpu_admission_policy::EnforcementMode;
use kube_core::admission::AdmissionRequest;
use serde_json::{Value, json};
use time::macros::datetime;

const KEY: &str = "gpu.nvidia.com/class";
const NOW: OffsetDateTime = datetime!(2026-11-29 12:00 UTC);

fn class(name: &str, memory: u32) -> String {
    format!(
        "{{ name: {name}, vendor: nvidia, memoryGiB: {memory}, relativeThroughput: 1.0, pricePerHour: 1.0, \
         nodeLabelKey: {KEY}, nodeLabelValue: {name} }}"
    )
}

/// H100-80GB and L4-24GB; bronze: L4-24GB, capped at gpu-default.
fn policy() -> PolicySnapshot {
    let (h100, l4) = (class("H100-80GB", 80), class("L4-24GB", 24));
    crate::policy::test_policy(
        &[&h100, &l4],
        &[
            "{ name: bronze, allowedClasses: [L4-24GB], preferredClass: L4-24GB, objective: cheapest, \
           priorityWeight: 1.0, maxPriorityClass: gpu-default }",
        ],
        &[
            "{ minScore: 90, name: gpu-ultra, value: 1000000, preemptionPolicy: PreemptLowerPriority }",
            "{ minScore: 0, name: gpu-default, value: 1000, preemptionPolicy: PreemptLowerPriority }",
        ],
        "enforcement: { mode: Enforce }\n",
    )
}

fn tiers(ns: &str) -> Option<String> {
    matches!(ns, "batch" | "other").then(|| "bronze".to_string())
}

fn exception(ns: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gpu-admission.io/v1alpha1", "kind": KIND,
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .unwrap()
}

fn read(ns: &str, name: &str, spec: Value) -> Exception {
    Exception::from_object(&exception(ns, name, spec)).unwrap()
}

/// An exception of `batch` for Deployment `train`, H100 allowed, expiring at `expires`.
fn h100_for_train(expires: &str) -> Exception {
    read(
        "batch",
        "train-h100",
        json!({"rules": ["Classes"], "classes": ["H100-80GB"],
               "workloads": [{"kind": "Deployment", "name": "train"}], "expiresAt": expires}),
    )
}

fn rs_owner(name: &str) -> Value {
    json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": "rs-uid", "controller": true}])
}

fn deployment_of_rs(name: &str) -> OwnerFacts {
    OwnerFacts::Known {
        controller: Some(
            serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "name": name, "uid": "d-uid", "controller": true}))
            .unwrap(),
        ),
        group_size: Some(2),
    }
}

/// A Pod of ReplicaSet `train-5d8f` on H100 (outside bronze) at `priority`.
fn pod_request(ns: &str, priority: Option<&str>) -> AdmissionRequest<DynamicObject> {
    let mut spec = json!({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "nodeSelector": {KEY: "H100-80GB"}});
    if let Some(p) = priority {
        spec["priorityClassName"] = json!(p);
    }
    serde_json::from_value(json!({
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns, "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-5d8f-x", "namespace": ns, "ownerReferences": rs_owner("train-5d8f")},
            "spec": spec}
    }))
    .unwrap()
}

#[test]
fn a_deployment_exception_covers_its_replica_sets_pods_by_owner_chain() {
    let req = pod_request("batch", None);
    let next = deployment_of_rs("train");
    let chain = request_chain(&req, Some(&next));
    assert_eq!(
        chain,
        [
            Owner {
                kind: Kind::Pod,
                name: "train-5d8f-x".into()
            },
            Owner {
                kind: Kind::ReplicaSet,
                name: "train-5d8f".into()
            },
            Owner {
                kind: Kind::Deployment,
                name: "train".into()
            },
        ]
    );
    assert_eq!(
        request_query(&req).map(|q| (q.kind, q.name, q.uid)),
        Some((OwnerKind::ReplicaSet, "train-5d8f".into(), "rs-uid".into()))
    );
    let all = [h100_for_train("2026-12-01T00:00:00Z")];
    let covering_ = |chain: &[Owner], ns: &str, now, rules: &[Rule]| {
        covering(chain, &all, ns, now, rules)
            .iter()
            .map(|e| e.id.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        covering_(&chain, "batch", NOW, &[Rule::Classes]),
        ["train-h100"]
    );
    // The owner's controller could not be read: the chain stops at the ReplicaSet, which it does not name.
    let short = request_chain(&req, Some(&OwnerFacts::Unknown("timeout".into())));
    assert!(covering_(&short, "batch", NOW, &[Rule::Classes]).is_empty());
    // Another Deployment's Pods.
    let other = request_chain(&req, Some(&deployment_of_rs("serve")));
    assert!(covering_(&other, "batch", NOW, &[Rule::Classes]).is_empty());
    // Another namespace's, the same names.
    assert!(covering_(&chain, "other", NOW, &[Rule::Classes]).is_empty());
    // A rule it does not relax.
    assert!(covering_(&chain, "batch", NOW, &[Rule::PriorityCap, Rule::Quota]).is_empty());
    // Expired: at its expiry and after.
    let at = datetime!(2026-12-01 00:00 UTC);
    assert!(covering_(&chain, "batch", at, &[Rule::Classes]).is_empty());
    // A label naming the Deployment is no owner: a tenant writes labels.
    let labelled: AdmissionRequest<DynamicObject> = serde_json::from_value(json!({
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "batch",
        "operation": "CREATE", "userInfo": {},
        "object": {"metadata": {"name": "p", "labels": {"app": "train"}}}
    }))
    .unwrap();
    let bare = request_chain(&labelled, None);
    assert_eq!(
        bare,
        [Owner {
            kind: Kind::Pod,
            name: "p".into()
        }]
    );
    assert!(covering_(&bare, "batch", NOW, &[Rule::Classes]).is_empty());
}

#[test]
fn cron_jobs_jobs_and_bare_pods_are_covered_through_their_chain() {
    let job_pod = json!({"name": "nightly-29012345-abc", "ownerReferences": [{"apiVersion": "batch/v1",
        "kind": "Job", "name": "nightly-29012345", "uid": "j", "controller": true}]});
    let meta: ObjectMeta = serde_json::from_value(job_pod).unwrap();
    let cron = OwnerFacts::Known {
        controller: Some(
            serde_json::from_value(json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "name": "nightly", "uid": "c", "controller": true}))
            .unwrap(),
        ),
        group_size: Some(1),
    };
    assert_eq!(
        chain_query(&meta, "batch").map(|q| q.kind),
        Some(OwnerKind::Job)
    );
    let c = chain("v1", "Pod", "nightly-29012345-abc", &meta, Some(&cron));
    let names = |kind, name: &str| {
        read(
            "batch",
            "e",
            json!({"rules": ["Quota"], "workloads": [{"kind": kind, "name": name}],
                   "expiresAt": "2026-12-01T00:00:00Z"}),
        )
    };
    assert!(names("CronJob", "nightly").covers(&c));
    assert!(names("Job", "nightly-29012345").covers(&c));
    assert!(names("Pod", "nightly-29012345-abc").covers(&c));
    assert!(!names("Deployment", "nightly").covers(&c));
    assert!(!names("Pod", "nightly").covers(&c));
}

/// The ports of `/validate-pod` over fixed exceptions, the Deployment `train` as the ReplicaSet's owner.
struct Ports {
    exceptions: Vec<Exception>,
    now: OffsetDateTime,
    grants: Grants,
}

fn nodes(_: &str) -> NodeClass {
    NodeClass::Unknown
}

impl ValidatePorts for Ports {
    fn with_facts<R>(&self, grants: &Grants, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        f(&Facts {
            tier_of: &tiers,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &nodes,
            grants,
        })
    }

    async fn grants(
        &self,
        _: &k8s_openapi::api::authentication::v1::UserInfo,
        _: &[Permission],
    ) -> Grants {
        self.grants.clone()
    }

    async fn reserve(
        &self,
        _: &crate::quota::Ask,
        _: &crate::quota::ledger::Reserving<'_>,
        _: bool,
        _: &(dyn Fn(&crate::quota::Usage) -> validate_pod::Reservation + Sync),
    ) -> Result<Option<crate::quota::Decision>, validate_pod::QuotaUnavailable> {
        Ok(None)
    }

    fn exceptions(&self, namespace: &str) -> Vec<Exception> {
        self.exceptions
            .iter()
            .filter(|e| e.id.namespace == namespace)
            .cloned()
            .collect()
    }

    async fn owner_chain(&self, req: &AdmissionRequest<DynamicObject>) -> Vec<Owner> {
        request_chain(req, Some(&deployment_of_rs("train")))
    }

    fn now(&self) -> OffsetDateTime {
        self.now
    }
}

fn admit(req: &AdmissionRequest<DynamicObject>, ports: &Ports) -> validate_pod::Validated {
    futures_executor::block_on(validate_pod::admit(req, &policy(), ports))
}

#[test]
fn validate_pod_admits_what_a_live_exception_allows_and_names_it() {
    let mut ports = Ports {
        exceptions: vec![h100_for_train("2026-12-01T00:00:00Z")],
        now: NOW,
        grants: Grants::none(),
    };
    let req = pod_request("batch", None);
    let v = admit(&req, &ports);
    let id = ExceptionRef {
        namespace: "batch".into(),
        name: "train-h100".into(),
    };
    assert_eq!(v.check, Check::Allowed(Allowance::Excepted(id.clone())));
    assert_eq!(v.verdict.denied, None);
    assert_eq!(
        v.check_allowance().map(|a| a.describe()).as_deref(),
        Some("allowed by GpuPolicyException batch/train-h100")
    );
    // After its expiry, the same Pod is denied.
    ports.now = datetime!(2026-12-01 00:00:01 UTC);
    let v = admit(&req, &ports);
    assert!(
        v.verdict
            .denied
            .as_deref()
            .is_some_and(|d| d.contains("outside tier bronze")),
        "{v:?}"
    );
    // Within its life but in another namespace: not this namespace's exception.
    ports.now = NOW;
    let v = admit(&pod_request("other", None), &ports);
    assert!(v.verdict.denied.is_some());
    // A rule it does not relax: a priority beyond the cap is still denied (one exception clears it all).
    let v = admit(&pod_request("batch", Some("gpu-ultra")), &ports);
    assert!(
        v.verdict
            .denied
            .as_deref()
            .is_some_and(|d| d.contains("gpu-ultra")),
        "{v:?}"
    );
    // With PriorityCap up to gpu-ultra too, it is allowed.
    ports.exceptions.push(read(
        "batch",
        "train-ultra",
        json!({"rules": ["Classes", "PriorityCap"], "classes": ["H100-80GB"],
               "maxPriorityClass": "gpu-ultra",
               "workloads": [{"kind": "Deployment", "name": "train"}], "expiresAt": "2026-12-01T00:00:00Z"}),
    ));
    let v = admit(&pod_request("batch", Some("gpu-ultra")), &ports);
    assert_eq!(
        v.check,
        Check::Allowed(Allowance::Excepted(ExceptionRef {
            namespace: "batch".into(),
            name: "train-ultra".into()
        }))
    );
    assert!(!matches!(v.quota, Some(QuotaStep::Excepted(_))));
}

impl validate_pod::Validated {
    fn check_allowance(&self) -> Option<&Allowance> {
        match &self.check {
            Check::Allowed(a) => Some(a),
            _ => None,
        }
    }
}

fn create(ns: &str, spec: Value) -> AdmissionRequest<DynamicObject> {
    serde_json::from_value(json!({
        "uid": "u", "kind": {"group": GROUP, "version": VERSION, "kind": KIND},
        "resource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
        "namespace": ns, "name": "e", "operation": "CREATE", "userInfo": {"username": "carol"},
        "object": exception(ns, "e", spec)
    }))
    .unwrap()
}

#[test]
fn creating_an_exception_needs_the_tier_power_and_a_valid_bounded_object() {
    let p = policy();
    let good = json!({"rules": ["Classes"], "classes": ["H100-80GB"],
        "workloads": [{"kind": "Deployment", "name": "train"}], "expiresAt": "2026-12-10T00:00:00Z"});
    let req = create("batch", good.clone());
    assert_eq!(
        review::needed_power(&req, &p, &tiers),
        Some(Permission::Exempt("bronze".into()))
    );
    let exempt = Grants::new([Permission::Exempt("bronze".into())]);
    assert!(matches!(
        review::check(&req, &p, &tiers, &exempt, NOW),
        review::Check::Allowed { ref tier, .. } if tier == "bronze"
    ));
    // Without the power, or with it only through a `*`: denied, naming the power and why.
    let wildcard = Grants::from_answers([(
        Permission::Exempt("bronze".into()),
        crate::authority::Answer::ThroughWildcard(crate::authority::Wildcard::Resource),
    )]);
    for grants in [Grants::none(), wildcard] {
        let c = review::check(&req, &p, &tiers, &grants, NOW);
        assert!(matches!(c, review::Check::Forbidden { .. }), "{c:?}");
        let denied = review::verdict(&c, "carol").denied.unwrap();
        assert!(denied.contains("exempt tiers/bronze"), "{denied}");
    }
    // What is wrong with the object is said, power or not.
    for (change, says) in [
        (
            json!({"expiresAt": "2026-11-29T11:00:00Z"}),
            "not in the future",
        ),
        (
            json!({"expiresAt": "2027-03-01T00:00:00Z"}),
            "more than 90 days ahead",
        ),
        (json!({"expiresAt": "tomorrow"}), "no RFC 3339 time"),
        (json!({"rules": ["Everything"]}), "unknown variant"),
        (json!({"rules": []}), "names no rule"),
        (json!({"classes": []}), "spec.classes names none"),
        (json!({"classes": ["B200"]}), "no GPU class of the policy"),
        (
            json!({"rules": ["PriorityCap"], "classes": []}),
            "maxPriorityClass is not given",
        ),
        (json!({"workloads": []}), "names no workload"),
        (
            json!({"workloads": [{"kind": "Service", "name": "x"}]}),
            "unknown variant",
        ),
    ] {
        let mut spec = good.clone();
        for (k, v) in change.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let c = review::check(&create("batch", spec), &p, &tiers, &exempt, NOW);
        let denied = review::verdict(&c, "carol").denied.unwrap_or_default();
        assert!(denied.contains(says), "{change}: {denied}");
    }
    let mut no_expiry = good.clone();
    no_expiry.as_object_mut().unwrap().remove("expiresAt");
    let c = review::check(&create("batch", no_expiry), &p, &tiers, &exempt, NOW);
    assert!(matches!(c, review::Check::Invalid { .. }), "{c:?}");
    // Deleting one needs nothing more than RBAC.
    let mut delete = req.clone();
    delete.operation = kube_core::admission::Operation::Delete;
    assert_eq!(review::needed_power(&delete, &p, &tiers), None);
    assert!(matches!(
        review::check(&delete, &p, &tiers, &Grants::none(), NOW),
        review::Check::NotOurs(_)
    ));
}

#[test]
fn quota_exception_leaves_the_pod_out_of_the_quota_step_only() {
    let e = read(
        "batch",
        "q",
        json!({"rules": ["Quota"], "workloads": [{"kind": "Deployment", "name": "train"}],
               "expiresAt": "2026-12-01T00:00:00Z"}),
    );
    assert!(e.relaxes(Rule::Quota) && !e.relaxes(Rule::Classes));
    let p = policy();
    let mut rules = p.tier_rules("bronze", "batch").unwrap();
    e.widen(&mut rules, &p);
    assert!(!rules.allows("H100-80GB"));
    assert_eq!(
        rules.max_priority_class.map(|c| c.name.as_str()),
        Some("gpu-default")
    );
    let _ = EnforcementMode::Enforce;
}

/// Owner references are written by an object's creator: they make the owner chain only when the creator is
/// the controller of the first owner's kind. A tenant's bare Pod naming the covered ReplicaSet is the Pod
/// alone; the ReplicaSet controller's (by its ServiceAccount or as kube-controller-manager) is covered.
#[test]
fn owner_references_count_only_from_the_owners_controller() {
    let req = pod_request("batch", None);
    let chain = request_chain(&req, Some(&deployment_of_rs("train")));
    assert_eq!(chain.len(), 3);
    for (creator, kept) in [
        (
            Some("system:serviceaccount:kube-system:replicaset-controller"),
            3,
        ),
        (Some(super::CONTROLLER_MANAGER), 3),
        (Some("system:serviceaccount:kube-system:job-controller"), 1),
        (Some("system:serviceaccount:batch:replicaset-controller"), 1),
        (Some("alice"), 1),
        (None, 1),
    ] {
        let meta = &req.object.as_ref().unwrap().metadata;
        let vouched = super::as_created_by(chain.clone(), meta, creator);
        assert_eq!(vouched.len(), kept, "{creator:?}");
        assert_eq!(vouched[0].kind, Kind::Pod);
    }
}
