//! What the watch stores hold per object, counted (not timed): the resident memory this process gains while N
//! objects are decoded one by one and kept as a store keeps them, and its peak (`/proc/self/status`); one
//! mode per process. The Pods are the corpus's captured GKE Pod
//! (`../shared/corpus/admissionreviews/kube-rs-kube__admission.rs_WEBHOOK_BODY.json`, or the AdmissionReview
//! file given third) with one GPU limit and a Node added and the name and uid varied.
//!
//! `cargo run -p observer --example watch_memory -- MODE [N [REVIEW.json [big]]]` (`big`: each Pod with 512
//! KiB of annotation and env); the numbers are in
//! docs/measurements/2026-11-29-watches-not-lists.md.

use std::sync::Arc;

use gpu_admission_core::quota::watched::{HeldPod, WatchedPod};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::core::{DynamicObject, ObjectList, PartialObjectMeta};
use serde_json::{Value, json};

/// `VmRSS` and `VmHWM` (peak) of this process, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// Runs `keep` over `n` objects and says what it left resident and the peak, above the resident before.
fn counted<T>(what: &str, n: usize, keep: impl FnOnce() -> T) -> T {
    let (before, _) = rss();
    let kept = keep();
    let (after, peak) = rss();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "{what}: {n} objects; resident after {:.1} MiB = {:.1} MiB per 10,000 ({} B each); peak {:.1} MiB",
        mib(after.saturating_sub(before)),
        mib(after.saturating_sub(before)) * 10_000.0 / n as f64,
        after.saturating_sub(before) / n as u64,
        mib(peak.saturating_sub(before)),
    );
    kept
}

/// The corpus Pod as a stored GPU Pod: one `nvidia.com/gpu` limit, a Node, name and uid per `i`.
fn pod(template: &Value, i: usize) -> Value {
    let mut p = template.clone();
    p["metadata"]["name"] = json!(format!("pod-{i}"));
    p["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
    p["metadata"]["resourceVersion"] = json!(format!("{}", 1000 + i));
    p["spec"]["nodeName"] = json!(format!("kwok-node-{}", i % 5000));
    p["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}});
    p
}

/// What the frontend's quota watch keeps of `n` Pods listed in pages of 100 (its `LIST_PAGE`), each page's
/// JSON decoded as `ObjectList<K>` as kube's list does: every Pod's name, and what counting reads of the
/// Pods that may hold GPUs (`watched::HeldPod`).
fn quota_watch<K: serde::de::DeserializeOwned + Clone>(
    n: usize,
    pod_json: &dyn Fn(usize) -> String,
    pod: impl Fn(K) -> WatchedPod,
) -> (Vec<String>, Vec<HeldPod>) {
    let (mut names, mut kept) = (Vec::new(), Vec::new());
    for start in (0..n).step_by(100) {
        let items: Vec<String> = (start..n.min(start + 100)).map(pod_json).collect();
        let page = format!(
            r#"{{"apiVersion":"v1","kind":"PodList","metadata":{{"resourceVersion":"1"}},"items":[{}]}}"#,
            items.join(",")
        );
        let list: ObjectList<K> = serde_json::from_str(&page).unwrap();
        for item in list.items {
            let p = pod(item);
            names.push(format!(
                "{}/{}",
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default()
            ));
            kept.extend(p.held);
        }
    }
    (names, kept)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("", String::as_str);
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let path = args.get(3).map_or(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/corpus/admissionreviews/kube-rs-kube__admission.rs_WEBHOOK_BODY.json"
        ),
        String::as_str,
    );
    let review: Value = serde_json::from_str(&std::fs::read_to_string(path).expect(path)).unwrap();
    let mut template = review["request"]["object"].clone();
    if args.get(4).map(String::as_str) == Some("big") {
        // A tenant's large Pod: 256 KiB of annotation and 256 KiB of env, what counting never reads.
        template["metadata"]["annotations"]["example.com/blob"] = json!("x".repeat(256 * 1024));
        template["spec"]["containers"][0]["env"] =
            json!([{"name": "BLOB", "value": "y".repeat(256 * 1024)}]);
    }
    let pod_json = |i: usize| pod(&template, i).to_string();
    eprintln!("Pod JSON: {} B ({path})", pod_json(0).len());
    match mode {
        "audit-served" => drop(counted("audit store, Pod as served", n, || {
            (0..n)
                .map(|i| Arc::new(serde_json::from_str::<DynamicObject>(&pod_json(i)).unwrap()))
                .collect::<Vec<_>>()
        })),
        "audit-slim" => drop(counted("audit store, Pod slimmed", n, || {
            (0..n)
                .map(|i| {
                    let mut o: DynamicObject = serde_json::from_str(&pod_json(i)).unwrap();
                    observer::audit::stores::slim_object(&mut o, true);
                    Arc::new(o)
                })
                .collect::<Vec<_>>()
        })),
        "audit-stored" => drop(counted("audit store, Pod slimmed as JSON", n, || {
            (0..n)
                .map(|i| {
                    let o: DynamicObject = serde_json::from_str(&pod_json(i)).unwrap();
                    Arc::new(observer::audit::stores::StoredObject::of(o, true))
                })
                .collect::<Vec<_>>()
        })),
        "audit-preslimmed" => {
            let mut o: DynamicObject = serde_json::from_str(&pod_json(0)).unwrap();
            observer::audit::stores::slim_object(&mut o, true);
            let slim = serde_json::to_string(&o).unwrap();
            eprintln!("slimmed JSON {} B", slim.len());
            drop(counted(
                "audit store, Pod decoded from slimmed JSON",
                n,
                || {
                    (0..n)
                        .map(|_| Arc::new(serde_json::from_str::<DynamicObject>(&slim).unwrap()))
                        .collect::<Vec<_>>()
                },
            ))
        }
        "audit-typed" => drop(counted("audit store, Pod typed and slimmed", n, || {
            (0..n)
                .map(|i| {
                    let mut o: DynamicObject = serde_json::from_str(&pod_json(i)).unwrap();
                    observer::audit::stores::slim_object(&mut o, true);
                    let p: k8s_openapi::api::core::v1::Pod =
                        serde_json::from_value(serde_json::to_value(o).unwrap()).unwrap();
                    Arc::new(p)
                })
                .collect::<Vec<_>>()
        })),
        "quota-whole" => drop(counted("quota watch, pages of whole Pods", n, || {
            quota_watch::<k8s_openapi::api::core::v1::Pod>(n, &pod_json, |p| WatchedPod::of(&p))
        })),
        "quota-projection" => drop(counted("quota watch, pages of WatchedPod", n, || {
            quota_watch::<WatchedPod>(n, &pod_json, |w| w)
        })),
        "namespaces" => drop(counted("Namespace metadata", n, || {
            (0..n)
                .map(|i| {
                    let m = json!({"metadata": {"name": format!("team-{i}"), "uid": format!("ns-{i}"),
                        "resourceVersion": "1", "creationTimestamp": "2026-11-29T10:00:00Z",
                        "labels": {"gpu-admission.io/tier": "silver",
                                   "kubernetes.io/metadata.name": format!("team-{i}")}}});
                    Arc::new(serde_json::from_value::<PartialObjectMeta<Namespace>>(m).unwrap())
                })
                .collect::<Vec<_>>()
        })),
        "nodes" => drop(counted("Node metadata (kwok's labels)", n, || {
            (0..n)
                .map(|i| {
                    let m = json!({"metadata": {"name": format!("kwok-node-{i}"), "uid": format!("node-{i}"),
                        "resourceVersion": "1", "creationTimestamp": "2026-11-29T10:00:00Z",
                        "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": format!("kwok-node-{i}"),
                            "kubernetes.io/os": "linux", "kubernetes.io/role": "agent", "type": "kwok",
                            "node-role.kubernetes.io/agent": "", "gpu.nvidia.com/class": "L4-24GB"}}});
                    Arc::new(serde_json::from_value::<PartialObjectMeta<Node>>(m).unwrap())
                })
                .collect::<Vec<_>>()
        })),
        _ => eprintln!(
            "modes: audit-served audit-slim audit-preslimmed audit-typed audit-stored quota-whole \
             quota-projection namespaces nodes"
        ),
    }
}
