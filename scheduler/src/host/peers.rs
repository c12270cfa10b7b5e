//! The peer exchange (the RPC form of the paper's ACK piggyback): what this host remembers of
//! its peers' flows, which of those reports a local flow follows, and which peers are silent.

use std::collections::BTreeSet;

use mlcc_core::dependency;
use mlcc_core::flow::FlowParts;
use mlcc_core::hash::Map;
use mlcc_core::host::PeerProgress;
use mlcc_core::{FlowId, Slot};
use mlcc_proto::v1 as pb;

/// Peers' reports and their silence.
#[derive(Default)]
pub(super) struct PeerBook {
    upstream: Map<FlowId, PeerProgress>,
    silent: BTreeSet<String>,
}

impl PeerBook {
    /// Keeps `fp` as its flow's latest report, seen in `slot`; an id of another form is ignored.
    pub fn remember(&mut self, fp: &pb::FlowProgress, slot: Slot) {
        let Ok(id) = FlowId::new(&fp.flow_id) else {
            return;
        };
        self.upstream.insert(
            id,
            PeerProgress {
                sent: fp.sent_bytes as f64,
                finish: fp.finish_bytes as f64,
                iteration: fp.iteration,
                seen: slot,
                reported_in: (fp.slot > 0).then_some(Slot(fp.slot)),
                next_rate: if fp.next_rate_bytes_per_sec.is_finite() {
                    fp.next_rate_bytes_per_sec.max(0.0)
                } else {
                    0.0
                },
            },
        );
    }

    /// Forgets reports older than `horizon` slots at `slot`.
    pub fn forget_older_than(&mut self, slot: Slot, horizon: u64) {
        self.upstream
            .retain(|_, p| slot.since(p.seen).is_none_or(|d| d <= horizon));
    }

    /// The latest reports of the peers' flows that `down` follows in Alg. 2 (docs/design.md §8,
    /// [`dependency::upstream`]): a ring flow's predecessors into this host, a PS worker's broadcasts from its server, a PS
    /// server's aggregations into it. Whether they are fresh is the policy's to judge.
    pub fn upstream_of(&self, down: &FlowParts<'_>) -> Vec<PeerProgress> {
        dependency::upstream(
            down,
            self.upstream
                .iter()
                .filter_map(|(id, p)| Some((id.parts()?, *p))),
        )
    }

    pub fn answered(&mut self, peer: &str) {
        self.silent.remove(peer);
    }

    pub fn failed(&mut self, peer: &str) {
        self.silent.insert(peer.to_string());
    }

    pub fn is_silent(&self, peer: &str) -> bool {
        self.silent.contains(peer)
    }

    pub fn silent(&self) -> impl Iterator<Item = &String> {
        self.silent.iter()
    }

    pub fn reports(&self) -> &Map<FlowId, PeerProgress> {
        &self.upstream
    }
}

/// The flows of `reports` that `sender` may speak for towards `me` (its own flows to us), and
/// their jobs.
pub(super) fn from_sender<'a>(
    reports: &'a [pb::FlowProgress],
    sender: &str,
    me: &str,
) -> impl Iterator<Item = (&'a pb::FlowProgress, FlowParts<'a>)> {
    let sender = sender.to_string();
    let me = me.to_string();
    reports.iter().filter_map(move |fp| {
        let parts = FlowParts::parse(&fp.flow_id)?;
        (parts.src == sender && parts.dst == me).then_some((fp, parts))
    })
}

/// Whether a report came from `receiver`'s own flows (its answer to our exchange).
pub(super) fn sent_by(fp: &pb::FlowProgress, receiver: &str) -> bool {
    FlowParts::parse(&fp.flow_id).is_some_and(|p| p.src == receiver)
}
