//! The hostile inputs of `fuzz/seeds/mutate_pod/` sent over HTTPS to the real webhook, in front of the real
//! scorer, each with the answer it must get: a malformed uid is a 400 that says why; a 300-byte tenant is
//! decided (the scorer would refuse it as it is) with a warning, never passed through; `null` where the patch
//! adds members and deep nesting in `request.options` still give a patch that applies and a Pod.

use std::path::PathBuf;

use gpu_admission_tests::review::check_response;
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn seed(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/mutate_pod")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn post(webhook: &Webhook, body: Vec<u8>) -> (u16, Vec<u8>) {
    let r = webhook
        .https()
        .post("/mutate-pod", "application/json", body.into())
        .await
        .unwrap();
    (r.status.as_u16(), r.body.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_input_gets_its_answer() {
    let scorer = Scorer::builder().start().await.expect("scorer starts");
    let webhook = Webhook::builder(&scorer.url())
        .no_kube()
        .namespace_tier("gold", "gold")
        .start()
        .await
        .expect("webhook starts");

    for (name, why) in [
        ("uid-empty.json", "request.uid is empty"),
        (
            "uid-300-bytes.json",
            "request.uid is 300 bytes long; at most 128",
        ),
    ] {
        let (status, body) = post(&webhook, seed(name)).await;
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, 400, "{name}: {body}");
        assert!(body.contains(why), "{name}: {body}");
    }

    // Mutated, and the patch applies to the object sent and gives a Pod.
    let decided = |name: &str, sent: &Value, got: &[u8]| {
        let got: Value = serde_json::from_slice(got).unwrap();
        let outcome = check_response(sent, &got).unwrap();
        assert!(outcome.allowed && outcome.patch.is_some(), "{name}: {got}");
        let object = &sent["request"]["object"];
        if !object.is_null() {
            let (_, pod): (Value, Pod) = outcome
                .apply_pod(object)
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let annotations = pod.metadata.annotations.unwrap_or_default();
            assert!(
                annotations.contains_key("gpu-admission.io/decided-at"),
                "{name}: {annotations:?}"
            );
        }
        outcome
    };

    let body = seed("tenant-300-bytes.json");
    let sent: Value = serde_json::from_slice(&body).unwrap();
    let (status, got) = post(&webhook, body).await;
    assert_eq!(status, 200);
    let outcome = decided("tenant-300-bytes.json", &sent, &got);
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.contains("tenant is 300 bytes long; at most 253")),
        "{:?}",
        outcome.warnings
    );
    assert!(
        !outcome
            .warnings
            .iter()
            .any(|w| w.contains("scorer") && w.contains("unchanged")),
        "not a pass-through: {:?}",
        outcome.warnings
    );

    for name in [
        "metadata-null.json",
        "metadata-missing.json",
        "annotations-null.json",
        "affinity-null.json",
        "node-affinity-null.json",
        "selector-terms-null.json",
    ] {
        let body = seed(name);
        let sent: Value = serde_json::from_slice(&body).unwrap();
        let (status, got) = post(&webhook, body).await;
        assert_eq!(status, 200, "{name}");
        decided(name, &sent, &got);
    }

    // 5,000 levels of nesting in request.options: too deep for a serde_json Value (so the test reads only the
    // uid of what it sent), answered like any Pod.
    let body = seed("options-deep.json");
    assert!(serde_json::from_slice::<Value>(&body).is_err());
    let (status, got) = post(&webhook, body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    let sent = json!({"apiVersion": "admission.k8s.io/v1",
                      "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "object": null}});
    decided("options-deep.json", &sent, &got);

    let metrics = webhook.metrics().await.unwrap();
    let passed_through = metrics
        .lines()
        .filter(|l| l.contains("passed_through") && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(passed_through, 0.0, "{metrics}");
}
