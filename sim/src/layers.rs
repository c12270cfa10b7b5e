//! The per-layer communication model (`--per-layer`), after ASC-WFBP (Shi et al.; peer
//! paper `001_*`) and wait-free backpropagation: a layer's gradient can be sent as soon as the backward
//! pass has computed it, so communication overlaps the backward pass; and the next iteration's
//! forward pass through a layer needs that layer's update, so it can start on the front layers
//! while the back layers' updates are still in flight.
//!
//! What the simulator does with it:
//! - **Buckets.** A job's gradient is four buckets of consecutive layers (tensor fusion), front
//!   layers first, each with its share of the bytes and of the compute (the table in
//!   [`crate::model_zoo`]). Every flow of the job (mlcc-core's flow groups: PS pushes and
//!   replies, ring steps) carries each bucket in proportion to its bytes.
//! - **Backward overlap.** An iteration is a forward pass (a third of the compute, as usual
//!   for backward ≈ 2 × forward), then a backward pass during which the buckets are released
//!   back to front: bucket k when the backward pass has done the back buckets' compute and its
//!   own (rounded to slots). A flow's application holds only released bytes
//!   ([`crate::state::Flow::released`]); the engine's communication phase starts with the
//!   backward pass.
//! - **Forward overlap.** The next forward pass goes front to back; bucket k's share of it
//!   starts once bucket k has arrived (every flow of the job delivered it) and bucket k − 1's
//!   share is done. Senders send what they hold in release order (back layers first, as
//!   PyTorch DDP and Horovod do) unless the policy orders them front layers first
//!   ([`crate::policy::Policy::front_first`]: TensorExpress and DLCP, whose hosts tag and
//!   order by layer), so only the latter can start a forward pass before the last byte.
//! - **a + b·m.** ASC-WFBP's all-reduce costs a = 1.4 ms per message plus b = 1.7 ns per byte.
//!   The b·m part is the links' bandwidth here; the a part is dead time: in a slot in which a
//!   flow starts sending buckets it sends nothing for a per bucket it starts ([`dead_secs`],
//!   applied by [`crate::physics::advance`]). A flow held to its rate (by the policy or its
//!   share of a link) loses a × that rate of bytes per bucket — not a × the link: the latency
//!   costs a shared link only the flow's share; a flow with less to send than its rate allows
//!   sends it in the time left, at most at line rate. Four buckets cost four latencies where
//!   one blob (`--per-layer` off) cost none.
//!   ASC-WFBP's γ ≈ 1.5 (two simultaneous all-reduces each run at 1/γ of one alone) is not
//!   modelled: one flow alone already runs at the link's rate, and two share it (γ = 2).
//!
//! Off (the default), an iteration is the whole compute followed by one blob of bytes, as
//! before; a policy's [`Shape`] (compression, loss tolerance) then applies to the blob.

use mlcc_core::flow::FlowRole;

use crate::model_zoo::{BUCKETS, Model};
use crate::state::{BYTE_EPSILON, Flow, Job, Layers, Shape};

/// ASC-WFBP's per-message all-reduce latency a (s), measured with nccl-tests on 10 GbE.
pub const LATENCY_SECS: f64 = 1.4e-3;
/// ASC-WFBP's per-byte cost b (s/B): 588 MB/s, the links' business here (documentation only).
pub const PER_BYTE_SECS: f64 = 1.7e-9;
/// Share of an iteration's compute that is the forward pass (backward ≈ 2 × forward).
pub const FORWARD_SHARE: f64 = 1.0 / 3.0;

/// The per-layer state of a job of `model` whose iteration computes for `compute_slots`.
pub fn plan(model: &Model, compute_slots: u64, front_first: bool) -> Layers {
    let (bytes_share, compute_share) = model.bucket_shares();
    let fwd_slots = (compute_slots as f64 * FORWARD_SHARE).round() as u64;
    let bwd_slots = compute_slots - fwd_slots.min(compute_slots);
    let mut release = [0; BUCKETS];
    for (k, r) in release.iter_mut().enumerate() {
        // The backward pass computes buckets BUCKETS-1 down to k before bucket k is complete.
        let done: f64 = compute_share[k..].iter().sum();
        *r = if k == 0 {
            bwd_slots
        } else {
            ((bwd_slots as f64 * done).round() as u64).min(bwd_slots)
        };
    }
    Layers {
        bytes_share,
        compute_share,
        fwd_slots,
        bwd_slots,
        release,
        released_from: BUCKETS,
        front_first,
        arrived: [None; BUCKETS],
    }
}

/// Sets every flow's bytes for the iteration starting to communicate now: the job model's,
/// shaped by the policy's [`Shape`] (`j.shape`), and under the per-layer model split into
/// buckets. Nothing is delivered yet.
pub fn begin_iteration(j: &mut Job) {
    let shape = j.shape;
    for f in &mut j.flows {
        f.sent = 0.0;
        f.last_rate = 0.0;
        f.last_achieved = 0.0;
        f.last_link_limited = false;
        f.last_data_late = false;
        let tolerance = tolerance(shape, f.role);
        match &j.layers {
            None => {
                f.bytes = if shape == Shape::NONE {
                    f.base_bytes
                } else {
                    f.base_bytes * shape.scale * (1.0 - tolerance)
                };
                f.released = f.bytes;
            }
            Some(l) => {
                let total = f.base_bytes * shape.scale;
                f.buckets.clear();
                f.buckets.extend(l.bytes_share.iter().map(|s| total * s));
                // Loss tolerance: the front bucket's bytes are dropped first (DLCP), at most
                // the whole bucket.
                f.buckets[0] = (f.buckets[0] - tolerance * total).max(0.0);
                f.bucket_sent.clear();
                f.bucket_sent.resize(f.buckets.len(), 0.0);
                f.bytes = f.buckets.iter().sum();
                f.released = 0.0;
            }
        }
        f.slack = if f.bytes == f.base_bytes {
            f.base_slack
        } else {
            f.base_slack * f.bytes / f.base_bytes.max(1.0)
        };
    }
    if let Some(l) = &mut j.layers {
        l.released_from = BUCKETS;
        l.arrived = [None; BUCKETS];
    }
}

/// The share of `role`'s bytes its receiver does not wait for under `shape`.
pub fn tolerance(shape: Shape, role: FlowRole) -> f64 {
    let t = match role {
        FlowRole::Bcast => shape.pull_tolerance,
        FlowRole::Agg | FlowRole::Ring => shape.tolerance,
    };
    t.clamp(0.0, 1.0)
}

/// Seconds of a slot in which flow `f` (of a job with per-layer state `l`) sends nothing
/// because it starts sending buckets: a per bucket it would start with `bytes` more to send,
/// in its sender's order. 0 without the per-layer model.
pub fn dead_secs(l: Option<&Layers>, f: &Flow, bytes: f64) -> f64 {
    let Some(l) = l else { return 0.0 };
    if f.buckets.is_empty() {
        return 0.0;
    }
    let (mut reach, mut starts) = (bytes, 0u32);
    let mut step = |k: usize| {
        let left = f.buckets[k] - f.bucket_sent[k];
        if reach <= 0.0 || left <= BYTE_EPSILON {
            return;
        }
        if f.bucket_sent[k] <= BYTE_EPSILON {
            starts += 1;
        }
        reach -= left;
    };
    if l.front_first {
        (l.released_from..BUCKETS).for_each(&mut step);
    } else {
        (l.released_from..BUCKETS).rev().for_each(&mut step);
    }
    f64::from(starts) * LATENCY_SECS
}

/// Releases the buckets whose backward computation has finished by slot `now` (the backward
/// pass started at `since`).
pub fn release(j: &mut Job, now: u64, since: u64) {
    let Some(l) = &mut j.layers else { return };
    let offset = now.saturating_sub(since);
    let from = (0..BUCKETS)
        .find(|&k| l.release[k] <= offset)
        .unwrap_or(BUCKETS);
    if from == l.released_from {
        return;
    }
    l.released_from = from;
    for f in &mut j.flows {
        f.released = f.buckets[from..].iter().sum::<f64>().min(f.bytes);
        if from == 0 {
            f.released = f.bytes;
        }
    }
}

/// Books what each flow delivered this slot against its buckets, in its sender's order, and
/// records the buckets every flow has now delivered as arrived at `now`.
pub fn account(j: &mut Job, now: u64) {
    let Some(l) = &mut j.layers else { return };
    let order: Vec<usize> = if l.front_first {
        (l.released_from..BUCKETS).collect()
    } else {
        (l.released_from..BUCKETS).rev().collect()
    };
    for f in &mut j.flows {
        let booked: f64 = f.bucket_sent.iter().sum();
        let mut left = f.sent - booked;
        for &k in &order {
            if left <= 0.0 {
                break;
            }
            let take = (f.buckets[k] - f.bucket_sent[k]).max(0.0).min(left);
            f.bucket_sent[k] += take;
            left -= take;
        }
        if f.is_done() {
            f.bucket_sent.copy_from_slice(&f.buckets);
        }
    }
    for k in 0..BUCKETS {
        if l.arrived[k].is_none()
            && j.flows
                .iter()
                .all(|f| f.bucket_sent[k] + BYTE_EPSILON >= f.buckets[k])
        {
            l.arrived[k] = Some(now);
        }
    }
}

/// Per-layer model: the slot the next iteration's backward pass (and communication) starts
/// in, for an iteration whose last byte was delivered in slot `now`: the forward pass goes
/// front to back, each bucket's share starting once the bucket has arrived and the share
/// before it is done; `extra` slots (a policy's added compute) come on top.
pub fn next_backward(l: &Layers, now: u64, extra: u64) -> u64 {
    let mut t = 0.0_f64;
    for k in 0..BUCKETS {
        let ready = l.arrived[k].unwrap_or(now).min(now) + 1;
        t = t.max(ready as f64) + l.fwd_slots as f64 * l.compute_share[k];
    }
    (t - 1e-9).ceil().max((now + 1) as f64) as u64 + extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_zoo::by_name;

    #[test]
    fn buckets_are_released_back_to_front_over_the_backward_pass() {
        // VGG16 with 2 workers: 0.54 s of compute → 9 slots: 3 forward, 6 backward.
        let l = plan(by_name("vgg16").unwrap(), 9, false);
        assert_eq!((l.fwd_slots, l.bwd_slots), (3, 6));
        // The fully connected layers (89 % of the bytes, 0.8 % of the compute) at once, the
        // front convolutions when the backward pass ends.
        assert_eq!(l.release, [6, 2, 1, 0]);
        assert!(l.release.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn a_flow_loses_a_per_bucket_it_starts() {
        use crate::engine::Flow;
        let mut l = plan(by_name("resnet50").unwrap(), 6, false);
        let mut f = Flow {
            id: mlcc_core::FlowId::new("f").unwrap(),
            src: mlcc_core::topology::NodeId(0),
            dst: mlcc_core::topology::NodeId(1),
            role: FlowRole::Agg,
            bytes: 100.0,
            base_bytes: 100.0,
            released: 100.0,
            buckets: vec![10.0, 20.0, 30.0, 40.0],
            bucket_sent: vec![0.0; 4],
            path: vec![],
            upstream: vec![],
            slack: 0.0,
            base_slack: 0.0,
            sent: 0.0,
            last_rate: 0.0,
            last_achieved: 0.0,
            last_link_limited: false,
            last_data_late: false,
            active_idx: None,
        };
        l.released_from = 1;
        // Back to front: 40 bytes reach bucket 3 only, 41 start bucket 2 too.
        assert_eq!(dead_secs(Some(&l), &f, 40.0), LATENCY_SECS);
        assert_eq!(dead_secs(Some(&l), &f, 41.0), 2.0 * LATENCY_SECS);
        // Bucket 0 is not released; a bucket already started costs nothing more.
        assert_eq!(dead_secs(Some(&l), &f, 100.0), 3.0 * LATENCY_SECS);
        f.bucket_sent[3] = 5.0;
        assert_eq!(dead_secs(Some(&l), &f, 100.0), 2.0 * LATENCY_SECS);
        // Front first: bucket 1, then 2.
        l.front_first = true;
        assert_eq!(dead_secs(Some(&l), &f, 20.0), LATENCY_SECS);
        assert_eq!(dead_secs(None, &f, 100.0), 0.0);
    }

    #[test]
    fn the_forward_pass_starts_on_front_buckets_that_arrived_early() {
        let mut l = plan(by_name("resnet50").unwrap(), 6, true);
        assert_eq!(l.fwd_slots, 2);
        // Everything arrived in slot 10: the forward pass takes its 2 slots after it.
        l.arrived = [Some(10); BUCKETS];
        assert_eq!(next_backward(&l, 10, 0), 13);
        // Buckets 0 and 1 (80 % of the forward compute) arrived 3 slots earlier: only the
        // back buckets' 0.4 slot of forward is left after slot 10.
        l.arrived = [Some(7), Some(7), Some(10), Some(10)];
        assert_eq!(next_backward(&l, 10, 0), 12);
        assert_eq!(next_backward(&l, 10, 2), 14);
    }
}
