//! `mlcc-switchd`: keeps the K-slot link load table of one switch that cannot be programmed.
//! Schedulers (mlccd) publish their flows' plans to it and read back what others booked.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use mlcc_core::topology::Topology;
use mlcc_switch_emu::bench::BenchArgs;
use mlcc_switch_emu::config::{Config, LogFormat, ServeArgs};
use mlcc_switch_emu::{Emulator, SystemClock, server};

/// With the `mimalloc` feature: the server allocates and frees a few dozen small blocks per
/// message (decoded requests, table entries, replies); mimalloc's thread-local free lists do that
/// for less than glibc's malloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mlcc_alloc::MlccAlloc = mlcc_alloc::MlccAlloc;

#[derive(Parser, Debug)]
#[command(
    name = "mlcc-switchd",
    version,
    about = "mlcc switch emulator: the K-slot link load table of one switch, over gRPC",
    long_about = "mlcc switch emulator: keeps the K-slot link load table of one switch that cannot \
be programmed (docs/design.md §6, §10).\n\n\
Schedulers (mlccd) on the hosts call UpdateSchedule once per slot with all their flows' plans on \
this switch's links, and FetchFeedback to read the load that other hosts booked. Entries are soft \
state: one not refreshed for K slots expires, so a restart loses the table and schedulers rebuild \
it within K slots.\n\n\
Slots are absolute (realtime / τ): keep the clock synchronized (chrony/PTP) with the hosts.\n\n\
Serves mlcc.v1.Switch, grpc.health.v1 and gRPC reflection on --listen, Prometheus metrics on \
--metrics-listen. With --tls-cert, --tls-key and --tls-ca the gRPC port serves only clients \
presenting a certificate signed by that CA (mutual TLS, deploy/SECURITY.md). Stops gracefully on \
SIGTERM or SIGINT.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load generator: drives a running mlcc-switchd with N simulated hosts and prints JSON.
    Bench(BenchArgs),
    /// The transport alone, for benchmarks: serves mlcc.v1.Switch with the same settings but
    /// answers every request empty, touching no table (scripts/bench-switchd.sh compares the
    /// switch's CPU with it). Takes the serving flags; only --listen, --topology, --switch,
    /// --tau and --horizon matter.
    BenchBaseline(ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Bench(args)) => {
            mlcc_daemon::init_logs(LogFormat::Human);
            // As many threads as CPUs it may use (1 under `taskset -c 1`): a current-thread
            // runtime then, as extra threads on one core only add context switches.
            let threads = args
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let mut rt = if threads <= 1 {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(threads);
                b
            };
            let rt = match rt.enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("mlcc-switchd bench: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(mlcc_switch_emu::bench::run(&args)) {
                Ok(report) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&report).unwrap_or_default()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("mlcc-switchd bench: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::BenchBaseline(args)) => {
            run_server(args, "mlcc-switchd bench-baseline", serve_baseline)
        }
        None => run_server(cli.serve, "mlcc-switchd", serve),
    }
}

/// Resolves the serving flags (exit 2 on a bad one), starts the logs and serves.
fn run_server(args: ServeArgs, name: &str, serve: fn(Config) -> Result<(), String>) -> ExitCode {
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    mlcc_daemon::init_logs(config.log_format);
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn emulator(config: &Config) -> Result<Emulator, String> {
    let topo = Topology::load(&config.topology).map_err(|e| e.to_string())?;
    let now = config
        .slots
        .slot_at(mlcc_switch_emu::Clock::now_ns(&SystemClock));
    Emulator::new(
        &topo,
        &config.switch,
        config.slots,
        config.feedback_mode,
        now,
    )
    .map_err(|e| format!("{}: {e}", config.topology.display()))
}

/// The runtime `--worker-threads` asks for. One worker: a current-thread runtime saves the
/// work-stealing scheduler's cross-thread wake-ups, which is what a switch pinned to one core
/// wants.
fn runtime(config: &Config) -> Result<tokio::runtime::Runtime, String> {
    let mut rt = match config.worker_threads {
        Some(0 | 1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    rt.enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

fn serve_baseline(config: Config) -> Result<(), String> {
    let emu = emulator(&config)?;
    let now = emu.table().now();
    let baseline = mlcc_switch_emu::baseline::Baseline::new(&emu, now);
    drop(emu);
    runtime(&config)?.block_on(async move {
        tokio::select! {
            r = mlcc_switch_emu::baseline::serve(baseline, config.listen) => r,
            s = shutdown_signal() => {
                tracing::info!("{s}: shutting down");
                Ok(())
            }
        }
    })
}

fn serve(config: Config) -> Result<(), String> {
    let clock = Arc::new(SystemClock);
    let emu = emulator(&config)?;
    let tls = config
        .tls
        .as_ref()
        .map(mlcc_daemon::tls::Tls::load)
        .transpose()
        .map_err(|e| format!("mTLS: {e}"))?;
    tracing::info!(
        switch = %config.switch,
        links = emu.link_stats().len(),
        tau_ms = config.slots.tau().as_millis() as u64,
        horizon = config.slots.horizon(),
        mode = ?config.feedback_mode,
        mtls = tls.is_some(),
        "load table ready"
    );
    runtime(&config)?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let metrics = tokio::net::TcpListener::bind(config.metrics_listen)
            .await
            .map_err(|e| format!("cannot listen on {} (metrics): {e}", config.metrics_listen))?;
        let mut running = server::start_with_tls(emu, clock, listener, Some(metrics), tls.as_ref())
            .await
            .map_err(|e| e.to_string())?;
        // Type=notify: ready once both listeners are bound. Outside systemd this is a no-op.
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
        tokio::select! {
            r = running.failed() => return r.map_err(|e| e.to_string()),
            s = shutdown_signal() => tracing::info!("{s}: shutting down"),
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
        running.stop().await.map_err(|e| e.to_string())
    })
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C), naming which.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
