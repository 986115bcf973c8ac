//! The floor shipped in `deploy/kustomize/base/floor.yaml` is `gpu-admission floor render` of the shipped
//! policy, byte for byte (regenerate it with
//! `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`), and the placing floor
//! of `deploy/kustomize/components/placing-floor` is `floor render --placing`'s.

use std::path::Path;

#[test]
fn the_shipped_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kustomize/base/floor.yaml"),
    )
    .expect("deploy/kustomize/base/floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_yaml(&policy).unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/base/floor.yaml is not the render of the default policy: run \
         `cargo run -p gpu-admission-cli -- floor render > deploy/kustomize/base/floor.yaml`"
    );
}

#[test]
fn the_shipped_placing_floor_is_the_render_of_the_shipped_policy() {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/kustomize/components/placing-floor/placing-floor.yaml"),
    )
    .expect("deploy/kustomize/components/placing-floor/placing-floor.yaml");
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let rendered = gpu_admission_cli::floor::render_placing_yaml(&policy).unwrap();
    assert!(
        shipped == rendered,
        "deploy/kustomize/components/placing-floor/placing-floor.yaml is not the render of the default \
         policy: run `cargo run -p gpu-admission-cli -- floor render --placing > \
         deploy/kustomize/components/placing-floor/placing-floor.yaml`"
    );
}

/// The inputs, and for every workload among them variants of it whose Pod template pins each class of the
/// default policy's catalog (by `nodeSelector`, and with an `In` of two classes by required node affinity) or
/// names each of its PriorityClasses (with and without `preemptionPolicy: Never`): the fixtures hold few
/// templates outside a tier, and these are what the floor's workload policy denies.
fn with_pinned_templates(
    inputs: Vec<gpu_admission_cli::load::Input>,
) -> Vec<gpu_admission_cli::load::Input> {
    use gpu_admission_cli::load::{Input, Source};
    use serde_json::{Value, json};
    let policy = gpu_admission_policy::embedded_default().expect("the default policy");
    let mut out = Vec::new();
    for input in &inputs {
        let Input::Object(src) = input else { continue };
        let pointer = if src.value["spec"]["jobTemplate"].is_object() {
            "/spec/jobTemplate/spec/template/spec"
        } else {
            "/spec/template/spec"
        };
        if src.value["kind"] == "Pod" || src.value.pointer(pointer).is_none() {
            continue;
        }
        let variant = |edit: &dyn Fn(&mut Value), what: &str| {
            let mut value = src.value.clone();
            edit(value.pointer_mut(pointer).expect("a template spec"));
            Input::Object(Source {
                origin: format!("{} ({what})", src.origin),
                value,
            })
        };
        for (i, c) in policy.classes.iter().enumerate() {
            let (key, val) = (&c.node_label_key, &c.node_label_value);
            out.push(variant(
                &|spec| spec["nodeSelector"] = json!({key: val}),
                "pinned",
            ));
            let other = &policy.classes[(i + 1) % policy.classes.len()].node_label_value;
            out.push(variant(
                &|spec| {
                    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": key, "operator": "In", "values": [val, other]}]}]}}})
                },
                "affinity",
            ));
        }
        for b in &policy.priority.buckets {
            out.push(variant(
                &|spec| spec["priorityClassName"] = json!(b.name),
                "priority",
            ));
            out.push(variant(
                &|spec| {
                    spec["priorityClassName"] = json!(b.name);
                    spec["preemptionPolicy"] = json!("Never");
                },
                "priority, Never",
            ));
        }
    }
    out.extend(inputs);
    out
}

/// What the floor answered for workloads (their Pod templates).
#[derive(Debug, Default)]
struct Templates {
    /// Admitted by `/validate-pod`.
    admitted: usize,
    /// Admitted and matched by the floor's workload policy.
    matched: usize,
    /// Denied by the floor.
    denied: usize,
    /// Denied by the floor and by `/validate-pod`.
    denied_by_both: usize,
}

impl Templates {
    fn record(&mut self, admitted: bool, answer: &gpu_admission_cli::floor::FloorAnswer) {
        let matched = *answer != gpu_admission_cli::floor::FloorAnswer::NotMatched;
        self.admitted += usize::from(admitted);
        self.matched += usize::from(admitted && matched);
        self.denied += usize::from(answer.denies());
        self.denied_by_both += usize::from(!admitted && answer.denies());
    }
}

/// The differential check of the floor against the webhooks: every Pod of the project's fixtures, the fuzz
/// seeds and the DRA fixtures (Pods and the Pods of workload templates), in namespaces of every tier and
/// untiered, under the default policy in Enforce, through `/mutate-pod` and `/validate-pod` as the frontend
/// decides them; for each Pod the webhooks admit, the floor's rendered CEL (evaluated by the CLI's `Floor`) on
/// the mutated Pod must admit it too, and for each workload `/validate-pod` admits, the floor's workload
/// policy on the workload as submitted (never mutated) must admit it: with gpu-admission up, the floor changes
/// no decision. The two shapes
/// deploy/README.md names (a Pod placed by `spec.nodeName` alone, DRA claims in a restricting tier) are
/// counted apart, and must be the only differences.
#[test]
fn the_floor_never_denies_what_the_webhooks_admit() {
    use gpu_admission_cli::evaluate::Verdict;
    use gpu_admission_cli::floor::FloorAnswer;
    use gpu_admission_cli::load::{self, Input, Tiers};
    use gpu_admission_cli::review::User;
    use gpu_admission_cli::{Run, RunSettings};

    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let paths: Vec<std::path::PathBuf> = [
        "../tests/fixtures/manifests",
        "../tests/fixtures/admissionreviews",
        "../tests/fixtures/dra",
        "../fuzz/seeds/mutate_pod",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .collect();
    let inputs: Vec<Input> = load::files(&paths)
        .unwrap()
        .into_iter()
        .filter_map(|file| load::inputs(&[file]).ok())
        .flatten()
        .collect();
    let inputs = with_pinned_templates(inputs);
    let namespaces: std::collections::BTreeSet<String> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Object(s) => s.value["metadata"]["namespace"].as_str(),
            Input::Review(s) => s.value["request"]["namespace"].as_str(),
            _ => None,
        })
        .map(|n| if n.is_empty() { "default" } else { n }.to_string())
        .chain(["default".to_string()])
        .collect();
    let (mut admitted, mut floor_denied_alone, mut known) = (0, 0, Vec::new());
    let mut evaluated = 0;
    let mut counterexamples = Vec::new();
    let mut templates = Templates::default();
    for tier in [Some("gold"), Some("silver"), Some("bronze"), None] {
        let tiers: Vec<String> = match tier {
            Some(t) => namespaces.iter().map(|n| format!("{n}={t}")).collect(),
            None => Vec::new(),
        };
        let settings = RunSettings {
            policy: None,
            policy_key: None,
            mode: Some("Enforce".into()),
            state: None,
            tiers: Tiers::parse(&tiers).unwrap(),
            requester: User::default_requester(),
            no_kube: true,
            default_namespace: "default".into(),
            usage: None,
        };
        let checked = Run::new(&settings).unwrap().check_inputs(&inputs);
        for ev in &checked.evaluations {
            if let Some(answer) = &ev.floor {
                templates.record(ev.object_admitted, answer);
                if ev.object_admitted && answer.denies() {
                    counterexamples.push(format!(
                        "{tier:?} {} (its Pod templates) {}: {}",
                        ev.object,
                        ev.source,
                        answer.describe()
                    ));
                }
            }
            for pod in &ev.pods {
                if pod.floor.as_ref().is_some_and(FloorAnswer::denies) {
                    floor_denied_alone += 1;
                }
                if !matches!(ev.verdict, Verdict::Allowed | Verdict::Warned) {
                    continue;
                }
                let Some(answer) = &pod.floor_after_mutation else {
                    panic!("{}: the default policy renders a floor", ev.object)
                };
                admitted += 1;
                if *answer != FloorAnswer::NotMatched {
                    evaluated += 1;
                }
                if !answer.denies() {
                    continue;
                }
                let case = format!(
                    "{tier:?} {} ({}) {}: {}",
                    ev.object,
                    pod.path,
                    ev.source,
                    answer.describe()
                );
                if pod.placement.as_deref() == Some("node-name") || ev.source.contains("/dra/") {
                    known.push(case);
                } else {
                    counterexamples.push(case);
                }
            }
        }
    }
    println!(
        "{admitted} admitted Pods checked against the floor ({evaluated} matched by it), \
         {floor_denied_alone} denied by the floor alone"
    );
    assert!(
        evaluated >= 50,
        "the floor evaluated only {evaluated} admitted Pods"
    );
    println!(
        "{} workloads admitted by /validate-pod checked against the floor ({} matched by it), {} denied \
         by the floor alone, {} denied by both",
        templates.admitted, templates.matched, templates.denied, templates.denied_by_both
    );
    assert!(
        templates.matched >= 100 && templates.denied >= 100,
        "the floor checked too few workloads: {templates:?}"
    );
    for k in &known {
        println!("known difference (deploy/README.md): {k}");
    }
    assert!(
        admitted >= 100,
        "only {admitted} admitted Pods: the fixtures were not found"
    );
    assert!(
        floor_denied_alone >= 20,
        "the floor alone denied only {floor_denied_alone}: it checks nothing"
    );
    assert!(
        counterexamples.is_empty(),
        "the floor denies {} Pods the webhooks admit:\n{}",
        counterexamples.len(),
        counterexamples.join("\n")
    );
}

/// A Deployment whose container's `requests` is a number (`fuzz/seeds/check/workload-requests-a-number.yaml`)
/// made the floor's interpreter panic, and `gpu-admission check` with it (cel-interpreter 0.10: `todo!` on
/// iterating over a number). The apiserver refuses it when it decodes it, so the floor never sees it: `check`
/// answers what /validate-pod does (undecidable: denied in Enforce), with no floor answer; the floor asked
/// anyway answers an error of the CEL, not a crash.
#[test]
fn a_workload_the_interpreter_panicked_on_gets_a_verdict() {
    use gpu_admission_cli::floor::{Floor, FloorAnswer};
    use gpu_admission_cli::load;
    use serde_json::json;

    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/check/workload-requests-a-number.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["check", "--mode", "Enforce", "--namespace", "ml=gold", "-f"])
        .arg(&seed)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Deployment ml/trainer  gold  denied") && !stdout.contains("floor alone"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let inputs = load::inputs(&[seed]).unwrap();
    let [load::Input::Object(deployment)] = inputs.as_slice() else {
        panic!("{inputs:?}")
    };
    let policy = gpu_admission_policy::embedded_default().unwrap();
    let floor = Floor::new(&policy).unwrap();
    let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
    let answer = floor.workload(&request, &deployment.value, ("ml", Some("gold")), false);
    assert!(
        matches!(&answer, FloorAnswer::Error(e) if e.contains("iterable")),
        "{answer:?}"
    );
}

/// How the floor (alone, gpu-admission down) answers a device shape beside `/validate-pod`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FloorHolds {
    /// It denies bronze's H100 ask as the webhooks do.
    Same,
    /// Narrower: it admits what the webhooks deny, for the reason given (and what holds instead).
    Narrower(&'static str),
}

/// One device shape of Kubernetes 1.34–1.37: the objects a user creates (claims, templates, the Pod) for the
/// pin `node` (a node selector on a catalog class) asking H100 devices in the shape.
struct Shape {
    name: &'static str,
    objects: fn(node: &serde_json::Value) -> Vec<serde_json::Value>,
    floor: FloorHolds,
    /// The catalog class bronze's Pod is pinned to: H100's where only the node says H100, else bronze's own.
    bronze_pin: &'static str,
    /// Whether gold's use of the shape (pinned to H100) is admitted by both.
    gold: bool,
    /// Whether the webhooks must hold the Pod itself as a GPU Pod in bronze (not skip it as asking for none),
    /// not only the claim objects beside it.
    pod_held: bool,
}

/// The DeviceClasses of the cluster every shape runs with: NVIDIA's dra-driver-gpu chart's (as the GPU Operator
/// renders them), an admin's class selecting H100 by product with an `extendedResourceName`, a class named
/// like NVIDIA's ComputeDomain class (`notGpu` by name) selecting H100, and one the grammar cannot read.
fn cluster_device_classes() -> Vec<serde_json::Value> {
    use serde_json::json;
    let class = |name: &str, cel: &str, resource: Option<&str>| {
        let mut spec = json!({"selectors": [{"cel": {"expression": cel}}]});
        if let Some(r) = resource {
            spec["extendedResourceName"] = json!(r);
        }
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec})
    };
    let nvidia = |ty: &str| {
        format!(
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{ty}'"
        )
    };
    let h100 = "device.driver == 'gpu.nvidia.com' && \
                device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'";
    vec![
        class("gpu.nvidia.com", &nvidia("gpu"), None),
        class("mig.nvidia.com", &nvidia("mig"), None),
        class(
            "compute-domain-default-channel.nvidia.com",
            "device.driver == 'compute-domain.nvidia.com' && \
             device.attributes['compute-domain.nvidia.com'].type == 'channel' && \
             device.attributes['compute-domain.nvidia.com'].id == 0",
            None,
        ),
        class("h100.example.com", h100, Some("example.com/h100")),
        class(
            "compute-domain-daemon.nvidia.com",
            h100,
            Some("example.com/cd-h100"),
        ),
        class(
            "odd.example.com",
            "device.attributes['gpu.nvidia.com'].index % 2 == 0",
            Some("example.com/odd"),
        ),
    ]
}

fn shape_pod(
    node: &serde_json::Value,
    resources: serde_json::Value,
    claims: Option<serde_json::Value>,
) -> serde_json::Value {
    use serde_json::json;
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
        "spec": {"nodeSelector": node, "containers": [{"name": "c", "image": "cuda",
            "resources": {"limits": resources}}]}});
    if let Some(c) = claims {
        pod["spec"]["resourceClaims"] = c;
    }
    pod
}

fn shape_template(requests: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "team"}, "spec": {"spec": {"devices": {"requests": requests}}}})
}

const H100_PRODUCT: &str =
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'";

/// A Pod whose one claim is made from the template `t` of `requests`.
fn pod_with_template(
    node: &serde_json::Value,
    requests: serde_json::Value,
) -> Vec<serde_json::Value> {
    use serde_json::json;
    vec![
        shape_template(requests),
        shape_pod(
            node,
            json!({}),
            Some(json!([{"name": "gpu", "resourceClaimTemplateName": "t"}])),
        ),
    ]
}

/// A Pod of the PodGroup `g` sharing the group's claim entry `gpu` (template `t`): the ResourceClaim
/// controller made the group's claim `g-gpu` when `t` asked for the H100 catalog class; `t` asks for no GPU
/// now (a ComputeDomain channel). What the Pod is allocated is the group's claim
/// (`gpu_admission_core::pod::pod_group`), not the template: a GPU Pod, held to its tier's nodes (read by
/// the template alone it would be skipped as asking for none).
fn pod_in_group(node: &serde_json::Value) -> Vec<serde_json::Value> {
    use serde_json::json;
    let entry = json!({"name": "gpu", "resourceClaimTemplateName": "t"});
    let mut pod = shape_pod(node, json!({}), Some(json!([entry.clone()])));
    pod["spec"]["schedulingGroup"] = json!({"podGroupName": "g"});
    vec![
        shape_template(json!([{"name": "gpu", "exactly": {
            "deviceClassName": "compute-domain-default-channel.nvidia.com"}}])),
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [entry]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "g-gpu"}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "g-gpu", "namespace": "team"}, "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "h100-80gb.gpu-admission.io"}}]}}}),
        pod,
    ]
}

const CLAIMS_UNREAD: &str = "the floor reads no claim object (its requests are in another object): the Pod is \
    held to its tier's nodes, L4 for bronze, where no H100 device is published";

fn shapes() -> Vec<Shape> {
    use serde_json::json;
    vec![
        Shape {
            name: "container extended resource (nvidia.com/gpu) on an H100 node",
            objects: |node| vec![shape_pod(node, json!({"nvidia.com/gpu": 1}), None)],
            floor: FloorHolds::Same,
            bronze_pin: "H100-80GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "MIG slice (nvidia.com/mig-1g.10gb) on an H100 node",
            objects: |node| vec![shape_pod(node, json!({"nvidia.com/mig-1g.10gb": 1}), None)],
            floor: FloorHolds::Same,
            bronze_pin: "H100-80GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "DRA claim template on gpu.nvidia.com selecting H100",
            objects: |node| {
                pod_with_template(
                    node,
                    json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                        "selectors": [{"cel": {"expression": H100_PRODUCT}}]}}]),
                )
            },
            floor: FloorHolds::Narrower(CLAIMS_UNREAD),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "DRA ResourceClaim (resourceClaimName) on gpu.nvidia.com selecting H100",
            objects: |node| {
                vec![
                    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": "c", "namespace": "team"}, "spec": {"devices": {"requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                "selectors": [{"cel": {"expression": H100_PRODUCT}}]}}]}}}),
                    shape_pod(
                        node,
                        json!({}),
                        Some(json!([{"name": "gpu", "resourceClaimName": "c"}])),
                    ),
                ]
            },
            floor: FloorHolds::Narrower(CLAIMS_UNREAD),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "firstAvailable: H100 first, L4 second",
            objects: |node| {
                pod_with_template(
                    node,
                    json!([{"name": "gpu", "firstAvailable": [
                        {"name": "h100", "deviceClassName": "gpu.nvidia.com",
                            "selectors": [{"cel": {"expression": H100_PRODUCT}}]},
                        {"name": "l4", "deviceClassName": "l4-24gb.gpu-admission.io"}]}]),
                )
            },
            floor: FloorHolds::Narrower(CLAIMS_UNREAD),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "a PodGroup's claim, made from its template before the template was changed",
            objects: pod_in_group,
            floor: FloorHolds::Narrower(
                "the floor reads no claim object nor PodGroup: the Pod is held to its tier's nodes, L4 for \
                 bronze, where no H100 device is published",
            ),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: true,
        },
        Shape {
            name: "allocationMode All on the H100 catalog class",
            objects: |node| {
                pod_with_template(
                    node,
                    json!([{"name": "gpu", "exactly": {"deviceClassName": "h100-80gb.gpu-admission.io",
                        "allocationMode": "All"}}]),
                )
            },
            floor: FloorHolds::Narrower(CLAIMS_UNREAD),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "adminAccess on gpu.nvidia.com selecting H100",
            objects: |node| {
                pod_with_template(
                    node,
                    json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": true,
                        "selectors": [{"cel": {"expression": H100_PRODUCT}}]}}]),
                )
            },
            floor: FloorHolds::Narrower(
                "the claim with adminAccess is the floor's admin-claims policy's (the authorizer, not evaluated \
                 offline); the Pod floor holds the Pod to its tier's nodes",
            ),
            bronze_pin: "L4-24GB",
            gold: false,
            pod_held: false,
        },
        Shape {
            name: "implicit deviceclass.resource.kubernetes.io/<class> of an admin class selecting H100",
            objects: |node| {
                vec![shape_pod(
                    node,
                    json!({"deviceclass.resource.kubernetes.io/h100.example.com": 1}),
                    None,
                )]
            },
            floor: FloorHolds::Same,
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "a class's extendedResourceName (example.com/h100)",
            objects: |node| vec![shape_pod(node, json!({"example.com/h100": 1}), None)],
            floor: FloorHolds::Same,
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "an admin class selecting H100 by product, through a claim",
            objects: |node| {
                pod_with_template(
                    node,
                    json!([{"name": "gpu", "exactly": {"deviceClassName": "h100.example.com"}}]),
                )
            },
            floor: FloorHolds::Narrower(CLAIMS_UNREAD),
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "a class named like a notGpu class (compute-domain-daemon.nvidia.com) selecting H100",
            objects: |node| {
                vec![shape_pod(
                    node,
                    json!({"deviceclass.resource.kubernetes.io/compute-domain-daemon.nvidia.com": 1}),
                    None,
                )]
            },
            floor: FloorHolds::Same,
            bronze_pin: "L4-24GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "the vendor's class by implicit extended resource on an H100 node",
            objects: |node| {
                vec![shape_pod(
                    node,
                    json!({"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
                    None,
                )]
            },
            floor: FloorHolds::Same,
            bronze_pin: "H100-80GB",
            gold: true,
            pod_held: false,
        },
        Shape {
            name: "a class whose selector cannot be decided, by its extendedResourceName",
            objects: |node| vec![shape_pod(node, json!({"example.com/odd": 1}), None)],
            floor: FloorHolds::Same,
            bronze_pin: "L4-24GB",
            gold: false,
            pod_held: false,
        },
    ]
}

/// The differential test of the device shapes: each shape through `/validate-pod` (core's decision, as the
/// frontend runs it) and through the floor's rendered CEL with the parameters the observer writes for the
/// cluster's DeviceClasses ([`cluster_device_classes`]). Bronze asks for H100 devices in every shape (pinned to
/// its L4 nodes where the shape names the product elsewhere, to H100 nodes where only the node says it): the
/// webhooks deny every one, and the floor alone denies exactly the shapes marked [`FloorHolds::Same`]; where it
/// is narrower the shape says why. Gold's legitimate use (pinned to H100) is admitted by both, the floor also
/// after the mutation.
#[test]
fn every_device_shape_through_the_webhooks_and_the_floor() {
    use gpu_admission_cli::evaluate::Verdict;
    use gpu_admission_cli::load::{Input, Source, Tiers};
    use gpu_admission_cli::review::User;
    use gpu_admission_cli::{Run, RunSettings};

    let policy = gpu_admission_policy::embedded_default().unwrap();
    let pin = |class: &str| {
        let c = policy.classes.iter().find(|c| c.name == class).unwrap();
        serde_json::json!({&c.node_label_key: &c.node_label_value})
    };
    let run = |tier: &str, objects: Vec<serde_json::Value>| {
        let settings = RunSettings {
            policy: None,
            policy_key: None,
            mode: Some("Enforce".into()),
            state: None,
            tiers: Tiers::parse(&[format!("team={tier}")]).unwrap(),
            requester: User::default_requester(),
            no_kube: true,
            default_namespace: "team".into(),
            usage: None,
        };
        let inputs: Vec<Input> = cluster_device_classes()
            .into_iter()
            .chain(objects)
            .enumerate()
            .map(|(i, value)| {
                Input::Object(Source {
                    origin: format!("shape#{i}"),
                    value,
                })
            })
            .collect();
        Run::new(&settings).unwrap().check_inputs(&inputs)
    };
    let (mut same, mut narrower, mut gold_admitted) = (0, 0, 0);
    let mut failures = Vec::new();
    for shape in shapes() {
        let checked = run("bronze", (shape.objects)(&pin(shape.bronze_pin)));
        let webhook_denies = checked
            .evaluations
            .iter()
            .any(|e| matches!(e.verdict, Verdict::Denied));
        let pod = checked
            .evaluations
            .iter()
            .flat_map(|e| &e.pods)
            .find(|p| p.path == "Pod")
            .expect("the shape's Pod");
        let floor = pod.floor.clone().expect("a floor answer");
        let report = format!(
            "{}: webhooks deny {webhook_denies}, floor {}",
            shape.name,
            floor.describe()
        );
        println!("bronze {report}");
        if shape.pod_held && pod.skipped.is_some() {
            failures.push(format!(
                "bronze {report}: the Pod itself is skipped ({:?})",
                pod.skipped
            ));
        }
        if !webhook_denies {
            failures.push(format!("bronze {report}: the webhooks admit it"));
        }
        match shape.floor {
            FloorHolds::Same if floor.denies() => same += 1,
            FloorHolds::Narrower(why) if !floor.denies() => {
                println!("  narrower on purpose: {why}");
                narrower += 1;
            }
            _ => failures.push(format!("bronze {report}: expected {:?}", shape.floor)),
        }
        if !shape.gold {
            continue;
        }
        let checked = run("gold", (shape.objects)(&pin("H100-80GB")));
        let denied: Vec<String> = checked
            .evaluations
            .iter()
            .filter(|e| matches!(e.verdict, Verdict::Denied))
            .map(|e| format!("{}: {:?}", e.object, e.message))
            .collect();
        let pod = checked
            .evaluations
            .iter()
            .flat_map(|e| &e.pods)
            .find(|p| p.path == "Pod")
            .expect("the shape's Pod");
        let floors = [pod.floor.clone(), pod.floor_after_mutation.clone()];
        if !denied.is_empty() || floors.iter().flatten().any(|f| f.denies()) {
            failures.push(format!(
                "gold {}: webhooks deny {denied:?}, floor {floors:?}",
                shape.name
            ));
        } else {
            gold_admitted += 1;
        }
    }
    println!(
        "{} shapes: bronze denied by both {same}, by the webhooks only (floor narrower, stated) {narrower}; \
         gold admitted by both {gold_admitted}",
        shapes().len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Admin-access claims with every gpu-admission process down: the floor's claims policy, with the parameters
/// the observer writes for the cluster's DeviceClasses ([`cluster_device_classes`]), refuses a request for a
/// GPU class outside the namespace's tier that carries no selector (what the webhooks' mutation did not
/// reach), even from a requester holding `use adminaccess`; needs that power for a cluster class that is a
/// GPU class only by what it selects; and leaves the tier's own classes, gold's use and a request with
/// selectors (which the floor cannot read) to the webhooks.
#[test]
fn admin_access_claims_through_the_claims_floor() {
    use serde_json::json;
    let mut policy = gpu_admission_policy::embedded_default().unwrap();
    policy.enforcement.mode = gpu_admission_policy::EnforcementMode::Enforce;
    let classes: Vec<k8s_openapi::api::resource::v1::DeviceClass> = cluster_device_classes()
        .into_iter()
        .map(|c| serde_json::from_value(c).unwrap())
        .collect();
    let floor = gpu_admission_cli::floor::Floor::with_device_classes(&policy, &classes).unwrap();
    let request =
        json!({"operation": "CREATE", "userInfo": {"username": "alice", "groups": ["team"]}});
    let claim = |class: &str, selectors: bool| {
        let mut exactly = json!({"deviceClassName": class, "adminAccess": true});
        if selectors {
            exactly["selectors"] = json!([{"cel": {"expression": H100_PRODUCT}}]);
        }
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "team"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
    };
    let answer = |tier: &str, class: &str, selectors: bool, may_admin: bool| {
        let a = floor.claim(
            &request,
            &claim(class, selectors),
            ("team", Some(tier)),
            (false, may_admin),
        );
        println!(
            "{tier} {class} selectors {selectors} use-adminaccess {may_admin}: {}",
            a.describe()
        );
        a
    };
    // Outside bronze, no selector: refused with the power held.
    for class in [
        "h100.example.com",
        "h100-80gb.gpu-admission.io",
        "odd.example.com",
    ] {
        let a = answer("bronze", class, false, true);
        assert!(
            a.denies() && a.describe().contains("outside tier bronze"),
            "{class}: {}",
            a.describe()
        );
    }
    // A cluster class GPU only by what it selects needs the power, whatever the tier.
    let a = answer("gold", "h100.example.com", false, false);
    assert!(
        a.denies() && a.describe().contains("use adminaccess"),
        "{}",
        a.describe()
    );
    // Admitted: the tier's own class, gold's use, a request with selectors (the webhooks' to judge).
    for (tier, class, selectors) in [
        ("bronze", "l4-24gb.gpu-admission.io", false),
        ("gold", "h100.example.com", false),
        ("gold", "h100-80gb.gpu-admission.io", false),
        ("bronze", "h100.example.com", true),
    ] {
        let a = answer(tier, class, selectors, true);
        assert!(!a.denies(), "{tier} {class}: {}", a.describe());
    }
    // A claim without admin access is not matched.
    let plain = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "team"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "h100.example.com"}}]}}});
    let a = floor.claim(&request, &plain, ("team", Some("bronze")), (false, false));
    assert!(!a.denies(), "{}", a.describe());
}
