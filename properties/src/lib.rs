//! The properties the fuzz targets (`fuzz/`, cargo-fuzz) check on any request body, as plain functions so that
//! a stable `cargo test` replays a seed corpus through exactly the same code. Each one panics when a property
//! does not hold, which is what a fuzzer reports as a crash. Not linked into any service.
//!
//! [`check_mutate`]: the webhook's own decision functions (`review::decode`, `mutate_pod::admit` — plan,
//! decide — `review::encode`) under every scorer outcome — the real answer, the same answer with
//! no feasible class, a timeout (the tier's default placement or a pass-through) — and each patch applied to
//! the review's own `request.object` must succeed and give a Pod that still parses (read whole when the
//! object was a valid Pod; as the webhook reads it when a member it skips was not), bound to its tier; and with
//! a `gpu-admission-ns-lock` Lease in the namespace (a restricted instance's, or a tenant's own), the Pod is
//! not scored and still comes out bound to its tier. [`check_validate`]:
//! `review::decode_object` → `validate_pod::decide` → `review::encode_verdict`, without panicking. The scorer
//! is a parameter: the fuzz target and the replay test pass the real scorer's `Explain` (in process), so the
//! answers are real ones. [`cli_check`]: `gpu-admission check` on any bytes.

pub mod cli_check;
pub mod placement_oracle;
pub mod quota_oracle;
pub mod replicas_oracle;

/// xorshift64*: a reproducible stream of `len` op bytes per seed, no dependency (the oracles' sequences).
pub fn op_stream(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

use gpu_admission_core::admission::mutate_pod::{
    self, Admitted, Capped, Held, MutatePorts, ScorerOutcome, Scoring,
};
use gpu_admission_core::admission::validate_pod;
use gpu_admission_core::authority::Grants;
use gpu_admission_core::facts::Facts;
use gpu_admission_core::ns_lock::NsLock;
use gpu_admission_core::pod::gpu_resources::NoClaimTemplates;
use gpu_admission_core::policy::PolicySnapshot;
use gpu_admission_core::review::{self, Answer, Content};
use gpu_admission_core::tier_bound::{self, NoNodes};
use gpu_admission_proto::limits;
use gpu_admission_proto::scorer::v1::{ScoreRequest, ScoreResponse};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use time::OffsetDateTime;

use futures_executor::block_on;
use gpu_admission_core::workload::WorkloadRef;
use std::cell::RefCell;

/// A scorer: the answer to a request, or why there is none (any error the scorer may answer).
pub type Score<'a> = dyn FnMut(&ScoreRequest) -> Result<ScoreResponse, String> + 'a;

/// What `/mutate-pod` would answer, as far as the properties go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MutateOutcome {
    /// HTTP 400 with this message.
    BadRequest(String),
    /// Allowed without a patch (not ours, unreadable, or every answer tried left the Pod as it is).
    Unchanged { warnings: Vec<String> },
    /// At least one answer gave a patch; each one applied and the result parsed as a Pod. `ops` and
    /// `warnings` are those of the scorer's own answer (the first one tried).
    Patched {
        ops: usize,
        warnings: Vec<String>,
        /// Patches that could not be checked: the object is too deeply nested for a `serde_json::Value`
        /// (a typed Pod skips unknown fields at any depth; a `Value` does not).
        unchecked: usize,
    },
}

/// The tier of a namespace: the policy tier of the same name, else the first tier of the policy.
fn tier_of(policy: &PolicySnapshot) -> impl Fn(&str) -> Option<String> + '_ {
    |ns| {
        policy
            .tiers()
            .iter()
            .find(|t| t.name == ns)
            .or(policy.tiers().first())
            .map(|t| t.name.clone())
    }
}

/// A resource the Pod asks a positive whole number of, under a GPU vendor's domain (a valid resource name:
/// `[A-Za-z0-9._-]+` after the domain) and not one of the policy's `notGpu` exceptions: every such Pod is a
/// GPU Pod, held to its tier. Stated from the vendor domains and the exception list alone, not from core's
/// counting.
fn vendor_gpu_resource(pod: &Pod) -> Option<String> {
    use gpu_admission_policy::gpu_resources::{
        GpuResourceKind, default_rules, lookup, vendor_of_resource,
    };
    let rules = default_rules();
    let not_gpu = |name: &str| {
        lookup(
            &rules,
            name,
            |r| r.name.as_str(),
            |r| r.kind == GpuResourceKind::NotGpu,
        )
        .is_some()
    };
    let spec = pod.spec.as_ref()?;
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        let Some(res) = &c.resources else { continue };
        for (name, q) in [&res.requests, &res.limits].into_iter().flatten().flatten() {
            let under = vendor_of_resource(name).is_some()
                && name.split_once('/').is_some_and(|(_, r)| {
                    r.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                });
            let positive = q.0.parse::<u32>().is_ok_and(|n| n > 0);
            if under && positive && !not_gpu(name) {
                return Some(name.clone());
            }
        }
    }
    None
}

/// A Pod `/mutate-pod` does not score but caps: its priority is lowered to its tier's cap, and that patch
/// applies, touches only the priority fields and leaves a Pod within the cap.
fn check_capped(body: &[u8], capped: Capped) -> MutateOutcome {
    let ops = capped.answer.patch.operations();
    for op in &ops {
        let path = op.path().to_string();
        assert!(
            [
                "/spec/priorityClassName",
                "/spec/priority",
                "/spec/preemptionPolicy"
            ]
            .contains(&path.as_str()),
            "the priority cap touches {path}"
        );
    }
    let mut unchecked = 0;
    match raw_object(body) {
        Some(mut pod) => {
            if let Err(e) = json_patch::patch(&mut pod, &ops) {
                panic!("the cap's patch does not apply: {e}");
            }
            assert_eq!(pod["spec"]["priorityClassName"], capped.cap.as_str());
        }
        None => unchecked += 1,
    }
    MutateOutcome::Patched {
        ops: ops.len(),
        warnings: capped.answer.warnings,
        unchecked,
    }
}

/// `request.object` of the body as JSON text, read without a recursion limit.
#[derive(Deserialize)]
struct ObjectOnly<'a> {
    #[serde(borrow)]
    request: Option<ObjectRequest<'a>>,
}

#[derive(Deserialize)]
struct ObjectRequest<'a> {
    #[serde(borrow)]
    object: Option<&'a RawValue>,
}

fn raw_object(body: &[u8]) -> Option<Value> {
    let outer: ObjectOnly<'_> = serde_json::from_slice(body).ok()?;
    serde_json::from_str(outer.request?.object?.get()).ok()
}

/// `patched` read the way the webhook reads a review's object: put in place of `request.object` and decoded.
/// `None` when the body does not fit a `serde_json::Value` (too deep).
fn read_as_core(body: &[u8], patched: &Value) -> Option<Pod> {
    let mut review: Value = serde_json::from_slice(body).ok()?;
    *review.pointer_mut("/request/object")? = patched.clone();
    let text = serde_json::to_vec(&review).ok()?;
    match review::decode(&text).map(|i| i.content) {
        Ok(Content::Pod(req)) => match req.object {
            Some(pod) => Some(pod),
            None => panic!("the patched object is no longer read as a Pod:\n{patched}"),
        },
        other => panic!("the patched object is no longer read as a Pod ({other:?}):\n{patched}"),
    }
}

/// What the scorer port of one `admit` answers: the real scorer (its answer kept for the variants), or an
/// outcome given.
enum Script<'s, 'a> {
    Scorer(&'s mut Score<'a>),
    Answered(Box<ScoreResponse>),
    Given(ScorerOutcome),
    Used,
}

/// The ports of an offline `admit`: the facts, no owners, a scripted scorer, the epoch as the clock.
struct Scripted<'f, 's, 'a> {
    facts: &'f Facts<'f>,
    outcome: RefCell<Script<'s, 'a>>,
    /// A restricted instance's Lease holds the namespace (a tenant can create one in her own namespace).
    leased: bool,
}

impl MutatePorts for Scripted<'_, '_, '_> {
    fn with_facts<R>(&self, f: impl FnOnce(&Facts<'_>) -> R) -> R {
        f(self.facts)
    }

    async fn workload(&self, _: &Pod, _: &str) -> Option<WorkloadRef> {
        None
    }

    async fn score(&self, request: ScoreRequest) -> ScorerOutcome {
        if let Err(v) = limits::check_score_request(&request) {
            panic!("the frontend would send a request outside the scorer's limits: {v}");
        }
        let mut script = self.outcome.borrow_mut();
        match std::mem::replace(&mut *script, Script::Used) {
            Script::Scorer(score) => match score(&request) {
                Ok(answer) => {
                    *script = Script::Answered(Box::new(answer.clone()));
                    ScorerOutcome::Answered(Box::new(answer))
                }
                Err(e) => {
                    panic!("the scorer refused a request the frontend would send: {e}\n{request:?}")
                }
            },
            Script::Given(outcome) => outcome,
            Script::Answered(_) | Script::Used => panic!("one admission called the scorer twice"),
        }
    }

    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH
    }

    /// A Lease in every namespace when `leased` (a restricted instance's, or a tenant's own), valid for an
    /// hour from [`Self::now`].
    fn ns_lock(&self, _namespace: &str) -> Option<NsLock> {
        self.leased.then(|| NsLock {
            holder: Some("a tenant's Lease".into()),
            renewed: Some(OffsetDateTime::UNIX_EPOCH),
            duration_secs: Some(3600),
        })
    }
}

/// The `/mutate-pod` property for one request body (see the module documentation). Panics when it fails.
pub fn check_mutate(body: &[u8], policy: &PolicySnapshot, score: &mut Score<'_>) -> MutateOutcome {
    let incoming = match review::decode(body) {
        Ok(i) => i,
        Err(bad) => return MutateOutcome::BadRequest(bad.0),
    };
    review::check_uid(&incoming.uid).expect("a decoded uid is a valid uid");
    let echoed: Value = serde_json::from_slice(&review::encode(
        incoming.api_version,
        &incoming.uid,
        &Answer::default(),
    ))
    .expect("the response is JSON");
    assert_eq!(echoed["response"]["uid"], incoming.uid.as_str());
    let req = match &incoming.content {
        Content::Pod(req) => req,
        Content::OtherKind { .. } => return MutateOutcome::Unchanged { warnings: vec![] },
        Content::Unreadable(why) => {
            return MutateOutcome::Unchanged {
                warnings: vec![why.clone()],
            };
        }
    };
    let tier_of = tier_of(policy);
    // No apiserver: nothing is granted.
    let grants = Grants::none();
    // `--no-kube` before a PriorityClass cache: the policy's buckets, else the answer's own class.
    let facts = Facts {
        tier_of: &tier_of,
        priority_classes: None,
        claim_templates: &NoClaimTemplates,
        nodes: &NoNodes,
        grants: &grants,
    };
    // The scorer's answer first (sent through `admit`, so the request is exactly the one the frontend sends),
    // then the same answer with no feasible class, an answer meant for another Pod (every class of the catalog
    // accepted, as an admin's Pod or a stale or reused workload answer could carry), and a failed call (the
    // tier's default placement under `TierDefault`, else a pass-through).
    let first_call = Scripted {
        facts: &facts,
        outcome: RefCell::new(Script::Scorer(score)),
        leased: false,
    };
    let real = match block_on(mutate_pod::admit(&incoming.uid, req, policy, &first_call))
        .into_admitted()
    {
        Admitted::Decided(d) => d,
        Admitted::Capped(capped) => return check_capped(body, capped),
        Admitted::Elsewhere(_) => {
            unreachable!("these ports hold no Lease for the namespace")
        }
        Admitted::Skipped(skip) => {
            if skip == mutate_pod::triage::Skip::NoGpu
                && let Some(name) = req.object.as_ref().and_then(vendor_gpu_resource)
            {
                panic!(
                    "a Pod asking for {name}, a resource under a GPU vendor's domain, is not held to its tier"
                );
            }
            return MutateOutcome::Unchanged { warnings: vec![] };
        }
    };
    let Script::Answered(answer) = first_call.outcome.into_inner() else {
        unreachable!("a decided Pod asked the scorer once");
    };
    let mut for_another_pod = answer.clone();
    for_another_pod.accepted_classes = policy.catalog().iter().map(Into::into).collect();
    let mut infeasible = answer;
    infeasible.accepted_classes.clear();
    infeasible.infeasible_reason = "no class fits".into();
    let mut decided = vec![real];
    for outcome in [
        ScorerOutcome::Answered(infeasible),
        ScorerOutcome::Answered(for_another_pod),
        ScorerOutcome::TimedOut { budget_ms: 200 },
    ] {
        let given = Scripted {
            facts: &facts,
            outcome: RefCell::new(Script::Given(outcome)),
            leased: false,
        };
        match block_on(mutate_pod::admit(&incoming.uid, req, policy, &given)).into_admitted() {
            Admitted::Decided(d) => decided.push(d),
            other => panic!("the same Pod was decided, then not: {other:?}"),
        }
    }
    // A Lease in the namespace (a restricted instance's, or a tenant's own fake one): not scored, and the
    // stored Pod still held to its tier, as it came or as this instance bound it.
    let leased = Scripted {
        facts: &facts,
        outcome: RefCell::new(Script::Used),
        leased: true,
    };
    // The Lease is looked up by the request's namespace (the apiserver always sends it for a Pod).
    let held = match req.namespace {
        None => None,
        Some(_) => match block_on(mutate_pod::admit(&incoming.uid, req, policy, &leased))
            .into_admitted()
        {
            Admitted::Elsewhere(e) => Some(e.held),
            other => panic!("a Pod of a leased namespace was not left to its holder: {other:?}"),
        },
    };
    let object = raw_object(body);
    if let (Some(pod), Some(held)) = (&object, &held) {
        let ops = match held {
            Held::Bound(d) => d.answer.patch.operations(),
            Held::Capped(c) => c.answer.patch.operations(),
            Held::AsItCame => Vec::new(),
        };
        let mut pod = pod.clone();
        json_patch::patch(&mut pod, &ops).expect("the held Pod's patch applies");
        if let Ok(patched) = serde_json::from_value::<Pod>(pod) {
            assert_bound_by_mutation(&patched, &decided[0].scoring, policy);
        }
    }
    let (mut first, mut unchecked, mut any) = (None, 0, false);
    for d in &decided {
        let (decision, scoring) = (&d.decision, &d.scoring);
        let ops = &decision.answer.patch;
        first.get_or_insert((ops.len(), decision.answer.warnings.clone()));
        if ops.is_empty() {
            continue;
        }
        any = true;
        let Some(mut pod) = object.clone() else {
            unchecked += 1;
            continue;
        };
        if let Err(e) = json_patch::patch(&mut pod, &ops.operations()) {
            panic!(
                "the patch does not apply: {e}\npatch: {}\nobject: {}",
                ops.as_json(),
                object.as_ref().map(Value::to_string).unwrap_or_default()
            );
        }
        match serde_json::from_value::<Pod>(pod.clone()) {
            Ok(patched) => assert_bound_by_mutation(&patched, scoring, policy),
            Err(e) => {
                // A member core does not read (managedFields, a container's env...) that is not a valid Pod
                // member: the apiserver never sends such an object, as it decodes it first. The patch must then
                // still bind the object as core reads it; a valid object must stay valid.
                let whole = object
                    .as_ref()
                    .map(|o| serde_json::from_value::<Pod>(o.clone()));
                if matches!(whole, Some(Ok(_))) {
                    panic!("the patched object is not a Pod: {e}\n{pod}");
                }
                match read_as_core(body, &pod) {
                    Some(patched) => assert_bound_by_mutation(&patched, scoring, policy),
                    None => unchecked += 1,
                }
            }
        }
    }
    let (ops, warnings) = first.unwrap_or_default();
    if any {
        MutateOutcome::Patched {
            ops,
            warnings,
            unchecked,
        }
    } else {
        MutateOutcome::Unchanged { warnings }
    }
}

/// Mutation establishes the class half of the tier invariant that validation demands: a non-admin's patched
/// GPU Pod of a tier that restricts classes is held to the tier's classes on every way of scheduling it, by
/// core's reading ([`tier_bound::class_bound`]) and by the independent [`placement_oracle`].
fn assert_bound_by_mutation(patched: &Pod, scoring: &Scoring<'_>, policy: &PolicySnapshot) {
    let c = &scoring.candidate;
    let Some(rules) = policy.tier_rules(&c.tier, c.namespace) else {
        return;
    };
    if scoring.admin || !tier_bound::restricts(&rules, policy.catalog()) {
        return;
    }
    let spec = patched.spec.clone().unwrap_or_default();
    if let Err(breach) = tier_bound::class_bound(&spec, &rules, policy.catalog()) {
        panic!(
            "a mutated Pod of tier {} is not bound to it: {}\n{}",
            rules.tier,
            breach.describe(),
            serde_json::to_string(patched).unwrap_or_default()
        );
    }
    // The same, asked of the independent placement oracle over a Node of every class of the shipped policy
    // (and a CPU Node, and an H100 Node without the class label): no reachable Node outside the tier.
    static NODES: std::sync::OnceLock<Vec<Node>> = std::sync::OnceLock::new();
    let nodes = NODES.get_or_init(placement_oracle::default_policy_nodes);
    for name in placement_oracle::reachable_nodes(patched, nodes) {
        let class = nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(placement_oracle::class_label);
        if !class.is_some_and(|c| rules.allows(c)) {
            panic!(
                "a mutated Pod of tier {} reaches node {name} (class {class:?}):\n{}",
                rules.tier,
                serde_json::to_string(patched).unwrap_or_default()
            );
        }
    }
}

/// The `/validate-pod` property for one request body: any body is answered (a verdict or a 400) without a
/// panic. Returns the encoded answer, or the 400's message.
pub fn check_validate(body: &[u8], policy: &PolicySnapshot) -> Result<Vec<u8>, String> {
    let incoming = review::decode_object(body).map_err(|e| e.0)?;
    let verdict = match &incoming.request {
        Err(why) => review::Verdict {
            denied: None,
            warnings: vec![why.clone()],
        },
        Ok(req) => {
            let tier_of = tier_of(policy);
            let grants = Grants::none();
            let facts = Facts {
                tier_of: &tier_of,
                priority_classes: None,
                claim_templates: &NoClaimTemplates,
                nodes: &NoNodes,
                grants: &grants,
            };
            validate_pod::decide(req, policy, &facts).1
        }
    };
    Ok(review::encode_verdict(
        incoming.api_version,
        &incoming.uid,
        &verdict,
    ))
}
