//! The priority score (0-100) and its PriorityClass.
//!
//! score = tierPoints·tier.priorityWeight + workloadPoints·workloadClass.priorityWeight + sizePoints·size
//!
//! size ∈ [0, 1] is the weighted mean of the size features the request carries (weights renormalised
//! over those present):
//! - GPUs (weight 0.5): ln(1 + gpus) / ln(1 + sizeReference.gpuCount), capped at 1;
//! - memory per GPU (weight 0.3): memoryGiB / sizeReference.memoryGiB, capped at 1;
//! - model size (weight 0.2): ln(1 + B) / ln(1 + sizeReference.modelSizeBillionParams), capped at 1.
//!
//! The score depends on the job only, never on which GPU class wins or how candidates rank.
use crate::policy::{Bucket, Policy, Tier, WorkloadClass};

/// The size features of a job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Size {
    pub gpu_count: u32,
    pub memory_gib: Option<f64>,
    pub model_size_billion_params: Option<f64>,
}

fn log_ratio(x: f64, reference: f64) -> f64 {
    ((1.0 + x.max(0.0)).ln() / (1.0 + reference).ln()).min(1.0)
}

/// Size of a job in [0, 1].
pub fn size_factor(policy: &Policy, size: &Size) -> f64 {
    let r = &policy.priority.size_reference;
    // (weight, value) of the features present, on the stack.
    let mut all = [(0.0, 0.0); 3];
    let mut present = 0;
    let mut add = |part: (f64, f64)| {
        all[present] = part;
        present += 1;
    };
    add((
        0.5,
        log_ratio(f64::from(size.gpu_count.max(1)), r.gpu_count),
    ));
    if let Some(m) = size.memory_gib.filter(|m| m.is_finite()) {
        add((0.3, (m.max(0.0) / r.memory_gib).min(1.0)));
    }
    if let Some(b) = size.model_size_billion_params.filter(|b| b.is_finite()) {
        add((0.2, log_ratio(b, r.model_size_billion_params)));
    }
    let parts = &all[..present];
    let weight: f64 = parts.iter().map(|(w, _)| w).sum();
    parts.iter().map(|(w, v)| w * v).sum::<f64>() / weight
}

/// The job's priority score, in [0, 100].
pub fn score(policy: &Policy, tier: &Tier, workload: WorkloadClass, size: &Size) -> f64 {
    let p = &policy.priority;
    let s = p.tier_points * tier.priority_weight
        + p.workload_points * policy.workload_weight(workload)
        + p.size_points * size_factor(policy, size);
    s.clamp(0.0, 100.0)
}

/// The bucket of a score: the one with the highest `min_score <= score`. Scores below every bucket
/// (negative) and NaN fall in the lowest bucket; scores above 100 in the highest that matches.
pub fn bucket(buckets: &[Bucket], score: f64) -> &Bucket {
    buckets
        .iter()
        .find(|b| score >= b.min_score)
        .or_else(|| buckets.last())
        .expect("a validated policy has at least one bucket")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn bucket_edges() {
        let policy = embedded_default().unwrap();
        let b = |s: f64| bucket(&policy.priority.buckets, s).name.as_str();
        assert_eq!(b(100.0), "gpu-ultra");
        assert_eq!(b(90.0), "gpu-ultra");
        assert_eq!(b(89.999), "gpu-high");
        assert_eq!(b(89.0), "gpu-high");
        assert_eq!(b(70.0), "gpu-high");
        assert_eq!(b(69.99), "gpu-medium");
        assert_eq!(b(50.0), "gpu-medium");
        assert_eq!(b(49.9), "gpu-default");
        assert_eq!(b(0.0), "gpu-default");
        assert_eq!(b(-5.0), "gpu-default");
        assert_eq!(b(f64::NEG_INFINITY), "gpu-default");
        assert_eq!(b(f64::NAN), "gpu-default");
        assert_eq!(b(150.0), "gpu-ultra");
        let ultra = bucket(&policy.priority.buckets, 95.0);
        assert_eq!(
            (ultra.value, ultra.preemption_policy.as_str()),
            (1_000_000, "PreemptLowerPriority")
        );
        let default = bucket(&policy.priority.buckets, 1.0);
        assert_eq!(
            (default.value, default.preemption_policy.as_str()),
            (1000, "Never")
        );
    }

    fn tier<'a>(p: &'a Policy, name: &str) -> &'a Tier {
        &p.tiers[p.tier_index(name).unwrap()]
    }

    #[test]
    fn score_follows_tier_workload_and_size() {
        let p = embedded_default().unwrap();
        let big = Size {
            gpu_count: 8,
            memory_gib: Some(80.0),
            model_size_billion_params: Some(70.0),
        };
        let small = Size {
            gpu_count: 1,
            memory_gib: Some(8.0),
            model_size_billion_params: None,
        };
        let s = |t: &str, w, size: &Size| score(&p, tier(&p, t), w, size);
        // Gold > silver > bronze, all else equal.
        assert!(
            s("gold", WorkloadClass::Training, &big) > s("silver", WorkloadClass::Training, &big)
        );
        assert!(
            s("silver", WorkloadClass::Training, &big) > s("bronze", WorkloadClass::Training, &big)
        );
        // Bigger jobs score higher; inference above batch.
        assert!(
            s("gold", WorkloadClass::Training, &big) > s("gold", WorkloadClass::Training, &small)
        );
        assert!(
            s("gold", WorkloadClass::Inference, &small) > s("gold", WorkloadClass::Batch, &small)
        );
        // The formula, by hand: gold 0.9·50 + training 0.7·30 + size 1.0·20 = 86.
        assert!((s("gold", WorkloadClass::Training, &big) - 86.0).abs() < 1e-9);
        // Platinum inference at full size reaches 100 exactly, never more.
        assert_eq!(s("platinum", WorkloadClass::Inference, &big), 100.0);
        // Spread across buckets: not everything lands at the top (the original's defect).
        let low = s("bronze", WorkloadClass::Batch, &small);
        assert!(low < 50.0, "{low}");
    }

    #[test]
    fn garbage_sizes_stay_in_range() {
        let p = embedded_default().unwrap();
        let weird = Size {
            gpu_count: u32::MAX,
            memory_gib: Some(f64::INFINITY),
            model_size_billion_params: Some(-3.0),
        };
        let s = score(&p, tier(&p, "gold"), WorkloadClass::Unknown, &weird);
        assert!((0.0..=100.0).contains(&s), "{s}");
        let zero = Size {
            gpu_count: 0,
            memory_gib: Some(-1.0),
            model_size_billion_params: None,
        };
        let s = score(&p, tier(&p, "bronze"), WorkloadClass::Unknown, &zero);
        assert!((0.0..=100.0).contains(&s), "{s}");
    }
}
