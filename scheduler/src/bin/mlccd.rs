//! `mlccd`: the per-host mlcc scheduler daemon.

use std::process::ExitCode;

use clap::Parser;
use mlcc_core::topology::{NodeKind, Topology};
use mlcc_scheduler::config::{Config, DaemonArgs, DatapathKind, Fill, TsoRttLog};
use mlcc_scheduler::daemon;
use mlcc_scheduler::datapath::DatapathPort;
use mlcc_scheduler::sockets::ProcSockets;

/// With the `mimalloc` feature: every slot builds and drops a few thousand small blocks
/// (observations, plans, protobuf messages), which mimalloc's thread-local free lists serve
/// for less than glibc's malloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mlcc_alloc::MlccAlloc = mlcc_alloc::MlccAlloc;

#[derive(Parser, Debug)]
#[command(
    name = "mlccd",
    version,
    about = "mlcc per-host scheduler: plans and paces every local training flow, slot by slot",
    long_about = "mlcc per-host scheduler daemon (docs/design.md §11).\n\n\
Every slot (τ, on the absolute realtime grid shared with the switches) it reads the progress \
files training processes write into --shm-dir, maps each job's TCP connections to flow groups, \
fetches the load other hosts booked from the switch emulators on the flows' paths, plans each \
flow's rate over the next K slots (Alg. 1) adjusted for its dependencies on other flows (Alg. 2, \
with progress exchanged with the peers' mlccd), writes the rates to the datapath with an expiry \
of 3τ, and publishes the plans.\n\n\
Degraded modes: a switch that does not answer within --rpc-deadline has its links planned as \
unbooked (capped by each flow's achievable rate); a silent peer means no dependency adjustment \
for its flows; --datapath dry-run enforces nothing. Each is logged and exported as \
mlcc_sched_degraded{mode=...}.\n\n\
Serves mlcc.v1.Peer on --peer-listen, mlcc.v1.Admin (mlccctl) on --admin-socket, Prometheus \
metrics on --metrics-listen. With --tls-cert, --tls-key and --tls-ca the Peer service and \
every call to switches and peers use mutual TLS (deploy/SECURITY.md). SIGHUP reloads the topology; SIGTERM/SIGINT stop it, leaving rate \
orders to expire so flows fall back to Reno gracefully."
)]
struct Cli {
    #[command(flatten)]
    args: DaemonArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mlccd: {e}");
            return ExitCode::from(2);
        }
    };
    mlcc_daemon::init_logs(config.log_format);
    let mut rt = match config.worker_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(usize::from(n));
            b
        }
    };
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mlccd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The pinned BPF datapath, loaded (and pinned) first if nothing is pinned yet: flows keep
/// their rates across mlccd restarts because the programs and maps stay pinned.
fn open_bpf(opts: &mlcc_bpf::LoadOptions) -> Result<mlcc_bpf::KernelDatapath, String> {
    let (pin_dir, rto_floor, fallback) = (opts.pin_dir.as_path(), opts.rto_floor, opts.fallback);
    match mlcc_bpf::KernelDatapath::open(pin_dir) {
        Ok(d) => {
            let pinned = d.rto_floor().ok();
            tracing::info!(pin_dir = %pin_dir.display(), rto_floor = ?pinned.and_then(|f| f.get()), "BPF datapath: opened the pinned one");
            if pinned.is_some_and(|p| p != rto_floor) {
                tracing::warn!(
                    "the pinned datapath keeps its RTO floor; --rto-floor {:?} applies when mlccd loads it (mlcc-bpf unload first)",
                    rto_floor.get()
                );
            }
            let pinned = d.fallback().ok();
            if pinned.is_some_and(|p| p != fallback) {
                tracing::warn!(
                    "the pinned datapath keeps its fallback {}; --fallback {fallback} applies when mlccd loads it (mlcc-bpf unload first)",
                    pinned.map_or_else(String::new, |p| p.to_string())
                );
            }
            let size = d.max_sockets().ok();
            if size.is_some_and(|n| n != opts.max_sockets.get()) {
                tracing::info!(
                    "the pinned datapath keeps room for {} sockets; --max-sockets {} applies when mlccd loads it",
                    size.unwrap_or_default(),
                    opts.max_sockets.get()
                );
            }
            Ok(d)
        }
        Err(mlcc_bpf::DatapathError::NotLoaded(_)) => {
            let d = mlcc_bpf::KernelDatapath::load(opts)
                .map_err(|e| format!("BPF datapath: {e} (or run with --datapath dry-run)"))?;
            tracing::info!(pin_dir = %pin_dir.display(), cc = ?d.cc_name(), "BPF datapath: loaded and pinned");
            Ok(d)
        }
        Err(e) => Err(format!(
            "BPF datapath at {}: {e} (or run with --datapath dry-run)",
            pin_dir.display()
        )),
    }
}

/// With fill classes, the bytes beyond each flow's plan are marked as they leave the host: on
/// `--fill-dev`, or the device holding this host's address in the topology.
fn attach_marker(
    d: &mlcc_bpf::KernelDatapath,
    config: &Config,
    topo: &Topology,
) -> Result<(), String> {
    let devs = if config.fill_devs.is_empty() {
        let ip = topo
            .node_by_name(&config.host)
            .and_then(|n| match &topo.node(n).kind {
                NodeKind::Host { ip, .. } => *ip,
                _ => None,
            })
            .ok_or("--fill needs --fill-dev: this host has no address in the topology")?;
        let dev = mlcc_bpf::device_with_address(ip)
            .map_err(|e| format!("looking for the device with {ip}: {e}"))?
            .ok_or_else(|| {
                format!("no device holds {ip} (this host's address): give --fill-dev")
            })?;
        vec![dev]
    } else {
        config.fill_devs.clone()
    };
    for dev in &devs {
        d.attach_marker(dev)
            .map_err(|e| format!("fill marker on {dev}: {e}"))?;
        tracing::info!(%dev, fill = %config.policy.fill, classes = config.policy.fill_classes, "fill classes: bytes beyond the plan are marked as they leave");
    }
    Ok(())
}

const TSO_RTT_LOG: &str = "/proc/sys/net/ipv4/tcp_tso_rtt_log";

/// See [`TsoRttLog`]: without this, a burst sent under a low planned rate can hold a socket
/// for hundreds of milliseconds after its plan went up. A failure only warns: rates are still
/// enforced, some transitions are just slower.
fn set_tso_rtt_log(want: TsoRttLog) {
    let TsoRttLog::Set(v) = want else {
        return;
    };
    let old = std::fs::read_to_string(TSO_RTT_LOG).map(|s| s.trim().to_string());
    match old {
        Ok(old) if old == v.to_string() => {}
        Ok(old) => match std::fs::write(TSO_RTT_LOG, v.to_string()) {
            Ok(()) => {
                tracing::info!(old = %old, new = v, "net.ipv4.tcp_tso_rtt_log set (TSO bursts follow the pacing rate)")
            }
            Err(e) => tracing::warn!(
                "cannot set net.ipv4.tcp_tso_rtt_log to {v} ({e}): low planned rates may stall sockets after they rise"
            ),
        },
        // Kernels before 5.18 have no such sysctl and size bursts by the pacing rate anyway.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot read {TSO_RTT_LOG}: {e}"),
    }
}

async fn serve(config: Config) -> Result<(), String> {
    if config.clock_offset_ns != 0 {
        mlcc_scheduler::daemon::set_clock_offset(config.clock_offset_ns);
        tracing::warn!(
            offset_ms = config.clock_offset_ns as f64 / 1e6,
            "--clock-offset-ms: this daemon's clock is deliberately skewed (fault rehearsal)"
        );
    }
    let topo = Topology::load(&config.topology).map_err(|e| e.to_string())?;
    let datapath = match config.datapath {
        DatapathKind::DryRun => DatapathPort::dry_run(),
        DatapathKind::Bpf => {
            let d = open_bpf(&mlcc_bpf::LoadOptions {
                pin_dir: config.bpf_pin_dir.clone(),
                cc_name: config.bpf_cc_name.clone(),
                rto_floor: config.rto_floor,
                fallback: config.fallback,
                max_sockets: config.max_sockets,
                ..Default::default()
            })?;
            set_tso_rtt_log(config.tcp_tso_rtt_log);
            if config.policy.fill != Fill::Off {
                attach_marker(&d, &config, &topo)?;
            }
            DatapathPort::enforcing("bpf", d)
        }
    };
    let peer = tokio::net::TcpListener::bind(config.peer_listen)
        .await
        .map_err(|e| format!("cannot listen on {} (peer): {e}", config.peer_listen))?;
    let metrics = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|e| format!("cannot listen on {} (metrics): {e}", config.metrics_listen))?;
    let admin = daemon::bind_admin_as(&config.admin_socket, config.admin_group.as_deref())
        .map_err(|e| format!("admin socket {}: {e}", config.admin_socket.display()))?;
    tracing::info!(
        host = %config.host,
        shm_dir = %config.shm_dir.display(),
        admin = %config.admin_socket.display(),
        tau_ms = config.policy.slots.tau().as_millis() as u64,
        horizon = config.policy.slots.horizon(),
        "mlccd starting"
    );
    let running = daemon::start(
        config.clone(),
        topo,
        datapath,
        Box::new(ProcSockets::default()),
        peer,
        Some(admin),
        Some(metrics),
    )
    .await?;
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("SIGHUP: {e}"))?;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: stopping; rate orders expire in 3τ"); break; }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: stopping"); break; }
            _ = hup.recv() => {
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Reloading]);
                match Topology::load(&config.topology).map(std::sync::Arc::new) {
                    Ok(t) => match running.shared.host().set_topology(t.clone()) {
                        Ok(()) => {
                            running.shared.status().keep_switches_of(&t);
                            tracing::info!(topology = %config.topology.display(), "SIGHUP: topology reloaded");
                        }
                        Err(e) => tracing::error!("SIGHUP: new topology refused, keeping the old one: {e}"),
                    },
                    Err(e) => tracing::error!("SIGHUP: {e}; keeping the old topology"),
                }
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            }
        }
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    running.stop().await;
    let _ = std::fs::remove_file(&config.admin_socket);
    Ok(())
}
