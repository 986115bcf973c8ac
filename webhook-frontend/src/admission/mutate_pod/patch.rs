//! THE mutating decision as a pure function: Pod + tier rules + scorer answer + PriorityClass facts + now →
//! RFC 6902 patch (+ admission warnings). Mutation never rejects; it only narrows.
//!
//! Rules (each one is a test below):
//! - idempotence comes from the patch itself: a Pod that already carries our decision record, is placed inside
//!   its tier and has an allowed priority gets no patch (a forged `decided-at` on a Pod without an in-tier
//!   placement is decided like any other Pod);
//! - priority: the answer's PriorityClass, capped at the tier's `maxPriorityClass`, only when the Pod has none
//!   (or the cluster's global default) and the class exists, and then also `spec.priority` and
//!   `spec.preemptionPolicy` with the class's values (the apiserver rejects a class name with another
//!   priority); a Pod's own class above the cap is replaced by the cap (admins' own classes are kept);
//! - placement: a Pod whose reachable GPU classes are all inside its tier (or an admin's own pin) is kept as
//!   it is; any other Pod is constrained to the answer's classes, or to the tier's classes when no class is
//!   feasible or the scorer could not answer (fallback `TierDefault`): `nodeSelector` for one class on a Pod
//!   without a class selector, else a required node-affinity `In` appended to EVERY existing node selector
//!   term (terms are ORed, expressions ANDed) plus a preferred term (weight 100) for the best class. A pin
//!   outside the tier is never rewritten: the added constraint makes it unschedulable, and `validate-pod`
//!   answers the pin itself (deny, warn or audit);
//! - a GPU toleration (class taint key, `Exists`, `NoSchedule`) unless an equal or covering one exists;
//! - preferred pod anti-affinity terms (hostname topology) for the job types to avoid, appended;
//! - label `gpu-admission.io/job-type`, annotations `gpu-admission.io/{priority-score, gpu-class, decided-at,
//!   policy-version}` (+ `infeasible-reason` when no class is feasible, `fallback` when the scorer did not
//!   answer).
//!
//! Paths are built from tokens by `jsonptr` (which escapes `~` → `~0`, `/` → `~1`); a missing parent is added
//! whole (with the new members inside) before anything is added under it; arrays are appended with `/-`.

use std::collections::BTreeMap;

use gpu_admission_proto::scorer::v1::{GpuClass, ScoreResponse};
use json_patch::{AddOperation, PatchOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::{Affinity, Pod, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::features::is_label_value;
use crate::admission::placement::{self, ClassLabels, OwnConstraint, PlacedBy};
use crate::policy::TierRules;
pub use crate::priority_class::{PriorityClassFacts, PriorityClassLookup};

pub const ANN_PRIORITY_SCORE: &str = "gpu-admission.io/priority-score";
pub const ANN_GPU_CLASS: &str = "gpu-admission.io/gpu-class";
pub const ANN_DECIDED_AT: &str = "gpu-admission.io/decided-at";
pub const ANN_POLICY_VERSION: &str = "gpu-admission.io/policy-version";
pub const ANN_INFEASIBLE_REASON: &str = "gpu-admission.io/infeasible-reason";
/// Who places the Pod: `gpu-admission` (our class constraint), `pod: <what>` (the Pod's own constraint, kept),
/// `node-name` or `kueue` (placed by someone else: no placement of ours, no `gpu-class`).
pub const ANN_PLACEMENT: &str = "gpu-admission.io/placement";
/// The feasible classes the scorer weighed, best first, each with its merit (lowest cost / its cost, so the
/// cheapest is 1): `H100-80GB=1,A100-80GB=0.77`.
pub const ANN_ALTERNATIVES: &str = "gpu-admission.io/alternatives";
/// `true` when the class was picked for what running there teaches the model rather than for its cost.
pub const ANN_EXPLORED: &str = "gpu-admission.io/explored";
/// For a Pod Kueue places: the class we would have chosen (Kueue's flavor decides).
pub const ANN_RECOMMENDED_CLASS: &str = "gpu-admission.io/recommended-class";
/// At most this many alternatives are recorded.
pub const MAX_ALTERNATIVES: usize = 5;
/// Set instead of a score when the scorer could not answer and the tier's default placement was applied.
pub const ANN_FALLBACK: &str = "gpu-admission.io/fallback";
pub const LABEL_JOB_TYPE: &str = "gpu-admission.io/job-type";
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
/// Weight of the preferred node-affinity term for the best class when several classes are acceptable.
pub const BEST_CLASS_WEIGHT: i32 = 100;
/// Weight of each preferred anti-affinity term (1-100).
pub const ANTI_AFFINITY_WEIGHT: i32 = 100;

/// Everything the patch depends on. The answer must already be validated (see `decide`).
pub struct PatchInput<'a> {
    pub pod: &'a Pod,
    /// The job type read from the Pod (already a valid label value), labelled for anti-affinity.
    pub job_type: Option<&'a str>,
    /// The scorer's answer, or [`tier_default_answer`] when the scorer could not answer.
    pub answer: &'a ScoreResponse,
    /// Node label keys that name a GPU class (from the policy catalog); the answer's own keys are added.
    pub class_label_keys: &'a [String],
    /// Every label identifying each class (policy); empty = the catalog's and the answer's class labels only.
    pub class_labels: &'a ClassLabels,
    pub now: OffsetDateTime,
    /// The policy's catalog (to name the classes a Pod selects, and to place on the tier's classes).
    pub catalog: &'a [GpuClass],
    /// The namespace's tier rules; `None` before the policy is known (then only the answer is applied).
    pub tier: Option<&'a TierRules<'a>>,
    /// The requester is one of the policy's admins: their own class pin and PriorityClass are kept.
    pub admin: bool,
    /// The answer is the tier's default placement (the scorer did not answer): no score, no priority.
    pub fallback: bool,
}

impl<'a> PatchInput<'a> {
    /// An input with no tier rules, no catalog, not an admin and not a fallback.
    pub fn new(
        pod: &'a Pod,
        job_type: Option<&'a str>,
        answer: &'a ScoreResponse,
        class_label_keys: &'a [String],
        now: OffsetDateTime,
    ) -> Self {
        Self {
            pod,
            job_type,
            answer,
            class_label_keys,
            class_labels: &[],
            now,
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        }
    }
}

/// The patch and the warnings that explain it to the user.
#[derive(Debug, Default)]
pub struct Mutation {
    pub ops: Vec<PatchOperation>,
    pub warnings: Vec<String>,
}

/// The answer used when the scorer could not answer and the tier falls back to `TierDefault`: the tier's
/// allowed classes (preferred first), no score, no priority.
pub fn tier_default_answer(
    tier: &TierRules<'_>,
    catalog: &[GpuClass],
    policy_version: &str,
) -> ScoreResponse {
    ScoreResponse {
        accepted_classes: tier_classes(tier, catalog),
        policy_version: policy_version.to_string(),
        ..Default::default()
    }
}

/// The tier's classes from the catalog, the preferred class first, then catalog order.
fn tier_classes(tier: &TierRules<'_>, catalog: &[GpuClass]) -> Vec<GpuClass> {
    let mut out: Vec<GpuClass> = catalog
        .iter()
        .filter(|c| tier.allows(&c.name))
        .cloned()
        .collect();
    if let Some(p) = tier.preferred
        && let Some(i) = out.iter().position(|c| c.name == p)
    {
        let preferred = out.remove(i);
        out.insert(0, preferred);
    }
    out
}

fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Adds `members` to the map at `parent`: one `add` of the whole map when it is missing (or null), else one
/// `add` per member.
fn add_to_map(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    members: Vec<(String, Value)>,
) {
    if members.is_empty() {
        return;
    }
    if exists {
        for (k, v) in members {
            ops.push(add(ptr(parent.iter().copied().chain([k.as_str()])), v));
        }
    } else {
        ops.push(add(
            ptr(parent.iter().copied()),
            Value::Object(members.into_iter().collect()),
        ));
    }
}

/// Appends `items` to the array at `parent` (`/-`), or adds the whole array when it is missing.
fn append_to_array(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    items: Vec<Value>,
) {
    if items.is_empty() {
        return;
    }
    if exists {
        for v in items {
            ops.push(add(ptr(parent.iter().copied().chain(["-"])), v));
        }
    } else {
        ops.push(add(ptr(parent.iter().copied()), Value::Array(items)));
    }
}

/// Does an existing toleration already let the Pod onto nodes tainted `key:NoSchedule` (any value)?
fn tolerates(existing: &Toleration, key: &str) -> bool {
    let op = existing.operator.as_deref().unwrap_or("Equal");
    let key_ok = match existing.key.as_deref() {
        None | Some("") => op == "Exists",
        Some(k) => k == key,
    };
    let effect_ok = matches!(
        existing.effect.as_deref(),
        None | Some("") | Some("NoSchedule")
    );
    key_ok && op == "Exists" && effect_ok
}

fn score_text(score: f64) -> String {
    let s = format!("{score:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The GPU class the Pod already names itself: the first `nodeSelector` entry or required node-affinity `In`
/// value on one of `label_keys`. Returns (key, value).
pub fn pinned_class<'p>(pod: &'p Pod, label_keys: &[&str]) -> Option<(&'p str, &'p str)> {
    placement::named_classes(pod.spec.as_ref()?, label_keys)
        .first()
        .copied()
}

/// What the decision is, before any operation is written.
struct Plan<'a> {
    /// Classes the Pod is constrained to when [`Self::place`]; the best first, one label key.
    targets: Vec<GpuClass>,
    /// `false` when the Pod's own placement is kept (inside the tier, an admin's pin, or placed by someone else).
    place: bool,
    /// What the Pod's own constraints allow, when it states any.
    own: Option<OwnConstraint>,
    /// `spec.nodeName` or Kueue places the Pod.
    placed_by: Option<PlacedBy>,
    /// The Pod's own constraints allow classes outside the tier, or no class (not an admin's), for the warning.
    pins_outside: Vec<String>,
    /// The PriorityClass to set (replacing the Pod's own when it is above the cap), if any.
    priority: Option<PriorityClassFacts>,
    /// The Pod's own class was above the cap: (own, cap).
    capped_own: Option<(String, String)>,
    label_keys: Vec<&'a str>,
}

/// The class labels a decision reads: the policy's, or the catalog's and the answer's class labels.
fn effective_class_labels(input: &PatchInput<'_>) -> Vec<(String, Vec<(String, String)>)> {
    if !input.class_labels.is_empty() {
        return input.class_labels.to_vec();
    }
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for c in input.catalog.iter().chain(&input.answer.accepted_classes) {
        if !out.iter().any(|(n, _)| n == &c.name) {
            out.push((
                c.name.clone(),
                vec![(c.node_label_key.clone(), c.node_label_value.clone())],
            ));
        }
    }
    out
}

/// Does the Pod carry the tier's classes: a `nodeSelector` entry, or on every required node-affinity term an
/// `In`, on a class label whose classes are all in the tier?
fn tier_anded(spec: &PodSpec, tier: &TierRules<'_>, class_labels: &ClassLabels) -> bool {
    let in_tier = |key: &str, values: &[String]| {
        let classes: Vec<&str> = class_labels
            .iter()
            .filter(|(_, l)| l.iter().any(|(k, v)| k == key && values.contains(v)))
            .map(|(n, _)| n.as_str())
            .collect();
        !classes.is_empty() && classes.iter().all(|c| tier.allows(c))
    };
    if spec
        .node_selector
        .iter()
        .flatten()
        .any(|(k, v)| in_tier(k, std::slice::from_ref(v)))
    {
        return true;
    }
    let mut terms = crate::admission::placement::required_terms(spec).peekable();
    terms.peek().is_some()
        && terms.all(|exprs| {
            exprs
                .iter()
                .any(|e| e.operator == "In" && in_tier(&e.key, e.values.as_deref().unwrap_or(&[])))
        })
}

/// The Pod's own PriorityClass when it is a real choice (not empty, not the cluster's global default).
fn own_priority_class<'p>(spec: &'p PodSpec, pcs: &dyn PriorityClassLookup) -> Option<&'p str> {
    let own = spec
        .priority_class_name
        .as_deref()
        .filter(|c| !c.is_empty())?;
    (!pcs.priority_class(own).is_some_and(|f| f.global_default)).then_some(own)
}

impl<'a> Plan<'a> {
    fn new(input: &'a PatchInput<'a>, spec: &PodSpec, pcs: &dyn PriorityClassLookup) -> Self {
        let answer = input.answer;
        let mut label_keys: Vec<&str> = input.class_label_keys.iter().map(String::as_str).collect();
        for c in answer.accepted_classes.iter().chain(input.catalog) {
            if !label_keys.contains(&c.node_label_key.as_str()) {
                label_keys.push(c.node_label_key.as_str());
            }
        }

        // Placement.
        let class_labels = effective_class_labels(input);
        let own = placement::own_constraint(input.pod, &class_labels);
        let placed_by = PlacedBy::of(input.pod);
        let admin_pin = input.admin && own.is_some();
        // Inside: everything the Pod allows is in the tier, and it allows something or already carries the
        // tier's classes on every term (an out-of-tier pin ANDed with the tier by an earlier pass). Rules
        // unknown: a Pod that constrains its class itself keeps it.
        let inside = own.as_ref().is_some_and(|o| match input.tier {
            None => true,
            Some(t) => {
                o.allowed.iter().all(|c| t.allows(c))
                    && (!o.allowed.is_empty() || tier_anded(spec, t, &class_labels))
            }
        });
        let keep = placed_by.is_some() || admin_pin || inside;
        let pins_outside: Vec<String> = match (input.tier, &own) {
            (Some(tier), Some(o)) if !input.admin && !inside => {
                let out: Vec<String> = o
                    .allowed
                    .iter()
                    .filter(|c| !tier.allows(c))
                    .cloned()
                    .collect();
                if out.is_empty() {
                    vec![format!(
                        "none of the catalog (from {})",
                        o.sources.join(", ")
                    )]
                } else {
                    out
                }
            }
            _ => Vec::new(),
        };
        let mut candidates: Vec<GpuClass> = answer
            .accepted_classes
            .iter()
            .filter(|c| input.tier.is_none_or(|t| t.allows(&c.name)))
            .cloned()
            .collect();
        if candidates.is_empty()
            && let Some(tier) = input.tier
        {
            candidates = tier_classes(tier, input.catalog);
        }
        // One label key can be expressed as one `In`: the classes sharing the best class's key.
        let targets: Vec<GpuClass> = match candidates.first() {
            Some(best) => {
                let key = best.node_label_key.clone();
                candidates
                    .into_iter()
                    .filter(|c| c.node_label_key == key)
                    .collect()
            }
            None => Vec::new(),
        };

        // Priority. The cap's value is the policy's; the class set is the cluster's of that name, and when
        // the cluster lacks it nothing above the cap is assigned (rather than an uncapped class).
        let cap_value = input
            .tier
            .and_then(|t| t.max_priority_class)
            .map(|c| c.value);
        let cap_in_cluster = input
            .tier
            .and_then(|t| t.max_priority_class)
            .and_then(|c| pcs.priority_class(&c.name));
        let above_cap = |v: i32| cap_value.is_some_and(|cap| v > cap);
        let mut capped_own = None;
        let priority = match own_priority_class(spec, pcs) {
            Some(own) => {
                let value = spec
                    .priority
                    .or_else(|| pcs.priority_class(own).map(|f| f.value));
                match (&cap_in_cluster, value) {
                    (Some(cap), Some(v)) if !input.admin && above_cap(v) => {
                        capped_own = Some((own.to_string(), cap.name.clone()));
                        Some(cap.clone())
                    }
                    _ => None,
                }
            }
            None if input.fallback => None,
            None => answer
                .priority_class
                .as_ref()
                .filter(|p| !p.name.is_empty())
                .and_then(|p| pcs.priority_class(&p.name))
                .and_then(|facts| {
                    if above_cap(facts.value) {
                        cap_in_cluster.clone()
                    } else {
                        Some(facts)
                    }
                }),
        };
        Plan {
            place: !keep && !targets.is_empty(),
            targets,
            own,
            placed_by,
            pins_outside,
            priority,
            capped_own,
            label_keys,
        }
    }

    /// Nothing left to do: our record is there, the placement is kept and the priority is allowed.
    fn settled(&self, input: &PatchInput<'_>) -> bool {
        // `priority` is only set for a Pod without a class of its own, or one above the cap.
        has_decision_record(input.pod) && !self.place && self.priority.is_none()
    }
}

/// Whether the Pod carries our decision record (necessary for [`is_settled`], never sufficient: anyone who
/// can create a Pod can write the annotation).
fn has_decision_record(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_DECIDED_AT))
}

/// `true` when the Pod carries our decision record, is placed inside its tier (or keeps an admin's pin) and
/// has an allowed priority: a pass over it would change nothing, whatever the scorer says. With
/// `input.fallback` set this needs no answer (the handler asks before calling the scorer).
pub fn is_settled(input: &PatchInput<'_>, pcs: &dyn PriorityClassLookup) -> bool {
    // Most Pods are new: no record, no plan to build.
    if !has_decision_record(input.pod) {
        return false;
    }
    let default_spec = PodSpec::default();
    let spec = input.pod.spec.as_ref().unwrap_or(&default_spec);
    Plan::new(input, spec, pcs).settled(input)
}

/// Builds the JSON Patch for one admitted Pod (see [`decide_pod`] for the warnings too).
pub fn build_patch(
    input: &PatchInput<'_>,
    priority_classes: &dyn PriorityClassLookup,
) -> Vec<PatchOperation> {
    decide_pod(input, priority_classes).ops
}

/// The mutation of one admitted Pod: the patch in named steps, and the warnings for the user.
pub fn decide_pod(input: &PatchInput<'_>, pcs: &dyn PriorityClassLookup) -> Mutation {
    let default_spec = PodSpec::default();
    let spec = input.pod.spec.as_ref().unwrap_or(&default_spec);
    let plan = Plan::new(input, spec, pcs);
    if plan.settled(input) {
        return Mutation::default();
    }
    let mut ops = Vec::new();
    // An empty typed `metadata` may be `null` or missing in the JSON: create it before adding under it (an
    // `add` of an existing member replaces it, and there is nothing in it to keep).
    if input.pod.metadata == ObjectMeta::default() {
        ops.push(add(ptr(["metadata"]), json!({})));
    }
    record_decision(&mut ops, input, &plan);
    label_job_type(&mut ops, input);
    if input.pod.spec.is_none() {
        ops.push(add(ptr(["spec"]), json!({})));
    }
    set_priority(&mut ops, &plan);
    let mut new_affinity: BTreeMap<&'static str, Value> = BTreeMap::new();
    if plan.place {
        place(&mut ops, spec, &plan, &mut new_affinity);
    }
    let toleration_classes: &[GpuClass] = if plan.place {
        &plan.targets
    } else {
        &input.answer.accepted_classes
    };
    tolerate(&mut ops, spec, toleration_classes);
    avoid_neighbours(&mut ops, spec, input.answer, &mut new_affinity);
    add_new_affinity(&mut ops, spec, new_affinity);
    Mutation {
        ops,
        warnings: warnings(input, &plan),
    }
}

/// Why the Pod may not run where it asked, or may never run.
fn warnings(input: &PatchInput<'_>, plan: &Plan<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let tier = input.tier.map_or("", |t| t.tier);
    let targets: Vec<&str> = plan.targets.iter().map(|c| c.name.as_str()).collect();
    if !plan.pins_outside.is_empty() && plan.place {
        out.push(format!(
            "gpu-admission: GPU class {} is outside tier {tier}; the Pod is constrained to the tier's classes ({}) and cannot schedule while it keeps that selector",
            plan.pins_outside.join(", "),
            targets.join(", ")
        ));
    }
    if input.answer.accepted_classes.is_empty() && !input.fallback && plan.place {
        let reason = if input.answer.infeasible_reason.is_empty() {
            "no feasible GPU class"
        } else {
            &input.answer.infeasible_reason
        };
        out.push(format!(
            "gpu-admission: no GPU class of tier {tier} fits this Pod ({reason}); it is constrained to the tier's classes ({}) and may never schedule",
            targets.join(", ")
        ));
    }
    if let Some((own, cap)) = &plan.capped_own {
        out.push(format!(
            "gpu-admission: PriorityClass {own} is above the cap of tier {tier}; lowered to {cap}"
        ));
    }
    out
}

/// The feasible candidates, best first, as `name=merit` (merit = lowest cost / its cost, 2 decimals).
fn alternatives_text(answer: &ScoreResponse) -> String {
    let mut feasible: Vec<(&str, f64)> = answer
        .candidates
        .iter()
        .filter(|c| c.feasible && c.cost.is_finite() && c.cost > 0.0)
        .map(|c| (c.gpu_class.as_str(), c.cost))
        .collect();
    feasible.sort_by(|a, b| a.1.total_cmp(&b.1));
    let Some(lowest) = feasible.first().map(|(_, c)| *c) else {
        return String::new();
    };
    feasible
        .iter()
        .take(MAX_ALTERNATIVES)
        .map(|(name, cost)| format!("{name}={}", score_text(lowest / cost)))
        .collect::<Vec<_>>()
        .join(",")
}

/// metadata.annotations: the decision record. The class named is one the Pod can run on: our placement's
/// best class, or the answer's best among what the Pod's own constraints allow; none for a Pod placed by
/// `spec.nodeName` (Kueue's Pods get it as a recommendation only).
fn record_decision(ops: &mut Vec<PatchOperation>, input: &PatchInput<'_>, plan: &Plan<'_>) {
    let answer = input.answer;
    let meta = &input.pod.metadata;
    let now = input
        .now
        .replace_nanosecond(0)
        .unwrap_or(input.now)
        .format(&Rfc3339)
        .unwrap_or_default();
    let mut annotations: Vec<(String, Value)> = Vec::new();
    if input.fallback {
        annotations.push((ANN_FALLBACK.into(), json!("tier-default")));
    } else {
        annotations.push((
            ANN_PRIORITY_SCORE.into(),
            json!(score_text(answer.priority_score)),
        ));
        annotations.push((ANN_EXPLORED.into(), json!(answer.explored.to_string())));
        let alternatives = alternatives_text(answer);
        if !alternatives.is_empty() {
            annotations.push((ANN_ALTERNATIVES.into(), json!(alternatives)));
        }
    }
    annotations.push((ANN_DECIDED_AT.into(), json!(now)));
    annotations.push((ANN_POLICY_VERSION.into(), json!(answer.policy_version)));
    let placement = match (plan.placed_by, &plan.own) {
        (Some(by), _) => by.as_str().to_string(),
        (None, _) if plan.place => "gpu-admission".to_string(),
        (None, Some(own)) => format!("pod: {}", own.sources.join(", ")),
        (None, None) => "none".to_string(),
    };
    annotations.push((ANN_PLACEMENT.into(), json!(placement)));
    let best = answer.accepted_classes.first().filter(|c| {
        plan.own
            .as_ref()
            .is_none_or(|o| o.allowed.contains(&c.name))
    });
    match (best, plan.placed_by) {
        (Some(_), Some(PlacedBy::NodeName)) => {}
        (Some(best), Some(PlacedBy::Kueue)) => {
            annotations.push((ANN_RECOMMENDED_CLASS.into(), json!(best.name)));
        }
        (Some(best), None) => annotations.push((ANN_GPU_CLASS.into(), json!(best.name))),
        (None, _) => {
            let reason = if answer.infeasible_reason.is_empty() {
                "no feasible GPU class"
            } else {
                &answer.infeasible_reason
            };
            annotations.push((ANN_INFEASIBLE_REASON.into(), json!(reason)));
        }
    }
    add_to_map(
        ops,
        &["metadata", "annotations"],
        meta.annotations.is_some(),
        annotations,
    );
}

/// metadata.labels: the job type, so that other Pods' anti-affinity can find this one.
fn label_job_type(ops: &mut Vec<PatchOperation>, input: &PatchInput<'_>) {
    let meta = &input.pod.metadata;
    if let Some(jt) = input.job_type.filter(|jt| is_label_value(jt))
        && meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_JOB_TYPE))
            .map(String::as_str)
            != Some(jt)
    {
        add_to_map(
            ops,
            &["metadata", "labels"],
            meta.labels.is_some(),
            vec![(LABEL_JOB_TYPE.into(), json!(jt))],
        );
    }
}

/// spec.priorityClassName + spec.priority + spec.preemptionPolicy, together or not at all.
fn set_priority(ops: &mut Vec<PatchOperation>, plan: &Plan<'_>) {
    if let Some(facts) = &plan.priority {
        ops.push(add(ptr(["spec", "priorityClassName"]), json!(facts.name)));
        ops.push(add(ptr(["spec", "priority"]), json!(facts.value)));
        let policy = facts
            .preemption_policy
            .as_deref()
            .unwrap_or("PreemptLowerPriority");
        ops.push(add(ptr(["spec", "preemptionPolicy"]), json!(policy)));
    }
}

/// Node placement: `nodeSelector` for one class on a Pod without a class selector, else required node
/// affinity on every term (ANDed with whatever the term says) and a preferred term for the best class.
fn place(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    plan: &Plan<'_>,
    new_affinity: &mut BTreeMap<&'static str, Value>,
) {
    let classes = &plan.targets;
    let selects_a_class = spec
        .node_selector
        .iter()
        .flatten()
        .any(|(k, _)| plan.label_keys.contains(&k.as_str()));
    if classes.len() == 1 && !selects_a_class {
        let c = &classes[0];
        add_to_map(
            ops,
            &["spec", "nodeSelector"],
            spec.node_selector.is_some(),
            vec![(c.node_label_key.clone(), json!(c.node_label_value))],
        );
        return;
    }
    let mut values: Vec<&str> = Vec::new();
    for c in classes {
        if !values.contains(&c.node_label_value.as_str()) {
            values.push(&c.node_label_value);
        }
    }
    let expr = json!({"key": classes[0].node_label_key, "operator": "In", "values": values});
    let preferred = json!({
        "weight": BEST_CLASS_WEIGHT,
        "preference": {"matchExpressions": [
            {"key": classes[0].node_label_key, "operator": "In", "values": [classes[0].node_label_value]}
        ]}
    });
    let node_aff = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let required = node_aff.and_then(|n| {
        n.required_during_scheduling_ignored_during_execution
            .as_ref()
    });
    let base = [
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
    ];
    match required {
        Some(req) if !req.node_selector_terms.is_empty() => {
            for (i, term) in req.node_selector_terms.iter().enumerate() {
                let idx = i.to_string();
                let term_path: Vec<&str> = base
                    .iter()
                    .copied()
                    .chain(["nodeSelectorTerms", idx.as_str(), "matchExpressions"])
                    .collect();
                append_to_array(
                    ops,
                    &term_path,
                    term.match_expressions.is_some(),
                    vec![expr.clone()],
                );
            }
        }
        Some(_) => {
            let path: Vec<&str> = base.iter().copied().chain(["nodeSelectorTerms"]).collect();
            ops.push(add(ptr(path), json!([{"matchExpressions": [expr]}])));
        }
        None => {
            let req = json!({"nodeSelectorTerms": [{"matchExpressions": [expr]}]});
            if node_aff.is_some() {
                ops.push(add(ptr(base), req));
            } else {
                new_affinity.insert(
                    "nodeAffinity",
                    json!({
                        "requiredDuringSchedulingIgnoredDuringExecution": req,
                        "preferredDuringSchedulingIgnoredDuringExecution": [preferred.clone()]
                    }),
                );
            }
        }
    }
    // The best class first: a preferred term, so the scheduler picks it when it can.
    if let Some(n) = node_aff {
        append_to_array(
            ops,
            &[
                "spec",
                "affinity",
                "nodeAffinity",
                "preferredDuringSchedulingIgnoredDuringExecution",
            ],
            n.preferred_during_scheduling_ignored_during_execution
                .is_some(),
            vec![preferred],
        );
    }
}

/// spec.tolerations: one per distinct taint key of the classes, unless already tolerated.
fn tolerate(ops: &mut Vec<PatchOperation>, spec: &PodSpec, classes: &[GpuClass]) {
    let existing = spec.tolerations.as_deref().unwrap_or(&[]);
    let mut new_tolerations: Vec<Value> = Vec::new();
    let mut seen_keys: Vec<&str> = Vec::new();
    for c in classes {
        let key = c.taint_key.as_str();
        if key.is_empty() || seen_keys.contains(&key) || existing.iter().any(|t| tolerates(t, key))
        {
            continue;
        }
        seen_keys.push(key);
        new_tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
    }
    append_to_array(
        ops,
        &["spec", "tolerations"],
        spec.tolerations.is_some(),
        new_tolerations,
    );
}

/// spec.affinity.podAntiAffinity: preferred terms keeping job types that interfere off this node.
fn avoid_neighbours(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    answer: &ScoreResponse,
    new_affinity: &mut BTreeMap<&'static str, Value>,
) {
    let terms: Vec<Value> = avoid_terms(answer, spec.affinity.as_ref());
    if terms.is_empty() {
        return;
    }
    let anti = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref());
    match anti {
        Some(a) => append_to_array(
            ops,
            &[
                "spec",
                "affinity",
                "podAntiAffinity",
                "preferredDuringSchedulingIgnoredDuringExecution",
            ],
            a.preferred_during_scheduling_ignored_during_execution
                .is_some(),
            terms,
        ),
        None => {
            let value = json!({"preferredDuringSchedulingIgnoredDuringExecution": terms});
            if spec.affinity.is_some() {
                ops.push(add(ptr(["spec", "affinity", "podAntiAffinity"]), value));
            } else {
                new_affinity.insert("podAntiAffinity", value);
            }
        }
    }
}

/// The affinity parts of a Pod that had no affinity at all, added as one object.
fn add_new_affinity(
    ops: &mut Vec<PatchOperation>,
    spec: &PodSpec,
    new_affinity: BTreeMap<&str, Value>,
) {
    if new_affinity.is_empty() {
        return;
    }
    if spec.affinity.is_some() {
        for (k, v) in new_affinity {
            ops.push(add(ptr(["spec", "affinity", k]), v));
        }
    } else {
        let value = Value::Object(
            new_affinity
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        ops.push(add(ptr(["spec", "affinity"]), value));
    }
}

/// One preferred anti-affinity term per job type to avoid, skipping invalid names and terms already present.
fn avoid_terms(answer: &ScoreResponse, affinity: Option<&Affinity>) -> Vec<Value> {
    let existing: Vec<Value> = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| {
            terms
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for jt in &answer.avoid_job_types {
        if !is_label_value(jt) {
            continue;
        }
        let term = json!({
            "weight": ANTI_AFFINITY_WEIGHT,
            "podAffinityTerm": {
                "labelSelector": {"matchExpressions": [{"key": LABEL_JOB_TYPE, "operator": "In", "values": [jt]}]},
                "topologyKey": HOSTNAME_TOPOLOGY
            }
        });
        if !existing.contains(&term) && !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_proto::scorer::v1::{GpuVendor, PriorityAssignment};
    use std::collections::HashMap;

    const KEY: &str = "gpu.nvidia.com/class";

    fn class(name: &str, taint: &str) -> GpuClass {
        GpuClass {
            name: name.into(),
            vendor: GpuVendor::Nvidia as i32,
            memory_gib: 80.0,
            node_label_key: KEY.into(),
            node_label_value: name.into(),
            relative_throughput: 1.0,
            price_per_hour: 2.0,
            taint_key: taint.into(),
        }
    }

    fn answer(classes: &[&str]) -> ScoreResponse {
        ScoreResponse {
            request_id: "uid".into(),
            accepted_classes: classes.iter().map(|c| class(c, "nvidia.com/gpu")).collect(),
            priority_score: 73.456,
            priority_class: Some(PriorityAssignment {
                name: "gpu-high".into(),
                value: 700,
                preemption_policy: "".into(),
            }),
            avoid_job_types: vec!["serve-llm".into()],
            policy_version: "v7".into(),
            ..Default::default()
        }
    }

    fn classes_in_cluster() -> HashMap<String, PriorityClassFacts> {
        HashMap::from([(
            "gpu-high".to_string(),
            PriorityClassFacts {
                name: "gpu-high".into(),
                value: 7000,
                preemption_policy: Some("Never".into()),
                global_default: false,
            },
        )])
    }

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
    }

    fn gpu_pod(extra_spec: Value, metadata: Value) -> Value {
        let mut spec = json!({"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        for (k, v) in extra_spec.as_object().unwrap() {
            spec[k] = v.clone();
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
    }

    /// Builds the patch, applies it with json-patch, parses the result as a Pod, and checks that a second pass
    /// yields nothing.
    fn run(
        pod_json: Value,
        answer: &ScoreResponse,
        job_type: Option<&str>,
    ) -> (Vec<PatchOperation>, Pod) {
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let input = PatchInput {
            pod: &pod,
            job_type,
            answer,
            class_label_keys: &[],
            class_labels: &[],
            now: now(),
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        };
        let ops = build_patch(&input, &classes_in_cluster());
        let mut doc = pod_json;
        json_patch::patch(&mut doc, &ops)
            .unwrap_or_else(|e| panic!("patch {ops:#?} does not apply: {e}"));
        let patched: Pod = serde_json::from_value(doc).unwrap();
        let again = PatchInput {
            pod: &patched,
            job_type,
            answer,
            class_label_keys: &[],
            class_labels: &[],
            now: now(),
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        };
        assert!(
            build_patch(&again, &classes_in_cluster()).is_empty(),
            "second pass must be a no-op"
        );
        (ops, patched)
    }

    fn annotations(p: &Pod) -> &BTreeMap<String, String> {
        p.metadata.annotations.as_ref().unwrap()
    }

    #[test]
    fn bare_pod_gets_everything() {
        let (ops, p) = run(
            gpu_pod(json!({}), json!({"name": "p"})),
            &answer(&["A100-80GB"]),
            Some("train-llama"),
        );
        let a = annotations(&p);
        assert_eq!(a[ANN_PRIORITY_SCORE], "73.46");
        assert_eq!(a[ANN_GPU_CLASS], "A100-80GB");
        assert_eq!(a[ANN_DECIDED_AT], "2026-09-21T14:13:20Z");
        assert_eq!(a[ANN_POLICY_VERSION], "v7");
        assert!(!a.contains_key(ANN_INFEASIBLE_REASON));
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()[LABEL_JOB_TYPE],
            "train-llama"
        );
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
        assert_eq!(
            spec.priority,
            Some(7000),
            "the class's value, not the scorer's"
        );
        assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
        assert_eq!(spec.node_selector.as_ref().unwrap()[KEY], "A100-80GB");
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol.len(), 1);
        assert_eq!(
            (
                tol[0].key.as_deref(),
                tol[0].operator.as_deref(),
                tol[0].effect.as_deref()
            ),
            (Some("nvidia.com/gpu"), Some("Exists"), Some("NoSchedule"))
        );
        let anti = spec
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap();
        let terms = anti
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].pod_affinity_term.topology_key, HOSTNAME_TOPOLOGY);
        let expr = &terms[0]
            .pod_affinity_term
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            (expr.key.as_str(), expr.values.as_deref()),
            (LABEL_JOB_TYPE, Some(&["serve-llm".to_string()][..]))
        );
        // parents first: the whole annotations map in one op, no op below a path that does not exist yet
        assert!(
            matches!(&ops[0], PatchOperation::Add(a) if a.path.as_str() == "/metadata/annotations")
        );
    }

    #[test]
    fn pointers_escape_slash_and_tilde() {
        let pod = gpu_pod(
            json!({"nodeSelector": {"zone": "a"}}),
            json!({"name": "p", "annotations": {"x~y/z": "keep"}, "labels": {}}),
        );
        let (ops, p) = run(pod, &answer(&["A100-80GB"]), Some("train"));
        let paths: Vec<String> = ops.iter().map(|o| o.path().to_string()).collect();
        assert!(
            paths.contains(&"/metadata/annotations/gpu-admission.io~1decided-at".to_string()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"/metadata/labels/gpu-admission.io~1job-type".to_string()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"/spec/nodeSelector/gpu.nvidia.com~1class".to_string()),
            "{paths:?}"
        );
        assert_eq!(annotations(&p)["x~y/z"], "keep");
        assert_eq!(p.spec.unwrap().node_selector.unwrap()["zone"], "a");
        let tilde = PointerBuf::from_tokens(["a~b/c"]);
        assert_eq!(tilde.as_str(), "/a~0b~1c");
    }

    /// The bronze tier of the default policy: L4 only, capped at gpu-default.
    struct Bronze {
        catalog: Vec<GpuClass>,
        classes: HashMap<String, PriorityClassFacts>,
    }

    impl Bronze {
        fn new() -> Self {
            let mut classes = classes_in_cluster();
            for (name, value) in [("gpu-default", 1000), ("gpu-ultra", 1_000_000)] {
                classes.insert(
                    name.into(),
                    PriorityClassFacts {
                        name: name.into(),
                        value,
                        preemption_policy: None,
                        global_default: false,
                    },
                );
            }
            Self {
                catalog: ["H100-80GB", "A100-80GB", "L4-24GB"]
                    .iter()
                    .map(|c| class(c, "nvidia.com/gpu"))
                    .collect(),
                classes,
            }
        }

        fn rules(&self) -> TierRules<'_> {
            TierRules {
                tier: "bronze",
                allowed: ["L4-24GB"].into(),
                preferred: Some("L4-24GB"),
                max_priority_class: self.classes.get("gpu-default"),
                fallback: gpu_admission_proto::scorer::v1::TierFallback::PassThrough,
                granted: false,
            }
        }

        /// Decides, applies, and checks that a second pass over the result changes nothing.
        fn run(
            &self,
            pod_json: Value,
            a: &ScoreResponse,
            admin: bool,
            fallback: bool,
        ) -> (Mutation, Pod) {
            let rules = self.rules();
            let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
            let input = PatchInput {
                catalog: &self.catalog,
                tier: Some(&rules),
                admin,
                fallback,
                ..PatchInput::new(&pod, None, a, &[], now())
            };
            let m = decide_pod(&input, &self.classes);
            let mut doc = pod_json;
            json_patch::patch(&mut doc, &m.ops).unwrap_or_else(|e| panic!("{:#?}: {e}", m.ops));
            let patched: Pod = serde_json::from_value(doc).unwrap();
            let again = PatchInput {
                pod: &patched,
                ..input
            };
            assert!(is_settled(&again, &self.classes), "settled after one pass");
            assert!(
                build_patch(&again, &self.classes).is_empty(),
                "second pass must be a no-op"
            );
            (m, patched)
        }
    }

    fn required_terms(p: &Pod) -> Vec<Value> {
        let na = p
            .spec
            .as_ref()
            .unwrap()
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap();
        serde_json::to_value(
            &na.required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .node_selector_terms,
        )
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
    }

    #[test]
    fn a_forged_decided_at_without_placement_is_decided_like_any_pod() {
        let b = Bronze::new();
        let pod = gpu_pod(
            json!({}),
            json!({"annotations": {ANN_DECIDED_AT: "2020-01-01T00:00:00Z"}}),
        );
        let (_, p) = b.run(pod, &answer(&["L4-24GB"]), false, false);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "L4-24GB"
        );
        assert_ne!(annotations(&p)[ANN_DECIDED_AT], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn a_decided_pod_inside_its_tier_is_left_alone() {
        let b = Bronze::new();
        let pod: Pod = serde_json::from_value(gpu_pod(
            json!({"nodeSelector": {KEY: "L4-24GB"}, "priorityClassName": "gpu-default", "priority": 1000}),
            json!({"annotations": {ANN_DECIDED_AT: "2020-01-01T00:00:00Z"}}),
        ))
        .unwrap();
        let a = answer(&["L4-24GB"]);
        let rules = b.rules();
        let input = PatchInput {
            catalog: &b.catalog,
            tier: Some(&rules),
            ..PatchInput::new(&pod, Some("x"), &a, &[], now())
        };
        assert!(build_patch(&input, &b.classes).is_empty());
        // Without our record the same Pod is decided (priority kept: it is within the cap).
        let mut undecided = pod.clone();
        undecided.metadata.annotations = None;
        let input = PatchInput {
            pod: &undecided,
            ..input
        };
        let ops = build_patch(&input, &b.classes);
        assert!(!ops.is_empty());
        assert!(
            ops.iter()
                .all(|o| !o.path().as_str().starts_with("/spec/priority")
                    && !o.path().as_str().starts_with("/spec/nodeSelector")),
            "{ops:?}"
        );
    }

    #[test]
    fn a_pin_outside_the_tier_is_constrained_not_rewritten() {
        let b = Bronze::new();
        let mut a = answer(&[]);
        a.infeasible_reason = "not allowed for tier bronze".into();
        let pod = gpu_pod(json!({"nodeSelector": {KEY: "H100-80GB"}}), json!({}));
        let (m, p) = b.run(pod, &a, false, false);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "H100-80GB"
        );
        let terms = required_terms(&p);
        assert_eq!(
            terms[0]["matchExpressions"][0]["values"],
            json!(["L4-24GB"])
        );
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("H100-80GB is outside tier bronze")),
            "{:?}",
            m.warnings
        );
        assert_eq!(
            annotations(&p)[ANN_INFEASIBLE_REASON],
            "not allowed for tier bronze"
        );
    }

    #[test]
    fn an_admins_own_pin_is_kept() {
        let b = Bronze::new();
        let pod = gpu_pod(json!({"nodeSelector": {KEY: "H100-80GB"}}), json!({}));
        let (m, p) = b.run(pod, &answer(&[]), true, false);
        let spec = p.spec.unwrap();
        assert_eq!(spec.node_selector.unwrap()[KEY], "H100-80GB");
        assert!(spec.affinity.is_none_or(|a| a.node_affinity.is_none()));
        assert!(
            m.warnings.iter().all(|w| !w.contains("outside")),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn every_value_and_every_term_is_looked_at() {
        let b = Bronze::new();
        // Multi-value In naming an H100 beside the L4.
        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]}]}]}}}}),
            json!({}),
        );
        let (m, p) = b.run(pod, &answer(&["L4-24GB"]), false, false);
        // One class: a nodeSelector, ANDed with every term.
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "L4-24GB"
        );
        assert!(m.warnings.iter().any(|w| w.contains("H100-80GB")));
        // An L4 term ORed with a catch-all term: the catch-all term is constrained too.
        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}}),
            json!({}),
        );
        let (_, p) = b.run(pod.clone(), &answer(&["L4-24GB"]), false, false);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "L4-24GB"
        );
        // The answer's classes outside the tier are never used.
        let (_, p) = b.run(pod, &answer(&["A100-80GB", "L4-24GB"]), false, false);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "L4-24GB"
        );
        assert_eq!(required_terms(&p).len(), 2);
    }

    #[test]
    fn an_infeasible_pod_is_still_placed_on_its_tier_with_a_warning() {
        let b = Bronze::new();
        let mut a = answer(&[]);
        a.infeasible_reason = "needs 70 GiB per GPU".into();
        let (m, p) = b.run(gpu_pod(json!({}), json!({})), &a, false, false);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "L4-24GB"
        );
        assert_eq!(
            annotations(&p)[ANN_INFEASIBLE_REASON],
            "needs 70 GiB per GPU"
        );
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("may never schedule") && w.contains("L4-24GB")),
            "{:?}",
            m.warnings
        );
    }

    #[test]
    fn priority_is_capped_at_the_tier() {
        let b = Bronze::new();
        // The answer's gpu-high is above bronze's gpu-default.
        let (_, p) = b.run(
            gpu_pod(json!({}), json!({})),
            &answer(&["L4-24GB"]),
            false,
            false,
        );
        let spec = p.spec.unwrap();
        assert_eq!(
            (spec.priority_class_name.as_deref(), spec.priority),
            (Some("gpu-default"), Some(1000))
        );
        // The Pod's own gpu-ultra is lowered to the cap, with a warning; an admin's is kept.
        let own = gpu_pod(
            json!({"priorityClassName": "gpu-ultra", "priority": 1_000_000}),
            json!({}),
        );
        let (m, p) = b.run(own.clone(), &answer(&["L4-24GB"]), false, false);
        let spec = p.spec.unwrap();
        assert_eq!(
            (spec.priority_class_name.as_deref(), spec.priority),
            (Some("gpu-default"), Some(1000))
        );
        assert!(
            m.warnings
                .iter()
                .any(|w| w.contains("gpu-ultra is above the cap")),
            "{:?}",
            m.warnings
        );
        let (_, p) = b.run(own, &answer(&["L4-24GB"]), true, false);
        assert_eq!(
            p.spec.unwrap().priority_class_name.as_deref(),
            Some("gpu-ultra")
        );
    }

    #[test]
    fn a_cap_missing_from_the_cluster_assigns_nothing_above_it() {
        let mut b = Bronze::new();
        let cap = b.classes["gpu-default"].clone();
        b.classes.remove("gpu-default");
        let rules = TierRules {
            max_priority_class: Some(&cap),
            ..b.rules()
        };
        let pod: Pod = serde_json::from_value(gpu_pod(json!({}), json!({}))).unwrap();
        let a = answer(&["L4-24GB"]);
        let input = PatchInput {
            catalog: &b.catalog,
            tier: Some(&rules),
            ..PatchInput::new(&pod, None, &a, &[], now())
        };
        let ops = build_patch(&input, &b.classes);
        assert!(
            !ops.iter()
                .any(|o| o.path().as_str().starts_with("/spec/priority")),
            "{ops:?}"
        );
    }

    #[test]
    fn tier_default_fallback_places_without_priority() {
        let b = Bronze::new();
        let rules = b.rules();
        let a = tier_default_answer(&rules, &b.catalog, "v9");
        let (m, p) = b.run(gpu_pod(json!({}), json!({})), &a, false, true);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_selector.as_ref().unwrap()[KEY], "L4-24GB");
        assert_eq!(spec.priority_class_name, None);
        let ann = annotations(&p);
        assert_eq!(ann[ANN_FALLBACK], "tier-default");
        assert_eq!(ann[ANN_GPU_CLASS], "L4-24GB");
        assert!(!ann.contains_key(ANN_PRIORITY_SCORE));
        assert!(m.warnings.is_empty());
    }

    #[test]
    fn priority_only_when_the_class_exists_and_the_pod_has_none() {
        let mut a = answer(&["A100-80GB"]);
        a.priority_class.as_mut().unwrap().name = "gpu-unknown".into();
        let (_, p) = run(gpu_pod(json!({}), json!({})), &a, None);
        let spec = p.spec.unwrap();
        assert_eq!(
            (
                spec.priority_class_name,
                spec.priority,
                spec.preemption_policy
            ),
            (None, None, None)
        );

        let (_, p) = run(
            gpu_pod(
                json!({"priorityClassName": "mine", "priority": 5}),
                json!({}),
            ),
            &answer(&["A100-80GB"]),
            None,
        );
        let spec = p.spec.unwrap();
        assert_eq!(
            (spec.priority_class_name.as_deref(), spec.priority),
            (Some("mine"), Some(5))
        );
    }

    #[test]
    fn a_globally_defaulted_class_counts_as_no_class() {
        let mut classes = classes_in_cluster();
        classes.insert(
            "standard".into(),
            PriorityClassFacts {
                name: "standard".into(),
                value: 100,
                preemption_policy: None,
                global_default: true,
            },
        );
        let pod: Pod = serde_json::from_value(gpu_pod(
            json!({"priorityClassName": "standard", "priority": 100}),
            json!({}),
        ))
        .unwrap();
        let a = answer(&["A100-80GB"]);
        let input = PatchInput {
            pod: &pod,
            job_type: None,
            answer: &a,
            class_label_keys: &[],
            class_labels: &[],
            now: now(),
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        };
        let mut doc = serde_json::to_value(&pod).unwrap();
        json_patch::patch(&mut doc, &build_patch(&input, &classes)).unwrap();
        assert_eq!(doc["spec"]["priorityClassName"], "gpu-high");
        assert_eq!(doc["spec"]["priority"], 7000);

        // A class the user chose (not the global default) is kept.
        let pod: Pod = serde_json::from_value(gpu_pod(
            json!({"priorityClassName": "gpu-high", "priority": 7000}),
            json!({}),
        ))
        .unwrap();
        let input = PatchInput {
            pod: &pod,
            job_type: None,
            answer: &a,
            class_label_keys: &[],
            class_labels: &[],
            now: now(),
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        };
        assert!(
            !build_patch(&input, &classes)
                .iter()
                .any(|o| o.path().as_str().starts_with("/spec/priority"))
        );
    }

    #[test]
    fn priority_replaces_an_apiserver_defaulted_priority() {
        // The Priority admission plugin runs first and sets priority 0 / PreemptLowerPriority.
        let pod = gpu_pod(
            json!({"priority": 0, "preemptionPolicy": "PreemptLowerPriority"}),
            json!({}),
        );
        let (_, p) = run(pod, &answer(&["A100-80GB"]), None);
        let spec = p.spec.unwrap();
        assert_eq!(
            (spec.priority, spec.preemption_policy.as_deref()),
            (Some(7000), Some("Never"))
        );
    }

    #[test]
    fn several_classes_become_required_affinity_on_every_term() {
        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}}}}),
            json!({}),
        );
        let (_, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
        let spec = p.spec.unwrap();
        assert!(spec.node_selector.is_none());
        let aff = spec.affinity.unwrap();
        let na = aff.node_affinity.unwrap();
        let preferred = na
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(preferred.len(), 1);
        assert_eq!(preferred[0].weight, BEST_CLASS_WEIGHT);
        assert_eq!(
            preferred[0].preference.match_expressions.as_ref().unwrap()[0]
                .values
                .as_deref()
                .unwrap(),
            ["H100-80GB"],
            "the best class is preferred"
        );
        let terms = na
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 2, "no new ORed term");
        let t0 = terms[0].match_expressions.as_ref().unwrap();
        assert_eq!(t0.len(), 2);
        assert_eq!(t0[0].key, "zone");
        assert_eq!(t0[1].key, KEY);
        assert_eq!(t0[1].values.as_deref().unwrap(), ["H100-80GB", "A100-80GB"]);
        assert_eq!(terms[1].match_expressions.as_ref().unwrap()[0].key, KEY);
        assert_eq!(terms[1].match_fields.as_ref().unwrap().len(), 1);
        assert!(aff.pod_anti_affinity.is_some());
    }

    #[test]
    fn several_classes_without_affinity_create_the_first_term() {
        let (_, p) = run(
            gpu_pod(json!({}), json!({})),
            &answer(&["H100-80GB", "A100-80GB"]),
            None,
        );
        let aff = p.spec.unwrap().affinity.unwrap();
        let na = aff.node_affinity.unwrap();
        assert_eq!(
            na.preferred_during_scheduling_ignored_during_execution
                .unwrap()
                .len(),
            1
        );
        let terms = na
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert_eq!(
            terms[0].match_expressions.as_ref().unwrap()[0].operator,
            "In"
        );
        assert_eq!(
            aff.pod_anti_affinity
                .unwrap()
                .preferred_during_scheduling_ignored_during_execution
                .unwrap()
                .len(),
            1
        );

        // Existing node affinity with only preferred terms: required is added beside them.
        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}}),
            json!({}),
        );
        let (_, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
        let na = p.spec.unwrap().affinity.unwrap().node_affinity.unwrap();
        let preferred = na
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(
            preferred.len(),
            2,
            "existing preferred term kept, best class appended"
        );
        assert_eq!(preferred[0].weight, 1);
        assert_eq!(
            na.required_during_scheduling_ignored_during_execution
                .unwrap()
                .node_selector_terms
                .len(),
            1
        );
    }

    #[test]
    fn pinned_class_is_kept() {
        let pod = gpu_pod(json!({"nodeSelector": {KEY: "T4-16GB"}}), json!({}));
        let (_, p) = run(pod, &answer(&["A100-80GB"]), None);
        assert_eq!(
            p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
            "T4-16GB"
        );
        assert!(p.spec.unwrap().affinity.unwrap().node_affinity.is_none());

        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["T4-16GB"]}]}]}}}}),
            json!({}),
        );
        let (ops, p) = run(pod, &answer(&["H100-80GB", "A100-80GB"]), None);
        assert!(p.spec.as_ref().unwrap().node_selector.is_none());
        assert!(
            !ops.iter()
                .any(|o| o.path().as_str().contains("nodeAffinity")),
            "{ops:?}"
        );
    }

    #[test]
    fn pinned_class_found_through_catalog_keys() {
        let pod: Pod = serde_json::from_value(gpu_pod(
            json!({"nodeSelector": {"amd.com/class": "MI300X"}}),
            json!({}),
        ))
        .unwrap();
        let a = answer(&["A100-80GB"]);
        let keys = vec!["amd.com/class".to_string()];
        let input = PatchInput {
            pod: &pod,
            job_type: None,
            answer: &a,
            class_label_keys: &keys,
            class_labels: &[],
            now: now(),
            catalog: &[],
            tier: None,
            admin: false,
            fallback: false,
        };
        let ops = build_patch(&input, &classes_in_cluster());
        assert!(
            !ops.iter()
                .any(|o| o.path().as_str().starts_with("/spec/nodeSelector")),
            "{ops:?}"
        );
        assert_eq!(
            pinned_class(&pod, &["amd.com/class"]),
            Some(("amd.com/class", "MI300X"))
        );
    }

    #[test]
    fn existing_tolerations_and_affinity_survive() {
        let pod = gpu_pod(
            json!({
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}}]}}
            }),
            json!({}),
        );
        let (ops, p) = run(pod, &answer(&["A100-80GB"]), None);
        let spec = p.spec.unwrap();
        let tol = spec.tolerations.unwrap();
        assert_eq!(tol.len(), 2);
        assert_eq!(tol[0].key.as_deref(), Some("dedicated"));
        assert_eq!(tol[1].key.as_deref(), Some("nvidia.com/gpu"));
        let terms = spec
            .affinity
            .unwrap()
            .pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0].weight, 5);
        assert!(
            ops.iter()
                .any(|o| o.path().as_str() == "/spec/tolerations/-")
        );
    }

    #[test]
    fn covering_toleration_is_not_duplicated() {
        for existing in [
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
            json!({"key": "nvidia.com/gpu", "operator": "Exists"}),
            json!({"operator": "Exists"}),
        ] {
            let (_, p) = run(
                gpu_pod(json!({"tolerations": [existing.clone()]}), json!({})),
                &answer(&["A100-80GB"]),
                None,
            );
            assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 1, "{existing}");
        }
        // An Equal toleration for one value does not cover every value of the taint.
        let equal = json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"});
        let (_, p) = run(
            gpu_pod(json!({"tolerations": [equal]}), json!({})),
            &answer(&["A100-80GB"]),
            None,
        );
        assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 2);
    }

    #[test]
    fn infeasible_gets_priority_and_reason_but_no_class() {
        let mut a = answer(&[]);
        a.infeasible_reason = "needs 200 GiB per GPU; largest class has 80".into();
        let (_, p) = run(gpu_pod(json!({}), json!({})), &a, None);
        let ann = annotations(&p);
        assert!(!ann.contains_key(ANN_GPU_CLASS));
        assert_eq!(
            ann[ANN_INFEASIBLE_REASON],
            "needs 200 GiB per GPU; largest class has 80"
        );
        let spec = p.spec.unwrap();
        assert_eq!(spec.priority, Some(7000));
        assert!(spec.node_selector.is_none() && spec.tolerations.is_none());
    }

    #[test]
    fn no_taint_key_means_no_toleration_and_bad_job_types_are_skipped() {
        let mut a = answer(&["A100-80GB"]);
        a.accepted_classes[0].taint_key.clear();
        a.avoid_job_types = vec!["bad/value".into(), "".into()];
        let (ops, p) = run(gpu_pod(json!({}), json!({})), &a, Some("not a label"));
        let spec = p.spec.unwrap();
        assert!(
            spec.tolerations.is_none() && spec.affinity.is_none(),
            "{ops:?}"
        );
        assert!(p.metadata.labels.is_none());
    }

    #[test]
    fn null_parents_are_replaced_not_descended_into() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": null, "labels": null},
            "spec": {"containers": [{"name": "c"}], "nodeSelector": null, "tolerations": null, "affinity": null}});
        let (_, p) = run(pod, &answer(&["A100-80GB"]), Some("t"));
        assert_eq!(annotations(&p).len(), 6);
        assert_eq!(p.spec.unwrap().node_selector.unwrap().len(), 1);
    }

    #[test]
    fn score_text_is_short() {
        assert_eq!(score_text(73.0), "73");
        assert_eq!(score_text(73.5), "73.5");
        assert_eq!(score_text(0.0), "0");
        assert_eq!(score_text(100.0), "100");
    }

    /// A gold tier over H100-80GB, A100-80GB and L4-24GB, whose classes GPU Feature Discovery labels too.
    struct Gold {
        catalog: Vec<GpuClass>,
        labels: Vec<(String, Vec<(String, String)>)>,
        classes: HashMap<String, PriorityClassFacts>,
    }

    impl Gold {
        fn new() -> Self {
            let names = ["H100-80GB", "A100-80GB", "L4-24GB"];
            let products = [
                "NVIDIA-H100-80GB-HBM3",
                "NVIDIA-A100-SXM4-80GB",
                "NVIDIA-L4",
            ];
            Self {
                catalog: names.iter().map(|c| class(c, "nvidia.com/gpu")).collect(),
                labels: names
                    .iter()
                    .zip(products)
                    .map(|(n, p)| {
                        (
                            n.to_string(),
                            vec![
                                (KEY.to_string(), n.to_string()),
                                ("nvidia.com/gpu.product".to_string(), p.to_string()),
                            ],
                        )
                    })
                    .collect(),
                classes: classes_in_cluster(),
            }
        }

        fn run(&self, pod_json: Value, a: &ScoreResponse) -> (Mutation, Pod) {
            let rules = TierRules {
                tier: "gold",
                allowed: ["H100-80GB", "A100-80GB", "L4-24GB"].into(),
                preferred: Some("H100-80GB"),
                max_priority_class: None,
                fallback: gpu_admission_proto::scorer::v1::TierFallback::PassThrough,
                granted: false,
            };
            let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
            let input = PatchInput {
                catalog: &self.catalog,
                class_labels: &self.labels,
                tier: Some(&rules),
                ..PatchInput::new(&pod, None, a, &[], now())
            };
            let m = decide_pod(&input, &self.classes);
            let mut doc = pod_json;
            json_patch::patch(&mut doc, &m.ops).unwrap_or_else(|e| panic!("{:#?}: {e}", m.ops));
            let patched: Pod = serde_json::from_value(doc).unwrap();
            let again = PatchInput {
                pod: &patched,
                ..input
            };
            assert!(
                build_patch(&again, &self.classes).is_empty(),
                "second pass must be a no-op"
            );
            (m, patched)
        }
    }

    fn with_costs(mut a: ScoreResponse, costs: &[(&str, f64)], explored: bool) -> ScoreResponse {
        a.candidates = costs
            .iter()
            .map(|(n, c)| gpu_admission_proto::scorer::v1::CandidateScore {
                gpu_class: n.to_string(),
                feasible: true,
                cost: *c,
                ..Default::default()
            })
            .collect();
        a.explored = explored;
        a
    }

    #[test]
    fn a_gfd_product_selector_keeps_the_pod_on_a100_nodes() {
        let g = Gold::new();
        let pod = gpu_pod(
            json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}),
            json!({}),
        );
        let a = with_costs(answer(&["A100-80GB"]), &[("A100-80GB", 2.0)], false);
        let (m, p) = g.run(pod, &a);
        let spec = p.spec.as_ref().unwrap();
        // Still only A100-80GB nodes: the GFD selector is kept and nothing widens or contradicts it.
        assert_eq!(spec.node_selector.as_ref().unwrap().len(), 1);
        assert_eq!(
            spec.node_selector.as_ref().unwrap()["nvidia.com/gpu.product"],
            "NVIDIA-A100-SXM4-80GB"
        );
        assert!(
            spec.affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_none(),
            "{:?}",
            m.ops
        );
        let ann = annotations(&p);
        assert_eq!(ann[ANN_GPU_CLASS], "A100-80GB");
        assert_eq!(
            ann[ANN_PLACEMENT],
            "pod: nodeSelector nvidia.com/gpu.product"
        );
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    }

    #[test]
    fn a_multi_value_in_stays_a_choice_between_its_classes() {
        let g = Gold::new();
        let pod = gpu_pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]}]}]}}}}),
            json!({}),
        );
        let a = with_costs(
            answer(&["H100-80GB", "A100-80GB"]),
            &[("H100-80GB", 1.0), ("A100-80GB", 1.3)],
            true,
        );
        let (_, p) = g.run(pod, &a);
        let terms = required_terms(&p);
        assert_eq!(terms.len(), 1);
        assert_eq!(
            terms[0]["matchExpressions"],
            json!([{"key": KEY, "operator": "In", "values": ["A100-80GB", "H100-80GB"]}])
        );
        let ann = annotations(&p);
        assert_eq!(ann[ANN_GPU_CLASS], "H100-80GB");
        assert_eq!(ann[ANN_ALTERNATIVES], "H100-80GB=1,A100-80GB=0.77");
        assert_eq!(ann[ANN_EXPLORED], "true");
    }

    #[test]
    fn node_name_pods_get_no_placement_and_name_no_class() {
        let g = Gold::new();
        let pod = gpu_pod(json!({"nodeName": "gpu-node-7"}), json!({}));
        let (m, p) = g.run(pod, &answer(&["H100-80GB"]));
        assert!(
            !m.ops.iter().any(|o| {
                let path = o.path().as_str();
                path.starts_with("/spec/nodeSelector")
                    || path.starts_with("/spec/affinity/nodeAffinity")
                    || (path == "/spec/affinity" && o.to_string().contains("nodeAffinity"))
            }),
            "{:?}",
            m.ops
        );
        let spec = p.spec.as_ref().unwrap();
        assert!(spec.node_selector.is_none());
        assert!(
            spec.affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_none()
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
        let ann = annotations(&p);
        assert_eq!(ann[ANN_PLACEMENT], "node-name");
        assert!(!ann.contains_key(ANN_GPU_CLASS), "{ann:?}");
    }

    #[test]
    fn kueue_pods_keep_kueues_placement_and_get_a_recommendation() {
        let g = Gold::new();
        for (spec, meta) in [
            (
                json!({}),
                json!({"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}),
            ),
            (
                json!({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}),
                json!({}),
            ),
        ] {
            let (_, p) = g.run(gpu_pod(spec, meta), &answer(&["H100-80GB"]));
            let s = p.spec.as_ref().unwrap();
            assert!(s.node_selector.is_none());
            assert!(
                s.affinity
                    .as_ref()
                    .and_then(|a| a.node_affinity.as_ref())
                    .is_none()
            );
            assert_eq!(s.priority_class_name.as_deref(), Some("gpu-high"));
            let ann = annotations(&p);
            assert_eq!(ann[ANN_PLACEMENT], "kueue");
            assert_eq!(ann[ANN_RECOMMENDED_CLASS], "H100-80GB");
            assert!(!ann.contains_key(ANN_GPU_CLASS));
        }
    }

    #[test]
    fn an_unknown_or_empty_class_selector_names_no_class() {
        let b = Bronze::new();
        for value in ["", "B200"] {
            let mut a = answer(&[]);
            a.infeasible_reason =
                "the Pod's own constraints allow no GPU class of the catalog".into();
            let pod = gpu_pod(json!({"nodeSelector": {KEY: value}}), json!({}));
            let (m, p) = b.run(pod, &a, false, false);
            let ann = annotations(&p);
            assert!(!ann.contains_key(ANN_GPU_CLASS), "{value:?}: {ann:?}");
            assert!(ann[ANN_INFEASIBLE_REASON].contains("no GPU class"));
            // The tier is ANDed in: the Pod's own selector is kept, and it can only go to the tier's class.
            assert_eq!(
                p.spec.as_ref().unwrap().node_selector.as_ref().unwrap()[KEY],
                value
            );
            assert_eq!(
                required_terms(&p)[0]["matchExpressions"][0]["values"],
                json!(["L4-24GB"])
            );
            assert!(!m.warnings.is_empty());
        }
    }
}
