//! Why a decision came out as it did: the rule that picked its class, in one sentence with the numbers.
use ndarray::Array1;

use super::decide::Choice;
use super::objective::cost::Terms;
use super::posterior::{JobRef, Posterior};
use super::{Candidate, Rule, Why, feasibility, value};
use crate::policy::Policy;

/// Names the rule that picked the first of `choice.ranked`.
pub(super) fn why(
    policy: &Policy,
    post: &Posterior,
    who: JobRef,
    terms: &Terms,
    choice: &Choice,
) -> Why {
    let name = |i: usize| policy.classes[i].name.as_str();
    let (rule, reason) = match (choice.exploit, choice.sampled) {
        (Some(e), Some(s)) if choice.explored => (
            Rule::Exploration,
            format!(
                "exploring {}: its posterior draw costs {:.4}, below {:.4} for {}; its expected cost is {:.4} against {:.4}; {}; {}",
                name(s),
                terms.sampled_cost[s],
                terms.sampled_cost[e],
                name(e),
                terms.cost[s],
                terms.cost[e],
                worth(choice.verdict),
                what_is_known(policy, post, who, s),
            ),
        ),
        (Some(e), _) if choice.ranked.len() == 1 => (
            Rule::SingleFeasibleClass,
            format!("{} is the only feasible class", name(e)),
        ),
        (Some(e), Some(s)) if s != e => (
            Rule::ExplorationDeclined,
            format!(
                "{} has the lowest cost {:.4}; the posterior draw favoured {} but {}",
                name(e),
                terms.cost[e],
                name(s),
                if choice.allowed {
                    format!("exploring it does not pay: {}", worth(choice.verdict))
                } else {
                    "this decision may not explore (seeded draw above the cap, the window's budget spent, or nothing observed yet)".to_string()
                }
            ),
        ),
        (Some(e), _) => lowest_cost(policy, terms, &choice.ranked, choice.preferred, e),
        (None, _) => (Rule::NoFeasibleClass, "no class is feasible".to_string()),
    };
    Why {
        rule,
        reason,
        exploit: choice.exploit,
        sampled: choice.sampled,
        exploration_allowed: choice.allowed,
    }
}

/// "an expected saving of 0.31 runs' cost over ~12 future runs against 4.0 % more this run".
fn worth(verdict: Option<value::Verdict>) -> String {
    verdict.map_or_else(String::new, |v| {
        format!(
            "an expected saving of {:.2} runs' cost over ~{:.0} future runs of the job type against {:.1} % more this run",
            v.value,
            v.horizon,
            100.0 * v.cost
        )
    })
}

/// "3 run(s) of this job type on H100-80GB so far, its runtime known to ±12 %".
fn what_is_known(policy: &Policy, post: &Posterior, who: JobRef, s: usize) -> String {
    format!(
        "{} run(s) of this job type on {} so far, its runtime known to ±{:.0} %{}",
        post.count(who, s),
        policy.classes[s].name,
        100.0 * post.estimate(policy, who, s).log_var.sqrt(),
        if post.contradicted(who) {
            "; the job type's runs contradict its prior, so it is learned under a wider one"
        } else {
            ""
        }
    )
}

/// The lowest-cost class, or a tie broken by the tier's preferred class or the catalog order.
fn lowest_cost(
    policy: &Policy,
    terms: &Terms,
    ranked: &[usize],
    preferred: Option<usize>,
    e: usize,
) -> (Rule, String) {
    let name = |i: usize| policy.classes[i].name.as_str();
    let second = ranked[1];
    let cost = &terms.cost;
    if cost[second] != cost[e] {
        return (
            Rule::LowestCost,
            format!(
                "{} has the lowest cost {:.4} (next: {} at {:.4})",
                name(e),
                cost[e],
                name(second),
                cost[second]
            ),
        );
    }
    let (rule, why) = if preferred == Some(e) {
        (Rule::TiePreferredClass, "is the tier's preferred class")
    } else {
        (Rule::TieCatalogOrder, "comes first in the catalog")
    };
    (
        rule,
        format!(
            "{} ties with {} at cost {:.4} and {why}",
            name(e),
            name(second),
            cost[e]
        ),
    )
}

/// Orders classes by `key`, then the tier's preferred class first, then catalog order.
pub(super) fn rank(
    key: &Array1<f64>,
    preferred: Option<usize>,
    a: usize,
    b: usize,
) -> std::cmp::Ordering {
    key[a]
        .total_cmp(&key[b])
        .then_with(|| (preferred != Some(a)).cmp(&(preferred != Some(b))))
        .then(a.cmp(&b))
}

/// "no feasible GPU class for tier bronze: L4-24GB: needs 70 GiB …; 6 other classes not allowed for tier bronze".
pub(super) fn no_class_reason(policy: &Policy, tier: usize, candidates: &[Candidate]) -> String {
    let tier = &policy.tiers[tier];
    let mut parts = Vec::new();
    let mut not_allowed = 0;
    for c in candidates {
        if tier.allowed[c.class] {
            parts.push(format!(
                "{}: {}",
                policy.classes[c.class].name,
                feasibility::describe(&c.infeasible)
            ));
        } else {
            not_allowed += 1;
        }
    }
    if not_allowed > 0 {
        parts.push(format!(
            "{not_allowed} other class{} not allowed for tier {}",
            if not_allowed == 1 { " is" } else { "es are" },
            tier.name
        ));
    }
    format!(
        "no feasible GPU class for tier {}: {}",
        tier.name,
        parts.join("; ")
    )
}
