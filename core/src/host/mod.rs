//! The per-host policy (docs/design.md §11a): one pure call per slot that turns one host's
//! observations of its flows and the switches' answers into each flow's enforced rate, its
//! K-slot booking, the progress its peers need, and the reasons it runs degraded.
//!
//! This is the one scheduler. `mlccd` builds [`FlowObs`] from progress files, sockets and its
//! switch sessions; `mlcc-sim` builds them from its physics; both call [`HostPolicy::step`] and
//! carry out what it returns. Every rule that shapes a rate, a booking or a precedence beyond
//! Alg. 1 / Alg. 2 lives here, once, in a module named for it, and can be switched off through
//! one field of [`PolicyConfig`] (whose defaults are mlccd's), so each rule's effect can be
//! measured and the paper's variant reproduced.
//!
//! The shape follows quinn-proto: the caller owns all I/O and time, and hands in everything the
//! slot needs; the policy keeps only what a rule must remember from one slot to the next (the
//! planner's last plans and B_f filters, each flow's last planned rate and backlog).
//!
//! A step, in order ([`HostPolicy::step`]): each flow's dependency from its peers' reports
//! (`peers`), whether it is idle (`idle`), its path's feedback (`feedback`), whether a sender
//! that holds its bytes is let go (`holder`), what B_f learns (`delivery`), its share of an
//! uplink split with its job (`uplink_split`), its precedence key (`key`); then Alg. 1 and
//! Alg. 2 (the planner); then pacing into free capacity (`pace_free`), the slot's order
//! (`enforce`) with what goes beneath the plan in a fill class (`fill`), the hand-overs within
//! the slot (`handover`), and how each order splits over the flow's connections
//! (`connections`).

mod config;
mod connections;
mod degraded;
mod delivery;
mod enforce;
mod feedback;
mod fill;
mod handover;
mod holder;
mod idle;
mod key;
mod local;
mod obs;
mod out;
mod pace_free;
mod peers;
mod policy;
#[cfg(test)]
mod testing;
mod uplink_split;

pub use config::{
    Fill, LINK_HEADROOM_SHARE, MAX_FILL_CLASSES, PolicyConfig, RATE_FLOOR_BYTES_PER_SEC, RankRule,
    WARM_MAX_PER_CONNECTION, WARM_SHARE, parse_link_headroom,
};
pub use connections::{ConnectionRates, Connections};
pub use degraded::Degraded;
pub use handover::{HANDOVER_TRICKLE_SHARE, Handover};
pub use key::{Rank, RankBasis, finishes_in_a_slot, size_class_rank};
pub use obs::{Answer, FlowObs, LinkObs};
pub use out::{Booking, Enforce, FlowOut, StepOut};
pub use peers::PeerProgress;
pub use policy::HostPolicy;
