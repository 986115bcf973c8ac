//! Why a decision came out as it did: the rule that picked its class, in one sentence with the numbers.

use super::objective::cost::Terms;
use super::posterior::{JobRef, Posterior};
use super::{AlternativeKind, Candidate, Choice, Rule, Why, feasibility, value};
use crate::policy::Policy;

/// Names the rule that picked the first of `choice.ranked`. The sentence is only written when asked for
/// ([`Why::reason`]): Score answers do not carry it, Explain answers do.
pub(super) fn why(
    policy: &Policy,
    post: &Posterior,
    who: JobRef,
    terms: &Terms,
    choice: &Choice,
) -> Why {
    let (rule, reason) = match (choice.exploit, choice.sampled) {
        (Some(e), Some(s)) if choice.explored => (
            Rule::Exploration,
            Reason::Exploring {
                s,
                e,
                sampled_cost: [terms.sampled_cost[s], terms.sampled_cost[e]],
                cost: [terms.cost[s], terms.cost[e]],
                verdict: choice.verdict,
                runs: post.count(who, s),
                known: post.estimate(policy, who, s).log_var.sqrt(),
                contradicted: post.contradicted(who),
                family_outlier: post.family_offset_contradicted(who, s),
                proposed: choice.by_value,
            },
        ),
        (Some(e), _) if choice.ranked.len() == 1 => (Rule::SingleFeasibleClass, Reason::Only { e }),
        (Some(e), Some(s)) if s != e => (
            Rule::ExplorationDeclined,
            Reason::Declined {
                e,
                cost: terms.cost[e],
                s,
                allowed: choice.allowed,
                unaffordable: choice.unaffordable,
                verdict: choice.verdict,
            },
        ),
        (Some(e), _) => lowest_cost(terms, &choice.ranked, choice.preferred, e),
        (None, _) => (Rule::NoFeasibleClass, Reason::NoClass),
    };
    Why {
        rule,
        reason,
        exploit: choice.exploit,
        sampled: choice.sampled,
        exploration_allowed: choice.allowed,
    }
}

/// The numbers behind a [`Why`]'s sentence (class indices into `policy.classes`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reason {
    /// Exploring `s` over the lowest-cost `e`: sampled costs and costs of (s, e), what `s` is known from.
    Exploring {
        s: usize,
        e: usize,
        sampled_cost: [f64; 2],
        cost: [f64; 2],
        verdict: Option<value::Verdict>,
        runs: u64,
        /// σ of the ln-runtime estimate on `s`.
        known: f64,
        contradicted: bool,
        /// The job's family's runs on `s` contradict the catalog there.
        family_outlier: bool,
        /// `s` was proposed by the value of an alternative reading of its estimate, not by the draw.
        proposed: Option<AlternativeKind>,
    },
    Only {
        e: usize,
    },
    Declined {
        e: usize,
        cost: f64,
        s: usize,
        allowed: bool,
        /// Exploring it pays, but the replica could not afford the try ([`value::affordable`]).
        unaffordable: bool,
        verdict: Option<value::Verdict>,
    },
    Lowest {
        e: usize,
        cost: f64,
        second: usize,
        second_cost: f64,
    },
    Tie {
        e: usize,
        second: usize,
        cost: f64,
        rule: Rule,
    },
    NoClass,
}

impl Reason {
    /// The rule in one sentence, with the numbers.
    pub(crate) fn sentence(&self, policy: &Policy) -> String {
        let name = |i: usize| policy.classes[i].name.as_str();
        match *self {
            Reason::Exploring {
                s,
                e,
                sampled_cost,
                cost,
                verdict,
                runs,
                known,
                contradicted,
                family_outlier,
                proposed,
            } => format!(
                "exploring {}: {}; its expected cost is {:.4} against {:.4} for {}; {}; {}",
                name(s),
                match proposed {
                    Some(AlternativeKind::FamilyUntried) => "no job type of its family has run on it yet (the family's offset there may be far from the catalog's)".to_string(),
                    Some(AlternativeKind::Straggled) => "the job type's only run on it was far slower than expected and may have straggled".to_string(),
                    None => format!(
                        "its posterior draw costs {:.4}, below {:.4} for {}",
                        sampled_cost[0],
                        sampled_cost[1],
                        name(e)
                    )
                },
                cost[0],
                cost[1],
                name(e),
                worth(verdict),
                what_is_known(name(s), runs, known, contradicted, family_outlier),
            ),
            Reason::Only { e } => format!("{} is the only feasible class", name(e)),
            Reason::Declined {
                e,
                cost,
                s,
                allowed,
                unaffordable,
                verdict,
            } => format!(
                "{} has the lowest cost {:.4}; the posterior draw favoured {} but {}",
                name(e),
                cost,
                name(s),
                if unaffordable {
                    format!(
                        "the try is not affordable yet: it would cost more than this replica's decisions have saved against the prior's choices ({})",
                        worth(verdict)
                    )
                } else if allowed {
                    format!("exploring it does not pay: {}", worth(verdict))
                } else {
                    "this decision may not explore (seeded draw above the cap, the window's budget spent, or nothing observed yet)".to_string()
                }
            ),
            Reason::Lowest {
                e,
                cost,
                second,
                second_cost,
            } => format!(
                "{} has the lowest cost {:.4} (next: {} at {:.4})",
                name(e),
                cost,
                name(second),
                second_cost
            ),
            Reason::Tie {
                e,
                second,
                cost,
                rule,
            } => {
                let why = if rule == Rule::TiePreferredClass {
                    "is the tier's preferred class"
                } else {
                    "comes first in the catalog"
                };
                format!(
                    "{} ties with {} at cost {:.4} and {why}",
                    name(e),
                    name(second),
                    cost
                )
            }
            Reason::NoClass => "no class is feasible".to_string(),
        }
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
fn what_is_known(
    class: &str,
    runs: u64,
    known: f64,
    contradicted: bool,
    family_outlier: bool,
) -> String {
    format!(
        "{runs} run(s) of this job type on {class} so far, its runtime known to ±{:.0} %{}{}",
        100.0 * known,
        if contradicted {
            "; the job type's runs contradict its prior, so it is learned under a wider one"
        } else {
            ""
        },
        if family_outlier {
            "; its family's runs there contradict the catalog, so the family's offset there is learned under a wider prior"
        } else {
            ""
        }
    )
}

/// The lowest-cost class, or a tie broken by the tier's preferred class or the catalog order.
fn lowest_cost(
    terms: &Terms,
    ranked: &[usize],
    preferred: Option<usize>,
    e: usize,
) -> (Rule, Reason) {
    let second = ranked[1];
    let cost = &terms.cost;
    if cost[second] != cost[e] {
        return (
            Rule::LowestCost,
            Reason::Lowest {
                e,
                cost: cost[e],
                second,
                second_cost: cost[second],
            },
        );
    }
    let rule = if preferred == Some(e) {
        Rule::TiePreferredClass
    } else {
        Rule::TieCatalogOrder
    };
    (
        rule,
        Reason::Tie {
            e,
            second,
            cost: cost[e],
            rule,
        },
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::embedded_default;

    #[test]
    fn an_exploring_sentence_says_what_is_known_of_the_class() {
        let p = embedded_default().unwrap();
        let exploring = |contradicted: bool, family_outlier: bool| Reason::Exploring {
            s: 0,
            e: 1,
            sampled_cost: [1.0, 2.0],
            cost: [3.0, 2.0],
            verdict: None,
            runs: 2,
            known: 0.12,
            contradicted,
            family_outlier,
            proposed: None,
        };
        let plain = exploring(false, false).sentence(&p);
        assert!(
            plain.contains(
                "2 run(s) of this job type on H200-141GB so far, its runtime known to ±12 %"
            ),
            "{plain}"
        );
        assert!(!plain.contains("contradict"), "{plain}");
        let outlier = exploring(false, true).sentence(&p);
        assert!(
            outlier.contains("its family's runs there contradict the catalog"),
            "{outlier}"
        );
        assert!(
            !outlier.contains("the job type's runs contradict"),
            "{outlier}"
        );
        let both = exploring(true, true).sentence(&p);
        assert!(
            both.contains("the job type's runs contradict its prior")
                && both.contains("its family's runs there"),
            "{both}"
        );
    }
}
