//! Named scenarios: a topology, a workload and a placement rule.

use mlcc_core::topology::{HierarchySpec, Topology, TopologyError};
use mlcc_core::units::BytesPerSec;

use crate::placement::Placement;
use crate::workload::{ArrivalModel, JobSpec};

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub topology: TopologySpec,
    pub arrivals: ArrivalModel,
    pub placement: Placement,
}

#[derive(Clone, Debug)]
pub enum TopologySpec {
    Hierarchy(HierarchySpec),
    LeafSpine {
        racks: u32,
        hosts_per_rack: u32,
        spines: u32,
        host_gbit: f64,
        uplink_gbit: f64,
    },
    SingleSwitch {
        hosts: u32,
        gbit: f64,
    },
}

impl TopologySpec {
    pub fn build(&self) -> Result<Topology, TopologyError> {
        let g = |x: f64| BytesPerSec::from_bits_per_sec(x * 1e9);
        match self {
            TopologySpec::Hierarchy(h) => Topology::hierarchy(h),
            TopologySpec::LeafSpine {
                racks,
                hosts_per_rack,
                spines,
                host_gbit,
                uplink_gbit,
            } => Topology::leaf_spine(
                *racks,
                *hosts_per_rack,
                *spines,
                g(*host_gbit),
                g(*uplink_gbit),
            ),
            TopologySpec::SingleSwitch { hosts, gbit } => Topology::single_switch(*hosts, g(*gbit)),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            TopologySpec::Hierarchy(h) => format!(
                "3-tier hierarchy: {} hosts ({} per ToR, {} ToRs per edge, {} edges), {:.0}/{:.0}/{:.0} Gbit/s",
                h.hosts_per_tor * h.tors_per_edge * h.edges,
                h.hosts_per_tor,
                h.tors_per_edge,
                h.edges,
                h.capacities[0].bits_per_sec() / 1e9,
                h.capacities[1].bits_per_sec() / 1e9,
                h.capacities[2].bits_per_sec() / 1e9
            ),
            TopologySpec::LeafSpine {
                racks,
                hosts_per_rack,
                spines,
                host_gbit,
                uplink_gbit,
            } => format!(
                "leaf-spine: {racks} racks × {hosts_per_rack} hosts, {spines} spines, {host_gbit}/{uplink_gbit} Gbit/s"
            ),
            TopologySpec::SingleSwitch { hosts, gbit } => {
                format!("single switch: {hosts} hosts at {gbit} Gbit/s")
            }
        }
    }
}

/// The model mix (vgg19, vgg16, resnet50, gpt2): small PS jobs most common, GPT-2 rarest, as
/// in trace studies where most jobs are small.
const MIX: [f64; 4] = [0.25, 0.25, 0.35, 0.15];

pub const NAMES: &[&str] = &["paper-fig15", "quick", "tiny"];

/// The paper's §VII setting at full scale, or (`quick`) a 100-server version with the same
/// load per server, or (`tiny`) a 20-server smoke test.
pub fn by_name(name: &str, quick: bool) -> Option<Scenario> {
    let name = if quick && name == "paper-fig15" {
        "quick"
    } else {
        name
    };
    let hier = |edges: u32| {
        TopologySpec::Hierarchy(HierarchySpec {
            edges,
            ..HierarchySpec::default()
        })
    };
    let s = match name {
        // 1000 servers; ≈ 1 job/s for 8 minutes at the mean rate, peaks of ≈ 4/s in bursts;
        // 10–150 iterations per job (≈ 10 s – 4 min alone).
        "paper-fig15" => Scenario {
            name: name.into(),
            topology: hier(10),
            arrivals: ArrivalModel {
                jobs_per_sec: 1.0,
                span_s: 480.0,
                min_iterations: 10,
                max_iterations: 150,
                mix: MIX,
            },
            placement: Placement::Spread,
        },
        // 100 servers (one edge switch), a tenth of the arrivals.
        "quick" => Scenario {
            name: name.into(),
            topology: hier(1),
            arrivals: ArrivalModel {
                jobs_per_sec: 0.1,
                span_s: 480.0,
                min_iterations: 10,
                max_iterations: 150,
                mix: MIX,
            },
            placement: Placement::Spread,
        },
        // 20 servers on a 2-rack leaf-spine; a handful of short jobs (CI, determinism tests).
        "tiny" => Scenario {
            name: name.into(),
            topology: TopologySpec::LeafSpine {
                racks: 2,
                hosts_per_rack: 10,
                spines: 1,
                host_gbit: 10.0,
                uplink_gbit: 20.0,
            },
            arrivals: ArrivalModel {
                jobs_per_sec: 0.2,
                span_s: 60.0,
                min_iterations: 5,
                max_iterations: 20,
                mix: MIX,
            },
            placement: Placement::Spread,
        },
        _ => return None,
    };
    Some(s)
}

impl Scenario {
    pub fn jobs(&self, seed: u64) -> Vec<JobSpec> {
        self.arrivals.generate(seed)
    }
}
