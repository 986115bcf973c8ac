//! What the decision is, before any operation is written: the target classes, whether the Pod's own
//! placement is kept, the PriorityClass to set.

use std::borrow::Cow;

use gpu_admission_policy::GpuClass;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

use super::{PatchInput, tier_classes};
use crate::names::decision::{ANN_DECIDED_AT, ANN_FLOOR_PLACED};
use crate::placement::{self, ClassLabels, OwnConstraint, PlacedBy};
use crate::priority_class::{PriorityClassFacts, PriorityClassLookup};
use crate::tier_bound;

/// What the decision is, before any operation is written.
pub(super) struct Plan<'a> {
    /// Classes the Pod is constrained to when [`Self::place`]; the best first, one label key.
    pub(super) targets: Vec<&'a GpuClass>,
    /// `false` when the Pod's own placement is kept (inside the tier, an admin's pin, or placed by someone else).
    pub(super) place: bool,
    /// What the Pod's own constraints allow, when it states any.
    pub(super) own: Option<OwnConstraint>,
    /// `spec.nodeName` or Kueue places the Pod.
    pub(super) placed_by: Option<PlacedBy>,
    /// The Pod's own constraints allow classes outside the tier, or no class (not an admin's), for the warning.
    pub(super) pins_outside: Vec<String>,
    /// The Pod's own constraints leave it some class of the tier (it can schedule once bound).
    pub(super) own_meets_tier: bool,
    /// The PriorityClass to set (replacing the Pod's own when it is above the cap), if any.
    pub(super) priority: Option<PriorityClassFacts>,
    /// The Pod's own class was above the cap: (own, cap).
    pub(super) capped_own: Option<(String, String)>,
    pub(super) label_keys: Vec<&'a str>,
}

/// The class labels a decision reads: the policy's (borrowed), or the catalog's class labels.
pub(super) fn effective_class_labels<'i>(input: &PatchInput<'i>) -> Cow<'i, ClassLabels> {
    if !input.class_labels.is_empty() {
        return Cow::Borrowed(input.class_labels);
    }
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for c in input.catalog {
        if !out.iter().any(|(n, _)| n == &c.name) {
            out.push((
                c.name.clone(),
                vec![(c.node_label_key.clone(), c.node_label_value.clone())],
            ));
        }
    }
    Cow::Owned(out)
}

/// The Pod's own PriorityClass when it is a real choice (not empty, not the cluster's global default).
pub(super) fn own_priority_class<'p>(
    spec: &'p PodSpec,
    pcs: &dyn PriorityClassLookup,
) -> Option<&'p str> {
    let own = spec
        .priority_class_name
        .as_deref()
        .filter(|c| !c.is_empty())?;
    (!pcs.priority_class(own).is_some_and(|f| f.global_default)).then_some(own)
}

impl<'a> Plan<'a> {
    pub(super) fn new(
        input: &'a PatchInput<'a>,
        spec: &PodSpec,
        pcs: &dyn PriorityClassLookup,
    ) -> Self {
        let mut label_keys: Vec<&str> = input.class_label_keys.iter().map(String::as_str).collect();
        for c in input.catalog {
            if !label_keys.contains(&c.node_label_key.as_str()) {
                label_keys.push(c.node_label_key.as_str());
            }
        }

        // Placement.
        let class_labels = effective_class_labels(input);
        let own = placement::own_constraint(input.pod, &class_labels);
        let placed_by = PlacedBy::of(input.pod);
        let admin_pin = input.admin && own.is_some();
        // A non-admin's Pod of a tier that restricts classes keeps its own placement only when it already
        // holds the tier invariant (a positive class constraint inside the tier on every way of scheduling):
        // nothing else it says (nodeName, Kueue, HAMi, other labels, negative operators) replaces ours.
        let bound = input
            .tier
            .filter(|t| !input.admin && tier_bound::restricts(t, input.catalog))
            .map(|t| tier_bound::class_bound(spec, t, input.catalog).is_ok());
        // Otherwise (an admin, a tier of every class, rules unknown): everything the Pod allows is in the
        // tier, or someone else places it.
        let inside = own.as_ref().is_some_and(|o| match input.tier {
            None => true,
            Some(t) => !o.allowed.is_empty() && o.allowed.iter().all(|c| t.allows(c)),
        });
        // A class constraint the placing floor added is not the Pod's choice: ours narrows it (see
        // `crate::render::floor::render_placing`), once; decided, the Pod keeps what it then has.
        let floor_only = placed_by_floor(input.pod) && !has_decision_record(input.pod);
        let keep = !floor_only
            && match bound {
                Some(bound) => bound,
                None => placed_by.is_some() || admin_pin || inside,
            };
        let own_meets_tier = match (input.tier, &own) {
            (Some(tier), Some(o)) => o.allowed.iter().any(|c| tier.allows(c)),
            _ => true,
        };
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
        let mut candidates: Vec<&GpuClass> = input
            .accepted()
            .filter(|c| input.tier.is_none_or(|t| t.allows(&c.name)))
            .collect();
        if candidates.is_empty()
            && let Some(tier) = input.tier
        {
            candidates = tier_classes(tier, input.catalog);
        }
        // One label key can be expressed as one `In`: the classes sharing the best class's key.
        let targets: Vec<&GpuClass> = match candidates.first() {
            Some(best) => {
                let key = best.node_label_key.as_str();
                candidates
                    .iter()
                    .copied()
                    .filter(|c| c.node_label_key == key)
                    .collect()
            }
            None => Vec::new(),
        };

        let (priority, capped_own) = priority(input, spec, pcs);
        Plan {
            place: !keep && !targets.is_empty(),
            targets,
            own,
            placed_by,
            pins_outside,
            own_meets_tier,
            priority,
            capped_own,
            label_keys,
        }
    }

    /// Nothing left to do: our record is there, the placement is kept and the priority is allowed.
    pub(super) fn settled(&self, input: &PatchInput<'_>) -> bool {
        // `priority` is only set for a Pod without a class of its own, or one above the cap.
        has_decision_record(input.pod) && !self.place && self.priority.is_none()
    }
}

/// Whether the Pod carries our decision record (necessary for [`is_settled`], never sufficient: anyone who
/// can create a Pod can write the annotation).
pub(super) fn has_decision_record(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_DECIDED_AT))
}

/// The placing floor (the apiserver's MutatingAdmissionPolicy) put the Pod on its tier's classes.
fn placed_by_floor(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_FLOOR_PLACED))
}

/// The PriorityClass to set, and the Pod's own class when it was beyond the cap: (own, cap). The cap's value
/// is the policy's; the class set is the cluster's of that name, and when the cluster lacks it nothing above
/// the cap is assigned (rather than an uncapped class). Whether the Pod's own class is beyond the cap is
/// [`crate::policy::TierRules::priority_beyond_cap`], the rule every Pod is held to.
fn priority(
    input: &PatchInput<'_>,
    spec: &PodSpec,
    pcs: &dyn PriorityClassLookup,
) -> (Option<PriorityClassFacts>, Option<(String, String)>) {
    let answer = input.answer;
    let cap_value = input
        .tier
        .and_then(|t| t.max_priority_class)
        .map(|c| c.value);
    let cap_in_cluster = input
        .tier
        .and_then(|t| t.max_priority_class)
        .and_then(|c| pcs.priority_class(&c.name));
    let above_cap = |v: i32| cap_value.is_some_and(|cap| v > cap);
    let beyond = input
        .tier
        .filter(|_| !input.admin)
        .and_then(|t| t.priority_beyond_cap(spec, pcs));
    let capped = || match (&cap_in_cluster, &beyond) {
        (Some(cap), Some(b)) => (Some(cap.clone()), Some((b.class.clone(), cap.name.clone()))),
        _ => (None, None),
    };
    match own_priority_class(spec, pcs) {
        Some(_) => capped(),
        // The cluster's global default, kept when the scorer did not answer: still no exemption.
        None if input.fallback => capped(),
        None => {
            let priority = answer
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
                });
            (priority, None)
        }
    }
}
