//! The oracle against the semantics the Kubernetes documentation gives ("Assigning Pods to Nodes", "Taints and
//! Tolerations", the API reference of NodeSelectorRequirement and Toleration).

use super::*;
use serde_json::Value;

fn pod(spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "x"}]);
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
    )
    .unwrap()
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> Node {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    node(name, labels, None)
}

fn required(terms: Value) -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
}

fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": op, "values": values})
}

/// The names reachable by a Pod with `spec` among `nodes`.
fn reach(spec: Value, nodes: &[Node]) -> Vec<String> {
    reachable_nodes(&pod(spec), nodes)
}

fn zones() -> Vec<Node> {
    vec![
        labelled("a", &[("zone", "a"), ("disk", "ssd"), ("cores", "8")]),
        labelled("b", &[("zone", "b"), ("disk", "hdd"), ("cores", "64")]),
        labelled("c", &[("cores", "many")]),
    ]
}

#[test]
fn node_selector_needs_every_label_with_its_value() {
    let nodes = zones();
    assert_eq!(reach(json!({"nodeSelector": {"zone": "a"}}), &nodes), ["a"]);
    assert_eq!(
        reach(
            json!({"nodeSelector": {"zone": "a", "disk": "hdd"}}),
            &nodes
        ),
        Vec::<String>::new()
    );
    assert_eq!(reach(json!({"nodeSelector": {}}), &nodes), ["a", "b", "c"]);
    assert_eq!(reach(json!({}), &nodes), ["a", "b", "c"]);
}

#[test]
fn every_operator_reads_as_the_api_reference_says() {
    let nodes = zones();
    let one = |e: Value| {
        reach(
            json!({"affinity": required(json!([{"matchExpressions": [e]}]))}),
            &nodes,
        )
    };
    assert_eq!(one(expr("zone", "In", &["a", "x"])), ["a"]);
    // NotIn and DoesNotExist select Nodes without the label too.
    assert_eq!(one(expr("zone", "NotIn", &["a"])), ["b", "c"]);
    assert_eq!(
        one(json!({"key": "zone", "operator": "Exists"})),
        ["a", "b"]
    );
    assert_eq!(
        one(json!({"key": "zone", "operator": "DoesNotExist"})),
        ["c"]
    );
    // Gt / Lt compare integers; a label that is not one never matches.
    assert_eq!(one(expr("cores", "Gt", &["8"])), ["b"]);
    assert_eq!(one(expr("cores", "Lt", &["64"])), ["a"]);
    assert_eq!(one(expr("cores", "Gt", &["-1"])), ["a", "b"]);
}

#[test]
fn expressions_kubernetes_cannot_parse_make_their_term_select_nothing() {
    let nodes = zones();
    for bad in [
        expr("zone", "In", &[]),
        expr("zone", "NotIn", &[]),
        expr("zone", "Exists", &["a"]),
        expr("zone", "DoesNotExist", &["a"]),
        expr("cores", "Gt", &["eight"]),
        expr("cores", "Lt", &["1", "2"]),
        expr("zone", "Matches", &["a"]),
    ] {
        let spec = json!({"affinity": required(json!([{"matchExpressions": [bad]}]))});
        assert_eq!(reach(spec, &nodes), Vec::<String>::new(), "{bad}");
        // The other terms still count.
        let spec = json!({"affinity": required(json!([
            {"matchExpressions": [bad]},
            {"matchExpressions": [expr("zone", "In", &["b"])]}]))});
        assert_eq!(reach(spec, &nodes), ["b"], "{bad}");
    }
}

#[test]
fn terms_are_ored_and_expressions_anded() {
    let nodes = zones();
    let spec = json!({"affinity": required(json!([
        {"matchExpressions": [expr("zone", "In", &["a", "b"]), expr("disk", "In", &["hdd"])]},
        {"matchExpressions": [expr("cores", "In", &["many"])]}]))});
    assert_eq!(reach(spec, &nodes), ["b", "c"]);
}

#[test]
fn an_empty_term_or_no_term_selects_no_node() {
    let nodes = zones();
    for terms in [
        json!([]),
        json!([{}]),
        json!([{"matchExpressions": [], "matchFields": []}]),
    ] {
        let spec = json!({"affinity": required(terms.clone())});
        assert_eq!(reach(spec, &nodes), Vec::<String>::new(), "{terms}");
    }
    // An empty term beside a real one: the real one counts.
    let spec = json!({"affinity": required(json!([{}, {"matchExpressions": [expr("zone", "In", &["a"])]}]))});
    assert_eq!(reach(spec, &nodes), ["a"]);
    // No required affinity at all (only preferences): every Node.
    let spec = json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", &["a"])]}}]}}});
    assert_eq!(reach(spec, &nodes), ["a", "b", "c"]);
}

#[test]
fn node_selector_and_affinity_must_both_hold() {
    let nodes = zones();
    let spec = json!({"nodeSelector": {"disk": "ssd"},
        "affinity": required(json!([{"matchExpressions": [expr("zone", "In", &["b"])]}]))});
    assert_eq!(reach(spec, &nodes), Vec::<String>::new());
    let spec = json!({"nodeSelector": {"disk": "ssd"},
        "affinity": required(json!([{"matchExpressions": [expr("zone", "Exists", &[])]}]))});
    assert_eq!(reach(spec, &nodes), ["a"]);
}

#[test]
fn match_fields_select_by_node_name() {
    let nodes = zones();
    let fields = |e: Value| {
        reach(
            json!({"affinity": required(json!([{"matchFields": [e]}]))}),
            &nodes,
        )
    };
    assert_eq!(fields(expr("metadata.name", "In", &["b"])), ["b"]);
    assert_eq!(fields(expr("metadata.name", "NotIn", &["b"])), ["a", "c"]);
    // One value exactly, In / NotIn only.
    assert!(fields(expr("metadata.name", "In", &["a", "b"])).is_empty());
    assert!(fields(expr("metadata.name", "Exists", &[])).is_empty());
    // Any other field reads as empty.
    assert!(fields(expr("spec.unschedulable", "In", &["true"])).is_empty());
    assert_eq!(
        fields(expr("spec.unschedulable", "NotIn", &["true"])),
        ["a", "b", "c"]
    );
    // Fields and labels of one term are ANDed.
    let spec = json!({"affinity": required(json!([{"matchFields": [expr("metadata.name", "In", &["a"])],
        "matchExpressions": [expr("zone", "In", &["b"])]}]))});
    assert!(reach(spec, &nodes).is_empty());
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        ..Taint::default()
    }
}

fn toleration(t: Value) -> Toleration {
    serde_json::from_value(t).unwrap()
}

#[test]
fn tolerations_match_taints_by_key_value_and_effect() {
    let gpu = taint("nvidia.com/gpu", Some("present"), "NoSchedule");
    let yes = [
        json!({"key": "nvidia.com/gpu", "operator": "Exists"}),
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}),
        // No operator means Equal.
        json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}),
        // An empty key with Exists tolerates everything.
        json!({"operator": "Exists"}),
        json!({"operator": "Exists", "effect": "NoSchedule"}),
    ];
    for t in yes {
        assert!(tolerates(&toleration(t.clone()), &gpu), "{t}");
    }
    let no = [
        json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}),
        json!({"key": "nvidia.com/gpu", "operator": "Equal"}),
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "PreferNoSchedule"}),
        json!({"key": "amd.com/gpu", "operator": "Exists"}),
        json!({"operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "nvidia.com/gpu", "operator": "Gt", "value": "1"}),
    ];
    for t in no {
        assert!(!tolerates(&toleration(t.clone()), &gpu), "{t}");
    }
    // A taint without a value is tolerated by Equal with no value.
    let bare = taint("dedicated", None, "NoSchedule");
    assert!(tolerates(
        &toleration(json!({"key": "dedicated", "operator": "Equal"})),
        &bare
    ));
}

fn tainted(name: &str, taints: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}})).unwrap()
}

#[test]
fn the_scheduler_needs_no_schedule_and_no_execute_taints_tolerated() {
    let nodes = vec![
        tainted(
            "gpu",
            json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        ),
        tainted("evict", json!([{"key": "maint", "effect": "NoExecute"}])),
        tainted(
            "soft",
            json!([{"key": "soft", "effect": "PreferNoSchedule"}]),
        ),
        tainted("free", json!([])),
    ];
    assert_eq!(reach(json!({}), &nodes), ["soft", "free"]);
    let spec = json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]});
    assert_eq!(reach(spec, &nodes), ["gpu", "soft", "free"]);
    let spec = json!({"tolerations": [{"operator": "Exists"}]});
    assert_eq!(reach(spec, &nodes), ["gpu", "evict", "soft", "free"]);
}

#[test]
fn node_name_bypasses_the_scheduler_but_not_the_kubelet() {
    let mut nodes = zones();
    nodes.push(tainted(
        "gpu",
        json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    ));
    nodes.push(tainted(
        "evict",
        json!([{"key": "maint", "effect": "NoExecute"}]),
    ));
    // A NoSchedule taint does not stop a Pod bound by name.
    assert_eq!(reach(json!({"nodeName": "gpu"}), &nodes), ["gpu"]);
    // A NoExecute taint does: the kubelet rejects (or evicts) it.
    assert!(reach(json!({"nodeName": "evict"}), &nodes).is_empty());
    let spec =
        json!({"nodeName": "evict", "tolerations": [{"key": "maint", "operator": "Exists"}]});
    assert_eq!(reach(spec, &nodes), ["evict"]);
    // The kubelet still checks the node selector and required affinity.
    assert!(
        reach(
            json!({"nodeName": "a", "nodeSelector": {"zone": "b"}}),
            &nodes
        )
        .is_empty()
    );
    let spec = json!({"nodeName": "a", "affinity": required(json!([{"matchExpressions": [expr("zone", "NotIn", &["a"])]}]))});
    assert!(reach(spec, &nodes).is_empty());
    assert_eq!(
        reach(
            json!({"nodeName": "a", "nodeSelector": {"zone": "a"}}),
            &nodes
        ),
        ["a"]
    );
    // A Node that does not exist, and an empty nodeName (unset).
    assert!(reach(json!({"nodeName": "nowhere"}), &nodes).is_empty());
    assert_eq!(
        reach(
            json!({"nodeName": "", "nodeSelector": {"zone": "b"}}),
            &nodes
        ),
        ["b"]
    );
}

#[test]
fn another_scheduler_may_bind_anywhere_the_kubelet_admits() {
    let nodes = vec![
        tainted(
            "gpu",
            json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
        ),
        tainted("evict", json!([{"key": "maint", "effect": "NoExecute"}])),
    ];
    assert!(reach(json!({"schedulerName": "default-scheduler"}), &nodes).is_empty());
    assert_eq!(
        reach(json!({"schedulerName": "hami-scheduler"}), &nodes),
        ["gpu"]
    );
}

#[test]
fn a_cordoned_node_takes_only_pods_that_tolerate_it() {
    let mut cordoned = labelled("cordoned", &[]);
    cordoned.spec.get_or_insert_default().unschedulable = Some(true);
    let nodes = vec![cordoned];
    assert!(reach(json!({}), &nodes).is_empty());
    let spec = json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]});
    assert_eq!(reach(spec, &nodes), ["cordoned"]);
    assert_eq!(reach(json!({"nodeName": "cordoned"}), &nodes), ["cordoned"]);
}

#[test]
fn the_default_policy_cluster_has_a_node_of_every_class() {
    let nodes = default_policy_nodes();
    let names: Vec<&str> = nodes.iter().map(node_name).collect();
    assert_eq!(
        names,
        [
            "h200-141gb-1",
            "h100-80gb-1",
            UNCLASSED_H100_NODE,
            "mi300x-192gb-1",
            "a100-80gb-1",
            "a100-40gb-1",
            "l40s-48gb-1",
            "l4-24gb-1",
            CPU_NODE
        ]
    );
    let by_name = |n: &str| nodes.iter().find(|x| node_name(x) == n).unwrap();
    let l4 = by_name("l4-24gb-1");
    let labels = l4.metadata.labels.as_ref().unwrap();
    assert_eq!(class_label(l4), Some("L4-24GB"));
    assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-L4");
    assert_eq!(labels["cloud.google.com/gke-accelerator"], "nvidia-l4");
    assert_eq!(labels["karpenter.k8s.aws/instance-gpu-name"], "l4");
    let unclassed = by_name(UNCLASSED_H100_NODE);
    assert_eq!(class_label(unclassed), None);
    assert_eq!(
        unclassed.metadata.labels.as_ref().unwrap()["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    let taint_of = |n: &str| {
        by_name(n)
            .spec
            .as_ref()
            .unwrap()
            .taints
            .clone()
            .unwrap_or_default()
    };
    assert_eq!(taint_of("mi300x-192gb-1")[0].key, "amd.com/gpu");
    assert_eq!(taint_of(UNCLASSED_H100_NODE)[0].effect, "NoSchedule");
    assert!(taint_of(CPU_NODE).is_empty());
}

#[test]
fn a_negative_class_constraint_reaches_the_unclassed_h100() {
    let nodes = default_policy_nodes();
    let others = [
        "H200-141GB",
        "H100-80GB",
        "MI300X-192GB",
        "A100-80GB",
        "A100-40GB",
        "L40S-48GB",
    ];
    let spec = json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "affinity": required(json!([{"matchExpressions": [expr("gpu.nvidia.com/class", "NotIn", &others)]}]))});
    assert_eq!(
        reach(spec, &nodes),
        ["h100-unclassed-1", "l4-24gb-1", CPU_NODE]
    );
    // The positive form reaches the L4 Node only.
    let spec = json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"}});
    assert_eq!(reach(spec, &nodes), ["l4-24gb-1"]);
    // Without the GPU toleration only the CPU Node.
    assert_eq!(reach(json!({}), &nodes), [CPU_NODE]);
    // A nodeName to the H100 Node skips the taint.
    assert_eq!(
        reach(json!({"nodeName": "h100-80gb-1"}), &nodes),
        ["h100-80gb-1"]
    );
}
