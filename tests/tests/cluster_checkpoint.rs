//! Real-cluster tier for checkpoint restore: a real kube-apiserver + etcd calls the real frontend's
//! `/mutate-pod` and `/mutate-pod-checkpoint` (entries of the shipped MutatingWebhookConfiguration, with `/mutate-claim`,
//! registered by URL with the frontend's CA bundle), and the STORED Pods are read back.
//!
//! The control plane runs no controllers here: the test plays them, creating Jobs (and suspended batch/v1
//! CronJobs owning Jobs), then the Jobs' Pods with an `ownerReferences` entry `controller: true` and the
//! `job-name` label, exactly as the job controller does.
//!
//! Shown, in order: without the CRD every Pod is created unchanged (and the frontend says so once); the
//! shipped CRD installed later is picked up without a restart; a Job's backup restores its Pod's matching
//! container only; a CronJob's backup restores the Pods of the Job it controls from its pushed built
//! images, not those of `nightly-extra-1`; a Pod not controlled by a Job and a Pod in another namespace
//! are untouched; deleting the backup stops the restore within seconds; every corpus Pod comes out of both
//! webhooks valid (stored by the apiserver) and restored.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use gpu_admission_core::admission::checkpoint_restore::registration;
use gpu_admission_tests::cluster::{LocalCluster, kubectl, service_account_kubeconfig};
use gpu_admission_tests::corpus::{extract_pods, manifest_files};
use gpu_admission_tests::decision::{check_decision, check_preserved};
use gpu_admission_tests::gpu::{annotation, gpu_ask};
use gpu_admission_tests::names::ANN_DECIDED_AT;
use gpu_admission_tests::observer::{Observer, metric_value};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

const ML: &str = "ckpt-ml";
const OTHER: &str = "ckpt-other";
/// The baseline namespace: one the shipped registrations never send (every namespace with a tier label or
/// without one is held to a tier now), so neither webhook changes what is created there.
const PLAIN: &str = "kube-public";
/// The shipped registration's own name: the observer's shipped RBAC patches it by this name only.
const MWC: &str = "gpu-admission";
/// A namespace with no backup until step 8 makes one.
const NARROW: &str = "ckpt-narrow";
const CKPT_HOOK: &str = "checkpoint-restore.gpu-admission.io";
const ANN_RESTORED_FROM: &str = "gpu-admission.io/restored-from";
const ANN_ORIGINAL_IMAGES: &str = "gpu-admission.io/original-images";
/// What the frontend logs (once) when the CheckpointBackup API is not served.
const NOT_INSTALLED_LOG: &str = "CRD (checkpointbackups.migration.dcnlab.com) not installed";
const TRAIN_IMAGE: &str = "registry.example/train:1";
const SIDECAR_IMAGE: &str = "registry.example/log-shipper:1";

fn repo_file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn yaml_file(rel: &str) -> Value {
    let text = std::fs::read_to_string(repo_file(rel)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// The shipped registration (deploy/kustomize/base), pointed at the test's frontend by URL + caBundle; its
/// matchConditions kept, evaluated by the apiserver.
fn registration(base_url: &str, ca_pem: &[u8]) -> MutatingWebhookConfiguration {
    let mut mwc = yaml_file("deploy/kustomize/base/webhook/mutatingwebhookconfiguration.yaml");
    mwc["metadata"] = json!({"name": MWC});
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem);
    for hook in mwc["webhooks"].as_array_mut().unwrap() {
        let path = hook["clientConfig"]["service"]["path"]
            .as_str()
            .unwrap()
            .to_string();
        hook["clientConfig"] = json!({"url": format!("{base_url}{path}"), "caBundle": ca});
        hook["timeoutSeconds"] = json!(5);
    }
    serde_json::from_value(mwc).unwrap()
}

fn backup_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("migration.dcnlab.com", "v1", "CheckpointBackup"),
        "checkpointbackups",
    )
}

fn backups(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &backup_resource())
}

/// Creates a CheckpointBackup shaped like the operator's (its extra fields included), then its status.
async fn create_backup(
    client: &kube::Client,
    ns: &str,
    name: &str,
    resource_ref: Value,
    containers: Value,
    built_images: Value,
) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "migration.dcnlab.com/v1", "kind": "CheckpointBackup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceRef": resource_ref, "containers": containers, "schedule": "*/30 * * * *",
                 "podRef": {"name": "whatever", "namespace": ns}, "stopPod": false,
                 "registry": {"url": "registry.example", "namespace": "ckpt"}}
    }))
    .unwrap();
    let api = backups(client, ns);
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create CheckpointBackup {ns}/{name}: {e}"));
    let status = json!({"status": {"phase": "Completed", "builtImages": built_images,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}],
        "checkpointFiles": [{"containerName": "main", "filePath": "/var/lib/kubelet/checkpoints/x.tar"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status of CheckpointBackup {ns}/{name}: {e}"));
}

/// Creates an object from JSON through the API (kind from the JSON) and returns it as stored.
async fn create_typed<K>(client: &kube::Client, ns: &str, obj: Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(obj.clone()).unwrap();
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &typed)
        .await
        .unwrap_or_else(|e| panic!("create {obj}: {e}"))
}

/// A Job as a user or a CronJob would create it; returns its uid.
async fn create_job(client: &kube::Client, ns: &str, name: &str, owner: Option<Value>) -> String {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": TRAIN_IMAGE}]}}}
    });
    if let Some(o) = owner {
        job["metadata"]["ownerReferences"] = json!([o]);
    }
    let job: k8s_openapi::api::batch::v1::Job = create_typed(client, ns, job).await;
    job.metadata.uid.unwrap()
}

/// A batch/v1 CronJob; returns its owner reference for its Jobs.
async fn create_cron_job(client: &kube::Client, ns: &str, name: &str) -> Value {
    let cj = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
        "spec": {"schedule": "0 2 * * *", "suspend": true, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": TRAIN_IMAGE}]}}}}}
    });
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("batch", "v1", "CronJob"),
            "cronjobs",
        ),
    );
    let cj = api
        .create(&PostParams::default(), &serde_json::from_value(cj).unwrap())
        .await
        .unwrap_or_else(|e| panic!("create CronJob {ns}/{name}: {e}"));
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
           "uid": cj.metadata.uid.unwrap(), "controller": true})
}

/// The Pod the job controller would create for Job `job` (uid `uid`): controller owner reference and
/// `job-name` / `controller-uid` labels; a GPU main container and a sidecar.
fn job_pod(name: &str, job: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"job-name": job, "controller-uid": uid},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid,
                                 "controller": true}]},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": TRAIN_IMAGE,
             "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}},
            {"name": "sidecar", "image": SIDECAR_IMAGE}]}
    })
}

/// Creates `pod` in `ns` and returns the STORED Pod.
async fn create(client: &kube::Client, ns: &str, pod: &Value) -> anyhow::Result<Value> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let typed: Pod = serde_json::from_value(pod.clone())?;
    let created = api.create(&PostParams::default(), &typed).await?;
    let stored = api.get(created.metadata.name.as_deref().unwrap()).await?;
    Ok(serde_json::to_value(stored)?)
}

fn images(pod: &Value) -> Vec<(String, String)> {
    ["/spec/initContainers", "/spec/containers"]
        .iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["image"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn image_of(pod: &Value, container: &str) -> String {
    images(pod)
        .into_iter()
        .find(|(n, _)| n == container)
        .map(|(_, i)| i)
        .unwrap_or_default()
}

/// Creates numbered copies of `pod` until `done(stored)` holds or `timeout` passes; returns the last stored
/// Pod and the time it took.
async fn create_until(
    client: &kube::Client,
    ns: &str,
    pod: &Value,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> (Value, Duration, bool) {
    let started = Instant::now();
    let base = pod["metadata"]["name"].as_str().unwrap().to_string();
    for i in 0.. {
        let mut p = pod.clone();
        p["metadata"]["name"] = json!(format!("{base}-{i}"));
        let stored = create(client, ns, &p).await.expect("Pod created");
        if done(&stored) || started.elapsed() > timeout {
            let ok = done(&stored);
            return (stored, started.elapsed(), ok);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    unreachable!()
}

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_restore_against_a_real_apiserver() {
    let t0 = Instant::now();
    let Some(cluster) = LocalCluster::start()
        .await
        .expect("the local control plane starts")
    else {
        return; // loud SKIP printed (not in CI)
    };
    let client = cluster.client();
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    let policy = scorer.policy().clone();
    cluster.create_namespace(ML, Some("gold")).await.unwrap();
    cluster.create_namespace(OTHER, Some("gold")).await.unwrap();
    cluster.create_priority_classes(&policy).await.unwrap();

    let mut webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .arg("--checkpoint-discovery-secs")
        .arg("1")
        // The webhook paths answer only the apiserver: it presents the certificate start.sh made for it.
        .arg("--client-ca-file")
        .arg(
            cluster
                .run_dir()
                .join("webhook-client-ca.crt")
                .display()
                .to_string(),
        )
        .env("RUST_LOG", "info")
        .start()
        .await
        .expect("webhook starts with kube and becomes ready");
    let base_url = format!("https://{}", webhook.addr());
    let mwc = registration(&base_url, &webhook.ca_pem().unwrap());
    let hooks = mwc.webhooks.as_ref().unwrap();
    let ckpt_hook = hooks
        .iter()
        .find(|h| h.name == CKPT_HOOK)
        .expect("the shipped configuration has the checkpoint-restore entry");
    // The shipped entries: /mutate-pod, /mutate-claim and this one.
    assert_eq!(hooks.len(), 3);
    assert_eq!(
        serde_json::to_value(&ckpt_hook.object_selector).unwrap(),
        json!({"matchExpressions": [{"key": "job-name", "operator": "Exists"}]})
    );
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mwc)
        .await
        .expect("register both webhooks");

    let mut failures: Vec<String> = Vec::new();
    let train_uid = create_job(&client, ML, "train", None).await;
    let train_pod = job_pod("train", "train", &train_uid);

    // 0. A review sent straight to the port, without the apiserver's client certificate (a forged one,
    //    asking for another namespace's backups): refused before it is read, counted; the probes stay open.
    let forged = gpu_admission_tests::review::pod_review(
        &train_pod,
        ML,
        gpu_admission_tests::Operation::Create,
    );
    for path in ["/mutate-pod-checkpoint", "/mutate-pod", "/validate-pod"] {
        let answer = webhook.https().post_json(path, &forged).await.unwrap();
        if answer.status != http::StatusCode::UNAUTHORIZED {
            failures.push(format!("forged review to {path}: {}", answer.status));
        }
    }
    let m = webhook.metrics().await.unwrap();
    let refused = metric(&m, "gpu_admission_unauthenticated_requests_total");
    println!("checkpoint: 3 reviews without a client certificate answered 401 ({refused} counted)");
    if refused != 3.0 {
        failures.push(format!(
            "unauthenticated requests counted {refused}, want 3"
        ));
    }

    // 1. No CRD: every Pod is created unchanged, and the frontend was called (its metric counts the
    //    requests it answered "not installed"); its log says so once.
    let not_installed = "gpu_admission_admissions_total{webhook=\"mutate-pod-checkpoint\",operation=\"CREATE\",\
                         outcome=\"not_installed\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut created = 0;
    loop {
        let mut p = train_pod.clone();
        p["metadata"]["name"] = json!(format!("no-crd-{created}"));
        created += 1;
        match create(&client, ML, &p).await {
            Ok(stored) => {
                if image_of(&stored, "main") != TRAIN_IMAGE
                    || annotation(&stored, ANN_RESTORED_FROM).is_some()
                {
                    failures.push(format!("no CRD: Pod changed: {:?}", images(&stored)));
                }
            }
            Err(e) => failures.push(format!("no CRD: Pod NOT created: {e:#}")),
        }
        let m = webhook.metrics().await.unwrap_or_default();
        if metric(&m, not_installed) >= 3.0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = webhook.metrics().await.unwrap();
    assert!(
        metric(&m, not_installed) >= 3.0,
        "the apiserver never called /mutate-pod-checkpoint\n{}\n{}",
        webhook.process.log_tail(30),
        cluster.apiserver_log_tail(30)
    );
    let said = webhook.process.log().matches(NOT_INSTALLED_LOG).count();
    println!(
        "checkpoint: without the CRD {created} Job Pods created unchanged; `not installed` logged {said} time(s); {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    if said != 1 {
        failures.push(format!("`not installed` logged {said} times, want once"));
    }

    // 2. The shipped CRD, installed now: picked up without a restart.
    let crd: CustomResourceDefinition = serde_json::from_value(yaml_file(
        "deploy/kustomize/components/checkpoint-restore/checkpointbackups.yaml",
    ))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("CRD created");
    webhook
        .process
        .wait_for_log("CheckpointBackup cache synced", Duration::from_secs(30))
        .await
        .expect("the frontend finds the CRD and lists CheckpointBackups");
    println!(
        "checkpoint: CRD installed and cached after {:.1}s",
        t0.elapsed().as_secs_f64()
    );

    // 3. A backup for Job `train`: its Pod is stored with the checkpoint image in `main`, the sidecar
    //    unchanged, and /mutate-pod's decision beside it.
    create_backup(
        &client,
        ML,
        "train-ckpt",
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "train"}),
        json!([{"name": "main", "image": "registry.example/ckpt/train-main:42"}]),
        json!([]),
    )
    .await;
    let restored = |p: &Value| annotation(p, ANN_RESTORED_FROM).is_some();
    let mut p = train_pod.clone();
    p["metadata"]["name"] = json!("train-restored");
    let (stored, took, ok) = create_until(&client, ML, &p, Duration::from_secs(10), restored).await;
    println!(
        "checkpoint: Job backup restored after {took:?}: {:?}",
        images(&stored)
    );
    if !ok {
        failures.push(format!("Job train: never restored: {:?}", images(&stored)));
    }
    let want = [
        (
            "main".to_string(),
            "registry.example/ckpt/train-main:42".to_string(),
        ),
        ("sidecar".to_string(), SIDECAR_IMAGE.to_string()),
    ];
    if images(&stored) != want {
        failures.push(format!(
            "Job train: images {:?}, want {want:?}",
            images(&stored)
        ));
    }
    for (k, v) in [
        (ANN_RESTORED_FROM, format!("{ML}/train-ckpt")),
        (ANN_ORIGINAL_IMAGES, format!("main={TRAIN_IMAGE}")),
    ] {
        if annotation(&stored, k) != Some(v.as_str()) {
            failures.push(format!(
                "Job train: {k} = {:?}, want {v}",
                annotation(&stored, k)
            ));
        }
    }
    // Both webhooks: the GPU decision is there too, and all else is as submitted.
    let reverted = without_restore(&stored);
    let (_, errs) = check_decision(&train_pod, &reverted, "gold", &policy);
    failures.extend(errs.into_iter().map(|e| format!("Job train decision: {e}")));
    failures.extend(
        check_preserved(&train_pod, &reverted)
            .into_iter()
            .map(|e| format!("Job train: {e}")),
    );
    if annotation(&stored, ANN_DECIDED_AT).is_none() {
        failures.push("Job train: /mutate-pod's decision missing".into());
    }

    // 4. CronJob `nightly`: its Job nightly-29000000 is restored from the newest PUSHED built image; the
    //    Job nightly-extra-1 of CronJob `nightly-extra` is not (no name-prefix matching).
    let nightly = create_cron_job(&client, ML, "nightly").await;
    let extra = create_cron_job(&client, ML, "nightly-extra").await;
    let n_uid = create_job(&client, ML, "nightly-29000000", Some(nightly)).await;
    let x_uid = create_job(&client, ML, "nightly-extra-1", Some(extra)).await;
    create_backup(
        &client,
        ML,
        "nightly-ckpt",
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly"}),
        json!([]),
        json!([
            {"containerName": "main", "imageName": "registry.example/ckpt/nightly:old", "buildTime": "2026-11-20T02:05:00Z", "pushed": true},
            {"containerName": "main", "imageName": "registry.example/ckpt/nightly:new", "buildTime": "2026-11-21T02:05:00Z", "pushed": true},
            {"containerName": "main", "imageName": "localhost/checkpoint-nightly-main:latest", "buildTime": "2026-11-22T02:05:00Z", "pushed": false},
            {"containerName": "sidecar", "imageName": "localhost/checkpoint-nightly-sidecar:latest", "pushed": false}
        ]),
    )
    .await;
    let (stored, took, ok) = create_until(
        &client,
        ML,
        &job_pod("nightly-29000000-x", "nightly-29000000", &n_uid),
        Duration::from_secs(10),
        restored,
    )
    .await;
    println!(
        "checkpoint: CronJob backup restored after {took:?}: {:?}",
        images(&stored)
    );
    let want = [
        (
            "main".to_string(),
            "registry.example/ckpt/nightly:new".to_string(),
        ),
        ("sidecar".to_string(), SIDECAR_IMAGE.to_string()),
    ];
    if !ok || images(&stored) != want {
        failures.push(format!(
            "Job nightly-29000000: images {:?}, want {want:?}",
            images(&stored)
        ));
    }
    let stored = create(
        &client,
        ML,
        &job_pod("nightly-extra-1-x", "nightly-extra-1", &x_uid),
    )
    .await
    .expect("nightly-extra Pod created");
    println!("checkpoint: Job nightly-extra-1: {:?}", images(&stored));
    if restored(&stored) || image_of(&stored, "main") != TRAIN_IMAGE {
        failures.push(format!(
            "Job nightly-extra-1 was restored: {:?}",
            images(&stored)
        ));
    }

    // 5. A Pod labelled like a Job's but controlled by none, and a Pod of a Job `train` elsewhere: untouched.
    let mut orphan = train_pod.clone();
    orphan["metadata"]["name"] = json!("not-owned");
    orphan["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    let stored = create(&client, ML, &orphan).await.expect("orphan created");
    if restored(&stored) || image_of(&stored, "main") != TRAIN_IMAGE {
        failures.push(format!(
            "Pod not owned by a Job was restored: {:?}",
            images(&stored)
        ));
    }
    let other_uid = create_job(&client, OTHER, "train", None).await;
    let stored = create(
        &client,
        OTHER,
        &job_pod("train-elsewhere", "train", &other_uid),
    )
    .await
    .expect("other-namespace Pod created");
    if restored(&stored) || image_of(&stored, "main") != TRAIN_IMAGE {
        failures.push(format!(
            "Pod in another namespace was restored: {:?}",
            images(&stored)
        ));
    }
    if annotation(&stored, ANN_DECIDED_AT).is_none() {
        failures.push("Pod in another namespace: /mutate-pod's decision missing".into());
    }
    println!("checkpoint: not-owned and other-namespace Pods untouched");

    // 6. Deleting the backup stops the restore within seconds.
    backups(&client, ML)
        .delete("train-ckpt", &DeleteParams::default())
        .await
        .expect("delete the backup");
    let mut p = train_pod.clone();
    p["metadata"]["name"] = json!("train-after-delete");
    let (stored, took, ok) =
        create_until(&client, ML, &p, Duration::from_secs(10), |p| !restored(p)).await;
    println!("checkpoint: restore stopped {took:?} after the backup was deleted");
    if !ok || image_of(&stored, "main") != TRAIN_IMAGE {
        failures.push(format!("backup deleted: still restored after {took:?}"));
    } else if took > Duration::from_secs(5) {
        failures.push(format!(
            "backup deleted: restore stopped only after {took:?}"
        ));
    }

    // 7. Every corpus Pod, as a Job's Pod, through both webhooks: stored (so valid) and restored.
    corpus(&client, &policy, &mut failures).await;

    // 8. The observer narrows the checkpoint-restore entry to the Jobs a backup names: Pods of other Jobs
    //    cost the apiserver no call to /mutate-pod-checkpoint.
    narrowed_by_the_observer(&cluster, &scorer, &webhook, &mut failures).await;

    // 9. The CRD deleted: the frontend notices (404), says "not installed" once more, Pods are unchanged.
    crds.delete(
        "checkpointbackups.migration.dcnlab.com",
        &DeleteParams::default(),
    )
    .await
    .expect("delete the CRD");
    let deadline = Instant::now() + Duration::from_secs(30);
    while webhook.process.log().matches(NOT_INSTALLED_LOG).count() < 2 && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let said = webhook.process.log().matches(NOT_INSTALLED_LOG).count();
    let mut p = train_pod.clone();
    p["metadata"]["name"] = json!("train-crd-deleted");
    match create(&client, ML, &p).await {
        Ok(stored) if !restored(&stored) && image_of(&stored, "main") == TRAIN_IMAGE => {
            println!(
                "checkpoint: CRD deleted: `not installed` logged {said} time(s) in all; Pods unchanged"
            )
        }
        Ok(stored) => failures.push(format!("CRD deleted: Pod changed: {:?}", images(&stored))),
        Err(e) => failures.push(format!("CRD deleted: Pod NOT created: {e:#}")),
    }
    if said != 2 {
        failures.push(format!(
            "CRD deleted: `not installed` logged {said} times in all, want 2"
        ));
    }

    let m = webhook.metrics().await.unwrap();
    let restored_total = metric(&m, "gpu_admission_checkpoint_images_restored_total");
    let misses: Vec<(String, f64)> = ["no_backup", "no_container_match", "unpushed_image_only"]
        .iter()
        .map(|r| {
            let n = metric(
                &m,
                &format!("gpu_admission_checkpoint_restore_misses_total{{reason=\"{r}\"}}"),
            );
            (r.to_string(), n)
        })
        .collect();
    println!("checkpoint: metrics: images restored {restored_total}, misses {misses:?}");
    if restored_total < 2.0 || misses.iter().any(|(_, n)| *n < 1.0) {
        failures.push(format!(
            "metrics: restored {restored_total}, misses {misses:?}"
        ));
    }
    println!(
        "checkpoint: whole test in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        eprintln!("{}", webhook.process.log_tail(30));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The calls `/mutate-pod-checkpoint` answered, by its own metric.
async fn checkpoint_calls(webhook: &gpu_admission_tests::Webhook) -> f64 {
    let m = webhook.metrics().await.unwrap();
    m.lines()
        .filter(|l| {
            l.starts_with("gpu_admission_admissions_total{webhook=\"mutate-pod-checkpoint\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The stored match condition of the checkpoint-restore entry.
async fn stored_condition(client: &kube::Client) -> Option<String> {
    let mwc = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(MWC)
        .await
        .ok()?;
    registration::current_expression(&serde_json::to_value(mwc).ok()?).map(str::to_string)
}

/// Waits up to 20 s for the stored condition to satisfy `done`; the time it took.
async fn condition_until(
    client: &kube::Client,
    done: impl Fn(&str) -> bool,
) -> Result<Duration, Option<String>> {
    let started = Instant::now();
    loop {
        let c = stored_condition(client).await;
        if c.as_deref().is_some_and(&done) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(c);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The observer, as its ServiceAccount with the shipped RBAC, keeps the entry's condition on the stored
/// backups: a Pod of a Job no backup names is stored without a call to `/mutate-pod-checkpoint`; a backup
/// for its Job makes the next one called and restored; deleting the backup narrows it again.
async fn narrowed_by_the_observer(
    cluster: &LocalCluster,
    scorer: &gpu_admission_tests::Scorer,
    webhook: &gpu_admission_tests::Webhook,
    failures: &mut Vec<String>,
) {
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    cluster
        .create_namespace("gpu-admission", None)
        .await
        .unwrap();
    cluster
        .create_namespace(NARROW, Some("gold"))
        .await
        .unwrap();
    let base = repo_file("deploy/kustomize/base/observer");
    let files = ["serviceaccount.yaml", "rbac.yaml", "lease.yaml"].map(|f| base.join(f));
    let mut args = vec!["apply"];
    let paths: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    for p in &paths {
        args.extend(["-f", p.as_str()]);
    }
    let applied = kubectl(cluster.kubeconfig(), None, &[], &args, "");
    assert!(applied.ok, "{}", applied.stderr);
    let sa = service_account_kubeconfig(
        cluster.kubeconfig(),
        dir.path(),
        "gpu-admission",
        "gpu-admission-observer",
    )
    .unwrap();
    let observer = Observer::builder(&sa, &[scorer.url()], "observer-checkpoint")
        .arg(format!("--checkpoint-registration={MWC}"))
        .arg("--checkpoint-interval-secs=1")
        .start()
        .await
        .expect("the observer starts");

    let narrow_uid = create_job(&client, NARROW, "narrow", None).await;
    let plain_uid = create_job(&client, NARROW, "plain", None).await;
    let not_narrow = |c: &str| !c.contains(&format!("'{NARROW}/narrow'"));
    match condition_until(&client, |c| not_narrow(c)).await {
        Ok(took) => println!("checkpoint: the observer wrote the condition within {took:?}"),
        Err(c) => failures.push(format!("observer: no condition written ({c:?})")),
    }
    let before = checkpoint_calls(webhook).await;
    let stored = create(&client, NARROW, &job_pod("narrow-0", "narrow", &narrow_uid))
        .await
        .expect("a Job's Pod without a backup is created");
    let after = checkpoint_calls(webhook).await;
    println!(
        "checkpoint: a Job's Pod without a backup: {} call(s) to /mutate-pod-checkpoint",
        after - before
    );
    if after != before || image_of(&stored, "main") != TRAIN_IMAGE {
        failures.push(format!(
            "no backup: {} calls, images {:?}",
            after - before,
            images(&stored)
        ));
    }

    create_backup(
        &client,
        NARROW,
        "narrow-ckpt",
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "narrow"}),
        json!([{"name": "main", "image": "registry.example/ckpt/narrow:1"}]),
        json!([]),
    )
    .await;
    match condition_until(&client, |c| !not_narrow(c)).await {
        Ok(took) => println!("checkpoint: a new backup reached the condition in {took:?}"),
        Err(c) => failures.push(format!("backup created: condition not widened ({c:?})")),
    }
    // The apiserver reads registrations from its cache: the first Pods may still be spared a call.
    let (stored, took, ok) = create_until(
        &client,
        NARROW,
        &job_pod("narrow-restored", "narrow", &narrow_uid),
        Duration::from_secs(10),
        |p| annotation(p, ANN_RESTORED_FROM).is_some(),
    )
    .await;
    println!("checkpoint: the backup's Job restored {took:?} after the condition named it");
    if !ok || image_of(&stored, "main") != "registry.example/ckpt/narrow:1" {
        failures.push(format!("backup created: not restored after {took:?}"));
    }
    let before = checkpoint_calls(webhook).await;
    create(&client, NARROW, &job_pod("plain-0", "plain", &plain_uid))
        .await
        .expect("another Job's Pod is created");
    let after = checkpoint_calls(webhook).await;
    if after != before {
        failures.push(format!(
            "a Job no backup names was sent ({} calls)",
            after - before
        ));
    }

    backups(&client, NARROW)
        .delete("narrow-ckpt", &DeleteParams::default())
        .await
        .expect("delete the backup");
    match condition_until(&client, not_narrow).await {
        Ok(took) => println!("checkpoint: a deleted backup left the condition in {took:?}"),
        Err(c) => failures.push(format!("backup deleted: condition kept it ({c:?})")),
    }
    let m = observer.metrics().await.unwrap();
    let written = metric_value(
        &m,
        "observer_checkpoint_registration_syncs_total{result=\"written\"}",
    );
    if written < 3.0 {
        failures.push(format!(
            "observer: {written} condition writes counted, want >= 3"
        ));
    }
}

/// The stored Pod with the restore undone (original images back, our two annotations removed): what
/// `/mutate-pod` alone would have stored.
fn without_restore(stored: &Value) -> Value {
    let mut p = stored.clone();
    let originals: Vec<(String, String)> = annotation(stored, ANN_ORIGINAL_IMAGES)
        .unwrap_or("")
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for list in ["containers", "initContainers"] {
        for c in p["spec"][list].as_array_mut().into_iter().flatten() {
            if let Some((_, image)) = originals.iter().find(|(n, _)| c["name"] == n.as_str()) {
                c["image"] = json!(image);
            }
        }
    }
    if let Some(a) = p["metadata"]["annotations"].as_object_mut() {
        a.remove(ANN_RESTORED_FROM);
        a.remove(ANN_ORIGINAL_IMAGES);
    }
    p
}

/// Each corpus Pod the apiserver accepts becomes a Pod of Job `corpus`: first in a namespace the webhooks skip
/// (kube-public) and without a backup (neither webhook changes it: the baseline), then in the tier namespace where a
/// backup names every corpus container: stored restored, with /mutate-pod's decision for GPU Pods, and
/// otherwise equal to the baseline.
async fn corpus(
    client: &kube::Client,
    policy: &gpu_admission_core::policy::PolicySnapshot,
    failures: &mut Vec<String>,
) {
    let pods: Vec<_> = manifest_files()
        .expect("corpus")
        .iter()
        .flat_map(extract_pods)
        .filter(|p| p.parses)
        .collect();
    let plain_uid = create_job(client, PLAIN, "corpus", None).await;
    let ml_uid = create_job(client, ML, "corpus", None).await;
    let probe = job_pod("corpus-probe", "corpus", &ml_uid);
    // The backup names every container of the set, and the probe's (whose names the set may not have: the
    // project's fixtures do not, the external corpus does).
    let names: BTreeSet<String> = pods
        .iter()
        .map(|p| &p.pod)
        .chain([&probe])
        .flat_map(images)
        .map(|(n, _)| n)
        .filter(|n| !n.is_empty())
        .collect();
    let ckpt = |name: &str| format!("ckpt.example/corpus/{name}:restored");
    create_backup(
        client,
        ML,
        "corpus-ckpt",
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "corpus"}),
        Value::Array(
            names
                .iter()
                .map(|n| json!({"name": n, "image": ckpt(n)}))
                .collect(),
        ),
        json!([]),
    )
    .await;
    // Wait until the backup is cached.
    let (_, _, ok) = create_until(client, ML, &probe, Duration::from_secs(10), |p| {
        annotation(p, ANN_RESTORED_FROM).is_some()
    })
    .await;
    assert!(ok, "the corpus backup never reached the frontend");

    let as_job_pod = |pod: &Value, i: usize, uid: &str| {
        let mut pod = pod.clone();
        let m = pod["metadata"].as_object_mut().unwrap();
        m.insert("name".into(), json!(format!("corpus-{i}")));
        for k in ["generateName", "namespace", "resourceVersion", "uid"] {
            m.remove(k);
        }
        m.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "corpus", "uid": uid, "controller": true}]),
        );
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels["job-name"] = json!("corpus");
        labels["controller-uid"] = json!(uid);
        pod
    };
    let (mut ok, mut rejected, mut gpu) = (0, 0, 0);
    for (i, p) in pods.iter().enumerate() {
        let baseline = match create(client, PLAIN, &as_job_pod(&p.pod, i, &plain_uid)).await {
            Ok(stored) => stored,
            Err(_) => {
                rejected += 1; // the apiserver itself refuses it
                continue;
            }
        };
        if annotation(&baseline, ANN_RESTORED_FROM).is_some() {
            failures.push(format!("corpus {}: restored without a backup", p.source));
        }
        let stored = match create(client, ML, &as_job_pod(&p.pod, i, &ml_uid)).await {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!(
                    "corpus {}: rejected only with the webhooks: {e:#}",
                    p.source
                ));
                continue;
            }
        };
        ok += 1;
        for (name, image) in images(&stored) {
            if image != ckpt(&name) {
                failures.push(format!("corpus {}: container {name} has {image}", p.source));
            }
        }
        if annotation(&stored, ANN_RESTORED_FROM) != Some(&format!("{ML}/corpus-ckpt")) {
            failures.push(format!("corpus {}: no restored-from", p.source));
        }
        let reverted = without_restore(&stored);
        // The baseline's Job is another object (another uid) in another namespace.
        let mut baseline = baseline;
        baseline["metadata"]["labels"]["controller-uid"] = json!(ml_uid);
        baseline["metadata"]["ownerReferences"] = stored["metadata"]["ownerReferences"].clone();
        let mut errs = check_preserved(&baseline, &reverted);
        if gpu_ask(&baseline).is_some() {
            gpu += 1;
            errs.extend(check_decision(&baseline, &reverted, "gold", policy).1);
            if annotation(&stored, ANN_DECIDED_AT).is_none() {
                errs.push("no /mutate-pod decision".into());
            }
        }
        failures.extend(
            errs.into_iter()
                .map(|e| format!("corpus {}: {e}", p.source)),
        );
    }
    println!(
        "checkpoint: {ok} corpus Pods stored restored through both webhooks ({gpu} GPU Pods also decided); \
         {rejected} refused by the apiserver itself; {} container names in the backup",
        names.len()
    );
    assert!(ok > 0, "no corpus Pod could be created");
}
