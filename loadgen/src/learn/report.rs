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
//! avoid-list at the end against the pairs whose true slowdown (averaged over the classes) is above the
//! policy's threshold; the recall is also split by how many runs of the two job types next to each other the
//! run had (0: what no learner could have seen).
//!
//! Jobs until within 5 %: per job type, how many of its jobs were decided before the mean regret of all its
//! later jobs stays ≤ 5 % (0 = from its first job; "never" when even its last jobs are worse).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use serde::Serialize;

use super::truth::{Catalog, Truth};
use crate::cli::{LearnArgs, TruthKind};

/// What one seed's run produced, for [`Report::build`].
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How far the scorer's `learning.seed` was moved for this run (`--learner-seeds`).
    pub learner_seed: u64,
    pub decisions: Vec<Decision>,
    pub infeasible: usize,
    /// Observations the scorer refused (job types it does not learn).
    pub refused: usize,
    /// The policy's exploration cap and anti-affinity threshold.
    pub cap: f64,
    pub threshold: f64,
    /// Per job type, the avoid-list at the end (indices into the catalog's jobs): learner, prior-only.
    pub avoid: Vec<Vec<usize>>,
    pub avoid_prior: Vec<Vec<usize>>,
}

/// Regret threshold of "jobs until within 5 % of the oracle".
pub const WITHIN: f64 = 0.05;

/// One scored job.
#[derive(Debug, Clone)]
pub struct Decision {
    pub tier: String,
    pub cheapest: bool,
    /// Index of the job type (into the catalog's jobs).
    pub job: usize,
    pub chosen: usize,
    pub prior: usize,
    /// True expected cost of every feasible class (catalog order).
    pub costs: Vec<Option<f64>>,
    pub explored: bool,
    /// The job types it ran next to (indices into the catalog's jobs; a job type may repeat).
    pub colocated: Vec<usize>,
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

#[derive(Debug, Clone, Copy, Default, Serialize)]
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
    /// The truly harmful pairs by how many runs of the two job types next to each other (either
    /// direction) the run had, [`RUN_BUCKETS`]: (harmful, of them on the avoid-lists). What no learner
    /// could have seen (0 runs) is in the recall too.
    pub by_runs: [(usize, usize); 4],
}

/// Upper bounds of the co-located-run buckets of [`PrecisionRecall::by_runs`]: 0, 1–2, 3–5, 6 and more.
pub const RUN_BUCKETS: [usize; 4] = [0, 2, 5, usize::MAX];

/// Per job type: how many of its jobs came before its regret stayed within [`WITHIN`].
#[derive(Debug, Clone, Serialize)]
pub struct JobsToWithin {
    /// Per job type (catalog order): `None` = never within (or never seen).
    pub per_job_type: Vec<Option<usize>>,
    /// Median over the job types that got there, and how many never did.
    pub median: f64,
    pub never: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    /// How far the scorer's `learning.seed` was moved for this run (`--learner-seeds`; 0: the policy's own).
    pub learner_seed: u64,
    pub truth: String,
    pub job_types: usize,
    pub unlisted_job_types: usize,
    pub decisions: usize,
    pub infeasible: usize,
    /// Observations the scorer refused (`INVALID_ARGUMENT`: job types it does not learn).
    pub refused_observations: usize,
    pub feedback_delay: usize,
    /// Job types pinned to gain 1.4x and 9x between the slowest and the fastest class (classic truth).
    pub pinned_speedups: Vec<(String, f64)>,
    pub all: Regret,
    pub first_10pct: Regret,
    pub last_25pct: Regret,
    /// Last 25 %, `fastest` tiers (runtime regret) and `cheapest` tiers (cost regret).
    pub last_25pct_fastest: Regret,
    pub last_25pct_cheapest: Regret,
    /// Whole run, over the job types whose prior the truth contradicts, and over the unlisted ones.
    pub all_contradicted: Regret,
    pub all_unlisted: Regret,
    /// Per tier: the best static class in hindsight.
    pub best_static_class: BTreeMap<String, String>,
    pub jobs_to_within_5pct: JobsToWithin,
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

/// Runs of each unordered pair of job types next to each other, `[lo][hi]`.
fn colocated_runs(jobs: usize, decisions: &[Decision]) -> Vec<Vec<usize>> {
    let mut runs = vec![vec![0; jobs]; jobs];
    for d in decisions {
        let mut seen: Vec<usize> = d.colocated.clone();
        seen.sort_unstable();
        seen.dedup();
        for k in seen {
            runs[d.job.min(k)][d.job.max(k)] += 1;
        }
    }
    runs
}

fn precision_recall(
    truth: &Truth,
    threshold: f64,
    avoid: &[Vec<usize>],
    runs: &[Vec<usize>],
) -> PrecisionRecall {
    let n = truth.slowdown.len();
    let harmful: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .filter(|&(a, b)| truth.pair_slowdown(a, b) > threshold)
        .collect();
    let listed: Vec<(usize, usize)> = avoid
        .iter()
        .enumerate()
        .flat_map(|(a, l)| l.iter().map(move |&b| (a, b)))
        .collect();
    let correct = listed.iter().filter(|p| harmful.contains(p)).count();
    let mut by_runs = [(0, 0); 4];
    for &(a, b) in &harmful {
        let seen = runs[a.min(b)][a.max(b)];
        let k = RUN_BUCKETS.iter().position(|&hi| seen <= hi).unwrap_or(3);
        by_runs[k].0 += 1;
        by_runs[k].1 += usize::from(listed.contains(&(a, b)));
    }
    PrecisionRecall {
        by_runs,
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

/// Per tier, the class of lowest mean regret over the whole run (in hindsight).
fn best_static(cat: &Catalog, decisions: &[Decision]) -> BTreeMap<String, usize> {
    let mut tiers: Vec<&str> = decisions.iter().map(|d| d.tier.as_str()).collect();
    tiers.sort();
    tiers.dedup();
    tiers
        .into_iter()
        .map(|t| {
            let of_tier: Vec<&Decision> = decisions.iter().filter(|d| d.tier == t).collect();
            let best = (0..cat.classes.len())
                .filter(|&c| of_tier.iter().any(|d| d.costs[c].is_some()))
                .min_by(|&a, &b| {
                    let ra = mean(of_tier.iter().map(|d| static_regret(d, a)));
                    let rb = mean(of_tier.iter().map(|d| static_regret(d, b)));
                    ra.total_cmp(&rb)
                })
                .unwrap_or(0);
            (t.to_string(), best)
        })
        .collect()
}

/// The regret of always choosing `class` (the prior-only choice where it is not feasible).
fn static_regret(d: &Decision, class: usize) -> f64 {
    if d.costs[class].is_some() {
        d.regret(class)
    } else {
        d.regret(d.prior)
    }
}

/// Per job type, the jobs before the mean regret of all its later jobs is ≤ [`WITHIN`].
fn jobs_to_within(jobs: usize, decisions: &[Decision], regret: &[f64]) -> JobsToWithin {
    let per_job_type: Vec<Option<usize>> = (0..jobs)
        .map(|j| {
            let r: Vec<f64> = (0..decisions.len())
                .filter(|&i| decisions[i].job == j)
                .map(|i| regret[i])
                .collect();
            let mut tail = 0.0;
            let mut first_ok = None;
            for k in (0..r.len()).rev() {
                tail += r[k];
                if tail / (r.len() - k) as f64 <= WITHIN {
                    first_ok = Some(k);
                }
            }
            // Within only if the last jobs are (a lucky last job alone does not count).
            first_ok.filter(|&k| r.len() - k >= (r.len() / 4).max(1))
        })
        .collect();
    let mut reached: Vec<usize> = per_job_type.iter().flatten().copied().collect();
    reached.sort_unstable();
    let median = match reached.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => reached[n / 2] as f64,
        n => (reached[n / 2 - 1] + reached[n / 2]) as f64 / 2.0,
    };
    JobsToWithin {
        never: per_job_type.iter().filter(|x| x.is_none()).count(),
        per_job_type,
        median,
    }
}

/// Rolling mean of the three regrets over `window` decisions.
fn rolling(per: &[(f64, f64, f64)], window: usize) -> Vec<(f64, f64, f64)> {
    let mut curve = Vec::with_capacity(per.len());
    let mut sums = (0.0, 0.0, 0.0);
    for i in 0..per.len() {
        sums.0 += per[i].0;
        sums.1 += per[i].1;
        sums.2 += per[i].2;
        if i >= window {
            let o = per[i - window];
            sums.0 -= o.0;
            sums.1 -= o.1;
            sums.2 -= o.2;
        }
        let k = (i + 1).min(window) as f64;
        curve.push((sums.0 / k, sums.1 / k, sums.2 / k));
    }
    curve
}

impl Report {
    pub fn build(
        args: &LearnArgs,
        kind: TruthKind,
        seed: u64,
        cat: &Catalog,
        truth: &Truth,
        o: &Outcome,
    ) -> Self {
        let decisions = &o.decisions;
        let statics = best_static(cat, decisions);
        let per: Vec<(f64, f64, f64)> = decisions
            .iter()
            .map(|d| {
                (
                    d.regret(d.chosen),
                    d.regret(d.prior),
                    static_regret(d, statics[&d.tier]),
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
        let scorer_regret: Vec<f64> = per.iter().map(|p| p.0).collect();
        let runs = colocated_runs(cat.jobs.len(), decisions);
        Self {
            seed,
            learner_seed: o.learner_seed,
            truth: format!("{kind:?}").to_lowercase(),
            job_types: cat.jobs.len(),
            unlisted_job_types: cat.jobs.iter().filter(|j| !j.listed).count(),
            decisions: n,
            infeasible: o.infeasible,
            refused_observations: o.refused,
            feedback_delay: args.feedback_delay,
            pinned_speedups: truth.pinned.clone(),
            all: window(0, n, &all),
            first_10pct: window(0, first, &all),
            last_25pct: window(last, n, &all),
            last_25pct_fastest: window(last, n, &|d| !d.cheapest),
            last_25pct_cheapest: window(last, n, &|d| d.cheapest),
            all_contradicted: window(0, n, &|d| truth.contradicted[d.job]),
            all_unlisted: window(0, n, &|d| !cat.jobs[d.job].listed),
            best_static_class: statics
                .iter()
                .map(|(t, &c)| (t.clone(), cat.classes[c].name.clone()))
                .collect(),
            jobs_to_within_5pct: jobs_to_within(cat.jobs.len(), decisions, &scorer_regret),
            exploration: Exploration {
                share: share(0, n),
                share_first_10pct: share(0, first),
                share_last_25pct: share(last, n),
                cap: o.cap,
            },
            avoid_list: precision_recall(truth, o.threshold, &o.avoid, &runs),
            avoid_list_prior_only: precision_recall(truth, o.threshold, &o.avoid_prior, &runs),
            curve_window,
            curve: rolling(&per, curve_window),
        }
    }

    pub fn print(&self) {
        let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
        println!(
            "loadgen learn: truth {}, seed {}{}, {} job types ({} unlisted), {} decisions ({} with no feasible class skipped), feedback delay {}, {} observations refused",
            self.truth,
            self.seed,
            if self.learner_seed > 0 {
                format!(" (learner seed +{})", self.learner_seed)
            } else {
                String::new()
            },
            self.job_types,
            self.unlisted_job_types,
            self.decisions,
            self.infeasible,
            self.feedback_delay,
            self.refused_observations
        );
        for (name, gain) in &self.pinned_speedups {
            println!("  truth: {name} gains {gain}x between the slowest and the fastest class");
        }
        println!("regret against the oracle (mean of cost/oracle − 1):");
        println!(
            "  {:<28} {:>10} {:>12} {:>12}",
            "window", "scorer", "prior-only", "best static"
        );
        for (label, r) in [
            ("whole run", self.all),
            ("first 10%", self.first_10pct),
            ("last 25%", self.last_25pct),
            ("last 25%, fastest", self.last_25pct_fastest),
            ("last 25%, cheapest", self.last_25pct_cheapest),
            ("whole run, prior contradicted", self.all_contradicted),
            ("whole run, unlisted", self.all_unlisted),
        ] {
            println!(
                "  {label:<28} {:>10} {:>12} {:>12}",
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
        let w = &self.jobs_to_within_5pct;
        println!(
            "jobs per job type until within 5% of the oracle: median {}, never {} of {}",
            w.median,
            w.never,
            w.per_job_type.len()
        );
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
        let r = &self.avoid_list.by_runs;
        println!(
            "avoid-list recall (scorer) by the pair's co-located runs: 0 runs {}/{}, 1-2 {}/{}, 3-5 {}/{}, 6+ {}/{}",
            r[0].1, r[0].0, r[1].1, r[1].0, r[2].1, r[2].0, r[3].1, r[3].0
        );
    }
}

/// Mean, min and max of one number over the seeds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(xs: impl Iterator<Item = f64>) -> Self {
        let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
        Self {
            mean: mean(v.iter().copied()),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// The seeds' runs together.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub seeds: Vec<u64>,
    /// (name, spread) in print order.
    pub rows: Vec<(String, Spread)>,
}

/// How a summary row is taken: one number per run, or one per seed from all its runs (one per learner seed).
enum Of {
    Run(fn(&Report) -> f64),
    Seed(fn(&[&Report]) -> f64),
}

impl Summary {
    pub fn of(reports: &[Report]) -> Self {
        let rows: [(&str, Of); 17] = [
            ("last 25%: scorer", Of::Run(|r| r.last_25pct.scorer)),
            (
                "last 25%: best static",
                Of::Run(|r| r.last_25pct.best_static),
            ),
            ("last 25%: prior-only", Of::Run(|r| r.last_25pct.prior_only)),
            ("whole run: scorer", Of::Run(|r| r.all.scorer)),
            ("whole run: best static", Of::Run(|r| r.all.best_static)),
            ("whole run: prior-only", Of::Run(|r| r.all.prior_only)),
            // The mean of the seed's runs against its best static class (the same for every run of a
            // seed: the truth and the job stream do not move with the learner seed).
            (
                "seeds below best static, whole run (fraction)",
                Of::Seed(|runs| {
                    let scorer = mean(runs.iter().map(|r| r.all.scorer));
                    f64::from(u8::from(scorer < runs[0].all.best_static))
                }),
            ),
            (
                "whole run, prior contradicted: scorer",
                Of::Run(|r| r.all_contradicted.scorer),
            ),
            (
                "whole run, unlisted: scorer",
                Of::Run(|r| r.all_unlisted.scorer),
            ),
            (
                "jobs per job type until within 5% (median)",
                Of::Run(|r| r.jobs_to_within_5pct.median),
            ),
            (
                "job types never within 5%",
                Of::Run(|r| r.jobs_to_within_5pct.never as f64),
            ),
            ("avoid-list precision", Of::Run(|r| r.avoid_list.precision)),
            ("avoid-list recall", Of::Run(|r| r.avoid_list.recall)),
            (
                "avoid-list: harmful pairs never co-located",
                Of::Run(|r| {
                    r.avoid_list.by_runs[0].0 as f64 / r.avoid_list.truly_harmful.max(1) as f64
                }),
            ),
            (
                "avoid-list recall, prior-only",
                Of::Run(|r| r.avoid_list_prior_only.recall),
            ),
            ("exploration share", Of::Run(|r| r.exploration.share)),
            (
                "exploration share, last 25%",
                Of::Run(|r| r.exploration.share_last_25pct),
            ),
        ];
        let mut seeds: Vec<u64> = Vec::new();
        for r in reports {
            if !seeds.contains(&r.seed) {
                seeds.push(r.seed);
            }
        }
        let by_seed: Vec<Vec<&Report>> = seeds
            .iter()
            .map(|&s| reports.iter().filter(|r| r.seed == s).collect())
            .collect();
        let rows = rows
            .into_iter()
            .map(|(name, of)| {
                let spread = match of {
                    Of::Run(get) => Spread::of(reports.iter().map(get)),
                    Of::Seed(get) => Spread::of(by_seed.iter().map(|runs| get(runs))),
                };
                (name.to_string(), spread)
            })
            .collect();
        Self { seeds, rows }
    }

    pub fn print(&self, truth: &str) {
        let seeds: Vec<String> = self.seeds.iter().map(u64::to_string).collect();
        println!("\nsummary, truth {truth}, over seeds {}:", seeds.join(", "));
        println!("  {:<44} {:>9} {:>9} {:>9}", "", "mean", "min", "max");
        for (name, s) in &self.rows {
            let f = |x: f64| format_row(name, x);
            println!(
                "  {name:<44} {:>9} {:>9} {:>9}",
                f(s.mean),
                f(s.min),
                f(s.max)
            );
        }
    }
}

/// A row's number: a percentage for regrets and shares, else two decimals.
fn format_row(name: &str, x: f64) -> String {
    if name.contains("(fraction)") {
        format!("{x:.2}")
    } else if name.contains("regret") || name.contains(':') || name.contains("share") {
        format!("{:+.1}%", 100.0 * x)
    } else {
        format!("{x:.2}")
    }
}

/// Every row of several truths' summaries side by side: mean (min…max) per truth.
pub fn print_side_by_side(summaries: &[(String, Summary)]) {
    println!("\nsummary side by side (mean (min…max) over the seeds):");
    let mut head = format!("  {:<44}", "");
    for (truth, _) in summaries {
        head.push_str(&format!(" {truth:>26}"));
    }
    println!("{head}");
    let Some((_, first)) = summaries.first() else {
        return;
    };
    for (i, (name, _)) in first.rows.iter().enumerate() {
        let mut line = format!("  {name:<44}");
        for (_, s) in summaries {
            let Some((_, sp)) = s.rows.get(i) else {
                continue;
            };
            let cell = format!(
                "{} ({}…{})",
                format_row(name, sp.mean),
                format_row(name, sp.min),
                format_row(name, sp.max)
            );
            line.push_str(&format!(" {cell:>26}"));
        }
        println!("{line}");
    }
}

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
