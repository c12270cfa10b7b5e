//! `tensorexpress` and `dlcp`: layer-priority schemes as fluid models, for the per-layer
//! communication model (`--per-layer`, [`crate::layers`]).
//!
//! **TensorExpress** (Kang et al., peer paper 004): a ticketer on each worker writes the layer
//! ID into every tensor packet; P4 switches keep priority queues and serve the front layers
//! first (layer 0 first, since the next forward pass needs it first), the priority window
//! sliding so the layers in flight map onto the queues. Here: a flow's level is the bucket its
//! next byte belongs to ([`crate::state::Flow::head_bucket`]; bucket 0 = the front layers);
//! hosts order what they hold front layers first (the host-side communication scheduling
//! TensorExpress assumes, ByteScheduler / TicTac); on switch-owned links levels are served in
//! strict priority, max-min within a level. Our choices where the paper is silent or does not
//! carry over: with four buckets every bucket has a queue of its own, so the window never
//! slides; host uplinks (a host's NIC, not a TensorExpress switch) are shared max-min by every
//! flow whatever its level — each flow is capped at its max-min share of the host-owned links
//! on its path, then the levels take the switch-owned links in order, then whatever capacity
//! is left goes to every flow max-min (work conservation, as a priority queue is).
//!
//! **DLCP** (peer paper 000): switches queue by layer (front layers first: "we evenly map all
//! the layers to available priorities", 8 queues, so one per bucket here) and drop by layer
//! and magnitude; end hosts run a bounded-loss-tolerant transport that stops waiting once all
//! but a share p of a tensor has arrived. Here: tensorexpress's sharing plus that tolerance:
//! each iteration, a push (PS aggregation) or ring flow's receiver does not wait for
//! [`DLCP_TOLERANCE`] of its bytes, a PS reply's (pull) for half that (DLCP enforces "a lower
//! loss-tolerant bound for the pull stage"); the bytes not waited for are the front-layer
//! bucket's (DLCP drops front-layer packets first), at most all of it. In the fluid model no
//! packet is lost, so this is what the tolerance buys: the flow is done that many bytes
//! earlier. p = 1 % is the bound DLCP measured for convergence in the same number of epochs
//! (its Table 1 and Fig. 4: "up to 1 %"); its own evaluation used 10 %. Per-packet load
//! balancing and DLCP's rate control are not modelled (routes are ECMP, sharing is max-min).
//!
//! Without `--per-layer` a job is one blob: every flow is at one level, so both are plain
//! max-min (`fair`), and DLCP's tolerance applies to the blob.

use mlcc_core::topology::{LinkId, Owner};

use super::fair::Fair;
use super::maxmin::MaxMin;
use super::{Policy, View};
use crate::model_zoo::BUCKETS;
use crate::state::{FlowRef, Shape};

/// DLCP's loss bound p for push and ring flows (a PS reply's is half).
pub const DLCP_TOLERANCE: f64 = 0.01;

pub struct LayerPriority {
    shape: Shape,
    fair: Fair,
    solver: MaxMin,
    /// Per link: whether a host owns it (a host's uplink).
    host_owned: Vec<bool>,
    capacity: Vec<f64>,
    residual: Vec<f64>,
    level: Vec<usize>,
    cap: Vec<f64>,
    scratch: Vec<f64>,
    active: Vec<FlowRef>,
    sendable: Vec<f64>,
    sub_cap: Vec<f64>,
    members: Vec<usize>,
    out: Vec<f64>,
}

impl LayerPriority {
    fn new(shape: Shape) -> Self {
        LayerPriority {
            shape,
            fair: Fair::default(),
            solver: MaxMin::default(),
            host_owned: vec![],
            capacity: vec![],
            residual: vec![],
            level: vec![],
            cap: vec![],
            scratch: vec![],
            active: vec![],
            sendable: vec![],
            sub_cap: vec![],
            members: vec![],
            out: vec![],
        }
    }

    pub fn tensorexpress() -> Self {
        Self::new(Shape::NONE)
    }

    pub fn dlcp() -> Self {
        Self::new(Shape {
            tolerance: DLCP_TOLERANCE,
            pull_tolerance: DLCP_TOLERANCE / 2.0,
            ..Shape::NONE
        })
    }

    /// The priority level of active flow `r`: the bucket its next byte belongs to (0: the
    /// front layers, served first); `BUCKETS` when it holds nothing or has no buckets.
    pub fn level(view: &View<'_>, r: FlowRef) -> usize {
        let j = view.job(r);
        j.layers
            .as_ref()
            .and_then(|l| view.flow(r).head_bucket(l.released_from, true))
            .unwrap_or(BUCKETS)
    }
}

impl Policy for LayerPriority {
    fn front_first(&self) -> bool {
        true
    }

    fn shape(&mut self, _jobs: &[crate::state::Job], _job: usize, _tau: f64) -> Shape {
        self.shape
    }

    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        if view.active.iter().all(|&r| view.job(r).layers.is_none()) {
            self.fair.solve_capped(view, None, out);
            return;
        }
        let topo = view.topo;
        if self.capacity.len() != topo.links().len() {
            self.capacity = topo.links().iter().map(|l| l.capacity.0).collect();
            self.host_owned = topo
                .links()
                .iter()
                .map(|l| matches!(topo.owner(l.id), Owner::Host(_)))
                .collect();
        }
        let n = view.active.len();
        // 1. Host uplinks are shared max-min by every flow, whatever its layer.
        let host_paths: Vec<Vec<LinkId>> = view
            .active
            .iter()
            .map(|&r| {
                view.flow(r)
                    .path
                    .iter()
                    .copied()
                    .filter(|l| self.host_owned[l.index()])
                    .collect()
            })
            .collect();
        let paths: Vec<&[LinkId]> = host_paths.iter().map(|p| &p[..]).collect();
        let demand: Vec<f64> = view.sendable.iter().map(|s| s / view.tau).collect();
        self.solver
            .solve(&paths, &demand, &self.capacity, &mut self.scratch);
        self.cap.clear();
        self.cap.extend((0..n).map(|i| {
            if host_paths[i].is_empty() {
                f64::INFINITY
            } else {
                self.scratch[i]
            }
        }));
        // 2. Levels in strict priority on what the levels before them left.
        self.level.clear();
        self.level
            .extend(view.active.iter().map(|&r| Self::level(view, r)));
        self.residual.clone_from(&self.capacity);
        out.fill(0.0);
        for lv in 0..=BUCKETS {
            self.members.clear();
            self.members.extend((0..n).filter(|&i| self.level[i] == lv));
            if self.members.is_empty() {
                continue;
            }
            self.active.clear();
            self.sendable.clear();
            self.sub_cap.clear();
            for &i in &self.members {
                self.active.push(view.active[i]);
                self.sendable.push(view.sendable[i]);
                self.sub_cap.push(self.cap[i]);
            }
            let sub = View {
                active: &self.active,
                sendable: &self.sendable,
                ..*view
            };
            self.out.clear();
            self.out.resize(self.members.len(), 0.0);
            self.fair.solve_weighted(
                &sub,
                Some(&self.sub_cap),
                None,
                &self.residual,
                &mut self.out,
            );
            for (k, &i) in self.members.iter().enumerate() {
                let rate = self.out[k];
                out[i] = rate;
                for l in &view.flow(view.active[i]).path {
                    let c = &mut self.residual[l.index()];
                    *c = (*c - rate).max(0.0);
                }
            }
        }
        // 3. What is left, max-min to anyone who can still send.
        let full: Vec<&[LinkId]> = view
            .active
            .iter()
            .map(|&r| &view.flow(r).path[..])
            .collect();
        let more: Vec<f64> = (0..n).map(|i| (demand[i] - out[i]).max(0.0)).collect();
        self.solver
            .solve(&full, &more, &self.residual, &mut self.scratch);
        for (o, extra) in out.iter_mut().zip(&self.scratch) {
            *o += extra;
        }
    }
}
