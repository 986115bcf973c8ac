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

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Infeasible::NotACandidate => f.write_str("not among the request's candidate classes"),
            Infeasible::NotAllowedForTier { tier } => write!(f, "not allowed for tier {tier}"),
            Infeasible::Vendor { class, needed } => {
                write!(
                    f,
                    "vendor {} but the job needs {}",
                    class.as_str(),
                    needed.as_str()
                )
            }
            Infeasible::Memory {
                needed,
                has,
                defaulted,
            } => write!(
                f,
                "needs {needed} GiB of GPU memory per GPU{}, class has {has} GiB",
                if *defaulted {
                    " (job type default)"
                } else {
                    ""
                }
            ),
            Infeasible::GpuCount { needed, per_node } => {
                write!(
                    f,
                    "needs {needed} GPUs in one Pod, nodes of this class have {per_node}"
                )
            }
        }
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
    use std::fmt::Write;
    let mut line = String::new();
    for (i, reason) in reasons.iter().enumerate() {
        let separator = if i == 0 { "" } else { "; " };
        write!(line, "{separator}{reason}").expect("writing to a String cannot fail");
    }
    line
}
