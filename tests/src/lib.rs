//! The emulated cluster testbed (docs/design.md §14): network namespaces as hosts, bridges as
//! switches, shaped veth links, real `mlcc-switchd` / `mlccd` processes with the real BPF
//! datapath, and training jobs over real TCP: synthetic ones (`mlcc-trainer`) and PyTorch DDP
//! ones (`python3 -m mlcc.torch.job`, [`torch`]).

pub mod cassini;
pub mod cluster;
pub mod cpu_load;
pub mod experiment;
pub mod figure;
pub mod learned;
pub mod net;
pub mod predict;
pub mod progress;
pub mod rate_consistency;
pub mod report;
pub mod scenario;
pub mod torch;
pub mod trainer;
pub mod wire;
