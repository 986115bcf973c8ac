//! `gpu-admission check` with GpuPolicyExceptions among its inputs answers as the webhooks do: a Deployment's
//! Pods outside their tier are admitted while an exception naming the Deployment lasts, and denied without
//! it, after it, or when it names another workload.

use gpu_admission_cli::evaluate::Verdict;
use gpu_admission_cli::load::Tiers;
use gpu_admission_cli::review::User;
use gpu_admission_cli::{Run, RunSettings};

const DEPLOYMENT: &str = "---
apiVersion: apps/v1
kind: Deployment
metadata: { name: train, namespace: batch }
spec:
  replicas: 2
  selector: { matchLabels: { app: train } }
  template:
    metadata: { labels: { app: train } }
    spec:
      nodeSelector: { gpu.nvidia.com/class: H100-80GB }
      containers: [{ name: c, image: x, resources: { limits: { nvidia.com/gpu: \"1\" } } }]
";

fn exception(workload: &str, expires: &str) -> String {
    format!(
        "---\napiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\n\
         metadata: {{ name: train-h100, namespace: batch }}\n\
         spec: {{ rules: [Classes], classes: [H100-80GB], workloads: [{{ kind: Deployment, name: {workload} }}], \
         expiresAt: \"{expires}\" }}\n"
    )
}

/// Per object checked (the exception itself is no object to check): verdict, message, notes.
fn check(inputs: &str) -> Vec<(Verdict, Option<String>, Vec<String>)> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("inputs.yaml");
    std::fs::write(&file, inputs).unwrap();
    let settings = RunSettings {
        policy: None,
        policy_key: None,
        mode: Some("Enforce".into()),
        state: None,
        tiers: Tiers::parse(&["batch=bronze".to_string()]).unwrap(),
        requester: User::default_requester(),
        no_kube: false,
        default_namespace: "default".into(),
        usage: None,
    };
    Run::new(&settings)
        .unwrap()
        .check(&[file])
        .unwrap()
        .evaluations
        .into_iter()
        .map(|e| (e.verdict, e.message, e.notes))
        .collect()
}

#[test]
fn a_deployments_exception_admits_its_pods_while_it_lasts() {
    let live = check(&[DEPLOYMENT, &exception("train", "2099-01-01T00:00:00Z")].concat());
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].0, Verdict::Allowed, "{live:?}");
    assert!(
        live[0]
            .2
            .iter()
            .any(|n| n.contains("allowed by GpuPolicyException batch/train-h100")),
        "{live:?}"
    );
    for (inputs, why) in [
        (DEPLOYMENT.to_string(), "no exception"),
        (
            [DEPLOYMENT, &exception("train", "2020-01-01T00:00:00Z")].concat(),
            "expired",
        ),
        (
            [DEPLOYMENT, &exception("serve", "2099-01-01T00:00:00Z")].concat(),
            "another Deployment's",
        ),
    ] {
        let e = check(&inputs);
        assert_eq!(e[0].0, Verdict::Denied, "{why}: {e:?}");
        assert!(
            e[0].1.as_deref().is_some_and(|m| m.contains("H100-80GB")),
            "{why}: {e:?}"
        );
    }
}
