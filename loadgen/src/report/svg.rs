//! The latency-percentile plot (`--svg PATH`): latency (log scale) against percentile spaced in nines,
//! one line per run.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::RunResult;

/// x position of a percentile: number of nines (50% → 0.3, 90% → 1, 99% → 2, 99.9% → 3).
fn nines(percentile: f64) -> f64 {
    -(1.0 - (percentile / 100.0).min(0.999_999_9)).log10()
}

pub fn write(path: &Path, runs: &[RunResult], title: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let runs: Vec<&RunResult> = runs.iter().filter(|r| !r.curve.is_empty()).collect();
    let x_max = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(|(p, _)| nines(*p)))
        .fold(3.0f64, f64::max)
        .min(6.0);
    let y_max = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(|(_, ms)| *ms))
        .fold(1.0f64, f64::max)
        * 1.5;
    let y_min = runs
        .iter()
        .flat_map(|r| r.curve.iter().map(|(_, ms)| *ms))
        .fold(f64::INFINITY, f64::min)
        .clamp(0.001, 1.0)
        / 1.5;
    let height = 520 + 18 * runs.len() as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms, log)")
        .x_labels(7)
        .x_label_formatter(&|x| {
            let p = 100.0 * (1.0 - 10f64.powf(-x));
            let decimals = (x.round() as i64 - 2).max(0) as usize;
            format!("{p:.decimals$}%")
        })
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, r) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = r
            .curve
            .iter()
            .map(|(p, ms)| (nines(*p).min(x_max), ms.max(y_min)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(format!(
                "{} — p99 {:.3} ms, {:.0}/s",
                r.name, r.latency_ms.p99, r.achieved_rps
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
