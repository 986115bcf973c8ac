//! `check`'s output: a table (one row per Pod an object describes, the messages under it) or JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::evaluate::{Evaluation, PodDecision, TierFrom, Verdict};

/// How many objects got each verdict.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub allowed: usize,
    pub warned: usize,
    pub denied: usize,
    pub errors: usize,
    /// Objects no webhook looks at (no Pod, no pod template).
    pub ignored: usize,
}

impl Counts {
    pub fn of(evaluations: &[Evaluation], ignored: usize) -> Self {
        let n = |v: Verdict| evaluations.iter().filter(|e| e.verdict == v).count();
        Counts {
            allowed: n(Verdict::Allowed),
            warned: n(Verdict::Warned),
            denied: n(Verdict::Denied),
            errors: n(Verdict::Error),
            ignored,
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{} objects: {} allowed, {} warned, {} denied, {} errors; {} ignored (no Pod or pod template)",
            self.allowed + self.warned + self.denied + self.errors,
            self.allowed,
            self.warned,
            self.denied,
            self.errors,
            self.ignored
        )
    }
}

const HEADER: [&str; 8] = [
    "OBJECT",
    "TIER",
    "VERDICT",
    "POD",
    "OUTCOME",
    "GPU CLASS",
    "PLACED ON",
    "PRIORITYCLASS",
];

fn or_dash(s: Option<&str>) -> String {
    s.filter(|s| !s.is_empty()).unwrap_or("-").to_string()
}

/// The tier and what decided it: `gold`, or `bronze (default)` for an untiered namespace held to the
/// policy's default tier.
fn tier_cell(e: &Evaluation) -> String {
    match (e.tier.as_deref(), e.tier_from) {
        (Some(t), Some(TierFrom::Default)) if !t.is_empty() => format!("{t} (default)"),
        (tier, _) => or_dash(tier),
    }
}

fn pod_cells(p: &PodDecision) -> [String; 5] {
    let placed = match p.classes.as_slice() {
        [] => "-".to_string(),
        [one] => one.clone(),
        [a, b] => format!("{a},{b}"),
        many => format!("{} classes", many.len()),
    };
    [
        p.path.clone(),
        p.outcome.to_string(),
        or_dash(p.gpu_class.as_deref()),
        placed,
        or_dash(p.priority_class.as_deref()),
    ]
}

/// One row per Pod (an object without any: one row), then its messages, indented.
fn rows(e: &Evaluation) -> Vec<[String; 8]> {
    let head = [
        e.object.clone(),
        tier_cell(e),
        e.verdict.as_str().to_string(),
    ];
    let mut out = Vec::new();
    let pods: Vec<[String; 5]> = if e.pods.is_empty() {
        vec![["-".into(), "-".into(), "-".into(), "-".into(), "-".into()]]
    } else {
        e.pods.iter().map(pod_cells).collect()
    };
    for (i, p) in pods.into_iter().enumerate() {
        let [a, b, c] = if i == 0 {
            head.clone()
        } else {
            [String::new(), String::new(), String::new()]
        };
        let [d, f, g, h, j] = p;
        out.push([a, b, c, d, f, g, h, j]);
    }
    out
}

/// The table, the messages under each object, and the counts.
pub fn text(evaluations: &[Evaluation], counts: Counts) -> String {
    let table: Vec<(Vec<[String; 8]>, &Evaluation)> =
        evaluations.iter().map(|e| (rows(e), e)).collect();
    let mut widths = HEADER.map(str::len);
    for (rows, _) in &table {
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (cell, w) in cells.iter().zip(widths) {
            let _ = write!(s, "{cell:<w$}  ");
        }
        s.trim_end().to_string()
    };
    let mut out = line(&HEADER.map(String::from));
    out.push('\n');
    for (rows, e) in table {
        for row in rows {
            out.push_str(&line(&row));
            out.push('\n');
        }
        for m in e.message.iter() {
            for l in m.lines() {
                let _ = writeln!(out, "    denied: {l}");
            }
        }
        for w in &e.warnings {
            let _ = writeln!(out, "    warning: {w}");
        }
        for n in &e.notes {
            let _ = writeln!(out, "    note: {n}");
        }
        if let Some(f) = e
            .floor
            .as_ref()
            .filter(|f| **f != crate::floor::FloorAnswer::NotMatched)
        {
            let _ = writeln!(
                out,
                "    floor alone (the object's Pod templates, gpu-admission down): {}",
                f.describe()
            );
        }
        for p in &e.pods {
            if let Some(f) = p
                .floor
                .as_ref()
                .filter(|f| **f != crate::floor::FloorAnswer::NotMatched)
            {
                let _ = writeln!(
                    out,
                    "    floor alone ({}, gpu-admission down): {}",
                    p.path,
                    f.describe()
                );
            }
        }
        let _ = writeln!(out, "    from {}", e.source);
    }
    out.push_str(&counts.line());
    out.push('\n');
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    policy_version: &'a str,
    mode: &'a str,
    objects: &'a [Evaluation],
    counts: Counts,
}

/// `{"policy_version", "mode", "objects": [...], "counts": {...}}`.
pub fn json(evaluations: &[Evaluation], counts: Counts, version: &str, mode: &str) -> String {
    let report = JsonReport {
        policy_version: version,
        mode,
        objects: evaluations,
        counts,
    };
    serde_json::to_string_pretty(&report).unwrap_or_default()
}
