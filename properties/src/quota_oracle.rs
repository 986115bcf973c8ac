//! The GPU quota oracle: random sequences of what tenants and the platform do (create Pods of every counted
//! shape, delete them with a grace period, let them finish, let time pass, relabel a namespace to another
//! tier, change the policy's quotas), run through core's quota decision (`quota::of_pod_in` + `quota::decide`,
//! what `/validate-pod` asks) over core's counting of what the cluster holds (`quota::held::HeldPods`, the
//! frontend's watch), against a model of what the scheduler may allocate each Pod, written here on its own
//! (never through core's counting). After every step:
//! - **the usage is what is held**: per namespace, what the counting says equals the model's devices held
//!   now (a terminating Pod until its grace period has passed, a relabelled namespace in its new tier), so no
//!   tenant's past events, labels or deletions move another namespace's decisions;
//! - **a `max` holds on what is held**: after every admitted Pod, the devices held in its namespace's share
//!   and in its tier (its namespaces as labelled now) are within the policy's `max` (a relabel or a lowered
//!   `max` may leave a scope over it; then nothing more is admitted there).
//!
//! DRA claims through a template: a tenant creates, replaces or deletes her namespace's ResourceClaimTemplate
//! `gpus` (L4 devices) at any time, Pods name it, and the ResourceClaim controller makes a Pod's claim from
//! the template as it is when it acts (the claim's CREATE decided as `/validate-pod` decides it:
//! `quota::claim_reasks` over the Pods `HeldPods::served_by` finds). The model: a Pod whose claim is not made
//! yet can end up with what the template says now; once made, what its claim says, whatever the template
//! becomes.
//!
//! The ledgers of reservations (`quota::ledger`, one per tier, what `/validate-pod` writes before admitting):
//! every create is decided against the watch plus every tier's ledger (a relabelled namespace's reservations
//! move with it) and reserved in its own tier's through `ledger::plan`; a **failed create** is a
//! reservation written whose Pod the apiserver then refuses (another admission step, a ResourceQuota), a
//! **create under a taken name** one refused `AlreadyExists`. With the rate limits scaled down
//! ([`ORACLE_BOUNDS`]) so sequences reach them, after every step:
//! - **a tenant's reservations take from another namespace at most her own share**: removing one namespace's
//!   entries changes what another namespace's tier counts by at most the `max` that namespace reserved under
//!   (its own share, else its tier's), and not at all once they are older than the watch window;
//! - **the rate limit is the namespace's own**: whether a namespace may reserve is the same with or without
//!   the other namespaces' entries, and a create refused by it comes from a namespace that itself made at
//!   least the limit's number of failed reservations in the last 15 s.
//!
//! Not modelled: a watch that delivers a stored Pod late (here the watch sees it at once; the ledger's unit
//! tests hold the windows), several replicas.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::held::{FactsCounter, HeldPods};
use gpu_admission_core::quota::ledger::{self, Bounds, Entry, Plan, Seen};
use gpu_admission_core::quota::watched::WatchedPod;

mod ledger_checks;
use gpu_admission_core::quota::{self, Standing};
use gpu_admission_core::tier_bound::NoNodes;
use gpu_admission_policy::quotas::MilliGpus;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// The ledger's rate limits in the oracle: the frontend's rule with numbers a 60-step sequence reaches.
pub const ORACLE_BOUNDS: Bounds = Bounds {
    in_flight: 2,
    phantoms: 3,
    compact_at: 5,
};

const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const TIERS: [&str; 3] = ["bronze", "silver", "gold"];

/// Two quota policies the platform switches between (gold has no quota in either).
const POLICIES: [&str; 2] = [
    "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { max: 4 } }
      namespaces:
        - { namespace: team-a, classes: { L4-24GB: { max: 2 } } }
    - tier: silver
      classes: { L4-24GB: { max: 5 } }
",
    "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { max: 3 } }
    - tier: silver
      classes: { L4-24GB: { max: 2 } }
      namespaces:
        - { namespace: team-b, classes: { L4-24GB: { max: 1 } } }
",
];

/// The Pod shapes tenants create, each pinned to L4-24GB, with what the scheduler may allocate it in
/// milli-GPUs (the model: stated here, not computed by core).
fn shape(k: u8) -> (serde_json::Value, MilliGpus) {
    let c = |limits: serde_json::Value| json!({"name": "c", "resources": {"limits": limits}});
    match k % 5 {
        0 => (
            json!({"containers": [c(json!({"nvidia.com/gpu": 1}))]}),
            1000,
        ),
        1 => (
            json!({"containers": [c(json!({"nvidia.com/gpu": 2}))]}),
            2000,
        ),
        // A whole device and a MIG sidecar: the device, plus the slice's 10 of 24 GiB.
        2 => (
            json!({"containers": [c(json!({"nvidia.com/gpu": 1})),
                {"name": "s", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}),
            1000 + 417,
        ),
        // A HAMi share on a class that does not enforce it: the container may use the whole device.
        3 => (
            json!({"containers": [c(json!({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2048}))]}),
            1000,
        ),
        // An init container of 2 before an app container of 1: 2 at most at a time.
        _ => (
            json!({"containers": [c(json!({"nvidia.com/gpu": 1}))],
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}),
            2000,
        ),
    }
}

/// The DRA objects of the model: each namespace's template `gpus` (L4 devices per claim) and the claims
/// the ResourceClaim controller made, by (namespace, name).
#[derive(Default)]
struct Dra {
    templates: BTreeMap<&'static str, u32>,
    claims: BTreeMap<(String, String), u32>,
}

const TEMPLATE: &str = "gpus";
const L4_CLASS: &str = "l4-24gb.gpu-admission.io";

fn claim_spec(count: u32) -> serde_json::Value {
    json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": L4_CLASS, "count": count}}]}})
}

impl ClaimTemplates for Dra {
    fn template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaimTemplate> {
        let count = self.templates.get(namespace).filter(|_| name == TEMPLATE)?;
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": claim_spec(*count)}}))
        .ok()
    }

    fn claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<k8s_openapi::api::resource::v1::ResourceClaim> {
        let count = self
            .claims
            .get(&(namespace.to_string(), name.to_string()))?;
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace},
            "spec": claim_spec(*count)}))
        .ok()
    }
}

/// How a model Pod asks for GPUs.
enum Asks {
    /// Container resources: what the scheduler may allocate, in milli-GPUs.
    Devices(MilliGpus),
    /// The namespace's template: before its claim is made, what the template says now; after, the claim's.
    Template { made: Option<MilliGpus> },
}

/// One Pod of the model.
struct ModelPod {
    namespace: &'static str,
    asks: Asks,
    /// When it stops holding: deleted at + grace, or finished (ms).
    until_ms: Option<u64>,
    /// Deleted (gone from the apiserver once `until_ms` has passed).
    deleted: bool,
    pod: Pod,
}

/// What the apiserver does with a CREATE after admission.
#[derive(Debug, Clone, Copy)]
enum Apiserver {
    Stores,
    /// Refused after us (another admission step, a ResourceQuota): a reservation written is a phantom.
    Refuses,
    /// The name of Pod `i`: refused `AlreadyExists` while that Pod exists.
    NameOf(usize),
}

/// What a create came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Stored; whether a quota applied.
    Stored { quota: bool },
    /// Denied over a `max`.
    OverMax,
    /// Refused by its namespace's rate limit of reservations.
    Limited,
    /// Admitted, then refused by the apiserver.
    NotStored,
    /// Nothing to do (the name of a Pod that is gone).
    Skipped,
}

/// The world: labels, the policy in force, the Pods, the clock; and the system's counting.
struct World {
    labels: BTreeMap<&'static str, &'static str>,
    policies: [Arc<PolicySnapshot>; 2],
    policy: usize,
    pods: Vec<ModelPod>,
    now_ms: u64,
    held: HeldPods,
    dra: Dra,
    /// The quota ledgers, one per tier (as the frontend keeps them: each reservation written to its tier's,
    /// every decision reading all of them), and what the watch saw of each UID: when, and whether it is gone.
    ledgers: BTreeMap<String, Vec<Entry>>,
    seen: HashMap<String, (u64, bool)>,
    /// Reservations written whose Pod the apiserver refused: namespace, when.
    failed: Vec<(&'static str, u64)>,
    /// Each namespace's reservations: when, in which tier, and the `max` it reserved under (its share, else
    /// its tier's).
    reserved: Vec<(&'static str, u64, &'static str, MilliGpus)>,
}

/// What went wrong, with the step and the trace so far.
pub type Counterexample = String;

impl World {
    fn new() -> Self {
        let snapshot = |q: &str| {
            let text = format!("{}{q}", gpu_admission_policy::DEFAULT_POLICY_YAML);
            let policy = gpu_admission_policy::parse(&text, "oracle.yaml").expect("oracle policy");
            Arc::new(PolicySnapshot::from_policy(Arc::new(policy)))
        };
        World {
            labels: BTreeMap::from([
                ("team-a", "bronze"),
                ("team-b", "bronze"),
                ("team-c", "silver"),
            ]),
            policies: [snapshot(POLICIES[0]), snapshot(POLICIES[1])],
            policy: 0,
            pods: Vec::new(),
            now_ms: 1_795_946_400_000,
            held: HeldPods::default(),
            dra: Dra::default(),
            ledgers: BTreeMap::new(),
            seen: HashMap::new(),
            failed: Vec::new(),
            reserved: Vec::new(),
        }
    }

    fn seen_of(&self, uid: &str) -> Seen {
        match self.seen.get(uid) {
            None => Seen::No,
            Some((_, true)) => Seen::Gone,
            Some(&(at_ms, false)) => Seen::Since { at_ms },
        }
    }

    fn mark_seen(&mut self, uid: &str, gone: bool) {
        let seen = self
            .seen
            .entry(uid.to_string())
            .or_insert((self.now_ms, gone));
        seen.1 |= gone;
    }

    /// Whether the apiserver holds Pod `i` (a CREATE of its name is refused `AlreadyExists`).
    fn exists(&self, i: usize) -> bool {
        self.pods
            .get(i)
            .is_some_and(|p| !p.deleted || p.until_ms.is_some_and(|t| self.now_ms <= t))
    }

    fn snapshot(&self) -> &Arc<PolicySnapshot> {
        &self.policies[self.policy]
    }

    /// Runs `f` with core's facts over the model's labels.
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        let tier_of = |ns: &str| self.labels.get(ns).map(|t| t.to_string());
        let grants = Grants::none();
        f(&Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &self.dra,
            nodes: &NoNodes,
            grants: &grants,
        })
    }

    /// The system's counts brought to now, as a decision sees them.
    fn refresh(&mut self) {
        let snapshot = self.snapshot().clone();
        let now = self.now_ms;
        let mut held = std::mem::take(&mut self.held);
        let gone = self.with_facts(|facts| {
            held.refresh(
                &FactsCounter {
                    snapshot: &snapshot,
                    facts,
                },
                now,
            )
        });
        self.held = held;
        for uid in gone {
            self.mark_seen(&uid, true);
        }
    }

    /// Tells the system's watch about Pod `i` as it now is (`None`: gone).
    fn watch(&mut self, i: usize, pod: Option<Pod>) {
        let snapshot = self.snapshot().clone();
        let now = self.now_ms;
        let mut held = std::mem::take(&mut self.held);
        let uid = format!("pod-{i}");
        let holds = self.with_facts(|facts| {
            let cx = FactsCounter {
                snapshot: &snapshot,
                facts,
            };
            held.set(&uid, pod.as_ref().map(WatchedPod::of), &cx, now)
        });
        self.held = held;
        self.mark_seen(&uid, !holds);
    }

    /// What the model says namespace `ns` holds now (or, for a Pod whose claim is not made yet, can end up
    /// with).
    fn truly_held(&self, ns: &str) -> MilliGpus {
        let holds = |p: &ModelPod| match p.asks {
            Asks::Devices(m) => m,
            Asks::Template { made: Some(m) } => m,
            Asks::Template { made: None } => {
                MilliGpus::from(self.dra.templates.get(p.namespace).copied().unwrap_or(0)) * 1000
            }
        };
        self.pods
            .iter()
            .filter(|p| p.namespace == ns && p.until_ms.is_none_or(|t| self.now_ms <= t))
            .map(holds)
            .sum()
    }

    /// Creates a Pod of `shape` in `ns` through core's decision and reservation, the apiserver doing
    /// `apiserver` with it after admission.
    fn create(&mut self, ns: &'static str, k: u8, apiserver: Apiserver) -> Result<Outcome, String> {
        let (spec, holds) = shape(k);
        self.create_asking(ns, spec, Asks::Devices(holds), apiserver)
    }

    /// Creates a Pod in `ns` naming the namespace's template.
    fn create_with_template(&mut self, ns: &'static str) -> Result<Outcome, String> {
        let spec = json!({"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]});
        self.create_asking(ns, spec, Asks::Template { made: None }, Apiserver::Stores)
    }

    /// The `max` a Pod of `ns` in `tier` is held to on L4: its namespace's share, else its tier's.
    fn share(&self, tier: &str, ns: &str) -> Option<MilliGpus> {
        let policy = self.snapshot().policy.as_deref()?;
        let tq = quota::tier_quota(policy, tier)?;
        let l4 = policy.class_index("L4-24GB")?;
        tq.namespace(ns)
            .and_then(|n| n.limits.class(l4))
            .or_else(|| tq.limits.class(l4))
            .and_then(|l| l.max)
    }

    fn create_asking(
        &mut self,
        ns: &'static str,
        spec: serde_json::Value,
        asks: Asks,
        apiserver: Apiserver,
    ) -> Result<Outcome, String> {
        self.refresh();
        if let Apiserver::NameOf(j) = apiserver
            && !self.exists(j)
        {
            return Ok(Outcome::Skipped);
        }
        let i = self.pods.len();
        let (name, uid) = match apiserver {
            Apiserver::Stores => (format!("pod-{i}"), format!("pod-{i}")),
            Apiserver::Refuses => (
                format!("failed-{i}"),
                format!("failed-{}", self.failed.len()),
            ),
            Apiserver::NameOf(j) => (format!("pod-{j}"), format!("again-{i}")),
        };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"}}
        }))
        .expect("pod");
        let mut pod = pod;
        pod.spec = Some({
            let mut s: k8s_openapi::api::core::v1::PodSpec =
                serde_json::from_value(spec).expect("spec");
            s.node_selector = pod.spec.take().and_then(|s| s.node_selector);
            s
        });
        let snapshot = self.snapshot().clone();
        let now = self.now_ms;
        let decided = self.with_facts(|facts| {
            let (tier, namespace, counted) = quota::of_pod_in(&pod, ns, &snapshot, facts)?;
            let policy = snapshot.policy.as_deref().expect("policy");
            let usage = ledger::effective_usage(
                self.held.usage(),
                self.ledgers.values().flatten(),
                |u| self.seen_of(u),
                now,
                (&tier, ns),
            );
            let fits = quota::decide(policy, &tier, &namespace, &counted, &usage)
                .is_none_or(|d| d.standing != Standing::OverMax);
            Some((tier, counted, fits))
        });
        let quota = match decided {
            None => false,
            Some((_, _, false)) => return Ok(Outcome::OverMax),
            Some((tier, counted, true)) => {
                let entry = Entry::new(&uid, &tier, ns, &counted, now);
                let taken = matches!(apiserver, Apiserver::NameOf(_));
                let seen = |u: &str| self.seen_of(u);
                let written = self.ledgers.get(&tier).map_or(&[][..], Vec::as_slice);
                match ledger::plan(written, entry, taken, seen, now, &ORACLE_BOUNDS) {
                    Plan::NameTaken => return Ok(Outcome::NotStored),
                    Plan::Limited(l) => {
                        let own = self
                            .failed
                            .iter()
                            .filter(|(n, at)| *n == ns && now - at < ledger::ENTRY_TTL_MS)
                            .count();
                        let least = ORACLE_BOUNDS.in_flight.min(ORACLE_BOUNDS.phantoms);
                        if own < least {
                            return Err(format!(
                                "{ns} refused by the rate limit with {own} failed reservations of its own: {l}"
                            ));
                        }
                        return Ok(Outcome::Limited);
                    }
                    Plan::Write(entries) => {
                        self.ledgers.insert(tier.clone(), entries);
                        let share = self.share(&tier, ns).unwrap_or(MilliGpus::MAX);
                        let tier = TIERS.into_iter().find(|t| *t == tier).expect("a tier");
                        self.reserved.push((ns, now, tier, share));
                    }
                }
                true
            }
        };
        if !matches!(apiserver, Apiserver::Stores) {
            if quota {
                self.failed.push((ns, now));
            }
            return Ok(Outcome::NotStored);
        }
        self.pods.push(ModelPod {
            namespace: ns,
            asks,
            until_ms: None,
            deleted: false,
            pod: pod.clone(),
        });
        self.watch(i, Some(pod));
        Ok(Outcome::Stored { quota })
    }

    fn delete(&mut self, i: usize, grace_s: i64) {
        let Some(p) = self.pods.get_mut(i) else {
            return;
        };
        if p.until_ms.is_some() {
            return;
        }
        let at = self.now_ms / 1000 * 1000;
        p.until_ms = Some(at + grace_s as u64 * 1000);
        p.deleted = true;
        let mut pod = p.pod.clone();
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_millisecond(at as i64).expect("time"),
            ));
        pod.metadata.deletion_grace_period_seconds = Some(grace_s);
        self.watch(i, Some(pod));
    }

    fn finish(&mut self, i: usize) {
        let Some(p) = self.pods.get_mut(i) else {
            return;
        };
        if p.until_ms.is_some_and(|t| t < self.now_ms) {
            return;
        }
        p.until_ms = Some(self.now_ms.saturating_sub(1));
        let mut pod = p.pod.clone();
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        self.watch(i, Some(pod));
    }

    /// The tenant sets her namespace's template to `count` L4 devices (0: deletes it); the frontend's DRA
    /// watch tells its counting, which counts that namespace's Pods again before the next decision.
    fn set_template(&mut self, ns: &'static str, count: u32) {
        if count == 0 {
            self.dra.templates.remove(ns);
        } else {
            self.dra.templates.insert(ns, count);
        }
        let snapshot = self.snapshot().clone();
        let mut held = std::mem::take(&mut self.held);
        self.with_facts(|facts| {
            let cx = FactsCounter {
                snapshot: &snapshot,
                facts,
            };
            held.recount_namespace(ns, &cx);
        });
        self.held = held;
    }

    /// The ResourceClaim controller makes Pod `i`'s claim from its namespace's template as it is now, the
    /// claim's CREATE decided as `/validate-pod` decides it. Whether it was made (`None`: nothing to make).
    fn make_claim(&mut self, i: usize) -> Option<bool> {
        let p = self.pods.get(i)?;
        let (Asks::Template { made: None }, None) = (&p.asks, p.until_ms) else {
            return None;
        };
        let (ns, count) = (p.namespace, *self.dra.templates.get(p.namespace)?);
        let name = format!("pod-{i}-gpu");
        self.refresh();
        let req: kube_core::admission::AdmissionRequest<kube_core::DynamicObject> =
            serde_json::from_value(json!({
                "uid": format!("claim-{i}"),
                "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
                "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
                "namespace": ns, "operation": "CREATE", "name": name,
                "userInfo": {"username": "system:serviceaccount:kube-system:resource-claim-controller"},
                "object": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": ns,
                        "annotations": {quota::POD_CLAIM_NAME: "gpu"},
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": format!("pod-{i}"),
                            "uid": format!("pod-{i}"), "controller": true}]},
                    "spec": claim_spec(count)}
            }))
            .expect("claim request");
        let meta = &req.object.as_ref().expect("object").metadata;
        let served = self
            .held
            .served_by(ns, &quota::ClaimRef::of(meta).expect("named"));
        let snapshot = self.snapshot().clone();
        let policy = snapshot.policy.as_deref().expect("policy");
        let seen = |u: &str| self.seen_of(u);
        let refused = self.with_facts(|facts| {
            quota::claim_reasks(&req, &snapshot, facts, &served)
                .into_iter()
                .any(|((tier, namespace, counted), before)| {
                    let held = self.held.usage();
                    let mut without = ledger::effective_usage(
                        held,
                        self.ledgers.values().flatten(),
                        seen,
                        self.now_ms,
                        (&tier, &namespace),
                    );
                    without.add(&tier, &namespace, &before, -1);
                    quota::decide(policy, &tier, &namespace, &counted, &without)
                        .is_some_and(|d| d.standing == Standing::OverMax)
                })
        });
        if refused {
            return Some(false);
        }
        self.dra
            .claims
            .insert((ns.to_string(), name.clone()), count);
        let p = &mut self.pods[i];
        p.asks = Asks::Template {
            made: Some(MilliGpus::from(count) * 1000),
        };
        p.pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            resource_claim_statuses: Some(vec![
                k8s_openapi::api::core::v1::PodResourceClaimStatus {
                    name: "gpu".into(),
                    resource_claim_name: Some(name),
                },
            ]),
            ..Default::default()
        });
        let pod = p.pod.clone();
        self.watch(i, Some(pod));
        Some(true)
    }

    /// The invariants after a step (`admitted`: the namespace of a Pod the step admitted).
    fn check(&mut self, admitted: Option<&str>) -> Result<(), String> {
        self.refresh();
        let snapshot = self.snapshot().clone();
        let policy = snapshot.policy.as_deref().expect("policy");
        let usage = self.held.usage();
        let mut per_tier: BTreeMap<&str, MilliGpus> = BTreeMap::new();
        for ns in NAMESPACES {
            let tier = self.labels[ns];
            let quota_tier = quota::tier_quota(policy, tier).is_some();
            let truth = self.truly_held(ns);
            let counted = usage.namespaces.get(ns);
            let expected = if quota_tier { truth } else { 0 };
            if counted.map_or(0, |n| n.total) != expected {
                return Err(format!(
                    "{ns} ({tier}) holds {truth} milli-GPUs, the counting says {counted:?}"
                ));
            }
            if let Some(n) = counted.filter(|_| expected > 0)
                && n.tier != tier
            {
                return Err(format!(
                    "{ns} is counted in {}, its label says {tier}",
                    n.tier
                ));
            }
            *per_tier.entry(tier).or_default() += truth;
            let share = quota::tier_quota(policy, tier)
                .and_then(|q| q.namespace(ns))
                .and_then(|n| n.limits.class(policy.class_index("L4-24GB")?))
                .and_then(|l| l.max);
            if admitted == Some(ns) && share.is_some_and(|max| truth > max) {
                return Err(format!("{ns} holds {truth} over its share's max {share:?}"));
            }
        }
        if let Some(ns) = admitted {
            let tier = self.labels[ns];
            for (tier, truth) in per_tier.into_iter().filter(|(t, _)| *t == tier) {
                let max = quota::tier_quota(policy, tier)
                    .and_then(|q| q.limits.class(policy.class_index("L4-24GB")?))
                    .and_then(|l| l.max);
                if max.is_some_and(|m| truth > m) {
                    return Err(format!("tier {tier} holds {truth} over its max {max:?}"));
                }
            }
        }
        Ok(())
    }
}

/// What a sequence ran through.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ran {
    pub steps: usize,
    /// Creates admitted and then refused by the apiserver (phantom reservations, or a taken name).
    pub not_stored: usize,
    /// Creates refused by their namespace's rate limit of reservations.
    pub limited: usize,
}

/// Runs the sequence `ops` encodes (two bytes a step); the counterexample with its trace when an invariant
/// breaks. What it ran through otherwise.
pub fn run(ops: &[u8]) -> Result<Ran, Counterexample> {
    let mut w = World::new();
    let mut trace = Vec::new();
    let mut ran = Ran::default();
    for (step, op) in ops.chunks_exact(2).enumerate() {
        let (kind, arg) = (op[0] % 12, op[1]);
        let ns = NAMESPACES[usize::from(arg) % NAMESPACES.len()];
        let pick = |w: &World| {
            usize::from(arg)
                .checked_rem(w.pods.len().max(1))
                .unwrap_or(0)
        };
        let mut admitted = None;
        match kind {
            0 | 1 | 10 | 11 => {
                let apiserver = match kind {
                    10 => Apiserver::Refuses,
                    11 => Apiserver::NameOf(pick(&w)),
                    _ => Apiserver::Stores,
                };
                let outcome = w.create(ns, arg / 3, apiserver);
                let outcome = match outcome {
                    Ok(o) => o,
                    Err(e) => {
                        return Err(format!(
                            "step {step}: {e}\ntrace:\n  {}",
                            trace.join("\n  ")
                        ));
                    }
                };
                match outcome {
                    Outcome::Stored { quota: true } => admitted = Some(ns),
                    Outcome::NotStored => ran.not_stored += 1,
                    Outcome::Limited => ran.limited += 1,
                    _ => {}
                }
                trace.push(format!(
                    "create {ns} shape {}, the apiserver {apiserver:?}: {outcome:?}",
                    (arg / 3) % 5
                ));
            }
            2 => {
                let i = pick(&w);
                let grace = i64::from(arg % 4) * 30;
                w.delete(i, grace);
                trace.push(format!("delete pod-{i} grace {grace}s"));
            }
            3 => {
                let i = pick(&w);
                w.finish(i);
                trace.push(format!("finish pod-{i}"));
            }
            4 => {
                // Within the ledger's windows half the time, beyond them the other half.
                let s = if arg < 128 {
                    u64::from(arg % 32) * 500 + 1
                } else {
                    u64::from(arg % 90) * 1000 + 1
                };
                w.now_ms += s;
                trace.push(format!("wait {s} ms"));
            }
            7 => {
                let outcome = match w.create_with_template(ns) {
                    Ok(o) => o,
                    Err(e) => {
                        return Err(format!(
                            "step {step}: {e}\ntrace:\n  {}",
                            trace.join("\n  ")
                        ));
                    }
                };
                if outcome == (Outcome::Stored { quota: true }) {
                    admitted = Some(ns);
                }
                trace.push(format!(
                    "create {ns} naming template {TEMPLATE}: {outcome:?}"
                ));
            }
            8 => {
                let count = u32::from(arg / 3) % 4;
                w.set_template(ns, count);
                trace.push(format!("template {ns}/{TEMPLATE} count {count}"));
            }
            9 => {
                let i = pick(&w);
                if let Some(made) = w.make_claim(i) {
                    admitted = made.then(|| w.pods[i].namespace);
                    trace.push(format!("claim of pod-{i} made: {made}"));
                }
            }
            5 => {
                let tier = TIERS[usize::from(arg / 3) % TIERS.len()];
                w.labels.insert(ns, tier);
                trace.push(format!("relabel {ns} {tier}"));
            }
            _ => {
                w.policy = usize::from(arg % 2);
                trace.push(format!("policy {}", w.policy));
            }
        }
        if let Err(e) = w.check(admitted).and_then(|()| w.check_ledger()) {
            return Err(format!(
                "step {step}: {e}\ntrace:\n  {}",
                trace.join("\n  ")
            ));
        }
    }
    ran.steps = ops.len() / 2;
    Ok(ran)
}
