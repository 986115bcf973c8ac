//! Feasibility: the classes a job can never run on, and why. Checked before any cost is computed.
use std::fmt;

use crate::policy::{GpuClass, Tier, Vendor};

/// What a job needs from a GPU class.
#[derive(Debug, Clone, PartialEq)]
pub struct Needs<'a> {
    pub vendor: Option<Vendor>,
    /// Per GPU, GiB (from the request, else the job type's default).
    pub memory_gib: Option<f64>,
    /// True when `memory_gib` came from the job type's default rather than the request.
    pub memory_defaulted: bool,
    pub gpu_count: u32,
    /// Restriction from the request; empty = no restriction.
    pub candidates: &'a [String],
}

/// One reason a class cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Infeasible {
    NotACandidate,
    NotAllowedForTier {
        tier: String,
    },
    Vendor {
        class: Vendor,
        needed: Vendor,
    },
    Memory {
        needed: f64,
        has: f64,
        defaulted: bool,
    },
    GpuCount {
        needed: u32,
        per_node: u32,
    },
}

impl Infeasible {
    /// Appends the reason's text to `out`: the same text as `Display`, written without `core::fmt` for the
    /// common cases (every Score answer carries the texts of its infeasible classes).
    pub fn write_to(&self, out: &mut String) {
        match self {
            Infeasible::NotACandidate => out.push_str("not among the request's candidate classes"),
            Infeasible::NotAllowedForTier { tier } => {
                out.push_str("not allowed for tier ");
                out.push_str(tier);
            }
            Infeasible::Vendor { class, needed } => {
                out.push_str("vendor ");
                out.push_str(class.as_str());
                out.push_str(" but the job needs ");
                out.push_str(needed.as_str());
            }
            Infeasible::Memory {
                needed,
                has,
                defaulted,
            } => {
                out.push_str("needs ");
                push_f64(out, *needed);
                out.push_str(" GiB of GPU memory per GPU");
                if *defaulted {
                    out.push_str(" (job type default)");
                }
                out.push_str(", class has ");
                push_f64(out, *has);
                out.push_str(" GiB");
            }
            Infeasible::GpuCount { needed, per_node } => {
                out.push_str("needs ");
                push_int(out, u64::from(*needed));
                out.push_str(" GPUs in one Pod, nodes of this class have ");
                push_int(out, u64::from(*per_node));
            }
        }
    }
}

/// Appends `v` as `Display` writes it: whole numbers below 2^53 (GiB sizes, nearly always) as integers,
/// anything else through `core::fmt`.
fn push_f64(out: &mut String, v: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole number below is an exact f64
    if v.fract() == 0.0 && v.abs() < EXACT && !(v == 0.0 && v.is_sign_negative()) {
        if v < 0.0 {
            out.push('-');
        }
        push_int(out, v.abs() as u64);
    } else {
        use std::fmt::Write;
        write!(out, "{v}").expect("writing to a String cannot fail");
    }
}

/// Appends the decimal digits of `n`.
fn push_int(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[start..].iter().map(|&d| char::from(d)));
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        self.write_to(&mut text);
        f.write_str(&text)
    }
}

/// Every reason `class` cannot serve the job (empty = feasible).
pub fn check(
    class_index: usize,
    class: &GpuClass,
    tier: &Tier,
    needs: &Needs<'_>,
) -> Vec<Infeasible> {
    let mut why = Vec::new();
    if !needs.candidates.is_empty() && !needs.candidates.contains(&class.name) {
        why.push(Infeasible::NotACandidate);
    }
    if !tier.allowed[class_index] {
        why.push(Infeasible::NotAllowedForTier {
            tier: tier.name.clone(),
        });
    }
    if let Some(needed) = needs.vendor
        && needed != class.vendor
    {
        why.push(Infeasible::Vendor {
            class: class.vendor,
            needed,
        });
    }
    if let Some(needed) = needs.memory_gib
        && needed > class.memory_gib
    {
        why.push(Infeasible::Memory {
            needed,
            has: class.memory_gib,
            defaulted: needs.memory_defaulted,
        });
    }
    if needs.gpu_count > class.gpus_per_node {
        why.push(Infeasible::GpuCount {
            needed: needs.gpu_count,
            per_node: class.gpus_per_node,
        });
    }
    why
}

/// Joins the reasons of one class into one line.
pub fn describe(reasons: &[Infeasible]) -> String {
    /// Room for one reason: most texts are 30-80 bytes, so the line is allocated once, not grown.
    const PER_REASON: usize = 96;
    let mut line = String::with_capacity(PER_REASON * reasons.len());
    for (i, reason) in reasons.iter().enumerate() {
        if i > 0 {
            line.push_str("; ");
        }
        reason.write_to(&mut line);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts as `core::fmt` writes them (the format the answers always had).
    fn with_fmt(r: &Infeasible) -> String {
        match r {
            Infeasible::Memory {
                needed,
                has,
                defaulted,
            } => format!(
                "needs {needed} GiB of GPU memory per GPU{}, class has {has} GiB",
                if *defaulted {
                    " (job type default)"
                } else {
                    ""
                }
            ),
            Infeasible::GpuCount { needed, per_node } => {
                format!("needs {needed} GPUs in one Pod, nodes of this class have {per_node}")
            }
            Infeasible::Vendor { class, needed } => format!(
                "vendor {} but the job needs {}",
                class.as_str(),
                needed.as_str()
            ),
            Infeasible::NotAllowedForTier { tier } => format!("not allowed for tier {tier}"),
            Infeasible::NotACandidate => "not among the request's candidate classes".to_string(),
        }
    }

    #[test]
    fn texts_are_those_core_fmt_writes() {
        let numbers = [
            0.0,
            -0.0,
            1.0,
            70.0,
            40.5,
            0.1,
            1e-7,
            123_456_789_012_345.0,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            1e300,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
        ];
        let mut reasons = vec![
            Infeasible::NotACandidate,
            Infeasible::NotAllowedForTier {
                tier: "gold".to_string(),
            },
            Infeasible::Vendor {
                class: Vendor::Amd,
                needed: Vendor::Nvidia,
            },
            Infeasible::GpuCount {
                needed: u32::MAX,
                per_node: 0,
            },
        ];
        for (i, &needed) in numbers.iter().enumerate() {
            reasons.push(Infeasible::Memory {
                needed,
                has: numbers[numbers.len() - 1 - i],
                defaulted: i % 2 == 0,
            });
        }
        for r in &reasons {
            assert_eq!(describe(std::slice::from_ref(r)), with_fmt(r));
            assert_eq!(r.to_string(), with_fmt(r));
        }
        let joined: Vec<String> = reasons.iter().map(with_fmt).collect();
        assert_eq!(describe(&reasons), joined.join("; "));
        assert_eq!(describe(&[]), "");
    }
}
