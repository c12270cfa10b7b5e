//! mlcc-scheduler: the per-host daemon `mlccd` and its operator CLI `mlccctl` (DESIGN.md §9–§11).

pub mod monitor;
pub mod progress;
