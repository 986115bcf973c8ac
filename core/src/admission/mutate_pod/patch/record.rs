//! The decision record: `metadata.annotations` (score, class, alternatives, placement, time, policy version)
//! and the job-type label other Pods' anti-affinity finds this one by.

use std::collections::BTreeMap;
use std::fmt::Write;

use gpu_admission_proto::scorer::v1::ScoreResponse;
use time::format_description::well_known::Rfc3339;

use super::MAX_ALTERNATIVES;
use super::PatchInput;
use super::ops::add_to_map;
use super::paths;
use super::plan::Plan;
use crate::names::decision::*;
use crate::placement::PlacedBy;
use crate::pod::features::is_label_value;
use crate::review::Patch;

/// `score` to 2 decimals without trailing zeros, e.g. `73.5`, `0.25`, `100`: the text of `format!("{score:.2}")`
/// trimmed. Rust rounds that to the nearest hundredth of the exact binary value, ties to even; this does the
/// same in integers (core::fmt's exact float formatting was a fifth of writing the decision record).
pub(super) fn score_text(score: f64) -> String {
    let Some(hundredths) = exact_hundredths(score) else {
        let s = format!("{score:.2}");
        return s.trim_end_matches('0').trim_end_matches('.').to_string();
    };
    let (whole, fraction) = (hundredths / 100, hundredths % 100);
    let mut text = String::with_capacity(24);
    write!(text, "{whole}").expect("writing to a String");
    if fraction != 0 {
        text.push('.');
        text.push(char::from(b'0' + (fraction / 10) as u8));
        if fraction % 10 != 0 {
            text.push(char::from(b'0' + (fraction % 10) as u8));
        }
    }
    text
}

/// `x × 100` rounded to the nearest integer, ties to even, computed on the exact binary value; `None` for
/// what it does not cover (negative, not finite, 2^40 or more), which is then formatted by core::fmt.
fn exact_hundredths(x: f64) -> Option<u64> {
    if !(x.is_finite() && x.is_sign_positive() && x < (1u64 << 40) as f64) {
        return None;
    }
    let bits = x.to_bits();
    let biased = (bits >> 52) & 0x7ff;
    let fraction = bits & ((1 << 52) - 1);
    // x = mantissa × 2^exponent
    let (mantissa, exponent) = if biased == 0 {
        (fraction, -1074i64)
    } else {
        (fraction | (1 << 52), biased as i64 - 1075)
    };
    let scaled = u128::from(mantissa) * 100;
    if exponent >= 0 {
        return u64::try_from(scaled << exponent).ok();
    }
    let shift = exponent.unsigned_abs();
    if shift >= 120 {
        return Some(0); // below 2^-60: far under half a hundredth
    }
    let quotient = scaled >> shift;
    let rest = scaled & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    let up = rest > half || (rest == half && quotient & 1 == 1);
    u64::try_from(quotient + u128::from(up)).ok()
}

/// The feasible candidates, best first, as `name=merit` (merit = lowest cost / its cost, 2 decimals).
pub(super) fn alternatives_text(answer: &ScoreResponse) -> String {
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
    let mut text = String::with_capacity(32 * MAX_ALTERNATIVES);
    for (i, (name, cost)) in feasible.iter().take(MAX_ALTERNATIVES).enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(name);
        text.push('=');
        text.push_str(&score_text(lowest / cost));
    }
    text
}

/// metadata.annotations: the decision record. The class named is one the Pod can run on: our placement's
/// best class, or the answer's best among what the Pod's own constraints allow; none for a Pod placed by
/// `spec.nodeName` (Kueue's Pods get it as a recommendation only). Returns a warning when some had to be left
/// out to keep the Pod inside the apiserver's annotation limit.
pub(super) fn record_decision(
    patch: &mut Patch,
    input: &PatchInput<'_>,
    plan: &Plan<'_>,
) -> Option<String> {
    let answer = input.answer;
    let meta = &input.pod.metadata;
    let now = input
        .now
        .replace_nanosecond(0)
        .unwrap_or(input.now)
        .format(&Rfc3339)
        .unwrap_or_default();
    let mut annotations: Vec<(&str, String)> = Vec::with_capacity(GIVE_WAY_ORDER.len());
    if input.fallback {
        annotations.push((ANN_FALLBACK, "tier-default".into()));
    } else {
        annotations.push((ANN_PRIORITY_SCORE, score_text(answer.priority_score)));
        annotations.push((ANN_EXPLORED, answer.explored.to_string()));
        let alternatives = alternatives_text(answer);
        if !alternatives.is_empty() {
            annotations.push((ANN_ALTERNATIVES, alternatives));
        }
        if !answer.state_digest.is_empty() {
            annotations.push((ANN_STATE_DIGEST, answer.state_digest.clone()));
        }
    }
    annotations.push((ANN_DECIDED_AT, now));
    annotations.push((ANN_POLICY_VERSION, answer.policy_version.clone()));
    let placement = match (plan.placed_by, &plan.own) {
        // Someone else places the Pod inside the tier bound we add.
        (Some(by), _) if plan.place => format!("{}+gpu-admission", by.as_str()),
        (Some(by), _) => by.as_str().to_string(),
        (None, _) if plan.place => "gpu-admission".to_string(),
        (None, Some(own)) => format!("pod: {}", own.sources.join(", ")),
        (None, None) => "none".to_string(),
    };
    annotations.push((ANN_PLACEMENT, placement));
    let best = answer.accepted_classes.first().filter(|c| {
        plan.own
            .as_ref()
            .is_none_or(|o| o.allowed.contains(&c.name))
    });
    // Someone else's placement, unless ours bounds it: then the class is ours to name.
    match (best, plan.placed_by.filter(|_| !plan.place)) {
        (Some(_), Some(PlacedBy::NodeName)) => {}
        (Some(best), Some(PlacedBy::Kueue)) => {
            annotations.push((ANN_RECOMMENDED_CLASS, best.name.clone()));
        }
        (Some(best), None) => annotations.push((ANN_GPU_CLASS, best.name.clone())),
        (None, _) => {
            let reason = if answer.infeasible_reason.is_empty() {
                "no feasible GPU class"
            } else {
                &answer.infeasible_reason
            };
            annotations.push((ANN_INFEASIBLE_REASON, reason.to_string()));
        }
    }
    let warning = fit_annotation_limit(meta.annotations.as_ref(), &mut annotations);
    let members: Vec<(&str, &str)> = annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
    add_to_map(
        patch,
        paths::ANNOTATIONS,
        meta.annotations.is_some(),
        &members,
    );
    warning
}

/// The apiserver's limit on all of an object's annotations together: the sum of every key's and value's bytes
/// (`TotalAnnotationSizeLimitB`).
pub(crate) const ANNOTATIONS_LIMIT_BYTES: usize = 256 * 1024;

/// Our annotations in the order they give way when the Pod's own annotations leave too little room: the
/// optional explanations first, the decision record (`decided-at`, which makes a second pass a no-op) last.
const GIVE_WAY_ORDER: [&str; 11] = [
    ANN_ALTERNATIVES,
    ANN_EXPLORED,
    ANN_STATE_DIGEST,
    ANN_RECOMMENDED_CLASS,
    ANN_INFEASIBLE_REASON,
    ANN_PLACEMENT,
    ANN_PRIORITY_SCORE,
    ANN_FALLBACK,
    ANN_GPU_CLASS,
    ANN_POLICY_VERSION,
    ANN_DECIDED_AT,
];

/// Keeps the annotations inside [`ANNOTATIONS_LIMIT_BYTES`] once ours are added (mutation must never be the
/// reason the apiserver rejects a Pod): drops ours in [`GIVE_WAY_ORDER`] until they fit, and says which.
fn fit_annotation_limit(
    existing: Option<&BTreeMap<String, String>>,
    ours: &mut Vec<(&str, String)>,
) -> Option<String> {
    let size = |ours: &[(&str, String)]| -> usize {
        let kept = existing
            .into_iter()
            .flatten()
            .filter(|(k, _)| !ours.iter().any(|(o, _)| *o == k.as_str()))
            .map(|(k, v)| k.len() + v.len());
        let added = ours.iter().map(|(k, v)| k.len() + v.len());
        kept.chain(added).sum()
    };
    let mut dropped: Vec<&str> = Vec::new();
    for name in GIVE_WAY_ORDER {
        if size(ours) <= ANNOTATIONS_LIMIT_BYTES {
            break;
        }
        if let Some(i) = ours.iter().position(|(k, _)| *k == name) {
            ours.remove(i);
            dropped.push(name);
        }
    }
    (!dropped.is_empty()).then(|| {
        format!(
            "gpu-admission: the Pod's annotations leave too little of the apiserver's {} KiB; not recorded: {}",
            ANNOTATIONS_LIMIT_BYTES / 1024,
            dropped.join(", ")
        )
    })
}

/// metadata.labels: the job type, so that other Pods' anti-affinity can find this one.
pub(super) fn label_job_type(patch: &mut Patch, input: &PatchInput<'_>) {
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
            patch,
            paths::LABELS,
            meta.labels.is_some(),
            &[(LABEL_JOB_TYPE, jt)],
        );
    }
}
