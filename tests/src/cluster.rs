//! One run of a scenario under one congestion control: the namespaces, the daemons (for mlcc),
//! the jobs at their arrival times, cross traffic, bandwidth samples; everything removed on
//! drop, also when the run fails or is interrupted.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mlcc_bpf::testbed::Cgroup;
use mlcc_core::job::Arch;
use rustix::process::{Pid, Signal};
use serde::Serialize;

use crate::cpu_load::CpuLoad;
use crate::learned::{self, JobLearning, MemberTruth};
use crate::net::{self, NetPlan, PREFIX};
use crate::scenario::{Fault, FaultKind, JobKind, JobSpec, Scenario};
use crate::torch::{IterationPhases, TorchRun, TorchRuntime};
use crate::trainer::{TrainerReport, unix_now};

/// Set by SIGINT/SIGTERM; every wait loop checks it.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe. Raw because
    // rustix installs no signal handlers.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("needs root (network namespaces, tc, BPF); run it with sudo")]
    NotRoot,
    #[error(
        "objects of another testbed run exist ({0}); remove them with `mlcc-testbed down` if that run is gone"
    )]
    OtherRun(String),
    #[error("{0}")]
    Setup(String),
    #[error("interrupted")]
    Interrupted,
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// The programs a run starts; by default the ones built next to this binary.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub trainer: PathBuf,
    pub mlccd: PathBuf,
    pub switchd: PathBuf,
    /// MLTCP's ratio feeder (mlcc-scheduler's `mltcp-feeder`).
    pub mltcp_feeder: PathBuf,
    /// What runs `torch-ddp` jobs (checked only when a scenario has one).
    pub torch: TorchRuntime,
    /// The CPU priority (nice, -20..=19) the daemons run at: mlccd, mlcc-switchd,
    /// `mltcp-feeder` ([`DAEMON_NICE`] unless told otherwise).
    pub daemon_nice: i32,
}

/// The nice value the daemons run at: above the jobs', as on a host where the scheduler has
/// the CPU when its slot begins. The testbed emulates a cluster on two cores, and at the
/// jobs' nice mlccd's slot loop missed 22–44 % of `paper-small`'s slots, a quarter of its
/// switch calls timing out at twice their deadline; at -10, 7–8 %
/// (docs/notes/2026-12-07-slot-loop-under-load.md). The kernel CCs run no daemon: their runs
/// are the same either way.
pub const DAEMON_NICE: i32 = -10;

impl Binaries {
    pub fn in_dir(dir: &Path) -> Result<Self, RunError> {
        let b = Binaries {
            trainer: dir.join("mlcc-trainer"),
            mlccd: dir.join("mlccd"),
            switchd: dir.join("mlcc-switchd"),
            mltcp_feeder: dir.join("mltcp-feeder"),
            torch: TorchRuntime::locate(),
            daemon_nice: DAEMON_NICE,
        };
        for p in [&b.trainer, &b.mlccd, &b.switchd, &b.mltcp_feeder] {
            if !p.exists() {
                return Err(RunError::Setup(format!(
                    "{} not found: build with `cargo build --release -p mlcc-testbed -p mlcc-scheduler -p mlcc-switch-emu` (or pass --bin-dir)",
                    p.display()
                )));
            }
        }
        Ok(b)
    }

    pub fn next_to_me() -> Result<Self, RunError> {
        let me = std::env::current_exe().map_err(io_err("locating this binary"))?;
        Self::in_dir(me.parent().unwrap_or(Path::new(".")))
    }
}

/// A congestion control under test: a kernel one, mlcc (daemons + the BPF datapath), or MLTCP
/// (its BPF CC + one ratio feeder per host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cc {
    /// `cc`, the kernel's, as `name` says: `cubic`, or `cubic/rto_floor=10ms` for the same RTO
    /// floor mlcc's datapath sets (`net.ipv4.tcp_rto_min_us` in every host), so a figure can
    /// show what the floor alone is worth; `bbr/cpu_load=0.6` burns that many cores' worth of
    /// CPU at the daemons' priority while the jobs run ([`CpuLoad`]), the burden mlcc's daemons
    /// put on the cores a kernel CC's run otherwise has to itself.
    Kernel {
        name: String,
        cc: String,
        rto_floor: Option<Duration>,
        cpu_load: Option<CpuLoad>,
        /// Cassini: each job's start held back by the simulator's Cassini shift for this
        /// scenario ([`crate::cassini`]), `cc` underneath. Named `cassini` (over cubic) or
        /// `cassini/<kernel CC>`.
        cassini: bool,
    },
    /// mlcc (switch emulators, one mlccd per host, the BPF datapath). `name` is what the user
    /// wrote: `mlcc`, or `mlcc/key=value/...` with mlccd options in mlcc-sim's variant syntax
    /// (`eta`, `rank`, `mode`, `policy`, and any rule `NAME=on|off`), so one sitting can compare
    /// policies on real TCP; `args` are those options as mlccd flags. `rto_floor=DURATION` (or
    /// `kernel`) sets the datapath's RTO floor instead, `fallback=reno|cubic|bbr` the kernel CC its
    /// sockets run without an order; `tau=DURATION` and `horizon=K` the
    /// slots of mlccd and the switch emulators instead of the scenario's. `progress=off`
    /// starts the jobs without progress files (their sockets still on the CC), so mlccd
    /// schedules what it learns from their bytes alone; `learn=off` turns mlccd's learner off.
    /// `progress=told` is `progress=off` with each trainer's environment saying how many
    /// iterations its job runs (`MLCC_TOTAL_ITERATIONS`, as a launcher would set it), which
    /// mlccd reads.
    Mlcc {
        name: String,
        args: Vec<String>,
        rto_floor: mlcc_bpf::RtoFloor,
        fallback: mlcc_bpf::Fallback,
        tau: Option<Duration>,
        horizon: Option<u32>,
        progress: Progress,
    },
    /// MLTCP (`mlcc_bpf::mltcp`), the peer baseline: its BPF CC over `base` registered once
    /// for the run, the trainers' sockets on it through their progress files, and an
    /// `mltcp-feeder` per host writing each socket's ratio every 5 ms. `name` is what the user
    /// wrote: `mltcp` (over Reno), `mltcp/reno` or `mltcp/cubic`.
    Mltcp {
        name: String,
        base: mlcc_bpf::mltcp::Base,
    },
    /// Each job of the scenario alone on its hosts, arriving at time 0, under this kernel CC
    /// and without cross traffic or faults: the lower bound on what contention leaves.
    Isolated(String),
}

/// Where an mlcc run's trainers say their progress: their progress files, or nothing (mlccd
/// learns them from their sockets), perhaps but for their length in their environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// `progress=on`, the default.
    Files,
    /// `progress=off`.
    Learned,
    /// `progress=told`: `progress=off`, with `MLCC_TOTAL_ITERATIONS` in each trainer's
    /// environment.
    Told,
}

impl Cc {
    pub fn parse(s: &str) -> Result<Cc, String> {
        // A kernel CC's name; not one of the testbed's own, which cannot go under another.
        let kernel = |k: &str| {
            !k.is_empty()
                && k.len() < 16
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !["mlcc", "mltcp", "isolated", "cassini"].contains(&k)
        };
        let key_value = |kv| split_key_value(s, kv);
        let floor = |v: &str| -> Result<Duration, String> {
            if v == "kernel" {
                return Ok(Duration::ZERO);
            }
            let d = mlcc_core::units::parse_duration(v)
                .map_err(|e| format!("{s:?}: rto_floor: {e}"))?;
            mlcc_bpf::RtoFloor::new(d).map_err(|e| format!("{s:?}: {e}"))?;
            Ok(d)
        };
        let mut parts = s.split('/');
        match parts.next().unwrap_or_default() {
            "mlcc" => {
                let mut args = Vec::new();
                let mut rto_floor = mlcc_bpf::RtoFloor::default();
                let mut fallback = mlcc_bpf::Fallback::default();
                let (mut tau, mut horizon, mut progress) = (None, None, Progress::Files);
                for kv in parts {
                    let (k, v) = key_value(kv)?;
                    match k {
                        "tau" => {
                            tau = Some(
                                mlcc_core::units::parse_duration(v)
                                    .map_err(|e| format!("{s:?}: tau: {e}"))?,
                            )
                        }
                        "horizon" => {
                            horizon = Some(v.parse().map_err(|_| {
                                format!("{s:?}: horizon: {v:?} is not a number of slots")
                            })?)
                        }
                        "progress" => {
                            progress = match v {
                                "on" => Progress::Files,
                                "off" => Progress::Learned,
                                "told" => Progress::Told,
                                _ => return Err(format!("{s:?}: progress: say on, off or told")),
                            }
                        }
                        "eta" | "policy" | "fill" | "fill-classes" | "learn" => {
                            args.extend([format!("--{k}"), v.to_string()])
                        }
                        "mode" => args.extend(["--feedback-mode".to_string(), v.to_string()]),
                        "tso_rtt_log" => {
                            args.extend(["--tcp-tso-rtt-log".to_string(), v.to_string()])
                        }
                        "rank" => args.extend(["--precedence".to_string(), v.to_string()]),
                        "order_expiry" => {
                            args.extend(["--order-expiry".to_string(), v.to_string()])
                        }
                        "link_headroom" => {
                            args.extend(["--link-headroom".to_string(), v.to_string()])
                        }
                        "rto_floor" => {
                            rto_floor = mlcc_bpf::RtoFloor::new(floor(v)?)
                                .map_err(|e| format!("{s:?}: {e}"))?
                        }
                        "fallback" => fallback = v.parse().map_err(|e| format!("{s:?}: {e}"))?,
                        "cpu_load" => {
                            return Err(format!(
                                "{s:?}: cpu_load is for a kernel CC, standing in for the CPU \
                                 mlcc's own daemons use"
                            ));
                        }
                        rule => args.extend(["--rule".to_string(), format!("{rule}={v}")]),
                    }
                }
                Ok(Cc::Mlcc {
                    name: s.to_string(),
                    args,
                    rto_floor,
                    fallback,
                    tau,
                    horizon,
                    progress,
                })
            }
            "cassini" => match parts.next() {
                None => Ok(Cc::Kernel {
                    name: s.to_string(),
                    cc: "cubic".into(),
                    rto_floor: None,
                    cpu_load: None,
                    cassini: true,
                }),
                Some(k) if kernel(k) && parts.next().is_none() => Ok(Cc::Kernel {
                    name: s.to_string(),
                    cc: k.into(),
                    rto_floor: None,
                    cpu_load: None,
                    cassini: true,
                }),
                Some(_) => Err(format!("{s:?}: say cassini or cassini/<kernel CC>")),
            },
            "mltcp" => {
                let base = match (parts.next(), parts.next()) {
                    (None, _) => Ok(mlcc_bpf::mltcp::Base::Reno),
                    (Some(b), None) => b.parse().map_err(|_| ()),
                    (Some(_), Some(_)) => Err(()),
                }
                .map_err(|()| format!("{s:?}: say mltcp, mltcp/reno or mltcp/cubic"))?;
                Ok(Cc::Mltcp {
                    name: s.to_string(),
                    base,
                })
            }
            "isolated" => match parts.next() {
                None => Ok(Cc::Isolated("cubic".into())),
                Some(k) if kernel(k) && parts.next().is_none() => Ok(Cc::Isolated(k.into())),
                Some(_) => Err(format!("{s:?}: say isolated or isolated/<kernel CC>")),
            },
            k if kernel(k) => {
                let (mut rto_floor, mut cpu_load) = (None, None);
                for kv in parts {
                    match key_value(kv)? {
                        ("rto_floor", v) => rto_floor = Some(floor(v)?).filter(|d| !d.is_zero()),
                        ("cpu_load", v) => {
                            cpu_load = Some(CpuLoad::parse(v).map_err(|e| format!("{s:?}: {e}"))?)
                        }
                        (k, _) => {
                            return Err(format!(
                                "{s:?}: a kernel CC takes only rto_floor=DURATION and \
                                 cpu_load=CORES, not {k}"
                            ));
                        }
                    }
                }
                Ok(Cc::Kernel {
                    name: s.to_string(),
                    cc: k.to_string(),
                    rto_floor,
                    cpu_load,
                    cassini: false,
                })
            }
            _ => Err(format!("{s:?} is not a congestion control name")),
        }
    }

    /// A kernel CC with the kernel's defaults.
    pub fn kernel(cc: &str) -> Cc {
        Cc::Kernel {
            name: cc.to_string(),
            cc: cc.to_string(),
            rto_floor: None,
            cpu_load: None,
            cassini: false,
        }
    }

    /// Parses a `--cc` list. Runs are grouped by [`Self::name`], so two different CCs of one name
    /// (`isolated` and `isolated/bbr`) would be pooled into one row: refused.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<Cc>, String> {
        let ccs: Vec<Cc> = names
            .iter()
            .map(|n| Cc::parse(n.as_ref()))
            .collect::<Result<_, _>>()?;
        for i in 0..ccs.len() {
            let same = |j: &usize| ccs[*j].name() == ccs[i].name() && ccs[*j] != ccs[i];
            if let Some(j) = (0..i).find(same) {
                return Err(format!(
                    "{} and {} are both reported as `{}`, so their runs would be pooled: \
                     run them in separate invocations",
                    names[j].as_ref(),
                    names[i].as_ref(),
                    ccs[i].name()
                ));
            }
        }
        Ok(ccs)
    }

    /// The synthetic CPU load a kernel CC's run carries, if it names one.
    pub fn cpu_load(&self) -> Option<CpuLoad> {
        match self {
            Cc::Kernel { cpu_load, .. } => *cpu_load,
            _ => None,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Cc::Kernel { name, .. } => name,
            Cc::Mlcc { name, .. } => name,
            Cc::Mltcp { name, .. } => name,
            Cc::Isolated(_) => "isolated",
        }
    }

    /// [`Self::name`] as a file or directory name (`mlcc/eta=1` → `mlcc+eta=1`).
    pub fn file_name(&self) -> String {
        self.name().replace('/', "+")
    }

    pub fn is_mlcc(&self) -> bool {
        matches!(self, Cc::Mlcc { .. })
    }

    /// Trainers write progress files and take their CC from them (mlcc and MLTCP, whose BPF
    /// CCs are registered per run under a unique name), but for `mlcc/progress=off`.
    pub fn uses_progress_files(&self) -> bool {
        matches!(
            self,
            Cc::Mlcc {
                progress: Progress::Files,
                ..
            } | Cc::Mltcp { .. }
        )
    }

    /// Trainers without progress files whose environment says how many iterations their job
    /// runs (`mlcc/progress=told`).
    pub fn tells_total_iterations(&self) -> bool {
        matches!(
            self,
            Cc::Mlcc {
                progress: Progress::Told,
                ..
            }
        )
    }
}

fn split_key_value<'a>(spec: &str, kv: &'a str) -> Result<(&'a str, &'a str), String> {
    kv.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("{spec:?}: {kv:?} is not key=value"))
}

/// A short id for this run's names: 6 hex digits from the pid and the clock.
pub fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{:06x}",
        (std::process::id() ^ t.rotate_left(7)) & 0xff_ffff
    )
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Everything of every run on the machine, for `mlcc-testbed down`.
pub fn leftovers() -> Vec<String> {
    let mut v = net::existing_namespaces();
    let cgroups = mlcc_bpf::testbed::cgroup2_root().ok();
    let cgroups = cgroups.as_ref().and_then(|p| p.to_str());
    for dir in ["/sys/fs/bpf", "/dev/shm"].into_iter().chain(cgroups) {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(PREFIX) {
                    v.push(format!("{dir}/{n}"));
                }
            }
        }
    }
    v
}

/// Kills what is left in a run's cgroup (torch ranks) and removes it.
fn remove_cgroup(dir: &Path) {
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
    let cg = Cgroup::adopt(dir);
    let _ = cg.remove(Duration::from_secs(5));
}

/// Removes every testbed object on the machine (namespaces with their processes, pins, shm
/// dirs, cgroups).
pub fn down_all() -> Vec<String> {
    let found = leftovers();
    for o in &found {
        if o.starts_with("/sys/fs/bpf/") {
            let _ = mlcc_bpf::unload_pinned(Path::new(o));
            let _ = fs::remove_dir_all(o);
        } else if o.starts_with("/dev/shm/") {
            let _ = fs::remove_dir_all(o);
        } else if o.starts_with("/sys/fs/cgroup") {
            remove_cgroup(Path::new(o));
        } else {
            net::delete_namespace(o);
        }
    }
    found
}

struct Named {
    name: String,
    child: Child,
    /// How to start it again after a scheduled kill: namespace, program, arguments.
    recipe: (String, PathBuf, Vec<std::ffi::OsString>),
    /// Killed by a scheduled fault and not started again yet: not a crash.
    down: bool,
    /// Every pid it ran as (restarts included), for the cleanup check.
    pids: Vec<u32>,
}

/// The emulated cluster of one run.
pub struct EmulatedCluster {
    pub plan: NetPlan,
    pub cc: Cc,
    /// Logs, topology, sockets of this run.
    pub dir: PathBuf,
    /// The BPF CC's name when cc = mlcc or mltcp.
    pub mlcc_name: Option<String>,
    /// mlccd's slot length, when it runs.
    mlcc_tau: Option<Duration>,
    pin_dir: Option<PathBuf>,
    shm_root: PathBuf,
    daemons: Vec<Named>,
    /// The nice value the daemons start at ([`Binaries::daemon_nice`]).
    daemon_nice: i32,
    /// The loss programs of the scenario's lossy links (both ends of each).
    loss: Vec<(String, mlcc_bpf::LossInjector)>,
    /// The cgroup and barrier of its `torch-ddp` jobs, if it has any.
    torch: Option<TorchRun>,
    removed: bool,
}

pub const SWITCHD_PORT: u16 = 50061;
/// How often `mltcp-feeder` rewrites the ratios (see [`EmulatedCluster::up`] with [`Cc::Mltcp`]).
const MLTCP_FEED_INTERVAL: Duration = Duration::from_millis(5);
/// Job `i` of a run listens on `DATA_PORT_BASE + (i % DATA_PORT_JOBS) * PORTS_PER_JOB + member`.
const DATA_PORT_BASE: u16 = 20000;
const DATA_PORT_JOBS: u16 = 1000;
const PORTS_PER_JOB: u16 = 16;
/// Every port the trainers' data connections use: what a lossy link drops.
pub const DATA_PORTS: std::ops::RangeInclusive<u16> =
    DATA_PORT_BASE..=DATA_PORT_BASE + DATA_PORT_JOBS * PORTS_PER_JOB - 1;
pub use crate::scenario::PAYLOAD_PER_FRAME;
pub const PEER_PORT: u16 = 50071;

impl EmulatedCluster {
    pub fn up(
        scn: &Scenario,
        cc: Cc,
        bins: &Binaries,
        dir: &Path,
        run: &str,
    ) -> Result<EmulatedCluster, RunError> {
        if !is_root() {
            return Err(RunError::NotRoot);
        }
        let others = leftovers();
        if !others.is_empty() {
            return Err(RunError::OtherRun(others.join(", ")));
        }
        fs::create_dir_all(dir.join("logs"))
            .map_err(io_err(format!("creating {}", dir.display())))?;
        let plan = NetPlan::new(run, scn);
        let mut c = EmulatedCluster {
            plan,
            cc: cc.clone(),
            dir: dir.to_path_buf(),
            mlcc_name: None,
            mlcc_tau: None,
            pin_dir: None,
            shm_root: PathBuf::from(format!("/dev/shm/{PREFIX}{run}")),
            daemons: Vec::new(),
            daemon_nice: bins.daemon_nice,
            loss: Vec::new(),
            torch: None,
            removed: false,
        };
        c.plan
            .create()
            .map_err(io_err("creating namespaces and links"))?;
        if let Some(loss) = &scn.loss {
            c.add_loss(loss)?;
        }
        if let Cc::Kernel {
            rto_floor: Some(floor),
            ..
        } = &cc
        {
            c.set_rto_floor(*floor)?;
        }
        for h in &c.plan.hosts {
            let d = c.shm_root.join(&h.name);
            fs::create_dir_all(&d).map_err(io_err(format!("creating {}", d.display())))?;
        }
        if let Cc::Mlcc { args, .. } = &cc {
            let args = args.clone();
            c.start_mlcc(scn, bins, run, &args)?;
        }
        if let Cc::Mltcp { base, .. } = &cc {
            c.start_mltcp(scn, bins, run, *base)?;
        }
        if crate::torch::has_torch_jobs(scn) {
            c.torch = Some(TorchRun::prepare(&c, &format!("{PREFIX}{run}"))?);
        }
        Ok(c)
    }

    /// `net.ipv4.tcp_rto_min_us` in every host: what mlcc's datapath does per socket, for a
    /// kernel CC.
    fn set_rto_floor(&self, floor: Duration) -> Result<(), RunError> {
        let us = floor.as_micros().to_string();
        for h in &self.plan.hosts {
            net::in_netns(&h.ns, || {
                fs::write("/proc/sys/net/ipv4/tcp_rto_min_us", &us)
            })
            .and_then(|r| r)
            .map_err(io_err(format!(
                "setting net.ipv4.tcp_rto_min_us in {} (kernel 6.11 or later has it)",
                h.name
            )))?;
        }
        Ok(())
    }

    /// Loads the loss program where every lossy host link delivers, in both directions: the
    /// switch port's ingress (what the host sends, its uplink) and the host's (its downlink).
    /// Every host then sends single segments, so each drop is one segment. Each end draws from
    /// its own seed, `loss.seed + 2·i` and `+ 2·i + 1` for the i-th lossy host, logged in
    /// `logs/loss.log`.
    fn add_loss(&mut self, loss: &crate::scenario::Loss) -> Result<(), RunError> {
        let netns = |ns: &str| Path::new("/run/netns").join(ns);
        for h in &self.plan.hosts {
            mlcc_bpf::send_single_segments(&netns(&h.ns), "eth0")
                .map_err(|e| RunError::Setup(format!("loss on {}: {e}", h.name)))?;
        }
        let mut log = String::new();
        for (i, name) in loss.hosts.iter().enumerate() {
            let h = self
                .plan
                .host(name)
                .ok_or_else(|| RunError::Setup(format!("lossy host {name} is not in the run")))?;
            let sw = &self.plan.switches[(h.rack - 1) as usize];
            let ends = [
                (&sw.ns, h.name.as_str(), "uplink"),
                (&h.ns, "eth0", "downlink"),
            ];
            for (j, (ns, dev, what)) in ends.into_iter().enumerate() {
                let seed = loss.seed.wrapping_add(2 * i as u64 + j as u64);
                let spec = mlcc_bpf::LossSpec::new(loss.probability, seed, DATA_PORTS)
                    .map_err(|e| RunError::Setup(format!("loss on {name}: {e}")))?;
                let inj = mlcc_bpf::LossInjector::attach(&netns(ns), dev, spec)
                    .map_err(|e| RunError::Setup(format!("loss on {name}'s {what}: {e}")))?;
                log += &format!(
                    "{name} {what}: {} % of data segments (ports {}-{}), seed {seed}\n",
                    loss.probability * 100.0,
                    DATA_PORTS.start(),
                    DATA_PORTS.end()
                );
                self.loss.push((format!("{name} {what}"), inj));
            }
        }
        let path = self.dir.join("logs").join("loss.log");
        fs::write(&path, log).map_err(io_err(format!("writing {}", path.display())))
    }

    /// What the loss programs saw so far, per host link end (`h1 uplink`, ...).
    pub fn loss_counters(&self) -> Vec<(String, mlcc_bpf::LossCounters)> {
        self.loss
            .iter()
            .filter_map(|(label, l)| Some((label.clone(), l.counters().ok()?)))
            .collect()
    }

    fn start_mlcc(
        &mut self,
        scn: &Scenario,
        bins: &Binaries,
        run: &str,
        policy_args: &[String],
    ) -> Result<(), RunError> {
        let name = format!("mlcc_tb{run}");
        let pin = PathBuf::from(format!("/sys/fs/bpf/{PREFIX}{run}"));
        // cwnd may run 2x the rate over max(min RTT, floor) ahead of the pacer. The floor must
        // cover the bottleneck's standing queue (TBF holds ~5 ms; cubic cross traffic keeps it
        // full): with the default 1 ms, a flow planned low under such a queue is capped by cwnd
        // below its plan, its under-delivery reads as a slow path, and B_f ratchets its next
        // plans down to capacity/16 (measured: paper-small mean JCT 64.7 s with 1 ms, 38.1 s
        // with an srtt-based cap).
        let cwnd = mlcc_bpf::CwndPolicy::new(200, 4, Duration::from_millis(8))
            .map_err(|e| RunError::Setup(format!("cwnd policy: {e}")))?;
        let (rto_floor, fallback) = match &self.cc {
            Cc::Mlcc {
                rto_floor,
                fallback,
                ..
            } => (*rto_floor, *fallback),
            _ => Default::default(),
        };
        let opts = mlcc_bpf::LoadOptions {
            cc_name: mlcc_bpf::CcName::new(&name)
                .map_err(|e| RunError::Setup(format!("CC name {name}: {e}")))?,
            pin_dir: pin.clone(),
            cwnd,
            rto_floor,
            fallback,
            max_sockets: mlcc_bpf::MaxSockets::default(),
        };
        self.pin_dir = Some(pin.clone());
        // Loaded and pinned here; mlccd opens the pins (a loader that exits keeps it alive).
        drop(
            mlcc_bpf::KernelDatapath::load(&opts)
                .map_err(|e| RunError::Setup(format!("loading the BPF datapath: {e}")))?,
        );
        self.mlcc_name = Some(name);
        let topo = self.dir.join("topology.toml");
        fs::write(&topo, self.topology_toml(scn)).map_err(io_err("writing the topology"))?;
        let (tau, horizon) = match &self.cc {
            Cc::Mlcc { tau, horizon, .. } => {
                (tau.unwrap_or(scn.tau), horizon.unwrap_or(scn.horizon))
            }
            _ => (scn.tau, scn.horizon),
        };
        self.mlcc_tau = Some(tau);
        let tau = format!("{}us", tau.as_micros());
        let horizon = horizon.to_string();
        let emulated = if scn.switch_emulators {
            self.plan.switches.clone()
        } else {
            Vec::new()
        };
        for sw in emulated.clone() {
            let mut args: Vec<std::ffi::OsString> = vec!["--topology".into(), topo.clone().into()];
            args.extend(
                [
                    "--switch",
                    &sw.name,
                    "--listen",
                    &format!("{}:{SWITCHD_PORT}", sw.ip),
                    "--metrics-listen",
                    &format!("{}:9472", sw.ip),
                    "--tau",
                    &tau,
                    "--horizon",
                    &horizon,
                ]
                .map(Into::into),
            );
            self.spawn_daemon(
                &format!("switchd-{}", sw.name),
                (sw.ns.clone(), bins.switchd.clone(), args),
            )?;
        }
        for sw in &emulated {
            wait_listening(
                &sw.ns,
                std::net::SocketAddr::new(sw.ip.into(), SWITCHD_PORT),
                Duration::from_secs(20),
            )
            .map_err(|e| {
                RunError::Setup(format!(
                    "{} did not come up: {e} (see {})",
                    sw.name,
                    self.dir.join("logs").display()
                ))
            })?;
        }
        for h in self.plan.hosts.clone() {
            let mut args: Vec<std::ffi::OsString> = ["--host", h.name.as_str(), "--topology"]
                .map(Into::into)
                .to_vec();
            args.push(topo.clone().into());
            args.push("--shm-dir".into());
            args.push(self.shm_root.join(&h.name).into());
            args.push("--admin-socket".into());
            args.push(self.admin_socket(&h.name).into());
            args.extend(
                [
                    "--peer-listen",
                    &format!("{}:{PEER_PORT}", h.ip),
                    "--metrics-listen",
                    &format!("{}:9471", h.ip),
                    "--datapath",
                    "bpf",
                    "--bpf-pin-dir",
                ]
                .map(Into::into),
            );
            args.push(pin.clone().into());
            args.extend(["--tau", &tau, "--horizon", &horizon].map(Into::into));
            args.extend(policy_args.iter().map(Into::into));
            self.spawn_daemon(
                &format!("mlccd-{}", h.name),
                (h.ns.clone(), bins.mlccd.clone(), args),
            )?;
        }
        for h in &self.plan.hosts {
            wait_listening(
                &h.ns,
                std::net::SocketAddr::new(h.ip.into(), PEER_PORT),
                Duration::from_secs(20),
            )
            .map_err(|e| {
                RunError::Setup(format!(
                    "mlccd on {} did not come up: {e} (see {})",
                    h.name,
                    self.dir.join("logs").display()
                ))
            })?;
        }
        Ok(())
    }

    /// Registers the MLTCP CC over `base` for this run and starts a ratio feeder in every
    /// host, each reading only its own host's progress files and sockets.
    fn start_mltcp(
        &mut self,
        scn: &Scenario,
        bins: &Binaries,
        run: &str,
        base: mlcc_bpf::mltcp::Base,
    ) -> Result<(), RunError> {
        // `mltcp_tb` + the run's id over Reno, `mltcpc_tb` + it over CUBIC (15 bytes at most).
        let name = match base {
            mlcc_bpf::mltcp::Base::Reno => format!("mltcp_tb{run}"),
            mlcc_bpf::mltcp::Base::Cubic => format!("mltcpc_tb{run}"),
        };
        let pin = PathBuf::from(format!("/sys/fs/bpf/{PREFIX}{run}"));
        let cc = mlcc_bpf::CcName::new(&name)
            .map_err(|e| RunError::Setup(format!("CC name {name}: {e}")))?;
        self.pin_dir = Some(pin.clone());
        drop(
            mlcc_bpf::mltcp::MltcpDatapath::load(&cc, base, &pin)
                .map_err(|e| RunError::Setup(format!("loading the MLTCP CC: {e}")))?,
        );
        self.mlcc_name = Some(name);
        // MLTCP reads r at every ACK; the feeder refreshes it every 5 ms, well inside a
        // communication phase (hundreds of ms here), rather than every τ (60 ms: a phase would
        // see a handful of values).
        let interval = format!("{}us", MLTCP_FEED_INTERVAL.min(scn.tau).as_micros());
        for h in self.plan.hosts.clone() {
            let args: Vec<std::ffi::OsString> = vec![
                "--shm-dir".into(),
                self.shm_root.join(&h.name).into(),
                "--bpf-pin-dir".into(),
                pin.clone().into(),
                "--interval".into(),
                interval.clone().into(),
            ];
            self.spawn_daemon(
                &format!("mltcp-feeder-{}", h.name),
                (h.ns.clone(), bins.mltcp_feeder.clone(), args),
            )?;
        }
        Ok(())
    }

    /// The topology mlccd and mlcc-switchd load: hosts with their IPs, switches with their
    /// emulators, every link with the capacity it is shaped to.
    pub fn topology_toml(&self, scn: &Scenario) -> String {
        let mut t = String::from("# Written by mlcc-testbed for one run.\n");
        for sw in &self.plan.switches {
            t += &format!("[[switch]]\nname = \"{}\"\ntier = 0\n", sw.name);
            if scn.switch_emulators {
                t += &format!("emulator = \"{}:{SWITCHD_PORT}\"\n", sw.ip);
            }
        }
        for h in &self.plan.hosts {
            t += &format!(
                "[[host]]\nname = \"{}\"\nip = \"{}\"\nrack = \"tor{}\"\n",
                h.name, h.ip, h.rack
            );
        }
        // mlccd plans and measures payload (acked bytes), while tc shapes whole frames: a
        // 1448-byte segment (TCP with timestamps over IPv4) is a 1514-byte frame. The topology
        // carries what a link delivers in payload, or every flow planned at line rate would
        // miss its plan by 4.4 % and a full link would be booked 4.4 % over.
        let payload = |bits: u64| bits * PAYLOAD_PER_FRAME.0 / PAYLOAD_PER_FRAME.1;
        for h in &self.plan.hosts {
            t += &format!(
                "[[link]]\na = \"{}\"\nb = \"tor{}\"\ncapacity = \"{}bit\"\n",
                h.name,
                h.rack,
                payload(scn.host_link_bits)
            );
        }
        if let (2, Some(b)) = (self.plan.switches.len(), scn.inter_switch_bits) {
            t += &format!(
                "[[link]]\na = \"tor1\"\nb = \"tor2\"\ncapacity = \"{}bit\"\n",
                payload(b)
            );
        }
        t
    }

    /// Where host `host`'s mlccd listens for mlccctl: in the run's folder, or beside its
    /// progress files where that path would not fit a Unix socket's (108 bytes with its NUL),
    /// as under a long `--out`.
    fn admin_socket(&self, host: &str) -> PathBuf {
        const SUN_PATH_MAX: usize = 107;
        let name = format!("{host}.sock");
        let in_run = self.dir.join(&name);
        if in_run.as_os_str().len() <= SUN_PATH_MAX {
            in_run
        } else {
            self.shm_root.join(name)
        }
    }

    fn spawn_daemon(
        &mut self,
        name: &str,
        recipe: (String, PathBuf, Vec<std::ffi::OsString>),
    ) -> Result<(), RunError> {
        let child = self.start(name, &recipe, false)?;
        self.daemons.push(Named {
            name: name.into(),
            pids: vec![child.id()],
            child,
            recipe,
            down: false,
        });
        Ok(())
    }

    fn start(
        &self,
        name: &str,
        (ns, program, args): &(String, PathBuf, Vec<std::ffi::OsString>),
        again: bool,
    ) -> Result<Child, RunError> {
        let log = self.dir.join("logs").join(format!("{name}.log"));
        // A restarted daemon's log goes on after its first life's.
        let f = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(again)
            .truncate(!again)
            .open(&log)
            .map_err(io_err(format!("creating {}", log.display())))?;
        let f2 = f.try_clone().map_err(io_err("log file"))?;
        let mut cmd = ns_command(ns, program)?;
        cmd.args(args).stdin(Stdio::null()).stdout(f).stderr(f2);
        let nice = self.daemon_nice;
        // SAFETY: one raw system call between fork and exec, as in `ns_command`. Set before
        // exec, the priority is every thread's the daemon starts.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                rustix::process::setpriority_process(None, nice)?;
                Ok(())
            });
        }
        cmd.spawn().map_err(io_err(format!("starting {name}")))
    }

    /// SIGKILLs a daemon (`switchd-tor1`, `mlccd-h2`) for a scheduled fault.
    pub fn kill_daemon(&mut self, name: &str) -> Result<(), RunError> {
        let d = self
            .daemons
            .iter_mut()
            .find(|d| d.name == name)
            .ok_or_else(|| RunError::Setup(format!("no daemon {name} to kill")))?;
        d.down = true;
        let _ = d.child.kill();
        let _ = d.child.wait();
        Ok(())
    }

    /// SIGSTOPs (`stop`) or SIGCONTs a daemon for a scheduled fault.
    pub fn pause_daemon(&mut self, name: &str, stop: bool) -> Result<(), RunError> {
        let d = self
            .daemons
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| RunError::Setup(format!("no daemon {name} to pause")))?;
        let sig = if stop { Signal::STOP } else { Signal::CONT };
        signal_child(&d.child, sig);
        Ok(())
    }

    /// Starts a killed daemon again with its first arguments.
    pub fn restart_daemon(&mut self, name: &str) -> Result<(), RunError> {
        self.restart_daemon_with(name, &[])
    }

    /// Starts a killed daemon again with its first arguments and `extra` ones.
    pub fn restart_daemon_with(&mut self, name: &str, extra: &[String]) -> Result<(), RunError> {
        let i = self
            .daemons
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| RunError::Setup(format!("no daemon {name} to restart")))?;
        let (ns, program, mut args) = self.daemons[i].recipe.clone();
        args.extend(extra.iter().map(std::ffi::OsString::from));
        let child = self.start(name, &(ns, program, args), true)?;
        let d = &mut self.daemons[i];
        d.pids.push(child.id());
        d.child = child;
        d.down = false;
        Ok(())
    }

    /// A host's link down or up (its `eth0`; the switch port follows the veth pair).
    pub fn set_link(&self, host: &str, up: bool) -> Result<(), RunError> {
        let h = self
            .plan
            .host(host)
            .ok_or_else(|| RunError::Setup(format!("no host {host}")))?;
        net::sh(
            "ip",
            &[
                "-n",
                &h.ns,
                "link",
                "set",
                "eth0",
                if up { "up" } else { "down" },
            ],
        )
        .map(drop)
        .map_err(io_err(format!(
            "link of {host} {}",
            if up { "up" } else { "down" }
        )))
    }

    /// A daemon that exited during the run (a crash is a failed run, not a slower one).
    pub fn dead_daemon(&mut self) -> Option<String> {
        self.daemons
            .iter_mut()
            .filter(|d| !d.down)
            .find_map(|d| match d.child.try_wait() {
                Ok(Some(st)) => Some(format!(
                    "{} exited ({st}); see {}",
                    d.name,
                    self.dir
                        .join("logs")
                        .join(format!("{}.log", d.name))
                        .display()
                )),
                _ => None,
            })
    }

    pub fn shm_dir(&self, host: &str) -> PathBuf {
        self.shm_root.join(host)
    }

    /// Where the run's BPF datapath is pinned (mlcc and MLTCP).
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pin_dir.as_deref()
    }

    /// CPU time (s) the daemons running now have used, `None` where none runs or none could
    /// be read.
    pub fn daemons_cpu_s(&self) -> Option<f64> {
        self.daemons
            .iter()
            .filter(|d| !d.down)
            .filter_map(|d| cpu_s(d.child.id()))
            .reduce(|a, b| a + b)
    }

    /// Stops the daemons (SIGTERM, then SIGKILL), deletes namespaces, pins and shm dirs.
    pub fn down(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        for d in &self.daemons {
            // SIGCONT for one a fault left stopped.
            signal_child(&d.child, Signal::TERM);
            signal_child(&d.child, Signal::CONT);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in &mut self.daemons {
            while Instant::now() < deadline && matches!(d.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
        // What each lossy link end dropped, for the run's record.
        let counters: BTreeMap<String, mlcc_bpf::LossCounters> =
            self.loss_counters().into_iter().collect();
        if !counters.is_empty() {
            let _ = fs::write(
                self.dir.join("logs").join("loss.json"),
                serde_json::to_string_pretty(&counters).unwrap_or_default(),
            );
        }
        for (_, l) in &mut self.loss {
            let _ = l.remove();
        }
        self.loss.clear();
        self.plan.destroy();
        if let Some(t) = &mut self.torch {
            t.finish();
        }
        if let Some(p) = &self.pin_dir {
            let _ = mlcc_bpf::unload_pinned(p);
            let _ = fs::remove_dir_all(p);
        }
        let _ = fs::remove_dir_all(&self.shm_root);
    }
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        self.down();
    }
}

/// Sends `sig` to our own child; one already gone is no error worth reporting.
fn signal_child(child: &Child, sig: Signal) {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// `program` run inside network namespace `ns`. Not `ip netns exec`: that also gives the
/// process a mount namespace with a fresh /sys, hiding the bpffs where the datapath is pinned.
pub fn ns_command(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Result<Command, RunError> {
    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
    use std::os::fd::AsFd;
    use std::os::unix::process::CommandExt;
    let path = Path::new("/run/netns").join(ns);
    let f = File::open(&path).map_err(io_err(format!("network namespace {}", path.display())))?;
    let mut c = Command::new(program);
    // SAFETY: only setns (one raw system call, async-signal-safe) between fork and exec; the
    // fd stays open because the closure owns the File until the Command is dropped. std's
    // pre_exec is unsafe itself; no safe way to run code in the child exists.
    unsafe {
        c.pre_exec(move || {
            move_into_link_name_space(f.as_fd(), Some(LinkNameSpaceType::Network))?;
            Ok(())
        });
    }
    Ok(c)
}

fn wait_listening(ns: &str, addr: std::net::SocketAddr, timeout: Duration) -> io::Result<()> {
    let start = Instant::now();
    loop {
        let ok = net::in_netns(ns, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
        })?;
        if ok {
            return Ok(());
        }
        if start.elapsed() > timeout || INTERRUPTED.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing listening on {addr} after {timeout:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One job's outcome in one run.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub job: String,
    pub model: String,
    pub arch: String,
    pub arrival_s: f64,
    pub iterations: u32,
    /// From arrival to the exit of its last member.
    pub jct_s: f64,
    /// How long the job's start was held back after its arrival (Cassini's time shift; 0
    /// under every other CC).
    pub shift_s: f64,
    /// Mean over workers of their mean iteration time.
    pub mean_iteration_s: f64,
    /// The longest iteration of any worker over that worker's median iteration: under about 2.5
    /// where every iteration took its turn, several times where one stalled
    /// ([`crate::report::STALL_RATIO`]).
    pub longest_iteration_ratio: f64,
    pub bytes_verified: u64,
    pub bytes_sent: u64,
    /// The CC the data sockets reported (e.g. "cubic", "mlcc_tb1a2b3c").
    pub socket_cc: String,
    pub progress_files: bool,
    /// How well mlccd's learner read the job, where it ran without progress files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<JobLearning>,
    /// Where a PyTorch job's iterations went, where its ranks computed on the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<IterationPhases>,
    /// What each member said of itself, for [`Self::learned`].
    #[serde(skip)]
    pub members: Vec<MemberTruth>,
    pub ok: bool,
    pub error: Option<String>,
    /// Each member's sending rate over time, from its sockets' acknowledged bytes (plotted,
    /// not kept in summary.json: 50 samples a second per member).
    #[serde(skip)]
    pub senders: Vec<SenderSeries>,
}

/// What one member of a job sent, over time.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SenderSeries {
    pub host: String,
    pub member: String,
    /// (seconds since the run's start, Mbit/s acknowledged since the previous sample)
    pub samples: Vec<(f64, f64)>,
}

impl SenderSeries {
    /// Rates between consecutive cumulative `(Unix time s, bytes)` samples, timed from
    /// `run_start_unix`.
    pub fn from_acked(host: &str, member: &str, acked: &[(f64, u64)], run_start_unix: f64) -> Self {
        let samples = acked
            .windows(2)
            .filter(|w| w[1].0 > w[0].0)
            .map(|w| {
                let bits = w[1].1.saturating_sub(w[0].1) as f64 * 8.0;
                (w[1].0 - run_start_unix, bits / (w[1].0 - w[0].0) / 1e6)
            })
            .collect();
        Self {
            host: host.to_string(),
            member: member.to_string(),
            samples,
        }
    }
}

struct Member {
    name: String,
    host: String,
    child: Child,
    out: PathBuf,
    done: Option<(Instant, bool)>,
}

struct RunningJob {
    spec: JobSpec,
    arrived: Instant,
    members: Vec<Member>,
}

/// One host's uplink and downlink over time, from the switch port counters.
#[derive(Clone, Debug, Serialize)]
pub struct BandwidthSeries {
    pub host: String,
    /// (seconds since start, uplink Mbit/s, downlink Mbit/s)
    pub samples: Vec<(f64, f64, f64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CcRun {
    pub cc: String,
    pub jobs: Vec<JobResult>,
    pub wall_s: f64,
    pub cross_flows: u32,
    /// What the cross traffic got, where the scenario has any.
    pub cross: Option<CrossStats>,
    pub bandwidth: Vec<BandwidthSeries>,
    /// The scenario's scheduled faults as applied in this run.
    pub faults: Vec<FaultEvent>,
    /// CPU time (user and system, s) the daemons (mlccd, the switch emulators) used over the
    /// run, where any ran; a daemon a fault restarted counts from its restart. On this
    /// testbed they share the cores with the jobs, so what they use the jobs may lose. For a
    /// kernel CC with a `cpu_load`, what that load used in their stead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemons_cpu_s: Option<f64>,
    /// Every process the run started (daemons, trainers, iperf3), for the cleanup check.
    #[serde(skip)]
    pub pids: Vec<u32>,
}

/// One scheduled fault in one run.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    pub fault: Fault,
    /// Seconds since the run's start when it hit and when it was undone; `None` if not applied
    /// (a daemon kill under a kernel CC, which has no daemons) or not undone (the run ended).
    pub applied_s: Option<f64>,
    pub restored_s: Option<f64>,
    /// The same instants as Unix time (s), to line them up with observations made elsewhere.
    pub applied_unix_s: Option<f64>,
    pub restored_unix_s: Option<f64>,
}

/// Applies the scenario's faults as their times come; undoes each after its duration.
struct Faults {
    events: Vec<FaultEvent>,
}

impl Faults {
    fn new(scn: &Scenario) -> Self {
        Faults {
            events: scn
                .faults
                .iter()
                .map(|f| FaultEvent {
                    fault: f.clone(),
                    applied_s: None,
                    restored_s: None,
                    applied_unix_s: None,
                    restored_unix_s: None,
                })
                .collect(),
        }
    }

    fn tick(&mut self, c: &mut EmulatedCluster, t: Duration) -> Result<(), RunError> {
        let mlcc = c.cc.is_mlcc();
        for e in &mut self.events {
            let f = &e.fault;
            let daemon = match f.kind {
                FaultKind::KillSwitchd => Some(format!("switchd-{}", f.target)),
                FaultKind::KillMlccd | FaultKind::StopMlccd | FaultKind::SkewMlccd => {
                    Some(format!("mlccd-{}", f.target))
                }
                FaultKind::LinkDown => None,
            };
            let stop = f.kind == FaultKind::StopMlccd;
            if daemon.is_some() && !mlcc {
                continue;
            }
            if e.applied_s.is_none() && t >= f.at {
                match &daemon {
                    Some(d) if stop => c.pause_daemon(d, true)?,
                    Some(d) if f.kind == FaultKind::SkewMlccd => {
                        c.kill_daemon(d)?;
                        c.restart_daemon_with(d, &[format!("--clock-offset-ms={}", f.offset_ms)])?;
                    }
                    Some(d) => c.kill_daemon(d)?,
                    None => c.set_link(&f.target, false)?,
                }
                e.applied_s = Some(t.as_secs_f64());
                e.applied_unix_s = Some(unix_now());
            }
            if e.applied_s.is_some() && e.restored_s.is_none() && t >= f.at + f.lasts {
                match &daemon {
                    Some(d) if stop => c.pause_daemon(d, false)?,
                    Some(d) if f.kind == FaultKind::SkewMlccd => {
                        c.kill_daemon(d)?;
                        c.restart_daemon(d)?;
                    }
                    Some(d) => c.restart_daemon(d)?,
                    None => c.set_link(&f.target, true)?,
                }
                e.restored_s = Some(t.as_secs_f64());
                e.restored_unix_s = Some(unix_now());
            }
        }
        Ok(())
    }
}

/// A job of the scenario and its place in it (which picks its ports).
type Indexed = (usize, JobSpec);

/// Runs every job of the scenario on an up cluster; `tick` is told (finished jobs, total).
pub fn run_jobs(
    c: &mut EmulatedCluster,
    scn: &Scenario,
    bins: &Binaries,
    mut tick: impl FnMut(usize, usize, &str),
) -> Result<CcRun, RunError> {
    let (torch_jobs, mut pending): (Vec<Indexed>, Vec<Indexed>) = scn
        .jobs
        .iter()
        .cloned()
        .enumerate()
        .partition(|(_, j)| j.kind == JobKind::TorchDdp);
    pending.reverse();
    let mut running = prelaunch(c, bins, scn, torch_jobs)?;
    let load = c.cc.cpu_load().map(|l| l.start(c.daemon_nice));
    let start = Instant::now();
    for j in &mut running {
        j.arrived = start + j.spec.arrival;
    }
    let mut spawned: Vec<u32> = running
        .iter()
        .flat_map(|j| j.members.iter().map(|m| m.child.id()))
        .collect();
    let mut results: Vec<JobResult> = Vec::new();
    let mut cross = CrossTraffic::start(c, scn)?;
    let mut samples: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut last_counters: BTreeMap<String, (f64, u64, u64)> = BTreeMap::new();
    let mut next_sample = start;
    let mut faults = Faults::new(scn);
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(RunError::Interrupted);
        }
        faults.tick(c, start.elapsed())?;
        if let Some(d) = c.dead_daemon() {
            return Err(RunError::Setup(d));
        }
        let now = Instant::now();
        while pending
            .last()
            .is_some_and(|(_, j)| start + j.arrival <= now)
        {
            let (idx, spec) = pending.pop().expect("checked");
            let j = launch(c, bins, scn, idx, spec)?;
            spawned.extend(j.members.iter().map(|m| m.child.id()));
            running.push(j);
        }
        for j in &mut running {
            for m in &mut j.members {
                if m.done.is_none()
                    && let Ok(Some(st)) = m.child.try_wait()
                {
                    m.done = Some((Instant::now(), st.success()));
                }
            }
        }
        let (finished, still): (Vec<RunningJob>, Vec<RunningJob>) =
            running.into_iter().partition(|j| {
                j.members.iter().all(|m| m.done.is_some())
                    || j.members.iter().any(|m| m.done.is_some_and(|(_, ok)| !ok))
            });
        running = still;
        for j in finished {
            results.push(collect(c, start, j));
        }
        cross.tick(c, start)?;
        if now >= next_sample {
            sample(c, start, &mut samples, &mut last_counters);
            next_sample += Duration::from_millis(100);
        }
        tick(results.len(), scn.jobs.len(), c.cc.name());
        if pending.is_empty() && running.is_empty() {
            break;
        }
        if start.elapsed() > scn.timeout {
            for j in running.drain(..) {
                let mut r = collect(c, start, j);
                r.ok = false;
                r.error = Some(format!("timed out after {:?}", scn.timeout));
                results.push(r);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut pids = c
        .daemons
        .iter()
        .flat_map(|d| d.pids.iter().copied())
        .collect::<Vec<_>>();
    pids.extend(cross.pids.iter().copied());
    pids.extend(spawned);
    // A kernel CC's load stands where the daemons would: its CPU is reported in their place.
    let load_cpu_s = load.map(crate::cpu_load::Burner::stop);
    let daemons_cpu_s = c.daemons_cpu_s().or(load_cpu_s);
    let (cross_flows, cross) = cross.stop();
    add_learning(c, &mut results);
    results.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.job.cmp(&b.job)));
    Ok(CcRun {
        cc: c.cc.name().to_string(),
        jobs: results,
        wall_s: start.elapsed().as_secs_f64(),
        cross_flows,
        cross,
        bandwidth: samples
            .into_iter()
            .map(|(host, samples)| BandwidthSeries { host, samples })
            .collect(),
        faults: faults.events,
        daemons_cpu_s,
        pids,
    })
}

/// One bandwidth sample per host port: Mbit/s since the previous sample of the same port.
fn sample(
    c: &EmulatedCluster,
    start: Instant,
    out: &mut BTreeMap<String, Vec<(f64, f64, f64)>>,
    last: &mut BTreeMap<String, (f64, u64, u64)>,
) {
    let t = start.elapsed().as_secs_f64();
    for sw in &c.plan.switches {
        let Ok(ports) = net::counters(&sw.ns) else {
            continue;
        };
        for (port, rx, tx) in ports {
            if c.plan.host(&port).is_none() {
                continue;
            }
            // Port rx = what the host sent (its uplink); port tx = its downlink.
            let (up, down) = match last.insert(port.clone(), (t, rx, tx)) {
                Some((pt, prx, ptx)) => {
                    let mbit = |now: u64, before: u64| {
                        now.saturating_sub(before) as f64 * 8.0 / (t - pt).max(1e-3) / 1e6
                    };
                    (mbit(rx, prx), mbit(tx, ptx))
                }
                None => (0.0, 0.0),
            };
            out.entry(port).or_default().push((t, up, down));
        }
    }
}

/// Starts every member of job `spec` (the scenario's `idx`-th).
fn launch(
    c: &EmulatedCluster,
    bins: &Binaries,
    scn: &Scenario,
    idx: usize,
    spec: JobSpec,
) -> Result<RunningJob, RunError> {
    let commands = match spec.kind {
        JobKind::Trainer => trainer_commands(c, bins, idx, &spec)?,
        JobKind::TorchDdp => torch_commands(c, bins, scn, idx, &spec)?,
    };
    let mut members = Vec::new();
    for (host, who, cmd) in commands {
        members.push(spawn_member(c, &spec, host, &who, cmd)?);
    }
    Ok(RunningJob {
        spec,
        arrived: Instant::now(),
        members,
    })
}

/// Member `member` of the scenario's `idx`-th job listens on this port.
fn data_port(idx: usize, member: usize) -> u16 {
    DATA_PORT_BASE + (idx as u16 % DATA_PORT_JOBS) * PORTS_PER_JOB + member as u16
}

/// Each rank of a torch job: `python3 -m mlcc.torch.job`, rank 0 serving the rendezvous.
fn torch_commands(
    c: &EmulatedCluster,
    bins: &Binaries,
    scn: &Scenario,
    idx: usize,
    spec: &JobSpec,
) -> Result<Vec<(String, String, Command)>, RunError> {
    let torch = c
        .torch
        .as_ref()
        .ok_or_else(|| RunError::Setup("torch job on a cluster not prepared for one".into()))?;
    let first = c.plan.host(&spec.workers[0]).ok_or_else(|| {
        RunError::Setup(format!("job {}: no host {}", spec.name, spec.workers[0]))
    })?;
    let master = format!("{}:{}", first.ip, data_port(idx, 0));
    (0..spec.workers.len())
        .map(|r| {
            let cmd = torch.command(c, bins, scn, spec, r, &master)?;
            Ok((spec.workers[r].clone(), format!("w{r}"), cmd))
        })
        .collect()
}

/// Each member of a trainer job: ring ranks, or PS servers and workers.
fn trainer_commands(
    c: &EmulatedCluster,
    bins: &Binaries,
    idx: usize,
    spec: &JobSpec,
) -> Result<Vec<(String, String, Command)>, RunError> {
    let port = |member: usize| data_port(idx, member);
    let addr = |host: &str, member: usize| -> Result<String, RunError> {
        let h = c
            .plan
            .host(host)
            .ok_or_else(|| RunError::Setup(format!("job {}: no host {host}", spec.name)))?;
        Ok(format!("{}:{}", h.ip, port(member)))
    };
    // (host, role args, member index)
    let mut members: Vec<(String, Vec<String>, String)> = Vec::new();
    let (arch, world) = match spec.arch {
        Arch::Allreduce => ("allreduce", spec.workers.len()),
        Arch::Ps => ("ps", spec.workers.len() + spec.servers.len()),
    };
    match spec.arch {
        Arch::Allreduce => {
            let n = spec.workers.len();
            for (r, h) in spec.workers.iter().enumerate() {
                let next = &spec.workers[(r + 1) % n];
                members.push((
                    h.clone(),
                    vec![
                        "--kind".into(),
                        "ring".into(),
                        "--rank".into(),
                        r.to_string(),
                        "--listen".into(),
                        addr(h, r)?,
                        "--world".into(),
                        n.to_string(),
                        "--next".into(),
                        addr(next, (r + 1) % n)?,
                    ],
                    format!("w{r}"),
                ));
            }
        }
        Arch::Ps => {
            let ns = spec.servers.len();
            let servers: Vec<String> = spec
                .servers
                .iter()
                .enumerate()
                .map(|(i, h)| addr(h, i))
                .collect::<Result<_, _>>()?;
            for (i, h) in spec.servers.iter().enumerate() {
                members.push((
                    h.clone(),
                    vec![
                        "--kind".into(),
                        "ps-server".into(),
                        "--rank".into(),
                        i.to_string(),
                        "--listen".into(),
                        servers[i].clone(),
                        "--workers".into(),
                        spec.workers.len().to_string(),
                        "--num-servers".into(),
                        ns.to_string(),
                    ],
                    format!("s{i}"),
                ));
            }
            for (r, h) in spec.workers.iter().enumerate() {
                members.push((
                    h.clone(),
                    vec![
                        "--kind".into(),
                        "ps-worker".into(),
                        "--rank".into(),
                        r.to_string(),
                        "--listen".into(),
                        addr(h, ns + r)?,
                        "--servers".into(),
                        servers.join(","),
                    ],
                    format!("w{r}"),
                ));
            }
        }
    }
    let mut out = Vec::new();
    for (host, args, who) in members {
        let h = c.plan.host(&host).expect("checked by addr");
        let mut cmd = ns_command(&h.ns, &bins.trainer)?;
        cmd.args(["--job", &spec.name])
            .args(&args)
            .args([
                "--model-bytes",
                &spec.model_bytes.to_string(),
                "--iterations",
                &spec.iterations.to_string(),
            ])
            .args(["--compute", &format!("{}us", spec.compute.as_micros())]);
        match (&c.cc, &c.mlcc_name) {
            (Cc::Mlcc { .. }, Some(name)) if !c.cc.uses_progress_files() => {
                // No progress file: mlccd learns the job from its sockets.
                cmd.args(["--cc", name]);
                if c.cc.tells_total_iterations() {
                    cmd.env("MLCC_TOTAL_ITERATIONS", spec.iterations.to_string());
                }
            }
            (Cc::Mlcc { .. } | Cc::Mltcp { .. }, Some(name)) => {
                cmd.env("MLCC_JOB_ID", &spec.name)
                    .env("MLCC_JOB_ARCH", arch)
                    .env("MLCC_MODEL_BYTES", spec.model_bytes.to_string())
                    .env("MLCC_WORLD_SIZE", world.to_string())
                    .env("MLCC_TOTAL_ITERATIONS", spec.iterations.to_string())
                    .env("MLCC_SHM_DIR", c.shm_dir(&host))
                    .env("MLCC_CC", name);
            }
            (Cc::Kernel { cc, .. } | Cc::Isolated(cc), _) => {
                cmd.args(["--cc", cc]);
            }
            (Cc::Mlcc { .. } | Cc::Mltcp { .. }, None) => {
                return Err(RunError::Setup("the run's BPF CC is not loaded".into()));
            }
        }
        out.push((host, who, cmd));
    }
    Ok(out)
}

/// Starts one member, its report (stdout) and log (stderr) under the run's `logs/`.
fn spawn_member(
    c: &EmulatedCluster,
    spec: &JobSpec,
    host: String,
    who: &str,
    mut cmd: Command,
) -> Result<Member, RunError> {
    let name = format!("{}-{who}", spec.name);
    let outp = c.dir.join("logs").join(format!("{name}.json"));
    let errp = c.dir.join("logs").join(format!("{name}.log"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&outp).map_err(io_err(format!("creating {}", outp.display())))?)
        .stderr(File::create(&errp).map_err(io_err(format!("creating {}", errp.display())))?);
    let child = cmd.spawn().map_err(io_err(format!("starting {name}")))?;
    Ok(Member {
        name,
        host,
        child,
        out: outp,
        done: None,
    })
}

/// Launches every torch job now and starts the clock once all their ranks are set up
/// ([`crate::torch`] says why they start early).
fn prelaunch(
    c: &EmulatedCluster,
    bins: &Binaries,
    scn: &Scenario,
    jobs: Vec<Indexed>,
) -> Result<Vec<RunningJob>, RunError> {
    let Some(torch) = c.torch.as_ref().filter(|_| !jobs.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut running = Vec::new();
    for (idx, spec) in jobs {
        running.push(launch(c, bins, scn, idx, spec)?);
    }
    let ranks = running.iter().map(|j| j.members.len()).sum();
    torch.start_clock(ranks, || {
        running
            .iter_mut()
            .flat_map(|j| j.members.iter_mut())
            .find_map(|m| match m.child.try_wait() {
                Ok(Some(st)) => Some(format!("{} ({st}; see logs/{}.log)", m.name, m.name)),
                _ => None,
            })
    })?;
    Ok(running)
}

/// How well the learner read each job that ran without progress files, from every host's
/// mlccd log, each read once when the run is over rather than in the polling loop.
fn add_learning(c: &EmulatedCluster, results: &mut [JobResult]) {
    let Some(tau) = c.mlcc_tau else {
        return;
    };
    if results.iter().all(|r| r.progress_files) {
        return;
    }
    let mut first = BTreeMap::new();
    for h in &c.plan.hosts {
        let log = c.dir.join("logs").join(format!("mlccd-{}.log", h.name));
        first.extend(learned::first_estimates(
            &fs::read_to_string(log).unwrap_or_default(),
        ));
    }
    for r in results.iter_mut().filter(|r| !r.progress_files) {
        r.learned = Some(JobLearning::of(&r.members, &first, tau.as_secs_f64()));
    }
}

fn collect(c: &EmulatedCluster, start: Instant, mut j: RunningJob) -> JobResult {
    for m in &mut j.members {
        if m.done.is_none() {
            let _ = m.child.kill();
            let st = m.child.wait().map(|s| s.success()).unwrap_or(false);
            m.done = Some((Instant::now(), st));
        }
    }
    let end = j
        .members
        .iter()
        .filter_map(|m| m.done.map(|d| d.0))
        .max()
        .unwrap_or_else(Instant::now);
    let mut r = JobResult {
        job: j.spec.name.clone(),
        model: j.spec.model.clone(),
        arch: match (j.spec.kind, j.spec.arch) {
            (JobKind::TorchDdp, _) => "ddp".into(),
            (_, Arch::Allreduce) => "ring".into(),
            (_, Arch::Ps) => "ps".into(),
        },
        arrival_s: j.arrived.duration_since(start).as_secs_f64(),
        iterations: j.spec.iterations,
        jct_s: end.duration_since(j.arrived).as_secs_f64(),
        shift_s: 0.0,
        mean_iteration_s: 0.0,
        longest_iteration_ratio: 0.0,
        bytes_verified: 0,
        bytes_sent: 0,
        socket_cc: String::new(),
        progress_files: true,
        learned: None,
        phases: None,
        members: Vec::new(),
        ok: true,
        error: None,
        senders: Vec::new(),
    };
    let start_unix = unix_now() - start.elapsed().as_secs_f64();
    let mut iters = Vec::new();
    let mut phases = Vec::new();
    for m in &j.members {
        let ok = m.done.is_some_and(|d| d.1);
        let rep: Option<TrainerReport> = fs::read_to_string(&m.out)
            .ok()
            .and_then(|t| serde_json::from_str(t.trim()).ok());
        match (ok, rep) {
            (true, Some(mut rep)) => {
                r.senders.push(SenderSeries::from_acked(
                    &m.host, &m.name, &rep.acked, start_unix,
                ));
                r.bytes_verified += rep.bytes_verified;
                r.bytes_sent += rep.bytes_sent;
                r.socket_cc = rep.cc.clone();
                r.progress_files &= rep.progress_file;
                let worker = rep.role != "ps-server";
                let mean_iteration_s = (worker && !rep.iteration_s.is_empty())
                    .then(|| rep.iteration_s.iter().sum::<f64>() / rep.iteration_s.len() as f64);
                iters.extend(mean_iteration_s);
                phases.push(std::mem::take(&mut rep.phases_s));
                if worker {
                    let ratio = longest_over_median(&rep.iteration_s);
                    r.longest_iteration_ratio = r.longest_iteration_ratio.max(ratio);
                }
                if let Some(pid) = rep.pid {
                    r.members.push(MemberTruth {
                        pid,
                        bytes_per_iteration: rep.bytes_sent as f64
                            / f64::from(rep.iterations.max(1)),
                        mean_iteration_s,
                        iteration_ends_unix_s: if worker {
                            rep.iteration_end_unix_s.clone()
                        } else {
                            Vec::new()
                        },
                    });
                }
                if rep.iteration_s.len() != j.spec.iterations as usize {
                    r.ok = false;
                    r.error.get_or_insert(format!(
                        "{}: {} of {} iterations",
                        m.name,
                        rep.iteration_s.len(),
                        j.spec.iterations
                    ));
                }
            }
            _ => {
                r.ok = false;
                r.progress_files = false;
                let log = c.dir.join("logs").join(format!("{}.log", m.name));
                let why = fs::read_to_string(&log).unwrap_or_default();
                r.error.get_or_insert(format!(
                    "{} failed: {}",
                    m.name,
                    why.lines().last().unwrap_or("no report")
                ));
            }
        }
    }
    if r.ok && r.bytes_verified != r.bytes_sent {
        r.ok = false;
        r.error = Some(format!(
            "sent {} bytes but {} arrived verified",
            r.bytes_sent, r.bytes_verified
        ));
    }
    r.phases = IterationPhases::of_ranks(phases.iter().map(Vec::as_slice));
    r.mean_iteration_s = if iters.is_empty() {
        0.0
    } else {
        iters.iter().sum::<f64>() / iters.len() as f64
    };
    r
}

/// The longest of `iterations` over their median (0 for none): how far one iteration stood
/// out from the member's usual one.
fn longest_over_median(iterations: &[f64]) -> f64 {
    let mut sorted = iterations.to_vec();
    sorted.sort_by(f64::total_cmp);
    match (sorted.get(sorted.len() / 2), sorted.last()) {
        (Some(&median), Some(&longest)) if median > 0.0 => longest / median,
        _ => 0.0,
    }
}

/// What the cross traffic of one run got, from each iperf3 client's report (a flow still
/// running at the end reports what it moved by then).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CrossStats {
    /// Flows that reported (all that started, unless one was killed before it could).
    pub flows: u32,
    /// Of those, the ones that sent all their bytes.
    pub completed: u32,
    /// Bytes the receivers got.
    pub bytes: u64,
    /// Mean of the flows' goodput (bytes over their own duration), Mbit/s.
    pub mean_rate_mbit: f64,
}

impl CrossStats {
    /// Folds in one client's iperf3 JSON report for a flow of `requested` bytes.
    fn add(&mut self, json: &str, requested: u64) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            return;
        };
        let got = &v["end"]["sum_received"];
        let (Some(bytes), Some(secs)) = (got["bytes"].as_u64(), got["seconds"].as_f64()) else {
            return;
        };
        let n = f64::from(self.flows);
        let rate = if secs > 0.0 {
            bytes as f64 * 8e-6 / secs
        } else {
            0.0
        };
        self.mean_rate_mbit = (self.mean_rate_mbit * n + rate) / (n + 1.0);
        self.flows += 1;
        self.bytes += bytes;
        if bytes >= requested {
            self.completed += 1;
        }
    }
}

/// iperf3 flows (docs/design.md §14): every host starts one to a random other host each `every`,
/// carrying what its link sends in a time uniform in [min, max]. iperf3 serves one test at a
/// time, so each host runs one server per possible sender. Each client writes its JSON report
/// under the run's `cross/`.
struct CrossTraffic {
    spec: Option<crate::scenario::CrossTraffic>,
    servers: Vec<Child>,
    /// Running clients, each with its report file and the bytes it was asked to send.
    clients: Vec<(Child, PathBuf, u64)>,
    reports: Vec<(PathBuf, u64)>,
    dir: PathBuf,
    pids: Vec<u32>,
    next: Vec<Instant>,
    rng: u64,
    started: u32,
}

impl CrossTraffic {
    fn start(c: &EmulatedCluster, scn: &Scenario) -> Result<Self, RunError> {
        let mut ct = CrossTraffic {
            spec: scn.cross.clone(),
            servers: Vec::new(),
            clients: Vec::new(),
            reports: Vec::new(),
            dir: c.dir.join("cross"),
            pids: Vec::new(),
            next: Vec::new(),
            rng: 0,
            started: 0,
        };
        let Some(spec) = &scn.cross else {
            return Ok(ct);
        };
        fs::create_dir_all(&ct.dir).map_err(io_err(format!("creating {}", ct.dir.display())))?;
        ct.rng = spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let n = c.plan.hosts.len();
        for (ri, r) in c.plan.hosts.iter().enumerate() {
            for si in 0..n {
                if si == ri {
                    continue;
                }
                let mut cmd = ns_command(&r.ns, "iperf3")?;
                cmd.args([
                    "-s",
                    "-B",
                    &r.ip.to_string(),
                    "-p",
                    &(5200 + si).to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
                let ch = cmd
                    .spawn()
                    .map_err(io_err("starting iperf3 (apt install iperf3)"))?;
                ct.pids.push(ch.id());
                ct.servers.push(ch);
            }
        }
        let now = Instant::now();
        // Hosts start staggered over the first period.
        for i in 0..n {
            let off = spec.every.mul_f64(i as f64 / n as f64) + Duration::from_millis(500);
            ct.next.push(now + off);
        }
        Ok(ct)
    }

    fn rand(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    fn tick(&mut self, c: &EmulatedCluster, _start: Instant) -> Result<(), RunError> {
        let Some(spec) = self.spec.clone() else {
            return Ok(());
        };
        let reports = &mut self.reports;
        self.clients.retain_mut(|(ch, report, bytes)| {
            let running = matches!(ch.try_wait(), Ok(None));
            if !running {
                reports.push((report.clone(), *bytes));
            }
            running
        });
        let now = Instant::now();
        let n = c.plan.hosts.len();
        for si in 0..n {
            if now < self.next[si] {
                continue;
            }
            self.next[si] += spec.every;
            let mut ri = (self.rand() * (n - 1) as f64) as usize % (n - 1);
            if ri >= si {
                ri += 1;
            }
            let secs = spec.min.as_secs_f64() + self.rand() * (spec.max - spec.min).as_secs_f64();
            let bytes = (secs * c.plan.host_link_bits as f64 / 8.0) as u64;
            let (s, r) = (&c.plan.hosts[si], &c.plan.hosts[ri]);
            let report = self.dir.join(format!("{}.json", self.started));
            let mut cmd = ns_command(&s.ns, "iperf3")?;
            cmd.args([
                "-c",
                &r.ip.to_string(),
                "-p",
                &(5200 + si).to_string(),
                "-n",
                &bytes.to_string(),
                "-C",
                "cubic",
                "-J",
                "--logfile",
            ])
            .arg(&report)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
            let ch = cmd.spawn().map_err(io_err("starting iperf3"))?;
            self.pids.push(ch.id());
            self.clients.push((ch, report, bytes));
            self.started += 1;
        }
        Ok(())
    }

    /// Ends the cross traffic: a client still running is interrupted so that it reports what
    /// it moved. Returns the flows started and what they got.
    fn stop(mut self) -> (u32, Option<CrossStats>) {
        for (ch, report, bytes) in self.clients.drain(..) {
            interrupt(ch);
            self.reports.push((report, bytes));
        }
        for ch in self.servers.iter_mut() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
        let stats = self.spec.as_ref().map(|_| {
            let mut st = CrossStats::default();
            for (report, bytes) in &self.reports {
                if let Ok(json) = fs::read_to_string(report) {
                    st.add(&json, *bytes);
                }
            }
            st
        });
        (self.started, stats)
    }
}

/// SIGINT, so iperf3 writes its report; killed if it has not exited within a second.
fn interrupt(mut ch: Child) {
    signal_child(&ch, Signal::INT);
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if matches!(ch.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = ch.kill();
    let _ = ch.wait();
}

#[cfg(test)]
mod cross_tests {
    use super::CrossStats;

    #[test]
    fn cross_stats_count_what_each_flow_got() {
        let mut st = CrossStats::default();
        let report = |bytes: u64, secs: f64| {
            format!(r#"{{"end": {{"sum_received": {{"bytes": {bytes}, "seconds": {secs}}}}}}}"#)
        };
        st.add(&report(1_000_000, 0.08), 1_000_000);
        st.add(&report(500_000, 0.1), 1_000_000);
        st.add("not json", 1);
        st.add(r#"{"error": "unable to connect"}"#, 1);
        assert_eq!((st.flows, st.completed, st.bytes), (2, 1, 1_500_000));
        // 100 and 40 Mbit/s.
        assert!(
            (st.mean_rate_mbit - 70.0).abs() < 1e-9,
            "{}",
            st.mean_rate_mbit
        );
    }
}

/// Runs the scenario once per CC; clusters are brought up and removed one at a time.
pub fn run_scenario(
    scn: &Scenario,
    ccs: &[Cc],
    bins: &Binaries,
    out: &Path,
    mut tick: impl FnMut(usize, usize, &str),
) -> Result<Vec<CcRun>, RunError> {
    if crate::torch::has_torch_jobs(scn) {
        bins.torch.check()?;
    }
    let mut runs = Vec::new();
    for cc in ccs {
        if let Cc::Isolated(k) = cc {
            runs.push(run_isolated(scn, k, bins, out, &mut tick)?);
            continue;
        }
        let run = run_id();
        let dir = out.join(cc.file_name());
        let _ = fs::remove_dir_all(&dir);
        let shifts = match cc {
            Cc::Kernel { cassini: true, .. } => crate::cassini::shifts(scn)
                .map_err(|e| RunError::Setup(format!("Cassini's shifts: {e}")))?,
            _ => Vec::new(),
        };
        let shifted;
        let run_scn = if shifts.is_empty() {
            scn
        } else {
            shifted = crate::cassini::shifted(scn, &shifts);
            &shifted
        };
        let mut c = EmulatedCluster::up(run_scn, cc.clone(), bins, &dir, &run)?;
        let r = run_jobs(&mut c, run_scn, bins, &mut tick);
        c.down();
        let mut r = r?;
        // A shifted job arrived when the scenario says; its wait is part of its JCT.
        for j in &mut r.jobs {
            let shift = scn.jobs.iter().zip(&shifts).find(|(s, _)| s.name == j.job);
            if let Some((_, d)) = shift {
                j.arrival_s -= d.as_secs_f64();
                j.jct_s += d.as_secs_f64();
                j.shift_s = d.as_secs_f64();
            }
        }
        runs.push(r);
    }
    Ok(runs)
}

/// [`Cc::Isolated`]: every job alone, one after the other, each on a cluster of its own.
fn run_isolated(
    scn: &Scenario,
    kernel: &str,
    bins: &Binaries,
    out: &Path,
    tick: &mut impl FnMut(usize, usize, &str),
) -> Result<CcRun, RunError> {
    let start = Instant::now();
    let mut jobs = Vec::new();
    let mut pids = Vec::new();
    let dir = out.join("isolated");
    let _ = fs::remove_dir_all(&dir);
    for (i, spec) in scn.jobs.iter().enumerate() {
        let mut one = scn.clone();
        one.jobs = vec![JobSpec {
            arrival: Duration::ZERO,
            ..spec.clone()
        }];
        one.cross = None;
        one.faults.clear();
        let mut c = EmulatedCluster::up(
            &one,
            Cc::kernel(kernel),
            bins,
            &dir.join(&spec.name),
            &run_id(),
        )?;
        let r = run_jobs(&mut c, &one, bins, |done, _, _| {
            tick(i + done, scn.jobs.len(), "isolated")
        });
        c.down();
        let r = r?;
        pids.extend(r.pids);
        for mut j in r.jobs {
            j.arrival_s = spec.arrival.as_secs_f64();
            jobs.push(j);
        }
    }
    Ok(CcRun {
        cc: "isolated".into(),
        jobs,
        wall_s: start.elapsed().as_secs_f64(),
        cross_flows: 0,
        cross: None,
        bandwidth: Vec::new(),
        faults: Vec::new(),
        daemons_cpu_s: None,
        pids,
    })
}

/// User and system CPU time (s) process `pid` has used, from `/proc/<pid>/stat`.
fn cpu_s(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_s_of_stat(&stat)
}

/// utime + stime (fields 14 and 15, in clock ticks) of a `/proc/<pid>/stat` line, in seconds.
/// The command name (field 2, in parentheses) may hold spaces and parentheses itself, so the
/// fields are counted from its last `)`.
fn cpu_s_of_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| (utime + stime) as f64 / hz as f64)
}

/// Objects a finished run might have left: `ip netns`, bpffs pins, shm dirs, and any of the
/// processes it started still alive.
pub fn check_clean(pids: &[u32]) -> Result<(), String> {
    let left = leftovers();
    if !left.is_empty() {
        return Err(format!("left behind: {}", left.join(", ")));
    }
    let alive: Vec<String> = pids
        .iter()
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
                })
                .unwrap_or(false)
        })
        .map(|p| p.to_string())
        .collect();
    if !alive.is_empty() {
        return Err(format!("processes left: {}", alive.join(", ")));
    }
    Ok(())
}

impl EmulatedCluster {
    /// Leaves the cluster running after this process exits (`mlcc-testbed up`); `down` removes it.
    pub fn keep(mut self) {
        self.removed = true;
        for d in std::mem::take(&mut self.daemons) {
            std::mem::forget(d.child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_cpu_time_is_read_past_a_command_name_with_spaces_and_parentheses() {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let stat = "4242 (mlccd (h1) x) S 1 4242 4242 0 -1 4194560 1523 0 0 0 \
                    66 17 0 0 10 -10 3 0 1234 0 0";
        let cpu = cpu_s_of_stat(stat).unwrap();
        assert!((cpu - 83.0 / hz).abs() < 1e-9, "{cpu}");
        assert_eq!(cpu_s_of_stat("4242 (torn"), None);
        assert_eq!(cpu_s_of_stat("4242 (x) S 1 2"), None);
        // This process's own stat reads, and shows the CPU it spends (a tick at most later).
        let me = std::process::id();
        let start = Instant::now();
        while cpu_s(me).unwrap() == 0.0 && start.elapsed() < Duration::from_secs(5) {
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        let mine = cpu_s(me).unwrap();
        assert!(mine > 0.0 && mine < 1e6, "{mine}");
    }

    #[test]
    fn one_stalled_iteration_stands_out_from_the_median_and_none_is_zero() {
        // torch-two-jobs, a stalled run: eleven iterations of about 0.6 s and one of 5.3 s.
        let mut stalled = vec![0.6; 11];
        stalled.insert(3, 5.3);
        let r = longest_over_median(&stalled);
        assert!((r - 5.3 / 0.6).abs() < 1e-9, "{r}");
        assert!(r > crate::report::STALL_RATIO);
        let steady = [0.61, 0.75, 0.68, 0.72, 0.75, 0.67, 0.6, 0.54, 0.55, 0.48];
        assert!(longest_over_median(&steady) < 2.0);
        assert_eq!(longest_over_median(&[]), 0.0);
        assert_eq!(longest_over_median(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn ccs_parse_kernel_mlcc_variants_and_isolated() {
        assert_eq!(Cc::parse("bbr"), Ok(Cc::kernel("bbr")));
        assert_eq!(
            Cc::parse("cubic/rto_floor=10ms"),
            Ok(Cc::Kernel {
                name: "cubic/rto_floor=10ms".into(),
                cc: "cubic".into(),
                rto_floor: Some(Duration::from_millis(10)),
                cpu_load: None,
                cassini: false,
            })
        );
        assert_eq!(
            Cc::parse("cassini/bbr"),
            Ok(Cc::Kernel {
                name: "cassini/bbr".into(),
                cc: "bbr".into(),
                rto_floor: None,
                cpu_load: None,
                cassini: true,
            })
        );
        assert!(matches!(
            Cc::parse("cassini"),
            Ok(Cc::Kernel { cc, cassini: true, .. }) if cc == "cubic"
        ));
        assert!(Cc::parse("cassini/mlcc").is_err());
        assert!(Cc::parse("isolated/mlcc").is_err());
        assert!(Cc::parse("cassini/isolated").is_err());
        assert!(Cc::parse("cubic/eta=1").is_err());
        assert!(Cc::parse("cubic/rto_floor=1s").is_err());
        let loaded = Cc::parse("bbr/cpu_load=0.6").unwrap();
        assert_eq!(loaded.name(), "bbr/cpu_load=0.6");
        assert_eq!(loaded.cpu_load(), Some(CpuLoad::parse("0.6").unwrap()));
        assert_eq!(Cc::kernel("bbr").cpu_load(), None);
        assert!(Cc::parse("bbr/cpu_load=0").is_err());
        assert!(Cc::parse("mlcc/cpu_load=0.6").is_err());
        assert!(Cc::parse("cassini/bbr/cpu_load=0.6").is_err());
        assert!(Cc::parse("mlcc/rto_floor=soon").is_err());
        match Cc::parse("mlcc/rto_floor=kernel") {
            Ok(Cc::Mlcc {
                rto_floor, args, ..
            }) => {
                assert_eq!(rto_floor, mlcc_bpf::RtoFloor::KERNEL);
                assert!(args.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let m = Cc::parse("mlcc/eta=1/rank=job-bytes/mode=all-others/policy=paper/flush-tail=off")
            .unwrap();
        assert_eq!(
            m,
            Cc::Mlcc {
                name: "mlcc/eta=1/rank=job-bytes/mode=all-others/policy=paper/flush-tail=off"
                    .into(),
                args: [
                    "--eta",
                    "1",
                    "--precedence",
                    "job-bytes",
                    "--feedback-mode",
                    "all-others",
                    "--policy",
                    "paper",
                    "--rule",
                    "flush-tail=off"
                ]
                .map(String::from)
                .to_vec(),
                rto_floor: mlcc_bpf::RtoFloor::default(),
                fallback: mlcc_bpf::Fallback::Cubic,
                tau: None,
                horizon: None,
                progress: Progress::Files,
            }
        );
        match Cc::parse("mlcc/fallback=reno") {
            Ok(Cc::Mlcc { fallback, args, .. }) => {
                assert_eq!(fallback, mlcc_bpf::Fallback::Reno);
                assert!(args.is_empty(), "{args:?}");
            }
            other => panic!("{other:?}"),
        }
        match Cc::parse("mlcc/fallback=bbr") {
            Ok(Cc::Mlcc { fallback, .. }) => assert_eq!(fallback, mlcc_bpf::Fallback::Bbr),
            other => panic!("{other:?}"),
        }
        assert!(Cc::parse("mlcc/fallback=vegas").is_err());
        match Cc::parse("mlcc/order_expiry=3") {
            Ok(Cc::Mlcc { args, .. }) => assert_eq!(args, ["--order-expiry", "3"]),
            other => panic!("{other:?}"),
        }
        match Cc::parse("mlcc/link_headroom=0.1") {
            Ok(Cc::Mlcc { args, .. }) => assert_eq!(args, ["--link-headroom", "0.1"]),
            other => panic!("{other:?}"),
        }
        match Cc::parse("mlcc/progress=off/learn=off") {
            Ok(Cc::Mlcc { progress, args, .. }) => {
                assert_eq!(progress, Progress::Learned);
                assert_eq!(args, ["--learn", "off"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(Cc::parse("mlcc/progress=maybe").is_err());
        let told = Cc::parse("mlcc/progress=told").unwrap();
        assert!(told.tells_total_iterations() && !told.uses_progress_files());
        assert!(
            !Cc::parse("mlcc/progress=off")
                .unwrap()
                .tells_total_iterations()
        );
        assert!(!Cc::parse("mlcc").unwrap().tells_total_iterations());
        match Cc::parse("mlcc/tau=30ms/horizon=20") {
            Ok(Cc::Mlcc { tau, horizon, .. }) => {
                assert_eq!((tau, horizon), (Some(Duration::from_millis(30)), Some(20)));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cc::parse("mlcc/tau=30").is_err());
        assert!(Cc::parse("mlcc/horizon=ten").is_err());
        assert_eq!(
            m.file_name(),
            "mlcc+eta=1+rank=job-bytes+mode=all-others+policy=paper+flush-tail=off"
        );
        assert!(m.is_mlcc() && Cc::parse("mlcc").unwrap().is_mlcc());
        assert_eq!(Cc::parse("isolated"), Ok(Cc::Isolated("cubic".into())));
        assert_eq!(Cc::parse("isolated/bbr").unwrap().name(), "isolated");
        let both = Cc::parse_list(&["cubic", "isolated", "isolated/bbr"]).unwrap_err();
        assert!(both.contains("isolated and isolated/bbr"), "{both}");
        assert_eq!(
            Cc::parse_list(&["bbr", "isolated/bbr", "bbr"])
                .unwrap()
                .len(),
            3
        );
        use mlcc_bpf::mltcp::Base;
        for (spec, base) in [
            ("mltcp", Base::Reno),
            ("mltcp/reno", Base::Reno),
            ("mltcp/cubic", Base::Cubic),
        ] {
            let mltcp = Cc::parse(spec).unwrap();
            assert_eq!(
                mltcp,
                Cc::Mltcp {
                    name: spec.into(),
                    base
                }
            );
            assert!(!mltcp.is_mlcc() && mltcp.uses_progress_files());
        }
        assert_eq!(Cc::parse("mltcp/cubic").unwrap().file_name(), "mltcp+cubic");
        assert!(Cc::parse("mlcc").unwrap().uses_progress_files());
        assert!(
            !Cc::parse("mlcc/progress=off")
                .unwrap()
                .uses_progress_files()
        );
        assert!(!Cc::parse("cubic").unwrap().uses_progress_files());
        for bad in [
            "mlcc/eta",
            "mlcc/=1",
            "isolated/bbr/x",
            "cubic/x",
            "mltcp/slope=2",
            "mltcp/bbr",
            "mltcp/",
            "mltcp/cubic/reno",
            "cubic/mltcp",
            "",
            "a b",
        ] {
            assert!(Cc::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// One F for MLTCP everywhere: the simulator's fluid model and the testbed's BPF CC.
    #[test]
    fn mltcp_constants_agree_between_the_simulator_and_the_bpf_cc() {
        use mlcc_bpf::mltcp as bpf;
        use mlcc_sim::policy::mltcp as sim;
        assert_eq!(sim::SLOPE, bpf::SLOPE);
        assert_eq!(sim::INTERCEPT, bpf::INTERCEPT);
        for i in 0..=20 {
            let r = f64::from(i) / 20.0;
            let kernel = f64::from(bpf::f_milli(bpf::ratio_ppm(r))) / f64::from(bpf::F_ONE);
            let fluid = sim::aggressiveness(r * 1e6, 1e6);
            assert!(
                (kernel - fluid).abs() <= 1e-3,
                "r = {r}: {kernel} vs {fluid}"
            );
        }
    }
}
