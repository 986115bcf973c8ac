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
//! Not modelled: the ledger of admissions in flight (sequential here; its rules have their own tests).
use std::collections::BTreeMap;
use std::sync::Arc;

use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::ClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::held::{FactsCounter, HeldPods};
use gpu_admission_core::quota::{self, Standing};
use gpu_admission_core::tier_bound::NoNodes;
use gpu_admission_policy::quotas::MilliGpus;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

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
    pod: Pod,
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
        }
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
        self.with_facts(|facts| {
            held.refresh(
                &FactsCounter {
                    snapshot: &snapshot,
                    facts,
                },
                now,
            );
        });
        self.held = held;
    }

    /// Tells the system's watch about Pod `i` as it now is (`None`: gone).
    fn watch(&mut self, i: usize, pod: Option<Pod>) {
        let snapshot = self.snapshot().clone();
        let now = self.now_ms;
        let mut held = std::mem::take(&mut self.held);
        self.with_facts(|facts| {
            let cx = FactsCounter {
                snapshot: &snapshot,
                facts,
            };
            held.set(&format!("pod-{i}"), pod.as_ref(), &cx, now);
        });
        self.held = held;
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

    /// Creates a Pod of `shape` in `ns` through core's decision; whether it was admitted asking for GPUs
    /// (a Pod asking for none, e.g. naming a template that does not exist yet, is no quota question).
    fn create(&mut self, ns: &'static str, k: u8) -> bool {
        let (spec, holds) = shape(k);
        self.create_asking(ns, spec, Asks::Devices(holds))
    }

    /// Creates a Pod in `ns` naming the namespace's template.
    fn create_with_template(&mut self, ns: &'static str) -> bool {
        let spec = json!({"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]});
        self.create_asking(ns, spec, Asks::Template { made: None })
    }

    fn create_asking(&mut self, ns: &'static str, spec: serde_json::Value, asks: Asks) -> bool {
        self.refresh();
        let i = self.pods.len();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": format!("pod-{i}"), "uid": format!("pod-{i}")},
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
        let usage = self.held.usage().clone();
        let (admitted, asked) = self.with_facts(|facts| {
            let Some((tier, namespace, counted)) = quota::of_pod_in(&pod, ns, &snapshot, facts)
            else {
                return (true, false);
            };
            let policy = snapshot.policy.as_deref().expect("policy");
            let fits = quota::decide(policy, &tier, &namespace, &counted, &usage)
                .is_none_or(|d| d.standing != Standing::OverMax);
            (fits, true)
        });
        if admitted {
            self.pods.push(ModelPod {
                namespace: ns,
                asks,
                until_ms: None,
                pod: pod.clone(),
            });
            self.watch(i, Some(pod));
        }
        admitted && asked
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
        let usage = self.held.usage().clone();
        let refused = self.with_facts(|facts| {
            quota::claim_reasks(&req, &snapshot, facts, &served)
                .into_iter()
                .any(|((tier, namespace, counted), before)| {
                    let mut without = usage.clone();
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

/// Runs the sequence `ops` encodes (two bytes a step); the counterexample with its trace when an invariant
/// breaks. How many steps it ran otherwise.
pub fn run(ops: &[u8]) -> Result<usize, Counterexample> {
    let mut w = World::new();
    let mut trace = Vec::new();
    for (step, op) in ops.chunks_exact(2).enumerate() {
        let (kind, arg) = (op[0] % 10, op[1]);
        let ns = NAMESPACES[usize::from(arg) % NAMESPACES.len()];
        let pick = |w: &World| {
            usize::from(arg)
                .checked_rem(w.pods.len().max(1))
                .unwrap_or(0)
        };
        let mut admitted = None;
        match kind {
            0 | 1 => {
                let yes = w.create(ns, arg / 3);
                admitted = yes.then_some(ns);
                trace.push(format!(
                    "create {ns} shape {}: admitted against a quota {yes}",
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
                let s = u64::from(arg % 90) * 1000 + 1;
                w.now_ms += s;
                trace.push(format!("wait {s} ms"));
            }
            7 => {
                let yes = w.create_with_template(ns);
                admitted = yes.then_some(ns);
                trace.push(format!(
                    "create {ns} naming template {TEMPLATE}: admitted against a quota {yes}"
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
        if let Err(e) = w.check(admitted) {
            return Err(format!(
                "step {step}: {e}\ntrace:\n  {}",
                trace.join("\n  ")
            ));
        }
    }
    Ok(ops.len() / 2)
}
