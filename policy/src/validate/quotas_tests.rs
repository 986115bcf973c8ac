use crate::quotas::Limit;
use crate::validate::{PolicyError, parse};
use crate::{DEFAULT_POLICY_YAML, Policy};

fn with(quotas: &str) -> Result<Policy, PolicyError> {
    parse(
        &format!("{DEFAULT_POLICY_YAML}\nquotas:\n{quotas}"),
        "p.yaml",
    )
}

/// The one problem of a quotas section, as `field: reason`.
fn only_problem(quotas: &str) -> String {
    let e = with(quotas).expect_err("policy should be refused");
    assert_eq!(e.problems.len(), 1, "{e}");
    format!("{}: {}", e.problems[0].field, e.problems[0].reason)
}

const GOOD: &str = "
  capacity: { L4-24GB: 64, H100-80GB: 16 }
  sharesEnforced: [L4-24GB]
  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 16, max: 32 } }
      total: { max: 40 }
      namespaces:
        - { namespace: students, classes: { L4-24GB: { min: 8, max: 16 } } }
        - { namespace: batch, classes: { L4-24GB: { min: 8, max: 32 } }, total: { min: 0, max: 10.5 } }
    - tier: gold
      classes: { H100-80GB: { min: 16 }, L4-24GB: { max: 8 } }
";

#[test]
fn a_quota_tree_is_indexed_by_tier_and_class_in_milli_gpus() {
    let p = with(GOOD).unwrap();
    let l4 = p.class_index("L4-24GB").unwrap();
    let h100 = p.class_index("H100-80GB").unwrap();
    let bronze = p.quotas.tier(p.tier_index("bronze").unwrap()).unwrap();
    assert_eq!(
        bronze.limits.class(l4),
        Some(Limit {
            min: 16_000,
            max: Some(32_000)
        })
    );
    assert_eq!(
        bronze.limits.total,
        Some(Limit {
            min: 0,
            max: Some(40_000)
        })
    );
    let batch = bronze.namespace("batch").unwrap();
    assert_eq!(batch.limits.total.unwrap().max, Some(10_500));
    let gold = p.quotas.tier(p.tier_index("gold").unwrap()).unwrap();
    assert_eq!(
        gold.limits.class(h100),
        Some(Limit {
            min: 16_000,
            max: None
        })
    );
    assert!(p.quotas.tier(p.tier_index("silver").unwrap()).is_none());
    assert_eq!(p.quotas.capacity[l4], Some(64_000));
    assert!(p.quotas.enforces_shares(l4) && !p.quotas.enforces_shares(h100));
    assert_eq!(p.quotas.borrowing.as_ref().unwrap().name, "gpu-borrowed");
    assert!(p.quotas.any());
}

#[test]
fn a_policy_without_quotas_has_none_and_keeps_its_rules_digest() {
    let p = parse(DEFAULT_POLICY_YAML, "p.yaml").unwrap();
    assert!(!p.quotas.any());
    assert!(p.quotas.borrowing.is_none());
    // The digest of a policy without quotas is what it was before quotas existed: the section is left out.
    let fields = crate::rule_fields(DEFAULT_POLICY_YAML).unwrap();
    assert!(fields.get("quotas").is_none());
}

#[test]
fn quotas_are_rules_the_digest_and_diff_see() {
    let old = parse(DEFAULT_POLICY_YAML, "p.yaml").unwrap();
    let new = with(GOOD).unwrap();
    assert_ne!(
        crate::rules_digest(&old.document),
        crate::rules_digest(&new.document)
    );
    let bigger = with(&GOOD.replace("min: 16, max: 32", "min: 16, max: 48")).unwrap();
    let changes: Vec<String> = crate::diff::rule_changes(&new, &bigger)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].contains("quotas"), "{changes:?}");
    assert!(
        changes[0].contains("32") && changes[0].contains("48"),
        "{changes:?}"
    );
}

#[test]
fn min_above_max_is_refused_with_its_path() {
    assert_eq!(
        only_problem("  tiers: [ { tier: bronze, classes: { L4-24GB: { min: 8, max: 4 } } } ]"),
        "quotas.tiers[bronze].classes[L4-24GB].min: min 8 is above max 4"
    );
}

#[test]
fn amounts_must_be_non_negative_thousandths() {
    let p = only_problem("  tiers: [ { tier: bronze, classes: { L4-24GB: { max: -1 } } } ]");
    assert!(
        p.starts_with("quotas.tiers[bronze].classes[L4-24GB].max: must be a number of GPUs >= 0"),
        "{p}"
    );
    let p = only_problem("  tiers: [ { tier: bronze, total: { max: 0.0001 } } ]");
    assert!(p.starts_with("quotas.tiers[bronze].total.max: "), "{p}");
}

#[test]
fn a_limit_must_state_something() {
    assert_eq!(
        only_problem("  tiers: [ { tier: bronze, classes: { L4-24GB: {} } } ]"),
        "quotas.tiers[bronze].classes[L4-24GB]: states neither min nor max"
    );
    assert_eq!(
        only_problem("  tiers: [ { tier: bronze } ]"),
        "quotas.tiers[bronze]: limits nothing: set classes and/or total"
    );
}

#[test]
fn unknown_tiers_and_classes_and_classes_outside_the_tier_are_refused() {
    assert_eq!(
        only_problem("  tiers: [ { tier: tin, total: { max: 1 } } ]"),
        "quotas.tiers[tin].tier: unknown tier `tin`"
    );
    assert_eq!(
        only_problem("  tiers: [ { tier: bronze, classes: { T4-16GB: { max: 1 } } } ]"),
        "quotas.tiers[bronze].classes[T4-16GB]: unknown GPU class `T4-16GB` (not in catalog)"
    );
    assert_eq!(
        only_problem("  tiers: [ { tier: bronze, classes: { H100-80GB: { max: 1 } } } ]"),
        "quotas.tiers[bronze].classes[H100-80GB]: tier `bronze` may not use GPU class `H100-80GB`"
    );
    assert_eq!(
        only_problem("  capacity: { T4-16GB: 4 }\n  tiers: []"),
        "quotas.capacity[T4-16GB]: unknown GPU class `T4-16GB` (not in catalog)"
    );
    assert_eq!(
        only_problem("  sharesEnforced: [L4-24GB, T4-16GB]\n  tiers: []"),
        "quotas.sharesEnforced[1]: unknown GPU class `T4-16GB` (not in catalog)"
    );
}

#[test]
fn a_tier_has_one_quota_and_a_namespace_one_tier() {
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: bronze, total: { max: 1 } }, { tier: bronze, total: { max: 2 } } ]"
        ),
        "quotas.tiers[bronze].tier: tier `bronze` has two quotas"
    );
    assert_eq!(
        only_problem(
            "  tiers:
    - { tier: bronze, total: { max: 4 }, namespaces: [ { namespace: ml, total: { max: 1 } } ] }
    - { tier: gold, total: { max: 4 }, namespaces: [ { namespace: ml, total: { max: 1 } } ] }"
        ),
        "quotas.tiers[gold].namespaces[ml].namespace: namespace `ml` already has a quota in tier `bronze`"
    );
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: bronze, total: { max: 4 }, namespaces: [ { namespace: Not_A_Name, total: { max: 1 } } ] } ]"
        ),
        "quotas.tiers[bronze].namespaces[Not_A_Name].namespace: `Not_A_Name` is not a valid namespace name"
    );
}

#[test]
fn a_namespace_max_is_at_most_its_tiers() {
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: bronze, classes: { L4-24GB: { max: 32 } }, namespaces: [ { namespace: ml, classes: { L4-24GB: { max: 40 } } } ] } ]"
        ),
        "quotas.tiers[bronze].namespaces[ml].classes[L4-24GB].max: 40 is above the tier's max 32"
    );
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: bronze, total: { max: 32 }, namespaces: [ { namespace: ml, total: { min: 0 } } ] } ]"
        ),
        "quotas.tiers[bronze].namespaces[ml].total.max: must be stated: the tier's max is 32"
    );
}

#[test]
fn the_namespaces_mins_sum_to_at_most_the_tiers_min() {
    assert_eq!(
        only_problem(
            "  tiers:
    - tier: bronze
      classes: { L4-24GB: { min: 10, max: 32 } }
      namespaces:
        - { namespace: a, classes: { L4-24GB: { min: 6, max: 8 } } }
        - { namespace: b, classes: { L4-24GB: { min: 6, max: 8 } } }"
        ),
        "quotas.tiers[bronze].classes[L4-24GB].min: the namespaces' mins sum to 12, above the tier's min 10"
    );
    // A tier that states no min guarantees nothing its namespaces could share.
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: bronze, total: { max: 8 }, namespaces: [ { namespace: a, total: { min: 1, max: 2 } } ] } ]"
        ),
        "quotas.tiers[bronze].total.min: the namespaces' mins sum to 1, above the tier's min 0"
    );
}

#[test]
fn the_classes_mins_fit_under_the_total_max() {
    assert_eq!(
        only_problem(
            "  tiers: [ { tier: silver, classes: { A100-80GB: { min: 8 }, L4-24GB: { min: 8 } }, total: { max: 12 } } ]"
        ),
        "quotas.tiers[silver].total.max: the classes' mins sum to 16, above the total max 12"
    );
}

#[test]
fn the_tiers_mins_of_a_class_fit_its_capacity() {
    assert_eq!(
        only_problem(
            "  capacity: { L4-24GB: 20 }
  tiers:
    - { tier: bronze, classes: { L4-24GB: { min: 16 } } }
    - { tier: silver, classes: { L4-24GB: { min: 8 } } }"
        ),
        "quotas.capacity[L4-24GB]: the tiers' mins sum to 24 (silver 8, bronze 16), above the class's capacity 20"
    );
}

#[test]
fn the_borrowers_class_is_below_every_bucket_and_not_a_bucket() {
    assert_eq!(
        only_problem("  borrowingPriorityClass: { name: gpu-borrowed, value: 1000 }\n  tiers: []"),
        "quotas.borrowingPriorityClass.value: must be below every bucket (the lowest is 1000), so that \
         borrowers are preempted first; got 1000"
    );
    let p = only_problem("  borrowingPriorityClass: { name: gpu-default, value: 10 }\n  tiers: []");
    assert!(
        p.starts_with("quotas.borrowingPriorityClass.name: `gpu-default` is a priority bucket"),
        "{p}"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = with(
        "  tiers:
    - { tier: tin, total: { max: 1 } }
    - { tier: bronze, classes: { L4-24GB: { min: 8, max: 4 }, H100-80GB: { max: 1 } } }",
    )
    .unwrap_err();
    let fields: Vec<&str> = e.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "quotas.tiers[tin].tier",
            "quotas.tiers[bronze].classes[H100-80GB]",
            "quotas.tiers[bronze].classes[L4-24GB].min"
        ]
    );
}
