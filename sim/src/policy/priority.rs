//! `priority`: strict priority between jobs by the bytes each has left until it finishes
//! (shortest remaining first), max-min within a job, recomputed every slot with exact
//! knowledge — the work-conserving ideal that a rank-ordered slot scheduler such as mlcc
//! approaches. Not a deployable system (it needs every job's future and instant control);
//! it tells how much of mlcc's gap to the ideal is ordering and how much is planning.

use super::fair::Fair;
use super::{Policy, View};

#[derive(Default)]
pub struct Priority {
    fair: Fair,
    residual: Vec<f64>,
    out: Vec<f64>,
    groups: Vec<(f64, usize, usize)>,
}

impl Policy for Priority {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.residual.clear();
        self.residual
            .extend(view.topo.links().iter().map(|l| l.capacity.0));
        // Jobs (`active` is ordered by job) by remaining bytes, then by job index.
        self.groups.clear();
        let mut start = 0;
        while start < view.active.len() {
            let job = view.active[start].job;
            let end = start
                + view.active[start..]
                    .iter()
                    .take_while(|r| r.job == job)
                    .count();
            let j = &view.jobs[job as usize];
            let per_iter: f64 = j.flows.iter().map(|f| f.bytes).sum();
            let left_now: f64 = j.flows.iter().map(|f| f.remaining()).sum();
            let later = j.spec.iterations.saturating_sub(j.iteration + 1) as f64;
            self.groups.push((left_now + later * per_iter, start, end));
            start = end;
        }
        self.groups
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for &(_, start, end) in &self.groups {
            let sub = View {
                slot: view.slot,
                tau: view.tau,
                slots: view.slots,
                topo: view.topo,
                jobs: view.jobs,
                active: &view.active[start..end],
                sendable: &view.sendable[start..end],
            };
            self.out.clear();
            self.out.resize(end - start, 0.0);
            self.fair
                .solve_within(&sub, None, &self.residual, &mut self.out);
            for (i, &rate) in self.out.iter().enumerate() {
                let f = view.flow(view.active[start + i]);
                for l in &f.path {
                    let c = &mut self.residual[l.0 as usize];
                    *c = (*c - rate).max(0.0);
                }
            }
            out[start..end].copy_from_slice(&self.out);
        }
    }
}
