//! What the policy answers: per flow its order, its booking, its progress for the peers and
//! why it runs degraded.

use super::connections::Connections;
use super::degraded::Degraded;
use super::handover::Handover;
use crate::flow::{FlowId, PrecedenceKey};
use crate::planner::FlowDecision;
use crate::slot::Slot;

/// What the datapath should do with a flow's sockets this slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Enforce {
    /// Pace the group at this many bytes/s in all in the network's default class, split over
    /// its connections by [`FlowOut::connections`]; with [`FlowOut::fill`], what it sends beyond
    /// this rate goes in a fill class, unpaced (0: everything does).
    Pace(f64),
    /// No order: the sockets fall back to kernel TCP (a finished flow, a skewed switch).
    Release,
}

/// What the flow's entries in the load tables become.
#[derive(Clone, Debug, PartialEq)]
pub enum Booking {
    /// Rates for slots `first_slot..first_slot + K`.
    Plan {
        first_slot: Slot,
        rates: Vec<f64>,
        key: PrecedenceKey,
    },
    /// Publish an empty schedule: the entries go.
    Withdraw { key: PrecedenceKey },
}

impl Booking {
    pub fn key(&self) -> &PrecedenceKey {
        match self {
            Booking::Plan { key, .. } | Booking::Withdraw { key } => key,
        }
    }

    pub fn is_withdraw(&self) -> bool {
        matches!(self, Booking::Withdraw { .. })
    }
}

/// The policy's answer for one flow.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowOut {
    pub id: FlowId,
    pub enforce: Enforce,
    /// How every rate ordered for the flow (the slot's, a hand-over's) splits over its
    /// connections.
    pub connections: Connections,
    /// The fill class its bytes beyond the enforced rate go in ([`super::PolicyConfig::fill`];
    /// 0 is the first class beneath the default one), or none: all of it in the default class.
    pub fill: Option<u8>,
    pub booking: Booking,
    /// Progress for the peers: S and F = S + rate·τ.
    pub sent: f64,
    pub finish: f64,
    /// The planner's decision (Alg. 1 / Alg. 2), for operators and traces.
    pub decision: FlowDecision,
    /// The flow was idle (booked nothing, paced into free capacity).
    pub idle: bool,
    pub degraded: Vec<Degraded>,
    /// Orders within the slot ([`super::PolicyConfig::handover`]): a driver that can act
    /// mid-slot carries them out instead of `enforce`, whose rate is what they average to in
    /// bytes.
    pub handover: Option<Handover>,
}

impl FlowOut {
    /// The rate the datapath is told, 0 where the flow is released to kernel TCP.
    pub fn enforced_rate(&self) -> f64 {
        match self.enforce {
            Enforce::Pace(r) => r,
            Enforce::Release => 0.0,
        }
    }
}

/// The policy's answer for one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOut {
    pub slot: Slot,
    /// One per distinct observed flow, in observation order.
    pub flows: Vec<FlowOut>,
    /// Flows planned before that were not observed now: withdraw them.
    pub withdrawn: Vec<FlowId>,
}
