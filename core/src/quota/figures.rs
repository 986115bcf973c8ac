//! Usage against limits, scope by scope: what the frontend publishes as `gpu_admission_quota_gpus` and what
//! `gpu-admission quota usage` prints, from one function.
use std::collections::BTreeMap;

use gpu_admission_policy::Policy;
use gpu_admission_policy::quotas::{Limit, Limits, MilliGpus};

use super::Usage;

/// One scope's figure: a tier (`namespace` empty) or one of its namespaces, for one class (`class` `None`:
/// the total across classes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub tier: String,
    pub namespace: String,
    pub class: Option<String>,
    pub used: MilliGpus,
    /// The limit where the policy states one.
    pub limit: Option<Limit>,
}

/// Every limit of the policy's quotas with what its scope uses, and every use of a quota'd tier's namespaces
/// without a limit of its own; by tier in policy order, then namespace and class.
pub fn figures(policy: &Policy, usage: &Usage) -> Vec<Figure> {
    let mut out = Vec::new();
    for (t, tq) in policy.quotas.tiers.iter().enumerate() {
        let (Some(tq), Some(tier)) = (tq, policy.tiers.get(t)) else {
            continue;
        };
        let tier = tier.name.as_str();
        let mut rows: BTreeMap<(String, Option<String>), Figure> = BTreeMap::new();
        let mut limits = |namespace: &str, l: &Limits| {
            let classes = l
                .classes
                .iter()
                .enumerate()
                .filter_map(|(k, c)| Some((Some(policy.classes.get(k)?.name.clone()), (*c)?)));
            for (class, limit) in classes.chain(l.total.map(|t| (None, t))) {
                let row = row(&mut rows, tier, namespace, class);
                row.limit = Some(limit);
            }
        };
        limits("", &tq.limits);
        for n in &tq.namespaces {
            limits(&n.namespace, &n.limits);
        }
        for (ns, u) in usage.namespaces.iter().filter(|(_, u)| u.tier == tier) {
            for (class, milli) in u.classes.iter().map(|(c, m)| (Some(c.clone()), *m)) {
                row(&mut rows, tier, ns, class.clone()).used += milli;
                row(&mut rows, tier, "", class).used += milli;
            }
            row(&mut rows, tier, ns, None).used += u.total;
            row(&mut rows, tier, "", None).used += u.total;
        }
        out.extend(rows.into_values());
    }
    out
}

fn row<'r>(
    rows: &'r mut BTreeMap<(String, Option<String>), Figure>,
    tier: &str,
    namespace: &str,
    class: Option<String>,
) -> &'r mut Figure {
    rows.entry((namespace.to_string(), class.clone()))
        .or_insert_with(|| Figure {
            tier: tier.to_string(),
            namespace: namespace.to_string(),
            class,
            used: 0,
            limit: None,
        })
}
