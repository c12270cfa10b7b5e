//! mlcc-switch-emu: `mlcc-switchd`, the load table of one switch that cannot be programmed,
//! served over gRPC (docs/design.md §6, §10).
//!
//! `emulator` is the sans-IO state machine around `mlcc_core`'s load table; `grpc`, `server`
//! and `metrics` are the thin async shell; `bench` is the load generator and `baseline` the
//! bare transport it is compared with.

pub mod baseline;
pub mod bench;
pub mod config;
pub mod emulator;
pub mod grpc;
pub mod metrics;
pub mod server;

pub use emulator::Emulator;
pub use mlcc_daemon::clock::{Clock, ManualClock, SystemClock};
