//! mlccd's per-slot shell around core's per-host policy (docs/design.md §5, §8, §11, §11a), without
//! sockets or clocks. Every rule that decides a rate, a booking or a precedence is core's
//! [`HostPolicy`]'s; this module turns what the daemon reads into the policy's observations
//! and its answer into orders and protobuf.
//!
//! The async shell drives one slot in three steps and does all I/O in between:
//! 1. [`HostScheduler::observe`]: progress files, their processes' connections and the
//!    datapath counters in (`accounts`, `flow_state`); flow groups, S/G bookkeeping and the
//!    feedback queries per switch out (`observation`);
//! 2. [`HostScheduler::plan`]: the switches' answers (or their absence) in; core's decision;
//!    rate orders, schedule batches per switch and progress messages per peer out (`orders`);
//! 3. [`HostScheduler::on_exchange`] / [`HostScheduler::on_exchange_reply`]: peers' progress
//!    in (`peers`), used by the next slot's dependencies (one slot stale, as in the paper).
//!
//! Keeping this free of I/O is what lets the tests drive a whole cluster of schedulers in one
//! process, the conformance test replay its observations, and the benchmark measure the
//! decision work alone.

mod accounts;
mod fabric;
mod few_sockets;
mod flow_state;
mod flows;
mod group_ids;
mod kept;
mod notes;
mod observation;
mod orders;
mod peers;
mod split;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use mlcc_core::host::{FlowObs, HostPolicy, PolicyConfig};
use mlcc_core::job::Job;
use mlcc_core::topology::Topology;
use mlcc_core::{FlowId, LoadTable, Slot, SlotConfig};

pub use accounts::Note;
pub use mlcc_core::host::{PeerProgress, RankRule};
use mlcc_proto::v1 as pb;
use serde::Serialize;

use crate::datapath::{RateOrder, SocketKey, SocketStats};
use crate::progress::{ProgressHeader, ProgressSnapshot};
use crate::sockets::TcpConn;
use accounts::Accounts;
use fabric::Fabric;
pub use flow_state::{FlowState, QUEUE_DELAY, SocketCounters};
use observation::{Answers, Context};
use orders::Carrier;
pub use peers::HeardLabel;
use peers::PeerBook;

/// Slots a rate order holds by default: a stopped mlccd's flows are back on the kernel's CC
/// within 3τ. A loop that falls behind by more hands its flows to the kernel's CC until it
/// catches up; 10 slots kept them on their orders through the testbed's stalls but was not
/// faster overall (docs/results.md, 2026-12-07, "rate orders held ten slots").
pub const ORDER_EXPIRY_SLOTS: u32 = 3;

/// Knobs of the per-host shell; the policy's own are core's [`PolicyConfig`].
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// This host's name in the topology.
    pub host: String,
    /// Every rule that decides a rate, with core's defaults.
    pub policy: PolicyConfig,
    /// Rate orders hold this many slots unless renewed, so the BPF fallback takes over if
    /// mlccd stops.
    pub order_expiry_slots: u32,
    /// Remote port of the PS-Lite scheduler (DMLC_PS_ROOT_PORT): its control traffic is skipped.
    pub ps_scheduler_port: Option<u16>,
}

impl HostConfig {
    pub fn new(host: impl Into<String>, slots: SlotConfig) -> Self {
        HostConfig {
            host: host.into(),
            policy: PolicyConfig::new(slots),
            order_expiry_slots: ORDER_EXPIRY_SLOTS,
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
    /// A process with no progress file, read by the learner (`learned-<label>` jobs).
    Learned,
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

/// `map`'s value for `key`, made by `make` the first time: a slot's batches are keyed by names
/// its flows borrow, copied once per key and slot, not once per flow.
fn entry_for<'a, V>(
    map: &'a mut BTreeMap<String, V>,
    key: &str,
    make: impl FnOnce() -> V,
) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), make());
    }
    map.get_mut(key).expect("inserted above")
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
    /// Per receiving host, in name order: this host's flows towards it.
    pub peers: Vec<(String, Vec<pb::FlowProgress>)>,
    /// Degraded modes in force this slot, human readable.
    pub degraded: Vec<String>,
    pub silent_switches: Vec<String>,
    /// Peers whose last exchange failed: no dependency adjustment towards them.
    pub silent_peers: Vec<String>,
    /// Switches whose clock is off by more than τ/4: the flows through them were left to
    /// kernel TCP and their bookings withdrawn.
    pub unsynced_switches: Vec<String>,
    /// Flows planned without a dependency because their upstream's peer is silent.
    pub flows_without_peer: usize,
    /// (flow, link) pairs planned as unbooked because an answering switch gave no load for them.
    pub feedback_missing: usize,
}

impl SlotPlan {
    /// This host's flows' progress for `host`, if it has flows towards it.
    pub fn progress_to(&self, host: &str) -> Option<&[pb::FlowProgress]> {
        let i = self
            .peers
            .binary_search_by(|(p, _)| p.as_str().cmp(host))
            .ok()?;
        Some(&self.peers[i].1)
    }
}

/// The pure per-host scheduler.
pub struct HostScheduler {
    cfg: HostConfig,
    fabric: Fabric,
    policy: HostPolicy,
    /// The load table of this host's own links (its uplinks).
    table: LoadTable,
    accounts: Accounts,
    peers: PeerBook,
    /// Switches whose clock disagrees with ours by more than τ/4 (see `set_unsynced_switches`).
    unsynced: BTreeSet<String>,
    slot: Slot,
    /// The observations the policy saw in the last slot, when recording (conformance tests).
    recorded: Option<Vec<FlowObs>>,
}

impl HostScheduler {
    pub fn new(cfg: HostConfig, topo: Arc<Topology>) -> Result<Self, HostError> {
        let fabric = Fabric::new(topo, &cfg.host)?;
        let table = fabric.own_table(cfg.policy.slots.horizon(), Slot(0));
        Ok(HostScheduler {
            policy: HostPolicy::new(cfg.policy),
            cfg,
            fabric,
            table,
            accounts: Accounts::default(),
            peers: PeerBook::default(),
            unsynced: BTreeSet::new(),
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
        self.fabric.topo()
    }

    pub fn flows(&self) -> impl ExactSizeIterator<Item = &FlowState> {
        self.accounts.flows.iter()
    }

    pub fn table(&self) -> &LoadTable {
        &self.table
    }

    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Per process, why its connections group as they do (for operators).
    pub fn notes(&self) -> Vec<(String, &Note)> {
        self.accounts.notes.all()
    }

    pub fn admin_jobs(&self) -> impl Iterator<Item = &Job> {
        self.accounts.admin_jobs.values().map(|j| &j.job)
    }

    /// `mlccctl job add`: a job whose library cannot write progress files. Validated now.
    pub fn add_job(&mut self, job: Job) -> Result<(), HostError> {
        let groups = job.flow_groups().map_err(|e| HostError::BadJob {
            job: job.id.clone(),
            reason: e.to_string(),
        })?;
        for m in &job.members {
            if self.fabric.topo().node_by_name(&m.host).is_none() {
                return Err(HostError::BadJob {
                    job: job.id.clone(),
                    reason: format!("member host {:?} is not in the topology", m.host),
                });
            }
        }
        self.accounts
            .admin_jobs
            .insert(job.id.clone(), accounts::AdminJob { job, groups });
        Ok(())
    }

    pub fn remove_job(&mut self, id: &str) -> bool {
        self.accounts.admin_jobs.remove(id).is_some()
    }

    /// Replaces the topology (SIGHUP). Flows are re-routed next slot; the planner keeps its state.
    pub fn set_topology(&mut self, topo: Arc<Topology>) -> Result<(), HostError> {
        self.fabric = Fabric::new(topo, &self.cfg.host)?;
        self.table = self
            .fabric
            .own_table(self.cfg.policy.slots.horizon(), self.slot);
        // Paths are recomputed from scratch for every flow next slot.
        let flows = self.accounts.flows.take_all();
        self.accounts.gone.extend(flows);
        Ok(())
    }

    /// The switches whose clock is off ours by more than τ/4, as the daemon last measured.
    /// Plans are booked by slot number, so with such a switch this host's slots and the other
    /// hosts' no longer line up: a paced flow through it would send into slots others booked,
    /// and pacing does not back off. Those flows are left to kernel TCP (orders cleared, the
    /// datapath falls back) and their bookings withdrawn until the clocks agree again.
    pub fn set_unsynced_switches(&mut self, switches: BTreeSet<String>) {
        self.unsynced = switches;
    }

    fn context(&self) -> Context<'_> {
        Context {
            fabric: &self.fabric,
            me: &self.cfg.host,
            peers: &self.peers,
            unsynced: &self.unsynced,
        }
    }

    /// Step 1 of a slot: learns flows and their progress; returns the feedback to fetch.
    pub fn observe(&mut self, slot: Slot, obs: &Observation) -> FeedbackRequests {
        self.slot = slot;
        self.table.advance(slot);
        self.accounts.observe(&self.fabric, &self.cfg, slot, obs);
        let horizon = self.cfg.policy.peer_stale_slots.max(1) * 4;
        self.peers.forget_older_than(slot, horizon);
        observation::queries(&self.context(), &self.cfg.policy, self.flows())
    }

    /// Step 2 of a slot: plans every local flow with the switches' answers. The decisions are
    /// core's [`HostPolicy`]'s; this turns them into datapath orders and protobuf.
    pub fn plan(&mut self, answers: &FeedbackAnswers) -> SlotPlan {
        let answers = Answers::of(answers, self.fabric.topo());
        let ctx = self.context();
        let obs: Vec<FlowObs> = self
            .flows()
            .map(|f| ctx.observe(f, Some(&answers)))
            .collect();
        let out = self.policy.step(self.slot, &obs);
        if let Some(r) = &mut self.recorded {
            *r = obs;
        }
        let expiry = Duration::from_nanos(
            self.cfg.policy.slots.tau_ns() * u64::from(self.cfg.order_expiry_slots.max(1)),
        );
        let sockets = self.flows().map(|f| f.sockets.len()).sum();
        let mut carrier = Carrier {
            fabric: &self.fabric,
            table: &mut self.table,
            me: &self.cfg.host,
            expiry,
            plan: SlotPlan {
                slot: self.slot,
                orders: Vec::with_capacity(sockets),
                ..Default::default()
            },
            tally: Default::default(),
            peers: vec![Vec::new(); self.fabric.topo().nodes().len()],
            flows: self.accounts.flows.len() + self.accounts.gone.len(),
        };
        for fo in out.flows {
            if let Some(f) = self.accounts.flows.get_mut(&fo.id) {
                carrier.flow(fo, f);
            }
        }
        // Withdraw flows that disappeared: empty schedules to their switches, orders cleared.
        for f in std::mem::take(&mut self.accounts.gone) {
            carrier.gone(f);
        }
        carrier.finish(&self.peers)
    }

    /// Serves a peer's `Exchange`: remembers its flows towards us and answers with this host's
    /// outgoing flows of the same jobs (their latest decisions).
    pub fn on_exchange(
        &mut self,
        sender: &str,
        flows: &[pb::FlowProgress],
    ) -> Vec<pb::FlowProgress> {
        let mut jobs: BTreeSet<String> = BTreeSet::new();
        for (fp, parts) in peers::from_sender(flows, sender, &self.cfg.host) {
            jobs.insert(parts.job.to_string());
            self.peers.remember(fp, self.slot);
        }
        self.peers.answered(sender);
        self.outgoing_of(&jobs)
    }

    /// A peer's answer to our `Exchange`: its outgoing flows of our jobs.
    pub fn on_exchange_reply(&mut self, receiver: &str, flows: &[pb::FlowProgress]) {
        for fp in flows.iter().filter(|fp| peers::sent_by(fp, receiver)) {
            self.peers.remember(fp, self.slot);
        }
        self.peers.answered(receiver);
    }

    /// A peer did not answer this slot.
    pub fn on_exchange_failed(&mut self, receiver: &str) {
        self.peers.failed(receiver);
    }

    /// The labels of learned jobs that peers' reports carried since the last call, by the
    /// connection (as this host sees it) each came over: the learned processes at this end
    /// take the least as their job's name ([`mlcc_core::learn::identity`]).
    pub fn take_heard_labels(&mut self) -> Vec<HeardLabel> {
        self.peers.take_heard()
    }

    /// Peer progress known now (for operators).
    pub fn upstream(&self) -> impl Iterator<Item = (&FlowId, &PeerProgress)> {
        self.peers.reports()
    }

    /// This host's outgoing flows of `jobs`, as last decided.
    fn outgoing_of(&self, jobs: &BTreeSet<String>) -> Vec<pb::FlowProgress> {
        self.flows()
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
                    ..peers::learned_part(f.source, &f.sockets, f.job_bytes)
                })
            })
            .collect()
    }
}
