//! mlcc-testbed: an emulated cluster on one machine (docs/design.md §14) — hosts as network
//! namespaces, switches as bridges, shaped veth links, real mlcc-switchd / mlccd / BPF datapath —
//! running a scenario's jobs once per congestion control and comparing job completion times.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mlcc_testbed::cluster::{self, Binaries, Cc, EmulatedCluster};
use mlcc_testbed::scenario::{LinkOverrides, Scenario};
use mlcc_testbed::{experiment, figure, report};

/// Emulated cluster testbed: real jobs over real TCP between network namespaces, under kernel
/// congestion controls and under mlcc. Needs root.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the testbed's programs are, and how its daemons run.
#[derive(clap::Args, Debug)]
struct Programs {
    /// Directory holding mlcc-trainer, mlccd and mlcc-switchd [default: next to this binary].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The CPU priority (nice, -20..=19) of mlccd, mlcc-switchd and MLTCP's feeder: above the
    /// jobs' by default, as a host gives its scheduler the CPU when its slot begins (0: the
    /// jobs' priority, as in the figures measured before 2026-12-07). Kernel CCs run no
    /// daemon.
    #[arg(long, value_name = "NICE", default_value_t = cluster::DAEMON_NICE,
          allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    daemon_nice: i32,
}

impl Programs {
    fn binaries(&self) -> Result<Binaries, String> {
        let mut b = match &self.bin_dir {
            Some(d) => Binaries::in_dir(d),
            None => Binaries::next_to_me(),
        }
        .map_err(|e| e.to_string())?;
        b.daemon_nice = self.daemon_nice;
        Ok(b)
    }
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
        #[command(flatten)]
        programs: Programs,
        #[command(flatten)]
        links: LinkOverrides,
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
        /// mode, policy, or a rule NAME=on|off; `rto_floor=10ms|kernel` sets the datapath's
        /// RTO floor, `tso_rtt_log=N|keep` mlccd's net.ipv4.tcp_tso_rtt_log, `order_expiry=SLOTS` how long its rate orders hold unrenewed), a kernel CC with mlcc's RTO floor (`cubic/rto_floor=10ms`) or beside a synthetic CPU load of as many cores as mlcc's daemons used (`bbr/cpu_load=0.6`: threads at the daemons' nice, busy in 30-ms periods; not a candidate for best TCP, reported beside it), `mltcp`
        /// (the MLTCP peer baseline: its BPF CC over Reno and a ratio feeder per host) or
        /// `mltcp/cubic` (the same over the kernel's CUBIC; `mltcp/reno` is `mltcp`), or
        /// `isolated[/<kernel CC>]` (every job alone on its hosts under cubic or the CC named,
        /// no cross traffic: the lower bound; one per run, reported as `isolated`), or
        /// `cassini[/<kernel CC>]` (Cassini: each job's
        /// start held back by the time shift mlcc-sim's `cassini` gives it on this scenario,
        /// cubic or the CC named underneath).
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
        #[command(flatten)]
        programs: Programs,
        /// Random loss of data segments on every host link, both directions (e.g. `1%`):
        /// overrides the scenario's `loss`.
        #[arg(long)]
        loss: Option<String>,
        #[command(flatten)]
        links: LinkOverrides,
    },
    /// Reproduce one of the paper's testbed figures: fig10 (training speed vs random loss),
    /// fig8 / fig9 / table1 (one sweep of link rates: JCT, per-model speed-up, JCT statistics),
    /// fig7b (mean JCT vs slot length), fig7a (ordered vs delivered rate of one flow on the
    /// datapath), fig1 / fig11a (two co-located jobs' sending rates under cubic and mlcc),
    /// fig11b (a job beside iperf3). Writes `<out>/<figure>/figure.{md,svg,json}` with the
    /// paper's values beside ours and `<out>/README.md` listing every figure run so far.
    Figure {
        /// fig10, fig8, fig9, table1, fig7b, fig7a, fig1, fig11a or fig11b.
        name: String,
        /// The short sweep (fewer iterations per run, and fig8 without 2 Gbit/s; each figure
        /// within ~15 min here).
        #[arg(long)]
        quick: bool,
        /// Repetitions of every point (CCs interleaved).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Comma-separated CCs instead of the paper's (as for `run`; must include mlcc), e.g.
        /// to add `cubic/rto_floor=10ms` beside them.
        #[arg(long, value_delimiter = ',')]
        cc: Option<Vec<String>>,
        /// Comma-separated x values instead of the sweep's: loss in % (fig10, e.g.
        /// `0,0.1,0.2,0.5,1,2`), host-link Mbit/s (fig8 / fig9 / table1), τ in ms (fig7b).
        /// With --quick, every point at the short length.
        #[arg(long, value_delimiter = ',')]
        points: Option<Vec<f64>>,
        #[arg(long, default_value = "results/figures")]
        out: PathBuf,
        #[command(flatten)]
        programs: Programs,
        #[command(flatten)]
        links: LinkOverrides,
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
        Cmd::Figure {
            name,
            quick,
            repeat,
            cc,
            points,
            out,
            programs,
            links,
        } => {
            let fig = figure::Figure::parse(&name)?;
            if repeat == 0 {
                return Err("--repeat must be at least 1".into());
            }
            let ccs = cc.map(|names| Cc::parse_list(&names)).transpose()?;
            let b = programs.binaries()?;
            let sweep = figure::Sweep {
                quick,
                repeat,
                points: points.as_deref(),
                links,
            };
            let md = figure::run(fig, ccs, &sweep, &b, &out)?;
            println!("{md}");
            println!("written to {}", out.join(fig.dir()).display());
            Ok(())
        }
        Cmd::Up {
            scenario,
            cc,
            out,
            programs,
            links,
        } => {
            let mut scn = Scenario::find(&scenario).map_err(|e| e.to_string())?;
            links.apply(&mut scn)?;
            let cc = Cc::parse(&cc)?;
            if matches!(cc, Cc::Isolated(_) | Cc::Kernel { cassini: true, .. }) {
                return Err(
                    "`isolated` and `cassini` shape how jobs start; `up` takes a CC or mlcc".into(),
                );
            }
            if cc.cpu_load().is_some() {
                return Err("`cpu_load` runs beside a run's jobs; `up` starts none".into());
            }
            let b = programs.binaries()?;
            let run = cluster::run_id();
            let c = EmulatedCluster::up(&scn, cc, &b, &out, &run).map_err(|e| e.to_string())?;
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
            programs,
            loss,
            links,
        } => {
            let mut scn = Scenario::find(&scenario).map_err(|e| e.to_string())?;
            links.apply(&mut scn)?;
            if quick {
                scn = scn.quick();
            }
            if let Some(l) = loss {
                scn.set_loss(
                    mlcc_testbed::scenario::parse_loss(&l).map_err(|e| format!("--loss: {e}"))?,
                );
            }
            let ccs = Cc::parse_list(&cc)?;
            let b = programs.binaries()?;
            let bar = experiment::job_bar((ccs.len() * repeat * scn.jobs.len()) as u64)?;
            let (s, out) = experiment::run_set(&scn, &ccs, repeat, quick, &b, &out, &bar)?;
            bar.finish_and_clear();
            let md = report::markdown(&s);
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
