//! One local flow group's bookkeeping across slots: its sockets' counters become its bytes sent
//! and left in the current iteration, the application's backlog, last slot's delivery, its
//! retransmissions, and which of its sockets were quiet.

use std::borrow::Cow;
use std::sync::Arc;

use mlcc_core::flow::FlowRole;
use mlcc_core::job::JobProgress;
use mlcc_core::planner::FlowDecision;
use mlcc_core::topology::{LinkId, NodeId};
use mlcc_core::{FlowId, Rank, Slot};
use serde::Serialize;

use super::Source;
use super::fabric::SwitchPart;
use super::few_sockets::FewSockets;
use super::split::{iteration_baseline, shares};
use crate::datapath::{SocketKey, SocketMap, SocketStats};

/// Each socket's datapath counters this slot.
pub(super) type Counters = SocketMap<SocketCounters>;

/// One of a flow's sockets' counters this slot, where the datapath has them.
type Seen<'a> = Option<&'a SocketCounters>;

/// Sockets a flow usually has at most: their counters are looked up into an array on the
/// stack rather than a vector per flow and slot.
const FEW: usize = 8;

/// `sockets`' counters in their order: in `few` where they fit, else in `many`.
fn look_up<'a, 'c>(
    sockets: &[SocketKey],
    counters: &'c Counters,
    few: &'a mut [Seen<'c>; FEW],
    many: &'a mut Vec<Seen<'c>>,
) -> &'a [Seen<'c>] {
    if let Some(part) = few.get_mut(..sockets.len()) {
        for (cell, k) in part.iter_mut().zip(sockets) {
            *cell = counters.get(k);
        }
        return part;
    }
    many.extend(sockets.iter().map(|k| counters.get(k)));
    many
}

/// Acked bytes of a socket, 0 without counters.
fn acked(c: &Seen<'_>) -> u64 {
    c.map_or(0, |c| c.acked)
}

/// `each` summed over a flow's sockets; `None` without sockets or where one has no counters or
/// no value.
fn sum_over_sockets(
    seen: &[Seen<'_>],
    each: impl Fn(&SocketCounters) -> Option<u64>,
) -> Option<f64> {
    if seen.is_empty() {
        return None;
    }
    seen.iter()
        .try_fold(0.0, |b, c| Some(b + each(c.as_ref()?)? as f64))
}

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
    /// `path`'s links grouped by the emulated switch that owns them.
    #[serde(skip)]
    pub(super) by_switch: Vec<SwitchPart>,
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
    /// Expected bytes of the current iteration (`None`: nothing tells) and how that was
    /// estimated.
    pub expected_bytes: Option<f64>,
    pub expected_from: &'static str,
    /// S_f, and G_f where the iteration's bytes are known.
    pub sent_bytes: f64,
    pub remaining_bytes: Option<f64>,
    pub slack_bytes: f64,
    /// Bytes this group sent in its last complete iteration (progress files' share; 0 unknown).
    pub last_iteration_bytes: u64,
    /// Bytes the library has handed to the sockets this iteration but the receiver has not
    /// acknowledged yet (progress files' enqueued count minus the datapath's acks; for a
    /// learned process, what its sockets hold unacknowledged); `None` without them. Beyond
    /// what is in flight, this is data the sender already holds: the flow cannot be ahead of
    /// its upstream, and if it under-delivers, the path (not the application) held it back.
    pub app_backlog: Option<f64>,
    /// Bytes its sockets had sent and not yet had acked when last observed, `None` without
    /// datapath counters.
    pub in_flight: Option<f64>,
    /// Achieved rate over the last slot (bytes/s), `None` without datapath counters.
    pub achieved: Option<f64>,
    /// The rate ordered to the datapath for this slot: the plan's, or more where the flow
    /// paces into free capacity (an idle flow, a plan's last slot); 0 when its sockets' orders
    /// were cleared.
    pub enforced_rate: f64,
    /// Segments the flow's sockets retransmitted since mlccd first saw them.
    pub retransmits: u64,
    /// Of those, the ones retransmitted while a queue stood on the path (see
    /// [`SocketCounters::queueing`]): loss from a full queue, which under mlcc means a plan
    /// overbooked a link (or traffic mlcc does not schedule filled it). The others are random
    /// loss, which mlcc rides out.
    pub queue_loss: u64,
    #[serde(skip)]
    counts: SocketCounts,
    pub decision: Option<FlowDecision>,
    /// The slot `decision` was made for (what the peers' reports of it speak of).
    pub decided_in: Slot,
    pub last_seen: Slot,
    /// Why this flow has no dependency adjustment or plans around a silent switch.
    pub degraded: Vec<String>,
}

/// What a flow remembers of its sockets' counters from one slot to the next.
#[derive(Clone, Debug, Default)]
struct SocketCounts {
    /// Each socket's retransmit counter when last seen.
    retransmits: FewSockets<u32>,
    /// Each socket's acked count where this iteration's bytes begin.
    baseline: FewSockets<u64>,
    /// What each socket carried in the iteration before this one, from its raw acked counts
    /// where the two began (at the first, all it carried since first seen): what the process's
    /// bytes are split over its groups by. Raw counts, never the re-anchored `baseline`: a split
    /// that moved with the baselines it corrects chased itself, and two groups of one PS
    /// worker swapped 8 % of their bytes every slot, each in turn looking unfinished (testbed
    /// `paper-small-no-cross`, a ResNet50 worker's pushes). The last iteration, not all since
    /// the socket opened: what a connection carried once (DDP's initial broadcast from rank 0
    /// over every pair) kept a share of every later iteration for a group that no longer sends.
    split_basis: FewSockets<u64>,
    /// Each socket's raw acked count where this iteration began (or where it was first seen).
    acked_at_start: FewSockets<u64>,
    /// The sockets' acked bytes in all, last slot.
    acked: Option<u64>,
    /// The progress file's enqueued bytes (this iteration, this flow's share) last slot.
    enqueued: Option<f64>,
    /// Each socket's (sent, acked) counters when last seen.
    sent_acked: FewSockets<(u64, u64)>,
    /// The sockets whose counters did not move since last slot: nothing to send.
    quiet: Vec<SocketKey>,
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
    /// Bytes the process wrote and the peer has not acknowledged, where the datapath says.
    pub queued: Option<u64>,
}

/// A standing queue this long marks loss as congestion (the testbed's shallowest queue holds
/// 5 ms; an idle veth path's RTT is well under 1 ms, a loaded host's ACK delays about 1 ms).
pub const QUEUE_DELAY: std::time::Duration = std::time::Duration::from_millis(2);

impl SocketCounters {
    pub fn of(s: &SocketStats) -> Self {
        SocketCounters {
            acked: s.bytes_acked,
            sent: s.bytes_sent,
            retransmits: s.retransmits,
            queueing: s
                .min_rtt
                .is_some_and(|m| s.srtt.saturating_sub(m) >= QUEUE_DELAY),
            queued: s.queued_bytes,
        }
    }
}

/// What one slot's observation says of a flow group.
pub(super) struct FlowSpec<'a> {
    /// Read only when the flow is new: borrowed from the observation (or an admin job).
    pub job: Cow<'a, str>,
    pub role: FlowRole,
    pub dst: NodeId,
    pub source: Source,
    pub sockets: Vec<SocketKey>,
    pub conns: usize,
    /// Bytes of the current iteration (0: nothing tells), and how that was estimated.
    pub expected: f64,
    pub expected_from: &'static str,
    /// The progress file's bytes, for when the datapath has no counters.
    pub sent_share: Option<f64>,
    pub iteration: Option<u64>,
    pub start: Slot,
    pub slack: f64,
    pub last_iteration_bytes: u64,
    pub job_bytes: u64,
    pub job_total_iterations: u64,
}

impl FlowState {
    /// A flow first seen in `slot`, routed over `path`.
    pub(super) fn new(
        id: FlowId,
        spec: &FlowSpec,
        dst_host: String,
        path: Vec<LinkId>,
        path_names: Vec<String>,
        by_switch: Vec<SwitchPart>,
        slot: Slot,
    ) -> Self {
        FlowState {
            id,
            job_name: Arc::from(&*spec.job),
            job: spec.job.to_string(),
            role: spec.role,
            dst_host,
            dst: spec.dst,
            path,
            path_names,
            by_switch,
            source: spec.source,
            sockets: Vec::new(),
            connections: 0,
            iteration: spec.iteration.unwrap_or(0),
            iteration_start: spec.start,
            job_bytes: spec.job_bytes,
            job_total_iterations: spec.job_total_iterations,
            expected_bytes: None,
            expected_from: "unknown",
            sent_bytes: 0.0,
            remaining_bytes: None,
            slack_bytes: 0.0,
            last_iteration_bytes: 0,
            app_backlog: None,
            in_flight: None,
            achieved: None,
            enforced_rate: 0.0,
            retransmits: 0,
            queue_loss: 0,
            counts: SocketCounts::default(),
            decision: None,
            decided_in: slot,
            last_seen: slot,
            degraded: Vec::new(),
        }
    }

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

    /// The job's bytes and iterations as the rank rules read them. The progress file counts
    /// iterations from 1 (0 before the first begins): the ones before this are completed.
    pub fn job_progress(&self) -> JobProgress {
        JobProgress {
            model_bytes: self.job_bytes,
            completed: self.iteration.saturating_sub(1),
            total: self.job_total_iterations,
        }
    }

    /// The sockets that neither sent nor had a byte acked since last slot.
    pub fn quiet_sockets(&self) -> &[SocketKey] {
        &self.counts.quiet
    }

    /// What `keys` carried in the iteration before `iteration` (see
    /// `SocketCounts::split_basis`), if every one of them has a count: the flow is in
    /// `iteration`, or `iteration` begins this slot (then from the counters now, `counters`:
    /// left to the cumulative counts for that first slot, a group that had carried DDP's
    /// initial broadcast took the slot's plan from the group that had the bytes).
    pub(super) fn split_basis(
        &self,
        iteration: u64,
        keys: &[SocketKey],
        counters: &Counters,
    ) -> Option<u64> {
        if keys.is_empty() {
            return None;
        }
        let c = &self.counts;
        if self.iteration == iteration {
            return keys
                .iter()
                .try_fold(0u64, |b, k| Some(b.saturating_add(*c.split_basis.get(k)?)));
        }
        if self.iteration.checked_add(1) != Some(iteration) {
            return None;
        }
        keys.iter().try_fold(0u64, |b, k| {
            let carried = counters
                .get(k)?
                .acked
                .saturating_sub(*c.acked_at_start.get(k)?);
            Some(b.saturating_add(carried))
        })
    }

    /// What `keys` carried since this flow's iteration began (or they were first seen), if
    /// every one of them has a count.
    pub(super) fn carried_since_start(
        &self,
        keys: &[SocketKey],
        counters: &Counters,
    ) -> Option<u64> {
        if keys.is_empty() {
            return None;
        }
        keys.iter().try_fold(0u64, |b, k| {
            let start = *self.counts.acked_at_start.get(k)?;
            Some(b.saturating_add(counters.get(k)?.acked.saturating_sub(start)))
        })
    }

    /// Takes this slot's observation of the flow (`spec`, `counters`) with slots of `tau`
    /// seconds.
    pub(super) fn update(&mut self, slot: Slot, spec: FlowSpec, counters: &Counters, tau: f64) {
        self.take_spec(slot, &spec);
        self.start_iteration(&spec, counters);
        self.track_sockets(&spec.sockets, counters);
        // Each socket's counters looked up once for the steps below, in `self.sockets`' order.
        let (mut few, mut many) = ([None; FEW], Vec::new());
        let seen = look_up(&self.sockets, counters, &mut few, &mut many);
        self.count_retransmits(seen);
        let measured = self.acked_total(seen);
        let since_start = self.since_start(measured, spec.sent_share, seen);
        self.mark_quiet(seen);
        self.in_flight = self.in_flight_now(seen);
        let queued = self.queued_now(seen);
        self.achieved = match (measured, self.counts.acked) {
            (Some(now), Some(prev)) => Some(now.saturating_sub(prev) as f64 / tau),
            _ => None,
        };
        self.counts.acked = measured;
        self.account(slot, &spec, since_start, queued);
    }

    fn take_spec(&mut self, slot: Slot, spec: &FlowSpec) {
        self.last_seen = slot;
        self.job_bytes = spec.job_bytes;
        self.job_total_iterations = spec.job_total_iterations;
        self.connections = spec.conns;
        self.slack_bytes = spec.slack;
        if spec.last_iteration_bytes > 0 {
            self.last_iteration_bytes = spec.last_iteration_bytes;
        }
    }

    /// A new iteration: counters restart where the last one's bytes end. Not at what the
    /// sockets have acked by now: the iteration began up to a slot ago, and what it sent since
    /// would never count (measured on the testbed: ~4 MB of every VGG19 ring iteration, so the
    /// flow looked backlogged through the whole compute phase, kept its bookings, and B_f
    /// learned a 'slow path' from it).
    fn start_iteration(&mut self, spec: &FlowSpec, counters: &Counters) {
        let Some(it) = spec.iteration.filter(|&it| it != self.iteration) else {
            return;
        };
        let acked = |k: &SocketKey| counters.get(k).map(|c| c.acked);
        self.iteration = it;
        self.iteration_start = spec.start;
        let old = std::mem::take(&mut self.counts.baseline);
        // Each socket's part of the group's bytes: what it carried (ZMQ's connections that
        // only receive carry nothing; evenly split they looked behind).
        let w = shares(&spec.sockets.iter().map(acked).collect::<Vec<_>>());
        for (k, w) in spec.sockets.iter().zip(w) {
            let (Some(a), Some(&b)) = (acked(k), old.get(k)) else {
                continue;
            };
            let last = spec.last_iteration_bytes as f64 * w;
            let now_enqueued = spec.sent_share.map(|e| e * w);
            let base = iteration_baseline(b, a, last, now_enqueued);
            self.counts.baseline.insert(*k, base);
        }
        let starts: FewSockets<u64> = spec
            .sockets
            .iter()
            .filter_map(|k| Some((*k, acked(k)?)))
            .collect();
        self.counts.split_basis = starts
            .iter()
            .map(|(k, &a)| {
                let before = self.counts.acked_at_start.get(k).copied().unwrap_or(0);
                (*k, a.saturating_sub(before))
            })
            .collect();
        self.counts.acked_at_start = starts;
    }

    /// Sockets first seen mid-iteration count from now on; sockets gone are forgotten.
    fn track_sockets(&mut self, sockets: &[SocketKey], counters: &Counters) {
        let c = &mut self.counts;
        for k in sockets {
            if let Some(a) = counters.get(k).map(|c| c.acked) {
                c.baseline.or_insert(*k, a);
                c.split_basis.or_insert(*k, a);
                c.acked_at_start.or_insert(*k, a);
            }
        }
        // Every count is of a socket this flow had: with the same sockets, none is stale.
        if self.sockets == sockets {
            return;
        }
        c.baseline.retain(|k, _| sockets.contains(k));
        c.split_basis.retain(|k, _| sockets.contains(k));
        c.acked_at_start.retain(|k, _| sockets.contains(k));
        self.sockets = sockets.to_vec();
        c.retransmits.retain(|k, _| sockets.contains(k));
    }

    fn count_retransmits(&mut self, seen: &[Seen<'_>]) {
        for (k, l) in self.sockets.iter().zip(seen) {
            let Some(l) = l else { continue };
            // A socket first seen now counts from now: its past is not this flow's to explain.
            let prev = self
                .counts
                .retransmits
                .insert(*k, l.retransmits)
                .unwrap_or(l.retransmits);
            let new = u64::from(l.retransmits.saturating_sub(prev));
            self.retransmits = self.retransmits.saturating_add(new);
            if l.queueing {
                self.queue_loss = self.queue_loss.saturating_add(new);
            }
        }
    }

    /// The sockets' acked bytes in all, where the datapath counts every one of them.
    fn acked_total(&self, seen: &[Seen<'_>]) -> Option<u64> {
        // Saturating: the counters come from the datapath, and a wrapped sum (a reused socket
        // key, a corrupt map entry) must not panic the slot loop.
        if seen.is_empty() {
            return None;
        }
        seen.iter()
            .try_fold(0u64, |s, c| Some(s.saturating_add(c.as_ref()?.acked)))
    }

    /// Bytes acked since this iteration's baselines (`measured`: the sockets' acked total).
    /// A flow that neither handed over nor got acked a byte for a whole slot has nothing in
    /// flight (paced at least at the rate floor, anything queued would have drawn ACKs): all
    /// it enqueued (`enqueued`) is acked. If the counters say otherwise, the baselines are off
    /// — taken when mlccd first saw the sockets mid-iteration, or moved by bytes the library
    /// does not count — and a phantom backlog would keep the flow booked through its whole
    /// compute phase: they are re-anchored so that acked = enqueued. Forward (bytes taken
    /// as acked that were not seen) only while the gap is at most what the flow has moved this
    /// iteration: a larger one is bytes the library still holds, not a counting error. Gloo
    /// hands a bucket over at once but sends only once its peer has posted the receive; a
    /// rank a slot ahead of its peer then sat a slot with a whole bucket enqueued and nothing
    /// moving, and taken as acked, that bucket ran at a finished flow's share.
    fn since_start(
        &mut self,
        measured: Option<u64>,
        enqueued: Option<f64>,
        seen: &[Seen<'_>],
    ) -> Option<f64> {
        let mut since_start = measured.map(|_| self.acked_since_baseline(seen));
        if let (Some(now), Some(prev), Some(enq), Some(prev_enq), Some(got)) = (
            measured,
            self.counts.acked,
            enqueued,
            self.counts.enqueued,
            since_start,
        ) && now == prev
            && enq == prev_enq
            && (got - enq).abs() >= 1.0
            && enq - got <= got
        {
            self.reanchor(got - enq, seen);
            since_start = Some(self.acked_since_baseline(seen));
        }
        self.counts.enqueued = enqueued;
        since_start
    }

    /// Only where every socket has counters (`acked_total` is some).
    fn acked_since_baseline(&self, seen: &[Seen<'_>]) -> f64 {
        self.sockets
            .iter()
            .zip(seen)
            .map(|(k, c)| {
                let base = self.counts.baseline.get(k).copied().unwrap_or(0);
                acked(c).saturating_sub(base) as f64
            })
            .sum()
    }

    /// Moves the baselines on by `excess` bytes in all, each socket by its share.
    fn reanchor(&mut self, excess: f64, seen: &[Seen<'_>]) {
        let w = shares(&seen.iter().map(|c| Some(acked(c))).collect::<Vec<_>>());
        for ((k, w), c) in self.sockets.iter().zip(w).zip(seen) {
            let b = self.counts.baseline.get(k).copied().unwrap_or(0) as f64;
            let moved = (b + excess * w).clamp(0.0, acked(c) as f64) as u64;
            self.counts.baseline.insert(*k, moved);
        }
    }

    /// What the sockets have on the wire unacknowledged (retransmissions counted, so at worst
    /// an over-estimate), if every one of them has counters.
    fn in_flight_now(&self, seen: &[Seen<'_>]) -> Option<f64> {
        sum_over_sockets(seen, |c| Some(c.sent.saturating_sub(c.acked)))
    }

    /// What the process has written to the sockets and not had acknowledged, if the datapath
    /// says for every one of them.
    fn queued_now(&self, seen: &[Seen<'_>]) -> Option<f64> {
        sum_over_sockets(seen, |c| c.queued)
    }

    /// Sockets that neither sent nor had a byte acked since last slot have nothing to send
    /// (paced at the floor at least, anything queued would have moved).
    fn mark_quiet(&mut self, seen: &[Seen<'_>]) {
        let c = &mut self.counts;
        let sockets = &self.sockets;
        c.sent_acked.retain(|k, _| {
            sockets
                .iter()
                .zip(seen)
                .any(|(s, now)| s == k && now.is_some())
        });
        c.quiet.clear();
        for (k, now) in sockets.iter().zip(seen) {
            let Some(now) = now else { continue };
            let seen = (now.sent, now.acked);
            if c.sent_acked.insert(*k, seen) == Some(seen) {
                c.quiet.push(*k);
            }
        }
    }

    /// S, G and the backlog: what was acked since the iteration began (or, without counters,
    /// what the progress file handed over), against what the iteration moves. `queued`: what
    /// the sockets hold unacknowledged, the backlog of a learned process.
    fn account(
        &mut self,
        slot: Slot,
        spec: &FlowSpec,
        since_start: Option<f64>,
        queued: Option<f64>,
    ) {
        let mut sent = since_start.or(spec.sent_share).unwrap_or(0.0);
        if spec.source == Source::Admin && spec.expected > 0.0 && sent >= spec.expected {
            sent = self.count_admin_iterations(slot, sent, spec.expected);
        }
        self.expected_bytes = (spec.expected > 0.0).then_some(spec.expected);
        self.expected_from = match self.expected_bytes {
            Some(_) => spec.expected_from,
            // Core plans it as a bulk transfer (PolicyConfig::remaining_of).
            None => "unknown: planned as bulk",
        };
        // A learned process's count is of bytes acked, not handed over: its backlog is what
        // its sockets hold, where the datapath says. Beyond that a library may hold bytes it
        // has not written, but only while the sockets' buffers are full, which is a backlog
        // too large to be idle.
        self.app_backlog = match (spec.source, spec.sent_share, since_start) {
            (Source::Learned, _, _) => queued,
            (_, Some(enqueued), Some(acked)) => Some((enqueued - acked).max(0.0)),
            _ => None,
        };
        self.sent_bytes = sent;
        self.remaining_bytes = self.expected_bytes.map(|e| (e - sent).max(0.0));
    }

    /// An admin job has no iteration counter: each `per_iteration` chunk of `sent` is an
    /// iteration. Returns what is left of `sent` in the current one.
    fn count_admin_iterations(&mut self, slot: Slot, sent: f64, per_iteration: f64) -> f64 {
        let chunks = (sent / per_iteration).floor();
        let per_socket = (chunks * per_iteration / self.sockets.len() as f64) as u64;
        for key in &self.sockets {
            // Move the baselines forward proportionally; exactness is not needed here.
            if let Some(b) = self.counts.baseline.get_mut(key) {
                *b = b.saturating_add(per_socket);
            }
        }
        self.iteration = self.iteration.saturating_add(chunks as u64);
        self.iteration_start = slot;
        sent - chunks * per_iteration
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters for every third of `n` sockets; the lookup gives each socket's own, in order,
    /// whether the sockets fit on the stack or not.
    #[test]
    fn counters_are_looked_up_in_the_sockets_order_however_many() {
        for n in [0, 1, FEW - 1, FEW, FEW + 1, 3 * FEW] {
            let keys: Vec<SocketKey> = (0..n)
                .map(|i| {
                    let port = 1000 + i as u16;
                    SocketKey::new(
                        7,
                        ([10, 0, 0, 1], port).into(),
                        ([10, 0, 0, 2], 5000).into(),
                    )
                })
                .collect();
            let mut counters = Counters::default();
            for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
                counters.insert(
                    *k,
                    SocketCounters {
                        acked: i as u64,
                        sent: 2 * i as u64,
                        retransmits: 0,
                        queueing: false,
                        queued: None,
                    },
                );
            }
            let (mut few, mut many) = ([None; FEW], Vec::new());
            let seen = look_up(&keys, &counters, &mut few, &mut many);
            let want: Vec<Seen<'_>> = keys.iter().map(|k| counters.get(k)).collect();
            assert_eq!(seen, want.as_slice(), "{n} sockets");
        }
    }
}
