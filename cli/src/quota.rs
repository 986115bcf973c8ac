//! `gpu-admission quota usage -f FILES`: a cluster's GPU quota usage, offline, from what `kubectl get
//! namespaces,nodes,pods -A -o json` prints (any Lists or documents holding Namespaces, Nodes and Pods). Each
//! Pod is counted as the frontend's Pod watch counts it (core's `quota::demand::holds_quota` and
//! `quota::of_pod_in`: until it has finished or its deletion's grace period has passed, against its Node's
//! class once bound), and the
//! usage is shown against the policy's limits (core's `quota::figures`, what the frontend publishes as
//! `gpu_admission_quota_gpus`). `-o yaml` prints the usage snapshot `gpu-admission check --usage` reads.
//! DRA claims are not in the input: a Pod's GPUs through ResourceClaims count nothing here.

use std::collections::BTreeMap;
use std::fmt::Write;

use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::figures::{Figure, figures};
use gpu_admission_core::quota::{Usage, demand, of_pod_in};
use gpu_admission_core::tier_bound::node_class;
use gpu_admission_policy::quotas::format_gpus;
use k8s_openapi::api::core::v1::Pod;

use crate::load::{Input, Tiers};

/// What the input held and what it counts.
#[derive(Debug, Default)]
pub struct Counted {
    pub usage: Usage,
    /// Pods read (GPU or not).
    pub pods: usize,
    /// Documents that look like Pods but do not read as one.
    pub unreadable: Vec<String>,
}

/// The usage the input's Pods hold, with tiers from the input's Namespaces (and `tiers`' explicit ones).
pub fn count(inputs: &[Input], tiers: &Tiers, snapshot: &PolicySnapshot) -> Counted {
    let mut out = Counted::default();
    let mut node_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for i in inputs {
        if let Input::Ignored(s) = i
            && s.value["kind"] == "Node"
            && let Some(name) = s.value["metadata"]["name"].as_str()
        {
            let labels = serde_json::from_value(s.value["metadata"]["labels"].clone());
            node_labels.insert(name.to_string(), labels.unwrap_or_default());
        }
    }
    let tier_of = |ns: &str| tiers.tier_of(ns);
    let nodes = |n: &str| node_class(node_labels.get(n), snapshot.catalog());
    let grants = Grants::none();
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &nodes,
        grants: &grants,
    };
    // The clock a terminating Pod's grace period is read against.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for i in inputs {
        let Input::Object(s) = i else { continue };
        if s.value["kind"] != "Pod" {
            continue;
        }
        out.pods += 1;
        let Ok(pod) = serde_json::from_value::<Pod>(s.value.clone()) else {
            out.unreadable.push(s.origin.clone());
            continue;
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        if !demand::holds_quota(&pod, now_ms) {
            continue;
        }
        if let Some((tier, ns, counted)) = of_pod_in(&pod, namespace, snapshot, &facts) {
            out.usage.add(&tier, &ns, &counted, 1);
        }
    }
    out
}

/// The usage against the limits, one line per scope and class: `TIER NAMESPACE CLASS USED MIN MAX`.
pub fn table(snapshot: &PolicySnapshot, usage: &Usage) -> String {
    let Some(policy) = snapshot.policy.as_deref() else {
        return "no policy\n".into();
    };
    let rows: Vec<Figure> = figures(policy, usage);
    if rows.is_empty() {
        return "the policy has no GPU quotas\n".into();
    }
    let mut out = format!(
        "{:<10} {:<24} {:<14} {:>8} {:>8} {:>8}\n",
        "TIER", "NAMESPACE", "CLASS", "USED", "MIN", "MAX"
    );
    for f in rows {
        let (min, max) = match f.limit {
            Some(l) => (format_gpus(l.min), l.max.map_or("-".into(), format_gpus)),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:<10} {:<24} {:<14} {:>8} {:>8} {:>8}",
            f.tier,
            if f.namespace.is_empty() {
                "(tier)"
            } else {
                &f.namespace
            },
            f.class.as_deref().unwrap_or("(total)"),
            format_gpus(f.used),
            min,
            max
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::classify;
    use serde_json::json;

    const QUOTAS: &str = "
quotas:
  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 2, max: 4 } }
      namespaces:
        - { namespace: team, classes: { L4-24GB: { max: 3 } } }
";

    fn snapshot() -> PolicySnapshot {
        let text = format!("{}{QUOTAS}", gpu_admission_policy::DEFAULT_POLICY_YAML);
        crate::engine::snapshot_of(gpu_admission_policy::parse(&text, "p.yaml").unwrap())
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, gpus: u32) -> serde_json::Value {
        let mut spec = json!({"containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
            "spec": spec, "status": {"phase": phase}})
    }

    #[test]
    fn running_and_pending_pods_count_on_their_node_s_class_finished_ones_do_not() {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team", "labels": {"tenant.kubenexus.io/tier": "bronze"}}},
            {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "l4-1", "labels": {"gpu.nvidia.com/class": "L4-24GB"}}},
            pod("running", Some("l4-1"), "Running", 2),
            pod("done", Some("l4-1"), "Succeeded", 4),
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": "team"},
                "spec": {"containers": [{"name": "c", "image": "x"}]}},
        ]});
        let mut inputs = Vec::new();
        classify(list, "list".into(), &mut inputs);
        let mut tiers = Tiers::default();
        tiers.learn(&inputs, gpu_admission_core::names::DEFAULT_TIER_LABEL);
        let snap = snapshot();
        let counted = count(&inputs, &tiers, &snap);
        assert_eq!(counted.pods, 3);
        assert!(counted.unreadable.is_empty());
        let team = &counted.usage.namespaces["team"];
        assert_eq!((team.tier.as_str(), team.total), ("bronze", 2000));
        assert_eq!(team.classes["L4-24GB"], 2000);
        let table = table(&snap, &counted.usage);
        let lines: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(
            lines.contains(&vec!["bronze", "(tier)", "L4-24GB", "2", "2", "4"]),
            "{table}"
        );
        assert!(
            lines.contains(&vec!["bronze", "team", "L4-24GB", "2", "0", "3"]),
            "{table}"
        );
        assert!(
            lines.contains(&vec!["bronze", "team", "(total)", "2", "-", "-"]),
            "{table}"
        );
    }
}
