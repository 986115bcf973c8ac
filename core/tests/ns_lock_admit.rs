//! `mutate_pod::admit` beside a namespace-restricted instance: the cluster-wide instance never
//! calls its scorer for a namespace whose `gpu-admission-ns-lock` Lease is active, but a Pod that comes
//! without its tier bound still leaves bound (a tenant's own Lease chooses her scorer, never her tier); an
//! expired Lease gives the namespace back; a restricted instance answers nothing outside its namespaces.

use std::cell::RefCell;
use std::collections::BTreeMap;

use futures_executor::block_on;
use gpu_admission_core::admission::mutate_pod::{
    self, Admitted, Held, MutatePorts, Outcome, ScorerOutcome,
};
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::ns_lock::{Instance, NsLock};
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Content};
use gpu_admission_core::tier_bound::{self, NoNodes};
use gpu_admission_core::workload::WorkloadRef;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-26 18:00:00 UTC);

/// An instance, the Leases it sees, and a scorer that answers the tier's L4 class and counts its calls.
struct Ports<'f> {
    facts: Facts<'f>,
    policy: &'f PolicySnapshot,
    instance: Instance,
    locks: BTreeMap<&'static str, NsLock>,
    calls: RefCell<usize>,
}

impl MutatePorts for Ports<'_> {
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        f(&self.facts)
    }

    async fn workload(&self, _: &Pod, _: &str) -> Option<WorkloadRef> {
        None
    }

    async fn score(&self, request: ScoreRequest) -> ScorerOutcome {
        *self.calls.borrow_mut() += 1;
        ScorerOutcome::Answered(Box::new(ScoreResponse {
            request_id: request.request_id,
            policy_version: self.policy.version.clone(),
            accepted_classes: vec![self.policy.class("L4-24GB").unwrap().into()],
            priority_score: 10.0,
            ..Default::default()
        }))
    }

    fn instance(&self) -> &Instance {
        &self.instance
    }

    fn ns_lock(&self, namespace: &str) -> Option<NsLock> {
        self.locks.get(namespace).cloned()
    }

    fn now(&self) -> OffsetDateTime {
        NOW
    }
}

fn gpu_pod(namespace: &str, node_selector: Option<Value>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
    if let Some(sel) = node_selector {
        spec["nodeSelector"] = sel;
    }
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": namespace}, "spec": spec}
        }
    })
}

fn held(by: &str, renewed: OffsetDateTime) -> NsLock {
    NsLock {
        holder: Some(by.into()),
        renewed: Some(renewed),
        duration_secs: Some(15),
    }
}

/// Admits `review` (every namespace bronze) and returns the answer, the stored Pod and the Score calls.
fn admit(
    instance: Instance,
    locks: BTreeMap<&'static str, NsLock>,
    review: Value,
) -> (Outcome, Option<Pod>, usize, Admitted<'static>) {
    let policy: &'static PolicySnapshot = Box::leak(Box::new(PolicySnapshot::from_policy(
        std::sync::Arc::new(gpu_admission_policy::embedded_default().unwrap()),
    )));
    let tier_of = |_: &str| Some("bronze".to_string());
    let grants = Grants::none();
    let body: &'static [u8] = Box::leak(serde_json::to_vec(&review).unwrap().into_boxed_slice());
    let incoming = Box::leak(Box::new(review::decode(body).unwrap()));
    let Content::Pod(req) = &incoming.content else {
        panic!("a Pod review")
    };
    let ports = Ports {
        facts: Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &NoNodes,
            grants: &grants,
        },
        policy,
        instance,
        locks,
        calls: RefCell::default(),
    };
    let admitted = block_on(mutate_pod::admit(&incoming.uid, req, policy, &ports)).into_admitted();
    let outcome = admitted.outcome();
    let patch = match &admitted {
        Admitted::Decided(d) => d.decision.answer.patch.operations(),
        Admitted::Elsewhere(e) => match &e.held {
            Held::Bound(d) => d.answer.patch.operations(),
            Held::Capped(c) => c.answer.patch.operations(),
            Held::AsItCame => vec![],
        },
        _ => vec![],
    };
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).unwrap();
    let pod: Option<Pod> = serde_json::from_value(pod).ok();
    (outcome, pod, ports.calls.into_inner(), admitted)
}

/// Is the stored Pod held to bronze's classes (the tier invariant validation checks)?
fn bound_to_bronze(pod: &Pod) -> bool {
    let policy = PolicySnapshot::from_policy(std::sync::Arc::new(
        gpu_admission_policy::embedded_default().unwrap(),
    ));
    let rules = policy.tier_rules("bronze", "team-a").unwrap();
    tier_bound::check(
        pod.spec.as_ref().unwrap(),
        &rules,
        policy.catalog(),
        &NoNodes,
    )
    .is_ok()
}

#[test]
fn an_active_lease_leaves_scoring_but_never_the_tier_bound() {
    let locks = BTreeMap::from([(
        "team-a",
        held("team-a-frontend", NOW - time::Duration::seconds(3)),
    )]);
    // An unbound GPU Pod (the restricted instance passed it through): no Score call, bound to bronze.
    let (outcome, pod, calls, admitted) = admit(
        Instance::ClusterWide,
        locks.clone(),
        gpu_pod("team-a", None),
    );
    assert_eq!(outcome, Outcome::ScoredElsewhere);
    assert_eq!(calls, 0);
    let Admitted::Elsewhere(e) = &admitted else {
        panic!("{admitted:?}")
    };
    assert_eq!(e.holder, "team-a-frontend");
    assert!(matches!(e.held, Held::Bound(_)), "{:?}", e.held);
    assert!(bound_to_bronze(pod.as_ref().unwrap()), "{pod:?}");

    // The restricted instance's own in-tier choice: kept as it came, no call.
    let l4 = json!({"gpu.nvidia.com/class": "L4-24GB"});
    let (outcome, pod, calls, admitted) = admit(
        Instance::ClusterWide,
        locks.clone(),
        gpu_pod("team-a", Some(l4.clone())),
    );
    assert_eq!((outcome, calls), (Outcome::ScoredElsewhere, 0));
    assert!(
        matches!(&admitted, Admitted::Elsewhere(e) if matches!(e.held, Held::AsItCame)),
        "{admitted:?}"
    );
    assert_eq!(
        pod.unwrap().spec.unwrap().node_selector.unwrap()["gpu.nvidia.com/class"],
        "L4-24GB"
    );

    // Another namespace is scored here as before.
    let (outcome, pod, calls, _) = admit(Instance::ClusterWide, locks, gpu_pod("ml", None));
    assert_eq!((outcome, calls), (Outcome::Mutated, 1));
    assert!(bound_to_bronze(pod.as_ref().unwrap()));
}

#[test]
fn a_tenants_fake_lease_gains_nothing_beyond_choosing_her_scorer() {
    // alice's own Lease in her namespace, and a Pod pinning H100 (outside bronze) that no scorer touched.
    let locks = BTreeMap::from([("team-a", held("alice", NOW))]);
    let h100 = json!({"gpu.nvidia.com/class": "H100-80GB"});
    let (outcome, pod, calls, _) =
        admit(Instance::ClusterWide, locks, gpu_pod("team-a", Some(h100)));
    assert_eq!((outcome, calls), (Outcome::ScoredElsewhere, 0));
    let pod = pod.unwrap();
    // The pin is kept (validation answers it) and ANDed with bronze's classes: it cannot land on an H100.
    assert!(bound_to_bronze(&pod), "{pod:?}");
    assert_eq!(
        pod.spec.unwrap().node_selector.unwrap()["gpu.nvidia.com/class"],
        "H100-80GB"
    );
}

#[test]
fn an_expired_lease_gives_the_namespace_back() {
    let locks = BTreeMap::from([(
        "team-a",
        held("team-a-frontend", NOW - time::Duration::seconds(16)),
    )]);
    let (outcome, pod, calls, _) = admit(Instance::ClusterWide, locks, gpu_pod("team-a", None));
    assert_eq!((outcome, calls), (Outcome::Mutated, 1));
    assert!(bound_to_bronze(pod.as_ref().unwrap()));
}

#[test]
fn a_restricted_instance_answers_its_namespaces_only() {
    let team = Instance::from_namespaces(["team-a"]);
    let (outcome, _, calls, _) = admit(team.clone(), BTreeMap::new(), gpu_pod("ml", None));
    assert_eq!((outcome, calls), (Outcome::Skipped, 0));
    let (outcome, pod, calls, _) = admit(team, BTreeMap::new(), gpu_pod("team-a", None));
    assert_eq!((outcome, calls), (Outcome::Mutated, 1));
    assert!(bound_to_bronze(pod.as_ref().unwrap()));
}

#[test]
fn a_bound_pod_of_a_locked_namespace_is_still_capped() {
    // The restricted instance's in-tier placement, but a PriorityClass above bronze's cap (the embedded
    // policy is in Warn, where mutation lowers it): not scored here, lowered to the cap.
    let locks = BTreeMap::from([("team-a", held("team-a-frontend", NOW))]);
    let mut review = gpu_pod("team-a", Some(json!({"gpu.nvidia.com/class": "L4-24GB"})));
    review["request"]["object"]["spec"]["priorityClassName"] = json!("gpu-ultra");
    let (outcome, pod, calls, admitted) = admit(Instance::ClusterWide, locks, review);
    assert_eq!((outcome, calls), (Outcome::ScoredElsewhere, 0));
    assert!(
        matches!(&admitted, Admitted::Elsewhere(e) if matches!(e.held, Held::Capped(_))),
        "{admitted:?}"
    );
    let spec = pod.unwrap().spec.unwrap();
    assert_ne!(spec.priority_class_name.as_deref(), Some("gpu-ultra"));
    assert_eq!(
        spec.node_selector.unwrap()["gpu.nvidia.com/class"],
        "L4-24GB"
    );
}
