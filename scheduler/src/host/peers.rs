//! The peer exchange (the RPC form of the paper's ACK piggyback): what this host tells its
//! peers and remembers of theirs, and which reports a local flow depends on.

use std::collections::{BTreeSet, HashMap};

use mlcc_core::FlowId;
use mlcc_core::flow::FlowRole;
use mlcc_core::host::PeerProgress;
use mlcc_proto::v1 as pb;

use super::*;

/// Splits "job/src>dst/role".
pub fn parse_flow_id(id: &str) -> Option<(&str, &str, &str, FlowRole)> {
    let mut it = id.split('/');
    let job = it.next()?;
    let (src, dst) = it.next()?.split_once('>')?;
    let role = match it.next()? {
        "agg" => FlowRole::Agg,
        "bcast" => FlowRole::Bcast,
        "ring" => FlowRole::Ring,
        _ => return None,
    };
    it.next().is_none().then_some((job, src, dst, role))
}

impl HostScheduler {
    /// The latest reports of the peers' flows that `f` depends on (DESIGN.md §8): a ring
    /// flow's predecessors into this host, a PS worker's broadcasts from its server, a PS
    /// server's aggregations into it. Whether they are fresh is the policy's to judge.
    pub(super) fn upstream_of(&self, f: &FlowState) -> Vec<PeerProgress> {
        let me = self.cfg.host.as_str();
        self.upstream
            .iter()
            .filter_map(|(id, p)| {
                let (job, src, dst, role) = parse_flow_id(id.as_str())?;
                let wanted = job == f.job
                    && match f.role {
                        FlowRole::Ring => role == FlowRole::Ring && dst == me,
                        FlowRole::Agg => role == FlowRole::Bcast && src == f.dst_host,
                        FlowRole::Bcast => role == FlowRole::Agg && dst == me,
                    };
                wanted.then_some(*p)
            })
            .collect()
    }

    /// Serves a peer's `Exchange`: remembers its flows towards us and answers with this host's
    /// outgoing flows of the same jobs (their latest decisions).
    pub fn on_exchange(
        &mut self,
        sender: &str,
        flows: &[pb::FlowProgress],
    ) -> Vec<pb::FlowProgress> {
        let me = self.cfg.host.clone();
        let mut jobs: BTreeSet<String> = BTreeSet::new();
        for fp in flows {
            let Some((job, src, dst, _)) = parse_flow_id(&fp.flow_id) else {
                continue;
            };
            // Only what the sender may speak for: its own flows towards us.
            if src != sender || dst != me {
                continue;
            }
            jobs.insert(job.to_string());
            self.remember(fp);
        }
        self.silent_peers.remove(sender);
        self.outgoing_of(&jobs)
    }

    /// A peer's answer to our `Exchange`: its outgoing flows of our jobs.
    pub fn on_exchange_reply(&mut self, receiver: &str, flows: &[pb::FlowProgress]) {
        for fp in flows {
            if let Some((_, src, _, _)) = parse_flow_id(&fp.flow_id)
                && src == receiver
            {
                self.remember(fp);
            }
        }
        self.silent_peers.remove(receiver);
    }

    /// A peer did not answer this slot.
    pub fn on_exchange_failed(&mut self, receiver: &str) {
        self.silent_peers.insert(receiver.to_string());
    }

    fn remember(&mut self, fp: &pb::FlowProgress) {
        let Ok(id) = FlowId::new(&fp.flow_id) else {
            return;
        };
        self.upstream.insert(
            id,
            PeerProgress {
                sent: fp.sent_bytes as f64,
                finish: fp.finish_bytes as f64,
                iteration: fp.iteration,
                seen: self.slot,
                reported_in: (fp.slot > 0).then_some(Slot(fp.slot)),
                next_rate: if fp.next_rate_bytes_per_sec.is_finite() {
                    fp.next_rate_bytes_per_sec.max(0.0)
                } else {
                    0.0
                },
            },
        );
    }

    fn outgoing_of(&self, jobs: &BTreeSet<String>) -> Vec<pb::FlowProgress> {
        self.flows
            .values()
            .filter(|f| jobs.contains(&f.job))
            .filter_map(|f| {
                let d = f.decision.as_ref()?;
                Some(pb::FlowProgress {
                    flow_id: f.id.to_string(),
                    sent_bytes: f.sent_bytes.max(0.0) as u64,
                    finish_bytes: d.progress.max(0.0) as u64,
                    planned_rate_bytes_per_sec: 0.0,
                    iteration: f.iteration,
                    slot: f.decided_in.0,
                    next_rate_bytes_per_sec: d.next_rate(),
                })
            })
            .collect()
    }

    /// Peer progress known now (for operators).
    pub fn upstream(&self) -> &HashMap<FlowId, PeerProgress> {
        &self.upstream
    }
}
