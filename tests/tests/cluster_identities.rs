//! The control plane of the real-cluster tier acts with its real identities, so that what it creates meets
//! admission as in a cluster: a probe ValidatingAdmissionPolicy denies every ResourceClaim and every Pod
//! labelled `probe: identity`, naming the requester; then
//!
//! - a Pod asking for `example.com/h100` (a DeviceClass's `extendedResourceName`, no claim of its own) makes
//!   the scheduler create its ResourceClaim at PreBind: denied as `system:kube-scheduler`, not in
//!   `system:masters` (which our tier check exempts), and the Pod stays Pending;
//! - a Job's Pod is created by the job controller as `system:serviceaccount:kube-system:job-controller`.

use std::path::Path;
use std::time::Duration;

use gpu_admission_tests::cluster::{Components, LocalCluster, eventually, kubectl};

const PROBE: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: identity-probe}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [resource.k8s.io], apiVersions: [v1], operations: [CREATE], resources: [resourceclaims]}
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  matchConditions:
  - name: claims-and-probe-pods
    expression: "object.kind == 'ResourceClaim' || (has(object.metadata.labels) && 'probe' in object.metadata.labels)"
  validations:
  - expression: "false"
    messageExpression: "'identity probe: ' + object.kind + ' created by ' + request.userInfo.username + ' groups ' + request.userInfo.groups.join(',')"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: identity-probe}
spec: {policyName: identity-probe, validationActions: [Deny]}
---
apiVersion: v1
kind: Node
metadata:
  name: probe-node
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: probe-node}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: h100.example.com}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.nvidia.com'"}}]
  extendedResourceName: example.com/h100
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: probe-node-gpus}
spec:
  nodeName: probe-node
  driver: gpu.nvidia.com
  pool: {name: probe-node, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu-0, attributes: {productName: {string: "NVIDIA H100"}}}]
"#;

fn apply(kc: &Path, yaml: &str) -> gpu_admission_tests::cluster::KubectlAnswer {
    kubectl(kc, None, &[], &["apply", "-f", "-"], yaml)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_and_the_controllers_meet_admission_as_themselves() {
    let Some(cluster) = LocalCluster::start_with(Components::ALL)
        .await
        .expect("the local control plane starts")
    else {
        return;
    };
    let kc = cluster.kubeconfig();
    let a = apply(kc, PROBE);
    assert!(a.ok, "{}", a.stderr);
    // The apiserver loads a new policy within seconds: wait until it denies the admin's own claim.
    let claim = |i: u32| {
        format!(
            "{{\"apiVersion\": \"resource.k8s.io/v1\", \"kind\": \"ResourceClaim\", \"metadata\": {{\"name\": \"c{i}\", \"namespace\": \"default\"}}, \
             \"spec\": {{\"devices\": {{\"requests\": [{{\"name\": \"g\", \"exactly\": {{\"deviceClassName\": \"h100.example.com\"}}}}]}}}}}}"
        )
    };
    assert!(
        eventually(Duration::from_secs(30), |i| {
            kubectl(kc, None, &[], &["create", "-f", "-"], &claim(i))
                .stderr
                .contains("identity probe: ResourceClaim created by admin")
        }),
        "the probe policy never took effect"
    );
    let pod = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "extended", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"example.com/h100": "1"}}}]}}"#;
    let a = kubectl(kc, None, &[], &["create", "-f", "-"], pod);
    assert!(a.ok, "{}", a.stderr);
    let job = r#"{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"template": {"metadata": {"labels": {"probe": "identity"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}"#;
    let a = kubectl(kc, None, &[], &["create", "-f", "-"], job);
    assert!(a.ok, "{}", a.stderr);
    let logged = |component: &str, needle: &str| {
        eventually(Duration::from_secs(60), |_| {
            std::fs::read_to_string(cluster.run_dir().join(format!("{component}.log")))
                .is_ok_and(|log| log.contains(needle))
        })
    };
    assert!(
        logged(
            "scheduler",
            "identity probe: ResourceClaim created by system:kube-scheduler groups system:authenticated\""
        ),
        "the scheduler's claim did not meet admission as system:kube-scheduler alone:\n{}",
        cluster.log_tail("scheduler", 20)
    );
    assert!(
        logged(
            "controller-manager",
            "identity probe: Pod created by system:serviceaccount:kube-system:job-controller"
        ),
        "the Job's Pod did not meet admission as the job controller's ServiceAccount:\n{}",
        cluster.log_tail("controller-manager", 20)
    );
    let phase = kubectl(
        kc,
        None,
        &[],
        &["get", "pod", "extended", "-o", "jsonpath={.status.phase}"],
        "",
    );
    assert_eq!(phase.stdout, "Pending", "refused at PreBind, the Pod waits");
}
