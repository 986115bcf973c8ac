//! One check per section of the policy file, each returning what it built for [`Policy`].

use std::collections::BTreeSet;

use ndarray::Array2;

/// Distinct `jobTypes[].family` patterns a policy may declare.
pub(crate) const MAX_FAMILIES: usize = 16;

use super::Checker;
use crate::model::{Bucket, DraDevices, GpuClass, JobType, NameIndex, Tier, WorkloadClass};
use crate::schema::{DraDevicesSpec, GpuClassSpec, PolicyFile, RuntimeProfile};

impl Checker {
    /// `catalog`: every GPU class, with its node label, taint and identifying labels.
    pub(super) fn catalog(&mut self, raw: &PolicyFile) -> (Vec<GpuClass>, NameIndex) {
        if raw.catalog.is_empty() {
            self.fail("catalog", "must list at least one GPU class");
        }
        let mut class_index = NameIndex::default();
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
            let dra = g.dra.as_ref().map(|d| self.dra_devices(&f, g, d));
            classes.push(GpuClass {
                dra,
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
        // A device belongs to one class: no product of one driver in two classes.
        let mut products = std::collections::BTreeMap::new();
        for c in &classes {
            for n in c.dra.iter().flat_map(|d| &d.product_names) {
                let driver = c.dra.as_ref().map(|d| d.driver.as_str()).unwrap_or("");
                if let Some(other) = products.insert((driver, n.as_str()), c.name.as_str()) {
                    self.fail(
                        format!("catalog[{}].dra.productNames", c.name),
                        format!("product `{n}` is a product of class {other} too: a device belongs to one class"),
                    );
                }
            }
        }
        (classes, class_index)
    }

    /// `catalog[*].dra`: a class name that makes a DeviceClass name, a driver name, a CEL identifier as the
    /// attribute, product names that are plain text (written into CEL literals), none twice in the catalog.
    fn dra_devices(&mut self, f: &str, g: &GpuClassSpec, d: &DraDevicesSpec) -> DraDevices {
        use crate::device_classes as dc;
        if !dc::is_valid_class_name(&g.name) {
            self.fail(
                format!("{f}.dra"),
                format!(
                    "the class name `{}` lowercased is not a DNS label, so it names no DeviceClass",
                    g.name
                ),
            );
        }
        let driver = d
            .driver
            .clone()
            .unwrap_or_else(|| g.vendor.facts().dra_driver.to_string());
        let dns = |s: &str| {
            s.split('.').count() >= 2
                && s.split('.').all(|p| {
                    !p.is_empty()
                        && p.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                })
        };
        if !dns(&driver) {
            self.fail(
                format!("{f}.dra.driver"),
                format!("`{driver}` is not a DRA driver name (a DNS subdomain)"),
            );
        }
        let attribute = d
            .attribute
            .clone()
            .unwrap_or_else(|| dc::DEFAULT_PRODUCT_ATTRIBUTE.to_string());
        if !dc::is_attribute_name(&attribute) {
            self.fail(
                format!("{f}.dra.attribute"),
                format!("`{attribute}` is not an attribute name ([A-Za-z][A-Za-z0-9_]*)"),
            );
        }
        if d.product_names.is_empty() {
            self.fail(
                format!("{f}.dra.productNames"),
                "must list at least one product name",
            );
        }
        for n in &d.product_names {
            if !dc::is_plain_text(n) {
                self.fail(
                    format!("{f}.dra.productNames"),
                    format!(
                        "`{n}` must be 1-256 printable characters without quotes or backslashes"
                    ),
                );
            }
        }
        DraDevices {
            driver,
            attribute,
            product_names: d.product_names.clone(),
        }
    }

    /// `tiers` and `defaultTier`: each tier's allowed and preferred classes (by catalog index).
    pub(super) fn tiers(
        &mut self,
        raw: &PolicyFile,
        class_index: &NameIndex,
        classes: &[GpuClass],
    ) -> (Vec<Tier>, NameIndex, Option<usize>) {
        if raw.tiers.is_empty() {
            self.fail("tiers", "must list at least one tier");
        }
        let mut tier_index = NameIndex::default();
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
        (tiers, tier_index, default_tier)
    }

    /// `workloadClasses`: all five, nothing else.
    pub(super) fn workload_classes(&mut self, raw: &PolicyFile) -> Vec<(f64, RuntimeProfile)> {
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
        workload
    }

    /// `jobTypes`: each job type's workload class and runtime profile.
    pub(super) fn job_types(&mut self, raw: &PolicyFile) -> (Vec<JobType>, NameIndex) {
        let mut job_index = NameIndex::default();
        let mut job_types = Vec::new();
        let mut families = BTreeSet::new();
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
            if let Some(family) = &j.family {
                self.family(&f, &j.name, family);
                // Each family adds 1 + classes parameters to the scorer's shared system (solved in cubic
                // time at every change of the learned state).
                if families.insert(family.clone()) && families.len() > MAX_FAMILIES {
                    self.fail(
                        format!("{f}.family"),
                        format!("at most {MAX_FAMILIES} distinct families, `{family}` is one more"),
                    );
                }
            }
            if let Some(owner) = &j.owner
                && !crate::names::is_namespace_name(owner)
            {
                self.fail(
                    format!("{f}.owner"),
                    format!("`{owner}` is not a valid namespace name"),
                );
            }
            job_types.push(JobType {
                name: j.name.clone(),
                workload_class,
                profile,
                default_memory_gib: j.default_memory_gib,
                family: j.family.clone(),
                owner: j.owner.clone(),
            });
        }
        (job_types, job_index)
    }

    /// `jobTypes[].family`: a name pattern of at most 63 characters, without the MIG placeholder, that the job
    /// type's own name matches.
    fn family(&mut self, f: &str, name: &str, family: &str) {
        let field = format!("{f}.family");
        if family.is_empty() || family.len() > 63 || family.contains('{') {
            self.fail(
                field,
                format!("must be a name pattern of 1 to 63 characters (`*`, `**` as wildcards), got `{family}`"),
            );
        } else if crate::gpu_resources::match_pattern(family, name).is_none() {
            self.fail(
                field,
                format!("`{family}` does not match the job type's own name `{name}`"),
            );
        }
    }

    /// `interference`: the slowdown prior of every pair of job types.
    pub(super) fn interference(
        &mut self,
        raw: &PolicyFile,
        job_index: &NameIndex,
        job_types: usize,
    ) -> Array2<f64> {
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
        let n = job_types;
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
        prior
    }

    /// `priority`: the points and the buckets (highest `minScore` first), and the buckets' names.
    pub(super) fn priority_buckets(&mut self, raw: &PolicyFile) -> (Vec<Bucket>, BTreeSet<String>) {
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
        (buckets, names)
    }

    /// `learning`: the model's hyper-parameters.
    pub(super) fn learning(&mut self, raw: &PolicyFile) {
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
        self.positive("learning.gpuScalingStddev", l.gpu_scaling_stddev);
        self.positive("learning.classOffsetStddev", l.class_offset_stddev);
        self.positive("learning.exponentStddev", l.exponent_stddev);
        self.positive("learning.cellStddev", l.cell_stddev);
        self.range("learning.stragglerShare", l.straggler_share, 0.0, 0.5);
        self.positive("learning.stragglerTail", l.straggler_tail);
        if l.exploration_window == 0 || l.exploration_window > 100_000 {
            self.fail(
                "learning.explorationWindow",
                format!("must be in [1, 100000], got {}", l.exploration_window),
            );
        }
    }
}

#[cfg(test)]
mod family_tests {
    use crate::DEFAULT_POLICY_YAML;
    use crate::validate::parse;

    fn with_family(family: &str) -> String {
        DEFAULT_POLICY_YAML.replace(
            "  - name: batch-etl\n    workloadClass: batch\n",
            &format!("  - name: batch-etl\n    family: \"{family}\"\n    workloadClass: batch\n"),
        )
    }

    #[test]
    fn at_most_sixteen_families() {
        let mut text = DEFAULT_POLICY_YAML.to_string();
        let mut jobs = String::from("jobTypes:\n");
        for i in 0..17 {
            jobs.push_str(&format!(
                "  - name: job{i}-a\n    family: \"job{i}-*\"\n    workloadClass: batch\n    baseRuntimeSeconds: 60\n    relativeStddev: 0.5\n"
            ));
        }
        text = text.replacen("jobTypes:\n", &jobs, 1);
        let e = parse(&text, "p.yaml").expect_err("17 families");
        assert!(
            e.problems
                .iter()
                .any(|p| p.field == "jobTypes[job16-a].family" && p.reason.contains("at most 16")),
            "{e}"
        );
        assert!(
            !e.problems
                .iter()
                .any(|p| p.field == "jobTypes[job15-a].family"),
            "{e}"
        );
    }

    #[test]
    fn a_family_is_a_pattern_its_own_job_type_matches() {
        let p = parse(&with_family("batch-*"), "p.yaml").unwrap();
        let j = &p.job_types[p.job_index("batch-etl").unwrap()];
        assert_eq!(j.family.as_deref(), Some("batch-*"));
        // Absent: no family.
        let p = parse(DEFAULT_POLICY_YAML, "p.yaml").unwrap();
        assert!(p.job_types.iter().all(|j| j.family.is_none()));
        for (family, reason) in [
            (
                "train-*",
                "does not match the job type's own name `batch-etl`",
            ),
            ("", "must be a name pattern"),
            ("batch-{memoryGiB}", "must be a name pattern"),
        ] {
            let e = parse(&with_family(family), "p.yaml").expect_err(family);
            assert!(
                e.problems
                    .iter()
                    .any(|p| p.field == "jobTypes[batch-etl].family" && p.reason.contains(reason)),
                "{family}: {e}"
            );
        }
    }
}
