//! mlcc-testbed: an emulated cluster on one machine (DESIGN.md §14) — hosts as network
//! namespaces, switches as bridges, shaped veth links, real mlcc-switchd / mlccd / BPF datapath —
//! running a scenario's jobs once per congestion control and comparing job completion times.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use mlcc_testbed::cluster::{self, Binaries, Cc, Cluster, RunError};
use mlcc_testbed::report;
use mlcc_testbed::scenario::Scenario;

/// Emulated cluster testbed: real jobs over real TCP between network namespaces, under kernel
/// congestion controls and under mlcc. Needs root.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a scenario's cluster and leave it running (for poking at it with `ip netns exec`,
    /// mlccctl, curl on the metrics ports); `down` removes it.
    Up {
        /// Scenario name (tests/scenarios/<name>.toml) or path.
        #[arg(long)]
        scenario: String,
        /// "mlcc" also starts the switch emulators, one mlccd per host and the BPF datapath.
        #[arg(long, default_value = "mlcc")]
        cc: String,
        /// Where the run's topology, sockets and logs go.
        #[arg(long, default_value = "results/up")]
        out: PathBuf,
        /// Directory holding mlcc-trainer, mlccd and mlcc-switchd [default: next to this binary].
        #[arg(long)]
        bin_dir: Option<PathBuf>,
    },
    /// Remove every testbed object on the machine: namespaces with their processes, BPF pins,
    /// shared-memory directories.
    Down,
    /// Simulate scenarios with mlcc-sim (mlcc, fair, isolated on the same hosts, bytes and
    /// compute times) and put the simulator's ratios beside the testbed's results
    /// (`<results>/<scenario>/summary.json`); writes `<results>/predict.md` and `predict.json`.
    Predict {
        /// Comma-separated scenario names or paths.
        #[arg(long, value_delimiter = ',', required = true)]
        scenario: Vec<String>,
        /// The short versions (as `run --quick`).
        #[arg(long)]
        quick: bool,
        /// Where `run` wrote its results.
        #[arg(long, default_value = "results")]
        results: PathBuf,
    },
    /// Run the scenario's jobs once per congestion control and write results/<scenario>/
    /// (summary.json, summary.md, jct.svg, bandwidth-<cc>.svg).
    Run {
        #[arg(long)]
        scenario: String,
        /// Comma-separated congestion controls: a kernel CC (cubic, reno, bbr), `mlcc`, an mlcc
        /// variant `mlcc/key=value/...` (mlccd options as in mlcc-sim's variants: eta, rank,
        /// mode, policy, or a rule NAME=on|off), or `isolated[/<kernel CC>]` (every job alone
        /// on its hosts under cubic or the CC named, no cross traffic: the lower bound).
        #[arg(long, value_delimiter = ',', default_value = "cubic,reno,bbr,mlcc")]
        cc: Vec<String>,
        /// Repetitions of the whole set (CCs interleaved, so drift hits all alike).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// The short version: iterations scaled by the scenario's quick_scale.
        #[arg(long)]
        quick: bool,
        #[arg(long, default_value = "results")]
        out: PathBuf,
        #[arg(long)]
        bin_dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    cluster::install_signal_handlers();
    match real_main(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlcc-testbed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bins(dir: Option<PathBuf>) -> Result<Binaries, RunError> {
    match dir {
        Some(d) => Binaries::in_dir(&d),
        None => Binaries::next_to_me(),
    }
}

fn real_main(a: Args) -> Result<(), String> {
    match a.cmd {
        Cmd::Down => {
            let gone = cluster::down_all();
            if gone.is_empty() {
                println!("nothing to remove");
            }
            for g in gone {
                println!("removed {g}");
            }
            Ok(())
        }
        Cmd::Predict {
            scenario,
            quick,
            results,
        } => {
            let mut rows = Vec::new();
            for name in &scenario {
                let mut scn = Scenario::find(name).map_err(|e| e.to_string())?;
                if quick {
                    scn = scn.quick();
                }
                rows.push(mlcc_testbed::predict::predict(&scn, quick, &results)?);
            }
            let md = mlcc_testbed::predict::markdown(&rows);
            std::fs::create_dir_all(&results).map_err(|e| e.to_string())?;
            std::fs::write(results.join("predict.md"), &md).map_err(|e| e.to_string())?;
            std::fs::write(
                results.join("predict.json"),
                serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            print!("{md}");
            Ok(())
        }
        Cmd::Up {
            scenario,
            cc,
            out,
            bin_dir,
        } => {
            let scn = Scenario::find(&scenario).map_err(|e| e.to_string())?;
            let cc = Cc::parse(&cc)?;
            if matches!(cc, Cc::Isolated(_)) {
                return Err("`isolated` runs jobs one by one; `up` takes a CC or mlcc".into());
            }
            let b = bins(bin_dir).map_err(|e| e.to_string())?;
            let run = cluster::run_id();
            let c = Cluster::up(&scn, cc, &b, &out, &run).map_err(|e| e.to_string())?;
            for h in &c.plan.hosts {
                println!("{} {} netns {}", h.name, h.ip, h.ns);
            }
            for s in &c.plan.switches {
                println!("{} {} netns {}", s.name, s.ip, s.ns);
            }
            println!(
                "logs in {}; remove with `mlcc-testbed down`",
                out.join("logs").display()
            );
            c.keep();
            Ok(())
        }
        Cmd::Run {
            scenario,
            cc,
            repeat,
            quick,
            out,
            bin_dir,
        } => {
            let mut scn = Scenario::find(&scenario).map_err(|e| e.to_string())?;
            if quick {
                scn = scn.quick();
            }
            let ccs: Vec<Cc> = cc.iter().map(|c| Cc::parse(c)).collect::<Result<_, _>>()?;
            if ccs.is_empty() || repeat == 0 {
                return Err("nothing to run: give --cc and --repeat >= 1".into());
            }
            let b = bins(bin_dir).map_err(|e| e.to_string())?;
            let out = out.join(&scn.name);
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let total = (ccs.len() * repeat * scn.jobs.len()) as u64;
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:40}] {pos}/{len} jobs  {msg}",
                )
                .map_err(|e| e.to_string())?
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(500));
            let mut runs = Vec::new();
            for rep in 0..repeat {
                for cc in &ccs {
                    let done_before = bar.position();
                    let dir = out.join(format!("rep{}", rep + 1));
                    let r = cluster::run_scenario(
                        &scn,
                        std::slice::from_ref(cc),
                        &b,
                        &dir,
                        |done, _, name| {
                            bar.set_position(
                                done_before
                                    .max(bar.position())
                                    .min(done_before + done as u64),
                            );
                            bar.set_message(format!("{name}, repetition {}/{repeat}", rep + 1));
                        },
                    )
                    .map_err(|e| e.to_string())?;
                    for run in r {
                        cluster::check_clean(&run.pids)
                            .map_err(|e| format!("after {}: {e}", run.cc))?;
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
            bar.finish_and_clear();
            let link_mbit = scn.host_link_bits as f64 / 1e6;
            for cc in ccs.iter().filter(|c| !matches!(c, Cc::Isolated(_))) {
                if let Some(r) = runs.iter().find(|r| r.cc == cc.name()) {
                    report::bandwidth(
                        r,
                        link_mbit,
                        &out.join(format!("bandwidth-{}.svg", cc.file_name())),
                    )?;
                }
            }
            let s = report::summarize(&scn.name, quick, runs);
            report::jct_bars(&s, &out.join("jct.svg"))?;
            let md = report::markdown(&s);
            std::fs::write(out.join("summary.md"), &md).map_err(|e| e.to_string())?;
            std::fs::write(
                out.join("summary.json"),
                serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            println!("{md}");
            println!("written to {}", out.display());
            let failed: usize = s.ccs.iter().map(|c| c.jobs_failed).sum();
            if failed > 0 {
                return Err(format!(
                    "{failed} job(s) failed; see the logs under {}",
                    out.display()
                ));
            }
            Ok(())
        }
    }
}
