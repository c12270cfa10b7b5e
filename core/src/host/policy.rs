//! [`HostPolicy`]: one host's flows in, their rates, bookings and progress out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::alg2::Dependency;
use crate::estimator::Delivery;
use crate::flow::{FlowId, FlowRole, PrecedenceKey};
use crate::load_table::FeedbackMode;
use crate::planner::{FlowDecision, FlowInput, LinkFeedback, Planner, PlannerConfig};
use crate::slot::Slot;
use crate::topology::LinkId;

use super::config::{PolicyConfig, WARM_MAX_PER_CONNECTION, WARM_SHARE};
use super::degraded::Degraded;
use super::handover::{self, Handover};
use super::obs::{Answer, FlowObs};
use super::peers;
use super::rank::{finishes_in_a_slot, rank_of};

/// What the datapath should do with a flow's sockets this slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Enforce {
    /// Pace the group at this many bytes/s in all (the daemon splits it over the connections
    /// that carry the group's data).
    Pace(f64),
    /// No order: the sockets fall back to kernel TCP (a finished flow, a skewed switch).
    Release,
}

/// What the flow's entries in the load tables become.
#[derive(Clone, Debug, PartialEq)]
pub enum Booking {
    /// Rates for slots `first_slot..first_slot + K`.
    Plan {
        first_slot: Slot,
        rates: Vec<f64>,
        key: PrecedenceKey,
    },
    /// Publish an empty schedule: the entries go.
    Withdraw { key: PrecedenceKey },
}

impl Booking {
    pub fn key(&self) -> &PrecedenceKey {
        match self {
            Booking::Plan { key, .. } | Booking::Withdraw { key } => key,
        }
    }

    pub fn is_withdraw(&self) -> bool {
        matches!(self, Booking::Withdraw { .. })
    }
}

/// The policy's answer for one flow.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowOut {
    pub id: FlowId,
    pub enforce: Enforce,
    pub booking: Booking,
    /// Progress for the peers: S and F = S + rate·τ.
    pub sent: f64,
    pub finish: f64,
    /// The planner's decision (Alg. 1 / Alg. 2), for operators and traces.
    pub decision: FlowDecision,
    /// The flow was idle (booked nothing, paced into free capacity).
    pub idle: bool,
    pub degraded: Vec<Degraded>,
    /// Orders within the slot ([`PolicyConfig::handover`]): a driver that can act mid-slot
    /// carries them out instead of `enforce`, whose rate is what they average to in bytes.
    pub handover: Option<Handover>,
}

impl FlowOut {
    /// The rate the datapath is told, 0 where the flow is released to kernel TCP.
    pub fn enforced_rate(&self) -> f64 {
        match self.enforce {
            Enforce::Pace(r) => r,
            Enforce::Release => 0.0,
        }
    }
}

/// The policy's answer for one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOut {
    pub slot: Slot,
    /// One per distinct observed flow, in observation order.
    pub flows: Vec<FlowOut>,
    /// Flows planned before that were not observed now: withdraw them.
    pub withdrawn: Vec<FlowId>,
}

/// What a rule must remember of a flow from one slot to the next.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    /// This slot's rate in the last plan (Alg. 2's output, before pacing into free capacity).
    last_rate: f64,
    /// The application's backlog seen last slot.
    last_backlog: Option<f64>,
}

/// The per-host policy: owns the planner (Alg. 1 + Alg. 2, last plans, B_f filters) and what
/// the rules remember per flow. Deterministic: the same observations give the same answers.
#[derive(Debug)]
pub struct HostPolicy {
    cfg: PolicyConfig,
    planner: Planner,
    memory: HashMap<FlowId, Memory>,
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
            memory: HashMap::new(),
        }
    }

    /// Whether `f` is idle: its application has handed over (almost) nothing that is still
    /// unacknowledged while its iteration is not over. Such a flow books nothing — its
    /// bookings would only keep others off links it cannot use (measured on the testbed: a PS
    /// server's broadcast booked two downlinks at line rate for seconds while it waited) —
    /// and is paced at what its path has free, so bytes that arrive mid-slot leave at once
    /// (a broadcast whose pushes will deliver data this slot is not: [`Self::expects_data`]).
    fn is_idle(&self, f: &FlowObs) -> bool {
        self.cfg.is_idle(f.remaining_bytes, f.app_backlog)
    }

    /// Whether the sockets hold more unacknowledged data than a paced flow keeps in flight
    /// (cwnd allows ~2 × rate × 1 ms plus bursts; 4 ms of the rate plus 256 KiB is above it).
    fn has_data_waiting(backlog: Option<f64>, last_rate: f64) -> bool {
        backlog.is_some_and(|b| b >= 256.0 * 1024.0 + last_rate * 0.004)
    }

    /// Whether `f` holds all it has left and that is a tail ([`super::FLUSH_TAIL_SHARE`] of
    /// what `rate` moves in a slot of `tau`).
    fn is_tail(f: &FlowObs, rate: f64, tau: f64) -> bool {
        Self::holds_all(f)
            && finishes_in_a_slot(f.remaining_bytes, super::FLUSH_TAIL_SHARE * rate, tau)
    }

    /// Whether the sockets hold all `f` has left in its iteration (no backlog count: assume so).
    fn holds_all(f: &FlowObs) -> bool {
        f.app_backlog.unwrap_or(f.remaining_bytes) + 0.5 >= f.remaining_bytes
    }

    /// Whether a broadcast flow's aggregation (`dep`, its Alg. 2 dependency) will have
    /// delivered it, by the end of this slot, at least `idle_backlog` bytes beyond what it has
    /// sent and holds: data arrives during the slot, so the flow is not idle.
    fn expects_data(f: &FlowObs, dep: &Dependency, idle_backlog: f64) -> bool {
        let Some(target) = dep.target() else {
            return false;
        };
        let can_send = target.min(f.sent_bytes + f.remaining_bytes);
        let held = f.app_backlog.unwrap_or(0.0).max(0.0);
        can_send - f.sent_bytes.max(0.0) - held >= idle_backlog
    }

    /// Whether Alg. 1 planned `d`'s last bytes into this slot.
    fn ends_this_slot(d: &FlowDecision) -> bool {
        !d.done && d.rate > 0.0 && d.plan.iter().skip(1).all(|&r| r <= 0.0)
    }

    /// Plans slot `slot` for every flow in `flows` (one host's).
    pub fn step(&mut self, slot: Slot, flows: &[FlowObs]) -> StepOut {
        let cfg = self.cfg;
        let tau = cfg.slots.tau_secs();
        let k = cfg.slots.horizon();
        // First occurrence of an id wins, as in the planner.
        let mut seen: HashMap<&FlowId, ()> = HashMap::with_capacity(flows.len());
        let flows: Vec<&FlowObs> = flows
            .iter()
            .filter(|f| seen.insert(&f.id, ()).is_none())
            .collect();
        // Alg. 2's dependency per flow, from the peers' reports; with `project_upstream`, a
        // broadcast's is where its aggregation will be at the end of this slot.
        let projects = |f: &FlowObs| cfg.project_upstream && f.role == FlowRole::Bcast;
        let dependencies: Vec<Dependency> = flows
            .iter()
            .map(|f| {
                peers::dependency(
                    f.role,
                    f.iteration,
                    f.slack_bytes,
                    &f.upstream,
                    slot,
                    cfg.peer_stale_slots,
                    projects(f).then_some(tau),
                )
            })
            .collect();
        let idle: Vec<bool> = flows
            .iter()
            .zip(&dependencies)
            .map(|(f, dep)| {
                self.is_idle(f)
                    && !(projects(f) && Self::expects_data(f, dep, cfg.idle_backlog_bytes))
            })
            .collect();

        // MADD: a job's flows leaving this host over the same first link split it in
        // proportion to what each has left, as Varys does within a coflow, so they finish
        // together. Planned one after the other, every PS worker sends to the same server
        // first — each host plans with last slot's bookings — and that server's downlink is
        // overrun while the next one idles (measured on the testbed: a PS push took 5-6 slots
        // where 3 carry it).
        let mut group_left: HashMap<(&Arc<str>, LinkId), f64> = HashMap::new();
        if cfg.split_uplink {
            for (f, &idle) in flows.iter().zip(&idle) {
                if let Some(first) = f.links.first()
                    && !idle
                    && f.remaining_bytes > 0.0
                {
                    *group_left.entry((&f.job, first.link)).or_default() += f.remaining_bytes;
                }
            }
        }

        // What a plan may fill of a link: its capacity less the headroom the rate floors of
        // held-back flows, which nobody books, take. Every plan below reads capacity from here.
        let usable_share = 1.0 - cfg.link_headroom.clamp(0.0, 1.0);
        let mut inputs = Vec::with_capacity(flows.len());
        let mut notes: Vec<Vec<Degraded>> = Vec::with_capacity(flows.len());
        for ((f, &idle), dependency) in flows.iter().zip(&idle).zip(dependencies) {
            let mem = self.memory.get(&f.id).copied().unwrap_or_default();
            let mut degraded = Vec::new();
            let path: Vec<LinkFeedback> = f
                .links
                .iter()
                .map(|l| {
                    let mut load = match &l.answer {
                        Answer::Load(v) => v.clone(),
                        Answer::Unasked => Vec::new(),
                        Answer::Silent { switch } => {
                            degraded.push(Degraded::SwitchSilent { switch: *switch });
                            Vec::new()
                        }
                        Answer::Missing { switch } => {
                            degraded.push(Degraded::FeedbackMissing {
                                switch: *switch,
                                link: l.link,
                            });
                            Vec::new()
                        }
                    };
                    if cfg.committed_now
                        && cfg.mode == FeedbackMode::Precedence
                        && let Some(c) = l.committed_now.filter(|c| c.is_finite() && *c > 0.0)
                    {
                        if load.is_empty() {
                            load.resize(k, 0.0);
                        }
                        load[0] = load[0].max(0.0) + c;
                    }
                    LinkFeedback {
                        link: l.link,
                        capacity: l.capacity * usable_share,
                        load,
                    }
                })
                .collect();
            let ready = Self::has_data_waiting(f.app_backlog, mem.last_rate);
            let was_ready = Self::has_data_waiting(mem.last_backlog, mem.last_rate);
            let mut dependency = dependency;
            // Alg. 2 holds back a ring or broadcast flow that seems ahead of its upstream, but
            // upstream values are a slot stale: a sender that already holds the bytes cannot be
            // ahead, and holding it would only idle the link (measured on the testbed: PS
            // replies waited two slots per iteration).
            if cfg.holder_not_held_back
                && ready
                && matches!(f.role, FlowRole::Ring | FlowRole::Bcast)
                && dependency.reduction(f.sent_bytes + mem.last_rate * tau) > 0.0
            {
                degraded.push(Degraded::HolderNotHeldBack);
                dependency = Dependency::None;
            }
            if dependency == Dependency::None && f.peer_silent {
                degraded.push(Degraded::PeerSilent { host: f.dst });
            }
            // Under-delivery is the path's doing only if the sender had data waiting at both
            // ends of the slot: a ring step waiting for its predecessor or a PS reply waiting
            // for the pushes says nothing about the path (without a backlog count, assume it
            // had data).
            let delivery = f
                .achieved
                .filter(|_| cfg.delivery_samples)
                .map(|a| Delivery {
                    rate: a,
                    backlogged: mem.last_rate > 0.0
                        && a < cfg.path_limited_share * mem.last_rate
                        && (f.app_backlog.is_none() || (ready && was_ready)),
                });
            let rate_cap = match path.first() {
                Some(first) if !idle => match group_left.get(&(&f.job, first.link)) {
                    Some(&all) if all > f.remaining_bytes => {
                        first.capacity * f.remaining_bytes / all
                    }
                    _ => f64::INFINITY,
                },
                _ => f64::INFINITY,
            };
            inputs.push(FlowInput {
                id: f.id.clone(),
                rank: rank_of(&cfg, f),
                remaining_bytes: if idle { 0.0 } else { f.remaining_bytes },
                sent_bytes: f.sent_bytes,
                path,
                dependency,
                delivery,
                rate_cap,
            });
            notes.push(degraded);
        }
        let planned = self.planner.plan(slot, &inputs);

        // Pacing beyond the plan, up to what is free in slot n: an idle flow (it books
        // nothing), a flow whose plan ends in this slot (Alg. 1 spreads its last bytes over
        // the whole slot, which holds the iteration's end — and the next compute — back by up
        // to τ) and, on standby, a finished flow (its next iteration may start before the next
        // slot). Bookings stay as planned: what others plan around is unchanged, and the extra
        // only uses capacity nobody booked for slot n. Such flows share each link's free
        // capacity evenly: an idle PS worker's pushes to both servers start together, and each
        // taking the whole free uplink would overrun it twice over (paced flows do not back
        // off on loss).
        let mut pace_at: Vec<Option<f64>> = vec![None; inputs.len()];
        if cfg.pace_free_capacity {
            // Per link: what local flows planned for slot n, and how many local flows use it.
            let mut local_now: HashMap<LinkId, f64> = HashMap::new();
            let mut local_flows: HashMap<LinkId, f64> = HashMap::new();
            for (f, d) in flows.iter().zip(&planned.decisions) {
                let r = d.plan.first().copied().unwrap_or(0.0).max(0.0);
                for l in &f.links {
                    *local_now.entry(l.link).or_default() += r;
                    *local_flows.entry(l.link).or_default() += 1.0;
                }
            }
            // Idle flows are planned as done (they book nothing): standby is the finished rest.
            let standby: Vec<bool> = planned
                .decisions
                .iter()
                .zip(&idle)
                .map(|(d, &idle)| cfg.standby_pace && d.done && !idle)
                .collect();
            let wider: Vec<bool> = planned
                .decisions
                .iter()
                .zip(idle.iter().zip(&standby))
                .map(|(d, (&idle, &standby))| idle || Self::ends_this_slot(d) || standby)
                .collect();
            let mut sharing: HashMap<LinkId, f64> = HashMap::new();
            let mut standby_sharing: HashMap<(&Arc<str>, LinkId), f64> = HashMap::new();
            for (i, _) in wider.iter().enumerate().filter(|(_, w)| **w) {
                for l in &inputs[i].path {
                    if standby[i] {
                        *standby_sharing.entry((&flows[i].job, l.link)).or_default() += 1.0;
                    } else {
                        *sharing.entry(l.link).or_default() += 1.0;
                    }
                }
            }
            for (i, _) in wider.iter().enumerate().filter(|(_, w)| **w) {
                let d = &planned.decisions[i];
                let own = d.plan.first().copied().unwrap_or(0.0).max(0.0);
                let extra = inputs[i]
                    .path
                    .iter()
                    .map(|l| {
                        let ext = l.load.first().copied().filter(|x| x.is_finite());
                        if standby[i] {
                            // A finished flow on standby: what its link leaves after the local
                            // flows that outrank it, as the next plan would give it. Lower-ranked
                            // flows yield from the next slot; until then the restart overbooks
                            // them by this much, paced, where released it burst at line rate.
                            let higher: f64 = flows
                                .iter()
                                .zip(&planned.decisions)
                                .filter(|(g, e)| {
                                    e.key < d.key && g.links.iter().any(|x| x.link == l.link)
                                })
                                .map(|(_, e)| e.plan.first().copied().unwrap_or(0.0).max(0.0))
                                .sum();
                            let n = standby_sharing
                                .get(&(&flows[i].job, l.link))
                                .copied()
                                .unwrap_or(1.0);
                            // Never below an even share of the link among this host's flows
                            // on it, what kernel TCP would give the restart: at the leftover
                            // alone, a job whose own flows held the link restarted at the rate
                            // floor, and PS-Lite's request/response rounds crawled behind it.
                            let even =
                                l.capacity / local_flows.get(&l.link).copied().unwrap_or(1.0);
                            let left = (l.capacity - ext.unwrap_or(0.0).max(0.0) - higher).max(0.0);
                            return (left / n).max(even);
                        }
                        let booked = ext.unwrap_or(0.0).max(0.0)
                            + local_now.get(&l.link).copied().unwrap_or(0.0);
                        (l.capacity - booked).max(0.0)
                            / sharing.get(&l.link).copied().unwrap_or(1.0)
                    })
                    .fold(f64::INFINITY, f64::min);
                pace_at[i] = Some((own + extra).min(d.achievable).max(d.rate).max(0.0));
            }
        }

        // The slot's orders.
        let floor_of =
            |f: &FlowObs| cfg.rate_floor_per_connection.max(0.0) * f.connections.max(1) as f64;
        let mut unsynced = vec![false; flows.len()];
        let mut enforces = Vec::with_capacity(flows.len());
        for (i, ((f, d), pace)) in flows
            .iter()
            .zip(&planned.decisions)
            .zip(&pace_at)
            .enumerate()
        {
            for l in &f.links {
                if let Some(switch) = l.unsynced_switch {
                    unsynced[i] = true;
                    notes[i].push(Degraded::ClockSkew { switch });
                }
            }
            enforces.push(if unsynced[i] || (d.done && pace.is_none()) {
                Enforce::Release
            } else {
                let mut rate = pace.unwrap_or(d.rate).max(floor_of(f));
                // Kept warm (never above a few MB/s per connection, see WARM_SHARE): its
                // next packets leave a millisecond apart, not 23 ms at the floor.
                let warm_cap = WARM_MAX_PER_CONNECTION * f.connections.max(1) as f64;
                if cfg.warm_resume {
                    let next = d.plan.get(1).copied().unwrap_or(0.0);
                    rate = rate.max((WARM_SHARE * next).min(warm_cap));
                }
                if cfg.warm_held && f.remaining_bytes > 0.0 {
                    rate = rate.max((WARM_SHARE * d.achievable).min(warm_cap));
                }
                if cfg.flush_tail && Self::is_tail(f, d.achievable, tau) {
                    rate = rate.max(d.achievable);
                }
                Enforce::Pace(rate)
            });
        }
        let handovers = if cfg.handover {
            let members: Vec<handover::Member<'_>> = flows
                .iter()
                .zip(&planned.decisions)
                .zip(&enforces)
                .enumerate()
                .map(|(i, ((f, d), e))| handover::Member {
                    path: &inputs[i].path,
                    rate: match e {
                        Enforce::Pace(r) if !idle[i] && !d.done => Some(*r),
                        _ => None,
                    },
                    ending: Self::ends_this_slot(d) && Self::holds_all(f),
                    remaining: f.remaining_bytes,
                    floor: floor_of(f),
                })
                .collect();
            handover::plan(&members, tau)
        } else {
            vec![None; flows.len()]
        };

        let mut out = Vec::with_capacity(inputs.len());
        for (((f, d), degraded), ((idle, enforce), (unsynced, handover))) in
            flows.iter().zip(planned.decisions).zip(notes).zip(
                idle.into_iter()
                    .zip(enforces)
                    .zip(unsynced.into_iter().zip(handovers)),
            )
        {
            let withdraw = d.done || unsynced;
            let key = d.key.clone();
            let booking = if withdraw {
                Booking::Withdraw { key }
            } else {
                Booking::Plan {
                    first_slot: slot,
                    rates: d.plan.clone(),
                    key,
                }
            };
            let sent = f.sent_bytes.max(0.0);
            let fo = FlowOut {
                id: d.id.clone(),
                enforce,
                booking,
                sent,
                finish: sent + d.rate * tau,
                idle,
                degraded,
                decision: d,
                handover,
            };
            // One line per flow and slot at debug level (RUST_LOG=mlcc_plan=debug): what the
            // policy saw and decided, for reading a run back slot by slot.
            tracing::debug!(
                target: "mlcc_plan",
                slot = slot.0,
                flow = %fo.id,
                idle,
                remaining = f.remaining_bytes as u64,
                sent = f.sent_bytes as u64,
                backlog = f.app_backlog.map(|b| b as i64),
                achieved = f.achieved.map(|a| a as u64),
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
            self.memory.insert(
                f.id.clone(),
                Memory {
                    last_rate: fo.decision.rate,
                    last_backlog: f.app_backlog,
                },
            );
            out.push(fo);
        }
        self.memory.retain(|id, _| seen.contains_key(id));
        StepOut {
            slot,
            flows: out,
            withdrawn: planned.withdrawn,
        }
    }
}
