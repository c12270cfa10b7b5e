//! Rate policies: one module each behind [`Policy`], found by name in [`REGISTRY`].
//!
//! Adding a policy = one module + one registry line; the engine, physics and reports only
//! see the trait.

use mlcc_core::host::{PolicyConfig, RankRule};
use mlcc_core::topology::Topology;
use mlcc_core::{FeedbackMode, SlotConfig};

use crate::model::Sharing;
use crate::model::{Flow, FlowRef, Job};
use mlcc_harness::cluster::Visibility;

pub mod ccml;
pub mod fair;
pub mod isolated;
pub mod maxmin;
pub mod mcs;
pub mod mlcc;

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

impl View<'_> {
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

    /// Which flows compete for links in the physics.
    fn sharing(&self) -> Sharing {
        Sharing::Fabric
    }

    /// Whether the policy must be called in a slot without active flows (e.g. to withdraw
    /// the bookings of flows that just finished).
    fn wants_idle_slot(&self) -> bool {
        false
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
}

/// How a policy is built: the baselines each by their own constructor, mlcc variants as a core
/// [`PolicyConfig`] (the daemon's by default) and a clock model.
#[derive(Clone, Copy)]
enum Build {
    Fixed(fn(&Context<'_>) -> Box<dyn Policy>),
    Mlcc(fn(SlotConfig) -> PolicyConfig, Visibility),
    /// The daemon's config with one rule (a name of [`PolicyConfig::RULES`]) switched off.
    MlccWithout(&'static str),
    /// The daemon's config with another rank rule.
    MlccRank(RankRule),
}

pub struct Entry {
    pub name: String,
    pub about: String,
    build: Build,
}

impl Entry {
    pub fn build(&self, c: &Context<'_>) -> Box<dyn Policy> {
        match (self.build, self.mlcc_config(c.slots)) {
            (Build::Fixed(f), _) => f(c),
            (_, Some((cfg, vis))) => Box::new(mlcc::Mlcc::new(c, cfg, vis)),
            // Only a rule name outside PolicyConfig::RULES; the registry lists none.
            (_, None) => Box::new(mlcc::Mlcc::new(
                c,
                PolicyConfig::new(c.slots),
                Visibility::Skewed,
            )),
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
    name: &str,
    about: &str,
    cfg: fn(SlotConfig) -> PolicyConfig,
    vis: Visibility,
) -> Entry {
    Entry {
        name: name.into(),
        about: about.into(),
        build: Build::Mlcc(cfg, vis),
    }
}

/// Every policy by name. `mlcc` is mlccd's default config by construction
/// (`PolicyConfig::new`); `mlcc-no-<rule>` switches one of its rules off and
/// `mlcc-rank-<rule>` changes its rank rule, for ablations.
pub fn registry() -> Vec<Entry> {
    use FeedbackMode::{AllOthers, Precedence};
    let mut v = vec![
        mlcc_entry(
            "mlcc",
            "mlccd's own policy (core's HostPolicy with its default config), per-owner load tables, skewed host clocks",
            PolicyConfig::new,
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper",
            "the paper as published: Alg. 1 + Alg. 2 alone, all-others feedback, iteration-start ranks",
            |s| PolicyConfig::paper(s, AllOthers),
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper-precedence",
            "mlcc-paper with precedence feedback (only earlier flows' bookings)",
            |s| PolicyConfig::paper(s, Precedence),
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-paper-precedence-lockstep",
            "mlcc-paper-precedence with perfectly synchronized hosts (no host sees a same-slot plan)",
            |s| PolicyConfig::paper(s, Precedence),
            Visibility::Lockstep,
        ),
        mlcc_entry(
            "mlcc-paper-lockstep",
            "mlcc-paper with perfectly synchronized hosts (livelocks: see README)",
            |s| PolicyConfig::paper(s, AllOthers),
            Visibility::Lockstep,
        ),
        mlcc_entry(
            "mlcc-srpt",
            "mlcc-paper-precedence ranked by the job's remaining bytes, slot n planned around every committed booking",
            |s| PolicyConfig {
                rank: RankRule::RemainingBytes,
                committed_now: true,
                ..PolicyConfig::paper(s, Precedence)
            },
            Visibility::Skewed,
        ),
        mlcc_entry(
            "mlcc-lockstep",
            "mlcc with perfectly synchronized hosts",
            PolicyConfig::new,
            Visibility::Lockstep,
        ),
        mlcc_entry(
            "mlcc-committed",
            "mlcc with slot n planned around the slot-n rates lower-ranked flows already committed",
            |s| PolicyConfig {
                committed_now: true,
                ..PolicyConfig::new(s)
            },
            Visibility::Skewed,
        ),
    ];
    for rule in PolicyConfig::RULES {
        if PolicyConfig::default().with_rule(rule, false) == Some(PolicyConfig::default()) {
            continue; // off by default: nothing to switch off
        }
        v.push(Entry {
            name: format!("mlcc-no-{rule}"),
            about: format!("mlcc with its {rule} rule switched off"),
            build: Build::MlccWithout(rule),
        });
    }
    for rank in RankRule::ALL {
        if rank == PolicyConfig::default().rank {
            continue;
        }
        v.push(Entry {
            name: format!("mlcc-rank-{rank}"),
            about: format!("mlcc with the {rank} rank rule"),
            build: Build::MlccRank(rank),
        });
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
            "isolated",
            "every job alone on the fabric (max-min within the job): the lower bound",
            |_| Box::new(isolated::Isolated::default()),
        ),
    ]);
    v
}

impl Entry {
    /// The core policy config and clock model of an mlcc variant; `None` for the baselines.
    pub fn mlcc_config(&self, slots: SlotConfig) -> Option<(PolicyConfig, Visibility)> {
        match self.build {
            Build::Fixed(_) => None,
            Build::Mlcc(cfg, vis) => Some((cfg(slots), vis)),
            Build::MlccWithout(rule) => Some((
                PolicyConfig::new(slots).with_rule(rule, false)?,
                Visibility::Skewed,
            )),
            Build::MlccRank(rank) => Some((
                PolicyConfig {
                    rank,
                    ..PolicyConfig::new(slots)
                },
                Visibility::Skewed,
            )),
        }
    }
}

pub fn by_name(name: &str) -> Option<Entry> {
    registry().into_iter().find(|e| e.name == name)
}

pub fn names() -> Vec<String> {
    registry().into_iter().map(|e| e.name).collect()
}
