use std::borrow::Cow;
use std::collections::BTreeSet;

use gpu_admission_policy::GpuClass;
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

use super::*;
use crate::policy::TierRules;

const KEY: &str = "gpu.nvidia.com/class";

fn catalog() -> Vec<GpuClass> {
    ["H100-80GB", "A100-80GB", "L4-24GB"]
        .iter()
        .map(|n| crate::policy::test_class(n, KEY, None))
        .collect()
}

fn bronze() -> TierRules<'static> {
    TierRules {
        tier: "bronze",
        allowed: Cow::Owned(BTreeSet::from(["L4-24GB".to_string()])),
        preferred: None,
        max_priority_class: None,
        fallback: crate::policy::Fallback::TierDefault,
        granted: false,
    }
}

fn spec(v: serde_json::Value) -> PodSpec {
    let mut v = v;
    v["containers"] = json!([{"name": "c"}]);
    serde_json::from_value(v).unwrap()
}

fn terms(t: serde_json::Value) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}}}})
}

fn bound(v: serde_json::Value) -> Result<(), Breach> {
    class_bound(&spec(v), &bronze(), &catalog())
}

#[test]
fn a_selector_or_an_in_on_every_term_holds() {
    assert_eq!(bound(json!({"nodeSelector": {KEY: "L4-24GB"}})), Ok(()));
    assert_eq!(
        bound(terms(json!([
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                  {"key": KEY, "operator": "In", "values": ["L4-24GB"]}]}
        ]))),
        Ok(())
    );
    // The selector is ANDed with every term.
    let mut v = terms(json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]));
    v["nodeSelector"] = json!({KEY: "L4-24GB"});
    assert_eq!(bound(v), Ok(()));
}

#[test]
fn nothing_negative_or_foreign_counts() {
    assert_eq!(bound(json!({})), Err(Breach::Unbounded { term: None }));
    assert_eq!(
        bound(terms(json!([{"matchExpressions": [
            {"key": KEY, "operator": "NotIn", "values": ["H100-80GB", "A100-80GB"]}]}]))),
        Err(Breach::Unbounded { term: Some(0) })
    );
    assert_eq!(
        bound(json!({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}})),
        Err(Breach::Unbounded { term: None })
    );
    // One open ORed term opens the Pod.
    assert_eq!(
        bound(terms(json!([
            {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-node"]}]}
        ]))),
        Err(Breach::Unbounded { term: Some(1) })
    );
    // A value outside the tier, or no catalog class at all.
    assert_eq!(
        bound(json!({"nodeSelector": {KEY: "H100-80GB"}})),
        Err(Breach::Unbounded { term: None })
    );
    assert_eq!(
        bound(terms(json!([{"matchExpressions": [
            {"key": KEY, "operator": "In", "values": ["L4-24GB", "bogus"]}]}]))),
        Err(Breach::Unbounded { term: Some(0) })
    );
}

#[test]
fn intersections_and_empty_terms_match_no_outside_node() {
    // Two lists on the class key: a node carries one value, in both.
    assert_eq!(
        bound(terms(json!([{"matchExpressions": [
            {"key": KEY, "operator": "In", "values": ["L4-24GB", "H100-80GB"]},
            {"key": KEY, "operator": "In", "values": ["L4-24GB", "A100-80GB"]}]}]))),
        Ok(())
    );
    // An out-of-tier pin ANDed with the tier (an earlier pass) reaches no node.
    let mut v = terms(
        json!([{"matchExpressions": [{"key": KEY, "operator": "In", "values": ["L4-24GB"]}]}]),
    );
    v["nodeSelector"] = json!({KEY: "H100-80GB"});
    assert_eq!(bound(v), Ok(()));
    // An empty term matches no node.
    assert_eq!(bound(terms(json!([{}]))), Ok(()));
    // `In` without values matches no node either.
    assert_eq!(
        bound(terms(
            json!([{"matchExpressions": [{"key": KEY, "operator": "In", "values": []}]}])
        )),
        Ok(())
    );
}

#[test]
fn node_name_needs_a_known_node_of_the_tier() {
    let nodes = |n: &str| match n {
        "l4-a" => NodeClass::Class("L4-24GB".into()),
        "h100-a" => NodeClass::Class("H100-80GB".into()),
        "cpu-a" => NodeClass::Unclassed,
        _ => NodeClass::Unknown,
    };
    let pinned = |node: &str| spec(json!({"nodeName": node, "nodeSelector": {KEY: "L4-24GB"}}));
    assert_eq!(
        check(&pinned("l4-a"), &bronze(), &catalog(), &nodes),
        Ok(())
    );
    assert_eq!(
        check(&pinned("h100-a"), &bronze(), &catalog(), &nodes),
        Err(Breach::NodeOutside {
            node: "h100-a".into(),
            class: Some("H100-80GB".into())
        })
    );
    assert!(matches!(
        check(&pinned("cpu-a"), &bronze(), &catalog(), &nodes),
        Err(Breach::NodeOutside { class: None, .. })
    ));
    assert_eq!(
        check(&pinned("nowhere"), &bronze(), &catalog(), &NoNodes),
        Err(Breach::UnknownNode("nowhere".into()))
    );
    // A known node does not replace the class constraint.
    assert_eq!(
        check(
            &spec(json!({"nodeName": "l4-a"})),
            &bronze(),
            &catalog(),
            &nodes
        ),
        Err(Breach::Unbounded { term: None })
    );
}

#[test]
fn a_tier_of_every_class_restricts_nothing() {
    let mut all = bronze();
    assert!(restricts(&all, &catalog()));
    all.allowed
        .to_mut()
        .extend(["H100-80GB".to_string(), "A100-80GB".to_string()]);
    assert!(!restricts(&all, &catalog()));
}

#[test]
fn a_node_is_of_the_class_its_class_label_names() {
    let labels = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let l4 = labels(&[(KEY, "L4-24GB"), ("zone", "a")]);
    assert_eq!(
        node_class(Some(&l4), &catalog()),
        NodeClass::Class("L4-24GB".into())
    );
    // Another label (GPU Feature Discovery's product) does not make a node a catalog class.
    let gfd = labels(&[("nvidia.com/gpu.product", "NVIDIA-L4")]);
    assert_eq!(node_class(Some(&gfd), &catalog()), NodeClass::Unclassed);
    assert_eq!(node_class(None, &catalog()), NodeClass::Unclassed);
}
