//! Finding the Pods an object describes: the object itself when it is a Pod, else every pod template it
//! holds, found generically (the way Kyverno's autogen and kube-linter do): any member named `template` whose
//! value looks like a pod template, `{metadata?, spec: {containers: [...]}}`. That covers Deployments,
//! StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs (`spec.jobTemplate.spec.template`) and custom
//! resources that embed pod templates anywhere (lists of replicas included).

use k8s_openapi::api::core::v1::Pod;
use kube_core::DynamicObject;
use serde_json::{Map, Value};

/// Templates nested deeper than this are not looked for (real objects nest them 2-6 levels deep).
const MAX_DEPTH: usize = 24;

/// One Pod an object describes, with where it sits (`spec.template`, or `Pod` for a Pod itself).
#[derive(Debug)]
pub struct DescribedPod {
    pub path: String,
    pub pod: Pod,
    /// The object is this Pod (not a workload describing it): it has been through `/mutate-pod`.
    pub itself: bool,
}

fn looks_like_pod_template(v: &Value) -> bool {
    v.get("spec")
        .and_then(|s| s.get("containers"))
        .is_some_and(Value::is_array)
}

/// Every pod template under `value`, with its path; a template's own insides are not searched further.
pub fn pod_templates(value: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    walk(value, String::new(), 0, &mut out);
    out
}

fn walk<'v>(value: &'v Value, path: String, depth: usize, out: &mut Vec<(String, &'v Value)>) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            for (k, child) in map {
                let child_path = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if k == "template" && looks_like_pod_template(child) {
                    out.push((child_path, child));
                } else {
                    walk(child, child_path, depth + 1, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                walk(child, format!("{path}[{i}]"), depth + 1, out);
            }
        }
        _ => {}
    }
}

/// A Pod built from a template's `metadata` and `spec` (`None` when they are not a valid Pod).
fn template_pod(template: &Value) -> Option<Pod> {
    let mut pod = Map::new();
    if let Some(m) = template.get("metadata").filter(|m| m.is_object()) {
        pod.insert("metadata".into(), m.clone());
    }
    pod.insert("spec".into(), template.get("spec")?.clone());
    serde_json::from_value(Value::Object(pod)).ok()
}

/// The Pods `object` describes: itself when `is_pod`, else its pod templates. Templates that are not valid
/// pod specs are left to the apiserver's own validation (it refuses them).
pub fn described_pods(object: &DynamicObject, is_pod: bool) -> Vec<DescribedPod> {
    if is_pod {
        let mut pod = Map::new();
        pod.insert(
            "metadata".into(),
            serde_json::to_value(&object.metadata).unwrap_or_default(),
        );
        if let Some(spec) = object.data.get("spec") {
            pod.insert("spec".into(), spec.clone());
        }
        return serde_json::from_value(Value::Object(pod))
            .ok()
            .map(|pod| DescribedPod {
                path: "Pod".into(),
                pod,
                itself: true,
            })
            .into_iter()
            .collect();
    }
    pod_templates(&object.data)
        .into_iter()
        .filter_map(|(path, t)| {
            template_pod(t).map(|pod| DescribedPod {
                path,
                pod,
                itself: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(class: &str) -> Value {
        json!({"metadata": {"labels": {"app": "x"}}, "spec": {"nodeSelector": {"gpu.nvidia.com/class": class},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    }

    fn object(data: Value) -> DynamicObject {
        let mut v = data;
        v["apiVersion"] = json!("x/v1");
        v["kind"] = json!("X");
        v["metadata"] = json!({"name": "o"});
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn workload_kinds_and_custom_resources() {
        let job = object(json!({"spec": {"template": template("H100-80GB")}}));
        let pods = described_pods(&job, false);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].path, "spec.template");
        assert_eq!(
            pods[0]
                .pod
                .spec
                .as_ref()
                .unwrap()
                .node_selector
                .as_ref()
                .unwrap()["gpu.nvidia.com/class"],
            "H100-80GB"
        );

        let cron = object(
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template("L4-24GB")}}}}),
        );
        assert_eq!(
            described_pods(&cron, false)[0].path,
            "spec.jobTemplate.spec.template"
        );

        // A custom resource with a list of replica specs (a training operator's shape).
        let cr = object(json!({"spec": {"replicaSpecs": [
            {"name": "master", "template": template("L4-24GB")},
            {"name": "worker", "template": template("H100-80GB")}]}}));
        let paths: Vec<String> = described_pods(&cr, false)
            .into_iter()
            .map(|p| p.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.replicaSpecs[0].template",
                "spec.replicaSpecs[1].template"
            ]
        );

        // A `template` that is not a pod template, and an object without any.
        let other =
            object(json!({"spec": {"template": {"text": "hello"}}, "data": {"template": "x"}}));
        assert!(described_pods(&other, false).is_empty());
    }

    #[test]
    fn a_pod_is_its_own_description() {
        let mut pod = object(json!({"spec": template("L4-24GB")["spec"].clone()}));
        pod.metadata.annotations = Some([("gpu.mem.gi".to_string(), "70".to_string())].into());
        let pods = described_pods(&pod, true);
        assert_eq!(pods[0].path, "Pod");
        assert_eq!(
            pods[0].pod.metadata.annotations.as_ref().unwrap()["gpu.mem.gi"],
            "70"
        );
    }
}
