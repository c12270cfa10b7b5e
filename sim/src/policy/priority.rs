//! `priority`: strict priority between jobs by the bytes each has left until it finishes
//! (shortest remaining first), max-min within a job, recomputed every slot with exact
//! knowledge — the work-conserving ideal that a rank-ordered slot scheduler such as mlcc
//! approaches. Not a deployable system (it needs every job's future and instant control);
//! it tells how much of mlcc's gap to the ideal is ordering and how much is planning.

use super::fair::Fair;
use super::{Policy, View};
use crate::state::job_runs;

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
        serve_in_order(
            &mut self.fair,
            view,
            self.groups.iter().map(|g| g.1.clone()),
            &mut self.residual,
            &mut self.out,
            out,
        );
    }
}

/// Strict priority between job runs of `view.active` in the order `runs` gives, max-min within
/// a run over what the runs before it left of `residual` (each link's capacity on entry, what
/// is left on return); `scratch` is reused between calls.
pub(super) fn serve_in_order(
    fair: &mut Fair,
    view: &View<'_>,
    runs: impl Iterator<Item = std::ops::Range<usize>>,
    residual: &mut [f64],
    scratch: &mut Vec<f64>,
    out: &mut [f64],
) {
    for run in runs {
        scratch.clear();
        scratch.resize(run.len(), 0.0);
        fair.solve_within(&view.restricted(run.clone()), None, residual, scratch);
        for (i, &rate) in scratch.iter().enumerate() {
            for l in &view.flow(view.active[run.start + i]).path {
                let c = &mut residual[l.index()];
                *c = (*c - rate).max(0.0);
            }
        }
        out[run].copy_from_slice(scratch);
    }
}
