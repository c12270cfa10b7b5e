//! What a scenario run leaves in `results/<scenario>/`: summary.json, summary.md, and SVG plots
//! (mean JCT per CC; per-host uplink over time per CC, where staggering shows).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use mlcc_sim::plot::{COLORS, err, legend};
use plotters::prelude::*;
use serde::Serialize;

use crate::cluster::CcRun;
use crate::learned::JobLearning;
use crate::torch::IterationPhases;

/// An iteration this many times its worker's median is a stall: in stalled runs of
/// `torch-two-jobs` one iteration took 4.6–9× the median, in the others at most 2.4×
/// (docs/notes/2026-12-04-torch-two-jobs-stalls.md).
pub const STALL_RATIO: f64 = 4.0;

#[derive(Clone, Debug, Serialize)]
pub struct CcSummary {
    pub cc: String,
    pub repetitions: usize,
    /// Over every job of every repetition.
    pub mean_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub max_jct_s: f64,
    /// Mean JCT of each repetition: the spread.
    pub mean_jct_per_repetition_s: Vec<f64>,
    pub stddev_of_repetition_means_s: f64,
    /// Per job, mean iteration time averaged over repetitions.
    pub mean_iteration_s: BTreeMap<String, f64>,
    /// Per job, JCT averaged over repetitions.
    pub jct_per_job_s: BTreeMap<String, f64>,
    /// Per PyTorch job that computed on the CPU, where its iterations went, averaged over
    /// repetitions.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub phases_per_job: BTreeMap<String, IterationPhases>,
    pub jobs_failed: usize,
    /// Repetitions in which some worker's iteration took over [`STALL_RATIO`] times its median.
    pub stalled_repetitions: usize,
    pub bytes_verified: u64,
    /// mean JCT / the best TCP's mean JCT (absent for TCP rows when there is no mlcc).
    pub ratio_to_best_tcp: Option<f64>,
    /// (best TCP − this) / (best TCP − isolated): the share of what contention costs under the
    /// best TCP that this CC wins back (1: as if every job ran alone). Where `isolated` ran.
    pub contention_recovered: Option<f64>,
    /// What the cross traffic got beside the jobs, over every repetition, where there was any:
    /// bytes per repetition and the flows' mean goodput.
    pub cross_bytes_per_repetition: Option<f64>,
    pub cross_mean_rate_mbit: Option<f64>,
    /// Its job slowest against the same job under the best TCP (mean JCTs over the
    /// repetitions), where a TCP ran: issue 37 asks that none be over 10 % slower.
    pub worst_job_vs_best_tcp: Option<JobAgainst>,
    /// Where its repetitions' means lie against the best TCP's (absent for the best TCP
    /// itself): all below them is below it by more than the repetitions' spread.
    pub spread_vs_best_tcp: Option<Spread>,
    /// CPU time the daemons (mlccd, the switch emulators) used per repetition, where they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemons_cpu_s_per_repetition: Option<f64>,
}

impl CcSummary {
    /// The lowest and highest of its repetitions' mean JCTs.
    pub fn repetition_range(&self) -> (f64, f64) {
        let v = &self.mean_jct_per_repetition_s;
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    }
}

/// Where one CC's repetition means lie against another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spread {
    /// Every one below every one of the other's.
    Below,
    /// The two ranges overlap: no difference beyond the spread.
    Overlap,
    /// Every one above every one of the other's.
    Above,
}

/// One job's mean JCT under a CC against its mean JCT under the best TCP.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobAgainst {
    pub job: String,
    pub jct_s: f64,
    pub best_tcp_jct_s: f64,
}

impl JobAgainst {
    pub fn ratio(&self) -> f64 {
        self.jct_s / self.best_tcp_jct_s
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub quick: bool,
    pub repetitions: usize,
    pub ccs: Vec<CcSummary>,
    pub best_tcp: Option<String>,
    /// 1 - mlcc mean JCT / best TCP mean JCT (the paper claims >= 0.15).
    pub mlcc_reduction_vs_best_tcp: Option<f64>,
    /// The best of the kernel CCs that ran with a synthetic CPU load (`bbr/cpu_load=0.6`), the
    /// burden mlcc's daemons put on the cores, and 1 - mlcc mean JCT / its mean JCT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_loaded_tcp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlcc_reduction_vs_best_loaded_tcp: Option<f64>,
    /// Mean JCT with every job alone (`--cc isolated`), if it ran.
    pub isolated_mean_jct_s: Option<f64>,
    /// Every link's token bucket in this run, as line time (`--link-burst`): runs with
    /// different buckets are not comparable (docs/notes/2026-11-26-testbed-link-bucket.md).
    pub link_burst_ms: f64,
    /// Fill classes every port served beneath its default class (`--link-classes`).
    pub link_classes: u8,
    /// The nice value the daemons ran at (`--daemon-nice`); `None` in summaries written before
    /// 2026-12-07, whose daemons ran at 0, where mlccd's slot loop missed more slots.
    pub daemon_nice: Option<i32>,
    pub runs: Vec<CcRun>,
}

/// Whether a row is a kernel TCP as the kernel ships it (cubic, reno, bbr, or one with an RTO
/// floor): not mlcc or one of its variants, not a peer built on TCP (MLTCP's CC, Cassini's
/// shifts), not the isolated bound, not one that ran beside a synthetic CPU load. "Best TCP"
/// is the best of these.
pub fn is_tcp(cc: &str) -> bool {
    kernel_tcp(cc) && !has_cpu_load(cc)
}

/// Whether a row is a kernel TCP that ran beside a synthetic CPU load (`bbr/cpu_load=0.6`).
pub fn is_loaded_tcp(cc: &str) -> bool {
    kernel_tcp(cc) && has_cpu_load(cc)
}

fn kernel_tcp(cc: &str) -> bool {
    let base = cc.split('/').next().unwrap_or_default();
    !["isolated", "mlcc", "mltcp", "cassini"].contains(&base)
}

fn has_cpu_load(cc: &str) -> bool {
    cc.split('/').skip(1).any(|kv| kv.starts_with("cpu_load="))
}

/// The row with the lowest mean JCT among those `which` picks, by name and mean JCT.
fn best_of(ccs: &[CcSummary], which: fn(&str) -> bool) -> Option<(String, f64)> {
    ccs.iter()
        .filter(|c| which(&c.cc))
        .min_by(|a, b| a.mean_jct_s.total_cmp(&b.mean_jct_s))
        .map(|c| (c.cc.clone(), c.mean_jct_s))
}

/// The mean of `v`, or none when it is empty.
fn mean_of(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Whether an iteration of some worker of `run` stalled ([`STALL_RATIO`]).
fn stalled(run: &CcRun) -> bool {
    run.jobs
        .iter()
        .any(|j| j.longest_iteration_ratio > STALL_RATIO)
}

pub fn summarize(
    scenario: &str,
    quick: bool,
    link_burst: std::time::Duration,
    link_classes: u8,
    runs: Vec<CcRun>,
) -> Summary {
    let mut order: Vec<String> = Vec::new();
    for r in &runs {
        if !order.contains(&r.cc) {
            order.push(r.cc.clone());
        }
    }
    let mut ccs: Vec<CcSummary> = order
        .iter()
        .map(|cc| {
            let mine: Vec<&CcRun> = runs.iter().filter(|r| &r.cc == cc).collect();
            let mut jcts: Vec<f64> = mine
                .iter()
                .flat_map(|r| r.jobs.iter().map(|j| j.jct_s))
                .collect();
            let per_rep: Vec<f64> = mine
                .iter()
                .map(|r| r.jobs.iter().map(|j| j.jct_s).sum::<f64>() / r.jobs.len().max(1) as f64)
                .collect();
            let m = per_rep.iter().sum::<f64>() / per_rep.len().max(1) as f64;
            let sd = (per_rep.iter().map(|x| (x - m).powi(2)).sum::<f64>()
                / per_rep.len().max(1) as f64)
                .sqrt();
            let mut iters: BTreeMap<String, (f64, usize)> = BTreeMap::new();
            let mut per_job: BTreeMap<String, (f64, usize)> = BTreeMap::new();
            let mut phases: BTreeMap<String, Vec<IterationPhases>> = BTreeMap::new();
            for r in &mine {
                for j in &r.jobs {
                    if let Some(p) = j.phases {
                        phases.entry(j.job.clone()).or_default().push(p);
                    }
                    let e = iters.entry(j.job.clone()).or_default();
                    e.0 += j.mean_iteration_s;
                    e.1 += 1;
                    let e = per_job.entry(j.job.clone()).or_default();
                    e.0 += j.jct_s;
                    e.1 += 1;
                }
            }
            let avg = |m: BTreeMap<String, (f64, usize)>| -> BTreeMap<String, f64> {
                m.into_iter()
                    .map(|(k, (s, n))| (k, s / n.max(1) as f64))
                    .collect()
            };
            CcSummary {
                cc: cc.clone(),
                repetitions: mine.len(),
                mean_jct_s: jcts.iter().sum::<f64>() / jcts.len().max(1) as f64,
                p50_jct_s: pct(&mut jcts, 0.5),
                p99_jct_s: pct(&mut jcts, 0.99),
                max_jct_s: jcts.iter().copied().fold(0.0, f64::max),
                mean_jct_per_repetition_s: per_rep,
                stddev_of_repetition_means_s: sd,
                mean_iteration_s: avg(iters),
                jct_per_job_s: avg(per_job),
                phases_per_job: phases
                    .into_iter()
                    .filter_map(|(job, p)| Some((job, IterationPhases::mean(&p)?)))
                    .collect(),
                jobs_failed: mine.iter().flat_map(|r| &r.jobs).filter(|j| !j.ok).count(),
                stalled_repetitions: mine.iter().filter(|r| stalled(r)).count(),
                bytes_verified: mine
                    .iter()
                    .flat_map(|r| &r.jobs)
                    .map(|j| j.bytes_verified)
                    .sum(),
                ratio_to_best_tcp: None,
                contention_recovered: None,
                cross_bytes_per_repetition: mean_of(
                    mine.iter()
                        .filter_map(|r| r.cross.as_ref().map(|x| x.bytes as f64)),
                ),
                cross_mean_rate_mbit: mean_of(
                    mine.iter()
                        .filter_map(|r| r.cross.as_ref().map(|x| x.mean_rate_mbit)),
                ),
                worst_job_vs_best_tcp: None,
                spread_vs_best_tcp: None,
                daemons_cpu_s_per_repetition: mean_of(mine.iter().filter_map(|r| r.daemons_cpu_s)),
            }
        })
        .collect();
    let best = best_of(&ccs, is_tcp);
    let best_loaded = best_of(&ccs, is_loaded_tcp);
    let isolated = ccs
        .iter()
        .find(|c| c.cc == "isolated")
        .map(|c| c.mean_jct_s);
    if let Some((name, b)) = &best {
        let against: Vec<_> = match ccs.iter().find(|c| &c.cc == name) {
            Some(tcp) => ccs
                .iter()
                .map(|c| (c.cc != tcp.cc).then(|| (worst_job(c, tcp), spread(c, tcp))))
                .collect(),
            None => vec![None; ccs.len()],
        };
        for (c, against) in ccs.iter_mut().zip(against) {
            c.ratio_to_best_tcp = Some(c.mean_jct_s / b);
            c.contention_recovered = isolated
                .filter(|i| b - i > 1e-9 && c.cc != "isolated")
                .map(|i| (b - c.mean_jct_s) / (b - i));
            if let Some((worst, spread)) = against {
                c.worst_job_vs_best_tcp = worst;
                c.spread_vs_best_tcp = Some(spread);
            }
        }
    }
    let mlcc_against = |best: &Option<(String, f64)>| {
        let (_, b) = best.as_ref()?;
        let m = ccs.iter().find(|c| c.cc == "mlcc")?;
        Some(1.0 - m.mean_jct_s / b)
    };
    let (reduction, reduction_loaded) = (mlcc_against(&best), mlcc_against(&best_loaded));
    Summary {
        scenario: scenario.to_string(),
        quick,
        repetitions: ccs.iter().map(|c| c.repetitions).max().unwrap_or(0),
        best_tcp: best.map(|b| b.0),
        mlcc_reduction_vs_best_tcp: reduction,
        best_loaded_tcp: best_loaded.map(|b| b.0),
        mlcc_reduction_vs_best_loaded_tcp: reduction_loaded,
        isolated_mean_jct_s: isolated,
        link_burst_ms: link_burst.as_secs_f64() * 1e3,
        link_classes,
        daemon_nice: None,
        ccs,
        runs,
    }
}

/// The job of `c` slowest against the same job under `tcp`, among the jobs both ran.
fn worst_job(c: &CcSummary, tcp: &CcSummary) -> Option<JobAgainst> {
    c.jct_per_job_s
        .iter()
        .filter_map(|(job, &jct)| {
            let &best = tcp.jct_per_job_s.get(job)?;
            (best > 0.0).then(|| JobAgainst {
                job: job.clone(),
                jct_s: jct,
                best_tcp_jct_s: best,
            })
        })
        .max_by(|a, b| a.ratio().total_cmp(&b.ratio()))
}

/// Where `c`'s repetition means lie against `tcp`'s.
fn spread(c: &CcSummary, tcp: &CcSummary) -> Spread {
    let ((lo, hi), (tcp_lo, tcp_hi)) = (c.repetition_range(), tcp.repetition_range());
    if hi < tcp_lo {
        Spread::Below
    } else if lo > tcp_hi {
        Spread::Above
    } else {
        Spread::Overlap
    }
}

/// A table of one per-job figure, a column per CC, with `decimals` digits.
fn per_job_table(
    s: &Summary,
    title: &str,
    decimals: usize,
    figure: impl Fn(&CcSummary) -> &BTreeMap<String, f64>,
) -> String {
    let mut t = format!("\n{title}:\n\n| job |");
    for c in &s.ccs {
        t += &format!(" {} |", c.cc);
    }
    t += "\n|---|";
    for _ in &s.ccs {
        t += "---|";
    }
    t += "\n";
    if let Some(first) = s.ccs.first() {
        for job in figure(first).keys() {
            t += &format!("| {job} |");
            for c in &s.ccs {
                let v = figure(c).get(job).copied().unwrap_or(0.0);
                t += &format!(" {v:.decimals$} |");
            }
            t += "\n";
        }
    }
    t
}

/// Per PyTorch job, where its iterations went under each CC (none where no job reported it).
fn phases_table(s: &Summary) -> String {
    let jobs: BTreeSet<&String> = s.ccs.iter().flat_map(|c| c.phases_per_job.keys()).collect();
    if jobs.is_empty() {
        return String::new();
    }
    let mut t = String::from(
        "\nWhere a PyTorch iteration's time goes per job (median ms: forward / backward, with \
         the all-reduces DDP overlaps with it / optimizer step):\n\n| job |",
    );
    for c in &s.ccs {
        t += &format!(" {} |", c.cc);
    }
    t += "\n|---|";
    t += &"---|".repeat(s.ccs.len());
    for job in jobs {
        t += &format!("\n| {job} |");
        for c in &s.ccs {
            t += &match c.phases_per_job.get(job) {
                Some(p) => format!(
                    " {:.0} / {:.0} / {:.0} |",
                    p.forward_ms, p.backward_ms, p.step_ms
                ),
                None => " – |".into(),
            };
        }
    }
    t + "\n"
}

/// "7 (6)": the iteration by which the job was learned in its members' own count, then in the
/// learner's; the learner's alone where the members' is not known (a run from before it was).
fn by_iteration(l: &JobLearning) -> String {
    match (l.learned_by_own_iteration, l.learned_by_iteration) {
        (Some(own), Some(count)) => format!("{own} ({count})"),
        (None, Some(count)) => format!("({count})"),
        _ => "–".into(),
    }
}

/// Per repetition and job, how well the learner read the jobs of the runs without progress
/// files (none where every run had them).
fn learned_table(s: &Summary) -> String {
    let mut t = String::new();
    let mut repetition: BTreeMap<&str, usize> = BTreeMap::new();
    for run in &s.runs {
        let rep = repetition.entry(run.cc.as_str()).or_default();
        *rep += 1;
        for j in &run.jobs {
            let Some(l) = &j.learned else { continue };
            if t.is_empty() {
                t += "\nLearned without progress files (each member's first estimate against \
                      its own figures; the period against its mean iteration time over the run, \
                      and against its last three iterations before it was learned):\n\n\
                      | CC | rep | job | members learned | by iteration: the members' own \
                      (the learner's count) | bytes per iteration, worst error | period, worst \
                      error (slots) | period against the iterations before, worst error \
                      (slots) |\n|---|---|---|---|---|---|---|---|\n";
            }
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "–".into());
            t += &format!(
                "| {} | {rep} | {} | {}/{} | {} | {} | {} | {} |\n",
                run.cc,
                j.job,
                l.learned,
                l.members,
                by_iteration(l),
                or_dash(l.bytes_error_max.map(|e| format!("{:.2} %", e * 100.0))),
                or_dash(l.period_error_slots_max.map(|e| format!("{e:.1}"))),
                or_dash(l.period_error_recent_slots_max.map(|e| format!("{e:.1}"))),
            );
        }
    }
    t
}

/// mlcc against the best TCP beyond the mean: whether every repetition was faster, and its
/// slowest job against the same job under the best TCP.
fn against_best_line(s: &Summary) -> String {
    let Some(m) = s.ccs.iter().find(|c| c.cc == "mlcc") else {
        return String::new();
    };
    let mut t = String::from(match m.spread_vs_best_tcp {
        Some(Spread::Below) => {
            "Every mlcc repetition was faster than every repetition of the best TCP.\n"
        }
        Some(Spread::Above) => {
            "Every mlcc repetition was slower than every repetition of the best TCP.\n"
        }
        Some(Spread::Overlap) => {
            "The repetitions of mlcc and of the best TCP overlap: no difference beyond their spread.\n"
        }
        None => "",
    });
    if let Some(w) = &m.worst_job_vs_best_tcp {
        t += &format!(
            "mlcc's job slowest against the best TCP: {}, {:.2} s against {:.2} ({:+.1} %).\n",
            w.job,
            w.jct_s,
            w.best_tcp_jct_s,
            (w.ratio() - 1.0) * 100.0
        );
    }
    t
}

/// Per CC, how many repetitions stalled, where any did.
fn stalls_line(s: &Summary) -> String {
    if s.ccs.iter().all(|c| c.stalled_repetitions == 0) {
        return String::new();
    }
    let counts: Vec<String> = s
        .ccs
        .iter()
        .map(|c| format!("{} {} of {}", c.cc, c.stalled_repetitions, c.repetitions))
        .collect();
    format!(
        "\nRepetitions with a stalled iteration (a worker's, over {STALL_RATIO}× its median): {}.\n",
        counts.join(", ")
    )
}

/// A reduction `r` (1 - mlcc / other) said as mlcc's place: "12.3 % below" or "4.0 % above".
fn below_or_above(r: f64) -> String {
    let side = if r >= 0.0 { "below" } else { "above" };
    format!("{:.1} % {side}", r.abs() * 100.0)
}

/// What the daemons cost in CPU, per CC that ran them; nothing where none did.
fn daemons_cpu_line(s: &Summary) -> String {
    let used: Vec<String> = s
        .ccs
        .iter()
        .filter_map(|c| Some(format!("{} {:.2}", c.cc, c.daemons_cpu_s_per_repetition?)))
        .collect();
    if used.is_empty() {
        return String::new();
    }
    format!(
        "\nCPU the daemons used (mlccd and the switch emulators, or a kernel CC's synthetic \
         `cpu_load`; CPU-s per repetition, on the cores the jobs share): {}.\n",
        used.join(", ")
    )
}

pub fn markdown(s: &Summary) -> String {
    let nice = s
        .daemon_nice
        .map(|n| format!(", daemons at nice {n}"))
        .unwrap_or_default();
    let mut t = format!(
        "## {}{}: job completion time per congestion control ({} repetition(s), links' bucket \
         {} ms{nice})\n\n",
        s.scenario,
        if s.quick { " (quick)" } else { "" },
        s.repetitions,
        s.link_burst_ms
    );
    t += "| CC | mean JCT (s) | p50 | p99 | max | spread of repetition means (s) | vs best TCP | contention recovered | failed jobs | cross traffic: GB per run, mean Mbit/s |\n";
    t += "|---|---|---|---|---|---|---|---|---|---|\n";
    for c in &s.ccs {
        let (lo, hi) = c.repetition_range();
        let cross = match (c.cross_bytes_per_repetition, c.cross_mean_rate_mbit) {
            (Some(b), Some(r)) => format!("{:.2}, {r:.0}", b / 1e9),
            _ => "–".into(),
        };
        t += &format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}–{:.2} (sd {:.2}) | {} | {} | {} | {cross} |\n",
            c.cc,
            c.mean_jct_s,
            c.p50_jct_s,
            c.p99_jct_s,
            c.max_jct_s,
            lo,
            hi,
            c.stddev_of_repetition_means_s,
            c.ratio_to_best_tcp
                .map_or("–".into(), |r| format!("{:.3}", r)),
            c.contention_recovered
                .map_or("–".into(), |r| format!("{:.0} %", r * 100.0)),
            c.jobs_failed
        );
    }
    if let (Some(best), Some(r)) = (&s.best_tcp, s.mlcc_reduction_vs_best_tcp) {
        t += &format!(
            "\nmlcc mean JCT is {} the best TCP ({best}).\n",
            below_or_above(r)
        );
        t += &against_best_line(s);
    }
    if let (Some(best), Some(r)) = (&s.best_loaded_tcp, s.mlcc_reduction_vs_best_loaded_tcp) {
        t += &format!(
            "Against the best kernel CC that ran beside a synthetic CPU load in place of the \
             daemons' ({best}): {}.\n",
            below_or_above(r)
        );
    }
    t += &stalls_line(s);
    t += &daemons_cpu_line(s);
    if s.isolated_mean_jct_s.is_some() {
        t += "\n`isolated`: every job alone on its hosts (kernel TCP, no cross traffic); \
              contention recovered = (best TCP − CC) / (best TCP − isolated), in mean JCT.\n";
    }
    t += &per_job_table(s, "JCT per job (s)", 2, |c| &c.jct_per_job_s);
    t += &per_job_table(s, "Mean iteration time per job (s)", 3, |c| {
        &c.mean_iteration_s
    });
    t += &phases_table(s);
    t += &learned_table(s);
    let faults: Vec<_> = s.runs.iter().filter(|r| !r.faults.is_empty()).collect();
    if !faults.is_empty() {
        t += "\nScheduled faults (seconds since the run's start):\n\n| CC | fault | target | applied | undone |\n|---|---|---|---|---|\n";
        let secs = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.2}"));
        for r in faults {
            for e in &r.faults {
                t += &format!(
                    "| {} | {:?} | {} | {} | {} |\n",
                    r.cc,
                    e.fault.kind,
                    e.fault.target,
                    secs(e.applied_s),
                    secs(e.restored_s)
                );
            }
        }
    }
    t
}

/// Mean JCT per CC with the repetitions' min–max as a whisker.
pub fn jct_bars(s: &Summary, path: &Path) -> Result<(), String> {
    let max = s
        .ccs
        .iter()
        .map(|c| c.max_jct_s.max(c.mean_jct_s))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = s.ccs.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: mean job completion time", s.scenario),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..n as f64, 0.0..max * 1.1)
        .map_err(err)?;
    let names: Vec<String> = s.ccs.iter().map(|c| c.cc.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| names.get(x.floor() as usize).cloned().unwrap_or_default())
        .y_desc("JCT (s)")
        .draw()
        .map_err(err)?;
    for (i, c) in s.ccs.iter().enumerate() {
        let x = i as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x + 0.2, 0.0), (x + 0.8, c.mean_jct_s)],
                COLORS[i % COLORS.len()].filled(),
            )))
            .map_err(err)?;
        let (lo, hi) = c.repetition_range();
        if lo.is_finite() && hi > lo {
            chart
                .draw_series(LineSeries::new(
                    [(x + 0.5, lo), (x + 0.5, hi)],
                    BLACK.stroke_width(2),
                ))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)
}

/// Mbit/s over time (s) on `root`, up to 1.1 × `link_mbit`: the frame of every rate plot.
pub fn rate_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    x: std::ops::Range<f64>,
    link_mbit: f64,
) -> Result<
    ChartContext<
        'a,
        SVGBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, 0.0..link_mbit * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("Mbit/s")
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// One labelled line of (s, Mbit/s) points on a [`rate_chart`].
fn rate_line(
    chart: &mut ChartContext<
        '_,
        SVGBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    points: impl IntoIterator<Item = (f64, f64)>,
    color: RGBColor,
    width: u32,
    label: String,
) -> Result<(), String> {
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(width)))
        .map_err(err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    Ok(())
}

/// Every host's uplink over time under one CC (first repetition): bursts of co-located jobs
/// collide under TCP and take turns under mlcc.
pub fn bandwidth(run: &CcRun, link_mbit: f64, path: &Path) -> Result<(), String> {
    let t_max = run
        .bandwidth
        .iter()
        .filter_map(|b| b.samples.last().map(|s| s.0))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    let mut chart = rate_chart(
        &root,
        &format!("uplink per host under {}", run.cc),
        0.0..t_max,
        link_mbit,
    )?;
    for (i, b) in run.bandwidth.iter().enumerate() {
        let points = b.samples.iter().map(|s| (s.0, s.1));
        rate_line(
            &mut chart,
            points,
            COLORS[i % COLORS.len()],
            1,
            b.host.clone(),
        )?;
    }
    legend(&mut chart, SeriesLabelPosition::MiddleRight)?;
    root.present().map_err(err)
}

/// Where `host`'s members of more than one job all ran: a window of `len` seconds a third
/// of the way into that overlap (or into the run, with one job), as the paper's Fig. 1 / 11
/// show a few seconds of two jobs side by side.
fn shared_window(run: &CcRun, host: &str, len: f64) -> (f64, f64) {
    let spans: Vec<(f64, f64)> = run
        .jobs
        .iter()
        .flat_map(|j| j.senders.iter().filter(|s| s.host == host))
        .filter_map(|s| Some((s.samples.first()?.0, s.samples.last()?.0)))
        .collect();
    let from = spans.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max);
    let to = spans.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    if !(from.is_finite() && to.is_finite()) || to <= from {
        return (0.0, len);
    }
    let start = from + (to - from) / 3.0;
    (start, (start + len).min(to))
}

/// Each job's sending rate from `host` over a few seconds under one CC (first repetition), and
/// the host's whole uplink: the paper's Fig. 1 (TCP: co-located jobs' bursts collide) against
/// Fig. 11a (mlcc: they take turns), and Fig. 11b (beside unscheduled traffic: the uplink above
/// the job's line).
pub fn senders(run: &CcRun, host: &str, link_mbit: f64, path: &Path) -> Result<(), String> {
    let (t0, t1) = shared_window(run, host, 4.0);
    let inside = |t: f64| t >= t0 && t <= t1;
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    let mut chart = rate_chart(
        &root,
        &format!("sending rate per job from {host} under {}", run.cc),
        t0..t1.max(t0 + 0.1),
        link_mbit,
    )?;
    if let Some(b) = run.bandwidth.iter().find(|b| b.host == host) {
        let points = b.samples.iter().filter(|s| inside(s.0)).map(|s| (s.0, s.1));
        let label = format!("{host} uplink, all traffic");
        rate_line(&mut chart, points, RGBColor(170, 170, 170), 1, label)?;
    }
    let series = run
        .jobs
        .iter()
        .flat_map(|j| j.senders.iter().filter(|s| s.host == host));
    for (i, s) in series.enumerate() {
        let points = s.samples.iter().filter(|p| inside(p.0)).copied();
        rate_line(
            &mut chart,
            points,
            COLORS[i % COLORS.len()],
            2,
            s.member.clone(),
        )?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::JobResult;

    fn run(cc: &str, jcts: &[f64]) -> CcRun {
        CcRun {
            cc: cc.into(),
            jobs: jcts
                .iter()
                .enumerate()
                .map(|(i, &jct_s)| JobResult {
                    job: format!("j{i}"),
                    model: "vgg19".into(),
                    arch: "ring".into(),
                    arrival_s: 0.0,
                    iterations: 1,
                    jct_s,
                    shift_s: 0.0,
                    mean_iteration_s: jct_s,
                    longest_iteration_ratio: 1.5,
                    bytes_verified: 1,
                    bytes_sent: 1,
                    socket_cc: cc.into(),
                    progress_files: true,
                    learned: None,
                    phases: None,
                    members: vec![],
                    ok: true,
                    error: None,
                    senders: vec![],
                })
                .collect(),
            wall_s: 1.0,
            cross_flows: 0,
            cross: None,
            bandwidth: vec![],
            faults: vec![],
            daemons_cpu_s: None,
            pids: vec![],
        }
    }

    /// A run of one job's `jct` in which the daemons (or a CPU load) used `cpu` CPU-s.
    fn with_cpu(cc: &str, jct: f64, cpu: f64) -> CcRun {
        CcRun {
            daemons_cpu_s: Some(cpu),
            ..run(cc, &[jct])
        }
    }

    #[test]
    fn the_daemons_cpu_is_averaged_per_cc_that_ran_them_and_said_only_there() {
        let summary = |runs| summarize("t", true, std::time::Duration::from_millis(2), 7, runs);
        let s = summary(vec![
            run("cubic", &[10.0]),
            with_cpu("mlcc", 9.0, 0.5),
            run("cubic", &[11.0]),
            with_cpu("mlcc", 9.5, 0.7),
        ]);
        let row = |cc: &str| s.ccs.iter().find(|c| c.cc == cc).unwrap();
        assert_eq!(row("cubic").daemons_cpu_s_per_repetition, None);
        let mlcc = row("mlcc").daemons_cpu_s_per_repetition.unwrap();
        assert!((mlcc - 0.6).abs() < 1e-9, "{mlcc}");
        let md = markdown(&s);
        assert!(md.contains("CPU-s per repetition"), "{md}");
        assert!(md.contains("): mlcc 0.60.\n"), "{md}");
        let md = markdown(&summary(vec![run("cubic", &[10.0]), run("bbr", &[9.0])]));
        assert!(!md.contains("CPU the daemons used"), "{md}");
    }

    #[test]
    fn best_tcp_leaves_out_mlcc_variants_peers_and_isolated_and_contention_is_measured_against_it()
    {
        let s = summarize(
            "t",
            true,
            std::time::Duration::from_millis(2),
            7,
            vec![
                run("cubic", &[12.0, 14.0]),
                run("bbr", &[10.0, 12.0]),
                run("mlcc/eta=1", &[8.0, 8.0]),
                run("mlcc", &[9.0, 10.0]),
                run("isolated", &[6.0, 8.0]),
                run("mltcp", &[9.0, 9.0]),
                run("mltcp/cubic", &[7.0, 7.0]),
                run("cassini/bbr", &[9.0, 9.0]),
            ],
        );
        assert_eq!(s.best_tcp.as_deref(), Some("bbr"));
        assert!(is_tcp("cubic/rto_floor=10ms") && !is_tcp("cassini") && !is_tcp("mltcp"));
        // MLTCP over CUBIC is a peer, not the kernel's cubic.
        assert!(!is_tcp("mltcp/cubic") && !is_tcp("mltcp/reno"));
        assert_eq!(s.isolated_mean_jct_s, Some(7.0));
        let row = |cc: &str| s.ccs.iter().find(|c| c.cc == cc).unwrap();
        // bbr 11, mlcc 9.5, isolated 7: mlcc wins back (11 - 9.5) / (11 - 7) of contention.
        assert!((row("mlcc").contention_recovered.unwrap() - 0.375).abs() < 1e-12);
        assert_eq!(row("bbr").contention_recovered, Some(0.0));
        assert_eq!(row("isolated").contention_recovered, None);
        assert!((s.mlcc_reduction_vs_best_tcp.unwrap() - (1.0 - 9.5 / 11.0)).abs() < 1e-12);
        assert_eq!(row("isolated").jct_per_job_s["j1"], 8.0);
        let md = markdown(&s);
        assert!(
            md.contains("contention recovered") && md.contains("| j0 |"),
            "{md}"
        );
        assert!(!md.contains("Learned without progress files"), "{md}");
    }

    #[test]
    fn a_kernel_cc_beside_a_cpu_load_is_not_the_best_tcp_but_mlcc_is_set_against_it_too() {
        let s = summary_of(vec![
            run("bbr", &[10.0, 12.0]),
            with_cpu("bbr/cpu_load=0.6", 10.5, 14.0),
            run("cubic/cpu_load=0.6", &[9.6, 10.4]),
            with_cpu("mlcc", 8.0, 15.0),
        ]);
        assert!(is_loaded_tcp("bbr/cpu_load=0.6") && !is_tcp("bbr/cpu_load=0.6"));
        assert!(!is_loaded_tcp("bbr") && !is_loaded_tcp("mlcc/cpu_load=0.6"));
        // The fastest row that is a TCP is the loaded cubic (10.0): still bbr (11.0) is best.
        assert_eq!(s.best_tcp.as_deref(), Some("bbr"));
        assert!((s.mlcc_reduction_vs_best_tcp.unwrap() - (1.0 - 8.0 / 11.0)).abs() < 1e-12);
        assert_eq!(s.best_loaded_tcp.as_deref(), Some("cubic/cpu_load=0.6"));
        assert!((s.mlcc_reduction_vs_best_loaded_tcp.unwrap() - 0.2).abs() < 1e-12);
        let md = markdown(&s);
        assert!(
            md.contains("in place of the daemons' (cubic/cpu_load=0.6): 20.0 % below."),
            "{md}"
        );
        assert!(
            md.contains("): bbr/cpu_load=0.6 14.00, mlcc 15.00.\n"),
            "{md}"
        );
        let plain = markdown(&summary_of(vec![run("bbr", &[10.0]), run("mlcc", &[9.0])]));
        assert!(!plain.contains("synthetic CPU load in place"), "{plain}");
    }

    /// A quick run's summary of `runs`, 2-ms links, no classes.
    fn summary_of(runs: Vec<CcRun>) -> Summary {
        summarize("t", true, std::time::Duration::from_millis(2), 0, runs)
    }

    #[test]
    fn mlcc_is_checked_against_the_best_tcp_job_by_job_and_beyond_the_spread() {
        let s = summary_of(vec![
            run("bbr", &[10.0, 12.0]),
            run("mlcc", &[8.0, 12.6]),
            run("cubic", &[11.0, 13.0]),
            run("bbr", &[10.4, 12.4]),
            run("mlcc", &[8.4, 13.0]),
            run("cubic", &[11.0, 13.0]),
        ]);
        let row = |cc: &str| s.ccs.iter().find(|c| c.cc == cc).unwrap();
        // j1: 12.8 s against bbr's 12.2, the slowest of mlcc's jobs against bbr's.
        let w = row("mlcc").worst_job_vs_best_tcp.clone().unwrap();
        assert_eq!(w.job, "j1");
        assert!((w.ratio() - 12.8 / 12.2).abs() < 1e-12, "{w:?}");
        // mlcc's repetitions 10.3 and 10.7, bbr's 11.0 and 11.4: apart; cubic's 12.0, above.
        assert_eq!(row("mlcc").spread_vs_best_tcp, Some(Spread::Below));
        assert_eq!(row("cubic").spread_vs_best_tcp, Some(Spread::Above));
        assert_eq!(row("bbr").spread_vs_best_tcp, None);
        assert_eq!(row("bbr").worst_job_vs_best_tcp, None);
        let md = markdown(&s);
        assert!(md.contains("Every mlcc repetition was faster"), "{md}");
        assert!(md.contains("j1, 12.80 s against 12.20 (+4.9 %)"), "{md}");
        // One mlcc repetition as slow as bbr's fastest: inside the spread.
        let close = summary_of(vec![
            run("bbr", &[10.0, 12.0]),
            run("mlcc", &[9.0, 13.0]),
            run("bbr", &[11.0, 11.0]),
            run("mlcc", &[9.0, 10.0]),
        ]);
        assert!(markdown(&close).contains("no difference beyond their spread"));
        // Every mlcc repetition slower: said so, not called an overlap.
        let slower = summary_of(vec![
            run("reno", &[4.4]),
            run("mlcc", &[4.5]),
            run("reno", &[4.4]),
            run("mlcc", &[4.6]),
        ]);
        assert!(markdown(&slower).contains("Every mlcc repetition was slower"));
    }

    #[test]
    fn stalled_repetitions_are_counted_per_cc_and_named_only_where_one_stalled() {
        let mut stalled = run("mlcc/library-waits=off", &[13.0, 12.5]);
        stalled.jobs[1].longest_iteration_ratio = 8.5;
        let runs = vec![
            run("mlcc", &[8.0, 9.0]),
            stalled,
            run("mlcc", &[8.2, 9.1]),
            run("mlcc/library-waits=off", &[8.1, 9.0]),
        ];
        let s = summary_of(runs);
        let row = |cc: &str| s.ccs.iter().find(|c| c.cc == cc).unwrap();
        assert_eq!(row("mlcc").stalled_repetitions, 0);
        assert_eq!(row("mlcc/library-waits=off").stalled_repetitions, 1);
        let md = markdown(&s);
        assert!(
            md.contains("mlcc 0 of 2, mlcc/library-waits=off 1 of 2"),
            "{md}"
        );
        let calm = summary_of(vec![run("mlcc", &[8.0])]);
        assert!(!markdown(&calm).contains("stalled"));
    }

    #[test]
    fn where_a_pytorch_iteration_goes_is_averaged_over_repetitions_and_tabled_per_job() {
        let phases = |f: f64, b: f64| IterationPhases {
            forward_ms: f,
            backward_ms: b,
            step_ms: 4.0,
        };
        let mut runs = vec![
            run("reno", &[4.4, 6.0]),
            run("mlcc", &[4.6, 6.0]),
            run("reno", &[4.4, 6.0]),
            run("mlcc", &[4.6, 6.0]),
        ];
        // j0 is the PyTorch job; j1 reports no phases (a job of the trainer's).
        for (r, b) in runs.iter_mut().zip([245.0, 252.0, 247.0, 256.0]) {
            r.jobs[0].phases = Some(phases(80.0, b));
        }
        let s = summary_of(runs);
        let row = |cc: &str| s.ccs.iter().find(|c| c.cc == cc).unwrap();
        assert_eq!(row("reno").phases_per_job["j0"], phases(80.0, 246.0));
        assert_eq!(row("mlcc").phases_per_job["j0"], phases(80.0, 254.0));
        assert!(!row("mlcc").phases_per_job.contains_key("j1"));
        let md = markdown(&s);
        let (_, table) = md
            .split_once("PyTorch iteration")
            .expect("the phases' table");
        assert!(
            table.contains("| j0 | 80 / 246 / 4 | 80 / 254 / 4 |"),
            "{md}"
        );
        assert!(!table.contains("| j1 | "), "{md}");
        let none = summary_of(vec![run("mlcc", &[8.0])]);
        assert!(!markdown(&none).contains("PyTorch iteration"));
    }

    #[test]
    fn the_learner_is_reported_per_repetition_and_job_of_the_runs_without_progress_files() {
        let mut runs = vec![run("mlcc", &[9.0]), run("mlcc/progress=off", &[10.0, 11.0])];
        let mut second = run("mlcc/progress=off", &[10.5, 11.5]);
        for (j, l) in second.jobs.iter_mut().zip([
            JobLearning {
                members: 3,
                learned: 2,
                learned_by_iteration: Some(5),
                learned_by_own_iteration: Some(6),
                bytes_error_max: Some(0.004),
                period_error_slots_max: Some(1.3),
                period_error_recent_slots_max: Some(0.4),
            },
            JobLearning {
                members: 2,
                ..JobLearning::default()
            },
        ]) {
            j.learned = Some(l);
        }
        runs.push(second);
        let s = summarize("t", true, std::time::Duration::from_millis(2), 7, runs);
        let md = markdown(&s);
        assert!(md.contains("Learned without progress files"), "{md}");
        assert!(
            md.contains("| mlcc/progress=off | 2 | j0 | 2/3 | 6 (5) | 0.40 % | 1.3 | 0.4 |"),
            "{md}"
        );
        assert!(
            md.contains("| mlcc/progress=off | 2 | j1 | 0/2 | – | – | – | – |"),
            "{md}"
        );
    }
}
