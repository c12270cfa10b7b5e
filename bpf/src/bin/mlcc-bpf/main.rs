//! `mlcc-bpf`: operator and test CLI for the mlcc kernel datapath.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mlcc_bpf::{
    CcName, CwndPolicy, DEFAULT_PIN_DIR, Datapath, Dscp, Expiry, Fallback, KernelDatapath,
    LoadOptions, MaxSockets, Rate, RateOrder, RtoFloor, SocketKey, unload_pinned,
};

mod bench;

fn parse_dscp(s: &str) -> Result<Dscp, String> {
    s.parse::<u8>()
        .ok()
        .and_then(Dscp::new)
        .ok_or_else(|| format!("{s:?} is not a fill DSCP (1..=63)"))
}

#[derive(Parser)]
#[command(
    version,
    about = "mlcc kernel datapath: BPF congestion control that paces flows at planned rates"
)]
struct Cli {
    /// bpffs directory holding the pinned datapath.
    #[arg(long, global = true, env = "MLCC_BPF_PIN_DIR", default_value = DEFAULT_PIN_DIR)]
    pin_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the CC and sock_ops programs and pin them (they stay after this command exits).
    Load {
        /// Congestion-control name to register (global in the kernel).
        #[arg(long, default_value = "mlcc")]
        name: CcName,
        /// cwnd cap as a percentage of the BDP at the ordered rate.
        #[arg(long, default_value_t = CwndPolicy::default().gain_pct())]
        cwnd_gain_pct: u32,
        /// cwnd floor in segments.
        #[arg(long, default_value_t = CwndPolicy::default().min_segments())]
        min_cwnd: u32,
        /// RTT (microseconds) the cwnd cap assumes at least.
        #[arg(long, default_value_t = CwndPolicy::default().rtt_floor().as_micros() as u64)]
        rtt_floor_us: u64,
        /// Least retransmission timeout (milliseconds) of sockets that join the CC; 0 keeps the
        /// kernel's 200 ms.
        #[arg(long, default_value_t = RtoFloor::default().get().map_or(0, |d| d.as_millis() as u64))]
        rto_floor_ms: u64,
        /// The kernel CC a socket runs while it has no rate order: cubic, reno or bbr.
        #[arg(long, default_value_t = Fallback::default())]
        fallback: Fallback,
        /// Sockets the datapath keeps counters and orders for at once (the per-socket maps'
        /// size; mlccd's read of the counters each slot walks all of it).
        #[arg(long, default_value_t = MaxSockets::default())]
        max_sockets: MaxSockets,
        /// cgroup v2 directories whose TCP sockets join the CC (repeatable).
        #[arg(long)]
        cgroup: Vec<PathBuf>,
    },
    /// Put TCP sockets of a cgroup v2 directory on the CC.
    AttachCgroup { cgroup: PathBuf },
    /// Stop putting new sockets of a cgroup on the CC.
    DetachCgroup { cgroup: PathBuf },
    /// Order a rate for one socket (4-tuple as seen from its host).
    SetRate {
        #[command(flatten)]
        netns: NetnsArg,
        src: SocketAddr,
        dst: SocketAddr,
        /// e.g. 300Mbit, 1.5Gbit, 25MB (bytes/s)
        rate: Rate,
        /// Order lifetime in milliseconds; none: until cleared.
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Guarantee RATE only and send beyond it in the fill class marked with this DSCP
        /// (1..=63; the marker must be attached to the host's uplink: `attach-marker`).
        #[arg(long, value_name = "DSCP", value_parser = parse_dscp)]
        fill_dscp: Option<Dscp>,
    },
    /// Mark the bytes of sockets on fill orders beyond their guaranteed rate as they leave DEV
    /// (tc egress, in the namespace this runs in). Idempotent.
    AttachMarker { dev: String },
    /// Stop marking on DEV.
    DetachMarker { dev: String },
    /// Remove a socket's order (it falls back to the fallback CC).
    ClearRate {
        #[command(flatten)]
        netns: NetnsArg,
        src: SocketAddr,
        dst: SocketAddr,
    },
    /// Print per-socket stats and orders as JSON lines.
    Stats,
    /// Unregister the CC, detach cgroups, remove the pins.
    Unload,
    /// Measure map and per-ACK program costs; prints JSON.
    Bench {
        #[arg(long, default_value_t = 1000)]
        flows: u32,
        /// Seconds of traffic for the per-ACK run-time measurement (0 to skip).
        #[arg(long, default_value_t = 3)]
        traffic_secs: u64,
    },
}

/// Which network namespace the socket lives in; default: this command's own.
#[derive(clap::Args)]
struct NetnsArg {
    /// Namespace file of the socket, e.g. /run/netns/<name> or /proc/<pid>/ns/net.
    #[arg(long, conflicts_with = "netns_cookie")]
    netns: Option<PathBuf>,
    /// The namespace's cookie (SO_NETNS_COOKIE) if already known.
    #[arg(long)]
    netns_cookie: Option<u64>,
}

impl NetnsArg {
    fn cookie(&self) -> Result<u64, BoxError> {
        match self.netns_cookie {
            Some(c) => Ok(c),
            None => mlcc_bpf::netns_cookie(self.netns.as_deref()).map_err(|e| {
                let which = self
                    .netns
                    .as_ref()
                    .map_or("this namespace".into(), |p| p.display().to_string());
                format!("reading the cookie of {which}: {e}").into()
            }),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlcc-bpf: {e}");
            let mut src = e.source();
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

fn run(cli: Cli) -> Result<(), BoxError> {
    let dir = cli.pin_dir.as_path();
    match cli.cmd {
        Cmd::Load {
            name,
            cwnd_gain_pct,
            min_cwnd,
            rtt_floor_us,
            rto_floor_ms,
            fallback,
            max_sockets,
            cgroup,
        } => {
            let opts = LoadOptions {
                cc_name: name,
                pin_dir: dir.to_path_buf(),
                cwnd: CwndPolicy::new(
                    cwnd_gain_pct,
                    min_cwnd,
                    Duration::from_micros(rtt_floor_us),
                )?,
                rto_floor: RtoFloor::new(Duration::from_millis(rto_floor_ms))?,
                fallback,
                max_sockets,
            };
            let dp = KernelDatapath::load(&opts)?;
            for cg in &cgroup {
                if let Err(e) = dp.attach_cgroup(cg) {
                    let _ = dp.unload();
                    return Err(e.into());
                }
            }
            println!(
                "loaded congestion control {} pinned at {}",
                dp.cc_name(),
                dir.display()
            );
        }
        Cmd::AttachCgroup { cgroup } => KernelDatapath::open(dir)?.attach_cgroup(&cgroup)?,
        Cmd::DetachCgroup { cgroup } => KernelDatapath::open(dir)?.detach_cgroup(&cgroup)?,
        Cmd::SetRate {
            netns,
            src,
            dst,
            rate,
            ttl_ms,
            fill_dscp,
        } => {
            let expiry =
                ttl_ms.map_or(Expiry::Never, |ms| Expiry::After(Duration::from_millis(ms)));
            let key = SocketKey::new(netns.cookie()?, src, dst);
            KernelDatapath::open(dir)?.set_rates(&[RateOrder {
                key,
                rate,
                expiry,
                fill: fill_dscp,
            }])?;
        }
        Cmd::AttachMarker { dev } => KernelDatapath::open(dir)?.attach_marker(&dev)?,
        Cmd::DetachMarker { dev } => KernelDatapath::open(dir)?.detach_marker(&dev)?,
        Cmd::ClearRate { netns, src, dst } => {
            KernelDatapath::open(dir)?.clear_rates(&[SocketKey::new(netns.cookie()?, src, dst)])?;
        }
        Cmd::Stats => print_stats(dir)?,
        Cmd::Unload => unload_pinned(dir)?,
        Cmd::Bench {
            flows,
            traffic_secs,
        } => bench::run(flows, Duration::from_secs(traffic_secs))?,
    }
    Ok(())
}

fn print_stats(dir: &Path) -> Result<(), BoxError> {
    let dp = KernelDatapath::open(dir)?;
    for (key, stats) in dp.read_stats()? {
        println!("{}", serde_json::json!({ "socket": key, "stats": stats }));
    }
    for (key, bytes_per_sec) in dp.orders()? {
        println!(
            "{}",
            serde_json::json!({ "socket": key, "order_bytes_per_sec": bytes_per_sec })
        );
    }
    Ok(())
}
