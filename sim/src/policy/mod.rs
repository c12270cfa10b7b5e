//! Rate policies: one module each behind [`Policy`], found by name in [`REGISTRY`].
//!
//! Adding a policy = one module + one registry line; the engine, physics and reports only
//! see the trait.

use mlcc_core::FeedbackMode::{AllOthers, Precedence};
use mlcc_core::SlotConfig;
use mlcc_core::host::{MAX_FILL_CLASSES, PolicyConfig, RankRule};
use mlcc_core::topology::Topology;

use crate::state::Sharing;
use crate::state::{Flow, FlowRef, Job, Shape};
use mlcc::Progress;
use mlcc_harness::control_plane::Visibility;

pub mod cassini;
pub mod ccml;
pub mod crux;
pub mod dc2;
pub mod fair;
pub mod isolated;
pub mod layerprio;
pub mod maxmin;
pub mod mcs;
pub mod mlcc;
pub mod mltcp;
pub mod priority;
pub mod sincronia;

/// What a policy sees at the start of a slot.
pub struct View<'a> {
    pub slot: u64,
    pub tau: f64,
    pub slots: SlotConfig,
    pub topo: &'a Topology,
    pub jobs: &'a [Job],
    /// The flows with bytes left in the current iteration, ordered by job.
    pub active: &'a [FlowRef],
    /// Per active flow: bytes it has available to send this slot (remaining bytes limited
    /// by its data dependency; see [`crate::physics::sendable`]).
    pub sendable: &'a [f64],
}

impl<'a> View<'a> {
    /// The same slot restricted to `active[run]` (one job's flows, from
    /// [`crate::state::job_runs`]).
    pub fn restricted(&self, run: std::ops::Range<usize>) -> View<'a> {
        View {
            slot: self.slot,
            tau: self.tau,
            slots: self.slots,
            topo: self.topo,
            jobs: self.jobs,
            active: &self.active[run.clone()],
            sendable: &self.sendable[run],
        }
    }

    pub fn flow(&self, r: FlowRef) -> &Flow {
        &self.jobs[r.job as usize].flows[r.flow as usize]
    }

    pub fn job(&self, r: FlowRef) -> &Job {
        &self.jobs[r.job as usize]
    }
}

pub trait Policy {
    /// Sets `out[i]`, the rate (bytes/s) of `view.active[i]` for this slot.
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]);

    /// Sets `out[i]`, the fill class of `view.active[i]` this slot (called after
    /// [`Self::rates`]): where it is `Some`, what the flow holds beyond its rate goes in that
    /// class at up to its path's rate, and the links serve it only with what the default class
    /// (every other flow's rate) and the fill classes before it leave. None by default.
    fn fill(&self, _out: &mut [Option<u8>]) {}

    /// Which flows compete for links in the physics.
    fn sharing(&self) -> Sharing {
        Sharing::Fabric
    }

    /// Whether the policy's rates are carried out by Linux's internal pacing, as mlccd's
    /// datapath does, rather than being fluid averages over the slot: a flow raised from a low
    /// rate then first waits out the departure stamps its last packets took at the old rate
    /// ([`crate::physics::stamp_wait`]), and a reply whose data comes in mid-slot sends at its
    /// rate only for the rest of the slot ([`crate::physics::bcast_limit`]).
    fn paced_by_linux(&self) -> bool {
        false
    }

    /// Whether the policy must be called in a slot without active flows (e.g. to withdraw
    /// the bookings of flows that just finished).
    fn wants_idle_slot(&self) -> bool {
        false
    }

    /// Slots by which job `job`, placed now (its flows and paths set, its first compute phase
    /// about to start), delays that start: a scheduler's time shift (Cassini). `jobs` holds
    /// every job, running or not.
    fn start_shift(
        &mut self,
        _jobs: &[Job],
        _job: usize,
        _now: u64,
        _topo: &Topology,
        _slots: SlotConfig,
    ) -> u64 {
        0
    }

    /// Whether senders send the gradient buckets they hold front layers first (a layer-priority
    /// scheme's hosts) rather than in the order the backward pass released them; matters under
    /// the per-layer model only ([`crate::layers`]).
    fn front_first(&self) -> bool {
        false
    }

    /// How job `job`'s next iteration is shaped (its bytes compressed or partly not waited
    /// for, compute added): asked when the job is placed and after each iteration, before
    /// that iteration's compute starts. `jobs[job].last_comm_secs` is the iteration just done's
    /// communication time.
    fn shape(&mut self, _jobs: &[Job], _job: usize, _tau: f64) -> Shape {
        Shape::NONE
    }

    /// Wall-clock microseconds of each planning decision, if the policy measures them.
    fn decision_latencies_us(&self) -> &[f32] {
        &[]
    }
}

/// What a policy is built from.
pub struct Context<'a> {
    pub topo: &'a Topology,
    pub slots: SlotConfig,
    /// Whether switches keep load tables (false: cloud mode, host-owned links only).
    pub switch_tables: bool,
}

/// How a policy is built: the baselines each by their own constructor, mlcc variants as a core
/// [`PolicyConfig`] (its `slots` replaced by the run's) and a clock model.
#[derive(Clone, Copy)]
enum Build {
    Fixed(fn(&Context<'_>) -> Box<dyn Policy>),
    /// The policy, the clock model, and where each job's progress comes from.
    Mlcc(PolicyConfig, Visibility, Progress),
}

pub struct Entry {
    pub name: String,
    pub about: String,
    build: Build,
}

impl Entry {
    pub fn build(&self, c: &Context<'_>) -> Box<dyn Policy> {
        match self.build {
            Build::Fixed(f) => f(c),
            Build::Mlcc(cfg, vis, progress) => {
                Box::new(mlcc::Mlcc::new(c, cfg, vis).with_progress(progress))
            }
        }
    }

    /// The core policy config and clock model of an mlcc variant; `None` for the baselines.
    pub fn mlcc_config(&self, slots: SlotConfig) -> Option<(PolicyConfig, Visibility)> {
        match self.build {
            Build::Fixed(_) => None,
            Build::Mlcc(cfg, vis, _) => Some((PolicyConfig { slots, ..cfg }, vis)),
        }
    }
}

fn fixed(name: &str, about: &str, build: fn(&Context<'_>) -> Box<dyn Policy>) -> Entry {
    Entry {
        name: name.into(),
        about: about.into(),
        build: Build::Fixed(build),
    }
}

fn mlcc_entry(
    name: impl Into<String>,
    about: impl Into<String>,
    cfg: PolicyConfig,
    vis: Visibility,
) -> Entry {
    Entry {
        name: name.into(),
        about: about.into(),
        build: Build::Mlcc(cfg, vis, Progress::Files),
    }
}

/// Every policy by name. `mlcc` is mlccd's default config by construction
/// (`PolicyConfig::default`); `mlcc-no-<rule>` switches one of its rules off and
/// `mlcc-rank-<rule>` changes its rank rule, for ablations.
pub fn registry() -> Vec<Entry> {
    let mlccd = PolicyConfig::default();
    let paper = |mode| PolicyConfig::paper(SlotConfig::paper(), mode);
    let mut v = vec![
        mlcc_entry(
            "mlcc",
            "mlccd's own policy (core's HostPolicy with its default config), per-owner load tables, skewed host clocks",
            mlccd,
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper",
            "the paper as published: Alg. 1 + Alg. 2 alone, all-others feedback, iteration-start ranks",
            paper(AllOthers),
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper-precedence",
            "mlcc-paper with precedence feedback (only earlier flows' bookings)",
            paper(Precedence),
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper-precedence-lockstep",
            "mlcc-paper-precedence with perfectly synchronized hosts (no host sees a same-slot plan)",
            paper(Precedence),
            Visibility::Lockstep,
        ),
        mlcc_entry(
            "mlcc-paper-lockstep",
            "mlcc-paper with perfectly synchronized hosts (livelocks: docs/design.md §6)",
            paper(AllOthers),
            Visibility::Lockstep,
        ),
        mlcc_entry(
            "mlcc-srpt",
            "mlcc-paper-precedence ranked by the job's remaining bytes, slot n planned around every committed booking",
            PolicyConfig {
                rank: RankRule::RemainingBytes,
                committed_now: true,
                ..paper(Precedence)
            },
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-lockstep",
            "mlcc with perfectly synchronized hosts",
            mlccd,
            Visibility::Lockstep,
        ),
    ];
    for rule in PolicyConfig::RULES {
        // A rule off by default has nothing to switch off.
        if let Some(off) = mlccd.with_rule(rule, false).filter(|off| *off != mlccd) {
            v.push(mlcc_entry(
                format!("mlcc-no-{rule}"),
                format!("mlcc with its {rule} rule switched off"),
                off,
                Visibility::Skewed,
            ));
        }
    }
    for rank in RankRule::ALL.into_iter().filter(|&r| r != mlccd.rank) {
        v.push(mlcc_entry(
            format!("mlcc-rank-{rank}"),
            format!("mlcc with the {rank} rank rule"),
            PolicyConfig { rank, ..mlccd },
            Visibility::Skewed,
        ));
    }
    v.extend([
        fixed(
            "fair",
            "per-link max-min fair sharing (what TCP converges to)",
            |_| Box::new(fair::Fair::default()),
        ),
        fixed(
            "mcs",
            "multi-stage coflow scheduling with start-after dependencies, fabric as one big switch",
            |c| Box::new(mcs::Mcs::new(c)),
        ),
        fixed(
            "ccml",
            "host-side interleaving of co-located jobs' communication phases, fair in the fabric",
            |c| Box::new(ccml::Ccml::new(c)),
        ),
        fixed(
            "mltcp",
            "MLTCP (HotNets'24) as a fluid: weighted max-min, each flow weighted by F = 1.75 r + 0.25 of the share r of its iteration's bytes already sent",
            |_| Box::new(mltcp::Mltcp::default()),
        ),
        fixed(
            "cassini",
            "Cassini (NSDI'24): each arriving job's start shifted so its communication interleaves with the running jobs it shares a link with (isolated periods, whole slots), fair sharing underneath",
            |_| Box::new(cassini::Cassini::default()),
        ),
        fixed(
            "crux",
            "Crux (SIGCOMM'24) as a fluid: jobs by GPU intensity (compute / communication on the most loaded link) in 8 octave levels, strict priority between levels, max-min within one; no path choice",
            |_| Box::new(crux::Crux::default()),
        ),
        fixed(
            "sincronia",
            "Sincronia (SIGCOMM'18) as a fluid: each job's iteration a coflow, ordered by BSSI over every link each slot, strict priority in that order, max-min within a coflow",
            |_| Box::new(sincronia::Sincronia::default()),
        ),
        fixed(
            "tensorexpress",
            "TensorExpress (layer-ID priority queues in switches) as a fluid: under --per-layer, strict priority by the layer bucket a flow is sending on switch-owned links, hosts send front layers first, max-min on host uplinks and within a level; plain max-min without --per-layer",
            |_| Box::new(layerprio::LayerPriority::tensorexpress()),
        ),
        fixed(
            "dlcp",
            "DLCP as a fluid: tensorexpress's front-layers-first priority plus bounded loss tolerance (1 % of a push or ring flow's bytes, 0.5 % of a PS reply's, taken off the front-layer bucket, are not waited for)",
            |_| Box::new(layerprio::LayerPriority::dlcp()),
        ),
        fixed(
            "dc2",
            "DC2 (delay-aware compression control, DA5): each job's compression ratio k in [0.005, 0.3] set per iteration from its measured communication time, bytes × k, compression compute added; max-min sharing",
            |_| Box::new(dc2::Dc2::default()),
        ),
        fixed(
            "priority",
            "strict priority by the job's remaining bytes, max-min within a job, exact and instant: the ideal of a rank-ordered scheduler (not deployable)",
            |_| Box::new(priority::Priority::default()),
        ),
        fixed(
            "isolated",
            "every job alone on the fabric (max-min within the job): the lower bound",
            |_| Box::new(isolated::Isolated::default()),
        ),
    ]);
    v
}

/// The policy `name`: a registry entry, or an mlcc entry followed by `/key=value` overrides
/// of its [`PolicyConfig`] (`mlcc/eta=0/split-uplink=off/rank=remaining-bytes`), so an
/// experiment needs no registry line. Keys: `eta`, `rank`, `mode` (`precedence` |
/// `all-others`), `fill` (`off` | `excess` | `unbooked` | `scavenge`), `fill-classes` (1..=7),
/// `link-headroom` (a share of each link, 0..=0.5), `peer-stale-slots`, `idle-backlog`
/// (bytes), every rule of [`PolicyConfig::RULES`]
/// (`on` | `off`), and `progress=off`: each job's progress learned from its bytes alone, as
/// mlccd learns a process with no progress file (`progress=told`: and each job's length told,
/// as mlccd reads it from a learned process's environment).
pub fn by_name(name: &str) -> Option<Entry> {
    parse(name).ok()
}

/// `v` as a finite number ≥ 0, or why not.
fn non_negative(key: &str, v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("{key} {v:?} is not a number ≥ 0"))
}

/// [`by_name`] with the reason a name is refused.
pub fn parse(name: &str) -> Result<Entry, String> {
    let mut parts = name.split('/');
    let base = parts.next().unwrap_or_default();
    let mut entry = registry()
        .into_iter()
        .find(|e| e.name == base)
        .ok_or_else(|| format!("unknown policy {base:?}"))?;
    for kv in parts {
        let Build::Mlcc(cfg, vis, learned) = entry.build else {
            return Err(format!(
                "{base} is not an mlcc variant: it takes no overrides"
            ));
        };
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("override {kv:?} is not key=value"))?;
        if k == "progress" {
            let learned = match v {
                "on" => Progress::Files,
                "off" => Progress::Learned,
                "told" => Progress::Told,
                _ => return Err(format!("progress={v:?}: say on, off or told")),
            };
            entry.build = Build::Mlcc(cfg, vis, learned);
            continue;
        }
        let cfg = match k {
            "eta" => PolicyConfig {
                eta: non_negative(k, v)?,
                ..cfg
            },
            "peer-stale-slots" => PolicyConfig {
                peer_stale_slots: v
                    .parse()
                    .map_err(|_| format!("peer-stale-slots {v:?} is not a slot count"))?,
                ..cfg
            },
            "idle-backlog" => PolicyConfig {
                idle_backlog_bytes: non_negative(k, v)?,
                ..cfg
            },
            "rank" => PolicyConfig {
                rank: v.parse()?,
                ..cfg
            },
            "fill" => PolicyConfig {
                fill: v.parse()?,
                ..cfg
            },
            "fill-classes" => PolicyConfig {
                fill_classes: v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_FILL_CLASSES).contains(n))
                    .ok_or_else(|| {
                        format!("fill-classes {v:?} is not a class count 1..={MAX_FILL_CLASSES}")
                    })?,
                ..cfg
            },
            "link-headroom" => PolicyConfig {
                link_headroom: mlcc_core::host::parse_link_headroom(v)
                    .map_err(|e| format!("link-headroom: {e}"))?,
                ..cfg
            },
            "mode" => PolicyConfig {
                mode: match v {
                    "precedence" => Precedence,
                    "all-others" => AllOthers,
                    _ => return Err(format!("mode {v:?} is not precedence or all-others")),
                },
                ..cfg
            },
            rule => {
                let on = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("rule {rule}={v:?}: say on or off")),
                };
                cfg.with_rule(rule, on).ok_or_else(|| {
                    format!(
                        "unknown key {rule:?} (eta, rank, mode, fill, fill-classes, link-headroom, peer-stale-slots, idle-backlog, or a rule: {})",
                        PolicyConfig::RULES.join(", ")
                    )
                })?
            }
        };
        entry.build = Build::Mlcc(cfg, vis, learned);
    }
    entry.name = name.to_string();
    Ok(entry)
}

pub fn names() -> Vec<String> {
    registry().into_iter().map(|e| e.name).collect()
}
