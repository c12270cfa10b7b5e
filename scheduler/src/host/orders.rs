//! Core's answer carried out: per flow, its orders to the datapath (split over its sockets as
//! core said), its booking in this host's own table and in its switches' schedules, and its
//! progress for the peer it sends to; a vanished flow's bookings withdrawn; the slot's degraded
//! modes described for operators.

use std::collections::BTreeSet;
use std::time::Duration;

use mlcc_core::LoadTable;
use mlcc_core::host::{Booking, Connections, Degraded, Enforce, FlowOut};
use mlcc_core::load_table::Update;
use mlcc_proto::v1 as pb;

use super::SlotPlan;
use super::fabric::Fabric;
use super::flow_state::FlowState;
use super::peers::PeerBook;
use super::{SwitchBatch, entry_for};
use crate::datapath::{RateOrder, SocketKey};

/// What a slot's flows said of the switches and peers.
#[derive(Default)]
pub(super) struct Tally {
    silent: BTreeSet<String>,
    unsynced: BTreeSet<String>,
}

/// This host's side of carrying out a slot.
pub(super) struct Carrier<'a> {
    pub fabric: &'a Fabric,
    pub table: &'a mut LoadTable,
    pub me: &'a str,
    /// How long an order holds before the datapath falls back.
    pub expiry: Duration,
    pub plan: SlotPlan,
    pub tally: Tally,
    /// Per node (by index), this host's flows towards it: gathered by node, named once in
    /// [`Self::finish`] rather than looked up by name for every flow.
    pub peers: Vec<Vec<pb::FlowProgress>>,
    /// The slot's flows, gone ones included: the most items one switch's schedule can get.
    pub flows: usize,
}

impl Carrier<'_> {
    /// Carries out core's answer `fo` for local flow `f`.
    pub fn flow(&mut self, fo: FlowOut, f: &mut FlowState) {
        let slot = self.plan.slot;
        self.note_degraded(&fo.degraded);
        f.degraded = fo
            .degraded
            .iter()
            .map(|d| d.describe(self.fabric.topo()))
            .collect();
        f.enforced_rate = self.order(&fo, f);
        let d = fo.decision;
        // The booking's own rates go to the switches, uncopied: they are the decision's plan.
        let (key, rates) = match fo.booking {
            Booking::Plan { key, rates, .. } => (key, Some(rates)),
            Booking::Withdraw { key } => (key, None),
        };
        let withdraw = rates.is_none();
        for &l in &f.path {
            if self.table.contains(l) {
                // Own links are ours alone to write; a refusal would be a bug in routing.
                let _ = self.table.update(
                    l,
                    &Update {
                        flow: &d.id,
                        publisher: self.me,
                        first_slot: slot,
                        rates: &d.plan,
                        key: &key,
                        done: withdraw,
                    },
                );
            }
        }
        self.schedule(f, rates.unwrap_or_default(), key.rank.0, withdraw);
        self.peers[f.dst.index()].push(pb::FlowProgress {
            flow_id: d.id.as_str().to_owned(),
            sent_bytes: fo.sent as u64,
            finish_bytes: fo.finish as u64,
            planned_rate_bytes_per_sec: d.planned_rate,
            iteration: f.iteration,
            slot: slot.0,
            next_rate_bytes_per_sec: d.next_rate(),
            ..super::peers::learned_part(f.source, &f.sockets, f.job_bytes)
        });
        f.decision = Some(d);
        f.decided_in = slot;
    }

    /// `fo`'s orders for `f`'s sockets (its slot order, or the two of a hand-over); the rate
    /// shown is the slot's order, what a hand-over averages to.
    fn order(&mut self, fo: &FlowOut, f: &FlowState) -> f64 {
        let rate = match fo.enforce {
            Enforce::Release => {
                self.plan.clear.extend(f.sockets.iter().copied());
                return 0.0;
            }
            Enforce::Pace(_) if f.sockets.is_empty() => return 0.0,
            Enforce::Pace(rate) => rate,
        };
        let split = Split {
            sockets: &f.sockets,
            quiet: f.quiet_sockets(),
            connections: fo.connections,
            expiry: self.expiry,
            fill: fo.fill,
        };
        // Core bounds a hand-over within the slot; a duration that is not one (it never
        // should be) leaves the slot's order alone.
        let handover = fo
            .handover
            .and_then(|h| Some((h, Duration::try_from_secs_f64(h.for_secs).ok()?)));
        match handover {
            Some((h, after)) => {
                self.plan
                    .handovers
                    .push((after, split.orders(h.then).collect()));
                self.plan.orders.extend(split.orders(h.first));
                split.orders(rate).map(|o| o.bytes_per_sec as f64).sum()
            }
            None => {
                let at = self.plan.orders.len();
                self.plan.orders.extend(split.orders(rate));
                self.plan.orders[at..]
                    .iter()
                    .map(|o| o.bytes_per_sec as f64)
                    .sum()
            }
        }
    }

    /// Adds `f`'s booking to the batch of each switch on its path.
    fn schedule(&mut self, f: &FlowState, rates: Vec<f64>, rank: u64, done: bool) {
        // Each switch its copy; the last takes the plan itself.
        let copies = std::iter::repeat_n(rates, f.by_switch.len());
        for (part, rates) in f.by_switch.iter().zip(copies) {
            let most = self.flows;
            entry_for(&mut self.plan.schedules, &part.switch, || SwitchBatch {
                address: part.address.clone(),
                items: Vec::with_capacity(most),
            })
            .items
            .push(pb::ScheduleItem {
                flow_id: f.id.as_str().to_owned(),
                links: part.links.clone(),
                first_slot: self.plan.slot.0,
                rates_bytes_per_sec: rates,
                rank,
                done,
            });
        }
    }

    fn note_degraded(&mut self, degraded: &[Degraded]) {
        for d in degraded {
            let name = |n| self.fabric.topo().node(n).name.clone();
            match *d {
                Degraded::SwitchSilent { switch } => {
                    self.tally.silent.insert(name(switch));
                }
                Degraded::FeedbackMissing { .. } => self.plan.feedback_missing += 1,
                Degraded::PeerSilent { .. } => self.plan.flows_without_peer += 1,
                Degraded::ClockSkew { switch } => {
                    self.tally.unsynced.insert(name(switch));
                }
                Degraded::HolderNotHeldBack => {}
            }
        }
    }

    /// A flow that disappeared: its orders cleared, its bookings withdrawn everywhere.
    pub fn gone(&mut self, f: FlowState) {
        self.plan.clear.extend(f.sockets.iter().copied());
        self.table.withdraw(&f.id);
        self.schedule(&f, Vec::new(), f.rank().0, true);
    }

    /// The slot's plan, with its degraded modes described for operators.
    pub fn finish(mut self, peers: &PeerBook) -> SlotPlan {
        let topo = self.fabric.topo();
        let mut gathered = self.peers;
        self.plan.peers = self
            .fabric
            .by_name()
            .iter()
            .filter_map(|&n| {
                let flows = std::mem::take(&mut gathered[n.index()]);
                (!flows.is_empty()).then(|| (topo.node(n).name.clone(), flows))
            })
            .collect();
        debug_assert!(self.plan.peers.windows(2).all(|w| w[0].0 < w[1].0));
        let plan = &mut self.plan;
        for s in &self.tally.silent {
            plan.degraded.push(format!(
                "switch {s} unreachable: its links planned as unbooked"
            ));
        }
        for p in peers.silent() {
            plan.degraded
                .push(format!("peer {p} unreachable: no dependency adjustment"));
        }
        if plan.feedback_missing > 0 {
            plan.degraded.push(format!(
                "{} flow link(s) without feedback from an answering switch: planned as unbooked",
                plan.feedback_missing
            ));
        }
        for s in &self.tally.unsynced {
            plan.degraded.push(format!(
                "clock skew vs switch {s} beyond τ/4: its flows left to kernel TCP, bookings withdrawn"
            ));
        }
        plan.silent_switches = self.tally.silent.into_iter().collect();
        plan.silent_peers = peers.silent().cloned().collect();
        plan.unsynced_switches = self.tally.unsynced.into_iter().collect();
        self.plan
    }
}

/// How one flow's group rate becomes its sockets' orders.
struct Split<'a> {
    sockets: &'a [SocketKey],
    quiet: &'a [SocketKey],
    connections: Connections,
    expiry: Duration,
    fill: Option<u8>,
}

impl Split<'_> {
    /// Each socket's order at the group rate `rate`, in the sockets' order.
    fn orders(&self, rate: f64) -> impl Iterator<Item = RateOrder> + '_ {
        let r = self.connections.split(rate);
        self.sockets.iter().map(move |&key| RateOrder {
            key,
            bytes_per_sec: if self.quiet.contains(&key) {
                r.quiet
            } else {
                r.busy
            } as u64,
            expiry: self.expiry,
            fill: self.fill,
        })
    }
}
