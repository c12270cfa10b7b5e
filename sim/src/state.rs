//! The state of the simulated jobs and flows: what the engine advances, the physics moves and
//! the policies read. Kept apart so that each of them depends on the state, not on the others.

use std::sync::Arc;

use mlcc_core::FlowId;
use mlcc_core::flow::FlowRole;
use mlcc_core::hash::Map;
use mlcc_core::job::Arch;
use mlcc_core::topology::{LinkId, NodeId, Topology};
use serde::Serialize;

use crate::workload::JobSpec;

/// Bytes a flow may have left and still count as delivered (float crumbs of rate × τ).
pub const BYTE_EPSILON: f64 = 0.5;

#[derive(Clone, Debug)]
pub struct Flow {
    pub id: FlowId,
    pub src: NodeId,
    pub dst: NodeId,
    pub role: FlowRole,
    /// Bytes of the current iteration: [`Self::base_bytes`] unless the policy's [`Shape`]
    /// (compression, loss tolerance) changed it.
    pub bytes: f64,
    /// Bytes per iteration as mlcc-core's job model derives them.
    pub base_bytes: f64,
    /// Bytes of the current iteration the sender's application has handed over so far: all
    /// of them, except under the per-layer model, which releases them bucket by bucket.
    pub released: f64,
    /// Per-layer model (else empty): bytes of each bucket on this flow in the current
    /// iteration, front layers first, and how many of each were delivered.
    pub buckets: Vec<f64>,
    pub bucket_sent: Vec<f64>,
    pub path: Vec<LinkId>,
    /// Indices (in the job's `flows`) of the flows this one depends on: a broadcast flow's
    /// aggregation flows into its PS, a ring flow's predecessor, an aggregation flow's
    /// broadcast flows (Alg. 2 uses the latter; physics does not).
    pub upstream: Vec<usize>,
    /// How far a ring flow can run ahead of its predecessor: one chunk M/N (of this
    /// iteration's bytes; `base_slack` of the job model's).
    pub slack: f64,
    pub base_slack: f64,
    /// Bytes delivered in the current iteration.
    pub sent: f64,
    /// Last slot: the rate the policy set, the rate achieved, and whether a link (not the
    /// policy or a dependency) held it below what it tried to send.
    pub last_rate: f64,
    pub last_achieved: f64,
    pub last_link_limited: bool,
    /// Whether its data arrived only during the last slot: a reply to a whole aggregate whose
    /// last push ended within it ([`crate::workload::Pinned::whole_aggregate`]), which could
    /// send only for the rest of the slot.
    pub last_data_late: bool,
    /// Position in this slot's active list, if active.
    pub active_idx: Option<u32>,
}

impl Flow {
    pub fn remaining(&self) -> f64 {
        (self.bytes - self.sent).max(0.0)
    }

    pub fn is_done(&self) -> bool {
        self.sent + BYTE_EPSILON >= self.bytes
    }

    /// Per-layer model: the bucket this flow's next byte belongs to, among the buckets
    /// released (`released_from..`), in the order its sender sends them: front layers first,
    /// or the order the backward pass released them (back layers first). `None` when it holds
    /// nothing or the model is off.
    pub fn head_bucket(&self, released_from: usize, front_first: bool) -> Option<usize> {
        let waiting = |&k: &usize| self.bucket_sent[k] + BYTE_EPSILON < self.buckets[k];
        let n = self.buckets.len();
        if front_first {
            (released_from..n).find(waiting)
        } else {
            (released_from..n).rev().find(waiting)
        }
    }
}

/// How a policy changes an iteration's bytes and compute (DC2's compression, DLCP's loss
/// tolerance); [`Shape::NONE`] for every other policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Share of the gradient bytes sent (a compression ratio); 1: all.
    pub scale: f64,
    /// Share of a push (PS aggregation) or ring flow's bytes its receiver does not wait for,
    /// and of a PS broadcast's (pull): taken off the front-layer bucket.
    pub tolerance: f64,
    pub pull_tolerance: f64,
    /// Compute seconds added to the iteration (compressing and decompressing).
    pub extra_secs: f64,
}

impl Shape {
    pub const NONE: Shape = Shape {
        scale: 1.0,
        tolerance: 0.0,
        pull_tolerance: 0.0,
        extra_secs: 0.0,
    };
}

impl Default for Shape {
    fn default() -> Self {
        Shape::NONE
    }
}

/// The per-layer model's state of one job ([`crate::layers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Layers {
    /// Each bucket's share of the gradient bytes and of the compute, front layers first.
    pub bytes_share: [f64; crate::model_zoo::BUCKETS],
    pub compute_share: [f64; crate::model_zoo::BUCKETS],
    /// Slots of an iteration's forward and backward passes (they add up to the job's
    /// `compute_slots`).
    pub fwd_slots: u64,
    pub bwd_slots: u64,
    /// Slots after the backward pass starts at which bucket k's gradient is complete.
    pub release: [u64; crate::model_zoo::BUCKETS],
    /// The lowest bucket released so far this iteration (buckets are released back to front).
    pub released_from: usize,
    /// Whether senders send the buckets they hold front layers first (a layer-priority policy)
    /// instead of in the order they were released.
    pub front_first: bool,
    /// The slot at whose end every flow of the job had delivered bucket k, this iteration.
    pub arrived: [Option<u64>; crate::model_zoo::BUCKETS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Queued,
    /// Computing until (not including) slot `until`.
    Compute {
        until: u64,
    },
    /// Communicating since slot `since` (the precedence key's iteration start).
    Comm {
        since: u64,
    },
    Done,
}

#[derive(Clone, Debug)]
pub struct Job {
    pub spec: JobSpec,
    /// The job's id, shared by every observation of its flows.
    pub name: Arc<str>,
    pub arrival_slot: u64,
    pub hosts: Vec<NodeId>,
    pub flows: Vec<Flow>,
    pub compute_slots: u64,
    pub iteration: u32,
    pub phase: Phase,
    pub start_slot: Option<u64>,
    /// Slots by which the policy delayed the job's first compute phase when it was placed
    /// ([`crate::policy::Policy::start_shift`]: Cassini's time shift).
    pub shift_slots: u64,
    pub finish_slot: Option<u64>,
    /// Slots spent communicating, summed over iterations (under the per-layer model from the
    /// start of each backward pass, the first bucket's release).
    pub comm_slots: u64,
    /// The per-layer model's state (`None`: one blob per iteration after the compute).
    pub layers: Option<Layers>,
    /// The current (or, while computing, the next) iteration's shape.
    pub shape: Shape,
    /// Seconds the last iteration's communication phase took (what DC2 measures).
    pub last_comm_secs: Option<f64>,
}

impl Job {
    /// Whether its PS replies only to a whole aggregate ([`crate::workload::Pinned::whole_aggregate`]:
    /// a testbed job), not byte by byte behind the pushes.
    pub fn whole_aggregate(&self) -> bool {
        self.spec.pinned.as_ref().is_some_and(|p| p.whole_aggregate)
    }

    /// Seconds one iteration's bytes take on the job's most loaded link with the fabric to
    /// itself: what Crux's GPU intensity and Cassini's communication windows are profiled from.
    pub fn comm_secs_alone(&self, topo: &Topology) -> f64 {
        let mut load: Map<LinkId, f64> = Map::default();
        for f in &self.flows {
            for l in &f.path {
                *load.entry(*l).or_default() += f.bytes;
            }
        }
        load.iter()
            .map(|(l, b)| b / topo.link(*l).capacity.0.max(1.0))
            .fold(0.0, f64::max)
    }
}

/// One active flow: `jobs[job].flows[flow]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRef {
    pub job: u32,
    pub flow: u32,
}

/// The runs of `active` (ordered by job) that belong to one job each, as index ranges.
pub fn job_runs(active: &[FlowRef]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        let job = active.get(start)?.job;
        let end = start + active[start..].iter().take_while(|r| r.job == job).count();
        let run = start..end;
        start = end;
        Some(run)
    })
}

/// Which flows compete on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// All flows share the fabric (the real world).
    Fabric,
    /// Every job has the whole fabric to itself (the isolated lower bound).
    PerJob,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobRecord {
    pub id: String,
    pub model: &'static str,
    pub arch: &'static str,
    pub workers: u32,
    pub servers: u32,
    pub iterations: u32,
    pub completed_iterations: u32,
    pub arrival_s: f64,
    pub start_s: Option<f64>,
    /// The policy's delay of the job's first compute phase (Cassini's time shift).
    pub shift_s: f64,
    pub finish_s: Option<f64>,
    /// finish − arrival: queueing + compute + communication.
    pub jct_s: Option<f64>,
    pub comm_s: f64,
    pub hosts: String,
}

impl JobRecord {
    pub fn from_job(j: &Job, tau: f64) -> Self {
        let s = |slot: u64| slot as f64 * tau;
        JobRecord {
            id: j.spec.id.clone(),
            model: j.spec.model.name,
            arch: if j.spec.arch == Arch::Ps {
                "ps"
            } else {
                "ring"
            },
            workers: j.spec.workers,
            servers: j.spec.servers,
            iterations: j.spec.iterations,
            completed_iterations: j.iteration,
            arrival_s: j.spec.arrival_s,
            start_s: j.start_slot.map(s),
            shift_s: s(j.shift_slots),
            finish_s: j.finish_slot.map(s),
            jct_s: j.finish_slot.map(|f| s(f) - j.spec.arrival_s),
            comm_s: s(j.comm_slots),
            hosts: j
                .hosts
                .iter()
                .map(|h| h.0.to_string())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}
