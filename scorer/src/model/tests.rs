//! Model tests against the embedded default policy (and small edits of it).
use super::*;
use crate::policy::{DEFAULT_POLICY_YAML, embedded_default, parse};

fn job(tier: &str, job_type: &str, memory: f64) -> JobRequest {
    JobRequest {
        tier: tier.into(),
        job_type: job_type.into(),
        gpu_count: 1,
        vendor: Some(Vendor::Nvidia),
        memory_gib: Some(memory),
        ..JobRequest::default()
    }
}

fn best(policy: &Policy, d: &Decision) -> Option<String> {
    d.accepted()
        .first()
        .map(|c| policy.classes[c.class].name.clone())
}

#[test]
fn gold_llama_70gib_gets_h100() {
    let p = embedded_default().unwrap();
    let d = score(
        &p,
        &Learned::default(),
        &job("gold", "train-llama", 70.0),
        true,
    );
    assert_eq!(best(&p, &d).as_deref(), Some("H100-80GB"));
    assert!(!d.explored);
    assert!(d.infeasible_reason.is_none());
    // Feasible: H100-80GB and A100-80GB only (memory), MI300X is AMD, H200 not allowed for gold.
    let names: Vec<_> = d
        .accepted()
        .iter()
        .map(|c| p.classes[c.class].name.as_str())
        .collect();
    assert_eq!(names, ["H100-80GB", "A100-80GB"]);
    assert_eq!(d.candidates.len(), p.classes.len());
    assert!(d.avoid_job_types.contains(&"train-llama".to_string()));
}

#[test]
fn bronze_llama_70gib_is_infeasible_and_says_why() {
    let p = embedded_default().unwrap();
    let d = score(
        &p,
        &Learned::default(),
        &job("bronze", "train-llama", 70.0),
        true,
    );
    assert!(d.accepted().is_empty());
    let why = d.infeasible_reason.unwrap();
    assert!(
        why.contains("L4-24GB: needs 70 GiB of GPU memory per GPU, class has 24 GiB"),
        "{why}"
    );
    assert!(why.contains("not allowed for tier bronze"), "{why}");
    // The priority is still assigned.
    assert!(d.priority_score > 0.0);
    assert!(d.candidates.iter().all(|c| !c.feasible() && c.cost == 0.0));
}

#[test]
fn bronze_inference_16gib_gets_l4() {
    let p = embedded_default().unwrap();
    let d = score(
        &p,
        &Learned::default(),
        &job("bronze", "inference-llm", 16.0),
        true,
    );
    assert_eq!(best(&p, &d).as_deref(), Some("L4-24GB"));
}

#[test]
fn feasibility_memory_vendor_tier_count_and_candidates() {
    let p = embedded_default().unwrap();
    let l = Learned::default();
    let reasons = |d: &Decision, class: &str| {
        let c = d
            .candidates
            .iter()
            .find(|c| p.classes[c.class].name == class)
            .unwrap();
        feasibility::describe(&c.infeasible)
    };
    // Memory: 100 GiB fits only H200 (platinum) and MI300X (AMD).
    let mut amd = job("gold", "train-llama", 100.0);
    amd.vendor = Some(Vendor::Amd);
    let d = score(&p, &l, &amd, true);
    assert_eq!(best(&p, &d).as_deref(), Some("MI300X-192GB"));
    assert_eq!(
        reasons(&d, "H100-80GB"),
        "vendor nvidia but the job needs amd; needs 100 GiB of GPU memory per GPU, class has 80 GiB"
    );
    assert_eq!(
        reasons(&d, "H200-141GB"),
        "not allowed for tier gold; vendor nvidia but the job needs amd"
    );
    // Vendor not said: any vendor.
    let mut any = job("gold", "train-llama", 100.0);
    any.vendor = None;
    assert_eq!(
        best(&p, &score(&p, &l, &any, true)).as_deref(),
        Some("MI300X-192GB")
    );
    // Too many GPUs for one node.
    let mut wide = job("gold", "train-llama", 10.0);
    wide.gpu_count = 16;
    let d = score(&p, &l, &wide, true);
    assert!(d.accepted().is_empty());
    assert!(reasons(&d, "H100-80GB").contains("needs 16 GPUs in one Pod"));
    // Candidate restriction.
    let mut only = job("gold", "train-llama", 10.0);
    only.candidate_classes = vec!["A100-40GB".into(), "NoSuchClass".into()];
    let d = score(&p, &l, &only, true);
    assert_eq!(best(&p, &d).as_deref(), Some("A100-40GB"));
    assert_eq!(
        reasons(&d, "H100-80GB"),
        "not among the request's candidate classes"
    );
    // Memory not said: the job type's default (train-llama: 40 GiB) applies and is labelled so.
    let mut unsaid = job("bronze", "train-llama", 0.0);
    unsaid.memory_gib = None;
    let d = score(&p, &l, &unsaid, true);
    assert!(
        reasons(&d, "L4-24GB").contains("needs 40 GiB of GPU memory per GPU (job type default)")
    );
    // No memory known at all: no memory constraint.
    let mut free = job("bronze", "notebook", 0.0);
    free.memory_gib = None;
    assert_eq!(
        best(&p, &score(&p, &l, &free, true)).as_deref(),
        Some("L4-24GB")
    );
}

#[test]
fn tier_rules_objective_and_default_tier() {
    let p = embedded_default().unwrap();
    let l = Learned::default();
    // Silver prefers A100-80GB (fastest among its classes for a 30 GiB job).
    assert_eq!(
        best(&p, &score(&p, &l, &job("silver", "train-bert", 30.0), true)).as_deref(),
        Some("A100-80GB")
    );
    // Platinum: H200.
    assert_eq!(
        best(
            &p,
            &score(&p, &l, &job("platinum", "train-llama", 70.0), true)
        )
        .as_deref(),
        Some("H200-141GB")
    );
    // Unknown and empty tiers fall back to the default tier (bronze).
    for t in ["", "diamond"] {
        let d = score(&p, &l, &job(t, "inference-llm", 16.0), true);
        assert_eq!(d.tier, "bronze");
        assert_eq!(best(&p, &d).as_deref(), Some("L4-24GB"));
    }
    // Cheapest objective: a tier allowing everything picks by runtime × price.
    let yaml = DEFAULT_POLICY_YAML.replace(
        "    allowedClasses: [L4-24GB]\n    preferredClass: L4-24GB",
        "    allowedClasses: [L4-24GB, L40S-48GB, A100-80GB, H100-80GB]\n    preferredClass: L4-24GB",
    );
    let cheap = parse(&yaml, "test").unwrap();
    let d = score(&cheap, &l, &job("bronze", "inference-vision", 8.0), false);
    // inference-vision (exponent 0.5): L4 0.5/0.3^0.5=0.91, L40S 1.1/0.7^0.5=1.31, A100 2.0, H100 2.83.
    let names: Vec<_> = d
        .accepted()
        .iter()
        .map(|c| cheap.classes[c.class].name.as_str())
        .collect();
    assert_eq!(names, ["L4-24GB", "L40S-48GB", "A100-80GB", "H100-80GB"]);
}

#[test]
fn priority_ignores_the_chosen_class() {
    let p = embedded_default().unwrap();
    let l = Learned::default();
    let mut a = job("gold", "train-llama", 70.0);
    let d1 = score(&p, &l, &a, true);
    a.candidate_classes = vec!["A100-80GB".into()];
    let d2 = score(&p, &l, &a, true);
    assert_ne!(best(&p, &d1), best(&p, &d2));
    assert_eq!(d1.priority_score, d2.priority_score);
    // Infeasible jobs get the same priority too.
    a.candidate_classes = vec!["L4-24GB".into()];
    assert_eq!(score(&p, &l, &a, true).priority_score, d1.priority_score);
}

#[test]
fn deterministic_for_same_inputs() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    for i in 0..30 {
        observe(
            &p,
            &mut l,
            &Observation {
                job_type: "train-bert".into(),
                gpu_class: ["A100-80GB", "A100-40GB", "L40S-48GB"][i % 3].into(),
                runtime_seconds: 10_000.0 + f64::from(i as u32) * 37.0,
                colocated_job_types: if i % 4 == 0 {
                    vec!["train-resnet".into()]
                } else {
                    vec![]
                },
            },
        );
    }
    let req = job("silver", "train-bert", 20.0);
    let first = score(&p, &l, &req, true);
    for _ in 0..50 {
        assert_eq!(score(&p, &l.clone(), &req, true), first);
    }
    // A policy parsed again from the same text gives the same answer.
    let p2 = embedded_default().unwrap();
    assert_eq!(score(&p2, &l, &req, true), first);
}

#[test]
fn ties_break_by_preferred_class_then_catalog_order() {
    // Two identical classes: the tier's preferred one wins; without preference, catalog order.
    let yaml = DEFAULT_POLICY_YAML.replace(
        "  - name: A100-40GB\n    vendor: nvidia\n    memoryGiB: 40\n    relativeThroughput: 0.9\n    pricePerHour: 1.50",
        "  - name: A100-40GB\n    vendor: nvidia\n    memoryGiB: 80\n    relativeThroughput: 1.0\n    pricePerHour: 2.00",
    );
    let p = parse(&yaml, "test").unwrap();
    let l = Learned::default();
    let mut req = job("silver", "train-bert", 10.0);
    req.candidate_classes = vec!["A100-40GB".into(), "A100-80GB".into()];
    let d = score(&p, &l, &req, false);
    assert_eq!(d.accepted()[0].cost, d.accepted()[1].cost);
    assert_eq!(
        best(&p, &d).as_deref(),
        Some("A100-80GB"),
        "silver prefers A100-80GB"
    );
    // Preferring the class listed later in the catalog wins over catalog order.
    let prefers_40 = yaml.replace(
        "    preferredClass: A100-80GB\n",
        "    preferredClass: A100-40GB\n",
    );
    let p = parse(&prefers_40, "test").unwrap();
    assert_eq!(
        best(&p, &score(&p, &l, &req, false)).as_deref(),
        Some("A100-40GB")
    );
    // No preference: catalog order (A100-80GB is listed first).
    let no_pref = yaml.replace("    preferredClass: A100-80GB\n", "");
    let p = parse(&no_pref, "test").unwrap();
    assert_eq!(
        best(&p, &score(&p, &l, &req, false)).as_deref(),
        Some("A100-80GB")
    );
}

#[test]
fn converges_toward_observed_runtimes() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let h100 = p.class_index("H100-80GB").unwrap();
    let prior = runtime_estimate(&p, &l, "train-llama", h100);
    assert_eq!(prior.mean, 43_200.0);
    let mut last_sd = prior.stddev;
    for i in 0..200 {
        let (g, n) = observe(
            &p,
            &mut l,
            &Observation {
                job_type: "train-llama".into(),
                gpu_class: "H100-80GB".into(),
                runtime_seconds: if i % 2 == 0 { 19_000.0 } else { 21_000.0 },
                colocated_job_types: vec![],
            },
        );
        assert_eq!(n, i + 1);
        assert!(g.stddev < last_sd);
        last_sd = g.stddev;
    }
    let post = runtime_estimate(&p, &l, "train-llama", h100);
    assert!((post.mean - 20_000.0).abs() < 600.0, "{post:?}");
    // Other classes keep their prior.
    let a100 = p.class_index("A100-80GB").unwrap();
    assert_eq!(runtime_estimate(&p, &l, "train-llama", a100).mean, 86_400.0);
}

#[test]
fn learning_changes_the_choice() {
    // Gold picks H100 for train-bert; if H100 turns out slow for it, A100-80GB takes over.
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let req = job("gold", "train-bert", 30.0);
    assert_eq!(
        best(&p, &score(&p, &l, &req, false)).as_deref(),
        Some("H100-80GB")
    );
    for _ in 0..50 {
        observe(
            &p,
            &mut l,
            &Observation {
                job_type: "train-bert".into(),
                gpu_class: "H100-80GB".into(),
                runtime_seconds: 30_000.0,
                colocated_job_types: vec![],
            },
        );
    }
    assert_eq!(
        best(&p, &score(&p, &l, &req, false)).as_deref(),
        Some("A100-80GB")
    );
}

#[test]
fn observe_learns_interference_and_cleans_the_runtime() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    // notebook on L4: prior mean 7200/0.3^0.3. Co-located with batch-etl it runs twice as long.
    let l4 = p.class_index("L4-24GB").unwrap();
    let expected = runtime_estimate(&p, &l, "notebook", l4).mean;
    for _ in 0..30 {
        observe(
            &p,
            &mut l,
            &Observation {
                job_type: "notebook".into(),
                gpu_class: "L4-24GB".into(),
                runtime_seconds: 2.0 * expected,
                colocated_job_types: vec!["batch-etl".into()],
            },
        );
    }
    let s = interference::slowdown(&p, &l.interference, "notebook", "batch-etl");
    assert!(s > 0.5, "learned slowdown {s}");
    let req = job("bronze", "notebook", 4.0);
    assert!(
        score(&p, &l, &req, false)
            .avoid_job_types
            .contains(&"batch-etl".to_string())
    );
    // The runtime estimate moved much less than the raw 2x: the slowdown was attributed to the neighbour.
    let now = runtime_estimate(&p, &l, "notebook", l4).mean;
    assert!(now < 1.5 * expected, "{now} vs {expected}");
}

/// A policy where exploring pays: λ = 0 and a large β, with two classes of equal mean cost but one
/// never observed.
fn curious_policy() -> Policy {
    let yaml = DEFAULT_POLICY_YAML
        .replace("  lambda: 0.5", "  lambda: 0.0")
        .replace("  beta: 0.1", "  beta: 5.0")
        .replace("  explorationWindow: 200", "  explorationWindow: 20")
        .replace("  explorationCap: 0.1", "  explorationCap: 0.25");
    parse(&yaml, "test").unwrap()
}

#[test]
fn exploration_through_score_respects_the_cap_and_recovers() {
    let p = curious_policy();
    let mut l = Learned::default();
    // Make H100 well known and a bit faster than the A100-80GB prior: exploiting picks H100, the
    // information gain of the unobserved A100-80GB tempts exploration.
    for _ in 0..100 {
        observe(
            &p,
            &mut l,
            &Observation {
                job_type: "train-llama".into(),
                gpu_class: "H100-80GB".into(),
                runtime_seconds: 80_000.0,
                colocated_job_types: vec![],
            },
        );
    }
    let req = job("gold", "train-llama", 70.0);
    let window = p.learning.exploration_window as usize;
    let mut explored = Vec::new();
    for _ in 0..3 * window {
        let allowed = l.exploration.allows(p.learning.exploration_cap, window);
        let d = score(&p, &l, &req, allowed);
        if d.explored {
            assert_eq!(best(&p, &d).as_deref(), Some("A100-80GB"));
        } else {
            assert_eq!(best(&p, &d).as_deref(), Some("H100-80GB"));
        }
        l.exploration.record(d.explored, window);
        explored.push(d.explored);
        assert!(l.exploration.share(window) <= p.learning.exploration_cap + 1e-9);
    }
    // 25 % of 20 = 5 per window, in every window: the budget comes back.
    for w in explored.chunks(window) {
        assert_eq!(w.iter().filter(|&&e| e).count(), 5, "{explored:?}");
    }
    // Without budget the same request never explores.
    assert!(!score(&p, &l, &req, false).explored);
}
