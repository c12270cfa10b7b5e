//! mlcc-core: the sans-IO planning core shared by `mlccd`, `mlcc-switchd` and `mlcc-sim`.
//!
//! Nothing here owns a socket, a runtime or a clock: callers pass in the current slot, the
//! feedback they fetched and the counters they read, and get plans back. That is what lets the
//! daemon, the switch emulator and the simulator run the very same Alg. 1 / Alg. 2 / load-table
//! code (docs/design.md §2).

pub mod dependency;
pub mod estimator;
pub mod flow;
pub mod hash;
pub mod host;
pub mod job;
pub mod learn;
pub mod load_table;
pub mod planner;
pub mod routing;
pub mod slot;
pub mod slot_allocation;
pub mod topology;
pub mod units;

pub use flow::{FlowId, FlowRole, PrecedenceKey, Rank};
pub use load_table::{FeedbackMode, LoadTable};
pub use planner::Planner;
pub use slot::{Slot, SlotConfig};
pub use units::{Bytes, BytesPerSec};
