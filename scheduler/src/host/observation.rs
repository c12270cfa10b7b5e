//! What core's policy observes of a local flow: its bookkeeping, its path with the switches'
//! answers (or their silence, or a skewed clock), and its peers' reports. Built before the
//! switches answer for the feedback queries (which carry the flow's precedence key), and again
//! with their answers for the step.

use std::collections::{BTreeMap, BTreeSet};

use mlcc_core::flow::FlowParts;
use mlcc_core::hash::{self, Map};
use mlcc_core::host::{Answer, FlowObs, LinkObs, PolicyConfig};
use mlcc_core::topology::{LinkId, Topology};
use mlcc_proto::v1 as pb;

use super::fabric::Fabric;
use super::flow_state::FlowState;
use super::peers::PeerBook;
use super::{FeedbackAnswers, FeedbackRequests, SwitchBatch, entry_for};

/// The switches' loads by (flow, link), from the switches that answered.
pub(super) struct Answers<'a> {
    /// Per node, whether it is a switch that answered: looked up per link of every flow, by
    /// index rather than by hashing the switch's name.
    answered: Vec<bool>,
    loads: Map<(&'a str, &'a str), &'a pb::LinkLoad>,
}

impl<'a> Answers<'a> {
    pub fn of(answered: &'a FeedbackAnswers, topo: &Topology) -> Self {
        let mut by_node = vec![false; topo.nodes().len()];
        for s in answered.keys().filter_map(|name| topo.node_by_name(name)) {
            by_node[s.index()] = true;
        }
        let n = answered
            .values()
            .flat_map(|r| &r.flows)
            .map(|ff| ff.links.len())
            .sum();
        let mut loads = hash::map_with_capacity(n);
        for r in answered.values() {
            for ff in &r.flows {
                for l in &ff.links {
                    loads.insert((ff.flow_id.as_str(), l.link.as_str()), l);
                }
            }
        }
        Answers {
            answered: by_node,
            loads,
        }
    }
}

/// Where a flow's observation comes from this slot.
pub(super) struct Context<'a> {
    pub fabric: &'a Fabric,
    pub me: &'a str,
    pub peers: &'a PeerBook,
    /// Switches whose clock is off ours by more than τ/4.
    pub unsynced: &'a BTreeSet<String>,
}

impl Context<'_> {
    /// What core's policy sees of `f`: with `answers`, the switches' answers on its links.
    pub fn observe(&self, f: &FlowState, answers: Option<&Answers<'_>>) -> FlowObs {
        let mut o = self.own(f, answers);
        o.upstream = self.peers.upstream_of(&FlowParts {
            job: &f.job,
            src: self.me,
            dst: &f.dst_host,
            role: f.role,
        });
        o.peer_silent = self.peers.is_silent(&f.dst_host);
        o
    }

    /// What `f`'s own bookkeeping and path say, without its peers' reports: all that its
    /// precedence key reads ([`PolicyConfig::key_of`]).
    fn own(&self, f: &FlowState, answers: Option<&Answers<'_>>) -> FlowObs {
        let links = f.path.iter().map(|&l| self.link(f, l, answers)).collect();
        let mut o = FlowObs::new(f.id.clone(), f.job_name.clone(), f.role, f.dst, links);
        o.connections = f.sockets.len();
        o.quiet_connections = f.quiet_sockets().len();
        o.iteration = f.iteration;
        o.iteration_start = f.iteration_start;
        o.job_progress = f.job_progress();
        o.sent_bytes = f.sent_bytes;
        o.remaining_bytes = f.remaining_bytes;
        o.slack_bytes = f.slack_bytes;
        o.app_backlog = f.app_backlog;
        o.in_flight = f.in_flight;
        o.achieved = f.achieved;
        o
    }

    /// One link of `f`'s path: its capacity, the owning switch's answer (or its silence) and
    /// whether that switch's clock can be trusted. A flow with nothing left was not asked
    /// about.
    fn link(&self, f: &FlowState, l: LinkId, answers: Option<&Answers<'_>>) -> LinkObs {
        let link = self.fabric.topo().link(l);
        let mut lo = LinkObs::unasked(l, link.capacity.0);
        let Some((s, node, _)) = self.fabric.emulated_owner(l) else {
            return lo;
        };
        if self.unsynced.contains(&node.name) {
            lo.unsynced_switch = Some(s);
        }
        let Some(a) = answers.filter(|_| has_bytes_left(f)) else {
            return lo;
        };
        lo.answer = if !a.answered[s.index()] {
            Answer::Silent { switch: s }
        } else if let Some(ll) = a.loads.get(&(f.id.as_str(), link.name.as_str())) {
            let c = ll.capacity_bytes_per_sec;
            lo.reported_capacity = (c.is_finite() && c > 0.0).then_some(c);
            lo.committed_now = ll.committed_bytes_per_sec;
            Answer::Load(ll.load_bytes_per_sec.clone())
        } else {
            Answer::Missing { switch: s }
        };
        lo
    }
}

/// Whether `f` has bytes left to plan (a flow of unknown size always has).
pub(super) fn has_bytes_left(f: &FlowState) -> bool {
    f.remaining_bytes.is_none_or(|r| r > 0.0)
}

/// The feedback queries of this slot: the switch-owned links of each flow with bytes left,
/// batched per switch, each with the precedence key the flow will book with.
pub(super) fn queries<'a>(
    ctx: &Context<'_>,
    policy: &PolicyConfig,
    flows: impl ExactSizeIterator<Item = &'a FlowState>,
) -> FeedbackRequests {
    let mut per_switch: BTreeMap<String, SwitchBatch<pb::FeedbackQuery>> = BTreeMap::new();
    // A switch is asked about at most every flow: its batch is sized once, not grown.
    let most = flows.len();
    for f in flows.filter(|f| has_bytes_left(f)) {
        let key = policy.key_of(&ctx.own(f, None));
        // `own` leaves the peers' reports out: the key must not read them.
        debug_assert_eq!(key, policy.key_of(&ctx.observe(f, None)));
        for part in &f.by_switch {
            let item = pb::FeedbackQuery {
                flow_id: f.id.as_str().to_owned(),
                links: part.links.clone(),
                rank: key.rank.0,
                // Only a policy that plans slot n around committed rates needs them.
                committed: policy.committed_now,
            };
            entry_for(&mut per_switch, &part.switch, || SwitchBatch {
                address: part.address.clone(),
                items: Vec::with_capacity(most),
            })
            .items
            .push(item);
        }
    }
    FeedbackRequests { per_switch }
}
