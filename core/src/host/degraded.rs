//! Why a flow runs degraded this slot (or why a rule set its rate aside), as data: the
//! daemon reports them to operators and counts them in metrics; the simulator ignores them.

use serde::Serialize;

use crate::topology::{LinkId, NodeId, Topology};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Degraded {
    /// A switch on the path did not answer in time: its links were planned as unbooked.
    SwitchSilent { switch: NodeId },
    /// A switch answered without a load for one of its links (it refused the item): planned
    /// as unbooked.
    FeedbackMissing { switch: NodeId, link: LinkId },
    /// A switch's clock is off by more than τ/4: the flow is left to kernel TCP, its
    /// bookings withdrawn.
    ClockSkew { switch: NodeId },
    /// The receiving host's daemon did not answer: no dependency adjustment.
    PeerSilent { host: NodeId },
    /// Alg. 2 would have held the flow back, but its sender holds the bytes (peer progress is
    /// a slot stale): not held back.
    HolderNotHeldBack,
}

impl Degraded {
    /// A sentence for operators, with the topology's names.
    pub fn describe(&self, topo: &Topology) -> String {
        let node = |n: &NodeId| topo.node(*n).name.as_str();
        match self {
            Degraded::SwitchSilent { switch } => {
                format!("switch {} silent: its links unbooked", node(switch))
            }
            Degraded::FeedbackMissing { switch, link } => format!(
                "switch {} gave no load for {}: unbooked",
                node(switch),
                topo.link(*link).name
            ),
            Degraded::ClockSkew { switch } => format!(
                "clock skew vs switch {} beyond τ/4: left to kernel TCP",
                node(switch)
            ),
            Degraded::PeerSilent { host } => format!("peer {} silent: no dependency", node(host)),
            Degraded::HolderNotHeldBack => {
                "sender holds the data: not held back by stale upstream progress".into()
            }
        }
    }
}
