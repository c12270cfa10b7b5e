//! What a driver hands the policy each slot: one [`FlowObs`] per local flow group.

use std::sync::Arc;

use crate::flow::{FlowId, FlowRole};
use crate::job::JobProgress;
use crate::slot::Slot;
use crate::topology::{LinkId, NodeId};

use super::peers::PeerProgress;

/// One link of a flow's path as this slot's answers describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkObs {
    pub link: LinkId,
    /// c_l in bytes/s, the topology's: what a flow's precedence key and the size of a flow of
    /// unknown size are judged by, so that they are the same before and after the switches
    /// answer.
    pub capacity: f64,
    /// c_l as the owning switch reported it, where it did: what plans fill.
    pub reported_capacity: Option<f64>,
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
            reported_capacity: None,
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
    /// Of those, the ones that neither sent nor had a byte acknowledged during the last slot
    /// ([`super::Connections`]).
    pub quiet_connections: usize,
    /// The iteration the flow is in, as its driver counts them (the same on every host of the
    /// job: peers' reports of another iteration are ignored).
    pub iteration: u64,
    pub iteration_start: Slot,
    /// The job's model bytes and iterations, as far as known (the rank rules read them).
    pub job_progress: JobProgress,
    /// S_f: bytes sent in this iteration.
    pub sent_bytes: f64,
    /// G_f: bytes left in this iteration; `None` where nothing tells how much an iteration
    /// moves (no model size, no iteration seen whole yet): the policy plans such a flow as a
    /// bulk transfer ([`super::PolicyConfig::remaining_of`]).
    pub remaining_bytes: Option<f64>,
    /// How far a ring flow may run ahead of its predecessor (one chunk M/N).
    pub slack_bytes: f64,
    /// Bytes the application handed over that the receiver has not acknowledged; `None`
    /// where the driver cannot tell.
    pub app_backlog: Option<f64>,
    /// Bytes the flow's sockets had on the wire and not yet acknowledged when observed; `None`
    /// where the driver cannot tell. A backlog with nothing in flight is still the
    /// application's: Gloo hands a bucket over at once and sends it once its peer is ready.
    pub in_flight: Option<f64>,
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
            quiet_connections: 0,
            iteration: 0,
            iteration_start: Slot(0),
            job_progress: JobProgress::default(),
            sent_bytes: 0.0,
            remaining_bytes: Some(0.0),
            slack_bytes: 0.0,
            app_backlog: None,
            in_flight: None,
            achieved: None,
            upstream: Vec::new(),
            peer_silent: false,
        }
    }

    /// The capacity of its path's slowest link as the topology has it (0 without links).
    pub fn bottleneck(&self) -> f64 {
        self.links
            .iter()
            .map(|l| l.capacity)
            .reduce(f64::min)
            .unwrap_or(0.0)
    }
}
