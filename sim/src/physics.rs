//! What the network and the training frameworks allow, whatever a policy decides.
//!
//! Links: where the rates flows send at add up to more than a link's capacity, the link serves
//! them in proportion to their rates until one has sent what it offered, then shares what it
//! leaves among the rest (never above their rates); a flow gets the smallest share along its
//! path (`mlcc_harness::fluid`). A fluid model of a drop-tail queue fed by paced senders: not
//! work-conserving beyond the senders' rates.
//!
//! Data: a flow cannot send bytes it does not have yet.
//! - A PS broadcast flow can have sent at most the fraction of the model its PS has
//!   aggregated from *every* worker: bcast progress ≤ min aggregation progress into that PS.
//!   Aggregation arriving during the slot can be forwarded in the same slot (pipelining at a
//!   granularity finer than τ), so the limit uses the aggregation flows' end-of-slot progress.
//!   A testbed job's PS replies only after every push has arrived in full
//!   ([`crate::workload::Pinned::whole_aggregate`], what the testbed's trainer does): its
//!   broadcast sends nothing before then, and in the slot the last push ends, only for the
//!   time after it ([`bcast_limit`]).
//! - A ring flow can have sent at most what its predecessor delivered to its sender plus its
//!   own chunk M/N (each worker starts with its own chunk). The predecessor's progress is
//!   taken at the start of the slot: the ring is a cycle, so there is no order in which to
//!   settle it within the slot, and one chunk is always ≥ what a 10 Gbit/s link moves in a
//!   slot for the paper's models (VGG19: 183 MB vs 75 MB), so the lag rarely binds.
//!
//! Pacing (for a policy whose rates Linux's internal pacing carries out, as mlccd's datapath
//! does): each packet's departure is stamped from the rate in force when the packet before it
//! left, and a new rate reaches the socket with the next ACK. A flow raised from a low rate
//! first waits out those stamps ([`stamp_wait`]); raised from the 125 kB/s rate floor, that is
//! more than a 30-ms slot (testbed `paper-small-no-cross`, mlccd's plan trace: such a flow
//! delivered a median 0 % of its new order in the slot it was raised).
//!
//! These rules are what make pipelining matter: a scheduler that sends a broadcast only after
//! aggregation completes (MCS) is obeying a constraint stricter than this one.

use mlcc_core::flow::FlowRole;
use mlcc_core::topology::Topology;
use mlcc_harness::fluid::{self, Links};

pub use crate::state::Sharing;
use crate::state::{Flow, FlowRef, Job};

/// Buffers reused across slots.
#[derive(Clone, Debug)]
pub struct Scratch {
    links: Links,
    wanted: Vec<f64>,
    /// The rate each flow sends its `wanted` bytes at (see `mlcc_harness::fluid`).
    pace: Vec<f64>,
    moved: Vec<f64>,
    /// Whether a link (not data, not the policy) held the flow below what it tried.
    scaled: Vec<bool>,
    /// Whether its data arrived only during the slot ([`Flow::last_data_late`]).
    late: Vec<bool>,
    /// Per link: its capacity (bytes/s).
    capacity: Vec<f64>,
    /// Per flow with a fill class: what it could send this slot at its path's rate.
    fill_wanted: Vec<f64>,
    /// Per link: what the classes served so far left (bytes/s).
    residual: Vec<f64>,
    /// One fill class's offers and what it moved.
    class_wanted: Vec<f64>,
    class_pace: Vec<f64>,
    class_moved: Vec<f64>,
    class_scaled: Vec<bool>,
}

impl Scratch {
    pub fn new(topo: &Topology) -> Self {
        Scratch {
            links: Links::new(topo),
            wanted: vec![],
            pace: vec![],
            moved: vec![],
            scaled: vec![],
            late: vec![],
            capacity: topo.links().iter().map(|l| l.capacity.0).collect(),
            fill_wanted: vec![],
            residual: vec![],
            class_wanted: vec![],
            class_pace: vec![],
            class_moved: vec![],
            class_scaled: vec![],
        }
    }
}

/// Bytes an active flow has available to send during this slot if the network allowed it:
/// what its sender [`held`] at the start of the slot, except that a broadcast may forward
/// aggregation arriving during the slot, assumed to run at its path's bottleneck (an upper
/// bound; the exact limit is applied in [`advance`]).
pub fn sendable(topo: &Topology, jobs: &[Job], active: &[FlowRef], tau: f64, out: &mut Vec<f64>) {
    out.clear();
    for r in active {
        let j = &jobs[r.job as usize];
        let f = &j.flows[r.flow as usize];
        let avail = match f.role {
            FlowRole::Agg | FlowRole::Ring => held(j, f),
            FlowRole::Bcast => {
                let bottleneck = |g: &Flow| topo.bottleneck(&g.path).0;
                let (allowed, _) = bcast_limit(
                    j,
                    f,
                    tau,
                    false,
                    |a| Some(bottleneck(&j.flows[a])),
                    bottleneck,
                );
                (f.remaining().min(allowed - f.sent).min(f.released - f.sent)).max(0.0)
            }
        };
        out.push(avail);
    }
}

/// Bytes the sender of `f` holds at the start of the slot and has not sent: what its
/// application has handed to the sockets (the daemon's backlog). A worker holds its whole
/// gradient; a ring worker its own chunk plus what its predecessor delivered; a PS what it has
/// aggregated from every worker — each no more than the backward pass has released so far
/// (the per-layer model; [`Flow::released`]).
pub fn held(j: &Job, f: &Flow) -> f64 {
    let have = match f.role {
        FlowRole::Agg => f.bytes,
        FlowRole::Ring => f
            .upstream
            .first()
            .map_or(f.bytes, |&q| fluid::ring_allows(j.flows[q].sent, f.slack)),
        FlowRole::Bcast => bcast_allows(
            j,
            upstream_fraction(j, f.upstream.iter().copied(), |_| 0.0),
            f.bytes,
        ),
    };
    (have.min(f.bytes).min(f.released) - f.sent).max(0.0)
}

/// The smallest burst Linux's internal pacing releases (two 1448-byte segments: TSO's minimum
/// at low rates).
pub const PACING_BURST_BYTES: f64 = 2.0 * 1448.0;

/// Seconds a flow paced at `last` bytes/s in the last slot and raised to `rate` sends nothing:
/// its next burst leaves at the stamp the last one took (on average half a burst time away)
/// and takes a stamp at the old rate itself, since the new rate reaches the socket only with
/// the ACK of that burst: 1.5 bursts at the old rate, at most the slot. 0 where the rate does
/// not rise, or the flow was not paced last slot (`last` 0 or unbounded: a new iteration, or
/// released to kernel TCP).
pub fn stamp_wait(last: f64, rate: f64, tau: f64) -> f64 {
    if !(last > 0.0 && last.is_finite() && rate > last) {
        return 0.0;
    }
    (1.5 * PACING_BURST_BYTES / last).min(tau)
}

/// What a policy asks of the links this slot, per active flow: its rate in the default class,
/// the fill class its other bytes go in (if any), and whether its rates are carried out by
/// Linux's pacing (see [`advance`]).
pub struct Offers<'a> {
    pub rates: &'a [f64],
    pub fill: &'a [Option<u8>],
    pub paced: bool,
}

/// Moves one slot's bytes at the offered rates (bytes/s per active flow), applying link
/// sharing, the data dependencies and, where `paced` (the policy's rates are carried out by
/// Linux's pacing), its stamps ([`stamp_wait`]) and the pace of replies to whole aggregates.
/// The links serve the default class first; a flow with a fill class then offers what else it
/// could send this slot at up to its path's rate (unpaced, as TCP), and the links serve the
/// fill classes in order with what the classes before them left. Returns the bytes delivered.
pub fn advance(
    jobs: &mut [Job],
    active: &[FlowRef],
    offers: &Offers<'_>,
    tau: f64,
    sharing: Sharing,
    s: &mut Scratch,
) -> f64 {
    s.wanted.clear();
    s.pace.clear();
    s.late.clear();
    s.fill_wanted.clear();
    for (i, r) in active.iter().enumerate() {
        let j = &jobs[r.job as usize];
        let f = &j.flows[r.flow as usize];
        let rate = offers.rates[i];
        let (want, pace, late) = want(j, f, rate, offers, tau, offers.paced, &s.capacity);
        s.wanted.push(want);
        s.pace.push(pace);
        s.late.push(late);
        // What it could send at its path's rate, unpaced: the bound of its fill.
        let all = match offers.fill[i] {
            Some(_) => want_unpaced(j, f, offers, tau, &s.capacity),
            None => 0.0,
        };
        s.fill_wanted.push(all);
    }
    s.moved.clear();
    s.moved.resize(active.len(), 0.0);
    s.scaled.clear();
    s.scaled.resize(active.len(), false);
    for run in runs(active, sharing) {
        s.links.share(
            tau,
            run.clone(),
            |i| path_of(jobs, active, i),
            &s.wanted,
            &s.pace,
            &mut s.moved,
            &mut s.scaled,
        );
        if offers.fill.iter().any(Option::is_some) {
            share_fill(jobs, active, offers.fill, tau, run, s);
        }
    }
    hold_broadcasts(jobs, active, s);
    deliver(jobs, active, offers, tau, s)
}

/// The flows that compete for links: all of them, or job by job (`active` is ordered by job).
fn runs(active: &[FlowRef], sharing: Sharing) -> Vec<std::ops::Range<usize>> {
    match sharing {
        Sharing::Fabric => std::iter::once(0..active.len()).collect(),
        Sharing::PerJob => crate::state::job_runs(active).collect(),
    }
}

fn path_of<'a>(jobs: &'a [Job], active: &[FlowRef], i: usize) -> &'a [mlcc_core::topology::LinkId] {
    let r = active[i];
    &jobs[r.job as usize].flows[r.flow as usize].path[..]
}

/// Flow `f` of `j`: the bytes it tries to send this slot at `rate`, limited by what it has
/// (aggregation progress assumed as the aggregation flows themselves try, at their `offers`),
/// the pace it sends them at, and whether its data arrives only during the slot.
fn want(
    j: &Job,
    f: &Flow,
    rate: f64,
    offers: &Offers<'_>,
    tau: f64,
    paced: bool,
    capacity: &[f64],
) -> (f64, f64, bool) {
    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
    let line = |g: &Flow| line_rate(g, capacity);
    let holds = f.remaining().min(f.released - f.sent);
    let mut want = (rate * tau).min(holds);
    // Per-layer model: nothing leaves during the per-message latency of each bucket the flow
    // starts. Held to its rate, it loses that rate's bytes for the dead time; with less to
    // send than its rate allows, it sends it in the time left, up to line rate.
    let dead = crate::layers::dead_secs(j.layers.as_ref(), f, want);
    if dead > 0.0 {
        let live = (tau - dead).max(0.0);
        want = if rate * tau < holds {
            want.min(rate * live)
        } else {
            want.min(line(f) * live)
        };
    }
    if paced {
        let wait = stamp_wait(f.last_rate, rate, tau);
        if wait > 0.0 {
            want = want.min(rate * (tau - wait));
        }
    }
    let mut late = false;
    // A broadcast that holds at the slot's start all it sends in it (its aggregate already in)
    // sends like any flow that holds its bytes; one whose data arrives during the slot cannot
    // run ahead of it, whatever its pace.
    let mut held_from_start = true;
    match f.role {
        FlowRole::Agg => {}
        FlowRole::Ring => {
            if let Some(&q) = f.upstream.first() {
                want = want.min(fluid::ring_allows(j.flows[q].sent, f.slack) - f.sent);
            }
        }
        FlowRole::Bcast => {
            let agg_rate = |a: usize| {
                let k = j.flows[a].active_idx? as usize;
                let r = offers.rates[k];
                match offers.fill[k] {
                    // Its fill runs up to line rate: the pushes may all be in.
                    Some(_) if !paced => Some(line(&j.flows[a])),
                    _ => Some(r).filter(|r| r.is_finite()),
                }
            };
            let (allowed, start) = bcast_limit(j, f, tau, paced, agg_rate, line);
            want = want.min(allowed - f.sent);
            held_from_start = bcast_held(j, f) >= want;
            if start > 0.0 {
                // Nothing before its data, then for the rest of the slot its paced rate, or,
                // where the rate is an average over the slot (which the policy has planned
                // the wait into), up to line rate.
                let top = if paced { rate } else { line(f) };
                want = want.min(top * (tau - start).max(0.0));
                late = true;
            }
        }
    }
    let want = want.max(0.0);
    let pace = if held_from_start { rate } else { want / tau };
    (want, pace, late)
}

/// The bytes broadcast `f` of `j` holds at the slot's start: what its aggregation has let it
/// send so far and it has not sent.
fn bcast_held(j: &Job, f: &Flow) -> f64 {
    let frac = upstream_fraction(j, f.upstream.iter().copied(), |_| 0.0);
    (bcast_allows(j, frac, f.bytes) - f.sent).max(0.0)
}

/// What flow `f` of `j` could send this slot unpaced at its path's rate (its fill's bound).
fn want_unpaced(j: &Job, f: &Flow, offers: &Offers<'_>, tau: f64, capacity: &[f64]) -> f64 {
    want(j, f, line_rate(f, capacity), offers, tau, false, capacity).0
}

fn line_rate(f: &Flow, capacity: &[f64]) -> f64 {
    f.path
        .iter()
        .map(|l| capacity[l.index()])
        .fold(f64::INFINITY, f64::min)
}

/// The fill classes of the flows `run`, in order, each on what the default class and the
/// classes before it left of every link (`s.moved` holds the default class's bytes and gets
/// each fill's added).
fn share_fill(
    jobs: &[Job],
    active: &[FlowRef],
    fill: &[Option<u8>],
    tau: f64,
    run: std::ops::Range<usize>,
    s: &mut Scratch,
) {
    s.residual.clear();
    s.residual.extend_from_slice(&s.capacity);
    let taken = |residual: &mut Vec<f64>, moved: &[f64], i: usize| {
        for l in path_of(jobs, active, i) {
            let c = &mut residual[l.index()];
            *c = (*c - moved[i] / tau).max(0.0);
        }
    };
    for i in run.clone() {
        taken(&mut s.residual, &s.moved, i);
    }
    let classes: std::collections::BTreeSet<u8> =
        fill[run.clone()].iter().flatten().copied().collect();
    for class in classes {
        s.class_wanted.clear();
        s.class_pace.clear();
        for (i, f) in fill.iter().enumerate() {
            let w = if run.contains(&i) && *f == Some(class) {
                (s.fill_wanted[i] - s.moved[i]).max(0.0)
            } else {
                0.0
            };
            s.class_wanted.push(w);
            s.class_pace.push(w / tau);
        }
        s.class_moved.clear();
        s.class_moved.resize(active.len(), 0.0);
        s.class_scaled.clear();
        s.class_scaled.resize(active.len(), false);
        s.links.share_within(
            &s.residual,
            tau,
            run.clone(),
            |i| path_of(jobs, active, i),
            &s.class_wanted,
            &s.class_pace,
            &mut s.class_moved,
            &mut s.class_scaled,
        );
        for i in run.clone().filter(|&i| fill[i] == Some(class)) {
            taken(&mut s.residual, &s.class_moved, i);
            s.moved[i] += s.class_moved[i];
        }
    }
}

/// Broadcast never overtakes what its PS has aggregated by the end of the slot.
fn hold_broadcasts(jobs: &[Job], active: &[FlowRef], s: &mut Scratch) {
    for (i, r) in active.iter().enumerate() {
        let j = &jobs[r.job as usize];
        let f = &j.flows[r.flow as usize];
        if f.role == FlowRole::Bcast {
            let frac = upstream_fraction(j, f.upstream.iter().copied(), |a| {
                j.flows[a].active_idx.map_or(0.0, |k| s.moved[k as usize])
            });
            s.moved[i] = s.moved[i].min((bcast_allows(j, frac, f.bytes) - f.sent).max(0.0));
        }
    }
}

/// Delivers what moved; returns the bytes delivered.
fn deliver(
    jobs: &mut [Job],
    active: &[FlowRef],
    offers: &Offers<'_>,
    tau: f64,
    s: &Scratch,
) -> f64 {
    let mut total = 0.0;
    for (i, r) in active.iter().enumerate() {
        let f = &mut jobs[r.job as usize].flows[r.flow as usize];
        let moved = s.moved[i];
        let before = f.sent;
        f.sent = (f.sent + moved).min(f.bytes);
        if f.bytes - f.sent < crate::state::BYTE_EPSILON {
            f.sent = f.bytes;
        }
        // What counts as delivered includes the sub-byte crumb a finished flow is rounded up by.
        total += f.sent - before;
        // A flow with a fill class sent unpaced: nothing stamps its next rise.
        f.last_rate = match offers.fill[i] {
            Some(_) => f64::INFINITY,
            None => offers.rates[i],
        };
        f.last_achieved = moved / tau;
        f.last_link_limited = s.scaled[i];
        f.last_data_late = s.late[i];
    }
    total
}

/// Bytes a broadcast of `j` may have sent in all once the slowest aggregation into its PS has
/// moved `aggregated` (0..=1) of its iteration: pipelined byte by byte
/// ([`fluid::bcast_allows`]), or nothing before all of it where the PS replies only to a whole
/// aggregate ([`crate::workload::Pinned::whole_aggregate`]).
fn bcast_allows(j: &Job, aggregated: f64, bytes: f64) -> f64 {
    if j.whole_aggregate() && aggregated < 1.0 {
        0.0
    } else {
        fluid::bcast_allows(aggregated, bytes)
    }
}

/// The data limit of broadcast `f` of `j` in a slot in which each of its aggregation flows
/// `a` moves at `rate(a)` bytes/s (`None`: it does not move): the bytes it may have sent in all
/// by the end of the slot, and the seconds into the slot before which it has nothing new to
/// send. That start is 0 but for a reply to a whole aggregate
/// ([`crate::workload::Pinned::whole_aggregate`]) whose last push ends within the slot: at its
/// rate where `paced`; else (a fluid policy, whose rate is an average over the slot, as TCP
/// sends a push's tail at once) at up to `line(a)`, its path's bottleneck. Shared by
/// [`advance`] and the policies that plan around the data (`fair`).
pub fn bcast_limit(
    j: &Job,
    f: &Flow,
    tau: f64,
    paced: bool,
    rate: impl Fn(usize) -> Option<f64>,
    line: impl Fn(&Flow) -> f64,
) -> (f64, f64) {
    let moves = |a: usize| rate(a).map_or(0.0, |r| r.max(0.0));
    let frac = upstream_fraction(j, f.upstream.iter().copied(), |a| {
        (moves(a) * tau).min(j.flows[a].remaining())
    });
    let allowed = bcast_allows(j, frac, f.bytes);
    let mut start: f64 = 0.0;
    if j.whole_aggregate() && allowed > f.sent {
        for &a in &f.upstream {
            let left = j.flows[a].remaining();
            if left <= 0.0 {
                continue;
            }
            let mut r = moves(a);
            if !paced && r * tau >= left {
                r = r.max(line(&j.flows[a]));
            }
            start = start.max(if r > 0.0 { (left / r).min(tau) } else { tau });
        }
    }
    (allowed, start)
}

/// The smallest end-of-slot progress fraction among aggregation flows `ups`, each adding
/// `extra(a)` bytes this slot. 1 when there are none (nothing to wait for).
fn upstream_fraction(
    j: &Job,
    ups: impl Iterator<Item = usize>,
    mut extra: impl FnMut(usize) -> f64,
) -> f64 {
    ups.map(|a| {
        let f = &j.flows[a];
        ((f.sent + extra(a)) / f.bytes.max(1.0)).min(1.0)
    })
    .fold(1.0, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_raised_from_the_rate_floor_waits_out_its_stamps() {
        let tau = 0.03;
        // From the 125 kB/s floor: 35 ms of stamps, more than the slot.
        assert_eq!(stamp_wait(125e3, 119e6, tau), tau);
        // Kept warm at 2 % of the new rate: under 2 ms.
        let warm = stamp_wait(0.02 * 119e6, 119e6, tau);
        assert!(warm > 1e-3 && warm < 2e-3, "{warm}");
        // Not raised, not paced before, or released: nothing to wait for.
        assert_eq!(stamp_wait(119e6, 60e6, tau), 0.0);
        assert_eq!(stamp_wait(125e3, 125e3, tau), 0.0);
        assert_eq!(stamp_wait(0.0, 119e6, tau), 0.0);
        assert_eq!(stamp_wait(f64::INFINITY, 119e6, tau), 0.0);
    }
}
