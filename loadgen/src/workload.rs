//! The requests: AdmissionReviews (and the matching ScoreRequests) generated from a seed, or replayed
//! from a folder of manifests.
//!
//! Every review is serialised once, up front, with a placeholder uid; the hot path only splices a
//! fresh uid between the two halves ([`ReviewTemplate::body`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use gpu_admission_core::pod::features;
use gpu_admission_proto::scorer::v1::{GpuVendor, ScoreRequest, WorkloadClass};
use gpu_admission_testkit::review;
use hyper::body::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const UID_PLACEHOLDER: &str = "@@LOADGEN-UID@@";
/// Length of the uids written by [`write_uid`].
pub const UID_LEN: usize = 36;

/// Namespaces of the generated mix and their tier (`tenant.kubenexus.io/tier`). A spawned frontend gets
/// them as `--namespace-tier`; a frontend started by hand must be given the same to see tiered Pods.
pub const NAMESPACE_TIERS: &[(&str, &str)] = &[
    ("frontier", "platinum"),
    ("llm-prod", "gold"),
    ("inference", "gold"),
    ("research", "silver"),
    ("recsys", "silver"),
    ("batch", "bronze"),
    ("students", "bronze"),
];
/// Namespaces without a tier label: the webhook must leave their Pods alone.
const UNTIERED_NAMESPACES: &[&str] = &["default", "ci-runners"];

/// Job types of the mix (those of the default policy and one it does not know), with their workload class and typical GPU memory (GiB) and batch size.
const JOB_TYPES: &[(&str, WorkloadClass, f64, u32)] = &[
    ("train-llama", WorkloadClass::Training, 80.0, 512),
    ("train-bert", WorkloadClass::Training, 16.0, 256),
    ("train-resnet", WorkloadClass::Training, 16.0, 256),
    ("finetune-llm", WorkloadClass::Training, 40.0, 64),
    ("inference-llm", WorkloadClass::Inference, 40.0, 8),
    ("inference-vision", WorkloadClass::Inference, 16.0, 32),
    ("batch-embedding", WorkloadClass::Batch, 16.0, 1024),
    ("batch-etl", WorkloadClass::Batch, 8.0, 128),
    ("hpo-sweep", WorkloadClass::Batch, 24.0, 128),
    ("notebook", WorkloadClass::Interactive, 16.0, 1),
    // Not in the default policy: falls back to the workload class's profile.
    ("physics-sim", WorkloadClass::Batch, 24.0, 64),
];

/// One serialised AdmissionReview, split around its uid.
#[derive(Debug, Clone)]
pub struct ReviewTemplate {
    prefix: Bytes,
    suffix: Bytes,
}

impl ReviewTemplate {
    fn from_review(review: &Value) -> Result<Self> {
        let text = serde_json::to_string(review)?;
        let at = text
            .find(UID_PLACEHOLDER)
            .context("review without the uid placeholder")?;
        Ok(Self {
            prefix: Bytes::copy_from_slice(&text.as_bytes()[..at]),
            suffix: Bytes::copy_from_slice(&text.as_bytes()[at + UID_PLACEHOLDER.len()..]),
        })
    }

    /// The request body with `uid` spliced in (one allocation, two copies).
    pub fn body(&self, uid: &[u8]) -> Bytes {
        let mut v = Vec::with_capacity(self.prefix.len() + uid.len() + self.suffix.len());
        v.extend_from_slice(&self.prefix);
        v.extend_from_slice(uid);
        v.extend_from_slice(&self.suffix);
        Bytes::from(v)
    }

    pub fn len(&self) -> usize {
        self.prefix.len() + UID_LEN + self.suffix.len()
    }
}

/// Writes a uid unique within this loadgen run: `RRRRRRRR-0000-4000-8000-SSSSSSSSSSSS` (run, sequence).
pub fn write_uid(buf: &mut [u8; UID_LEN], run: u32, seq: u64) {
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    // Cannot fail: the format is exactly UID_LEN bytes long.
    let _ = write!(
        cur,
        "{run:08x}-0000-4000-8000-{:012x}",
        seq & 0xffff_ffff_ffff
    );
}

/// What the generator meant a Pod to be, so the report can say what answer to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Asks for GPUs in a tiered namespace: should be mutated (or passed through on scorer trouble).
    GpuTiered,
    /// No GPU: allowed unchanged.
    NonGpu,
    /// GPU Pod in a namespace without tier: allowed unchanged.
    GpuUntiered,
    /// Already carries our decision annotation: allowed unchanged.
    AlreadyDecided,
    /// An UPDATE of a GPU Pod: allowed unchanged.
    Update,
    /// Replayed from a file.
    Replayed,
}

/// One request of the workload: the review for the webhook, the ScoreRequest for the scorer.
#[derive(Debug, Clone)]
pub struct Item {
    pub review: ReviewTemplate,
    /// None for Pods the webhook would never send to the scorer.
    pub score: Option<ScoreRequest>,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub items: Vec<Item>,
    /// Human description ("generated, seed 42, 1024 Pods" / "replay of DIR").
    pub source: String,
}

impl Workload {
    /// The ScoreRequests of the items that have one (the scorer-only workload), in workload order.
    pub fn score_requests(&self) -> Vec<ScoreRequest> {
        self.items.iter().filter_map(|i| i.score.clone()).collect()
    }

    pub fn mix(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for i in &self.items {
            let k = serde_json::to_value(i.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            *m.entry(k).or_insert(0) += 1;
        }
        m
    }

    pub fn mean_body_bytes(&self) -> usize {
        if self.items.is_empty() {
            return 0;
        }
        self.items.iter().map(|i| i.review.len()).sum::<usize>() / self.items.len()
    }
}

/// Generates `n` Pods from `seed`: a realistic mix of tiers, job types, GPU counts and vendors, existing
/// tolerations and affinity, owners, annotations (some malformed), and a share of Pods the webhook must skip.
pub fn generate(seed: u64, n: usize) -> Result<Workload> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut items = Vec::with_capacity(n);
    for idx in 0..n {
        items.push(generate_one(&mut rng, idx)?);
    }
    Ok(Workload {
        items,
        source: format!("generated mix, seed {seed}, {n} distinct Pods"),
    })
}

fn pick<'a, T>(rng: &mut StdRng, xs: &'a [T]) -> &'a T {
    &xs[rng.random_range(0..xs.len())]
}

fn generate_one(rng: &mut StdRng, idx: usize) -> Result<Item> {
    let roll: f64 = rng.random();
    let kind = match roll {
        r if r < 0.22 => Kind::NonGpu,
        r if r < 0.27 => Kind::GpuUntiered,
        r if r < 0.30 => Kind::AlreadyDecided,
        r if r < 0.32 => Kind::Update,
        _ => Kind::GpuTiered,
    };
    let (namespace, tier) = if kind == Kind::GpuUntiered {
        (pick(rng, UNTIERED_NAMESPACES).to_string(), String::new())
    } else {
        let (ns, t) = pick(rng, NAMESPACE_TIERS);
        (ns.to_string(), t.to_string())
    };
    let &(job_type, class, typical_mem, typical_batch) = pick(rng, JOB_TYPES);
    let tenant = format!("team-{}", ["atlas", "borealis", "cygnus", "draco"][idx % 4]);
    let gpu = kind != Kind::NonGpu;

    let (vendor, resource) = match rng.random::<f64>() {
        // MIG slices and time-sliced replicas: other ways of asking for NVIDIA GPUs.
        r if r < 0.04 => (GpuVendor::Nvidia, "nvidia.com/mig-1g.10gb"),
        r if r < 0.06 => (GpuVendor::Nvidia, "nvidia.com/gpu.shared"),
        r if r < 0.80 => (GpuVendor::Nvidia, "nvidia.com/gpu"),
        r if r < 0.94 => (GpuVendor::Amd, "amd.com/gpu"),
        _ => (GpuVendor::Intel, "gpu.intel.com/i915"),
    };
    let count: u32 = *pick(rng, &[1, 1, 1, 1, 1, 2, 2, 4, 4, 8]);
    let mem = (typical_mem * [0.5, 1.0, 1.0, 2.0][rng.random_range(0..4)]).min(141.0);
    let batch = typical_batch * [1, 1, 2, 4][rng.random_range(0..4)];

    let mut annotations = serde_json::Map::new();
    let mut labels = serde_json::Map::new();
    labels.insert("app.kubernetes.io/name".into(), json!(job_type));
    labels.insert("app.kubernetes.io/part-of".into(), json!(tenant));
    let (mut ann_mem, mut ann_batch) = (None, None);
    if gpu {
        match rng.random::<f64>() {
            r if r < 0.5 => {
                annotations.insert("app.kubernetes.io/job-type".into(), json!(job_type));
            }
            r if r < 0.8 => {
                annotations.insert("gpu-admission.io/job-type".into(), json!(job_type));
            }
            _ => {}
        }
        if rng.random_bool(0.4) {
            annotations.insert("gpu.mem.gi".into(), json!(format!("{mem}")));
            ann_mem = Some(mem);
        } else if rng.random_bool(0.2) {
            annotations.insert(
                "gpu-admission.io/gpu-memory-gib".into(),
                json!(format!("{mem}")),
            );
            ann_mem = Some(mem);
        }
        if rng.random_bool(0.3) {
            annotations.insert("ml.batch_size".into(), json!(batch.to_string()));
            ann_batch = Some(batch);
        }
        if rng.random_bool(0.5) {
            annotations.insert("scheduler.radix.ai/tenant".into(), json!(tenant));
        }
        if rng.random_bool(0.03) {
            // Malformed values must be ignored with a warning, never fatal.
            annotations.insert("gpu.mem.gi".into(), json!("lots"));
            ann_mem = None;
        }
        if kind == Kind::AlreadyDecided {
            annotations.insert(
                "gpu-admission.io/decided-at".into(),
                json!("2026-11-20T10:00:00Z"),
            );
            annotations.insert("gpu-admission.io/gpu-class".into(), json!("A100-80GB"));
            annotations.insert("gpu-admission.io/priority-score".into(), json!("72"));
            annotations.insert("gpu-admission.io/policy-version".into(), json!("1"));
        }
    }
    annotations.insert(
        "kubectl.kubernetes.io/default-container".into(),
        json!("main"),
    );

    let mut metadata = json!({
        "generateName": format!("{job_type}-{idx:04x}-"),
        "namespace": namespace,
        "labels": labels,
        "annotations": annotations,
    });
    let owner = rng.random::<f64>();
    if owner < 0.45 {
        let job = format!("{job_type}-{idx:04x}");
        metadata["labels"]["batch.kubernetes.io/job-name"] = json!(job);
        metadata["labels"]["job-name"] = json!(job);
        metadata["ownerReferences"] = json!([{
            "apiVersion": "batch/v1", "kind": "Job", "name": job,
            "uid": format!("5f0c{idx:04x}-8b1e-4c44-9a3d-2a6f3c1e{idx:04x}"),
            "controller": true, "blockOwnerDeletion": true
        }]);
    } else if owner < 0.60 {
        let rs = format!("{job_type}-6d8f9c7b{}", idx % 10);
        metadata["labels"]["pod-template-hash"] = json!("6d8f9c7b");
        metadata["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
            "uid": format!("7a1d{idx:04x}-2c3b-4d5e-8f90-1a2b3c4d{idx:04x}"),
            "controller": true, "blockOwnerDeletion": true
        }]);
    }

    let gpu_in_init = gpu && rng.random_bool(0.03);
    let gpu_in_requests = rng.random_bool(0.6);
    let mut main_resources = json!({
        "requests": {"cpu": format!("{}", [1, 2, 4, 8][idx % 4]), "memory": format!("{}Gi", [4, 8, 16, 64][idx % 4])},
        "limits": {"memory": format!("{}Gi", [4, 8, 16, 64][idx % 4])}
    });
    if gpu && !gpu_in_init {
        main_resources["limits"][resource] = json!(count.to_string());
        if gpu_in_requests {
            main_resources["requests"][resource] = json!(count.to_string());
        }
    }
    let mut containers = vec![container(
        "main",
        &format!("registry.example.com/{tenant}/{job_type}:1.4.2"),
        main_resources,
    )];
    if rng.random_bool(0.25) {
        containers.push(container(
            "metrics-sidecar",
            "registry.example.com/platform/dcgm-exporter:3.3.5",
            json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}),
        ));
    }
    let mut spec = json!({
        "containers": containers,
        "restartPolicy": if owner < 0.45 { "OnFailure" } else { "Always" },
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        // Defaults the apiserver fills before mutating webhooks run (Priority, DefaultTolerationSeconds).
        "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "enableServiceLinks": true,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}
        ]
    });
    if gpu_in_init || rng.random_bool(0.1) {
        let mut res = json!({"requests": {"cpu": "100m", "memory": "128Mi"}});
        if gpu_in_init {
            res["limits"] = json!({ resource: count.to_string() });
        }
        spec["initContainers"] = json!([container(
            "fetch-weights",
            "registry.example.com/platform/fetcher:0.9",
            res
        )]);
    }
    if gpu && rng.random_bool(0.35) {
        spec["tolerations"]
            .as_array_mut()
            .expect("tolerations is an array")
            .push(json!({"key": resource, "operator": "Exists", "effect": "NoSchedule"}));
    }
    let mut affinity = serde_json::Map::new();
    if rng.random_bool(0.2) {
        affinity.insert("nodeAffinity".into(), json!({
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1a", "eu-west-1b"]}
            ]}}]
        }));
    }
    if rng.random_bool(0.15) {
        affinity.insert("podAntiAffinity".into(), json!({
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": job_type}},
                "topologyKey": "kubernetes.io/hostname"
            }}]
        }));
    }
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if gpu && vendor == GpuVendor::Nvidia && rng.random_bool(0.05) {
        // The Pod names its class itself: the webhook keeps it.
        spec["nodeSelector"] = json!({"gpu.nvidia.com/class": "H100-80GB"});
    }

    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    let operation = if kind == Kind::Update {
        "UPDATE"
    } else {
        "CREATE"
    };
    let user = if owner < 0.45 {
        json!({"username": "system:serviceaccount:kube-system:job-controller", "uid": "3c1b8a4e-1f0e-4f7e-9d52-0c4f7b1b2e11",
               "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]})
    } else {
        json!({"username": format!("{tenant}@example.com"), "groups": [format!("oidc:{tenant}"), "system:authenticated"]})
    };
    // What the frontend will read from this Pod, by the frontend's own rule.
    let asked = features::extract(&serde_json::from_value(pod.clone())?);
    let review = envelope(
        &namespace,
        operation,
        user,
        pod.clone(),
        (kind == Kind::Update).then_some(pod),
    );
    let score = (kind == Kind::GpuTiered).then(|| ScoreRequest {
        request_id: String::new(),
        namespace: namespace.clone(),
        tenant: tenant.clone(),
        tier: tier.clone(),
        job_type: job_type.to_string(),
        workload_class: class as i32,
        gpu_count: asked.gpu_count,
        gpu_vendor: gpu_admission_policy::wire::vendor_value(asked.gpu_vendor),
        gpu_memory_gib: ann_mem.or(asked.gpu_memory_gib),
        batch_size: ann_batch,
        ..Default::default()
    });
    Ok(Item {
        review: ReviewTemplate::from_review(&review)?,
        score,
        kind,
    })
}

fn container(name: &str, image: &str, resources: Value) -> Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c"],
        "args": ["exec python -m runner --config /etc/job/config.yaml"],
        "env": [
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}
        ],
        "resources": resources,
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    })
}

/// An admission.k8s.io/v1 AdmissionReview for a Pod, as the kube-apiserver sends it.
fn envelope(
    namespace: &str,
    operation: &str,
    user: Value,
    object: Value,
    old: Option<Value>,
) -> Value {
    let op = if operation == "UPDATE" {
        review::Operation::Update
    } else {
        review::Operation::Create
    };
    let mut r = review::review_of(&object, namespace, op);
    r["request"]["uid"] = json!(UID_PLACEHOLDER);
    r["request"]["userInfo"] = user;
    if let Some(old) = old {
        r["request"]["oldObject"] = old;
    }
    r
}

/// Replays every Pod, pod template and AdmissionReview found in the YAML/JSON files of `dir`.
/// Pods without a namespace (templates) are put in the tiered namespaces round-robin (seeded).
pub fn replay(dir: &Path, seed: u64) -> Result<Workload> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut items = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for doc in parse_documents(&text) {
            for review in reviews_from_document(doc, &mut rng) {
                if let Ok(t) = ReviewTemplate::from_review(&review) {
                    let score = score_request_for(&review);
                    items.push(Item {
                        review: t,
                        score,
                        kind: Kind::Replayed,
                    });
                }
            }
        }
    }
    if items.is_empty() {
        bail!(
            "no Pod, pod template or AdmissionReview found in {}",
            dir.display()
        );
    }
    Ok(Workload {
        source: format!(
            "replay of {} ({} files, {} requests)",
            dir.display(),
            files.len(),
            items.len()
        ),
        items,
    })
}

/// All documents of a JSON or (multi-document) YAML file; unparsable documents are skipped.
fn parse_documents(text: &str) -> Vec<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return vec![v];
    }
    use serde::Deserialize as _;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| serde_yaml::Value::deserialize(d).ok())
        .filter_map(|v| serde_json::to_value(v).ok())
        .filter(|v| v.is_object())
        .collect()
}

fn reviews_from_document(doc: Value, rng: &mut StdRng) -> Vec<Value> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind == "AdmissionReview" {
        let mut doc = doc;
        if let Some(req) = doc.get_mut("request").filter(|r| r.is_object()) {
            req["uid"] = json!(UID_PLACEHOLDER);
            return vec![doc];
        }
        return vec![];
    }
    if doc.get("uid").is_some() && doc.get("operation").is_some() {
        // A bare AdmissionRequest: wrap it.
        let mut req = doc;
        req["uid"] = json!(UID_PLACEHOLDER);
        return vec![
            json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": req}),
        ];
    }
    let mut pods = Vec::new();
    if kind == "Pod" {
        pods.push(doc);
    } else {
        collect_templates(&doc, &mut pods);
    }
    pods.into_iter()
        .map(|mut pod| {
            let (ns, _) = NAMESPACE_TIERS[rng.random_range(0..NAMESPACE_TIERS.len())];
            if !pod["metadata"].is_object() {
                pod["metadata"] = json!({});
            }
            pod["metadata"]["namespace"] = json!(ns);
            let user =
                json!({"username": "replay@example.com", "groups": ["system:authenticated"]});
            envelope(ns, "CREATE", user, pod, None)
        })
        .collect()
}

/// Finds pod templates (`{metadata?, spec: {containers: [...]}}`) anywhere in a workload object.
fn collect_templates(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if let Some(spec) = m.get("spec")
                && spec.get("containers").is_some_and(Value::is_array)
            {
                out.push(json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": m.get("metadata").filter(|x| x.is_object()).cloned().unwrap_or(json!({})),
                    "spec": spec
                }));
                return;
            }
            for x in m.values() {
                collect_templates(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_templates(x, out)),
        _ => {}
    }
}

/// A ScoreRequest for a replayed Pod that asks for GPUs (count, vendor and memory by the frontend's rule).
fn score_request_for(review: &Value) -> Option<ScoreRequest> {
    let req = &review["request"];
    let pod = serde_json::from_value(req["object"].clone()).ok()?;
    let asked = features::extract(&pod);
    if asked.gpu_count == 0 {
        return None;
    }
    let ns = req["namespace"].as_str().unwrap_or("");
    let tier = NAMESPACE_TIERS.iter().find(|(n, _)| *n == ns)?.1;
    Some(ScoreRequest {
        namespace: ns.to_string(),
        tier: tier.to_string(),
        job_type: asked.job_type.unwrap_or_default(),
        gpu_count: asked.gpu_count,
        gpu_vendor: gpu_admission_policy::wire::vendor_value(asked.gpu_vendor),
        gpu_memory_gib: asked.gpu_memory_gib,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload_and_a_real_mix() {
        let a = generate(7, 400).unwrap();
        let b = generate(7, 400).unwrap();
        let c = generate(8, 400).unwrap();
        let body = |w: &Workload, i: usize| w.items[i].review.body(b"x");
        assert!((0..400).all(|i| body(&a, i) == body(&b, i)));
        assert!((0..400).any(|i| body(&a, i) != body(&c, i)));
        let mix = a.mix();
        assert!(mix["gpu-tiered"] > 200, "{mix:?}");
        assert!(mix["non-gpu"] > 40, "{mix:?}");
        assert!(mix.contains_key("gpu-untiered") && mix.contains_key("already-decided"));
        assert_eq!(a.score_requests().len(), mix["gpu-tiered"]);
        // MIG slices come with their memory when the Pod does not state one.
        let bodies: Vec<String> = (0..400)
            .map(|i| String::from_utf8(body(&a, i).to_vec()).unwrap())
            .collect();
        assert!(bodies.iter().any(|b| b.contains("nvidia.com/mig-1g.10gb")));
        assert!(bodies.iter().any(|b| b.contains("nvidia.com/gpu.shared")));
    }

    #[test]
    fn bodies_are_admission_reviews_with_the_spliced_uid() {
        let w = generate(1, 50).unwrap();
        let mut uid = [0u8; UID_LEN];
        write_uid(&mut uid, 0xabcd, 77);
        assert_eq!(&uid, b"0000abcd-0000-4000-8000-00000000004d");
        for item in &w.items {
            let v: Value = serde_json::from_slice(&item.review.body(&uid)).unwrap();
            assert_eq!(v["request"]["uid"], "0000abcd-0000-4000-8000-00000000004d");
            assert_eq!(v["request"]["object"]["kind"], "Pod");
            let pod = serde_json::from_value(v["request"]["object"].clone()).unwrap();
            let has_gpu = features::extract(&pod).gpu_count > 0;
            assert_eq!(has_gpu, item.kind != Kind::NonGpu, "{v}");
        }
    }

    #[test]
    fn replay_finds_pods_templates_and_reviews() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.yaml"), "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: i\n        resources: {limits: {nvidia.com/gpu: '2'}}\n---\n").unwrap();
        std::fs::write(dir.path().join("pod.json"), r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#).unwrap();
        std::fs::write(dir.path().join("bare.json"), r#"{"uid":"1","operation":"DELETE","kind":{"group":"","version":"v1","kind":"Pod"},"object":null}"#).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let w = replay(dir.path(), 1).unwrap();
        assert_eq!(w.items.len(), 3);
        assert_eq!(w.score_requests().len(), 1);
        assert_eq!(w.score_requests()[0].gpu_count, 2);
        for item in &w.items {
            let v: Value = serde_json::from_slice(&item.review.body(b"u")).unwrap();
            assert_eq!(v["kind"], "AdmissionReview");
            assert_eq!(v["request"]["uid"], "u");
        }
    }

    #[test]
    fn replay_of_an_empty_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(replay(dir.path(), 1).is_err());
    }
}
