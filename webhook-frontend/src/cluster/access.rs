//! The requester's powers over the tier rules, asked of the apiserver with SubjectAccessReviews
//! (`gpu_admission_core::authority`): only those a decision needs, each answer cached briefly per requester.
//! A power granted is asked again as its wildcard probes (unless the requester is `system:masters`): one
//! granted only through a `*` is not held. A review that cannot be made (no Kubernetes API, the apiserver
//! unreachable, an error) grants nothing, and a probe that cannot be made counts as granted: a rule change is
//! then refused and a workload held to its tier.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpu_admission_core::authority::{Answer, Grants, Permission, Question, is_superuser};
use gpu_admission_core::policy::PolicySnapshot;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// How long an answer is reused: a RoleBinding removed takes at most this long to count.
const ANSWER_TTL: Duration = Duration::from_secs(10);
/// How long a SubjectAccessReview may take before it counts as refused.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(2);
/// Answers kept at most (the cache is emptied when full; it refills from the apiserver).
const MAX_ANSWERS: usize = 10_000;

/// Who asks, as the cache keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: String,
    uid: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    question: Question,
}

/// SubjectAccessReviews with a short cache.
pub(crate) struct AccessReviews {
    client: Option<kube::Client>,
    answers: Mutex<HashMap<Key, (bool, Instant)>>,
}

impl AccessReviews {
    /// `None`: no Kubernetes API (`--no-kube`): nothing is granted.
    pub(crate) fn new(client: Option<kube::Client>) -> Self {
        Self {
            client,
            answers: Mutex::default(),
        }
    }

    /// The powers among `wanted` that `user` holds.
    pub(crate) async fn grants(&self, user: &UserInfo, wanted: &[Permission]) -> Grants {
        let mut answers = Vec::new();
        for p in wanted {
            answers.push((p.clone(), self.answer(user, p).await));
        }
        Grants::from_answers(answers)
    }

    /// The power's question, then (granted, not a superuser) its probes until one is granted.
    async fn answer(&self, user: &UserInfo, p: &Permission) -> Answer {
        let granted = self.allowed(user, &p.question(), false).await;
        let superuser = is_superuser(user.groups.as_deref().unwrap_or_default());
        let mut through = None;
        if granted && !superuser {
            for (wildcard, probe) in p.wildcard_probes() {
                if self.allowed(user, &probe, true).await {
                    through = Some(wildcard);
                    break;
                }
            }
        }
        let answer = Answer::judge(granted, superuser, through);
        if let Answer::ThroughWildcard(w) = answer {
            tracing::info!(user = ?user.username, permission = %p.describe(), wildcard = w.field(), "power granted only through a wildcard rule: not held");
        }
        answer
    }

    /// `exempt tiers/<tier>` for the tier `namespace` is held to (none when it has no tier).
    pub(crate) async fn exemption(
        &self,
        user: &UserInfo,
        tier: Option<String>,
        namespace: &str,
        policy: &PolicySnapshot,
    ) -> Grants {
        let Some(rules) =
            tier.and_then(|t| policy.tier_rules(&t, namespace).map(|r| r.tier.to_string()))
        else {
            return Grants::none();
        };
        self.grants(user, &[Permission::Exempt(rules)]).await
    }

    /// The apiserver's answer to `q`; `on_failure` when it cannot be had (a probe fails closed: granted).
    async fn allowed(&self, user: &UserInfo, q: &Question, on_failure: bool) -> bool {
        let Some(client) = &self.client else {
            return on_failure;
        };
        let key = Key {
            user: user.username.clone().unwrap_or_default(),
            uid: user.uid.clone().unwrap_or_default(),
            groups: user.groups.clone().unwrap_or_default(),
            extra: user.extra.clone().unwrap_or_default(),
            question: q.clone(),
        };
        if let Some((answer, at)) = self.cache().get(&key)
            && at.elapsed() < ANSWER_TTL
        {
            return *answer;
        }
        // On the heap: the client's request future is large, and every caller's future would hold (and copy)
        // it by value, on every admission, asked or not.
        let asked = Box::pin(review(client, &key));
        let answer = match tokio::time::timeout(REVIEW_TIMEOUT, asked).await {
            Ok(Ok(allowed)) => allowed,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, question = ?q, answered = on_failure, "SubjectAccessReview failed");
                return on_failure;
            }
            Err(_) => {
                tracing::warn!(question = ?q, answered = on_failure, "SubjectAccessReview timed out");
                return on_failure;
            }
        };
        let mut cache = self.cache();
        if cache.len() >= MAX_ANSWERS {
            cache.clear();
        }
        cache.insert(key, (answer, Instant::now()));
        answer
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (bool, Instant)>> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One SubjectAccessReview: may `key`'s user do `key.question`?
async fn review(client: &kube::Client, key: &Key) -> kube::Result<bool> {
    let q = &key.question;
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(key.user.clone()).filter(|u| !u.is_empty()),
            uid: Some(key.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(key.groups.clone()),
            extra: Some(key.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(q.group.to_string()),
                resource: Some(q.resource.to_string()),
                verb: Some(q.verb.to_string()),
                name: q.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &sar)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
