//! Step 2 of a slot: the switches' answers and the flows' state become core's observations;
//! core's [`HostPolicy`] decides; its answer becomes datapath orders, schedules per switch and
//! progress per peer.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use mlcc_core::host::{Answer, Degraded, Enforce, FlowObs, LinkObs};
use mlcc_core::load_table::Update;
use mlcc_core::topology::{LinkId, NodeId};
use mlcc_proto::v1 as pb;

use super::*;
use crate::datapath::RateOrder;

/// How a group's paced `rate` splits over its `sockets`, `quiet` of which sent nothing last
/// slot: (each other socket's rate, each quiet socket's). NCCL and PS-Lite split a transfer
/// evenly over the connections that carry it, so unequal pacing among those would only slow
/// the group to its slowest socket: they share the rate evenly. But not every connection
/// carries the group's data — over ZMQ, PS-Lite sends on the connections a process opened and
/// only receives on those its peers opened, half of a worker's group — and an even split over
/// all left that half of the rate unused (measured: a group achieved 47.5 of 95.6 Mbit/s
/// planned). Quiet sockets get the datapath's floor, so a burst that starts on one is not
/// stalled before the next slot counts it as sending; the others share the rest, never less
/// than an even split. With every socket quiet (or none), all share evenly.
pub(super) fn socket_rates(rate: f64, sockets: usize, quiet: usize) -> (u64, u64) {
    let even = (rate / sockets.max(1) as f64).max(1.0) as u64;
    if quiet == 0 || quiet >= sockets {
        return (even, even);
    }
    let floor = crate::datapath::RATE_FLOOR_BYTES_PER_SEC;
    let busy = (sockets - quiet) as f64;
    let per = ((rate - (floor * quiet as u64) as f64) / busy).max(even as f64) as u64;
    (per, floor.min(even))
}

impl HostScheduler {
    /// What one link of `f`'s path looks like this slot: capacity, the owning switch's answer
    /// (or its silence), and whether that switch's clock can be trusted.
    fn link_obs(
        &self,
        f: &FlowState,
        l: LinkId,
        answers: &FeedbackAnswers,
        loads: &HashMap<(&str, &str), &pb::LinkLoad>,
    ) -> LinkObs {
        let link = self.topo.link(l);
        let mut lo = LinkObs::unasked(l, link.capacity.0);
        let Some((s, node, _)) = self.emulated_owner(l) else {
            return lo;
        };
        if self.unsynced.contains(&node.name) {
            lo.unsynced_switch = Some(s);
        }
        if f.remaining_bytes > 0.0 {
            lo.answer = if !answers.contains_key(&node.name) {
                Answer::Silent { switch: s }
            } else if let Some(ll) = loads.get(&(f.id.as_str(), link.name.as_str())) {
                if ll.capacity_bytes_per_sec.is_finite() && ll.capacity_bytes_per_sec > 0.0 {
                    lo.capacity = ll.capacity_bytes_per_sec;
                }
                lo.committed_now = ll.committed_bytes_per_sec;
                Answer::Load(ll.load_bytes_per_sec.clone())
            } else {
                Answer::Missing { switch: s }
            };
        }
        lo
    }

    /// What core's policy sees of a local flow this slot.
    fn flow_obs(
        &self,
        f: &FlowState,
        answers: &FeedbackAnswers,
        loads: &HashMap<(&str, &str), &pb::LinkLoad>,
    ) -> FlowObs {
        let links = f
            .path
            .iter()
            .map(|&l| self.link_obs(f, l, answers, loads))
            .collect();
        let mut o = FlowObs::new(f.id.clone(), f.job_name.clone(), f.role, f.dst, links);
        o.connections = f.sockets.len();
        o.iteration = f.iteration;
        o.iteration_start = f.iteration_start;
        o.job_bytes = f.job_bytes;
        o.job_attained_bytes = f.attained_bytes();
        o.job_remaining_bytes = f.remaining_job_bytes();
        o.sent_bytes = f.sent_bytes;
        o.remaining_bytes = f.remaining_bytes;
        o.slack_bytes = f.slack_bytes;
        o.app_backlog = f.app_backlog;
        o.achieved = f.achieved;
        o.upstream = self.upstream_of(f);
        o.peer_silent = self.silent_peers.contains(&f.dst_host);
        o
    }

    /// Step 2 of a slot: plans every local flow with the switches' answers. The decisions are
    /// core's [`HostPolicy`]'s; this turns them into datapath orders and protobuf.
    pub fn plan(&mut self, answers: &FeedbackAnswers) -> SlotPlan {
        let slot = self.slot;
        let mut plan = SlotPlan {
            slot,
            ..Default::default()
        };
        // Loads by (flow, link) from the switches that answered.
        let mut loads: HashMap<(&str, &str), &pb::LinkLoad> = HashMap::new();
        for r in answers.values() {
            for ff in &r.flows {
                for l in &ff.links {
                    loads.insert((ff.flow_id.as_str(), l.link.as_str()), l);
                }
            }
        }
        let obs: Vec<FlowObs> = self
            .flows
            .values()
            .map(|f| self.flow_obs(f, answers, &loads))
            .collect();
        let out = self.policy.step(slot, &obs);
        if let Some(r) = &mut self.recorded {
            *r = obs;
        }
        let expiry = Duration::from_nanos(
            self.cfg.policy.slots.tau_ns() * u64::from(self.cfg.order_expiry_slots.max(1)),
        );
        let me = self.cfg.host.clone();
        let mut silent: BTreeSet<String> = BTreeSet::new();
        let mut unsynced_used: BTreeSet<String> = BTreeSet::new();
        for fo in out.flows {
            let sw_links = match self.flows.get(&fo.id) {
                Some(f) => self.switch_links(&f.path),
                None => continue,
            };
            for d in &fo.degraded {
                let name = |n: &NodeId| self.topo.node(*n).name.clone();
                match d {
                    Degraded::SwitchSilent { switch } => {
                        silent.insert(name(switch));
                    }
                    Degraded::FeedbackMissing { .. } => plan.feedback_missing += 1,
                    Degraded::PeerSilent { .. } => plan.flows_without_peer += 1,
                    Degraded::ClockSkew { switch } => {
                        unsynced_used.insert(name(switch));
                    }
                    Degraded::HolderNotHeldBack => {}
                }
            }
            let described: Vec<String> =
                fo.degraded.iter().map(|d| d.describe(&self.topo)).collect();
            let Some(f) = self.flows.get_mut(&fo.id) else {
                continue;
            };
            f.degraded = described;
            let (sockets, quiet_sockets) = (&f.sockets, &f.quiet);
            let orders = |rate: f64| {
                let (per, quiet) = socket_rates(rate, sockets.len(), quiet_sockets.len());
                sockets.iter().map(move |&key| RateOrder {
                    key,
                    bytes_per_sec: if quiet_sockets.contains(&key) {
                        quiet
                    } else {
                        per
                    },
                    expiry,
                })
            };
            let mut shown = 0.0;
            match (fo.enforce, fo.handover) {
                (Enforce::Release, _) => plan.clear.extend(sockets.iter().copied()),
                (Enforce::Pace(_), _) if sockets.is_empty() => {}
                (Enforce::Pace(rate), handover) => {
                    // The rate shown is the slot's order, what a hand-over averages to.
                    shown = orders(rate).map(|o| o.bytes_per_sec as f64).sum();
                    // Core bounds a hand-over within the slot; a duration that is not one
                    // (it never should be) leaves the slot's order alone.
                    match handover
                        .and_then(|h| Some((h, Duration::try_from_secs_f64(h.for_secs).ok()?)))
                    {
                        Some((h, after)) => {
                            plan.handovers.push((after, orders(h.then).collect()));
                            plan.orders.extend(orders(h.first));
                        }
                        None => plan.orders.extend(orders(rate)),
                    }
                }
            }
            f.enforced_rate = shown;
            let d = fo.decision;
            let key = fo.booking.key().clone();
            let withdraw = fo.booking.is_withdraw();
            for &l in &f.path {
                if self.table.contains(l) {
                    // Own links are ours alone to write; a refusal would be a bug in routing.
                    let _ = self.table.update(
                        l,
                        &Update {
                            flow: &d.id,
                            publisher: &me,
                            first_slot: slot,
                            rates: &d.plan,
                            key: &key,
                            done: withdraw,
                        },
                    );
                }
            }
            for (sw, addr, links) in sw_links {
                plan.schedule(
                    sw,
                    addr,
                    pb::ScheduleItem {
                        flow_id: d.id.to_string(),
                        links,
                        first_slot: slot.0,
                        rates_bytes_per_sec: if withdraw { Vec::new() } else { d.plan.clone() },
                        rank: key.rank.0,
                        done: withdraw,
                    },
                );
            }
            plan.peers
                .entry(f.dst_host.clone())
                .or_default()
                .push(pb::FlowProgress {
                    flow_id: d.id.to_string(),
                    sent_bytes: fo.sent as u64,
                    finish_bytes: fo.finish as u64,
                    planned_rate_bytes_per_sec: d.planned_rate,
                    iteration: f.iteration,
                    slot: slot.0,
                    next_rate_bytes_per_sec: d.next_rate(),
                });
            f.decision = Some(d);
            f.decided_in = slot;
        }
        // Withdraw flows that disappeared: empty schedules to their switches, orders cleared.
        for f in std::mem::take(&mut self.gone) {
            plan.clear.extend(f.sockets.iter().copied());
            self.table.withdraw(&f.id);
            for (sw, addr, links) in self.switch_links(&f.path) {
                plan.schedule(
                    sw,
                    addr,
                    pb::ScheduleItem {
                        flow_id: f.id.to_string(),
                        links,
                        first_slot: slot.0,
                        rates_bytes_per_sec: Vec::new(),
                        rank: f.rank().0,
                        done: true,
                    },
                );
            }
        }
        for s in &silent {
            plan.degraded.push(format!(
                "switch {s} unreachable: its links planned as unbooked"
            ));
        }
        for p in &self.silent_peers {
            plan.degraded
                .push(format!("peer {p} unreachable: no dependency adjustment"));
        }
        if plan.feedback_missing > 0 {
            plan.degraded.push(format!(
                "{} flow link(s) without feedback from an answering switch: planned as unbooked",
                plan.feedback_missing
            ));
        }
        for s in &unsynced_used {
            plan.degraded.push(format!(
                "clock skew vs switch {s} beyond τ/4: its flows left to kernel TCP, bookings withdrawn"
            ));
        }
        plan.silent_switches = silent.into_iter().collect();
        plan.unsynced_switches = unsynced_used.into_iter().collect();
        plan
    }
}
