//! `mltcp-feeder`: fills the MLTCP congestion control's per-socket ratio map from the host's
//! progress files (see `mlcc_scheduler::mltcp`). Host-local only: no topology, switch or peer.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use mlcc_bpf::mltcp::MltcpDatapath;
use mlcc_scheduler::mltcp::{ProcessView, orders};
use mlcc_scheduler::monitor::ProgressDir;
use mlcc_scheduler::sockets::{DatapathSockets, ProcSockets, SocketSource};

#[derive(Parser, Debug)]
#[command(
    name = "mltcp-feeder",
    version,
    about = "Writes each training socket's MLTCP ratio (share of its iteration's bytes sent) \
             into the MLTCP CC's map, every slot"
)]
struct Cli {
    /// Where training processes write their progress files (mlcc_progress.h).
    #[arg(long, env = "MLCC_SHM_DIR", default_value = "/dev/shm/mlcc")]
    shm_dir: PathBuf,
    /// Where `MltcpDatapath::load` pinned the CC and its maps.
    #[arg(long)]
    bpf_pin_dir: PathBuf,
    /// How often the ratios are rewritten.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    interval: Duration,
    /// A ratio not rewritten for this many intervals expires and the socket runs the CC's plain
    /// base (Reno or CUBIC).
    #[arg(long, default_value_t = 3)]
    ttl_intervals: u32,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    mlcc_core::units::parse_duration(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.interval.is_zero() || cli.ttl_intervals == 0 {
        eprintln!("mltcp-feeder: --interval and --ttl-intervals must be positive");
        return ExitCode::from(2);
    }
    let dp = match MltcpDatapath::open(&cli.bpf_pin_dir) {
        Ok(dp) => dp,
        Err(e) => {
            eprintln!("mltcp-feeder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ttl = cli.interval * cli.ttl_intervals;
    let mut progress = ProgressDir::new(cli.shm_dir.clone());
    let sockets = ProcSockets::default();
    let mut last_error = String::new();
    eprintln!(
        "mltcp-feeder: {} -> {} every {:?}",
        cli.shm_dir.display(),
        cli.bpf_pin_dir.display(),
        cli.interval
    );
    let (mut last_fed, mut last_log) = (0, Instant::now());
    let mut next = Instant::now();
    // SIGTERM ends it; the ratios it wrote expire after --ttl-intervals and sockets run the
    // plain base.
    loop {
        next += cli.interval;
        if let Err(e) = progress.poll() {
            report(
                &mut last_error,
                format!("listing {}: {e}", cli.shm_dir.display()),
            );
        }
        sockets.next_slot(DatapathSockets::Changed);
        let procs: Vec<ProcessView> = progress
            .read()
            .into_iter()
            .filter_map(Result::ok)
            .map(|p| ProcessView {
                conns: sockets.connections(p.header.pid).unwrap_or_default(),
                header: p.header.clone(),
                snapshot: p.snapshot,
            })
            .collect();
        let step = dp.sockets().and_then(|socks| {
            let keys: Vec<_> = socks.iter().map(|(k, _)| *k).collect();
            let o = orders(&procs, &keys, ttl);
            dp.set_ratios(&o)?;
            // What the CC applied at each fed socket's last ACK, F in thousandths.
            let applied: Vec<u32> = socks
                .iter()
                .filter(|(k, _)| o.iter().any(|x| x.key == *k))
                .map(|(_, s)| s.f_milli)
                .collect();
            Ok((o.len(), applied))
        });
        match step {
            Ok((fed, applied)) => {
                last_error.clear();
                if fed != last_fed || last_log.elapsed() >= LOG_EVERY {
                    let mean = (!applied.is_empty()).then(|| {
                        applied.iter().map(|&f| f64::from(f)).sum::<f64>()
                            / applied.len() as f64
                            / f64::from(mlcc_bpf::mltcp::F_ONE)
                    });
                    eprintln!(
                        "mltcp-feeder: {} processes, {fed} sockets fed; mean F at their last \
                         ACK {}",
                        procs.len(),
                        mean.map_or("-".to_string(), |m| format!("{m:.3}"))
                    );
                    last_fed = fed;
                    last_log = Instant::now();
                }
            }
            Err(e) => report(&mut last_error, e.to_string()),
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

/// How often the feeder says what it feeds while that does not change.
const LOG_EVERY: Duration = Duration::from_secs(2);

/// Logs an error once until a different one comes.
fn report(last: &mut String, e: String) {
    if *last != e {
        eprintln!("mltcp-feeder: {e}");
        *last = e;
    }
}
