//! Turns policy text into a validated [`Policy`], or into errors that name the file, the field and
//! the reason (all problems at once, so an operator fixes a file in one go).
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

use ndarray::Array2;
use sha2::{Digest, Sha256};

use gpu_admission_proto::gpu_resources::{MEMORY_PLACEHOLDER, MIB_IN_GIB, default_rules};
use gpu_admission_proto::scorer::v1::{GpuResourceKind, GpuResourceRule, GpuVendor};

use super::schema::{GpuResourceKindSpec, PolicyFile, RuntimeProfile};
use super::{
    Bucket, Enforcement, GpuClass, JobType, NamespaceGrant, Policy, PriorityRules, Tier,
    WorkloadClass,
};

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
    fn single(file: &str, field: impl Into<String>, reason: impl Into<String>) -> Self {
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
    let policy = c.build(raw, version, file);
    match policy {
        Some(p) if c.problems.is_empty() => Ok(p),
        _ => Err(PolicyError {
            file: file.to_string(),
            problems: c.problems,
        }),
    }
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
        let ok_chars = v
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch));
        let ok_ends = v
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphanumeric())
            && v.chars()
                .last()
                .is_some_and(|ch| ch.is_ascii_alphanumeric());
        if v.is_empty() || v.len() > 63 || !ok_chars || !ok_ends {
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
        let (prefix, name) = k.rsplit_once('/').unwrap_or(("", k));
        let prefix_ok = prefix.len() <= 253
            && prefix
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "-.".contains(ch));
        if !prefix_ok || name.is_empty() {
            self.fail(field, format!("`{k}` is not a valid Kubernetes label key"));
        } else {
            self.label_value(format!("{field} (name part)"), name);
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
        let e = &raw.enforcement;
        for (list, field) in [
            (&e.admin_groups, "enforcement.adminGroups"),
            (&e.admin_users, "enforcement.adminUsers"),
        ] {
            for (i, name) in list.iter().enumerate() {
                if name.trim().is_empty() {
                    self.fail(format!("{field}[{i}]"), "must not be empty");
                }
            }
        }
        Enforcement {
            mode: e.mode,
            admin_groups: e.admin_groups.clone(),
            admin_users: e.admin_users.clone(),
        }
    }

    fn namespace_grants(
        &mut self,
        raw: &PolicyFile,
        classes: &HashMap<String, usize>,
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
            let dns_label = !g.namespace.is_empty()
                && g.namespace.len() <= 63
                && g.namespace
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !g.namespace.starts_with('-')
                && !g.namespace.ends_with('-');
            if !dns_label {
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
            let vendor = match r.vendor.as_str() {
                "nvidia" => GpuVendor::Nvidia,
                "amd" => GpuVendor::Amd,
                "intel" => GpuVendor::Intel,
                other => {
                    self.fail(
                        format!("{f}.vendor"),
                        format!("unknown vendor `{other}` (nvidia, amd or intel)"),
                    );
                    GpuVendor::Unknown
                }
            };
            let name_ok = |n: &str, extra: &str| {
                let (prefix, rest) = n.split_once('/').unwrap_or(("", n));
                !prefix.is_empty()
                    && !rest.is_empty()
                    && prefix.contains('.')
                    && n.len() <= 253
                    && prefix.bytes().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-'
                    })
                    && rest.bytes().all(|c| {
                        c.is_ascii_alphanumeric()
                            || b"._-".contains(&c)
                            || extra.as_bytes().contains(&c)
                    })
            };
            let kind = match r.kind {
                GpuResourceKindSpec::Devices => GpuResourceKind::Devices,
                GpuResourceKindSpec::SharedDevices => GpuResourceKind::SharedDevices,
                GpuResourceKindSpec::MigSlices => GpuResourceKind::MigSlices,
                GpuResourceKindSpec::Memory => GpuResourceKind::Memory,
                GpuResourceKindSpec::Cores => GpuResourceKind::Cores,
                GpuResourceKindSpec::DraDeviceClass => GpuResourceKind::DraDeviceClass,
            };
            match kind {
                GpuResourceKind::MigSlices => {
                    let without = r.name.replacen(MEMORY_PLACEHOLDER, "", 1);
                    if r.name.matches(MEMORY_PLACEHOLDER).count() != 1
                        || !name_ok(&without, "*")
                        || without.contains("**")
                    {
                        self.fail(
                            format!("{f}.name"),
                            format!(
                                "a migSlices pattern is a resource name with one `{MEMORY_PLACEHOLDER}` (the slice \
                                 memory) and `*` for any [a-z0-9]+, e.g. nvidia.com/mig-*g.{MEMORY_PLACEHOLDER}gb; got `{}`",
                                r.name
                            ),
                        );
                    }
                }
                GpuResourceKind::DraDeviceClass => {
                    let ok = !r.name.is_empty()
                        && r.name.len() <= 253
                        && r.name.split('.').all(|p| {
                            !p.is_empty()
                                && p.bytes().all(|c| {
                                    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
                                })
                        });
                    if !ok {
                        self.fail(
                            format!("{f}.name"),
                            format!("`{}` is not a DeviceClass name (a DNS subdomain)", r.name),
                        );
                    }
                }
                _ if !name_ok(&r.name, "") => self.fail(
                    format!("{f}.name"),
                    format!(
                        "`{}` is not an extended resource name (domain/name)",
                        r.name
                    ),
                ),
                _ => {}
            }
            let memory_gib_per_unit = match (kind, r.unit.as_deref()) {
                (GpuResourceKind::Memory, None | Some("MiB")) => MIB_IN_GIB,
                (GpuResourceKind::Memory, Some("GiB")) => 1.0,
                (GpuResourceKind::Memory, Some("bytes")) => 1.0 / (1u64 << 30) as f64,
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
            out.push(GpuResourceRule {
                name: r.name.clone(),
                vendor: vendor as i32,
                kind: kind as i32,
                memory_gib_per_unit,
            });
        }
        out
    }

    fn build(&mut self, raw: PolicyFile, version: String, file: &str) -> Option<Policy> {
        if version.trim().is_empty() {
            self.fail("version", "must not be empty when given");
        }
        self.label_key("nodeLabelKey".into(), &raw.node_label_key);

        // Catalog.
        if raw.catalog.is_empty() {
            self.fail("catalog", "must list at least one GPU class");
        }
        let mut class_index = HashMap::new();
        let mut classes = Vec::new();
        for (i, g) in raw.catalog.iter().enumerate() {
            let f = if g.name.is_empty() {
                format!("catalog[{i}]")
            } else {
                format!("catalog[{}]", g.name)
            };
            if g.name.is_empty() {
                self.fail(format!("{f}.name"), "must not be empty");
            }
            if class_index.insert(g.name.clone(), i).is_some() {
                self.fail(
                    format!("{f}.name"),
                    format!("duplicate GPU class `{}`", g.name),
                );
            }
            self.positive(format!("{f}.memoryGiB"), g.memory_gib);
            self.positive(format!("{f}.relativeThroughput"), g.relative_throughput);
            self.range(format!("{f}.pricePerHour"), g.price_per_hour, 0.0, 1e6);
            if g.gpus_per_node == 0 {
                self.fail(format!("{f}.gpusPerNode"), "must be at least 1");
            }
            let key = g
                .node_label_key
                .clone()
                .unwrap_or_else(|| raw.node_label_key.clone());
            self.label_key(format!("{f}.nodeLabelKey"), &key);
            let value = g.node_label_value.clone().unwrap_or_else(|| g.name.clone());
            self.label_value(format!("{f}.nodeLabelValue"), &value);
            if let Some(t) = &g.taint_key {
                self.label_key(format!("{f}.taintKey"), t);
            }
            let mut identifying_labels = Vec::new();
            for (k, values) in &g.node_labels {
                self.label_key(format!("{f}.nodeLabels"), k);
                if values.is_empty() {
                    self.fail(
                        format!("{f}.nodeLabels[{k}]"),
                        "must list at least one value",
                    );
                }
                for v in values {
                    self.label_value(format!("{f}.nodeLabels[{k}]"), v);
                    identifying_labels.push((k.clone(), v.clone()));
                }
            }
            classes.push(GpuClass {
                name: g.name.clone(),
                vendor: g.vendor,
                memory_gib: g.memory_gib,
                relative_throughput: g.relative_throughput,
                price_per_hour: g.price_per_hour,
                gpus_per_node: g.gpus_per_node,
                node_label_key: key,
                node_label_value: value,
                taint_key: g.taint_key.clone(),
                identifying_labels,
            });
        }

        // Tiers.
        if raw.tiers.is_empty() {
            self.fail("tiers", "must list at least one tier");
        }
        let mut tier_index = HashMap::new();
        let mut tiers = Vec::new();
        for (i, t) in raw.tiers.iter().enumerate() {
            let f = if t.name.is_empty() {
                format!("tiers[{i}]")
            } else {
                format!("tiers[{}]", t.name)
            };
            if t.name.is_empty() {
                self.fail(format!("{f}.name"), "must not be empty");
            }
            if tier_index.insert(t.name.clone(), i).is_some() {
                self.fail(format!("{f}.name"), format!("duplicate tier `{}`", t.name));
            }
            if t.allowed_classes.is_empty() {
                self.fail(
                    format!("{f}.allowedClasses"),
                    "must list at least one GPU class",
                );
            }
            let mut allowed = vec![false; classes.len()];
            for (j, name) in t.allowed_classes.iter().enumerate() {
                match class_index.get(name) {
                    Some(&k) => allowed[k] = true,
                    None => self.fail(
                        format!("{f}.allowedClasses[{j}]"),
                        format!("unknown GPU class `{name}` (not in catalog)"),
                    ),
                }
            }
            let preferred = match &t.preferred_class {
                None => None,
                Some(name) => match class_index.get(name) {
                    Some(&k) if allowed[k] => Some(k),
                    Some(_) => {
                        self.fail(
                            format!("{f}.preferredClass"),
                            format!("`{name}` is not among the tier's allowedClasses"),
                        );
                        None
                    }
                    None => {
                        self.fail(
                            format!("{f}.preferredClass"),
                            format!("unknown GPU class `{name}` (not in catalog)"),
                        );
                        None
                    }
                },
            };
            self.range(format!("{f}.priorityWeight"), t.priority_weight, 0.0, 1.0);
            tiers.push(Tier {
                name: t.name.clone(),
                allowed,
                preferred,
                objective: t.objective,
                priority_weight: t.priority_weight,
                max_priority_class: t.max_priority_class.clone(),
                fallback: t.fallback,
            });
        }
        let default_tier = tier_index.get(&raw.default_tier).copied();
        if default_tier.is_none() {
            self.fail(
                "defaultTier",
                format!("unknown tier `{}`", raw.default_tier),
            );
        }

        // Workload classes: all five, nothing else.
        let mut workload = Vec::new();
        for name in raw.workload_classes.keys() {
            if WorkloadClass::from_name(name).is_none() {
                self.fail(
                    format!("workloadClasses.{name}"),
                    "unknown workload class (expected training, inference, batch, interactive, unknown)",
                );
            }
        }
        for w in WorkloadClass::ALL {
            let f = format!("workloadClasses.{}", w.as_str());
            match raw.workload_classes.get(w.as_str()) {
                Some(spec) => {
                    self.range(
                        format!("{f}.priorityWeight"),
                        spec.priority_weight,
                        0.0,
                        1.0,
                    );
                    self.profile(&format!("{f}.profile"), &spec.profile);
                    workload.push((spec.priority_weight, spec.profile));
                }
                None => {
                    self.fail(
                        f,
                        "missing (every workload class needs a priority weight and a profile)",
                    );
                    workload.push((
                        0.0,
                        RuntimeProfile {
                            base_runtime_seconds: 1.0,
                            relative_stddev: 1.0,
                            throughput_exponent: 1.0,
                        },
                    ));
                }
            }
        }

        // Job types.
        let mut job_index = HashMap::new();
        let mut job_types = Vec::new();
        for (i, j) in raw.job_types.iter().enumerate() {
            let f = if j.name.is_empty() {
                format!("jobTypes[{i}]")
            } else {
                format!("jobTypes[{}]", j.name)
            };
            if j.name.is_empty() {
                self.fail(format!("{f}.name"), "must not be empty");
            }
            if job_index.insert(j.name.clone(), i).is_some() {
                self.fail(
                    format!("{f}.name"),
                    format!("duplicate job type `{}`", j.name),
                );
            }
            let workload_class = WorkloadClass::from_name(&j.workload_class).unwrap_or_else(|| {
                self.fail(
                    format!("{f}.workloadClass"),
                    format!(
                        "unknown workload class `{}` (expected training, inference, batch, interactive, unknown)",
                        j.workload_class
                    ),
                );
                WorkloadClass::Unknown
            });
            let profile = RuntimeProfile {
                base_runtime_seconds: j.base_runtime_seconds,
                relative_stddev: j.relative_stddev,
                throughput_exponent: j.throughput_exponent,
            };
            self.profile(&f, &profile);
            if let Some(m) = j.default_memory_gib {
                self.positive(format!("{f}.defaultMemoryGiB"), m);
            }
            job_types.push(JobType {
                name: j.name.clone(),
                workload_class,
                profile,
                default_memory_gib: j.default_memory_gib,
            });
        }

        // Interference.
        let inf = &raw.interference;
        self.range(
            "interference.defaultSlowdown",
            inf.default_slowdown,
            0.0,
            100.0,
        );
        self.range(
            "interference.antiAffinityThreshold",
            inf.anti_affinity_threshold,
            0.0,
            100.0,
        );
        let n = job_types.len();
        let mut prior = Array2::from_elem((n, n), inf.default_slowdown);
        let mut seen = BTreeSet::new();
        for (i, p) in inf.pairs.iter().enumerate() {
            let f = format!("interference.pairs[{i}]");
            let a = job_index.get(&p.a).copied();
            let b = job_index.get(&p.b).copied();
            if a.is_none() {
                self.fail(format!("{f}.a"), format!("unknown job type `{}`", p.a));
            }
            if b.is_none() {
                self.fail(format!("{f}.b"), format!("unknown job type `{}`", p.b));
            }
            self.range(format!("{f}.slowdown"), p.slowdown, 0.0, 100.0);
            if let (Some(a), Some(b)) = (a, b) {
                if !seen.insert((a.min(b), a.max(b))) {
                    self.fail(f, format!("pair ({}, {}) listed twice", p.a, p.b));
                }
                prior[[a, b]] = p.slowdown;
                prior[[b, a]] = p.slowdown;
            }
        }

        // Priority.
        let pr = &raw.priority;
        self.range("priority.tierPoints", pr.tier_points, 0.0, 100.0);
        self.range("priority.workloadPoints", pr.workload_points, 0.0, 100.0);
        self.range("priority.sizePoints", pr.size_points, 0.0, 100.0);
        let total = pr.tier_points + pr.workload_points + pr.size_points;
        if (total - 100.0).abs() > 1e-9 {
            self.fail(
                "priority",
                format!("tierPoints + workloadPoints + sizePoints must be 100, got {total}"),
            );
        }
        self.positive(
            "priority.sizeReference.gpuCount",
            pr.size_reference.gpu_count,
        );
        self.positive(
            "priority.sizeReference.memoryGiB",
            pr.size_reference.memory_gib,
        );
        self.positive(
            "priority.sizeReference.modelSizeBillionParams",
            pr.size_reference.model_size_billion_params,
        );
        if pr.buckets.is_empty() {
            self.fail("priority.buckets", "must list at least one bucket");
        }
        let mut names = BTreeSet::new();
        let mut buckets = Vec::new();
        for (i, b) in pr.buckets.iter().enumerate() {
            let f = format!("priority.buckets[{i}]");
            self.range(format!("{f}.minScore"), b.min_score, 0.0, 100.0);
            self.label_value(format!("{f}.name"), &b.name);
            if !names.insert(b.name.clone()) {
                self.fail(
                    format!("{f}.name"),
                    format!("duplicate PriorityClass `{}`", b.name),
                );
            }
            if !(-2_147_483_648..=1_000_000_000).contains(&b.value) {
                self.fail(
                    format!("{f}.value"),
                    "user PriorityClass values must be <= 1000000000",
                );
            }
            if !matches!(
                b.preemption_policy.as_str(),
                "PreemptLowerPriority" | "Never"
            ) {
                self.fail(
                    format!("{f}.preemptionPolicy"),
                    format!(
                        "must be PreemptLowerPriority or Never, got `{}`",
                        b.preemption_policy
                    ),
                );
            }
            buckets.push(Bucket {
                min_score: b.min_score,
                name: b.name.clone(),
                value: b.value,
                preemption_policy: b.preemption_policy.clone(),
            });
        }
        buckets.sort_by(|a, b| b.min_score.total_cmp(&a.min_score));
        for w in buckets.windows(2) {
            if w[0].min_score == w[1].min_score {
                self.fail(
                    "priority.buckets",
                    format!("two buckets share minScore {}", w[0].min_score),
                );
            }
            if w[0].value <= w[1].value {
                self.fail(
                    "priority.buckets",
                    format!(
                        "bucket `{}` has a higher minScore than `{}` but not a higher value",
                        w[0].name, w[1].name
                    ),
                );
            }
        }
        if buckets.last().is_some_and(|b| b.min_score != 0.0) {
            self.fail("priority.buckets", "the lowest bucket must have minScore 0, so that every score maps to a PriorityClass");
        }

        // Priority caps (tiers and grants) name buckets.
        for t in &raw.tiers {
            if let Some(cap) = &t.max_priority_class {
                self.bucket_name(format!("tiers[{}].maxPriorityClass", t.name), cap, &names);
            }
        }
        let enforcement = self.enforcement(&raw);
        let namespace_grants = self.namespace_grants(&raw, &class_index, &names);
        let gpu_resources = self.gpu_resources(&raw);

        // Learning.
        let l = &raw.learning;
        self.range("learning.lambda", l.lambda, 0.0, 100.0);
        self.range("learning.beta", l.beta, 0.0, 100.0);
        self.range("learning.gamma", l.gamma, 0.0, 100.0);
        self.positive("learning.tau", l.tau);
        self.positive("learning.priorStrength", l.prior_strength);
        self.range("learning.explorationCap", l.exploration_cap, 0.0, 1.0);
        self.range(
            "learning.gpuScalingExponent",
            l.gpu_scaling_exponent,
            0.0,
            1.0,
        );
        self.positive("learning.classOffsetStddev", l.class_offset_stddev);
        self.positive("learning.exponentStddev", l.exponent_stddev);
        self.positive("learning.cellStddev", l.cell_stddev);
        if l.exploration_window == 0 || l.exploration_window > 100_000 {
            self.fail(
                "learning.explorationWindow",
                format!("must be in [1, 100000], got {}", l.exploration_window),
            );
        }

        let workload: [(f64, RuntimeProfile); 5] = workload.try_into().ok()?;
        Some(Policy {
            version,
            source: file.to_string(),
            classes,
            tiers,
            default_tier: default_tier?,
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
            class_index,
            tier_index,
            job_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DEFAULT_POLICY_YAML, EMBEDDED_SOURCE, embedded_default};

    fn errors(yaml: &str) -> PolicyError {
        parse(yaml, "/etc/scorer/policy.yaml").expect_err("policy should be refused")
    }

    fn has(e: &PolicyError, field: &str, reason_part: &str) -> bool {
        e.problems
            .iter()
            .any(|p| p.field == field && p.reason.contains(reason_part))
    }

    #[test]
    fn the_embedded_default_is_valid_and_complete() {
        let p = embedded_default().unwrap();
        assert_eq!(p.source, EMBEDDED_SOURCE);
        for class in [
            "H100-80GB",
            "A100-80GB",
            "A100-40GB",
            "L4-24GB",
            "MI300X-192GB",
        ] {
            let c = &p.classes[p.class_index(class).unwrap()];
            assert_eq!(c.node_label_key, "gpu.nvidia.com/class");
            assert_eq!(c.node_label_value, class);
        }
        let mi = &p.classes[p.class_index("MI300X-192GB").unwrap()];
        assert_eq!(mi.taint_key.as_deref(), Some("amd.com/gpu"));
        for (tier, preferred) in [
            ("gold", "H100-80GB"),
            ("silver", "A100-80GB"),
            ("bronze", "L4-24GB"),
        ] {
            let t = &p.tiers[p.tier_index(tier).unwrap()];
            assert_eq!(t.preferred, p.class_index(preferred), "{tier}");
        }
        let names: Vec<_> = p
            .priority
            .buckets
            .iter()
            .map(|b| (b.min_score, b.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (90.0, "gpu-ultra"),
                (70.0, "gpu-high"),
                (50.0, "gpu-medium"),
                (0.0, "gpu-default")
            ]
        );
        // No version in the file: a content hash.
        assert_eq!(p.version.len(), 12);
        assert!(p.version.chars().all(|c| c.is_ascii_hexdigit()));
        let again = embedded_default().unwrap();
        assert_eq!(again.version, p.version);
    }

    #[test]
    fn the_shipped_gpu_resources_are_the_built_in_default() {
        let p = embedded_default().unwrap();
        assert_eq!(p.gpu_resources, default_rules());
        // Omitting the list means the same list.
        let without: String = DEFAULT_POLICY_YAML
            .lines()
            .filter(|l| !l.starts_with("gpuResources:") && !l.starts_with("  - { name:"))
            .collect::<Vec<_>>()
            .join("\n");
        let p2 = parse(&without, "x").unwrap();
        assert_eq!(p2.gpu_resources, default_rules());
        let a100 = &p.classes[p.class_index("A100-80GB").unwrap()];
        assert!(a100.identifying_labels.contains(&(
            "nvidia.com/gpu.product".into(),
            "NVIDIA-A100-SXM4-80GB".into()
        )));
    }

    #[test]
    fn gpu_resource_problems_are_named() {
        let list = "gpuResources:\n  - { name: nvidia.com/gpu, vendor: nvidia, kind: devices }\n  \
             - { name: nvidia.com/gpu, vendor: nvidia, kind: sharedDevices }\n  \
             - { name: example.com/tpu, vendor: google, kind: devices }\n  \
             - { name: \"nvidia.com/mig-*g.gb\", vendor: nvidia, kind: migSlices }\n  \
             - { name: \"nvidia.com/mig-{memoryGiB}-{memoryGiB}\", vendor: nvidia, kind: migSlices }\n  \
             - { name: nvidia.com/gpumem, vendor: nvidia, kind: memory, unit: KB }\n  \
             - { name: \"not a name\", vendor: amd, kind: cores }\n";
        let without: String = DEFAULT_POLICY_YAML
            .lines()
            .filter(|l| !l.starts_with("gpuResources:") && !l.starts_with("  - { name:"))
            .collect::<Vec<_>>()
            .join("\n");
        let e = errors(&format!("{without}\n{list}"));
        assert!(
            has(
                &e,
                "gpuResources[nvidia.com/gpu].name",
                "duplicate resource name"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "gpuResources[example.com/tpu].vendor",
                "unknown vendor `google`"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "gpuResources[nvidia.com/mig-*g.gb].name",
                "one `{memoryGiB}`"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "gpuResources[nvidia.com/mig-{memoryGiB}-{memoryGiB}].name",
                "migSlices pattern"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "gpuResources[nvidia.com/gpumem].unit",
                "unknown unit `KB`"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "gpuResources[not a name].name",
                "not an extended resource name"
            ),
            "{e}"
        );
        assert_eq!(e.problems.len(), 6, "{e}");
        // Labels of a class are label keys and values.
        let bad = DEFAULT_POLICY_YAML.replace("[NVIDIA-L4]", "[\"bad value\"]");
        assert!(has(
            &errors(&bad),
            "catalog[L4-24GB].nodeLabels[nvidia.com/gpu.product]",
            "not a valid"
        ));
    }

    #[test]
    fn an_explicit_version_wins() {
        let p = parse(
            &format!("version: \"2026-11-22\"\n{DEFAULT_POLICY_YAML}"),
            "x",
        )
        .unwrap();
        assert_eq!(p.version, "2026-11-22");
    }

    #[test]
    fn errors_name_file_field_and_reason() {
        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "    allowedClasses: [L4-24GB]",
            "    allowedClasses: [L4-24GB, T4-16GB]",
        ));
        assert!(
            has(
                &e,
                "tiers[bronze].allowedClasses[1]",
                "unknown GPU class `T4-16GB`"
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("invalid policy /etc/scorer/policy.yaml: "),
            "{text}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace("    memoryGiB: 24\n", "    memoryGiB: -24\n"));
        assert!(
            has(
                &e,
                "catalog[L4-24GB].memoryGiB",
                "must be a finite number > 0, got -24"
            ),
            "{e}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace("name: A100-40GB", "name: A100-80GB"));
        assert!(
            has(&e, "catalog[A100-80GB].name", "duplicate GPU class"),
            "{e}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "{ minScore: 0, name: gpu-default",
            "{ minScore: 10, name: gpu-default",
        ));
        assert!(
            has(&e, "priority.buckets", "lowest bucket must have minScore 0"),
            "{e}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "value: 1000, preemptionPolicy: Never",
            "value: 1000, preemptionPolicy: Sometimes",
        ));
        assert!(
            has(
                &e,
                "priority.buckets[3].preemptionPolicy",
                "PreemptLowerPriority or Never"
            ),
            "{e}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace("  sizePoints: 20", "  sizePoints: 30"));
        assert!(has(&e, "priority", "must be 100, got 110"), "{e}");

        let e = errors(&DEFAULT_POLICY_YAML.replace("defaultTier: bronze", "defaultTier: copper"));
        assert!(has(&e, "defaultTier", "unknown tier `copper`"), "{e}");

        let e = errors(
            &DEFAULT_POLICY_YAML.replace("{ a: notebook, b: notebook", "{ a: notebook, b: jupyter"),
        );
        assert!(
            has(&e, "interference.pairs[10].b", "unknown job type `jupyter`"),
            "{e}"
        );

        let e =
            errors(&DEFAULT_POLICY_YAML.replace("  explorationCap: 0.1", "  explorationCap: 1.5"));
        assert!(has(&e, "learning.explorationCap", "[0, 1]"), "{e}");

        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "    preferredClass: L4-24GB",
            "    preferredClass: H100-80GB",
        ));
        assert!(
            has(
                &e,
                "tiers[bronze].preferredClass",
                "not among the tier's allowedClasses"
            ),
            "{e}"
        );

        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "    workloadClass: batch\n    baseRuntimeSeconds: 5400",
            "    workloadClass: etl\n    baseRuntimeSeconds: 5400",
        ));
        assert!(
            has(
                &e,
                "jobTypes[batch-etl].workloadClass",
                "unknown workload class `etl`"
            ),
            "{e}"
        );
    }

    #[test]
    fn enforcement_caps_fallback_and_grants() {
        let p = embedded_default().unwrap();
        assert_eq!(p.enforcement.mode, crate::policy::EnforcementMode::Warn);
        assert_eq!(p.enforcement.admin_groups, ["gpu-admission:admins"]);
        let bronze = &p.tiers[p.tier_index("bronze").unwrap()];
        assert_eq!(bronze.max_priority_class.as_deref(), Some("gpu-default"));
        assert_eq!(bronze.fallback, crate::policy::Fallback::PassThrough);
        assert!(p.namespace_grants.is_empty());

        let granted = DEFAULT_POLICY_YAML
            .replace("namespaceGrants: []", "namespaceGrants:\n  - { namespace: llm-research, allowedClasses: [H100-80GB], maxPriorityClass: gpu-high }")
            .replace("  mode: Warn", "  mode: Enforce");
        let p = parse(&granted, "x").unwrap();
        assert_eq!(p.enforcement.mode, crate::policy::EnforcementMode::Enforce);
        assert_eq!(p.namespace_grants[0].allowed_classes, ["H100-80GB"]);
        let tier_default =
            DEFAULT_POLICY_YAML.replacen("fallback: PassThrough", "fallback: TierDefault", 4);
        let p = parse(&tier_default, "x").unwrap();
        assert!(
            p.tiers
                .iter()
                .all(|t| t.fallback == crate::policy::Fallback::TierDefault)
        );

        // Without the new sections a file still loads: Audit, no admins, no caps, PassThrough.
        let bare = DEFAULT_POLICY_YAML
            .replace(
                "  mode: Warn\n  adminGroups: [gpu-admission:admins]\n  adminUsers: []\n",
                "  {}\n",
            )
            .replace("    maxPriorityClass: gpu-default\n", "");
        let p = parse(&bare, "x").unwrap();
        assert_eq!(p.enforcement, crate::policy::Enforcement::default());
        let bronze = &p.tiers[p.tier_index("bronze").unwrap()];
        assert_eq!(bronze.max_priority_class, None);

        let e = errors(
            &DEFAULT_POLICY_YAML
                .replace("maxPriorityClass: gpu-default", "maxPriorityClass: gpu-gold")
                .replace("  adminUsers: []", "  adminUsers: [\"\"]")
                .replace("namespaceGrants: []", "namespaceGrants:\n  - { namespace: Bad_NS, allowedClasses: [T4-16GB], maxPriorityClass: gpu-max }\n  - { namespace: empty }"),
        );
        assert!(
            has(
                &e,
                "tiers[bronze].maxPriorityClass",
                "unknown PriorityClass `gpu-gold`"
            ),
            "{e}"
        );
        assert!(
            has(&e, "enforcement.adminUsers[0]", "must not be empty"),
            "{e}"
        );
        assert!(
            has(
                &e,
                "namespaceGrants[Bad_NS].namespace",
                "not a valid namespace"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "namespaceGrants[Bad_NS].allowedClasses[0]",
                "unknown GPU class `T4-16GB`"
            ),
            "{e}"
        );
        assert!(
            has(
                &e,
                "namespaceGrants[Bad_NS].maxPriorityClass",
                "unknown PriorityClass `gpu-max`"
            ),
            "{e}"
        );
        assert!(has(&e, "namespaceGrants[empty]", "grants nothing"), "{e}");
        let e = errors(&DEFAULT_POLICY_YAML.replace("  mode: Warn", "  mode: Strict"));
        assert!(e.to_string().contains("unknown variant `Strict`"), "{e}");
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let e = errors(
            &DEFAULT_POLICY_YAML
                .replace(
                    "    relativeThroughput: 0.3\n",
                    "    relativeThroughput: 0\n",
                )
                .replace("  tau: 0.2 ", "  tau: 0 "),
        );
        assert!(has(&e, "catalog[L4-24GB].relativeThroughput", "> 0"), "{e}");
        assert!(has(&e, "learning.tau", "> 0"), "{e}");
    }

    #[test]
    fn syntax_and_unknown_fields_are_refused_with_a_location() {
        let e = errors("catalog: [unterminated");
        assert!(e.problems[0].field.starts_with("(line "), "{e}");
        let e = errors(&DEFAULT_POLICY_YAML.replace(
            "    pricePerHour: 0.50",
            "    pricePerHour: 0.50\n    colour: green",
        ));
        assert!(e.to_string().contains("unknown field `colour`"), "{e}");
        let e = errors(&DEFAULT_POLICY_YAML.replace("vendor: amd", "vendor: via"));
        assert!(e.to_string().contains("unknown variant `via`"), "{e}");
    }

    #[test]
    fn load_file_reports_unreadable_files() {
        let e = load_file(Path::new("/nonexistent/policy.yaml")).unwrap_err();
        assert_eq!(e.file, "/nonexistent/policy.yaml");
        assert!(has(&e, "(file)", "cannot read"), "{e}");
    }
}
