//! Turns policy text into a validated [`Policy`], or into errors that name the file, the field and
//! the reason (all problems at once, so an operator fixes a file in one go).
use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::gpu_resources::{
    BYTES_IN_GIB, GpuResourceKind, GpuResourceRule, MEMORY_PLACEHOLDER, MIB_IN_GIB, default_rules,
};

mod quotas;
mod sections;
#[cfg(test)]
mod tests;

use crate::model::{Enforcement, NameIndex, NamespaceGrant, Policy, PriorityRules};
use crate::schema::{PolicyFile, RuntimeProfile, Vendor};

/// One thing wrong with a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Path of the field, e.g. `catalog[H100-80GB].memoryGiB`; `(file)` for the file as a whole.
    pub field: String,
    pub reason: String,
}

/// Why a policy file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyError {
    /// The file (or the embedded default).
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid policy {}: ", self.file)?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", p.field, p.reason)?;
        }
        Ok(())
    }
}

impl PolicyError {
    pub(crate) fn single(file: &str, field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            file: file.to_string(),
            problems: vec![Problem {
                field: field.into(),
                reason: reason.into(),
            }],
        }
    }
}

/// Reads and validates a policy file.
pub fn load_file(path: &Path) -> Result<Policy, PolicyError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyError::single(&file, "(file)", format!("cannot read: {e}")))?;
    parse(&text, &file)
}

/// Parses and validates policy text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Policy, PolicyError> {
    let raw: PolicyFile = serde_yaml::from_str(text).map_err(|e| {
        let field = match e.location() {
            Some(l) => format!("(line {}, column {})", l.line(), l.column()),
            None => "(file)".to_string(),
        };
        PolicyError::single(file, field, e.to_string())
    })?;
    let version = match &raw.version {
        Some(v) => v.clone(),
        None => hex::encode(Sha256::digest(text.as_bytes()))[..12].to_string(),
    };
    let mut c = Checker {
        problems: Vec::new(),
    };
    let policy = c.build(raw, version, file, text);
    match policy {
        Some(p) if c.problems.is_empty() => Ok(p),
        _ => Err(PolicyError {
            file: file.to_string(),
            problems: c.problems,
        }),
    }
}

/// The fields of a job type (`jobTypes[]`) whose owner may change them without changing the rules: priors
/// that steer only the Pods carrying that job type's label (RBAC `update jobtypes/<name>`, see
/// [`changed_job_types`]). Everything else in a policy is a rule (only those RBAC allows `update policies`
/// change it): the catalog, tiers, buckets, GPU resources, quotas, enforcement, but also `version`,
/// `workloadClasses`, `interference`, `learning`, a job type's `defaultMemoryGiB`, its `family` and its
/// `owner`, since each of those can deny, steer or hide other tenants' Pods.
pub const JOB_TYPE_PRIOR_FIELDS: [&str; 4] = [
    "workloadClass",
    "baseRuntimeSeconds",
    "relativeStddev",
    "throughputExponent",
];

/// A digest of everything in a policy text that is a rule (all but [`JOB_TYPE_PRIOR_FIELDS`]), as parsed
/// (formatting, comments and key order do not count); `None` when the text does not parse.
pub fn rules_digest(text: &str) -> Option<String> {
    let bytes = serde_json::to_vec(&rule_fields(text)?).ok()?;
    Some(hex::encode(Sha256::digest(&bytes))[..16].to_string())
}

/// Every field of a policy text that is a rule, as the schema parses it (defaults filled in); `None` when
/// the text does not parse. `jobTypes` keeps, sorted by name, only the job types whose `defaultMemoryGiB`,
/// `family` or `owner` is set, with those three fields only: adding, removing or re-ordering job types
/// without any of them changes no rule. What
/// [`rules_digest`] digests and [`crate::diff::rule_changes`] compares.
pub fn rule_fields(text: &str) -> Option<serde_json::Value> {
    rule_fields_of(&serde_yaml::from_str(text).ok()?)
}

/// [`rule_fields`] of a parsed text.
fn rule_fields_of(raw: &PolicyFile) -> Option<serde_json::Value> {
    let mut value = serde_json::to_value(raw).ok()?;
    let fields = value.as_object_mut()?;
    // A job type's `defaultMemoryGiB` denies its Pods; its `family` pattern decides which other job types,
    // other tenants' too, share what it teaches; its `owner` whose runs the scorer learns as its: all rules.
    let mut memory: Vec<serde_json::Value> = raw
        .job_types
        .iter()
        .filter(|j| j.default_memory_gib.is_some() || j.family.is_some() || j.owner.is_some())
        .map(|j| {
            serde_json::json!({"name": j.name, "defaultMemoryGiB": j.default_memory_gib, "family": j.family, "owner": j.owner})
        })
        .collect();
    memory.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    fields.insert("jobTypes".into(), serde_json::Value::Array(memory));
    Some(value)
}

/// The job types whose entry differs between two policy texts (added, removed, or any field changed):
/// each needs `update jobtypes/<name>` from one who may not change the rules. `None` when either text
/// does not parse.
pub fn changed_job_types(old: &str, new: &str) -> Option<std::collections::BTreeSet<String>> {
    changed_entries(
        &serde_yaml::from_str(old).ok()?,
        &serde_yaml::from_str(new).ok()?,
    )
}

/// What a new policy text changes against an old one, as far as RBAC goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextChange {
    /// A rule: their [`rule_fields`] differ (so do their [`rules_digest`]s).
    Rules,
    /// Only these job types' entries ([`changed_job_types`]; empty: nothing a power guards).
    JobTypes(std::collections::BTreeSet<String>),
}

/// [`TextChange`] of two policy texts, each parsed once; `None` when either does not parse.
pub fn text_change(old: &str, new: &str) -> Option<TextChange> {
    let old: PolicyFile = serde_yaml::from_str(old).ok()?;
    let new: PolicyFile = serde_yaml::from_str(new).ok()?;
    if rule_fields_of(&old)? != rule_fields_of(&new)? {
        return Some(TextChange::Rules);
    }
    changed_entries(&old, &new).map(TextChange::JobTypes)
}

/// [`changed_job_types`] of two parsed texts.
fn changed_entries(
    old: &PolicyFile,
    new: &PolicyFile,
) -> Option<std::collections::BTreeSet<String>> {
    let entries =
        |raw: &PolicyFile| -> Option<std::collections::BTreeMap<String, serde_json::Value>> {
            raw.job_types
                .iter()
                .map(|j| Some((j.name.clone(), serde_json::to_value(j).ok()?)))
                .collect()
        };
    let (old, new) = (entries(old)?, entries(new)?);
    let differs = |name: &String| old.get(name) != new.get(name);
    Some(
        old.keys()
            .chain(new.keys())
            .filter(|n| differs(n))
            .cloned()
            .collect(),
    )
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn fail(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(Problem {
            field: field.into(),
            reason: reason.into(),
        });
    }

    /// Checks `lo <= v <= hi` (finite).
    fn range(&mut self, field: impl Into<String>, v: f64, lo: f64, hi: f64) {
        if !v.is_finite() || v < lo || v > hi {
            self.fail(field, format!("must be a number in [{lo}, {hi}], got {v}"));
        }
    }

    /// Checks `v > 0` (finite).
    fn positive(&mut self, field: impl Into<String>, v: f64) {
        if !v.is_finite() || v <= 0.0 {
            self.fail(field, format!("must be a finite number > 0, got {v}"));
        }
    }

    fn label_value(&mut self, field: String, v: &str) {
        if !crate::names::is_label_value(v) {
            self.fail(
                field,
                format!(
                    "`{v}` is not a valid Kubernetes label value (1-63 characters [A-Za-z0-9._-], \
                     starting and ending alphanumeric)"
                ),
            );
        }
    }

    fn label_key(&mut self, field: String, k: &str) {
        if !crate::names::is_label_key(k) {
            self.fail(
                field,
                format!(
                    "`{k}` is not a valid Kubernetes label key ([prefix/]name: a DNS subdomain prefix, a \
                     label-value name)"
                ),
            );
        }
    }

    fn profile(&mut self, field: &str, p: &RuntimeProfile) {
        self.positive(
            format!("{field}.baseRuntimeSeconds"),
            p.base_runtime_seconds,
        );
        self.range(
            format!("{field}.relativeStddev"),
            p.relative_stddev,
            1e-6,
            10.0,
        );
        self.range(
            format!("{field}.throughputExponent"),
            p.throughput_exponent,
            0.0,
            2.0,
        );
    }

    fn bucket_name(&mut self, field: String, name: &str, buckets: &BTreeSet<String>) {
        if !buckets.contains(name) {
            let known: Vec<&str> = buckets.iter().map(String::as_str).collect();
            self.fail(
                field,
                format!(
                    "unknown PriorityClass `{name}` (not a priority bucket; buckets: {})",
                    known.join(", ")
                ),
            );
        }
    }

    fn enforcement(&mut self, raw: &PolicyFile) -> Enforcement {
        Enforcement {
            mode: raw.enforcement.mode,
        }
    }

    fn namespace_grants(
        &mut self,
        raw: &PolicyFile,
        classes: &NameIndex,
        buckets: &BTreeSet<String>,
    ) -> Vec<NamespaceGrant> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, g) in raw.namespace_grants.iter().enumerate() {
            let f = if g.namespace.is_empty() {
                format!("namespaceGrants[{i}]")
            } else {
                format!("namespaceGrants[{}]", g.namespace)
            };
            if !crate::names::is_namespace_name(&g.namespace) {
                self.fail(
                    format!("{f}.namespace"),
                    format!("`{}` is not a valid namespace name", g.namespace),
                );
            }
            if !seen.insert(g.namespace.clone()) {
                self.fail(
                    format!("{f}.namespace"),
                    format!("namespace `{}` granted twice", g.namespace),
                );
            }
            if g.allowed_classes.is_empty() && g.max_priority_class.is_none() {
                self.fail(
                    f.clone(),
                    "grants nothing: set allowedClasses and/or maxPriorityClass",
                );
            }
            for (j, name) in g.allowed_classes.iter().enumerate() {
                if !classes.contains_key(name) {
                    self.fail(
                        format!("{f}.allowedClasses[{j}]"),
                        format!("unknown GPU class `{name}` (not in catalog)"),
                    );
                }
            }
            if let Some(cap) = &g.max_priority_class {
                self.bucket_name(format!("{f}.maxPriorityClass"), cap, buckets);
            }
            out.push(NamespaceGrant {
                namespace: g.namespace.clone(),
                allowed_classes: g.allowed_classes.clone(),
                max_priority_class: g.max_priority_class.clone(),
            });
        }
        out
    }

    /// `gpuResources`: known vendors, no name twice, resource names (MIG: a pattern with one `{memoryGiB}`).
    fn gpu_resources(&mut self, raw: &PolicyFile) -> Vec<GpuResourceRule> {
        let Some(specs) = &raw.gpu_resources else {
            return default_rules();
        };
        if specs.is_empty() {
            self.fail(
                "gpuResources",
                "must list at least one resource (omit the field for the built-in list)",
            );
        }
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, r) in specs.iter().enumerate() {
            let f = if r.name.is_empty() {
                format!("gpuResources[{i}]")
            } else {
                format!("gpuResources[{}]", r.name)
            };
            if !seen.insert(r.name.clone()) {
                self.fail(
                    format!("{f}.name"),
                    format!("duplicate resource name `{}`", r.name),
                );
            }
            let vendor = Vendor::named(&r.vendor);
            if vendor.is_none() {
                self.fail(
                    format!("{f}.vendor"),
                    format!("unknown vendor `{}` ({})", r.vendor, Vendor::names()),
                );
            }
            let kind = r.kind;
            if let Some(why) = rule_name_problem(&r.name, kind) {
                self.fail(format!("{f}.name"), why);
            }
            let memory_gib_per_unit = match (kind, r.unit.as_deref()) {
                (GpuResourceKind::Memory, None | Some("MiB")) => MIB_IN_GIB,
                (GpuResourceKind::Memory, Some("GiB")) => 1.0,
                (GpuResourceKind::Memory, Some("bytes")) => BYTES_IN_GIB,
                (GpuResourceKind::Memory, Some(u)) => {
                    self.fail(
                        format!("{f}.unit"),
                        format!("unknown unit `{u}` (MiB, GiB or bytes)"),
                    );
                    0.0
                }
                (_, None) => 0.0,
                (_, Some(_)) => {
                    self.fail(format!("{f}.unit"), "only a memory resource has a unit");
                    0.0
                }
            };
            if let Some(vendor) = vendor {
                out.push(GpuResourceRule {
                    name: r.name.clone(),
                    vendor,
                    kind,
                    memory_gib_per_unit,
                });
            }
        }
        out
    }

    fn build(
        &mut self,
        raw: PolicyFile,
        version: String,
        file: &str,
        text: &str,
    ) -> Option<Policy> {
        if version.trim().is_empty() {
            self.fail("version", "must not be empty when given");
        }
        self.label_key("nodeLabelKey".into(), &raw.node_label_key);
        let tier_label = raw
            .tier_label
            .clone()
            .unwrap_or_else(|| crate::names::DEFAULT_TIER_LABEL.to_string());
        self.label_key("tierLabel".into(), &tier_label);
        let (classes, class_index) = self.catalog(&raw);
        let (tiers, tier_index, default_tier) = self.tiers(&raw, &class_index, &classes);
        let workload = self.workload_classes(&raw);
        let (job_types, job_index) = self.job_types(&raw);
        let prior = self.interference(&raw, &job_index, job_types.len());
        let (buckets, names) = self.priority_buckets(&raw);
        // Priority caps (tiers and grants) name buckets.
        for t in &raw.tiers {
            if let Some(cap) = &t.max_priority_class {
                self.bucket_name(format!("tiers[{}].maxPriorityClass", t.name), cap, &names);
            }
        }
        let enforcement = self.enforcement(&raw);
        let namespace_grants = self.namespace_grants(&raw, &class_index, &names);
        let gpu_resources = self.gpu_resources(&raw);
        let quotas = self.quotas(
            raw.quotas.as_ref(),
            &quotas::Context {
                classes: &classes,
                class_index: &class_index,
                tiers: &tiers,
                tier_index: &tier_index,
                buckets: &buckets,
            },
        );
        self.learning(&raw);
        let inf = &raw.interference;
        let pr = &raw.priority;
        let workload: [(f64, RuntimeProfile); 5] = workload.try_into().ok()?;
        Some(Policy {
            version,
            source: file.to_string(),
            document: text.to_string(),
            classes,
            tiers,
            default_tier: default_tier?,
            tier_label,
            untiered_namespaces: raw.untiered_namespaces,
            workload,
            job_types,
            interference_prior: prior,
            default_slowdown: inf.default_slowdown,
            anti_affinity_threshold: inf.anti_affinity_threshold,
            priority: PriorityRules {
                tier_points: pr.tier_points,
                workload_points: pr.workload_points,
                size_points: pr.size_points,
                size_reference: pr.size_reference,
                buckets,
            },
            learning: raw.learning,
            enforcement,
            namespace_grants,
            gpu_resources,
            quotas,
            class_index,
            tier_index,
            job_index,
        })
    }
}

/// What is wrong with a `gpuResources` name, if anything: an extended resource name (`domain/name`) or a
/// DeviceClass name (a DNS subdomain), each possibly a pattern (`*`, `**`); `{memoryGiB}` once in a
/// `migSlices` pattern and nowhere else; `notGpu` takes either form.
fn rule_name_problem(name: &str, kind: GpuResourceKind) -> Option<String> {
    let resource_ok = |n: &str| {
        let (prefix, rest) = n.split_once('/').unwrap_or(("", n));
        !prefix.is_empty()
            && !rest.is_empty()
            && prefix.contains('.')
            && n.len() <= 253
            && prefix
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b".-*".contains(&c))
            && rest
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-*".contains(&c))
    };
    let class_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 253
            && n.split('.').all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-*".contains(&c))
            })
    };
    let stars_ok = !name.contains("***");
    match kind {
        GpuResourceKind::MigSlices => {
            let without = name.replacen(MEMORY_PLACEHOLDER, "", 1);
            (name.matches(MEMORY_PLACEHOLDER).count() != 1 || !resource_ok(&without) || !stars_ok)
                .then(|| {
                    format!(
                        "a migSlices pattern is a resource name with one `{MEMORY_PLACEHOLDER}` (the slice \
                         memory) and `*` for any [a-z0-9]+, e.g. nvidia.com/mig-*g.{MEMORY_PLACEHOLDER}gb; got `{name}`"
                    )
                })
        }
        _ if name.contains(MEMORY_PLACEHOLDER) => Some(format!(
            "`{MEMORY_PLACEHOLDER}` belongs in a migSlices pattern only; got `{name}`"
        )),
        GpuResourceKind::DraDeviceClass => (!class_ok(name) || !stars_ok)
            .then(|| format!("`{name}` is not a DeviceClass name (a DNS subdomain)")),
        GpuResourceKind::NotGpu => (!(resource_ok(name) || class_ok(name)) || !stars_ok).then(|| {
            format!("`{name}` is neither an extended resource name (domain/name) nor a DeviceClass name")
        }),
        _ => (!resource_ok(name) || !stars_ok)
            .then(|| format!("`{name}` is not an extended resource name (domain/name)")),
    }
}
