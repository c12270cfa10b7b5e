//! `isolated`: every job has the fabric to itself — the lower bound on JCT for this
//! placement and arrival order. Within a job, flows share max-min; the physics shares links
//! job by job ([`Sharing::PerJob`]).

use super::fair::Fair;
use super::{Policy, View};
use crate::state::Sharing;
use crate::state::job_runs;

#[derive(Default)]
pub struct Isolated {
    fair: Fair,
    out: Vec<f64>,
}

impl Policy for Isolated {
    fn rates(&mut self, view: &View<'_>, out: &mut [f64]) {
        // One max-min problem per job.
        for run in job_runs(view.active) {
            self.out.clear();
            self.out.resize(run.len(), 0.0);
            self.fair
                .solve_capped(&view.restricted(run.clone()), None, &mut self.out);
            out[run].copy_from_slice(&self.out);
        }
    }

    fn sharing(&self) -> Sharing {
        Sharing::PerJob
    }
}
