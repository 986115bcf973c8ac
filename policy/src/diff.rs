//! What changed between two policies in the fields that decide what a tier gets, field by field, derived
//! from the schema itself (a field added to the schema is compared without a line here).
use std::fmt;

use serde_json::Value;

use crate::Policy;

/// One rule field that differs: its path (`tiers[bronze].allowedClasses`) and its values before and after
/// (`None`: absent on that side).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleChange {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

impl fmt::Display for RuleChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => {
                write!(f, "{}: {} -> {}", self.path, compact(old), compact(new))
            }
            (None, Some(new)) => write!(f, "{}: added {}", self.path, compact(new)),
            (Some(old), None) => write!(f, "{}: removed (was {})", self.path, compact(old)),
            (None, None) => write!(f, "{}: unchanged", self.path),
        }
    }
}

/// A value in one line: strings without quotes, everything else as JSON.
fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The rule fields that differ between `old` and `new`, in the schema's order.
pub fn rule_changes(old: &Policy, new: &Policy) -> Vec<RuleChange> {
    let fields = |p: &Policy| crate::validate::rule_fields(&p.document).unwrap_or(Value::Null);
    let mut out = Vec::new();
    compare("", &fields(old), &fields(new), &mut out);
    out
}

/// The key that names an element of a list of objects (`name`, or `namespace` for grants).
fn element_key(v: &Value) -> Option<&str> {
    v.get("name")
        .or_else(|| v.get("namespace"))
        .and_then(Value::as_str)
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn compare(path: &str, old: &Value, new: &Value, out: &mut Vec<RuleChange>) {
    if old == new {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => compare(&join(path, k), va, vb, out),
                    None => out.push(change(join(path, k), Some(va), None)),
                }
            }
            for (k, vb) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
                out.push(change(join(path, k), None, Some(vb)));
            }
        }
        (Value::Array(a), Value::Array(b))
            if a.iter().chain(b).all(|v| element_key(v).is_some()) =>
        {
            let find = |list: &'_ [Value], key: &str| -> Option<Value> {
                list.iter().find(|v| element_key(v) == Some(key)).cloned()
            };
            for va in a {
                let key = element_key(va).unwrap_or_default();
                let at = format!("{path}[{key}]");
                match find(b, key) {
                    Some(vb) => compare(&at, va, &vb, out),
                    None => out.push(change(at, Some(va), None)),
                }
            }
            for vb in b {
                let key = element_key(vb).unwrap_or_default();
                if find(a, key).is_none() {
                    out.push(change(format!("{path}[{key}]"), None, Some(vb)));
                }
            }
        }
        _ => out.push(change(path.to_string(), Some(old), Some(new))),
    }
}

fn change(path: String, old: Option<&Value>, new: Option<&Value>) -> RuleChange {
    let present = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    RuleChange {
        path,
        old: present(old),
        new: present(new),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_POLICY_YAML, parse};

    fn changes(new_text: &str) -> Vec<String> {
        let old = parse(DEFAULT_POLICY_YAML, "old").unwrap();
        let new = parse(new_text, "new").unwrap();
        rule_changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_job_types_priors_are_not_rules_and_everything_else_is() {
        assert!(changes(DEFAULT_POLICY_YAML).is_empty());
        let priors = DEFAULT_POLICY_YAML.replacen(
            "baseRuntimeSeconds: 86400",
            "baseRuntimeSeconds: 90000",
            1,
        );
        assert_ne!(priors, DEFAULT_POLICY_YAML);
        assert!(changes(&priors).is_empty(), "a job type's priors");
        // What could deny, steer or hide other tenants' Pods is a rule.
        let learning = DEFAULT_POLICY_YAML.replace("  seed: 0 ", "  seed: 7 ");
        assert_ne!(learning, DEFAULT_POLICY_YAML);
        assert_eq!(changes(&learning), ["learning.seed: 0 -> 7"]);
        let memory =
            DEFAULT_POLICY_YAML.replacen("defaultMemoryGiB: 40", "defaultMemoryGiB: 500", 1);
        assert_eq!(
            changes(&memory),
            ["jobTypes[train-llama].defaultMemoryGiB: 40.0 -> 500.0"]
        );
        let family = DEFAULT_POLICY_YAML.replacen(
            "    defaultMemoryGiB: 40\n",
            "    defaultMemoryGiB: 40\n    family: train-*\n",
            1,
        );
        assert_ne!(family, DEFAULT_POLICY_YAML);
        assert_eq!(
            changes(&family),
            ["jobTypes[train-llama].family: added train-*"]
        );
        // Whose runs are learned as the job type's is a rule too.
        let owner = DEFAULT_POLICY_YAML.replacen(
            "    defaultMemoryGiB: 40\n",
            "    defaultMemoryGiB: 40\n    owner: llm-prod\n",
            1,
        );
        assert_eq!(
            changes(&owner),
            ["jobTypes[train-llama].owner: added llm-prod"]
        );
        let bad = owner.replace("owner: llm-prod", "owner: LLM_prod");
        let err = crate::parse(&bad, "p.yaml").unwrap_err().to_string();
        assert!(
            err.contains("jobTypes[train-llama].owner")
                && err.contains("not a valid namespace name"),
            "{err}"
        );
    }

    #[test]
    fn the_job_types_a_change_touches_are_named() {
        let priors = DEFAULT_POLICY_YAML.replacen(
            "baseRuntimeSeconds: 86400",
            "baseRuntimeSeconds: 90000",
            1,
        );
        let names = crate::changed_job_types(DEFAULT_POLICY_YAML, &priors).unwrap();
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["train-llama"]);
        let added = DEFAULT_POLICY_YAML.replace(
            "jobTypes:\n",
            "jobTypes:\n  - { name: mine, workloadClass: training, baseRuntimeSeconds: 60, relativeStddev: 0.5 }\n",
        );
        let names = crate::changed_job_types(DEFAULT_POLICY_YAML, &added).unwrap();
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["mine"]);
        assert!(
            changes(&added).is_empty(),
            "a job type without defaultMemoryGiB is no rule"
        );
        assert!(crate::changed_job_types(DEFAULT_POLICY_YAML, "{").is_none());
    }

    #[test]
    fn text_change_is_a_rule_exactly_when_the_rules_digests_differ() {
        use crate::{TextChange, rules_digest, text_change};
        let priors = DEFAULT_POLICY_YAML.replacen(
            "baseRuntimeSeconds: 86400",
            "baseRuntimeSeconds: 90000",
            1,
        );
        let rule = DEFAULT_POLICY_YAML.replacen("tau: 0.2 ", "tau: 0.25 ", 1);
        assert_ne!(rule, DEFAULT_POLICY_YAML);
        for (text, expected) in [
            (
                DEFAULT_POLICY_YAML.to_string(),
                Some(TextChange::JobTypes(Default::default())),
            ),
            (
                priors,
                Some(TextChange::JobTypes(["train-llama".to_string()].into())),
            ),
            (rule.clone(), Some(TextChange::Rules)),
            ("{".to_string(), None),
        ] {
            let change = text_change(DEFAULT_POLICY_YAML, &text);
            assert_eq!(change, expected, "{}", &text[..text.len().min(40)]);
            let digests_differ =
                rules_digest(&text).map(|d| Some(d) != rules_digest(DEFAULT_POLICY_YAML));
            assert_eq!(
                digests_differ.unwrap_or(false),
                change == Some(TextChange::Rules)
            );
        }
        assert_eq!(text_change(&rule, "{"), None);
    }

    /// Every field of a job type is classified: a new field must be added to JOB_TYPE_PRIOR_FIELDS (a
    /// prior its owner may change) or be a rule like `defaultMemoryGiB`.
    #[test]
    fn every_job_type_field_is_classified() {
        let policy = parse(DEFAULT_POLICY_YAML, "default").unwrap();
        let raw: crate::schema::PolicyFile = serde_yaml::from_str(&policy.document).unwrap();
        // Every optional field set, so that every field serialises.
        let mut job = raw.job_types[0].clone();
        job.family = Some(job.name.clone());
        job.owner = Some("team".into());
        job.default_memory_gib = Some(1.0);
        let entry = serde_json::to_value(&job).unwrap();
        let mut keys: Vec<&str> = entry
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut known: Vec<&str> = crate::JOB_TYPE_PRIOR_FIELDS.to_vec();
        known.extend(["name", "defaultMemoryGiB", "family", "owner"]);
        known.sort_unstable();
        assert_eq!(keys, known);
    }

    #[test]
    fn each_rule_field_is_named_by_its_path() {
        let mode = DEFAULT_POLICY_YAML.replace("  mode: Warn", "  mode: Enforce");
        assert_eq!(changes(&mode), ["enforcement.mode: Warn -> Enforce"]);
        let cap = DEFAULT_POLICY_YAML.replace(
            "    maxPriorityClass: gpu-default\n    fallback: TierDefault",
            "    maxPriorityClass: gpu-medium\n    fallback: TierDefault",
        );
        assert_eq!(
            changes(&cap),
            ["tiers[bronze].maxPriorityClass: gpu-default -> gpu-medium"]
        );
        let grant = DEFAULT_POLICY_YAML.replace(
            "namespaceGrants: []",
            "namespaceGrants:\n  - { namespace: lab, allowedClasses: [A100-80GB] }",
        );
        let got = changes(&grant);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("namespaceGrants[lab]: added "),
            "{got:?}"
        );
    }
}
