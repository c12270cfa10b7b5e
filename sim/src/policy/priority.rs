//! `priority`: strict priority between jobs by the bytes each has left until it finishes
//! (shortest remaining first), max-min within a job, recomputed every slot with exact
//! knowledge — the work-conserving ideal that a rank-ordered slot scheduler such as mlcc
//! approaches. Not a deployable system (it needs every job's future and instant control);
//! it tells how much of mlcc's gap to the ideal is ordering and how much is planning.

use super::fair::Fair;
use super::{Policy, View};
use crate::model::job_runs;

#[derive(Default)]
pub struct Priority {
    fair: Fair,
    residual: Vec<f64>,
    out: Vec<f64>,
    groups: Vec<(f64, std::ops::Range<usize>)>,
}

impl Policy for Priority {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        self.residual.clear();
        self.residual
            .extend(view.topo.links().iter().map(|l| l.capacity.0));
        // Jobs by remaining bytes, then by their order in `active`.
        self.groups.clear();
        for run in job_runs(view.active) {
            let j = view.job(view.active[run.start]);
            let per_iter: f64 = j.flows.iter().map(|f| f.bytes).sum();
            let left_now: f64 = j.flows.iter().map(|f| f.remaining()).sum();
            let later = j.spec.iterations.saturating_sub(j.iteration + 1) as f64;
            self.groups.push((left_now + later * per_iter, run));
        }
        self.groups
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.start.cmp(&b.1.start)));
        for (_, run) in &self.groups {
            self.out.clear();
            self.out.resize(run.len(), 0.0);
            self.fair.solve_within(
                &view.restricted(run.clone()),
                None,
                &self.residual,
                &mut self.out,
            );
            for (i, &rate) in self.out.iter().enumerate() {
                let f = view.flow(view.active[run.start + i]);
                for l in &f.path {
                    let c = &mut self.residual[l.index()];
                    *c = (*c - rate).max(0.0);
                }
            }
            out[run.clone()].copy_from_slice(&self.out);
        }
    }
}
