use super::*;
use crate::policy::embedded_default;

fn core() -> Core {
    let store = Arc::new(PolicyStore::new(Some(embedded_default().unwrap())));
    Core::new(store, Learned::default(), Arc::new(Metrics::unregistered()))
}

fn request(memory: Option<f64>) -> pb::ScoreRequest {
    pb::ScoreRequest {
        request_id: "r1".into(),
        tier: "gold".into(),
        job_type: "train-llama".into(),
        gpu_count: 1,
        gpu_vendor: pb::GpuVendor::Nvidia as i32,
        gpu_memory_gib: memory,
        ..Default::default()
    }
}

/// A replica exploring on every decision it may (cap 100 %), started with a state where exploring pays and
/// with a run's cost saved against the prior's choices (so it can afford tries), with `epoch` as its
/// decision epoch.
fn exploring_replica(epoch: std::time::Duration) -> Core {
    let mut policy = embedded_default().unwrap();
    policy.learning.exploration_cap = 1.0;
    let store = Arc::new(PolicyStore::new(Some(policy)));
    let metrics = Arc::new(Metrics::unregistered());
    let learner = Core::new(store.clone(), Learned::default(), metrics.clone());
    // train-llama ran 20 times on H100 and twice on A100-80GB, about as fast: A100-80GB is a close, uncertain
    // alternative worth exploring.
    for i in 0..22 {
        learner
            .observe(&pb::ObserveRequest {
                job_type: "train-llama".into(),
                gpu_class: if i < 20 { "H100-80GB" } else { "A100-80GB" }.into(),
                runtime_seconds: if i < 20 { 36_000.0 } else { 36_700.0 },
                observation_id: format!("pod-{i}"),
                ..Default::default()
            })
            .unwrap();
    }
    let mut learned = learner.snapshot();
    learned.exploration.record(false, 1.0, 200);
    Core::new(store, learned, metrics).with_decision_epoch(epoch)
}

fn pod_of(key: &str, pod: usize) -> pb::ScoreRequest {
    pb::ScoreRequest {
        request_id: format!("{key}-pod-{pod}"),
        workload_key: key.into(),
        group_size: Some(32),
        ..request(Some(20.0))
    }
}

fn first_class(r: &pb::ScoreResponse) -> String {
    r.accepted_classes[0].name.clone()
}

#[test]
fn one_workload_one_answer_across_exploration_and_replicas() {
    // Epoch pinning off on one pair, on (default length) on the other: both must agree per workload.
    for epoch in [std::time::Duration::ZERO, decisions::DEFAULT_EPOCH] {
        let (a, b) = (exploring_replica(epoch), exploring_replica(epoch));
        let mut classes = std::collections::BTreeSet::new();
        let mut explored = 0;
        for w in 0..24 {
            let key = format!("batch/Job/ml/train-{w}");
            let first = a.score(&pod_of(&key, 0)).unwrap();
            // Replica b has not seen this workload: it must derive the same answer on its own.
            let other = b.score(&pod_of(&key, 1)).unwrap();
            assert_eq!(first_class(&first), first_class(&other), "{key}");
            assert_eq!(first.priority_class, other.priority_class, "{key}");
            for pod in 2..32 {
                let replica = if pod % 2 == 0 { &a } else { &b };
                let r = replica.score(&pod_of(&key, pod)).unwrap();
                assert_eq!(first_class(&r), first_class(&first), "{key} pod {pod}");
                assert_eq!(r.priority_class, first.priority_class);
                assert_eq!(r.request_id, format!("{key}-pod-{pod}"));
            }
            assert_eq!(first.accepted_classes.len(), 1, "a group gets one class");
            classes.insert(first_class(&first));
            explored += usize::from(first.explored);
        }
        // Each replica decided each workload once and served it from its cache afterwards.
        let answers = |c: &Core, answer| {
            c.metrics
                .workload_answers
                .get_or_create(&crate::metrics::WorkloadLabels { answer })
                .get()
        };
        for replica in [&a, &b] {
            assert_eq!(answers(replica, "decided"), 24);
            assert_eq!(answers(replica, "cached"), 24 * 15);
        }
        // Different workloads are sampled independently: exploration spreads them over several classes.
        assert!(explored > 0, "nothing explored");
        assert!(classes.len() >= 2, "{classes:?}");
    }
    // The per-request seed (no key) does not keep Pods together: the reason for the key.
    let c = exploring_replica(decisions::DEFAULT_EPOCH);
    let unkeyed: std::collections::BTreeSet<String> = (0..32)
        .map(|i| {
            first_class(
                &c.score(&pb::ScoreRequest {
                    request_id: format!("uid-{i}"),
                    ..request(Some(20.0))
                })
                .unwrap(),
            )
        })
        .collect();
    assert!(unkeyed.len() >= 2, "{unkeyed:?}");
    // A workload known to be one Pod keeps every acceptable class; an unknown size counts as a group,
    // also when the answer comes from the cache.
    let mut single = pod_of("batch/Job/ml/one", 0);
    single.group_size = Some(1);
    assert!(c.score(&single).unwrap().accepted_classes.len() > 1);
    single.group_size = None;
    assert_eq!(c.score(&single).unwrap().accepted_classes.len(), 1);
}

#[test]
fn dry_runs_explore_never_spend_no_budget_and_seed_no_workload_decision() {
    let c = exploring_replica(decisions::DEFAULT_EPOCH);
    let budget = c.learned().exploration.clone();
    let dry = |mut r: pb::ScoreRequest| {
        r.dry_run = true;
        r
    };
    for i in 0..64 {
        let bare = c
            .score(&dry(pb::ScoreRequest {
                request_id: format!("uid-{i}"),
                ..request(Some(20.0))
            }))
            .unwrap();
        let keyed = c
            .score(&dry(pod_of(&format!("batch/Job/ml/dry-{i}"), 0)))
            .unwrap();
        assert!(
            !bare.explored && !keyed.explored,
            "a dry run explored ({i})"
        );
        assert!(!bare.accepted_classes.is_empty() && keyed.accepted_classes.len() == 1);
    }
    assert_eq!(
        c.learned().exploration,
        budget,
        "dry runs spent the exploration budget or its savings"
    );
    let answers = |answer| {
        c.metrics
            .workload_answers
            .get_or_create(&crate::metrics::WorkloadLabels { answer })
            .get()
    };
    assert_eq!(
        answers("decided"),
        0,
        "a dry run seeded a workload decision"
    );
    // The same requests for real do explore on this replica, and are kept per workload: what the dry runs
    // left alone.
    let explored = (0..64)
        .filter(|i| {
            c.score(&pod_of(&format!("batch/Job/ml/dry-{i}"), 0))
                .unwrap()
                .explored
        })
        .count();
    assert!(explored > 0);
    assert_eq!(answers("decided"), 64);
    assert!(!c.learned().exploration.is_empty());
    // A dry run of a decided workload is answered with its kept decision.
    let kept = c.score(&pod_of("batch/Job/ml/dry-3", 1)).unwrap();
    let dry_kept = c.score(&dry(pod_of("batch/Job/ml/dry-3", 2))).unwrap();
    assert_eq!(first_class(&kept), first_class(&dry_kept));
}

/// Twenty fast runs on L4: the live state moves away from the pinned one.
fn learn_fast_l4_runs(c: &Core) {
    for i in 0..20 {
        c.observe(&pb::ObserveRequest {
            job_type: "train-llama".into(),
            gpu_class: "L4-24GB".into(),
            runtime_seconds: 1_000.0 + f64::from(i),
            observation_id: format!("obs-{i}"),
            ..Default::default()
        })
        .unwrap();
    }
}

#[test]
fn learning_during_an_epoch_does_not_move_a_workload() {
    let c = exploring_replica(decisions::DEFAULT_EPOCH);
    let keys: Vec<String> = (0..16)
        .map(|w| format!("kubeflow.org/MPIJob/ml/w{w}"))
        .collect();
    let answers: Vec<pb::ScoreResponse> = keys
        .iter()
        .map(|k| c.score(&pod_of(k, 0)).unwrap())
        .collect();
    assert!(answers.iter().any(|a| a.explored), "nothing explored");
    let before: Vec<String> = answers.iter().map(first_class).collect();
    let digest = c.snapshot().digest();
    learn_fast_l4_runs(&c);
    assert_ne!(c.snapshot().digest(), digest, "the live state learned");
    let after: Vec<String> = keys
        .iter()
        .map(|k| first_class(&c.score(&pod_of(k, 5)).unwrap()))
        .collect();
    assert_eq!(before, after);
    // Not the cache: a second replica that learns the same during the epoch and then sees these
    // workloads for the first time decides as the first did before learning (the pinned state). Once in
    // 600 s an epoch boundary may fall inside this block: then it is run again.
    let second_replica = || {
        let epoch = decisions::epoch_of(unix_seconds(), decisions::DEFAULT_EPOCH);
        let b = exploring_replica(decisions::DEFAULT_EPOCH);
        learn_fast_l4_runs(&b);
        let classes: Vec<String> = keys
            .iter()
            .map(|k| first_class(&b.score(&pod_of(k, 7)).unwrap()))
            .collect();
        (epoch == decisions::epoch_of(unix_seconds(), decisions::DEFAULT_EPOCH)).then_some(classes)
    };
    let theirs = second_replica().or_else(second_replica).unwrap();
    assert_eq!(theirs, before);
    // Explain shows the pinned decision too (same seed, same pinned state).
    let e = c.explain(&pod_of(&keys[0], 9)).unwrap();
    assert_eq!(first_class(e.answer.as_ref().unwrap()), before[0]);
    // A workload key that does not fit is refused.
    let mut r = pod_of(&"x".repeat(2000), 0);
    r.workload_key = "x".repeat(2000);
    assert_eq!(
        c.score(&r).map_err(tonic::Status::from).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
}

#[test]
fn bad_numbers_are_invalid_arguments() {
    let c = core();
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let e = c.score(&request(Some(bad))).unwrap_err();
        assert!(
            matches!(&e, CoreError::InvalidArgument(m) if m.contains("gpu_memory_gib")),
            "{bad}: {e:?}"
        );
    }
    let mut r = request(Some(10.0));
    r.model_size_billion_params = Some(f64::NAN);
    assert_eq!(
        c.score(&r).map_err(tonic::Status::from).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut r = request(Some(10.0));
    r.job_type = "x".repeat(1000);
    assert_eq!(
        c.score(&r).map_err(tonic::Status::from).unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    // Unknown enum numbers are treated as "not said", not as errors.
    let mut r = request(Some(10.0));
    r.workload_class = 99;
    r.gpu_vendor = 42;
    assert!(c.score(&r).is_ok());
}

#[test]
fn observe_validates_and_learns() {
    let c = core();
    let ok = pb::ObserveRequest {
        job_type: "train-llama".into(),
        gpu_class: "H100-80GB".into(),
        runtime_seconds: 40_000.0,
        colocated_job_types: vec![],
        ..Default::default()
    };
    let r = c.observe(&ok).unwrap();
    assert_eq!(r.observations, 1);
    assert!(r.runtime_mean_seconds < 43_200.0);
    for bad in [
        pb::ObserveRequest {
            runtime_seconds: f64::NAN,
            ..ok.clone()
        },
        pb::ObserveRequest {
            runtime_seconds: 0.0,
            ..ok.clone()
        },
        pb::ObserveRequest {
            gpu_class: "T4".into(),
            ..ok.clone()
        },
        pb::ObserveRequest {
            job_type: String::new(),
            ..ok.clone()
        },
    ] {
        assert_eq!(
            c.observe(&bad)
                .map_err(tonic::Status::from)
                .unwrap_err()
                .code(),
            tonic::Code::InvalidArgument,
            "{bad:?}"
        );
    }
    assert_eq!(
        c.snapshot().runtimes.get("train-llama", "H100-80GB").count,
        1
    );
    // A job type the policy does not list is learned too, under its workload class's prior.
    let unlisted = pb::ObserveRequest {
        job_type: "mystery".into(),
        workload_class: pb::WorkloadClass::Batch as i32,
        ..ok.clone()
    };
    assert_eq!(c.observe(&unlisted).unwrap().observations, 1);
    assert_eq!(c.snapshot().runtimes.get("mystery", "H100-80GB").count, 1);
    assert_eq!(
        c.snapshot()
            .unlisted
            .get("mystery")
            .unwrap()
            .workload_class(),
        crate::policy::WorkloadClass::Batch
    );
}

#[test]
fn no_policy_means_unavailable() {
    let c = Core::new(
        Arc::new(PolicyStore::new(None)),
        Learned::default(),
        Arc::new(Metrics::unregistered()),
    );
    assert_eq!(
        c.score(&request(Some(1.0)))
            .map_err(tonic::Status::from)
            .unwrap_err()
            .code(),
        tonic::Code::Unavailable
    );
    assert_eq!(
        c.get_policy()
            .map_err(tonic::Status::from)
            .unwrap_err()
            .code(),
        tonic::Code::Unavailable
    );
}

#[test]
fn get_policy_carries_the_document_it_scores_with() {
    let p = core().get_policy().unwrap();
    let shipped = embedded_default().unwrap();
    assert_eq!(p.version, shipped.version);
    assert_eq!(p.document, shipped.document);
    // The document reads back as the rules the scorer holds.
    let read = gpu_admission_policy::wire::policy_of(&p).unwrap();
    assert_eq!(read.version, shipped.version);
    let bronze = &read.tiers[read.tier_index("bronze").unwrap()];
    assert_eq!(bronze.max_priority_class.as_deref(), Some("gpu-default"));
    assert_eq!(read.enforcement, shipped.enforcement);
    let train = &read.job_types[read.job_index("train-llama").unwrap()];
    assert_eq!(train.default_memory_gib, Some(40.0));
}

#[test]
fn validate_policy_reports_every_problem_and_loads_nothing() {
    let c = core();
    let before = c.get_policy().unwrap().version;
    let ok = c
        .validate_policy(&pb::ValidatePolicyRequest {
            file: "cm".into(),
            text: crate::policy::DEFAULT_POLICY_YAML.into(),
        })
        .unwrap();
    assert!(ok.valid && ok.problems.is_empty() && !ok.version.is_empty());
    let bad = crate::policy::DEFAULT_POLICY_YAML
        .replace(
            "maxPriorityClass: gpu-default",
            "maxPriorityClass: gpu-gold",
        )
        .replace("  tau: 0.2 ", "  tau: 0 ");
    let r = c
        .validate_policy(&pb::ValidatePolicyRequest {
            file: "cm".into(),
            text: bad,
        })
        .unwrap();
    assert!(!r.valid);
    let fields: Vec<_> = r.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["tiers[bronze].maxPriorityClass", "learning.tau"]);
    assert!(r.problems.iter().all(|p| p.file == "cm"));
    assert_eq!(c.get_policy().unwrap().version, before);
    let huge = "x".repeat(MAX_POLICY_BYTES + 1);
    let err = c
        .validate_policy(&pb::ValidatePolicyRequest {
            file: "cm".into(),
            text: huge,
        })
        .unwrap_err();
    assert!(matches!(err, CoreError::InvalidArgument(_)), "{err:?}");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Code::InvalidArgument
    );
}

#[test]
fn the_rules_digest_changes_with_what_a_tier_gets_and_nothing_else() {
    let base = crate::policy::DEFAULT_POLICY_YAML;
    let digest = |text: &str| validate_policy_text(text, "p").rules_digest;
    let d0 = digest(base);
    assert_eq!(d0.len(), 16);
    // Comments, formatting and the learning parameters are not rules.
    let commented = format!("# a comment\n{base}");
    assert_eq!(digest(&commented), d0);
    let jobs = base.replace("baseRuntimeSeconds: 86400", "baseRuntimeSeconds: 90000");
    assert_ne!(jobs, base);
    assert_eq!(digest(&jobs), d0);
    // Tiers, enforcement, grants and class labels are.
    for (from, to) in [
        (
            "allowedClasses: [L4-24GB]",
            "allowedClasses: [L4-24GB, H100-80GB]",
        ),
        ("mode: Warn", "mode: Audit"),
        (
            "namespaceGrants: []",
            "namespaceGrants: [{namespace: team-a, allowedClasses: [H100-80GB]}]",
        ),
        (
            "nodeLabelKey: gpu.nvidia.com/class\n",
            "nodeLabelKey: example.com/class\n",
        ),
    ] {
        let changed = base.replacen(from, to, 1);
        assert_ne!(changed, base, "{from}");
        assert_ne!(digest(&changed), d0, "{from} -> {to}");
    }
    assert_eq!(digest("not: [valid"), "");
}

/// The seed written plainly: SHA-256 of the policy seed, the observations learned (count, ids' fingerprint)
/// and `encode_to_vec`.
fn seed_by_encode_to_vec(policy: &Policy, learned: &Learned, req: &pb::ScoreRequest) -> u64 {
    use prost::Message;
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(policy.learning.seed.to_le_bytes());
    h.update(learned.observations.to_le_bytes());
    h.update(learned.observed.fingerprint().to_le_bytes());
    h.update(req.encode_to_vec());
    u64::from_le_bytes(h.finalize()[..8].try_into().unwrap())
}

#[test]
fn decision_seeds_move_with_the_observations_learned_not_with_what_is_kept_of_them() {
    let policy = embedded_default().unwrap();
    let core = exploring_replica(std::time::Duration::ZERO);
    let learned = core.snapshot();
    let req = request(Some(40.0));
    let seed = decision_seed(&policy, &learned, &req);
    // Another statistic kept from the same runs (here a pair slowdown): the state's digest moves, the
    // decision's draws do not.
    let mut more = learned.clone();
    more.interference
        .record_weighted("train-llama", "notebook", 0.4, 1.0, 1);
    more.invalidate();
    assert_ne!(state::digest(&more), state::digest(&learned));
    assert_eq!(decision_seed(&policy, &more, &req), seed);
    // One more observation learned: drawn again.
    core.observe(&pb::ObserveRequest {
        job_type: "train-llama".into(),
        gpu_class: "H100-80GB".into(),
        runtime_seconds: 36_100.0,
        observation_id: "pod-extra".into(),
        ..Default::default()
    })
    .unwrap();
    let after = core.snapshot();
    assert_eq!(after.observations, learned.observations + 1);
    assert_ne!(decision_seed(&policy, &after, &req), seed);
    // Other ids, as many of them: drawn again too.
    let mut other = learned.clone();
    other.observed = Default::default();
    assert_ne!(decision_seed(&policy, &other, &req), seed);
}

#[test]
fn decision_seeds_are_those_of_the_encoded_request() {
    let policy = embedded_default().unwrap();
    let learned = exploring_replica(std::time::Duration::ZERO).snapshot();
    let big = pb::ScoreRequest {
        colocated_job_types: vec!["x".repeat(40_000); 3],
        ..request(Some(40.0))
    };
    // Buffers of earlier (longer, shorter) requests must not leak into a later seed.
    for req in [request(Some(80.0)), big, request(None), request(Some(80.0))] {
        for l in [&Learned::default(), &learned] {
            assert_eq!(
                decision_seed(&policy, l, &req),
                seed_by_encode_to_vec(&policy, l, &req)
            );
        }
    }
}

#[test]
fn feasible_candidates_only_leaves_out_the_infeasible_ones_and_nothing_else() {
    let c = core();
    // 70 GiB in gold: the 80 GiB classes fit; smaller ones, AMD and classes outside the tier do not.
    let full = c.score(&request(Some(70.0))).unwrap();
    let brief = c
        .score(&pb::ScoreRequest {
            feasible_candidates_only: true,
            ..request(Some(70.0))
        })
        .unwrap();
    assert!(full.candidates.iter().any(|k| !k.feasible));
    let feasible: Vec<_> = full.candidates.iter().filter(|k| k.feasible).collect();
    assert!(!feasible.is_empty());
    let names =
        |v: &[&pb::CandidateScore]| v.iter().map(|k| k.gpu_class.clone()).collect::<Vec<_>>();
    let brief_refs: Vec<_> = brief.candidates.iter().collect();
    assert_eq!(names(&brief_refs), names(&feasible));
    assert!(
        brief
            .candidates
            .iter()
            .all(|k| k.feasible && k.infeasible_reason.is_empty())
    );
    assert_eq!(
        brief
            .accepted_classes
            .iter()
            .map(|k| &k.name)
            .collect::<Vec<_>>(),
        full.accepted_classes
            .iter()
            .map(|k| &k.name)
            .collect::<Vec<_>>()
    );
    // Nothing fits: no candidate is sent, and the answer still says why.
    let none = c
        .score(&pb::ScoreRequest {
            feasible_candidates_only: true,
            ..request(Some(500.0))
        })
        .unwrap();
    assert!(none.accepted_classes.is_empty() && none.candidates.is_empty());
    assert_eq!(
        none.infeasible_reason,
        c.score(&request(Some(500.0))).unwrap().infeasible_reason
    );
    assert!(!none.infeasible_reason.is_empty());
}

#[test]
fn an_answer_names_the_learned_state_it_was_decided_with() {
    let c = core();
    let digest = || c.export_state().unwrap().digest;
    let before = c.score(&request(Some(20.0))).unwrap();
    assert_eq!(before.state_digest, digest());
    let workload = c.score(&pod_of("batch/Job/ml/w", 0)).unwrap();
    assert_eq!(workload.state_digest, digest(), "nothing learned yet");
    c.observe(&pb::ObserveRequest {
        job_type: "train-llama".into(),
        gpu_class: "H100-80GB".into(),
        runtime_seconds: 3600.0,
        observation_id: "pod-1".into(),
        ..Default::default()
    })
    .unwrap();
    let after = c.score(&request(Some(20.0))).unwrap();
    assert_ne!(after.state_digest, before.state_digest, "learned one run");
    assert_eq!(after.state_digest, digest());
    let explained = c.explain(&request(Some(20.0))).unwrap();
    assert_eq!(explained.answer.unwrap().state_digest, digest());
}
