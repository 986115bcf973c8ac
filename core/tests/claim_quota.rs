//! `/validate-pod`'s quota step on a ResourceClaim CREATE: a claim that a stored Pod already names (deleted
//! and created again, or created after its Pod) is that Pod asking again. A bronze namespace with an L4 `max`
//! of 2 runs a Pod holding 1 GPU of its own and naming the claim `gpus` (a NIC claim when it was admitted):
//! the claim created again as 4 GPUs is denied with the quota's message (the Pod, without what it holds now,
//! asking for 5); as 1 GPU it is admitted; a claim no
//! stored Pod names is not a quota question here.

use std::sync::Arc;

use futures_executor::block_on;
use gpu_admission_core::admission::validate_pod::{self, QuotaStep, Reservation, ValidatePorts};
use gpu_admission_core::authority::{Grants, Permission};
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::quota::{self, Usage, demand::Counted, ledger::Reserving};
use gpu_admission_core::review;
use gpu_admission_core::tier_bound::NoNodes;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

const NS: &str = "team-a";

struct Ports {
    usage: Usage,
    /// The Pods the watch holds.
    stored: Vec<Pod>,
    /// The powers the requester holds.
    holds: Vec<Permission>,
}

impl ValidatePorts for Ports {
    fn with_facts<R>(&self, grants: &Grants, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        let tier_of = |_: &str| Some("bronze".to_string());
        f(&Facts {
            tier_of: &tier_of,
            priority_classes: None,
            claim_templates: &NoClaimTemplates,
            nodes: &NoNodes,
            grants,
        })
    }

    async fn grants(&self, _: &UserInfo, wanted: &[Permission]) -> Grants {
        Grants::new(wanted.iter().filter(|p| self.holds.contains(p)).cloned())
    }

    fn holds_quotas(&self) -> bool {
        true
    }

    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::UNIX_EPOCH
    }

    fn pods_served_by(&self, namespace: &str, claim: &quota::ClaimRef) -> Vec<Pod> {
        let ours = |p: &&Pod| p.metadata.namespace.as_deref() == Some(namespace);
        self.stored
            .iter()
            .filter(ours)
            .filter(|p| claim.serves(p))
            .cloned()
            .collect()
    }

    async fn reserve(
        &self,
        _: &quota::Ask,
        _: &Reserving<'_>,
        keep: bool,
        decide: &(dyn Fn(&Usage) -> Reservation + Sync),
    ) -> Result<Option<quota::Decision>, validate_pod::QuotaUnavailable> {
        assert!(!keep, "a claim of a stored Pod reserves nothing");
        Ok(decide(&self.usage).decision())
    }
}

fn claim_create(name: &str, count: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
            "namespace": NS, "operation": "CREATE", "name": name,
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "l4-24gb.gpu-admission.io", "count": count}}]}}}
        }
    }))
    .unwrap()
}

fn answer(name: &str, count: u32) -> (Option<String>, bool) {
    answer_to(&claim_create(name, count), Vec::new())
}

fn answer_to(body: &[u8], holds: Vec<Permission>) -> (Option<String>, bool) {
    let text = format!(
        "{}\nquotas:\n  tiers:\n    - tier: bronze\n      classes: {{ L4-24GB: {{ max: 2 }} }}\n",
        gpu_admission_policy::DEFAULT_POLICY_YAML.replace("mode: Warn", "mode: Enforce")
    );
    let policy = PolicySnapshot::from_policy(Arc::new(
        gpu_admission_policy::parse(&text, "p.yaml").unwrap(),
    ));
    let running = |name: &str, uid: &str, claim: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS, "uid": uid},
            "spec": {"nodeSelector": {"gpu.nvidia.com/class": "L4-24GB"},
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                "resourceClaims": [claim]}
        }))
        .unwrap()
    };
    // One names the claim `gpus`; the other a template the watch cannot read (yet), whose claim the
    // ResourceClaim controller makes.
    let stored = vec![
        running(
            "trainer",
            "pod-1",
            json!({"name": "extra", "resourceClaimName": "gpus"}),
        ),
        running(
            "worker",
            "pod-2",
            json!({"name": "gpu", "resourceClaimTemplateName": "later"}),
        ),
    ];
    // What the watch counted: the trainer's own GPU (the claim was a NIC then); the worker is another
    // namespace's business here (its own GPU is left out so that the trainer's arithmetic reads as before).
    let mut usage = Usage::default();
    let one = Counted {
        classes: [("L4-24GB".to_string(), 1000)].into(),
        total: 1000,
    };
    usage.add("bronze", NS, &one, 1);
    let ports = Ports {
        usage,
        stored,
        holds,
    };
    let incoming = review::decode_object(body).unwrap();
    let req = incoming.request.unwrap();
    let validated = block_on(validate_pod::admit(&req, &policy, &ports));
    let decided = matches!(validated.quota, Some(QuotaStep::Decided { .. }));
    (validated.verdict.denied, decided)
}

#[test]
fn a_claim_a_running_pod_names_is_that_pod_asking_again() {
    let (denied, decided) = answer("gpus", 4);
    let message = denied.expect("4 more GPUs for a Pod holding 1, against a max of 2: denied");
    assert!(decided);
    assert!(
        message.contains("holds 0 of its 2 L4-24GB GPUs; this Pod asks for 5"),
        "{message}"
    );
    assert!(
        message.contains("ResourceClaim team-a/gpus is named by a Pod"),
        "{message}"
    );
    // One more GPU: 2 of 2, admitted.
    assert_eq!(answer("gpus", 1), (None, false));
    // A claim no stored Pod names: its Pod's CREATE is where it is counted.
    assert_eq!(answer("other", 4), (None, false));
}

/// The ResourceClaim controller's claim for a Pod's template (its controlling owner the Pod, the annotation
/// naming the Pod's entry) is that Pod asking again with the claim, whatever the template said when the Pod
/// was counted: made as 4 GPUs it is denied; for a Pod the watch does not hold, or not controlled by its
/// Pod, it is no quota question here.
#[test]
fn a_claim_made_from_a_pods_template_is_that_pod_asking_again() {
    let made = |count: u32, owner_uid: &str, controller: bool| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&claim_create("worker-gpu-x7k2p", count)).unwrap();
        let meta = &mut v["request"]["object"]["metadata"];
        meta["annotations"] = json!({"resource.kubernetes.io/pod-claim-name": "gpu"});
        meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "worker",
            "uid": owner_uid, "controller": controller, "blockOwnerDeletion": true}]);
        serde_json::to_vec(&v).unwrap()
    };
    let (denied, decided) = answer_to(&made(4, "pod-2", true), Vec::new());
    let message = denied.expect("4 GPUs through the template's claim, against a max of 2: denied");
    assert!(decided);
    assert!(message.contains("this Pod asks for 5"), "{message}");
    assert_eq!(
        answer_to(&made(4, "pod-9", true), Vec::new()),
        (None, false)
    );
    assert_eq!(
        answer_to(&made(4, "pod-2", false), Vec::new()),
        (None, false)
    );
}

/// A GPU claim asking for `adminAccess: true` needs `use adminaccess`, whatever the tier allows (in tier: one
/// L4 GPU of the catalog's class); without it denied, with it answered as any claim; a claim on a DeviceClass
/// that is no GPU's asks no power.
#[test]
fn a_gpu_claim_with_admin_access_needs_its_power() {
    let with = |class: &str| {
        let mut v: serde_json::Value = serde_json::from_slice(&claim_create("admin", 1)).unwrap();
        let exactly = &mut v["request"]["object"]["spec"]["devices"]["requests"][0]["exactly"];
        exactly["adminAccess"] = json!(true);
        exactly["deviceClassName"] = json!(class);
        serde_json::to_vec(&v).unwrap()
    };
    for class in ["l4-24gb.gpu-admission.io", "gpu.nvidia.com"] {
        let (denied, _) = answer_to(&with(class), Vec::new());
        let message = denied.unwrap_or_else(|| panic!("{class}: admitted without the power"));
        assert!(
            message.contains(
                "alice creates ResourceClaim team-a/admin asking for GPUs with adminAccess: true"
            ) && message.contains("needs use adminaccess (gpu-admission.io)"),
            "{message}"
        );
    }
    let (denied, _) = answer_to(
        &with("l4-24gb.gpu-admission.io"),
        vec![Permission::AdminAccess],
    );
    assert_eq!(denied, None);
    let (denied, _) = answer_to(&with("nic.example.com"), Vec::new());
    assert_eq!(denied, None);
}
