//! mlcc-scheduler: the per-host daemon `mlccd` and its operator CLI `mlccctl` (docs/design.md §9–§11).
//!
//! `host` is the per-slot shell around mlcc-core's `HostPolicy` (observations in, orders and
//! protobuf out, no I/O); `monitor`, `progress`, `sockets` and `datapath` read
//! and write the host; the daemon modules are the thin async shell around them. `mltcp` feeds
//! the MLTCP peer baseline's CC (the `mltcp-feeder` binary), not mlcc.

pub mod admin;
pub mod config;
pub mod daemon;
pub mod datapath;
pub mod host;
pub mod learned;
pub mod metrics;
pub mod mltcp;
pub mod monitor;
pub mod peers;
pub mod progress;
pub mod session;
pub mod slot_loop;
pub mod sockets;
pub mod state;
pub mod stream;
