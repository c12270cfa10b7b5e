//! mlccd's per-slot shell around core's per-host policy (DESIGN.md §5, §8, §11, §11a), without
//! sockets or clocks. Every rule that decides a rate is core's [`HostPolicy`]'s; this module
//! turns what the daemon reads into the policy's observations and its answer into orders and
//! protobuf.
//!
//! The async shell drives one slot in three steps and does all I/O in between:
//! 1. [`HostScheduler::observe`] (`flows`): progress files, their processes' connections and the
//!    datapath counters in; flow groups, S/G bookkeeping and the feedback queries per switch out;
//! 2. [`HostScheduler::plan`] (`decide`): the switches' answers (or their absence) in; core's
//!    decision; rate orders, schedule batches per switch and progress messages per peer out;
//! 3. [`HostScheduler::on_exchange`] / [`HostScheduler::on_exchange_reply`] (`peers`): peers'
//!    progress in, used by the next slot's dependencies (one slot stale, as in the paper).
//!
//! Keeping this free of I/O is what lets the tests drive a whole cluster of schedulers in one
//! process, the conformance test replay its observations, and the benchmark measure the
//! decision work alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mlcc_core::host::{FlowObs, HostPolicy, PolicyConfig};
use mlcc_core::job::Job;
use mlcc_core::routing::Routes;
use mlcc_core::topology::{LinkId, Node, NodeId, NodeKind, Owner, Topology};
use mlcc_core::{FlowId, LoadTable, Slot, SlotConfig};

pub use mlcc_core::host::{PeerProgress, RankRule};
use mlcc_proto::v1 as pb;
use serde::Serialize;

use crate::datapath::{RateOrder, SocketKey, SocketStats};
use crate::progress::{ProgressHeader, ProgressSnapshot};
use crate::sockets::TcpConn;

/// Knobs of the per-host shell; the policy's own are core's [`PolicyConfig`].
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// This host's name in the topology.
    pub host: String,
    /// Every rule that decides a rate, with core's defaults.
    pub policy: PolicyConfig,
    /// Rate orders hold this many slots, so the BPF fallback takes over if mlccd stops.
    pub order_expiry_slots: u32,
    /// Remote port of the PS-Lite scheduler (DMLC_PS_ROOT_PORT): its control traffic is skipped.
    pub ps_scheduler_port: Option<u16>,
}

impl HostConfig {
    pub fn new(host: impl Into<String>, slots: SlotConfig) -> Self {
        HostConfig {
            host: host.into(),
            policy: PolicyConfig::new(slots),
            order_expiry_slots: 3,
            ps_scheduler_port: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("host {0:?} is not a host of the topology")]
    UnknownHost(String),
    #[error("job {job}: {reason}")]
    BadJob { job: String, reason: String },
}

/// One training process as seen this slot.
#[derive(Clone, Debug)]
pub struct ProcessObs {
    pub header: ProgressHeader,
    pub snapshot: ProgressSnapshot,
    pub conns: Vec<TcpConn>,
}

/// Everything read at the start of a slot.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub processes: Vec<ProcessObs>,
    /// Datapath counters; `None` when the datapath could not be read this slot.
    pub stats: Option<Vec<(SocketKey, SocketStats)>>,
}

/// Where a flow group came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Progress,
    Admin,
}

/// The queries of one slot: per switch name, its address and one batch.
#[derive(Clone, Debug, Default)]
pub struct FeedbackRequests {
    pub per_switch: BTreeMap<String, SwitchBatch<pb::FeedbackQuery>>,
}

#[derive(Clone, Debug, Default)]
pub struct SwitchBatch<T> {
    pub address: String,
    pub items: Vec<T>,
}

/// What the switches answered; a switch missing from the map did not answer in time.
pub type FeedbackAnswers = HashMap<String, pb::FetchFeedbackReply>;

/// Everything one slot decided.
#[derive(Clone, Debug, Default)]
pub struct SlotPlan {
    pub slot: Slot,
    pub orders: Vec<RateOrder>,
    /// Orders due this long after `orders` took effect (core's hand-overs within the slot).
    pub handovers: Vec<(Duration, Vec<RateOrder>)>,
    pub clear: Vec<SocketKey>,
    pub schedules: BTreeMap<String, SwitchBatch<pb::ScheduleItem>>,
    /// Per receiving host: this host's flows towards it.
    pub peers: BTreeMap<String, Vec<pb::FlowProgress>>,
    /// Degraded modes in force this slot, human readable.
    pub degraded: Vec<String>,
    pub silent_switches: Vec<String>,
    /// Switches whose clock is off by more than τ/4: the flows through them were left to
    /// kernel TCP and their bookings withdrawn.
    pub unsynced_switches: Vec<String>,
    /// Flows planned without a dependency because their upstream's peer is silent.
    pub flows_without_peer: usize,
    /// (flow, link) pairs planned as unbooked because an answering switch gave no load for them.
    pub feedback_missing: usize,
}

impl SlotPlan {
    /// Adds `item` to the batch for switch `sw` (at `address`).
    fn schedule(&mut self, sw: String, address: String, item: pb::ScheduleItem) {
        self.schedules
            .entry(sw)
            .or_insert_with(|| SwitchBatch {
                address,
                items: Vec::new(),
            })
            .items
            .push(item);
    }
}

/// The pure per-host scheduler.
pub struct HostScheduler {
    cfg: HostConfig,
    topo: Arc<Topology>,
    routes: Routes,
    me: NodeId,
    policy: HostPolicy,
    table: LoadTable,
    admin_jobs: BTreeMap<String, Job>,
    flows: BTreeMap<FlowId, FlowState>,
    /// Flows gone since last slot whose schedules must still be withdrawn.
    gone: Vec<FlowState>,
    upstream: HashMap<FlowId, PeerProgress>,
    silent_peers: BTreeSet<String>,
    /// Switches whose clock disagrees with ours by more than τ/4 (see `set_unsynced_switches`).
    unsynced: BTreeSet<String>,
    /// Per-process notes of why connections were not scheduled (for operators).
    pub notes: BTreeMap<String, String>,
    slot: Slot,
    /// The observations the policy saw in the last slot, when recording (conformance tests).
    recorded: Option<Vec<FlowObs>>,
}

impl HostScheduler {
    pub fn new(cfg: HostConfig, topo: Arc<Topology>) -> Result<Self, HostError> {
        let me = topo
            .node_by_name(&cfg.host)
            .filter(|&n| topo.node(n).is_host())
            .ok_or_else(|| HostError::UnknownHost(cfg.host.clone()))?;
        let routes = Routes::new(&topo);
        let owned = topo
            .links_owned_by(me)
            .into_iter()
            .map(|l| (l, topo.link(l).capacity));
        let table = LoadTable::new(cfg.policy.slots.horizon(), Slot(0), owned);
        let policy = HostPolicy::new(cfg.policy);
        Ok(HostScheduler {
            cfg,
            topo,
            routes,
            me,
            policy,
            table,
            admin_jobs: BTreeMap::new(),
            flows: BTreeMap::new(),
            gone: Vec::new(),
            upstream: HashMap::new(),
            silent_peers: BTreeSet::new(),
            unsynced: BTreeSet::new(),
            notes: BTreeMap::new(),
            slot: Slot(0),
            recorded: None,
        })
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// Keeps what core's policy was handed each slot, for [`Self::recorded_observations`]:
    /// the conformance test replays it through another [`HostPolicy`].
    pub fn record_observations(&mut self, on: bool) {
        self.recorded = on.then(Vec::new);
    }

    /// The observations of the last [`Self::plan`], if recording.
    pub fn recorded_observations(&self) -> Option<&[FlowObs]> {
        self.recorded.as_deref()
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn flows(&self) -> impl Iterator<Item = &FlowState> {
        self.flows.values()
    }

    pub fn table(&self) -> &LoadTable {
        &self.table
    }

    pub fn slot(&self) -> Slot {
        self.slot
    }

    pub fn admin_jobs(&self) -> impl Iterator<Item = &Job> {
        self.admin_jobs.values()
    }

    /// `mlccctl job add`: a job whose library cannot write progress files. Validated now.
    pub fn add_job(&mut self, job: Job) -> Result<(), HostError> {
        job.flow_groups().map_err(|e| HostError::BadJob {
            job: job.id.clone(),
            reason: e.to_string(),
        })?;
        for m in &job.members {
            if self.topo.node_by_name(&m.host).is_none() {
                return Err(HostError::BadJob {
                    job: job.id.clone(),
                    reason: format!("member host {:?} is not in the topology", m.host),
                });
            }
        }
        self.admin_jobs.insert(job.id.clone(), job);
        Ok(())
    }

    pub fn remove_job(&mut self, id: &str) -> bool {
        self.admin_jobs.remove(id).is_some()
    }

    /// Replaces the topology (SIGHUP). Flows are re-routed next slot; the planner keeps its state.
    pub fn set_topology(&mut self, topo: Arc<Topology>) -> Result<(), HostError> {
        let me = topo
            .node_by_name(&self.cfg.host)
            .filter(|&n| topo.node(n).is_host())
            .ok_or_else(|| HostError::UnknownHost(self.cfg.host.clone()))?;
        self.routes = Routes::new(&topo);
        let owned = topo
            .links_owned_by(me)
            .into_iter()
            .map(|l| (l, topo.link(l).capacity));
        self.table = LoadTable::new(self.cfg.policy.slots.horizon(), self.slot, owned);
        self.me = me;
        self.topo = topo;
        // Paths are recomputed from scratch for every flow next slot.
        self.gone
            .extend(std::mem::take(&mut self.flows).into_values());
        Ok(())
    }

    fn tau(&self) -> f64 {
        self.cfg.policy.slots.tau_secs()
    }

    /// The links of `path` grouped by the switch that owns them, for switches with an emulator.
    fn switch_links(&self, path: &[LinkId]) -> Vec<(String, String, Vec<String>)> {
        let mut out: Vec<(String, String, Vec<String>)> = Vec::new();
        for &l in path {
            if let Some((_, node, addr)) = self.emulated_owner(l) {
                let name = self.topo.link(l).name.clone();
                match out.iter_mut().find(|(n, _, _)| *n == node.name) {
                    Some(e) => e.2.push(name),
                    None => out.push((node.name.clone(), addr.to_string(), vec![name])),
                }
            }
        }
        out
    }

    /// The switch that owns link `l`, if an emulator speaks for it: the switch, its node and
    /// the emulator's address. Host-owned links and links of switches without one are
    /// nobody's to ask.
    fn emulated_owner(&self, l: LinkId) -> Option<(NodeId, &Node, &str)> {
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

    /// The switches whose clock is off ours by more than τ/4, as the daemon last measured.
    /// Plans are booked by slot number, so with such a switch this host's slots and the other
    /// hosts' no longer line up: a paced flow through it would send into slots others booked,
    /// and pacing does not back off. Those flows are left to kernel TCP (orders cleared, the
    /// datapath falls back) and their bookings withdrawn until the clocks agree again.
    pub fn set_unsynced_switches(&mut self, switches: BTreeSet<String>) {
        self.unsynced = switches;
    }
}

mod decide;
mod flows;
mod peers;

pub use flows::FlowState;
pub use peers::parse_flow_id;

#[cfg(test)]
mod tests;
