//! `loadgen demo`: starts the scorer and the webhook frontend (self-signed TLS, no cluster), admits a set of
//! real-looking Pods one by one through HTTPS exactly as the kube-apiserver would, and prints one line per
//! decision: Pod, tier, GPU class, priority, avoided job types, latency. Then the Pods' second pass, to show
//! that the webhook leaves its own output alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use base64::Engine;
use gpu_admission_core::names::decision::{
    ANN_GPU_CLASS, ANN_INFEASIBLE_REASON, ANN_PRIORITY_SCORE,
};
use gpu_admission_core::policy::{PolicySnapshot, TierScope};
use serde_json::{Value, json};

use crate::cli::{DemoArgs, HttpVersion};
use crate::drivers::webhook::{Conn, WebhookTarget, pass_through_reason};
use crate::spawn;
use crate::workload::NAMESPACE_TIERS;
use gpu_admission_testkit::review;

/// One Pod of the demo and what it is meant to show.
struct Case {
    what: &'static str,
    pod: Value,
}

fn gpu_pod(
    name: &str,
    namespace: &str,
    annotations: Value,
    resource: &str,
    count: u32,
    extra_spec: Value,
) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations,
                     "labels": {"app.kubernetes.io/name": name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["python", "train.py"],
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", resource: count.to_string()},
                    "limits": {"memory": "64Gi", resource: count.to_string()}
                }
            }]
        }
    });
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    pod
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "gold LLM pre-training, 8 GPUs, 70 GiB each",
            pod: gpu_pod(
                "llama-70b-pretrain-0",
                "llm-prod",
                json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "70", "ml.batch_size": "512",
                       "scheduler.radix.ai/tenant": "foundation-models"}),
                "nvidia.com/gpu",
                8,
                json!({}),
            ),
        },
        Case {
            what: "gold online inference, keeps its own toleration",
            pod: gpu_pod(
                "chat-serving-7f9c",
                "inference",
                json!({"gpu-admission.io/job-type": "inference-llm", "gpu-admission.io/gpu-memory-gib": "40"}),
                "nvidia.com/gpu",
                1,
                json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "serving", "effect": "NoSchedule"}]}),
            ),
        },
        Case {
            what: "silver fine-tuning with existing pod anti-affinity",
            pod: gpu_pod(
                "bert-finetune-2",
                "research",
                json!({"app.kubernetes.io/job-type": "train-bert", "gpu.mem.gi": "30"}),
                "nvidia.com/gpu",
                2,
                json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                     "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "bert-finetune-2"}}}}]}}}),
            ),
        },
        Case {
            what: "bronze vision inference, 16 GiB",
            pod: gpu_pod(
                "resnet-infer-1",
                "students",
                json!({"app.kubernetes.io/job-type": "inference-vision", "gpu.mem.gi": "16"}),
                "nvidia.com/gpu",
                1,
                json!({}),
            ),
        },
        Case {
            what: "bronze asks for 70 GiB: no class fits its tier",
            pod: gpu_pod(
                "llama-hobby-run",
                "batch",
                json!({"app.kubernetes.io/job-type": "train-llama", "gpu.mem.gi": "70"}),
                "nvidia.com/gpu",
                1,
                json!({}),
            ),
        },
        Case {
            what: "AMD GPUs in a gold namespace",
            pod: gpu_pod(
                "mi300-embedding",
                "llm-prod",
                json!({"app.kubernetes.io/job-type": "batch-embedding", "gpu.mem.gi": "96"}),
                "amd.com/gpu",
                4,
                json!({}),
            ),
        },
        Case {
            what: "pins its own GPU class: kept",
            pod: gpu_pod(
                "pinned-a100",
                "research",
                json!({"app.kubernetes.io/job-type": "train-resnet"}),
                "nvidia.com/gpu",
                1,
                json!({"nodeSelector": {"gpu.nvidia.com/class": "A100-40GB"}}),
            ),
        },
        Case {
            what: "malformed annotation: ignored with a warning",
            pod: gpu_pod(
                "notebook-alice",
                "research",
                json!({"app.kubernetes.io/job-type": "notebook", "gpu.mem.gi": "lots"}),
                "nvidia.com/gpu",
                1,
                json!({}),
            ),
        },
        Case {
            what: "no GPU: not our business",
            pod: json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "nginx", "namespace": "llm-prod"},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}),
        },
        Case {
            what: "GPU Pod in a namespace without a tier",
            pod: gpu_pod(
                "ci-cuda-smoke",
                "ci-runners",
                json!({}),
                "nvidia.com/gpu",
                1,
                json!({}),
            ),
        },
    ]
}

/// The CREATE review the apiserver would send for `pod` (in its own namespace), with this uid.
fn review(uid: &str, pod: &Value) -> Value {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    review::with_uid_and_version(
        review::review_of(pod, namespace, review::Operation::Create),
        uid,
        "admission.k8s.io/v1",
    )
}

/// What one admission came back as, read from the AdmissionReview response and its patch.
struct Decision {
    patched: Value,
    ops: usize,
    warnings: Vec<String>,
}

fn decide(uid: &str, pod: &Value, body: &[u8]) -> Result<Decision> {
    let review: Value = serde_json::from_slice(body).context("response is not JSON")?;
    let resp = &review["response"];
    if resp["uid"] != uid {
        bail!("response uid {} does not echo {uid}", resp["uid"]);
    }
    if resp["allowed"] != true {
        bail!("Pod rejected: {}", resp["status"]);
    }
    let warnings = resp["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    let mut patched = pod.clone();
    let mut ops = 0;
    if let Some(b64) = resp["patch"].as_str() {
        if resp["patchType"] != "JSONPatch" {
            bail!("patch without patchType JSONPatch");
        }
        let raw = base64::engine::general_purpose::STANDARD.decode(b64)?;
        let patch: json_patch::Patch = serde_json::from_slice(&raw)?;
        ops = patch.0.len();
        json_patch::patch(&mut patched, &patch).context("the patch does not apply")?;
    }
    Ok(Decision {
        patched,
        ops,
        warnings,
    })
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod["metadata"]["annotations"][key].as_str()
}

/// The job types the patch keeps off this Pod's node (values of our anti-affinity terms).
fn avoided(before: &Value, after: &Value) -> Vec<String> {
    let terms = |p: &Value| -> Vec<Value> {
        p["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let old = terms(before);
    terms(after)
        .into_iter()
        .filter(|t| !old.contains(t))
        .flat_map(|t| {
            t["podAffinityTerm"]["labelSelector"]["matchExpressions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The policy the demo's scorer runs (its embedded default), as the frontend reads it.
fn demo_policy() -> Result<PolicySnapshot> {
    let policy = gpu_admission_policy::embedded_default().context("the embedded default policy")?;
    Ok(PolicySnapshot::from_policy(Arc::new(policy)))
}

/// The tier the frontend holds `namespace` to, and what decided it: its tier label (`NAMESPACE_TIERS`, given
/// to the frontend), or for an untiered namespace the policy (`bronze (default)` under
/// `untieredNamespaces: DefaultTier`; `-` when it holds such namespaces to no tier).
fn tier_of(namespace: &str, policy: &PolicySnapshot) -> String {
    let label = NAMESPACE_TIERS
        .iter()
        .find(|(ns, _)| *ns == namespace)
        .map(|(_, t)| *t);
    match policy.tier_for(label) {
        TierScope::Tier(t) => t,
        TierScope::Defaulted { tier, .. } => format!("{tier} (default)"),
        TierScope::Denied(_) | TierScope::Ignored(_) => "-".into(),
    }
}

/// One printed line: pod, tier, class, priority, avoided types, latency.
fn line(case: &Case, d: &Decision, ms: f64, policy: &PolicySnapshot) -> String {
    let p = &d.patched;
    let ns = case.pod["metadata"]["namespace"].as_str().unwrap_or("");
    let name = case.pod["metadata"]["name"].as_str().unwrap_or("");
    let outcome = if d.ops > 0 { "mutated" } else { "unchanged" };
    let class = match (
        annotation(p, ANN_GPU_CLASS),
        annotation(p, ANN_INFEASIBLE_REASON),
    ) {
        (Some(c), _) => c.to_string(),
        (None, Some(_)) => "none feasible".into(),
        _ => "-".into(),
    };
    let own = case.pod["spec"]["nodeSelector"]["gpu.nvidia.com/class"].is_string();
    let required_in = p["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
        .as_array()
        .and_then(|e| e.last())
        .and_then(|e| e["values"].as_array())
        .map_or(0, Vec::len);
    let placement = if own {
        "Pod's own selector".to_string()
    } else if p["spec"]["nodeSelector"]["gpu.nvidia.com/class"].is_string() {
        "nodeSelector".to_string()
    } else if required_in > 0 {
        format!("affinity, {required_in} classes")
    } else {
        "-".to_string()
    };
    let priority = match (
        p["spec"]["priorityClassName"].as_str(),
        annotation(p, ANN_PRIORITY_SCORE),
    ) {
        (Some(pc), Some(score)) => format!("{pc} ({score})"),
        (Some(pc), None) => pc.to_string(),
        _ => "-".into(),
    };
    let avoid = avoided(&case.pod, p);
    let avoid = if avoid.is_empty() {
        "-".into()
    } else {
        avoid.join(",")
    };
    format!(
        "{:<30} {:<16} {:<9} {:<14} {:<20} {:<20} {:<40} {:>7.2} ms  {}",
        format!("{ns}/{name}"),
        tier_of(ns, policy),
        outcome,
        class,
        placement,
        priority,
        avoid,
        ms,
        case.what
    )
}

pub async fn run(args: DemoArgs) -> Result<i32> {
    let bin_dir = spawn::bin_dir(args.bin_dir.as_deref())?;
    // The work dir holds a freshly generated CA private key: removed at the end unless the user named it, or
    // the demo failed (its logs then say why).
    let mut tmp = None;
    let work: PathBuf = match &args.work_dir {
        Some(d) => d.clone(),
        None => {
            let t = tempfile::Builder::new()
                .prefix("gpu-admission-demo-")
                .tempdir()?;
            let p = t.path().to_path_buf();
            tmp = Some(t);
            p
        }
    };
    std::fs::create_dir_all(&work)?;
    let kept = args.work_dir.is_some();
    // Ctrl-C ends the demo through the drops (services killed, temporary folder removed).
    let code = tokio::select! {
        code = admit_cases(&bin_dir, &work, kept) => code,
        _ = tokio::signal::ctrl_c() => Ok(130),
    };
    if kept {
        eprintln!("logs and the generated CA kept in {}", work.display());
    } else if !matches!(code, Ok(0) | Ok(130))
        && let Some(t) = tmp
    {
        eprintln!(
            "the demo failed: its logs (scorer.log, webhook-frontend.log) kept in {}",
            t.keep().display()
        );
    }
    code
}

/// The frontend's scorer budget in the demo: the demo runs debug builds, often on a machine that has just
/// built them, where a first answer can take longer than the production default of 200 ms.
const DEMO_DEADLINE_MS: u64 = 1000;

/// Admits the first case until the scorer decides it (at most 10 s): the frontend loads the PriorityClasses
/// from the scorer's policy just after it starts listening, and the first call dials the scorer. The table
/// then shows decisions, not start-up.
async fn warm_up(conn: &mut Conn) -> Result<()> {
    let pod = &cases()[0].pod;
    let started = Instant::now();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let uid = format!("00000000-0000-4000-8000-ffff{attempt:08x}");
        let (status, answer) = conn
            .send(serde_json::to_vec(&review(&uid, pod))?.into())
            .await
            .map_err(|e| anyhow::anyhow!("warm-up request failed: {e:?}"))?;
        let decided = status == http::StatusCode::OK
            && pass_through_reason(&answer).is_none()
            && decide(&uid, pod, &answer).is_ok_and(|d| d.ops > 0);
        if decided {
            return Ok(());
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            bail!("the frontend did not decide a GPU Pod within 10 s (HTTP {status}); see its log");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Starts both services from `bin_dir` with their logs and TLS in `work`, admits every case twice and
/// prints the table; 0 when every answer was right and the second pass changed nothing.
async fn admit_cases(bin_dir: &std::path::Path, work: &std::path::Path, kept: bool) -> Result<i32> {
    let bin_dir = bin_dir.to_path_buf();
    let tls = work.join("tls");
    let mut scorer = spawn::start_scorer(&bin_dir, work).await?;
    let scorer_url = format!("http://{}", scorer.addr);
    let mut frontend = spawn::start_frontend(
        &bin_dir,
        "webhook-frontend",
        &scorer_url,
        &tls,
        DEMO_DEADLINE_MS,
        work.join("webhook-frontend.log"),
        &[],
    )
    .await?;
    // Paths only when they outlive the demo.
    if kept {
        println!(
            "scorer            grpc://{}  (log {})",
            scorer.addr,
            scorer.log.display()
        );
        println!(
            "webhook-frontend  https://{}/mutate-pod  (CA {}, log {})",
            frontend.addr,
            tls.join("ca.crt").display(),
            frontend.log.display()
        );
    } else {
        println!("scorer            grpc://{}", scorer.addr);
        println!(
            "webhook-frontend  https://{}/mutate-pod  (logs and CA removed at the end: --work-dir DIR keeps them)",
            frontend.addr
        );
    }
    let policy = demo_policy()?;
    println!(
        "namespaces        {}; any other: {}\n",
        NAMESPACE_TIERS
            .iter()
            .map(|(ns, t)| format!("{ns}={t}"))
            .collect::<Vec<_>>()
            .join(" "),
        tier_of("", &policy)
    );

    let url = format!("https://{}/mutate-pod?timeout=10s", frontend.addr);
    let target = Arc::new(
        WebhookTarget::new(&url, &tls.join("ca.crt"), HttpVersion::Http1, Vec::new(), 0).await?,
    );
    let mut conn = Conn::open(target).await?;
    warm_up(&mut conn).await?;

    println!(
        "{:<30} {:<16} {:<9} {:<14} {:<20} {:<20} {:<40} {:>10}  what it shows",
        "POD", "TIER", "OUTCOME", "GPU CLASS", "PLACEMENT", "PRIORITY", "AVOIDS", "LATENCY"
    );
    let mut failures = 0;
    let mut second_pass = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        let uid = format!("00000000-0000-4000-8000-{:012x}", i + 1);
        let body = serde_json::to_vec(&review(&uid, &case.pod))?;
        let started = Instant::now();
        let (status, answer) = conn
            .send(body.into())
            .await
            .map_err(|e| anyhow::anyhow!("request failed: {e:?}"))?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if status != http::StatusCode::OK {
            println!("{:<30} HTTP {status}", case.pod["metadata"]["name"]);
            failures += 1;
            continue;
        }
        match decide(&uid, &case.pod, &answer) {
            Ok(d) => {
                println!("{}", line(case, &d, ms, &policy));
                for w in &d.warnings {
                    println!("{:<30} warning: {w}", "");
                }
                // A Pod passed through (scorer too slow) is admitted unchanged; admitted again it is
                // decided, which is not a second change of the webhook's own output.
                if pass_through_reason(&answer).is_none() {
                    second_pass.push((uid, d.patched));
                }
            }
            Err(e) => {
                println!("{:<30} ERROR {e:#}", case.pod["metadata"]["name"]);
                failures += 1;
            }
        }
    }

    // Idempotency: the webhook's own output, admitted again, gets no patch.
    let mut changed = 0;
    for (uid, pod) in &second_pass {
        let uid = format!("{uid}-2");
        let (_, answer) = conn
            .send(serde_json::to_vec(&review(&uid, pod))?.into())
            .await
            .map_err(|e| anyhow::anyhow!("request failed: {e:?}"))?;
        if decide(&uid, pod, &answer)?.ops > 0 {
            changed += 1;
        }
    }
    println!(
        "\nsecond pass over the {} admitted Pods: {changed} changed (idempotent: expected 0)",
        second_pass.len()
    );
    frontend.kill();
    scorer.kill();
    Ok(if failures == 0 && changed == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(uid: &str, patch: Option<&str>) -> Vec<u8> {
        let mut resp = json!({"uid": uid, "allowed": true});
        if let Some(p) = patch {
            resp["patchType"] = json!("JSONPatch");
            resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p));
        }
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}))
            .unwrap()
    }

    #[test]
    fn applies_the_patch_and_reads_the_avoided_job_types() {
        let pod = cases().remove(2).pod;
        let term = json!({"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchExpressions": [{"key": "gpu-admission.io/job-type", "operator": "In", "values": ["train-llama"]}]}}});
        let patch = json!([
            {"op": "add", "path": "/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/-", "value": term},
            {"op": "add", "path": "/metadata/annotations/gpu-admission.io~1gpu-class", "value": "A100-80GB"}
        ]);
        let d = decide("u1", &pod, &answer("u1", Some(&patch.to_string()))).unwrap();
        assert_eq!(d.ops, 2);
        assert_eq!(annotation(&d.patched, ANN_GPU_CLASS), Some("A100-80GB"));
        // The Pod's own anti-affinity term is not reported as ours.
        assert_eq!(avoided(&pod, &d.patched), ["train-llama"]);
    }

    #[test]
    fn an_untiered_namespace_shows_the_tier_that_decided() {
        let policy = demo_policy().unwrap();
        assert_eq!(tier_of("llm-prod", &policy), "gold");
        // The demo's case in a namespace without a tier: held to the default policy's defaultTier.
        let untiered = cases()
            .into_iter()
            .map(|c| {
                c.pod["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .find(|ns| !NAMESPACE_TIERS.iter().any(|(n, _)| n == ns))
            .expect("a case in an untiered namespace");
        assert_eq!(tier_of(&untiered, &policy), "bronze (default)");
        let d = Decision {
            patched: cases().remove(0).pod,
            ops: 0,
            warnings: Vec::new(),
        };
        let case = Case {
            what: "x",
            pod: json!({"metadata": {"name": "p", "namespace": untiered}}),
        };
        assert!(
            line(&case, &d, 1.0, &policy).contains(" bronze (default) "),
            "{}",
            line(&case, &d, 1.0, &policy)
        );
    }

    #[test]
    fn refuses_a_wrong_uid_a_rejection_and_a_patch_that_does_not_apply() {
        let pod = cases().remove(0).pod;
        assert!(decide("u1", &pod, &answer("u2", None)).is_err());
        let rejected = br#"{"response": {"uid": "u1", "allowed": false}}"#;
        assert!(decide("u1", &pod, rejected).is_err());
        let bad = json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]).to_string();
        assert!(decide("u1", &pod, &answer("u1", Some(&bad))).is_err());
        let unchanged = decide("u1", &pod, &answer("u1", None)).unwrap();
        assert_eq!((unchanged.ops, unchanged.patched), (0, pod));
    }
}
