//! [`HostPolicy`]: one host's flows in, their rates, bookings and progress out. A step is the
//! sequence of the policy's rules, each in the module named for it.

use super::config::PolicyConfig;
use super::degraded::Degraded;
use super::handover::{self, Handover};
use super::local::{self, Local};
use super::obs::FlowObs;
use super::out::{Booking, Enforce, FlowOut, StepOut};
use super::uplink_split::UplinkSplit;
use super::{delivery, enforce, feedback, fill, holder, idle, pace_free, peers};
use crate::dependency::Dependency;
use crate::flow::FlowId;
use crate::hash::Map;
use crate::planner::{FlowDecision, FlowInput, Planner, PlannerConfig};
use crate::slot::Slot;

/// What a rule must remember of a flow from one slot to the next.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Memory {
    /// This slot's rate in the last plan (Alg. 2's output, before pacing into free capacity).
    pub(super) last_rate: f64,
    /// The application's backlog and the bytes in flight seen last slot.
    pub(super) last_backlog: Option<f64>,
    pub(super) last_in_flight: Option<f64>,
    /// Whether it was idle last slot.
    pub(super) last_idle: bool,
}

/// The per-host policy: owns the planner (Alg. 1 + Alg. 2, last plans, B_f filters) and what
/// the rules remember per flow. Deterministic: the same observations give the same answers.
#[derive(Debug)]
pub struct HostPolicy {
    cfg: PolicyConfig,
    planner: Planner,
    memory: Map<FlowId, Memory>,
}

/// Per flow, what the rules after the planner decided.
struct Orders {
    notes: Vec<Vec<Degraded>>,
    idle: Vec<bool>,
    enforces: Vec<Enforce>,
    unsynced: Vec<bool>,
    fill: Vec<Option<u8>>,
    handovers: Vec<Option<Handover>>,
}

impl HostPolicy {
    pub fn new(cfg: PolicyConfig) -> Self {
        HostPolicy {
            planner: Planner::new(PlannerConfig {
                slots: cfg.slots,
                eta: cfg.eta,
                mode: cfg.mode,
            }),
            cfg,
            memory: Map::default(),
        }
    }

    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Plans slot `slot` for every flow in `flows` (one host's).
    pub fn step(&mut self, slot: Slot, flows: &[FlowObs]) -> StepOut {
        let cfg = self.cfg;
        let (flows, seen) = local::distinct(&cfg, flows);
        let dependencies = peers::dependencies(&cfg, slot, &flows);
        let memory = self.remembered(&flows);
        let idle = idle::flags(&cfg, &flows, &memory, &dependencies);
        let (inputs, mut notes) = self.inputs(&flows, &memory, &idle, dependencies);
        let planned = self.planner.plan(slot, &inputs);
        let decisions = &planned.decisions;
        let pace_at = pace_free::rates(&cfg, &flows, &inputs, decisions, &idle);
        let unsynced = enforce::unsynced(&flows, &mut notes);
        let fill = fill::classes(&cfg, decisions, &idle, &unsynced);
        let enforces = enforce::orders(&cfg, &flows, decisions, &pace_at, &unsynced, &fill);
        let handovers = handover::of_flows(&cfg, &flows, &inputs, decisions, &enforces, &idle);
        let orders = Orders {
            notes,
            idle,
            enforces,
            unsynced,
            fill,
            handovers,
        };
        let out = self.answer(slot, &flows, planned.decisions, orders);
        self.memory.retain(|id, _| seen.contains(id));
        StepOut {
            slot,
            flows: out,
            withdrawn: planned.withdrawn,
        }
    }

    /// What the rules remember of each flow from last slot (the default for a new one).
    fn remembered(&self, flows: &[Local<'_>]) -> Vec<Memory> {
        flows
            .iter()
            .map(|f| self.memory.get(&f.obs.id).copied().unwrap_or_default())
            .collect()
    }

    /// The planner's input per flow, with the reasons each runs degraded so far: its path's
    /// feedback, its dependency (unless it holds its bytes), last slot's delivery, its share
    /// of an uplink split with its job, and its rank. An idle flow is planned as done.
    fn inputs(
        &self,
        flows: &[Local<'_>],
        memory: &[Memory],
        idle: &[bool],
        dependencies: Vec<Dependency>,
    ) -> (Vec<FlowInput>, Vec<Vec<Degraded>>) {
        let cfg = &self.cfg;
        let split = UplinkSplit::new(cfg, flows, idle);
        let mut inputs = Vec::with_capacity(flows.len());
        let mut notes = Vec::with_capacity(flows.len());
        let per_flow = flows.iter().zip(memory).zip(idle).zip(dependencies);
        for (((f, mem), &idle), dependency) in per_flow {
            let mut degraded = Vec::new();
            let path = feedback::path(cfg, f.obs, &mut degraded);
            let dependency =
                holder::dependency(cfg, f.obs, dependency, mem.last_rate, &mut degraded);
            if dependency == Dependency::None && f.obs.peer_silent {
                degraded.push(Degraded::PeerSilent { host: f.obs.dst });
            }
            inputs.push(FlowInput {
                id: f.obs.id.clone(),
                rank: cfg.rank_of(cfg.rank_basis(f.obs)),
                remaining_bytes: if idle { 0.0 } else { f.remaining },
                sent_bytes: f.obs.sent_bytes,
                rate_cap: split.cap(f, &path, idle),
                path,
                dependency,
                delivery: delivery::sample(cfg, f.obs, mem),
            });
            notes.push(degraded);
        }
        (inputs, notes)
    }

    /// Each flow's answer: its order, its booking (withdrawn where it is done or its slots no
    /// longer line up), its progress for the peers; and what the rules remember of it.
    fn answer(
        &mut self,
        slot: Slot,
        flows: &[Local<'_>],
        decisions: Vec<FlowDecision>,
        orders: Orders,
    ) -> Vec<FlowOut> {
        let tau = self.cfg.slots.tau_secs();
        let per_flow = orders.notes.into_iter().zip(orders.idle).zip(
            orders
                .enforces
                .into_iter()
                .zip(orders.fill)
                .zip(orders.unsynced.into_iter().zip(orders.handovers)),
        );
        let mut out = Vec::with_capacity(flows.len());
        for ((f, d), ((degraded, idle), ((enforce, fill), (unsynced, handover)))) in
            flows.iter().zip(decisions).zip(per_flow)
        {
            let key = d.key.clone();
            let booking = if d.done || unsynced {
                Booking::Withdraw { key }
            } else {
                Booking::Plan {
                    first_slot: slot,
                    rates: d.plan.clone(),
                    key,
                }
            };
            let sent = f.obs.sent_bytes.max(0.0);
            let fo = FlowOut {
                id: d.id.clone(),
                enforce,
                connections: self.cfg.connections_of(f.obs),
                fill,
                booking,
                sent,
                finish: sent + d.rate * tau,
                idle,
                degraded,
                decision: d,
                handover,
            };
            trace(slot, f, &fo);
            self.memory.insert(
                f.obs.id.clone(),
                Memory {
                    last_rate: fo.decision.rate,
                    last_backlog: f.obs.app_backlog,
                    last_in_flight: f.obs.in_flight,
                    last_idle: idle,
                },
            );
            out.push(fo);
        }
        out
    }
}

/// One line per flow and slot at debug level (RUST_LOG=mlcc_plan=debug): what the policy saw
/// and decided, for reading a run back slot by slot.
fn trace(slot: Slot, f: &Local<'_>, fo: &FlowOut) {
    tracing::debug!(
        target: "mlcc_plan",
        slot = slot.0,
        flow = %fo.id,
        idle = fo.idle,
        remaining = f.remaining as u64,
        sent = f.obs.sent_bytes as u64,
        backlog = f.obs.app_backlog.map(|b| b as i64),
        achieved = f.obs.achieved.map(|a| a as u64),
        plan = fo.decision.rate as u64,
        next = fo.decision.plan.get(1).map(|r| *r as u64),
        enforced = fo.enforced_rate() as u64,
        achievable = fo.decision.achievable as u64,
        done = fo.decision.done,
        rank = fo.decision.key.rank.0,
        handover_first = fo.handover.map(|h| h.first as u64),
        handover_ms = fo.handover.map(|h| (h.for_secs * 1e3) as u64),
        handover_then = fo.handover.map(|h| h.then as u64),
    );
}
