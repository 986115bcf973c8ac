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
        false,
        0,
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
        false,
        0,
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
        false,
        0,
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
    let d = score(&p, &l, &amd, false, 0);
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
        best(&p, &score(&p, &l, &any, false, 0)).as_deref(),
        Some("MI300X-192GB")
    );
    // Too many GPUs for one node.
    let mut wide = job("gold", "train-llama", 10.0);
    wide.gpu_count = 16;
    let d = score(&p, &l, &wide, false, 0);
    assert!(d.accepted().is_empty());
    assert!(reasons(&d, "H100-80GB").contains("needs 16 GPUs in one Pod"));
    // Candidate restriction.
    let mut only = job("gold", "train-llama", 10.0);
    only.candidate_classes = vec!["A100-40GB".into(), "NoSuchClass".into()];
    let d = score(&p, &l, &only, false, 0);
    assert_eq!(best(&p, &d).as_deref(), Some("A100-40GB"));
    assert_eq!(
        reasons(&d, "H100-80GB"),
        "not among the request's candidate classes"
    );
    // Memory not said: the job type's default (train-llama: 40 GiB) applies and is labelled so.
    let mut unsaid = job("bronze", "train-llama", 0.0);
    unsaid.memory_gib = None;
    let d = score(&p, &l, &unsaid, false, 0);
    assert!(
        reasons(&d, "L4-24GB").contains("needs 40 GiB of GPU memory per GPU (job type default)")
    );
    // No memory known at all: no memory constraint.
    let mut free = job("bronze", "notebook", 0.0);
    free.memory_gib = None;
    assert_eq!(
        best(&p, &score(&p, &l, &free, false, 0)).as_deref(),
        Some("L4-24GB")
    );
}

#[test]
fn tier_rules_objective_and_default_tier() {
    let p = embedded_default().unwrap();
    let l = Learned::default();
    // Silver prefers A100-80GB (fastest among its classes for a 30 GiB job).
    assert_eq!(
        best(
            &p,
            &score(&p, &l, &job("silver", "train-bert", 30.0), false, 0)
        )
        .as_deref(),
        Some("A100-80GB")
    );
    // Platinum: H200.
    assert_eq!(
        best(
            &p,
            &score(&p, &l, &job("platinum", "train-llama", 70.0), false, 0)
        )
        .as_deref(),
        Some("H200-141GB")
    );
    // Unknown and empty tiers fall back to the default tier (bronze).
    for t in ["", "diamond"] {
        let d = score(&p, &l, &job(t, "inference-llm", 16.0), false, 0);
        assert_eq!(d.tier, "bronze");
        assert_eq!(best(&p, &d).as_deref(), Some("L4-24GB"));
    }
    // Cheapest objective: a tier allowing everything picks by runtime × price.
    let yaml = DEFAULT_POLICY_YAML.replace(
        "    allowedClasses: [L4-24GB]\n    preferredClass: L4-24GB",
        "    allowedClasses: [L4-24GB, L40S-48GB, A100-80GB, H100-80GB]\n    preferredClass: L4-24GB",
    );
    let cheap = parse(&yaml, "test").unwrap();
    let d = score(
        &cheap,
        &l,
        &job("bronze", "inference-vision", 8.0),
        false,
        0,
    );
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
    let d1 = score(&p, &l, &a, false, 0);
    a.candidate_classes = vec!["A100-80GB".into()];
    let d2 = score(&p, &l, &a, false, 0);
    assert_ne!(best(&p, &d1), best(&p, &d2));
    assert_eq!(d1.priority_score, d2.priority_score);
    // Infeasible jobs get the same priority too.
    a.candidate_classes = vec!["L4-24GB".into()];
    assert_eq!(
        score(&p, &l, &a, false, 0).priority_score,
        d1.priority_score
    );
}

fn run(job_type: &str, class: &str, gpus: u32, runtime: f64, colocated: &[&str]) -> Observation {
    Observation {
        id: None,
        job_type: job_type.into(),
        workload_class: None,
        gpu_class: class.into(),
        gpu_count: gpus,
        runtime_seconds: runtime,
        colocated_job_types: colocated.iter().map(|s| s.to_string()).collect(),
        ..Observation::default()
    }
}

fn some_runs() -> Vec<Observation> {
    (0..30)
        .map(|i| Observation {
            id: Some(format!("pod-{i}")),
            ..run(
                "train-bert",
                ["A100-80GB", "A100-40GB", "L40S-48GB"][i % 3],
                1 + (i % 4) as u32,
                10_000.0 + f64::from(i as u32) * 37.0,
                if i % 4 == 0 { &["train-resnet"] } else { &[] },
            )
        })
        .collect()
}

#[test]
fn deterministic_for_same_inputs_and_independent_of_observation_order() {
    let p = embedded_default().unwrap();
    let mut forward = Learned::default();
    let mut backward = Learned::default();
    let runs = some_runs();
    for o in &runs {
        observe(&p, &mut forward, o);
    }
    for o in runs.iter().rev() {
        observe(&p, &mut backward, o);
    }
    // Only the interference attribution depends on what was known when a run arrived; with the runs
    // without neighbours the two orders give bit-identical state.
    let solo: Vec<_> = runs
        .iter()
        .filter(|o| o.colocated_job_types.is_empty())
        .collect();
    let (mut a, mut b) = (Learned::default(), Learned::default());
    solo.iter().for_each(|o| {
        observe(&p, &mut a, o);
    });
    solo.iter().rev().for_each(|o| {
        observe(&p, &mut b, o);
    });
    assert_eq!(a, b);
    assert_eq!(a.digest(), b.digest());
    let req = job("silver", "train-bert", 20.0);
    for seed in 0..50 {
        assert_eq!(
            score(&p, &a, &req, true, seed),
            score(&p, &b, &req, true, seed)
        );
    }
    // The same state, seed and request always give the same answer; a policy parsed again too.
    let first = score(&p, &forward, &req, true, 7);
    for _ in 0..20 {
        assert_eq!(score(&p, &forward.clone(), &req, true, 7), first);
    }
    assert_eq!(
        score(&embedded_default().unwrap(), &forward, &req, true, 7),
        first
    );
    assert_ne!(forward.digest(), Learned::default().digest());
}

#[test]
fn the_shared_policys_posterior_is_reused_until_the_state_or_the_policy_changes() {
    let p = Arc::new(embedded_default().unwrap());
    let mut l = Learned::default();
    let first = l.refresh_shared(&p);
    assert!(Arc::ptr_eq(&first, &l.refresh_shared(&p)));
    // What was learned changes the posterior: it is computed again, for the same policy object.
    observe(&p, &mut l, &run("train-bert", "A100-80GB", 1, 9_000.0, &[]));
    let learned = l.refresh_shared(&p);
    assert!(!Arc::ptr_eq(&first, &learned));
    let fresh = |p: &Policy, l: &Learned| {
        format!(
            "{:?}",
            Posterior::compute(p, &l.runtimes, &l.unlisted, &Default::default())
        )
    };
    assert_eq!(format!("{learned:?}"), fresh(&p, &l));
    // Another policy (a reload): its own posterior, then the first policy's again.
    let mut edited = embedded_default().unwrap();
    edited.classes[0].relative_throughput *= 2.0;
    let edited = Arc::new(edited);
    let other = l.refresh_shared(&edited);
    assert_eq!(format!("{other:?}"), fresh(&edited, &l));
    assert_ne!(format!("{other:?}"), format!("{learned:?}"));
    assert_eq!(format!("{:?}", l.refresh_shared(&p)), fresh(&p, &l));
}

#[test]
fn kept_tables_answer_as_computed_afresh_across_state_and_policy_changes() {
    let p = Arc::new(embedded_default().unwrap());
    // The same version, another threshold: a reload the version alone does not tell apart.
    let mut strict = embedded_default().unwrap();
    strict.anti_affinity_threshold = 0.1;
    let strict = Arc::new(strict);
    let req = JobRequest {
        colocated_job_types: vec!["batch-etl".into()],
        ..job("gold", "train-llama", 70.0)
    };
    let afresh = |p: &Policy, l: &Learned| {
        let mut l = l.clone();
        l.invalidate();
        score(p, &l, &req, true, 3)
    };
    let mut l = Learned::default();
    let mut lists = Vec::new();
    for step in 0..2 {
        if step == 1 {
            // Learned: train-llama suffers next to batch-etl (the contract: a change drops the caches).
            for i in 0..20 {
                l.interference.record("batch-etl", "train-llama", 0.8, i);
                l.contention.record("L4-24GB", 0.3, 0.6);
            }
            l.invalidate();
        }
        for policy in [&p, &strict, &p] {
            l.refresh_shared(policy);
            let d = score(policy, &l, &req, true, 3);
            assert_eq!(d, afresh(policy, &l), "step {step}");
            // Again, from the kept avoid-list.
            assert_eq!(score(policy, &l, &req, true, 3), d);
            lists.push(d.avoid_job_types);
        }
    }
    assert_ne!(
        lists[0], lists[1],
        "the thresholds make no difference: the test checks nothing"
    );
    assert_ne!(
        lists[0], lists[3],
        "learning makes no difference: the test checks nothing"
    );
    assert!(lists[3].contains(&"batch-etl".to_string()));
}

#[test]
fn an_observation_id_is_learned_once() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let o = Observation {
        id: Some("3f2a-pod-uid".into()),
        ..run("train-bert", "A100-80GB", 1, 9_000.0, &[])
    };
    let first = observe(&p, &mut l, &o);
    assert!(!first.duplicate);
    let state = l.clone();
    let again = observe(&p, &mut l, &o);
    assert!(again.duplicate);
    assert_eq!(again.estimate, first.estimate);
    assert_eq!(l, state);
    assert_eq!(l.observations, 1);
    // Without an id every report counts.
    observe(&p, &mut l, &run("train-bert", "A100-80GB", 1, 9_000.0, &[]));
    observe(&p, &mut l, &run("train-bert", "A100-80GB", 1, 9_000.0, &[]));
    assert_eq!(l.observations, 3);
}

#[test]
fn runs_on_a_part_of_a_device_are_recorded_not_learned_as_runs_of_the_class() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    for (i, shape) in [learn::GpuShape::MigSlice, learn::GpuShape::Shared]
        .into_iter()
        .enumerate()
    {
        let o = Observation {
            id: Some(format!("mig-{i}")),
            gpu_shape: shape,
            ..run("train-bert", "A100-80GB", 1, 90_000.0, &[])
        };
        let out = observe(&p, &mut l, &o);
        assert!(out.partial && !out.duplicate);
        assert!(observe(&p, &mut l, &o).duplicate);
    }
    assert_eq!(l.observations, 2);
    assert_eq!(l.runtimes.get("train-bert", "A100-80GB").count, 0);
}

#[test]
fn runtimes_of_different_sizes_are_compared_at_one_gpu() {
    // s = 0.9: a job on 8 GPUs runs 8^0.9 = 6.5x faster than on one.
    let p = embedded_default().unwrap();
    let s = p.learning.gpu_scaling_exponent;
    let a100 = p.class_index("A100-80GB").unwrap();
    let mut l = Learned::default();
    for i in 0..40 {
        let gpus = [1, 8][i % 2];
        let t = 20_000.0 / f64::from(gpus).powf(s);
        observe(&p, &mut l, &run("train-bert", "A100-80GB", gpus, t, &[]));
    }
    let one = runtime_estimate(&p, &l, "train-bert", 1, a100).mean;
    let eight = runtime_estimate(&p, &l, "train-bert", 8, a100).mean;
    assert!((one / 20_000.0 - 1.0).abs() < 0.03, "{one}");
    assert!(
        (eight / (20_000.0 / 8f64.powf(s)) - 1.0).abs() < 0.03,
        "{eight}"
    );
    // Averaging the raw runtimes would have said ~11 500 s for both.
}

#[test]
fn a_job_type_learns_its_own_gpu_scaling_and_it_is_not_read_as_interference() {
    // train-bert scales as g^0.5 (Sia's measured job types: 0.35-1.00), not as the policy's g^0.9; every
    // other of its 8-GPU runs shares the node with batch-etl, which does not slow it.
    let p = embedded_default().unwrap();
    let a100 = p.class_index("A100-80GB").unwrap();
    let runs = |l: &mut Learned, s: f64| {
        for i in 0..48 {
            let gpus = [1, 8][i % 2];
            let next: &[&str] = if i % 4 == 1 { &["batch-etl"] } else { &[] };
            let t = 20_000.0 / f64::from(gpus).powf(s);
            observe(&p, l, &run("train-bert", "A100-80GB", gpus, t, next));
        }
    };
    let mut l = Learned::default();
    runs(&mut l, 0.5);
    let eight = runtime_estimate(&p, &l, "train-bert", 8, a100).mean;
    // 20 000/√8 = 7 071 s; the policy's exponent would say 20 000/8^0.9 = 3 078 s.
    assert!(
        (eight / (20_000.0 / 8f64.sqrt()) - 1.0).abs() < 0.1,
        "{eight}"
    );
    let one = runtime_estimate(&p, &l, "train-bert", 1, a100).mean;
    assert!((one / 20_000.0 - 1.0).abs() < 0.1, "{one}");
    // What the metric scorer_job_type_gpu_scaling_exponent shows.
    let s = summary(&p, &l, "train-bert").gpu_scaling_exponent;
    assert!((s - 0.5).abs() < 0.06, "{s}");
    let learnt = interference::slowdown(&p, &l.interference, "train-bert", "batch-etl");
    let mut scales_as_assumed = Learned::default();
    runs(&mut scales_as_assumed, p.learning.gpu_scaling_exponent);
    let reference = interference::slowdown(
        &p,
        &scales_as_assumed.interference,
        "train-bert",
        "batch-etl",
    );
    // 0.08 against 0.03 when it scales as the policy assumes (the prior is 0.05); with the policy's
    // exponent for every job type it was 0.83, a harmful pair (avoid-lists take pairs above 0.3).
    assert!(learnt < reference + 0.1, "{learnt} against {reference}");
    // Another job type's exponent is its own: train-resnet has not run and keeps the policy's.
    let resnet = runtime_estimate(&p, &l, "train-resnet", 8, a100).mean;
    let resnet_one = runtime_estimate(&p, &l, "train-resnet", 1, a100).mean;
    let s = (resnet_one / resnet).ln() / 8f64.ln();
    assert!((s - p.learning.gpu_scaling_exponent).abs() < 1e-9, "{s}");
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
    let d = score(&p, &l, &req, false, 0);
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
        best(&p, &score(&p, &l, &req, false, 0)).as_deref(),
        Some("A100-40GB")
    );
    // No preference: catalog order (A100-80GB is listed first).
    let no_pref = yaml.replace("    preferredClass: A100-80GB\n", "");
    let p = parse(&no_pref, "test").unwrap();
    assert_eq!(
        best(&p, &score(&p, &l, &req, false, 0)).as_deref(),
        Some("A100-80GB")
    );
}

#[test]
fn converges_toward_observed_runtimes_and_shares_with_other_classes() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let (h100, a100) = (
        p.class_index("H100-80GB").unwrap(),
        p.class_index("A100-80GB").unwrap(),
    );
    let prior = runtime_estimate(&p, &l, "train-llama", 1, h100);
    assert!(
        prior.mean > 43_200.0 && prior.mean < 43_200.0 * 1.5,
        "{prior:?}"
    );
    let a100_prior = runtime_estimate(&p, &l, "train-llama", 1, a100).mean;
    let mut last_sd = prior.stddev;
    for i in 0..200 {
        let r = observe(
            &p,
            &mut l,
            &run(
                "train-llama",
                "H100-80GB",
                1,
                if i % 2 == 0 { 19_000.0 } else { 21_000.0 },
                &[],
            ),
        );
        assert_eq!(r.observations, i + 1);
        assert!(r.estimate.stddev < last_sd);
        last_sd = r.estimate.stddev;
    }
    let post = runtime_estimate(&p, &l, "train-llama", 1, h100);
    assert!((post.mean - 20_000.0).abs() < 600.0, "{post:?}");
    // The job type turned out about twice as fast as its prior on H100: the other classes are expected
    // faster too (part of it is the job type, part the class).
    let a100_now = runtime_estimate(&p, &l, "train-llama", 1, a100).mean;
    assert!(a100_now < 0.9 * a100_prior, "{a100_now} vs {a100_prior}");
}

#[test]
fn learning_changes_the_choice() {
    // Gold picks H100 for train-bert; if H100 turns out slow for it, A100-80GB takes over.
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let req = job("gold", "train-bert", 30.0);
    assert_eq!(
        best(&p, &score(&p, &l, &req, false, 0)).as_deref(),
        Some("H100-80GB")
    );
    for _ in 0..50 {
        observe(
            &p,
            &mut l,
            &run("train-bert", "H100-80GB", 1, 30_000.0, &[]),
        );
    }
    assert_eq!(
        best(&p, &score(&p, &l, &req, false, 0)).as_deref(),
        Some("A100-80GB")
    );
}

#[test]
fn observe_separates_interference_from_the_runtime() {
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    // notebook on L4 runs as its prior says alone, and twice as long next to batch-etl.
    let l4 = p.class_index("L4-24GB").unwrap();
    let expected = runtime_estimate(&p, &l, "notebook", 1, l4).mean;
    for i in 0..60 {
        let o = if i % 2 == 0 {
            run("notebook", "L4-24GB", 1, expected, &[])
        } else {
            run("notebook", "L4-24GB", 1, 2.0 * expected, &["batch-etl"])
        };
        observe(&p, &mut l, &o);
    }
    let s = interference::slowdown(&p, &l.interference, "notebook", "batch-etl");
    assert!(s > 0.6, "learned slowdown {s}");
    let req = job("bronze", "notebook", 4.0);
    assert!(
        score(&p, &l, &req, false, 0)
            .avoid_job_types
            .contains(&"batch-etl".to_string())
    );
    // The runtime estimate stayed where the solo runs put it: the slowdown went to the neighbour.
    let now = runtime_estimate(&p, &l, "notebook", 1, l4).mean;
    // (Within 20 %: the first co-located runs arrive before the pair is known and push it up a bit.)
    assert!((now / expected - 1.0).abs() < 0.2, "{now} vs {expected}");

    // Only co-located runs: the excess is split between the job and the pair, both move (the pair less
    // than the job: each run is measured against a runtime that is itself uncertain, so it weighs less).
    let mut l = Learned::default();
    for _ in 0..30 {
        observe(
            &p,
            &mut l,
            &run("notebook", "L4-24GB", 1, 2.0 * expected, &["batch-etl"]),
        );
    }
    let s = interference::slowdown(&p, &l.interference, "notebook", "batch-etl");
    let now = runtime_estimate(&p, &l, "notebook", 1, l4).mean;
    assert!(s > 0.1, "{s}");
    assert!(
        now > 1.2 * expected && now < 1.9 * expected,
        "{now} vs {expected}"
    );
}

#[test]
fn noise_alone_does_not_pile_up_as_interference() {
    // Runs alternate 20 % above and below the estimate, next to a job type the prior says is harmless.
    let p = embedded_default().unwrap();
    let mut l = Learned::default();
    let a100 = p.class_index("A100-80GB").unwrap();
    for i in 0..200 {
        let m = runtime_estimate(&p, &l, "train-bert", 1, a100).mean;
        let f = if i % 2 == 0 { 1.2 } else { 1.0 / 1.2 };
        observe(
            &p,
            &mut l,
            &run("train-bert", "A100-80GB", 1, m * f, &["notebook"]),
        );
    }
    let s = interference::slowdown(&p, &l.interference, "train-bert", "notebook");
    assert!(s < 0.1, "phantom slowdown {s}");
}

/// train-llama's runs: `best` on H100 (36 000 s), `close` on A100-80GB, 2 % slower.
fn close_alternative(p: &Policy, l: &mut Learned, best: usize, close: usize) {
    for _ in 0..best {
        observe(p, l, &run("train-llama", "H100-80GB", 1, 36_000.0, &[]));
    }
    for _ in 0..close {
        observe(p, l, &run("train-llama", "A100-80GB", 1, 36_700.0, &[]));
    }
}

/// Exploration-friendly edit of the default policy: a small window, a 25 % cap.
fn curious_policy() -> Policy {
    let yaml = DEFAULT_POLICY_YAML
        .replace("  explorationWindow: 200", "  explorationWindow: 20")
        .replace("  explorationCap: 0.2", "  explorationCap: 0.25");
    parse(&yaml, "test").unwrap()
}

#[test]
fn exploration_through_score_respects_the_cap_and_keeps_coming_back() {
    let p = curious_policy();
    let mut l = Learned::default();
    let req = job("gold", "train-llama", 40.0);
    // Nothing observed: no exploration at all (nobody reports runtimes).
    for seed in 0..200 {
        assert!(!score(&p, &l, &req, true, seed).explored);
    }
    // train-llama has run 30 times on H100 and twice on A100-80GB, about as fast: A100-80GB is a close, still
    // uncertain alternative, so posterior draws often favour it, and with ~30 runs to come knowing it
    // is worth a run.
    close_alternative(&p, &mut l, 30, 2);
    let window = p.learning.exploration_window as usize;
    let mut explored = Vec::new();
    for i in 0..20 * window as u64 {
        let allowed = l.exploration.allows(p.learning.exploration_cap, window);
        let d = score(&p, &l, &req, allowed, i);
        assert_eq!(d.explored, d.why.rule == Rule::Exploration);
        if d.explored {
            assert_ne!(d.why.sampled, d.why.exploit);
            assert_eq!(Some(d.accepted()[0].class), d.why.sampled);
        } else {
            assert_eq!(Some(d.accepted()[0].class), d.why.exploit);
        }
        l.exploration.record(d.explored, d.saving, window);
        explored.push(d.explored);
        assert!(l.exploration.share(window) <= p.learning.exploration_cap + 1e-9);
    }
    let total = explored.iter().filter(|&&e| e).count();
    // The gates let some through, never more than the cap.
    assert!(total > 10, "explored {total} of {}", explored.len());
    assert!(
        explored[explored.len() / 2..].iter().any(|&e| e),
        "exploration stopped"
    );
    // Without budget the same request never explores.
    for seed in 0..200 {
        assert!(!score(&p, &l, &req, false, seed).explored);
    }
}

#[test]
fn a_zero_cap_never_explores() {
    let yaml = DEFAULT_POLICY_YAML.replace("  explorationCap: 0.2", "  explorationCap: 0.0");
    let p = parse(&yaml, "test").unwrap();
    let mut l = Learned::default();
    observe(&p, &mut l, &run("notebook", "L4-24GB", 1, 7_000.0, &[]));
    let req = job("gold", "train-llama", 40.0);
    for seed in 0..500 {
        let d = score(&p, &l, &req, true, seed);
        assert!(!d.explored && !d.why.exploration_allowed);
    }
}

#[test]
fn exploring_stops_once_it_no_longer_pays_and_says_why() {
    let p = curious_policy();
    let mut l = Learned::default();
    // Only the two classes it knows (the request's candidates).
    let mut req = job("gold", "train-llama", 40.0);
    req.candidate_classes = vec!["H100-80GB".into(), "A100-80GB".into()];
    // A100-80GB as well known as H100 (200 runs each), 2 % slower: draws still favour it now and then, but
    // one more run cannot change what is known.
    close_alternative(&p, &mut l, 200, 200);
    let mut declined = 0;
    for seed in 0..300 {
        let d = score(&p, &l, &req, true, seed);
        let reason = d.why.reason(&p);
        assert!(!d.explored, "{reason}");
        if d.why.rule == Rule::ExplorationDeclined && d.why.exploration_allowed {
            declined += 1;
            assert!(
                reason.contains("does not pay") && reason.contains("future runs"),
                "{reason}"
            );
        }
    }
    assert!(
        declined > 0,
        "the draws never disagreed: the test checks nothing"
    );
}

/// The default policy's text with `train-llama` and `train-bert` of the family `train-*` when `family`.
pub(crate) fn family_policy_text(family: bool) -> String {
    let mut text = DEFAULT_POLICY_YAML.to_string();
    if family {
        for job in ["train-llama", "train-bert"] {
            text = text.replace(
                &format!("  - name: {job}\n"),
                &format!("  - name: {job}\n    family: \"train-*\"\n"),
            );
        }
    }
    text
}

/// [`family_policy_text`] with a 25 % cap over a small window, and 150 runs each of train-llama and
/// train-bert on H100 (as fast as the catalog says), none anywhere else.
fn family_ran_on_h100(family: bool) -> (Policy, Learned) {
    let text = family_policy_text(family)
        .replace("  explorationWindow: 200", "  explorationWindow: 20")
        .replace("  explorationCap: 0.2", "  explorationCap: 0.25");
    let p = parse(&text, "test").unwrap();
    let mut l = Learned::default();
    for _ in 0..150 {
        observe(
            &p,
            &mut l,
            &run("train-llama", "H100-80GB", 1, 36_000.0, &[]),
        );
        observe(&p, &mut l, &run("train-bert", "H100-80GB", 1, 9_000.0, &[]));
    }
    (p, l)
}

#[test]
fn a_class_the_family_never_ran_on_is_tried_once_its_runs_to_come_make_it_worth_it() {
    // train-llama and train-bert have run only on H100 (many times: hundreds of runs to come), as fast
    // as the catalog says. The other classes of `gold` are 2-4x slower by the catalog.
    let req = {
        let mut r = job("gold", "train-llama", 40.0);
        r.candidate_classes = vec!["H100-80GB".into(), "A100-80GB".into()];
        r
    };
    let outcomes = |family: bool| {
        let (p, l) = family_ran_on_h100(family);
        let a100 = p.class_index("A100-80GB").unwrap();
        (0..100)
            .map(|seed| {
                let d = score_gated(
                    &p,
                    &l,
                    &req,
                    Gate::Window {
                        room: true,
                        saved: f64::INFINITY,
                    },
                    seed,
                );
                let reason = d.why.reason(&p);
                (d.explored, d.accepted()[0].class == a100, reason)
            })
            .collect::<Vec<_>>()
    };
    // Without a family, only the draws that favour A100-80GB (the Gaussian prior holds it 2-3x slower)
    // propose it.
    let without = outcomes(false).iter().filter(|o| o.0).count();
    assert!(without < 20, "{without} of 100");
    // Of a family that never ran on it, the class may be far from the catalog (held 20 % likely): with the
    // family's hundreds of runs to come, one run there pays, so every allowed decision tries it, and
    // says why when the draw did not propose it.
    let with = outcomes(true);
    assert!(with.iter().all(|o| o.0 && o.1), "{:?}", with[0].2);
    assert!(
        with.iter()
            .any(|o| o.2.contains("no job type of its family has run on it")),
        "{}",
        with[0].2
    );
    // Once the family ran there, as the catalog says, the class is no longer untried.
    let (p, mut l) = family_ran_on_h100(true);
    let a100 = p.class_index("A100-80GB").unwrap();
    let prior = runtime_estimate(&p, &l, "train-bert", 1, a100).mean;
    observe(&p, &mut l, &run("train-bert", "A100-80GB", 1, prior, &[]));
    let post = l.posterior(&p);
    let who = post.job(&p, "train-llama", crate::policy::WorkloadClass::Training);
    assert!(post.untried_family_class(&p, who, a100).is_none());
    let h200 = p.class_index("H200-141GB").unwrap();
    assert!(post.untried_family_class(&p, who, h200).is_some());
    let outside = post.job(&p, "finetune-llm", crate::policy::WorkloadClass::Training);
    assert!(post.untried_family_class(&p, outside, h200).is_none());
}

/// `hpo-sweep` (throughput exponent 1) with 40 runs on L40S-48GB as the catalog says, and one run on
/// H100-80GB (2.9x as fast by the catalog) `factor` times as long as expected there.
fn one_slow_run_on_h100(p: &Policy, factor: f64) -> Learned {
    let mut l = Learned::default();
    let l40s = p.class_index("L40S-48GB").unwrap();
    let h100 = p.class_index("H100-80GB").unwrap();
    let on_l40s = runtime_estimate(p, &l, "hpo-sweep", 1, l40s).mean;
    let on_h100 = runtime_estimate(p, &l, "hpo-sweep", 1, h100).mean;
    for _ in 0..40 {
        observe(p, &mut l, &run("hpo-sweep", "L40S-48GB", 1, on_l40s, &[]));
    }
    observe(
        p,
        &mut l,
        &run("hpo-sweep", "H100-80GB", 1, factor * on_h100, &[]),
    );
    l
}

#[test]
fn a_class_whose_only_run_may_have_straggled_is_tried_again() {
    let req = {
        let mut r = job("gold", "hpo-sweep", 16.0);
        r.candidate_classes = vec!["H100-80GB".into(), "L40S-48GB".into()];
        r
    };
    let tries = |p: &Policy, l: &Learned| {
        let h100 = p.class_index("H100-80GB").unwrap();
        (0..200)
            .map(|seed| {
                score_gated(
                    p,
                    l,
                    &req,
                    Gate::Window {
                        room: true,
                        saved: f64::INFINITY,
                    },
                    seed,
                )
            })
            .filter(|d| d.explored && d.accepted()[0].class == h100)
            .map(|d| d.why.reason(p))
            .collect::<Vec<_>>()
    };
    let p = embedded_default().unwrap();
    // One run 3.5x as long as expected on H100 makes it look dearer than L40S under the Gaussian alone
    // (the exploiting choice); held a straggler a few % likely, with ~40 runs to come, a second run there
    // pays.
    let l = one_slow_run_on_h100(&p, 3.5);
    let (h100, l40s) = (
        p.class_index("H100-80GB").unwrap(),
        p.class_index("L40S-48GB").unwrap(),
    );
    let post = l.posterior(&p);
    let who = post.job(&p, "hpo-sweep", WorkloadClass::Batch);
    let s = post.straggled(who, h100).expect("a straggling reading");
    assert!(s.weight > 0.01 && s.weight < 0.3, "{s:?}");
    // Without the run, H100 is faster than L40S again.
    assert!(s.log_mean < post.estimate(&p, who, l40s).log_mean);
    assert!(post.estimate(&p, who, h100).log_mean > post.estimate(&p, who, l40s).log_mean);
    let with = tries(&p, &l);
    assert!(with.len() > 190, "{} of 200", with.len());
    assert!(
        with.iter().any(|r| r.contains("may have straggled")),
        "{}",
        with[0]
    );
    // No stragglers held possible: the class is tried only when the draw favours it (about 1 in 4).
    let mut none = p.clone();
    none.learning.straggler_share = 0.0;
    let without = tries(&none, &one_slow_run_on_h100(&none, 3.5));
    assert!(without.len() < 100, "{} of 200", without.len());
    // A run faster than expected, or two slow ones, have no straggling reading.
    let fast = one_slow_run_on_h100(&p, 0.5).posterior(&p);
    assert!(fast.straggled(who, h100).is_none());
    let mut twice = one_slow_run_on_h100(&p, 3.5);
    let on_h100 = runtime_estimate(&p, &Learned::default(), "hpo-sweep", 1, h100).mean;
    observe(
        &p,
        &mut twice,
        &run("hpo-sweep", "H100-80GB", 1, 3.5 * on_h100, &[]),
    );
    assert!(twice.posterior(&p).straggled(who, h100).is_none());
}
