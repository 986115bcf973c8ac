//! THE restore decision as a pure function: Pod + its Job (+ the Job's controller) + the CheckpointBackups of
//! the namespace → RFC 6902 patch, warnings, and what was restored or missed per container.
//!
//! Rules (each one is a test below):
//! - only a Pod whose controlling owner (`ownerReferences` with `controller: true`) is a batch Job
//!   ([`controlling_job`]); a Pod already carrying [`ANN_RESTORED_FROM`] is left alone (a second pass changes
//!   nothing);
//! - a backup refers to the Pod when it lives in the Pod's namespace and its `resourceRef` names there (a
//!   `resourceRef.namespace` naming another namespace refers to nothing: a backup never restores across
//!   namespaces) that Job (`kind: Job`), or the CronJob that controls that Job (`kind: CronJob`, taken from the
//!   Job's own `ownerReferences`, never from its name);
//! - several backups refer to it: the newest by `creationTimestamp` wins (then the name, for a stable
//!   answer), and a warning names the others;
//! - per container and init container, by name: `spec.containers[].image` first, else the
//!   `status.builtImages[]` with `pushed: true` (latest `buildTime` wins); a built image never pushed cannot be
//!   pulled on another node and is not used; unmatched containers keep their image;
//! - each restored image is a `test` of the original image followed by a `replace`; the annotations
//!   [`ANN_RESTORED_FROM`] (`namespace/name` of the backup) and [`ANN_ORIGINAL_IMAGES`]
//!   (`container=image,...` of the restored containers) are added without touching the Pod's other
//!   annotations (the whole map only when it is missing), so the patch composes with `/mutate-pod` in either
//!   order.

use std::sync::Arc;

pub mod backup;
pub mod registration;

use json_patch::{AddOperation, PatchOperation, ReplaceOperation, TestOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::names::checkpoint::{ANN_ORIGINAL_IMAGES, ANN_RESTORED_FROM};

use backup::CheckpointBackup;

/// Why a container kept its image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Miss {
    /// No CheckpointBackup refers to the Pod's Job or its CronJob.
    NoBackup,
    /// The chosen backup names no image for this container.
    NoContainerMatch,
    /// The chosen backup has only built images that were never pushed for this container.
    UnpushedImageOnly,
}

/// One replaced image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    pub container: String,
    pub original: String,
    pub image: String,
}

/// The answer for one Pod of a Job.
#[derive(Debug, Default)]
pub struct Restore {
    pub patch: Vec<PatchOperation>,
    pub warnings: Vec<String>,
    /// `namespace/name` of the chosen backup.
    pub backup: Option<String>,
    pub restored: Vec<Restored>,
    /// Containers (and init containers) that kept their image, with the reason.
    pub misses: Vec<(String, Miss)>,
}

/// The Pod's owning Job, and what the cluster says about the Job's own controller.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts<'a> {
    pub name: &'a str,
    /// The Job's controlling owner; `Err(why)` when the Job could not be read (CronJob backups then cannot
    /// be matched, and a warning says so).
    pub controller: Result<Option<&'a OwnerReference>, &'a str>,
}

/// Everything the restore depends on.
pub struct RestoreInput<'a> {
    pub pod: &'a Pod,
    /// The namespace of the request (a Pod being created may not carry it in its metadata).
    pub namespace: &'a str,
    pub job: JobFacts<'a>,
    /// CheckpointBackups; those that do not refer to the Pod are ignored.
    pub backups: &'a [Arc<CheckpointBackup>],
}

fn is_batch(api_version: &str) -> bool {
    api_version == "batch" || api_version.starts_with("batch/")
}

/// The Pod's controlling owner when it is a batch Job.
pub fn controlling_job(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .filter(|r| r.kind == "Job" && is_batch(&r.api_version))
}

/// The controlling CronJob's name, when `controller` is one.
fn cron_job_name(controller: Option<&OwnerReference>) -> Option<&str> {
    controller
        .filter(|r| r.kind == "CronJob" && is_batch(&r.api_version))
        .map(|r| r.name.as_str())
}

/// Does this backup name a batch CronJob (so the Job's controller must be known to match it)?
pub fn names_cron_job(b: &CheckpointBackup) -> bool {
    let r = &b.spec.resource_ref;
    r.kind == "CronJob" && (r.api_version.is_empty() || is_batch(&r.api_version))
}

fn refers_to(b: &CheckpointBackup, namespace: &str, job: &str, cron_job: Option<&str>) -> bool {
    let r = &b.spec.resource_ref;
    if b.target_namespace() != Some(namespace)
        || !(r.api_version.is_empty() || is_batch(&r.api_version))
    {
        return false;
    }
    match r.kind.as_str() {
        "Job" => r.name == job,
        "CronJob" => cron_job == Some(r.name.as_str()),
        _ => false,
    }
}

fn backup_id(b: &CheckpointBackup) -> String {
    format!(
        "{}/{}",
        b.metadata.namespace.as_deref().unwrap_or(""),
        b.metadata.name.as_deref().unwrap_or("")
    )
}

fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// The checkpoint image of `container` in `b`, or why there is none.
fn image_for<'b>(b: &'b CheckpointBackup, container: &str) -> Result<&'b str, Miss> {
    if let Some(c) = b
        .spec
        .containers
        .iter()
        .find(|c| c.name == container && !c.image.is_empty())
    {
        return Ok(&c.image);
    }
    let built: Vec<_> = b
        .status
        .iter()
        .flat_map(|s| &s.built_images)
        .filter(|i| i.container_name == container && !i.image_name.is_empty())
        .collect();
    // `max_by_key` keeps the last of equal keys: among equal (or unreadable) build times, the later entry.
    built
        .iter()
        .filter(|i| i.pushed)
        .max_by_key(|i| i.build_time.as_deref().and_then(parse_time))
        .map(|i| i.image_name.as_str())
        .ok_or(if built.is_empty() {
            Miss::NoContainerMatch
        } else {
            Miss::UnpushedImageOnly
        })
}

fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

/// The Pod's containers and init containers, with the list each is in and its index there.
fn pod_containers(pod: &Pod) -> Vec<(&'static str, usize, &Container)> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .enumerate()
                .map(|(i, c)| ("containers", i, c))
        })
        .chain(spec.into_iter().flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .enumerate()
                .map(|(i, c)| ("initContainers", i, c))
        }))
        .collect()
}

/// The backups that refer to the Pod's Job (or its CronJob), newest first; equal times by name, so every
/// replica picks the same. Warns when CronJob backups could not be considered.
fn matching_backups<'b>(
    input: &RestoreInput<'b>,
    warnings: &mut Vec<String>,
) -> Vec<&'b CheckpointBackup> {
    let cron_job = input.job.controller.ok().and_then(cron_job_name);
    let mut matching: Vec<&CheckpointBackup> = input
        .backups
        .iter()
        .map(Arc::as_ref)
        .filter(|b| refers_to(b, input.namespace, input.job.name, cron_job))
        .collect();
    if let Err(why) = input.job.controller
        && input
            .backups
            .iter()
            .any(|b| names_cron_job(b) && b.target_namespace() == Some(input.namespace))
    {
        warnings.push(format!(
            "gpu-admission: CronJob checkpoints not considered for Job {}: {why}",
            input.job.name
        ));
    }
    matching.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    matching
}

/// `test` + `replace` of each container image the chosen backup has a pushed image for; the rest are misses.
fn replace_images(
    chosen: &CheckpointBackup,
    chosen_id: &str,
    containers: &[(&str, usize, &Container)],
    out: &mut Restore,
) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    for (list, index, c) in containers {
        let Some(original) = c.image.as_deref().filter(|i| !i.is_empty()) else {
            out.misses.push((c.name.clone(), Miss::NoContainerMatch));
            continue;
        };
        match image_for(chosen, &c.name) {
            Ok(image) => {
                let index = index.to_string();
                let path = ptr(["spec", list, index.as_str(), "image"]);
                ops.push(PatchOperation::Test(TestOperation {
                    path: path.clone(),
                    value: json!(original),
                }));
                ops.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: json!(image),
                }));
                out.restored.push(Restored {
                    container: c.name.clone(),
                    original: original.to_string(),
                    image: image.to_string(),
                });
            }
            Err(miss) => {
                if miss == Miss::UnpushedImageOnly {
                    out.warnings.push(format!(
                        "gpu-admission: CheckpointBackup {chosen_id} has only unpushed images for container {}; \
                         it starts from its own image",
                        c.name
                    ));
                }
                out.misses.push((c.name.clone(), miss));
            }
        }
    }
    ops
}

/// The restore record: which backup, and the images it replaced.
fn record_restore(
    pod: &Pod,
    chosen_id: &str,
    restored: &[Restored],
    ops: &mut Vec<PatchOperation>,
) {
    let originals = restored
        .iter()
        .map(|r| format!("{}={}", r.container, r.original))
        .collect::<Vec<_>>()
        .join(",");
    let members = [
        (ANN_RESTORED_FROM, json!(chosen_id)),
        (ANN_ORIGINAL_IMAGES, json!(originals)),
    ];
    if pod.metadata.annotations.is_some() {
        for (k, v) in members {
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(["metadata", "annotations", k]),
                value: v,
            }));
        }
    } else {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["metadata", "annotations"]),
            value: Value::Object(members.into_iter().map(|(k, v)| (k.into(), v)).collect()),
        }));
    }
}

/// Decides the restore of one Pod. `None` when the Pod is not a Job's or was already restored (nothing to
/// count); otherwise the patch (possibly empty) with the per-container outcome.
pub fn decide(input: &RestoreInput<'_>) -> Option<Restore> {
    let pod = input.pod;
    controlling_job(pod)?;
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_RESTORED_FROM))
    {
        return None;
    }
    let containers = pod_containers(pod);
    let mut out = Restore::default();
    let matching = matching_backups(input, &mut out.warnings);
    let Some(chosen) = matching.first().copied() else {
        out.misses = containers
            .iter()
            .map(|(_, _, c)| (c.name.clone(), Miss::NoBackup))
            .collect();
        return Some(out);
    };
    let chosen_id = backup_id(chosen);
    if matching.len() > 1 {
        let others: Vec<String> = matching[1..].iter().map(|b| backup_id(b)).collect();
        out.warnings.push(format!(
            "gpu-admission: {} CheckpointBackups refer to this Pod's Job; restored from the newest, {chosen_id}; \
             ignored {}",
            matching.len(),
            others.join(", ")
        ));
    }
    let mut ops = replace_images(chosen, &chosen_id, &containers, &mut out);
    if !out.restored.is_empty() {
        record_restore(pod, &chosen_id, &out.restored, &mut ops);
    } else if !containers.is_empty() {
        out.warnings.push(format!(
            "gpu-admission: CheckpointBackup {chosen_id} refers to this Pod's Job but names none of its containers' \
             pushed images; Pod admitted unchanged"
        ));
    }
    out.patch = ops;
    out.backup = Some(chosen_id);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NS: &str = "ml";

    fn job_ref(name: &str, uid: &str) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
               "controller": true, "blockOwnerDeletion": true})
    }

    fn cron_ref(name: &str) -> OwnerReference {
        serde_json::from_value(
            json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "name": name,
            "uid": format!("uid-{name}"), "controller": true}),
        )
        .unwrap()
    }

    /// A Pod of Job `job` (owner reference with controller: true, the job controller's labels).
    fn job_pod(
        job: &str,
        containers: Value,
        init: Option<Value>,
        annotations: Option<Value>,
    ) -> Value {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{job}-abcde"), "namespace": NS,
                         "labels": {"job-name": job, "controller-uid": "u1"},
                         "ownerReferences": [job_ref(job, "u1")]},
            "spec": {"containers": containers, "restartPolicy": "Never"}
        });
        if let Some(i) = init {
            pod["spec"]["initContainers"] = i;
        }
        if let Some(a) = annotations {
            pod["metadata"]["annotations"] = a;
        }
        pod
    }

    fn two_containers() -> Value {
        json!([{"name": "main", "image": "registry.example/train:1"},
               {"name": "sidecar", "image": "registry.example/log:1"}])
    }

    fn backup(
        name: &str,
        created: &str,
        reference: Value,
        containers: Value,
        built: Value,
    ) -> Arc<CheckpointBackup> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "migration.dcnlab.com/v1", "kind": "CheckpointBackup",
                "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
                "spec": {"resourceRef": reference, "containers": containers,
                         "schedule": "*/10 * * * *", "stopPod": false},
                "status": {"phase": "Completed", "builtImages": built}
            }))
            .unwrap(),
        )
    }

    fn job_backup(name: &str, job: &str, containers: Value) -> Arc<CheckpointBackup> {
        backup(
            name,
            "2026-11-20T10:00:00Z",
            json!({"apiVersion": "batch/v1", "kind": "Job", "name": job}),
            containers,
            json!([]),
        )
    }

    fn cron_backup(name: &str, cron: &str, built: Value) -> Arc<CheckpointBackup> {
        backup(
            name,
            "2026-11-20T10:00:00Z",
            json!({"apiVersion": "batch/v1beta1", "kind": "CronJob", "name": cron}),
            json!([]),
            built,
        )
    }

    /// Runs the decision for `pod_json` in namespace [`NS`], applies the patch with json-patch, parses the
    /// result as a k8s-openapi Pod and checks that a second pass decides nothing.
    fn run(
        pod_json: &Value,
        controller: Result<Option<&OwnerReference>, &str>,
        backups: &[Arc<CheckpointBackup>],
    ) -> (Restore, Pod, Value) {
        run_in(pod_json, NS, controller, backups)
    }

    fn run_in(
        pod_json: &Value,
        namespace: &str,
        controller: Result<Option<&OwnerReference>, &str>,
        backups: &[Arc<CheckpointBackup>],
    ) -> (Restore, Pod, Value) {
        let pod: Pod = serde_json::from_value(pod_json.clone()).unwrap();
        let job = controlling_job(&pod)
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let input = RestoreInput {
            pod: &pod,
            namespace,
            job: JobFacts {
                name: &job,
                controller,
            },
            backups,
        };
        let restore = decide(&input).expect("a Job's Pod");
        let mut doc = pod_json.clone();
        json_patch::patch(&mut doc, &restore.patch)
            .unwrap_or_else(|e| panic!("patch {:#?} does not apply: {e}", restore.patch));
        let patched: Pod = serde_json::from_value(doc.clone()).expect("a valid Pod");
        if !restore.restored.is_empty() {
            let again = RestoreInput {
                pod: &patched,
                ..input
            };
            assert!(decide(&again).is_none(), "a restored Pod is left alone");
        }
        (restore, patched, doc)
    }

    fn images(p: &Pod) -> Vec<&str> {
        let s = p.spec.as_ref().unwrap();
        s.init_containers
            .iter()
            .flatten()
            .chain(&s.containers)
            .map(|c| c.image.as_deref().unwrap_or(""))
            .collect()
    }

    fn annotation<'p>(p: &'p Pod, k: &str) -> Option<&'p str> {
        p.metadata.annotations.as_ref()?.get(k).map(String::as_str)
    }

    #[test]
    fn a_job_backup_restores_the_matching_container_only() {
        let pod = job_pod("train", two_containers(), None, None);
        let b = job_backup(
            "train-ckpt",
            "train",
            json!([{"name": "main", "image": "registry.example/ckpt/train-main:42"}]),
        );
        let (r, p, _) = run(&pod, Ok(None), &[b]);
        assert_eq!(
            images(&p),
            [
                "registry.example/ckpt/train-main:42",
                "registry.example/log:1"
            ]
        );
        assert_eq!(annotation(&p, ANN_RESTORED_FROM), Some("ml/train-ckpt"));
        assert_eq!(
            annotation(&p, ANN_ORIGINAL_IMAGES),
            Some("main=registry.example/train:1")
        );
        assert_eq!(r.backup.as_deref(), Some("ml/train-ckpt"));
        assert_eq!(r.misses, [("sidecar".to_string(), Miss::NoContainerMatch)]);
        // test + replace for the image, one add of the missing annotations map.
        let ops = serde_json::to_value(&r.patch).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/spec/containers/0/image", "value": "registry.example/train:1"},
                {"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example/ckpt/train-main:42"},
                {"op": "add", "path": "/metadata/annotations", "value": {
                    ANN_RESTORED_FROM: "ml/train-ckpt", ANN_ORIGINAL_IMAGES: "main=registry.example/train:1"}}
            ])
        );
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn the_guard_fails_when_the_image_changed_in_between() {
        let pod = job_pod("train", two_containers(), None, None);
        let b = job_backup("c", "train", json!([{"name": "main", "image": "ckpt:1"}]));
        let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
        let r = decide(&RestoreInput {
            pod: &typed,
            namespace: NS,
            job: JobFacts {
                name: "train",
                controller: Ok(None),
            },
            backups: &[b],
        })
        .unwrap();
        let mut changed = pod;
        changed["spec"]["containers"][0]["image"] = json!("someone-else:2");
        assert!(json_patch::patch(&mut changed, &r.patch).is_err());
    }

    #[test]
    fn a_cron_job_backup_restores_only_jobs_that_cron_job_controls() {
        let built = json!([
            {"containerName": "main", "imageName": "registry.example/ckpt/nightly:old", "buildTime": "2026-11-20T01:00:00Z", "pushed": true},
            {"containerName": "main", "imageName": "registry.example/ckpt/nightly:new", "buildTime": "2026-11-21T01:00:00Z", "pushed": true},
            {"containerName": "main", "imageName": "localhost/ckpt/nightly:newest-unpushed", "buildTime": "2026-11-22T01:00:00Z", "pushed": false}
        ]);
        let b = cron_backup("nightly-ckpt", "nightly", built);
        let nightly = cron_ref("nightly");
        let pod = job_pod("nightly-29000000", two_containers(), None, None);
        let (r, p, _) = run(&pod, Ok(Some(&nightly)), std::slice::from_ref(&b));
        assert_eq!(images(&p)[0], "registry.example/ckpt/nightly:new");
        assert_eq!(r.restored.len(), 1);

        // `nightly-extra-1` starts with "nightly" but belongs to another CronJob (or to none).
        let extra = cron_ref("nightly-extra");
        let pod = job_pod("nightly-extra-1", two_containers(), None, None);
        for controller in [Some(&extra), None] {
            let (r, p, _) = run(&pod, Ok(controller), std::slice::from_ref(&b));
            assert_eq!(
                images(&p),
                ["registry.example/train:1", "registry.example/log:1"]
            );
            assert!(r.patch.is_empty() && r.backup.is_none());
            assert!(r.misses.iter().all(|(_, m)| *m == Miss::NoBackup));
        }
        // A Job named like the CronJob's Jobs, but not controlled by it, is not restored either.
        let pod = job_pod("nightly-29000001", two_containers(), None, None);
        let (r, _, _) = run(&pod, Ok(None), std::slice::from_ref(&b));
        assert!(r.patch.is_empty());
        // A Job named exactly like the CronJob matches a Job backup only, not a CronJob one.
        let pod = job_pod("nightly", two_containers(), None, None);
        let (r, _, _) = run(&pod, Ok(None), std::slice::from_ref(&b));
        assert!(r.patch.is_empty());
    }

    #[test]
    fn unpushed_images_are_never_used() {
        let b = cron_backup(
            "c",
            "nightly",
            json!([{"containerName": "main", "imageName": "localhost/ckpt:1", "pushed": false},
                   {"containerName": "sidecar", "imageName": "registry.example/ckpt/log:7", "pushed": true}]),
        );
        let nightly = cron_ref("nightly");
        let pod = job_pod("nightly-29000000", two_containers(), None, None);
        let (r, p, _) = run(&pod, Ok(Some(&nightly)), &[b]);
        assert_eq!(
            images(&p),
            ["registry.example/train:1", "registry.example/ckpt/log:7"]
        );
        assert_eq!(r.misses, [("main".to_string(), Miss::UnpushedImageOnly)]);
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("unpushed") && w.contains("main")),
            "{:?}",
            r.warnings
        );
        assert_eq!(
            annotation(&p, ANN_ORIGINAL_IMAGES),
            Some("sidecar=registry.example/log:1")
        );
    }

    #[test]
    fn spec_images_come_before_built_images() {
        let b = backup(
            "c",
            "2026-11-20T10:00:00Z",
            json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train"}),
            json!([{"name": "main", "image": "registry.example/ckpt/by-user:1"}]),
            json!([{"containerName": "main", "imageName": "registry.example/ckpt/built:9", "pushed": true},
                   {"containerName": "sidecar", "imageName": "registry.example/ckpt/log:9", "pushed": true,
                    "buildTime": "2026-11-20T10:00:00Z"}]),
        );
        let (r, p, _) = run(
            &job_pod("train", two_containers(), None, None),
            Ok(None),
            &[b],
        );
        assert_eq!(
            images(&p),
            [
                "registry.example/ckpt/by-user:1",
                "registry.example/ckpt/log:9"
            ]
        );
        assert!(r.misses.is_empty());
        assert_eq!(
            annotation(&p, ANN_ORIGINAL_IMAGES),
            Some("main=registry.example/train:1,sidecar=registry.example/log:1")
        );
    }

    #[test]
    fn the_newest_backup_wins_and_the_warning_says_so() {
        let mk = |name: &str, created: &str, image: &str| {
            backup(
                name,
                created,
                json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train"}),
                json!([{"name": "main", "image": image}]),
                json!([]),
            )
        };
        let backups = [
            mk("old", "2026-11-20T10:00:00Z", "ckpt:old"),
            mk("newest", "2026-11-21T09:00:00Z", "ckpt:newest"),
            mk("middle", "2026-11-21T08:00:00Z", "ckpt:middle"),
        ];
        let (r, p, _) = run(
            &job_pod("train", two_containers(), None, None),
            Ok(None),
            &backups,
        );
        assert_eq!(images(&p)[0], "ckpt:newest");
        assert_eq!(annotation(&p, ANN_RESTORED_FROM), Some("ml/newest"));
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let w = &r.warnings[0];
        assert!(
            w.contains("3 CheckpointBackups")
                && w.contains("ml/newest")
                && w.contains("ml/old")
                && w.contains("ml/middle"),
            "{w}"
        );

        // A CronJob backup newer than the Job backup wins too: both refer to the Pod.
        let cron = backup(
            "cron-newer",
            "2026-11-22T00:00:00Z",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"}),
            json!([{"name": "main", "image": "ckpt:cron"}]),
            json!([]),
        );
        let nightly = cron_ref("nightly");
        let mut pod = job_pod("train", two_containers(), None, None);
        pod["metadata"]["name"] = json!("train-x");
        let all = [backups[0].clone(), cron];
        let (_, p, _) = run(&pod, Ok(Some(&nightly)), &all);
        assert_eq!(images(&p)[0], "ckpt:cron");
    }

    #[test]
    fn init_containers_follow_the_same_rule() {
        let pod = job_pod(
            "train",
            two_containers(),
            Some(
                json!([{"name": "fetch", "image": "busybox:1.36"}, {"name": "warmup", "image": "warm:1"}]),
            ),
            None,
        );
        let b = job_backup(
            "c",
            "train",
            json!([{"name": "warmup", "image": "ckpt/warm:3"}, {"name": "main", "image": "ckpt/main:3"}]),
        );
        let (r, p, doc) = run(&pod, Ok(None), &[b]);
        assert_eq!(
            images(&p),
            [
                "busybox:1.36",
                "ckpt/warm:3",
                "ckpt/main:3",
                "registry.example/log:1"
            ]
        );
        assert_eq!(doc["spec"]["initContainers"][1]["image"], "ckpt/warm:3");
        assert_eq!(
            annotation(&p, ANN_ORIGINAL_IMAGES),
            Some("main=registry.example/train:1,warmup=warm:1")
        );
        let mut missed: Vec<_> = r.misses.iter().map(|(c, _)| c.as_str()).collect();
        missed.sort();
        assert_eq!(missed, ["fetch", "sidecar"]);
    }

    #[test]
    fn only_pods_controlled_by_a_batch_job_are_considered() {
        let b = job_backup("c", "train", json!([{"name": "main", "image": "ckpt:1"}]));
        let mut pod = job_pod("train", two_containers(), None, None);
        // An owner reference to the Job that is not the controller.
        pod["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
        assert!(controlling_job(&typed).is_none());
        // Controlled by a ReplicaSet; or by a "Job" of another API group.
        for owner in [
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train", "uid": "r", "controller": true}),
            json!({"apiVersion": "example.com/v1", "kind": "Job", "name": "train", "uid": "x", "controller": true}),
        ] {
            pod["metadata"]["ownerReferences"] = json!([owner]);
            let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
            assert!(controlling_job(&typed).is_none());
            let input = RestoreInput {
                pod: &typed,
                namespace: NS,
                job: JobFacts {
                    name: "train",
                    controller: Ok(None),
                },
                backups: std::slice::from_ref(&b),
            };
            assert!(decide(&input).is_none());
        }
    }

    #[test]
    fn backups_refer_to_the_pods_namespace_only() {
        let pod = job_pod("train", two_containers(), None, None);
        // The backup lives in ml and names no namespace: it refers to ml/train, not to other/train.
        let b = job_backup("c", "train", json!([{"name": "main", "image": "ckpt:1"}]));
        let (r, p, _) = run_in(&pod, "other", Ok(None), std::slice::from_ref(&b));
        assert!(r.patch.is_empty());
        assert_eq!(images(&p)[0], "registry.example/train:1");
        // Naming another namespace in resourceRef reaches nothing: not the Job there (no cross-namespace image
        // injection) ...
        let there = backup(
            "c2",
            "2026-11-20T10:00:00Z",
            json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "namespace": "other"}),
            json!([{"name": "main", "image": "ckpt:there"}]),
            json!([]),
        );
        let (r, p, _) = run_in(&pod, "other", Ok(None), &[b.clone(), there.clone()]);
        assert!(r.patch.is_empty(), "{:?}", r.patch);
        assert_eq!(images(&p)[0], "registry.example/train:1");
        assert_eq!(there.target_namespace(), None);
        // ... nor the Job of its own namespace.
        let (r, _, _) = run_in(&pod, NS, Ok(None), &[there]);
        assert!(r.patch.is_empty());
        // Naming its own namespace is the same as naming none.
        let here = backup(
            "c3",
            "2026-11-20T10:00:00Z",
            json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "namespace": NS}),
            json!([{"name": "main", "image": "ckpt:here"}]),
            json!([]),
        );
        let (_, p, _) = run_in(&pod, NS, Ok(None), &[here]);
        assert_eq!(images(&p)[0], "ckpt:here");
        // Other kinds and API groups are not Jobs.
        for reference in [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "train"}),
            json!({"apiVersion": "example.com/v1", "kind": "Job", "name": "train"}),
        ] {
            let odd = backup(
                "odd",
                "2026-11-20T10:00:00Z",
                reference,
                json!([{"name": "main", "image": "x"}]),
                json!([]),
            );
            let (r, _, _) = run(&pod, Ok(None), &[odd]);
            assert!(r.patch.is_empty());
        }
    }

    #[test]
    fn an_unknown_job_controller_skips_cron_job_backups_with_a_warning() {
        let pod = job_pod("nightly-29000000", two_containers(), None, None);
        let b = cron_backup(
            "c",
            "nightly",
            json!([{"containerName": "main", "imageName": "ckpt:1", "pushed": true}]),
        );
        let (r, _, _) = run(&pod, Err("Job ml/nightly-29000000 not found"), &[b]);
        assert!(r.patch.is_empty());
        assert!(
            r.warnings.iter().any(|w| w.contains("not found")),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn annotations_are_added_beside_the_existing_ones_with_escaped_pointers() {
        let pod = job_pod(
            "train",
            two_containers(),
            None,
            Some(
                json!({"team/owner": "a~b", "gpu-admission.io/decided-at": "2026-11-20T10:00:00Z"}),
            ),
        );
        let b = job_backup("c", "train", json!([{"name": "main", "image": "ckpt:1"}]));
        let (r, p, _) = run(&pod, Ok(None), &[b]);
        let paths: Vec<String> = r
            .patch
            .iter()
            .filter_map(|op| match op {
                PatchOperation::Add(a) => Some(a.path.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(
            paths,
            [
                "/metadata/annotations/gpu-admission.io~1restored-from",
                "/metadata/annotations/gpu-admission.io~1original-images"
            ]
        );
        let a = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(a["team/owner"], "a~b");
        assert_eq!(a["gpu-admission.io/decided-at"], "2026-11-20T10:00:00Z");
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn no_backup_counts_every_container() {
        let pod = job_pod(
            "train",
            two_containers(),
            Some(json!([{"name": "i", "image": "b"}])),
            None,
        );
        let (r, _, _) = run(&pod, Ok(None), &[]);
        assert!(r.patch.is_empty() && r.warnings.is_empty());
        assert_eq!(r.misses.len(), 3);
        assert!(r.misses.iter().all(|(_, m)| *m == Miss::NoBackup));
    }

    /// `/mutate-pod`'s patch and this one, computed by the apiserver's rules (each webhook sees the Pod as the
    /// previous one left it), give the same Pod in either order.
    #[test]
    fn composes_with_mutate_pod_in_either_order() {
        use crate::admission::mutate_pod::patch::{PatchInput, build_patch};
        use crate::priority_class::PriorityClassFacts;
        use gpu_admission_proto::scorer::v1::{PriorityAssignment, ScoreResponse};
        use std::collections::HashMap;

        let catalog = [crate::policy::test_class(
            "H100-80GB",
            "gpu.nvidia.com/class",
            Some("nvidia.com/gpu"),
        )];
        let answer = ScoreResponse {
            accepted_classes: vec![(&catalog[0]).into()],
            priority_score: 81.5,
            priority_class: Some(PriorityAssignment {
                name: "gpu-high".into(),
                value: 100_000,
                preemption_policy: String::new(),
            }),
            avoid_job_types: vec!["serve-llm".into()],
            policy_version: "v1".into(),
            ..Default::default()
        };
        let classes = HashMap::from([(
            "gpu-high".to_string(),
            PriorityClassFacts {
                name: "gpu-high".into(),
                value: 100_000,
                preemption_policy: None,
                global_default: false,
            },
        )]);
        let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
        let mutate_pod = |doc: &Value| -> Value {
            let pod: Pod = serde_json::from_value(doc.clone()).unwrap();
            let input = PatchInput::new(&pod, Some("train-llama"), &answer, &catalog, now);
            let ops = build_patch(&input, &classes);
            let mut out = doc.clone();
            json_patch::patch(&mut out, &ops).unwrap();
            out
        };
        let b = job_backup("c", "train", json!([{"name": "main", "image": "ckpt:1"}]));
        let restore = |doc: &Value| -> Value {
            let (_, _, out) = run(doc, Ok(None), std::slice::from_ref(&b));
            out
        };
        let gpu = json!([{"name": "main", "image": "registry.example/train:1",
                          "resources": {"limits": {"nvidia.com/gpu": "8"}}},
                         {"name": "sidecar", "image": "registry.example/log:1"}]);
        for annotations in [None, Some(json!({})), Some(json!({"a/b": "c"}))] {
            let pod = job_pod("train", gpu.clone(), None, annotations);
            let first = restore(&mutate_pod(&pod));
            let second = mutate_pod(&restore(&pod));
            assert_eq!(first, second);
            let p: Pod = serde_json::from_value(first).unwrap();
            assert_eq!(annotation(&p, ANN_RESTORED_FROM), Some("ml/c"));
            assert_eq!(
                annotation(&p, "gpu-admission.io/gpu-class"),
                Some("H100-80GB")
            );
            assert_eq!(images(&p)[0], "ckpt:1");
        }
    }
}
