//! The corpus reader itself, on the real corpus (no processes): every file parses, and the pod templates
//! of the workload kinds the webhook will meet are all found.

use gpu_admission_tests::corpus::{admission_reviews, extract_pods, manifest_files};
use gpu_admission_tests::gpu::gpu_ask;

fn pods_of(name: &str) -> Vec<gpu_admission_tests::corpus::CorpusPod> {
    let files = manifest_files().expect("corpus parses");
    let f = files
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} in the corpus"));
    extract_pods(f)
}

#[test]
fn every_manifest_parses_and_yields_pods() {
    let files = manifest_files().expect("every corpus manifest parses");
    let pods: Vec<_> = files.iter().flat_map(extract_pods).collect();
    let gpu = pods.iter().filter(|p| gpu_ask(&p.pod).is_some()).count();
    eprintln!(
        "corpus: {} manifest files, {} pods/templates, {gpu} asking for GPUs",
        files.len(),
        pods.len()
    );
    assert!(
        files.len() >= 40,
        "expected the whole corpus, got {} files",
        files.len()
    );
    assert!(
        pods.len() >= 40,
        "expected >= 40 pods/templates, got {}",
        pods.len()
    );
    assert!(gpu >= 15, "expected >= 15 GPU pods/templates, got {gpu}");
    let unparsable: Vec<_> = pods
        .iter()
        .filter(|p| !p.parses)
        .map(|p| &p.source)
        .collect();
    eprintln!("not a valid k8s_openapi Pod (kept for robustness checks): {unparsable:?}");
}

#[test]
fn workload_templates_are_found() {
    // (file, templates expected, of which asking for GPUs)
    for (file, total, gpu) in [
        ("kubeflow-trainer__pytorch_job_mnist_nccl.yaml", 2, 2),
        ("kubeflow-trainer__llama3_2_1B.yaml", 3, 1),
        ("volcano-sh-volcano__mindspore-gpu.yaml", 2, 1),
        ("kubernetes-sigs-kueue__sample-cronjob.yaml", 1, 0),
        (
            "ray-project-kuberay__ray-service.stable-diffusion.yaml",
            2,
            1,
        ),
        ("kubernetes-sigs-kueue__kueue-pod-group.yaml", 2, 0),
        ("nvidia-k8s-device-plugin__job-1.yaml", 1, 1),
    ] {
        let pods = pods_of(file);
        let g = pods.iter().filter(|p| gpu_ask(&p.pod).is_some()).count();
        assert_eq!(
            (pods.len(), g),
            (total, gpu),
            "{file}: {:?}",
            pods.iter().map(|p| &p.source).collect::<Vec<_>>()
        );
    }
    // The Argo WorkflowTemplate embeds a Volcano Job as a YAML string.
    let argo = pods_of("volcano-sh-volcano__argo-mpi-hello-world.yaml");
    assert!(
        argo.iter().any(|p| p.source.contains("/manifest#")),
        "{:?}",
        argo.iter().map(|p| &p.source).collect::<Vec<_>>()
    );
}

#[test]
fn admission_reviews_are_wrapped() {
    let reviews = admission_reviews().expect("reviews parse");
    assert!(reviews.len() >= 14);
    for r in &reviews {
        assert_eq!(r.review["kind"], "AdmissionReview", "{}", r.file);
        assert!(r.review["request"]["uid"].is_string(), "{}", r.file);
    }
    assert!(reviews.iter().filter(|r| r.was_bare).count() >= 8);
}
