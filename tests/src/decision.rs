//! Assertions on an admission decision, comparing a Pod before and after admission (the patched Pod in
//! the corpus tier, the STORED Pod in the real-cluster tier).
//!
//! - [`check_preserved`]: nothing the user wrote is lost or changed (containers, labels, annotations,
//!   nodeSelector entries, tolerations, affinity terms, priorityClassName);
//! - [`check_decision`]: a mutated Pod carries a coherent decision for its tier against the scorer's policy
//!   (annotations together, class in the catalog, allowed for the tier, right vendor, enough memory, pinned
//!   via nodeSelector or required node affinity, GPU toleration present once, priority = the bucket of
//!   the score).
//!
//! Both return every violation found (empty = fine), so a test can report all of them at once.

use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_policy::Bucket;
use gpu_admission_policy::GpuClass;
use serde_json::Value;

use crate::gpu::{annotation, array_at, gpu_ask, pinned_classes, tolerations};
use crate::names::*;

/// What a mutated Pod says was decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The GPU class pinned by the webhook (None when infeasible or the Pod kept its own).
    pub class: Option<String>,
    pub priority_score: Option<f64>,
    pub priority_class: Option<String>,
    pub priority: Option<i64>,
    pub infeasible_reason: Option<String>,
}

fn obj_entries(v: &Value, pointer: &str) -> Vec<(String, Value)> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn subset(before: &[&Value], after: &[&Value]) -> Vec<String> {
    before
        .iter()
        .filter(|b| !after.contains(b))
        .map(|b| b.to_string())
        .collect()
}

/// `before` is contained in `after`: same scalars, same array lengths, object keys of `before` all present
/// (an apiserver adds defaults such as `imagePullPolicy` or `terminationMessagePath`, never removes).
pub fn json_subset(before: &Value, after: &Value, path: &str) -> Result<(), String> {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => json_subset(bv, av, &p)?,
                    None if bv.is_null() => {}
                    None => return Err(format!("{p} removed (was {bv})")),
                }
            }
            Ok(())
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                json_subset(bv, av, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (b, a) if b == a => Ok(()),
        (b, a) => Err(format!("{path} changed from {b} to {a}")),
    }
}

/// Everything present in `before` is still present, with the same value, in `after`.
pub fn check_preserved(before: &Value, after: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    for list in ["containers", "initContainers"] {
        let p = format!("/spec/{list}");
        if let Some(b) = before.pointer(&p).filter(|v| !v.is_null())
            && let Err(e) = json_subset(
                b,
                after.pointer(&p).unwrap_or(&Value::Null),
                &format!("spec.{list}"),
            )
        {
            errs.push(e);
        }
    }
    for (what, ptr) in [
        ("label", "/metadata/labels"),
        ("annotation", "/metadata/annotations"),
        ("nodeSelector entry", "/spec/nodeSelector"),
    ] {
        for (k, v) in obj_entries(before, ptr) {
            let now = after.pointer(ptr).and_then(|m| m.get(&k));
            if now != Some(&v) {
                errs.push(format!("{what} {k}={v} became {now:?}"));
            }
        }
    }
    let lost = subset(&tolerations(before), &tolerations(after));
    if !lost.is_empty() {
        errs.push(format!("tolerations lost: {lost:?}"));
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        for when in [
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ] {
            let p = format!("/spec/affinity/{kind}/{when}");
            let lost = subset(&array_at(before, &p), &array_at(after, &p));
            if !lost.is_empty() {
                errs.push(format!("{kind}.{when} terms lost: {lost:?}"));
            }
        }
    }
    let p = "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution";
    let lost = subset(&array_at(before, p), &array_at(after, p));
    if !lost.is_empty() {
        errs.push(format!("preferred node affinity lost: {lost:?}"));
    }
    let p = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    let (bt, at) = (array_at(before, p), array_at(after, p));
    if !bt.is_empty() {
        if bt.len() != at.len() {
            errs.push(format!(
                "required node affinity has {} terms, had {}",
                at.len(),
                bt.len()
            ));
        }
        for (b, a) in bt.iter().zip(at.iter()) {
            for field in ["matchExpressions", "matchFields"] {
                let lost = subset(
                    &array_at(b, &format!("/{field}")),
                    &array_at(a, &format!("/{field}")),
                );
                if !lost.is_empty() {
                    errs.push(format!("required node affinity {field} lost: {lost:?}"));
                }
            }
        }
    }
    // spec.priority and preemptionPolicy are the user's only with a priorityClassName; without one they
    // hold the apiserver's resolved default (0), which the webhook must replace when it assigns a class.
    let had_pc = before
        .pointer("/spec/priorityClassName")
        .is_some_and(|v| !v.is_null());
    // The one exception: a priority above the tier's cap is lowered to the cap (`check_decision` checks the
    // new class is the cap); a lowered priority can never be an escalation.
    let lowered = matches!(
        (
            before.pointer("/spec/priority").and_then(Value::as_i64),
            after.pointer("/spec/priority").and_then(Value::as_i64),
        ),
        (Some(b), Some(a)) if a < b
    );
    let fields: &[&str] = if had_pc && lowered {
        &["schedulerName", "serviceAccountName"]
    } else if had_pc {
        &[
            "priorityClassName",
            "priority",
            "preemptionPolicy",
            "schedulerName",
            "serviceAccountName",
        ]
    } else {
        &["schedulerName", "serviceAccountName"]
    };
    for field in fields {
        let p = format!("/spec/{field}");
        if let Some(b) = before.pointer(&p).filter(|v| !v.is_null())
            && after.pointer(&p) != Some(b)
        {
            errs.push(format!("spec.{field} {b} became {:?}", after.pointer(&p)));
        }
    }
    errs
}

/// Memory (GiB) the Pod declares it needs through our or the seed annotations.
pub fn declared_memory_gib(pod: &Value) -> Option<f64> {
    [ANN_GPU_MEM, ANN_GPU_MEM_SEED]
        .iter()
        .find_map(|k| annotation(pod, k).and_then(|v| v.trim().parse::<f64>().ok()))
}

fn looks_like_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't')
        && b[13] == b':'
        && (s.ends_with('Z')
            || s.ends_with('z')
            || b[b.len() - 6] == b'+'
            || b[b.len() - 6] == b'-')
}

/// Whether a toleration tolerates a `key` taint of any effect.
fn tolerates(t: &Value, key: &str) -> bool {
    let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
    match t
        .get("key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
    {
        None => op == "Exists",
        Some(k) => k == key,
    }
}

/// The decision read from `after`, and every inconsistency with the policy for a Pod in `tier`.
/// `before` is the Pod as submitted (for what it already pinned). Call only for a mutated Pod.
pub fn check_decision(
    before: &Value,
    after: &Value,
    tier: &str,
    policy: &PolicySnapshot,
) -> (Decision, Vec<String>) {
    let mut errs = Vec::new();
    let mut d = Decision::default();
    // Written together; an infeasible decision has no class, so its gpu-class annotation may be absent.
    let infeasible = annotation(after, ANN_INFEASIBLE).is_some();
    let placement = annotation(after, ANN_PLACEMENT).unwrap_or("");
    // Placed by someone else: no class is named (Kueue's Pods get a recommendation instead).
    let placed_elsewhere = matches!(placement, "node-name" | "kueue");
    let missing: Vec<&str> = DECISION_ANNOTATIONS
        .iter()
        .copied()
        .filter(|k| {
            annotation(after, k).is_none()
                && !((infeasible || placed_elsewhere) && *k == ANN_GPU_CLASS)
        })
        .collect();
    if !missing.is_empty() {
        errs.push(format!(
            "decision annotations must be written together, missing {missing:?}"
        ));
    }
    match annotation(after, ANN_PRIORITY_SCORE).map(|s| s.parse::<f64>()) {
        Some(Ok(s)) if (0.0..=100.0).contains(&s) => d.priority_score = Some(s),
        other => errs.push(format!(
            "{ANN_PRIORITY_SCORE} must be a number in 0-100, got {other:?}"
        )),
    }
    if let Some(v) = annotation(after, ANN_POLICY_VERSION)
        && v != policy.version
    {
        errs.push(format!(
            "{ANN_POLICY_VERSION}={v}, the scorer's policy is {}",
            policy.version
        ));
    }
    if let Some(v) = annotation(after, ANN_DECIDED_AT)
        && !looks_like_rfc3339(v)
    {
        errs.push(format!("{ANN_DECIDED_AT}={v} is not RFC 3339"));
    }
    d.infeasible_reason = annotation(after, ANN_INFEASIBLE).map(str::to_string);

    // Priority: set by us only when the Pod had none, then with the class's value and matching the score.
    d.priority_class = after
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .map(str::to_string);
    d.priority = after.pointer("/spec/priority").and_then(Value::as_i64);
    let had_pc = before
        .pointer("/spec/priorityClassName")
        .is_some_and(|v| !v.is_null());
    let cap_of_tier = || tier_of(policy, tier).and_then(|t| t.max_priority_class.clone());
    let before_pc = before
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str);
    if had_pc && before_pc != d.priority_class.as_deref() {
        // A Pod's own class is only ever replaced by the tier's cap (it was above it).
        let cap = cap_of_tier();
        if cap.is_none() || d.priority_class != cap {
            errs.push(format!(
                "the Pod's own priorityClassName {before_pc:?} became {:?}, not the tier's cap {cap:?}",
                d.priority_class
            ));
        }
    }
    if !had_pc {
        match &d.priority_class {
            None => errs.push("no priorityClassName assigned".into()),
            Some(name) => {
                let bucket = buckets(policy).iter().find(|b| &b.name == name);
                match bucket {
                    None => errs.push(format!(
                        "priorityClassName {name} is no bucket of the policy"
                    )),
                    Some(pc) => {
                        if d.priority != Some(pc.value as i64) {
                            errs.push(format!(
                                "spec.priority {:?} must be {name}'s value {}",
                                d.priority, pc.value
                            ));
                        }
                        if let Some(pp) = after
                            .pointer("/spec/preemptionPolicy")
                            .and_then(Value::as_str)
                            && !pc.preemption_policy.is_empty()
                            && pp != pc.preemption_policy
                        {
                            errs.push(format!(
                                "preemptionPolicy {pp}, {name} says {}",
                                pc.preemption_policy
                            ));
                        }
                    }
                }
                if let Some(score) = d.priority_score {
                    let bucket_of =
                        |pc_name: &str| buckets(policy).iter().find(|b| b.name == pc_name).cloned();
                    let by_score = buckets(policy)
                        .iter()
                        .filter(|b| score >= b.min_score)
                        .max_by(|a, b| a.min_score.total_cmp(&b.min_score))
                        .cloned();
                    // Capped at the tier's maxPriorityClass.
                    let cap = tier_of(policy, tier)
                        .and_then(|t| t.max_priority_class.as_deref())
                        .and_then(bucket_of);
                    let expected = match (by_score, cap) {
                        (Some(b), Some(c)) if b.value > c.value => Some(c.name),
                        (b, _) => b.map(|b| b.name),
                    };
                    if expected.as_deref() != Some(name.as_str()) {
                        errs.push(format!(
                            "score {score} maps to {expected:?}, got priorityClassName {name}"
                        ));
                    }
                }
            }
        }
    }

    // The class.
    let class_ann = annotation(after, ANN_GPU_CLASS).unwrap_or("");
    let node_placement = |pod: &Value| {
        (
            pod.pointer("/spec/nodeSelector").cloned(),
            pod.pointer(
                "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
            )
            .cloned(),
        )
    };
    let placement_kept = node_placement(before) == node_placement(after);
    if placed_elsewhere {
        if !placement_kept {
            errs.push(format!(
                "placed by {placement}, yet its nodeSelector / required node affinity changed"
            ));
        }
        if !class_ann.is_empty() {
            errs.push(format!(
                "placed by {placement}, yet {ANN_GPU_CLASS}={class_ann} names a class"
            ));
        }
        let expected = if before
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        {
            "node-name"
        } else {
            "kueue"
        };
        if placement != expected {
            errs.push(format!("{ANN_PLACEMENT}={placement}, expected {expected}"));
        }
        return (d, errs);
    }
    if let Some(own) = placement.strip_prefix("pod: ")
        && pinned_classes(before, CLASS_LABEL).is_empty()
    {
        // The Pod's own constraint on another identifying label (GPU Feature Discovery, cloud, HAMi) is
        // kept as it is, and a class named must carry every such label the Pod selects.
        if !placement_kept {
            errs.push(format!(
                "the Pod's own constraint ({own}) was kept, yet its placement changed"
            ));
        }
        if let Some(class) = policy.catalog().iter().find(|c| c.name == class_ann) {
            d.class = Some(class.name.clone());
            let carries = |k: &str, v: &str| {
                (class.node_label_key == k && class.node_label_value == v)
                    || policy.class_labels.iter().any(|(name, labels)| {
                        *name == class.name && labels.iter().any(|(lk, lv)| lk == k && lv == v)
                    })
            };
            let identifying = |k: &str| {
                policy.catalog().iter().any(|c| c.node_label_key == k)
                    || (policy.class_labels.iter())
                        .any(|(_, labels)| labels.iter().any(|(lk, _)| lk == k))
            };
            for (k, v) in obj_entries(before, "/spec/nodeSelector") {
                if identifying(&k) && !carries(&k, v.as_str().unwrap_or("")) {
                    errs.push(format!(
                        "{ANN_GPU_CLASS}={} but the Pod selects {k}={v}, which that class does not carry",
                        class.name
                    ));
                }
            }
            check_class(class, before, tier, policy, &mut errs);
        } else if !class_ann.is_empty() {
            errs.push(format!(
                "{ANN_GPU_CLASS}={class_ann:?} is not in the catalog"
            ));
        }
        return (d, errs);
    }
    let catalog: Vec<&GpuClass> = policy.catalog().iter().collect();
    let label_key_of = |name: &str| {
        catalog
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.node_label_key.clone())
            .unwrap_or_else(|| CLASS_LABEL.to_string())
    };
    let tier_classes: Vec<&String> = allowed_classes(policy, tier).unwrap_or_default();
    let before_pinned = pinned_classes(before, CLASS_LABEL);
    if !before_pinned.is_empty() {
        let after_pinned = pinned_classes(after, CLASS_LABEL);
        let inside_tier = before_pinned.iter().all(|c| tier_classes.contains(&c));
        if inside_tier && after_pinned != before_pinned {
            errs.push(format!(
                "the Pod pinned {before_pinned:?} itself, now pinned {after_pinned:?}"
            ));
        }
        // A pin outside the tier is kept (validation answers it) and the tier's classes are ANDed in (a new
        // nodeSelector entry or new `In` expressions), so the Pod can never run outside its tier.
        let added = added_class_constraint(before, after);
        if !inside_tier
            && (before_pinned.iter().any(|c| !after_pinned.contains(c))
                || added.is_empty()
                || added.iter().any(|c| !tier_classes.contains(&c)))
        {
            errs.push(format!(
                "the Pod pinned {before_pinned:?} outside tier {tier} ({tier_classes:?}), now pinned {after_pinned:?}"
            ));
        }
        return (d, errs);
    }
    if d.infeasible_reason.is_some() {
        if let Some(c) = catalog.iter().find(|c| c.name == class_ann) {
            errs.push(format!(
                "infeasible-reason written but class {} chosen",
                c.name
            ));
        }
        // No class fits, yet the Pod stays inside its tier: pinned to the tier's classes only.
        let pinned = pinned_classes(after, CLASS_LABEL);
        let allowed = &tier_classes;
        if pinned.is_empty() || pinned.iter().any(|p| !allowed.contains(&p)) {
            errs.push(format!(
                "infeasible-reason written but the Pod is pinned to {pinned:?}, not to tier {tier}'s classes {allowed:?}"
            ));
        }
        return (d, errs);
    }
    let Some(class) = catalog.iter().find(|c| c.name == class_ann) else {
        errs.push(format!(
            "{ANN_GPU_CLASS}={class_ann:?} is not in the catalog and no infeasible-reason"
        ));
        return (d, errs);
    };
    d.class = Some(class.name.clone());
    let pinned = pinned_classes(after, &label_key_of(&class.name));
    if pinned.first().map(String::as_str) != Some(class.node_label_value.as_str()) {
        errs.push(format!(
            "class {} must be pinned first by {}={} (nodeSelector or required affinity), pinned {pinned:?}",
            class.name, class.node_label_key, class.node_label_value
        ));
    }
    for p in &pinned {
        let Some(c) = catalog.iter().find(|c| &c.node_label_value == p) else {
            errs.push(format!("pinned class value {p} is not in the catalog"));
            continue;
        };
        check_class(c, before, tier, policy, &mut errs);
    }
    if let Some(taint) = class.taint_key.as_deref()
        && !tolerations(after).iter().any(|t| tolerates(t, taint))
    {
        errs.push(format!("no toleration for the class's taint {taint}"));
    }
    let tols = tolerations(after);
    for (i, t) in tols.iter().enumerate() {
        if tols[..i].contains(t) {
            errs.push(format!("duplicated toleration {t}"));
        }
    }
    (d, errs)
}

/// The class values of the constraints admission added on the class label: a new `nodeSelector` entry and
/// new `In` expressions of the required node affinity.
fn added_class_constraint(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let selected = |p: &Value| {
        p.pointer("/spec/nodeSelector")
            .and_then(|s| s.get(CLASS_LABEL))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if selected(before).is_none()
        && let Some(v) = selected(after)
    {
        out.push(v);
    }
    let terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    let (bt, at) = (array_at(before, terms), array_at(after, terms));
    for (i, term) in at.iter().enumerate() {
        let old = bt
            .get(i)
            .map(|t| array_at(t, "/matchExpressions"))
            .unwrap_or_default();
        for e in array_at(term, "/matchExpressions") {
            if !old.contains(&e) && e["key"] == CLASS_LABEL && e["operator"] == "In" {
                out.extend(
                    array_at(e, "/values")
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string)),
                );
            }
        }
    }
    out
}

/// Tier `tier` of the policy, if it has one of that name.
fn tier_of<'p>(policy: &'p PolicySnapshot, tier: &str) -> Option<&'p gpu_admission_policy::Tier> {
    policy.tiers().iter().find(|t| t.name == tier)
}

/// The catalog names tier `tier` allows (`None`: no such tier).
fn allowed_classes<'p>(policy: &'p PolicySnapshot, tier: &str) -> Option<Vec<&'p String>> {
    let t = tier_of(policy, tier)?;
    Some(
        (policy.catalog().iter().zip(&t.allowed))
            .filter(|(_, allowed)| **allowed)
            .map(|(c, _)| &c.name)
            .collect(),
    )
}

/// The policy's priority buckets.
fn buckets(policy: &PolicySnapshot) -> &[Bucket] {
    policy.policy.as_ref().map_or(&[], |p| &p.priority.buckets)
}

fn check_class(
    c: &GpuClass,
    before: &Value,
    tier: &str,
    policy: &PolicySnapshot,
    errs: &mut Vec<String>,
) {
    if let Some(allowed) = allowed_classes(policy, tier)
        && !allowed.contains(&&c.name)
    {
        errs.push(format!(
            "class {} is not allowed for tier {tier} ({allowed:?})",
            c.name
        ));
    }
    if let Some(ask) = gpu_ask(before)
        && c.vendor.as_str() != ask.vendor
    {
        errs.push(format!(
            "class {} is {}, the Pod asks {} GPUs",
            c.name,
            c.vendor.as_str(),
            ask.vendor
        ));
    }
    if let Some(need) = declared_memory_gib(before)
        && c.memory_gib < need
    {
        errs.push(format!(
            "class {} has {} GiB, the Pod needs {need} GiB",
            c.name, c.memory_gib
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_lost_terms_and_changed_values() {
        let before = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [],
            "nodeSelector": {"k": "v"}, "tolerations": [{"key": "t", "operator": "Exists"}]}});
        assert!(check_preserved(&before, &before).is_empty());
        let after = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"containers": [],
            "nodeSelector": {"k": "w"}, "tolerations": []}});
        assert_eq!(check_preserved(&before, &after).len(), 3);
    }

    #[test]
    fn rfc3339() {
        assert!(looks_like_rfc3339("2026-11-22T03:04:05Z"));
        assert!(looks_like_rfc3339("2026-11-22T03:04:05.123+01:00"));
        assert!(!looks_like_rfc3339("yesterday"));
    }
}

/// The result of [`admit_and_verify`].
#[derive(Debug, Clone)]
pub struct Verified {
    pub outcome: crate::AdmissionOutcome,
    /// The Pod as sent (namespace set).
    pub before: Value,
    /// The Pod after the patch.
    pub after: Value,
    /// The decision, when the Pod was mutated.
    pub decision: Option<Decision>,
    /// Every violated expectation (empty = fine).
    pub errors: Vec<String>,
}

/// Acts as the apiserver for one CREATE of `pod` in `namespace` and checks everything the corpus tier
/// promises: the answer obeys the apiserver's rules (else `Err`), the Pod is allowed, the patch applies and
/// (if the Pod parsed before) the result parses as a Pod, nothing is lost, a GPU Pod in a tier namespace
/// (`tier` = Some) is mutated with a coherent decision while any other Pod is not, and a second pass over
/// the patched Pod yields no patch.
pub async fn admit_and_verify(
    webhook: &crate::Webhook,
    pod: &Value,
    namespace: &str,
    tier: Option<&str>,
    policy: &PolicySnapshot,
) -> anyhow::Result<Verified> {
    use k8s_openapi::api::core::v1::Pod;
    let review = crate::review::pod_review(pod, namespace, crate::Operation::Create);
    let before = review["request"]["object"].clone();
    let outcome = webhook.review(&review).await?;
    let mut errors = Vec::new();
    if !outcome.allowed {
        errors.push(format!("denied: {}", outcome.raw["response"]));
    }
    let after = match outcome.apply(&before) {
        Ok(a) => a,
        Err(e) => {
            errors.push(format!("{e:#}"));
            return Ok(Verified {
                outcome,
                before: before.clone(),
                after: before,
                decision: None,
                errors,
            });
        }
    };
    if serde_json::from_value::<Pod>(before.clone()).is_ok()
        && let Err(e) = serde_json::from_value::<Pod>(after.clone())
    {
        errors.push(format!(
            "the patched Pod no longer parses as a Pod: {e}; patch {}",
            outcome.patch_string()
        ));
    }
    errors.extend(check_preserved(&before, &after));
    let expect_mutation = tier.is_some()
        && gpu_ask(&before).is_some()
        && annotation(&before, ANN_DECIDED_AT).is_none();
    let mut decision = None;
    match (&outcome.patch, expect_mutation) {
        (None, true) => errors.push(format!(
            "a GPU Pod in tier {tier:?} was not mutated; warnings {:?}",
            outcome.warnings
        )),
        (Some(_), false) => errors.push(format!("unexpected patch {}", outcome.patch_string())),
        (Some(_), true) => {
            let (d, errs) = check_decision(&before, &after, tier.unwrap_or(""), policy);
            errors.extend(
                errs.into_iter()
                    .map(|e| format!("{e}; patch {}", outcome.patch_string())),
            );
            decision = Some(d);
        }
        (None, false) => {}
    }
    if outcome.patch.is_some() {
        let again = webhook.admit_pod(&after, namespace).await?;
        if again.patch.is_some() {
            errors.push(format!(
                "second pass over the patched Pod patched again: {}",
                again.patch_string()
            ));
        }
    }
    Ok(Verified {
        outcome,
        before,
        after,
        decision,
        errors,
    })
}
