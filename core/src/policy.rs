//! The webhooks' view of a validated policy (`gpu_admission_policy::Policy`, read from the same file the
//! scorer reads): the GPU catalog (to validate answers and to recognise a Pod that already names a class),
//! the priority buckets (the PriorityClasses of `--no-kube` mode), and the tier rules the webhooks hold Pods
//! to (allowed classes, priority caps, fallback, enforcement, namespace grants).
//!
//! Everything here is derived from the policy model alone (`gpu_admission_policy`'s types: the catalog, the
//! GPU resource rules, the mode); the tier rules are read from the model's tiers when asked
//! ([`PolicySnapshot::tier_rules`]). The one translation to and from the wire is `gpu_admission_policy::wire`.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use gpu_admission_policy::{GpuClass, Policy, Tier};

use k8s_openapi::api::core::v1::PodSpec;

use gpu_admission_policy::EnforcementMode;
use gpu_admission_proto::scorer::v1::GetPolicyResponse;

pub use gpu_admission_policy::{Fallback, UntieredNamespaces};

use crate::pod::features::{is_label_key, is_label_value};
use crate::pod::gpu_resources::GpuResources;
use crate::priority_class::{PriorityClassFacts, PriorityClassLookup};

/// An immutable view of one policy version; swapped whole when a newer one is loaded.
#[derive(Debug, Default, Clone)]
pub struct PolicySnapshot {
    pub version: String,
    /// The validated policy this view was derived from (`None` before a policy is known): its tiers, default
    /// tier, untiered namespaces and grants are read from it.
    pub policy: Option<Arc<Policy>>,
    /// Distinct node label keys of the catalog (e.g. `gpu.nvidia.com/class`).
    pub class_label_keys: Vec<String>,
    /// PriorityClasses named by the buckets, by name.
    pub priority_classes: HashMap<String, PriorityClassFacts>,
    pub mode: EnforcementMode,
    /// GPU memory per GPU (GiB) the policy assumes for a job type when a Pod does not say.
    pub job_type_default_memory_gib: HashMap<String, f64>,
    /// Which resource names ask for GPUs (the built-in default list until a policy says otherwise).
    pub gpu_resources: GpuResources,
    /// Every node label identifying each class: its class label, then the policy's other labels.
    pub class_labels: Vec<(String, Vec<(String, String)>)>,
    /// Tables derived from the fields above for every admission to read, built once per snapshot when first
    /// read (a snapshot is never changed once built).
    derived: OnceLock<Derived>,
}

/// What a [`PolicySnapshot`] derives from its policy once, instead of in every admission.
#[derive(Debug, Clone, Default)]
struct Derived {
    /// Per catalog class: its node label and taint key are valid label syntax (see
    /// [`PolicySnapshot::checked_class`]).
    catalog_labels_valid: Vec<bool>,
    /// Per tier: the classes it allows (see [`PolicySnapshot::tier_rules`]).
    tier_allowed: Vec<BTreeSet<String>>,
}

impl Derived {
    fn of(p: &PolicySnapshot) -> Self {
        Self {
            catalog_labels_valid: p
                .catalog()
                .iter()
                .map(|c| {
                    is_label_key(&c.node_label_key)
                        && is_label_value(&c.node_label_value)
                        && c.taint_key.as_deref().is_none_or(is_label_key)
                })
                .collect(),
            tier_allowed: p
                .tiers()
                .iter()
                .map(|t| {
                    p.catalog()
                        .iter()
                        .zip(&t.allowed)
                        .filter(|(_, allowed)| **allowed)
                        .map(|(c, _)| c.name.clone())
                        .collect()
                })
                .collect(),
        }
    }
}

/// Why a namespace has no tier of the policy (the metric and log label: [`Untiered::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Untiered {
    /// No tier label, or a namespace not (yet) in the caller's cache.
    NoLabel,
    /// The tier label's value is `""`.
    EmptyLabel,
    /// The tier label names no tier of the policy.
    UnknownTier,
}

impl Untiered {
    pub fn as_str(self) -> &'static str {
        match self {
            Untiered::NoLabel => "no_tier_label",
            Untiered::EmptyLabel => "empty_tier_label",
            Untiered::UnknownTier => "unknown_tier",
        }
    }

    /// In words, for messages: `has no tier label`.
    pub fn describe(self) -> &'static str {
        match self {
            Untiered::NoLabel => "has no tier label",
            Untiered::EmptyLabel => "has an empty tier label",
            Untiered::UnknownTier => "names no tier of the policy",
        }
    }
}

/// Which tier a namespace is held to ([`PolicySnapshot::tier_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierScope {
    /// Its own tier label names this tier.
    Tier(String),
    /// Untiered, held to the policy's `defaultTier` (`untieredNamespaces: DefaultTier`).
    Defaulted { tier: String, why: Untiered },
    /// Untiered, and the policy says such namespaces may run no Pod it would hold to a tier
    /// (`untieredNamespaces: Deny`).
    Denied(Untiered),
    /// Untiered and outside every rule (`untieredNamespaces: Ignore`, or a policy without tiers).
    Ignored(Untiered),
}

impl TierScope {
    /// The tier the namespace's Pods are held to, if any.
    pub fn tier(&self) -> Option<&str> {
        match self {
            TierScope::Tier(t) | TierScope::Defaulted { tier: t, .. } => Some(t),
            TierScope::Denied(_) | TierScope::Ignored(_) => None,
        }
    }
}

const NEVER: &str = "Never";
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// A Pod's own PriorityClass beyond its tier's cap ([`TierRules::priority_beyond_cap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeyondCap {
    /// The class the Pod names.
    pub class: String,
    /// Its value.
    pub value: i32,
    /// Its value is above the cap's.
    pub above: bool,
    /// It may preempt where the cap's class may not (`PreemptLowerPriority` under a `Never` cap).
    pub preempts: bool,
}

impl BeyondCap {
    /// As a clause: `asks for PriorityClass gpu-ultra (1000000)`, `asks for PriorityClass low-preempting (100)
    /// with preemptionPolicy PreemptLowerPriority`.
    pub fn describe(&self) -> String {
        let mut s = format!("asks for PriorityClass {} ({})", self.class, self.value);
        if self.preempts && !self.above {
            s.push_str(" with preemptionPolicy PreemptLowerPriority");
        }
        s
    }
}

/// What a namespace's Pods may use: its tier's rules widened by an admin grant for the namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct TierRules<'p> {
    pub tier: &'p str,
    /// Class names allowed (tier's, then the grant's), catalog names: the tier's own set, built once per
    /// snapshot, or its union with the namespace's grant.
    pub allowed: Cow<'p, BTreeSet<String>>,
    /// The tier's preferred class (when it names one).
    pub preferred: Option<&'p str>,
    /// The highest PriorityClass allowed (the higher of the tier's and the grant's); `None` = no cap.
    pub max_priority_class: Option<&'p PriorityClassFacts>,
    pub fallback: Fallback,
    /// `true` when a namespace grant widened the tier.
    pub granted: bool,
}

impl TierRules<'_> {
    pub fn allows(&self, class: &str) -> bool {
        self.allowed.contains(class)
    }

    /// Does a Pod at `value` priority stay within the cap?
    pub fn priority_allowed(&self, value: i32) -> bool {
        self.max_priority_class.is_none_or(|cap| value <= cap.value)
    }

    /// How a Pod's own PriorityClass goes beyond the tier's cap, the one rule mutation and validation
    /// follow for every Pod, GPU or not: its class's value above the cap's, or `PreemptLowerPriority` (its
    /// own, else its class's, else the Kubernetes default) where the cap's class says `Never`. The cluster's
    /// `globalDefault` class is no exemption. `None` within the cap, without a cap, for a Pod naming no
    /// class (priority 0), or one naming a class `pcs` does not know (the apiserver refuses those).
    pub fn priority_beyond_cap(
        &self,
        spec: &PodSpec,
        pcs: &dyn PriorityClassLookup,
    ) -> Option<BeyondCap> {
        let own = spec
            .priority_class_name
            .as_deref()
            .filter(|c| !c.is_empty())?;
        let cap = self.max_priority_class?;
        let facts = pcs.priority_class(own)?;
        let preempts = spec
            .preemption_policy
            .as_deref()
            .or(facts.preemption_policy.as_deref())
            .unwrap_or(PREEMPT_LOWER_PRIORITY)
            != NEVER;
        let cap_never = cap.preemption_policy.as_deref() == Some(NEVER);
        let above = facts.value > cap.value;
        let preempts = preempts && cap_never;
        (above || preempts).then(|| BeyondCap {
            class: own.to_string(),
            value: facts.value,
            above,
            preempts,
        })
    }

    /// The allowed classes in a sentence: `L4-24GB (24 GiB, nvidia)`.
    pub fn describe_allowed(&self, policy: &PolicySnapshot) -> String {
        let mut parts = Vec::new();
        for name in self.allowed.iter() {
            match policy.class(name) {
                Some(c) => parts.push(format!(
                    "{name} ({} GiB, {})",
                    c.memory_gib,
                    c.vendor.as_str()
                )),
                None => parts.push(name.to_string()),
            }
        }
        parts.join(", ")
    }
}

impl PolicySnapshot {
    /// The namespace label that carries the tier: the policy's `tierLabel` (the default label before a policy
    /// is known).
    pub fn tier_label(&self) -> &str {
        self.policy
            .as_deref()
            .map_or(crate::names::DEFAULT_TIER_LABEL, |p| p.tier_label.as_str())
    }

    /// The webhooks' view of a validated policy.
    pub fn from_policy(policy: Arc<Policy>) -> Self {
        let mut class_label_keys: Vec<String> = Vec::new();
        for c in &policy.classes {
            if !c.node_label_key.is_empty() && !class_label_keys.contains(&c.node_label_key) {
                class_label_keys.push(c.node_label_key.clone());
            }
        }
        let priority_classes = policy
            .priority
            .buckets
            .iter()
            .filter(|b| !b.name.is_empty())
            .map(|b| {
                let preemption =
                    (!b.preemption_policy.is_empty()).then(|| b.preemption_policy.clone());
                let facts = PriorityClassFacts {
                    name: b.name.clone(),
                    value: b.value,
                    preemption_policy: preemption,
                    global_default: false,
                };
                (b.name.clone(), facts)
            })
            .collect();
        let class_labels = policy
            .classes
            .iter()
            .map(|c| {
                let mut labels = vec![(c.node_label_key.clone(), c.node_label_value.clone())];
                for pair in &c.identifying_labels {
                    if !labels.contains(pair) {
                        labels.push(pair.clone());
                    }
                }
                (c.name.clone(), labels)
            })
            .collect();
        let e = &policy.enforcement;
        Self {
            version: policy.version.clone(),
            gpu_resources: GpuResources::from_rules(&policy.gpu_resources).with_catalog(&policy),
            derived: OnceLock::new(),
            class_labels,
            class_label_keys,
            priority_classes,
            mode: e.mode,
            job_type_default_memory_gib: policy
                .job_types
                .iter()
                .filter_map(|j| Some((j.name.clone(), j.default_memory_gib?)))
                .collect(),
            policy: Some(policy),
        }
    }

    /// A view of a `GetPolicy` answer's document, validated here.
    pub fn from_response(p: &GetPolicyResponse) -> Result<Self, gpu_admission_policy::PolicyError> {
        let policy = gpu_admission_policy::wire::policy_of(p)?;
        Ok(Self::from_policy(Arc::new(policy)))
    }

    /// The policy's tiers (none before a policy is known).
    pub fn tiers(&self) -> &[Tier] {
        self.policy.as_ref().map_or(&[], |p| &p.tiers)
    }

    /// The policy's `defaultTier` (none before a policy is known).
    pub fn default_tier(&self) -> Option<&str> {
        let p = self.policy.as_ref()?;
        Some(p.tiers.get(p.default_tier)?.name.as_str())
    }

    /// The policy's `untieredNamespaces`.
    pub fn untiered(&self) -> UntieredNamespaces {
        self.policy
            .as_ref()
            .map_or(UntieredNamespaces::default(), |p| p.untiered_namespaces)
    }

    /// The one rule for which tier a namespace is held to, from its tier label's value (`None`: no label, or a
    /// namespace the caller does not know yet). A value naming a tier of the policy is that tier; anything
    /// else (no label, `""`, an unknown value) is untiered and answered as the policy's `untieredNamespaces`
    /// says. Every webhook, the observer's audit and the CLI ask this.
    pub fn tier_for(&self, label: Option<&str>) -> TierScope {
        let tiers = self.tiers();
        if tiers.is_empty() {
            // The policy is not known yet: the label as it is (its rules are looked up once it is).
            return match label {
                Some(t) if !t.is_empty() => TierScope::Tier(t.to_string()),
                Some(_) => TierScope::Ignored(Untiered::EmptyLabel),
                None => TierScope::Ignored(Untiered::NoLabel),
            };
        }
        let why = match label {
            Some(t) if tiers.iter().any(|tier| tier.name == t) => {
                return TierScope::Tier(t.to_string());
            }
            None => Untiered::NoLabel,
            Some("") => Untiered::EmptyLabel,
            Some(_) => Untiered::UnknownTier,
        };
        match self.untiered() {
            UntieredNamespaces::DefaultTier => TierScope::Defaulted {
                tier: self.default_tier().unwrap_or_default().to_string(),
                why,
            },
            UntieredNamespaces::Deny => TierScope::Denied(why),
            UntieredNamespaces::Ignore => TierScope::Ignored(why),
        }
    }

    /// The rules for Pods of `namespace` in `tier`. A tier the policy does not know (a label value such as
    /// `Bronze`, or a typo) is the policy's `defaultTier`, as the scorer scores it: an unknown value never
    /// means no rules. `None` only before the policy is known.
    pub fn tier_rules<'p>(&'p self, tier: &str, namespace: &str) -> Option<TierRules<'p>> {
        let policy = self.policy.as_ref()?;
        let i = policy.tier_index(tier).unwrap_or(policy.default_tier);
        let scope = policy.scope(i, namespace)?;
        let t = scope.tier;
        let mut allowed = Cow::Borrowed(&self.derived().tier_allowed[i]);
        if scope.grant.is_some() {
            allowed
                .to_mut()
                .extend(scope.granted_classes().iter().cloned());
        }
        let cap = scope
            .max_priority_class()
            .and_then(|b| self.priority_classes.get(b.name.as_str()));
        let grant = scope.grant;
        Some(TierRules {
            tier: t.name.as_str(),
            allowed,
            preferred: t.preferred.map(|c| policy.classes[c].name.as_str()),
            max_priority_class: cap,
            fallback: t.fallback,
            granted: grant.is_some(),
        })
    }

    /// The policy's GPU classes (none before a policy is known).
    pub fn catalog(&self) -> &[GpuClass] {
        self.policy.as_ref().map_or(&[], |p| &p.classes)
    }

    pub fn class(&self, name: &str) -> Option<&GpuClass> {
        self.catalog().iter().find(|c| c.name == name)
    }

    /// The catalog class named `name`, and whether its node label and taint key are valid label syntax
    /// (checked once per snapshot, not in every answer naming the class).
    pub(crate) fn checked_class(&self, name: &str) -> Option<(&GpuClass, bool)> {
        let i = self.catalog().iter().position(|c| c.name == name)?;
        Some((&self.catalog()[i], self.derived().catalog_labels_valid[i]))
    }

    fn derived(&self) -> &Derived {
        self.derived.get_or_init(|| Derived::of(self))
    }

    /// Every node label key that identifies some class (class keys first).
    pub fn identifying_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.class_label_keys.iter().map(String::as_str).collect();
        for (_, labels) in &self.class_labels {
            for (k, _) in labels {
                if !keys.contains(&k.as_str()) {
                    keys.push(k);
                }
            }
        }
        keys
    }

    /// The catalog class selected by node label `key=value`.
    pub fn class_by_label(&self, key: &str, value: &str) -> Option<&GpuClass> {
        self.catalog()
            .iter()
            .find(|c| c.node_label_key == key && c.node_label_value == value)
    }
}

impl PolicySnapshot {
    /// The PriorityClasses a decision may use, the one rule every webhook follows: the cluster's (a watch
    /// cache), else with `--no-kube` this policy's priority buckets once the policy is known, else `None`.
    pub fn known_priority_classes<'a>(
        &'a self,
        cluster: Option<&'a dyn PriorityClassLookup>,
    ) -> Option<&'a dyn PriorityClassLookup> {
        match cluster {
            Some(lookup) => Some(lookup),
            None if !self.priority_classes.is_empty() => Some(self),
            None => None,
        }
    }
}

impl PolicySnapshot {
    /// The borrowers' PriorityClass of the policy's quotas (`quotas.borrowingPriorityClass`): the cluster's
    /// class of that name when the caller reads the cluster's (none when the cluster lacks it: a quota never
    /// names a class the scheduler does not know); without a cluster (`--no-kube`, the CLI) the class as the
    /// policy states it, preempting nobody as the shipped one does.
    pub fn borrowing_class(
        &self,
        cluster: Option<&dyn PriorityClassLookup>,
    ) -> Option<PriorityClassFacts> {
        let stated = self.policy.as_deref()?.quotas.borrowing.as_ref()?;
        match cluster {
            Some(lookup) => lookup.priority_class(&stated.name),
            None => Some(PriorityClassFacts {
                name: stated.name.clone(),
                value: stated.value,
                preemption_policy: Some("Never".to_string()),
                global_default: false,
            }),
        }
    }
}

impl PriorityClassLookup for PolicySnapshot {
    fn priority_class(&self, name: &str) -> Option<PriorityClassFacts> {
        self.priority_classes.get(name).cloned()
    }
}

/// A catalog class for tests: NVIDIA, 80 GiB, selected by `key=name`, tainted `taint` when given.
#[cfg(test)]
pub(crate) fn test_class(name: &str, key: &str, taint: Option<&str>) -> GpuClass {
    GpuClass {
        name: name.to_string(),
        vendor: gpu_admission_policy::Vendor::Nvidia,
        memory_gib: 80.0,
        relative_throughput: 1.0,
        price_per_hour: 2.0,
        gpus_per_node: 8,
        node_label_key: key.to_string(),
        node_label_value: name.to_string(),
        taint_key: taint.map(str::to_string),
        identifying_labels: Vec::new(),
        dra: None,
    }
}

/// A policy for tests, from the YAML flow mappings of its catalog classes, its tiers (the first is the
/// default tier unless `extra` names one) and its priority buckets, and any further top-level sections
/// (`extra`); the workload classes and priority points are neutral.
#[cfg(test)]
pub(crate) fn test_policy(
    catalog: &[&str],
    tiers: &[&str],
    buckets: &[&str],
    extra: &str,
) -> PolicySnapshot {
    let list = |items: &[&str]| -> String { items.iter().map(|i| format!("\n  - {i}")).collect() };
    let first_tier = tiers
        .first()
        .and_then(|t| t.split("name:").nth(1))
        .and_then(|rest| rest.split([',', '}']).next())
        .map_or("", str::trim);
    let default_tier = if extra.contains("defaultTier:") {
        String::new()
    } else {
        format!("defaultTier: {first_tier}\n")
    };
    let profile =
        "{ priorityWeight: 0.5, profile: { baseRuntimeSeconds: 3600, relativeStddev: 0.5 } }";
    let workloads: String = ["training", "inference", "batch", "interactive", "unknown"]
        .iter()
        .map(|w| format!("  {w}: {profile}\n"))
        .collect();
    let text = format!(
        "version: v1\n{default_tier}catalog:{}\ntiers:{}\nworkloadClasses:\n{workloads}priority:\n  \
         tierPoints: 50\n  workloadPoints: 30\n  sizePoints: 20\n  sizeReference: {{ gpuCount: 8, \
         memoryGiB: 80, modelSizeBillionParams: 70 }}\n  buckets:{}\n{extra}",
        list(catalog),
        list(tiers),
        list(buckets).replace("\n  - ", "\n    - "),
    );
    let policy = gpu_admission_policy::parse(&text, "test-policy.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    PolicySnapshot::from_policy(Arc::new(policy))
}
