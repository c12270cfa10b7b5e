//! `mlcc-sim`: run policies over a scenario and write per-job CSV, summary.json, a Markdown
//! table and SVG plots.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mlcc_core::SlotConfig;
use mlcc_core::routing::Routes;

use mlcc_sim::placement::Placement;
use mlcc_sim::run::{RunConfig, run_policy};
use mlcc_sim::{plot, policy, report, scenario, testbed, workload};

#[derive(Parser)]
#[command(
    name = "mlcc-sim",
    version,
    about = "Trace-driven slot simulator for mlcc and its baselines",
    long_about = "Trace-driven, discrete-slot (τ = 60 ms, K = 10) simulator that runs mlcc-core's own \
Planner, Alg. 1, Alg. 2 and load tables on clusters of up to thousands of servers, and compares \
mlcc with per-link fair sharing, MCS (multi-stage coflows), CCML (host-side interleaving) and the \
isolated lower bound.\n\nExamples:\n  mlcc-sim run --scenario paper-fig15 --policies mlcc,fair,mcs,ccml,isolated --seed 1 --out results/\n  mlcc-sim run --quick --policies mlcc,mlcc-paper,mlcc-no-idle,mlcc-rank-attained-service --out results-quick/\n  mlcc-sim run --scenario tiny --trace jobs.csv --policies mlcc,fair\n  mlcc-sim trace --scenario quick --seed 3 > jobs.csv\n  mlcc-sim list"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate policies over a scenario and write results.
    Run(RunArgs),
    /// Print the scenario's generated job trace as CSV (edit it and pass it back with --trace).
    Trace {
        #[arg(long, default_value = "paper-fig15")]
        scenario: String,
        #[arg(long)]
        quick: bool,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// List scenarios and policies.
    List,
}

#[derive(clap::Args)]
struct RunArgs {
    /// paper-fig15 (1000 servers, §VII), quick (100 servers) or tiny (20 servers).
    #[arg(long, default_value = "paper-fig15")]
    scenario: String,
    /// Comma-separated policies (see `mlcc-sim list`); the first mlcc variant is the
    /// reference the ratios are computed against.
    #[arg(
        long,
        default_value = "mlcc,fair,mcs,ccml,isolated",
        value_delimiter = ','
    )]
    policies: Vec<String>,
    /// Seeds the arrival generator and the placement.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for jobs.csv, summary.json, summary.md and the SVG plots.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Run the 100-server version of the scenario.
    #[arg(long)]
    quick: bool,
    /// Jobs from a CSV trace (arrival_s,model,arch,workers,servers,iterations) instead of the
    /// scenario's generator; the scenario still gives the topology and placement.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Simulate a testbed scenario (`tests/scenarios/<name>.toml`, or a path) instead: its
    /// hosts and links, its jobs on their hosts with their bytes and compute times, its slots
    /// (`--quick`: its short version). Cross traffic is not simulated.
    #[arg(long, value_name = "NAME|PATH", conflicts_with_all = ["trace", "placement"])]
    testbed: Option<String>,
    /// Override the scenario's placement rule.
    #[arg(long, value_enum)]
    placement: Option<Placement>,
    /// Per-layer communication (ASC-WFBP's model, `sim/src/layers.rs`): each iteration's
    /// gradient leaves in four buckets as the backward pass computes them, each message
    /// costing a = 1.4 ms, and the next forward pass starts on front layers that arrived;
    /// off: one blob after the whole compute.
    #[arg(long)]
    per_layer: bool,
    /// Slot length τ, e.g. "60ms" for the paper's, instead of mlccd's default (30 ms) or a
    /// testbed scenario's own. Every policy steps in these slots.
    #[arg(long, value_name = "DURATION", value_parser = mlcc_core::units::parse_duration)]
    tau: Option<std::time::Duration>,
    /// Planning horizon K in slots instead of mlccd's default or the scenario's (10, as the
    /// paper's).
    #[arg(long, value_name = "K")]
    horizon: Option<usize>,
    /// Give up after this many slots (jobs left are reported unfinished).
    #[arg(long, default_value_t = 2_000_000)]
    max_slots: u64,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// With the `mimalloc` feature: each slot builds and drops every host's observations and plans,
/// which mimalloc's thread-local free lists serve for less than glibc's malloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mlcc_alloc::MlccAlloc = mlcc_alloc::MlccAlloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Per-flow decisions come from core's policy under the `mlcc_plan` target:
    // RUST_LOG=mlcc_plan=debug prints every host's every flow, every slot (to stderr).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlcc-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::List => {
            println!("scenarios: {}", scenario::NAMES.join(", "));
            println!("policies:");
            for e in policy::registry() {
                println!("  {:<16} {}", e.name, e.about);
            }
            Ok(())
        }
        Cmd::Trace {
            scenario: name,
            quick,
            seed,
        } => {
            let s = find_scenario(&name, quick)?;
            print!("{}", workload::to_csv(&s.jobs(seed)));
            Ok(())
        }
        Cmd::Run(a) => run_cmd(a),
    }
}

fn find_scenario(name: &str, quick: bool) -> Result<scenario::Scenario, String> {
    scenario::by_name(name, quick).ok_or_else(|| {
        format!(
            "unknown scenario {name:?} (known: {})",
            scenario::NAMES.join(", ")
        )
    })
}

fn run_cmd(a: RunArgs) -> Result<(), String> {
    for p in &a.policies {
        if let Err(e) = policy::parse(p) {
            return Err(format!(
                "{e} (known: {}; an mlcc variant takes /key=value overrides)",
                policy::names().join(", ")
            ));
        }
    }
    // The cluster, the jobs and the slots: a simulator scenario, or a testbed's.
    let (name, topo, topo_desc, jobs, slots, placement, switch_tables) = match &a.testbed {
        Some(t) => {
            let mut tb = testbed::Scenario::find(t).map_err(|e| e.to_string())?;
            if a.quick {
                tb = tb.quick();
            }
            let topo = tb.topology().map_err(|e| format!("topology: {e}"))?;
            let desc = format!(
                "testbed: {} rack(s) x {} hosts, {} Mbit/s host links{}{}",
                tb.racks,
                tb.hosts_per_rack,
                tb.host_link_bits / 1_000_000,
                tb.inter_switch_bits.map_or(String::new(), |b| format!(
                    ", {} Mbit/s between racks",
                    b / 1_000_000
                )),
                match (tb.cross.is_some(), tb.switch_emulators) {
                    (true, _) => " (its cross traffic not simulated)",
                    (false, false) => ", no switch emulators (cloud mode)",
                    (false, true) => "",
                }
            );
            let name = if a.quick {
                format!("{} (quick)", tb.name)
            } else {
                tb.name.clone()
            };
            (
                name,
                topo,
                desc,
                tb.sim_jobs(),
                tb.slots()?,
                Placement::Packed,
                tb.switch_emulators,
            )
        }
        None => {
            let s = find_scenario(&a.scenario, a.quick)?;
            let jobs = match &a.trace {
                Some(path) => workload::read_trace(path).map_err(|e| e.to_string())?,
                None => s.jobs(a.seed),
            };
            let topo = s.topology.build().map_err(|e| format!("topology: {e}"))?;
            let placement = a.placement.unwrap_or(s.placement);
            (
                s.name.clone(),
                topo,
                s.topology.describe(),
                jobs,
                SlotConfig::mlccd(),
                placement,
                true,
            )
        }
    };
    let slots = SlotConfig::new(
        a.tau.unwrap_or(slots.tau()),
        a.horizon.unwrap_or(slots.horizon()),
    )
    .map_err(|e| format!("--tau/--horizon: {e}"))?;
    let routes = Routes::new(&topo);
    let cfg = RunConfig {
        topo: &topo,
        routes: &routes,
        slots,
        placement,
        seed: a.seed,
        max_slots: a.max_slots,
        progress: !a.quiet,
        switch_tables,
        per_layer: a.per_layer,
    };
    std::fs::create_dir_all(&a.out).map_err(|e| format!("creating {}: {e}", a.out.display()))?;
    eprintln!(
        "mlcc-sim: {} — {}; {} jobs; policies {}{}",
        name,
        topo_desc,
        jobs.len(),
        a.policies.join(","),
        if a.per_layer { "; per-layer" } else { "" }
    );
    let mut runs = Vec::new();
    for p in &a.policies {
        let r = run_policy(p, &jobs, &cfg).map_err(|e| e.to_string())?;
        eprintln!(
            "  {:<16} {:>7.1} s wall, {} busy slots ({:.0}/s), mean JCT {:.1} s",
            p,
            r.stats.wall_secs,
            r.stats.busy_slots,
            r.stats.busy_slots as f64 / r.stats.wall_secs.max(1e-9),
            {
                let v: Vec<f64> = r.jobs.iter().filter_map(|j| j.jct_s).collect();
                v.iter().sum::<f64>() / v.len().max(1) as f64
            }
        );
        runs.push(r);
    }
    let name = if a.per_layer {
        format!("{name} (per-layer)")
    } else {
        name
    };
    let summary = report::summarize(&name, &topo_desc, a.seed, &runs);
    let write = |name: &str, body: String| {
        let p = a.out.join(name);
        std::fs::write(&p, body).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    let mut csv = String::new();
    for (i, r) in runs.iter().enumerate() {
        let c = report::jobs_csv(r);
        csv += if i == 0 {
            &c
        } else {
            c.split_once('\n').map_or("", |x| x.1)
        };
    }
    write("jobs.csv", csv)?;
    write(
        "summary.json",
        serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())? + "\n",
    )?;
    let md = report::markdown(&summary);
    write("summary.md", md.clone())?;
    write("trace.csv", workload::to_csv(&jobs))?;
    plot::jct_cdf(&runs, &a.out.join("jct_cdf.svg"))?;
    plot::jct_bars(&summary, &a.out.join("jct_bars.svg"))?;
    plot::latency_hist(&runs, &a.out.join("decision_latency.svg"))?;
    println!("{md}");
    eprintln!("mlcc-sim: wrote {}", a.out.display());
    Ok(())
}
