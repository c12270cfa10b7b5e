//! mlccd configuration: a TOML file (`/etc/mlcc/mlccd.toml`) and flags of the same names; a flag
//! overrides the file, the file overrides the defaults (docs/design.md §16).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use mlcc_core::load_table::FeedbackMode;
use mlcc_core::slot::SlotConfig;
use mlcc_core::units::parse_duration;
use serde::Deserialize;

use mlcc_core::host::parse_link_headroom;
pub use mlcc_core::host::{Fill, MAX_FILL_CLASSES, PolicyConfig, RankRule};
pub use mlcc_daemon::tls::{TlsArgs, TlsFiles};
pub use mlcc_daemon::{ConfigError, LogFormat};

use crate::progress::ProgressPolicy;

pub const DEFAULT_PEER_LISTEN: &str = "0.0.0.0:50071";
pub const DEFAULT_METRICS_LISTEN: &str = "0.0.0.0:9471";
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/mlcc/mlccd.sock";
pub const DEFAULT_SHM_DIR: &str = "/dev/shm";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatapathKind {
    /// Plan and publish, enforce nothing (no BPF, or trying mlccd out). Said loudly at start and
    /// in the mlcc_degraded metric.
    #[default]
    DryRun,
    /// mlcc-bpf's kernel datapath: the pinned one under --bpf-pin-dir, loaded and pinned there
    /// first if absent (needs root: CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN).
    Bpf,
}

fn parse_mode(s: &str) -> Result<FeedbackMode, String> {
    s.parse()
}

fn parse_rank(s: &str) -> Result<RankRule, String> {
    s.parse()
}

fn parse_fill(s: &str) -> Result<Fill, String> {
    s.parse()
}

fn parse_fill_classes(s: &str) -> Result<u8, String> {
    s.parse::<u8>()
        .ok()
        .filter(|n| (1..=MAX_FILL_CLASSES).contains(n))
        .ok_or_else(|| format!("{s:?} is not a class count 1..={MAX_FILL_CLASSES}"))
}

fn parse_rule(s: &str) -> Result<(String, bool), String> {
    let (name, on) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected RULE=on or RULE=off"))?;
    let on = match on {
        "on" | "true" => true,
        "off" | "false" => false,
        _ => return Err(format!("{s:?}: expected RULE=on or RULE=off")),
    };
    Ok((name.to_string(), on))
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn parse_cc_name(s: &str) -> Result<mlcc_bpf::CcName, String> {
    mlcc_bpf::CcName::new(s).map_err(|e| e.to_string())
}

fn parse_fallback(s: &str) -> Result<mlcc_bpf::Fallback, String> {
    s.parse()
        .map_err(|e: mlcc_bpf::DatapathError| e.to_string())
}

fn parse_max_sockets(s: &str) -> Result<mlcc_bpf::MaxSockets, String> {
    s.parse()
        .map_err(|e: mlcc_bpf::DatapathError| e.to_string())
}

fn parse_order_expiry(s: &str) -> Result<u32, String> {
    match s.parse() {
        Ok(n @ 1..=MAX_ORDER_EXPIRY_SLOTS) => Ok(n),
        _ => Err(format!("{s:?}: from 1 to {MAX_ORDER_EXPIRY_SLOTS} slots")),
    }
}

/// The most slots a rate order may hold unrenewed: a stopped mlccd's flows are released
/// within this many (3 s at τ = 30 ms).
const MAX_ORDER_EXPIRY_SLOTS: u32 = 100;

fn parse_worker_threads(s: &str) -> Result<u16, String> {
    match s.parse() {
        Ok(n @ 1..=64) => Ok(n),
        _ => Err(format!("{s:?}: from 1 to 64")),
    }
}

/// `--rto-floor`: a duration up to 200 ms, or "kernel" (0 too) for the kernel's own.
fn parse_rto_floor(s: &str) -> Result<mlcc_bpf::RtoFloor, String> {
    let d = if s == "kernel" {
        Duration::ZERO
    } else {
        parse_dur(s)?
    };
    mlcc_bpf::RtoFloor::new(d).map_err(|e| e.to_string())
}

/// `--tcp-tso-rtt-log`: "keep" or 0..=31.
fn parse_tso(s: &str) -> Result<TsoRttLog, String> {
    match s {
        "keep" => Ok(TsoRttLog::Keep),
        n => n
            .parse::<u8>()
            .ok()
            .filter(|v| *v <= 31)
            .map(TsoRttLog::Set)
            .ok_or_else(|| format!("{s:?}: expected \"keep\" or 0..=31")),
    }
}

/// What mlccd does with `net.ipv4.tcp_tso_rtt_log` of its network namespace when it enforces
/// rates. Since Linux 5.18 the stack sizes TSO bursts up to 64 KB whatever the pacing rate
/// when the RTT is small (datacenter and testbed RTTs are), and internal pacing stamps the
/// *next* send len/rate into the future: one 64 KB burst sent under a low planned rate
/// (a flow's last bytes of an iteration, a held-back flow) then freezes the socket for
/// 64 KB / rate — 0.5 s at 1 Mbit/s — after the plan has long gone up, because no ACK
/// arrives to let the datapath apply the new rate. With 0 bursts follow the pacing rate
/// (about 1 ms of data, at least 2 segments), as before 5.18.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsoRttLog {
    Keep,
    Set(u8),
}

impl Default for TsoRttLog {
    fn default() -> Self {
        TsoRttLog::Set(0)
    }
}

impl<'de> Deserialize<'de> for TsoRttLog {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u8),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => parse_tso(&n.to_string()),
            Raw::S(s) => parse_tso(&s),
        }
        .map_err(serde::de::Error::custom)
    }
}

fn parse_peer(s: &str) -> Result<(String, SocketAddr), String> {
    let (h, a) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected HOST=ADDR, e.g. h2=10.0.0.2:50071"))?;
    Ok((h.to_string(), a.parse().map_err(|e| format!("{s:?}: {e}"))?))
}

/// Flags of `mlccd`. Each overrides the option of the same name (with `_` for `-`) in the file.
#[derive(Args, Debug, Default, Clone)]
pub struct DaemonArgs {
    /// TOML configuration file; see deploy/mlccd.example.toml.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This host's name in the topology.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Topology file (TOML): hosts with their IPs, switches with their emulator addresses,
    /// links. Reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Directory of the progress files [default: $MLCC_SHM_DIR or /dev/shm].
    #[arg(long, value_name = "DIR", env = "MLCC_SHM_DIR")]
    pub shm_dir: Option<PathBuf>,
    /// Address the Peer service listens on [default: 0.0.0.0:50071].
    #[arg(long, value_name = "ADDR")]
    pub peer_listen: Option<SocketAddr>,
    /// Port of the other hosts' mlccd Peer service; their address is their topology IP and this
    /// port [default: the port of --peer-listen].
    #[arg(long, value_name = "PORT")]
    pub peer_port: Option<u16>,
    /// A peer address that does not follow the rule above, HOST=ADDR (repeatable).
    #[arg(long = "peer", value_name = "HOST=ADDR", value_parser = parse_peer)]
    pub peers: Vec<(String, SocketAddr)>,
    /// Unix socket of the Admin service used by mlccctl (mode 0660)
    /// [default: /run/mlcc/mlccd.sock].
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,
    /// Address of the Prometheus endpoint http://ADDR/metrics [default: 0.0.0.0:9471].
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Slot length τ, e.g. "30ms" (10ms..=1s) [default: 30ms; the paper: 60ms]. Must match the
    /// switches'.
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub tau: Option<Duration>,
    /// Planning horizon K in slots (1..=64) [default: 10]. Must match the switches'.
    #[arg(long, value_name = "K")]
    pub horizon: Option<usize>,
    /// η: weight of the delay a plan imposes on others, against a flow's own completion
    /// [default: 0, the earliest slots fill first; the paper: 1].
    #[arg(long, value_name = "ETA")]
    pub eta: Option<f64>,
    /// Feedback mode for the local table: "all-others" or "precedence" [default: precedence].
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub feedback_mode: Option<FeedbackMode>,
    /// Deadline of every switch and peer call [default: τ/3].
    #[arg(long, value_name = "DURATION", value_parser = parse_dur)]
    pub rpc_deadline: Option<Duration>,
    /// Where rates go [default: dry-run].
    #[arg(long, value_enum)]
    pub datapath: Option<DatapathKind>,
    /// bpffs directory of the pinned BPF datapath [default: /sys/fs/bpf/mlcc].
    #[arg(long, value_name = "DIR")]
    pub bpf_pin_dir: Option<PathBuf>,
    /// Name the BPF congestion control registers under when mlccd loads the datapath (letters,
    /// digits, '_' and '.'; at most 15 bytes) [default: mlcc]. The kernel's CC names are global
    /// across network namespaces and containers: a second datapath on one machine needs its own.
    /// A pinned datapath keeps the name it was loaded with.
    #[arg(long, value_name = "NAME", value_parser = parse_cc_name)]
    pub bpf_cc_name: Option<mlcc_bpf::CcName>,
    /// net.ipv4.tcp_tso_rtt_log set in mlccd's network namespace with the BPF datapath, or
    /// "keep" [default: 0]. At the kernel's 9, small-RTT sockets send 64 KB bursts whatever
    /// their pacing rate, and one burst under a low rate stalls the socket for 64 KB / rate.
    #[arg(long, value_name = "N|keep", value_parser = parse_tso)]
    pub tcp_tso_rtt_log: Option<TsoRttLog>,
    /// Least retransmission timeout of sockets on the BPF datapath, e.g. "10ms", or "kernel"
    /// (200 ms) [default: 10ms]. Used when mlccd loads the datapath; a pinned one keeps the
    /// floor it was loaded with. Under random loss a lost retransmission otherwise stalls a
    /// collective for 200 ms.
    #[arg(long, value_name = "DURATION|kernel", value_parser = parse_rto_floor)]
    pub rto_floor: Option<mlcc_bpf::RtoFloor>,
    /// The kernel CC a socket on the BPF datapath runs while it has no rate order: before its
    /// first, when its job is not scheduled (no progress file and nothing learned yet), or when
    /// mlccd stops renewing orders. "cubic" (the kernel's default), "reno" or "bbr" (with
    /// nothing scheduled within 6 % of the kernel's bbr; the testbed's paper-small jobs with no
    /// progress file ran 7-10 % faster on it) [default: cubic]. Used when mlccd loads the
    /// datapath; a pinned one keeps the fallback it was loaded with.
    #[arg(long, value_name = "cubic|reno|bbr", value_parser = parse_fallback)]
    pub fallback: Option<mlcc_bpf::Fallback>,
    /// Sockets the BPF datapath keeps counters and orders for at once, 256 to 1048576 [default:
    /// 16384]. Each slot's read of the counters walks the whole map, so a larger one costs CPU;
    /// past it the least recently active sockets lose their counters and orders until their
    /// next ACK or slot. Used when mlccd loads the datapath; a pinned one keeps its size.
    #[arg(long, value_name = "N", value_parser = parse_max_sockets)]
    pub max_sockets: Option<mlcc_bpf::MaxSockets>,
    /// Remote port of the PS-Lite scheduler (DMLC_PS_ROOT_PORT); its connections are skipped,
    /// and so are the connections a process that has one accepted: PS-Lite's ZMQ van sends only
    /// over the connections it opened.
    #[arg(long, value_name = "PORT")]
    pub ps_scheduler_port: Option<u16>,
    /// Slots a rate order holds in the datapath unless renewed (1..=100) [default: 3]. A slot
    /// loop that falls behind by fewer keeps its flows on their last orders; past it, and
    /// within it once mlccd stops, the flows fall back to the kernel's CC.
    #[arg(long, value_name = "SLOTS", value_parser = parse_order_expiry)]
    pub order_expiry: Option<u32>,
    /// Rank rule that orders flows in precedence mode: job-bytes (smaller models first),
    /// attained-service (least bytes sent so far first), remaining-bytes (needs the job's
    /// iteration count; else attained-service), remaining-octaves (the same in whole octaves,
    /// first come first served within one; a job without an iteration count as though in its
    /// last iteration) or iteration-start (the paper's first come, first
    /// served) [default: remaining-octaves, docs/design.md §11a; job-size is accepted for
    /// job-bytes]. Every host must use the same.
    #[arg(long, value_name = "RULE", value_parser = parse_rank)]
    pub precedence: Option<RankRule>,
    /// What flows do with capacity their plans did not book [default: off]. off: nothing, one
    /// class; excess: each flow's plan in the network's default class and every byte beyond it
    /// in a fill class beneath it (DSCP 1 + class, which the switches must serve after the
    /// default class: deploy/README.md), marked as it leaves --fill-dev; unbooked: flows
    /// without a plan this slot send in a fill class, the rest as with off; scavenge: one
    /// class, flows pace into the capacity nobody booked. Every host must use the same.
    #[arg(long, value_name = "MODE", value_parser = parse_fill)]
    pub fill: Option<Fill>,
    /// Fill classes (1..=7) [default: 1]: with more, a flow's fill class is its rank's size
    /// class compressed onto them, so the switches serve leftovers shortest job first.
    #[arg(long, value_name = "N", value_parser = parse_fill_classes)]
    pub fill_classes: Option<u8>,
    /// Share of every link the plans leave unbooked, 0..=0.5 [default: 0.003, the rate floors'
    /// room; --rule headroom=off: 0]. More leaves room to traffic mlcc does not schedule while
    /// training flows hold data, at their cost. Wins over --rule headroom. Every host should run
    /// the same.
    #[arg(long, value_name = "SHARE", value_parser = parse_link_headroom)]
    pub link_headroom: Option<f64>,
    /// Device (repeatable) on whose egress fill bytes are marked, with the BPF datapath
    /// [default: the device holding this host's address in the topology].
    #[arg(long = "fill-dev", value_name = "DEV")]
    pub fill_devs: Vec<String>,
    /// Learn the iterations of processes on the CC that have no progress file from their
    /// sockets' bytes, and schedule those learned with confidence (on|off) [default: on]:
    /// docs/design.md §9. A progress file, when one appears, wins.
    #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
    pub learn: Option<bool>,
    /// Read how many iterations a learned process's job runs from its environment
    /// (`MLCC_TOTAL_ITERATIONS`, as the job's launcher sets it; nothing else of the environment
    /// is kept), so the rank orders it by the bytes it has left as it would a job with a
    /// progress file (on|off) [default: on].
    #[arg(long, value_name = "on|off", value_parser = clap::builder::BoolishValueParser::new())]
    pub learn_environ: Option<bool>,
    /// Starting point of the per-host policy: mlccd (every rule on; the default) or paper
    /// (the paper as published: Alg. 1 and Alg. 2 alone, all-others feedback, iteration-start
    /// rank; give every mlcc-switchd feedback_mode = "all-others" too, or --feedback-mode
    /// precedence here). --feedback-mode, --precedence, --eta and --rule apply on top.
    #[arg(long, value_name = "PRESET")]
    pub policy: Option<String>,
    /// Switches one rule of the per-host policy, RULE=on|off (repeatable): idle, quiet-idle,
    /// library-waits, holder, delivery-samples, split-uplink, pace-free, standby, flush-tail,
    /// rate-floor (off, the datapath still clamps every order at 100 kbit/s: a lower rate
    /// freezes Linux pacing), headroom, committed-now, project-upstream, last-slot-first,
    /// handover, warm-resume, warm-held. docs/design.md §11a says what each does. Every host
    /// should run the same.
    #[arg(long = "rule", value_name = "RULE=on|off", value_parser = parse_rule)]
    pub rules: Vec<(String, bool)>,
    /// Log format [default: human]. The level comes from RUST_LOG (default "info").
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Tokio worker threads [default: 1]. One runs the slot loop and every server on the main
    /// thread: a slot's work is a few hundred microseconds, and a second worker only added
    /// cross-thread wake-ups (14-17 % of mlccd's CPU at 32 flows).
    #[arg(long, value_name = "N", value_parser = parse_worker_threads)]
    pub worker_threads: Option<u16>,
    /// Group (name or gid) given the admin socket: its members may run mlccctl [default: the
    /// daemon's own group, i.e. root only].
    #[arg(long, value_name = "GROUP")]
    pub admin_group: Option<String>,
    /// Fault rehearsal only: runs this daemon's clock MS milliseconds ahead (negative: behind)
    /// of the host's, as if its clock were skewed [default: 0]. Flag only, never read from the
    /// config file, so it cannot outlive the test that set it.
    #[arg(long, value_name = "MS", allow_hyphen_values = true)]
    pub clock_offset_ms: Option<i64>,
    /// Accept progress files only from this uid (repeatable) [default: any uid]. Always: a file
    /// must be writable by its owner only, and owned by root or by the user running the process
    /// it names.
    #[arg(long = "progress-uid", value_name = "UID")]
    pub progress_uids: Vec<u32>,
    /// mTLS (deploy/SECURITY.md): with all three set, the Peer service requires client
    /// certificates signed by --tls-ca, and calls to switches and peers use TLS with this
    /// certificate.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The file form; every field optional so that flags can fill in.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<String>,
    topology: Option<PathBuf>,
    shm_dir: Option<PathBuf>,
    peer_listen: Option<SocketAddr>,
    peer_port: Option<u16>,
    #[serde(default)]
    peers: BTreeMap<String, SocketAddr>,
    admin_socket: Option<PathBuf>,
    metrics_listen: Option<SocketAddr>,
    tau: Option<String>,
    horizon: Option<usize>,
    eta: Option<f64>,
    feedback_mode: Option<String>,
    rpc_deadline: Option<String>,
    datapath: Option<DatapathKind>,
    bpf_pin_dir: Option<PathBuf>,
    bpf_cc_name: Option<String>,
    tcp_tso_rtt_log: Option<TsoRttLog>,
    rto_floor: Option<String>,
    fallback: Option<String>,
    max_sockets: Option<u32>,
    ps_scheduler_port: Option<u16>,
    order_expiry: Option<u32>,
    precedence: Option<RankRule>,
    fill: Option<String>,
    fill_classes: Option<u8>,
    link_headroom: Option<f64>,
    #[serde(default)]
    fill_devs: Vec<String>,
    learn: Option<bool>,
    learn_environ: Option<bool>,
    policy: Option<String>,
    #[serde(default)]
    rules: BTreeMap<String, bool>,
    log_format: Option<LogFormat>,
    worker_threads: Option<u16>,
    admin_group: Option<String>,
    #[serde(default)]
    progress_uids: Vec<u32>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub host: String,
    pub topology: PathBuf,
    pub shm_dir: PathBuf,
    pub peer_listen: SocketAddr,
    pub peer_port: u16,
    pub peers: BTreeMap<String, SocketAddr>,
    pub admin_socket: PathBuf,
    pub metrics_listen: SocketAddr,
    /// The per-host policy: core's defaults, with τ, K, η, the feedback mode and the rank rule
    /// from flags or the file.
    pub policy: PolicyConfig,
    pub rpc_deadline: Duration,
    pub datapath: DatapathKind,
    pub bpf_pin_dir: PathBuf,
    pub bpf_cc_name: mlcc_bpf::CcName,
    pub tcp_tso_rtt_log: TsoRttLog,
    pub rto_floor: mlcc_bpf::RtoFloor,
    pub fallback: mlcc_bpf::Fallback,
    pub max_sockets: mlcc_bpf::MaxSockets,
    pub ps_scheduler_port: Option<u16>,
    /// Slots a rate order holds in the datapath unless renewed.
    pub order_expiry_slots: u32,
    pub log_format: LogFormat,
    /// Tokio worker threads; 1: a current-thread runtime.
    pub worker_threads: u16,
    /// Group of the admin socket (name or gid); `None`: the daemon's group.
    pub admin_group: Option<String>,
    /// Added to the daemon's clock (`--clock-offset-ms`, fault rehearsal).
    pub clock_offset_ns: i64,
    /// Which progress files are believed.
    pub progress: ProgressPolicy,
    /// Devices on whose egress fill bytes are marked (empty: the one holding this host's
    /// topology address).
    pub fill_devs: Vec<String>,
    /// Learn the iterations of processes with no progress file.
    pub learn: bool,
    /// Read a learned process's total iterations from its environment.
    pub learn_environ: bool,
    /// mTLS files; `None`: plaintext.
    pub tls: Option<TlsFiles>,
}

fn addr(s: &str) -> SocketAddr {
    // The defaults are literals that parse.
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

impl Config {
    /// What the per-host shell runs with: this host, the resolved policy, the PS-Lite
    /// scheduler's port.
    pub fn host_config(&self) -> crate::host::HostConfig {
        crate::host::HostConfig {
            policy: self.policy,
            ps_scheduler_port: self.ps_scheduler_port,
            order_expiry_slots: self.order_expiry_slots,
            ..crate::host::HostConfig::new(self.host.clone(), self.policy.slots)
        }
    }
}

/// The file's values that need parsing beyond TOML's types.
struct FileValues {
    tau: Option<Duration>,
    rpc_deadline: Option<Duration>,
    rto_floor: Option<mlcc_bpf::RtoFloor>,
    fallback: Option<mlcc_bpf::Fallback>,
    max_sockets: Option<mlcc_bpf::MaxSockets>,
    worker_threads: Option<u16>,
    order_expiry: Option<u32>,
    cc_name: Option<mlcc_bpf::CcName>,
    mode: Option<FeedbackMode>,
    fill: Option<Fill>,
    fill_classes: Option<u8>,
    link_headroom: Option<f64>,
}

fn invalid(key: &str, e: String) -> ConfigError {
    ConfigError::Invalid(format!("{key}: {e}"))
}

/// `value` parsed with `parse`, an error naming `key` where it does not parse.
fn parsed<T>(
    key: &str,
    value: Option<&str>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    value.map(parse).transpose().map_err(|e| invalid(key, e))
}

impl FileValues {
    fn of(file: &FileConfig) -> Result<Self, ConfigError> {
        Ok(FileValues {
            tau: parsed("tau", file.tau.as_deref(), parse_dur)?,
            rpc_deadline: parsed("rpc_deadline", file.rpc_deadline.as_deref(), parse_dur)?,
            rto_floor: parsed("rto_floor", file.rto_floor.as_deref(), parse_rto_floor)?,
            fallback: parsed("fallback", file.fallback.as_deref(), parse_fallback)?,
            max_sockets: parsed(
                "max_sockets",
                file.max_sockets.map(|n| n.to_string()).as_deref(),
                parse_max_sockets,
            )?,
            worker_threads: parsed(
                "worker_threads",
                file.worker_threads.map(|n| n.to_string()).as_deref(),
                parse_worker_threads,
            )?,
            order_expiry: parsed(
                "order_expiry",
                file.order_expiry.map(|n| n.to_string()).as_deref(),
                parse_order_expiry,
            )?,
            cc_name: parsed("bpf_cc_name", file.bpf_cc_name.as_deref(), parse_cc_name)?,
            mode: parsed("feedback_mode", file.feedback_mode.as_deref(), parse_mode)?,
            fill: parsed("fill", file.fill.as_deref(), parse_fill)?,
            fill_classes: parsed(
                "fill_classes",
                file.fill_classes.map(|n| n.to_string()).as_deref(),
                parse_fill_classes,
            )?,
            link_headroom: parsed(
                "link_headroom",
                file.link_headroom.map(|h| h.to_string()).as_deref(),
                parse_link_headroom,
            )?,
        })
    }
}

impl DaemonArgs {
    /// Merges flags over the file (if any) over the defaults, and validates the result.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(p) => mlcc_daemon::read_toml(p)?,
            None => FileConfig::default(),
        };
        let values = FileValues::of(&file)?;
        let slots = self.slots(&file, &values)?;
        let policy = self.policy(&file, &values, slots)?;
        let rpc_deadline = self.rpc_deadline(&values, slots.tau())?;
        let peer_listen = self
            .peer_listen
            .or(file.peer_listen)
            .unwrap_or_else(|| addr(DEFAULT_PEER_LISTEN));
        let mut peers = file.peers.clone();
        peers.extend(self.peers.iter().cloned());
        Ok(Config {
            host: self
                .host
                .clone()
                .or(file.host)
                .ok_or(ConfigError::Missing {
                    what: "host name",
                    key: "host",
                    flag: "host",
                })?,
            topology: self
                .topology
                .clone()
                .or(file.topology)
                .ok_or(ConfigError::Missing {
                    what: "topology file",
                    key: "topology",
                    flag: "topology",
                })?,
            shm_dir: self
                .shm_dir
                .clone()
                .or(file.shm_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_SHM_DIR)),
            peer_port: self
                .peer_port
                .or(file.peer_port)
                .unwrap_or(peer_listen.port()),
            peer_listen,
            peers,
            admin_socket: self
                .admin_socket
                .clone()
                .or(file.admin_socket)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET)),
            metrics_listen: self
                .metrics_listen
                .or(file.metrics_listen)
                .unwrap_or_else(|| addr(DEFAULT_METRICS_LISTEN)),
            policy,
            rpc_deadline,
            datapath: self.datapath.or(file.datapath).unwrap_or_default(),
            bpf_pin_dir: self
                .bpf_pin_dir
                .clone()
                .or(file.bpf_pin_dir)
                .unwrap_or_else(|| PathBuf::from(mlcc_bpf::DEFAULT_PIN_DIR)),
            bpf_cc_name: self
                .bpf_cc_name
                .clone()
                .or(values.cc_name)
                .unwrap_or_default(),
            tcp_tso_rtt_log: self
                .tcp_tso_rtt_log
                .or(file.tcp_tso_rtt_log)
                .unwrap_or_default(),
            rto_floor: self.rto_floor.or(values.rto_floor).unwrap_or_default(),
            fallback: self.fallback.or(values.fallback).unwrap_or_default(),
            max_sockets: self.max_sockets.or(values.max_sockets).unwrap_or_default(),
            ps_scheduler_port: self.ps_scheduler_port.or(file.ps_scheduler_port),
            order_expiry_slots: self
                .order_expiry
                .or(values.order_expiry)
                .unwrap_or(crate::host::ORDER_EXPIRY_SLOTS),
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
            worker_threads: self.worker_threads.or(values.worker_threads).unwrap_or(1),
            admin_group: self.admin_group.clone().or(file.admin_group),
            clock_offset_ns: self.clock_offset_ms.unwrap_or(0).saturating_mul(1_000_000),
            progress: ProgressPolicy {
                // Flags replace the file's list rather than extend it, like every other option.
                allowed_uids: if self.progress_uids.is_empty() {
                    file.progress_uids
                } else {
                    self.progress_uids.clone()
                },
                trust_any_writer: false,
            },
            fill_devs: if self.fill_devs.is_empty() {
                file.fill_devs
            } else {
                self.fill_devs.clone()
            },
            learn: self.learn.or(file.learn).unwrap_or(true),
            learn_environ: self.learn_environ.or(file.learn_environ).unwrap_or(true),
            tls: self.tls.resolve(&TlsArgs {
                tls_cert: file.tls_cert,
                tls_key: file.tls_key,
                tls_ca: file.tls_ca,
            })?,
        })
    }

    /// τ and K: flag, file, or mlccd's default.
    fn slots(&self, file: &FileConfig, values: &FileValues) -> Result<SlotConfig, ConfigError> {
        let tau = self.tau.or(values.tau).unwrap_or(SlotConfig::mlccd().tau());
        let horizon = self
            .horizon
            .or(file.horizon)
            .unwrap_or(SlotConfig::mlccd().horizon());
        SlotConfig::new(tau, horizon).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// The per-host policy: its preset, the file's rules then the flags' (a flag wins over the
    /// file for the same rule), then η, the feedback mode and the rank rule.
    fn policy(
        &self,
        file: &FileConfig,
        values: &FileValues,
        slots: SlotConfig,
    ) -> Result<PolicyConfig, ConfigError> {
        let preset = self
            .policy
            .clone()
            .or(file.policy.clone())
            .unwrap_or_else(|| "mlccd".into());
        let mut defaults = PolicyConfig::preset(&preset, slots).ok_or_else(|| {
            let presets = PolicyConfig::PRESETS.join(", ");
            invalid(
                "policy",
                format!("unknown preset {preset:?} (one of: {presets})"),
            )
        })?;
        let file_rules = file.rules.iter().map(|(n, o)| (n.as_str(), *o));
        for (name, on) in file_rules.chain(self.rules.iter().map(|(n, o)| (n.as_str(), *o))) {
            defaults = defaults.with_rule(name, on).ok_or_else(|| {
                let rules = PolicyConfig::RULES.join(", ");
                invalid("rule", format!("unknown rule {name:?} (one of: {rules})"))
            })?;
        }
        let eta = self.eta.or(file.eta).unwrap_or(defaults.eta);
        if !eta.is_finite() || eta < 0.0 {
            return Err(invalid("eta", format!("{eta} must be finite and >= 0")));
        }
        Ok(PolicyConfig {
            eta,
            mode: self.feedback_mode.or(values.mode).unwrap_or(defaults.mode),
            rank: self.precedence.or(file.precedence).unwrap_or(defaults.rank),
            fill: self.fill.or(values.fill).unwrap_or(defaults.fill),
            fill_classes: self
                .fill_classes
                .or(values.fill_classes)
                .unwrap_or(defaults.fill_classes),
            link_headroom: self
                .link_headroom
                .or(values.link_headroom)
                .unwrap_or(defaults.link_headroom),
            ..defaults
        })
    }

    /// The deadline of every call to a switch or a peer: a third of τ by default, always
    /// within the slot.
    fn rpc_deadline(&self, values: &FileValues, tau: Duration) -> Result<Duration, ConfigError> {
        let d = self.rpc_deadline.or(values.rpc_deadline).unwrap_or(tau / 3);
        if d.is_zero() || d >= tau {
            return Err(invalid(
                "rpc_deadline",
                format!("{d:?} must be above 0 and below τ = {tau:?}"),
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_defaults_follow_tau() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mlccd.toml");
        std::fs::write(
            &p,
            "host = \"h1\"\ntopology = \"t.toml\"\ntau = \"30ms\"\npeer_listen = \"127.0.0.1:7000\"\n[peers]\nh2 = \"127.0.0.1:7001\"\n",
        )
        .unwrap();
        let args = DaemonArgs {
            config: Some(p),
            host: Some("h9".into()),
            peers: vec![("h3".into(), "127.0.0.1:7003".parse().unwrap())],
            ..Default::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.host, "h9");
        assert_eq!(c.rpc_deadline, Duration::from_millis(10));
        assert_eq!(c.peer_port, 7000);
        assert_eq!(c.peers.len(), 2);
        assert_eq!(c.datapath, DatapathKind::DryRun);
    }

    /// The config `file` (after a host and topology) resolved with the flags `args` sets.
    fn resolved_with(file: &str, args: DaemonArgs) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mlccd.toml");
        std::fs::write(&p, format!("host = \"h1\"\ntopology = \"t.toml\"\n{file}")).unwrap();
        DaemonArgs {
            config: Some(p),
            ..args
        }
        .resolve()
        .unwrap()
    }

    /// A switch that is on unless the config file's `key = false` or its flag (set on the
    /// args by `flag`) turns it off, the flag winning; `get` reads it from the config.
    fn assert_on_unless_turned_off(
        key: &str,
        flag: fn(Option<bool>) -> DaemonArgs,
        get: fn(&Config) -> bool,
    ) {
        let off = format!("{key} = false\n");
        let resolved = |file: &str, set: Option<bool>| get(&resolved_with(file, flag(set)));
        assert!(resolved("", None), "{key}");
        assert!(!resolved(&off, None), "{key}");
        assert!(resolved(&off, Some(true)), "{key}");
        assert!(!resolved("", Some(false)), "{key}");
    }

    #[test]
    fn learning_is_on_unless_the_file_or_a_flag_turns_it_off() {
        assert_on_unless_turned_off(
            "learn",
            |learn| DaemonArgs {
                learn,
                ..Default::default()
            },
            |c| c.learn,
        );
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: DaemonArgs,
        }
        use clap::Parser;
        assert!(Cli::try_parse_from(["mlccd", "--learn", "maybe"]).is_err());
        let off = Cli::try_parse_from(["mlccd", "--learn", "off"]).unwrap();
        assert_eq!(off.a.learn, Some(false));
        let env = Cli::try_parse_from(["mlccd", "--learn-environ", "off"]).unwrap();
        assert_eq!(env.a.learn_environ, Some(false));
    }

    #[test]
    fn the_environment_is_read_unless_the_file_or_a_flag_says_not() {
        assert_on_unless_turned_off(
            "learn_environ",
            |learn_environ| DaemonArgs {
                learn_environ,
                ..Default::default()
            },
            |c| c.learn_environ,
        );
    }

    #[test]
    fn the_policy_is_a_preset_with_rules_from_the_file_and_then_the_flags() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mlccd.toml");
        std::fs::write(
            &p,
            "host = \"h1\"\ntopology = \"t.toml\"\npolicy = \"paper\"\n[rules]\ncommitted-now = true\nidle = true\n",
        )
        .unwrap();
        let args = |rules: Vec<(String, bool)>| DaemonArgs {
            config: Some(p.clone()),
            rules,
            ..Default::default()
        };
        let c = args(vec![("idle".into(), false)]).resolve().unwrap();
        let paper = PolicyConfig::paper(c.policy.slots, FeedbackMode::AllOthers);
        assert_eq!(
            c.policy,
            PolicyConfig {
                committed_now: true,
                ..paper
            }
        );
        let c = args(vec![]).resolve().unwrap();
        assert!(c.policy.idle_books_nothing && c.policy.committed_now);
        // Without a preset or rules: mlccd's defaults, which are core's.
        let c = DaemonArgs {
            host: Some("h1".into()),
            topology: Some("t".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(c.policy, PolicyConfig::new(c.policy.slots));
        let e = args(vec![("fast".into(), true)])
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown rule \"fast\"") && e.contains("split-uplink"),
            "{e}"
        );
        let e = DaemonArgs {
            policy: Some("best".into()),
            ..args(vec![])
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown preset") && e.contains("paper"), "{e}");
        assert!(parse_rule("idle=maybe").is_err() && parse_rule("idle").is_err());
        assert_eq!(parse_rule("pace-free=off"), Ok(("pace-free".into(), false)));
    }

    #[test]
    fn errors_say_what_to_fix() {
        let e = DaemonArgs::default().resolve().unwrap_err().to_string();
        assert!(e.contains("--host"), "{e}");
        let args = DaemonArgs {
            host: Some("h".into()),
            topology: Some("t".into()),
            rpc_deadline: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        assert!(
            args.resolve()
                .unwrap_err()
                .to_string()
                .contains("rpc_deadline")
        );
        assert!(parse_peer("h2").unwrap_err().contains("HOST=ADDR"));
    }

    const MINIMAL: &str = "host = \"h1\"\ntopology = \"t.toml\"\n";

    /// A config file holding only the required keys, and arguments that read it.
    fn minimal_config() -> (tempfile::TempDir, std::path::PathBuf, DaemonArgs) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mlccd.toml");
        rewrite(&p, "");
        let args = DaemonArgs {
            config: Some(p.clone()),
            ..Default::default()
        };
        (dir, p, args)
    }

    /// Rewrites the config file at `p` as the required keys followed by `extra`.
    fn rewrite(p: &std::path::Path, extra: &str) {
        std::fs::write(p, format!("{MINIMAL}{extra}")).unwrap();
    }

    #[test]
    fn rto_floor_defaults_to_10ms_and_takes_kernel_or_a_duration_from_file_or_flag() {
        let (_dir, p, args) = minimal_config();
        let floor = |c: &DaemonArgs| c.resolve().unwrap().rto_floor.get();
        assert_eq!(floor(&args), Some(Duration::from_millis(10)));
        rewrite(&p, "rto_floor = \"kernel\"\n");
        assert_eq!(floor(&args), None);
        rewrite(&p, "rto_floor = \"1s\"\n");
        let e = args.resolve().unwrap_err().to_string();
        assert!(e.contains("rto_floor") && e.contains("200 ms"), "{e}");
        rewrite(&p, "rto_floor = \"kernel\"\n");
        let flag = DaemonArgs {
            rto_floor: Some(parse_rto_floor("20ms").unwrap()),
            ..args
        };
        assert_eq!(floor(&flag), Some(Duration::from_millis(20)));
        assert!(parse_rto_floor("soon").is_err());
    }

    #[test]
    fn fallback_defaults_to_cubic_and_takes_reno_or_bbr_from_file_or_flag() {
        use mlcc_bpf::Fallback;
        let (_dir, p, args) = minimal_config();
        let fallback = |c: &DaemonArgs| c.resolve().unwrap().fallback;
        assert_eq!(fallback(&args), Fallback::Cubic);
        rewrite(&p, "fallback = \"reno\"\n");
        assert_eq!(fallback(&args), Fallback::Reno);
        rewrite(&p, "fallback = \"bbr\"\n");
        assert_eq!(fallback(&args), Fallback::Bbr);
        rewrite(&p, "fallback = \"vegas\"\n");
        let e = args.resolve().unwrap_err().to_string();
        assert!(
            e.contains("fallback") && e.contains("cubic, reno or bbr"),
            "{e}"
        );
        rewrite(&p, "fallback = \"reno\"\n");
        let flag = DaemonArgs {
            fallback: Some(Fallback::Cubic),
            ..args
        };
        assert_eq!(fallback(&flag), Fallback::Cubic);
    }

    #[test]
    fn max_sockets_defaults_to_16384_and_refuses_sizes_out_of_range() {
        let (_dir, p, args) = minimal_config();
        let size = |c: &DaemonArgs| c.resolve().unwrap().max_sockets.get();
        assert_eq!(size(&args), 16384);
        rewrite(&p, "max_sockets = 4096\n");
        assert_eq!(size(&args), 4096);
        for bad in ["max_sockets = 10\n", "max_sockets = 4000000000\n"] {
            rewrite(&p, bad);
            let e = args.resolve().unwrap_err().to_string();
            assert!(e.contains("max_sockets") && e.contains("256"), "{e}");
        }
        rewrite(&p, "max_sockets = 4096\n");
        let flag = DaemonArgs {
            max_sockets: Some(mlcc_bpf::MaxSockets::new(1024).unwrap()),
            ..args
        };
        assert_eq!(size(&flag), 1024);
    }

    #[test]
    fn rate_orders_hold_three_slots_unless_told_otherwise() {
        let (_dir, p, args) = minimal_config();
        let slots = |c: &DaemonArgs| c.resolve().unwrap().host_config().order_expiry_slots;
        assert_eq!(slots(&args), 3);
        rewrite(&p, "order_expiry = 10\n");
        assert_eq!(slots(&args), 10);
        for bad in ["order_expiry = 0\n", "order_expiry = 101\n"] {
            rewrite(&p, bad);
            let e = args.resolve().unwrap_err().to_string();
            assert!(e.contains("order_expiry") && e.contains("1 to 100"), "{e}");
        }
        rewrite(&p, "order_expiry = 10\n");
        let flag = DaemonArgs {
            order_expiry: Some(20),
            ..args
        };
        assert_eq!(slots(&flag), 20);
    }

    #[test]
    fn the_link_headroom_is_the_rate_floors_room_unless_told_otherwise() {
        let (_dir, p, args) = minimal_config();
        let headroom = |c: &DaemonArgs| c.resolve().unwrap().policy.link_headroom;
        assert_eq!(headroom(&args), mlcc_core::host::LINK_HEADROOM_SHARE);
        rewrite(&p, "link_headroom = 0.1\n");
        assert_eq!(headroom(&args), 0.1);
        for bad in ["link_headroom = -0.1\n", "link_headroom = 0.9\n"] {
            rewrite(&p, bad);
            let e = args.resolve().unwrap_err().to_string();
            assert!(
                e.contains("link_headroom") && e.contains("share of a link"),
                "{e}"
            );
        }
        rewrite(&p, "link_headroom = 0.1\nrules = { headroom = false }\n");
        assert_eq!(headroom(&args), 0.1, "the value wins over the rule");
        let flag = DaemonArgs {
            link_headroom: Some(0.2),
            ..args
        };
        assert_eq!(headroom(&flag), 0.2);
    }

    #[test]
    fn one_worker_thread_unless_told_otherwise() {
        let (_dir, p, args) = minimal_config();
        let threads = |c: &DaemonArgs| c.resolve().unwrap().worker_threads;
        assert_eq!(threads(&args), 1);
        rewrite(&p, "worker_threads = 2\n");
        assert_eq!(threads(&args), 2);
        rewrite(&p, "worker_threads = 0\n");
        let e = args.resolve().unwrap_err().to_string();
        assert!(e.contains("worker_threads") && e.contains("1 to 64"), "{e}");
        rewrite(&p, "worker_threads = 2\n");
        let flag = DaemonArgs {
            worker_threads: Some(4),
            ..args
        };
        assert_eq!(threads(&flag), 4);
    }

    #[test]
    fn cc_name_defaults_to_mlcc_and_refuses_what_the_kernel_would() {
        let (_dir, p, args) = minimal_config();
        let name = |c: &DaemonArgs| c.resolve().unwrap().bpf_cc_name.to_string();
        assert_eq!(name(&args), "mlcc");
        rewrite(&p, "bpf_cc_name = \"mlcc_ci.1\"\n");
        assert_eq!(name(&args), "mlcc_ci.1");
        rewrite(&p, "bpf_cc_name = \"mlcc-ci\"\n");
        let e = args.resolve().unwrap_err().to_string();
        assert!(e.contains("bpf_cc_name") && e.contains("'.'"), "{e}");
        rewrite(&p, "bpf_cc_name = \"mlcc_ci.1\"\n");
        let flag = DaemonArgs {
            bpf_cc_name: Some(parse_cc_name("other").unwrap()),
            ..args
        };
        assert_eq!(name(&flag), "other");
        assert!(parse_cc_name("0123456789abcdef").is_err());
    }

    #[test]
    fn tso_rtt_log_defaults_to_zero_and_takes_keep_from_file_or_flag() {
        let (_dir, p, args) = minimal_config();
        assert_eq!(args.resolve().unwrap().tcp_tso_rtt_log, TsoRttLog::Set(0));
        rewrite(&p, "tcp_tso_rtt_log = \"keep\"\n");
        assert_eq!(args.resolve().unwrap().tcp_tso_rtt_log, TsoRttLog::Keep);
        rewrite(&p, "tcp_tso_rtt_log = 3\n");
        assert_eq!(args.resolve().unwrap().tcp_tso_rtt_log, TsoRttLog::Set(3));
        rewrite(&p, "tcp_tso_rtt_log = 40\n");
        assert!(args.resolve().unwrap_err().to_string().contains("0..=31"));
        rewrite(&p, "tcp_tso_rtt_log = 3\n");
        let flag = DaemonArgs {
            tcp_tso_rtt_log: Some(parse_tso("keep").unwrap()),
            ..args
        };
        assert_eq!(flag.resolve().unwrap().tcp_tso_rtt_log, TsoRttLog::Keep);
        assert!(parse_tso("-1").unwrap_err().contains("keep"));
    }
}
