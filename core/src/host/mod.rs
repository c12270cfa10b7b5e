//! The per-host policy (DESIGN.md §11a): one pure call per slot that turns one host's
//! observations of its flows and the switches' answers into each flow's enforced rate, its
//! K-slot booking, the progress its peers need, and the reasons it runs degraded.
//!
//! This is the one scheduler. `mlccd` builds [`FlowObs`] from progress files, sockets and its
//! switch sessions; `mlcc-sim` builds them from its physics; both call [`HostPolicy::step`] and
//! carry out what it returns. Every rule that shapes a rate beyond Alg. 1 / Alg. 2 lives here,
//! once, and can be switched off through one field of [`PolicyConfig`] (whose defaults are
//! mlccd's), so each rule's effect can be measured and the paper's variant reproduced.
//!
//! The shape follows quinn-proto: the caller owns all I/O and time, and hands in everything the
//! slot needs; the policy keeps only what a rule must remember from one slot to the next (the
//! planner's last plans and B_f filters, each flow's last planned rate and backlog).

mod config;
mod degraded;
mod handover;
mod obs;
mod peers;
mod policy;
mod rank;

pub use config::{
    FLUSH_TAIL_SHARE, LINK_HEADROOM_SHARE, PolicyConfig, RATE_FLOOR_BYTES_PER_SEC, RankRule,
    WARM_MAX_PER_CONNECTION, WARM_SHARE,
};
pub use degraded::Degraded;
pub use handover::{HANDOVER_TRICKLE_SHARE, Handover};
pub use obs::{Answer, FlowObs, LinkObs};
pub use peers::PeerProgress;
pub use policy::{Booking, Enforce, FlowOut, HostPolicy, StepOut};
pub use rank::{Rank, RankBasis, finishes_in_a_slot, size_class_rank};
