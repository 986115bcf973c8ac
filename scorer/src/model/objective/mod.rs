//! The tier's objective and the cost every feasible class is ranked by.
pub mod cost;

use crate::policy::{GpuClass, Objective};

/// What one unit of (normalised) runtime costs under `objective` on `class`: 1 for `fastest`,
/// the class's price per hour for `cheapest` (so the cost is runtime × price).
pub fn multiplier(objective: Objective, class: &GpuClass) -> f64 {
    match objective {
        Objective::Fastest => 1.0,
        Objective::Cheapest => class.price_per_hour,
    }
}
