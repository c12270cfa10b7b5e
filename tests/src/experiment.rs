//! One set of runs: a scenario under each congestion control, `repeat` times with the CCs
//! interleaved (so drift hits all alike), summarized and written to `<out>/<scenario>/`. What
//! `mlcc-testbed run` does, and what every `mlcc-testbed figure` point is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cluster::{self, Binaries, Cc};
use crate::report::{self, Summary};
use crate::scenario::Scenario;

/// A progress bar over `total` jobs (hidden when stderr is not a terminal, as indicatif does).
pub fn job_bar(total: u64) -> Result<ProgressBar, String> {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} jobs  {msg}")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    Ok(bar)
}

/// Runs `scn` under every CC of `ccs`, `repeat` times, advancing `bar` by jobs; writes
/// summary.json, summary.md, jct.svg and bandwidth-<cc>.svg to `<out>/<scenario name>/` and
/// returns the summary and that directory. Failed jobs are reported on `bar`, counted in the
/// summary and are not an error here.
pub fn run_set(
    scn: &Scenario,
    ccs: &[Cc],
    repeat: usize,
    quick: bool,
    bins: &Binaries,
    out: &Path,
    bar: &ProgressBar,
) -> Result<(Summary, PathBuf), String> {
    if ccs.is_empty() || repeat == 0 {
        return Err("nothing to run: give --cc and --repeat >= 1".into());
    }
    let out = out.join(&scn.name);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut runs = Vec::new();
    for rep in 0..repeat {
        for cc in ccs {
            let done_before = bar.position();
            let dir = out.join(format!("rep{}", rep + 1));
            let r = cluster::run_scenario(
                scn,
                std::slice::from_ref(cc),
                bins,
                &dir,
                |done, _, name| {
                    bar.set_position(
                        done_before
                            .max(bar.position())
                            .min(done_before + done as u64),
                    );
                    bar.set_message(format!(
                        "{}: {name}, repetition {}/{repeat}",
                        scn.name,
                        rep + 1
                    ));
                },
            )
            .map_err(|e| e.to_string())?;
            for run in r {
                cluster::check_clean(&run.pids).map_err(|e| format!("after {}: {e}", run.cc))?;
                let failed: Vec<String> = run
                    .jobs
                    .iter()
                    .filter(|j| !j.ok)
                    .map(|j| format!("{}: {}", j.job, j.error.clone().unwrap_or_default()))
                    .collect();
                if !failed.is_empty() {
                    bar.println(format!(
                        "{}: {} job(s) failed:\n  {}",
                        run.cc,
                        failed.len(),
                        failed.join("\n  ")
                    ));
                }
                bar.set_position(done_before + run.jobs.len() as u64);
                runs.push(run);
            }
        }
    }
    let link_mbit = scn.host_link_bits as f64 / 1e6;
    for cc in ccs.iter().filter(|c| !matches!(c, Cc::Isolated(_))) {
        if let Some(r) = runs.iter().find(|r| r.cc == cc.name()) {
            report::bandwidth(
                r,
                link_mbit,
                &out.join(format!("bandwidth-{}.svg", cc.file_name())),
            )?;
            if let Some(host) = scn.jobs.first().and_then(|j| j.workers.first()) {
                report::senders(
                    r,
                    host,
                    link_mbit,
                    &out.join(format!("senders-{}.svg", cc.file_name())),
                )?;
            }
        }
    }
    let mut s = report::summarize(&scn.name, quick, scn.link_burst, scn.link_classes, runs);
    s.daemon_nice = Some(bins.daemon_nice);
    report::jct_bars(&s, &out.join("jct.svg"))?;
    std::fs::write(out.join("summary.md"), report::markdown(&s)).map_err(|e| e.to_string())?;
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    Ok((s, out))
}
