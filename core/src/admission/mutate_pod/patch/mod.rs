//! THE mutating decision as a pure function: Pod + tier rules + scorer answer + PriorityClass facts + now →
//! RFC 6902 patch (+ admission warnings). Mutation never rejects; it only narrows.
//!
//! Rules (each one is a test in `tests.rs`):
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
//! Parts: `plan` (what to do), `record` (annotations, label), `constrain` (priority, placement, toleration,
//! anti-affinity), `ops` (JSON Patch operations), `shapes` (the objects added). Operations are written straight
//! into the answer's [`Patch`] text, paths from tokens (`~` → `~0`, `/` → `~1`); a missing parent is added
//! whole (with the new members inside) before anything is added under it; arrays are appended with `/-`.

mod constrain;
mod ops;
mod paths;
mod plan;
mod record;
mod shapes;
#[cfg(test)]
mod tests;

use gpu_admission_policy::GpuClass;
use gpu_admission_proto::scorer::v1::ScoreResponse;
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use time::OffsetDateTime;

use crate::placement::{self, ClassLabels};
use crate::policy::TierRules;
use crate::priority_class::PriorityClassLookup;
use crate::review::Patch;
pub(crate) use constrain::set_priority_class;
use constrain::{add_new_affinity, avoid_neighbours, place, set_priority, tolerate};
use plan::{Plan, has_decision_record};
use record::{label_job_type, record_decision};
use shapes::{Empty, NewAffinity};

/// At most this many alternatives are recorded.
pub const MAX_ALTERNATIVES: usize = 5;

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
    /// The policy's catalog: the classes the answer accepts are read from it (the answer names them), and it
    /// names the classes a Pod selects and places on the tier's classes.
    pub catalog: &'a [GpuClass],
    /// The namespace's tier rules; `None` before the policy is known (then only the answer is applied).
    pub tier: Option<&'a TierRules<'a>>,
    /// RBAC exempts the requester from the tier: their own class pin and PriorityClass are kept.
    pub admin: bool,
    /// The answer is the tier's default placement (the scorer did not answer): no score, no priority.
    pub fallback: bool,
}

impl<'a> PatchInput<'a> {
    /// An input with no tier rules, not an admin and not a fallback.
    pub fn new(
        pod: &'a Pod,
        job_type: Option<&'a str>,
        answer: &'a ScoreResponse,
        catalog: &'a [GpuClass],
        now: OffsetDateTime,
    ) -> Self {
        Self {
            pod,
            job_type,
            answer,
            class_label_keys: &[],
            class_labels: &[],
            now,
            catalog,
            tier: None,
            admin: false,
            fallback: false,
        }
    }
}

impl<'a> PatchInput<'a> {
    /// The classes the answer accepts, best first, as the catalog states them (a validated answer names only
    /// catalog classes).
    pub(super) fn accepted(&self) -> impl Iterator<Item = &'a GpuClass> + 'a {
        let catalog = self.catalog;
        self.answer
            .accepted_classes
            .iter()
            .filter_map(move |a| catalog.iter().find(|c| c.name == a.name))
    }
}

/// The patch and the warnings that explain it to the user.
#[derive(Debug, Default)]
pub struct Mutation {
    pub ops: Patch,
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
        accepted_classes: tier_classes(tier, catalog)
            .into_iter()
            .map(Into::into)
            .collect(),
        policy_version: policy_version.to_string(),
        ..Default::default()
    }
}

/// The tier's classes from the catalog, the preferred class first, then catalog order.
fn tier_classes<'c>(tier: &TierRules<'_>, catalog: &'c [GpuClass]) -> Vec<&'c GpuClass> {
    let mut out: Vec<&GpuClass> = catalog.iter().filter(|c| tier.allows(&c.name)).collect();
    if let Some(p) = tier.preferred
        && let Some(i) = out.iter().position(|c| c.name == p)
    {
        let preferred = out.remove(i);
        out.insert(0, preferred);
    }
    out
}

/// The GPU class the Pod already names itself: the first `nodeSelector` entry or required node-affinity `In`
/// value on one of `label_keys`. Returns (key, value).
pub fn pinned_class<'p>(pod: &'p Pod, label_keys: &[&str]) -> Option<(&'p str, &'p str)> {
    placement::named_classes(pod.spec.as_ref()?, label_keys)
        .first()
        .copied()
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

/// The JSON Patch for one admitted Pod, as operations (for tests and tools that apply it; see [`decide_pod`]
/// for the warnings too).
pub fn build_patch(
    input: &PatchInput<'_>,
    priority_classes: &dyn PriorityClassLookup,
) -> Vec<PatchOperation> {
    decide_pod(input, priority_classes).ops.operations()
}

/// The mutation of one admitted Pod: the patch in named steps, and the warnings for the user.
pub fn decide_pod(input: &PatchInput<'_>, pcs: &dyn PriorityClassLookup) -> Mutation {
    let default_spec = PodSpec::default();
    let spec = input.pod.spec.as_ref().unwrap_or(&default_spec);
    let plan = Plan::new(input, spec, pcs);
    if plan.settled(input) {
        return Mutation::default();
    }
    let mut patch = Patch::default();
    // An empty typed `metadata` may be `null` or missing in the JSON: create it before adding under it (an
    // `add` of an existing member replaces it, and there is nothing in it to keep).
    if input.pod.metadata == ObjectMeta::default() {
        patch.add(paths::METADATA, &Empty {});
    }
    let annotations_left_out = record_decision(&mut patch, input, &plan);
    label_job_type(&mut patch, input);
    if input.pod.spec.is_none() {
        patch.add(paths::SPEC, &Empty {});
    }
    set_priority(&mut patch, &plan);
    let mut new_affinity = NewAffinity::default();
    if plan.place {
        place(&mut patch, spec, &plan, &mut new_affinity);
    }
    if plan.place {
        tolerate(&mut patch, spec, plan.targets.iter().copied());
    } else {
        tolerate(&mut patch, spec, input.accepted());
    }
    avoid_neighbours(&mut patch, spec, input.answer, &mut new_affinity);
    add_new_affinity(&mut patch, spec, new_affinity);
    Mutation {
        ops: patch,
        warnings: warnings(input, &plan)
            .into_iter()
            .chain(annotations_left_out)
            .collect(),
    }
}

/// Why the Pod may not run where it asked, or may never run.
fn warnings(input: &PatchInput<'_>, plan: &Plan<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let tier = input.tier.map_or("", |t| t.tier);
    let targets: Vec<&str> = plan.targets.iter().map(|c| c.name.as_str()).collect();
    if !plan.pins_outside.is_empty() && plan.place {
        let outcome = if plan.own_meets_tier {
            "it runs only there"
        } else {
            "it cannot schedule while it keeps that selector"
        };
        out.push(format!(
            "gpu-admission: GPU class {} is outside tier {tier}; the Pod is constrained to the tier's classes ({}): {outcome}",
            plan.pins_outside.join(", "),
            targets.join(", ")
        ));
    }
    if input.answer.accepted_classes.is_empty() && !input.fallback && plan.place {
        out.push(no_fit_warning(
            &input.answer.infeasible_reason,
            tier,
            &targets.join(", "),
        ));
    }
    if let Some((own, cap)) = &plan.capped_own {
        out.push(format!(
            "gpu-admission: PriorityClass {own} is above the cap of tier {tier}; lowered to {cap}"
        ));
    }
    out
}

/// The warning for a Pod no class of its tier fits, whole within the apiserver's warning length: the scorer's
/// reason as it gave it (it names the tier and each class's shortfall), cut only when it would not fit, then
/// pointing to the annotation that holds it whole.
fn no_fit_warning(reason: &str, tier: &str, targets: &str) -> String {
    let fallback = format!("no feasible GPU class for tier {tier}");
    let reason = if reason.is_empty() { &fallback } else { reason };
    let tail = format!("; held to tier {tier}'s classes ({targets}), the Pod may never schedule");
    let whole = format!("gpu-admission: {reason}{tail}");
    if whole.chars().count() <= crate::review::MAX_WARNING_CHARS {
        return whole;
    }
    let more = format!(
        "… (whole in annotation {})",
        crate::names::decision::ANN_INFEASIBLE_REASON
    );
    let room = crate::review::MAX_WARNING_CHARS
        .saturating_sub("gpu-admission: ".len() + tail.chars().count() + more.chars().count());
    let cut: String = reason.chars().take(room).collect();
    format!("gpu-admission: {cut}{more}{tail}")
}
