//! Progress accounting: progress files, their processes' connections and the datapath's
//! counters become flow groups with their bytes sent and left in the current iteration, the
//! application's backlog and last slot's delivery — what core's policy observes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use mlcc_core::flow::FlowRole;
use mlcc_core::host::{RankBasis, finishes_in_a_slot};
use mlcc_core::job::{Arch, Role};
use mlcc_core::planner::FlowDecision;
use mlcc_core::routing::ecmp_hash_str;
use mlcc_core::topology::{LinkId, NodeId};
use mlcc_core::{FlowId, Rank, Slot};
use mlcc_proto::v1 as pb;
use serde::Serialize;

use super::*;
use crate::datapath::SocketKey;
use crate::sockets::TcpConn;

/// Bookkeeping of one local flow group across slots.
#[derive(Clone, Debug, Serialize)]
pub struct FlowState {
    pub id: FlowId,
    pub job: String,
    /// `job`, shared by every slot's observation of the flow.
    #[serde(skip)]
    pub(super) job_name: Arc<str>,
    pub role: FlowRole,
    pub dst_host: String,
    #[serde(skip)]
    pub dst: NodeId,
    #[serde(skip)]
    pub path: Vec<LinkId>,
    pub path_names: Vec<String>,
    pub source: Source,
    /// Sockets the datapath knows, and all connections found for the group.
    pub sockets: Vec<SocketKey>,
    pub connections: usize,
    pub iteration: u64,
    pub iteration_start: Slot,
    /// The job's model bytes (progress header) or bytes per iteration (`mlccctl job add`);
    /// 0 when unknown.
    pub job_bytes: u64,
    /// Iterations the job runs (progress header's `total_iterations`); 0 when unknown.
    pub job_total_iterations: u64,
    /// Expected bytes of the current iteration and how that was estimated.
    pub expected_bytes: f64,
    pub expected_from: &'static str,
    /// S_f and G_f.
    pub sent_bytes: f64,
    pub remaining_bytes: f64,
    pub slack_bytes: f64,
    /// Bytes this group sent in its last complete iteration (progress files' share; 0 unknown).
    pub last_iteration_bytes: u64,
    /// Bytes the library has handed to the sockets this iteration but the receiver has not
    /// acknowledged yet (progress files' enqueued count minus the datapath's acks); `None`
    /// without both. Beyond what is in flight, this is data the sender already holds: the flow
    /// cannot be ahead of its upstream, and if it under-delivers, the path (not the
    /// application) held it back.
    pub app_backlog: Option<f64>,
    /// Achieved rate over the last slot (bytes/s), `None` without datapath counters.
    pub achieved: Option<f64>,
    /// The rate ordered to the datapath for this slot: the plan's, or more where the flow
    /// paces into free capacity (an idle flow, a plan's last slot); 0 when its sockets' orders
    /// were cleared.
    pub enforced_rate: f64,
    /// Segments the flow's sockets retransmitted since mlccd first saw them.
    pub retransmits: u64,
    /// Of those, the ones retransmitted while a queue stood on the path (see [`SocketCounters::queueing`]):
    /// loss from a full queue, which under mlcc means a plan overbooked a link (or traffic mlcc
    /// does not schedule filled it). The others are random loss, which mlcc rides out.
    pub queue_loss: u64,
    /// Each socket's retransmit counter when last seen.
    #[serde(skip)]
    prev_retransmits: HashMap<SocketKey, u32>,
    #[serde(skip)]
    baseline: HashMap<SocketKey, u64>,
    /// Each socket's acked count where this iteration began, as first taken: what the
    /// process's bytes are split over its groups by. Unlike `baseline` it is never re-anchored:
    /// a split that moved with the baselines it corrects chased itself, and two groups of one
    /// PS worker swapped 8 % of their bytes every slot, each in turn looking unfinished
    /// (testbed `paper-small-no-cross`, a ResNet50 worker's pushes).
    #[serde(skip)]
    split_basis: HashMap<SocketKey, u64>,
    #[serde(skip)]
    prev_acked: Option<u64>,
    /// The progress file's enqueued bytes (this iteration, this flow's share) last slot.
    #[serde(skip)]
    prev_enqueued: Option<f64>,
    /// Each socket's (sent, acked) counters when last seen.
    #[serde(skip)]
    prev_counts: HashMap<SocketKey, (u64, u64)>,
    /// The sockets whose counters did not move since last slot: nothing to send.
    #[serde(skip)]
    pub(super) quiet: Vec<SocketKey>,
    pub decision: Option<FlowDecision>,
    /// The slot `decision` was made for (what the peers' reports of it speak of).
    pub decided_in: Slot,
    pub last_seen: Slot,
    /// Why this flow has no dependency adjustment or plans around a silent switch.
    pub degraded: Vec<String>,
}

/// What one socket's datapath counters say this slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SocketCounters {
    pub acked: u64,
    /// Bytes put on the wire, retransmissions included.
    pub sent: u64,
    pub retransmits: u32,
    /// A queue stood on the path at the socket's last ACK: its smoothed RTT was at least
    /// [`QUEUE_DELAY`] above its minimum. Random loss on an uncongested path leaves the RTT at
    /// its floor; a full queue (what drops under congestion) holds it milliseconds above.
    pub queueing: bool,
}

/// A standing queue this long marks loss as congestion (the testbed's shallowest queue holds
/// 5 ms; an idle veth path's RTT is well under 1 ms, a loaded host's ACK delays about 1 ms).
pub const QUEUE_DELAY: std::time::Duration = std::time::Duration::from_millis(2);

impl SocketCounters {
    pub fn of(s: &crate::datapath::SocketStats) -> Self {
        SocketCounters {
            acked: s.bytes_acked,
            sent: s.bytes_sent,
            retransmits: s.retransmits,
            queueing: s
                .min_rtt
                .is_some_and(|m| s.srtt.saturating_sub(m) >= QUEUE_DELAY),
        }
    }
}

impl FlowState {
    /// Bytes the job has sent over its past iterations, as this host can tell: iterations
    /// completed times the model bytes (the same on every host of the job).
    /// This slot's rate in the plan (bytes/s), 0 before the first decision.
    pub fn last_rate(&self) -> f64 {
        self.decision.as_ref().map_or(0.0, |d| d.rate)
    }

    /// The first component of its precedence key, as last decided.
    pub fn rank(&self) -> Rank {
        self.decision
            .as_ref()
            .map_or(Rank::default(), |d| d.key.rank)
    }

    pub fn attained_bytes(&self) -> Option<f64> {
        (self.job_bytes > 0).then_some(self.iteration as f64 * self.job_bytes as f64)
    }

    /// Bytes the job still moves, this iteration included, where it said how many iterations
    /// it runs. The progress file counts iterations from 1 (0 before the first begins).
    pub fn remaining_job_bytes(&self) -> Option<f64> {
        (self.job_bytes > 0 && self.job_total_iterations > 0).then(|| {
            let done = self.iteration.saturating_sub(1);
            self.job_total_iterations.saturating_sub(done) as f64 * self.job_bytes as f64
        })
    }

    /// What the rank rules read of this flow, its path's slowest link carrying `bottleneck`
    /// bytes/s in slots of `tau` seconds.
    fn rank_basis(&self, bottleneck: f64, tau: f64) -> RankBasis {
        RankBasis {
            iteration_start: self.iteration_start,
            job_bytes: self.job_bytes,
            job_attained_bytes: self.attained_bytes(),
            job_remaining_bytes: self.remaining_job_bytes(),
            last_slot: finishes_in_a_slot(self.remaining_bytes, bottleneck, tau),
        }
    }
}

/// Where a socket's acked count stood when a new iteration began, seen from the first slot
/// that noticed it: the old iteration's baseline moved on by what the old iteration sent
/// (`last_bytes`, the progress file's share), but never beyond what is acked by now, and no
/// further back than this iteration's enqueued bytes allow (`enqueued`: an iteration cannot
/// have had more acked than handed over, which also bounds drift from bytes the library does
/// not count, such as message headers).
pub(super) fn iteration_baseline(
    old: u64,
    acked_now: u64,
    last_bytes: f64,
    enqueued: Option<f64>,
) -> u64 {
    let mut b = if last_bytes > 0.0 {
        old.saturating_add(last_bytes as u64)
    } else {
        acked_now
    };
    if let Some(e) = enqueued {
        b = b.max(acked_now.saturating_sub(e.max(0.0) as u64));
    }
    b.min(acked_now)
}

/// How a whole (a process's bytes over its groups, a group's over its sockets) splits over parts
/// that carried `carried` bytes each (`None`: unknown, no datapath counters): the parts without
/// counters take an even share each, those with counters split the rest in proportion to what
/// they carried, evenly while none has carried anything. The shares sum to 1 (empty: none).
///
/// Counters are cumulative since each connection opened: what a part has carried so far is the
/// best guide to what it carries now, and unlike this iteration's counts it does not follow
/// the rates this very split sets. A connection that carries only control traffic (PS-Lite's
/// to and from its scheduler, ZMQ's connections that only receive) takes about nothing.
pub(super) fn shares(carried: &[Option<u64>]) -> Vec<f64> {
    let n = carried.len() as f64;
    let known = carried.iter().filter(|c| c.is_some()).count() as f64;
    let total: f64 = carried.iter().flatten().map(|&c| c as f64).sum();
    carried
        .iter()
        .map(|c| match c {
            None => 1.0 / n,
            Some(_) if total <= 0.0 => 1.0 / n,
            Some(c) => known / n * (*c as f64 / total),
        })
        .collect()
}

/// How a process's bytes per iteration split over its flow groups.
#[derive(Clone, Copy)]
enum Split {
    /// In the share each group's sockets carried ([`shares`]).
    Carried,
    /// Evenly.
    Even,
    /// Each group moves all of it (a ring step, a broadcast).
    Whole,
}

/// Per group, what one process contributes.
struct Contribution {
    sockets: Vec<SocketKey>,
    conns: usize,
    /// This process's share of the group's iteration bytes, and what it is based on.
    expected: f64,
    expected_from: &'static str,
    sent_share: f64,
    iteration: u64,
    iteration_start_ns: u64,
    model_bytes: u64,
    total_iterations: u64,
    slack: f64,
    last_iteration_bytes: f64,
}

struct FlowSpec {
    job: String,
    role: FlowRole,
    dst: NodeId,
    source: Source,
    sockets: Vec<SocketKey>,
    conns: usize,
    expected: f64,
    expected_from: &'static str,
    /// The progress file's bytes, for when the datapath has no counters.
    sent_share: Option<f64>,
    iteration: Option<u64>,
    start: Slot,
    slack: f64,
    last_iteration_bytes: u64,
    job_bytes: u64,
    job_total_iterations: u64,
}

impl HostScheduler {
    /// Which flow role a process's outgoing traffic has, or why it has none.
    fn role_of(arch: Option<Arch>, role: Role) -> Result<FlowRole, &'static str> {
        match (arch, role) {
            (_, Role::Scheduler) => Err("PS-Lite scheduler: control traffic only"),
            (None, _) => Err("architecture unknown (MLCC_JOB_ARCH unset; use mlccctl job add)"),
            (Some(Arch::Ps), Role::Worker) => Ok(FlowRole::Agg),
            (Some(Arch::Ps), Role::Server) => Ok(FlowRole::Bcast),
            (Some(Arch::Allreduce), Role::Worker) => Ok(FlowRole::Ring),
            (Some(Arch::Allreduce), Role::Server) => Err("all-reduce job with a server role"),
        }
    }

    /// Step 1 of a slot: learns flows and their progress; returns the feedback to fetch.
    pub fn observe(&mut self, slot: Slot, obs: &Observation) -> FeedbackRequests {
        self.slot = slot;
        self.table.advance(slot);
        let me_name = self.cfg.host.clone();
        // Datapath keys by 4-tuple: /proc does not give the netns cookie, the datapath does.
        let mut by_tuple: HashMap<(std::net::SocketAddr, std::net::SocketAddr), Vec<SocketKey>> =
            HashMap::new();
        let mut counters: HashMap<SocketKey, SocketCounters> = HashMap::new();
        if let Some(stats) = &obs.stats {
            for (k, s) in stats {
                by_tuple.entry((k.src, k.dst)).or_default().push(*k);
                counters.insert(*k, SocketCounters::of(s));
            }
        }
        let canon =
            |a: std::net::SocketAddr| std::net::SocketAddr::new(a.ip().to_canonical(), a.port());

        let mut contribs: BTreeMap<FlowId, (String, FlowRole, NodeId, Vec<Contribution>)> =
            BTreeMap::new();
        let old_notes = std::mem::take(&mut self.notes);
        for p in &obs.processes {
            let h = &p.header;
            let who = format!("{}.{:?}.{}.{}", h.job_id, h.role, h.rank, h.pid);
            let arch = h
                .arch
                .or_else(|| self.admin_jobs.get(&h.job_id).map(|j| j.arch));
            let role = match Self::role_of(arch, h.role) {
                Ok(r) => r,
                Err(why) => {
                    self.notes.insert(who, why.to_string());
                    continue;
                }
            };
            // Remote host per connection; skipped ones are counted for the explanation.
            let mut groups: BTreeMap<NodeId, (Vec<SocketKey>, usize)> = BTreeMap::new();
            let (mut unknown, mut local, mut inbound, mut sched) = (0, 0, 0, 0);
            let to_ps_scheduler = |c: &TcpConn| {
                arch == Some(Arch::Ps) && self.cfg.ps_scheduler_port == Some(c.remote.port())
            };
            // A process connected to the PS-Lite scheduler speaks PS-Lite's ZMQ van, which
            // binds one ROUTER to receive and sends over the DEALER it connects to each peer's
            // ROUTER (ps-lite src/zmq_van.h): what it accepted only brings data in. Counted as
            // a group, the scheduler's connection into a server took the whole model while the
            // server had no iteration behind it, on a link the server never sends on.
            let zmq_van = p.conns.iter().any(to_ps_scheduler);
            for c in &p.conns {
                if to_ps_scheduler(c) {
                    sched += 1;
                    continue;
                }
                let Some(remote) = self.topo.host_by_ip(c.remote.ip()) else {
                    unknown += 1;
                    continue;
                };
                if remote == self.me {
                    local += 1;
                    continue;
                }
                if (role == FlowRole::Ring || zmq_van) && c.accepted {
                    inbound += 1;
                    continue;
                }
                let g = groups.entry(remote).or_default();
                g.1 += 1;
                if let Some(keys) = by_tuple.get(&(canon(c.local), canon(c.remote))) {
                    g.0.extend(keys);
                }
            }
            self.notes.insert(
                who,
                format!(
                    "{} {} group(s) from {} connection(s); skipped {unknown} to hosts outside \
                     the topology, {local} intra-host, {inbound} inbound only (a ring's, or accepted \
                     under PS-Lite's ZMQ), {sched} to the PS scheduler",
                    groups.len(),
                    role.as_str(),
                    p.conns.len()
                ),
            );
            if groups.is_empty() {
                continue;
            }
            // The process's bytes go to each group in the share its sockets carry. Split
            // evenly, they credited the idle group towards a PS-Lite scheduler with half of a
            // worker's pushes, planned at line rate, while the real group looked idle and
            // crawled at the rate floor (dmlc/ps-lite's benchmark, 34× slower than cubic).
            let ids: Vec<FlowId> = groups
                .keys()
                .map(|&remote| {
                    let dst = &self.topo.node(remote).name;
                    FlowId::for_group(&h.job_id, &me_name, dst, role)
                })
                .collect();
            let keys: Vec<&[SocketKey]> = groups.values().map(|(k, _)| k.as_slice()).collect();
            let carried = shares(
                &keys
                    .iter()
                    .map(|keys| {
                        (!keys.is_empty()).then(|| {
                            keys.iter()
                                .map(|k| counters.get(k).map_or(0, |c| c.acked))
                                .fold(0u64, u64::saturating_add)
                        })
                    })
                    .collect::<Vec<_>>(),
            );
            let s = &p.snapshot;
            // One split for what the iteration will move and what it has handed over, so a
            // group whose share is all sent is done.
            let parts = self.split(
                s.iteration,
                s.last_iteration_bytes > 0,
                &ids,
                &keys,
                &carried,
            );
            let sent = s.sent_this_iteration() as f64;
            let handed: Vec<f64> = parts.iter().map(|w| sent * w).collect();
            let m = h.model_bytes as f64;
            let world = h.world_size as f64;
            // What the process moves in an iteration, and how that splits over its groups.
            let (expected, from, split) = if s.last_iteration_bytes > 0 {
                // What each group's sockets carried is known once an iteration is over.
                (
                    s.last_iteration_bytes as f64,
                    "last iteration",
                    Split::Carried,
                )
            } else if h.model_bytes > 0 {
                match role {
                    FlowRole::Ring if world >= 2.0 => {
                        (2.0 * (world - 1.0) / world * m, "model", Split::Whole)
                    }
                    FlowRole::Ring => (m, "model (world size unknown)", Split::Whole),
                    // A worker talks to every server: P = the server hosts it reaches. Not
                    // what each group carried so far: in the first slots of the first
                    // iteration, the server acked first would take all of it.
                    FlowRole::Agg => (m, "model / servers", Split::Even),
                    // A server does not know P before the first iteration: assume it holds it all.
                    FlowRole::Bcast => (m, "model (server count unknown)", Split::Whole),
                }
            } else {
                (0.0, "unknown", Split::Whole)
            };
            let slack = if role == FlowRole::Ring && world >= 1.0 {
                m / world
            } else {
                0.0
            };
            let n = groups.len() as f64;
            for (((remote, (sockets, conns)), id), (w, handed)) in groups
                .into_iter()
                .zip(ids)
                .zip(parts.into_iter().zip(handed))
            {
                contribs
                    .entry(id)
                    .or_insert_with(|| (h.job_id.clone(), role, remote, Vec::new()))
                    .3
                    .push(Contribution {
                        sockets,
                        conns,
                        expected: match split {
                            Split::Carried => expected * w,
                            Split::Even => expected / n,
                            Split::Whole => expected,
                        },
                        expected_from: from,
                        sent_share: handed,
                        iteration: s.iteration,
                        iteration_start_ns: s.iteration_start_ns,
                        model_bytes: h.model_bytes,
                        total_iterations: h.total_iterations,
                        slack,
                        last_iteration_bytes: s.last_iteration_bytes as f64 * w,
                    });
            }
        }

        // Admin jobs: their groups take datapath sockets towards their members that no
        // progress-file group claimed, if exactly one admin group wants that remote host.
        let claimed: HashSet<SocketKey> = contribs
            .values()
            .flat_map(|c| c.3.iter().flat_map(|x| x.sockets.iter().copied()))
            .collect();
        let mut admin_groups = Vec::new();
        for job in self.admin_jobs.values() {
            let Ok(groups) = job.flow_groups() else {
                continue;
            };
            for g in groups {
                if g.src == me_name
                    && !contribs.contains_key(&g.id)
                    && let Some(dst) = self.topo.node_by_name(&g.dst)
                {
                    admin_groups.push((g, dst));
                }
            }
        }
        let mut wanted: HashMap<NodeId, usize> = HashMap::new();
        for (_, dst) in &admin_groups {
            *wanted.entry(*dst).or_default() += 1;
        }
        let mut keys_by_host: HashMap<NodeId, Vec<SocketKey>> = HashMap::new();
        for k in counters.keys() {
            if !claimed.contains(k)
                && let Some(h) = self.topo.host_by_ip(k.dst.ip())
            {
                keys_by_host.entry(h).or_default().push(*k);
            }
        }

        let mut present = HashSet::new();
        let tau_ns = self.cfg.policy.slots.tau_ns();
        for (id, (job, role, dst, cs)) in contribs {
            present.insert(id.clone());
            let sockets: Vec<SocketKey> = {
                let mut v: Vec<SocketKey> =
                    cs.iter().flat_map(|c| c.sockets.iter().copied()).collect();
                v.sort();
                v.dedup();
                v
            };
            let iteration = cs.iter().map(|c| c.iteration).max().unwrap_or(0);
            let start_ns = cs.iter().map(|c| c.iteration_start_ns).max().unwrap_or(0);
            let expected: f64 = cs.iter().map(|c| c.expected).sum();
            let from = cs
                .iter()
                .map(|c| c.expected_from)
                .next()
                .unwrap_or("unknown");
            let sent_share: f64 = cs.iter().map(|c| c.sent_share).sum();
            let slack = cs.iter().map(|c| c.slack).fold(0.0, f64::max);
            let last_iteration: f64 = cs.iter().map(|c| c.last_iteration_bytes).sum();
            let conns = cs.iter().map(|c| c.conns).sum();
            let job_bytes = cs.iter().map(|c| c.model_bytes).max().unwrap_or(0);
            let job_total_iterations = cs.iter().map(|c| c.total_iterations).max().unwrap_or(0);
            let start = if start_ns > 0 {
                Slot(start_ns / tau_ns.max(1))
            } else {
                slot
            };
            self.update_flow(
                slot,
                id,
                FlowSpec {
                    job,
                    role,
                    dst,
                    source: Source::Progress,
                    sockets,
                    conns,
                    expected,
                    expected_from: from,
                    sent_share: Some(sent_share),
                    iteration: Some(iteration),
                    start,
                    slack,
                    last_iteration_bytes: last_iteration as u64,
                    job_bytes,
                    job_total_iterations,
                },
                &counters,
            );
        }
        for (g, dst) in admin_groups {
            present.insert(g.id.clone());
            let sockets = if wanted.get(&dst) == Some(&1) {
                let mut v = keys_by_host.get(&dst).cloned().unwrap_or_default();
                v.sort();
                v
            } else {
                Vec::new()
            };
            let conns = sockets.len();
            self.update_flow(
                slot,
                g.id.clone(),
                FlowSpec {
                    job: g.job.clone(),
                    role: g.role,
                    dst,
                    source: Source::Admin,
                    sockets,
                    conns,
                    expected: g.bytes_per_iteration.as_f64(),
                    expected_from: "mlccctl job add",
                    sent_share: None,
                    iteration: None,
                    start: slot,
                    slack: g.slack_bytes.as_f64(),
                    last_iteration_bytes: 0,
                    job_bytes: g.bytes_per_iteration.as_f64() as u64,
                    job_total_iterations: 0,
                },
                &counters,
            );
        }
        // How a process's connections group (or why a flow has no path) changes rarely: a
        // process starts, connects, exits, a connection is not resolved yet. Each change is
        // logged, so an operator sees why a flow is missing or has a connection less.
        for (who, note) in &self.notes {
            if old_notes.get(who) != Some(note) {
                tracing::info!(target: "mlcc_groups", "{who}: {note}");
            }
        }
        for who in old_notes.keys().filter(|w| !self.notes.contains_key(*w)) {
            tracing::info!(target: "mlcc_groups", "{who}: no longer observed");
        }

        let gone: Vec<FlowId> = self
            .flows
            .keys()
            .filter(|id| !present.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(f) = self.flows.remove(&id) {
                self.gone.push(f);
            }
        }
        let horizon = self.cfg.policy.peer_stale_slots.max(1) * 4;
        self.upstream
            .retain(|_, p| slot.since(p.seen).is_none_or(|d| d <= horizon));

        // Feedback queries: switch-owned links of each active flow, batched per switch.
        let mut req = FeedbackRequests::default();
        let tau = self.tau();
        for f in self.flows.values() {
            if f.remaining_bytes <= 0.0 {
                continue;
            }
            for (sw, addr, links) in self.switch_links(&f.path) {
                let b = req.per_switch.entry(sw).or_insert_with(|| SwitchBatch {
                    address: addr,
                    items: Vec::new(),
                });
                b.items.push(pb::FeedbackQuery {
                    flow_id: f.id.to_string(),
                    links,
                    rank: self
                        .cfg
                        .policy
                        .rank_of(f.rank_basis(self.topo.bottleneck(&f.path).0, tau))
                        .0,
                    // Only a policy that plans slot n around committed rates needs them.
                    committed: self.cfg.policy.committed_now,
                });
            }
        }
        req
    }

    /// How one process's bytes of this iteration — what it will move and what it has handed
    /// over (its progress file's counts) — split over its flow groups (`ids`, their sockets
    /// `keys`): each group the share that its sockets carried before this iteration, once a
    /// whole iteration is behind (`settled`) and every group's split basis is this iteration's;
    /// otherwise (the first iteration, a group first seen, an iteration just begun, no datapath
    /// counters) `carried`, its share of what its sockets carried since they opened. A group
    /// whose sockets carry next to nothing — PS-Lite's connections to and from its scheduler —
    /// holds next to none.
    ///
    /// Each group's share is its own, not what the others leave: splitting what is not acked
    /// yet over the groups (by what each had due, or over those whose sockets moved) coupled
    /// them, so one group's counting error (a baseline off by a tail) took another's backlog,
    /// and paper-small's ResNet50 PS job ran 7-12 % slower.
    fn split(
        &self,
        iteration: u64,
        settled: bool,
        ids: &[FlowId],
        keys: &[&[SocketKey]],
        carried: &[f64],
    ) -> Vec<f64> {
        let by_carried = || carried.to_vec();
        if !settled {
            return by_carried();
        }
        let mut before = Vec::with_capacity(ids.len());
        for (id, keys) in ids.iter().zip(keys) {
            let Some(f) = self.flows.get(id).filter(|f| f.iteration == iteration) else {
                return by_carried();
            };
            if keys.is_empty() {
                return by_carried();
            }
            let mut b = 0u64;
            for k in keys.iter() {
                let Some(&base) = f.split_basis.get(k) else {
                    return by_carried();
                };
                b = b.saturating_add(base);
            }
            before.push(Some(b));
        }
        shares(&before)
    }

    fn update_flow(
        &mut self,
        slot: Slot,
        id: FlowId,
        spec: FlowSpec,
        counters: &HashMap<SocketKey, SocketCounters>,
    ) {
        let acked = |k: &SocketKey| counters.get(k).map(|c| c.acked);
        let tau = self.tau();
        let k = self.cfg.policy.slots.horizon() as f64;
        let topo = self.topo.clone();
        // Paths do not change during a flow (DESIGN.md §4; a new topology re-creates every
        // flow): route only a flow seen for the first time.
        if !self.flows.contains_key(&id) {
            let path = match self
                .routes
                .path(&topo, self.me, spec.dst, ecmp_hash_str(id.as_str()))
            {
                Ok(p) => p,
                Err(e) => {
                    self.notes.insert(id.to_string(), format!("no path: {e}"));
                    return;
                }
            };
            self.flows.insert(
                id.clone(),
                FlowState {
                    id: id.clone(),
                    job_name: Arc::from(spec.job.as_str()),
                    job: spec.job.clone(),
                    role: spec.role,
                    dst_host: topo.node(spec.dst).name.clone(),
                    dst: spec.dst,
                    path_names: path.iter().map(|&l| topo.link(l).name.clone()).collect(),
                    path,
                    source: spec.source,
                    sockets: Vec::new(),
                    connections: 0,
                    iteration: spec.iteration.unwrap_or(0),
                    iteration_start: spec.start,
                    job_bytes: spec.job_bytes,
                    job_total_iterations: spec.job_total_iterations,
                    expected_bytes: 0.0,
                    expected_from: "unknown",
                    sent_bytes: 0.0,
                    remaining_bytes: 0.0,
                    slack_bytes: 0.0,
                    last_iteration_bytes: 0,
                    app_backlog: None,
                    achieved: None,
                    enforced_rate: 0.0,
                    retransmits: 0,
                    queue_loss: 0,
                    prev_retransmits: HashMap::new(),
                    baseline: HashMap::new(),
                    split_basis: HashMap::new(),
                    prev_acked: None,
                    prev_enqueued: None,
                    prev_counts: HashMap::new(),
                    quiet: Vec::new(),
                    decision: None,
                    decided_in: slot,
                    last_seen: slot,
                    degraded: Vec::new(),
                },
            );
        }
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        f.last_seen = slot;
        f.job_bytes = spec.job_bytes;
        f.job_total_iterations = spec.job_total_iterations;
        f.connections = spec.conns;
        f.slack_bytes = spec.slack;
        if spec.last_iteration_bytes > 0 {
            f.last_iteration_bytes = spec.last_iteration_bytes;
        }
        // A new iteration: counters restart where the last one's bytes end. Not at what the
        // sockets have acked by now: the iteration began up to a slot ago, and what it sent
        // since would never count (measured on the testbed: ~4 MB of every VGG19 ring
        // iteration, so the flow looked backlogged through the whole compute phase, kept its
        // bookings, and B_f learned a 'slow path' from it).
        if let Some(it) = spec.iteration
            && it != f.iteration
        {
            f.iteration = it;
            f.iteration_start = spec.start;
            let old = std::mem::take(&mut f.baseline);
            // Each socket's part of the group's bytes: what it carried (ZMQ's connections
            // that only receive carry nothing; evenly split they looked behind).
            let w = shares(&spec.sockets.iter().map(acked).collect::<Vec<_>>());
            for (k, w) in spec.sockets.iter().zip(w) {
                let (Some(a), Some(&b)) = (acked(k), old.get(k)) else {
                    continue;
                };
                let last = spec.last_iteration_bytes as f64 * w;
                let now_enqueued = spec.sent_share.map(|e| e * w);
                f.baseline
                    .insert(*k, iteration_baseline(b, a, last, now_enqueued));
            }
            f.split_basis = f.baseline.clone();
        }
        // Sockets first seen mid-iteration count from now on.
        for k in &spec.sockets {
            if let Some(a) = acked(k) {
                f.baseline.entry(*k).or_insert(a);
                f.split_basis.entry(*k).or_insert(a);
            }
        }
        f.baseline.retain(|k, _| spec.sockets.contains(k));
        f.split_basis.retain(|k, _| spec.sockets.contains(k));
        f.sockets = spec.sockets;
        f.prev_retransmits.retain(|k, _| f.sockets.contains(k));
        for k in &f.sockets {
            let Some(l) = counters.get(k) else { continue };
            // A socket first seen now counts from now: its past is not this flow's to explain.
            let prev = f
                .prev_retransmits
                .insert(*k, l.retransmits)
                .unwrap_or(l.retransmits);
            let new = u64::from(l.retransmits.saturating_sub(prev));
            f.retransmits = f.retransmits.saturating_add(new);
            if l.queueing {
                f.queue_loss = f.queue_loss.saturating_add(new);
            }
        }
        let measured: Option<u64> = (!f.sockets.is_empty()
            && f.sockets.iter().all(|k| counters.contains_key(k)))
        // Saturating: the counters come from the datapath, and a wrapped sum (a reused socket
        // key, a corrupt map entry) must not panic the slot loop.
        .then(|| {
            f.sockets
                .iter()
                .fold(0u64, |s, k| s.saturating_add(counters[k].acked))
        });
        let since = |f: &FlowState| -> f64 {
            f.sockets
                .iter()
                .map(|k| {
                    counters[k]
                        .acked
                        .saturating_sub(f.baseline.get(k).copied().unwrap_or(0))
                        as f64
                })
                .sum()
        };
        let mut since_start: Option<f64> = measured.map(|_| since(f));
        // A flow that neither handed over nor got acked a byte for a whole slot has nothing
        // in flight (paced at least at the rate floor, anything queued would have drawn
        // ACKs): all it enqueued is acked. If the counters say otherwise, the baselines are
        // off — taken when mlccd first saw the sockets mid-iteration, or moved by bytes the
        // library does not count — and a phantom backlog would keep the flow booked through
        // its whole compute phase. Re-anchor them so that acked = enqueued.
        if let (Some(now), Some(prev), Some(enq), Some(prev_enq), Some(got)) = (
            measured,
            f.prev_acked,
            spec.sent_share,
            f.prev_enqueued,
            since_start,
        ) && now == prev
            && enq == prev_enq
            && (got - enq).abs() >= 1.0
        {
            let w = shares(
                &f.sockets
                    .iter()
                    .map(|k| Some(counters[k].acked))
                    .collect::<Vec<_>>(),
            );
            for (k, w) in f.sockets.iter().zip(w) {
                let b = f.baseline.get(k).copied().unwrap_or(0) as f64;
                let moved = (b + (got - enq) * w).clamp(0.0, counters[k].acked as f64) as u64;
                f.baseline.insert(*k, moved);
            }
            since_start = Some(since(f));
        }
        f.prev_enqueued = spec.sent_share;
        // Sockets that neither sent nor had a byte acked since last slot have nothing to send
        // (paced at the floor at least, anything queued would have moved): the datapath gives
        // them the floor and the group's rate to the others.
        f.quiet = f
            .sockets
            .iter()
            .filter(|k| match (f.prev_counts.get(*k), counters.get(*k)) {
                (Some(&prev), Some(c)) => prev == (c.sent, c.acked),
                _ => false,
            })
            .copied()
            .collect();
        f.prev_counts = f
            .sockets
            .iter()
            .filter_map(|k| counters.get(k).map(|c| (*k, (c.sent, c.acked))))
            .collect();
        f.achieved = match (measured, f.prev_acked) {
            (Some(now), Some(prev)) => Some(now.saturating_sub(prev) as f64 / tau),
            _ => None,
        };
        f.prev_acked = measured;
        let mut sent = since_start.or(spec.sent_share).unwrap_or(0.0);
        f.expected_bytes = spec.expected;
        f.expected_from = spec.expected_from;
        if spec.source == Source::Admin && spec.expected > 0.0 && sent >= spec.expected {
            // No iteration counter: each bytes_per_iteration chunk is an iteration.
            let chunks = (sent / spec.expected).floor();
            for key in f.sockets.clone() {
                // Move the baselines forward proportionally; exactness is not needed here.
                if let Some(b) = f.baseline.get_mut(&key) {
                    let per = (chunks * spec.expected / f.sockets.len() as f64) as u64;
                    *b = b.saturating_add(per);
                }
            }
            sent -= chunks * spec.expected;
            f.iteration = f.iteration.saturating_add(chunks as u64);
            f.iteration_start = slot;
        }
        if f.expected_bytes <= 0.0 {
            // Nothing says how much is coming: keep the flow planned as a bulk transfer that
            // always has a horizon's worth left at the path's capacity.
            let cap = topo.bottleneck(&f.path).0;
            f.expected_bytes = sent + cap * tau * k;
            f.expected_from = "unknown: bulk";
        }
        f.app_backlog = match (spec.sent_share, since_start) {
            (Some(enqueued), Some(acked)) => Some((enqueued - acked).max(0.0)),
            _ => None,
        };
        f.sent_bytes = sent;
        f.remaining_bytes = (f.expected_bytes - sent).max(0.0);
    }
}
