//! One object of the input through the webhooks, in the apiserver's order: the object's CREATE to
//! `/validate-pod` (a workload: its pod templates are checked), then for each Pod it describes the Pod's CREATE
//! to `/mutate-pod`, the patch applied, and the patched Pod to `/validate-pod`. The verdict is the worst
//! answer: denied when any webhook denies, warned when any answer carries a warning.

use std::collections::BTreeMap;

use gpu_admission_core::authority::Permission;
use gpu_admission_core::names::decision;
use gpu_admission_core::placement::reachable_classes;
use gpu_admission_core::pod::templates::pod_templates;
use gpu_admission_core::policy::TierScope;
use gpu_admission_core::workload::OwnerFacts;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::Value;

use crate::engine::{BadRequest, Engine, Exchange, Mutation, Validation};
use crate::floor::FloorAnswer;
use crate::load::{Input, Source};
use crate::review::{controlled_pod, create_review, owner_facts, uid_for};

/// The answer a user would see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allowed,
    Warned,
    Denied,
    /// The review itself is unreadable (HTTP 400).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Warned => "warned",
            Verdict::Denied => "denied",
            Verdict::Error => "error",
        }
    }
}

/// What `/mutate-pod` did to one Pod (a Pod, or a Pod of a template), read from the patched Pod.
#[derive(Debug, Clone, Serialize)]
pub struct PodDecision {
    /// `Pod`, or where the template sits (`spec.template`).
    pub path: String,
    /// `mutated`, `tier_default`, `passed_through` or `skipped`.
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<&'static str>,
    /// The `gpu-admission.io/gpu-class` annotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_class: Option<String>,
    /// The catalog classes the patched Pod can be scheduled onto (empty: any node).
    pub classes: Vec<String>,
    /// The `gpu-admission.io/placement` annotation (who places the Pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Our annotations the patch added or changed.
    pub annotations: BTreeMap<String, String>,
    pub patch_ops: usize,
    /// What the floor in the apiserver alone answers for the Pod as submitted (every gpu-admission process
    /// down); `None` when the policy cannot be rendered as a floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorAnswer>,
    /// What the floor answers for the mutated Pod (gpu-admission up: the mutation runs first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_after_mutation: Option<FloorAnswer>,
}

/// What decided the tier a namespace is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TierFrom {
    /// Its tier label names a tier of the policy.
    Label,
    /// It is untiered (no tier label, an empty one, or one naming no tier of the policy) and the policy holds
    /// such namespaces to its `defaultTier` (`untieredNamespaces: DefaultTier`).
    Default,
}

/// Everything the webhooks answered for one object of the input.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// `Job ml/train`.
    pub object: String,
    /// `file.yaml#2`.
    pub source: String,
    pub namespace: String,
    /// The tier the webhooks hold the namespace to (`None`: none).
    pub tier: Option<String>,
    /// What decided that tier (`None` when there is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier_from: Option<TierFrom>,
    pub verdict: Verdict,
    /// The denial message(s) the user would see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// Why a webhook left the object alone (`not ours: namespace has no tier label`, `admin`).
    pub notes: Vec<String>,
    /// What `/validate-pod` could not decide (denied in Enforce), in any mode: `check` warns about it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undecidable: Vec<String>,
    pub pods: Vec<PodDecision>,
    /// What the floor in the apiserver alone answers for the object itself: a workload's CREATE (its Pod
    /// templates; its Pods are in `pods`). `None` for a Pod, or when the policy cannot be rendered as a floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorAnswer>,
    /// Whether `/validate-pod` admitted the object itself (a workload, apart from its Pods).
    #[serde(skip)]
    pub object_admitted: bool,
    /// Every review sent and every answer, in order.
    #[serde(skip)]
    pub exchanges: Vec<Exchange>,
}

impl Evaluation {
    fn new(engine: &Engine, object: String, source: &str, namespace: &str) -> Self {
        // The tier the webhooks hold the namespace to (an untiered one: the default tier, or none).
        let scope = engine
            .policy()
            .tier_for(engine.options.tiers.tier_of(namespace).as_deref());
        Evaluation {
            object,
            source: source.to_string(),
            namespace: namespace.to_string(),
            tier: scope.tier().map(str::to_string),
            tier_from: match scope {
                TierScope::Tier(_) => Some(TierFrom::Label),
                TierScope::Defaulted { .. } => Some(TierFrom::Default),
                TierScope::Denied(_) | TierScope::Ignored(_) => None,
            },
            verdict: Verdict::Allowed,
            message: None,
            warnings: Vec::new(),
            notes: Vec::new(),
            undecidable: Vec::new(),
            pods: Vec::new(),
            floor: None,
            object_admitted: false,
            exchanges: Vec::new(),
        }
    }

    fn note(&mut self, webhook: &str, note: Option<String>) {
        if let Some(n) = note.map(|n| format!("{webhook}: {n}"))
            && !self.notes.contains(&n)
        {
            self.notes.push(n);
        }
    }

    fn warn(&mut self, warnings: &[String]) {
        for w in warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
        if !warnings.is_empty() && self.verdict == Verdict::Allowed {
            self.verdict = Verdict::Warned;
        }
    }

    fn validated(&mut self, (v, exchange): (Validation, Exchange)) {
        self.exchanges.push(exchange);
        self.note("validate-pod", v.note);
        for u in v.undecidable {
            if !self.undecidable.contains(&u) {
                self.undecidable.push(u);
            }
        }
        self.warn(&v.verdict.warnings);
        if let Some(msg) = v.verdict.denied {
            self.verdict = Verdict::Denied;
            match &mut self.message {
                Some(m) if !m.contains(&msg) => m.push_str(&format!("\n{msg}")),
                Some(_) => {}
                None => self.message = Some(msg),
            }
        }
    }

    fn failed(&mut self, bad: BadRequest) {
        self.verdict = Verdict::Error;
        self.message = Some(format!("HTTP 400: {}", bad.0));
    }

    /// Every answer of the floor for this object: its own (a workload's), then each Pod's as submitted and as
    /// mutated.
    pub fn floor_answers(&self) -> impl Iterator<Item = &FloorAnswer> {
        self.floor.iter().chain(
            self.pods
                .iter()
                .flat_map(|p| p.floor.iter().chain(p.floor_after_mutation.iter())),
        )
    }
}

/// The webhooks' answers for one input; `None` for what no webhook looks at (Namespaces, ConfigMaps, …).
pub fn evaluate(engine: &Engine, input: &Input) -> Option<Evaluation> {
    match input {
        Input::Object(src) => Some(evaluate_object(engine, src)),
        Input::Review(src) => Some(evaluate_review(engine, src)),
        Input::Namespace { .. } | Input::Ignored(_) => None,
    }
}

fn name_of(v: &Value) -> &str {
    let meta = &v["metadata"];
    meta["name"]
        .as_str()
        .or(meta["generateName"].as_str())
        .unwrap_or("")
}

fn evaluate_object(engine: &Engine, src: &Source) -> Evaluation {
    let v = &src.value;
    let namespace = v["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(&engine.options.default_namespace)
        .to_string();
    let kind = v["kind"].as_str().unwrap_or("");
    let mut ev = Evaluation::new(
        engine,
        format!("{kind} {namespace}/{}", name_of(v)),
        &src.origin,
        &namespace,
    );
    let requester = &engine.options.requester;
    let review = create_review(v, &namespace, requester, &uid_for(&src.origin));
    if kind == "Pod" && v["apiVersion"] == "v1" {
        admit_pod(engine, &mut ev, review, "Pod", None);
        return ev;
    }
    let Some(review) = mutate_claim(engine, &mut ev, review) else {
        return ev;
    };
    match engine.validate(&review) {
        Ok(answered) => ev.validated(answered),
        Err(bad) => {
            ev.failed(bad);
            return ev;
        }
    }
    workload_floor(engine, &mut ev, &review["request"]);
    let owner = owner_facts(v);
    for (path, template) in pod_templates(v) {
        let pod = controlled_pod(v, template, &namespace);
        let uid = uid_for(&format!("{}/{path}", src.origin));
        let review = create_review(&pod.pod, &namespace, &pod.creator, &uid);
        admit_pod(engine, &mut ev, review, &path, owner.as_ref());
    }
    ev
}

/// A review of the input, decided as given: a Pod's through both webhooks, anything else validated.
fn evaluate_review(engine: &Engine, src: &Source) -> Evaluation {
    let req = &src.value["request"];
    let namespace = req["namespace"].as_str().unwrap_or("").to_string();
    let kind = req["kind"]["kind"].as_str().unwrap_or("");
    let object = if req["object"].is_object() {
        &req["object"]
    } else {
        &req["oldObject"]
    };
    let name = req["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(name_of(object));
    let op = req["operation"].as_str().unwrap_or("");
    let mut ev = Evaluation::new(
        engine,
        format!("{kind} {namespace}/{name} ({op})"),
        &src.origin,
        &namespace,
    );
    let is_pod = kind == "Pod"
        && req["kind"]["group"].as_str().unwrap_or("").is_empty()
        && req["subResource"].as_str().unwrap_or("").is_empty();
    if is_pod {
        admit_pod(engine, &mut ev, src.value.clone(), "Pod", None);
    } else {
        let Some(review) = mutate_claim(engine, &mut ev, src.value.clone()) else {
            return ev;
        };
        match engine.validate(&review) {
            Ok(answered) => ev.validated(answered),
            Err(bad) => ev.failed(bad),
        }
        workload_floor(engine, &mut ev, req);
    }
    ev
}

/// Records, right after `/validate-pod` answered for a workload, whether it admitted the object and what the
/// floor alone answers for it (nothing for a workload the apiserver refuses when it decodes it).
fn workload_floor(engine: &Engine, ev: &mut Evaluation, request: &Value) {
    ev.object_admitted = !matches!(ev.verdict, Verdict::Denied | Verdict::Error);
    if crate::floor::refused_when_decoded(&request["object"]) {
        return;
    }
    if let Some((floor, at)) = floor_context(engine, ev, request) {
        let answer = floor.workload(
            request,
            &request["object"],
            (&at.namespace, at.tier.as_deref()),
            at.exempt,
        );
        ev.floor = Some(answer);
    }
}

/// Where the floor is asked: the namespace, its tier label, and whether the requester is exempt.
struct FloorAt {
    namespace: String,
    tier: Option<String>,
    exempt: bool,
}

/// The floor and where it is asked for a review's request (the requester exempt offline only by its
/// `--grant`s: `exempt tiers/<tier>` for the tier the floor asks about, the namespace's or the default tier).
fn floor_context<'e>(
    engine: &'e Engine,
    ev: &Evaluation,
    request: &Value,
) -> Option<(&'e crate::floor::Floor, FloorAt)> {
    let floor = engine.floor.as_ref()?;
    let user: UserInfo = serde_json::from_value(request["userInfo"].clone()).unwrap_or_default();
    let tier = engine.options.tiers.tier_of(&ev.namespace);
    let policy = engine.policy();
    let asked = (tier.as_deref())
        .filter(|t| policy.tiers().iter().any(|p| p.name == *t))
        .or(policy.default_tier())
        .unwrap_or_default();
    let exempt =
        (engine.options.requester.grants_for(&user)).allows(&Permission::Exempt(asked.to_string()));
    let namespace = ev.namespace.clone();
    Some((
        floor,
        FloorAt {
            namespace,
            tier,
            exempt,
        },
    ))
}

/// `/mutate-claim` for a ResourceClaim or ResourceClaimTemplate (the review unchanged for anything else), its
/// patch applied to the review's object, as the apiserver does before the validating webhooks; `None` when
/// it could not be (recorded as a failure).
fn mutate_claim(engine: &Engine, ev: &mut Evaluation, mut review: Value) -> Option<Value> {
    let kind = &review["request"]["kind"];
    let claim = kind["group"] == "resource.k8s.io"
        && matches!(
            kind["kind"].as_str(),
            Some("ResourceClaim" | "ResourceClaimTemplate")
        );
    if !claim {
        return Some(review);
    }
    let (answer, exchange) = match engine.mutate_claim(&review) {
        Ok(m) => m,
        Err(bad) => {
            ev.failed(bad);
            return None;
        }
    };
    ev.exchanges.push(exchange);
    ev.warn(&answer.warnings);
    if !answer.patch.is_empty() {
        let object = &mut review["request"]["object"];
        if let Err(e) = json_patch::patch(object, &answer.patch.operations()) {
            ev.failed(BadRequest(format!("the patch does not apply: {e}")));
            return None;
        }
    }
    Some(review)
}

/// `/mutate-pod`, the patch applied to the review's object, then `/validate-pod` on the patched Pod (the
/// apiserver sends the validating webhooks the mutated object, under the same uid).
fn admit_pod(
    engine: &Engine,
    ev: &mut Evaluation,
    mut review: Value,
    path: &str,
    owner: Option<&OwnerFacts>,
) {
    let (mutation, exchange) = match engine.mutate(&review, owner) {
        Ok(m) => m,
        Err(bad) => return ev.failed(bad),
    };
    ev.exchanges.push(exchange);
    ev.note(
        "mutate-pod",
        mutation.skipped.map(|s| format!("skipped: {s}")),
    );
    ev.warn(&mutation.answer.warnings);
    let before = review["request"]["object"].clone();
    let mut after = before.clone();
    if !mutation.answer.patch.is_empty() {
        if let Err(e) = json_patch::patch(&mut after, &mutation.answer.patch.operations()) {
            ev.failed(BadRequest(format!("the patch does not apply: {e}")));
            return;
        }
        review["request"]["object"] = after.clone();
    }
    let mut decision = pod_decision(engine, path, &mutation, &before, &after);
    (decision.floor, decision.floor_after_mutation) =
        floor_answers(engine, ev, &review["request"], &before, &after);
    ev.pods.push(decision);
    match engine.validate_owned(&review, owner) {
        Ok(answered) => ev.validated(answered),
        Err(bad) => ev.failed(bad),
    }
}

/// The floor's answers for a Pod as submitted and as mutated, for the review's operation and requester
/// (exempt offline only by its `--grant`s).
fn floor_answers(
    engine: &Engine,
    ev: &Evaluation,
    request: &Value,
    before: &Value,
    after: &Value,
) -> (Option<FloorAnswer>, Option<FloorAnswer>) {
    let Some((floor, at)) = floor_context(engine, ev, request) else {
        return (None, None);
    };
    // A Pod that does not read as one never reaches the floor: the apiserver refuses it when it decodes it.
    if before.is_object() && serde_json::from_value::<Pod>(before.clone()).is_err() {
        return (None, None);
    }
    let answer = |pod: &Value| {
        floor.pod(
            request,
            pod,
            (&at.namespace, at.tier.as_deref()),
            at.exempt,
            engine.policy(),
        )
    };
    (Some(answer(before)), Some(answer(after)))
}

fn our_annotations(pod: &Value) -> BTreeMap<String, String> {
    pod["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("gpu-admission.io/"))
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The decision as the patched Pod shows it.
fn pod_decision(
    engine: &Engine,
    path: &str,
    mutation: &Mutation,
    before: &Value,
    after: &Value,
) -> PodDecision {
    let old = our_annotations(before);
    let annotations: BTreeMap<String, String> = our_annotations(after)
        .into_iter()
        .filter(|(k, v)| old.get(k) != Some(v))
        .collect();
    let policy = engine.policy();
    let keys: Vec<&str> = policy.class_label_keys.iter().map(String::as_str).collect();
    let pod: Option<Pod> = serde_json::from_value(after.clone()).ok();
    let classes = pod
        .as_ref()
        .and_then(|p| p.spec.as_ref())
        .and_then(|spec| reachable_classes(spec, &keys))
        .map(|set| {
            set.into_iter()
                .map(|(k, v)| match policy.class_by_label(k, v) {
                    Some(c) => c.name.clone(),
                    None => format!("{k}={v}"),
                })
                .collect()
        })
        .unwrap_or_default();
    let ann = |key: &str| {
        after["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_string)
    };
    PodDecision {
        path: path.to_string(),
        outcome: mutation.outcome,
        skipped: mutation.skipped,
        gpu_class: ann(decision::ANN_GPU_CLASS),
        classes,
        placement: ann(decision::ANN_PLACEMENT),
        priority_class: after["spec"]["priorityClassName"]
            .as_str()
            .map(str::to_string),
        annotations,
        patch_ops: mutation.answer.patch.len(),
        floor: None,
        floor_after_mutation: None,
    }
}
