//! A namespace's results → its `wgpolicyk8s.io/v1alpha2` PolicyReport (pure). One report per namespace,
//! named [`REPORT_NAME`], bounded: at most `max_results` results and about `max_bytes` of them, failures
//! first, then warnings, then skips (objects an exception allows), then passes. The summary counts every result, the ones left out too; the
//! annotation [`ANN_RESULTS_OMITTED`] says how many were left out.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use sha2::Digest;

use super::evaluate::{Finding, Outcome};

pub const API_VERSION: &str = "wgpolicyk8s.io/v1alpha2";
pub const GROUP: &str = "wgpolicyk8s.io";
pub const VERSION: &str = "v1alpha2";
pub const KIND: &str = "PolicyReport";
/// The one report the observer keeps in each namespace.
pub const REPORT_NAME: &str = "gpu-admission";
/// `source` of every result.
pub const SOURCE: &str = "gpu-admission";
/// `policy` of every result: the tier policy (the scorer's policy file).
pub const POLICY: &str = "gpu-admission-tier-policy";
pub const CATEGORY: &str = "GPU tier";
/// The label that marks our reports (and selects them when stale ones are deleted).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "gpu-admission-observer";
/// Results of the namespace left out of the report for size, and the limit.
pub const ANN_RESULTS_OMITTED: &str = "gpu-admission.io/results-omitted";
pub const ANN_RESULTS_LIMIT: &str = "gpu-admission.io/results-limit";
pub const ANN_POLICY_VERSION: &str = "gpu-admission.io/policy-version";

/// How large one report may grow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_results: usize,
    /// Bytes of serialized results (etcd refuses objects above 1.5 MiB).
    pub max_bytes: usize,
}

/// A report ready to apply.
#[derive(Debug, Clone)]
pub struct Built {
    /// The PolicyReport as applied (server-side apply).
    pub report: Value,
    /// The SHA-256 of its content without timestamps: equal digests mean nothing changed since the last
    /// write (kept per namespace instead of the report itself).
    pub digest: [u8; 32],
    pub omitted: usize,
}

fn sort_key(f: &Finding) -> (Outcome, &str, &str, &str, &str) {
    (
        f.outcome,
        f.resource.kind.as_str(),
        f.resource.name.as_str(),
        f.resource.uid.as_str(),
        f.rule,
    )
}

fn result(f: &Finding) -> Value {
    let mut r = json!({
        "source": SOURCE,
        "policy": POLICY,
        "rule": f.rule,
        "category": CATEGORY,
        "result": f.outcome.as_str(),
        // Warn mode's violations are not scored (the schema's `warn`: requirements not met, not scored).
        "scored": !matches!(f.outcome, Outcome::Warn | Outcome::Skip),
        "message": f.message,
        "resources": [{
            "apiVersion": f.resource.api_version,
            "kind": f.resource.kind,
            "namespace": f.resource.namespace,
            "name": f.resource.name,
            "uid": f.resource.uid,
        }],
        "properties": f.properties,
    });
    if f.outcome == Outcome::Fail {
        r["severity"] = json!("high");
    }
    r
}

/// The report of `namespace` from its `findings` (any order), audited at `now` with policy `version`.
pub fn build(
    namespace: &str,
    mut findings: Vec<Finding>,
    version: &str,
    limits: Limits,
    now: Timestamp,
) -> Built {
    findings.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    let mut summary: BTreeMap<&str, usize> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    for f in &findings {
        *summary.entry(f.outcome.as_str()).or_default() += 1;
    }
    let mut results = Vec::new();
    let mut bytes = 0;
    for f in &findings {
        let r = result(f);
        let size = r.to_string().len();
        if results.len() >= limits.max_results || bytes + size > limits.max_bytes {
            break;
        }
        bytes += size;
        results.push(r);
    }
    let omitted = findings.len() - results.len();
    let mut report = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": REPORT_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
            "annotations": {
                ANN_POLICY_VERSION: version,
                ANN_RESULTS_OMITTED: omitted.to_string(),
                ANN_RESULTS_LIMIT: limits.max_results.to_string(),
            },
        },
        "summary": summary,
        "results": results,
    });
    let digest = sha2::Sha256::digest(report.to_string().as_bytes()).into();
    let timestamp = json!({"seconds": now.as_second(), "nanos": now.subsec_nanosecond()});
    for r in report["results"].as_array_mut().into_iter().flatten() {
        r["timestamp"] = timestamp.clone();
    }
    Built {
        report,
        digest,
        omitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::evaluate::Resource;

    /// A pass, a warn and a fail, in that order.
    fn three_findings() -> Vec<Finding> {
        vec![
            finding(Outcome::Pass, "a", "within_tier"),
            finding(Outcome::Warn, "b", "class_outside_tier"),
            finding(Outcome::Fail, "c", "priority_above_cap"),
        ]
    }

    fn finding(outcome: Outcome, name: &str, rule: &'static str) -> Finding {
        Finding {
            outcome,
            rule,
            message: format!(
                "gpu-admission: Pod team/{name} is outside tier bronze: {}",
                "x".repeat(100)
            ),
            resource: Resource {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: "team".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            properties: BTreeMap::from([("tier".to_string(), "bronze".to_string())]),
        }
    }

    const LIMITS: Limits = Limits {
        max_results: 100,
        max_bytes: 1 << 20,
    };

    #[test]
    fn results_follow_the_schema_failures_first() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let b = build("team", three_findings(), "v7", LIMITS, now);
        let r = &b.report;
        assert_eq!(r["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(r["metadata"]["name"], REPORT_NAME);
        assert_eq!(r["metadata"]["annotations"][ANN_RESULTS_OMITTED], "0");
        assert_eq!(
            r["summary"],
            json!({"pass": 1, "fail": 1, "warn": 1, "error": 0, "skip": 0})
        );
        let results: Vec<(&str, &str)> = r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["result"].as_str().unwrap(), x["rule"].as_str().unwrap()))
            .collect();
        assert_eq!(
            results,
            [
                ("fail", "priority_above_cap"),
                ("warn", "class_outside_tier"),
                ("pass", "within_tier")
            ]
        );
        let fail = &r["results"][0];
        assert_eq!(fail["source"], SOURCE);
        assert_eq!(fail["policy"], POLICY);
        assert_eq!(fail["scored"], true);
        assert_eq!(r["results"][1]["scored"], false);
        assert_eq!(fail["resources"][0]["uid"], "uid-c");
        assert_eq!(
            fail["timestamp"],
            json!({"seconds": 1_800_000_000i64, "nanos": 0})
        );
        // The digest ignores the time: the same content later is no change.
        let later = build(
            "team",
            three_findings(),
            "v7",
            LIMITS,
            Timestamp::from_second(1_900_000_000).unwrap(),
        );
        assert_eq!(later.digest, b.digest);
        let other = build(
            "team",
            three_findings(),
            "v8",
            LIMITS,
            Timestamp::from_second(1_800_000_000).unwrap(),
        );
        assert_ne!(other.digest, b.digest, "another content, another digest");
    }

    #[test]
    fn a_report_is_bounded_by_count_and_by_bytes_and_says_what_it_left_out() {
        let many: Vec<Finding> = (0..50)
            .map(|i| {
                finding(
                    if i % 2 == 0 {
                        Outcome::Pass
                    } else {
                        Outcome::Fail
                    },
                    &format!("p{i:02}"),
                    "r",
                )
            })
            .collect();
        let b = build(
            "team",
            many.clone(),
            "v",
            Limits {
                max_results: 10,
                max_bytes: 1 << 20,
            },
            Timestamp::now(),
        );
        assert_eq!(b.report["results"].as_array().unwrap().len(), 10);
        assert_eq!(b.omitted, 40);
        assert_eq!(
            b.report["metadata"]["annotations"][ANN_RESULTS_OMITTED],
            "40"
        );
        assert_eq!(b.report["metadata"]["annotations"][ANN_RESULTS_LIMIT], "10");
        // The summary counts everything; the kept ones are failures.
        assert_eq!(b.report["summary"]["fail"], 25);
        assert_eq!(b.report["summary"]["pass"], 25);
        assert!(
            b.report["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["result"] == "fail")
        );

        let small = build(
            "team",
            many,
            "v",
            Limits {
                max_results: 100,
                max_bytes: 2_000,
            },
            Timestamp::now(),
        );
        let kept = small.report["results"].as_array().unwrap().len();
        assert!((1..10).contains(&kept), "{kept}");
        assert_eq!(small.omitted, 50 - kept);
        let bytes: usize = small.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.as_object_mut().unwrap().remove("timestamp");
                r.to_string().len()
            })
            .sum();
        assert!(bytes <= 2_000, "{bytes}");
    }
}
