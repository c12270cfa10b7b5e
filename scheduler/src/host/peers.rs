//! The peer exchange (the RPC form of the paper's ACK piggyback): what this host remembers of
//! its peers' flows, which of those reports a local flow follows, and which peers are silent.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use mlcc_core::dependency;
use mlcc_core::flow::FlowParts;
use mlcc_core::hash::Map;
use mlcc_core::host::PeerProgress;
use mlcc_core::learn::identity::{Label, Report};
use mlcc_core::{FlowId, Slot};
use mlcc_proto::v1 as pb;

use super::Source;
use crate::datapath::{SocketKey, canonical};

/// Peers' reports and their silence.
#[derive(Default)]
pub(super) struct PeerBook {
    /// Each flow's latest report, by job: a flow's upstream is sought among its own job's
    /// reports only, not among every report of every job (that scan was quadratic in a host's
    /// flows).
    by_job: Map<Box<str>, Map<FlowId, PeerProgress>>,
    silent: BTreeSet<String>,
    /// Learned jobs' labels heard since last taken.
    heard: Vec<HeardLabel>,
}

impl PeerBook {
    /// Keeps `fp` as its flow's latest report, seen in `slot`; an id of another form is ignored.
    pub fn remember(&mut self, fp: &pb::FlowProgress, slot: Slot) {
        let (Ok(id), Some(parts)) = (FlowId::new(&fp.flow_id), FlowParts::parse(&fp.flow_id))
        else {
            return;
        };
        self.heard.extend(heard_labels(fp, parts.job));
        let report = PeerProgress {
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
        };
        match self.by_job.get_mut(parts.job) {
            Some(reports) => reports.insert(id, report),
            None => self
                .by_job
                .entry(parts.job.into())
                .or_default()
                .insert(id, report),
        };
    }

    /// Forgets reports older than `horizon` slots at `slot`.
    pub fn forget_older_than(&mut self, slot: Slot, horizon: u64) {
        self.by_job.retain(|_, reports| {
            reports.retain(|_, p| slot.since(p.seen).is_none_or(|d| d <= horizon));
            !reports.is_empty()
        });
    }

    /// The latest reports of the peers' flows that `down` follows in Alg. 2 (docs/design.md §8,
    /// [`dependency::upstream`]): a ring flow's predecessors into this host, a PS worker's broadcasts from its server, a PS
    /// server's aggregations into it. Whether they are fresh is the policy's to judge.
    pub fn upstream_of(&self, down: &FlowParts<'_>) -> Vec<PeerProgress> {
        dependency::upstream(
            down,
            self.by_job
                .get(down.job)
                .into_iter()
                .flatten()
                .filter_map(|(id, p)| Some((id.parts()?, *p))),
        )
    }

    /// The learned jobs' labels heard since the last call.
    pub fn take_heard(&mut self) -> Vec<HeardLabel> {
        std::mem::take(&mut self.heard)
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

    pub fn reports(&self) -> impl Iterator<Item = (&FlowId, &PeerProgress)> {
        self.by_job.values().flatten()
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

/// What a report of a flow from `source` carries only where the flow is learned: its sockets
/// (the receiver ties its process to the job by them) and its process's bytes per iteration as
/// learned (`job_bytes`; the receiver, not learned yet, tries them against its own traffic).
/// Every other field is left to the caller (struct update).
pub(super) fn learned_part(
    source: Source,
    sockets: &[SocketKey],
    job_bytes: u64,
) -> pb::FlowProgress {
    if source != Source::Learned {
        return pb::FlowProgress::default();
    }
    pb::FlowProgress {
        sockets: sockets
            .iter()
            .map(|k| pb::SocketPair {
                local: k.src.to_string(),
                remote: k.dst.to_string(),
            })
            .collect(),
        learned_bytes_per_iteration: job_bytes,
        ..Default::default()
    }
}

/// A connection as this host sees it: (local, remote), canonical.
pub type Tuple = (SocketAddr, SocketAddr);

/// What a peer's report of a learned job's flow carried (the label, the iteration the sender
/// counted, its bytes per iteration), and over which connection, as this host sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct HeardLabel {
    pub conn: Tuple,
    pub report: Report,
}

/// The label a peer's report of a learned job's flow carries, once per connection it names
/// (the peer's remote end is our local one); nothing for a job with a progress file, and a
/// malformed address is skipped.
pub(super) fn heard_labels(fp: &pb::FlowProgress, job: &str) -> impl Iterator<Item = HeardLabel> {
    let label = Label::of_job(job);
    let pairs = if label.is_some() {
        &fp.sockets[..]
    } else {
        &[]
    };
    pairs.iter().filter_map(move |p| {
        let (local, remote) = (p.remote.parse().ok()?, p.local.parse().ok()?);
        Some(HeardLabel {
            conn: (canonical(local), canonical(remote)),
            report: Report {
                label: label.clone()?,
                iteration: fp.iteration,
                bytes_per_iteration: fp.learned_bytes_per_iteration,
            },
        })
    })
}

/// Whether a report came from `receiver`'s own flows (its answer to our exchange).
pub(super) fn sent_by(fp: &pb::FlowProgress, receiver: &str) -> bool {
    FlowParts::parse(&fp.flow_id).is_some_and(|p| p.src == receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: &str, sent: u64) -> pb::FlowProgress {
        pb::FlowProgress {
            flow_id: id.into(),
            sent_bytes: sent,
            finish_bytes: sent,
            ..Default::default()
        }
    }

    fn down(id: &str) -> FlowId {
        FlowId::new(id).unwrap()
    }

    /// The per-job index finds what a scan of every report would, and forgets with the reports.
    #[test]
    fn upstream_is_sought_among_the_flows_own_job_and_forgotten_with_its_report() {
        let mut book = PeerBook::default();
        book.remember(&report("a/h1>h2/ring", 10), Slot(1));
        book.remember(&report("b/h1>h2/ring", 20), Slot(5));
        book.remember(&report("a/h3>h2/ring", 30), Slot(5));
        book.remember(&report("not a group id", 40), Slot(5));
        let a = down("a/h2>h3/ring");
        let mut sent: Vec<f64> = book
            .upstream_of(&a.parts().unwrap())
            .iter()
            .map(|p| p.sent)
            .collect();
        sent.sort_by(f64::total_cmp);
        // The flow from its own receiver (h3) is dropped while another predecessor is there.
        assert_eq!(sent, [10.0]);
        let b = down("b/h2>h1/ring");
        assert_eq!(book.upstream_of(&b.parts().unwrap())[0].sent, 20.0);
        // A newer report of the same flow replaces it, once.
        book.remember(&report("a/h1>h2/ring", 15), Slot(6));
        assert_eq!(book.upstream_of(&a.parts().unwrap())[0].sent, 15.0);
        assert_eq!(book.by_job["a"].len(), 2);
        // The report from slot 1 ages out; the index follows.
        book.remember(&report("a/h1>h2/ring", 15), Slot(1));
        book.forget_older_than(Slot(6), 2);
        let left: Vec<f64> = book
            .upstream_of(&a.parts().unwrap())
            .iter()
            .map(|p| p.sent)
            .collect();
        assert_eq!(left, [30.0]);
        book.forget_older_than(Slot(20), 2);
        assert!(book.upstream_of(&a.parts().unwrap()).is_empty());
        assert!(book.by_job.is_empty());
        book.remember(&report("a/h1>h2/ring", 50), Slot(20));
        assert_eq!(book.upstream_of(&a.parts().unwrap())[0].sent, 50.0);
    }

    /// A learned flow's report names its sockets; the receiver reads them as its own ends,
    /// with the sender's label. A job with a progress file, or a malformed address, says none.
    #[test]
    fn a_learned_flows_sockets_reach_the_receiver_as_its_own_connections() {
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let key = SocketKey::new(1, a("10.0.0.1:4000"), a("10.0.0.2:5000"));
        let unlearned = learned_part(Source::Progress, &[key], 29_000_000);
        assert!(unlearned.sockets.is_empty());
        assert_eq!(unlearned.learned_bytes_per_iteration, 0);
        let learned = learned_part(Source::Learned, &[key], 29_000_000);
        let mut fp = pb::FlowProgress {
            iteration: 12,
            sockets: learned.sockets,
            learned_bytes_per_iteration: learned.learned_bytes_per_iteration,
            ..report("learned-h1-7/h1>h2/ring", 1)
        };
        fp.sockets.push(pb::SocketPair {
            local: "not an address".into(),
            remote: "10.0.0.2:5000".into(),
        });
        let mut book = PeerBook::default();
        book.remember(&fp, Slot(1));
        book.remember(&report("resnet/h1>h2/ring", 1), Slot(1));
        let heard = book.take_heard();
        assert_eq!(
            heard,
            [HeardLabel {
                conn: (a("10.0.0.2:5000"), a("10.0.0.1:4000")),
                report: Report {
                    label: Label::own("h1", 7),
                    iteration: 12,
                    bytes_per_iteration: 29_000_000,
                },
            }]
        );
        assert!(book.take_heard().is_empty(), "taken once");
    }
}
