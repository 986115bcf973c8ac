//! The frontend's request/response behaviour in-process: the axum router with its real handlers and state,
//! a scorer double over loopback gRPC, and AdmissionReviews from the project's fixtures
//! (`tests/fixtures/admissionreviews`) or built here. No TLS and no child process: what needs those
//! (signals, ALPN, certificate reload, body limits at the socket) stays in `admission.rs` and `tls_reload.rs`.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use gpu_admission_core::admission::validate_policy::PolicyConfigMap;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_proto::scorer::v1::GetPolicyResponse;
use gpu_admission_testkit::review::{self as kit_review, Operation};
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::ServiceExt;
use webhook_frontend::admission::Webhooks;
use webhook_frontend::cluster::ClusterFacts;
use webhook_frontend::metrics::Metrics;
use webhook_frontend::policy::PolicyCache;
use webhook_frontend::scorer_client::{ChannelLimits, Scorer};

/// The router over a fresh state: the double's scorer, `policy` already loaded (as if GetPolicy had
/// answered), namespaces `ml` and `ml-research` in gold.
async fn router_with(mode: Mode, policy: GetPolicyResponse) -> (Router, ScorerDouble) {
    let double = ScorerDouble::start(policy.clone(), mode.behaviour())
        .await
        .expect("the scorer double starts");
    let scorer = Scorer::new(
        &double.url(),
        std::time::Duration::from_millis(500),
        std::time::Duration::from_millis(50),
        ChannelLimits::default(),
    )
    .expect("scorer client");
    let cache = Arc::new(PolicyCache::default());
    cache.set(PolicySnapshot::from_response(&policy).expect("the test policy is valid"));
    let tiers = HashMap::from(
        [("ml", "gold"), ("ml-research", "gold")].map(|(ns, t)| (ns.to_string(), t.to_string())),
    );
    let webhooks = Webhooks::new(
        scorer,
        ClusterFacts::Static { tiers },
        cache,
        Arc::new(Metrics::register(&mut Registry::default())),
        PolicyConfigMap::parse("gpu-admission/scorer-policy", "policy.yaml").unwrap(),
    );
    let readiness = Arc::new(webhooks.readiness());
    (
        webhook_frontend::server::router(webhooks, readiness, false),
        double,
    )
}

/// POSTs `body` to `path` and returns the status and the body (JSON when it parses, else a string).
async fn post(router: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

/// POSTs a review and checks the answer by the apiserver's rules (HTTP 200, kind, uid echoed, patch type).
async fn review(
    router: &Router,
    path: &str,
    review: &Value,
) -> (Value, kit_review::AdmissionOutcome) {
    let (status, answer) = post(router, path, serde_json::to_vec(review).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    let outcome = kit_review::check_response(review, &answer).unwrap_or_else(|e| panic!("{e:#}"));
    (answer, outcome)
}

/// What a fixture review must get from `/mutate-pod` with the double answering A100-80GB / gpu-high.
#[derive(Debug, PartialEq)]
enum Expect {
    /// Not ours (another kind, another operation, no GPU): allowed, no patch. A namespace without a tier
    /// label is held to the policy's default tier: placed like any other.
    Unchanged,
    /// Allowed with a patch that places the Pod on A100-80GB at gpu-high.
    Placed,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_review_gets_its_expected_answer() {
    let table: HashMap<&str, Expect> = HashMap::from([
        ("bare-request-ephemeral-container.json", Expect::Unchanged),
        // Namespace `media` has no tier label: held to the default tier.
        ("bare-request-init-container-gpu.json", Expect::Placed),
        (
            "bare-request-replicaset-pod-generate-name.json",
            Expect::Unchanged,
        ),
        ("bare-request-statefulset-create.json", Expect::Unchanged),
        ("v1-deployment-create.json", Expect::Unchanged),
        ("v1-job-create.json", Expect::Unchanged),
        // Namespace `serving` has no tier label: held to the default tier.
        ("v1-pod-create-amd-dry-run.json", Expect::Placed),
        ("v1-pod-create-no-labels.json", Expect::Unchanged),
        ("v1-pod-create-nvidia.json", Expect::Placed),
        ("v1-pod-create-job-member.json", Expect::Placed),
        ("v1-pod-create-training.json", Expect::Placed),
        ("v1-pod-delete.json", Expect::Unchanged),
        ("v1-pod-update-labels.json", Expect::Unchanged),
        // Namespace `vision` has no tier label: held to the default tier.
        ("v1beta1-pod-create.json", Expect::Placed),
    ]);
    let (router, double) = router_with(Mode::Good, policy()).await;
    let reviews = gpu_admission_testkit::corpus::fixtures()
        .admission_reviews()
        .expect("the fixture reviews parse");
    assert_eq!(
        reviews.len(),
        table.len(),
        "every fixture review has an expectation here"
    );
    for fixture in &reviews {
        let expect = table
            .get(fixture.file.as_str())
            .unwrap_or_else(|| panic!("no expectation for {}", fixture.file));
        let (answer, outcome) = review(&router, "/mutate-pod?timeout=10s", &fixture.review).await;
        let response = &answer["response"];
        assert_eq!(response["allowed"], true, "{}: {response}", fixture.file);
        match expect {
            Expect::Unchanged => assert!(
                outcome.patch.is_none(),
                "{}: unexpected patch {}",
                fixture.file,
                outcome.patch_string()
            ),
            Expect::Placed => {
                let object = &fixture.review["request"]["object"];
                let (_, pod) = outcome
                    .apply_pod(object)
                    .unwrap_or_else(|e| panic!("{}: {e:#}", fixture.file));
                let spec = pod.spec.unwrap();
                assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
                assert_eq!(spec.priority, Some(7500), "the policy bucket's value");
                let selector = spec.node_selector.unwrap_or_default();
                let affinity_classes = gpu_admission_testkit::gpu::pinned_classes(
                    &outcome.apply(object).unwrap(),
                    CLASS_KEY,
                );
                assert!(
                    selector.get(CLASS_KEY).map(String::as_str) == Some("A100-80GB")
                        || affinity_classes == ["A100-80GB"],
                    "{}: placed on A100-80GB: {selector:?} {affinity_classes:?}",
                    fixture.file
                );
            }
        }
    }
    let asked = double.requests();
    assert_eq!(
        asked.len(),
        table.values().filter(|e| **e == Expect::Placed).count(),
        "only the placed Pods reach the scorer: {asked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pod_is_mutated_and_a_second_pass_is_a_no_op() {
    let (router, double) = router_with(Mode::Good, policy()).await;
    let pod = gpu_pod("train-1");
    let sent = review_for("admission.k8s.io/v1", "uid-1", "ml", pod.clone());
    let (answer, outcome) = review(&router, "/mutate-pod?timeout=10s", &sent).await;
    assert!(
        answer["response"].get("warnings").is_none(),
        "{answer}: a malformed annotation would be a warning; this Pod has none"
    );
    let (patched, p) = outcome.apply_pod(&pod).expect("the patch applies");
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-high"));
    assert_eq!(spec.priority, Some(7500));
    assert_eq!(
        spec.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    assert_eq!(spec.node_selector.as_ref().unwrap()[CLASS_KEY], "A100-80GB");
    let tolerations = spec.tolerations.as_ref().unwrap();
    let keys: Vec<_> = tolerations.iter().map(|t| t.key.as_deref()).collect();
    assert_eq!(
        keys,
        [Some("dedicated"), Some("nvidia.com/gpu")],
        "the user's toleration kept, the GPU toleration added"
    );
    let ann = p.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann["gpu-admission.io/gpu-class"], "A100-80GB");
    assert_eq!(ann["gpu-admission.io/priority-score"], "75");
    assert_eq!(ann["gpu-admission.io/policy-version"], "test-1");
    assert!(
        time::OffsetDateTime::parse(
            &ann["gpu-admission.io/decided-at"],
            &time::format_description::well_known::Rfc3339
        )
        .is_ok()
    );
    assert_eq!(
        p.metadata.labels.as_ref().unwrap()["gpu-admission.io/job-type"],
        "train-llama"
    );
    assert!(spec.affinity.as_ref().unwrap().pod_anti_affinity.is_some());

    // What the scorer was asked, and with which deadline.
    let asked = double.requests().last().cloned().unwrap();
    assert_eq!(
        (
            asked.namespace.as_str(),
            asked.tier.as_str(),
            asked.job_type.as_str()
        ),
        ("ml", "gold", "train-llama")
    );
    assert_eq!((asked.gpu_count, asked.gpu_memory_gib), (1, Some(40.0)));
    assert!(
        double.streamed_calls() > 0,
        "Score calls travel on a stream"
    );

    // Second pass over the patched Pod: allowed, and the same decision patches nothing.
    let again = review_for("admission.k8s.io/v1", "uid-again", "ml", patched);
    let (_, outcome) = review(&router, "/mutate-pod?timeout=10s", &again).await;
    assert!(outcome.patch.is_none(), "{}", outcome.patch_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_requests_are_allowed_unchanged() {
    let (router, double) = router_with(Mode::Good, policy()).await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}});
    let no_gpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": 1}}}]}});
    for (ns, object) in [("ml", deployment), ("ml", no_gpu)] {
        let sent = review_for("admission.k8s.io/v1", "uid-skip", ns, object.clone());
        let (answer, outcome) = review(&router, "/mutate-pod", &sent).await;
        assert!(
            outcome.patch.is_none() && answer["response"].get("warnings").is_none(),
            "{object}: {answer}"
        );
    }
    let mut update = review_for("admission.k8s.io/v1", "uid-up", "ml", gpu_pod("p"));
    update["request"]["operation"] = json!("UPDATE");
    let (_, outcome) = review(&router, "/mutate-pod", &update).await;
    assert!(outcome.patch.is_none());
    assert!(
        double.requests().is_empty(),
        "skipped requests never reach the scorer"
    );
    // A namespace without a tier label is no reason to skip: held to the default tier, scored.
    let untiered = review_for(
        "admission.k8s.io/v1",
        "uid-untiered",
        "no-tier",
        gpu_pod("p"),
    );
    let (_, outcome) = review(&router, "/mutate-pod", &untiered).await;
    assert!(outcome.patch.is_some());
    assert_eq!(double.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1beta1_review_is_answered_in_kind() {
    let (router, _double) = router_with(Mode::Good, policy()).await;
    let sent = review_for("admission.k8s.io/v1beta1", "uid-beta", "ml", gpu_pod("p"));
    let (answer, outcome) = review(&router, "/mutate-pod", &sent).await;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1beta1");
    outcome.apply_pod(&gpu_pod("p")).expect("the patch applies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_class_answers_pass_through_with_the_uid() {
    let (router, _double) = router_with(Mode::UnknownClass, policy()).await;
    let sent = review_for("admission.k8s.io/v1", "uid-unknown", "ml", gpu_pod("p"));
    let (answer, outcome) = review(&router, "/mutate-pod", &sent).await;
    assert!(outcome.patch.is_none(), "{answer}");
    assert_eq!(answer["response"]["allowed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_bad_requests_on_every_webhook() {
    let (router, _double) = router_with(Mode::Good, policy()).await;
    for path in [
        "/mutate-pod",
        "/validate-pod",
        "/validate-policy",
        "/mutate-pod-checkpoint",
    ] {
        for body in [&b"{not json"[..], b"[]", b"{\"kind\":\"AdmissionReview\"}"] {
            let (status, answer) = post(&router, path, body.to_vec()).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{path} {}: {answer}",
                String::from_utf8_lossy(body)
            );
            assert!(
                answer
                    .as_str()
                    .is_some_and(|m| m.starts_with("bad request")),
                "{path}: a message a user can act on: {answer}"
            );
        }
    }
}

/// gold may use A100-80GB only, capped at gpu-default; Enforce.
fn enforcing_policy() -> GetPolicyResponse {
    let text = common::POLICY_YAML
        .replace(
            "allowedClasses: [A100-80GB, H100-80GB], objective: fastest, priorityWeight: 1.0 }",
            "allowedClasses: [A100-80GB], preferredClass: A100-80GB, objective: fastest, \
             priorityWeight: 1.0, maxPriorityClass: gpu-default }",
        )
        .replace(
            "  buckets:\n",
            "  buckets:\n    - { minScore: 90, name: gpu-ultra, value: 9000, preemptionPolicy: PreemptLowerPriority }\n",
        )
        + "enforcement: { mode: Enforce }\n";
    let p = gpu_admission_policy::parse(&text, "enforcing-policy.yaml")
        .expect("the test policy is valid");
    gpu_admission_policy::wire::get_policy_response(&p)
}

/// A gold Pod pinning H100-80GB, outside its tier, as `username` in `groups`.
fn h100_pin_review(uid: &str, username: &str, groups: &[&str]) -> Value {
    let mut pod = gpu_pod("pin-h100");
    pod["spec"]["nodeSelector"] = json!({CLASS_KEY: "H100-80GB"});
    let mut sent = kit_review::with_uid_and_version(
        kit_review::review_of(&pod, "ml", Operation::Create),
        uid,
        "admission.k8s.io/v1",
    );
    sent["request"]["userInfo"] = json!({"username": username, "groups": groups});
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_pod_denies_out_of_tier_pins_whoever_asks_without_rbac() {
    let (router, double) = router_with(Mode::Good, enforcing_policy()).await;

    let (answer, _) = review(
        &router,
        "/validate-pod",
        &h100_pin_review("uid-alice", "alice", &["system:authenticated"]),
    )
    .await;
    let response = &answer["response"];
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap_or_default();
    for needle in ["outside tier gold", "H100-80GB", "A100-80GB"] {
        assert!(
            message.contains(needle),
            "the message names {needle}: {message}"
        );
    }

    // Only RBAC exempts (`exempt tiers/gold`): with no apiserver to ask, a group's name is no authority.
    let (answer, _) = review(
        &router,
        "/validate-pod",
        &h100_pin_review(
            "uid-admin",
            "bob",
            &["system:authenticated", "gpu-admission:admins"],
        ),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");

    // An in-tier Pod is allowed; an annotation cannot buy an exception.
    let mut forged = h100_pin_review("uid-forged", "alice", &[]);
    forged["request"]["object"]["metadata"]["annotations"]["gpu-admission.io/decided-at"] =
        json!("2026-01-01T00:00:00Z");
    let (answer, _) = review(&router, "/validate-pod", &forged).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");

    // A Pod as /mutate-pod leaves it (bound to a class of the tier) is allowed; the same Pod without the
    // bound (mutation skipped) is not.
    let mut bound = gpu_pod("ok");
    bound["spec"]["nodeSelector"] = json!({CLASS_KEY: "A100-80GB"});
    let in_tier = kit_review::review_of(&bound, "ml", Operation::Create);
    let (answer, _) = review(&router, "/validate-pod", &in_tier).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let unbound = kit_review::review_of(&gpu_pod("unbound"), "ml", Operation::Create);
    let (answer, _) = review(&router, "/validate-pod", &unbound).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("not constrained to the tier's GPU classes"),
        "{message}"
    );
    assert!(
        double.requests().is_empty(),
        "validation is local, it never asks the scorer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_caps_priority_at_the_tier_and_keeps_an_out_of_tier_pin_visible() {
    // The double answers gpu-high (score 75) while gold is capped at gpu-default.
    let (router, _double) = router_with(Mode::Good, enforcing_policy()).await;
    let pod = gpu_pod("capped");
    let sent = review_for("admission.k8s.io/v1", "uid-cap", "ml", pod.clone());
    let (_, outcome) = review(&router, "/mutate-pod", &sent).await;
    let (_, p) = outcome.apply_pod(&pod).expect("the patch applies");
    let spec = p.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpu-default"));
    assert_eq!(spec.priority, Some(1000));
    assert_eq!(spec.node_selector.unwrap()[CLASS_KEY], "A100-80GB");

    // Mutation never rejects: the out-of-tier pin is admitted here, validation answers it.
    let pinned = h100_pin_review("uid-pin", "alice", &[]);
    let (answer, _) = review(&router, "/mutate-pod", &pinned).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
}

#[test]
fn the_policy_snapshot_of_the_tests_is_consistent() {
    // Guards the fixtures above: a typo in a class name would make the tier tests pass for the wrong reason.
    let snapshot =
        PolicySnapshot::from_response(&enforcing_policy()).expect("the test policy is valid");
    for class in ["A100-80GB", "H100-80GB"] {
        assert!(snapshot.class(class).is_some(), "{class} is in the catalog");
    }
    let rules = snapshot.tier_rules("gold", "ml").expect("gold is a tier");
    assert!(rules.allows("A100-80GB") && !rules.allows("H100-80GB"));
}

/// A body over the limit never reaches a webhook's decision: axum answers 413, and the pipeline logs and counts
/// it like any other refusal (it used to pass unseen: the apiserver then fails open).
#[tokio::test]
async fn an_oversized_body_is_refused_and_counted() {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    // Nothing listens there; no request of this test reaches the scorer.
    let scorer = Scorer::new(
        "http://127.0.0.1:9",
        std::time::Duration::from_millis(200),
        std::time::Duration::from_millis(50),
        ChannelLimits::default(),
    )
    .unwrap();
    let webhooks = Webhooks::new(
        scorer,
        ClusterFacts::Static {
            tiers: HashMap::new(),
        },
        Arc::new(PolicyCache::default()),
        metrics,
        PolicyConfigMap::parse("gpu-admission/scorer-policy", "policy.yaml").unwrap(),
    );
    let readiness = Arc::new(webhooks.readiness());
    let router = webhook_frontend::server::router(webhooks, readiness, false);
    let huge = vec![b' '; 24 * 1024 * 1024 + 1];
    for path in ["/mutate-pod", "/validate-pod"] {
        let (status, _) = post(&router, path, huge.clone()).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
    // Every webhook in the one family, and a body that is no review counted there too.
    for path in [
        "/validate-namespace",
        "/validate-policy",
        "/mutate-pod-checkpoint",
    ] {
        let (status, _) = post(&router, path, b"{".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"gpu_admission_admissions_total{webhook="mutate-pod",operation="unknown",outcome="body_too_large"} 1"#,
        r#"gpu_admission_admissions_total{webhook="validate-pod",operation="unknown",outcome="body_too_large"} 1"#,
        r#"gpu_admission_admissions_total{webhook="validate-namespace",operation="unknown",outcome="bad_request"} 1"#,
        r#"gpu_admission_admissions_total{webhook="validate-policy",operation="unknown",outcome="bad_request"} 1"#,
        r#"gpu_admission_admissions_total{webhook="mutate-pod-checkpoint",operation="unknown",outcome="bad_request"} 1"#,
        r#"gpu_admission_admission_duration_seconds_count{webhook="validate-pod"} 1"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}
