//! `mlcc-testbed figure <name>`: the paper's testbed figures, each a sweep of runs (every point
//! a [`crate::experiment::run_set`]) written as `<out>/<name>/figure.svg`, `figure.md` (our
//! numbers beside the paper's, in relative terms) and `figure.json`; `<out>/README.md` lists
//! every figure found under `<out>`.
//!
//! The paper's values are the ones its text states (the PDF's plots and Table I's cells do not
//! survive extraction): where it gives none, the page says so instead of guessing.

use std::collections::BTreeMap;
use std::path::Path;

use mlcc_sim::plot::{COLORS, err, legend};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cluster::{Binaries, Cc};
use crate::experiment;
use crate::report::Summary;
use crate::scenario::{LinkOverrides, Scenario};

/// A figure the command reproduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// Fig. 10: training speed vs random loss, VGG16 and ResNet50 (PS).
    Loss,
    /// Fig. 8, Table I and Fig. 9: paper-small's JCT, and each model's speed-up, vs link rate.
    Bandwidth,
    /// Fig. 7b: mlcc's mean JCT vs slot length τ.
    SlotLength,
    /// Fig. 7a: an ordered rate changed every 50 ms against the delivered one.
    RateConsistency,
    /// Fig. 1 against Fig. 11a: two co-located ring jobs' sending rates, colliding under TCP
    /// and taking turns under mlcc.
    TakingTurns,
    /// Fig. 11b: a ring job beside unscheduled iperf3 traffic.
    Coexistence,
}

impl Figure {
    pub const NAMES: [&'static str; 9] = [
        "fig10", "fig8", "fig9", "table1", "fig7b", "fig7a", "fig1", "fig11a", "fig11b",
    ];
    pub const ALL: [Figure; 6] = [
        Figure::Loss,
        Figure::Bandwidth,
        Figure::SlotLength,
        Figure::RateConsistency,
        Figure::TakingTurns,
        Figure::Coexistence,
    ];

    /// The name its command takes (`mlcc-testbed figure <name>`).
    pub fn name(self) -> &'static str {
        match self {
            Figure::Loss => "fig10",
            Figure::Bandwidth => "fig8",
            Figure::SlotLength => "fig7b",
            Figure::RateConsistency => "fig7a",
            Figure::TakingTurns => "fig11a",
            Figure::Coexistence => "fig11b",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "fig10" | "loss" => Figure::Loss,
            "fig8" | "fig9" | "table1" | "bandwidth" => Figure::Bandwidth,
            "fig7b" | "slot-length" => Figure::SlotLength,
            "fig7a" | "rate-consistency" => Figure::RateConsistency,
            "fig1" | "fig11a" | "taking-turns" => Figure::TakingTurns,
            "fig11b" | "coexistence" => Figure::Coexistence,
            _ => {
                return Err(format!(
                    "unknown figure {s:?}: one of {} (fig8, fig9 and table1 are one sweep, \
                     fig1 and fig11a one run)",
                    Self::NAMES.join(", ")
                ));
            }
        })
    }

    /// The directory name under `--out`.
    pub fn dir(self) -> &'static str {
        match self {
            Figure::Loss => "fig10-loss",
            Figure::Bandwidth => "fig8-fig9-table1-bandwidth",
            Figure::SlotLength => "fig7b-slot-length",
            Figure::RateConsistency => "fig7a-rate-consistency",
            Figure::TakingTurns => "fig1-fig11a-two-jobs",
            Figure::Coexistence => "fig11b-coexistence",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Figure::Loss => "Fig. 10: training speed under random loss (PS jobs alone, 4 hosts)",
            Figure::Bandwidth => "Fig. 8 / Table I / Fig. 9: paper-small at several link rates",
            Figure::SlotLength => "Fig. 7b: mlcc's mean JCT vs slot length (paper-small)",
            Figure::RateConsistency => "Fig. 7a: rate consistency (one flow, order every 50 ms)",
            Figure::TakingTurns => "Fig. 1 vs Fig. 11a: two co-located ring jobs, TCP against mlcc",
            Figure::Coexistence => "Fig. 11b: a ring job beside iperf3 traffic",
        }
    }

    /// The CCs the paper compares (with `mlcc`, whose numbers every table reads).
    pub fn ccs(self) -> Vec<Cc> {
        let names: &[&str] = match self {
            Figure::Loss | Figure::Bandwidth => &["cubic", "reno", "bbr", "mlcc"],
            Figure::SlotLength | Figure::RateConsistency => &["mlcc"],
            Figure::TakingTurns | Figure::Coexistence => &["cubic", "mlcc"],
        };
        names
            .iter()
            .map(|n| Cc::parse(n).expect("known CC"))
            .collect()
    }

    /// The x values the sweep runs by default, in the unit of its x axis: loss in % (fig10),
    /// host-link Mbit/s (fig8 / fig9 / table1), τ in ms (fig7b); none for the single-point
    /// figures. The quick sweeps keep every point of the paper's where they still finish within
    /// ~15 min here (fig10's six loss levels took 10.6 min, fig7b's five slot lengths 3.6 min);
    /// fig8's quick sweep leaves out 2 Gbit/s.
    pub fn default_points(self, quick: bool) -> &'static [f64] {
        match (self, quick) {
            (Figure::Loss, _) => &[0.0, 0.1, 0.2, 0.5, 1.0, 2.0],
            (Figure::Bandwidth, true) => &[250.0, 500.0, 1000.0],
            (Figure::Bandwidth, false) => &[250.0, 500.0, 1000.0, 2000.0],
            (Figure::SlotLength, _) => &[20.0, 40.0, 60.0, 100.0, 200.0],
            _ => &[],
        }
    }

    /// The sweep: (series, x, scenario) per point, at `xs` (default: [`Self::default_points`]).
    /// Scenario names carry the point so each point's runs have a directory of their own.
    fn points(self, quick: bool, xs: Option<&[f64]>) -> Result<Vec<Point>, String> {
        let find = |n: &str| {
            let s = Scenario::find(n).map_err(|e| e.to_string())?;
            Ok::<_, String>(if quick { s.quick() } else { s })
        };
        let xs = xs.unwrap_or(self.default_points(quick));
        let bad = |what: &str, x: f64| Err(format!("{}: {what}, not {x}", self.name()));
        let mut out = Vec::new();
        match self {
            Figure::Loss => {
                for base in ["solo-ps", "solo-ps-resnet50"] {
                    let scn = find(base)?;
                    let model = scn
                        .jobs
                        .first()
                        .map(|j| j.model.clone())
                        .unwrap_or_default();
                    for &x in xs {
                        if !(0.0..100.0).contains(&x) {
                            return bad("a loss in % from 0 to below 100", x);
                        }
                        let p = x / 100.0;
                        let mut s = scn.clone();
                        s.name = format!("{base}-loss{}", pct(p));
                        s.set_loss(p);
                        out.push(Point {
                            series: model.clone(),
                            x,
                            scenario: s,
                        });
                    }
                }
            }
            Figure::Bandwidth => {
                // Bytes scale with the rate, so each iteration's communication-to-compute ratio
                // is the one paper-small has at 1 Gbit/s (the paper's 10-25 Gbit/s, scaled).
                let scn = find("paper-small")?;
                for &x in xs {
                    if !(1.0..=100_000.0).contains(&x) || x.fract() != 0.0 {
                        return bad("a whole number of Mbit/s from 1 to 100000", x);
                    }
                    let m = x as u64;
                    let f = (m * 1_000_000) as f64 / scn.host_link_bits as f64;
                    let mut s = scn.clone();
                    s.name = format!("paper-small-{m}mbit");
                    s.host_link_bits = m * 1_000_000;
                    s.inter_switch_bits = s.inter_switch_bits.map(|b| (b as f64 * f) as u64);
                    for j in &mut s.jobs {
                        j.model_bytes = ((j.model_bytes as f64) * f).round() as u64;
                    }
                    out.push(Point {
                        series: "paper-small".into(),
                        x,
                        scenario: s,
                    });
                }
            }
            Figure::SlotLength => {
                let scn = find("paper-small")?;
                for &x in xs {
                    if !(1.0..=10_000.0).contains(&x) || x.fract() != 0.0 {
                        return bad("a whole number of ms from 1 to 10000", x);
                    }
                    let ms = x as u64;
                    let mut s = scn.clone();
                    s.name = format!("paper-small-tau{ms}ms");
                    s.tau = std::time::Duration::from_millis(ms);
                    out.push(Point {
                        series: "paper-small".into(),
                        x,
                        scenario: s,
                    });
                }
            }
            Figure::TakingTurns | Figure::Coexistence => {
                let name = if self == Figure::TakingTurns {
                    "micro-two-jobs-heavy"
                } else {
                    "micro-coexistence"
                };
                out.push(Point {
                    series: name.into(),
                    x: 0.0,
                    scenario: find(name)?,
                });
            }
            Figure::RateConsistency => {}
        }
        Ok(out)
    }
}

/// A loss rate as a directory-safe percentage: 0.005 -> "0.5pct".
fn pct(p: f64) -> String {
    format!("{}pct", (p * 1000.0).round() / 10.0)
}

#[derive(Debug)]
struct Point {
    series: String,
    x: f64,
    scenario: Scenario,
}

/// One CC's result at one point.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CcPoint {
    /// JCT (s) over its jobs and repetitions.
    pub mean_jct_s: f64,
    pub min_jct_s: f64,
    pub max_jct_s: f64,
    pub p99_jct_s: f64,
    /// Model -> mean iteration time (s).
    pub iteration_s: BTreeMap<String, f64>,
}

/// One point's result per CC.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointResult {
    pub series: String,
    pub x: f64,
    pub scenario: String,
    pub ccs: BTreeMap<String, CcPoint>,
    pub jobs_failed: usize,
}

impl PointResult {
    fn of(series: &str, x: f64, s: &Summary) -> Self {
        let ccs = s
            .ccs
            .iter()
            .map(|c| {
                let jobs = || {
                    s.runs
                        .iter()
                        .filter(|run| run.cc == c.cc)
                        .flat_map(|run| run.jobs.iter().filter(|j| j.ok))
                };
                let min = jobs().map(|j| j.jct_s).fold(f64::INFINITY, f64::min);
                let mut per_model: BTreeMap<String, (f64, usize)> = BTreeMap::new();
                for j in jobs().filter(|j| j.iterations > 0) {
                    let e = per_model.entry(j.model.clone()).or_default();
                    e.0 += j.mean_iteration_s;
                    e.1 += 1;
                }
                let point = CcPoint {
                    mean_jct_s: c.mean_jct_s,
                    min_jct_s: if min.is_finite() { min } else { 0.0 },
                    max_jct_s: c.max_jct_s,
                    p99_jct_s: c.p99_jct_s,
                    iteration_s: per_model
                        .into_iter()
                        .map(|(m, (t, n))| (m, t / n as f64))
                        .collect(),
                };
                (c.cc.clone(), point)
            })
            .collect();
        PointResult {
            series: series.into(),
            x,
            scenario: s.scenario.clone(),
            ccs,
            jobs_failed: s.ccs.iter().map(|c| c.jobs_failed).sum(),
        }
    }

    /// `cc`'s mean JCT here (NaN if it did not run).
    fn mean(&self, cc: &str) -> f64 {
        self.ccs.get(cc).map_or(f64::NAN, |c| c.mean_jct_s)
    }

    /// `cc`'s mean iteration time of `model` here (NaN if it did not run).
    fn iteration(&self, cc: &str, model: &str) -> f64 {
        self.ccs
            .get(cc)
            .and_then(|c| c.iteration_s.get(model))
            .copied()
            .unwrap_or(f64::NAN)
    }
}

/// A whole figure's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FigureResult {
    pub figure: String,
    pub title: String,
    pub quick: bool,
    pub repetitions: usize,
    pub command: String,
    pub points: Vec<PointResult>,
}

/// How a figure's sweep runs: its length, its repetitions, its x values, and what the command
/// line changes of how the links are emulated.
pub struct Sweep<'a> {
    pub quick: bool,
    pub repeat: usize,
    /// The x values instead of the figure's own.
    pub points: Option<&'a [f64]>,
    pub links: LinkOverrides,
}

/// Runs `fig`'s sweep and writes its page; returns the Markdown.
/// `ccs` replaces the figure's own [`Figure::ccs`] (it must hold `mlcc`).
pub fn run(
    fig: Figure,
    ccs: Option<Vec<Cc>>,
    sweep: &Sweep,
    bins: &Binaries,
    out: &Path,
) -> Result<String, String> {
    let &Sweep {
        quick,
        repeat,
        points,
        links,
    } = sweep;
    if points.is_some() && fig.default_points(false).is_empty() {
        return Err(format!(
            "{} has a single point: --points does not apply",
            fig.name()
        ));
    }
    let custom = ccs.is_some();
    let ccs = ccs.unwrap_or_else(|| fig.ccs());
    if !ccs.iter().any(|c| c.name() == "mlcc") {
        return Err("a figure's CCs must include mlcc: every table compares against it".into());
    }
    let chosen = points.map(|xs| {
        let xs: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        format!(" --points {}", xs.join(","))
    });
    // Built and checked before anything is written: a bad flag leaves no empty page behind.
    let mut points = fig.points(quick, points)?;
    for p in &mut points {
        links.apply(&mut p.scenario)?;
    }
    let dir = out.join(fig.dir());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if fig == Figure::RateConsistency {
        return rate_consistency_page(&dir, out);
    }
    let jobs: usize = points.iter().map(|p| p.scenario.jobs.len()).sum();
    let bar = experiment::job_bar((jobs * ccs.len() * repeat) as u64)?;
    let mut results = Vec::new();
    for p in &points {
        let (s, at) = experiment::run_set(
            &p.scenario,
            &ccs,
            repeat,
            quick,
            bins,
            &dir.join("runs"),
            &bar,
        )?;
        // The per-job sending-rate plots are these figures.
        if matches!(fig, Figure::TakingTurns | Figure::Coexistence) {
            for cc in &ccs {
                let name = format!("senders-{}.svg", cc.file_name());
                std::fs::copy(at.join(&name), dir.join(&name))
                    .map_err(|e| format!("{name}: {e}"))?;
            }
        }
        results.push(PointResult::of(&p.series, p.x, &s));
    }
    bar.finish_and_clear();
    let result = FigureResult {
        figure: fig.dir().into(),
        title: fig.title().into(),
        quick,
        repetitions: repeat,
        command: format!(
            "mlcc-testbed figure {}{}{}{} --repeat {repeat}{}",
            fig.name(),
            if quick { " --quick" } else { "" },
            chosen.unwrap_or_default(),
            links.flags(),
            if custom {
                format!(
                    " --cc {}",
                    ccs.iter().map(Cc::name).collect::<Vec<_>>().join(",")
                )
            } else {
                String::new()
            }
        ),
        points: results,
    };
    std::fs::write(
        dir.join("figure.json"),
        serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let md = markdown(fig, &result);
    std::fs::write(dir.join("figure.md"), &md).map_err(|e| e.to_string())?;
    if !matches!(fig, Figure::TakingTurns | Figure::Coexistence) {
        plot(fig, &result, &dir.join("figure.svg"))?;
    }
    index(out)?;
    Ok(md)
}

/// Fig. 7a: no testbed run, one flow on the datapath (see [`crate::rate_consistency`]).
fn rate_consistency_page(dir: &Path, out: &Path) -> Result<String, String> {
    use crate::rate_consistency as rc;
    let r = rc::measure()?;
    std::fs::write(
        dir.join("figure.json"),
        serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    rc::plot(&r, &dir.join("figure.svg"))?;
    let md = format!(
        "## {}\n\n`mlcc-testbed figure fig7a`: one TCP flow on mlcc's BPF datapath through a \
         {} Mbit/s link, its order rewritten every {} ms, the acknowledged rate sampled every \
         {} ms ({} bytes verified end to end).\n\n| | ours |\n|---|---|\n\
         | mean \\|delivered − ordered\\| / ordered, per interval (its first {} ms left out) | \
         {:.1} % |\n| p95 | {:.1} % |\n\nThe paper (Fig. 7a): the scheduler \"can precisely \
         control the flow rate\", even stepping from 20 to 5 Gbit/s; no error is given.\n",
        Figure::RateConsistency.title(),
        rc::LINK_MBIT,
        rc::INTERVAL.as_millis(),
        rc::SAMPLE.as_millis(),
        r.bytes_verified,
        rc::SAMPLE.as_millis(),
        r.mean_error * 100.0,
        r.p95_error * 100.0,
    );
    std::fs::write(dir.join("figure.md"), &md).map_err(|e| e.to_string())?;
    index(out)?;
    Ok(md)
}

fn f2(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "–".into()
    }
}

fn pc(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.1} %", x * 100.0)
    } else {
        "–".into()
    }
}

/// The figure's page: our numbers, then the paper's.
pub fn markdown(fig: Figure, r: &FigureResult) -> String {
    let mut t = format!(
        "## {}\n\n`{}` ({} repetition(s){}).\n\n",
        r.title,
        r.command,
        r.repetitions,
        if r.quick { ", quick" } else { "" }
    );
    let ccs: Vec<String> = r
        .points
        .first()
        .map(|p| p.ccs.keys().cloned().collect())
        .unwrap_or_default();
    match fig {
        Figure::Loss => {
            t += "Mean iteration time (s) and slowdown against the same CC without loss:\n\n";
            t += &format!("| model | loss | {} | mlcc vs cubic |\n", ccs.join(" | "));
            t += &format!("|---|---|{}---|\n", "---|".repeat(ccs.len()));
            for p in &r.points {
                // Slowdown against the same CC's point without loss.
                let base = r.points.iter().find(|q| q.series == p.series && q.x == 0.0);
                t += &format!("| {} | {} % |", p.series, p.x);
                for cc in &ccs {
                    let it = p.iteration(cc, &p.series);
                    let b = base.map_or(f64::NAN, |q| q.iteration(cc, &p.series));
                    t += &format!(" {} ({}) |", f2(it), pc(it / b - 1.0));
                }
                let ratio = p.iteration("cubic", &p.series) / p.iteration("mlcc", &p.series);
                t += &format!(" {ratio:.2}× faster |\n");
            }
            t += "\nThe paper (§VI-E, Fig. 10): with more than 1 % loss VGG16 slows by **4 %** \
                  under its scheduler and runs **5.1×** faster than under CUBIC; at 0.2 % loss \
                  VGG16 slows by **62 %** under CUBIC and Reno. Its plot's other values are not \
                  in the text.\n";
        }
        Figure::Bandwidth => {
            t += "Mean JCT (s) per link rate (bytes scaled with the rate), and mlcc's reduction \
                  against the best TCP (Fig. 8):\n\n";
            t += &format!(
                "| link | {} | mlcc vs best TCP |\n|---|{}---|\n",
                ccs.join(" | "),
                "---|".repeat(ccs.len())
            );
            for p in &r.points {
                t += &format!("| {} Mbit/s |", p.x);
                for cc in &ccs {
                    t += &format!(" {} |", f2(p.mean(cc)));
                }
                t += &format!(" {} |\n", pc(vs_best_tcp(p)));
            }
            t += "\nTable I: min / mean / p99 / max JCT (s):\n\n| link | CC | min | mean | p99 | max |\n|---|---|---|---|---|---|\n";
            for p in &r.points {
                for (cc, c) in &p.ccs {
                    t += &format!(
                        "| {} Mbit/s | {cc} | {} | {} | {} | {} |\n",
                        p.x,
                        f2(c.min_jct_s),
                        f2(c.mean_jct_s),
                        f2(c.p99_jct_s),
                        f2(c.max_jct_s)
                    );
                }
            }
            t += "\nFig. 9: each model's training speed-up under mlcc (mean iteration time of the \
                  CC over mlcc's, − 1):\n\n| link | model | ";
            let others: Vec<&String> = ccs.iter().filter(|c| *c != "mlcc").collect();
            t += &others
                .iter()
                .map(|c| format!("vs {c}"))
                .collect::<Vec<_>>()
                .join(" | ");
            t += &format!(" |\n|---|---|{}\n", "---|".repeat(others.len()));
            for p in &r.points {
                let Some(ml) = p.ccs.get("mlcc") else {
                    continue;
                };
                for (model, &m) in &ml.iteration_s {
                    t += &format!("| {} Mbit/s | {model} |", p.x);
                    for c in &others {
                        t += &format!(" {} |", pc(p.iteration(c, model) / m - 1.0));
                    }
                    t += "\n";
                }
            }
            t += "\nThe paper: at least **15 %** lower mean JCT than every TCP variant at every \
                  bandwidth (Fig. 8; Table I's cells are not in the text); VGG19 **22 %** faster \
                  than under CUBIC at 10 Gbit/s and **14.2 %** at 24 Gbit/s, ResNet50 least \
                  (Fig. 9).\n";
        }
        Figure::TakingTurns | Figure::Coexistence => {
            t += &format!(
                "| CC | mean JCT (s) | {} |\n|---|---|",
                "mean iteration (s), per model"
            );
            t += "---|\n";
            for p in &r.points {
                for (cc, c) in &p.ccs {
                    let its: Vec<String> = c
                        .iteration_s
                        .iter()
                        .map(|(m, i)| format!("{m} {i:.3}"))
                        .collect();
                    t += &format!("| {cc} | {} | {} |\n", f2(c.mean_jct_s), its.join(", "));
                }
            }
            t += "\n";
            for cc in &ccs {
                let file = format!("senders-{}.svg", cc.replace('/', "+"));
                t += &format!("![{cc}]({file})\n\n");
            }
            t += if fig == Figure::TakingTurns {
                "Each line is one job's sending rate from h1 (its sockets' acknowledged bytes per \
                 20 ms), the grey one h1's whole uplink, over 4 s a third of the way into the \
                 time both jobs ran. The paper: under CUBIC the two jobs' communication \
                 \"concurs over time, leading to congestion at the NIC and slower communication \
                 in both jobs\" (Fig. 1b); under its scheduler \"flows are staggered to avoid \
                 potential congestion\", letting one job's communication overlap the other's \
                 computation (Fig. 11a). No numbers are given.\n"
            } else {
                "The job's sending rate from h1 beside h1's whole uplink (grey; the difference is \
                 iperf3). The paper (Fig. 11b): an iperf flow joins at 600 ms; the scheduler, \
                 estimating available bandwidth from the last 4 slots' maximum sending rate, \
                 restricts its own increase and stays friendly to the TCP flow. No numbers are \
                 given.\n"
            };
        }
        Figure::RateConsistency => {}
        Figure::SlotLength => {
            t += "| τ | mlcc mean JCT (s) | vs τ = 60 ms |\n|---|---|---|\n";
            let at60 = r
                .points
                .iter()
                .find(|p| p.x == 60.0)
                .map_or(f64::NAN, |p| p.mean("mlcc"));
            for p in &r.points {
                let m = p.mean("mlcc");
                t += &format!("| {} ms | {} | {} |\n", p.x, f2(m), pc(m / at60 - 1.0));
            }
            t += "\nThe paper (Fig. 7b): 60 ms gives the highest throughput (the lowest mean \
                  JCT); shorter slots lose to negotiation delays, longer ones to coarse \
                  control.\n";
        }
    }
    let failed: usize = r.points.iter().map(|p| p.jobs_failed).sum();
    if failed > 0 {
        t += &format!("\n**{failed} job(s) failed**; their runs are under `runs/`.\n");
    }
    t
}

/// mlcc's mean JCT over the best TCP's, − 1.
fn vs_best_tcp(p: &PointResult) -> f64 {
    let best = p
        .ccs
        .iter()
        .filter(|(c, _)| crate::report::is_tcp(c))
        .map(|(_, c)| c.mean_jct_s)
        .fold(f64::INFINITY, f64::min);
    p.mean("mlcc") / best - 1.0
}

/// One line per (series, CC): Fig. 10 plots training speed (iterations/s), the others mean JCT.
fn plot(fig: Figure, r: &FigureResult, path: &Path) -> Result<(), String> {
    let mut lines: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    for p in &r.points {
        for cc in p.ccs.keys() {
            let y = match fig {
                Figure::Loss => 1.0 / p.iteration(cc, &p.series),
                _ => p.mean(cc),
            };
            if y.is_finite() && y > 0.0 {
                lines
                    .entry((p.series.clone(), cc.clone()))
                    .or_default()
                    .push((p.x, y));
            }
        }
    }
    let xs = r.points.iter().map(|p| p.x);
    let (x0, x1) = (
        xs.clone().fold(f64::INFINITY, f64::min),
        xs.fold(0.0, f64::max),
    );
    let y1 = lines
        .values()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(1e-9);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(r.title.clone(), ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0.min(x1)..x1.max(x0 + 1e-9), 0.0..y1 * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(match fig {
            Figure::Loss => "random loss (%)",
            Figure::Bandwidth => "host link (Mbit/s)",
            Figure::SlotLength => "slot length τ (ms)",
            _ => "",
        })
        .y_desc(match fig {
            Figure::Loss => "training speed (iterations/s)",
            _ => "mean JCT (s)",
        })
        .draw()
        .map_err(err)?;
    let series: Vec<&String> = {
        let mut v: Vec<&String> = lines.keys().map(|k| &k.0).collect();
        v.dedup();
        v
    };
    for (i, ((s, cc), pts)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dashed = series.iter().position(|x| *x == s).unwrap_or(0) % 2 == 1;
        let label = if series.len() > 1 {
            format!("{s} {cc}")
        } else {
            cc.clone()
        };
        let style = if dashed {
            color.stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), style))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
    root.present().map_err(err)
}

/// `<out>/README.md`: every figure page found under `<out>`, with its command.
pub fn index(out: &Path) -> Result<(), String> {
    let mut t = String::from(
        "# The paper's testbed figures, reproduced\n\nGenerated by `mlcc-testbed figure`; each \
         section is its figure's `figure.md` (plot: `figure.svg` beside it).\n\n",
    );
    for fig in Figure::ALL {
        let dir = fig.dir();
        match std::fs::read_to_string(out.join(dir).join("figure.md")) {
            Ok(s) if matches!(fig, Figure::TakingTurns | Figure::Coexistence) => {
                t += &format!(
                    "{}\n",
                    s.replace("](senders-", &format!("]({dir}/senders-"))
                );
            }
            Ok(s) => t += &format!("{s}\n![{dir}]({dir}/figure.svg)\n\n"),
            Err(_) => {
                t += &format!(
                    "## {}\n\nNot run yet: `mlcc-testbed figure {}`.\n\n",
                    fig.title(),
                    fig.name()
                )
            }
        }
    }
    std::fs::write(out.join("README.md"), t).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: f64, it: &[(&str, f64)]) -> PointResult {
        let ccs = it
            .iter()
            .map(|(c, t)| {
                let cc = CcPoint {
                    mean_jct_s: 10.0,
                    min_jct_s: 9.0,
                    max_jct_s: 11.0,
                    p99_jct_s: 11.0,
                    iteration_s: [("vgg16".to_string(), *t)].into(),
                };
                (c.to_string(), cc)
            })
            .collect();
        PointResult {
            series: "vgg16".into(),
            x,
            scenario: format!("solo-ps-loss{x}"),
            ccs,
            jobs_failed: 0,
        }
    }

    #[test]
    fn figures_parse_by_paper_name_and_unknown_ones_say_what_exists() {
        assert_eq!(Figure::parse("fig10"), Ok(Figure::Loss));
        for n in ["fig8", "fig9", "table1"] {
            assert_eq!(Figure::parse(n), Ok(Figure::Bandwidth));
        }
        assert_eq!(Figure::parse("fig7b"), Ok(Figure::SlotLength));
        assert_eq!(Figure::parse("fig7a"), Ok(Figure::RateConsistency));
        assert_eq!(Figure::parse("fig1"), Ok(Figure::TakingTurns));
        assert_eq!(Figure::parse("fig11a"), Ok(Figure::TakingTurns));
        assert_eq!(Figure::parse("fig11b"), Ok(Figure::Coexistence));
        for f in Figure::ALL {
            assert_eq!(Figure::parse(f.name()), Ok(f), "{}", f.name());
        }
        let e = Figure::parse("fig99").unwrap_err();
        assert!(e.contains("fig10") && e.contains("fig11b"), "{e}");
        assert_eq!(pct(0.005), "0.5pct");
        assert_eq!(pct(0.02), "2pct");
    }

    #[test]
    fn chosen_points_replace_the_sweep_and_bad_ones_are_refused() {
        // Loss: both models at each chosen level, the level as the scenario's loss.
        let p = Figure::Loss.points(true, Some(&[0.5, 0.1])).unwrap();
        let got: Vec<(f64, Option<f64>)> = p
            .iter()
            .map(|p| (p.x, p.scenario.loss.as_ref().map(|l| l.probability)))
            .collect();
        assert_eq!(got.len(), 4);
        assert!(
            got.iter()
                .all(|(x, l)| l.is_some_and(|l| (l * 100.0 - x).abs() < 1e-12))
        );
        assert_eq!(p[0].scenario.name, "solo-ps-loss0.5pct");
        // The default sweep: every loss level in the full version.
        let full = Figure::Loss.points(false, None).unwrap();
        assert_eq!(full.len(), 2 * Figure::Loss.default_points(false).len());
        // τ and link rates must be whole numbers in range.
        let t = Figure::SlotLength.points(true, Some(&[40.0])).unwrap();
        assert_eq!(t[0].scenario.tau, std::time::Duration::from_millis(40));
        assert!(Figure::SlotLength.points(true, Some(&[40.5])).is_err());
        assert!(Figure::Loss.points(true, Some(&[100.0])).is_err());
        let e = Figure::Bandwidth.points(true, Some(&[0.0])).unwrap_err();
        assert!(e.contains("Mbit/s"), "{e}");
        assert!(Figure::RateConsistency.default_points(false).is_empty());
    }

    #[test]
    fn the_loss_page_states_slowdowns_against_each_ccs_own_lossless_run() {
        let r = FigureResult {
            figure: "fig10-loss".into(),
            title: "t".into(),
            quick: true,
            repetitions: 1,
            command: "mlcc-testbed figure fig10 --quick --repeat 1".into(),
            points: vec![
                point(0.0, &[("cubic", 1.0), ("mlcc", 1.0)]),
                point(1.0, &[("cubic", 2.0), ("mlcc", 1.04)]),
            ],
        };
        let md = markdown(Figure::Loss, &r);
        assert!(
            md.contains("| vgg16 | 1 % | 2.00 (+100.0 %) | 1.04 (+4.0 %) | 1.92× faster |"),
            "{md}"
        );
        assert!(
            md.contains("5.1×"),
            "the paper's value is beside ours: {md}"
        );
    }
}
