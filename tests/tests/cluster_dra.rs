//! DRA live (`resource.k8s.io/v1`): the real scheduler allocates devices from ResourceSlices the test
//! publishes for kwok's fake Nodes (one Node per class: H100-80GB, A100-80GB and L4-24GB, two GPUs each
//! with their product name and memory as NVIDIA's DRA driver describes them, and on the H100 Node a MIG
//! partition as a device of its own), the vendor DeviceClasses `gpu.nvidia.com` / `mig.nvidia.com`, the
//! catalog's DeviceClasses rendered by `gpu_admission_core::render::device_classes` (`<class>.gpu-admission.io`),
//! and the real webhook frontend (policy in `Enforce`) mutating Pods and validating claims and templates, as
//! a plain tenant creates them (the cluster admin may run outside a tier):
//!
//! - a gold Pod claiming one GPU through a template of `h100-80gb.gpu-admission.io` (and naming no class
//!   itself) is decided among H100 nodes only, and the scheduler allocates it a device of the H100 Node's
//!   slice and binds it there;
//! - a bronze Pod claiming one GPU through a template of `l4-24gb.gpu-admission.io` runs on L4, its device
//!   from the L4 slice;
//! - a bronze template or claim that could be allocated H100 devices (the vendor class without selectors,
//!   the H100 class, an H100 MIG partition by product name) is denied naming bronze's classes and
//!   DeviceClasses; a claim whose CEL the frontend cannot decide is denied;
//! - a bronze claim on the vendor class pinned by product name to `NVIDIA L4` is admitted, and the device
//!   the scheduler allocates it (for a Pod naming the claim) comes from the L4 Node's pool: the tier holds
//!   on the allocation, not only on the webhook's answer;
//! - a gold claim of allocation mode `All` on the A100 class is allocated both A100 devices, and gold's
//!   quota usage counts 8 A100 GPUs: what `All` may be allocated on one Node of the class (its
//!   `gpusPerNode`), not the 1 the spec asks for nor only what this Node happened to have.
//! - where the apiserver serves PodGroups (`scheduling.k8s.io/v1beta1`: the harness's `workload-api`, 1.37+),
//!   a gold Pod of a PodGroup sharing the group's claim entry is decided by the claim the ResourceClaim
//!   controller made for the group (H100), after the template it names was replaced by one asking no GPU.

use std::time::{Duration, Instant};

use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_tests::cluster::{Components, LocalCluster};
use gpu_admission_tests::kwok::{self, phase, wait_for};
use gpu_admission_tests::names::{ANN_DECIDED_AT, ANN_GPU_CLASS, CLASS_LABEL};
use gpu_admission_tests::{Scorer, Webhook};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const GOLD: &str = "dra-gold";
const BRONZE: &str = "dra-bronze";
const DRIVER: &str = "gpu.nvidia.com";
const USER: &str = "dra-tenant";
const PRODUCT: &str = "device.attributes['gpu.nvidia.com'].productName";

/// The classes with devices here: (catalog class, product name, memory).
const CLASSES: [(&str, &str, &str); 3] = [
    ("H100-80GB", "NVIDIA H100 80GB HBM3", "80Gi"),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", "80Gi"),
    ("L4-24GB", "NVIDIA L4", "24Gi"),
];

fn dra(kind: &str, plural: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("resource.k8s.io", "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

fn dra_api(client: &kube::Client, ns: Option<&str>, kind: &str) -> Api<DynamicObject> {
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    let ar = dra(kind, &plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// Creates a DRA object; `Err` with the apiserver's message when it refuses.
async fn try_create(
    client: &kube::Client,
    ns: Option<&str>,
    obj: &Value,
) -> Result<DynamicObject, String> {
    let kind = obj["kind"].as_str().unwrap();
    dra_api(client, ns, kind)
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj.clone()).unwrap(),
        )
        .await
        .map_err(|e| e.to_string())
}

async fn create_dra(client: &kube::Client, ns: Option<&str>, obj: Value) {
    if let Err(e) = try_create(client, ns, &obj).await {
        panic!("create {}: {e}\n{obj}", obj["kind"]);
    }
}

fn node_name(class: &str) -> String {
    format!("dra-{}", class.to_ascii_lowercase())
}

/// The slice NVIDIA's DRA driver would publish for a Node: one pool, two GPUs (and on H100 a MIG partition).
fn slice(class: &str, product: &str, memory: &str) -> Value {
    let node = node_name(class);
    let mut devices: Vec<Value> = (0..2)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
            "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}, "index": {"int": i}},
            "capacity": {"memory": {"value": memory}}})
        })
        .collect();
    if class == "H100-80GB" {
        devices.push(json!({"name": "gpu-2-mig-1g-10gb-0",
            "attributes": {"productName": {"string": product}, "type": {"string": "mig"},
                "profile": {"string": "1g.10gb"}},
            "capacity": {"memory": {"value": "10Gi"}}}));
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": format!("{node}-gpus")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

fn claim_spec(class: &str, cels: &[String]) -> Value {
    let selectors: Vec<Value> = cels
        .iter()
        .map(|c| json!({"cel": {"expression": c}}))
        .collect();
    json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class,
        "allocationMode": "ExactCount", "count": 1, "selectors": selectors}}]}})
}

fn template(name: &str, class: &str, cels: &[String]) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": claim_spec(class, cels)}})
}

fn claim(name: &str, class: &str, cels: &[String]) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": claim_spec(class, cels)})
}

/// A Pod whose only GPU is the claim `source` (`resourceClaimTemplateName` or `resourceClaimName`).
fn claim_pod(name: &str, source: Value) -> Value {
    let mut claim = json!({"name": "gpu"});
    claim
        .as_object_mut()
        .unwrap()
        .extend(source.as_object().unwrap().clone());
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {"app.kubernetes.io/job-type": "inference-llm"}},
        "spec": {"resourceClaims": [claim],
            "containers": [{"name": "main", "image": "registry.example/llm:1",
                "resources": {"claims": [{"name": "gpu"}]}}]}})
}

/// What a Pod got: (decided class, the class of the Node it runs on, the allocated devices).
struct Ran {
    decided: String,
    node_class: String,
    results: Vec<Value>,
}

/// Creates the Pod as the tenant and waits until it runs; what it was decided and allocated.
async fn run_claim_pod(client: &kube::Client, tenant: &kube::Client, ns: &str, pod: Value) -> Ran {
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let pods = Api::<Pod>::namespaced(tenant.clone(), ns);
    // Until the frontend's caches hold a template or claim made just before, the Pod's claim is unresolved
    // (held to its tier, not decided): dry runs until it is decided.
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        &format!("{ns}/{name}: the frontend reads its claim"),
        Duration::from_secs(20),
        || async {
            let tried = pods.create(&dry, &typed).await?;
            let ann = tried.metadata.annotations.unwrap_or_default();
            Ok(ann.contains_key(ANN_DECIDED_AT))
        },
    )
    .await
    .unwrap();
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("{ns}/{name}: {e}"));
    let ann = created.metadata.annotations.clone().unwrap_or_default();
    assert!(
        ann.contains_key(ANN_DECIDED_AT),
        "{ns}/{name} not decided as a GPU Pod: {ann:?}"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    wait_for(
        &format!("{ns}/{name} running"),
        Duration::from_secs(60),
        || async { Ok(phase(&pods.get(&name).await?) == "Running") },
    )
    .await
    .unwrap();
    let pod = pods.get(&name).await.unwrap();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let node = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    let node_class = node.metadata.labels.unwrap_or_default()[CLASS_LABEL].clone();
    // The claim the Pod uses (made from its template, or named), and what the scheduler allocated it.
    let claim_name = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.resource_claim_name.clone())
        .or_else(|| {
            pod.spec.as_ref().and_then(|s| {
                s.resource_claims
                    .as_ref()?
                    .first()?
                    .resource_claim_name
                    .clone()
            })
        })
        .expect("the Pod's claim is named");
    let claim = dra_api(client, Some(ns), "ResourceClaim")
        .get(&claim_name)
        .await
        .unwrap();
    let results = claim.data["status"]["allocation"]["devices"]["results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ran {
        decided: ann.get(ANN_GPU_CLASS).cloned().unwrap_or_default(),
        node_class,
        results,
    }
}

/// Waits until a Pod claiming `source` is decided as a GPU Pod (gated probes, never scheduled): the
/// frontend's caches hold what the claim names.
async fn wait_decided(tenant: &kube::Client, ns: &str, source: Value) {
    let probe = Api::<Pod>::namespaced(tenant.clone(), ns);
    let mut n = 0;
    wait_for(
        &format!("the frontend sees {source} in {ns}"),
        Duration::from_secs(30),
        || {
            n += 1;
            let (probe, name, source) = (probe.clone(), format!("probe-{n}"), source.clone());
            async move {
                let mut p = claim_pod(&name, source);
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
}

fn allowed_classes(policy: &PolicySnapshot, tier: &str) -> Vec<String> {
    (policy.tiers().iter())
        .find(|t| t.name == tier)
        .map(|t| {
            (policy.catalog().iter().zip(&t.allowed))
                .filter(|(_, allowed)| **allowed)
                .map(|(c, _)| c.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The tier holds on the scheduler's allocation: one device, of the driver, from the pool of a Node of the
/// class the Pod runs on, a class of the tier.
fn assert_in_tier(what: &str, ran: &Ran, allowed: &[String]) {
    println!(
        "{what}: decided {}, ran on a {} Node, allocated {:?}",
        ran.decided, ran.node_class, ran.results
    );
    assert!(
        allowed.contains(&ran.node_class),
        "{what}: the tier allows {allowed:?}, ran on {}",
        ran.node_class
    );
    assert_eq!(
        ran.results.len(),
        1,
        "{what}: one device: {:?}",
        ran.results
    );
    assert_eq!(ran.results[0]["driver"], DRIVER);
    assert_eq!(
        ran.results[0]["pool"],
        node_name(&ran.node_class),
        "{what}: the device comes from that Node's slice"
    );
}

fn validating_configuration(webhook: &Webhook) -> ValidatingWebhookConfiguration {
    let base = webhook.mutate_url().replace("/mutate-pod", "");
    let ca = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        webhook.ca_pem().unwrap(),
    );
    // As shipped (deploy/kustomize: claims.validate.gpu-admission.io and pods.validate.gpu-admission.io),
    // here for the test's namespaces.
    let hook = |name: &str, group: &str, resources: Value| {
        json!({"name": name, "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("{base}/validate-pod"), "caBundle": ca},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": resources, "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{"key": "tenant.kubenexus.io/tier", "operator": "Exists"}]},
            "matchPolicy": "Equivalent", "failurePolicy": "Ignore", "sideEffects": "None", "timeoutSeconds": 5})
    };
    serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gpu-admission-dra"},
        "webhooks": [
            hook("claims.validate.gpu-admission.io", "resource.k8s.io", json!(["resourceclaims", "resourceclaimtemplates"])),
            hook("pods.validate.gpu-admission.io", "", json!(["pods"])),
        ]
    }))
    .unwrap()
}

/// A client acting as the plain tenant `USER` (impersonated by the admin kubeconfig).
async fn tenant_client(cluster: &LocalCluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.auth_info.impersonate = Some(USER.to_string());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_held_to_their_tier_by_the_webhook_and_on_the_allocation() {
    let t0 = Instant::now();
    let components = Components {
        workload_api: true,
        ..Components::ALL
    };
    let Some(cluster) = LocalCluster::start_with(components)
        .await
        .expect("control plane")
    else {
        return;
    };
    let client = cluster.client();
    let policy_dir = tempfile::tempdir().unwrap();
    let policy_file = policy_dir.path().join("policy.yaml");
    // Gold's quota is there to be counted (never reached): what the scheduler allocates counts.
    let text = format!(
        "{}\nquotas:\n  tiers:\n    - tier: gold\n      classes: {{ A100-80GB: {{ min: 0, max: 16 }} }}\n",
        gpu_admission_policy::DEFAULT_POLICY_YAML.replace("mode: Warn", "mode: Enforce")
    );
    assert_ne!(text, gpu_admission_policy::DEFAULT_POLICY_YAML);
    std::fs::write(&policy_file, &text).unwrap();
    let parsed = gpu_admission_policy::parse(&text, "policy.yaml").unwrap();
    let scorer = Scorer::builder()
        .policy(&policy_file)
        .start()
        .await
        .expect("scorer");
    let policy = scorer.policy().clone();
    cluster.create_namespace(GOLD, Some("gold")).await.unwrap();
    cluster
        .create_namespace(BRONZE, Some("bronze"))
        .await
        .unwrap();
    cluster.create_priority_classes(&policy).await.unwrap();
    cluster.bind_tenant(USER).await.unwrap();
    let tenant = tenant_client(&cluster).await;

    publish_gpus(&client, &policy, &parsed).await;

    let webhook = Webhook::builder(&scorer.url())
        .policy_file(&policy_file)
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
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating_configuration(&webhook))
        .await
        .unwrap();

    // Until the apiserver calls the new configuration, a claim it should deny gets in: wait for the denial.
    let h100_template = template("any-nvidia", DRIVER, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let denied = loop {
        match try_create(&tenant, Some(BRONZE), &h100_template).await {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the apiserver never called /validate-pod for claims"
                );
                dra_api(&tenant, Some(BRONZE), "ResourceClaimTemplate")
                    .delete("any-nvidia", &Default::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let bronze_allows = "L4-24GB";
    let bronze_class = "l4-24gb.gpu-admission.io";
    let mut table = vec![("bronze template on gpu.nvidia.com, no selector", denied)];
    let h100_by_name = format!("{PRODUCT} == 'NVIDIA H100 80GB HBM3'");
    for (case, obj) in [
        (
            "bronze claim on h100-80gb.gpu-admission.io",
            claim("h100", "h100-80gb.gpu-admission.io", &[]),
        ),
        (
            "bronze claim on mig.nvidia.com, an H100 partition by product name",
            claim(
                "h100-mig",
                "mig.nvidia.com",
                std::slice::from_ref(&h100_by_name),
            ),
        ),
        (
            "bronze template on gpu.nvidia.com selecting H100 by product name",
            template("h100-by-cel", DRIVER, std::slice::from_ref(&h100_by_name)),
        ),
        (
            "bronze claim with CEL gpu-admission cannot decide",
            claim(
                "undecidable",
                DRIVER,
                &[format!("{PRODUCT}.startsWith('NVIDIA L')")],
            ),
        ),
    ] {
        let answer = try_create(&tenant, Some(BRONZE), &obj).await;
        table.push((case, answer.err().unwrap_or_else(|| "ADMITTED".into())));
    }
    table.extend(admin_class_shapes(&client, &tenant, &h100_by_name).await);
    for (case, answer) in &table {
        println!("| {case} | {answer} |");
        assert!(answer.contains("denied the request"), "{case}: {answer}");
        if case.contains("cannot decide") {
            assert!(answer.contains("cannot decide"), "{case}: {answer}");
        } else {
            assert!(
                answer.contains(bronze_allows) && answer.contains(bronze_class),
                "{case}: the denial names bronze's classes and DeviceClasses: {answer}"
            );
        }
    }

    // Within the tier: the catalog classes' templates (created by the tenant, so validated), and a bronze
    // claim on the vendor class pinned to L4 by product name.
    create_dra(
        &tenant,
        Some(GOLD),
        template("one-gpu", "h100-80gb.gpu-admission.io", &[]),
    )
    .await;
    create_dra(
        &tenant,
        Some(BRONZE),
        template("one-gpu", bronze_class, &[]),
    )
    .await;
    create_dra(
        &tenant,
        Some(BRONZE),
        claim("l4-by-name", DRIVER, &[format!("{PRODUCT} == 'NVIDIA L4'")]),
    )
    .await;

    // The frontend reads templates and claims from its watch caches: wait until it has them (decided probes).
    wait_decided(
        &tenant,
        GOLD,
        json!({"resourceClaimTemplateName": "one-gpu"}),
    )
    .await;
    wait_decided(
        &tenant,
        BRONZE,
        json!({"resourceClaimTemplateName": "one-gpu"}),
    )
    .await;
    wait_decided(&tenant, BRONZE, json!({"resourceClaimName": "l4-by-name"})).await;

    // Gold: an H100 device, its Pod bound to the H100 Node. The Pod names no class itself: /mutate-pod
    // narrows it to its claim's class (gold allows A100 too, where the claim could not be allocated).
    let gold = claim_pod("llm-gold", json!({"resourceClaimTemplateName": "one-gpu"}));
    let ran = run_claim_pod(&client, &tenant, GOLD, gold).await;
    assert_eq!(ran.node_class, "H100-80GB", "gold's H100 claim");
    // The scorer weighed H100 only: no other gold class appears among the record's alternatives.
    let stored = Api::<Pod>::namespaced(client.clone(), GOLD)
        .get("llm-gold")
        .await
        .unwrap();
    let ann = stored.metadata.annotations.unwrap_or_default();
    let weighed = ann
        .get("gpu-admission.io/alternatives")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (
            ann.get(ANN_GPU_CLASS).map(String::as_str),
            weighed
                .split(',')
                .filter(|c| !c.starts_with("H100-80GB="))
                .count()
        ),
        (Some("H100-80GB"), 0),
        "gold's claim narrows the classes weighed: {weighed}"
    );
    assert_in_tier("gold", &ran, &allowed_classes(&policy, "gold"));
    allocated_devices_count_in_quotas(&client, &tenant, &webhook).await;
    // Bronze: through the L4 class's template, and through the vendor class pinned to L4 by product name.
    for (name, source) in [
        (
            "llm-bronze",
            json!({"resourceClaimTemplateName": "one-gpu"}),
        ),
        (
            "llm-bronze-named",
            json!({"resourceClaimName": "l4-by-name"}),
        ),
    ] {
        let ran = run_claim_pod(&client, &tenant, BRONZE, claim_pod(name, source)).await;
        assert_eq!(ran.decided, ran.node_class, "{name}: on its decided class");
        assert_in_tier(name, &ran, &allowed_classes(&policy, "bronze"));
    }
    quickstart_runs_in_bronze(&client, &tenant, &webhook, &policy).await;
    pod_group_claims(&client, &tenant).await;
    println!(
        "DRA: 8 bronze claims, templates and Pods that could reach H100 or cannot be decided denied, gold allocated H100, \
         2 bronze claims allocated L4, the quickstart held to L4, in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// A gated gold Pod naming the claim entry `gpu` of template `pg-gpu`, stating no class, of the PodGroup
/// `pg` when `in_group`; its decided class (`None`: asking no GPU). `Err` when it is refused.
async fn group_pod(
    tenant: &kube::Client,
    name: &str,
    in_group: bool,
) -> anyhow::Result<Option<String>> {
    let mut p = claim_pod(name, json!({"resourceClaimTemplateName": "pg-gpu"}));
    if in_group {
        p["spec"]["schedulingGroup"] = json!({"podGroupName": "pg"});
    }
    p["spec"]["schedulingGates"] = json!([{"name": "example.com/hold"}]);
    let p = Api::<Pod>::namespaced(tenant.clone(), GOLD)
        .create(&PostParams::default(), &serde_json::from_value(p)?)
        .await?;
    Ok(p.metadata
        .annotations
        .and_then(|a| a.get(ANN_GPU_CLASS).cloned()))
}

/// PodGroup claims, where the apiserver serves `scheduling.k8s.io/v1beta1` (1.37 with the workload gates):
/// the gold PodGroup `pg` shares the claim entry `gpu` of template `pg-gpu` (the H100 catalog class); once
/// the ResourceClaim controller has made the group's claim, the template is replaced by one asking for a
/// class that is no GPU. Once the frontend reads the new template (a Pod outside the group naming it asks for
/// no GPU), a gold Pod of the group naming the entry and stating no class is decided by the group's claim,
/// H100-80GB.
async fn pod_group_claims(client: &kube::Client, tenant: &kube::Client) {
    let gvk = GroupVersionKind::gvk("scheduling.k8s.io", "v1beta1", "PodGroup");
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        GOLD,
        &ApiResource::from_gvk_with_plural(&gvk, "podgroups"),
    );
    if groups.list(&Default::default()).await.is_err() {
        println!("PodGroup claims: scheduling.k8s.io/v1beta1 not served here, skipped");
        return;
    }
    let t0 = Instant::now();
    create_dra(
        tenant,
        Some(GOLD),
        template("pg-gpu", "h100-80gb.gpu-admission.io", &[]),
    )
    .await;
    let group = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": GOLD},
        "spec": {"schedulingPolicy": {"basic": {}},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "pg-gpu"}]}});
    groups
        .create(
            &PostParams::default(),
            &serde_json::from_value(group).unwrap(),
        )
        .await
        .unwrap();
    // A first Pod of the group (held by a scheduling gate) while the template asks for H100.
    let first = group_pod(tenant, "pg-first", true).await.unwrap();
    let made = wait_for(
        "the ResourceClaim controller makes the PodGroup's claim",
        Duration::from_secs(60),
        || {
            let groups = groups.clone();
            async move {
                let g = groups.get("pg").await?;
                Ok(
                    g.data["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
                        .as_str()
                        .is_some(),
                )
            }
        },
    )
    .await;
    let g = groups.get("pg").await.unwrap();
    assert!(
        made.is_ok(),
        "no claim made for the PodGroup: {:?}",
        g.data["status"]
    );
    let claim = g.data["status"]["resourceClaimStatuses"][0]["resourceClaimName"].clone();
    dra_api(tenant, Some(GOLD), "ResourceClaimTemplate")
        .delete("pg-gpu", &Default::default())
        .await
        .unwrap();
    create_dra(
        tenant,
        Some(GOLD),
        template("pg-gpu", "nic.example.com", &[]),
    )
    .await;
    // Until the frontend's cache holds the new template: a Pod outside the group asks for no GPU.
    let mut n = 0;
    wait_for(
        "the frontend reads the new template",
        Duration::from_secs(30),
        || {
            n += 1;
            let (tenant, name) = (tenant.clone(), format!("pg-alone-{n}"));
            async move { Ok(matches!(group_pod(&tenant, &name, false).await, Ok(None))) }
        },
    )
    .await
    .unwrap();
    // Until the frontend's caches hold the group's status and claim: each probe a new Pod of the group.
    n = 0;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let decided = wait_for(
        "a Pod of the group decided by the group's claim",
        Duration::from_secs(30),
        || {
            n += 1;
            let (tenant, name, seen) = (tenant.clone(), format!("pg-probe-{n}"), seen.clone());
            async move {
                let class = group_pod(&tenant, &name, true).await?;
                let held = class.as_deref() == Some("H100-80GB");
                *seen.lock().unwrap() = class;
                Ok(held)
            }
        },
    )
    .await;
    let last = seen.lock().unwrap().clone();
    println!(
        "PodGroup claims: first Pod decided {first:?} from the template; the group's claim {claim}; with the \
         template asking no GPU, a Pod of the group decided {last:?} ({n} probes) in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    assert!(decided.is_ok(), "a Pod of the group was decided {last:?}");
}

/// NVIDIA's quickstart (a template on `gpu.nvidia.com`, no selector), refused in bronze above, runs
/// unchanged once the shipped `/mutate-claim` registration is in place: the template is stored with bronze's
/// product selector and its Pod is allocated an L4 device.
async fn quickstart_runs_in_bronze(
    client: &kube::Client,
    tenant: &kube::Client,
    webhook: &Webhook,
    policy: &PolicySnapshot,
) {
    let mutating: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
        serde_json::from_value(
            gpu_admission_tests::cluster::shipped_registration(
                "mutatingwebhookconfiguration.yaml",
                webhook,
                &["claims.gpu-admission.io"],
                "gpu-admission-dra-claims",
            )
            .unwrap(),
        )
        .unwrap();
    Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(
        client.clone(),
    )
    .create(&PostParams::default(), &mutating)
    .await
    .unwrap();
    // Bronze's L4 Node has two devices, both allocated above: one freed (the Pod's template claim goes with
    // it).
    Api::<Pod>::namespaced(client.clone(), BRONZE)
        .delete(
            "llm-bronze",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
    // Until the apiserver calls the new registration the template is refused: retried.
    let quickstart = template("quickstart", DRIVER, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = try_create(tenant, Some(BRONZE), &quickstart).await {
        assert!(
            Instant::now() < deadline,
            "the quickstart template is still refused: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stored = dra_api(client, Some(BRONZE), "ResourceClaimTemplate")
        .get("quickstart")
        .await
        .unwrap();
    let selectors = &stored.data["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"];
    println!("quickstart template stored with selectors {selectors}");
    assert!(
        selectors.to_string().contains("NVIDIA L4"),
        "bronze's product selector added: {selectors}"
    );
    wait_decided(
        tenant,
        BRONZE,
        json!({"resourceClaimTemplateName": "quickstart"}),
    )
    .await;
    let pod = claim_pod(
        "quickstart-bronze",
        json!({"resourceClaimTemplateName": "quickstart"}),
    );
    let ran = run_claim_pod(client, tenant, BRONZE, pod).await;
    assert_in_tier("quickstart", &ran, &allowed_classes(policy, "bronze"));
}

/// An admin's DeviceClass the policy does not name (`h100.example.com`, H100s by product name, with an
/// `extendedResourceName`): bronze reaching it through a claim, `deviceclass.resource.kubernetes.io/<class>`
/// or `example.com/h100` is denied at the object's CREATE, as the frontend judges the class by its
/// selectors (its watch picks the class up: retried until the first denial).
async fn admin_class_shapes(
    admin: &kube::Client,
    tenant: &kube::Client,
    h100_by_name: &str,
) -> Vec<(&'static str, String)> {
    create_dra(
        admin,
        None,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
               "metadata": {"name": "h100.example.com"},
               "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}' && {h100_by_name}")}}],
                        "extendedResourceName": "example.com/h100"}}),
    )
    .await;
    let pod = |name: &str, resource: &str| -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": BRONZE},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {resource: 1}}}]}}))
        .unwrap()
    };
    let pods = Api::<Pod>::namespaced(tenant.clone(), BRONZE);
    let create_pod = |p: Pod| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &p)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    // The first shape waits for the frontend's DeviceClass watch.
    let deadline = Instant::now() + Duration::from_secs(30);
    let by_resource = loop {
        match create_pod(pod("by-extended-resource", "example.com/h100")).await {
            Err(e) => break e,
            Ok(()) => {
                assert!(
                    Instant::now() < deadline,
                    "the frontend never judged h100.example.com by its selectors"
                );
                pods.delete("by-extended-resource", &Default::default())
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let by_class_resource = create_pod(pod(
        "by-class-resource",
        "deviceclass.resource.kubernetes.io/h100.example.com",
    ))
    .await
    .err()
    .unwrap_or_else(|| "ADMITTED".into());
    let by_claim = try_create(
        tenant,
        Some(BRONZE),
        &claim("admin-class", "h100.example.com", &[]),
    )
    .await
    .err()
    .unwrap_or_else(|| "ADMITTED".into());
    vec![
        (
            "bronze Pod asking for example.com/h100 (an admin class's extendedResourceName)",
            by_resource,
        ),
        (
            "bronze Pod asking for deviceclass.resource.kubernetes.io/h100.example.com",
            by_class_resource,
        ),
        (
            "bronze claim on h100.example.com (an admin class selecting H100)",
            by_claim,
        ),
    ]
}

/// A gold claim of allocation mode `All` on the A100 class asks for one device at least and is allocated
/// both of the A100 Node's: gold's quota usage counts 8 A100 GPUs (the class's `gpusPerNode`, what `All`
/// may be allocated on any Node of the class), not the 1 its spec asks for.
async fn allocated_devices_count_in_quotas(
    client: &kube::Client,
    tenant: &kube::Client,
    webhook: &Webhook,
) {
    let mut all = template("all-a100", "a100-80gb.gpu-admission.io", &[]);
    all["spec"]["spec"]["devices"]["requests"][0]["exactly"] =
        json!({"deviceClassName": "a100-80gb.gpu-admission.io", "allocationMode": "All"});
    create_dra(tenant, Some(GOLD), all).await;
    let pod = claim_pod("all-a100", json!({"resourceClaimTemplateName": "all-a100"}));
    let ran = run_claim_pod(client, tenant, GOLD, pod).await;
    assert_eq!(ran.node_class, "A100-80GB", "narrowed to its claim's class");
    let want = format!(
        "gpu_admission_quota_gpus{{tier=\"gold\",tenant_namespace=\"{GOLD}\",class=\"A100-80GB\",kind=\"used\"}} 8"
    );
    let took = webhook
        .wait_for_metric_line(&want, "quota_gpus", Duration::from_secs(20))
        .await
        .unwrap();
    println!(
        "DRA: an allocationMode All claim allocated both A100 devices; gold's quota counts 8 A100 GPUs (gpusPerNode), after {:.1}s",
        took.as_secs_f64()
    );
}

/// One kwok Node per class of [`CLASSES`] (no extended resource: their GPUs are DRA devices only), their
/// ResourceSlices, the vendor's DeviceClasses and the catalog's.
async fn publish_gpus(
    client: &kube::Client,
    policy: &PolicySnapshot,
    parsed: &gpu_admission_policy::Policy,
) {
    let nodes: Vec<Value> = CLASSES
        .iter()
        .map(|(name, _, _)| {
            let class = policy
                .catalog()
                .iter()
                .find(|c| c.name == *name)
                .expect("catalog class");
            kwok::gpu_node(&node_name(name), class, "example.com/none", 0)
        })
        .collect();
    kwok::create_ready_nodes(client, &nodes).await.unwrap();
    for (name, kind) in [(DRIVER, "gpu"), ("mig.nvidia.com", "mig")] {
        create_dra(client, None, json!({"apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": format!(
                "device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'")}}]}}))
        .await;
    }
    for dc in gpu_admission_core::render::device_classes::render(parsed) {
        create_dra(client, None, serde_json::to_value(dc).unwrap()).await;
    }
    for (class, product, memory) in CLASSES {
        create_dra(client, None, slice(class, product, memory)).await;
    }
}
