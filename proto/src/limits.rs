//! The limits the scorer enforces on what it is sent, defined once for both sides: the scorer refuses a
//! request outside them (`INVALID_ARGUMENT`, see [`check_score_request`]), and a client brings its request
//! inside them before sending ([`fit_score_request`]), so that an odd input (a 300-byte tenant annotation)
//! changes the request, never the outcome of the call.
//!
//! They bound what one request can make the scorer allocate; none of them is a Kubernetes rule (Kubernetes
//! names are shorter still).

use std::fmt;

use crate::scorer::v1::{ObserveRequest, ScoreRequest};

/// Longest accepted string field (request id, namespace, tenant, tier, job type, class, observation id), in
/// bytes: the length of a DNS subdomain.
pub const MAX_NAME_BYTES: usize = 253;
/// Most entries of a repeated string field (candidate classes, co-located job types).
pub const MAX_LIST_ENTRIES: usize = 256;
/// Longest runtime `Observe` accepts, in seconds (about three years).
pub const MAX_RUNTIME_SECONDS: f64 = 1e8;
/// Longest workload key (`group/Kind/namespace/name[/group/N]`: a few DNS names).
pub const MAX_WORKLOAD_KEY_BYTES: usize = 1024;
/// Largest policy text `ValidatePolicy` reads (a ConfigMap holds at most 1 MiB).
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;

/// A field outside the limits, with what is wrong in words a log or an error status can carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub field: &'static str,
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.problem)
    }
}

impl std::error::Error for Violation {}

fn violation(field: &'static str, problem: String) -> Violation {
    Violation { field, problem }
}

/// A string field of at most [`MAX_NAME_BYTES`].
pub fn check_name(field: &'static str, value: &str) -> Result<(), Violation> {
    if value.len() > MAX_NAME_BYTES {
        return Err(violation(
            field,
            format!("is {} bytes long; at most {MAX_NAME_BYTES}", value.len()),
        ));
    }
    Ok(())
}

/// A repeated string field of at most [`MAX_LIST_ENTRIES`] entries, each a valid name.
pub fn check_list(field: &'static str, values: &[String]) -> Result<(), Violation> {
    if values.len() > MAX_LIST_ENTRIES {
        return Err(violation(
            field,
            format!("has {} entries; at most {MAX_LIST_ENTRIES}", values.len()),
        ));
    }
    values.iter().try_for_each(|v| check_name(field, v))
}

/// An optional amount: when present, a finite number ≥ 0.
pub fn check_amount(field: &'static str, value: Option<f64>) -> Result<(), Violation> {
    match value {
        Some(x) if !x.is_finite() || x < 0.0 => Err(violation(
            field,
            format!("must be a finite number >= 0, got {x}"),
        )),
        _ => Ok(()),
    }
}

/// Every limit of a `ScoreRequest` (also what `Explain` is sent); the first field outside them.
pub fn check_score_request(req: &ScoreRequest) -> Result<(), Violation> {
    for (field, v) in score_names(req) {
        check_name(field, v)?;
    }
    check_list("candidate_classes", &req.candidate_classes)?;
    check_list("colocated_job_types", &req.colocated_job_types)?;
    check_workload_key(&req.workload_key)?;
    check_amount("gpu_memory_gib", req.gpu_memory_gib)?;
    check_amount("model_size_billion_params", req.model_size_billion_params)
}

/// A workload key of at most [`MAX_WORKLOAD_KEY_BYTES`].
pub fn check_workload_key(key: &str) -> Result<(), Violation> {
    if key.len() > MAX_WORKLOAD_KEY_BYTES {
        return Err(violation(
            "workload_key",
            format!(
                "is {} bytes long; at most {MAX_WORKLOAD_KEY_BYTES}",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// The size limits of an `ObserveRequest` (whether its job type and class are known is the policy's question).
pub fn check_observe_request(req: &ObserveRequest) -> Result<(), Violation> {
    check_name("job_type", &req.job_type)?;
    check_name("gpu_class", &req.gpu_class)?;
    check_name("observation_id", &req.observation_id)?;
    check_list("colocated_job_types", &req.colocated_job_types)?;
    let r = req.runtime_seconds;
    if !r.is_finite() || r <= 0.0 || r > MAX_RUNTIME_SECONDS {
        return Err(violation(
            "runtime_seconds",
            format!("must be in (0, {MAX_RUNTIME_SECONDS}], got {r}"),
        ));
    }
    Ok(())
}

fn score_names(req: &ScoreRequest) -> [(&'static str, &String); 5] {
    [
        ("request_id", &req.request_id),
        ("namespace", &req.namespace),
        ("tenant", &req.tenant),
        ("tier", &req.tier),
        ("job_type", &req.job_type),
    ]
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let end = (0..=max)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(end);
    }
}

/// Brings a `ScoreRequest` inside the limits, and says what it changed (empty when nothing): a string longer
/// than [`MAX_NAME_BYTES`] is cut there (on a character boundary), list entries past [`MAX_LIST_ENTRIES`] and
/// over-long entries are dropped (a cut class name would name another class), an amount that is not a finite
/// number ≥ 0 is dropped. Afterwards [`check_score_request`] passes.
pub fn fit_score_request(req: &mut ScoreRequest) -> Vec<Violation> {
    let mut changed = Vec::new();
    for (field, v) in [
        ("request_id", &mut req.request_id),
        ("namespace", &mut req.namespace),
        ("tenant", &mut req.tenant),
        ("tier", &mut req.tier),
        ("job_type", &mut req.job_type),
    ] {
        if let Err(mut e) = check_name(field, v) {
            truncate_at_char(v, MAX_NAME_BYTES);
            e.problem
                .push_str(&format!(": cut to at most {MAX_NAME_BYTES} bytes"));
            changed.push(e);
        }
    }
    for (field, list) in [
        ("candidate_classes", &mut req.candidate_classes),
        ("colocated_job_types", &mut req.colocated_job_types),
    ] {
        let before = list.len();
        list.retain(|v| v.len() <= MAX_NAME_BYTES);
        list.truncate(MAX_LIST_ENTRIES);
        if list.len() != before {
            changed.push(violation(
                field,
                format!(
                    "had {before} entries (at most {MAX_LIST_ENTRIES}, each at most {MAX_NAME_BYTES} bytes): {} dropped",
                    before - list.len()
                ),
            ));
        }
    }
    for (field, v) in [
        ("gpu_memory_gib", &mut req.gpu_memory_gib),
        (
            "model_size_billion_params",
            &mut req.model_size_billion_params,
        ),
    ] {
        if let Err(mut e) = check_amount(field, *v) {
            *v = None;
            e.problem.push_str(": dropped");
            changed.push(e);
        }
    }
    if let Err(mut e) = check_workload_key(&req.workload_key) {
        // A cut key could name another workload: the Pod is decided on its own instead.
        req.workload_key.clear();
        req.group_size = None;
        e.problem
            .push_str(": dropped (the Pod is decided on its own)");
        changed.push(e);
    }
    debug_assert!(check_score_request(req).is_ok());
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ScoreRequest {
        ScoreRequest {
            request_id: "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
            namespace: "ml".into(),
            tenant: "team-a".into(),
            tier: "gold".into(),
            job_type: "train-llama".into(),
            gpu_count: 1,
            gpu_memory_gib: Some(40.0),
            candidate_classes: vec!["H100-80GB".into()],
            ..Default::default()
        }
    }

    #[test]
    fn a_request_inside_the_limits_is_left_alone() {
        let mut r = request();
        assert_eq!(check_score_request(&r), Ok(()));
        assert!(fit_score_request(&mut r).is_empty());
        assert_eq!(r, request());
        let mut edge = request();
        edge.tenant = "t".repeat(MAX_NAME_BYTES);
        edge.colocated_job_types = vec!["x".into(); MAX_LIST_ENTRIES];
        assert_eq!(check_score_request(&edge), Ok(()));
    }

    #[test]
    fn each_limit_is_checked_and_named() {
        type Spoil = fn(&mut ScoreRequest);
        let cases: [(&str, Spoil); 6] = [
            ("tenant", |r| r.tenant = "t".repeat(300)),
            ("request_id", |r| r.request_id = "u".repeat(254)),
            ("candidate_classes", |r| {
                r.candidate_classes = vec!["c".into(); 257]
            }),
            ("colocated_job_types", |r| {
                r.colocated_job_types = vec!["j".repeat(254)]
            }),
            ("gpu_memory_gib", |r| r.gpu_memory_gib = Some(f64::NAN)),
            ("model_size_billion_params", |r| {
                r.model_size_billion_params = Some(-1.0)
            }),
        ];
        for (field, spoil) in cases {
            let mut r = request();
            spoil(&mut r);
            assert_eq!(check_score_request(&r).unwrap_err().field, field);
            let changed = fit_score_request(&mut r);
            assert_eq!(changed.iter().map(|v| v.field).collect::<Vec<_>>(), [field]);
            assert_eq!(check_score_request(&r), Ok(()), "{field} after fitting");
        }
    }

    #[test]
    fn strings_are_cut_on_a_character_boundary() {
        let mut r = request();
        // 'é' is two bytes: 127 of them are 254 bytes, one too many; the cut cannot split the last one.
        r.tenant = "é".repeat(127);
        let changed = fit_score_request(&mut r);
        assert_eq!(changed[0].field, "tenant");
        assert!(
            changed[0].to_string().contains("254 bytes"),
            "{}",
            changed[0]
        );
        assert_eq!(r.tenant, "é".repeat(126));
        // Over-long list entries are dropped, not cut: a cut name would be another name.
        let mut r = request();
        r.candidate_classes = vec!["A".repeat(300), "B".into()];
        fit_score_request(&mut r);
        assert_eq!(r.candidate_classes, ["B"]);
    }

    #[test]
    fn observe_limits() {
        let ok = ObserveRequest {
            job_type: "train-llama".into(),
            gpu_class: "H100-80GB".into(),
            runtime_seconds: 3600.0,
            ..Default::default()
        };
        assert_eq!(check_observe_request(&ok), Ok(()));
        for bad in [0.0, -1.0, f64::NAN, MAX_RUNTIME_SECONDS * 2.0] {
            let r = ObserveRequest {
                runtime_seconds: bad,
                ..ok.clone()
            };
            assert_eq!(
                check_observe_request(&r).unwrap_err().field,
                "runtime_seconds"
            );
        }
        let r = ObserveRequest {
            observation_id: "o".repeat(254),
            ..ok
        };
        assert_eq!(
            check_observe_request(&r).unwrap_err().field,
            "observation_id"
        );
    }
}
