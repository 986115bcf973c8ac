//! Fail-open without a cluster: whatever happens to the scorer (killed, hung by SIGSTOP, a proxy answering
//! garbage or hanging, a gRPC server answering nonsense, never there at all), every GPU Pod is allowed with
//! a warning, well inside the apiserver's timeout: bound to its tier's classes with no priority (the tier
//! fallback, `TierDefault`, which a tier that restricts classes always gets once the policy is known), or
//! unchanged while no policy was ever known; and decisions resume once the scorer is back. Faults are made
//! outside the product, at the process boundary.

use std::time::Duration;

use gpu_admission_tests::AdmissionOutcome;
use gpu_admission_tests::faults::{FaultProxy, Nonsense, NonsenseScorer, ProxyMode};
use gpu_admission_tests::{Scorer, Webhook};
use serde_json::{Value, json};

const GOLD: &str = "faults-gold";
/// The registration's `timeoutSeconds` is 5; a pass-through must come well before.
const WELL_INSIDE: Duration = Duration::from_secs(2);

fn gpu_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "annotations": {"app.kubernetes.io/job-type": "train-bert", "gpu.mem.gi": "16"}},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "tolerations": [{"key": "spot", "operator": "Exists"}]}})
}

async fn webhook_for(url: &str) -> Webhook {
    Webhook::builder(url)
        .no_kube()
        .namespace_tier(GOLD, "gold")
        .start()
        .await
        .expect("webhook starts")
}

async fn admit(webhook: &Webhook, name: &str) -> AdmissionOutcome {
    webhook
        .admit_pod(&gpu_pod(name), GOLD)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

/// Allowed with a warning, in time, and either unchanged (no policy known yet) or bound to the gold tier's
/// classes by the fallback: no score, no priority.
fn assert_passed_through(o: &AdmissionOutcome, what: &str) {
    assert!(o.allowed, "{what}: denied: {}", o.raw);
    assert!(
        !o.warnings.is_empty(),
        "{what}: a pass-through must carry a warning: {}",
        o.raw
    );
    assert!(o.elapsed < WELL_INSIDE, "{what}: took {:?}", o.elapsed);
    if o.patch.is_some() {
        let patch = o.patch_string();
        assert!(
            patch.contains(r#""value":"tier-default""#),
            "{what}: {patch}"
        );
        assert!(!patch.contains("priorityClassName"), "{what}: {patch}");
        assert!(!patch.contains("priority-score"), "{what}: {patch}");
        assert!(
            patch.contains(r#""values":["H100-80GB","MI300X-192GB","A100-80GB","A100-40GB","L40S-48GB","L4-24GB"]"#),
            "{what}: bound to the gold classes: {patch}"
        );
    }
    println!(
        "{what}: fell back in {:?} (patched: {}), warnings {:?}",
        o.elapsed,
        o.patch.is_some(),
        o.warnings
    );
}

fn assert_mutated(o: &AdmissionOutcome, what: &str) {
    assert!(
        o.allowed && o.patch.is_some(),
        "{what}: expected a mutation: {}",
        o.raw
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scorer_killed_and_hung() {
    let mut scorer = Scorer::builder().start().await.expect("scorer starts");
    let webhook = webhook_for(&scorer.url()).await;
    assert_mutated(&admit(&webhook, "healthy").await, "healthy scorer");

    // Hung: SIGSTOP keeps the socket open, answers nothing.
    scorer.process.pause().unwrap();
    for i in 0..3 {
        assert_passed_through(
            &admit(&webhook, &format!("hung-{i}")).await,
            "scorer hung (SIGSTOP)",
        );
    }
    scorer.process.resume().unwrap();
    let mut recovered = false;
    for _ in 0..50 {
        if admit(&webhook, "resumed").await.patch.is_some() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "decisions did not resume after SIGCONT");

    // Killed.
    scorer.process.kill();
    for i in 0..3 {
        assert_passed_through(
            &admit(&webhook, &format!("killed-{i}")).await,
            "scorer killed",
        );
    }
    assert_eq!(
        webhook.https().get("/readyz").await.unwrap().status,
        200,
        "readiness is not tied to the scorer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scorer_behind_a_faulty_proxy() {
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    let proxy = FaultProxy::start(scorer.addr()).await.unwrap();
    let webhook = webhook_for(&proxy.url()).await;
    assert_mutated(&admit(&webhook, "forward").await, "through the proxy");

    for mode in [ProxyMode::Garbage, ProxyMode::Hang, ProxyMode::Reset] {
        proxy.set_mode(mode);
        for i in 0..2 {
            assert_passed_through(
                &admit(&webhook, &format!("proxy-{i}")).await,
                &format!("proxy {mode:?}"),
            );
        }
        proxy.set_mode(ProxyMode::Forward);
        let mut recovered = false;
        for _ in 0..50 {
            if admit(&webhook, "again").await.patch.is_some() {
                recovered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            recovered,
            "decisions did not resume after proxy mode {mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scorer_answering_nonsense() {
    let real = Scorer::builder().start().await.expect("scorer starts");
    for kind in [
        Nonsense::UnknownClass,
        Nonsense::ScoreOutOfRange,
        Nonsense::NotANumber,
    ] {
        let fake = NonsenseScorer::start(kind, real.policy_response().clone())
            .await
            .unwrap();
        // Steady state: `start` waits until the webhook has the policy it judges answers against.
        let webhook = webhook_for(&fake.url()).await;
        assert_passed_through(
            &admit(&webhook, "nonsense").await,
            &format!("nonsense answer {kind:?}"),
        );
        assert!(
            fake.score_calls() > 0,
            "{kind:?}: the webhook never called Score"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scorer_never_there() {
    // A port that was free a moment ago: nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let webhook = Webhook::builder(&format!("http://127.0.0.1:{port}"))
        .wait_policy(false)
        .no_kube()
        .namespace_tier(GOLD, "gold")
        .deadline_ms(100)
        .start()
        .await
        .expect("the webhook starts and is ready without a scorer");
    for i in 0..3 {
        assert_passed_through(
            &admit(&webhook, &format!("never-{i}")).await,
            "scorer never started",
        );
    }
}

/// The first requests after a start, while the scorer's GetPolicy is still in flight, are judged too: the
/// frontend holds its own policy from the start (the file, read before it listens), so a class the policy
/// does not have never reaches a Pod (it would be pinned to nodes that do not exist); the answer is refused
/// as invalid and the tier's fallback decides, within the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_class_before_the_scorer_answers_get_policy() {
    let real = Scorer::builder().start().await.expect("scorer starts");
    let fake = NonsenseScorer::start_with_policy_delay(
        Nonsense::UnknownClass,
        real.policy_response().clone(),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    let policy = tempfile::tempdir().unwrap();
    let file = policy.path().join("policy.yaml");
    std::fs::write(&file, &real.policy_response().document).unwrap();
    let webhook = Webhook::builder(&fake.url())
        .policy_file(&file)
        .no_kube()
        .namespace_tier(GOLD, "gold")
        .start()
        .await
        .expect("webhook starts, ready without the scorer's policy");
    let o = admit(&webhook, "early").await;
    assert_passed_through(&o, "an answer naming an unknown class");
    assert!(
        !o.patch_string().contains("NO-SUCH-GPU-9000"),
        "an unknown GPU class reached the Pod: {}",
        o.patch_string()
    );
}

/// The apiserver's `?timeout=` caps the scorer budget: with a 3 s budget, a hung scorer and `timeout=1s`
/// the answer (a pass-through) must come before the apiserver gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_timeout_parameter_caps_the_budget() {
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier(GOLD, "gold")
        .deadline_ms(3000)
        .start()
        .await
        .expect("webhook starts");
    assert_mutated(&admit(&webhook, "warm").await, "healthy scorer");
    scorer.process.pause().unwrap();
    let review = gpu_admission_tests::review::pod_review(
        &gpu_pod("timeout-param"),
        GOLD,
        gpu_admission_tests::Operation::Create,
    );
    let started = std::time::Instant::now();
    let resp = webhook
        .https()
        .post_json("/mutate-pod?timeout=1s", &review)
        .await
        .expect("answered");
    let took = started.elapsed();
    scorer.process.resume().unwrap();
    assert_eq!(resp.status, 200);
    let mut o =
        gpu_admission_tests::review::check_response(&review, &resp.json().unwrap()).unwrap();
    o.elapsed = took.min(WELL_INSIDE - Duration::from_millis(1));
    assert_passed_through(&o, "timeout=1s");
    // The webhook aims at timeout minus its margin (50 ms by default) from the request's arrival; this
    // client also counts the TCP+TLS set-up, so allow some slack, still far below the 3 s budget.
    assert!(
        took < Duration::from_millis(1500),
        "timeout=1s answered after {took:?}"
    );
    println!("timeout=1s with a 3 s budget and a hung scorer: answered in {took:?}");
}
