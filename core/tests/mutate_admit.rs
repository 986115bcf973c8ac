//! `mutate_pod::admit` over ports that record what the world was asked: a dry run (`sideEffects: None`)
//! reaches the scorer marked as one and leaves the answer cache alone; the same Pod for real is kept for its
//! workload.

use std::cell::RefCell;

use futures_executor::block_on;
use gpu_admission_core::admission::mutate_pod::{
    self, Admitted, AnswerKey, MutatePorts, ScorerOutcome,
};
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Content};
use gpu_admission_core::tier_bound::NoNodes;
use gpu_admission_core::workload::WorkloadRef;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use time::OffsetDateTime;

/// Answers every Score with the tier's class and records what it was sent and what was kept.
struct Recording<'f> {
    facts: Facts<'f>,
    policy: &'f PolicySnapshot,
    sent: RefCell<Vec<ScoreRequest>>,
    kept: RefCell<Vec<AnswerKey>>,
}

impl MutatePorts for Recording<'_> {
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        f(&self.facts)
    }

    async fn workload(&self, _: &Pod, namespace: &str) -> Option<WorkloadRef> {
        Some(WorkloadRef {
            api_group: "batch".into(),
            kind: "Job".into(),
            namespace: namespace.into(),
            name: "train".into(),
            part: None,
            group_size: Some(4),
            index: None,
            via: vec![],
        })
    }

    async fn score(&self, request: ScoreRequest) -> ScorerOutcome {
        let answer = ScoreResponse {
            request_id: request.request_id.clone(),
            policy_version: self.policy.version.clone(),
            accepted_classes: vec![self.policy.class("L4-24GB").unwrap().into()],
            priority_score: 10.0,
            ..Default::default()
        };
        self.sent.borrow_mut().push(request);
        ScorerOutcome::Answered(Box::new(answer))
    }

    fn keep_answer(&self, key: AnswerKey, _: ScoreResponse) {
        self.kept.borrow_mut().push(key);
    }

    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH
    }
}

fn review(dry_run: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-b", "operation": "CREATE", "dryRun": dry_run,
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        }
    }))
    .unwrap()
}

#[test]
fn a_dry_run_reaches_the_scorer_as_one_and_is_not_kept() {
    let policy = PolicySnapshot::from_policy(std::sync::Arc::new(
        gpu_admission_policy::embedded_default().unwrap(),
    ));
    let tier_of = |_: &str| Some("bronze".to_string());
    let grants = Grants::none();
    for dry_run in [true, false] {
        let body = review(dry_run);
        let incoming = review::decode(&body).unwrap();
        let Content::Pod(req) = &incoming.content else {
            panic!("a Pod review")
        };
        let ports = Recording {
            facts: Facts {
                tier_of: &tier_of,
                priority_classes: None,
                claim_templates: &NoClaimTemplates,
                nodes: &NoNodes,
                grants: &grants,
            },
            policy: &policy,
            sent: RefCell::default(),
            kept: RefCell::default(),
        };
        let admitted =
            block_on(mutate_pod::admit(&incoming.uid, req, &policy, &ports)).into_admitted();
        assert!(matches!(admitted, Admitted::Decided(_)), "{admitted:?}");
        let sent = ports.sent.into_inner();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].dry_run, dry_run);
        assert_eq!(sent[0].workload_key, "batch/Job/team-b/train");
        assert_eq!(
            ports.kept.into_inner().len(),
            usize::from(!dry_run),
            "dry run {dry_run}"
        );
    }
}
