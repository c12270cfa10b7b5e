//! mlcc-sim: a trace-driven, discrete-slot simulator that runs mlcc-core's own planning code
//! (the daemon's `Planner`, Alg. 1, Alg. 2 and `LoadTable`) on clusters of up to thousands of
//! servers and compares it with the paper's baselines (MCS, CCML), per-link fair sharing and
//! the isolated lower bound (docs/design.md §15).

pub mod engine;
pub mod layers;
pub mod model_zoo;
pub mod physics;
pub mod placement;
pub mod plot;
pub mod policy;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod state;
pub mod testbed;
pub mod workload;
