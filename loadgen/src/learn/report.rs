//! What `loadgen learn` measures.
//!
//! Regret of a decision = its true expected cost / the oracle's − 1, in the tier's objective (runtime for
//! `fastest`, runtime × price × GPUs for `cheapest`); a window's regret is the mean over its decisions.
//! Compared policies, on the same jobs:
//! - `scorer`: what the learning scorer chose;
//! - `prior_only`: what a scorer that never observes anything chooses (its catalog priors);
//! - `best_static`: per tier, the one class that in hindsight has the lowest mean regret over the whole
//!   run (used whenever feasible; otherwise the prior-only choice).
//!
//! Avoid-list precision/recall: over ordered pairs (job type, other job type), the pairs on the scorer's
//! avoid-list at the end against the pairs whose true slowdown is above the policy's threshold.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use serde::Serialize;

use super::truth::{Catalog, NOISE, Truth};
use crate::cli::LearnArgs;

/// One scored job.
#[derive(Debug, Clone)]
pub struct Decision {
    pub tier: String,
    pub cheapest: bool,
    pub chosen: usize,
    pub prior: usize,
    /// True expected cost of every feasible class (catalog order).
    pub costs: Vec<Option<f64>>,
    pub explored: bool,
}

impl Decision {
    fn oracle(&self) -> f64 {
        self.costs
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    fn regret(&self, class: usize) -> f64 {
        self.costs[class].map_or(0.0, |c| c / self.oracle() - 1.0)
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Regret {
    pub scorer: f64,
    pub prior_only: f64,
    pub best_static: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Exploration {
    pub share: f64,
    pub share_first_10pct: f64,
    pub share_last_25pct: f64,
    pub cap: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct PrecisionRecall {
    pub precision: f64,
    pub recall: f64,
    /// Pairs truly above the threshold, pairs on the avoid-lists, pairs on both.
    pub truly_harmful: usize,
    pub listed: usize,
    pub correct: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub decisions: usize,
    pub infeasible: usize,
    pub feedback_delay: usize,
    pub noise_log_stddev: f64,
    /// Job types pinned to gain 1.4x and 9x between the slowest and the fastest class.
    pub pinned_speedups: Vec<(String, f64)>,
    pub all: Regret,
    pub first_10pct: Regret,
    pub last_25pct: Regret,
    /// Last 25 %, `fastest` tiers (runtime regret) and `cheapest` tiers (cost regret).
    pub last_25pct_fastest: Regret,
    pub last_25pct_cheapest: Regret,
    /// Per tier: the best static class in hindsight.
    pub best_static_class: BTreeMap<String, String>,
    pub exploration: Exploration,
    pub avoid_list: PrecisionRecall,
    pub avoid_list_prior_only: PrecisionRecall,
    /// Rolling mean regret (window `curve_window`) at every decision: scorer, prior-only, best static.
    pub curve_window: usize,
    #[serde(skip)]
    pub curve: Vec<(f64, f64, f64)>,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

fn precision_recall(truth: &Truth, threshold: f64, avoid: &[Vec<usize>]) -> PrecisionRecall {
    let n = truth.slowdown.len();
    let harmful: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .filter(|&(a, b)| truth.slowdown[a][b] > threshold)
        .collect();
    let listed: Vec<(usize, usize)> = avoid
        .iter()
        .enumerate()
        .flat_map(|(a, l)| l.iter().map(move |&b| (a, b)))
        .collect();
    let correct = listed.iter().filter(|p| harmful.contains(p)).count();
    PrecisionRecall {
        precision: if listed.is_empty() {
            1.0
        } else {
            correct as f64 / listed.len() as f64
        },
        recall: if harmful.is_empty() {
            1.0
        } else {
            correct as f64 / harmful.len() as f64
        },
        truly_harmful: harmful.len(),
        listed: listed.len(),
        correct,
    }
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        args: &LearnArgs,
        cat: &Catalog,
        truth: &Truth,
        decisions: &[Decision],
        infeasible: usize,
        cap: f64,
        threshold: f64,
        avoid: &[Vec<usize>],
        avoid_prior: &[Vec<usize>],
    ) -> Self {
        // Best static class per tier, in hindsight.
        let mut best_static: BTreeMap<String, usize> = BTreeMap::new();
        let tiers: Vec<String> = {
            let mut t: Vec<String> = decisions.iter().map(|d| d.tier.clone()).collect();
            t.sort();
            t.dedup();
            t
        };
        let static_regret = |d: &Decision, c: usize| {
            if d.costs[c].is_some() {
                d.regret(c)
            } else {
                d.regret(d.prior)
            }
        };
        for t in &tiers {
            let of_tier: Vec<&Decision> = decisions.iter().filter(|d| &d.tier == t).collect();
            let best = (0..cat.classes.len())
                .filter(|&c| of_tier.iter().any(|d| d.costs[c].is_some()))
                .min_by(|&a, &b| {
                    let ra = mean(of_tier.iter().map(|d| static_regret(d, a)));
                    let rb = mean(of_tier.iter().map(|d| static_regret(d, b)));
                    ra.total_cmp(&rb)
                })
                .unwrap_or(0);
            best_static.insert(t.clone(), best);
        }
        let per: Vec<(f64, f64, f64)> = decisions
            .iter()
            .map(|d| {
                (
                    d.regret(d.chosen),
                    d.regret(d.prior),
                    static_regret(d, best_static[&d.tier]),
                )
            })
            .collect();
        let n = per.len();
        let window = |from: usize, to: usize, filter: &dyn Fn(&Decision) -> bool| {
            let idx: Vec<usize> = (from..to).filter(|&i| filter(&decisions[i])).collect();
            Regret {
                scorer: mean(idx.iter().map(|&i| per[i].0)),
                prior_only: mean(idx.iter().map(|&i| per[i].1)),
                best_static: mean(idx.iter().map(|&i| per[i].2)),
            }
        };
        let all = |_: &Decision| true;
        let (first, last) = (n / 10, n - n / 4);
        let share = |from: usize, to: usize| {
            mean(
                decisions[from..to]
                    .iter()
                    .map(|d| f64::from(u8::from(d.explored))),
            )
        };
        let curve_window = (n / 20).max(50).min(n.max(1));
        let mut curve = Vec::with_capacity(n);
        let mut sums = (0.0, 0.0, 0.0);
        for i in 0..n {
            sums.0 += per[i].0;
            sums.1 += per[i].1;
            sums.2 += per[i].2;
            if i >= curve_window {
                let o = per[i - curve_window];
                sums.0 -= o.0;
                sums.1 -= o.1;
                sums.2 -= o.2;
            }
            let k = (i + 1).min(curve_window) as f64;
            curve.push((sums.0 / k, sums.1 / k, sums.2 / k));
        }
        Self {
            seed: args.seed,
            decisions: n,
            infeasible,
            feedback_delay: args.feedback_delay,
            noise_log_stddev: NOISE,
            pinned_speedups: truth.pinned.clone(),
            all: window(0, n, &all),
            first_10pct: window(0, first, &all),
            last_25pct: window(last, n, &all),
            last_25pct_fastest: window(last, n, &|d| !d.cheapest),
            last_25pct_cheapest: window(last, n, &|d| d.cheapest),
            best_static_class: best_static
                .iter()
                .map(|(t, &c)| (t.clone(), cat.classes[c].name.clone()))
                .collect(),
            exploration: Exploration {
                share: share(0, n),
                share_first_10pct: share(0, first),
                share_last_25pct: share(last, n),
                cap,
            },
            avoid_list: precision_recall(truth, threshold, avoid),
            avoid_list_prior_only: precision_recall(truth, threshold, avoid_prior),
            curve_window,
            curve,
        }
    }

    pub fn print(&self) {
        let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
        println!(
            "loadgen learn: seed {}, {} decisions ({} with no feasible class skipped), feedback delay {}, noise σ {}",
            self.seed, self.decisions, self.infeasible, self.feedback_delay, self.noise_log_stddev
        );
        for (name, gain) in &self.pinned_speedups {
            println!("  truth: {name} gains {gain}x between the slowest and the fastest class");
        }
        println!("regret against the oracle (mean of cost/oracle − 1):");
        println!(
            "  {:<22} {:>10} {:>12} {:>12}",
            "window", "scorer", "prior-only", "best static"
        );
        for (label, r) in [
            ("all", self.all),
            ("first 10%", self.first_10pct),
            ("last 25%", self.last_25pct),
            ("last 25%, fastest", self.last_25pct_fastest),
            ("last 25%, cheapest", self.last_25pct_cheapest),
        ] {
            println!(
                "  {label:<22} {:>10} {:>12} {:>12}",
                pct(r.scorer),
                pct(r.prior_only),
                pct(r.best_static)
            );
        }
        let statics: Vec<String> = self
            .best_static_class
            .iter()
            .map(|(t, c)| format!("{t}={c}"))
            .collect();
        println!("  best static class per tier: {}", statics.join(", "));
        let e = self.exploration;
        println!(
            "exploration share: {:.1}% overall, {:.1}% first 10%, {:.1}% last 25% (cap {:.0}%)",
            100.0 * e.share,
            100.0 * e.share_first_10pct,
            100.0 * e.share_last_25pct,
            100.0 * e.cap
        );
        for (label, a) in [
            ("scorer", self.avoid_list),
            ("prior-only", self.avoid_list_prior_only),
        ] {
            println!(
                "avoid-list ({label}): precision {:.2}, recall {:.2} ({} listed, {} truly above the threshold, {} both)",
                a.precision, a.recall, a.listed, a.truly_harmful, a.correct
            );
        }
    }
}

/// Regret (rolling mean, %) over decisions: scorer, prior-only, best static.
pub fn plot(path: &Path, r: &Report) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let y_max = r
        .curve
        .iter()
        .flat_map(|&(a, b, c)| [a, b, c])
        .fold(0.05f64, f64::max)
        * 100.0
        * 1.1;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let title = format!(
        "loadgen learn, seed {}: regret vs oracle (rolling mean over {} decisions)",
        r.seed, r.curve_window
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..r.curve.len().max(1) as f64, 0f64..y_max)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("decision")
        .y_desc("regret (%)")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    type Pick = fn(&(f64, f64, f64)) -> f64;
    let series: [(&str, RGBColor, Pick); 3] = [
        ("scorer (learning)", RGBColor(31, 119, 180), |p| p.0),
        ("prior only", RGBColor(214, 39, 40), |p| p.1),
        ("best static class per tier", RGBColor(44, 160, 44), |p| p.2),
    ];
    for (name, color, get) in series {
        chart
            .draw_series(LineSeries::new(
                r.curve
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (i as f64, 100.0 * get(p))),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e}"))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 5.0), (r.curve.len() as f64, 5.0)],
            BLACK.mix(0.4),
        ))
        .map_err(|e| anyhow!("{e}"))?
        .label("+5 %")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
