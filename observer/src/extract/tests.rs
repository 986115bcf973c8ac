use serde_json::{Value, json};

use super::*;

/// A Pod as the apiserver returns it after the frontend decided it and the kubelet ran it: `containers` are the
/// status entries of the main containers (in spec order), `phase` the Pod phase.
fn pod(uid: &str, node: &str, phase: &str, containers: Value) -> Value {
    let statuses = containers.as_array().unwrap();
    let spec_containers: Vec<Value> = statuses
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut c = json!({"name": s["name"], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun", "--nproc-per-node=2", "train.py"],
                "resources": {"limits": {"cpu": "8", "memory": "64Gi"}}});
            if i == 0 {
                c["resources"]["limits"]["nvidia.com/gpu"] = json!("2");
            }
            c
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("llama-ft-{uid}"), "namespace": "team-a", "uid": uid,
            "resourceVersion": "4711", "creationTimestamp": "2026-05-04T09:59:58Z",
            "labels": {"job-name": "llama-ft", "gpu-admission.io/job-type": "finetune-llm"},
            "annotations": {
                "gpu-admission.io/decided-at": "2026-05-04T09:59:58Z",
                "gpu-admission.io/gpu-class": "A100-80GB",
                "gpu-admission.io/placement": "pod: nodeAffinity",
                "gpu-admission.io/alternatives": "A100-80GB=1,H100-80GB=0.91,L4-24GB=0.5",
                "gpu-admission.io/priority-score": "72.40",
                "gpu-admission.io/policy-version": "1"
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-ft",
                "uid": "0d4c0a40-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "initContainers": [{"name": "fetch-weights", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}],
            "containers": spec_containers,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {
            "phase": phase,
            "hostIP": "10.0.3.17", "podIP": "10.244.3.41",
            "startTime": "2026-05-04T10:00:00Z",
            "initContainerStatuses": [{"name": "fetch-weights", "ready": false, "restartCount": 0,
                "image": "busybox:1.36", "imageID": "", "containerID": "containerd://init",
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": "2026-05-04T10:00:01Z", "finishedAt": "2026-05-04T10:05:00Z"}}}],
            "containerStatuses": containers
        }
    })
}

fn terminated(name: &str, reason: &str, code: i32, started: &str, finished: &str) -> Value {
    json!({"name": name, "ready": false, "restartCount": 0, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "imageID": "", "containerID": format!("containerd://{name}"), "started": false,
        "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}}})
}

fn running(name: &str, started: &str) -> Value {
    json!({"name": name, "ready": true, "restartCount": 0, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "imageID": "", "containerID": format!("containerd://{name}"), "started": true,
        "state": {"running": {"startedAt": started}}})
}

fn typed(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn catalog() -> PolicyFacts {
    // The shipped policy's classes, selected by `gpu.nvidia.com/class=<name>`.
    let shipped = gpu_admission_policy::parse(
        gpu_admission_policy::DEFAULT_POLICY_YAML,
        "default-policy.yaml",
    )
    .unwrap();
    let class = |name: &str| {
        let c = shipped.classes.iter().find(|c| c.name == name).unwrap();
        assert_eq!(
            (c.node_label_key.as_str(), c.node_label_value.as_str()),
            ("gpu.nvidia.com/class", name)
        );
        c.clone()
    };
    PolicyFacts {
        catalog: vec![class("H100-80GB"), class("A100-80GB"), class("L4-24GB")],
    }
}

fn node_labels(class: &str) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", "gpu-node-3"),
        ("node.kubernetes.io/instance-type", "p5.48xlarge"),
        ("gpu.nvidia.com/class", class),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn finished_pod(uid: &str) -> Pod {
    typed(pod(
        uid,
        "gpu-node-3",
        "Succeeded",
        json!([terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T11:05:02Z"
        )]),
    ))
}

#[test]
fn a_decided_gpu_pod_is_ours_with_its_gpu_count_and_job_type() {
    let job = decided_job(&finished_pod("u-1")).unwrap();
    assert_eq!(
        job,
        DecidedJob {
            uid: "u-1".into(),
            job_type: "finetune-llm".into(),
            gpu_count: 2,
            workload_class: gpu_admission_policy::WorkloadClass::Unknown,
            namespace: "team-a".into(),
            gpu_shape: GpuShape::Whole,
            record: Record {
                pinned: false,
                class: Some("A100-80GB".into()),
                in_tier: vec!["A100-80GB".into(), "H100-80GB".into(), "L4-24GB".into()],
            },
            learner: Learner::Cluster,
        }
    );
    let mut undecided = pod("u-2", "n", "Running", json!([]));
    undecided["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("gpu-admission.io/decided-at");
    assert_eq!(decided_job(&typed(undecided)), None);
    let mut no_gpu = pod(
        "u-3",
        "n",
        "Running",
        json!([running("trainer", "2026-05-04T10:05:02Z")]),
    );
    no_gpu["spec"]["containers"][0]["resources"]["limits"]
        .as_object_mut()
        .unwrap()
        .remove("nvidia.com/gpu");
    assert_eq!(decided_job(&typed(no_gpu)), None);
    let mut no_label = pod("u-4", "n", "Running", json!([]));
    no_label["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("gpu-admission.io/job-type");
    assert_eq!(decided_job(&typed(no_label)), None);
    // Decided by a namespace-restricted instance: its run is the scorer of the Pod's own namespace's to learn,
    // and only when the record names that namespace (route.rs has every case).
    let trainer = json!([running("trainer", "2026-05-04T10:05:02Z")]);
    let mut restricted = pod("u-5", "n", "Running", trainer.clone());
    restricted["metadata"]["annotations"]["gpu-admission.io/decided-by"] =
        json!("restricted:team-a");
    assert_eq!(
        decided_job(&typed(restricted.clone())).map(|j| j.learner),
        Some(Learner::Team("team-a".into()))
    );
    restricted["metadata"]["annotations"]["gpu-admission.io/decided-by"] =
        json!("restricted:team-b");
    assert_eq!(decided_job(&typed(restricted)), None);
    let mut signed_cluster = pod("u-6", "n", "Running", trainer.clone());
    signed_cluster["metadata"]["annotations"]["gpu-admission.io/decided-by"] = json!("cluster");
    assert!(decided_job(&typed(signed_cluster)).is_some());
    assert!(decided_job(&typed(pod("u-7", "n", "Running", trainer))).is_some());
}

#[test]
fn the_runtime_spans_the_main_containers_not_the_init_containers() {
    let p = typed(pod(
        "u-1",
        "gpu-node-3",
        "Succeeded",
        json!([
            terminated(
                "trainer",
                "Completed",
                0,
                "2026-05-04T10:05:02Z",
                "2026-05-04T11:05:02Z"
            ),
            terminated(
                "log-shipper",
                "Completed",
                0,
                "2026-05-04T10:05:01Z",
                "2026-05-04T11:05:04Z"
            ),
        ]),
    ));
    let job = decided_job(&p).unwrap();
    let Progress::Finished(run) = progress(&p, &job, false) else {
        panic!("{:?}", progress(&p, &job, false))
    };
    assert_eq!(run.start, ts("2026-05-04T10:05:01Z"));
    assert_eq!(run.end, Some(ts("2026-05-04T11:05:04Z")));
    let req = observation(&job, &run, Some(&node_labels("H100-80GB")), &catalog(), []).unwrap();
    assert_eq!(req.runtime_seconds, 3603.0);
    assert_eq!(
        req.gpu_class, "H100-80GB",
        "the node's class, not the annotation's A100"
    );
    assert_eq!(req.observation_id, "u-1");
    assert_eq!(req.gpu_count, 2);
    assert_eq!(req.job_type, "finetune-llm");
    assert!(req.colocated_job_types.is_empty());
}

#[test]
fn running_and_pending_pods_are_not_finished() {
    let p = typed(pod(
        "u-1",
        "gpu-node-3",
        "Running",
        json!([running("trainer", "2026-05-04T10:05:02Z")]),
    ));
    let job = decided_job(&p).unwrap();
    assert_eq!(
        progress(&p, &job, false),
        Progress::Running(Run {
            uid: "u-1".into(),
            job_type: "finetune-llm".into(),
            node: "gpu-node-3".into(),
            start: ts("2026-05-04T10:05:02Z"),
            end: None,
            learner: Learner::Cluster,
        })
    );
    let mut pending = pod("u-2", "", "Pending", json!([]));
    pending["spec"].as_object_mut().unwrap().remove("nodeName");
    pending["status"]
        .as_object_mut()
        .unwrap()
        .remove("containerStatuses");
    let pending = typed(pending);
    assert_eq!(progress(&pending, &job, false), Progress::NotStarted);
}

#[test]
fn evicted_preempted_oom_killed_failed_and_deleted_pods_are_skipped_by_reason() {
    let ok = || {
        terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T11:05:02Z",
        )
    };
    let job = decided_job(&finished_pod("u")).unwrap();
    let check = |v: Value, deleted: bool, want: SkipReason| {
        assert_eq!(
            progress(&typed(v.clone()), &job, deleted),
            Progress::Skip(want),
            "{v}"
        );
    };

    let mut evicted = pod("u", "gpu-node-3", "Failed", json!([]));
    evicted["status"]["reason"] = json!("Evicted");
    evicted["status"]["message"] = json!("The node was low on resource: memory.");
    check(evicted, false, SkipReason::Evicted);

    // Evicted through the Eviction API: the app exited 0 on SIGTERM, which must not count as a finished run.
    let mut api_evicted = pod("u", "gpu-node-3", "Succeeded", json!([ok()]));
    api_evicted["status"]["conditions"] = json!([
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": "2026-05-04T11:05:00Z"},
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-05-04T11:05:03Z"}
    ]);
    check(api_evicted, false, SkipReason::Evicted);

    let mut preempted = pod(
        "u",
        "gpu-node-3",
        "Running",
        json!([running("trainer", "2026-05-04T10:05:02Z")]),
    );
    preempted["metadata"]["deletionTimestamp"] = json!("2026-05-04T10:30:00Z");
    preempted["status"]["conditions"] = json!([{"type": "DisruptionTarget", "status": "True",
        "reason": "PreemptionByScheduler", "message": "gpu-ultra: preempting to accommodate a higher priority pod",
        "lastTransitionTime": "2026-05-04T10:30:00Z"}]);
    check(preempted, false, SkipReason::Preempted);

    let mut kubelet_preempted = pod("u", "gpu-node-3", "Failed", json!([]));
    kubelet_preempted["status"]["reason"] = json!("Preempting");
    check(kubelet_preempted, false, SkipReason::Preempted);

    let oom = pod(
        "u",
        "gpu-node-3",
        "Failed",
        json!([terminated(
            "trainer",
            "OOMKilled",
            137,
            "2026-05-04T10:05:02Z",
            "2026-05-04T10:45:00Z"
        )]),
    );
    check(oom, false, SkipReason::OomKilled);

    // OOM-killed once, restarted (restartPolicy OnFailure), then succeeded: still an OOM-kill.
    let mut restarted = pod("u", "gpu-node-3", "Succeeded", json!([ok()]));
    restarted["status"]["containerStatuses"][0]["restartCount"] = json!(1);
    restarted["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": {"exitCode": 137,
        "reason": "OOMKilled", "startedAt": "2026-05-04T10:01:00Z", "finishedAt": "2026-05-04T10:05:00Z"}});
    check(restarted, false, SkipReason::OomKilled);

    let failed = pod(
        "u",
        "gpu-node-3",
        "Failed",
        json!([terminated(
            "trainer",
            "Error",
            1,
            "2026-05-04T10:05:02Z",
            "2026-05-04T10:06:00Z"
        )]),
    );
    check(failed, false, SkipReason::Failed);

    let mut deadline = pod("u", "gpu-node-3", "Failed", json!([]));
    deadline["status"]["reason"] = json!("DeadlineExceeded");
    check(deadline, false, SkipReason::Failed);

    let running_pod = pod(
        "u",
        "gpu-node-3",
        "Running",
        json!([running("trainer", "2026-05-04T10:05:02Z")]),
    );
    check(
        running_pod.clone(),
        true,
        SkipReason::DeletedBeforeFinishing,
    );
    let mut terminating = running_pod;
    terminating["metadata"]["deletionTimestamp"] = json!("2026-05-04T10:30:00Z");
    check(terminating, false, SkipReason::DeletedBeforeFinishing);

    // A finished Pod deleted afterwards (a Job's TTL) still counts.
    let done = finished_pod("u");
    assert!(matches!(progress(&done, &job, true), Progress::Finished(_)));
}

#[test]
fn a_succeeded_pod_without_usable_times_is_skipped() {
    let job = decided_job(&finished_pod("u")).unwrap();
    let mut no_finish = pod(
        "u",
        "gpu-node-3",
        "Succeeded",
        json!([terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T11:05:02Z"
        )]),
    );
    no_finish["status"]["containerStatuses"][0]["state"]["terminated"]
        .as_object_mut()
        .unwrap()
        .remove("finishedAt");
    assert_eq!(
        progress(&typed(no_finish), &job, false),
        Progress::Skip(SkipReason::NoUsableTimes)
    );
    let same_second = pod(
        "u",
        "gpu-node-3",
        "Succeeded",
        json!([terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T10:05:02Z"
        )]),
    );
    assert_eq!(
        progress(&typed(same_second), &job, false),
        Progress::Skip(SkipReason::NoUsableTimes)
    );
    // Two main containers in the spec, one status: the kubelet has not reported everything.
    let mut missing = pod(
        "u",
        "gpu-node-3",
        "Succeeded",
        json!([terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T11:05:02Z"
        )]),
    );
    missing["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "envoy"}));
    assert_eq!(
        progress(&typed(missing), &job, false),
        Progress::Skip(SkipReason::NoUsableTimes)
    );
}

#[test]
fn the_class_comes_from_the_node_and_unknown_nodes_are_skipped_not_unlisted_job_types() {
    let p = finished_pod("u-1");
    let job = decided_job(&p).unwrap();
    let Progress::Finished(run) = progress(&p, &job, false) else {
        panic!()
    };
    let facts = catalog();
    assert_eq!(
        observation(&job, &run, Some(&node_labels("L4-24GB")), &facts, [])
            .unwrap()
            .gpu_class,
        "L4-24GB"
    );
    assert_eq!(
        observation(&job, &run, None, &facts, []),
        Err(SkipReason::NodeUnknown)
    );
    let mut cpu_node = node_labels("x");
    cpu_node.remove("gpu.nvidia.com/class");
    assert_eq!(
        observation(&job, &run, Some(&cpu_node), &facts, []),
        Err(SkipReason::NodeWithoutClass)
    );
    let mut other_value = node_labels("T4-16GB");
    other_value.insert("other.io/class".into(), "H100-80GB".into());
    assert_eq!(
        observation(&job, &run, Some(&other_value), &facts, []),
        Err(SkipReason::NodeWithoutClass)
    );
    let unknown = DecidedJob {
        job_type: "my-own-thing".into(),
        ..job.clone()
    };
    // A job type the policy does not list is reported with its workload class (the scorer learns it).
    let req = observation(&unknown, &run, Some(&node_labels("L4-24GB")), &facts, []).unwrap();
    assert_eq!(req.job_type, "my-own-thing");
    assert_eq!(
        req.workload_class,
        gpu_admission_proto::scorer::v1::WorkloadClass::from(job.workload_class) as i32
    );
    // The tenant and the GPU shape go with the run.
    assert_eq!(req.namespace, "team-a");
    assert_eq!(req.gpu_shape, GpuShape::Whole as i32);
}

#[test]
fn a_run_is_reported_only_where_its_decision_record_says_it_may_run() {
    let p = finished_pod("u-1");
    let job = decided_job(&p).unwrap();
    let Progress::Finished(run) = progress(&p, &job, false) else {
        panic!()
    };
    let facts = catalog();
    let on = |job: &DecidedJob, class: &str| {
        observation(job, &run, Some(&node_labels(class)), &facts, []).map(|r| r.gpu_class)
    };
    let with = |edit: &dyn Fn(&mut BTreeMap<String, String>)| {
        let mut p = finished_pod("u-1");
        edit(p.metadata.annotations.as_mut().unwrap());
        decided_job(&p).unwrap()
    };
    // The Pod's own constraint: any in-tier class the scorer weighed, nothing else.
    assert_eq!(on(&job, "H100-80GB"), Ok("H100-80GB".into()));
    let two = with(&|a| {
        a.insert(
            "gpu-admission.io/alternatives".into(),
            "A100-80GB=1,H100-80GB=0.91".into(),
        );
    });
    assert_eq!(on(&two, "H100-80GB"), Ok("H100-80GB".into()));
    assert_eq!(on(&two, "L4-24GB"), Err(SkipReason::NotWhereDecided));
    // Our placement pinned it: only that class.
    let pinned = with(&|a| {
        a.insert("gpu-admission.io/placement".into(), "gpu-admission".into());
    });
    assert_eq!(on(&pinned, "A100-80GB"), Ok("A100-80GB".into()));
    assert_eq!(on(&pinned, "H100-80GB"), Err(SkipReason::NotWhereDecided));
    // An older record without a placement, with its class: that class.
    let older = with(&|a| {
        a.remove("gpu-admission.io/placement");
        a.remove("gpu-admission.io/alternatives");
    });
    assert_eq!(on(&older, "A100-80GB"), Ok("A100-80GB".into()));
    assert_eq!(on(&older, "L4-24GB"), Err(SkipReason::NotWhereDecided));
    // A record that names no class at all (a hand-written `decided-at`): nowhere.
    let bare = with(&|a| {
        a.retain(|k, _| k == "gpu-admission.io/decided-at");
    });
    for class in ["A100-80GB", "H100-80GB", "L4-24GB"] {
        assert_eq!(on(&bare, class), Err(SkipReason::NotWhereDecided));
    }
    assert_eq!(SkipReason::NotWhereDecided.as_str(), "not_where_decided");
}

#[test]
fn mig_slices_and_shares_are_reported_as_such() {
    assert_eq!(gpu_shape("devices"), GpuShape::Whole);
    assert_eq!(gpu_shape("dra"), GpuShape::Whole);
    assert_eq!(gpu_shape("mig"), GpuShape::MigSlice);
    assert_eq!(gpu_shape("devices+mig"), GpuShape::MigSlice);
    assert_eq!(gpu_shape("shared"), GpuShape::Shared);
    assert_eq!(gpu_shape("devices+memory"), GpuShape::Shared);
    assert_eq!(gpu_shape("cores"), GpuShape::Shared);
    let mut p = pod(
        "u-mig",
        "gpu-node-3",
        "Succeeded",
        json!([terminated(
            "trainer",
            "Completed",
            0,
            "2026-05-04T10:05:02Z",
            "2026-05-04T11:05:02Z"
        )]),
    );
    let limits = &mut p["spec"]["containers"][0]["resources"]["limits"];
    limits.as_object_mut().unwrap().remove("nvidia.com/gpu");
    limits["nvidia.com/mig-1g.10gb"] = json!("1");
    assert_eq!(
        decided_job(&typed(p)).unwrap().gpu_shape,
        GpuShape::MigSlice
    );
}

#[test]
fn colocated_job_types_are_the_overlapping_runs_on_the_same_node() {
    let p = finished_pod("me");
    let job = decided_job(&p).unwrap();
    let Progress::Finished(me) = progress(&p, &job, false) else {
        panic!()
    };
    // me: 10:05:02 .. 11:05:02 on gpu-node-3
    let other = |uid: &str, job_type: &str, node: &str, start: &str, end: Option<&str>| Run {
        uid: uid.into(),
        job_type: job_type.into(),
        node: node.into(),
        start: ts(start),
        end: end.map(ts),
        learner: Learner::Cluster,
    };
    let others = [
        me.clone(),
        other(
            "a",
            "train-llama",
            "gpu-node-3",
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T10:30:00Z"),
        ),
        other(
            "b",
            "inference-llm",
            "gpu-node-3",
            "2026-05-04T11:00:00Z",
            None,
        ),
        other(
            "c",
            "train-llama",
            "gpu-node-3",
            "2026-05-04T10:10:00Z",
            Some("2026-05-04T10:20:00Z"),
        ),
        // ends exactly when I start: no shared time
        other(
            "d",
            "vision-train",
            "gpu-node-3",
            "2026-05-04T09:00:00Z",
            Some("2026-05-04T10:05:02Z"),
        ),
        // starts after I finished
        other(
            "e",
            "vision-train",
            "gpu-node-3",
            "2026-05-04T11:05:03Z",
            None,
        ),
        // overlaps in time, another node
        other(
            "f",
            "vision-train",
            "gpu-node-7",
            "2026-05-04T10:00:00Z",
            None,
        ),
    ];
    let req = observation(
        &job,
        &me,
        Some(&node_labels("A100-80GB")),
        &catalog(),
        &others,
    )
    .unwrap();
    assert_eq!(req.colocated_job_types, ["inference-llm", "train-llama"]);
    // A run another scorer learns (a team's restricted instance decided it) beside it is not counted: one
    // scorer's interference statistics come from its own decisions only.
    let mut team = other(
        "g",
        "team-only-job",
        "gpu-node-3",
        "2026-05-04T10:00:00Z",
        None,
    );
    team.learner = Learner::Team("gpu-team".into());
    let mut with_team = others.to_vec();
    with_team.push(team);
    let req = observation(
        &job,
        &me,
        Some(&node_labels("A100-80GB")),
        &catalog(),
        &with_team,
    )
    .unwrap();
    assert_eq!(req.colocated_job_types, ["inference-llm", "train-llama"]);
}

#[test]
fn a_run_that_is_not_reported_stopped_when_its_containers_finished_or_it_was_deleted() {
    let now = ts("2026-05-04T12:00:00Z");
    let oom = typed(pod(
        "u",
        "gpu-node-3",
        "Failed",
        json!([terminated(
            "trainer",
            "OOMKilled",
            137,
            "2026-05-04T10:05:02Z",
            "2026-05-04T10:45:00Z"
        )]),
    ));
    assert_eq!(stopped_at(&oom, now), ts("2026-05-04T10:45:00Z"));
    let mut deleted = pod(
        "u",
        "gpu-node-3",
        "Running",
        json!([running("trainer", "2026-05-04T10:05:02Z")]),
    );
    deleted["metadata"]["deletionTimestamp"] = json!("2026-05-04T10:30:00Z");
    assert_eq!(
        stopped_at(&typed(deleted.clone()), now),
        ts("2026-05-04T10:30:00Z")
    );
    deleted["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("deletionTimestamp");
    assert_eq!(stopped_at(&typed(deleted), now), now);
}
