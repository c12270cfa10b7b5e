//! This host's view of the fabric: the topology, its routes, which node this host is, and who
//! speaks for each link (the switch emulator that owns it, if any).

use std::sync::Arc;

use mlcc_core::LoadTable;
use mlcc_core::Slot;
use mlcc_core::routing::{Routes, ecmp_hash_str};
use mlcc_core::topology::{LinkId, Node, NodeId, NodeKind, Owner, Topology};

use super::HostError;

/// The links of a flow's path that one emulated switch owns, by name in path order, with the
/// switch's name and its emulator's address: what the flow asks that switch about and books
/// with it. Paths do not change during a flow, so each flow keeps its parts from routing on
/// rather than grouping its path every slot; and a flow a new topology ends still withdraws
/// from the switches it booked on, named as they were.
#[derive(Clone, Debug)]
pub struct SwitchPart {
    pub switch: String,
    pub address: String,
    pub links: Vec<String>,
}

pub(super) struct Fabric {
    topo: Arc<Topology>,
    routes: Routes,
    me: NodeId,
    /// The nodes in name order: a slot's messages per peer are put in name order by walking
    /// it rather than by sorting the peers.
    by_name: Vec<NodeId>,
}

impl Fabric {
    /// `host`'s view of `topo`; refused where `host` is not one of its hosts.
    pub fn new(topo: Arc<Topology>, host: &str) -> Result<Self, HostError> {
        let me = topo
            .node_by_name(host)
            .filter(|&n| topo.node(n).is_host())
            .ok_or_else(|| HostError::UnknownHost(host.to_string()))?;
        let mut by_name: Vec<NodeId> = (0..topo.nodes().len() as u32).map(NodeId).collect();
        by_name.sort_by(|&a, &b| topo.node(a).name.cmp(&topo.node(b).name));
        Ok(Fabric {
            routes: Routes::new(&topo),
            topo,
            me,
            by_name,
        })
    }

    /// The topology's nodes in name order.
    pub fn by_name(&self) -> &[NodeId] {
        &self.by_name
    }

    pub fn topo(&self) -> &Topology {
        &self.topo
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The table of the links this host owns (its uplinks), with K slots from `slot`.
    pub fn own_table(&self, horizon: usize, slot: Slot) -> LoadTable {
        let owned = self
            .topo
            .links_owned_by(self.me)
            .into_iter()
            .map(|l| (l, self.topo.link(l).capacity));
        // Only written here, and read whole: no query takes out a publisher.
        LoadTable::new(horizon, slot, owned).without_publisher_sums()
    }

    /// The path of flow `id` to `dst` (ECMP by the id's hash, as every driver routes it).
    pub fn route(&self, dst: NodeId, id: &str) -> Result<Vec<LinkId>, String> {
        self.routes
            .path(&self.topo, self.me, dst, ecmp_hash_str(id))
            .map_err(|e| e.to_string())
    }

    /// The links of `path` grouped by the switch that owns them, for switches with an emulator.
    pub fn switch_parts(&self, path: &[LinkId]) -> Vec<SwitchPart> {
        let mut out: Vec<SwitchPart> = Vec::new();
        for &l in path {
            if let Some((_, node, address)) = self.emulated_owner(l) {
                let name = self.topo.link(l).name.clone();
                match out.iter_mut().find(|p| p.switch == node.name) {
                    Some(p) => p.links.push(name),
                    None => out.push(SwitchPart {
                        switch: node.name.clone(),
                        address: address.to_string(),
                        links: vec![name],
                    }),
                }
            }
        }
        out
    }

    /// The switch that owns link `l`, if an emulator speaks for it: the switch, its node and
    /// the emulator's address. Host-owned links and links of switches without one are
    /// nobody's to ask.
    pub fn emulated_owner(&self, l: LinkId) -> Option<(NodeId, &Node, &str)> {
        let Owner::Switch(s) = self.topo.owner(l) else {
            return None;
        };
        let node = self.topo.node(s);
        match &node.kind {
            NodeKind::Switch {
                emulator: Some(addr),
                ..
            } => Some((s, node, addr.as_str())),
            _ => None,
        }
    }
}
