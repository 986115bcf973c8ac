//! DRA live (`resource.k8s.io/v1`): the real scheduler allocates devices from ResourceSlices the test
//! publishes for kwok's fake Nodes (one Node per class: H100-80GB, A100-80GB and L4-24GB, two devices each
//! with their product name and memory, as NVIDIA's DRA driver describes them), the DeviceClass
//! `gpu.nvidia.com` the default policy counts as GPUs, and the real webhook frontend deciding Pods whose only
//! GPU comes from a ResourceClaimTemplate.
//!
//! - a gold Pod claiming one GPU through a template is a GPU Pod: decided, pinned to a class of gold, and the
//!   scheduler allocates it a device of the slice of the Node it binds, a Node of the decided class;
//! - a bronze Pod claiming one GPU the same way, while every device of every class is free (the claim alone
//!   could be given an H100), is allocated an L4 device: the tier holds on the allocation the scheduler
//!   makes, not only on the webhook's answer;
//! - a bronze Pod whose claim selects H100 devices by CEL is admitted (the frontend reads device classes,
//!   not selectors), pinned to L4, and left unschedulable by the scheduler: never allocated an H100.

use std::time::{Duration, Instant};

use gpu_admission_proto::scorer::v1::GetPolicyResponse;
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok::{self, phase, wait_for};
use gpu_admission_tests::names::{ANN_DECIDED_AT, ANN_GPU_CLASS, CLASS_LABEL};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const GOLD: &str = "dra-gold";
const BRONZE: &str = "dra-bronze";
const DRIVER: &str = "gpu.nvidia.com";

/// The classes with devices here: (catalog class, product name, memory).
const CLASSES: [(&str, &str, &str); 3] = [
    ("H100-80GB", "NVIDIA H100 80GB HBM3", "80Gi"),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", "80Gi"),
    ("L4-24GB", "NVIDIA L4", "24Gi"),
];

fn dra(client: &kube::Client, kind: &str, plural: &str) -> (kube::Client, ApiResource) {
    let gvk = GroupVersionKind::gvk("resource.k8s.io", "v1", kind);
    (
        client.clone(),
        ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

async fn create_dra(client: &kube::Client, ns: Option<&str>, kind: &str, plural: &str, obj: Value) {
    let (c, ar) = dra(client, kind, plural);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(c, ns, &ar),
        None => Api::all_with(c, &ar),
    };
    api.create(
        &PostParams::default(),
        &serde_json::from_value(obj.clone()).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("create {kind}: {e}\n{obj}"));
}

fn node_name(class: &str) -> String {
    format!("dra-{}", class.to_ascii_lowercase())
}

/// The slice NVIDIA's DRA driver would publish for a Node: one pool, two GPUs.
fn slice(class: &str, product: &str, memory: &str) -> Value {
    let node = node_name(class);
    let devices: Vec<Value> = (0..2)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
            "attributes": {"productName": {"string": product}, "index": {"int": i}},
            "capacity": {"memory": {"value": memory}}})
        })
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": format!("{node}-gpus")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

fn claim_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"app.kubernetes.io/job-type": "inference-llm"}},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [{"name": "main", "image": "registry.example/llm:1",
                "resources": {"claims": [{"name": "gpu"}]}}]}})
}

/// Creates the Pod and waits until it runs; returns (decided class, Node's class, allocated devices).
async fn run_claim_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> (String, String, Vec<Value>) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(claim_pod(name)).unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let ann = created.metadata.annotations.clone().unwrap_or_default();
    assert!(
        ann.contains_key(ANN_DECIDED_AT),
        "{ns}/{name} not decided as a GPU Pod: {ann:?}"
    );
    wait_for(
        &format!("{ns}/{name} running"),
        Duration::from_secs(60),
        || async { Ok(phase(&pods.get(name).await?) == "Running") },
    )
    .await
    .unwrap();
    let pod = pods.get(name).await.unwrap();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let node = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let node_class = node.metadata.labels.unwrap_or_default()[CLASS_LABEL].clone();
    // The claim the template made for this Pod, and what the scheduler allocated it.
    let claim_name = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.resource_claim_name.clone())
        .expect("the Pod's claim is named in its status");
    let (c, ar) = dra(client, "ResourceClaim", "resourceclaims");
    let claim = Api::<DynamicObject>::namespaced_with(c, ns, &ar)
        .get(&claim_name)
        .await
        .unwrap();
    let results = claim.data["status"]["allocation"]["devices"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (
        ann.get(ANN_GPU_CLASS).cloned().unwrap_or_default(),
        node_class,
        results,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_allocated_on_nodes_of_the_decided_class_of_their_tier() {
    let t0 = Instant::now();
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("control plane")
    else {
        return;
    };
    let client = cluster.client();
    let scorer = Scorer::builder().start().await.expect("scorer");
    let policy = scorer.policy().clone();
    cluster.create_namespace(GOLD, Some("gold")).await.unwrap();
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    cluster.create_priority_classes(&policy).await.unwrap();

    publish_gpus(&client, &policy).await;

    let webhook = Webhook::builder(&scorer.url())
        .kubeconfig(cluster.kubeconfig())
        .start()
        .await
        .expect("webhook");
    cluster
        .register_webhook(
            "gpu-admission-dra",
            &webhook.mutate_url(),
            &webhook.ca_pem().unwrap(),
        )
        .await
        .unwrap();
    // The frontend reads templates from its watch cache: wait until it has them (a decided probe Pod).
    let probe = Api::<Pod>::namespaced(client.clone(), GOLD);
    let mut n = 0;
    wait_for(
        "the frontend sees the templates",
        Duration::from_secs(30),
        || {
            n += 1;
            let (probe, name) = (probe.clone(), format!("probe-{n}"));
            async move {
                let mut p = claim_pod(&name);
                p["spec"]["schedulingGates"] = json!([{"name": "example.com/hold"}]);
                let p = probe
                    .create(&PostParams::default(), &serde_json::from_value(p)?)
                    .await?;
                Ok(p.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key(ANN_DECIDED_AT))
            }
        },
    )
    .await
    .unwrap();

    for (ns, name, tier) in [(GOLD, "llm-gold", "gold"), (BRONZE, "llm-bronze", "bronze")] {
        let (decided, node_class, results) = run_claim_pod(&client, ns, name).await;
        println!(
            "{ns}/{name}: decided {decided}, ran on a {node_class} Node, allocated {results:?}"
        );
        assert_eq!(
            decided, node_class,
            "{tier}: the scheduler placed the claim on the decided class"
        );
        let allowed: Vec<&str> = policy
            .tiers
            .iter()
            .find(|t| t.name == tier)
            .map(|t| t.allowed_classes.iter().map(String::as_str).collect())
            .unwrap_or_default();
        assert!(
            allowed.contains(&node_class.as_str()),
            "{tier} allows {allowed:?}, ran on {node_class}"
        );
        assert_eq!(results.len(), 1, "one device allocated: {results:?}");
        assert_eq!(results[0]["driver"], DRIVER);
        assert_eq!(
            results[0]["pool"],
            node_name(&node_class),
            "the device comes from that Node's slice"
        );
    }

    h100_by_cel_is_never_allocated(&client).await;
    println!(
        "DRA: 2 claims allocated on their tier's classes, the bronze H100 claim left unschedulable, in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// One kwok Node per class of [`CLASSES`] (no extended resource: their GPUs are DRA devices only), their
/// ResourceSlices, the DeviceClass and a one-GPU ResourceClaimTemplate in each namespace.
async fn publish_gpus(client: &kube::Client, policy: &GetPolicyResponse) {
    let nodes: Vec<Value> = CLASSES
        .iter()
        .map(|(name, _, _)| {
            let class = policy
                .catalog
                .iter()
                .find(|c| c.name == *name)
                .expect("catalog class");
            // No extended resource: these Nodes' GPUs are DRA devices only.
            kwok::gpu_node(&node_name(name), class, "example.com/none", 0)
        })
        .collect();
    kwok::create_ready_nodes(client, &nodes).await.unwrap();
    create_dra(
        client,
        None,
        "DeviceClass",
        "deviceclasses",
        json!({"apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass", "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}}),
    )
    .await;
    for (class, product, memory) in CLASSES {
        create_dra(
            client,
            None,
            "ResourceSlice",
            "resourceslices",
            slice(class, product, memory),
        )
        .await;
    }
    for ns in [GOLD, BRONZE] {
        create_dra(client, Some(ns), "ResourceClaimTemplate", "resourceclaimtemplates", json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
                "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]}}}})).await;
    }
}

/// A bronze claim selecting H100 devices by CEL: admitted today (the frontend reads device classes, not
/// selectors), decided and pinned to L4, so the scheduler finds no device that satisfies both and leaves it
/// unscheduled: it is never allocated an H100.
async fn h100_by_cel_is_never_allocated(client: &kube::Client) {
    // A bronze claim selecting H100 devices by CEL: admitted today (the frontend reads device classes, not
    // selectors), decided and pinned to L4, so the scheduler finds no device that satisfies both and
    // leaves it unscheduled: it is never allocated an H100.
    create_dra(client, Some(BRONZE), "ResourceClaimTemplate", "resourceclaimtemplates", json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "h100-by-cel"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER,
            "selectors": [{"cel": {"expression":
                format!("device.attributes['{DRIVER}'].productName == 'NVIDIA H100 80GB HBM3'")}}]}}]}}}})).await;
    let mut pod = claim_pod("h100-bronze");
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = json!("h100-by-cel");
    let pods = Api::<Pod>::namespaced(client.clone(), BRONZE);
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    let ann = created.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get(ANN_GPU_CLASS).map(String::as_str),
        Some("L4-24GB"),
        "{ann:?}"
    );
    wait_for(
        "the scheduler gives up on the H100 claim",
        Duration::from_secs(60),
        || async {
            let p = pods.get("h100-bronze").await?;
            let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
            Ok(conds.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            }))
        },
    )
    .await
    .unwrap();
    let p = pods.get("h100-bronze").await.unwrap();
    assert!(p.spec.and_then(|s| s.node_name).is_none(), "never bound");
}
