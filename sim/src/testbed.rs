//! Scenario files of the testbed (`tests/scenarios/*.toml`): the cluster, the jobs (a trace
//! file), cross traffic and the slot parameters. `mlcc-testbed` runs one once per congestion
//! control on real TCP; `mlcc-sim run --testbed <name>` simulates the same jobs on the same hosts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mlcc_core::job::Arch;
use mlcc_core::units::{parse_duration, parse_rate};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {reason}")]
    Bad { path: PathBuf, reason: String },
}

fn bad(path: &Path, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Bad {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "one")]
    racks: u32,
    hosts_per_rack: u32,
    #[serde(default = "gbit")]
    host_link: String,
    inter_switch_link: Option<String>,
    /// Whether mlcc runs a switch emulator per switch. Without (cloud mode, paper §VI-H), the
    /// switches are unknown to mlccd: each host schedules what it owns, its uplink.
    #[serde(default = "yes")]
    switch_emulators: bool,
    /// Model bytes × this: the paper's models on faster hosts scaled to these links.
    #[serde(default = "one_f")]
    bytes_scale: f64,
    #[serde(default = "one_f")]
    compute_scale: f64,
    /// Iterations × this for `--quick` (the README's short demo and the CI test).
    #[serde(default = "quick")]
    quick_scale: f64,
    #[serde(default = "tau")]
    tau: String,
    #[serde(default = "horizon")]
    horizon: u32,
    #[serde(default = "timeout")]
    timeout: String,
    /// The testbed's TBF bucket per link, as line time (`"2ms"`): see [`DEFAULT_LINK_BURST`].
    link_burst: Option<String>,
    link_classes: Option<u8>,
    trace: String,
    cross_traffic: Option<RawCross>,
    #[serde(default)]
    fault: Vec<RawFault>,
    /// Random loss of data segments on host links, both directions: `"1%"` or `"0.01"`.
    loss: Option<String>,
    /// The hosts whose links lose (default: every host).
    loss_hosts: Option<Vec<String>>,
    /// Seed of the loss program's random source.
    #[serde(default = "seed")]
    loss_seed: u64,
    /// How the trace's `torch-ddp` jobs run.
    torch: Option<RawTorch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTorch {
    layers: Option<u32>,
    batch: Option<u32>,
    backend: Option<String>,
    bucket_mb: Option<f64>,
    threads: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    at: String,
    kind: String,
    target: String,
    #[serde(rename = "for")]
    lasts: String,
    /// skew-mlccd only: how far the daemon's clock is set off (ms, negative: behind).
    offset_ms: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCross {
    every: String,
    min: String,
    max: String,
    #[serde(default = "seed")]
    seed: u64,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn one_f() -> f64 {
    1.0
}
fn quick() -> f64 {
    0.3
}
fn gbit() -> String {
    "1Gbit".into()
}
/// mlccd's slots unless the scenario says otherwise (`tau = "60ms"` for the paper's).
fn tau() -> String {
    format!("{}ms", mlcc_core::SlotConfig::mlccd().tau().as_millis())
}
fn horizon() -> u32 {
    mlcc_core::SlotConfig::mlccd().horizon() as u32
}
fn timeout() -> String {
    "15m".into()
}

fn seed() -> u64 {
    1
}

/// What a scheduled fault does (docs/design.md §11's degraded modes, tried for real).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL a switch's mlcc-switchd; started again (empty tables) after `for`. mlcc only.
    KillSwitchd,
    /// SIGKILL a host's mlccd; started again after `for` (it re-adopts the pinned datapath and
    /// the sockets, which meanwhile ran on their expired orders' fallback). mlcc only.
    KillMlccd,
    /// SIGSTOP a host's mlccd for `for`, then SIGCONT: a hung peer, unreachable to the others
    /// while its host's traffic goes on under the datapath's expired orders. mlcc only.
    StopMlccd,
    /// The host's link down for `for`, then up (a flap every CC sees alike).
    LinkDown,
    /// SIGKILL a host's mlccd and start it again with its clock `offset_ms` off
    /// (`--clock-offset-ms`); after `for`, again with the true clock. mlcc only.
    SkewMlccd,
}

impl FaultKind {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "kill-switchd" => FaultKind::KillSwitchd,
            "kill-mlccd" => FaultKind::KillMlccd,
            "stop-mlccd" => FaultKind::StopMlccd,
            "link-down" => FaultKind::LinkDown,
            "skew-mlccd" => FaultKind::SkewMlccd,
            _ => return None,
        })
    }
}

/// `[[fault]]`: at `at` after the run starts, `kind` hits `target` (a switch `tor<rack>` or a
/// host `h<n>`) for `for`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Fault {
    pub at: Duration,
    pub kind: FaultKind,
    pub target: String,
    pub lasts: Duration,
    /// skew-mlccd: the clock offset (ms); 0 otherwise.
    pub offset_ms: i64,
}

/// Random loss on host links (`loss`, `loss_hosts`, `loss_seed`): each data segment crossing
/// a lossy host link, in either direction, is dropped with `probability`.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    pub probability: f64,
    /// Host names (`h<n>`), in host order.
    pub hosts: Vec<String>,
    pub seed: u64,
}

/// `h1..=h<n>`, the hosts of a scenario in host order.
fn host_names(n: u32) -> Vec<String> {
    (1..=n).map(|i| format!("h{i}")).collect()
}

/// A loss rate: `"1%"`, `"0.5 %"` or a fraction `"0.01"`, within 0..=1.
pub fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a loss rate (e.g. \"1%\" or \"0.01\")"))?;
    let p = v * scale;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s:?} is not within 0..=100 %"))
    }
}

#[derive(Clone, Debug)]
pub struct CrossTraffic {
    /// Each host starts one flow this often, to a random other host...
    pub every: Duration,
    /// ...carrying what the host link sends in a duration uniform in [min, max].
    pub min: Duration,
    pub max: Duration,
    pub seed: u64,
}

#[derive(Clone, Debug)]
pub struct JobSpec {
    pub name: String,
    pub model: String,
    pub arch: Arch,
    pub arrival: Duration,
    pub iterations: u32,
    pub model_bytes: u64,
    pub compute: Duration,
    /// PS servers' hosts (empty for ring jobs) and workers' hosts, in rank order.
    pub servers: Vec<String>,
    pub workers: Vec<String>,
    pub kind: JobKind,
}

/// What runs a job's members on the testbed (the trace's optional 7th column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// `mlcc-trainer`: ring or PS over its own TCP connections, compute as a sleep, every
    /// byte verified.
    Trainer,
    /// A PyTorch DDP job (`python3 -m mlcc.torch.job`): the model's gradient bytes in wide
    /// linear layers, all-reduced by the backend's ring, progress from mlcc's comm hook. Always
    /// all-reduce, whatever the model's architecture.
    TorchDdp,
}

impl JobKind {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "trainer" => Some(Self::Trainer),
            "torch-ddp" => Some(Self::TorchDdp),
            _ => None,
        }
    }
}

/// How a scenario's `torch-ddp` jobs run (its `[torch]` table).
#[derive(Clone, Debug, PartialEq)]
pub struct TorchConfig {
    /// Square linear layers holding the model's bytes.
    pub layers: u32,
    /// Samples per rank and step.
    pub batch: u32,
    /// `gloo` here; `nccl` needs a GPU per rank.
    pub backend: String,
    /// DDP's `bucket_cap_mb`.
    pub bucket_mb: f64,
    /// PyTorch intra-op threads per rank.
    pub threads: u32,
}

impl Default for TorchConfig {
    fn default() -> Self {
        Self {
            layers: 4,
            batch: 8,
            backend: "gloo".into(),
            bucket_mb: 25.0,
            threads: 1,
        }
    }
}

impl TorchConfig {
    fn from_raw(raw: Option<&RawTorch>) -> Result<Self, String> {
        let d = Self::default();
        let Some(r) = raw else {
            return Ok(d);
        };
        let c = Self {
            layers: r.layers.unwrap_or(d.layers),
            batch: r.batch.unwrap_or(d.batch),
            backend: r.backend.clone().unwrap_or(d.backend),
            bucket_mb: r.bucket_mb.unwrap_or(d.bucket_mb),
            threads: r.threads.unwrap_or(d.threads),
        };
        if c.layers == 0 || c.batch == 0 || c.threads == 0 {
            return Err("torch: layers, batch and threads must be at least 1".into());
        }
        if !(c.bucket_mb > 0.0 && c.bucket_mb.is_finite()) {
            return Err("torch: bucket_mb must be above zero".into());
        }
        if c.backend != "gloo" && c.backend != "nccl" {
            return Err(format!(
                "torch: backend {:?}, expected gloo or nccl",
                c.backend
            ));
        }
        Ok(c)
    }
}

/// The token bucket of every link the testbed emulates (TBF `burst`), as line time: 2 ms.
///
/// A bucket lets a sender that was idle send that much line time at once, faster than the
/// link: a physical port has none, so the smaller the more faithful, as long as the emulation
/// still carries the link's rate when the host's timers run late. At the classic rate / HZ
/// (4 ms here) an unpaced sender banked up to 4 ms of every idle gap: cubic moved a ring step
/// after the compute phase at 123-127 MB/s on a link whose payload rate is 119.55 MB/s, and two
/// co-located rings under cubic ran as if alone (testbed `micro-two-jobs`, 8.31 s against 8.23
/// isolated). At 2 ms a steady step still takes the line time it takes at 4 ms (61.3 ms for
/// 7.32 MB); at 1 ms it does not always under load (61.3-61.5 ms). The simulator's links bank
/// nothing (docs/notes/2026-11-26-testbed-link-bucket.md).
pub const DEFAULT_LINK_BURST: Duration = Duration::from_millis(2);

/// The fill classes every testbed port serves beneath its default class by default (what a
/// switch with 8 strict-priority queues that trusts DSCP offers): unmarked traffic meets the
/// port TBF alone would be.
pub const DEFAULT_LINK_CLASSES: u8 = mlcc_core::host::MAX_FILL_CLASSES;

/// A port serves at most [`mlcc_core::host::MAX_FILL_CLASSES`] fill classes.
pub fn check_link_classes(n: u8) -> Result<u8, String> {
    if n > mlcc_core::host::MAX_FILL_CLASSES {
        Err(format!(
            "{n} is more than {} fill classes",
            mlcc_core::host::MAX_FILL_CLASSES
        ))
    } else {
        Ok(n)
    }
}

/// A link bucket must hold something: at zero TBF would never send.
pub fn check_link_burst(d: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        Err("must be above zero".into())
    } else {
        Ok(d)
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub racks: u32,
    pub hosts_per_rack: u32,
    /// Bits per second.
    pub host_link_bits: u64,
    pub inter_switch_bits: Option<u64>,
    /// mlcc starts `mlcc-switchd` per switch (false: cloud mode, host-owned links only).
    pub switch_emulators: bool,
    pub tau: Duration,
    pub horizon: u32,
    pub timeout: Duration,
    pub quick_scale: f64,
    pub jobs: Vec<JobSpec>,
    pub cross: Option<CrossTraffic>,
    pub faults: Vec<Fault>,
    pub loss: Option<Loss>,
    /// The testbed's TBF bucket per link, as line time ([`DEFAULT_LINK_BURST`]); the
    /// simulator's links have none.
    pub link_burst: Duration,
    /// Fill classes each testbed port serves beneath its default class
    /// ([`DEFAULT_LINK_CLASSES`]; 0: TBF alone); the simulator's links serve them always.
    pub link_classes: u8,
    /// How its `torch-ddp` jobs run.
    pub torch: TorchConfig,
}

fn dur(path: &Path, what: &str, s: &str) -> Result<Duration, ScenarioError> {
    parse_duration(s).map_err(|e| bad(path, format!("{what}: {e}")))
}

fn bits(path: &Path, what: &str, s: &str) -> Result<u64, ScenarioError> {
    let r = parse_rate(s).map_err(|e| bad(path, format!("{what}: {e}")))?;
    Ok((r.0 * 8.0).round() as u64)
}

impl Scenario {
    /// A scenario by name (`tests/scenarios/<name>.toml`) or by path.
    pub fn find(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        let p = Path::new(name_or_path);
        let path = if p.exists() {
            p.to_path_buf()
        } else {
            scenarios_dir().join(format!("{name_or_path}.toml"))
        };
        Self::load(&path)
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
        let raw: RawScenario = toml::from_str(&text).map_err(|e| bad(path, e.to_string()))?;
        if raw.racks == 0 || raw.racks > 2 {
            return Err(bad(path, "racks must be 1 or 2"));
        }
        if raw.hosts_per_rack == 0 || raw.racks * raw.hosts_per_rack > 64 {
            return Err(bad(path, "1..=64 hosts in all"));
        }
        if raw.racks == 2 && raw.inter_switch_link.is_none() {
            return Err(bad(path, "two racks need inter_switch_link"));
        }
        if !(raw.bytes_scale > 0.0 && raw.compute_scale >= 0.0 && raw.quick_scale > 0.0) {
            return Err(bad(
                path,
                "bytes_scale and quick_scale must be > 0, compute_scale >= 0",
            ));
        }
        let cross = match &raw.cross_traffic {
            None => None,
            Some(c) => {
                let c = CrossTraffic {
                    every: dur(path, "cross_traffic.every", &c.every)?,
                    min: dur(path, "cross_traffic.min", &c.min)?,
                    max: dur(path, "cross_traffic.max", &c.max)?,
                    seed: c.seed,
                };
                if c.every.is_zero() || c.min > c.max {
                    return Err(bad(path, "cross_traffic: every > 0 and min <= max"));
                }
                Some(c)
            }
        };
        let hosts = raw.racks * raw.hosts_per_rack;
        let mut faults = Vec::new();
        for (i, f) in raw.fault.iter().enumerate() {
            let what = |field: &str| format!("fault {}: {field}", i + 1);
            let kind = FaultKind::parse(&f.kind).ok_or_else(|| {
                bad(
                    path,
                    format!(
                        "{}: {:?}, expected kill-switchd, kill-mlccd, stop-mlccd, skew-mlccd or link-down",
                        what("kind"),
                        f.kind
                    ),
                )
            })?;
            let target_ok = match kind {
                FaultKind::KillSwitchd => f
                    .target
                    .strip_prefix("tor")
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| (1..=raw.racks).contains(&n)),
                FaultKind::KillMlccd
                | FaultKind::StopMlccd
                | FaultKind::SkewMlccd
                | FaultKind::LinkDown => f
                    .target
                    .strip_prefix('h')
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| (1..=hosts).contains(&n)),
            };
            if !target_ok {
                return Err(bad(
                    path,
                    format!(
                        "{}: {:?} is not a {} of this scenario",
                        what("target"),
                        f.target,
                        if kind == FaultKind::KillSwitchd {
                            "switch (tor<rack>)"
                        } else {
                            "host (h<n>)"
                        }
                    ),
                ));
            }
            let offset_ms = match (kind, f.offset_ms) {
                (FaultKind::SkewMlccd, Some(ms)) if ms != 0 && ms.abs() <= 3_600_000 => ms,
                (FaultKind::SkewMlccd, _) => {
                    return Err(bad(
                        path,
                        format!(
                            "{}: skew-mlccd needs a non-zero offset_ms within an hour",
                            what("offset_ms")
                        ),
                    ));
                }
                (_, None) => 0,
                (_, Some(_)) => {
                    return Err(bad(
                        path,
                        format!("{}: only skew-mlccd takes one", what("offset_ms")),
                    ));
                }
            };
            faults.push(Fault {
                at: dur(path, &what("at"), &f.at)?,
                kind,
                target: f.target.clone(),
                lasts: dur(path, &what("for"), &f.lasts)?,
                offset_ms,
            });
        }
        faults.sort_by_key(|f| f.at);
        let loss = match &raw.loss {
            None => {
                if raw.loss_hosts.is_some() {
                    return Err(bad(path, "loss_hosts without loss"));
                }
                None
            }
            Some(l) => {
                let probability = parse_loss(l).map_err(|e| bad(path, format!("loss: {e}")))?;
                let all = host_names(hosts);
                let chosen = match &raw.loss_hosts {
                    None => all,
                    Some(list) => {
                        if let Some(h) = list.iter().find(|h| !all.contains(h)) {
                            return Err(bad(
                                path,
                                format!("loss_hosts: {h:?} is not a host of this scenario"),
                            ));
                        }
                        all.into_iter().filter(|h| list.contains(h)).collect()
                    }
                };
                Some(Loss {
                    probability,
                    hosts: chosen,
                    seed: raw.loss_seed,
                })
            }
        };
        let trace_path = path.parent().unwrap_or(Path::new(".")).join(&raw.trace);
        let jobs = load_trace(&trace_path, raw.bytes_scale, raw.compute_scale, hosts)?;
        let torch = TorchConfig::from_raw(raw.torch.as_ref()).map_err(|e| bad(path, e))?;
        if loss.is_some() && jobs.iter().any(|j| j.kind == JobKind::TorchDdp) {
            // The loss program drops only the trainers' data ports; Gloo's are ephemeral.
            return Err(bad(
                path,
                "loss applies to trainer jobs only, not torch-ddp ones",
            ));
        }
        Ok(Scenario {
            name: raw.name,
            description: raw.description,
            racks: raw.racks,
            hosts_per_rack: raw.hosts_per_rack,
            host_link_bits: bits(path, "host_link", &raw.host_link)?,
            inter_switch_bits: raw
                .inter_switch_link
                .as_deref()
                .map(|s| bits(path, "inter_switch_link", s))
                .transpose()?,
            switch_emulators: raw.switch_emulators,
            tau: dur(path, "tau", &raw.tau)?,
            horizon: raw.horizon,
            timeout: dur(path, "timeout", &raw.timeout)?,
            quick_scale: raw.quick_scale,
            jobs,
            cross,
            faults,
            loss,
            link_burst: match raw.link_burst.as_deref() {
                Some(b) => check_link_burst(dur(path, "link_burst", b)?)
                    .map_err(|e| bad(path, format!("link_burst: {e}")))?,
                None => DEFAULT_LINK_BURST,
            },
            link_classes: match raw.link_classes {
                Some(n) => {
                    check_link_classes(n).map_err(|e| bad(path, format!("link_classes: {e}")))?
                }
                None => DEFAULT_LINK_CLASSES,
            },
            torch,
        })
    }

    pub fn hosts(&self) -> u32 {
        self.racks * self.hosts_per_rack
    }

    /// Every host link loses `probability` of its data segments (none at 0), from the
    /// scenario's loss seed (1 if it had none).
    pub fn set_loss(&mut self, probability: f64) {
        let seed = self.loss.as_ref().map_or(1, |l| l.seed);
        self.loss = (probability > 0.0).then(|| Loss {
            probability,
            hosts: host_names(self.hosts()),
            seed,
        });
    }

    /// The `--quick` version: fewer iterations, same arrivals and placement.
    pub fn quick(mut self) -> Self {
        for j in &mut self.jobs {
            j.iterations = ((f64::from(j.iterations) * self.quick_scale).round() as u32).max(2);
        }
        self
    }
}

/// TCP payload per Ethernet frame of a full segment: (1448, 1514) at MTU 1500 with timestamps.
/// The testbed shapes frames; flows move payload, so links carry this share of their rate.
pub const PAYLOAD_PER_FRAME: (u64, u64) = (1448, 1514);

/// Payload bytes/s of a link shaped to `bits` per second.
pub fn payload_rate(bits: u64) -> mlcc_core::BytesPerSec {
    mlcc_core::BytesPerSec((bits * PAYLOAD_PER_FRAME.0 / PAYLOAD_PER_FRAME.1) as f64 / 8.0)
}

impl Scenario {
    /// The cluster as mlccd sees it: hosts `h1..` under switches `tor1..` (one per rack), host
    /// links and the inter-switch link at their payload rates.
    pub fn topology(&self) -> Result<mlcc_core::topology::Topology, String> {
        let mut b = mlcc_core::topology::TopologyBuilder::new();
        for r in 1..=self.racks {
            b.add_switch(format!("tor{r}"), 0, None);
        }
        for h in 1..=self.hosts() {
            let rack = (h - 1) / self.hosts_per_rack + 1;
            b.add_host(format!("h{h}"), None, Some(format!("tor{rack}")));
            b.add_duplex(
                format!("h{h}"),
                format!("tor{rack}"),
                payload_rate(self.host_link_bits),
            );
        }
        if let (2, Some(bits)) = (self.racks, self.inter_switch_bits) {
            b.add_duplex("tor1", "tor2", payload_rate(bits));
        }
        b.build().map_err(|e| e.to_string())
    }

    /// The slots mlccd runs the scenario with.
    pub fn slots(&self) -> Result<mlcc_core::SlotConfig, String> {
        mlcc_core::SlotConfig::new(self.tau, self.horizon as usize).map_err(|e| e.to_string())
    }

    /// How the simulator runs the scenario on `topo` (its [`Self::topology`]): its slots, jobs
    /// on their pinned hosts, switch tables as the scenario has them, one blob per iteration,
    /// quiet, stopped after `max_slots`.
    pub fn run_config<'a>(
        &self,
        topo: &'a mlcc_core::topology::Topology,
        routes: &'a mlcc_core::routing::Routes,
        max_slots: u64,
    ) -> Result<crate::run::RunConfig<'a>, String> {
        Ok(crate::run::RunConfig {
            topo,
            routes,
            slots: self.slots()?,
            placement: crate::placement::Placement::Packed,
            seed: 1,
            max_slots,
            progress: false,
            switch_tables: self.switch_emulators,
            per_layer: false,
        })
    }

    /// The scenario's jobs for the simulator: same arrivals, hosts, bytes and compute times.
    /// Cross traffic is not simulated.
    pub fn sim_jobs(&self) -> Vec<crate::workload::JobSpec> {
        self.jobs
            .iter()
            .filter_map(|j| {
                let model = crate::model_zoo::by_name(&j.model)?;
                Some(crate::workload::JobSpec {
                    id: j.name.clone(),
                    arrival_s: j.arrival.as_secs_f64(),
                    model,
                    arch: j.arch,
                    workers: j.workers.len() as u32,
                    servers: j.servers.len() as u32,
                    iterations: j.iterations,
                    pinned: Some(crate::workload::Pinned {
                        workers: j.workers.clone(),
                        servers: j.servers.clone(),
                        model_bytes: j.model_bytes,
                        compute_s: j.compute.as_secs_f64(),
                        whole_aggregate: true,
                    }),
                })
            })
            .collect()
    }
}

pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios")
}

/// `arrival_s,name,model,iterations,servers,workers[,kind]` with host lists joined by `|`
/// and `kind` `trainer` (the default) or `torch-ddp`; lines starting with `#` are comments.
/// Model bytes and compute time come from the simulator's table (mlcc-sim's `models`, sources
/// cited there), scaled by the scenario.
fn load_trace(
    path: &Path,
    bytes_scale: f64,
    compute_scale: f64,
    hosts: u32,
) -> Result<Vec<JobSpec>, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
    let mut jobs: Vec<JobSpec> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("arrival_s") {
            continue;
        }
        let at = |r: String| bad(path, format!("line {}: {r}", i + 1));
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 6 && f.len() != 7 {
            return Err(at(format!("expected 6 or 7 fields, got {}", f.len())));
        }
        let kind = JobKind::parse(f.get(6).copied().unwrap_or("")).ok_or_else(|| {
            at(format!(
                "job kind {:?}: expected trainer or torch-ddp",
                f[6]
            ))
        })?;
        let arrival: f64 = f[0].parse().map_err(|e| at(format!("arrival_s: {e}")))?;
        if !(arrival.is_finite() && arrival >= 0.0) {
            return Err(at("arrival_s must be >= 0".into()));
        }
        let name = f[1].to_string();
        if name.is_empty()
            || name.len() > 32
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(at(format!("job name {name:?}: 1-32 of [A-Za-z0-9_-]")));
        }
        if jobs.iter().any(|j| j.name == name) {
            return Err(at(format!("job {name:?} twice")));
        }
        let model = crate::model_zoo::by_name(f[2]).ok_or_else(|| {
            at(format!(
                "unknown model {:?} (vgg19, vgg16, resnet50, gpt2)",
                f[2]
            ))
        })?;
        let iterations: u32 = f[3].parse().map_err(|e| at(format!("iterations: {e}")))?;
        if iterations == 0 {
            return Err(at("iterations must be > 0".into()));
        }
        let list = |s: &str| -> Result<Vec<String>, ScenarioError> {
            if s.is_empty() {
                return Ok(Vec::new());
            }
            s.split('|')
                .map(|h| {
                    let n: u32 = h
                        .strip_prefix('h')
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| at(format!("host {h:?}: expected h1..h{hosts}")))?;
                    if n == 0 || n > hosts {
                        return Err(at(format!("host {h:?}: the scenario has h1..h{hosts}")));
                    }
                    Ok(h.to_string())
                })
                .collect()
        };
        let servers = list(f[4])?;
        let workers = list(f[5])?;
        let arch = match kind {
            JobKind::Trainer => model.arch,
            JobKind::TorchDdp => Arch::Allreduce,
        };
        match arch {
            Arch::Allreduce if !servers.is_empty() || workers.len() < 2 => {
                return Err(at(
                    "a ring or torch-ddp job has no servers and at least 2 workers".into(),
                ));
            }
            Arch::Ps if servers.is_empty() || workers.is_empty() => {
                return Err(at("a PS job needs servers and workers".into()));
            }
            _ => {}
        }
        let per_iter = model.global_batch / (workers.len() as f64 * model.samples_per_sec);
        jobs.push(JobSpec {
            name,
            model: model.name.to_string(),
            arch,
            arrival: Duration::from_secs_f64(arrival),
            iterations,
            model_bytes: ((model.bytes as f64) * bytes_scale).round().max(1.0) as u64,
            compute: Duration::from_secs_f64(per_iter * compute_scale),
            servers,
            workers,
            kind,
        });
    }
    if jobs.is_empty() {
        return Err(bad(path, "no jobs"));
    }
    jobs.sort_by_key(|j| j.arrival);
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_loads() {
        let mut n = 0;
        for e in std::fs::read_dir(scenarios_dir()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
                assert!(!s.jobs.is_empty());
                n += 1;
            }
        }
        assert!(n >= 4, "expected the shipped scenarios, found {n}");
    }

    #[test]
    fn bad_traces_are_refused_with_the_line() {
        let dir = std::env::temp_dir().join(format!("mlcc-tb-scn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            ("0,a,vgg19,5,,h1", "at least 2 workers"),
            ("0,a,nope,5,,h1|h2", "unknown model"),
            ("0,a,vgg16,5,h1|h9,h2", "h1..h6"),
            ("x,a,vgg16,5,h1,h2", "arrival_s"),
            ("0,a,vgg16,5,h1,h2\n1,a,vgg16,5,h1,h2", "twice"),
        ];
        for (trace, want) in cases {
            std::fs::write(dir.join("t.csv"), trace).unwrap();
            std::fs::write(
                dir.join("s.toml"),
                "name = \"t\"\nhosts_per_rack = 6\ntrace = \"t.csv\"\n",
            )
            .unwrap();
            let e = Scenario::load(&dir.join("s.toml")).unwrap_err().to_string();
            assert!(e.contains(want), "{trace:?}: {e}");
            assert!(e.contains("line") || e.contains("no jobs"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_faults_are_refused_by_what_is_wrong() {
        let dir = two_worker_trace("flt");
        let fault = |at: &str, kind: &str, target: &str, lasts: &str| {
            format!(
                "[[fault]]\nat = \"{at}\"\nkind = \"{kind}\"\ntarget = \"{target}\"\nfor = \"{lasts}\"\n"
            )
        };
        let cases = [
            (fault("1s", "explode", "h1", "1s"), "expected kill-switchd"),
            (fault("1s", "kill-mlccd", "h3", "1s"), "not a host"),
            (fault("1s", "kill-switchd", "h1", "1s"), "not a switch"),
            (fault("1s", "link-down", "tor1", "1s"), "not a host"),
            (fault("soon", "link-down", "h1", "1s"), "fault 1: at"),
            (fault("1s", "stop-mlccd", "h2", "-1s"), "fault 1: for"),
            (fault("1s", "skew-mlccd", "h2", "1s"), "fault 1: offset_ms"),
            (
                fault("1s", "kill-mlccd", "h2", "1s") + "offset_ms = 5\n",
                "only skew-mlccd",
            ),
            (
                fault("1s", "skew-mlccd", "h2", "1s") + "offset_ms = 0\n",
                "non-zero",
            ),
        ];
        for (f, want) in cases {
            std::fs::write(
                dir.join("s.toml"),
                format!("name = \"t\"\nhosts_per_rack = 2\ntrace = \"t.csv\"\n{f}"),
            )
            .unwrap();
            let e = Scenario::load(&dir.join("s.toml")).unwrap_err().to_string();
            assert!(e.contains(want), "{f}: {e}");
        }
        std::fs::write(
            dir.join("s.toml"),
            format!(
                "name = \"t\"\nhosts_per_rack = 2\ntrace = \"t.csv\"\n{}{}{}",
                fault("5s", "stop-mlccd", "h2", "1s"),
                fault("2s", "kill-switchd", "tor1", "500ms"),
                fault("7s", "skew-mlccd", "h1", "1s") + "offset_ms = -40\n"
            ),
        )
        .unwrap();
        let s = Scenario::load(&dir.join("s.toml")).unwrap();
        let kinds: Vec<_> = s.faults.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                FaultKind::KillSwitchd,
                FaultKind::StopMlccd,
                FaultKind::SkewMlccd
            ],
            "in time order"
        );
        assert_eq!(s.faults[2].offset_ms, -40);
        assert_eq!(s.faults[0].lasts, Duration::from_millis(500));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory holding `t.csv`: one VGG19 ring on h1 and h2.
    fn two_worker_trace(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mlcc-tb-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("t.csv"),
            "arrival_s,name,model,iterations,servers,workers\n0,a,vgg19,5,,h1|h2\n",
        )
        .unwrap();
        dir
    }

    /// Loads `dir/s.toml`: one rack of `hosts_per_rack` over `t.csv`, plus `extra` lines.
    fn load_with(dir: &Path, hosts_per_rack: u32, extra: &str) -> Result<Scenario, ScenarioError> {
        std::fs::write(
            dir.join("s.toml"),
            format!("name = \"t\"\nhosts_per_rack = {hosts_per_rack}\ntrace = \"t.csv\"\n{extra}"),
        )
        .unwrap();
        Scenario::load(&dir.join("s.toml"))
    }

    #[test]
    fn the_link_bucket_is_2ms_unless_a_scenario_says_and_zero_is_refused() {
        let dir = two_worker_trace("burst");
        let load = |extra: &str| load_with(&dir, 2, extra);
        assert_eq!(load("").unwrap().link_burst, DEFAULT_LINK_BURST);
        assert_eq!(DEFAULT_LINK_BURST, Duration::from_millis(2));
        assert_eq!(
            load("link_burst = \"4ms\"\n").unwrap().link_burst,
            Duration::from_millis(4)
        );
        for bad in ["0ms", "soon"] {
            let e = load(&format!("link_burst = \"{bad}\"\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("link_burst"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loss_rates_parse_as_percent_or_fraction_and_bad_ones_are_refused() {
        assert_eq!(parse_loss("1%"), Ok(0.01));
        assert_eq!(parse_loss(" 0.5 % "), Ok(0.005));
        assert_eq!(parse_loss("0.02"), Ok(0.02));
        assert_eq!(parse_loss("0"), Ok(0.0));
        for bad in ["", "lots", "150%", "-1%", "1.5"] {
            assert!(parse_loss(bad).is_err(), "{bad:?} accepted");
        }

        let dir = two_worker_trace("loss");
        let load = |extra: &str| load_with(&dir, 3, extra);
        let s = load("loss = \"1%\"\nloss_seed = 9\n").unwrap();
        assert_eq!(
            s.loss,
            Some(Loss {
                probability: 0.01,
                hosts: vec!["h1".into(), "h2".into(), "h3".into()],
                seed: 9
            })
        );
        let s = load("loss = \"0.2%\"\nloss_hosts = [\"h3\", \"h1\"]\n").unwrap();
        assert_eq!(s.loss.unwrap().hosts, ["h1", "h3"], "in host order");
        assert!(load("").unwrap().loss.is_none());
        for (extra, want) in [
            ("loss = \"2x\"\n", "loss:"),
            ("loss = \"1%\"\nloss_hosts = [\"h7\"]\n", "not a host"),
            ("loss_hosts = [\"h1\"]\n", "without loss"),
        ] {
            let e = load(extra).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
