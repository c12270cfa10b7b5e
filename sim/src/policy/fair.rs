//! `fair`: per-link max-min fair sharing — what long-lived TCP flows converge to, and what
//! the paper's simulator did by default ("flows that traverse the same link share the
//! available bandwidth equally").
//!
//! A flow asks for no more than it has to send (an application-limited TCP flow leaves the
//! rest to others). A broadcast flow's data arrives during the slot, so its demand is
//! re-evaluated once from the aggregation rates of the first pass.

use mlcc_core::flow::FlowRole;
use mlcc_core::topology::LinkId;

use super::maxmin::MaxMin;
use super::{Policy, View};

#[derive(Default)]
pub struct Fair {
    solver: MaxMin,
    demand: Vec<f64>,
    capacity: Vec<f64>,
    rates: Vec<f64>,
    /// Position in the view being solved of each flow, by its index in the slot's full active
    /// list (`u32::MAX`: not in the view).
    pos: Vec<u32>,
}

impl Fair {
    /// Max-min rates for `view.active` with demand capped by what each flow can send, after
    /// `cap[i]` (bytes/s; ∞ for none).
    pub fn solve_capped(&mut self, view: &View<'_>, cap: Option<&[f64]>, out: &mut [f64]) {
        if self.capacity.len() != view.topo.links().len() {
            self.capacity = view.topo.links().iter().map(|l| l.capacity.0).collect();
        }
        let capacity = std::mem::take(&mut self.capacity);
        self.solve_within(view, cap, &capacity, out);
        self.capacity = capacity;
    }

    /// [`Self::solve_capped`] on links of the given capacities (bytes/s, by link index): what
    /// is left of the fabric after flows solved before.
    pub fn solve_within(
        &mut self,
        view: &View<'_>,
        cap: Option<&[f64]>,
        capacity: &[f64],
        out: &mut [f64],
    ) {
        self.solve_weighted(view, cap, None, capacity, out);
    }

    /// [`Self::solve_within`] with weighted sharing ([`MaxMin::solve_weighted`]): flow `i` of
    /// the view rises at `weight[i]` times the common level. The view's flows need not be one
    /// contiguous run of the slot's active list.
    pub fn solve_weighted(
        &mut self,
        view: &View<'_>,
        cap: Option<&[f64]>,
        weight: Option<&[f64]>,
        capacity: &[f64],
        out: &mut [f64],
    ) {
        let paths: Vec<&[LinkId]> = view
            .active
            .iter()
            .map(|&r| &view.flow(r).path[..])
            .collect();
        self.demand.clear();
        self.demand
            .extend(view.sendable.iter().enumerate().map(|(i, s)| {
                let d = s / view.tau;
                cap.map_or(d, |c| d.min(c[i]))
            }));
        self.solver
            .solve_weighted(&paths, &self.demand, weight, capacity, &mut self.rates);
        // Second pass: broadcast demand from the aggregation rates just found. Upstream flows
        // are found by their index in the full active list, mapped to their place in this view
        // (a sub-view holds one job for `isolated`, one priority level for `crux`).
        self.pos.clear();
        for (i, &r) in view.active.iter().enumerate() {
            if let Some(k) = view.flow(r).active_idx {
                let k = k as usize;
                if self.pos.len() <= k {
                    self.pos.resize(k + 1, u32::MAX);
                }
                self.pos[k] = i as u32;
            }
        }
        // Demands only fall, so a few rounds settle them: where a reply comes in late, its
        // demand falls, the aggregation rates of other replies may fall with it, and so what
        // those may send. Without late replies one round is all (pipelined broadcasts).
        for _ in 0..8 {
            let mut changed = false;
            let mut late = false;
            for (i, &r) in view.active.iter().enumerate() {
                let f = view.flow(r);
                if f.role != FlowRole::Bcast {
                    continue;
                }
                let j = view.job(r);
                // Its rates are averages over the slot, not paced.
                let (allowed, start) = crate::physics::bcast_limit(
                    j,
                    f,
                    view.tau,
                    false,
                    |a| {
                        j.flows[a]
                            .active_idx
                            .and_then(|k| self.pos.get(k as usize))
                            .and_then(|&p| self.rates.get(p as usize))
                            .copied()
                    },
                    |g| view.topo.bottleneck(&g.path).0,
                );
                let mut d = (allowed - f.sent).max(0.0) / view.tau;
                // A reply to a whole aggregate that comes in during the slot sends at its share
                // only for the rest of the slot, so over the slot it uses that part of it; the
                // rest of its links go to the others.
                if start > 0.0 {
                    d = d.min(self.rates[i] * (view.tau - start).max(0.0) / view.tau);
                    late = true;
                }
                if d < self.demand[i] * (1.0 - 1e-9) {
                    self.demand[i] = d;
                    changed = true;
                }
            }
            if changed {
                self.solver
                    .solve_weighted(&paths, &self.demand, weight, capacity, &mut self.rates);
            }
            if !changed || !late {
                break;
            }
        }
        out.copy_from_slice(&self.rates);
    }
}

impl Policy for Fair {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.solve_capped(view, None, out);
    }
}
