//! Which Pods the apiserver sends to `/mutate-pod-checkpoint`, as the `matchConditions` entry the observer's
//! leader keeps on the registration's `checkpoint-restore.gpu-admission.io` webhook: only Pods controlled by
//! a Job that a stored CheckpointBackup could restore. Without it every Pod of every Job costs a round trip,
//! though only the Jobs with a backup can be restored.
//!
//! The condition is a superset of [`super::decide`]'s rule, never a subset: a Job backup sends the Pods its
//! Job controls (namespace and Job name, from the Pod's controlling owner reference, the same owner the
//! decision reads); a CronJob backup sends every Job-controlled Pod of its namespace (whether a Job belongs
//! to that CronJob is known only from the Job's own owner references, which the apiserver does not show a
//! match condition). No backup: no Pod is sent. A list too long for one expression ([`MAX_EXPRESSION`])
//! falls back to every Job-controlled Pod, the registration's shipped behaviour.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::backup::CheckpointBackup;
use super::names_cron_job;

/// The webhook entry of the shipped MutatingWebhookConfiguration the condition is kept on.
pub const WEBHOOK: &str = "checkpoint-restore.gpu-admission.io";
/// The condition's name (the key a strategic merge patch replaces it by).
pub const CONDITION: &str = "a-checkpointbackup-may-restore";

/// The longest expression written: far below what the apiserver's CEL cost limits allow for a list
/// membership test, and small enough that a registration with it stays a small object. Beyond it the
/// condition sends every Job-controlled Pod.
pub const MAX_EXPRESSION: usize = 64 * 1024;

/// The condition's expression for the stored backups.
pub fn expression(backups: &[CheckpointBackup]) -> String {
    let mut jobs = BTreeSet::new();
    let mut cron_namespaces = BTreeSet::new();
    for b in backups {
        let Some(namespace) = b.target_namespace() else {
            continue; // applies nowhere
        };
        let r = &b.spec.resource_ref;
        if names_cron_job(b) {
            cron_namespaces.insert(namespace.to_string());
        } else if r.kind == "Job" && !r.name.is_empty() {
            jobs.insert(format!("{namespace}/{}", r.name));
        }
    }
    let jobs: BTreeSet<_> = jobs
        .into_iter()
        .filter(|key| !cron_namespaces.contains(key.split('/').next().unwrap_or("")))
        .collect();
    if jobs.is_empty() && cron_namespaces.is_empty() {
        return "false".to_string();
    }
    let mut alternatives = Vec::new();
    if !cron_namespaces.is_empty() {
        alternatives.push(format!(
            "request.namespace in {}",
            cel_list(&cron_namespaces)
        ));
    }
    if !jobs.is_empty() {
        alternatives.push(format!(
            "(request.namespace + '/' + r.name) in {}",
            cel_list(&jobs)
        ));
    }
    let expression = format!(
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, \
         has(r.controller) && r.controller && r.kind == 'Job' && ({}))",
        alternatives.join(" || ")
    );
    if expression.len() > MAX_EXPRESSION {
        return "true".to_string();
    }
    expression
}

/// A CEL list of string literals. Namespace and object names are DNS labels or subdomains (lower-case
/// letters, digits, `-` and `.`), so no literal needs escaping; a name that would is left out of the list
/// (no stored object has one).
fn cel_list(items: &BTreeSet<String>) -> String {
    let quoted: Vec<String> = items
        .iter()
        .filter(|s| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/'))
        })
        .map(|s| format!("'{s}'"))
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// The condition as the registration holds it.
pub fn condition(expression: &str) -> Value {
    json!({"name": CONDITION, "expression": expression})
}

/// The condition's current expression on `webhook` of a stored MutatingWebhookConfiguration (as JSON).
pub fn current_expression(configuration: &Value) -> Option<&str> {
    configuration["webhooks"]
        .as_array()?
        .iter()
        .find(|w| w["name"] == WEBHOOK)?["matchConditions"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == CONDITION)?["expression"]
        .as_str()
}

/// Whether the configuration has the webhook entry at all (a registration without it is left alone).
pub fn has_webhook(configuration: &Value) -> bool {
    configuration["webhooks"]
        .as_array()
        .is_some_and(|ws| ws.iter().any(|w| w["name"] == WEBHOOK))
}

/// The strategic merge patch that sets the condition (webhooks merge by `name`, their `matchConditions` by
/// `name`): every other field and condition of the registration stays as its owner applied it.
pub fn patch(expression: &str) -> Value {
    json!({"webhooks": [{"name": WEBHOOK, "matchConditions": [condition(expression)]}]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(
        namespace: &str,
        kind: &str,
        name: &str,
        ref_namespace: Option<&str>,
    ) -> CheckpointBackup {
        serde_json::from_value(json!({
            "metadata": {"name": format!("b-{name}"), "namespace": namespace},
            "spec": {"resourceRef": {"apiVersion": "batch/v1", "kind": kind, "name": name,
                                     "namespace": ref_namespace}}
        }))
        .unwrap()
    }

    #[test]
    fn no_backup_sends_no_pod() {
        assert_eq!(expression(&[]), "false");
        // A backup naming another namespace restores nothing, so it sends nothing either.
        assert_eq!(
            expression(&[backup("a", "Job", "train", Some("b"))]),
            "false"
        );
        // Neither does a backup of a kind the restore never matches.
        assert_eq!(
            expression(&[backup("a", "Deployment", "web", None)]),
            "false"
        );
    }

    #[test]
    fn a_job_backup_sends_its_jobs_pods_and_a_cron_job_backup_its_namespaces() {
        let e = expression(&[
            backup("ml", "Job", "train", None),
            backup("ml", "Job", "eval", Some("ml")),
            backup("nightly", "CronJob", "etl", None),
            backup("nightly", "Job", "covered-by-the-namespace", None),
        ]);
        assert_eq!(
            e,
            "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, \
             has(r.controller) && r.controller && r.kind == 'Job' && (request.namespace in ['nightly'] || \
             (request.namespace + '/' + r.name) in ['ml/eval', 'ml/train']))"
        );
    }

    #[test]
    fn too_many_backups_fall_back_to_every_job_pod() {
        let many: Vec<_> = (0..4000)
            .map(|i| backup(&format!("team-{i}"), "Job", &format!("train-{i:05}"), None))
            .collect();
        assert_eq!(expression(&many), "true");
        let fewer = &many[..100];
        assert!(expression(fewer).len() < MAX_EXPRESSION);
        assert!(expression(fewer).contains("'team-99/train-00099'"));
    }

    #[test]
    fn the_condition_is_read_back_from_a_stored_registration() {
        let stored = json!({"webhooks": [
            {"name": "pods.gpu-admission.io", "matchConditions": [{"name": CONDITION, "expression": "x"}]},
            {"name": WEBHOOK, "matchConditions": [
                {"name": "other", "expression": "true"}, condition("false")]}
        ]});
        assert!(has_webhook(&stored));
        assert_eq!(current_expression(&stored), Some("false"));
        let shipped = json!({"webhooks": [{"name": WEBHOOK}]});
        assert_eq!(current_expression(&shipped), None);
        assert!(!has_webhook(
            &json!({"webhooks": [{"name": "pods.gpu-admission.io"}]})
        ));
        assert_eq!(
            patch("false"),
            json!({"webhooks": [{"name": WEBHOOK, "matchConditions": [
                {"name": CONDITION, "expression": "false"}]}]})
        );
    }
}
