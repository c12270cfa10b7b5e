//! Rate policies: one module each behind [`Policy`], found by name in [`REGISTRY`].
//!
//! Adding a policy = one module + one registry line; the engine, physics and reports only
//! see the trait.

use mlcc_core::topology::Topology;
use mlcc_core::{FeedbackMode, SlotConfig};

use crate::engine::{Flow, FlowRef, Job};
use crate::physics::Sharing;
use mlcc::Visibility;

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

pub struct Entry {
    pub name: &'static str,
    pub about: &'static str,
    pub build: fn(&Context<'_>) -> Box<dyn Policy>,
}

pub const REGISTRY: &[Entry] = &[
    Entry {
        name: "mlcc",
        about: "mlcc-core's Planner (Alg. 1 + Alg. 2) per host, per-owner load tables; default feedback mode, skewed host clocks",
        build: |c| {
            Box::new(mlcc::Mlcc::new(
                c,
                FeedbackMode::default(),
                Visibility::Skewed,
            ))
        },
    },
    Entry {
        name: "mlcc-precedence",
        about: "mlcc with `precedence` feedback (only earlier flows' bookings)",
        build: |c| {
            Box::new(mlcc::Mlcc::new(
                c,
                FeedbackMode::Precedence,
                Visibility::Skewed,
            ))
        },
    },
    Entry {
        name: "mlcc-all-others",
        about: "mlcc with `all-others` feedback (the paper's)",
        build: |c| {
            Box::new(mlcc::Mlcc::new(
                c,
                FeedbackMode::AllOthers,
                Visibility::Skewed,
            ))
        },
    },
    Entry {
        name: "mlcc-srpt",
        about: "mlcc-precedence ranked by the job's remaining bytes (shortest job first), slot n planned around every committed booking",
        build: |c| {
            Box::new(mlcc::Mlcc::with(
                c,
                mlcc::Variant {
                    rank: mlcc::Rank::JobRemainingBytes,
                    committed_now: true,
                    ..mlcc::Variant::paper(FeedbackMode::Precedence)
                },
            ))
        },
    },
    Entry {
        name: "mlcc-srpt-split",
        about: "mlcc-srpt with a job's flows from one host splitting their first link by bytes left (MADD), as mlccd does",
        build: |c| {
            Box::new(mlcc::Mlcc::with(
                c,
                mlcc::Variant {
                    rank: mlcc::Rank::JobRemainingBytes,
                    committed_now: true,
                    split_uplink: true,
                    ..mlcc::Variant::paper(FeedbackMode::Precedence)
                },
            ))
        },
    },
    Entry {
        name: "mlcc-committed",
        about: "mlcc-precedence with slot n planned around every committed booking (no overbooking)",
        build: |c| {
            Box::new(mlcc::Mlcc::with(
                c,
                mlcc::Variant {
                    committed_now: true,
                    ..mlcc::Variant::paper(FeedbackMode::Precedence)
                },
            ))
        },
    },
    Entry {
        name: "mlcc-precedence-lockstep",
        about: "mlcc-precedence with perfectly synchronized hosts (no host sees a same-slot plan)",
        build: |c| {
            Box::new(mlcc::Mlcc::new(
                c,
                FeedbackMode::Precedence,
                Visibility::Lockstep,
            ))
        },
    },
    Entry {
        name: "mlcc-all-others-lockstep",
        about: "mlcc-all-others with perfectly synchronized hosts (livelocks: see README)",
        build: |c| {
            Box::new(mlcc::Mlcc::new(
                c,
                FeedbackMode::AllOthers,
                Visibility::Lockstep,
            ))
        },
    },
    Entry {
        name: "fair",
        about: "per-link max-min fair sharing (what TCP converges to)",
        build: |_| Box::new(fair::Fair::default()),
    },
    Entry {
        name: "mcs",
        about: "multi-stage coflow scheduling with start-after dependencies, fabric as one big switch",
        build: |c| Box::new(mcs::Mcs::new(c)),
    },
    Entry {
        name: "ccml",
        about: "host-side interleaving of co-located jobs' communication phases, fair in the fabric",
        build: |c| Box::new(ccml::Ccml::new(c)),
    },
    Entry {
        name: "isolated",
        about: "every job alone on the fabric (max-min within the job): the lower bound",
        build: |_| Box::new(isolated::Isolated::default()),
    },
];

pub fn by_name(name: &str) -> Option<&'static Entry> {
    REGISTRY.iter().find(|e| e.name == name)
}

pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.name).collect()
}
