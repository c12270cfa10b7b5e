//! What a driver hands the policy each slot: one [`FlowObs`] per local flow group.

use std::sync::Arc;

use crate::flow::{FlowId, FlowRole};
use crate::slot::Slot;
use crate::topology::{LinkId, NodeId};

use super::peers::PeerProgress;

/// One link of a flow's path as this slot's answers describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkObs {
    pub link: LinkId,
    /// c_l in bytes/s (the topology's, or what the owning switch reported).
    pub capacity: f64,
    pub answer: Answer,
    /// The owning switch's clock is off ours by more than τ/4: slots do not line up, so the
    /// flow is left to kernel TCP and its bookings withdrawn.
    pub unsynced_switch: Option<NodeId>,
    /// Bytes/s that lower-ranked flows of other hosts committed for slot n in slot n, where
    /// the owner reports it (used by [`super::PolicyConfig::committed_now`]).
    pub committed_now: Option<f64>,
}

/// What the link's owner said about the load on it.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Not asked: a link this host owns (its own flows are accounted by the planner) or one
    /// no emulator speaks for.
    Unasked,
    /// Bytes/s other hosts booked for slots n..n+K (missing slots count as unbooked).
    Load(Vec<f64>),
    /// The owning switch did not answer in time: planned as unbooked.
    Silent { switch: NodeId },
    /// The owning switch answered but gave no load for this link (it refused the item):
    /// planned as unbooked.
    Missing { switch: NodeId },
}

impl LinkObs {
    /// A link nobody was asked about (host-owned, or without an emulator).
    pub fn unasked(link: LinkId, capacity: f64) -> Self {
        LinkObs {
            link,
            capacity,
            answer: Answer::Unasked,
            unsynced_switch: None,
            committed_now: None,
        }
    }
}

/// One local flow group in one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowObs {
    pub id: FlowId,
    pub job: Arc<str>,
    pub role: FlowRole,
    /// The receiving host.
    pub dst: NodeId,
    /// The path, first link first, with this slot's answers.
    pub links: Vec<LinkObs>,
    /// Connections the group's rate is split over (the rate floor is per connection).
    pub connections: usize,
    pub iteration: u64,
    pub iteration_start: Slot,
    /// The job's model bytes (what one iteration moves); 0 when unknown.
    pub job_bytes: u64,
    /// Bytes the job has sent over all its iterations so far, if known.
    pub job_attained_bytes: Option<f64>,
    /// Bytes the job still has to send until its last iteration, if the job says how many
    /// iterations it runs.
    pub job_remaining_bytes: Option<f64>,
    /// S_f and G_f: bytes sent in this iteration and bytes left in it.
    pub sent_bytes: f64,
    pub remaining_bytes: f64,
    /// How far a ring flow may run ahead of its predecessor (one chunk M/N).
    pub slack_bytes: f64,
    /// Bytes the application handed over that the receiver has not acknowledged; `None`
    /// where the driver cannot tell.
    pub app_backlog: Option<f64>,
    /// Bytes/s delivered during the last slot; `None` without counters.
    pub achieved: Option<f64>,
    /// The latest progress of the flows this one depends on (Alg. 2), as the peers reported
    /// it, with the slot each report arrived in; freshness is the policy's to judge.
    pub upstream: Vec<PeerProgress>,
    /// The receiving host's daemon did not answer the last progress exchange.
    pub peer_silent: bool,
}

impl FlowObs {
    /// A flow with nothing known beyond its identity and path: the fields a driver does not
    /// fill stay at their neutral values.
    pub fn new(
        id: FlowId,
        job: Arc<str>,
        role: FlowRole,
        dst: NodeId,
        links: Vec<LinkObs>,
    ) -> Self {
        FlowObs {
            id,
            job,
            role,
            dst,
            links,
            connections: 1,
            iteration: 0,
            iteration_start: Slot(0),
            job_bytes: 0,
            job_attained_bytes: None,
            job_remaining_bytes: None,
            sent_bytes: 0.0,
            remaining_bytes: 0.0,
            slack_bytes: 0.0,
            app_backlog: None,
            achieved: None,
            upstream: Vec::new(),
            peer_silent: false,
        }
    }
}
