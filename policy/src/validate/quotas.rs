//! `quotas`: validated as a tree, every problem with its field path
//! (`quotas.tiers[bronze].namespaces[students].classes[L4-24GB].max`).
//!
//! The tree rules: `min <= max` everywhere; a tier quota names a tier once and only classes the tier may use;
//! a namespace's `max` is at most its tier's `max` (per class and in total) and the namespaces' `min`s sum to
//! at most the tier's `min`; a namespace is in one tier's quota only; the tiers' `min`s of a class fit the
//! class's `capacity` where the policy states it; the borrowers' PriorityClass is below every bucket.
use std::collections::BTreeMap;

use super::Checker;
use crate::model::{Bucket, GpuClass, NameIndex, Tier};
use crate::quotas::{
    BorrowingClass, Limit, LimitSpec, Limits, MilliGpus, NamespaceQuota, Quotas, QuotasSpec,
    TierQuota, format_gpus, to_milli,
};

/// What the quota checks read of the rest of the policy.
pub(super) struct Context<'a> {
    pub classes: &'a [GpuClass],
    pub class_index: &'a NameIndex,
    pub tiers: &'a [Tier],
    pub tier_index: &'a NameIndex,
    pub buckets: &'a [Bucket],
}

impl Checker {
    /// The whole `quotas` section (an empty model when the policy has none).
    pub(super) fn quotas(&mut self, spec: Option<&QuotasSpec>, cx: &Context) -> Quotas {
        let mut out = Quotas {
            tiers: vec![None; cx.tiers.len()],
            capacity: vec![None; cx.classes.len()],
            shares_enforced: vec![false; cx.classes.len()],
            borrowing: None,
        };
        let Some(spec) = spec else {
            return out;
        };
        for (i, name) in spec.shares_enforced.iter().enumerate() {
            match cx.class_index.get(name) {
                Some(&k) => out.shares_enforced[k] = true,
                None => self.fail(
                    format!("quotas.sharesEnforced[{i}]"),
                    format!("unknown GPU class `{name}` (not in catalog)"),
                ),
            }
        }
        out.borrowing = Some(self.borrowing(spec, cx));
        for (name, &gpus) in &spec.capacity {
            let f = format!("quotas.capacity[{name}]");
            let milli = self.gpus(&f, gpus);
            match cx.class_index.get(name) {
                Some(&k) => out.capacity[k] = milli,
                None => self.fail(f, format!("unknown GPU class `{name}` (not in catalog)")),
            }
        }
        let mut namespace_tier: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, t) in spec.tiers.iter().enumerate() {
            let f = if t.tier.is_empty() {
                format!("quotas.tiers[{i}]")
            } else {
                format!("quotas.tiers[{}]", t.tier)
            };
            let Some(&ti) = cx.tier_index.get(&t.tier) else {
                self.fail(format!("{f}.tier"), format!("unknown tier `{}`", t.tier));
                continue;
            };
            if out.tiers[ti].is_some() {
                self.fail(
                    format!("{f}.tier"),
                    format!("tier `{}` has two quotas", t.tier),
                );
                continue;
            }
            let limits = self.limits(&f, &t.classes, t.total.as_ref(), &cx.tiers[ti], cx);
            let mut namespaces = Vec::new();
            for (j, n) in t.namespaces.iter().enumerate() {
                let nf = if n.namespace.is_empty() {
                    format!("{f}.namespaces[{j}]")
                } else {
                    format!("{f}.namespaces[{}]", n.namespace)
                };
                if !crate::names::is_namespace_name(&n.namespace) {
                    self.fail(
                        format!("{nf}.namespace"),
                        format!("`{}` is not a valid namespace name", n.namespace),
                    );
                }
                if let Some(other) = namespace_tier.insert(&n.namespace, &t.tier) {
                    self.fail(
                        format!("{nf}.namespace"),
                        format!(
                            "namespace `{}` already has a quota in tier `{other}`",
                            n.namespace
                        ),
                    );
                }
                let nl = self.limits(&nf, &n.classes, n.total.as_ref(), &cx.tiers[ti], cx);
                self.within_tier(&nf, &nl, &limits, cx);
                namespaces.push(NamespaceQuota {
                    namespace: n.namespace.clone(),
                    limits: nl,
                });
            }
            self.namespace_mins(&f, &namespaces, &limits, cx);
            out.tiers[ti] = Some(TierQuota { limits, namespaces });
        }
        self.capacity_fits(&out, cx);
        out
    }

    fn borrowing(&mut self, spec: &QuotasSpec, cx: &Context) -> BorrowingClass {
        let b = &spec.borrowing_priority_class;
        let f = "quotas.borrowingPriorityClass";
        self.label_value(format!("{f}.name"), &b.name);
        if cx.buckets.iter().any(|k| k.name == b.name) {
            self.fail(
                format!("{f}.name"),
                format!(
                    "`{}` is a priority bucket; borrowers need a class of their own",
                    b.name
                ),
            );
        }
        if let Some(lowest) = cx.buckets.iter().map(|k| k.value).min()
            && b.value >= lowest
        {
            self.fail(
                format!("{f}.value"),
                format!(
                    "must be below every bucket (the lowest is {lowest}), so that borrowers are preempted \
                     first; got {}",
                    b.value
                ),
            );
        }
        BorrowingClass {
            name: b.name.clone(),
            value: b.value,
        }
    }

    /// A GPU amount: finite, >= 0, in thousandths.
    fn gpus(&mut self, field: &str, gpus: f64) -> Option<MilliGpus> {
        let milli = to_milli(gpus);
        if milli.is_none() {
            self.fail(
                field,
                format!("must be a number of GPUs >= 0 in steps of 0.001, got {gpus}"),
            );
        }
        milli
    }

    fn limit(&mut self, f: &str, spec: &LimitSpec) -> Limit {
        let min = spec
            .min
            .and_then(|v| self.gpus(&format!("{f}.min"), v))
            .unwrap_or(0);
        let max = spec.max.and_then(|v| self.gpus(&format!("{f}.max"), v));
        if spec.min.is_none() && spec.max.is_none() {
            self.fail(f, "states neither min nor max");
        }
        if let Some(max) = max
            && min > max
        {
            self.fail(
                format!("{f}.min"),
                format!("min {} is above max {}", format_gpus(min), format_gpus(max)),
            );
        }
        Limit { min, max }
    }

    /// One node's limits: classes the tier may use, and a total its class `min`s fit under.
    fn limits(
        &mut self,
        f: &str,
        classes: &BTreeMap<String, LimitSpec>,
        total: Option<&LimitSpec>,
        tier: &Tier,
        cx: &Context,
    ) -> Limits {
        let mut out = Limits {
            classes: vec![None; cx.classes.len()],
            total: None,
        };
        if classes.is_empty() && total.is_none() {
            self.fail(f, "limits nothing: set classes and/or total");
        }
        for (name, spec) in classes {
            let cf = format!("{f}.classes[{name}]");
            let limit = self.limit(&cf, spec);
            match cx.class_index.get(name) {
                Some(&k) if tier.allowed[k] => out.classes[k] = Some(limit),
                Some(_) => self.fail(
                    cf,
                    format!("tier `{}` may not use GPU class `{name}`", tier.name),
                ),
                None => self.fail(cf, format!("unknown GPU class `{name}` (not in catalog)")),
            }
        }
        if let Some(t) = total {
            let limit = self.limit(&format!("{f}.total"), t);
            let mins: MilliGpus = out.classes.iter().flatten().map(|l| l.min).sum();
            if let Some(max) = limit.max
                && mins > max
            {
                self.fail(
                    format!("{f}.total.max"),
                    format!(
                        "the classes' mins sum to {}, above the total max {}",
                        format_gpus(mins),
                        format_gpus(max)
                    ),
                );
            }
            out.total = Some(limit);
        }
        out
    }

    /// A namespace's `max` is at most its tier's, per class and in total.
    fn within_tier(&mut self, nf: &str, ns: &Limits, tier: &Limits, cx: &Context) {
        let pairs = (0..cx.classes.len())
            .map(|k| {
                (
                    ns.class(k),
                    tier.class(k),
                    format!("classes[{}]", cx.classes[k].name),
                )
            })
            .chain([(ns.total, tier.total, "total".to_string())]);
        for (n, t, what) in pairs {
            let (Some(n), Some(t_max)) = (n, t.and_then(|t| t.max)) else {
                continue;
            };
            match n.max {
                Some(m) if m <= t_max => {}
                Some(m) => self.fail(
                    format!("{nf}.{what}.max"),
                    format!(
                        "{} is above the tier's max {}",
                        format_gpus(m),
                        format_gpus(t_max)
                    ),
                ),
                None => self.fail(
                    format!("{nf}.{what}.max"),
                    format!("must be stated: the tier's max is {}", format_gpus(t_max)),
                ),
            }
        }
    }

    /// The namespaces' `min`s sum to at most the tier's `min` (0 where the tier states none).
    fn namespace_mins(&mut self, f: &str, ns: &[NamespaceQuota], tier: &Limits, cx: &Context) {
        let class_sums = (0..cx.classes.len()).map(|k| {
            let sum: MilliGpus = ns
                .iter()
                .filter_map(|n| n.limits.class(k))
                .map(|l| l.min)
                .sum();
            (
                sum,
                tier.class(k),
                format!("classes[{}]", cx.classes[k].name),
            )
        });
        let total: MilliGpus = ns
            .iter()
            .filter_map(|n| n.limits.total)
            .map(|l| l.min)
            .sum();
        for (sum, t, what) in class_sums.chain([(total, tier.total, "total".to_string())]) {
            let tier_min = t.map_or(0, |t| t.min);
            if sum > tier_min {
                self.fail(
                    format!("{f}.{what}.min"),
                    format!(
                        "the namespaces' mins sum to {}, above the tier's min {}",
                        format_gpus(sum),
                        format_gpus(tier_min)
                    ),
                );
            }
        }
    }

    /// The tiers' `min`s of a class fit the class's stated capacity.
    fn capacity_fits(&mut self, q: &Quotas, cx: &Context) {
        for (k, cap) in q.capacity.iter().enumerate() {
            let Some(cap) = *cap else { continue };
            let holders: Vec<(&str, MilliGpus)> = q
                .tiers
                .iter()
                .enumerate()
                .filter_map(|(t, tq)| {
                    Some((cx.tiers[t].name.as_str(), tq.as_ref()?.limits.class(k)?.min))
                })
                .filter(|(_, m)| *m > 0)
                .collect();
            let sum: MilliGpus = holders.iter().map(|(_, m)| m).sum();
            if sum > cap {
                let list: Vec<String> = holders
                    .iter()
                    .map(|(t, m)| format!("{t} {}", format_gpus(*m)))
                    .collect();
                self.fail(
                    format!("quotas.capacity[{}]", cx.classes[k].name),
                    format!(
                        "the tiers' mins sum to {} ({}), above the class's capacity {}",
                        format_gpus(sum),
                        list.join(", "),
                        format_gpus(cap)
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
#[path = "quotas_tests.rs"]
mod tests;
