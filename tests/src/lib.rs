//! The emulated cluster testbed (docs/design.md §14): network namespaces as hosts, bridges as
//! switches, shaped veth links, real `mlcc-switchd` / `mlccd` processes with the real BPF
//! datapath, and synthetic training jobs (`mlcc-trainer`) over real TCP.

pub mod cassini;
pub mod cluster;
pub mod experiment;
pub mod figure;
pub mod net;
pub mod predict;
pub mod progress;
pub mod rate_consistency;
pub mod report;
pub mod scenario;
pub mod trainer;
pub mod wire;
