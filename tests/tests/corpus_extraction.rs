//! The corpus reader itself (no processes), on the project's fixtures and, when present, on the external
//! corpus: every file parses, and the pod templates of the workload kinds the webhook will meet are found.

use gpu_admission_tests::corpus::{self, CorpusPod, Tier, extract_pods};
use gpu_admission_tests::gpu::gpu_ask;

fn pods_of(tier: &Tier, name: &str) -> Vec<CorpusPod> {
    let files = tier.manifest_files().expect("the tier parses");
    let f = files
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} in {}", tier.dir.display()));
    extract_pods(f)
}

/// (file, pods/templates expected, of which asking for GPUs), in `tier`.
fn assert_templates(tier: &Tier, expected: &[(&str, usize, usize)]) {
    for &(file, total, gpu) in expected {
        let pods = pods_of(tier, file);
        let g = pods.iter().filter(|p| gpu_ask(&p.pod).is_some()).count();
        assert_eq!(
            (pods.len(), g),
            (total, gpu),
            "{file}: {:?}",
            pods.iter().map(|p| &p.source).collect::<Vec<_>>()
        );
    }
}

/// Parses every manifest of `tier`; returns (files, pods/templates, GPU ones).
fn counts(tier: &Tier) -> (usize, usize, usize) {
    let files = tier.manifest_files().expect("every manifest parses");
    let pods: Vec<_> = files.iter().flat_map(extract_pods).collect();
    let gpu = pods.iter().filter(|p| gpu_ask(&p.pod).is_some()).count();
    let unparsable: Vec<_> = pods
        .iter()
        .filter(|p| !p.parses)
        .map(|p| &p.source)
        .collect();
    eprintln!(
        "{}: {} manifest files, {} pods/templates, {gpu} asking for GPUs; not a valid k8s_openapi Pod: \
         {unparsable:?}",
        tier.name,
        files.len(),
        pods.len()
    );
    (files.len(), pods.len(), gpu)
}

#[test]
fn fixtures_parse_and_yield_every_shape() {
    let fixtures = corpus::fixtures();
    let (files, pods, gpu) = counts(&fixtures);
    assert_eq!((files, pods, gpu), (17, 32, 25));
    assert_templates(
        &fixtures,
        &[
            ("pod-nvidia-llm-pretrain.yaml", 1, 1),
            ("pod-amd-inference.yaml", 1, 1),
            ("pod-intel-flex.json", 1, 1),
            ("pod-gpu-in-init-container.yaml", 1, 1),
            // ConfigMap and Service skipped; nginx, the pinned notebook, the zero-GPU Pod.
            ("multi-document.yaml", 3, 1),
            ("yaml-anchors-and-quantities.yaml", 1, 1),
            ("job-batch-training.yaml", 1, 1),
            ("cronjob-nightly-eval.yaml", 1, 1),
            ("deployment-llm-serving.yaml", 1, 1),
            ("statefulset-vector-db.yaml", 1, 1),
            ("daemonset-gpu-exporter.yaml", 1, 0),
            ("pytorchjob-distributed.yaml", 2, 2),
            ("volcano-job-mixed-tasks.yaml", 2, 1),
            ("raycluster-head-and-gpu-workers.yaml", 3, 1),
            ("jobset-replicated.yaml", 2, 1),
            ("argo-embedded-manifest.yaml", 1, 1),
            // MIG, time-sliced, HAMi, Intel + millicores, GFD, a class choice, HAMi type, nodeName, Kueue.
            ("gpu-request-shapes.yaml", 9, 9),
        ],
    );
    // Every vendor, and a GPU asked only by an init container.
    let vendor = |file: &str| gpu_ask(&pods_of(&fixtures, file)[0].pod).map(|a| a.vendor);
    assert_eq!(vendor("pod-amd-inference.yaml"), Some("amd"));
    assert_eq!(vendor("pod-intel-flex.json"), Some("intel"));
    assert_eq!(vendor("pod-gpu-in-init-container.yaml"), Some("nvidia"));
    // Merge keys applied, numbers turned into quantity strings as the apiserver serialises them.
    let sweep = &pods_of(&fixtures, "yaml-anchors-and-quantities.yaml")[0];
    assert!(sweep.parses, "{}", sweep.pod);
    let requests = &sweep.pod["spec"]["containers"][0]["resources"]["requests"];
    assert_eq!(requests["nvidia.com/gpu"], "1", "{requests}");
    assert_eq!(requests["cpu"], "7.5", "{requests}");
    assert_eq!(
        sweep.pod["spec"]["containers"][1]["resources"]["limits"]["ephemeral-storage"],
        "20G"
    );
    // The Argo step's Job, embedded as a YAML string with `{{...}}` placeholders.
    let argo = pods_of(&fixtures, "argo-embedded-manifest.yaml");
    assert!(argo[0].source.contains("/manifest#"), "{}", argo[0].source);
}

#[test]
fn fixture_reviews_are_wrapped() {
    let reviews = corpus::fixtures()
        .admission_reviews()
        .expect("reviews parse");
    assert_eq!(reviews.len(), 14);
    for r in &reviews {
        assert_eq!(r.review["kind"], "AdmissionReview", "{}", r.file);
        assert!(r.review["request"]["uid"].is_string(), "{}", r.file);
    }
    assert_eq!(reviews.iter().filter(|r| r.was_bare).count(), 4);
    let versions: std::collections::BTreeSet<_> = reviews
        .iter()
        .map(|r| r.review["apiVersion"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        versions,
        ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"].into()
    );
    let ops: std::collections::BTreeSet<_> = reviews
        .iter()
        .map(|r| r.review["request"]["operation"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ops, ["CREATE", "DELETE", "UPDATE"].into());
}

#[test]
fn external_corpus_parses_and_yields_pods() {
    let Some(corpus) = corpus::external() else {
        return;
    };
    let (files, pods, gpu) = counts(&corpus);
    assert!(files >= 40, "expected the whole corpus, got {files} files");
    assert!(pods >= 40, "expected >= 40 pods/templates, got {pods}");
    assert!(gpu >= 15, "expected >= 15 GPU pods/templates, got {gpu}");
    assert_templates(
        &corpus,
        &[
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
        ],
    );
    // The Argo WorkflowTemplate embeds a Volcano Job as a YAML string.
    let argo = pods_of(&corpus, "volcano-sh-volcano__argo-mpi-hello-world.yaml");
    assert!(
        argo.iter().any(|p| p.source.contains("/manifest#")),
        "{:?}",
        argo.iter().map(|p| &p.source).collect::<Vec<_>>()
    );
    let reviews = corpus.admission_reviews().expect("reviews parse");
    assert!(reviews.len() >= 14);
    for r in &reviews {
        assert_eq!(r.review["kind"], "AdmissionReview", "{}", r.file);
        assert!(r.review["request"]["uid"].is_string(), "{}", r.file);
    }
    assert!(reviews.iter().filter(|r| r.was_bare).count() >= 8);
}
