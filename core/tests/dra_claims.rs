//! A Pod whose only GPUs come from a DRA ResourceClaimTemplate (`tests/fixtures/dra/`): recognised at the
//! AdmissionReview tier when the template can be read (the review and the template are fixtures; the live
//! counterpart with the real scheduler allocating is `tests/tests/cluster_dra.rs`), and a Pod without GPUs
//! when it cannot.

use gpu_admission_core::admission::mutate_pod::triage::{self as decide, Skip};
use gpu_admission_core::pod::gpu_resources::{ClaimTemplates, NoClaimTemplates};
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Content};
use gpu_admission_proto::scorer::v1::GpuVendor;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;

fn fixture(name: &str) -> String {
    let path = gpu_admission_testkit::workspace_root()
        .join("tests/fixtures/dra")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The templates of the fixture directory, by (namespace, name).
fn fixture_templates() -> Vec<ResourceClaimTemplate> {
    let docs = gpu_admission_testkit::corpus::parse_documents(&fixture(
        "resourceclaimtemplate-two-nvidia-gpus.yaml",
    ))
    .unwrap();
    docs.into_iter()
        .map(|d| serde_json::from_value(d).unwrap())
        .collect()
}

#[test]
fn a_pod_claiming_gpus_from_a_template_is_a_gpu_pod() {
    let body = fixture("review-pod-gpu-claim.json");
    let incoming = review::decode(body.as_bytes()).unwrap();
    let Content::Pod(req) = &incoming.content else {
        panic!("the fixture is a Pod review")
    };
    let templates = fixture_templates();
    let lookup = |ns: &str, name: &str| {
        templates
            .iter()
            .find(|t| {
                t.metadata.namespace.as_deref() == Some(ns)
                    && t.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    };
    let policy = PolicySnapshot::default();
    let c = decide::triage_with(req, |_| Some("gold".into()), &policy, &lookup).unwrap();
    assert_eq!(
        (
            c.features.gpu_count,
            c.features.gpu_vendor,
            c.features.gpu_shape.as_str()
        ),
        (2, Some(gpu_admission_policy::Vendor::Nvidia), "dra")
    );
    assert_eq!(c.features.dra_claims, ["gpus"]);
    let (s, _) = decide::score_request(&incoming.uid, &c, &policy);
    assert_eq!((s.gpu_count, s.gpu_vendor), (2, GpuVendor::Nvidia as i32));

    // The template in another namespace is not this Pod's.
    let elsewhere = |_: &str, name: &str| lookup("other", name);
    assert_eq!(
        decide::triage_with(req, |_| Some("gold".into()), &policy, &elsewhere).unwrap_err(),
        Skip::NoGpu
    );
    // Without a readable template the claim is noted but not counted (it could be a NIC).
    let none: &dyn ClaimTemplates = &NoClaimTemplates;
    assert_eq!(
        decide::triage_with(req, |_| Some("gold".into()), &policy, none).unwrap_err(),
        Skip::NoGpu
    );
}
