//! A restricted instance's decision, then the cluster-wide instance's, as the apiserver calls them (the
//! restricted registration sorts first, the cluster-wide one's patch applies to what the first left): a Pod
//! the restricted instance placed by its tier's default because its scorer failed is scored by the
//! cluster-wide scorer; a Pod it placed under the tier it last knew is held to the namespace's current tier
//! (its class constraint replaced, not ANDed with the new one); a record the Pod's author wrote in a
//! namespace no restricted instance holds is replaced by the cluster-wide decision, `decided-by` gone.

use std::cell::RefCell;
use std::collections::BTreeMap;

use futures_executor::block_on;
use gpu_admission_core::admission::mutate_pod::{self, MutatePorts, Outcome, ScorerOutcome};
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::names::decision::{ANN_DECIDED_BY, ANN_FALLBACK, ANN_GPU_CLASS};
use gpu_admission_core::ns_lock::take_over::{TakeOver, taken_over};
use gpu_admission_core::ns_lock::{Instance, NsLock, who_scores};
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Answer, Content};
use gpu_admission_core::tier_bound::{self, NoNodes};
use gpu_admission_core::workload::WorkloadRef;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-29 10:00:00 UTC);
const TEAM: &str = "gpu-team";
const CLASS: &str = "gpu.nvidia.com/class";

fn policy() -> &'static PolicySnapshot {
    Box::leak(Box::new(PolicySnapshot::from_policy(std::sync::Arc::new(
        gpu_admission_policy::embedded_default().unwrap(),
    ))))
}

/// One instance: its tier label for every namespace, the Leases it sees, and a scorer that answers
/// `answer` (a class of the catalog) or is down.
struct Ports<'f> {
    facts: Facts<'f>,
    policy: &'f PolicySnapshot,
    instance: Instance,
    locks: BTreeMap<&'static str, NsLock>,
    answer: Option<&'static str>,
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
        let Some(class) = self.answer else {
            return ScorerOutcome::Unavailable("connection refused".into());
        };
        ScorerOutcome::Answered(Box::new(ScoreResponse {
            request_id: request.request_id,
            policy_version: self.policy.version.clone(),
            accepted_classes: vec![self.policy.class(class).unwrap().into()],
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

fn review_of(pod: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": TEAM, "operation": "CREATE",
            "userInfo": {"username": "alice"}, "object": pod
        }
    })
}

fn gpu_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": TEAM},
        "spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
}

fn lease() -> NsLock {
    NsLock {
        holder: Some("team-frontend".into()),
        renewed: Some(NOW - time::Duration::seconds(2)),
        duration_secs: Some(15),
    }
}

/// What one instance's `/mutate-pod` makes of `pod` (the cluster-wide one taking over a restricted record
/// as the frontend does): the Pod after its patch, why it took over, and its Score calls.
fn mutate(
    instance: Instance,
    tier: &'static str,
    locks: BTreeMap<&'static str, NsLock>,
    answer: Option<&'static str>,
    pod: &Value,
) -> (Value, Option<TakeOver>, usize, Outcome) {
    let policy = policy();
    let tier_of = move |_: &str| Some(tier.to_string());
    let grants = Grants::none();
    let review = review_of(pod);
    let body: &'static [u8] = Box::leak(serde_json::to_vec(&review).unwrap().into_boxed_slice());
    let incoming = Box::leak(Box::new(review::decode(body).unwrap()));
    let Content::Pod(req) = &incoming.content else {
        panic!("a Pod review")
    };
    let mut ports = Ports {
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
        answer,
        calls: RefCell::default(),
    };
    let who = who_scores(&ports.instance, TEAM, ports.locks.get(TEAM), NOW);
    let taken = ports.with_facts(|facts| taken_over(req, &who, facts, policy));
    if taken.is_some() {
        // Scored here: the Lease no longer leaves the Pod to the restricted instance.
        ports.locks.clear();
    }
    let req: &kube_core::admission::AdmissionRequest<Pod> =
        taken.as_ref().map_or(req, |t| &t.request);
    let mutated = block_on(mutate_pod::admit(&incoming.uid, req, policy, &ports));
    let outcome = mutated.outcome();
    let mut answer: Answer = mutated.answer;
    if let Some(t) = &taken {
        t.prefix(&mut answer);
    }
    let mut out = pod.clone();
    json_patch::patch(&mut out, &answer.patch.operations()).unwrap();
    (out, taken.map(|t| t.why), ports.calls.into_inner(), outcome)
}

fn bound_to(pod: &Value, tier: &str) -> bool {
    let policy = policy();
    let rules = policy.tier_rules(tier, TEAM).unwrap();
    let pod: Pod = serde_json::from_value(pod.clone()).unwrap();
    tier_bound::check(
        pod.spec.as_ref().unwrap(),
        &rules,
        policy.catalog(),
        &NoNodes,
    )
    .is_ok()
}

fn annotation<'v>(pod: &'v Value, key: &str) -> Option<&'v str> {
    pod["metadata"]["annotations"][key].as_str()
}

#[test]
fn a_restricted_fallback_is_scored_by_the_cluster_wide_instance() {
    let team = Instance::from_namespaces([TEAM]);
    // The team's scorer is down: its instance places the Pod by bronze's default and says so.
    let (restricted, _, calls, outcome) = mutate(team, "bronze", BTreeMap::new(), None, &gpu_pod());
    assert_eq!((calls, outcome), (1, Outcome::TierDefault));
    assert_eq!(
        annotation(&restricted, ANN_DECIDED_BY),
        Some("restricted:gpu-team")
    );
    assert!(annotation(&restricted, ANN_FALLBACK).is_some());
    // The cluster-wide instance, the Lease still held: not settled, scored here.
    let locks = BTreeMap::from([(TEAM, lease())]);
    let (stored, why, calls, outcome) = mutate(
        Instance::ClusterWide,
        "bronze",
        locks,
        Some("L4-24GB"),
        &restricted,
    );
    assert_eq!(why, Some(TakeOver::FellBack));
    assert_eq!((calls, outcome), (1, Outcome::Mutated));
    assert_eq!(annotation(&stored, ANN_DECIDED_BY), None, "{stored}");
    assert_eq!(annotation(&stored, ANN_FALLBACK), None, "{stored}");
    assert_eq!(annotation(&stored, ANN_GPU_CLASS), Some("L4-24GB"));
    assert!(bound_to(&stored, "bronze"), "{stored}");

    // The team's scorer answers again: its decision stands, no second Score call.
    let team = Instance::from_namespaces([TEAM]);
    let (restricted, _, _, _) =
        mutate(team, "bronze", BTreeMap::new(), Some("L4-24GB"), &gpu_pod());
    let locks = BTreeMap::from([(TEAM, lease())]);
    let (stored, why, calls, _) = mutate(
        Instance::ClusterWide,
        "bronze",
        locks,
        Some("L4-24GB"),
        &restricted,
    );
    assert_eq!((why, calls), (None, 0));
    assert_eq!(stored, restricted);
}

#[test]
fn a_decision_under_the_old_tier_is_replaced_not_anded_with_the_new_one() {
    // The restricted instance still read bronze and pinned L4; the namespace is platinum now.
    let team = Instance::from_namespaces([TEAM]);
    let (restricted, _, _, _) =
        mutate(team, "bronze", BTreeMap::new(), Some("L4-24GB"), &gpu_pod());
    assert_eq!(
        restricted["spec"]["nodeSelector"][CLASS].as_str(),
        Some("L4-24GB")
    );
    assert!(!bound_to(&restricted, "platinum"));
    let locks = BTreeMap::from([(TEAM, lease())]);
    let (stored, why, calls, _) = mutate(
        Instance::ClusterWide,
        "platinum",
        locks,
        Some("H100-80GB"),
        &restricted,
    );
    assert!(matches!(why, Some(TakeOver::OutsideTier(_))), "{why:?}");
    assert_eq!(calls, 1);
    // What validation checks: the Pod is inside platinum, and nothing of L4 is left to contradict it.
    assert!(bound_to(&stored, "platinum"), "{stored}");
    assert_eq!(
        stored["spec"]["nodeSelector"][CLASS].as_str(),
        Some("H100-80GB")
    );
    assert_eq!(annotation(&stored, ANN_GPU_CLASS), Some("H100-80GB"));
    assert_eq!(annotation(&stored, ANN_DECIDED_BY), None);
}

#[test]
fn a_record_written_by_the_pods_author_is_replaced_where_no_lease_is_held() {
    let mut forged = gpu_pod();
    forged["metadata"]["annotations"] = json!({
        ANN_DECIDED_BY: "restricted:gpu-team",
        "gpu-admission.io/decided-at": "2026-11-29T09:00:00Z",
        "gpu-admission.io/placement": "gpu-admission",
        ANN_GPU_CLASS: "L4-24GB",
    });
    forged["spec"]["nodeSelector"] = json!({CLASS: "L4-24GB"});
    // Without the take-over this Pod is settled: kept out of the cluster's learning, sent to no scorer.
    let (stored, why, calls, outcome) = mutate(
        Instance::ClusterWide,
        "bronze",
        BTreeMap::new(),
        Some("L4-24GB"),
        &forged,
    );
    assert_eq!(why, Some(TakeOver::NotHeld));
    assert_eq!((calls, outcome), (1, Outcome::Mutated));
    assert_eq!(annotation(&stored, ANN_DECIDED_BY), None, "{stored}");
    assert!(bound_to(&stored, "bronze"));
}
