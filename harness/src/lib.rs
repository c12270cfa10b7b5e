//! mlcc-harness: many mlcc hosts in one process, as raft-rs's `harness/` drives many Raft
//! nodes (docs/design.md §2).
//!
//! - [`control_plane::ControlPlane`]: mlcc's control plane in one process. Every host runs
//!   core's [`mlcc_core::host::HostPolicy`]; every link owner (a switch, or a host for its
//!   uplink) keeps a [`mlcc_core::LoadTable`]; hosts fetch feedback, plan, publish and exchange
//!   progress slot by slot on a deterministic clock.
//! - [`fluid`]: links as a fluid: flows that offer more than a link carries share it in
//!   proportion; a flow cannot send bytes its application does not hold yet.
//!
//! mlcc-sim's `mlcc` policy is this control plane on the simulator's physics (which uses [`fluid`]),
//! and the harness's own tests drive it on small fabrics ([`fabric`]): there is no third copy of
//! the per-host loop.

pub mod control_plane;
pub mod fabric;
pub mod fluid;
