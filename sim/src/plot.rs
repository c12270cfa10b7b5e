//! SVG plots: CDF of JCT per policy and mean/p99 JCT bars. SVG keeps the crate free of font
//! and image libraries (text is left to the viewer's fonts).

use std::path::Path;

use plotters::prelude::*;

use crate::report::Summary;
use crate::run::PolicyRun;

/// The series palette (matplotlib's tab10), shared with the testbed's plots.
pub const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Plotters' errors as the plain messages the reports return.
pub fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The series legend of every line plot: a white box with a black border at `pos`.
pub fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

pub fn jct_cdf(runs: &[PolicyRun], path: &Path) -> Result<(), String> {
    let series: Vec<(String, Vec<f64>)> = runs
        .iter()
        .map(|r| {
            let mut v: Vec<f64> = r.jobs.iter().filter_map(|j| j.jct_s).collect();
            v.sort_by(f64::total_cmp);
            (r.policy.clone(), v)
        })
        .collect();
    let max = series
        .iter()
        .filter_map(|(_, v)| v.last().copied())
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("CDF of job completion time", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max * 1.02, 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("JCT (s)")
        .y_desc("fraction of jobs")
        .draw()
        .map_err(err)?;
    for (i, (name, v)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let n = v.len().max(1) as f64;
        let pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .map(|(k, &x)| (x, (k + 1) as f64 / n))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)
}

pub fn jct_bars(summary: &Summary, path: &Path) -> Result<(), String> {
    let ps = &summary.policies;
    let max = ps
        .iter()
        .map(|p| p.p99_jct_s)
        .filter(|x| x.is_finite())
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "JCT per policy: mean (solid), p99 (outline)",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..ps.len() as f64, 0.0..max * 1.1)
        .map_err(err)?;
    let names: Vec<String> = ps.iter().map(|p| p.policy.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(ps.len().max(1))
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            names.get(i).cloned().unwrap_or_default()
        })
        .y_desc("JCT (s)")
        .draw()
        .map_err(err)?;
    for (i, p) in ps.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let x0 = i as f64 + 0.2;
        let x1 = i as f64 + 0.8;
        if p.mean_jct_s.is_finite() {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, p.mean_jct_s)],
                    c.filled(),
                )))
                .map_err(err)?;
        }
        if p.p99_jct_s.is_finite() {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, p.p99_jct_s)],
                    c.stroke_width(2),
                )))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)
}

/// Histogram of decision latencies (µs), log-spaced bins.
pub fn latency_hist(runs: &[PolicyRun], path: &Path) -> Result<(), String> {
    let with: Vec<&PolicyRun> = runs.iter().filter(|r| !r.latencies_us.is_empty()).collect();
    if with.is_empty() {
        return Ok(());
    }
    let bins: Vec<f64> = (0..=40).map(|k| 10f64.powf(k as f64 / 8.0)).collect(); // 1 µs..100 ms
    let hist: Vec<(String, Vec<f64>)> = with
        .iter()
        .map(|r| {
            let mut h = vec![0.0; bins.len()];
            for &x in &r.latencies_us {
                let k = bins
                    .iter()
                    .position(|&b| f64::from(x) <= b)
                    .unwrap_or(bins.len() - 1);
                h[k] += 1.0;
            }
            let n = r.latencies_us.len() as f64;
            (r.policy.clone(), h.into_iter().map(|c| c / n).collect())
        })
        .collect();
    let ymax = hist
        .iter()
        .flat_map(|(_, h)| h.iter().copied())
        .fold(0.01, f64::max);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Planner::plan latency per host per slot",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((1.0..1e5).log_scale(), 0.0..ymax * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("µs")
        .y_desc("fraction of decisions")
        .draw()
        .map_err(err)?;
    for (i, (name, h)) in hist.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = bins.iter().copied().zip(h.iter().copied()).collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
    root.present().map_err(err)
}
