//! The AdmissionReviews the kube-apiserver would send for an object of the input: a CREATE of the object by the
//! requester (`--user`, `--group`) to the validating webhook, and, for each Pod it describes, the CREATE of that
//! Pod — by the requester for a Pod, by the workload's controller for the Pods of a template, built as the
//! controller builds them (its labels, `generateName`, the controlling owner reference) — to `/mutate-pod` and,
//! patched, to `/validate-pod`. Request uids are derived from where the object came from, so that a run is
//! reproducible (the scorer seeds its decisions with them).

use gpu_admission_core::authority::{Grants, Permission};
use gpu_admission_core::workload::{self, OwnerFacts};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Who sends a request: the requester of the input's objects, or a controller creating Pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub username: String,
    pub groups: Vec<String>,
    /// What RBAC would grant this user in gpu-admission.io (`--grant`; offline there is no apiserver to ask):
    /// none unless stated.
    pub grants: Vec<Permission>,
}

impl User {
    /// The requester when `--user` is not given: an ordinary authenticated user.
    pub fn default_requester() -> Self {
        User {
            username: "gpu-admission-cli".into(),
            groups: vec!["system:authenticated".into()],
            grants: Vec::new(),
        }
    }

    /// What a request by `user` holds offline: this user's stated grants when `user` is this user, nothing
    /// for anyone else (the controller creating a workload's Pods).
    pub fn grants_for(&self, user: &UserInfo) -> Grants {
        if user.username.as_deref() == Some(self.username.as_str()) {
            Grants::new(self.grants.iter().cloned())
        } else {
            Grants::none()
        }
    }

    /// The service account a built-in controller creates Pods as (`kube-system:job-controller`, …); an
    /// operator's custom resource: `<kind>-controller` in the object's namespace.
    fn controller_of(built_in: &str, workload: &Value, namespace: &str) -> Self {
        let kind = workload["kind"].as_str().unwrap_or("");
        let (ns, sa) = match built_in {
            "Job" | "CronJob" => ("kube-system", "job-controller".to_string()),
            "Deployment" | "ReplicaSet" => ("kube-system", "replicaset-controller".to_string()),
            "StatefulSet" => ("kube-system", "statefulset-controller".to_string()),
            "DaemonSet" => ("kube-system", "daemon-set-controller".to_string()),
            "ReplicationController" => ("kube-system", "replication-controller".to_string()),
            _ => (namespace, format!("{}-controller", kind.to_lowercase())),
        };
        User {
            username: format!("system:serviceaccount:{ns}:{sa}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            grants: Vec::new(),
        }
    }
}

/// A uid shaped like the apiserver's (a UUID), derived from `seed`.
pub fn uid_for(seed: &str) -> String {
    let h = hex::encode(Sha256::digest(seed.as_bytes()));
    format!(
        "{}-{}-4{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// `group`, `version` of an `apiVersion` (`""`, `v1` for the core group).
fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// The resource of a kind: the lowercased plural, as for every built-in kind that holds pod templates.
fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The v1 AdmissionReview of a CREATE of `object` in `namespace` by `user` (the object's namespace set).
pub fn create_review(object: &Value, namespace: &str, user: &User, uid: &str) -> Value {
    let mut object = object.clone();
    // A `metadata` that is no object is sent as it is: the webhooks answer such a review as unreadable.
    if let Some(o) = object.as_object_mut() {
        match o.entry("metadata").or_insert_with(|| json!({})) {
            Value::Object(meta) => {
                meta.insert("namespace".into(), json!(namespace));
            }
            meta @ Value::Null => *meta = json!({"namespace": namespace}),
            _ => {}
        }
    }
    let kind = object["kind"].as_str().unwrap_or("Pod").to_string();
    let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
    let (group, version) = group_version(&api_version);
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": plural(&kind)});
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": user.username, "groups": user.groups},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

/// A Pod of a workload's template as its controller creates it, and who creates it.
#[derive(Debug, Clone)]
pub struct ControlledPod {
    pub pod: Value,
    pub creator: User,
}

/// The controlling owner of a template's Pods: the workload itself, except a Deployment's (its ReplicaSet) and a
/// CronJob's (its Job), named as their controllers name them.
fn first_owner(workload: &Value) -> (String, String, String) {
    let name = workload["metadata"]["name"].as_str().unwrap_or("");
    let api_version = workload["apiVersion"].as_str().unwrap_or("");
    match built_in_kind(workload) {
        "Deployment" => (
            "apps/v1".into(),
            "ReplicaSet".into(),
            format!("{name}-{}", &uid_for(name)[..10].replace('-', "")),
        ),
        "CronJob" => ("batch/v1".into(), "Job".into(), format!("{name}-28000000")),
        _ => (
            api_version.into(),
            workload["kind"].as_str().unwrap_or("").into(),
            name.into(),
        ),
    }
}

/// The kind of a built-in workload of `apps` or `batch` (`Job`, `Deployment`, …); `""` for any other (a
/// Volcano `Job` is not a batch Job).
fn built_in_kind(workload: &Value) -> &str {
    let (group, _) = group_version(workload["apiVersion"].as_str().unwrap_or(""));
    match group {
        "apps" | "batch" => workload["kind"].as_str().unwrap_or(""),
        _ => "",
    }
}

/// The Pod `template` (its `metadata` and `spec`) of `workload` becomes: the template's labels and
/// annotations, `generateName: <owner>-`, the controller's owner reference.
pub fn controlled_pod(workload: &Value, template: &Value, namespace: &str) -> ControlledPod {
    let (owner_api, owner_kind, owner_name) = first_owner(workload);
    let mut metadata = match template.get("metadata") {
        Some(m) if m.is_object() => m.clone(),
        _ => json!({}),
    };
    if let Some(m) = metadata.as_object_mut() {
        m.remove("name");
        m.insert("generateName".into(), json!(format!("{owner_name}-")));
        m.insert(
            "ownerReferences".into(),
            json!([{
                "apiVersion": owner_api,
                "kind": owner_kind,
                "name": owner_name,
                "uid": uid_for(&format!("{namespace}/{owner_kind}/{owner_name}")),
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        );
    }
    ControlledPod {
        pod: json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                    "spec": template.get("spec").cloned().unwrap_or(Value::Null)}),
        creator: User::controller_of(built_in_kind(workload), workload, namespace),
    }
}

fn reference(api_version: &str, kind: &str, name: &str, namespace: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid_for(&format!("{namespace}/{kind}/{name}")),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Pods a Job runs at once ([`workload::job_group_size`], the frontend's rule).
fn job_group_size(spec: &Value) -> Option<u32> {
    workload::job_group_size(spec["parallelism"].as_i64(), spec["completions"].as_i64())
}

/// What the frontend's owner caches would say about the first owner of a template's Pods (see [`first_owner`]):
/// a Job's or a ReplicaSet's own controller and group size; `None` for owners it does not read.
pub fn owner_facts(workload: &Value) -> Option<OwnerFacts> {
    let kind = built_in_kind(workload);
    let name = workload["metadata"]["name"].as_str().unwrap_or("");
    let namespace = workload["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &workload["spec"];
    let replicas = || {
        u32::try_from(spec["replicas"].as_i64().unwrap_or(1))
            .ok()
            .filter(|n| *n > 0)
    };
    let (controller, group_size) = match kind {
        "Job" => (None, job_group_size(spec)),
        "CronJob" => (
            Some(reference("batch/v1", "CronJob", name, namespace)),
            job_group_size(&spec["jobTemplate"]["spec"]),
        ),
        "Deployment" => (
            Some(reference("apps/v1", "Deployment", name, namespace)),
            replicas(),
        ),
        "ReplicaSet" => (None, replicas()),
        _ => return None,
    };
    Some(OwnerFacts::Known {
        controller,
        group_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_as_the_apiserver_sends_them() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
            "spec": {"template": {"metadata": {"labels": {"app": "t"}},
                "spec": {"containers": [{"name": "c"}]}}}});
        let r = create_review(&job, "ml", &User::default_requester(), &uid_for("x"));
        let req = &r["request"];
        assert_eq!(
            req["kind"],
            json!({"group": "batch", "version": "v1", "kind": "Job"})
        );
        assert_eq!(req["resource"]["resource"], "jobs");
        assert_eq!(req["object"]["metadata"]["namespace"], "ml");
        assert_eq!(req["name"], "train");
        assert_eq!(req["uid"].as_str().unwrap().len(), 36);
        assert_eq!(uid_for("x"), uid_for("x"));
        assert_ne!(uid_for("x"), uid_for("y"));

        let p = controlled_pod(&job, &job["spec"]["template"], "ml");
        assert_eq!(p.pod["metadata"]["generateName"], "train-");
        assert_eq!(p.pod["metadata"]["labels"]["app"], "t");
        assert_eq!(p.pod["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(p.pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            p.creator.username,
            "system:serviceaccount:kube-system:job-controller"
        );

        let deploy =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let p = controlled_pod(&deploy, &json!({"spec": {}}), "ml");
        let owner = &p.pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ReplicaSet");
        assert!(owner["name"].as_str().unwrap().starts_with("web-"));
        assert_eq!(plural("Status"), "statuses");

        // Group sizes as the owner caches give them; a Volcano Job is no batch Job.
        let facts = |v: Value| match owner_facts(&v) {
            Some(OwnerFacts::Known {
                group_size,
                controller,
            }) => Some((group_size, controller.map(|c| c.kind))),
            _ => None,
        };
        let mut job = job;
        job["spec"]["parallelism"] = json!(4);
        job["spec"]["completions"] = json!(2);
        assert_eq!(facts(job.clone()), Some((Some(2), None)));
        assert_eq!(
            facts(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}})
            ),
            Some((Some(1), Some("Deployment".to_string())))
        );
        job["apiVersion"] = json!("batch.volcano.sh/v1alpha1");
        assert_eq!(facts(job.clone()), None);
        let p = controlled_pod(&job, &json!({"spec": {}}), "ml");
        assert_eq!(
            p.pod["metadata"]["ownerReferences"][0]["apiVersion"],
            "batch.volcano.sh/v1alpha1"
        );
        assert_eq!(
            p.creator.username,
            "system:serviceaccount:ml:job-controller"
        );
    }
}
